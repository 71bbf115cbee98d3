//! Transfers that need no staging pipeline: those below the crossover
//! ([`StagingOptions::driver_path_below`](super::StagingOptions::driver_path_below)),
//! through one pinned buffer, and pinned host memory, which needs no
//! staging at all.

use hostcopy_core::HostCopyArgs;

use super::spec::DeviceSide;
use crate::HostRange;
use crate::cuda::StreamRef;
use crate::cuda::error::Error;
use crate::cuda::pinned::PinnedBuffer;
use crate::parallel::{CopyPool, Stores};

/// A transfer below the crossover through `bounce`, a pinned buffer of the
/// stager's own, on `stream`, a piece of the buffer's size at a time: the
/// driver copies between the device and the buffer, `workers` copy
/// between the buffer and the host memory on the calling thread. It is
/// what the driver's pageable path does within its call, but on a stream
/// of the stager's (not the legacy stream, which would synchronize with
/// every blocking stream and join or break a capture), and the driver
/// never copies into or out of the caller's memory: when this returns,
/// even with an error, no queued copy can touch `host`.
///
/// The error comes with whether a driver copy of the buffer was queued
/// and not seen finished (then it may still touch the buffer and the
/// device memory).
pub(super) fn bounced(
    stream: StreamRef<'_>,
    bounce: &PinnedBuffer,
    workers: &CopyPool,
    host: HostRange,
    device: DeviceSide<'_>,
    offset: usize,
) -> Result<(), (Error, bool)> {
    let room = bounce.len();
    let buffer = bounce.raw_ptr();
    let mut at = 0;
    while at < host.len {
        let len = room.min(host.len - at);
        let host_at = host.addr + at;
        let staged = buffer.expose_provenance();
        match device {
            DeviceSide::Source(device) => {
                // SAFETY: the buffer holds `room >= len` bytes that only
                // this call touches, and the wait below returns once the
                // copy into it has run; `device` is borrowed for the call.
                unsafe { stream.copy_device_to_host(buffer, device, offset + at, len) }
                    .map_err(|error| (error, false))?;
                stream.synchronize().map_err(|error| (error.into(), true))?;
                // SAFETY: the buffer holds the `len` bytes the copy wrote;
                // `host` is `len` writable bytes from `at` (our caller's
                // borrow), disjoint from the pinned buffer.
                unsafe { workers.copy(&HostCopyArgs::new(host_at, staged, len), Stores::Cached) };
            }
            DeviceSide::Destination(device) => {
                // SAFETY: `host` holds `len` initialized bytes from `at`
                // (our caller's borrow); the buffer `room >= len` bytes no
                // queued copy touches (the last one was waited for).
                unsafe { workers.copy(&HostCopyArgs::new(staged, host_at, len), Stores::Cached) };
                // SAFETY: the buffer stays untouched until the wait below
                // has seen the copy out of it run; `device` is borrowed.
                unsafe {
                    stream.copy_host_to_device(device, offset + at, buffer.cast_const(), len)
                }
                .map_err(|error| (error, false))?;
                stream.synchronize().map_err(|error| (error.into(), true))?;
            }
        }
        at += len;
    }
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
