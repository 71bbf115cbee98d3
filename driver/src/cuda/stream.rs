//! Streams, and launching `hostcopy_fn` on them: raw, owned and (in
//! `scope.rs`) scoped.

use core::ffi::c_void;
use core::fmt;
use core::marker::PhantomData;
use core::ptr::NonNull;

use hostcopy_core::{HostFn, hostcopy_fn};

use super::device::DeviceBuffer;
use super::error::{DriverError, Error};
use super::event::Event;
use super::ffi::{self, CUgraph, CUstream, CUstreamCaptureMode};
use super::graph::{self, Graph};
use super::host_fns;
use super::scope::{self, LaunchScope};
use crate::owned::{Slot, SlotSource};
use crate::{Record, RecordPool};

/// A stream this layer created (non-blocking), destroyed on drop.
///
/// Launches and copies are methods of [`StreamRef`], the borrowed form that
/// also wraps streams other runtimes own: call [`handle`](Self::handle).
pub struct Stream {
    raw: CUstream,
}

// SAFETY: stream handles may be used from any thread.
unsafe impl Send for Stream {}
// SAFETY: as above; the driver serializes work submitted to one stream.
unsafe impl Sync for Stream {}

impl Stream {
    /// A non-blocking stream in the context current on this thread.
    pub fn new() -> Result<Stream, DriverError> {
        let mut raw: CUstream = core::ptr::null_mut();
        // SAFETY: writes one handle, destroyed in `Drop`.
        unsafe { ffi::cuStreamCreate(&mut raw, ffi::CU_STREAM_NON_BLOCKING) }.ok()?;
        Ok(Stream { raw })
    }

    /// The stream, borrowed: what launches and copies go through.
    pub fn handle(&self) -> StreamRef<'_> {
        StreamRef {
            raw: self.raw,
            _stream: PhantomData,
        }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
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

/// How a stream capture treats potentially unsafe calls from other threads
/// (`CUstreamCaptureMode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaptureMode {
    /// Unsafe calls are refused on every thread while any global capture runs.
    Global,
    /// Unsafe calls are refused on the capturing thread only.
    ThreadLocal,
    /// Nothing is refused.
    Relaxed,
}

/// A stream borrowed for `'a`: one this layer created, or a raw `CUstream`
/// another runtime owns.
#[derive(Clone, Copy)]
pub struct StreamRef<'a> {
    raw: CUstream,
    _stream: PhantomData<&'a Stream>,
}

// SAFETY: stream handles may be used from any thread.
unsafe impl Send for StreamRef<'_> {}
// SAFETY: as above.
unsafe impl Sync for StreamRef<'_> {}

