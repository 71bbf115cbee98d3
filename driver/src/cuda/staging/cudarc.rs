//! cudarc's device memory in staged transfers (feature `cudarc`).
//!
//! A program that already uses [cudarc](https://docs.rs/cudarc) keeps its
//! `CudaSlice`s, views and streams: [`Context::from_cudarc`] gives the
//! stager the same primary context, and the `*_cudarc*` calls of
//! [`Stager`] take cudarc's memory ([`CudarcMemory`], [`CudarcMemoryMut`])
//! and a cudarc stream as they are, in safe code.
//!
//! ```no_run
//! use cudarc::driver::CudaContext;
//! use hostcopy_driver::cuda::{Context, staging::Stager};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let cuda = CudaContext::new(0)?;
//! let stream = cuda.new_stream()?;
//! let device = stream.clone_htod(&vec![1.5f32; 1 << 28])?; // 1 GiB
//! // ... kernels on `stream` write `device` ...
//! let mut stager = Stager::new(&Context::from_cudarc(&cuda)?)?;
//! let mut host = vec![0f32; 1 << 28];
//! // After the kernels queued on `stream`, and before whatever is queued next.
//! stager.cudarc_to_host(&mut host, &device, &stream)?;
//! # Ok(())
//! # }
//! ```
//!
//! # Order and lifetime
//!
//! Each call is ordered as cudarc orders its own copy of that memory on
//! `stream` (`CudaStream::memcpy_dtoh`, `memcpy_htod`), and after the
//! memory's own stream (the one it was allocated on) too:
//!
//! - before it reads the memory, `stream` waits for its last write that
//!   cudarc tracks (before it writes: for its last write and its last read),
//!   through cudarc's events (`DevicePtr::device_ptr`,
//!   `DevicePtrMut::device_ptr_mut`); then the stager's streams wait for
//!   `stream` and for the memory's own stream ([`Stager::wait_for`]). A
//!   kernel that wrote the data on `stream`, on the memory's stream or on
//!   another cudarc stream of the same `CudaContext` comes first.
//! - after it, cudarc records the memory's read (write) event on `stream`,
//!   so its later writers, readers and its release wait for it.
//!
//! cudarc tracks one read event per slice, which each reader records
//! again, and tracks nothing in a context with one stream or with event
//! tracking turned off (`CudaContext::disable_event_tracking`, an `unsafe`
//! call): there, as for cudarc's own copies, work on other streams is
//! ordered with `stream` by the caller.
//!
//! The calls block until the bytes have arrived, and they borrow the memory
//! until then: safe code cannot drop a `CudaSlice` (which frees it) while
//! the stager uses it. Every device copy runs on the stager's own streams
//! (a small upload from pageable memory too: one asynchronous copy on its
//! first stream), except a small download or a small upload from pinned
//! memory, which take the driver's synchronous path and have finished when
//! they return. If a transfer fails and the stager's streams
//! cannot be drained (queued copies may still run), `stream` and the
//! memory's stream are first made to wait for everything queued on them,
//! so that the read (write) event cudarc records, and with it the slice's
//! release, come after those copies. That ordering can itself be refused:
//! with a sticky error the driver then refuses every later call in the
//! context, the release included; for any other refusal (the driver out of
//! memory for an event) the call still returns the error, and the stager
//! refuses further work until its streams drain. (A
//! [`DeviceBuffer`](crate::cuda::DeviceBuffer) is kept allocated for good
//! in that case instead: the stager owns a share of it, but only borrows
//! cudarc's memory.) An error cudarc kept from an earlier call it could not
//! return from (a drop, a wait) is returned before anything is queued, as
//! cudarc's own copies return it. cudarc keeps one such error per
//! `CudaContext`, shared by its threads: a call of cudarc's on another
//! thread in between can take it first (the transfer then runs without
//! that wait, as cudarc's own copy would), or this call can return an
//! error another thread's work left.
//!
//! A call on a stream that is capturing a graph is refused
//! ([`Error::Capturing`]) before anything is queued. Capture a stream only
//! from the thread that uses it: cudarc's captures do not go through this
//! layer's capture lock, so a capture another thread begins on `stream`
//! during the call may take in the stager's streams (the transfer then
//! fails and that capture is invalidated) or the event cudarc records
//! after the transfer.
//!
//! Transfers that return at once ([`Stager::scope`]) take this layer's
//! [`DeviceBuffer`](crate::cuda::DeviceBuffer) and
//! [`DeviceView`](crate::cuda::DeviceView) only: cudarc's ordering is tied
//! to a guard that a scope's transfer would have to hold until it is
//! waited for.

