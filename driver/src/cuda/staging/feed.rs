//! A staged transfer's two sides, and who makes each.
//!
//! The calling thread queues the driver's side of every chunk at once, in
//! the call that starts the transfer: on the stream of the chunk's staging
//! buffer (one per buffer by default; on one stream for every buffer,
//! `StagingOptions::streams`, the driver runs the copies one after
//! another), a wait for the buffer ([`Flags`]), the driver's copy, and an
//! event. So a transfer is whole in the driver's queues when its call
//! returns (a stream can be ordered after it at once), and a non-blocking
//! call costs only its driver calls: a 16 GiB transfer of 1,024 chunks
//! queues in a few milliseconds. (The driver takes about 2,000 chunks
//! queued this way before a call waits for room; a host function per
//! chunk, as before, stopped the caller after about 220.)
//!
//! The stager's copier thread makes every host side, chunk after chunk in
//! the order they were queued: for a chunk to the host it waits for the
//! chunk's event, then copies the staging buffer into the destination with
//! the stager's workers; for a chunk to the device it waits until the
//! buffer's previous copy has read it, fills it from the source, and the
//! chunk's driver copy then runs. No host function runs on the context's
//! one host-function thread, so another library's host functions cannot
//! slow a transfer down (measured: they cost it 35 to 48% of its speed
//! when chunks were copied there), and the transfer delays none of theirs.
//!
//! # The flags
//!
//! Each staging buffer has a counter in pinned memory, [`Flags`]: how many
//! of the buffer's uses have had their host side made. Chunk `s` is use
//! `s / buffers` of buffer `s % buffers`. The copier advances the counter
//! once per use, in order, also for a use it skips (a chunk to the host
//! after an error, a chunk the caller never queued, a chunk whose buffer
//! the driver answers no poll about), so every wait the driver was given
//! ends. A chunk to the host is queued behind a wait until the counter has
//! counted every earlier use (skipped when it already has); a chunk to the
//! device behind a wait until it has counted the chunk's own use (its
//! buffer filled). `cuStreamWaitValue32` compares cyclically, so the
//! counters may wrap.
//!
//! Each wait depends only on work queued before it (the copier's host side
//! of an earlier use, which waits for that use's own copy on the same
//! stream), so no order of the driver's queues can deadlock on them; and no
//! stream but the stager's own ever waits on a flag, so the flags live as
//! long as the stager's streams.
//!
//! For a job to the host the copier also makes the destination's pages
//! present ahead of the copies, where they are not ([`ahead`]).
//!
//! The hand-off to the copier, which calls no driver, is [`handoff`]'s,
//! model-checked with loom; its primitives come from [`sync`].

mod ahead;
mod handoff;
mod sync;

use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::vec::Vec;

use self::ahead::{Ahead, FaultInCopy};
use self::handoff::{FeederThread, Handoff, Outcome};
use self::sync::{Arc, Mutex, MutexGuard, lock};
use super::Direction;
use super::options::{DeviceCopies, MAX_CHUNK, StagingOptions};
use super::pace::Rates;
use super::plan::{Capabilities, DeviceMove, DevicePiece, PlannedChunk, choose_moves};
use super::trace::{self, Step};
use crate::cuda::capture::RelaxedCapture;
use crate::cuda::context::Context;
use crate::cuda::device::DeviceBuffer;
use crate::cuda::error::{DriverError, Error};
use crate::cuda::event::Event;
use crate::cuda::ffi::CUdeviceptr;
use crate::cuda::gather::GatherKernel;
use crate::cuda::kernels::GatherEntry;
use crate::cuda::pinned::PinnedBuffer;
use crate::cuda::retire::{self, Kept};
use crate::cuda::stream::{Stream, StreamRef};
use crate::parallel::{CopyPool, Stores};

/// `CUDA_ERROR_NOT_SUPPORTED`: what a forced batch copy returns where the
/// driver has none, and a stream memory wait where the device has none.
const CUDA_ERROR_NOT_SUPPORTED: u32 = 801;

// A block's offset and length in a staging buffer fit the kernel's u32s.
const _: () = assert!(MAX_CHUNK <= u32::MAX as usize);

/// Spare chunk events kept for reuse; more are destroyed when returned.
const SPARE_EVENTS: usize = 256;

/// How long [`Job::wait_done_soon`] polls before it sleeps: about the
/// host side of a transfer's last chunk (150 to 300 us for 16 MiB on the
/// H200 host, about 40 us for a 2 MiB edge chunk).
const DONE_SOON: core::time::Duration = core::time::Duration::from_micros(300);

/// The bytes at a job's end (at least its last chunk) whose host sides a
/// caller waiting for the job polls for, awake, rather than sleeping
/// through them ([`Job::wait_near_end`]): with 2 MiB edge chunks the last
/// three (8, 4 and 2 MiB), whose copies and host sides take about 200 us
/// on the H200 host, more than a sleeping thread's wake-up there (30 to
/// 270 us); with equal 16 MiB chunks the last one (about 450 us).
const NEAR_END: usize = 14 << 20;

/// How a transfer's direct copies are waited for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum DirectWait {
    /// Polled, or waited for beside other events: a transfer that returns
    /// at once.
    Plain,
    /// A blocking-sync event, which a wait may sleep on: a blocking
    /// transfer with staged chunks too (waited for in the driver), or of
    /// direct copies too small to be timed (polled first, then waited for
    /// in the driver).
    Sleeping,
    /// Asleep until they are due, then polled ([`pace`](super::pace)): a
    /// blocking transfer of direct copies alone, timed on the GPU from a
    /// timing event recorded just before them to their completion event.
    Timed,
}

