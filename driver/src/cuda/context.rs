//! The device's primary context: what every resource of this layer lives in
//! and keeps alive.

use core::cell::Cell;
use core::ffi::{c_char, c_int};
use core::fmt;
use core::marker::PhantomData;

use alloc::sync::Arc;

use super::error::{DriverError, Error};
use super::ffi::{self, CUcontext, CUdevice, CUstream};

/// The installed driver's CUDA version (`12080` for 12.8).
pub fn driver_version() -> Result<i32, DriverError> {
    let mut version: c_int = 0;
    // SAFETY: writes one int; needs no context.
    unsafe { ffi::cuDriverGetVersion(&mut version) }.ok()?;
    Ok(version)
}

/// A device's primary context, retained for as long as any clone of this
/// value, or any resource made in it, lives.
///
/// Cloning is cheap (a shared reference count, as cudarc's
/// `Arc<CudaContext>`). Every stream, event, buffer and graph of this layer
/// holds a clone, so the driver cannot free a resource while safe code can
/// still reach it, and every call on a resource first makes the resource's
/// context current on the calling thread: resources work from any thread.
/// The primary context is the one the CUDA runtime and most libraries share,
/// so streams and buffers made here work with theirs.
#[derive(Clone)]
pub struct Context {
    inner: Arc<Retained>,
}

/// The one retain of the primary context that all clones share.
struct Retained {
    ordinal: usize,
    device: CUdevice,
    raw: CUcontext,
}

// SAFETY: a CUDA context handle may be used from any thread; the driver
// serializes what needs serializing.
unsafe impl Send for Retained {}
// SAFETY: as above; only driver calls go through the handle.
unsafe impl Sync for Retained {}

impl Context {
    /// Initializes the driver, retains the primary context of device
    /// `ordinal` and makes it current on this thread.
    ///
    /// On a machine without an NVIDIA driver this fails with an error whose
    /// [`is_driver_missing`](DriverError::is_driver_missing) is true and
    /// whose message names the library and what to install.
    pub fn primary(ordinal: usize) -> Result<Context, DriverError> {
        // SAFETY: plain driver initialization.
        unsafe { ffi::cuInit(0) }.ok()?;
        let mut device: CUdevice = 0;
        let index = c_int::try_from(ordinal).unwrap_or(c_int::MAX);
        // SAFETY: writes one device handle.
        unsafe { ffi::cuDeviceGet(&mut device, index) }.ok()?;
        let mut raw: CUcontext = core::ptr::null_mut();
        // SAFETY: writes one context handle; released when the last clone goes.
        unsafe { ffi::cuDevicePrimaryCtxRetain(&mut raw, device) }.ok()?;
        let context = Context {
            inner: Arc::new(Retained {
                ordinal,
                device,
                raw,
            }),
        };
        context.make_current()?;
        Ok(context)
    }

    /// The primary context a stream belongs to: for a stream another
    /// runtime made (cuda.core, torch, cupy and the CUDA runtime make their
    /// streams in primary contexts). The null handle, the legacy default
    /// stream, and the per-thread default stream (2) name the calling
    /// thread's current context. [`Error::NotPrimaryContext`] for a stream
    /// of any other context.
    ///
    /// # Safety
    ///
    /// `stream` is a valid stream handle for the call.
    pub unsafe fn of_stream(stream: CUstream) -> Result<Context, Error> {
        // SAFETY: our caller's promise.
        let raw = unsafe { Self::raw_of_stream(stream) }?;
        Self::of_raw(raw)
    }

    /// [`of_stream`](Self::of_stream) for a stream that most likely belongs
    /// to `known`: a clone of `known` where it does, without the driver
    /// calls that tell a primary context (a transfer on a stream of its
    /// stager's context, the common case, pays two of them instead of
    /// about ten); as `of_stream` otherwise.
    ///
    /// # Safety
    ///
    /// As for [`of_stream`](Self::of_stream).
    pub unsafe fn of_stream_in(stream: CUstream, known: &Context) -> Result<Context, Error> {
        // SAFETY: our caller's promise.
        let raw = unsafe { Self::raw_of_stream(stream) }?;
        // `known` keeps its context retained, so no other context can have
        // its handle meanwhile: the same handle is the same context. (A
        // reset of the primary context by another library ignores retains;
        // it ends every resource of `known`, whichever way this answers.)
        if raw == known.raw() {
            return Ok(known.clone());
        }
        Self::of_raw(raw)
    }

