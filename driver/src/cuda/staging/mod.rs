//! Staged transfers between device memory and any host memory, at the
//! link's speed, in safe code: a [`Stager`] owns pinned staging buffers
//! (buffer `k` on stream `k`) and a worker pool of its own.
//!
//! Device to host, per chunk: the driver copies the chunk into a staging
//! buffer, then a host function copies the staging buffer into the
//! destination with the stager's workers. Host to device is the mirror: a
//! host function fills the staging buffer, then the driver copies it to the
//! device. The chunks go round the buffers, so the host copy of chunk `i`
//! overlaps the transfer of chunk `i + 1`, and the workers split each host
//! copy, so a destination never touched before (`vec![0; n]`, mapped
//! lazily) takes its page faults on many cores at once, not on the driver's
//! one thread (nothing before the host function touches the destination).
//!
//! ```no_run
//! use hostcopy_driver::cuda::{Context, DeviceBuffer, staging::Stager};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let context = Context::primary(0)?;
//! let device = DeviceBuffer::new(&context, 1 << 30)?;
//! let mut host = vec![0u8; 1 << 30];
//! let mut stager = Stager::new(&context)?;
//! stager.device_to_host(&mut host, &device)?;
//! # Ok(())
//! # }
//! ```
//!
//! Blocking calls ([`Stager::device_to_host`], [`Stager::host_to_device`])
//! return when the bytes have arrived. [`Stager::scope`] gives handles
//! ([`Transfer`]) that the caller waits on later while it keeps enqueuing;
//! like [`std::thread::scope`], the scope waits for every transfer it
//! started before it returns, so forgetting a handle cannot free a borrowed
//! buffer under a running host function. A scope's transfers return at
//! once: the caller's thread only checks and plans them, and the stager's
//! feeder thread queues their chunks, keeping two per staging buffer queued
//! ahead, so the caller makes no driver call until it waits. Small
//! transfers in a scope are staged too, since the driver's path would
//! block. (A [`PendingTransfer`]'s chunks are queued by the call that
//! starts it, so that it can order a stream after itself at once.)
//!
//! # Batches
//!
//! A transfer of many scattered ranges, such as a KV cache's blocks, is one
//! call: each [`Block`] names a device offset, a host offset and a length.
//! The blocks are packed one after the other into the staging buffers, so
//! many small blocks share a chunk: one driver call gathers or scatters
//! them (`cuMemcpyBatchAsync` where the driver has it, CUDA 12.8 and later;
//! else one asynchronous copy per block: [`DeviceCopies`]) and one host
//! function copies them on.
//!
//! ```no_run
//! use hostcopy_driver::cuda::{Context, DeviceBuffer};
//! use hostcopy_driver::cuda::staging::{Block, Stager};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! const BLOCK: usize = 256 << 10;
//! let context = Context::primary(0)?;
//! let mut cache = DeviceBuffer::new(&context, 4096 * BLOCK)?;
//! let mut pool = vec![0u8; 1024 * BLOCK];
//! let mut stager = Stager::new(&context)?;
//! // Offload device blocks 5, 900 and 17 to pool slots 0, 1 and 2 ...
//! let offload: Vec<Block> = [5, 900, 17]
//!     .iter()
//!     .enumerate()
//!     .map(|(slot, &block)| Block::new(block * BLOCK, slot * BLOCK, BLOCK))
//!     .collect();
//! stager.device_to_host_blocks(&mut pool, &cache, &offload)?;
//! // ... and restore them later to device blocks 40, 41 and 42.
//! let restore: Vec<Block> = (0..3)
//!     .map(|slot| Block::new((40 + slot) * BLOCK, slot * BLOCK, BLOCK))
//!     .collect();
//! stager.host_to_device_blocks(&mut cache, &pool, &restore)?;
//! // Or without blocking: the offload runs while the caller works on.
//! stager.scope(|scope| -> Result<(), hostcopy_driver::cuda::Error> {
//!     let transfer = scope.device_to_host_blocks(&mut pool, &cache, &offload)?;
//!     // ... other work ...
//!     transfer.wait()
//! })??;
//! # Ok(())
//! # }
//! ```
//!
//! Every block is checked before anything is queued: each must lie inside
//! both memories ([`Error::BlockOutOfBounds`], with the block's index and
//! the memory it is outside of), and no two may write the same bytes
//! ([`Error::BlocksOverlap`], with both indices): destinations are
//! disjoint, sources may overlap.
//!
//! # Errors
//!
//! A stager's driver calls touch only its own streams, events and pinned
//! buffers, which no graph capture can reach, so it makes them in the
//! relaxed capture mode: a stager works while another part of the program
//! captures a graph, even in global mode, and leaves that capture alone.
//! The exception is a blocking transfer below the crossover: the driver's
//! own synchronous copy goes through the legacy stream, which synchronizes
//! with every blocking stream, so during a global capture the driver
//! refuses it (`CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`), as it would
//! anyone's.
//!
//! A failed wait returns the driver's error; it never hangs. Before it
//! returns, the stager drains its own streams (never the whole context,
//! which the driver refuses while another part of the program captures a
//! graph, breaking that capture): every host function that is copying has
//! finished and every one the driver skipped is abandoned (it touches
//! nothing if it ever runs, and its record is leaked, never freed:
//! [`leaked`]). After a non-sticky error the streams drain and the stager
//! works on as before.
//!
//! If the streams cannot be drained (a sticky error), queued copies may
//! still read or write the staging buffers and the device buffer: the
//! device allocation is kept for good (dropping the [`DeviceBuffer`](super::DeviceBuffer) then
//! frees nothing), and the stager refuses further transfers with that
//! error until its streams drain, leaking its staging buffers if it is
//! dropped before. Each leak is counted in [`leaked`].
//!
//! # The fastest transfer on a new machine
//!
//! 1. Start from [`StagingOptions::default`]: 16 MiB chunks, 4 staging
//!    buffers, workers = cores - 4 (measured on a 16-core H200 host: 98% of
//!    pinned D2H; 4 workers reached only 59%). Each default's documentation
//!    in [`options`](StagingOptions) says where it comes from.
//! 2. Run the benchmark there: `cargo xtask bench` (or the bundle's
//!    `staged_copy`). It prints, side by side, pinned D2H/H2D (the link),
//!    the driver's pageable path and the stager, with ratios.
//! 3. If the stager trails the pinned figure, try more workers (up to the
//!    cores less one), 3 to 6 buffers, 8 to 32 MiB chunks; for host to
//!    device compare [`Stores::Streaming`] and [`Stores::Cached`] (the
//!    benchmark prints both).
//! 4. Several GPUs at once: one stager per GPU, each on its own thread,
//!    built with [`StagingOptionsBuilder::stagers`] set to the number of
//!    GPUs, so each pool gets its share of the cores.
//! 5. Small blocking transfers take the driver's path below
//!    [`StagingOptions::driver_path_below`] (see [`DRIVER_PATH_BELOW`] for
//!    how that crossover is measured). Pinned memory needs no staging at
//!    all: [`Stager::device_to_pinned`] and [`Stager::pinned_to_device`]
//!    make one asynchronous driver copy at the link's speed.

