//! Errors of the CUDA layer: the driver's own codes, named by the driver.

use core::ffi::{CStr, c_char};
use core::fmt;

use super::ffi::{self, CuResult};
use crate::error::{PackError, PackErrorKind, PoolError, PoolErrorKind};

/// A `CUresult` other than `CUDA_SUCCESS`, with the driver's name for it;
/// or the driver could not be loaded at all.
///
/// Any code the installed driver returns is kept as it is, including codes
/// newer than this crate. `Debug` and `Display` show the driver's name from
/// `cuGetErrorName`. Where no driver could be loaded (no NVIDIA driver on
/// the machine, or one too old), [`is_driver_missing`](Self::is_driver_missing)
/// is true and `Display` names the library and what to install.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct DriverError {
    code: u32,
    /// The driver library could not be loaded, or lacks an entry point.
    not_loaded: bool,
}

/// `CUDA_ERROR_STUB_LIBRARY`: the libcuda found is a stub, not a driver;
/// also the code of a [`DriverError`] where no libcuda could be loaded.
pub const CUDA_ERROR_STUB_LIBRARY: u32 = 34;
/// `CUDA_ERROR_INSUFFICIENT_DRIVER`: the driver is older than what is
/// needed; also the code of a [`DriverError`] where the loaded libcuda
/// lacks an entry point the layer calls.
pub const CUDA_ERROR_INSUFFICIENT_DRIVER: u32 = 35;
/// `CUDA_ERROR_NO_DEVICE`: a driver but no device.
pub const CUDA_ERROR_NO_DEVICE: u32 = 100;

impl DriverError {
    /// The numeric `CUresult`: [`CUDA_ERROR_STUB_LIBRARY`] where no driver
    /// library could be loaded, [`CUDA_ERROR_INSUFFICIENT_DRIVER`] where it
    /// lacks an entry point.
    pub const fn code(&self) -> u32 {
        self.code
    }

    /// Whether the libcuda found is a stub (the code a machine without an
    /// NVIDIA driver gives). True where none could be loaded at all too.
    pub const fn is_stub_library(&self) -> bool {
        self.code == CUDA_ERROR_STUB_LIBRARY
    }

    /// Whether this machine has no usable NVIDIA driver: no libcuda could
    /// be loaded, it lacks an entry point the layer needs, or it is a stub.
    pub const fn is_driver_missing(&self) -> bool {
        self.not_loaded || self.is_stub_library()
    }

    /// The driver's name for the code (`CUDA_ERROR_LAUNCH_FAILED`, ...).
    pub fn name(&self) -> &'static str {
        if !self.not_loaded {
            let mut name: *const c_char = core::ptr::null();
            // SAFETY: `cuGetErrorName` writes a pointer to a static string
            // or fails; it needs no context and works before `cuInit`.
            let found = unsafe { ffi::cuGetErrorName(self.code, &mut name) };
            if found.0 == ffi::CUDA_SUCCESS && !name.is_null() {
                // SAFETY: the driver returned a NUL-terminated static string.
                if let Ok(name) = unsafe { CStr::from_ptr(name) }.to_str() {
                    return name;
                }
            }
        }
        // A stub libcuda cannot name anything, not even its own code.
        match self.code {
            CUDA_ERROR_STUB_LIBRARY => "CUDA_ERROR_STUB_LIBRARY",
            CUDA_ERROR_INSUFFICIENT_DRIVER => "CUDA_ERROR_INSUFFICIENT_DRIVER",
            _ => "unknown CUresult",
        }
    }
}

impl DriverError {
    /// The error of a nonzero `code` (as the driver would return it).
    pub(crate) fn from_code(code: u32) -> DriverError {
        debug_assert_ne!(code, ffi::CUDA_SUCCESS);
        DriverError {
            code,
            not_loaded: false,
        }
    }
}

impl CuResult {
    /// `Ok` for `CUDA_SUCCESS`, the error otherwise.
    pub(crate) fn ok(self) -> Result<(), DriverError> {
        match self.0 {
            ffi::CUDA_SUCCESS => Ok(()),
            ffi::NOT_LOADED => Err(DriverError {
                code: match ffi::load_failure().and_then(|failure| failure.missing) {
                    Some(_) => CUDA_ERROR_INSUFFICIENT_DRIVER,
                    None => CUDA_ERROR_STUB_LIBRARY,
                },
                not_loaded: true,
            }),
            code => Err(DriverError {
                code,
                not_loaded: false,
            }),
        }
    }
}

impl fmt::Debug for DriverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DriverError({} {}", self.code, self.name())?;
        if self.not_loaded {
            f.write_str(", driver not loaded")?;
        }
        f.write_str(")")
    }
}

