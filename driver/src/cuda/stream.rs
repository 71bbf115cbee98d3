//! Streams: the owned [`Stream`] and the borrowed [`StreamRef`] that every
//! launch and copy goes through. Launch forms add their methods to
//! `StreamRef` in their own modules (`event.rs`, `graph.rs`, `launch.rs`,
//! `scope.rs`), so this module depends on none of them.

use core::ffi::c_void;
use core::fmt;

use hostcopy_core::HostFn;

use super::capture::{self, capture_graph};
use super::context::Context;
use super::device::{DeviceMemory, device_range};
use super::error::{DriverError, Error};
use super::ffi::{self, CUcontext, CUdeviceptr, CUstream};

/// `CUDA_ERROR_NOT_READY`: what a query returns for unfinished work.
pub(crate) const CUDA_ERROR_NOT_READY: u32 = 600;

/// A stream this layer created (non-blocking) in a context it keeps alive,
/// destroyed on drop.
///
/// Launches and copies are methods of [`StreamRef`], the borrowed form that
/// also wraps streams other runtimes own: call [`as_stream`](Self::as_stream)
/// (as `OwnedFd::as_fd` gives a `BorrowedFd`).
pub struct Stream {
    context: Context,
    raw: CUstream,
}

// SAFETY: stream handles may be used from any thread; every call binds the
// stream's context first.
unsafe impl Send for Stream {}
// SAFETY: as above; the driver serializes work submitted to one stream, and
// this layer serializes capture transitions (`capture.rs`).
unsafe impl Sync for Stream {}

impl Stream {
    /// A non-blocking stream in `context`.
    pub fn new(context: &Context) -> Result<Stream, DriverError> {
        context.bind()?;
        let mut raw: CUstream = core::ptr::null_mut();
        // SAFETY: writes one handle, destroyed in `Drop`.
        unsafe { ffi::cuStreamCreate(&mut raw, ffi::CU_STREAM_NON_BLOCKING) }.ok()?;
        Ok(Stream {
            context: context.clone(),
            raw,
        })
    }

    /// The stream, borrowed: what launches and copies go through.
    pub fn as_stream(&self) -> StreamRef<'_> {
        StreamRef {
            context: &self.context,
            raw: self.raw,
        }
    }

    /// The context the stream belongs to.
    pub fn context(&self) -> &Context {
        &self.context
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        let _ = self.context.bind();
        // SAFETY: destroys the handle `new` created. Work still queued
        // finishes first (the driver defers the release).
        let _ = unsafe { ffi::cuStreamDestroy_v2(self.raw) };
    }
}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stream").field("raw", &self.raw).finish()
    }
}

/// A stream borrowed for `'a`, with the context it belongs to: one this
/// layer created, or a raw `CUstream` another runtime owns.
#[derive(Clone, Copy)]
pub struct StreamRef<'a> {
    context: &'a Context,
    raw: CUstream,
}

// SAFETY: stream handles may be used from any thread; every call binds the
// context first.
unsafe impl Send for StreamRef<'_> {}
// SAFETY: as above.
unsafe impl Sync for StreamRef<'_> {}

