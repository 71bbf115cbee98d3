//! Transfers that need no staging pipeline: those below the crossover
//! ([`StagingOptions::driver_path_below`](super::StagingOptions::driver_path_below)),
//! through one pinned buffer, and pinned host memory, which needs no
//! staging at all.

use hostcopy_core::HostCopyArgs;

use super::order::OrderEvents;
use super::spec::DeviceSide;
use crate::HostRange;
use crate::cuda::context::Context;
use crate::cuda::error::Error;
use crate::cuda::pinned::PinnedBuffer;
use crate::cuda::retire::{self, Kept};
use crate::cuda::stream::{Stream, StreamRef};
use crate::parallel::{CopyPool, Stores};

/// The driver's path of a stager: its stream and its pinned buffer, each
/// made for the first transfer that takes the path.
#[derive(Debug)]
pub(super) struct DriverPath {
    context: Context,
    /// The buffer's bytes.
    room: usize,
    stream: Option<Stream>,
    bounce: Option<PinnedBuffer>,
}

impl DriverPath {
    /// The path of a stager in `context`, through a buffer of `room`
    /// bytes; nothing is made until the first transfer.
    pub(super) fn new(context: &Context, room: usize) -> DriverPath {
        DriverPath {
            context: context.clone(),
            room,
            stream: None,
            bounce: None,
        }
    }

    /// A transfer below the crossover, complete when this returns (see
    /// [`bounced`]), queued after the streams given to `wait_for`
    /// (`order`). In the relaxed capture mode: it touches no capture. The
    /// error comes with whether a copy may still run.
    pub(super) fn run(
        &mut self,
        order: &mut OrderEvents,
        workers: &CopyPool,
        host: HostRange,
        device: DeviceSide<'_>,
        offset: usize,
    ) -> Result<(), (Error, bool)> {
        let _relaxed = crate::cuda::capture::RelaxedCapture::new();
        // Refused before anything is queued.
        fn made(error: impl Into<Error>) -> (Error, bool) {
            (error.into(), false)
        }
        if self.stream.is_none() {
            self.stream = Some(Stream::new(&self.context).map_err(made)?);
        }
        if self.bounce.is_none() {
            self.bounce = Some(PinnedBuffer::new(&self.context, self.room).map_err(made)?);
        }
        let (Some(stream), Some(bounce)) = (&self.stream, &self.bounce) else {
            unreachable!("made above");
        };
        let stream = stream.as_stream();
        order.order(stream).map_err(made)?;
        bounced(stream, bounce, workers, host, device, offset)?;
        // The stream waited for every order event and ran past.
        order.all_complete();
        Ok(())
    }

    /// The path's stream, once made.
    pub(super) fn stream(&self) -> Option<&Stream> {
        self.stream.as_ref()
    }

    /// Lets go of the stream, and of the buffer: freed where `drained`
    /// (no queued copy touches it), else kept for good, counted, as the
    /// staging buffers are.
    pub(super) fn retire(&mut self, drained: bool) {
        self.stream = None;
        if let Some(bounce) = self.bounce.take()
            && !drained
        {
            // A small transfer's copy may still touch it.
            retire::keep(bounce, Kept::PinnedBuffer);
        }
    }
}

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
