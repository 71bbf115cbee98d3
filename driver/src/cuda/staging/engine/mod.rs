//! The staging engine under the [`Stager`](super::Stager)'s fronts: the
//! lanes and their copier, the staging buffers, the worker pool, the
//! order events and the driver's path ([`DriverPath`]), and the stager's
//! health (whether its streams drained after an error). Every front is
//! made of its two calls: [`Engine::start`] checks a [`TransferSpec`]
//! whole, plans it and has its chunks queued ([`InFlight`]);
//! [`Engine::finish`] waits for them and retires what they used. The
//! fronts decide only when the caller waits.
//!
//! Beside them, in files of their own: copies from and into pinned memory
//! (`pinned`), and blocking transfers in the order a memory's owner keeps
//! (`owner_order`, cudarc's).

mod pinned;

#[cfg(feature = "cudarc")]
mod owner_order;

use core::mem::ManuallyDrop;
use std::sync::Arc;
use std::vec::Vec;

use super::Direction;
use super::driver_path::DriverPath;
use super::feed::{CopierThread, DirectWait, Job, Lanes};
use super::in_flight::{Direct, Due, InFlight, InUse};
use super::options::StagingOptions;
use super::order::OrderEvents;
use super::pace;
use super::plan::{self, Block, Layout, Route};
use super::spec::{Blocks, DeviceSide, TransferSpec};
use super::trace::{self, Step};
use crate::HostRange;
use crate::cuda::capture::RelaxedCapture;
use crate::cuda::context::Context;
use crate::cuda::error::{DriverError, Error};
use crate::cuda::pinned::PinnedBuffer;
use crate::cuda::registration::{self, Region, Transferring};
use crate::cuda::retire::{self, Kept};
use crate::cuda::stream::{Stream, StreamRef};
use crate::parallel::CopyPool;

/// When the caller of a transfer waits: that decides only whether a
/// single transfer below the crossover may take the driver's path, which
/// returns when the bytes have arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Queuing {
    /// In the call: below the crossover, always the driver's path.
    Blocking,
    /// Later (a scope's transfer, a pending one): the driver's path only
    /// when it would not wait for other work.
    AtOnce,
}

/// What a [`Stager`](super::Stager) is made of, under its fronts.
#[derive(Debug)]
pub(super) struct Engine {
    context: Context,
    options: StagingOptions,
    /// The streams and their flags, shared with the copier thread.
    lanes: Arc<Lanes>,
    /// Makes the host side of every staged chunk; `None` only in `Drop`.
    copier: Option<CopierThread>,
    /// Freed in `Drop` unless queued work may still touch them.
    buffers: Vec<ManuallyDrop<PinnedBuffer>>,
    /// Their addresses, for planning.
    staging: Vec<usize>,
    /// Shared with the copier thread, which copies with it, and with the
    /// driver's path, whose host side the calling thread copies.
    workers: Arc<CopyPool>,
    /// The number of the next chunk planned.
    next_seq: u64,
    /// The events `wait_for` recorded, until known complete.
    order: OrderEvents,
    /// Carries the transfers below the crossover.
    driver_path: DriverPath,
}

/// The stream a transfer's direct copies (of registered host memory) go
/// on.
const DIRECT_LANE: usize = 0;

/// `CUDA_ERROR_OUT_OF_MEMORY`, for a copier thread the system refused.
const CUDA_ERROR_OUT_OF_MEMORY: u32 = 2;

impl Engine {
    /// Allocates the staging buffers and their flags, creates their
    /// streams, and starts the workers and the copier thread.
    pub(super) fn new(context: &Context, options: StagingOptions) -> Result<Engine, Error> {
        let _relaxed = RelaxedCapture::new();
        let streams = (0..options.streams())
            .map(|_| Stream::new(context))
            .collect::<Result<Vec<_>, _>>()?;
        let mut buffers = Vec::with_capacity(options.buffers);
        for _ in 0..options.buffers {
            // Plain buffers until every one exists: an error here drops
            // (frees) those made before it, which nothing has touched yet.
            buffers.push(PinnedBuffer::new(context, options.chunk)?);
        }
        let staging = buffers
            .iter()
            .map(|buffer| buffer.raw_ptr().expose_provenance())
            .collect();
        let lanes = Arc::new(Lanes::new(
            context,
            streams,
            Vec::clone(&staging),
            &options,
        )?);
        let workers = Arc::new(CopyPool::spawn(options.workers, "hostcopy-stager").0);
        // The system refused a thread: as out of resources. Nothing is
        // queued yet, so the buffers and flags are freed as they drop.
        // Prefault as far ahead as chunks can be in flight.
        let prefault = options.prefault.then_some(options.buffers);
        let copier = CopierThread::spawn(&lanes, &workers, prefault, options.d2h_workers())
            .map_err(|_| Error::from(DriverError::from_code(CUDA_ERROR_OUT_OF_MEMORY)))?;
        let buffers = buffers.into_iter().map(ManuallyDrop::new).collect();
        let engine = Engine {
            context: context.clone(),
            options,
            lanes,
            copier: Some(copier),
            buffers,
            staging,
            workers,
            next_seq: 0,
            order: OrderEvents::default(),
            // A buffer of the crossover's size, at most a chunk.
            driver_path: DriverPath::new(context, options.driver_path_below.min(options.chunk)),
        };
        Ok(engine)
    }