use std::sync::Arc;

use ::cudarc::driver::{CudaContext, CudaSlice, CudaStream, CudaView, CudaViewMut};

use super::driver_path::DeviceSide;
use super::{Block, Blocks, Direction, Stager, plan};
use crate::cuda::device::{DeviceInUse, DeviceMemory, driver_knows_host_memory, sealed};
use crate::cuda::ffi::CUdeviceptr;
use crate::cuda::{Context, DriverError, Error, Event, StreamRef};
use crate::{HostMemory, HostMemoryMut, HostRange};

/// cudarc's device memory a transfer reads: `CudaSlice<T>`, `CudaView<T>`
/// and `CudaViewMut<T>`. Sealed: their pointer, length and events come from
/// cudarc's safe constructors, which this layer trusts.
pub trait CudarcMemory<T>: private::Read<T> {}

/// cudarc's device memory a transfer writes: `CudaSlice<T>` and
/// `CudaViewMut<T>`. Sealed as [`CudarcMemory`] is.
pub trait CudarcMemoryMut<T>: private::Write<T> {}

mod private {
    use ::cudarc::driver::{DevicePtr, DevicePtrMut};

    pub trait Read<T>: DevicePtr<T> {}
    pub trait Write<T>: DevicePtrMut<T> {}
}

impl<T> private::Read<T> for CudaSlice<T> {}
impl<T> private::Read<T> for CudaView<'_, T> {}
impl<T> private::Read<T> for CudaViewMut<'_, T> {}
impl<T> private::Write<T> for CudaSlice<T> {}
impl<T> private::Write<T> for CudaViewMut<'_, T> {}
impl<T> CudarcMemory<T> for CudaSlice<T> {}
impl<T> CudarcMemory<T> for CudaView<'_, T> {}
impl<T> CudarcMemory<T> for CudaViewMut<'_, T> {}
impl<T> CudarcMemoryMut<T> for CudaSlice<T> {}
impl<T> CudarcMemoryMut<T> for CudaViewMut<'_, T> {}

/// A cudarc result as this layer's error.
fn cudarc_result<T>(result: Result<T, ::cudarc::driver::DriverError>) -> Result<T, Error> {
    result.map_err(|error| DriverError::from_code(error.0 as u32).into())
}

/// cudarc's memory for the length of one blocking call, which borrows it:
/// nothing here can keep it allocated longer, and nothing needs to.
struct Borrowed {
    context: Context,
    ptr: CUdeviceptr,
    len: usize,
}

impl DeviceMemory for Borrowed {}

impl sealed::Sealed for Borrowed {
    fn memory_context(&self) -> &Context {
        &self.context
    }
    fn memory_ptr(&self) -> CUdeviceptr {
        self.ptr
    }
    fn memory_len(&self) -> usize {
        self.len
    }
    fn memory_in_use(&self) -> DeviceInUse {
        DeviceInUse::borrowed()
    }
}

impl Context {
    /// This layer's handle on the primary context that a cudarc context
    /// retains (`CudaContext::new`): one context, shared. Refused with
    /// [`Error::NotPrimaryContext`] for any other context of cudarc's
    /// (`CudaContext::new_non_primary`, green contexts): this layer works
    /// in primary contexts.
    pub fn from_cudarc(context: &CudaContext) -> Result<Context, Error> {
        let not_primary = Error::NotPrimaryContext {
            device: context.ordinal(),
        };
        if !context.is_primary() {
            return Err(not_primary);
        }
        let primary = Context::primary(context.ordinal())?;
        if primary.raw().addr() != context.cu_ctx().addr() {
            return Err(not_primary);
        }
        Ok(primary)
    }
}