/// What the stager and its copier share: first the settings and objects
/// fixed when the stager is made, read without a lock; then the state that
/// changes, each part behind its own synchronisation (the copier's own in
/// [`Handoff`]).
#[derive(Debug)]
pub(super) struct Lanes {
    context: Context,
    /// The streams the chunks are queued on, buffer `k`'s on stream
    /// `k % streams.len()` ([`Lanes::stream_of`]); emptied only by
    /// [`Lanes::clear`], once the copier is joined.
    pub(super) streams: Vec<Stream>,
    /// One counter per staging buffer.
    flags: Flags,
    /// Each staging buffer's address.
    staging: Vec<usize>,
    /// Bytes of each staging buffer.
    chunk: usize,
    device_copies: DeviceCopies,
    /// `DeviceCopies::Auto` gathers chunks whose pieces average below it.
    kernel_below: usize,
    /// The gather kernel and its scratch, made by the first chunk that
    /// takes them (or why they could not be: `DeviceCopies::Auto` then
    /// copies instead). Dropped by [`Lanes::clear`], once the streams
    /// drained, or kept for good ([`Lanes::keep_flags`]).
    gather: std::sync::OnceLock<Result<Gather, DriverError>>,
    /// The driver refused batch copies once (`DeviceCopies::Auto`): loop.
    batch_unavailable: AtomicBool,
    /// Chunk events the copier has seen complete, reused.
    spare_events: Mutex<Vec<Event>>,
    /// Transfer completion events, reused.
    spare_lane_events: Mutex<Vec<Event>>,
    /// Completion events of direct copies, reused: a wait for them sleeps
    /// ([`Event::blocking_timing`]), since no copier's host side follows
    /// them, and they end the copies' time on the GPU.
    spare_direct_events: Mutex<Vec<Event>>,
    /// Timing events recorded before direct copies alone, reused.
    spare_timing_events: Mutex<Vec<Event>>,
    /// How fast blocking transfers' direct copies alone have run: when
    /// their waits wake to poll for them (`InFlight`).
    pub(super) rates: Rates,
    /// The jobs handed to the copier, and its stop.
    handoff: Arc<Handoff<Arc<Job>>>,
    /// The stager's health: the error with which its streams last failed
    /// to drain ([`Lanes::drain`]). Until they drain, queued work may
    /// still use the staging buffers, and the stager refuses transfers.
    undrained: Mutex<Option<DriverError>>,
    /// The `wait_for` events numbered below this are complete: the
    /// largest `order_upto` of a transfer that finished without an error
    /// (its streams ran past their waits for them), for the engine to let
    /// go of ([`Lanes::finished_below`]).
    finished_below: AtomicU64,
}

impl Drop for Lanes {
    /// With the last reference, the stager's or that of a transfer that
    /// outlived it ([`Lanes::tear_down`]).
    fn drop(&mut self) {
        self.tear_down();
    }
}

/// The staging buffers' counters: `buffers` `u32`s in a pinned buffer of
/// the stager's, which its streams wait on and the copier advances.
#[derive(Debug)]
struct Flags {
    /// Freed by [`Lanes::clear`] (or with the lanes), unless kept
    /// ([`Lanes::keep_flags`]); `None` after either.
    memory: Option<PinnedBuffer>,
    /// Its address as the device sees it.
    device: CUdeviceptr,
    count: usize,
}

impl Flags {
    fn new(context: &Context, count: usize) -> Result<Flags, DriverError> {
        let memory = PinnedBuffer::new(context, count * size_of::<u32>())?;
        let device = memory.device_ptr()?;
        Ok(Flags {
            memory: Some(memory),
            device,
            count,
        })
    }

    /// Buffer `buffer`'s counter.
    fn get(&self, buffer: usize) -> &AtomicU32 {
        assert!(buffer < self.count);
        let memory = self
            .memory
            .as_ref()
            .expect("flags used after the lanes' teardown");
        // SAFETY: in bounds of the zeroed pinned allocation, which is page
        // aligned (so each `u32` is aligned) and lives while `self.memory`
        // holds it, as long as the borrow of `self` (only `&mut self` takes
        // it out); every access to it, the device's included, is atomic
        // (the driver's waits only read it).
        unsafe { AtomicU32::from_ptr(memory.raw_ptr().cast::<u32>().add(buffer)) }
    }

    fn device_addr(&self, buffer: usize) -> CUdeviceptr {
        self.device + (buffer * size_of::<u32>()) as CUdeviceptr
    }
}

/// The gather kernel, and per staging buffer a device buffer as large,
/// where the kernel packs a chunk's blocks (or unpacks them), moved to or
/// from the staging buffer by one copy on the buffer's stream. The kernel
/// touches device memory only: host memory reached from the kernel moved
/// small blocks no faster than the copy engine's own copies
/// (docs/design-record.md, "A gather kernel through device scratch for
/// blocks below 32 KiB").
#[derive(Debug)]
struct Gather {
    kernel: GatherKernel,
    scratch: Vec<DeviceBuffer>,
}

impl Gather {
    fn new(context: &Context, buffers: usize, chunk: usize) -> Result<Gather, DriverError> {
        let kernel = GatherKernel::load(context)?;
        let scratch = (0..buffers)
            .map(|_| DeviceBuffer::new(context, chunk))
            .collect::<Result<_, _>>()?;
        Ok(Gather { kernel, scratch })
    }
}

/// One chunk's pieces as the gather kernel moves them (`Lanes::gathered`).
///
/// Its ranges, which every launch and copy it queues relies on: each
/// entry's device range lies in the transfer's device memory, kept alive
/// by the transfer; each entry's scratch range in the buffer's scratch
/// (`span`, at most the chunk), which like the staging buffer only the
/// buffer's stream touches (and, for the staging buffer, the copier, in
/// the order the flags and events give); the scratch, the kernel and the
/// staging buffer outlive the stream's work (freed by `Lanes::clear` and
/// the stager once the streams drained, or kept); destinations are
/// disjoint (blocks checked so when planned).
struct Gathered<'a> {
    kernel: &'a GatherKernel,
    scratch: CUdeviceptr,
    staging: *mut u8,
    span: usize,
    entries: Vec<GatherEntry>,
}