    /// The context the stager transfers in.
    pub(super) fn context(&self) -> &Context {
        &self.context
    }

    /// The options it was made with.
    pub(super) fn options(&self) -> &StagingOptions {
        &self.options
    }

    /// Worker threads running (fewer than asked if the system refused some).
    pub(super) fn workers(&self) -> usize {
        self.workers.workers()
    }

    /// A blocking transfer, in the order its memory's owner keeps where
    /// it has one.
    pub(super) fn run(&mut self, spec: TransferSpec<'_>) -> Result<(), Error> {
        #[cfg(feature = "cudarc")]
        if let Some(order) = spec.device.memory().memory_order() {
            return self.run_in_owner_order(spec, order);
        }
        self.run_now(spec)
    }

    /// See [`Stager::wait_for`](super::Stager::wait_for).
    pub(super) fn wait_for(&mut self, stream: StreamRef<'_>) -> Result<(), Error> {
        let _relaxed = RelaxedCapture::new();
        let _bound = self.context.bound()?;
        self.check_usable()?;
        self.context.expect_same(stream.context())?;
        self.retire_order();
        self.order.record(&self.context, stream)
    }

    /// A transfer the caller's thread queues and waits for.
    fn run_now(&mut self, spec: TransferSpec<'_>) -> Result<(), Error> {
        match self.start(spec, Queuing::Blocking)? {
            Some(in_flight) => self.finish(in_flight),
            None => Ok(()),
        }
    }

    /// A single transfer below the crossover, complete when this returns:
    /// one driver copy through a pinned buffer of the stager's own, on a
    /// stream of its own, after the streams given to `wait_for`, the host
    /// side copied by the calling thread ([`DriverPath::run`]). After an
    /// error the streams are drained; if they cannot be, the device memory
    /// is kept for good, counted, and the buffer as the staging buffers
    /// are.
    fn driver_path(
        &mut self,
        host: HostRange,
        device: DeviceSide<'_>,
        offset: usize,
    ) -> Result<(), Error> {
        match self
            .driver_path
            .run(&mut self.order, &self.workers, host, device, offset)
        {
            Ok(()) => Ok(()),
            Err((error, queued)) => {
                if queued {
                    // Until the streams drain, the stager refuses
                    // transfers (the buffer is not reused) and keeps the
                    // buffer if it is dropped (as its staging buffers).
                    self.drain();
                }
                self.release(InUse::device(device.memory().memory_in_use()));
                Err(error)
            }
        }
    }

    /// `Ok` unless queued work may still use the staging buffers: then
    /// the streams are drained once more, and the error is returned if
    /// they still cannot be.
    fn check_usable(&mut self) -> Result<(), Error> {
        if self.lanes.undrained().is_some() {
            self.drain();
        }
        match self.lanes.undrained() {
            Some(error) => Err(error.into()),
            None => Ok(()),
        }
    }

    /// Waits for everything queued on every stream of the stager's
    /// ([`Lanes::drain`]), recording whether they drained.
    fn drain(&self) {
        let _ = self.lanes.drain(self.driver_path.stream(), true);
    }

    /// Whether the stager's streams drained since their last error.
    fn drained(&self) -> bool {
        self.lanes.undrained().is_none()
    }

    /// Lets go of the memory that queued copies used: dropped if the
    /// streams are drained, kept for good (and counted) if not. (A
    /// borrowed allocation, cudarc's, is neither: see the `cudarc` module.)
    fn release(&self, in_use: InUse) {
        if !self.drained() {
            in_use.keep();
        }
    }