mod chunk;
#[cfg(feature = "cudarc")]
#[cfg_attr(docsrs, doc(cfg(feature = "cudarc")))]
pub mod cudarc;
mod driver_path;
mod feed;
mod options;
mod pending;
mod plan;
mod scope;

use core::mem::ManuallyDrop;
use std::sync::Arc;
use std::vec::Vec;

use super::capture::RelaxedCapture;
use super::context::Context;
use super::device::{DeviceInUse, DeviceMemory, device_range};
use super::error::{DriverError, Error};
use super::event::Event;
use super::pinned::PinnedBuffer;
use super::stream::Stream;
use crate::parallel::CopyPool;
use crate::{HostMemory, HostMemoryMut, HostRange};
use chunk::{Chunk, Chunks};
use driver_path::{DeviceSide, driver_path};
use feed::{Feeder, Job, Lanes};
use plan::{Layout, chunk_sizes, plan};

pub use super::retire::{Leaked, leaked};
pub use driver_path::PinnedTransferError;
pub use options::{
    DEFAULT_BUFFERS, DEFAULT_CHUNK, DEFAULT_EDGE_CHUNK, DRIVER_PATH_BELOW, DeviceCopies,
    MAX_BUFFERS, MAX_CHUNK, MIN_CHUNK, RESERVED_CORES, StagingOptions, StagingOptionsBuilder,
    Stores, default_workers,
};
pub use pending::PendingTransfer;
pub use plan::Block;
pub use scope::{StagingScope, Transfer};

