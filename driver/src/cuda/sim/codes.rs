//! The `CUresult` codes the simulator returns, and their names.

use core::ffi::{CStr, c_char, c_uint};

use super::super::ffi::CuResult;

pub(super) const SUCCESS: u32 = 0;
pub(super) const INVALID_VALUE: u32 = 1;
pub(super) const NOT_INITIALIZED: u32 = 3;
pub(super) const OUT_OF_MEMORY: u32 = 2;
pub(super) const INVALID_DEVICE: u32 = 101;
pub(super) const INVALID_IMAGE: u32 = 200;
pub(super) const INVALID_CONTEXT: u32 = 201;
pub(super) const INVALID_HANDLE: u32 = 400;
pub(super) const ILLEGAL_STATE: u32 = 401;
pub(super) const NOT_FOUND: u32 = 500;
pub(super) const NOT_READY: u32 = 600;
pub(super) const CONTEXT_IS_DESTROYED: u32 = 709;
pub(super) const HOST_MEMORY_ALREADY_REGISTERED: u32 = 712;
pub(super) const HOST_MEMORY_NOT_REGISTERED: u32 = 713;
pub(super) const NOT_PERMITTED: u32 = 800;
pub(super) const NOT_SUPPORTED: u32 = 801;
pub(super) const STREAM_CAPTURE_UNSUPPORTED: u32 = 900;
pub(super) const STREAM_CAPTURE_INVALIDATED: u32 = 901;
pub(super) const STREAM_CAPTURE_UNMATCHED: u32 = 903;
pub(super) const STREAM_CAPTURE_UNJOINED: u32 = 904;
pub(super) const STREAM_CAPTURE_ISOLATION: u32 = 905;
pub(super) const CAPTURED_EVENT: u32 = 907;

/// Every code the simulator returns, and the ones tests commonly inject.
const NAMES: &[(u32, &CStr)] = &[
    (0, c"CUDA_SUCCESS"),
    (1, c"CUDA_ERROR_INVALID_VALUE"),
    (2, c"CUDA_ERROR_OUT_OF_MEMORY"),
    (3, c"CUDA_ERROR_NOT_INITIALIZED"),
    (34, c"CUDA_ERROR_STUB_LIBRARY"),
    (100, c"CUDA_ERROR_NO_DEVICE"),
    (101, c"CUDA_ERROR_INVALID_DEVICE"),
    (200, c"CUDA_ERROR_INVALID_IMAGE"),
    (201, c"CUDA_ERROR_INVALID_CONTEXT"),
    (400, c"CUDA_ERROR_INVALID_HANDLE"),
    (401, c"CUDA_ERROR_ILLEGAL_STATE"),
    (500, c"CUDA_ERROR_NOT_FOUND"),
    (600, c"CUDA_ERROR_NOT_READY"),
    (700, c"CUDA_ERROR_ILLEGAL_ADDRESS"),
    (709, c"CUDA_ERROR_CONTEXT_IS_DESTROYED"),
    (712, c"CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED"),
    (713, c"CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED"),
    (719, c"CUDA_ERROR_LAUNCH_FAILED"),
    (800, c"CUDA_ERROR_NOT_PERMITTED"),
    (801, c"CUDA_ERROR_NOT_SUPPORTED"),
    (900, c"CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"),
    (901, c"CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"),
    (902, c"CUDA_ERROR_STREAM_CAPTURE_MERGE"),
    (903, c"CUDA_ERROR_STREAM_CAPTURE_UNMATCHED"),
    (904, c"CUDA_ERROR_STREAM_CAPTURE_UNJOINED"),
    (905, c"CUDA_ERROR_STREAM_CAPTURE_ISOLATION"),
    (906, c"CUDA_ERROR_STREAM_CAPTURE_IMPLICIT"),
    (907, c"CUDA_ERROR_CAPTURED_EVENT"),
    (999, c"CUDA_ERROR_UNKNOWN"),
];

/// The name of `code`, if the simulator knows it.
pub(super) fn name(code: u32) -> Option<&'static CStr> {
    NAMES
        .iter()
        .find(|(c, _)| *c == code)
        .map(|(_, name)| *name)
}

/// `Ok` as `CUDA_SUCCESS`, an error as its code.
pub(super) fn result(outcome: Result<(), u32>) -> CuResult {
    CuResult(outcome.err().unwrap_or(SUCCESS))
}

/// `cuGetErrorName`: a static name for every code above; an unknown code is
/// `CUDA_ERROR_INVALID_VALUE` with a null name, as the driver does.
///
/// # Safety
///
/// `name` is null or writable.
pub(crate) unsafe fn cuGetErrorName(error: c_uint, name_out: *mut *const c_char) -> CuResult {
    if name_out.is_null() {
        return CuResult(INVALID_VALUE);
    }
    let found = name(error);
    // SAFETY: non-null and writable (our caller).
    unsafe { name_out.write(found.map_or(core::ptr::null(), CStr::as_ptr)) };
    CuResult(if found.is_some() {
        SUCCESS
    } else {
        INVALID_VALUE
    })
}