    /// Lets go of the `wait_for` events that transfers finished since
    /// (here or elsewhere) prove complete.
    fn retire_order(&mut self) {
        self.order.complete_below(self.lanes.finished_below());
    }

    /// Checks a transfer and either completes it on the driver's path
    /// (`None`) or plans it and has its chunks queued (`Some`, to be
    /// finished). The caller holds the borrows in `spec`, or answers for
    /// the memory they came from, until the transfer is finished.
    pub(super) fn start(
        &mut self,
        spec: TransferSpec<'_>,
        queuing: Queuing,
    ) -> Result<Option<InFlight>, Error> {
        self.check_usable()?;
        // Registering threads step aside for it from here until it has run.
        let transferring = Transferring::begin();
        let (host, device, blocks) = (spec.host, spec.device, spec.blocks);
        let memory = device.memory();
        // Memory whose owner hands out its address only with its ordering
        // is refused here: only `run` keeps that order.
        let device_ptr = memory.memory_ptr()?;
        self.context.expect_same(memory.memory_context())?;
        let direction = device.direction();
        let total = spec.device_bytes(memory.memory_len())?;
        let one;
        let (blocks, offset) = match blocks {
            Blocks::One { offset } => {
                one = [Block::new(offset, 0, host.len)];
                (&one[..], Some(offset))
            }
            Blocks::Many(blocks) => (blocks, None),
        };
        let layout = Layout {
            direction,
            host: host.addr,
            device: device_ptr,
            blocks,
            staging: &self.staging,
            first: self.next_seq,
        };
        // The buffers of hostcopy's that the direct copies use, each once.
        let mut regions: Vec<Arc<Region>> = Vec::new();
        let route = {
            let table = registration::table();
            let mut registered = |addr: usize, len: usize| {
                let Some((region, bytes)) = table
                    .as_deref()
                    .and_then(|table| registration::registered_at(table, addr, len))
                else {
                    return 0;
                };
                if !regions.iter().any(|known| Arc::ptr_eq(known, region)) {
                    regions.push(Arc::clone(region));
                }
                bytes
            };
            let registered: Option<plan::Registered<'_>> = match table {
                Some(_) => Some(&mut registered),
                None => None,
            };
            let (order, lanes, context) = (&mut self.order, &self.lanes, &self.context);
            let free = || driver_path_free(queuing, order, lanes, context);
            plan::route(
                &layout,
                total,
                offset.is_some(),
                &self.options,
                free,
                queuing == Queuing::Blocking,
                registered,
            )?
        };
        let (direct, mut planned, stores) = match route {
            Route::Empty => return Ok(None),
            Route::DriverPath => {
                let offset = offset.expect("the driver's path takes one range");
                self.driver_path(host, device, offset)?;
                return Ok(None);
            }
            Route::Queued {
                direct,
                staged,
                stores,
            } => (direct, staged, stores),
        };
        let _relaxed = RelaxedCapture::new();
        // From here on only the layer's own code runs until the chunks are
        // queued: the current context is asked for once.
        let _bound = self.context.bound()?;
        if !planned.is_empty() {
            self.lanes.choose_moves(&mut planned)?;
        }
        // Each stream the transfer uses waits for the streams given to
        // `wait_for` since its last transfer, before anything is queued.
        // (At most `MAX_BUFFERS`, 64, streams: one bit each.)
        let streams = self.lanes.streams.len();
        let mut ordered = 0u64;
        let used = planned.iter().map(|chunk| chunk.buffer % streams);
        for lane in (!direct.is_empty())
            .then_some(DIRECT_LANE)
            .into_iter()
            .chain(used)
        {
            if ordered & (1 << lane) == 0 {
                ordered |= 1 << lane;
                let stream = self.lanes.streams[lane].as_stream();
                self.order.order_lane(lane, stream)?;
            }
        }
        let written = match direction {
            Direction::DeviceToHost => direct
                .iter()
                .map(|piece| (piece.staging, piece.len))
                .collect(),
            Direction::HostToDevice => Vec::new(),
        };
        let in_use = InUse {
            device: memory.memory_in_use(),
            host: regions,
            written,
        };
        // A blocking call's wait sleeps on the direct copies' event; a
        // transfer that returns at once takes a plain one (the driver holds
        // only so many sleeping events queued before a call waits). A
        // blocking transfer of direct copies alone is waited for by when
        // they are due ([`Due`]): its copies are timed, unless too small.
        let bytes = direct.iter().map(|piece| piece.len).sum();
        let blocking = queuing == Queuing::Blocking;
        let alone = blocking && planned.is_empty();
        let wait = match (blocking, alone) {
            (false, _) => DirectWait::Plain,
            (true, true) if pace::timed(bytes) => DirectWait::Timed,
            (true, _) => DirectWait::Sleeping,
        };
        let mut events = Vec::new();
        let mut waited = Direct::No;
        if !direct.is_empty() {
            let queued = std::time::Instant::now();
            match self
                .lanes
                .queue_direct(direction, &direct, DIRECT_LANE, wait)
            {
                Ok((event, started)) => {
                    events.push(event);
                    waited = match (blocking, alone) {
                        (false, _) => Direct::No,
                        (true, false) => Direct::Sleeping,
                        (true, true) => Direct::Alone(Due {
                            bytes,
                            direction,
                            queued,
                            started,
                        }),
                    };
                }
                Err(error) => {
                    // What was queued runs: the streams drain before
                    // anything else uses them.
                    self.drain();
                    self.release(in_use);
                    return Err(error);
                }
            }
        }
        let job = if planned.is_empty() {
            None
        } else {
            self.next_seq += planned.len() as u64;
            let job = Arc::new(Job::new(direction, planned, stores));
            match self.lanes.queue_job(&job) {
                Ok(job_events) => events.extend(job_events),
                Err(error) => {
                    // What was queued runs, the chunk that failed perhaps
                    // in part: wait until the copier has made its host
                    // sides and the streams have run it all, before
                    // anything else uses the buffers (the stager refuses
                    // work until they drain).
                    drop(job.wait_done());
                    self.drain();
                    self.release(in_use);
                    return Err(error);
                }
            }
            Some(job)
        };
        Ok(Some(InFlight::new(
            job,
            &self.lanes,
            events,
            waited,
            self.order.next(),
            in_use,
            transferring,
        )))
    }

    /// Waits until a transfer's host side is made and its driver copies
    /// have run, and lets go of its device memory ([`InFlight::finish`]);
    /// returns the first error. After an error the streams are drained,
    /// so that the staging buffers are used again only once they have.
    pub(super) fn finish(&mut self, in_flight: InFlight) -> Result<(), Error> {
        let result = in_flight.finish();
        trace::mark(Step::Finished, 0);
        drop(in_flight);
        self.retire_order();
        result
    }
}

