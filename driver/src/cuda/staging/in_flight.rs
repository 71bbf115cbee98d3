//! A staged transfer in flight: what a front holds between starting a
//! transfer and its end, with the one wait and the one rule for its end
//! every front shares (a scope's handle, a pending transfer, a blocking
//! call). It carries what it needs to end (the stager's lanes and their
//! health), so it ends without its stager, on any thread, once.

use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};
use std::vec::Vec;

use super::Direction;
use super::feed::{Job, Lanes};
use super::pace;
use crate::cuda::capture::RelaxedCapture;
use crate::cuda::device::DeviceInUse;
use crate::cuda::error::Error;
use crate::cuda::event::Event;
use crate::cuda::registration::{Region, Transferring};

/// The memory a transfer's queued copies use, which its end lets go of by
/// one rule: the device allocation, and hostcopy's registered host buffers
/// that direct copies read or write (`written`: the host ranges direct
/// copies to the host write).
#[derive(Debug)]
pub(super) struct InUse {
    pub(super) device: DeviceInUse,
    pub(super) host: Vec<Arc<Region>>,
    pub(super) written: Vec<(usize, usize)>,
}

impl InUse {
    /// The device allocation alone.
    pub(super) fn device(device: DeviceInUse) -> InUse {
        InUse {
            device,
            host: Vec::new(),
            written: Vec::new(),
        }
    }

    /// A copy the driver may still run uses it: the device memory is kept
    /// for good, counted, and the host buffers are never unregistered nor
    /// unmapped. The pages a direct copy to the host may still write stay
    /// the driver's: fresh pages holding the same bytes take their place
    /// under the caller's addresses, so that the memory the caller gets
    /// back is never written by the driver (where that cannot be done,
    /// the process aborts rather than hand it back).
    pub(super) fn keep(self) {
        for region in &self.host {
            region.keep();
        }
        for &(start, len) in &self.written {
            let page = crate::prefault::page_size();
            debug_assert!(start % page == 0 && len % page == 0);
            // SAFETY: whole pages (the plan gives a download's direct
            // copies whole pages only) of a registered `HostBuffer` (kept
            // mapped above) that this transfer borrows until it has
            // ended: no one else reads or writes any byte of them now.
            if !unsafe { crate::host_buffer::replace_pages(start, len) } {
                std::eprintln!(
                    "hostcopy: a direct copy the driver may still run writes host memory whose pages could not be set aside; aborting"
                );
                std::process::abort();
            }
        }
        self.device.keep();
    }
}

/// How long a caller waiting for a transfer to the host polls for its
/// last copies once the copier nears the end: about three times the
/// copies of the job's last bytes at the link (14 MiB, 275 us on the H200
/// host). Past it the caller sleeps until the copier is done, so that a
/// small transfer whose copies wait for a long kernel does not hold a core.
const NEAR_END_POLLS: Duration = Duration::from_millis(1);

/// Whether a transfer's first event follows direct copies, a sleeping
/// wait's (from its own spare pool), and how a wait for them goes.
#[derive(Debug)]
pub(super) enum Direct {
    /// No direct copies, or a transfer that returns at once (plain events).
    No,
    /// Direct copies beside staged chunks: waited for in the driver.
    Sleeping,
    /// A blocking transfer of direct copies alone: waited for by when they
    /// are due.
    Alone(Due),
}

/// A blocking transfer of direct copies alone: how many bytes, which way,
/// and when they were about to be queued, from which its wait knows when
/// they are due ([`pace`]); and the timing event recorded just before
/// them, from which their completion event times them on the GPU (`None`:
/// copies too small to be timed, polled at once).
#[derive(Debug)]
pub(super) struct Due {
    pub(super) bytes: usize,
    pub(super) direction: Direction,
    pub(super) queued: Instant,
    pub(super) started: Option<Event>,
}

