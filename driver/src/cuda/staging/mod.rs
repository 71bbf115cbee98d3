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
//! buffer under a running host function.
//!
//! # Errors
//!
//! A stager's driver calls touch only its own streams, events and pinned
//! buffers, which no graph capture can reach, so it makes them in the
//! relaxed capture mode: a stager works while another part of the program
//! captures a graph, even in global mode, and leaves that capture alone.
//! The exception is a transfer below the crossover: the driver's own
//! synchronous copy goes through the legacy stream, which synchronizes with
//! every blocking stream, so during a global capture the driver refuses it
//! (`CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`), as it would anyone's.
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
//! 5. Small transfers take the driver's path below
//!    [`StagingOptions::driver_path_below`] (see [`DRIVER_PATH_BELOW`] for
//!    how that crossover is measured). Pinned memory needs no staging at
//!    all: [`Stager::device_to_pinned`] and [`Stager::pinned_to_device`]
//!    make one asynchronous driver copy at the link's speed.

mod chunk;
mod driver_path;
mod options;
mod pending;
mod scope;

use core::mem::ManuallyDrop;
use std::sync::Arc;
use std::vec::Vec;

use hostcopy_core::HostCopyArgs;

use super::capture::RelaxedCapture;
use super::context::Context;
use super::device::{DeviceInUse, DeviceMemory, device_range};
use super::error::{DriverError, Error};
use super::event::Event;
use super::pinned::PinnedBuffer;
use super::stream::Stream;
use crate::parallel::CopyPool;
use crate::{HostMemory, HostMemoryMut, HostRange};
use chunk::{Chunk, Chunks, run_chunk};
use driver_path::{DeviceSide, driver_path};

pub use chunk::{Leaked, leaked};
pub use driver_path::PinnedTransferError;
pub use options::{
    DEFAULT_BUFFERS, DEFAULT_CHUNK, DRIVER_PATH_BELOW, RESERVED_CORES, StagingOptions,
    StagingOptionsBuilder, Stores, default_workers,
};
pub use pending::PendingTransfer;
pub use scope::{StagingScope, Transfer};

/// Pinned staging buffers, one stream per buffer and a worker pool: see
/// the [module documentation](self).
#[derive(Debug)]
pub struct Stager {
    context: Context,
    options: StagingOptions,
    streams: Vec<Stream>,
    /// Freed in `Drop` unless queued work may still touch them.
    buffers: Vec<ManuallyDrop<PinnedBuffer>>,
    /// Behind an `Arc`: host functions reach it through a raw pointer that
    /// no borrow of the stager may invalidate.
    workers: Arc<CopyPool>,
    /// Completion events of finished transfers, reused: no event is
    /// created or destroyed per transfer once the stager is warm.
    spare_events: Vec<Event>,
    /// The buffer the next chunk goes to.
    next: usize,
    /// The error with which the streams last failed to drain: until they
    /// drain, queued work may still use the staging buffers.
    undrained: Option<DriverError>,
    /// Recorded on a stream the stager's transfers wait for ([`Stager::wait_for`]).
    order_event: Option<Event>,
    /// Tells this stager's pending transfers from others'.
    id: u64,
}

/// Which way a transfer goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Direction {
    DeviceToHost,
    HostToDevice,
}

/// The chunks and completion events of one enqueued transfer.
#[derive(Debug)]
struct InFlight {
    chunks: Chunks,
    events: Vec<Event>,
    /// The device allocation the queued copies use.
    device: DeviceInUse,
    /// An error while enqueuing: what was enqueued before it is waited for.
    error: Option<Error>,
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
        let buffers = buffers.into_iter().map(ManuallyDrop::new).collect();
        let stager = Stager {
            context: context.clone(),
            options,
            streams,
            buffers,
            workers: Arc::new(CopyPool::spawn(options.workers, "hostcopy-stager").0),
            spare_events: Vec::new(),
            next: 0,
            undrained: None,
            order_event: None,
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
        match self.start(dst.host_range_mut(), DeviceSide::Source(src), offset)? {
            Some(in_flight) => self.finish(in_flight),
            None => Ok(()),
        }
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
        match self.start(src.host_range(), DeviceSide::Destination(dst), offset)? {
            Some(in_flight) => self.finish(in_flight),
            None => Ok(()),
        }
    }

    /// Checks a transfer and either completes it on the driver's path
    /// (`None`) or enqueues it (`Some`, to be finished).
    ///
    /// The caller holds the borrow that `host` came from until the transfer
    /// is finished; `host` is writable if `device` is the source.
    fn start(
        &mut self,
        host: HostRange,
        device: DeviceSide<'_>,
        offset: usize,
    ) -> Result<Option<InFlight>, Error> {
        self.check_usable()?;
        self.context.expect_same(device.memory().memory_context())?;
        device_range(device.memory(), offset, host.len)?;
        if host.len == 0 {
            return Ok(None);
        }
        if host.len < self.options.driver_path_below {
            // Not in the relaxed mode: the driver's synchronous copies go
            // through the legacy stream, which synchronizes with every
            // blocking stream, a capturing one too; the driver refuses them
            // during a global capture rather than break it.
            driver_path(host, device, offset)?;
            return Ok(None);
        }
        let _relaxed = RelaxedCapture::new();
        let direction = device.direction();
        Ok(Some(self.enqueue(direction, host, device.memory(), offset)))
    }