impl Stager {
    /// Copies `dst.len()` bytes from the start of cudarc's device memory
    /// `src` into `dst`, in stream order with `stream` (see the [module
    /// documentation](self)), and waits for them.
    ///
    /// Refused before anything is queued: `stream` or `src` of another
    /// context ([`Error::ContextMismatch`], [`Error::NotPrimaryContext`]),
    /// `dst` longer than `src` ([`Error::DeviceOutOfBounds`]), a capturing
    /// stream ([`Error::Capturing`]).
    pub fn cudarc_to_host<T, D, S>(
        &mut self,
        dst: &mut D,
        src: &S,
        stream: &CudaStream,
    ) -> Result<(), Error>
    where
        D: HostMemoryMut + ?Sized,
        S: CudarcMemory<T>,
    {
        let host = dst.host_range_mut();
        self.read_cudarc(host, src, Blocks::One { offset: 0 }, stream)
    }

    /// Copies `src` to the start of cudarc's device memory `dst`, in stream
    /// order with `stream`, and waits for it. Refused as
    /// [`cudarc_to_host`](Self::cudarc_to_host) is.
    pub fn host_to_cudarc<T, D, S>(
        &mut self,
        dst: &mut D,
        src: &S,
        stream: &CudaStream,
    ) -> Result<(), Error>
    where
        D: CudarcMemoryMut<T>,
        S: HostMemory + ?Sized,
    {
        let host = src.host_range();
        self.write_cudarc(host, dst, Blocks::One { offset: 0 }, stream)
    }

    /// Copies each block from cudarc's device memory `src` into `dst` (a
    /// batch; offsets and lengths in bytes), in stream order with `stream`,
    /// and waits for them. Checked as
    /// [`device_to_host_blocks`](Self::device_to_host_blocks) checks a
    /// batch, and refused as [`cudarc_to_host`](Self::cudarc_to_host) is.
    pub fn cudarc_to_host_blocks<T, D, S>(
        &mut self,
        dst: &mut D,
        src: &S,
        blocks: &[Block],
        stream: &CudaStream,
    ) -> Result<(), Error>
    where
        D: HostMemoryMut + ?Sized,
        S: CudarcMemory<T>,
    {
        let host = dst.host_range_mut();
        self.read_cudarc(host, src, Blocks::Many(blocks), stream)
    }

    /// Copies each block from `src` into cudarc's device memory `dst` (a
    /// batch; offsets and lengths in bytes), in stream order with `stream`,
    /// and waits for them. Checked as
    /// [`host_to_device_blocks`](Self::host_to_device_blocks) checks a
    /// batch, and refused as [`cudarc_to_host`](Self::cudarc_to_host) is.
    pub fn host_to_cudarc_blocks<T, D, S>(
        &mut self,
        dst: &mut D,
        src: &S,
        blocks: &[Block],
        stream: &CudaStream,
    ) -> Result<(), Error>
    where
        D: CudarcMemoryMut<T>,
        S: HostMemory + ?Sized,
    {
        let host = src.host_range();
        self.write_cudarc(host, dst, Blocks::Many(blocks), stream)
    }

    /// A transfer that reads `src`, between cudarc's wait for the memory's
    /// last writer and its record of this read.
    fn read_cudarc<T, S: CudarcMemory<T>>(
        &mut self,
        host: HostRange,
        src: &S,
        blocks: Blocks<'_>,
        stream: &CudaStream,
    ) -> Result<(), Error> {
        let own = src.stream();
        let len = src.num_bytes();
        if !self.check_cudarc(Direction::DeviceToHost, host, len, blocks, stream, own)? {
            return Ok(());
        }
        // `stream` waits for the memory's last writer now; `read` records
        // this read on `stream` when dropped, after `in_order` returns.
        let (ptr, read) = src.device_ptr(stream);
        let result = match cudarc_result(stream.context().check_err()) {
            Ok(()) => self.in_order(Direction::DeviceToHost, host, ptr, len, blocks, stream, own),
            // cudarc could not make `stream` wait for the writer.
            Err(error) => Err(error),
        };
        drop(read);
        result
    }