impl fmt::Display for DriverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.not_loaded {
            return write!(f, "CUDA driver error {} ({})", self.code, self.name());
        }
        match ffi::load_failure() {
            Some(ffi::LoadFailure {
                library,
                missing: Some(entry),
                ..
            }) => write!(
                f,
                "the NVIDIA driver is too old: {library} lacks {entry}; \
                 hostcopy needs a driver for CUDA 11.7 or later"
            ),
            Some(ffi::LoadFailure {
                library, detail, ..
            }) => write!(
                f,
                "no NVIDIA driver: {library} could not be loaded ({detail}); \
                 install the NVIDIA driver (it provides {library}) on a machine with an \
                 NVIDIA GPU, or set HOSTCOPY_LIBCUDA to the library's path"
            ),
            None => f.write_str("no NVIDIA driver could be loaded"),
        }
    }
}

impl core::error::Error for DriverError {}

/// Why a launch, a graph operation or a buffer allocation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The driver refused the call.
    Driver(DriverError),
    /// The record pool had no free slot.
    Pool(PoolError),
    /// A record could not be packed.
    Pack(PackError),
    /// The stream is capturing a graph, and the launch cannot become part of
    /// it: a record borrowed for a scope cannot become a graph node that
    /// outlives the scope, and an executable's records are not owned by the
    /// graph being captured.
    Capturing,
    /// A range of device memory is outside its buffer.
    DeviceOutOfBounds {
        /// Byte offset of the range in the buffer.
        offset: usize,
        /// Length of the range in bytes.
        nbytes: usize,
        /// Length of the buffer in bytes.
        len: usize,
    },
    /// A graph node of another graph than the one (or the executable of the
    /// one) it was given to.
    ForeignNode,
    /// The stream has an open launch scope, whose borrowed records must not
    /// become graph nodes: until the scope returns it can neither begin
    /// capturing nor wait for an event recorded in a capture (which would
    /// join it to that capture).
    ScopeOpen,
    /// No context is current on the calling thread, so a null stream names
    /// none: pass a stream, or make a device current (cuda.core's
    /// `Device.set_current()`, torch's first CUDA call).
    NoCurrentContext,
    /// A stream or context of `device` that is not the device's primary
    /// context: the layer works in primary contexts, which cuda.core,
    /// torch, cupy and the CUDA runtime use.
    NotPrimaryContext {
        /// The context's device ordinal.
        device: usize,
    },
    /// The address given as device memory is not device memory (host
    /// memory, pinned or not, or an address no allocation holds), as the
    /// driver reports it.
    NotDeviceMemory {
        /// The address.
        addr: usize,
    },
    /// A handle of one device's context was given to a call working in
    /// another's (an event recorded on a stream of another device, device
    /// memory copied on another device's stream or stager, an executable
    /// launched on another device's stream). Refused before the call.
    ContextMismatch {
        /// Device ordinal of the context the call works in (the stream's,
        /// the stager's, the event's).
        expected: usize,
        /// Device ordinal of the context the handle given belongs to.
        found: usize,
    },
    /// Block `index` of a batched transfer lies outside its memory on
    /// `side`. Refused before anything is queued.
    BlockOutOfBounds {
        /// The block's index in the list given.
        index: usize,
        /// Which memory it is outside of.
        side: BlockSide,
        /// The block's byte offset in that memory.
        offset: usize,
        /// The block's length in bytes.
        nbytes: usize,
        /// That memory's length in bytes.
        len: usize,
    },
    /// An option of a [`Stager`](crate::cuda::staging::Stager) outside the
    /// range it can work with (a zero chunk, no staging buffer, more
    /// workers than a pool can have). Refused before any driver call.
    InvalidOption {
        /// The option's name, as its builder method is called (`"chunk"`,
        /// `"buffers"`, `"workers"`, `"stagers"`).
        option: &'static str,
        /// The value given.
        value: usize,
        /// The smallest value accepted.
        min: usize,
        /// The largest value accepted.
        max: usize,
    },
    /// Blocks `first` and `second` of a batched transfer (indices in the
    /// list given, `first < second`) write some of the same bytes: their
    /// destinations overlap, so the result would depend on the order of
    /// copies that run in parallel. Refused before anything is queued.
    BlocksOverlap {
        /// The lower index.
        first: usize,
        /// The higher index.
        second: usize,
    },
    /// Device memory whose owner orders its use on a stream of its own
    /// (cudarc's memory, through
    /// [`CudarcMemory`](crate::cuda::staging::cudarc::CudarcMemory)), given
    /// to a call that cannot keep that order: only
    /// [`Stager::run`](crate::cuda::staging::Stager::run) keeps it, not a
    /// transfer that returns at once, a pinned copy or a stream's copy.
    /// Refused before anything is ordered or queued.
    OrderNotKept,
    /// Device memory lent for reading only (`CudarcMemory::read`) given as
    /// the destination of a transfer. Refused before anything is ordered
    /// or queued.
    ReadOnlyDevice,
    /// The device, or its driver, refuses stream memory waits
    /// (`cuStreamWaitValue32_v2`), which every staged transfer queues: a
    /// [`Stager`](crate::cuda::staging::Stager) cannot work there, and
    /// none is made. Pinned memory needs no stager (a stream's own
    /// copies); pageable memory takes the driver's own copies.
    StreamMemoryWaitsUnsupported {
        /// The device's ordinal.
        device: usize,
    },
}

