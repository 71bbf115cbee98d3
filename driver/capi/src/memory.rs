//! `hostcopy_device_buffer` and `hostcopy_host_buffer`: memory a transfer
//! holds a share of, so that C may free the handle while a transfer uses
//! it (the Rust rule: a transfer in flight keeps what it needs alive).

use std::ffi::c_void;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use hostcopy_driver::HostBuffer;
use hostcopy_driver::cuda::registration::{Register, Registration};
use hostcopy_driver::cuda::{Context, DeviceBuffer, DeviceView};

use crate::stager::hostcopy_stager;
use crate::status::{
    Failure, HOSTCOPY_ERROR_BUSY, HOSTCOPY_ERROR_OUT_OF_MEMORY, HOSTCOPY_ERROR_PANIC,
    HOSTCOPY_ERROR_UNSUPPORTED, entry, entry_void, hostcopy_status,
};
use crate::{out, reference};

/// Device memory shared by its handle and the transfers that use it.
#[derive(Debug)]
pub(crate) struct DeviceMemory {
    context: Context,
    ptr: u64,
    len: usize,
    /// Frees it: our allocation, or the caller's release callback.
    _owner: DeviceOwner,
}

/// Held only to be dropped: the memory goes with it.
#[derive(Debug)]
#[allow(dead_code)]
enum DeviceOwner {
    Allocated(DeviceBuffer),
    Foreign(Release),
}

/// A C callback that frees foreign device memory, called once from the
/// drop of the last share.
#[derive(Debug)]
struct Release {
    release: Option<unsafe extern "C" fn(*mut c_void)>,
    user_data: *mut c_void,
}

// SAFETY: the header tells the caller that `release(user_data)` may run
// on whichever thread lets go last, so the pointer may move between them.
unsafe impl Send for Release {}
// SAFETY: the pointer is only passed back to the callback, once, from the
// drop; shared access reads nothing through it.
unsafe impl Sync for Release {}

impl Drop for Release {
    fn drop(&mut self) {
        if let Some(release) = self.release {
            // SAFETY: the caller gave this callback and pointer for this
            // one call, made once nothing uses the memory.
            unsafe { release(self.user_data) };
        }
    }
}

impl DeviceMemory {
    /// A view of all of it in `context`, holding a share of it (the
    /// driver checks the range and its device first).
    pub(crate) fn view(self: &Arc<Self>, context: &Context) -> Result<DeviceView, Failure> {
        let owner: Arc<dyn Send + Sync> = self.clone();
        // SAFETY: `owner` is a share of this memory, which frees it only
        // when the last share goes: our allocation, or a foreign one that
        // its release callback frees only then (the header's rule for
        // `hostcopy_device_buffer_wrap`). Ordering with other work on the
        // memory is the C caller's, as for any CUDA memory.
        Ok(unsafe { DeviceView::new(context, self.ptr, self.len, owner) }?)
    }
}

/// `hostcopy_device_buffer`: a handle's share of device memory.
#[allow(non_camel_case_types)]
#[derive(Debug)]
pub struct hostcopy_device_buffer {
    pub(crate) memory: Arc<DeviceMemory>,
}

fn new_device_handle(memory: DeviceMemory) -> *mut hostcopy_device_buffer {
    Box::into_raw(Box::new(hostcopy_device_buffer {
        memory: Arc::new(memory),
    }))
}

/// Allocates device memory on the stager's device.
///
/// # Safety
///
/// `stager` is null or a live stager; `out` is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hostcopy_device_buffer_new(
    stager: *const hostcopy_stager,
    len: usize,
    out: *mut *mut hostcopy_device_buffer,
) -> hostcopy_status {
    entry("hostcopy_device_buffer_new", || {
        // SAFETY: the caller's contract.
        let (stager, out) = unsafe { (reference(stager, "stager")?, crate::out(out, "out")?) };
        let _saved = Context::save_current()?;
        let buffer = DeviceBuffer::new(&stager.context, len)?;
        out.write(new_device_handle(DeviceMemory {
            context: stager.context.clone(),
            ptr: buffer.raw(),
            len,
            _owner: DeviceOwner::Allocated(buffer),
        }));
        Ok(())
    })
}

/// Wraps device memory another runtime allocated.
///
/// # Safety
///
/// `stager` is null or a live stager; `out` is null or writable;
/// `release`, if not null, may be called once with `user_data` on any
/// thread, and nothing frees the memory before that call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hostcopy_device_buffer_wrap(
    stager: *const hostcopy_stager,
    ptr: u64,
    len: usize,
    release: Option<unsafe extern "C" fn(*mut c_void)>,
    user_data: *mut c_void,
    out: *mut *mut hostcopy_device_buffer,
) -> hostcopy_status {
    entry("hostcopy_device_buffer_wrap", || {
        // SAFETY: the caller's contract.
        let (stager, out) = unsafe { (reference(stager, "stager")?, crate::out(out, "out")?) };
        let _saved = Context::save_current()?;
        // Checked now, so that a wrong address is refused here; the check
        // view's owner is a placeholder, dropped with it.
        // SAFETY: the view lives only for this statement and is not used
        // for any transfer.
        drop(unsafe { DeviceView::new(&stager.context, ptr, len, Arc::new(())) }?);
        let release = Release { release, user_data };
        out.write(new_device_handle(DeviceMemory {
            context: stager.context.clone(),
            ptr,
            len,
            _owner: DeviceOwner::Foreign(release),
        }));
        Ok(())
    })
}