impl<'a> StreamRef<'a> {
    /// Wraps a stream another runtime owns (null is the legacy default
    /// stream of `context`).
    ///
    /// # Safety
    ///
    /// For all of `'a`: `raw` stays a valid stream of `context`, and its
    /// capture state changes only through this layer (no other code begins
    /// or ends a capture on it, or joins it to one through an event wait):
    /// the layer's capture checks (`capture.rs`) hold only for transitions
    /// they serialize.
    pub unsafe fn from_raw(context: &'a Context, raw: CUstream) -> StreamRef<'a> {
        StreamRef { context, raw }
    }

    /// Whether the stream is capturing a graph (an answer that may change
    /// as soon as this returns; launches check it themselves, atomically).
    pub fn is_capturing(&self) -> Result<bool, DriverError> {
        let locked = capture::lock();
        Ok(capture_graph(&locked, self.context, self.raw)?.is_some())
    }

    /// Whether all work queued on the stream has finished, without waiting.
    pub fn query(&self) -> Result<bool, DriverError> {
        self.context.bind()?;
        // SAFETY: the stream is alive for 'a.
        let result = unsafe { ffi::cuStreamQuery(self.raw) };
        match result.ok() {
            Ok(()) => Ok(true),
            Err(error) if error.code() == CUDA_ERROR_NOT_READY => Ok(false),
            Err(error) => Err(error),
        }
    }

    /// Whether the driver says the stream belongs to the context it was
    /// wrapped with: a check of [`from_raw`](Self::from_raw)'s first promise
    /// (the legacy default stream belongs to every context).
    pub fn belongs_to_its_context(&self) -> Result<bool, DriverError> {
        self.context.bind()?;
        let mut owner: CUcontext = core::ptr::null_mut();
        // SAFETY: writes one handle; the stream is alive for 'a.
        unsafe { ffi::cuStreamGetCtx(self.raw, &mut owner) }.ok()?;
        Ok(self.raw.is_null() || owner == self.context.raw())
    }

    /// The raw handle.
    pub fn raw(&self) -> CUstream {
        self.raw
    }

    /// The context the stream belongs to.
    pub fn context(&self) -> &'a Context {
        self.context
    }

    /// Waits until all work queued on the stream has finished.
    ///
    /// After a context error this returns the error at once, possibly while a
    /// host function of the stream is still running: a borrowed record must
    /// not be freed on the strength of it. Scoped launches wait for their own
    /// host functions.
    pub fn synchronize(&self) -> Result<(), DriverError> {
        self.context.bind()?;
        // SAFETY: the stream is alive for 'a.
        unsafe { ffi::cuStreamSynchronize(self.raw) }.ok()
    }

    /// Launches any host function with any `user_data`, in stream order.
    ///
    /// # Safety
    ///
    /// Whatever `f` does with `user_data` must be valid whenever the driver
    /// runs it: for `hostcopy_fn`, the record and both of its ranges stay
    /// alive and unmoved until the host function has run (until the graph and
    /// its executables are destroyed, if the stream is capturing). After a
    /// context error the driver may skip the function, or still be running
    /// it when [`synchronize`](Self::synchronize) returns.
    pub unsafe fn launch_host_fn(
        &self,
        f: HostFn,
        user_data: *mut c_void,
    ) -> Result<(), DriverError> {
        let _locked = capture::lock();
        self.context.bind()?;
        // SAFETY: forwarded to our caller.
        unsafe { ffi::cuLaunchHostFunc(self.raw, Some(f), user_data) }.ok()
    }

    /// Queues a copy of `nbytes` bytes from `offset` of `src` to host
    /// address `dst`. Refused with [`Error::ContextMismatch`] when `src`
    /// belongs to another context than the stream.
    ///
    /// # Safety
    ///
    /// `dst` is writable host memory for `nbytes` bytes (pinned for an
    /// asynchronous copy; the driver stages pageable memory and blocks) that
    /// nothing else touches until the copy has finished in stream order, and
    /// `src` outlives the copy.
    pub unsafe fn copy_device_to_host<S: DeviceMemory + ?Sized>(
        &self,
        dst: *mut u8,
        src: &S,
        offset: usize,
        nbytes: usize,
    ) -> Result<(), Error> {
        self.context.expect_same(src.memory_context())?;
        let src = device_range(src, offset, nbytes)?;
        let _locked = capture::lock();
        self.context.bind()?;
        // SAFETY: device range checked; the host side is our caller's.
        unsafe { ffi::cuMemcpyDtoHAsync_v2(dst.cast(), src, nbytes, self.raw) }.ok()?;
        Ok(())
    }