/// The memory a block of a batched transfer is checked against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BlockSide {
    /// The host memory.
    Host,
    /// The device memory.
    Device,
}

impl From<DriverError> for Error {
    fn from(error: DriverError) -> Self {
        Error::Driver(error)
    }
}

impl From<PackError> for Error {
    fn from(error: PackError) -> Self {
        Error::Pack(error)
    }
}

impl From<PoolError> for Error {
    fn from(error: PoolError) -> Self {
        Error::Pool(error)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Driver(error) => error.fmt(f),
            Error::Pool(error) => error.fmt(f),
            Error::Pack(error) => error.fmt(f),
            Error::Capturing => f.write_str(
                "the stream is capturing a graph: launch an owned record, not a scoped one or an executable graph",
            ),
            Error::DeviceOutOfBounds {
                offset,
                nbytes,
                len,
            } => write!(
                f,
                "device range of {nbytes} bytes at offset {offset} is out of bounds of a {len}-byte buffer"
            ),
            Error::ForeignNode => f.write_str("the node belongs to another graph"),
            Error::ScopeOpen => f.write_str(
                "a launch scope is open on the stream: it cannot begin or join a capture until the scope returns",
            ),
            Error::NoCurrentContext => f.write_str(
                "no CUDA context is current on this thread: pass a stream, or make a device current first",
            ),
            Error::NotPrimaryContext { device } => write!(
                f,
                "the stream belongs to a context of device {device} that is not its primary context: \
                 hostcopy works in primary contexts (those cuda.core, torch, cupy and the CUDA runtime use)"
            ),
            Error::NotDeviceMemory { addr } => write!(
                f,
                "{addr:#x} is not device memory: pass GPU memory as the device side of a transfer"
            ),
            Error::ContextMismatch { expected, found } => write!(
                f,
                "a handle of device {found}'s context was given to a call in device {expected}'s context: \
                 use streams, events, buffers and stagers of one device together"
            ),
            Error::BlockOutOfBounds {
                index,
                side,
                offset,
                nbytes,
                len,
            } => {
                let side = match side {
                    BlockSide::Host => "host",
                    BlockSide::Device => "device",
                };
                write!(
                    f,
                    "block {index} ({nbytes} bytes at offset {offset}) is out of bounds of the \
                     {len}-byte {side} memory"
                )
            }
            Error::BlocksOverlap { first, second } => write!(
                f,
                "blocks {first} and {second} write overlapping bytes: destinations of a batch must be disjoint"
            ),
            Error::InvalidOption {
                option,
                value,
                min,
                max,
            } => write!(
                f,
                "staging option {option} = {value} is outside {min}..={max}"
            ),
            Error::OrderNotKept => f.write_str(
                "this memory is ordered on its owner's stream, which only a blocking transfer \
                 (Stager::run) keeps: run it there",
            ),
            Error::ReadOnlyDevice => f.write_str(
                "the device memory was lent for reading only: lend it for writing \
                 (CudarcMemory::write) to copy into it",
            ),
            Error::StreamMemoryWaitsUnsupported { device } => write!(
                f,
                "device {device} or its driver refuses stream memory waits (cuStreamWaitValue32), \
                 which staged transfers need: copy with the driver's own calls there"
            ),
        }
    }
}