/// Frees the handle; the memory goes once no transfer uses it.
///
/// # Safety
///
/// `buffer` is null or a live device buffer no other call uses now or
/// later.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hostcopy_device_buffer_free(buffer: *mut hostcopy_device_buffer) {
    entry_void("hostcopy_device_buffer_free", || {
        if !buffer.is_null() {
            let _saved = Context::save_current();
            // SAFETY: the caller's contract.
            drop(unsafe { Box::from_raw(buffer) });
        }
    });
}

/// Its device address and length.
///
/// # Safety
///
/// `buffer` is null or live; `ptr` and `len` are each null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hostcopy_device_buffer_get(
    buffer: *const hostcopy_device_buffer,
    ptr: *mut u64,
    len: *mut usize,
) -> hostcopy_status {
    entry("hostcopy_device_buffer_get", || {
        // SAFETY: the caller's contract.
        let buffer = unsafe { reference(buffer, "buffer") }?;
        if !ptr.is_null() {
            // SAFETY: the caller's contract: non-null means writable.
            unsafe { ptr.write(buffer.memory.ptr) };
        }
        if !len.is_null() {
            // SAFETY: as above.
            unsafe { len.write(buffer.memory.len) };
        }
        Ok(())
    })
}

#[cfg(feature = "bench")]
impl hostcopy_device_buffer {
    /// The allocation, where the handle holds the only share of memory
    /// `hostcopy_device_buffer_new` made.
    pub(crate) fn allocated_mut(&mut self) -> Option<&mut DeviceBuffer> {
        match &mut Arc::get_mut(&mut self.memory)?._owner {
            DeviceOwner::Allocated(buffer) => Some(buffer),
            DeviceOwner::Foreign(_) => None,
        }
    }
}

impl DeviceMemory {
    /// The context it was made or wrapped in.
    pub(crate) fn context(&self) -> &Context {
        &self.context
    }
}

/// A host buffer shared by its handle and the transfers that copy it.
#[derive(Debug)]
pub(crate) struct HostMemory {
    /// Locked for reading by a transfer taking a share and by the
    /// registration queries, for writing by `register` (the one call that
    /// needs the buffer alone).
    buffer: RwLock<HostBuffer>,
    /// Its first byte (exposed provenance) and length, read without the
    /// lock.
    pub(crate) addr: usize,
    pub(crate) len: usize,
}

impl HostMemory {
    fn read(&self) -> Result<RwLockReadGuard<'_, HostBuffer>, Failure> {
        self.buffer.read().map_err(|_| unusable())
    }

    fn write(&self) -> Result<RwLockWriteGuard<'_, HostBuffer>, Failure> {
        self.buffer.write().map_err(|_| unusable())
    }
}

fn unusable() -> Failure {
    Failure::new(
        HOSTCOPY_ERROR_PANIC,
        "the host buffer is unusable: an earlier call on it panicked",
    )
}

/// `hostcopy_host_buffer`: a handle's share of a [`HostBuffer`].
#[allow(non_camel_case_types)]
#[derive(Debug)]
pub struct hostcopy_host_buffer {
    memory: Arc<HostMemory>,
}

impl hostcopy_host_buffer {
    /// A share for a transfer, taken under the read lock, so that
    /// `register` (under the write lock) sees every share taken.
    pub(crate) fn share(&self) -> Result<Arc<HostMemory>, Failure> {
        let _locked = self.memory.read()?;
        Ok(self.memory.clone())
    }
}

/// Maps a host buffer.
///
/// # Safety
///
/// `out` is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hostcopy_host_buffer_new(
    len: usize,
    out: *mut *mut hostcopy_host_buffer,
) -> hostcopy_status {
    entry("hostcopy_host_buffer_new", || {
        // SAFETY: the caller's contract.
        let out = unsafe { crate::out(out, "out") }?;
        let buffer = HostBuffer::new(len).map_err(|error| {
            let status = match error.kind() {
                hostcopy_driver::HostBufferErrorKind::Map { .. } => HOSTCOPY_ERROR_OUT_OF_MEMORY,
                hostcopy_driver::HostBufferErrorKind::Unsupported => HOSTCOPY_ERROR_UNSUPPORTED,
            };
            Failure::new(status, error.to_string())
        })?;
        let addr = if len == 0 {
            0
        } else {
            buffer.as_ptr().expose_provenance()
        };
        out.write(Box::into_raw(Box::new(hostcopy_host_buffer {
            memory: Arc::new(HostMemory {
                buffer: RwLock::new(buffer),
                addr,
                len,
            }),
        })));
        Ok(())
    })
}