impl Gathered<'_> {
    /// The one copy between the scratch and the staging buffer: to the
    /// host after the kernel packed the scratch, to the device before it
    /// unpacks it.
    fn copy(&self, direction: Direction, stream: StreamRef<'_>) -> Result<(), DriverError> {
        let (scratch, staging, span) = (self.scratch, self.staging, self.span);
        match direction {
            // SAFETY: the struct's ranges: the scratch to the staging
            // buffer, once the stream waited for the buffer's flag.
            Direction::DeviceToHost => unsafe {
                stream.copy_device_to_host_raw(staging, scratch, span)
            },
            // SAFETY: the struct's ranges: the filled staging buffer to the
            // scratch.
            Direction::HostToDevice => unsafe {
                stream.copy_host_to_device_raw(scratch, staging, span)
            },
        }
    }
}

/// Whether some chunk of `plan` gathers.
fn plan_gathers(plan: &[PlannedChunk]) -> bool {
    plan.iter()
        .any(|chunk| chunk.device_move == DeviceMove::Gather)
}

/// Use `seq / buffers` of its buffer, as its counter counts (wrapping).
fn use_of(seq: u64, buffers: usize) -> u32 {
    (seq / buffers as u64) as u32
}

/// Keeps `event` in the spare pool `spare` for reuse, unless it holds
/// [`SPARE_EVENTS`] already.
fn push_spare(spare: &Mutex<Vec<Event>>, event: Event) {
    let mut spare = lock(spare);
    if spare.len() < SPARE_EVENTS {
        spare.push(event);
    }
}

/// Whether counter value `have` has reached `want`, as the driver's
/// cyclic comparison decides.
fn reached(have: u32, want: u32) -> bool {
    have.wrapping_sub(want) as i32 >= 0
}

/// One transfer's chunks, planned, and how its two sides went.
#[derive(Debug)]
pub(super) struct Job {
    direction: Direction,
    plan: Vec<PlannedChunk>,
    stores: Stores,
    /// The caller's side: chunks queued so far, each with its event.
    queued: Outcome<Queued>,
    /// The copier's side.
    done: Outcome<Done>,
    /// The first chunk of the job's last [`NEAR_END`] bytes, or its last
    /// chunk.
    near_end: usize,
}

/// The calling thread's progress queuing a job.
#[derive(Debug, Default)]
struct Queued {
    /// Chunks whose queuing has begun (their driver side may not be
    /// queued whole yet).
    begun: usize,
    /// Per chunk queued so far, in order: its event, or `None` for the
    /// chunk at which queuing failed (perhaps queued in part) once the
    /// copier has taken it.
    events: Vec<Option<Event>>,
    /// Every chunk that will be queued is (the rest never will).
    finished: bool,
}

/// How the copier's side of a job went.
#[derive(Debug, Default)]
pub(super) struct Done {
    /// Every host side is made or skipped: the copier touches neither the
    /// transfer's host memory nor its records again.
    pub(super) finished: bool,
    /// The copier has begun the job's last [`NEAR_END`] bytes.
    pub(super) near_end: bool,
    /// The first error it met; the host sides after it were skipped.
    pub(super) error: Option<Error>,
}

impl Job {
    /// A job whose host sides write with `stores`.
    pub(super) fn new(direction: Direction, plan: Vec<PlannedChunk>, stores: Stores) -> Job {
        let mut left = 0;
        let near_end = plan
            .iter()
            .rposition(|chunk| {
                left += chunk.len;
                left > NEAR_END
            })
            .map_or(0, |index| (index + 1).min(plan.len().saturating_sub(1)));
        Job {
            near_end,
            direction,
            plan,
            stores,
            queued: Outcome::new(Queued::default()),
            done: Outcome::new(Done::default()),
        }
    }

    /// Waits until the copier is done with the job.
    pub(super) fn wait_done(&self) -> MutexGuard<'_, Done> {
        self.done.wait(|done| done.finished)
    }

    /// The copier's side so far, without waiting.
    pub(super) fn done_now(&self) -> MutexGuard<'_, Done> {
        self.done.now()
    }

    /// Waits asleep until the copier has begun the job's last [`NEAR_END`]
    /// bytes (or is done with it).
    pub(super) fn wait_near_end(&self) {
        drop(self.done.wait(|done| done.finished || done.near_end));
    }

    /// Waits until the copier is done with the job, polling for up to
    /// [`DONE_SOON`] before sleeping: for a caller that knows the copier
    /// has at most one chunk's host side left, so that the wake-up of a
    /// sleeping thread (30 to 270 us measured on the H200 host's VM) is
    /// not added to the transfer.
    pub(super) fn wait_done_soon(&self) -> MutexGuard<'_, Done> {
        let start = std::time::Instant::now();
        while start.elapsed() < DONE_SOON {
            let done = self.done.now();
            if done.finished {
                return done;
            }
            drop(done);
            for _ in 0..64 {
                core::hint::spin_loop();
            }
        }
        self.wait_done()
    }

    /// Which way the job goes.
    pub(super) fn direction(&self) -> Direction {
        self.direction
    }

    /// Whether the caller begins queuing chunk `index` (false: it never
    /// will), once it knows.
    fn wait_begun(&self, index: usize) -> bool {
        self.queued
            .wait(|queued| queued.finished || queued.begun > index)
            .begun
            > index
    }

    /// How chunk `index` was queued, once the caller knows.
    fn wait_queued(&self, index: usize) -> Queueing {
        let mut queued = self
            .queued
            .wait(|queued| queued.finished || queued.events.len() > index);
        match queued.events.get_mut(index) {
            Some(slot) => slot.take().map_or(Queueing::Part, Queueing::Whole),
            None => Queueing::Never,
        }
    }
}

/// How the caller queued one chunk's driver side.
enum Queueing {
    /// Whole, with its event.
    Whole(Event),
    /// Queuing failed at it: any of its wait and copy may be queued, but no
    /// event. Its buffer is filled all the same for a copy to the device
    /// (which may run once the flag advances): with its own bytes, never
    /// with what the buffer last carried for another transfer.
    Part,
    /// Never: queuing failed before it.
    Never,
}

