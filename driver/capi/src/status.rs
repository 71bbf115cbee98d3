//! Status codes, the calling thread's last error, and [`entry`], which
//! every exported function runs its body in: a panic is caught there and
//! becomes `HOSTCOPY_ERROR_PANIC`, so none crosses into C.

use std::any::Any;
use std::cell::RefCell;
use std::ffi::c_char;
use std::panic::{AssertUnwindSafe, catch_unwind};

use hostcopy_driver::cuda::{DriverError, Error, ErrorKind};

/// `hostcopy_status`: 0 for success, a `HOSTCOPY_ERROR_*` otherwise.
#[allow(non_camel_case_types)]
pub type hostcopy_status = i32;

/// Success.
pub(crate) const HOSTCOPY_OK: hostcopy_status = 0;
/// A pointer that must not be null was null.
pub(crate) const HOSTCOPY_ERROR_NULL_ARGUMENT: hostcopy_status = 1;
/// A structure of another size, or an argument outside its range.
pub(crate) const HOSTCOPY_ERROR_INVALID_ARGUMENT: hostcopy_status = 2;
/// A range or block outside its memory.
pub(crate) const HOSTCOPY_ERROR_OUT_OF_BOUNDS: hostcopy_status = 3;
/// Two blocks of a batch write the same bytes.
pub(crate) const HOSTCOPY_ERROR_BLOCKS_OVERLAP: hostcopy_status = 4;
/// Not device memory, as the driver reports it.
pub(crate) const HOSTCOPY_ERROR_NOT_DEVICE_MEMORY: hostcopy_status = 5;
/// Memory or a handle of another device.
pub(crate) const HOSTCOPY_ERROR_CONTEXT_MISMATCH: hostcopy_status = 6;
/// The driver refused a call.
pub(crate) const HOSTCOPY_ERROR_DRIVER: hostcopy_status = 7;
/// A host buffer in use by a transfer.
pub(crate) const HOSTCOPY_ERROR_BUSY: hostcopy_status = 8;
/// Host memory could not be mapped.
pub(crate) const HOSTCOPY_ERROR_OUT_OF_MEMORY: hostcopy_status = 9;
/// Not available on this device, driver or platform.
pub(crate) const HOSTCOPY_ERROR_UNSUPPORTED: hostcopy_status = 10;
/// A panic was caught.
pub(crate) const HOSTCOPY_ERROR_PANIC: hostcopy_status = 11;
/// Any other error of the engine.
pub(crate) const HOSTCOPY_ERROR_OTHER: hostcopy_status = 12;

/// Each status's name, NUL-terminated, indexed by its value.
const NAMES: [&str; 13] = [
    "HOSTCOPY_OK\0",
    "HOSTCOPY_ERROR_NULL_ARGUMENT\0",
    "HOSTCOPY_ERROR_INVALID_ARGUMENT\0",
    "HOSTCOPY_ERROR_OUT_OF_BOUNDS\0",
    "HOSTCOPY_ERROR_BLOCKS_OVERLAP\0",
    "HOSTCOPY_ERROR_NOT_DEVICE_MEMORY\0",
    "HOSTCOPY_ERROR_CONTEXT_MISMATCH\0",
    "HOSTCOPY_ERROR_DRIVER\0",
    "HOSTCOPY_ERROR_BUSY\0",
    "HOSTCOPY_ERROR_OUT_OF_MEMORY\0",
    "HOSTCOPY_ERROR_UNSUPPORTED\0",
    "HOSTCOPY_ERROR_PANIC\0",
    "HOSTCOPY_ERROR_OTHER\0",
];

/// Why a call failed: its status, its message, and the driver's code for
/// a driver error.
#[derive(Debug)]
pub(crate) struct Failure {
    status: hostcopy_status,
    message: String,
    driver_code: i32,
}

impl Failure {
    pub(crate) fn new(status: hostcopy_status, message: impl Into<String>) -> Failure {
        Failure {
            status,
            message: message.into(),
            driver_code: 0,
        }
    }