/// Pinned staging buffers, one stream per buffer and a worker pool: see
/// the [module documentation](self).
#[derive(Debug)]
pub struct Stager {
    context: Context,
    options: StagingOptions,
    /// The streams, shared with the feeder thread.
    lanes: Arc<Lanes>,
    /// Queues the chunks of transfers that return at once; started by the
    /// first of them.
    feeder: Option<Feeder>,
    /// Freed in `Drop` unless queued work may still touch them.
    buffers: Vec<ManuallyDrop<PinnedBuffer>>,
    /// Their addresses, for planning.
    staging: Vec<usize>,
    /// Behind an `Arc`: host functions reach it through a raw pointer that
    /// no borrow of the stager may invalidate.
    workers: Arc<CopyPool>,
    /// The number of the next chunk planned.
    next_seq: u64,
    /// The error with which the streams last failed to drain: until they
    /// drain, queued work may still use the staging buffers.
    undrained: Option<DriverError>,
    /// Recorded on a stream the stager's transfers wait for ([`Stager::wait_for`]).
    /// Events `wait_for` recorded, each numbered, not yet known complete:
    /// the stager's streams wait for them, and a transfer on the driver's
    /// path (the legacy stream, which does not wait for non-blocking
    /// streams) waits for them on the host first. A staged transfer
    /// started after one that every stream waited for (`true`), and
    /// finished without error, proves it complete.
    order_events: Vec<(u64, bool, Event)>,
    /// The number the next `wait_for` event gets.
    next_order: u64,
    /// Completed order events, reused.
    spare_order_events: Vec<Event>,
    /// Waits for the order events when they are folded into one; made the
    /// first time they are.
    order_stream: Option<Stream>,
    /// Tells this stager's pending transfers from others'.
    id: u64,
}

/// Which way a transfer goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Direction {
    DeviceToHost,
    HostToDevice,
}

/// Who queues a transfer's chunks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Queuing {
    /// The caller, all at once: a blocking call, or a pending transfer
    /// (which `order_before` needs queued). Small single transfers take the
    /// driver's path.
    Now,
    /// The feeder thread: a call that returns at once. Everything is
    /// staged, since the driver's path would block the caller.
    Feeder,
}

/// The blocks of a transfer: one range, or a checked batch.
#[derive(Clone, Copy, Debug)]
enum Blocks<'a> {
    /// `len` bytes at `offset` of the device memory and the start of the
    /// host memory.
    One {
        offset: usize,
    },
    Many(&'a [Block]),
}

/// The chunks of one planned transfer and how queuing them goes.
#[derive(Debug)]
struct InFlight {
    chunks: Chunks,
    job: Arc<Job>,
    /// The number of the next `wait_for` event when it started.
    order_upto: u64,
    /// The device allocation the queued copies use.
    device: DeviceInUse,
}

impl Stager {
    /// A stager on `context` with the default options.
    pub fn new(context: &Context) -> Result<Stager, DriverError> {
        Self::with_options(context, StagingOptions::default())
    }