impl Lanes {
    /// Lanes for `streams`, staging buffer `k` (at address `staging[k]`,
    /// `options.chunk` bytes) on stream `k % streams.len()`.
    pub(super) fn new(
        context: &Context,
        streams: Vec<Stream>,
        staging: Vec<usize>,
        options: &StagingOptions,
    ) -> Result<Lanes, Error> {
        assert!((1..=staging.len()).contains(&streams.len()));
        let mut flags = Flags::new(context, staging.len())?;
        // Every staged transfer queues waits on the flags: a device or
        // driver that refuses them is refused here, before any transfer
        // could queue half of itself. The wait is met at once (0 >= 0).
        // SAFETY: the flag lies in the pinned memory just made, which
        // outlives the stream's work (freed only once the stream is
        // drained, with the lanes); the stream is the stager's own.
        let probe = unsafe {
            streams[0]
                .as_stream()
                .wait_value32_geq(flags.device_addr(0), 0)
        };
        match probe {
            // Run before the stager is returned: it holds no queued work.
            Ok(()) => {
                if let Err(error) = streams[0].as_stream().synchronize() {
                    // The wait may still be queued: its flag is kept for
                    // good, as a stager's are when its streams cannot be
                    // drained.
                    if let Some(memory) = flags.memory.take() {
                        retire::keep(memory, Kept::PinnedBuffer);
                    }
                    return Err(error.into());
                }
            }
            Err(error) if error.code() == CUDA_ERROR_NOT_SUPPORTED => {
                return Err(Error::StreamMemoryWaitsUnsupported {
                    device: context.ordinal(),
                });
            }
            Err(error) => return Err(error.into()),
        }
        Ok(Lanes {
            context: context.clone(),
            flags,
            streams,
            staging,
            chunk: options.chunk,
            device_copies: options.device_copies,
            kernel_below: options.kernel_below,
            gather: std::sync::OnceLock::new(),
            batch_unavailable: AtomicBool::new(false),
            spare_events: Mutex::new(Vec::new()),
            spare_lane_events: Mutex::new(Vec::new()),
            spare_direct_events: Mutex::new(Vec::new()),
            spare_timing_events: Mutex::new(Vec::new()),
            rates: Rates::default(),
            handoff: Arc::new(Handoff::new()),
            undrained: Mutex::new(None),
            finished_below: AtomicU64::new(0),
        })
    }

    /// Destroys the streams and spare events, frees the flags and the
    /// gather kernel's scratch and unloads it, now (in the caller's
    /// capture mode), not whenever the last reference goes. Only once the
    /// streams drained, or what they may still use was kept
    /// ([`Lanes::keep_flags`]).
    pub(super) fn clear(&mut self) {
        self.streams.clear();
        lock(&self.spare_events).clear();
        lock(&self.spare_lane_events).clear();
        lock(&self.spare_direct_events).clear();
        lock(&self.spare_timing_events).clear();
        self.flags.memory = None;
        drop(self.gather.take());
    }

    /// Lets go of the streams, the flags and the gather kernel in the
    /// relaxed capture mode (a teardown touches no capture): the flags
    /// and the kernel kept for good, counted, where the streams did not
    /// drain ([`undrained`](Self::undrained)), since they may still wait
    /// on them.
    fn tear_down(&mut self) {
        let _relaxed = RelaxedCapture::new();
        if self.undrained().is_some() {
            self.keep_flags();
        }
        self.clear();
    }

    /// Keeps the flags for good, counted: streams that could not be
    /// drained may still wait on them. Keeps the gather kernel's module
    /// and scratch too: they may still hold launches of it.
    pub(super) fn keep_flags(&mut self) {
        if let Some(memory) = self.flags.memory.take() {
            retire::keep(memory, Kept::PinnedBuffer);
        }
        if let Some(Ok(gather)) = self.gather.take() {
            retire::keep(gather, Kept::Uncounted);
        }
    }

    /// The staging buffers, and their flags.
    fn buffers(&self) -> usize {
        self.staging.len()
    }