    pub(crate) fn null(argument: &str) -> Failure {
        Failure::new(
            HOSTCOPY_ERROR_NULL_ARGUMENT,
            format!("`{argument}` is NULL"),
        )
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Failure {
        Failure::new(HOSTCOPY_ERROR_INVALID_ARGUMENT, message)
    }

    /// The failure of a call that panicked: `what` names the call.
    fn panicked(what: &str, payload: &(dyn Any + Send)) -> Failure {
        let message = payload
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
            .unwrap_or("a panic without a message");
        Failure::new(
            HOSTCOPY_ERROR_PANIC,
            format!("{what} panicked (a bug of hostcopy): {message}"),
        )
    }

    /// Stores it as the calling thread's last error; its status.
    fn record(self) -> hostcopy_status {
        let status = self.status;
        // `try_with`: nothing is recorded while the thread's locals are
        // torn down (a call from a C thread-exit destructor), but the
        // status is still returned.
        let _ = LAST_ERROR.try_with(|last| *last.borrow_mut() = Some(self));
        status
    }
}

impl From<DriverError> for Failure {
    fn from(error: DriverError) -> Failure {
        Failure {
            status: HOSTCOPY_ERROR_DRIVER,
            message: error.to_string(),
            driver_code: i32::try_from(error.code()).unwrap_or(i32::MAX),
        }
    }
}

impl From<Error> for Failure {
    fn from(error: Error) -> Failure {
        let message = error.to_string();
        // One exhaustive match (no wildcard): a new kind of error fails to
        // compile here until it has a status.
        let status = match error.kind() {
            ErrorKind::Driver(driver) => return Failure::from(driver),
            ErrorKind::DeviceOutOfBounds { .. } | ErrorKind::BlockOutOfBounds { .. } => {
                HOSTCOPY_ERROR_OUT_OF_BOUNDS
            }
            ErrorKind::BlocksOverlap { .. } => HOSTCOPY_ERROR_BLOCKS_OVERLAP,
            ErrorKind::NotDeviceMemory { .. } => HOSTCOPY_ERROR_NOT_DEVICE_MEMORY,
            ErrorKind::ContextMismatch { .. } => HOSTCOPY_ERROR_CONTEXT_MISMATCH,
            ErrorKind::InvalidOption { .. }
            | ErrorKind::NoCurrentContext
            | ErrorKind::NotPrimaryContext { .. } => HOSTCOPY_ERROR_INVALID_ARGUMENT,
            ErrorKind::StreamMemoryWaitsUnsupported { .. } => HOSTCOPY_ERROR_UNSUPPORTED,
            ErrorKind::Pool(_)
            | ErrorKind::Pack(_)
            | ErrorKind::Capturing
            | ErrorKind::ForeignNode
            | ErrorKind::ScopeOpen
            | ErrorKind::OrderNotKept
            | ErrorKind::ReadOnlyDevice => HOSTCOPY_ERROR_OTHER,
        };
        Failure::new(status, message)
    }
}

std::thread_local! {
    /// The last failure of a call on this thread.
    static LAST_ERROR: RefCell<Option<Failure>> = const { RefCell::new(None) };
}

/// Runs the body of the exported function `what`: its failure becomes
/// the thread's last error and its status; a panic is caught and does the
/// same as `HOSTCOPY_ERROR_PANIC`. The panic's payload is forgotten, not
/// dropped: a payload whose drop panicked again would abort the process.
pub(crate) fn entry(what: &str, body: impl FnOnce() -> Result<(), Failure>) -> hostcopy_status {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => HOSTCOPY_OK,
        Ok(Err(failure)) => failure.record(),
        Err(payload) => {
            let failure = Failure::panicked(what, &*payload);
            std::mem::forget(payload);
            failure.record()
        }
    }
}

/// [`entry`] for functions that return no status (the frees): a panic is
/// caught, recorded and otherwise ignored.
pub(crate) fn entry_void(what: &str, body: impl FnOnce()) {
    let _ = entry(what, || {
        body();
        Ok(())
    });
}

