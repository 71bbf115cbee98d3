//! The device's primary context: what every call of this layer runs in.

use core::ffi::{c_char, c_int};
use core::fmt;

use super::error::DriverError;
use super::ffi::{self, CUcontext, CUdevice};

/// The installed driver's CUDA version (`12080` for 12.8).
pub fn driver_version() -> Result<i32, DriverError> {
    let mut version: c_int = 0;
    // SAFETY: writes one int; needs no context.
    unsafe { ffi::cuDriverGetVersion(&mut version) }.ok()?;
    Ok(version)
}

/// A device's primary context, retained for as long as this value lives.
///
/// The primary context is the one the CUDA runtime and most libraries share,
/// so streams and buffers made here work with theirs. Driver calls run in the
/// calling thread's current context: call [`make_current`](Self::make_current)
/// on each thread that uses this layer.
pub struct Context {
    device: CUdevice,
    raw: CUcontext,
}

// SAFETY: a CUDA context handle may be used from any thread; the driver
// serializes what needs serializing.
unsafe impl Send for Context {}
// SAFETY: as above; every method takes `&self` and makes driver calls only.
unsafe impl Sync for Context {}

impl Context {
    /// Initializes the driver, retains the primary context of device
    /// `ordinal` and makes it current on this thread.
    ///
    /// On a machine without a driver this fails with
    /// `CUDA_ERROR_STUB_LIBRARY` (see [`DriverError::is_stub_library`]).
    pub fn primary(ordinal: usize) -> Result<Context, DriverError> {
        // SAFETY: plain driver initialization.
        unsafe { ffi::cuInit(0) }.ok()?;
        let mut device: CUdevice = 0;
        let ordinal = c_int::try_from(ordinal).unwrap_or(c_int::MAX);
        // SAFETY: writes one device handle.
        unsafe { ffi::cuDeviceGet(&mut device, ordinal) }.ok()?;
        let mut raw: CUcontext = core::ptr::null_mut();
        // SAFETY: writes one context handle; released in `Drop`.
        unsafe { ffi::cuDevicePrimaryCtxRetain(&mut raw, device) }.ok()?;
        let context = Context { device, raw };
        context.make_current()?;
        Ok(context)
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

    /// Makes this context current on the calling thread.
    pub fn make_current(&self) -> Result<(), DriverError> {
        // SAFETY: the context is retained while `self` lives.
        unsafe { ffi::cuCtxSetCurrent(self.raw) }.ok()
    }

    /// Waits for all work of the context current on this thread.
    pub fn synchronize(&self) -> Result<(), DriverError> {
        self.make_current()?;
        // SAFETY: no arguments.
        unsafe { ffi::cuCtxSynchronize() }.ok()
    }

    /// The device's name, such as `NVIDIA H200`.
    pub fn device_name(&self) -> Result<heapless::String<128>, DriverError> {
        let mut bytes = [0u8; 128];
        // SAFETY: the driver writes at most `len` bytes, NUL included.
        unsafe {
            ffi::cuDeviceGetName(
                bytes.as_mut_ptr().cast::<c_char>(),
                bytes.len() as c_int,
                self.device,
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

    /// The raw context handle, for calls this layer does not wrap.
    pub fn raw(&self) -> CUcontext {
        self.raw
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: releases the reference `primary` retained. An error here
        // (a context already failed) leaves nothing to do.
        let _ = unsafe { ffi::cuDevicePrimaryCtxRelease_v2(self.device) };
    }
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("device", &self.device)
            .field("raw", &self.raw)
            .finish()
    }
}