/// A planned transfer whose driver side is queued whole, in the copier's
/// hands for its host side.
///
/// Finished ([`finish`](Self::finish)), or dropped before, it waits until
/// the copier is done with its host memory and its driver copies have
/// run, then lets go of the device memory by one rule: kept for good,
/// counted in [`leaked`](super::leaked), only where the driver may still
/// run its copies.
#[derive(Debug)]
pub(super) struct InFlight {
    /// Its staged chunks, in the copier's hands; `None` where every byte
    /// is copied directly.
    job: Option<Arc<Job>>,
    /// The stager's streams, their health, and the events it reuses;
    /// `None` only in its drop.
    lanes: Option<Arc<Lanes>>,
    /// Recorded after the transfer's last chunk on each stream it used,
    /// the direct copies' first where it has any (`direct`).
    events: Vec<Event>,
    /// Whether `events[0]` follows direct copies and is a sleeping wait's
    /// (its own spare pool), and when they are due if they are alone, with
    /// the timing event recorded before them.
    direct: Direct,
    /// The number of the next `wait_for` event when it started.
    order_upto: u64,
    /// The memory the queued copies use; `None` once ended.
    in_use: Mutex<Option<InUse>>,
    /// What [`wait`](Self::wait) returned, once it has: a transfer waited
    /// for on one thread and finished on another waits once.
    waited: OnceLock<Result<(), Error>>,
    /// How it ended, once it has: every later finish returns it.
    ended: OnceLock<Result<(), Error>>,
    /// Counted as under way until it has been waited for.
    transferring: Transferring,
}

impl InFlight {
    pub(super) fn new(
        job: Option<Arc<Job>>,
        lanes: &Arc<Lanes>,
        events: Vec<Event>,
        direct: Direct,
        order_upto: u64,
        in_use: InUse,
        transferring: Transferring,
    ) -> InFlight {
        InFlight {
            job,
            lanes: Some(Arc::clone(lanes)),
            events,
            direct,
            order_upto,
            in_use: Mutex::new(Some(in_use)),
            waited: OnceLock::new(),
            ended: OnceLock::new(),
            transferring,
        }
    }

    /// Whether the bytes have arrived, without waiting; the first error.
    pub(super) fn poll(&self) -> Result<bool, Error> {
        if let Some(job) = &self.job {
            let done = job.done_now();
            if !done.finished {
                return Ok(false);
            }
            if let Some(error) = done.error {
                return Err(error);
            }
        }
        let _relaxed = RelaxedCapture::new();
        for event in &self.events {
            if !event.query()? {
                return Ok(false);
            }
        }
        self.transferring.end();
        Ok(true)
    }

    /// Waits until the copier is done with the transfer's host memory
    /// (which it always finishes, after an error too) and its driver
    /// copies have run; the first error. After one, the copies queued
    /// after it may still run: only a drain of the streams tells.
    ///
    /// To the device the copier finishes first (its last fill comes before
    /// the last copy): it is waited for asleep, then the copies in the
    /// driver. To the host the copies finish first: once the copier nears
    /// the end ([`Job::wait_near_end`]), they are polled for, then the
    /// copier's last host side ([`Job::wait_done_soon`]), so that no
    /// thread's wake-up is added to the transfer; for [`NEAR_END_POLLS`]
    /// at most, then asleep again (the copies of a small transfer may wait
    /// for a long kernel queued before it).
    pub(super) fn wait(&self) -> Result<(), Error> {
        if let Some(waited) = self.waited.get() {
            return *waited;
        }
        let waited = self.wait_once();
        self.transferring.end();
        *self.waited.get_or_init(|| waited)
    }

    /// [`wait`](Self::wait)'s work.
    fn wait_once(&self) -> Result<(), Error> {
        let _relaxed = RelaxedCapture::new();
        let Some(job) = &self.job else {
            // Direct copies alone.
            return match &self.direct {
                Direct::Alone(due) => self.wait_due(due),
                Direct::No | Direct::Sleeping => self.synchronize_events(),
            };
        };
        match job.direction() {
            Direction::DeviceToHost => {
                // Asleep until the copier nears the end; then polling,
                // until the copies have run, or the copier is done (after
                // an error, perhaps before they ran), or a poll fails
                // (which the copier's wait meets too).
                job.wait_near_end();
                let polling = std::time::Instant::now();
                while !job.done_now().finished
                    && self.query_events() == Ok(false)
                    && polling.elapsed() < NEAR_END_POLLS
                {
                    std::thread::yield_now();
                }
                if let Some(error) = job.wait_done_soon().error {
                    return Err(error);
                }
                self.synchronize_events()
            }
            Direction::HostToDevice => {
                if let Some(error) = job.wait_done().error {
                    return Err(error);
                }
                self.synchronize_events()
            }
        }
    }