    /// The handle of the context `stream` belongs to (see `of_stream`).
    ///
    /// # Safety
    ///
    /// As for [`of_stream`](Self::of_stream).
    unsafe fn raw_of_stream(stream: CUstream) -> Result<CUcontext, Error> {
        // SAFETY: plain driver initialization.
        unsafe { ffi::cuInit(0) }.ok()?;
        let mut raw: CUcontext = core::ptr::null_mut();
        if stream as usize <= 2 {
            // SAFETY: writes one handle.
            unsafe { ffi::cuCtxGetCurrent(&mut raw) }.ok()?;
            if raw.is_null() {
                return Err(Error::NoCurrentContext);
            }
        } else {
            // SAFETY: writes one handle; the stream is valid (our caller).
            unsafe { ffi::cuStreamGetCtx(stream, &mut raw) }.ok()?;
        }
        Ok(raw)
    }

    /// The calling thread's current context, if it is a device's primary
    /// context ([`Error::NoCurrentContext`] or [`Error::NotPrimaryContext`]
    /// otherwise).
    pub fn current() -> Result<Context, Error> {
        // SAFETY: the null handle names the current context.
        unsafe { Self::of_stream(core::ptr::null_mut()) }
    }

    /// The primary context `raw` is, retained. The calling thread's
    /// current context is left as it was. (To tell a primary context, this
    /// retains its device's primary context, creating it if it was not
    /// active.)
    fn of_raw(raw: CUcontext) -> Result<Context, Error> {
        let _saved = Context::save_current()?;
        // SAFETY: `raw` came from the driver just now and is alive: making
        // it current lets `cuCtxGetDevice` name its device.
        unsafe { set_current(raw) }?;
        let mut device: CUdevice = 0;
        // SAFETY: writes one device handle.
        unsafe { ffi::cuCtxGetDevice(&mut device) }.ok()?;
        let ordinal = usize::try_from(device).unwrap_or(usize::MAX);
        let context = Context::primary(ordinal)?;
        if context.raw() != raw {
            return Err(Error::NotPrimaryContext { device: ordinal });
        }
        Ok(context)
    }

    /// Saves the calling thread's current context, to be made current again
    /// when the returned guard is dropped. Every call of this layer makes
    /// its resource's context current and leaves it so; a binding whose
    /// callers keep their own idea of the current device (the CUDA runtime,
    /// torch, cupy) wraps its calls in this guard.
    ///
    /// Initializes the driver first: the first call of a process may come
    /// here (a binding's first stager), and the driver answers
    /// `cuCtxGetCurrent` before `cuInit` with `CUDA_ERROR_NOT_INITIALIZED`.
    pub fn save_current() -> Result<SavedCurrent, DriverError> {
        // SAFETY: plain driver initialization.
        unsafe { ffi::cuInit(0) }.ok()?;
        let mut raw: CUcontext = core::ptr::null_mut();
        // SAFETY: writes one handle.
        unsafe { ffi::cuCtxGetCurrent(&mut raw) }.ok()?;
        Ok(SavedCurrent { raw })
    }

    /// Number of CUDA devices (initializes the driver).
    pub fn device_count() -> Result<usize, DriverError> {
        // SAFETY: plain driver initialization.
        unsafe { ffi::cuInit(0) }.ok()?;
        let mut count: c_int = 0;
        // SAFETY: writes one int.
        unsafe { ffi::cuDeviceGetCount(&mut count) }.ok()?;
        Ok(usize::try_from(count).unwrap_or(0))
    }

    /// Makes this context current on the calling thread, for driver calls
    /// this layer does not wrap. The layer's own calls do this themselves.
    pub fn make_current(&self) -> Result<(), DriverError> {
        // SAFETY: the context is retained while `self` lives.
        unsafe { set_current(self.inner.raw) }
    }

    /// Makes this context current on the calling thread unless it already is:
    /// what every call of this layer on a resource does first. Inside a
    /// [`Bound`] scope whose thread's current context is this one, without
    /// asking the driver.
    pub(crate) fn bind(&self) -> Result<(), DriverError> {
        let raw = self.inner.raw;
        if BOUND_DEPTH.get() > 0 && BOUND.get() == raw {
            return Ok(());
        }
        let mut current: CUcontext = core::ptr::null_mut();
        // SAFETY: writes one handle.
        unsafe { ffi::cuCtxGetCurrent(&mut current) }.ok()?;
        if current == raw {
            BOUND.set(raw);
            return Ok(());
        }
        self.make_current()
    }

    /// Binds this context ([`bind`](Self::bind)) and keeps the answer for
    /// the layer's later calls on this thread until the guard drops, so
    /// that a call made of many driver calls asks for the current context
    /// once. Only around the layer's own code: code that is not the
    /// layer's (a caller's closure, another library's ordering) may make
    /// another context current without the layer knowing, so it never runs
    /// inside such a scope.
    pub(crate) fn bound(&self) -> Result<Bound, DriverError> {
        // Counted first: `bind` then records what it found or set. What
        // was recorded outside every scope may be stale by now.
        let depth = BOUND_DEPTH.get();
        if depth == 0 {
            BOUND.set(core::ptr::null_mut());
        }
        BOUND_DEPTH.set(depth + 1);
        let guard = Bound {
            _not_send: PhantomData,
        };
        self.bind()?;
        Ok(guard)
    }