    /// A transfer that writes `dst`, between cudarc's wait for the
    /// memory's last reader and writer and its record of this write.
    fn write_cudarc<T, D: CudarcMemoryMut<T>>(
        &mut self,
        host: HostRange,
        dst: &mut D,
        blocks: Blocks<'_>,
        stream: &CudaStream,
    ) -> Result<(), Error> {
        let own = Arc::clone(dst.stream());
        let len = dst.num_bytes();
        if !self.check_cudarc(Direction::HostToDevice, host, len, blocks, stream, &own)? {
            return Ok(());
        }
        let (ptr, written) = dst.device_ptr_mut(stream);
        let result = match cudarc_result(stream.context().check_err()) {
            Ok(()) => self.in_order(
                Direction::HostToDevice,
                host,
                ptr,
                len,
                blocks,
                stream,
                &own,
            ),
            // cudarc could not make `stream` wait for the readers and writer.
            Err(error) => Err(error),
        };
        drop(written);
        result
    }

    /// Everything checked before cudarc or the stager does anything:
    /// `false` if there is nothing to copy.
    fn check_cudarc(
        &self,
        direction: Direction,
        host: HostRange,
        len: usize,
        blocks: Blocks<'_>,
        stream: &CudaStream,
        own: &CudaStream,
    ) -> Result<bool, Error> {
        self.expect_cudarc(stream.context())?;
        self.expect_cudarc(own.context())?;
        // An error cudarc kept from a call that could not return it (a
        // drop, a wait): returned here, as cudarc's own copies return it,
        // rather than left to make the waits below fail unseen.
        cudarc_result(stream.context().bind_to_thread())?;
        cudarc_result(own.context().bind_to_thread())?;
        let total = match blocks {
            Blocks::One { offset } => {
                if offset.checked_add(host.len).is_none_or(|end| end > len) {
                    return Err(Error::DeviceOutOfBounds {
                        offset,
                        nbytes: host.len,
                        len,
                    });
                }
                host.len
            }
            Blocks::Many(blocks) => {
                plan::check_blocks(blocks, direction, host.len, len)?;
                blocks.iter().map(|block| block.len).sum()
            }
        };
        if total == 0 {
            return Ok(false);
        }
        for stream in [stream, own] {
            if self.cudarc_stream(stream).is_capturing()? {
                return Err(Error::Capturing);
            }
        }
        Ok(true)
    }

    /// The transfer on `len` bytes at `ptr`, after the work queued on
    /// `stream` and on the memory's own stream `own`; leaves both ordered
    /// after whatever of it the stager's streams may still run.
    #[allow(clippy::too_many_arguments)]
    fn in_order(
        &mut self,
        direction: Direction,
        host: HostRange,
        ptr: CUdeviceptr,
        len: usize,
        blocks: Blocks<'_>,
        stream: &CudaStream,
        own: &CudaStream,
    ) -> Result<(), Error> {
        let memory = Borrowed {
            context: self.context.clone(),
            ptr,
            len,
        };
        let context = self.context.clone();
        let separate = own.cu_stream() != stream.cu_stream();
        // SAFETY: both are live streams (borrowed for this call) of the
        // stager's context (checked by `check_cudarc`).
        let (stream, own) = unsafe {
            (
                StreamRef::from_raw(&context, stream.cu_stream().cast()),
                StreamRef::from_raw(&context, own.cu_stream().cast()),
            )
        };
        self.wait_for(stream)?;
        if separate {
            self.wait_for(own)?;
        }
        let device = match direction {
            Direction::DeviceToHost => DeviceSide::Source(&memory),
            Direction::HostToDevice => DeviceSide::Destination(&memory),
        };
        let small =
            matches!(blocks, Blocks::One { .. }) && host.len < self.options.driver_path_below;
        let result = match direction {
            // From pageable memory, which the driver reads within the call.
            Direction::HostToDevice if small && !driver_knows_host_memory(host.addr) => {
                self.small_upload(host, ptr)
            }
            // A small download, or a small upload from pinned memory, takes
            // the driver's synchronous path (finished when it returns),
            // which waits for cudarc's streams on the host first.
            _ => self.run(host, device, blocks),
        };
        if self.undrained.is_some() {
            self.order_after_queued(stream);
            if separate {
                self.order_after_queued(own);
            }
        }
        result
    }