/// Frees the handle; the memory goes once no transfer uses it.
///
/// # Safety
///
/// `buffer` is null or a live host buffer no other call uses now or later.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hostcopy_host_buffer_free(buffer: *mut hostcopy_host_buffer) {
    entry_void("hostcopy_host_buffer_free", || {
        if !buffer.is_null() {
            let _saved = Context::save_current();
            // SAFETY: the caller's contract.
            drop(unsafe { Box::from_raw(buffer) });
        }
    });
}

/// Its first byte, NULL for none (or for a null handle).
///
/// # Safety
///
/// `buffer` is null or a live host buffer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hostcopy_host_buffer_data(
    buffer: *const hostcopy_host_buffer,
) -> *mut c_void {
    // SAFETY: the caller's contract.
    match unsafe { buffer.as_ref() } {
        Some(buffer) => core::ptr::with_exposed_provenance_mut(buffer.memory.addr),
        None => core::ptr::null_mut(),
    }
}

/// Its length, 0 for a null handle.
///
/// # Safety
///
/// `buffer` is null or a live host buffer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hostcopy_host_buffer_len(buffer: *const hostcopy_host_buffer) -> usize {
    // SAFETY: the caller's contract.
    unsafe { buffer.as_ref() }.map_or(0, |buffer| buffer.memory.len)
}

/// `hostcopy_registration`, field for field.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_camel_case_types, missing_docs)]
pub struct hostcopy_registration {
    pub registered: usize,
    pub len: usize,
    pub refused: i32,
    pub finished: i32,
}

// The header's layout checks, with the same numbers.
const _: () = assert!(size_of::<hostcopy_registration>() == 24);
const _: () = assert!(core::mem::offset_of!(hostcopy_registration, refused) == 16);

impl From<Registration> for hostcopy_registration {
    fn from(registration: Registration) -> hostcopy_registration {
        hostcopy_registration {
            registered: registration.registered,
            len: registration.len,
            refused: registration
                .refused
                .map_or(0, |error| i32::try_from(error.code()).unwrap_or(i32::MAX)),
            finished: i32::from(registration.finished),
        }
    }
}

/// Writes `registration` where `out` points, if it is not null.
///
/// # Safety
///
/// `out` is null or writable.
unsafe fn report(out: *mut hostcopy_registration, registration: Registration) {
    if !out.is_null() {
        // SAFETY: the caller's contract.
        unsafe { out.write(registration.into()) };
    }
}

/// Registers the buffer with the driver.
///
/// # Safety
///
/// `buffer` and `stager` are each null or live; `registration` is null or
/// writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hostcopy_host_buffer_register(
    buffer: *mut hostcopy_host_buffer,
    stager: *const hostcopy_stager,
    when: i32,
    registration: *mut hostcopy_registration,
) -> hostcopy_status {
    entry("hostcopy_host_buffer_register", || {
        // SAFETY: the caller's contract; only shared access is taken.
        let (buffer, stager) = unsafe {
            (
                reference(buffer.cast_const(), "buffer")?,
                reference(stager, "stager")?,
            )
        };
        let when = match when {
            0 => Register::Never,
            1 => Register::Background,
            2 => Register::Now,
            other => {
                return Err(Failure::invalid(format!(
                    "when is {other}: HOSTCOPY_REGISTER_NEVER (0), _BACKGROUND (1) or _NOW (2)"
                )));
            }
        };
        let mut locked = buffer.memory.write()?;
        // Under the write lock no share can be taken: the count is exact.
        if Arc::strong_count(&buffer.memory) > 1 {
            return Err(Failure::new(
                HOSTCOPY_ERROR_BUSY,
                "the host buffer is in use by a transfer: register it before starting \
                 transfers, or once they are freed",
            ));
        }
        let _saved = Context::save_current()?;
        let status = locked.register(&stager.context, when);
        // SAFETY: the caller's contract.
        unsafe { report(registration, status) };
        Ok(())
    })
}

/// How far its registration has got.
///
/// # Safety
///
/// `buffer` is null or live; `registration` is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hostcopy_host_buffer_registration(
    buffer: *const hostcopy_host_buffer,
    registration: *mut hostcopy_registration,
) -> hostcopy_status {
    entry("hostcopy_host_buffer_registration", || {
        // SAFETY: the caller's contract.
        let (buffer, registration) = unsafe {
            (
                reference(buffer, "buffer")?,
                out(registration, "registration")?,
            )
        };
        registration.write(buffer.memory.read()?.registration().into());
        Ok(())
    })
}

/// Waits until its registration has ended.
///
/// # Safety
///
/// `buffer` is null or live; `registration` is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hostcopy_host_buffer_wait_registered(
    buffer: *const hostcopy_host_buffer,
    registration: *mut hostcopy_registration,
) -> hostcopy_status {
    entry("hostcopy_host_buffer_wait_registered", || {
        // SAFETY: the caller's contract.
        let (buffer, registration) = unsafe {
            (
                reference(buffer, "buffer")?,
                out(registration, "registration")?,
            )
        };
        registration.write(buffer.memory.read()?.wait_registered().into());
        Ok(())
    })
}