    /// A stager on `context` with `options`: allocates the staging buffers,
    /// creates their streams and starts the workers.
    pub fn with_options(context: &Context, options: StagingOptions) -> Result<Stager, DriverError> {
        let _relaxed = RelaxedCapture::new();
        let mut streams = Vec::with_capacity(options.buffers);
        let mut buffers = Vec::with_capacity(options.buffers);
        for _ in 0..options.buffers {
            streams.push(Stream::new(context)?);
            // Plain buffers until every one exists: an error here drops
            // (frees) those made before it, which nothing has touched yet.
            buffers.push(PinnedBuffer::new(context, options.chunk)?);
        }
        let staging = buffers
            .iter()
            .map(|buffer| buffer.raw_ptr().expose_provenance())
            .collect();
        let buffers = buffers.into_iter().map(ManuallyDrop::new).collect();
        let stager = Stager {
            context: context.clone(),
            options,
            lanes: Arc::new(Lanes::new(context, streams, options.device_copies)),
            feeder: None,
            buffers,
            staging,
            workers: Arc::new(CopyPool::spawn(options.workers, "hostcopy-stager").0),
            next_seq: 0,
            undrained: None,
            order_events: Vec::new(),
            next_order: 0,
            spare_order_events: Vec::new(),
            order_stream: None,
            id: pending::next_stager_id(),
        };
        Ok(stager)
    }

    /// The context the stager transfers in.
    pub fn context(&self) -> &Context {
        &self.context
    }

    /// The options it was made with.
    pub fn options(&self) -> &StagingOptions {
        &self.options
    }

    /// Worker threads running (fewer than asked if the system refused some).
    pub fn workers(&self) -> usize {
        self.workers.workers()
    }

    /// Copies `dst.len()` bytes from the start of `src` into `dst`, and
    /// waits for them.
    pub fn device_to_host<D, S>(&mut self, dst: &mut D, src: &S) -> Result<(), Error>
    where
        D: HostMemoryMut + ?Sized,
        S: DeviceMemory,
    {
        self.device_to_host_at(dst, src, 0)
    }

    /// Copies `dst.len()` bytes from byte `offset` of `src` into `dst`, and
    /// waits for them.
    pub fn device_to_host_at<D, S>(
        &mut self,
        dst: &mut D,
        src: &S,
        offset: usize,
    ) -> Result<(), Error>
    where
        D: HostMemoryMut + ?Sized,
        S: DeviceMemory,
    {
        let host = dst.host_range_mut();
        self.run(host, DeviceSide::Source(src), Blocks::One { offset })
    }

    /// Copies `src` to the start of `dst`, and waits for it.
    pub fn host_to_device<D, S>(&mut self, dst: &mut D, src: &S) -> Result<(), Error>
    where
        D: DeviceMemory,
        S: HostMemory + ?Sized,
    {
        self.host_to_device_at(dst, 0, src)
    }

    /// Copies `src` to byte `offset` of `dst`, and waits for it.
    pub fn host_to_device_at<D, S>(
        &mut self,
        dst: &mut D,
        offset: usize,
        src: &S,
    ) -> Result<(), Error>
    where
        D: DeviceMemory,
        S: HostMemory + ?Sized,
    {
        let host = src.host_range();
        self.run(host, DeviceSide::Destination(dst), Blocks::One { offset })
    }