    /// Queues a copy of `nbytes` bytes from host address `src` to `offset`
    /// of `dst`. Refused with [`Error::ContextMismatch`] when `dst` belongs
    /// to another context than the stream.
    ///
    /// # Safety
    ///
    /// `src` is readable host memory for `nbytes` bytes that nothing writes
    /// until the copy has finished in stream order, and `dst` outlives it.
    pub unsafe fn copy_host_to_device<D: DeviceMemory + ?Sized>(
        &self,
        dst: &D,
        offset: usize,
        src: *const u8,
        nbytes: usize,
    ) -> Result<(), Error> {
        self.context.expect_same(dst.memory_context())?;
        let dst = device_range(dst, offset, nbytes)?;
        let _locked = capture::lock();
        self.context.bind()?;
        // SAFETY: device range checked; the host side is our caller's.
        unsafe { ffi::cuMemcpyHtoDAsync_v2(dst, src.cast::<c_void>(), nbytes, self.raw) }.ok()?;
        Ok(())
    }

    /// Queues every copy `i` of `sizes[i]` bytes from `srcs[i]` to
    /// `dsts[i]` in one driver call (`cuMemcpyBatchAsync`, CUDA 12.8 on),
    /// in stream order, sources read in stream order: each copy has one
    /// device side and one host side, host addresses passed as
    /// `CUdeviceptr` values (the pointer's address with its provenance
    /// exposed, as `ptr as u64` or `expose_provenance` does).
    ///
    /// Returns `Ok(true)` once queued (at once for an empty batch, with no
    /// driver call), and `Ok(false)`, with nothing queued, where the driver
    /// has no batch copy: it lacks the entry point, or answers
    /// `CUDA_ERROR_NOT_SUPPORTED`. Any other code is an error, and the
    /// driver queued none of the copies (the legacy default stream, for
    /// one, is refused with `CUDA_ERROR_INVALID_VALUE`). The driver reads
    /// the slices only during the call; they are `&mut` because its
    /// prototype takes non-const arrays.
    ///
    /// # Panics
    ///
    /// If the three slices differ in length.
    ///
    /// # Safety
    ///
    /// Nothing is checked here: neither the ranges, nor their context,
    /// nor whether the stream captures a graph. For every `i`: one side of
    /// copy `i` is device memory of the stream's context and the other
    /// host memory (pinned, or pageable, which the driver stages itself);
    /// `dsts[i]` is writable and `srcs[i]` readable for `sizes[i]` bytes,
    /// and stay so (the destination untouched, the source unchanged) until
    /// the copy has finished in stream order, or, on a stream capturing a
    /// graph (where the copies become the graph's nodes), until the graph
    /// and every executable made from it are destroyed; no destination
    /// overlaps another destination or any source (the copies of a batch
    /// run in no set order).
    pub unsafe fn copy_batch(
        &self,
        dsts: &mut [CUdeviceptr],
        srcs: &mut [CUdeviceptr],
        sizes: &mut [usize],
    ) -> Result<bool, DriverError> {
        assert!(
            dsts.len() == srcs.len() && srcs.len() == sizes.len(),
            "copy_batch: {} destinations, {} sources, {} sizes",
            dsts.len(),
            srcs.len(),
            sizes.len()
        );
        if dsts.is_empty() {
            return Ok(true);
        }
        // One entry for the whole batch: sources read in stream order, no
        // location hints, no flags.
        let mut attrs = ffi::CUmemcpyAttributes {
            srcAccessOrder: ffi::CU_MEMCPY_SRC_ACCESS_ORDER_STREAM,
            ..Default::default()
        };
        let mut attr_idxs = [0usize];
        let _locked = capture::lock();
        self.context.bind()?;
        // SAFETY: the three arrays hold `dsts.len()` elements and the
        // attributes one (with its index), all alive for the call; the
        // copies' ranges are our caller's; the stream is alive for 'a.
        let result = unsafe {
            ffi::memcpy_batch_async(
                dsts.as_mut_ptr(),
                srcs.as_mut_ptr(),
                sizes.as_mut_ptr(),
                dsts.len(),
                &mut attrs,
                attr_idxs.as_mut_ptr(),
                1,
                self.raw,
            )
        };
        let Some(result) = result else {
            return Ok(false);
        };
        match result.ok() {
            Ok(()) => Ok(true),
            Err(error) if error.code() == ffi::CUDA_ERROR_NOT_SUPPORTED => Ok(false),
            Err(error) => Err(error),
        }
    }
}