    /// Waits for all work of the context.
    pub fn synchronize(&self) -> Result<(), DriverError> {
        self.bind()?;
        // SAFETY: no arguments; the context is current.
        unsafe { ffi::cuCtxSynchronize() }.ok()
    }

    /// The device ordinal given to [`primary`](Self::primary).
    pub fn ordinal(&self) -> usize {
        self.inner.ordinal
    }

    /// The device's name, such as `NVIDIA H200`.
    pub fn device_name(&self) -> Result<heapless::String<128>, DriverError> {
        let mut bytes = [0u8; 128];
        // SAFETY: the driver writes at most `len` bytes, NUL included.
        unsafe {
            ffi::cuDeviceGetName(
                bytes.as_mut_ptr().cast::<c_char>(),
                bytes.len() as c_int,
                self.inner.device,
            )
        }
        .ok()?;
        let len = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        let mut name = heapless::String::new();
        for c in core::str::from_utf8(&bytes[..len]).unwrap_or("?").chars() {
            let _ = name.push(c);
        }
        Ok(name)
    }

    /// `Ok` if `other` is this context (a clone, or another retain of the
    /// same primary context); [`Error::ContextMismatch`] naming both
    /// devices otherwise. Calls that take handles of two resources check
    /// this before any driver call: the driver would refuse most such
    /// calls with `CUDA_ERROR_INVALID_CONTEXT`, which says less.
    pub(crate) fn expect_same(&self, other: &Context) -> Result<(), Error> {
        if self.inner.raw == other.inner.raw {
            Ok(())
        } else {
            Err(Error::ContextMismatch {
                expected: self.inner.ordinal,
                found: other.inner.ordinal,
            })
        }
    }

    /// The raw context handle, for calls this layer does not wrap. Valid
    /// while `self` (or any resource of the context) lives.
    pub fn raw(&self) -> CUcontext {
        self.inner.raw
    }
}

std::thread_local! {
    /// How many [`Bound`] scopes are open on this thread.
    static BOUND_DEPTH: Cell<u32> = const { Cell::new(0) };
    /// While one is, the thread's current context: every change the
    /// layer makes to it goes through [`set_current`], which records it,
    /// and no code but the layer's runs inside a scope.
    static BOUND: Cell<CUcontext> = const { Cell::new(core::ptr::null_mut()) };
}

/// Makes `raw` the calling thread's current context, and records it for
/// an open [`Bound`] scope (a failed call records that nothing is known).
///
/// # Safety
///
/// `raw` is null or a live context handle.
unsafe fn set_current(raw: CUcontext) -> Result<(), DriverError> {
    // SAFETY: our caller's promise.
    let result = unsafe { ffi::cuCtxSetCurrent(raw) }.ok();
    BOUND.set(if result.is_ok() {
        raw
    } else {
        core::ptr::null_mut()
    });
    result
}

/// A scope in which the layer knows the calling thread's current context
/// ([`Context::bound`]); not `Send`, as what it knows is the thread's.
pub(crate) struct Bound {
    _not_send: PhantomData<*const ()>,
}

impl Drop for Bound {
    fn drop(&mut self) {
        let depth = BOUND_DEPTH.get() - 1;
        BOUND_DEPTH.set(depth);
        if depth == 0 {
            BOUND.set(core::ptr::null_mut());
        }
    }
}

/// The context that was current when [`Context::save_current`] was called,
/// made current again on drop (none, if none was).
#[derive(Debug)]
pub struct SavedCurrent {
    raw: CUcontext,
}

impl Drop for SavedCurrent {
    fn drop(&mut self) {
        // SAFETY: the handle that was current on this thread (null: none).
        // Whoever made it current normally holds it; one destroyed since is
        // refused by the driver (CUDA_ERROR_CONTEXT_IS_DESTROYED), which
        // leaves the layer's context current.
        let _ = unsafe { set_current(self.raw) };
    }
}

impl Drop for Retained {
    fn drop(&mut self) {
        // SAFETY: releases the one reference `primary` retained, after every
        // clone and every resource holding one is gone. An error here (a
        // context already failed) leaves nothing to do.
        let _ = unsafe { ffi::cuDevicePrimaryCtxRelease_v2(self.device) };
    }
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("ordinal", &self.inner.ordinal)
            .field("raw", &self.inner.raw)
            .finish()
    }
}
