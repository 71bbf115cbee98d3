//! Queuing a transfer's chunks on the stager's streams: all at once for a
//! blocking call, or by the stager's feeder thread for a transfer that
//! returns at once (a scope's, a pending one), so that its caller never
//! waits for the driver.
//!
//! Queuing a whole transfer at once fills the driver's queue: the caller
//! of a 16 GiB transfer spent 78% of it blocked inside driver calls. The
//! feeder instead keeps at most [`WINDOW_PER_BUFFER`] chunks per staging
//! buffer queued ahead: before it queues chunk `s` it waits for chunk
//! `s - window` to finish, on an event that sleeps (the workers need the
//! cores). A non-blocking call only plans its transfer and hands it over.
//!
//! Each chunk is queued whole on its buffer's stream (driver copy and host
//! function) by one thread at a time: the feeder, or a blocking call once
//! the feeder has nothing left to queue. Chunks are numbered in the order
//! they are queued; chunk `s` uses buffer `s % buffers`, whose stream
//! orders it after the chunk that used the buffer before.
//!
//! The hand-off between the stager and the feeder, which calls no driver,
//! is [`handoff`]'s, model-checked with loom; its primitives come from
//! [`sync`].

mod handoff;
mod sync;

use std::vec::Vec;

use self::handoff::{FeederThread, Handoff, Outcome};
use self::sync::{Arc, Mutex, MutexGuard, lock};
use super::Direction;
use super::chunk::{ChunkArray, run_chunk};
use super::options::DeviceCopies;
use super::plan::{DevicePiece, PlannedChunk};
use crate::cuda::capture::RelaxedCapture;
use crate::cuda::context::Context;
use crate::cuda::error::{DriverError, Error};
use crate::cuda::event::Event;
use crate::cuda::ffi::CUdeviceptr;
use crate::cuda::stream::{Stream, StreamRef};

/// Chunks per staging buffer the feeder keeps queued ahead: one copying,
/// one waiting behind it, so no stream idles while the feeder wakes up.
pub(super) const WINDOW_PER_BUFFER: usize = 2;

/// `CUDA_ERROR_NOT_SUPPORTED`: what a forced batch copy returns where the
/// driver has none.
const CUDA_ERROR_NOT_SUPPORTED: u32 = 801;

/// What the stager and its feeder share: first the settings, fixed when
/// the stager is made and read without a lock; then the state that
/// changes, each part behind its own synchronisation (the feeder's own in
/// [`Handoff`]).
#[derive(Debug)]
pub(super) struct Lanes {
    context: Context,
    /// One per staging buffer; emptied only by [`Lanes::clear`], once the
    /// feeder is joined.
    pub(super) streams: Vec<Stream>,
    device_copies: DeviceCopies,
    /// Chunks the feeder keeps queued ahead: [`WINDOW_PER_BUFFER`] per
    /// staging buffer.
    window: usize,
    /// The driver refused batch copies once (`DeviceCopies::Auto`): loop.
    batch_unavailable: core::sync::atomic::AtomicBool,
    /// Completion events of finished transfers, reused.
    spare_events: Mutex<Vec<Event>>,
    /// The jobs handed to the feeder, and its stop.
    handoff: Arc<Handoff<Arc<Job>>>,
}

/// One transfer's chunks, planned, and how queuing them went.
#[derive(Debug)]
pub(super) struct Job {
    direction: Direction,
    chunks: ChunkArray,
    plan: Vec<PlannedChunk>,
    queued: Outcome<Queued>,
}

/// The outcome of queuing a job.
#[derive(Debug, Default)]
pub(super) struct Queued {
    /// Every chunk is queued, or queuing stopped at an error.
    pub(super) finished: bool,
    /// The error queuing stopped at: what was queued before it runs.
    pub(super) error: Option<Error>,
    /// Recorded on every stream the job used, after its last chunk there.
    pub(super) events: Vec<Event>,
}

impl Job {
    pub(super) fn new(direction: Direction, chunks: ChunkArray, plan: Vec<PlannedChunk>) -> Job {
        Job {
            direction,
            chunks,
            plan,
            queued: Outcome::new(Queued::default()),
        }
    }

    /// Waits until every chunk is queued (or queuing failed).
    pub(super) fn wait_queued(&self) -> MutexGuard<'_, Queued> {
        self.queued.wait(|queued| queued.finished)
    }

    /// The outcome so far, without waiting.
    pub(super) fn queued(&self) -> MutexGuard<'_, Queued> {
        self.queued.now()
    }

    fn finish_queuing(&self, error: Option<Error>, events: Vec<Event>) {
        self.queued.settle(Queued {
            finished: true,
            error,
            events,
        });
    }
}