    /// Enqueues every chunk of a transfer; stops at the first error, which
    /// the returned transfer carries.
    fn enqueue(
        &mut self,
        direction: Direction,
        host: HostRange,
        device: &dyn DeviceMemory,
        offset: usize,
    ) -> InFlight {
        let chunk = self.options.chunk;
        let count = host.len.div_ceil(chunk);
        let stores = match direction {
            Direction::DeviceToHost => Stores::Streaming,
            Direction::HostToDevice => self.options.h2d_stores,
        };
        let workers = Arc::as_ptr(&self.workers);
        let chunks: Vec<Chunk> = (0..count)
            .map(|index| {
                let at = index * chunk;
                let len = chunk.min(host.len - at);
                let staging = self.buffers[(self.next + index) % self.buffers.len()]
                    .raw_ptr()
                    .expose_provenance();
                let args = match direction {
                    Direction::DeviceToHost => HostCopyArgs::new(host.addr + at, staging, len),
                    Direction::HostToDevice => HostCopyArgs::new(staging, host.addr + at, len),
                };
                Chunk::new(args, stores, workers)
            })
            .collect();
        let mut in_flight = InFlight {
            chunks: Chunks::new(chunks),
            events: Vec::new(),
            device: device.memory_in_use(),
            error: None,
        };
        for index in 0..count {
            let buffer = (self.next + index) % self.buffers.len();
            if let Err(error) = self.enqueue_chunk(
                direction,
                &in_flight.chunks,
                index,
                buffer,
                device,
                offset + index * self.options.chunk,
            ) {
                in_flight.error = Some(error);
                break;
            }
        }
        let used = count.min(self.streams.len());
        for index in 0..used {
            let stream = &self.streams[(self.next + index) % self.streams.len()];
            let event = match self.spare_events.pop() {
                Some(event) => Ok(event),
                None => Event::ordering(&self.context),
            };
            let recorded = event
                .map_err(Error::from)
                .and_then(|event| event.record(stream.as_stream()).map(|()| event));
            match recorded {
                Ok(event) => in_flight.events.push(event),
                Err(error) => {
                    in_flight.error.get_or_insert(error);
                    break;
                }
            }
        }
        self.next = (self.next + count) % self.buffers.len();
        in_flight
    }

    /// Queues one chunk on its buffer's stream: the driver's copy and the
    /// host function, in the direction's order.
    fn enqueue_chunk(
        &self,
        direction: Direction,
        chunks: &Chunks,
        index: usize,
        buffer: usize,
        device: &dyn DeviceMemory,
        device_offset: usize,
    ) -> Result<(), Error> {
        let stream = self.streams[buffer].as_stream();
        let staging = self.buffers[buffer].raw_ptr();
        let chunk = chunks.get(index);
        let len = chunk.len();
        if direction == Direction::DeviceToHost {
            // SAFETY: the staging buffer holds `chunk` bytes and is only
            // touched in this stream's order, and outlives the copy (freed
            // only after the stager's transfers are finished, or leaked).
            unsafe { stream.copy_device_to_host(staging, device, device_offset, len) }?;
        }
        let user_data = chunks.arm(index);
        // SAFETY: `run_chunk` with an armed chunk; the chunk array, the
        // workers, the staging buffer and the borrowed host range stay
        // alive until the chunk is settled (`finish`), which waits for a
        // running host function and abandons a pending one. The stager's
        // streams are its own: no one can capture them into a graph.
        if let Err(error) = unsafe { stream.launch_host_fn(run_chunk, user_data) } {
            chunk.disarm();
            return Err(error.into());
        }
        if direction == Direction::HostToDevice {
            // SAFETY: as above; the host function before it in stream order
            // has filled the staging buffer.
            unsafe { stream.copy_host_to_device(device, device_offset, staging, len) }?;
        }
        Ok(())
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
            .streams
            .iter()
            .map(|stream| stream.as_stream().synchronize())
            .find_map(Result::err);
    }

    /// Waits for a transfer, then settles its chunks; returns the first
    /// error. After an error the streams are drained; if they cannot be,
    /// the device allocation is kept for good.
    fn finish(&mut self, in_flight: InFlight) -> Result<(), Error> {
        let _relaxed = RelaxedCapture::new();
        let InFlight {
            chunks,
            events,
            device,
            error,
        } = in_flight;
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
            self.spare_events.extend(events);
        }
        chunks.settle_and_free();
        self.release(device);
        result
    }

    /// Lets go of a device allocation that queued copies used: dropped if
    /// the streams are drained, kept for good (and counted) if not.
    fn release(&self, device: DeviceInUse) {
        if self.undrained.is_some() {
            chunk::count_leaked_device_buffer();
            device.leak();
        }
    }
}

impl Drop for Stager {
    fn drop(&mut self) {
        // Every driver call of the teardown in the relaxed mode, the
        // streams and events too (dropped here, not after).
        let _relaxed = RelaxedCapture::new();
        // Borrowed transfers are finished (they borrow the stager), but a
        // pending transfer dropped unfinished may still be queued.
        self.drain();
        self.spare_events.clear();
        self.order_event = None;
        if self.undrained.is_some() {
            // A host function of a pending transfer dropped unfinished may
            // still be running with the workers: keep them too.
            core::mem::forget(Arc::clone(&self.workers));
            chunk::count_leaked_buffers(self.buffers.len());
        } else {
            for buffer in &mut self.buffers {
                // SAFETY: the streams drained just above: no queued work
                // touches the buffer. Dropped once, here.
                unsafe { ManuallyDrop::drop(buffer) };
            }
        }
        self.streams.clear();
    }
}