    /// A single upload below the crossover from pageable memory: one
    /// asynchronous driver copy on the stager's first stream (which waits
    /// for `stream` and the memory's stream) and a wait for that stream,
    /// instead of the driver's synchronous path, whose legacy stream
    /// cudarc's streams would not be ordered after if the wait for it
    /// failed. The driver copies the pageable source into its own staging
    /// memory within the call, so nothing reads it after the call. A failed
    /// wait drains the streams as after a staged transfer.
    fn small_upload(&mut self, host: HostRange, device: CUdeviceptr) -> Result<(), Error> {
        let copied = {
            let _relaxed = crate::cuda::capture::RelaxedCapture::new();
            let lane = self.lanes.streams[0].as_stream();
            let src = core::ptr::with_exposed_provenance::<u8>(host.addr);
            // SAFETY: `device` starts `host.len` bytes of cudarc's memory
            // of the stager's context (bounds checked), which the caller
            // borrows for the call; `src` is the caller's pageable host
            // memory, borrowed for the call, which the driver has read when
            // the call returns. The device side has been written when the
            // stream is synchronized below; if that fails, the stream is
            // drained, or the stager refuses work and cudarc's streams are
            // ordered after it (`in_order`).
            let queued = unsafe { lane.copy_host_to_device_raw(device, src, host.len) };
            queued.and_then(|()| lane.synchronize())
        };
        match copied {
            Ok(()) => {
                // Every stream waited for the order events so far, and the
                // first has now run past them.
                self.order_events_complete(self.next_order);
                Ok(())
            }
            Err(error) => {
                self.drain();
                Err(error.into())
            }
        }
    }

    /// Makes `stream` wait for everything queued on the stager's streams:
    /// after a transfer that could not be drained, so that cudarc's next
    /// use of the memory (its release too) comes after the copies the
    /// driver may still run. Failures are not reported: the transfer's own
    /// error is, and a context that refuses these calls refuses that next
    /// use too (a sticky error).
    fn order_after_queued(&self, stream: StreamRef<'_>) {
        let _relaxed = crate::cuda::capture::RelaxedCapture::new();
        for own in &self.lanes.streams {
            if let Ok(event) = Event::ordering(&self.context)
                && event.record(own.as_stream()).is_ok()
            {
                let _ = stream.wait_event(&event);
            }
        }
    }

    /// A cudarc stream of the stager's context, for a query.
    fn cudarc_stream<'a>(&'a self, stream: &CudaStream) -> StreamRef<'a> {
        // SAFETY: a live stream (borrowed by our caller for longer than the
        // query) of the stager's context (checked before).
        unsafe { StreamRef::from_raw(&self.context, stream.cu_stream().cast()) }
    }

    /// `Ok` if `context` is the stager's context.
    fn expect_cudarc(&self, context: &CudaContext) -> Result<(), Error> {
        if context.cu_ctx().addr() == self.context.raw().addr() {
            Ok(())
        } else if context.ordinal() == self.context.ordinal() {
            Err(Error::NotPrimaryContext {
                device: context.ordinal(),
            })
        } else {
            Err(Error::ContextMismatch {
                expected: self.context.ordinal(),
                found: context.ordinal(),
            })
        }
    }
}