/// Whether the driver's path, which returns when its copy is done, would
/// wait for no other work: a blocking call's always; a call that returns
/// at once (a scope's, a pending transfer) only while no stream given to
/// [`wait_for`](Engine::wait_for) is still running (`order`) and the
/// stager's own transfers are done (`lanes`): else it is staged, since
/// either wait would block the caller.
fn driver_path_free(
    queuing: Queuing,
    order: &mut OrderEvents,
    lanes: &Lanes,
    context: &Context,
) -> Result<bool, Error> {
    if queuing == Queuing::Blocking {
        return Ok(true);
    }
    // Queries of the stager's own objects: they touch no capture.
    let _relaxed = RelaxedCapture::new();
    order.complete_below(lanes.finished_below());
    order.retire(context)?;
    Ok(order.is_empty() && lanes.idle()?)
}

impl Drop for Engine {
    fn drop(&mut self) {
        // Every driver call of the teardown in the relaxed mode, the
        // streams and events too (dropped here, not after).
        let _relaxed = RelaxedCapture::new();
        // The copier first, joined once it has made the host side of every
        // chunk queued (a pending transfer may be unfinished): then every
        // flag has advanced past every wait queued on it.
        self.copier = None;
        self.drain();
        self.order = OrderEvents::default();
        let drained = self.drained();
        self.driver_path.retire(drained);
        if !drained {
            for buffer in self.buffers.drain(..) {
                retire::keep(ManuallyDrop::into_inner(buffer), Kept::PinnedBuffer);
            }
        } else {
            for buffer in &mut self.buffers {
                // SAFETY: the streams drained just above: no queued work
                // touches the buffer. Dropped once, here.
                unsafe { ManuallyDrop::drop(buffer) };
            }
        }
        // The lanes (streams, flags) go with their last reference, the
        // stager's or a transfer's that outlives it, by their own rule
        // (`Lanes`' drop: the flags kept where the streams did not drain).
    }
}