impl Lanes {
    pub(super) fn new(
        context: &Context,
        streams: Vec<Stream>,
        device_copies: DeviceCopies,
    ) -> Lanes {
        Lanes {
            context: context.clone(),
            window: WINDOW_PER_BUFFER * streams.len(),
            streams,
            device_copies,
            batch_unavailable: core::sync::atomic::AtomicBool::new(false),
            spare_events: Mutex::new(Vec::new()),
            handoff: Arc::new(Handoff::new()),
        }
    }

    /// Destroys the streams and spare events now (in the caller's capture
    /// mode), not whenever the last reference goes.
    pub(super) fn clear(&mut self) {
        self.streams.clear();
        lock(&self.spare_events).clear();
    }

    /// Gives completion events back for reuse.
    pub(super) fn return_events(&self, events: Vec<Event>) {
        lock(&self.spare_events).extend(events);
    }

    /// Queues every chunk of `job` on the calling thread, after the
    /// feeder has queued everything handed to it before.
    pub(super) fn queue_now(&self, job: &Job) {
        self.handoff.when_idle(|| self.queue_job(job, None));
    }

    /// Whether no work of the stager's is queued or in the feeder's hands:
    /// the feeder holds no job and every stream has run what it was given.
    pub(super) fn idle(&self) -> Result<bool, Error> {
        if !self.handoff.is_idle() {
            return Ok(false);
        }
        for stream in &self.streams {
            if !stream.as_stream().query()? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Hands `job` to the feeder.
    pub(super) fn hand_over(&self, job: Arc<Job>) {
        self.handoff.hand_over(job);
    }

    /// Queues the chunks of `job` in order; with a window, waits before
    /// each for the chunk `window` places before it to finish. Records the
    /// outcome in the job.
    fn queue_job(&self, job: &Job, mut window: Option<&mut Window>) {
        let _relaxed = RelaxedCapture::new();
        // Unwinding from here would leave host functions queued on memory
        // the caller may free, and the job's waiters waiting for good.
        let _no_unwind = AbortOnUnwind::new();
        let mut error = None;
        let mut used = Vec::new();
        for index in 0..job.plan.len() {
            let planned = &job.plan[index];
            let stream = self.streams[planned.buffer].as_stream();
            let step = match window.as_deref_mut() {
                Some(window) => window
                    .before(planned.seq)
                    .and_then(|()| self.queue_chunk(job, index, stream))
                    .and_then(|()| window.after(&self.context, planned.seq, stream)),
                None => self.queue_chunk(job, index, stream),
            };
            if !used.contains(&planned.buffer) {
                used.push(planned.buffer);
            }
            if let Err(failed) = step {
                error = Some(failed);
                break;
            }
        }
        let mut events = Vec::with_capacity(used.len());
        for buffer in used {
            let event = lock(&self.spare_events).pop();
            let event = match event {
                Some(event) => Ok(event),
                None => Event::ordering(&self.context).map_err(Error::from),
            };
            match event.and_then(|event| {
                event
                    .record(self.streams[buffer].as_stream())
                    .map(|()| event)
            }) {
                Ok(event) => events.push(event),
                Err(failed) => {
                    error.get_or_insert(failed);
                    break;
                }
            }
        }
        job.finish_queuing(error, events);
    }

    /// Queues chunk `index` of `job` on `stream`: the driver's copy and
    /// the host function, in the direction's order.
    fn queue_chunk(&self, job: &Job, index: usize, stream: StreamRef<'_>) -> Result<(), Error> {
        let planned = &job.plan[index];
        if job.direction == Direction::DeviceToHost {
            self.device_copy(job.direction, &planned.device, stream)?;
        }
        let user_data = job.chunks.arm(index);
        // SAFETY: `run_chunk` with an armed chunk; the chunk array, the
        // workers, the staging buffer and the host memory stay alive until
        // the chunk is settled (`Stager::finish`), which waits for a
        // running host function and abandons a pending one. The stager's
        // streams are its own: no one can capture them into a graph.
        if let Err(error) = unsafe { stream.launch_host_fn(run_chunk, user_data) } {
            job.chunks.get(index).disarm();
            return Err(error.into());
        }
        if job.direction == Direction::HostToDevice {
            self.device_copy(job.direction, &planned.device, stream)?;
        }
        Ok(())
    }

    /// The driver's side of a chunk: one copy, or one batch call gathering
    /// (or scattering) its pieces, or a loop of copies where the driver
    /// has no batch copy.
    fn device_copy(
        &self,
        direction: Direction,
        pieces: &[DevicePiece],
        stream: StreamRef<'_>,
    ) -> Result<(), Error> {
        use core::sync::atomic::Ordering::Relaxed;
        let batch = match self.device_copies {
            DeviceCopies::Loop => false,
            DeviceCopies::Batch => true,
            DeviceCopies::Auto => !self.batch_unavailable.load(Relaxed),
        };
        if pieces.len() > 1 && batch {
            let staging = pieces.iter().map(|piece| piece.staging as CUdeviceptr);
            let device = pieces.iter().map(|piece| piece.device);
            let (mut dsts, mut srcs): (Vec<CUdeviceptr>, Vec<CUdeviceptr>) = match direction {
                Direction::DeviceToHost => (staging.collect(), device.collect()),
                Direction::HostToDevice => (device.collect(), staging.collect()),
            };
            let mut sizes: Vec<usize> = pieces.iter().map(|piece| piece.len).collect();
            // SAFETY: planned from checked blocks: each device range lies in
            // the transfer's device memory, kept alive by the transfer; each
            // staging range in a pinned staging buffer that only this
            // stream touches until the chunk is done; destinations are
            // disjoint (distinct staging ranges, or blocks checked disjoint).
            if unsafe { stream.copy_batch(&mut dsts, &mut srcs, &mut sizes) }? {
                return Ok(());
            }
            if self.device_copies == DeviceCopies::Batch {
                return Err(DriverError::from_code(CUDA_ERROR_NOT_SUPPORTED).into());
            }
            self.batch_unavailable.store(true, Relaxed);
        }
        for piece in pieces {
            let staging = core::ptr::with_exposed_provenance_mut::<u8>(piece.staging);
            // SAFETY: as for the batch above, piece by piece.
            unsafe {
                match direction {
                    Direction::DeviceToHost => {
                        stream.copy_device_to_host_raw(staging, piece.device, piece.len)
                    }
                    Direction::HostToDevice => {
                        stream.copy_host_to_device_raw(piece.device, staging, piece.len)
                    }
                }
            }?;
        }
        Ok(())
    }
}

/// Aborts the process if dropped by a panic that began after it was made:
/// what is queued must not be given up on by unwinding. (A transfer made
/// in a destructor that runs during another panic is not aborted.)
struct AbortOnUnwind {
    panicking_before: bool,
}

impl AbortOnUnwind {
    fn new() -> AbortOnUnwind {
        AbortOnUnwind {
            panicking_before: std::thread::panicking(),
        }
    }
}

impl Drop for AbortOnUnwind {
    fn drop(&mut self) {
        if std::thread::panicking() && !self.panicking_before {
            std::process::abort();
        }
    }
}

/// The feeder's view of the chunks queued ahead: an event per window
/// place, recorded after the chunk that took it.
struct Window {
    events: Vec<Option<Event>>,
}

impl Window {
    fn new(places: usize) -> Window {
        Window {
            events: (0..places.max(1)).map(|_| None).collect(),
        }
    }

    /// Waits until the chunk `places` before chunk `seq` has finished.
    fn before(&mut self, seq: u64) -> Result<(), Error> {
        let place = (seq % self.events.len() as u64) as usize;
        match &self.events[place] {
            Some(event) => Ok(event.synchronize()?),
            None => Ok(()),
        }
    }

    /// Marks chunk `seq`, just queued on `stream`, in its place.
    fn after(&mut self, context: &Context, seq: u64, stream: StreamRef<'_>) -> Result<(), Error> {
        let place = (seq % self.events.len() as u64) as usize;
        let event = match self.events[place].take() {
            Some(event) => event,
            None => Event::blocking(context)?,
        };
        event.record(stream)?;
        self.events[place] = Some(event);
        Ok(())
    }
}

/// The feeder thread of a stager: stopped and joined when dropped.
#[derive(Debug)]
pub(super) struct Feeder {
    thread: FeederThread<Arc<Job>>,
}

impl Feeder {
    pub(super) fn spawn(lanes: &Arc<Lanes>) -> std::io::Result<Feeder> {
        let shared = Arc::clone(lanes);
        let thread = FeederThread::spawn("hostcopy-feeder", &lanes.handoff, move |handoff| {
            // Window events made and destroyed in the relaxed mode too.
            let _relaxed = RelaxedCapture::new();
            let mut window = Window::new(shared.window);
            handoff.feed(|job| shared.queue_job(job, Some(&mut window)));
        })?;
        Ok(Feeder { thread })
    }
}

impl Drop for Feeder {
    fn drop(&mut self) {
        // The stager relies on this join (see `Stager::drop`): the feeder
        // stops after the job it is queuing, whose waiters then wake; jobs
        // not started stay unqueued (their chunks never run).
        self.thread.shutdown();
    }
}
