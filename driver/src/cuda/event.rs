//! Events: points in a stream to wait for or to time.

use core::fmt;
use core::sync::atomic::{AtomicBool, Ordering};

use super::capture::{self, CaptureState, capture_graph};
use super::context::Context;
use super::error::{DriverError, Error};
use super::ffi::{self, CUevent};
use super::stream::{CUDA_ERROR_NOT_READY, StreamRef};

/// `CU_EVENT_BLOCKING_SYNC`.
const BLOCKING_SYNC: core::ffi::c_uint = 0x01;

/// A CUDA event in a context it keeps alive, destroyed on drop.
pub struct Event {
    context: Context,
    raw: CUevent,
    /// Whether the last record was made on a capturing stream (a wait for
    /// it joins the waiting stream to that capture). Written and read
    /// under the capture lock.
    captured: AtomicBool,
}

// SAFETY: event handles may be used from any thread; every call binds the
// event's context first.
unsafe impl Send for Event {}
// SAFETY: as above; the driver serializes calls on one event.
unsafe impl Sync for Event {}

impl Event {
    /// An event that can time the work between two records.
    pub fn timing(context: &Context) -> Result<Event, DriverError> {
        Self::with_flags(context, ffi::CU_EVENT_DEFAULT)
    }

    /// An event for ordering only (cheaper to record).
    pub fn ordering(context: &Context) -> Result<Event, DriverError> {
        Self::with_flags(context, ffi::CU_EVENT_DISABLE_TIMING)
    }

    /// An ordering event whose [`synchronize`](Self::synchronize) sleeps
    /// instead of spinning: for a thread that waits while the stager's
    /// workers need the cores.
    pub(crate) fn blocking(context: &Context) -> Result<Event, DriverError> {
        Self::with_flags(context, BLOCKING_SYNC | ffi::CU_EVENT_DISABLE_TIMING)
    }

    /// A [`blocking`](Self::blocking) event that also times: the end of
    /// copies whose start a [`timing`](Self::timing) event marks.
    pub(crate) fn blocking_timing(context: &Context) -> Result<Event, DriverError> {
        Self::with_flags(context, BLOCKING_SYNC)
    }

    fn with_flags(context: &Context, flags: core::ffi::c_uint) -> Result<Event, DriverError> {
        context.bind()?;
        let mut raw: CUevent = core::ptr::null_mut();
        // SAFETY: writes one handle, destroyed in `Drop`.
        unsafe { ffi::cuEventCreate(&mut raw, flags) }.ok()?;
        Ok(Event {
            context: context.clone(),
            raw,
            captured: AtomicBool::new(false),
        })
    }

    /// The context the event belongs to.
    pub fn context(&self) -> &Context {
        &self.context
    }

    /// Records the event at the current end of `stream`.
    ///
    /// Refused with [`Error::ContextMismatch`] when the stream belongs to
    /// another context than the event.
    pub fn record(&self, stream: StreamRef<'_>) -> Result<(), Error> {
        // A record on a capturing stream adds to its capture graph.
        self.record_locked(&capture::lock(), stream)
    }

    /// [`record`](Self::record) on a stream of the layer's own that no
    /// capture can reach (a stager's: it waits only for events recorded
    /// on streams that were not capturing), without asking the driver
    /// whether it captures.
    pub(crate) fn record_on_own(&self, stream: StreamRef<'_>) -> Result<(), Error> {
        self.record_known(&capture::lock(), stream, false)
    }

    /// [`record`](Self::record) for a caller that holds the capture lock.
    pub(crate) fn record_locked(
        &self,
        locked: &CaptureState,
        stream: StreamRef<'_>,
    ) -> Result<(), Error> {
        self.context.expect_same(stream.context())?;
        let capturing = capture_graph(locked, stream.context(), stream.raw())?.is_some();
        self.record_known(locked, stream, capturing)
    }

    /// [`record_locked`](Self::record_locked) for a caller that has seen,
    /// under the same hold of the capture lock, whether `stream` is
    /// capturing.
    pub(crate) fn record_known(
        &self,
        _locked: &CaptureState,
        stream: StreamRef<'_>,
        capturing: bool,
    ) -> Result<(), Error> {
        self.context.expect_same(stream.context())?;
        stream.context().bind()?;
        // SAFETY: both handles are alive.
        unsafe { ffi::cuEventRecord(self.raw, stream.raw()) }.ok()?;
        self.captured.store(capturing, Ordering::Relaxed);
        Ok(())
    }

    /// Waits until the work before the last record has finished.
    pub fn synchronize(&self) -> Result<(), DriverError> {
        self.context.bind()?;
        // SAFETY: the handle is alive.
        unsafe { ffi::cuEventSynchronize(self.raw) }.ok()
    }

    /// Whether the work before the last record has finished, without waiting.
    pub fn query(&self) -> Result<bool, DriverError> {
        self.context.bind()?;
        // SAFETY: the handle is alive.
        let result = unsafe { ffi::cuEventQuery(self.raw) };
        match result.ok() {
            Ok(()) => Ok(true),
            Err(error) if error.code() == CUDA_ERROR_NOT_READY => Ok(false),
            Err(error) => Err(error),
        }
    }

    /// Milliseconds between `start` and `self`, both recorded and finished.
    pub fn elapsed_ms_since(&self, start: &Event) -> Result<f32, DriverError> {
        self.context.bind()?;
        let mut ms = 0f32;
        // SAFETY: writes one float; both handles are alive.
        unsafe { ffi::cuEventElapsedTime(&mut ms, start.raw, self.raw) }.ok()?;
        Ok(ms)
    }
}

impl StreamRef<'_> {
    /// Makes later work on this stream wait for `event`'s last record. If
    /// that record was captured, this joins the stream to the capture.
    ///
    /// Refused with [`Error::ScopeOpen`] when a launch scope is open on this
    /// stream and the event's last record was made on a capturing stream:
    /// the wait would join the scope's stream to a capture, and the scope's
    /// borrowed records must never become graph nodes.
    pub fn wait_event(&self, event: &Event) -> Result<(), Error> {
        self.wait_event_locked(&capture::lock(), event)
    }

    /// [`wait_event`](Self::wait_event) for a caller that holds the
    /// capture lock (and so may check the stream's state with the wait).
    pub(crate) fn wait_event_locked(
        &self,
        locked: &CaptureState,
        event: &Event,
    ) -> Result<(), Error> {
        if locked.has_scope(self.raw()) && event.captured.load(Ordering::Relaxed) {
            return Err(Error::ScopeOpen);
        }
        self.context().bind()?;
        // SAFETY: both handles are alive.
        unsafe { ffi::cuStreamWaitEvent(self.raw(), event.raw, 0) }.ok()?;
        Ok(())
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        let _ = self.context.bind();
        // SAFETY: destroys the handle created in `with_flags`; a pending
        // record finishes on its own.
        let _ = unsafe { ffi::cuEventDestroy_v2(self.raw) };
    }
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Event").field("raw", &self.raw).finish()
    }
}