/// The name of `status` as a static C string; `"unknown"` for a value
/// that is none.
#[unsafe(no_mangle)]
pub extern "C" fn hostcopy_status_name(status: hostcopy_status) -> *const c_char {
    let name = usize::try_from(status)
        .ok()
        .and_then(|index| NAMES.get(index))
        .copied()
        .unwrap_or("unknown\0");
    name.as_ptr().cast()
}

/// Copies the calling thread's last error message into `buf` (at most
/// `size - 1` bytes and a NUL) and returns the message's whole length.
///
/// # Safety
///
/// `buf` is null (then `size` must be 0) or points to `size` writable
/// bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hostcopy_last_error_message(buf: *mut c_char, size: usize) -> usize {
    let mut length = 0;
    let status = entry("hostcopy_last_error_message", || {
        LAST_ERROR.with(|last| {
            let last = last.borrow();
            let message = last.as_ref().map_or("", |failure| failure.message.as_str());
            length = message.len();
            if !buf.is_null() && size > 0 {
                let copied = message.len().min(size - 1);
                // SAFETY: the caller's contract: `buf` holds `size` bytes,
                // and `copied + 1 <= size`; the message is a Rust string,
                // which cannot overlap the caller's buffer.
                unsafe {
                    core::ptr::copy_nonoverlapping(message.as_ptr(), buf.cast::<u8>(), copied);
                    buf.add(copied).write(0);
                }
            }
        });
        Ok(())
    });
    if status == HOSTCOPY_OK { length } else { 0 }
}

/// The CUresult of the calling thread's last error if it was a driver
/// error, else 0.
#[unsafe(no_mangle)]
pub extern "C" fn hostcopy_last_error_driver_code() -> i32 {
    LAST_ERROR
        .try_with(|last| {
            last.borrow()
                .as_ref()
                .map_or(0, |failure| failure.driver_code)
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_has_its_name() {
        let names = [
            (HOSTCOPY_OK, "HOSTCOPY_OK"),
            (HOSTCOPY_ERROR_NULL_ARGUMENT, "HOSTCOPY_ERROR_NULL_ARGUMENT"),
            (
                HOSTCOPY_ERROR_INVALID_ARGUMENT,
                "HOSTCOPY_ERROR_INVALID_ARGUMENT",
            ),
            (HOSTCOPY_ERROR_OUT_OF_BOUNDS, "HOSTCOPY_ERROR_OUT_OF_BOUNDS"),
            (
                HOSTCOPY_ERROR_BLOCKS_OVERLAP,
                "HOSTCOPY_ERROR_BLOCKS_OVERLAP",
            ),
            (
                HOSTCOPY_ERROR_NOT_DEVICE_MEMORY,
                "HOSTCOPY_ERROR_NOT_DEVICE_MEMORY",
            ),
            (
                HOSTCOPY_ERROR_CONTEXT_MISMATCH,
                "HOSTCOPY_ERROR_CONTEXT_MISMATCH",
            ),
            (HOSTCOPY_ERROR_DRIVER, "HOSTCOPY_ERROR_DRIVER"),
            (HOSTCOPY_ERROR_BUSY, "HOSTCOPY_ERROR_BUSY"),
            (HOSTCOPY_ERROR_OUT_OF_MEMORY, "HOSTCOPY_ERROR_OUT_OF_MEMORY"),
            (HOSTCOPY_ERROR_UNSUPPORTED, "HOSTCOPY_ERROR_UNSUPPORTED"),
            (HOSTCOPY_ERROR_PANIC, "HOSTCOPY_ERROR_PANIC"),
            (HOSTCOPY_ERROR_OTHER, "HOSTCOPY_ERROR_OTHER"),
        ];
        assert_eq!(names.len(), NAMES.len());
        for (status, name) in names {
            assert_eq!(NAMES[status as usize], format!("{name}\0"));
        }
    }

    #[test]
    fn a_panic_becomes_a_status_and_a_message() {
        let status = entry("test", || panic!("on purpose"));
        assert_eq!(status, HOSTCOPY_ERROR_PANIC);
        let mut buf = [0 as c_char; 64];
        // SAFETY: `buf` holds 64 bytes.
        let len = unsafe { hostcopy_last_error_message(buf.as_mut_ptr(), buf.len()) };
        assert!(len > 0);
    }
}