    /// A blocking transfer's direct copies alone: asleep (a plain sleep)
    /// until shortly before they are due, then polling their completion
    /// event, then asleep in the driver on it, as [`pace`] says; how late
    /// the sleep woke and how long the copies ran on the GPU are noted for
    /// the next wait. Copies that have not begun when
    /// the wait wakes, [`pace::BEGUN_BY`] or more after their queuing
    /// (queued behind other work), are waited for in the driver at once.
    fn wait_due(&self, due: &Due) -> Result<(), Error> {
        let rates = &self.lanes().rates;
        let paced = rates.pace(due.direction, due.bytes);
        let until = due.queued + paced.wake;
        let now = Instant::now();
        if until > now {
            std::thread::sleep(until - now);
            rates.note_sleep(until, Instant::now());
        }
        // Timed copies not begun by now wait for other work queued before
        // them: waited for in the driver.
        let completed = &self.events[0];
        let behind = match &due.started {
            Some(started) => due.queued.elapsed() >= pace::BEGUN_BY && !started.query()?,
            None => false,
        };
        let polling = Instant::now();
        while !completed.query()? {
            if behind || polling.elapsed() >= paced.polls {
                self.synchronize_events()?;
                break;
            }
            std::thread::yield_now();
        }
        if let Some(started) = &due.started {
            // Both events have run: a time the driver cannot give is a
            // fault of the layer's, not of the copies.
            let ms = completed.elapsed_ms_since(started);
            debug_assert!(ms.is_ok(), "direct copies ran, untimed: {ms:?}");
            if let Ok(ms) = ms {
                rates.note_copies(due.direction, due.bytes, ms);
            }
        }
        Ok(())
    }

    /// Whether the events after the transfer's last chunks completed.
    fn query_events(&self) -> Result<bool, Error> {
        for event in &self.events {
            if !event.query()? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Waits in the driver for the events after the transfer's last chunks.
    fn synchronize_events(&self) -> Result<(), Error> {
        for event in &self.events {
            event.synchronize()?;
        }
        Ok(())
    }

    /// The events recorded after its last chunks, which a stream waits on
    /// to be ordered after it.
    pub(super) fn events(&self) -> &[Event] {
        &self.events
    }

    /// Waits for the transfer ([`wait`](Self::wait)), then ends it: after
    /// an error, drains the stager's streams (its copies queued after the
    /// error may still run until they drain; a stream that does not drain
    /// leaves the stager refusing transfers until one does). Idempotent:
    /// the first caller ends it, a caller meanwhile waits for that one,
    /// and every caller gets the one result.
    pub(super) fn finish(&self) -> Result<(), Error> {
        *self.ended.get_or_init(|| self.end(true))
    }

    /// The one rule for the transfer's device memory, every front's, on
    /// finishing and on a drop alike: after an error its copies may still
    /// be queued, so unless the stager's streams drained (`drain`: a
    /// drain is tried), it waits for them (the events after its last
    /// chunks, which come after every copy it queued on each stream); the
    /// memory is freed once they have run, and kept for good, counted in
    /// [`leaked`](super::leaked), only if that wait fails too (a context
    /// error: the driver may still run them).
    fn end(&self, drain: bool) -> Result<(), Error> {
        // The device memory is freed in the relaxed capture mode, as
        // every teardown of the layer's: it touches no capture.
        let _relaxed = RelaxedCapture::new();
        let result = self.wait();
        let in_use = self
            .in_use
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(in_use) = in_use
            && result.is_err()
        {
            let drained = drain && self.lanes().drain(None, false).is_ok();
            if !drained && self.synchronize_events().is_err() {
                // Its driver copies may still run.
                in_use.keep();
            }
        }
        if result.is_ok() {
            self.lanes().note_finished_below(self.order_upto);
        }
        result
    }

    fn lanes(&self) -> &Lanes {
        self.lanes.as_ref().expect("taken only by the drop")
    }
}

impl Drop for InFlight {
    /// Ends it unless it has ended ([`end`](Self::end), without a
    /// drain); once it ended without an error, its events go back to the
    /// stager for reuse. What it lets go of goes here, in the relaxed
    /// capture mode: its events, and the lanes where this transfer held
    /// the last reference (its stager dropped first).
    fn drop(&mut self) {
        let ended = *self.ended.get_or_init(|| self.end(false));
        let _relaxed = RelaxedCapture::new();
        let mut events = core::mem::take(&mut self.events);
        let direct = core::mem::replace(&mut self.direct, Direct::No);
        let lanes = self.lanes.take();
        match &lanes {
            Some(lanes) if ended.is_ok() => {
                if !matches!(direct, Direct::No) && !events.is_empty() {
                    lanes.return_direct_event(events.remove(0));
                }
                if let Direct::Alone(Due {
                    started: Some(started),
                    ..
                }) = direct
                {
                    lanes.return_timing_event(started);
                }
                lanes.return_lane_events(events);
            }
            _ => drop((events, direct)),
        }
        drop(lanes);
    }
}