    /// Copies each block from `src` into `dst` (a batch: many ranges at
    /// once, at the speed of one large transfer), and waits for them.
    ///
    /// Every block is checked before anything is queued: each must lie in
    /// both memories ([`Error::BlockOutOfBounds`]), and no two may write
    /// the same host bytes ([`Error::BlocksOverlap`]); both name the
    /// offending blocks. Device ranges may overlap.
    ///
    /// ```no_run
    /// use hostcopy_driver::cuda::{Context, DeviceBuffer};
    /// use hostcopy_driver::cuda::staging::{Block, Stager};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// const BLOCK: usize = 256 << 10;
    /// let context = Context::primary(0)?;
    /// let cache = DeviceBuffer::new(&context, 4096 * BLOCK)?;
    /// let mut pool = vec![0u8; 1024 * BLOCK];
    /// // Device blocks 5, 900 and 17 to pool slots 0, 1 and 2.
    /// let blocks: Vec<Block> = [5, 900, 17]
    ///     .iter()
    ///     .enumerate()
    ///     .map(|(slot, &block)| Block::new(block * BLOCK, slot * BLOCK, BLOCK))
    ///     .collect();
    /// let mut stager = Stager::new(&context)?;
    /// stager.device_to_host_blocks(&mut pool, &cache, &blocks)?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn device_to_host_blocks<D, S>(
        &mut self,
        dst: &mut D,
        src: &S,
        blocks: &[Block],
    ) -> Result<(), Error>
    where
        D: HostMemoryMut + ?Sized,
        S: DeviceMemory,
    {
        let host = dst.host_range_mut();
        self.run(host, DeviceSide::Source(src), Blocks::Many(blocks))
    }

    /// Copies each block from `src` into `dst` (a batch), and waits for
    /// them. Checked as [`device_to_host_blocks`](Self::device_to_host_blocks)
    /// does, except that here no two blocks may write the same device
    /// bytes, and host ranges may overlap.
    pub fn host_to_device_blocks<D, S>(
        &mut self,
        dst: &mut D,
        src: &S,
        blocks: &[Block],
    ) -> Result<(), Error>
    where
        D: DeviceMemory,
        S: HostMemory + ?Sized,
    {
        let host = src.host_range();
        self.run(host, DeviceSide::Destination(dst), Blocks::Many(blocks))
    }

    /// A blocking transfer: started and finished.
    fn run(
        &mut self,
        host: HostRange,
        device: DeviceSide<'_>,
        blocks: Blocks<'_>,
    ) -> Result<(), Error> {
        match self.start(host, device, blocks, Queuing::Now)? {
            Some(in_flight) => self.finish(in_flight),
            None => Ok(()),
        }
    }

    /// Checks a transfer and either completes it on the driver's path
    /// (`None`) or plans it and has its chunks queued (`Some`, to be
    /// finished).
    ///
    /// The caller holds the borrow that `host` came from until the transfer
    /// is finished; `host` is writable if `device` is the source.
    fn start(
        &mut self,
        host: HostRange,
        device: DeviceSide<'_>,
        blocks: Blocks<'_>,
        queuing: Queuing,
    ) -> Result<Option<InFlight>, Error> {
        self.check_usable()?;
        let memory = device.memory();
        self.context.expect_same(memory.memory_context())?;
        let direction = device.direction();
        let one;
        let blocks = match blocks {
            Blocks::One { offset } => {
                device_range(memory, offset, host.len)?;
                if host.len > 0
                    && queuing == Queuing::Now
                    && host.len < self.options.driver_path_below
                {
                    // Not in the relaxed mode: the driver's synchronous
                    // copies go through the legacy stream, which
                    // synchronizes with every blocking stream, a capturing
                    // one too; the driver refuses them during a global
                    // capture rather than break it.
                    self.wait_for_order()?;
                    driver_path(host, device, offset)?;
                    return Ok(None);
                }
                one = [Block::new(offset, 0, host.len)];
                &one[..]
            }
            Blocks::Many(blocks) => {
                plan::check_blocks(blocks, direction, host.len, memory.memory_len())?;
                blocks
            }
        };
        let total: usize = blocks.iter().map(|block| block.len).sum();
        if total == 0 {
            return Ok(None);
        }
        let _relaxed = RelaxedCapture::new();
        let sizes = chunk_sizes(total, self.options.chunk, self.options.edge_chunk());
        let mut planned = plan(
            &Layout {
                direction,
                host: host.addr,
                device: memory.memory_ptr(),
                blocks,
                staging: &self.staging,
                first: self.next_seq,
            },
            &sizes,
        );
        self.next_seq += planned.len() as u64;
        let stores = match direction {
            Direction::DeviceToHost => Stores::Streaming,
            Direction::HostToDevice => self.options.h2d_stores,
        };
        let workers = Arc::as_ptr(&self.workers);
        // The host copies move into the chunk records, which the host
        // functions read; the plan keeps the driver's side.
        let chunks = Chunks::new(
            planned
                .iter_mut()
                .map(|chunk| Chunk::new(core::mem::take(&mut chunk.host), stores, workers))
                .collect(),
        );
        let job = Arc::new(Job::new(direction, chunks.array(), planned));
        match queuing {
            Queuing::Now => self.lanes.queue_now(&job),
            Queuing::Feeder => {
                if self.feeder.is_none() {
                    let feeder = Feeder::spawn(&self.lanes).map_err(|_| {
                        // The system refused a thread: as out of resources.
                        Error::from(DriverError::from_code(CUDA_ERROR_OUT_OF_MEMORY))
                    });
                    match feeder {
                        Ok(feeder) => self.feeder = Some(feeder),
                        Err(error) => {
                            chunks.settle_and_free();
                            return Err(error);
                        }
                    }
                }
                self.lanes.hand_over(Arc::clone(&job));
            }
        }
        Ok(Some(InFlight {
            chunks,
            job,
            order_upto: self.next_order,
            device: memory.memory_in_use(),
        }))
    }

    /// Waits on the host for the work `wait_for` ordered the stager after,
    /// if any since the last transfer: for the driver's path, whose legacy
    /// stream does not wait for a non-blocking stream.
    fn wait_for_order(&mut self) -> Result<(), Error> {
        for (_, _, event) in &self.order_events {
            event.synchronize()?;
        }
        let done = self.order_events.drain(..).map(|(_, _, event)| event);
        self.spare_order_events.extend(done);
        Ok(())
    }

    /// Lets go of the order events the driver reports complete, and once
    /// [`MAX_ORDER_EVENTS`] are held, folds them into one: so that the
    /// events held stay bounded however often `wait_for` is called between
    /// transfers that would prove them complete, without waiting on the
    /// host (a non-blocking call must not block on the user's stream).
    fn retire_order_events(&mut self) -> Result<(), Error> {
        let mut index = 0;
        while index < self.order_events.len() {
            if self.order_events[index].2.query()? {
                let (_, _, event) = self.order_events.remove(index);
                self.spare_order_events.push(event);
            } else {
                index += 1;
            }
        }
        if self.order_events.len() >= MAX_ORDER_EVENTS {
            self.fold_order_events()?;
        }
        // Spares beyond the bound are never needed at once again.
        self.spare_order_events.truncate(MAX_ORDER_EVENTS);
        Ok(())
    }

    /// Replaces the order events by one that completes after all of them:
    /// recorded on a stream of the stager's own that waited for each and
    /// carries no other work. On an error nothing is replaced.
    fn fold_order_events(&mut self) -> Result<(), Error> {
        if self.order_stream.is_none() {
            self.order_stream = Some(Stream::new(&self.context)?);
        }
        let Some(stream) = &self.order_stream else {
            unreachable!("made above");
        };
        let stream = stream.as_stream();
        for (_, _, event) in &self.order_events {
            stream.wait_event(event)?;
        }
        let folded = match self.spare_order_events.pop() {
            Some(event) => event,
            None => Event::blocking(&self.context)?,
        };
        if let Err(error) = folded.record(stream) {
            self.spare_order_events.push(folded);
            return Err(error);
        }
        // The stager's streams waited for it if they waited for every one;
        // its number is the newest, which `order_events_complete` compares.
        let waited = self.order_events.iter().all(|(_, waited, _)| *waited);
        let newest = self.order_events.last().map_or(0, |(number, _, _)| *number);
        let folded_in = self.order_events.drain(..).map(|(_, _, event)| event);
        self.spare_order_events.extend(folded_in);
        self.order_events.push((newest, waited, folded));
        Ok(())
    }

    /// The order events numbered below `upto` that the streams waited for
    /// are complete: a staged transfer started after them has finished.
    fn order_events_complete(&mut self, upto: u64) {
        for (number, waited, event) in core::mem::take(&mut self.order_events) {
            if waited && number < upto {
                self.spare_order_events.push(event);
            } else {
                self.order_events.push((number, waited, event));
            }
        }
    }

    /// `Ok` unless queued work may still use the staging buffers: then
    /// the streams are drained once more, and the error is returned if
    /// they still cannot be.
    fn check_usable(&mut self) -> Result<(), Error> {
        if self.undrained.is_some() {
            self.drain();
        }
        match self.undrained {
            Some(error) => Err(error.into()),
            None => Ok(()),
        }
    }

    /// Waits for everything queued on the stager's own streams; records
    /// the error if that fails (a sticky error). Only the stager's streams:
    /// synchronizing the context would be refused while another stream of
    /// it captures a graph, and would break that capture.
    fn drain(&mut self) {
        let _relaxed = RelaxedCapture::new();
        self.undrained = self
            .lanes
            .streams
            .iter()
            .map(|stream| stream.as_stream().synchronize())
            .find_map(Result::err);
    }

    /// Waits until a transfer's chunks are queued and have run, then
    /// settles them; returns the first error. After an error the streams
    /// are drained; if they cannot be, the device allocation is kept for
    /// good.
    fn finish(&mut self, in_flight: InFlight) -> Result<(), Error> {
        let _relaxed = RelaxedCapture::new();
        let InFlight {
            chunks,
            job,
            order_upto,
            device,
        } = in_flight;
        let (error, events) = {
            let mut queued = job.wait_queued();
            (queued.error.take(), core::mem::take(&mut queued.events))
        };
        let mut result = error.map_or(Ok(()), Err);
        // After the first error the drain waits for the rest.
        if result.is_ok() {
            result = events
                .iter()
                .try_for_each(Event::synchronize)
                .map_err(Error::from);
        }
        if result.is_err() {
            self.drain();
        } else {
            self.lanes.return_events(events);
            self.order_events_complete(order_upto);
        }
        chunks.settle_and_free();
        self.release(device);
        result
    }

    /// Lets go of a device allocation that queued copies used: dropped if
    /// the streams are drained, kept for good (and counted) if not. (A
    /// borrowed allocation, cudarc's, is neither: see the `cudarc` module.)
    fn release(&self, device: DeviceInUse) {
        if self.undrained.is_some() {
            device.keep();
        }
    }
}