impl Error {
    /// The variant, as [`ErrorKind`]: for the Python binding, which ships
    /// with this crate and maps every variant to a class of its own without
    /// a wildcard arm.
    #[doc(hidden)]
    pub const fn kind(&self) -> ErrorKind {
        match *self {
            Error::Driver(error) => ErrorKind::Driver(error),
            Error::Pool(error) => ErrorKind::Pool(error.kind()),
            Error::Pack(error) => ErrorKind::Pack(error.kind()),
            Error::Capturing => ErrorKind::Capturing,
            Error::DeviceOutOfBounds {
                offset,
                nbytes,
                len,
            } => ErrorKind::DeviceOutOfBounds {
                offset,
                nbytes,
                len,
            },
            Error::ForeignNode => ErrorKind::ForeignNode,
            Error::ScopeOpen => ErrorKind::ScopeOpen,
            Error::NoCurrentContext => ErrorKind::NoCurrentContext,
            Error::NotPrimaryContext { device } => ErrorKind::NotPrimaryContext { device },
            Error::NotDeviceMemory { addr } => ErrorKind::NotDeviceMemory { addr },
            Error::ContextMismatch { expected, found } => {
                ErrorKind::ContextMismatch { expected, found }
            }
            Error::BlockOutOfBounds {
                index,
                side,
                offset,
                nbytes,
                len,
            } => ErrorKind::BlockOutOfBounds {
                index,
                side,
                offset,
                nbytes,
                len,
            },
            Error::InvalidOption {
                option,
                value,
                min,
                max,
            } => ErrorKind::InvalidOption {
                option,
                value,
                min,
                max,
            },
            Error::BlocksOverlap { first, second } => ErrorKind::BlocksOverlap { first, second },
            Error::OrderNotKept => ErrorKind::OrderNotKept,
            Error::ReadOnlyDevice => ErrorKind::ReadOnlyDevice,
            Error::StreamMemoryWaitsUnsupported { device } => {
                ErrorKind::StreamMemoryWaitsUnsupported { device }
            }
        }
    }
}

/// [`Error`]'s variants with their fields (and those of the errors it
/// wraps), without `#[non_exhaustive]`: a variant added to `Error` gets
/// one here too (its `kind` has no wildcard arm), so that the Python
/// binding, which matches this without one, fails to compile until it
/// maps it. Not part of the crate's API.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum ErrorKind {
    Driver(DriverError),
    Pool(PoolErrorKind),
    Pack(PackErrorKind),
    Capturing,
    DeviceOutOfBounds {
        offset: usize,
        nbytes: usize,
        len: usize,
    },
    ForeignNode,
    ScopeOpen,
    NoCurrentContext,
    NotPrimaryContext {
        device: usize,
    },
    NotDeviceMemory {
        addr: usize,
    },
    ContextMismatch {
        expected: usize,
        found: usize,
    },
    BlockOutOfBounds {
        index: usize,
        side: BlockSide,
        offset: usize,
        nbytes: usize,
        len: usize,
    },
    InvalidOption {
        option: &'static str,
        value: usize,
        min: usize,
        max: usize,
    },
    BlocksOverlap {
        first: usize,
        second: usize,
    },
    OrderNotKept,
    ReadOnlyDevice,
    StreamMemoryWaitsUnsupported {
        device: usize,
    },
}

impl core::error::Error for Error {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Error::Driver(error) => Some(error),
            Error::Pool(error) => Some(error),
            Error::Pack(error) => Some(error),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Side;

    #[test]
    fn kind_keeps_the_variant_and_its_numbers() {
        let cases = [
            (
                Error::BlockOutOfBounds {
                    index: 3,
                    side: BlockSide::Host,
                    offset: 8,
                    nbytes: 16,
                    len: 20,
                },
                ErrorKind::BlockOutOfBounds {
                    index: 3,
                    side: BlockSide::Host,
                    offset: 8,
                    nbytes: 16,
                    len: 20,
                },
            ),
            (
                Error::Pack(PackError::NullWithLength {
                    side: Side::Dst,
                    nbytes: 5,
                }),
                ErrorKind::Pack(PackErrorKind::NullWithLength {
                    side: Side::Dst,
                    nbytes: 5,
                }),
            ),
            (
                Error::Pool(PoolError::NotHeld { index: 7 }),
                ErrorKind::Pool(PoolErrorKind::NotHeld { index: 7 }),
            ),
            (
                Error::Driver(DriverError::from_code(700)),
                ErrorKind::Driver(DriverError::from_code(700)),
            ),
            (
                Error::ContextMismatch {
                    expected: 0,
                    found: 1,
                },
                ErrorKind::ContextMismatch {
                    expected: 0,
                    found: 1,
                },
            ),
            (Error::ReadOnlyDevice, ErrorKind::ReadOnlyDevice),
            (
                Error::StreamMemoryWaitsUnsupported { device: 2 },
                ErrorKind::StreamMemoryWaitsUnsupported { device: 2 },
            ),
        ];
        for (error, kind) in cases {
            assert_eq!(error.kind(), kind, "{error:?}");
        }
    }
}