impl StreamRef<'_> {
    /// Queues a copy of `nbytes` bytes from device address `src` to host
    /// address `dst`, unchecked: for the staging layer, whose plans are
    /// checked against the memory before anything is queued.
    ///
    /// # Safety
    ///
    /// `src` lies in live device memory of the stream's context that
    /// outlives the copy; `dst` is pinned host memory, writable for
    /// `nbytes` bytes, that nothing else touches until the copy has
    /// finished in stream order.
    pub(crate) unsafe fn copy_device_to_host_raw(
        &self,
        dst: *mut u8,
        src: CUdeviceptr,
        nbytes: usize,
    ) -> Result<(), DriverError> {
        let _locked = capture::lock();
        self.context.bind()?;
        // SAFETY: forwarded to our caller.
        unsafe { ffi::cuMemcpyDtoHAsync_v2(dst.cast(), src, nbytes, self.raw) }.ok()
    }

    /// Queues a copy of `nbytes` bytes from host address `src` to device
    /// address `dst`, unchecked (see
    /// [`copy_device_to_host_raw`](Self::copy_device_to_host_raw)).
    ///
    /// # Safety
    ///
    /// `dst` lies in live device memory of the stream's context that
    /// outlives the copy, and nothing else touches it meanwhile; `src` is
    /// host memory, readable for `nbytes` bytes, that nothing writes until
    /// the copy has finished in stream order (pageable memory the driver
    /// copies within the call).
    pub(crate) unsafe fn copy_host_to_device_raw(
        &self,
        dst: CUdeviceptr,
        src: *const u8,
        nbytes: usize,
    ) -> Result<(), DriverError> {
        let _locked = capture::lock();
        self.context.bind()?;
        // SAFETY: forwarded to our caller.
        unsafe { ffi::cuMemcpyHtoDAsync_v2(dst, src.cast::<c_void>(), nbytes, self.raw) }.ok()
    }

    /// Queues a wait: the stream's later work starts once the u32 at `addr`
    /// has reached `value`, compared cyclically, so that a counter may wrap
    /// around: `(int32_t)(*addr - value) >= 0`. Other streams are not held
    /// up.
    /// For the staging layer's own streams, which never capture: on a
    /// capturing stream the driver refuses the wait (and the capture is
    /// invalidated).
    ///
    /// # Safety
    ///
    /// `addr` is a device-visible address of a 4-byte aligned u32 (pinned
    /// host memory through [`PinnedBuffer::device_ptr`](super::PinnedBuffer::device_ptr),
    /// or device memory) that stays allocated until the wait has passed or
    /// the stream has been drained (synchronized, or its context destroyed).
    pub(crate) unsafe fn wait_value32_geq(
        &self,
        addr: CUdeviceptr,
        value: u32,
    ) -> Result<(), DriverError> {
        let _locked = capture::lock();
        self.context.bind()?;
        // SAFETY: the stream is alive for the borrow; the driver reads
        // `addr` until the wait passes, which our caller keeps allocated
        // that long.
        unsafe { ffi::cuStreamWaitValue32_v2(self.raw, addr, value, ffi::CU_STREAM_WAIT_VALUE_GEQ) }
            .ok()
    }
}

impl fmt::Debug for StreamRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamRef").field("raw", &self.raw).finish()
    }
}