/// The most events [`Stager::wait_for`] keeps for work not known complete:
/// at it, `wait_for` folds them into one (recorded on a stream of the
/// stager's own that waited for each), without waiting on the host.
pub const MAX_ORDER_EVENTS: usize = 64;

/// `CUDA_ERROR_OUT_OF_MEMORY`, for a feeder thread the system refused.
const CUDA_ERROR_OUT_OF_MEMORY: u32 = 2;

impl Drop for Stager {
    fn drop(&mut self) {
        // Every driver call of the teardown in the relaxed mode, the
        // streams and events too (dropped here, not after).
        let _relaxed = RelaxedCapture::new();
        // The feeder first, joined: it is idle (every scope waited for the
        // transfers it handed over), and would leave any job it had not
        // started unqueued.
        self.feeder = None;
        // Borrowed transfers are finished (they borrow the stager), but a
        // pending transfer dropped unfinished may still be queued.
        self.drain();
        self.order_events.clear();
        self.spare_order_events.clear();
        self.order_stream = None;
        if self.undrained.is_some() {
            // A host function of a pending transfer dropped unfinished may
            // still be running with the workers: keep them too.
            core::mem::forget(Arc::clone(&self.workers));
            super::retire::kept_pinned_buffers(self.buffers.len());
        } else {
            for buffer in &mut self.buffers {
                // SAFETY: the streams drained just above: no queued work
                // touches the buffer. Dropped once, here.
                unsafe { ManuallyDrop::drop(buffer) };
            }
        }
        // The feeder is joined: the stager holds the only reference.
        if let Some(lanes) = Arc::get_mut(&mut self.lanes) {
            lanes.clear();
        }
    }
}