    /// The stream buffer `buffer`'s chunks are queued on.
    fn stream_of(&self, buffer: usize) -> StreamRef<'_> {
        self.streams[buffer % self.streams.len()].as_stream()
    }

    /// Gives transfer completion events back for reuse.
    pub(super) fn return_lane_events(&self, events: Vec<Event>) {
        let mut spare = lock(&self.spare_lane_events);
        spare.extend(events);
        spare.truncate(self.streams.len() * 4);
    }

    /// Gives a direct copies' completion event back for reuse.
    pub(super) fn return_direct_event(&self, event: Event) {
        push_spare(&self.spare_direct_events, event);
    }

    /// Gives the timing event recorded before direct copies back for
    /// reuse.
    pub(super) fn return_timing_event(&self, event: Event) {
        push_spare(&self.spare_timing_events, event);
    }

    /// Waits for everything queued on the stager's streams, and on `also`
    /// (the driver's path's stream), in the relaxed capture mode: only the
    /// stager's streams, since synchronizing the context would be refused
    /// while another stream of it captures a graph, and would break that
    /// capture. A failure (a sticky error) is recorded as the stager's
    /// health ([`undrained`](Self::undrained)); a success clears it only
    /// where `every` stream of the stager was drained (`also` given where
    /// the stager has made it).
    pub(super) fn drain(&self, also: Option<&Stream>, every: bool) -> Result<(), DriverError> {
        let _relaxed = RelaxedCapture::new();
        let failed = self
            .streams
            .iter()
            .chain(also)
            .map(|stream| stream.as_stream().synchronize())
            .find_map(Result::err);
        let mut undrained = lock(&self.undrained);
        match failed {
            Some(error) => {
                *undrained = Some(error);
                Err(error)
            }
            None => {
                if every {
                    *undrained = None;
                }
                Ok(())
            }
        }
    }

    /// The error with which the stager's streams last failed to drain,
    /// while they have not drained since.
    pub(super) fn undrained(&self) -> Option<DriverError> {
        *lock(&self.undrained)
    }

    /// A transfer ordered after the `wait_for` events numbered below
    /// `upto` finished: they are complete.
    pub(super) fn note_finished_below(&self, upto: u64) {
        self.finished_below.fetch_max(upto, Ordering::Relaxed);
    }

    /// The `wait_for` events numbered below this are complete (see
    /// [`note_finished_below`](Self::note_finished_below)).
    pub(super) fn finished_below(&self) -> u64 {
        self.finished_below.load(Ordering::Relaxed)
    }

    /// Whether no work of the stager's is queued or in the copier's hands:
    /// the copier holds no job and every stream has run what it was given.
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

    /// Waits until the copier has finished every job handed to it.
    pub(super) fn wait_copier_idle(&self) {
        self.handoff.when_idle(|| ());
    }

    /// Hands `job` to the copier, then queues the driver's side of its
    /// chunks in order on the calling thread, publishing each to the
    /// copier as it is queued. Returns the events recorded after the job's
    /// last chunk on each stream it used.
    ///
    /// On an error the chunks after the one that failed are never queued
    /// (the copier skips them); what was queued runs. The failed chunk may
    /// be queued in part, without its event: the caller must then wait for
    /// the copier and drain the streams before any other transfer.
    pub(super) fn queue_job(&self, job: &Arc<Job>) -> Result<Vec<Event>, Error> {
        let _relaxed = RelaxedCapture::new();
        trace::mark(Step::QueueBegin, job.plan.len());
        trace::device_begin(&self.context, self.stream_of(0));
        self.handoff.hand_over(Arc::clone(job));
        // Unwinding from here would leave the copier waiting for chunks
        // that never come, and the driver for flags never advanced.
        let _no_unwind = AbortOnUnwind::new();
        let mut used = Vec::new();
        let mut result = Ok(());
        for (index, planned) in job.plan.iter().enumerate() {
            let stream = self.stream_of(planned.buffer);
            // A chunk to the device is filled from here on (see
            // `Copier::copy_job`).
            job.queued.update(|queued| queued.begun += 1);
            match self.queue_chunk(job.direction, planned, stream, index) {
                Ok(event) => {
                    job.queued.update(|queued| queued.events.push(Some(event)));
                    trace::mark(Step::Queued, index);
                }
                Err(error) => {
                    job.queued.update(|queued| queued.events.push(None));
                    result = Err(error);
                    break;
                }
            }
            let lane = planned.buffer % self.streams.len();
            if !used.contains(&lane) {
                used.push(lane);
            }
        }
        job.queued.update(|queued| queued.finished = true);
        result?;
        let mut events = Vec::with_capacity(used.len());
        for lane in used {
            let spare = lock(&self.spare_lane_events).pop();
            let event = match spare {
                Some(event) => event,
                None => Event::ordering(&self.context)?,
            };
            event.record_on_own(self.streams[lane].as_stream())?;
            events.push(event);
        }
        Ok(events)
    }

    /// Queues the driver's side of one chunk on `stream`: the wait for its
    /// buffer, the copy, and the event the copier waits on. Through the
    /// gather kernel, the kernel's launches stay off the buffer's turn:
    /// to the host, the blocks are packed into the scratch before the
    /// wait for the staging buffer; to the device, the event follows the
    /// copy to the scratch, so the copier fills the buffer again while
    /// the blocks are scattered.
    fn queue_chunk(
        &self,
        direction: Direction,
        planned: &PlannedChunk,
        stream: StreamRef<'_>,
        index: usize,
    ) -> Result<Event, Error> {
        let use_ = use_of(planned.seq, self.buffers());
        let want = match direction {
            // Every earlier use's host side has read the buffer out.
            Direction::DeviceToHost => use_,
            // This use's host side has filled it.
            Direction::HostToDevice => use_.wrapping_add(1),
        };
        let gathered = match planned.device_move {
            DeviceMove::Gather => Some(self.gathered(planned)),
            DeviceMove::Copy | DeviceMove::Batch | DeviceMove::Loop => None,
        };
        if let Some(gathered) = &gathered
            && direction == Direction::DeviceToHost
        {
            // SAFETY: `gathered`'s ranges (see `Gathered`): the blocks to
            // the scratch, which the buffer's previous copy out of it has
            // read before, in stream order.
            unsafe {
                gathered
                    .kernel
                    .launch(stream, gathered.scratch, &gathered.entries, false)
            }?;
        }
        let flag = self.flags.get(planned.buffer);
        if !reached(flag.load(Ordering::Acquire), want) {
            // SAFETY: the flag lies in the stager's pinned memory, which
            // outlives the stager's streams (kept for good if they cannot
            // be drained); the stream is the stager's own and never
            // captures.
            unsafe { stream.wait_value32_geq(self.flags.device_addr(planned.buffer), want) }?;
        }
        trace::device(Step::DeviceWaitMet, index, &self.context, stream);
        match &gathered {
            Some(gathered) => gathered.copy(direction, stream)?,
            None => self.device_copy(direction, planned, stream)?,
        }
        trace::device(Step::DeviceCopied, index, &self.context, stream);
        // Not a blocking-sync event: the driver holds only about 220 of
        // those (or of host functions) queued before a call waits for
        // room (a 16 GiB transfer's call waited 78% of it:
        // docs/design-record.md, "A copier thread completes each chunk, not
        // a host function"), and a
        // plain one waits as the context schedules (spinning while cores
        // are free: the workers idle while the copier waits).
        // Popped first, so that the lock is not held while one is made.
        let spare = lock(&self.spare_events).pop();
        let event = match spare {
            Some(event) => event,
            None => Event::ordering(&self.context)?,
        };
        if let Err(error) = event.record_on_own(stream) {
            self.return_event(event);
            return Err(error);
        }
        if let Some(gathered) = &gathered
            && direction == Direction::HostToDevice
        {
            // SAFETY: `gathered`'s ranges: the scratch, filled by the copy
            // just queued, to the blocks.
            let scattered = unsafe {
                gathered
                    .kernel
                    .launch(stream, gathered.scratch, &gathered.entries, true)
            };
            if let Err(error) = scattered {
                self.return_event(event);
                return Err(error);
            }
        }
        Ok(event)
    }

    fn return_event(&self, event: Event) {
        push_spare(&self.spare_events, event);
    }

    /// The driver's side of a chunk the gather kernel does not move: one
    /// copy; or for a chunk of several pieces, one batch call gathering
    /// (or scattering) them, or a loop of copies, as planned
    /// ([`move_pieces`](Self::move_pieces)).
    fn device_copy(
        &self,
        direction: Direction,
        planned: &PlannedChunk,
        stream: StreamRef<'_>,
    ) -> Result<(), Error> {
        let batch = planned.device_move == DeviceMove::Batch;
        self.move_pieces(direction, &planned.device, batch, stream)
    }

    /// Copies `pieces` between the device and page-locked host memory (a
    /// staging buffer, or registered memory of hostcopy's): one batch call
    /// where `batch`, else one copy each. A batch copy the driver does not
    /// have becomes the loop, unless the stager was told to batch
    /// ([`DeviceCopies::Batch`]).
    fn move_pieces(
        &self,
        direction: Direction,
        pieces: &[DevicePiece],
        batch: bool,
        stream: StreamRef<'_>,
    ) -> Result<(), Error> {
        use core::sync::atomic::Ordering::Relaxed;
        if batch {
            let staging = pieces.iter().map(|piece| piece.staging as CUdeviceptr);
            let device = pieces.iter().map(|piece| piece.device);
            let (mut dsts, mut srcs): (Vec<CUdeviceptr>, Vec<CUdeviceptr>) = match direction {
                Direction::DeviceToHost => (staging.collect(), device.collect()),
                Direction::HostToDevice => (device.collect(), staging.collect()),
            };
            let mut sizes: Vec<usize> = pieces.iter().map(|piece| piece.len).collect();
            // SAFETY: planned from checked blocks: each device range lies in
            // the transfer's device memory, kept alive by the transfer; each
            // host range in a pinned staging buffer that only this stream's
            // copies and the copier touch, in the order the flags and
            // events give, or in registered memory the transfer borrows
            // (kept for good if its copies cannot be waited for);
            // destinations are disjoint (distinct staging ranges, or blocks
            // checked disjoint).
            if unsafe { stream.copy_batch(&mut dsts, &mut srcs, &mut sizes) }? {
                return Ok(());
            }
            if self.device_copies == DeviceCopies::Batch {
                return Err(DriverError::from_code(CUDA_ERROR_NOT_SUPPORTED).into());
            }
            self.batch_unavailable.store(true, Relaxed);
        }
        self.copy_pieces(direction, pieces, stream)
    }

    /// Queues a transfer's direct copies (between registered host memory
    /// and the device) on lane `lane`'s stream, and records an event after
    /// them: where `wait` sleeps, one that a wait sleeps on (no host side
    /// follows: a thread spinning on it would cost a core for the whole
    /// copy) and that times, from its own spare pool; else a plain one, as
    /// the lanes'. Where `wait` is `Timed`, a timing event is recorded just
    /// before the copies too, and returned: from it to the completion
    /// event is their time on the GPU. Several pieces go in one batch call
    /// unless the stager copies in a loop or the driver has no batch copy.
    pub(super) fn queue_direct(
        &self,
        direction: Direction,
        pieces: &[DevicePiece],
        lane: usize,
        wait: DirectWait,
    ) -> Result<(Event, Option<Event>), Error> {
        let _relaxed = RelaxedCapture::new();
        // Unwinding from here would end the transfer's borrows with its
        // copies queued.
        let _no_unwind = AbortOnUnwind::new();
        let stream = self.streams[lane].as_stream();
        let started = match wait {
            DirectWait::Timed => {
                let spare = lock(&self.spare_timing_events).pop();
                let started = match spare {
                    Some(event) => event,
                    None => Event::timing(&self.context)?,
                };
                if let Err(error) = started.record_on_own(stream) {
                    self.return_timing_event(started);
                    return Err(error);
                }
                Some(started)
            }
            DirectWait::Plain | DirectWait::Sleeping => None,
        };
        let capabilities = self.capabilities();
        let batch = pieces.len() > 1
            && capabilities.batch
            && matches!(
                self.device_copies,
                DeviceCopies::Auto | DeviceCopies::Batch | DeviceCopies::Kernel
            );
        self.move_pieces(direction, pieces, batch, stream)?;
        let sleeping = wait != DirectWait::Plain;
        let pool = match sleeping {
            true => &self.spare_direct_events,
            false => &self.spare_lane_events,
        };
        let spare = lock(pool).pop();
        let event = match (spare, sleeping) {
            (Some(event), _) => event,
            (None, true) => Event::blocking_timing(&self.context)?,
            (None, false) => Event::ordering(&self.context)?,
        };
        if let Err(error) = event.record_on_own(stream) {
            push_spare(pool, event);
            return Err(error);
        }
        Ok((event, started))
    }

    /// What the planner knows of the driver's side: the stager's choice,
    /// whether the driver refused the batch copy, whether the gather
    /// kernel was loaded.
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            device_copies: self.device_copies,
            kernel_below: self.kernel_below,
            batch: !self.batch_unavailable.load(Ordering::Relaxed),
            kernel: self.gather.get().map(Result::is_ok),
        }
    }

    /// Chooses how each chunk of `plan` moves ([`choose_moves`]), loading
    /// the gather kernel and its scratch the first time a chunk would take
    /// them: under [`DeviceCopies::Auto`], the first such chunk decides
    /// for the stager's life; under [`DeviceCopies::Kernel`], a kernel that
    /// cannot be had fails the transfer, before anything is queued.
    pub(super) fn choose_moves(&self, plan: &mut [PlannedChunk]) -> Result<(), Error> {
        let mut capabilities = self.capabilities();
        let needs_kernel = choose_moves(plan, &capabilities);
        let gathers = || plan_gathers(plan);
        if needs_kernel || (capabilities.kernel == Some(false) && gathers()) {
            let made = self
                .gather
                .get_or_init(|| Gather::new(&self.context, self.buffers(), self.chunk));
            if let Err(error) = made
                && self.device_copies == DeviceCopies::Kernel
            {
                return Err((*error).into());
            }
            capabilities.kernel = Some(made.is_ok());
            choose_moves(plan, &capabilities);
        }
        Ok(())
    }

    /// What the gather kernel needs to move `planned`'s pieces (planned to
    /// [`DeviceMove::Gather`]): to the host, the kernel packs them into the
    /// buffer's scratch, then one copy moves the scratch to the staging
    /// buffer; to the device, the other way.
    fn gathered(&self, planned: &PlannedChunk) -> Gathered<'_> {
        let Some(Ok(gather)) = self.gather.get() else {
            unreachable!("`choose_moves` made the kernel and its scratch");
        };
        let host = self.staging[planned.buffer];
        let entries: Vec<GatherEntry> = planned
            .device
            .iter()
            .map(|piece| GatherEntry {
                device: piece.device,
                // Within the buffer, at most `MAX_CHUNK` long (asserted
                // above to fit).
                offset: (piece.staging - host) as u32,
                len: piece.len as u32,
            })
            .collect();
        let span = entries
            .iter()
            .map(|entry| entry.offset as usize + entry.len as usize)
            .max()
            .unwrap_or(0);
        // The plan packs a chunk's pieces within its buffer's `chunk` bytes:
        // checked, as the scratch and the staging buffer are that long.
        assert!(span <= self.chunk, "a chunk's pieces span {span} bytes");
        Gathered {
            kernel: &gather.kernel,
            scratch: gather.scratch[planned.buffer].raw(),
            staging: core::ptr::with_exposed_provenance_mut::<u8>(host),
            span,
            entries,
        }
    }

    /// A loop of copies, one per piece.
    fn copy_pieces(
        &self,
        direction: Direction,
        pieces: &[DevicePiece],
        stream: StreamRef<'_>,
    ) -> Result<(), Error> {
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

/// The copier's own state between chunks.
struct Copier {
    lanes: Arc<Lanes>,
    workers: Arc<CopyPool>,
    /// Per buffer: the event of its latest driver copy that the copier has
    /// not seen complete (a copy to the device, or one it skipped). The
    /// buffer is written again only after it.
    last: Vec<Option<Event>>,
    /// Chunks a job to the host may prefault ahead of the one being
    /// copied ([`ahead`]); `None`: no prefault (`StagingOptions::prefault`).
    prefault: Option<usize>,
    /// Workers that copy a job to the host (`StagingOptions::d2h_workers`);
    /// a job to the device takes them all.
    d2h_workers: usize,
}

impl Copier {
    /// Makes or skips the host side of every chunk of `job`, in order,
    /// advancing each buffer's flag once per chunk; then settles the job.
    fn copy_job(&mut self, job: &Job) {
        let _no_unwind = AbortOnUnwind::new();
        // Which workers take part decides nothing but the speed: the
        // copies hand out their parts to whoever asks.
        self.workers.set_active(match job.direction {
            Direction::DeviceToHost => self.d2h_workers,
            Direction::HostToDevice => self.workers.workers(),
        });
        let buffers = self.lanes.buffers();
        let mut error = None;
        let mut ahead = match (self.prefault, job.direction) {
            (Some(lookahead), Direction::DeviceToHost) => Some(Ahead::start(&job.plan, lookahead)),
            _ => None,
        };
        for (index, planned) in job.plan.iter().enumerate() {
            if index == job.near_end {
                job.done.update(|done| done.near_end = true);
            }
            match job.direction {
                Direction::DeviceToHost => match job.wait_queued(index) {
                    Queueing::Whole(event) => {
                        let fused = match ahead.as_mut() {
                            Some(ahead) if error.is_none() && ahead.cold() => {
                                ahead.before_copy(&self.workers, &job.plan, index, &event)
                            }
                            _ => None,
                        };
                        if error.is_none()
                            && let Err(failed) = self.host_side(job, planned, Some(&event), fused)
                        {
                            error = Some(failed);
                        }
                        if error.is_none() {
                            self.lanes.return_event(event);
                        } else {
                            // A skipped chunk's copy, still to be seen
                            // complete before the buffer is written again.
                            self.keep_last(planned.buffer, event);
                        }
                    }
                    Queueing::Part | Queueing::Never => {}
                },
                // Filled once the caller begins queuing it, not once it
                // has queued it whole: its driver side may not fit in the
                // driver's queue while its stream waits for this fill
                // (thousands of copies of tiny blocks, or the kernel's
                // launches, whose tables travel in the queue), and the
                // call queuing it would then wait for room forever. A
                // chunk queued in part is filled all the same: its copy
                // may run once the flag advances (the caller drains the
                // streams before any other use of the buffer). After an
                // error too: every chunk whose queuing began has its copy
                // queued, perhaps in part, and that copy runs once the flag
                // advances, so the buffer must carry the chunk's own bytes,
                // never what it last carried.
                Direction::HostToDevice => {
                    if job.wait_begun(index)
                        && let Err(failed) = self.host_side(job, planned, None, None)
                    {
                        error.get_or_insert(failed);
                    }
                }
            }
            let next = use_of(planned.seq, buffers).wrapping_add(1);
            self.lanes
                .flags
                .get(planned.buffer)
                .store(next, Ordering::Release);
            trace::mark(Step::HostDone, index);
            if job.direction == Direction::HostToDevice
                && let Queueing::Whole(event) = job.wait_queued(index)
            {
                // The buffer is written again only after this copy.
                self.keep_last(planned.buffer, event);
            }
        }
        job.done.settle(Done {
            finished: true,
            near_end: true,
            error,
        });
    }

    /// Keeps `event` as buffer `buffer`'s latest copy not seen complete.
    fn keep_last(&mut self, buffer: usize, event: Event) {
        if let Some(older) = self.last[buffer].replace(event) {
            self.lanes.return_event(older);
        }
    }

    /// One chunk's host side: to the host once its driver side is queued,
    /// after its copy (`event`, always given); to the device once its
    /// queuing has begun, after the buffer's previous copy. `fused`: the
    /// lists that replace the chunk's host copies where its pages are
    /// faulted in by the copy itself ([`FaultInCopy`]).
    fn host_side(
        &mut self,
        job: &Job,
        planned: &PlannedChunk,
        event: Option<&Event>,
        fused: Option<FaultInCopy<'_>>,
    ) -> Result<(), Error> {
        debug_assert!(event.is_some() || job.direction == Direction::HostToDevice);
        let wait = match job.direction {
            Direction::DeviceToHost => event,
            Direction::HostToDevice => self.last[planned.buffer].as_ref(),
        };
        let mut met = None;
        if let Some(wait) = wait
            && let Err(failed) = wait.synchronize()
        {
            // A failed wait need not be a context error, after which the
            // driver runs none of the context's work. To the host, the
            // chunk is skipped: the destination keeps its bytes. To the
            // device, the copy waited for may run on, and this chunk's copy,
            // queued behind its flag, runs once the flag advances: so the
            // buffer is filled with the chunk's own bytes once the copy
            // that last read it is seen complete, by polling; the chunk is
            // skipped only where the driver answers no poll either.
            if job.direction == Direction::DeviceToHost || !seen_complete(wait) {
                return Err(failed.into());
            }
            met = Some(failed.into());
        }
        trace::mark(Step::Ready, (planned.seq - job.plan[0].seq) as usize);
        let stores = job.stores;
        if let Some(seen) = self.last[planned.buffer].take() {
            // Complete: it came before the copy just waited for, on the
            // buffer's stream, or was that copy.
            self.lanes.return_event(seen);
        }
        // The three copies below: the ranges were checked when planned (a
        // fault-in copy's two lists are this chunk's own copies, cut, each
        // byte in one of them: `Ahead::before_copy` was given this chunk):
        // the host memory lies in what the transfer's owner keeps valid
        // until the job is done (its contract), the staging range in a
        // staging buffer no driver copy touches now (the one that used it
        // last has completed, and the next waits for this chunk's flag),
        // and no destination overlaps another range, as `copy_list` asks.
        match fused {
            Some(fused) => {
                debug_assert_eq!(
                    fused
                        .cached
                        .iter()
                        .chain(fused.rest)
                        .map(|c| c.nbytes)
                        .sum::<usize>(),
                    planned.host.iter().map(|c| c.nbytes).sum::<usize>(),
                );
                // SAFETY: as above.
                unsafe { self.workers.copy_list(fused.cached, Stores::Cached) };
                crate::prefault::count_faulted_by_copy(fused.cached.iter().map(|c| c.nbytes).sum());
                // SAFETY: as above.
                unsafe { self.workers.copy_list(fused.rest, stores) };
            }
            // SAFETY: as above.
            None => unsafe { self.workers.copy_list(&planned.host, stores) },
        }
        met.map_or(Ok(()), Err)
    }
}

/// Polls `event` until it reports complete (`true`), or until a poll
/// fails (`false`): after a failed wait, whether the work before it has
/// run after all.
fn seen_complete(event: &Event) -> bool {
    loop {
        match event.query() {
            Ok(true) => return true,
            Ok(false) => std::thread::sleep(core::time::Duration::from_micros(20)),
            Err(_) => return false,
        }
    }
}

/// The copier thread of a stager: stopped and joined when dropped, once
/// it has finished every job it was handed.
#[derive(Debug)]
pub(super) struct CopierThread {
    thread: FeederThread<Arc<Job>>,
    lanes: Arc<Lanes>,
}

impl CopierThread {
    /// `prefault`: prefault destinations of jobs to the host, that many
    /// chunks ahead at most; `None`: never. `d2h_workers`: the workers
    /// that copy jobs to the host.
    pub(super) fn spawn(
        lanes: &Arc<Lanes>,
        workers: &Arc<CopyPool>,
        prefault: Option<usize>,
        d2h_workers: usize,
    ) -> std::io::Result<CopierThread> {
        let mut copier = Copier {
            lanes: Arc::clone(lanes),
            workers: Arc::clone(workers),
            last: (0..lanes.buffers()).map(|_| None).collect(),
            prefault,
            d2h_workers,
        };
        let thread = FeederThread::spawn("hostcopy-copier", &lanes.handoff, move |handoff| {
            // Its events made, waited on and destroyed in the relaxed mode.
            let _relaxed = RelaxedCapture::new();
            handoff.feed(|job| copier.copy_job(job));
            copier.last.clear();
        })?;
        Ok(CopierThread {
            thread,
            lanes: Arc::clone(lanes),
        })
    }
}

impl Drop for CopierThread {
    fn drop(&mut self) {
        // Every job handed over has its driver side queued, waiting on the
        // flags: the copier finishes them all before it stops.
        self.lanes.wait_copier_idle();
        self.thread.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::{reached, use_of};

    #[test]
    fn a_counter_reaches_a_value_as_the_drivers_cyclic_comparison_says() {
        assert!(reached(0, 0));
        assert!(reached(5, 4));
        assert!(!reached(4, 5));
        // Across the wrap: 2 counts past u32::MAX.
        assert!(reached(2, u32::MAX));
        assert!(!reached(u32::MAX, 2));
    }

    #[test]
    fn chunk_s_is_use_s_over_buffers_of_its_buffer_wrapping() {
        assert_eq!(use_of(0, 4), 0);
        assert_eq!(use_of(3, 4), 0);
        assert_eq!(use_of(4, 4), 1);
        assert_eq!(use_of(4 * (1 << 32) + 8, 4), 2);
    }
}
