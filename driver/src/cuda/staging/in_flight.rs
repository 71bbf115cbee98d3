//! A staged transfer in flight: what a front holds between starting a
//! transfer and its end, with the one wait and the one drop rule every
//! front shares (a scope's handle, a pending transfer, a blocking call).

use std::sync::{Arc, OnceLock};
use std::vec::Vec;

use super::Direction;
use super::feed::Job;
use crate::cuda::capture::RelaxedCapture;
use crate::cuda::device::DeviceInUse;
use crate::cuda::error::Error;
use crate::cuda::event::Event;

/// How long a caller waiting for a transfer to the host polls for its
/// last copies once the copier nears the end: about three times the
/// copies of the job's last bytes at the link (14 MiB, 275 us on the H200
/// host). Past it the caller sleeps until the copier is done, so that a
/// small transfer whose copies wait for a long kernel does not hold a core.
const NEAR_END_POLLS: core::time::Duration = core::time::Duration::from_millis(1);

/// A planned transfer whose driver side is queued whole, in the copier's
/// hands for its host side.
///
/// Finished by the engine, or dropped before, it waits until the copier
/// is done with its host memory and its driver copies have run, then lets
/// go of the device memory by one rule ([`finish`](Self::finish)): kept
/// for good, counted in [`leaked`](super::leaked), only where the driver
/// may still run its copies.
#[derive(Debug)]
pub(super) struct InFlight {
    job: Arc<Job>,
    /// Recorded after the transfer's last chunk on each stream it used.
    events: Vec<Event>,
    /// The number of the next `wait_for` event when it started.
    order_upto: u64,
    /// The device allocation the queued copies use; `None` once finished.
    device: Option<DeviceInUse>,
    /// What [`wait`](Self::wait) returned, once it has: a transfer waited
    /// for on one thread and finished on another waits once.
    waited: OnceLock<Result<(), Error>>,
}

impl InFlight {
    pub(super) fn new(
        job: Arc<Job>,
        events: Vec<Event>,
        order_upto: u64,
        device: DeviceInUse,
    ) -> InFlight {
        InFlight {
            job,
            events,
            order_upto,
            device: Some(device),
            waited: OnceLock::new(),
        }
    }

    /// Whether the bytes have arrived, without waiting; the first error.
    pub(super) fn poll(&self) -> Result<bool, Error> {
        {
            let done = self.job.done_now();
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
        *self.waited.get_or_init(|| waited)
    }

    /// [`wait`](Self::wait)'s work.
    fn wait_once(&self) -> Result<(), Error> {
        let _relaxed = RelaxedCapture::new();
        match self.job.direction() {
            Direction::DeviceToHost => {
                // Asleep until the copier nears the end; then polling,
                // until the copies have run, or the copier is done (after
                // an error, perhaps before they ran), or a poll fails
                // (which the copier's wait meets too).
                self.job.wait_near_end();
                let polling = std::time::Instant::now();
                while !self.job.done_now().finished
                    && self.query_events() == Ok(false)
                    && polling.elapsed() < NEAR_END_POLLS
                {
                    std::thread::yield_now();
                }
                if let Some(error) = self.job.wait_done_soon().error {
                    return Err(error);
                }
                self.synchronize_events()
            }
            Direction::HostToDevice => {
                if let Some(error) = self.job.wait_done().error {
                    return Err(error);
                }
                self.synchronize_events()
            }
        }
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

    /// The number of the next `wait_for` event when it started.
    pub(super) fn order_upto(&self) -> u64 {
        self.order_upto
    }

    /// Waits for the transfer ([`wait`](Self::wait)) and lets go of its
    /// device memory by the one rule every front shares: after an error,
    /// the transfer's copies may still be queued, so unless the caller
    /// has seen the stager's streams drained since (`drained`), it waits
    /// for them too (the events after its last chunks, which come after
    /// every copy it queued on each stream); the memory is freed once they
    /// have run, and kept for good, counted in [`leaked`](super::leaked),
    /// only if that wait fails too (a context error: the driver may still
    /// run them). Returns the transfer's result and its events (for reuse
    /// once it succeeded).
    pub(super) fn finish(mut self, drained: bool) -> (Result<(), Error>, Vec<Event>) {
        let result = self.release(drained);
        (result, core::mem::take(&mut self.events))
    }

    /// [`finish`](Self::finish) without giving the events back: once; the
    /// drop does nothing after it.
    fn release(&mut self, drained: bool) -> Result<(), Error> {
        let Some(device) = self.device.take() else {
            return Ok(());
        };
        let result = self.wait();
        if result.is_err() && !drained && self.synchronize_events().is_err() {
            // Its driver copies may still run.
            device.keep();
        }
        result
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let _ = self.release(false);
    }
}
