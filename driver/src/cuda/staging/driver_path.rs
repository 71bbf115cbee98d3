//! The driver's own path: transfers below the crossover
//! ([`StagingOptions::driver_path_below`](super::StagingOptions::driver_path_below)),
//! and pinned host memory, which needs no staging at all.

use super::spec::DeviceSide;
use crate::HostRange;
use crate::cuda::StreamRef;
use crate::cuda::device;
use crate::cuda::error::Error;
use crate::cuda::pinned::PinnedBuffer;

/// A small transfer on the driver's own synchronous path (no staging),
/// through the legacy stream: for page-locked host memory, which the
/// driver would copy asynchronously on a stream of ours.
pub(super) fn synchronous(
    host: HostRange,
    device: DeviceSide<'_>,
    offset: usize,
) -> Result<(), Error> {
    let addr = core::ptr::with_exposed_provenance_mut::<u8>(host.addr);
    match device {
        DeviceSide::Source(device) => {
            // SAFETY: `host` comes from a `HostMemoryMut` borrow our caller
            // holds for the call (or answers for, through
            // `Stager::start_unchecked`): `len` writable bytes no one else
            // touches.
            let bytes = unsafe { core::slice::from_raw_parts_mut(addr, host.len) };
            device::copy_to_host(device, offset, bytes)
        }
        DeviceSide::Destination(device) => {
            // SAFETY: `host` comes from a `HostMemory` borrow our caller
            // holds for the call (or answers for, as above): `len`
            // initialized bytes no one writes.
            let bytes = unsafe { core::slice::from_raw_parts(addr.cast_const(), host.len) };
            device::copy_from_host(device, offset, bytes)
        }
    }
}

/// A small transfer of pageable host memory on the driver's own path, on
/// `stream` (one of the stager's, not the legacy stream, which would
/// synchronize with every blocking stream and join or break a capture),
/// then a wait for `stream`: complete when it returns. The driver stages
/// pageable memory within the call (a download has landed when it
/// returns, an upload's source has been read), so nothing touches `host`
/// after the call, even if the wait fails.
pub(super) fn on_stream(
    stream: StreamRef<'_>,
    host: HostRange,
    device: DeviceSide<'_>,
    offset: usize,
) -> Result<(), Error> {
    let addr = core::ptr::with_exposed_provenance_mut::<u8>(host.addr);
    match device {
        // SAFETY: `host` comes from a `HostMemoryMut` borrow our caller
        // holds for the call (or answers for, through
        // `Stager::start_unchecked`): `len` writable pageable bytes, which
        // the driver has written when the copy returns; `device` is
        // borrowed for the call, and its copy done when the wait below
        // returns (or, if the wait fails, the device memory is kept).
        DeviceSide::Source(device) => unsafe {
            stream.copy_device_to_host(addr, device, offset, host.len)
        },
        // SAFETY: `host` comes from a `HostMemory` borrow as above: `len`
        // initialized pageable bytes, which the driver has read into its
        // own staging memory when the call returns; `device` as above.
        DeviceSide::Destination(device) => unsafe {
            stream.copy_host_to_device(device, offset, addr.cast_const(), host.len)
        },
    }?;
    stream.synchronize()?;
    Ok(())
}

/// A failed [`Stager::device_to_pinned`](super::Stager::device_to_pinned) or
/// [`Stager::pinned_to_device`](super::Stager::pinned_to_device):
/// the error, and the pinned buffer if no copy can touch it any more.
///
/// The buffer is given back when the copy was never queued, or when the
/// stager's streams could be drained after the error. Otherwise (a sticky
/// error: the driver's copy may still be reading or writing it) the buffer
/// is leaked, never freed nor handed out again, and counted in
/// [`leaked`](super::leaked)`().buffers`; so is the device buffer's
/// allocation (`device_buffers`).
#[derive(Debug)]
pub struct PinnedTransferError {
    error: Error,
    buffer: Option<PinnedBuffer>,
}

impl PinnedTransferError {
    pub(super) fn new(error: Error, buffer: Option<PinnedBuffer>) -> PinnedTransferError {
        PinnedTransferError { error, buffer }
    }

    /// Why the transfer failed.
    pub fn error(&self) -> Error {
        self.error
    }

    /// The pinned buffer, unless it was leaked.
    pub fn into_buffer(self) -> Option<PinnedBuffer> {
        self.buffer
    }
}

impl core::fmt::Display for PinnedTransferError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.error.fmt(f)?;
        if self.buffer.is_none() {
            f.write_str(" (the pinned buffer was leaked: a copy may still use it)")?;
        }
        Ok(())
    }
}

impl core::error::Error for PinnedTransferError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl From<PinnedTransferError> for Error {
    fn from(error: PinnedTransferError) -> Error {
        error.error
    }
}