impl<'a> StreamRef<'a> {
    /// Wraps a stream another runtime owns (null is the legacy default stream).
    ///
    /// # Safety
    ///
    /// `raw` stays a valid stream for `'a`, and its context is current on
    /// every thread that uses the wrapper.
    pub unsafe fn from_raw(raw: CUstream) -> StreamRef<'a> {
        StreamRef {
            raw,
            _stream: PhantomData,
        }
    }

    /// The raw handle.
    pub fn raw(&self) -> CUstream {
        self.raw
    }

    /// Waits until all work queued on the stream has finished.
    ///
    /// After a context error this returns the error at once, possibly while a
    /// host function of the stream is still running: a borrowed record must
    /// not be freed on the strength of it. Scoped launches wait for their own
    /// host functions.
    pub fn synchronize(&self) -> Result<(), DriverError> {
        // SAFETY: the stream is alive for 'a.
        unsafe { ffi::cuStreamSynchronize(self.raw) }.ok()
    }

    /// Makes later work on this stream wait for `event`'s last record.
    pub fn wait_event(&self, event: &Event) -> Result<(), DriverError> {
        // SAFETY: both handles are alive.
        unsafe { ffi::cuStreamWaitEvent(self.raw, event.raw(), 0) }.ok()
    }

    /// Starts capturing the stream's work into a graph.
    pub fn begin_capture(&self, mode: CaptureMode) -> Result<(), DriverError> {
        let mode = match mode {
            CaptureMode::Global => CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
            CaptureMode::ThreadLocal => CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            CaptureMode::Relaxed => CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
        };
        // SAFETY: the stream is alive.
        unsafe { ffi::cuStreamBeginCapture_v2(self.raw, mode) }.ok()
    }

    /// Ends the capture: the graph of everything launched since it began,
    /// owned records included.
    pub fn end_capture(&self) -> Result<Graph, DriverError> {
        let mut raw: CUgraph = core::ptr::null_mut();
        // SAFETY: writes one graph handle, which the returned `Graph` owns.
        unsafe { ffi::cuStreamEndCapture(self.raw, &mut raw) }.ok()?;
        // SAFETY: a graph the driver just made for us.
        Ok(unsafe { Graph::from_raw(raw) })
    }

    /// Whether the stream is capturing a graph.
    pub fn is_capturing(&self) -> Result<bool, DriverError> {
        Ok(self.capture_graph()?.is_some())
    }

    /// The graph being captured, if the stream is capturing.
    pub(crate) fn capture_graph(&self) -> Result<Option<CUgraph>, DriverError> {
        let mut status = ffi::CU_STREAM_CAPTURE_STATUS_NONE;
        let mut id = 0u64;
        let mut graph: CUgraph = core::ptr::null_mut();
        // SAFETY: writes status, id and graph; the dependency outputs are
        // optional and left null.
        unsafe {
            ffi::cuStreamGetCaptureInfo_v2(
                self.raw,
                &mut status,
                &mut id,
                &mut graph,
                core::ptr::null_mut(),
                core::ptr::null_mut(),
            )
        }
        .ok()?;
        let active = status == ffi::CU_STREAM_CAPTURE_STATUS_ACTIVE && !graph.is_null();
        Ok(active.then_some(graph))
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
        // SAFETY: forwarded to our caller.
        unsafe { ffi::cuLaunchHostFunc(self.raw, Some(f), user_data) }.ok()
    }

    /// Launches a copy of `record`, which this layer owns until the host
    /// function has run and then frees. If the stream is capturing, the copy
    /// belongs to the captured graph instead, and is freed with it.
    ///
    /// If the context fails before the host function runs, the driver skips
    /// it and the copy stays allocated (see
    /// [`owned_record_counts`](crate::owned_record_counts)).
    #[cfg(feature = "alloc")]
    pub fn launch_owned(&self, record: Record<'static>) -> Result<(), Error> {
        self.launch_owned_from(SlotSource::Heap, record)
    }

    /// [`launch_owned`](Self::launch_owned) with the copy in a slot of
    /// `pool`: no allocation. [`Error::Pool`] when every slot is held.
    pub fn launch_owned_in<const N: usize>(
        &self,
        pool: &'static RecordPool<N>,
        record: Record<'static>,
    ) -> Result<(), Error> {
        self.launch_owned_from(SlotSource::Pool(pool), record)
    }

    fn launch_owned_from(&self, source: SlotSource, record: Record<'static>) -> Result<(), Error> {
        let capture = self.capture_graph()?;
        let slot = source.take(record.args())?;
        // SAFETY: `slot` is held and ours; the `'static` record's ranges
        // stay valid for as long as any host function may run it.
        unsafe { self.launch_slot(slot, capture) }
    }

    /// Launches an owned slot: to run once and be freed, or, while
    /// capturing, to become a node of the graph that then owns it.
    ///
    /// # Safety
    ///
    /// `slot` is held by the caller, who hands it over, and its record's
    /// ranges stay valid for as long as any host function may run it.
    unsafe fn launch_slot(
        &self,
        slot: NonNull<Slot>,
        capture: Option<CUgraph>,
    ) -> Result<(), Error> {
        // SAFETY: the slot is alive and ours.
        let user_data = unsafe { slot.as_ref() }.user_data();
        match capture {
            Some(graph) => {
                // SAFETY: the slot is ours to give; the graph is being captured.
                unsafe { graph::give_slot_to_graph(graph, slot) }?;
                // Replays run the record as it is: no host function may free it.
                // SAFETY: the graph keeps the slot until it and its executables are gone.
                unsafe { ffi::cuLaunchHostFunc(self.raw, Some(hostcopy_fn), user_data) }.ok()?;
            }
            None => {
                // SAFETY: `run_owned` runs the record and frees the slot.
                let launched = unsafe {
                    ffi::cuLaunchHostFunc(self.raw, Some(host_fns::run_owned), user_data)
                }
                .ok();
                if let Err(error) = launched {
                    // Not queued: still ours.
                    // SAFETY: no host function has the slot.
                    unsafe { Slot::release(slot) };
                    return Err(error.into());
                }
            }
        }
        Ok(())
    }

    /// Runs `f` with a scope whose launches may borrow buffers that outlive
    /// the scope, then waits for every host function the scope launched.
    ///
    /// Each launch copies its record to the heap; the scope frees the copies
    /// when it returns. After a context error it returns the error without
    /// waiting for host functions the driver skipped, but not before a host
    /// function of the scope that is running has finished: the borrowed
    /// buffers are never touched after the scope returns. Refused on a
    /// capturing stream ([`Error::Capturing`]).
    ///
    /// ```no_run
    /// use hostcopy_driver::Record;
    /// use hostcopy_driver::cuda::{Context, PinnedBuffer, Stream};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let _context = Context::primary(0)?;
    /// let stream = Stream::new()?;
    /// let slot = PinnedBuffer::new(1 << 20)?;
    /// let mut pageable = vec![0u8; 1 << 20];
    /// stream.handle().scope(|scope| {
    ///     scope.launch(Record::pack(&mut pageable[..], &*slot)?)
    /// })??;
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "alloc")]
    pub fn scope<'env, F, T>(&self, f: F) -> Result<T, Error>
    where
        F: for<'scope> FnOnce(&'scope LaunchScope<'scope, 'env>) -> T,
    {
        scope::run(*self, SlotSource::Heap, f)
    }

    /// [`scope`](Self::scope) with the record copies in slots of `pool`.
    pub fn scope_in<'env, const N: usize, F, T>(
        &self,
        pool: &'static RecordPool<N>,
        f: F,
    ) -> Result<T, Error>
    where
        F: for<'scope> FnOnce(&'scope LaunchScope<'scope, 'env>) -> T,
    {
        scope::run(*self, SlotSource::Pool(pool), f)
    }

    /// Queues a copy of `nbytes` bytes from `offset` of `src` to host
    /// address `dst`.
    ///
    /// # Safety
    ///
    /// `dst` is writable host memory for `nbytes` bytes (pinned for an
    /// asynchronous copy; the driver stages pageable memory and blocks) that
    /// nothing else touches until the copy has finished in stream order, and
    /// `src` outlives the copy.
    pub unsafe fn copy_device_to_host(
        &self,
        dst: *mut u8,
        src: &DeviceBuffer,
        offset: usize,
        nbytes: usize,
    ) -> Result<(), Error> {
        let src = src.range(offset, nbytes)?;
        // SAFETY: device range checked; the host side is our caller's.
        unsafe { ffi::cuMemcpyDtoHAsync_v2(dst.cast(), src, nbytes, self.raw) }.ok()?;
        Ok(())
    }

    /// Queues a copy of `nbytes` bytes from host address `src` to `offset` of `dst`.
    ///
    /// # Safety
    ///
    /// `src` is readable host memory for `nbytes` bytes that nothing writes
    /// until the copy has finished in stream order, and `dst` outlives it.
    pub unsafe fn copy_host_to_device(
        &self,
        dst: &DeviceBuffer,
        offset: usize,
        src: *const u8,
        nbytes: usize,
    ) -> Result<(), Error> {
        let dst = dst.range(offset, nbytes)?;
        // SAFETY: device range checked; the host side is our caller's.
        unsafe { ffi::cuMemcpyHtoDAsync_v2(dst, src.cast::<c_void>(), nbytes, self.raw) }.ok()?;
        Ok(())
    }
}

impl fmt::Debug for StreamRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamRef").field("raw", &self.raw).finish()
    }
}
