//! The driver's own path: transfers below the crossover
//! ([`StagingOptions::driver_path_below`](super::StagingOptions::driver_path_below)),
//! and pinned host memory, which needs no staging at all.

use super::{Direction, Stager};
use crate::HostRange;
use crate::cuda::capture::RelaxedCapture;
use crate::cuda::device::{self, DeviceInUse, DeviceMemory, device_range};
use crate::cuda::error::Error;
use crate::cuda::pinned::PinnedBuffer;

/// The device side of a transfer: read from, or written to.
///
/// A destination is taken as `&mut` by every public call (or promised
/// unshared by an unsafe one); here both are shared references.
pub(super) enum DeviceSide<'a> {
    Source(&'a dyn DeviceMemory),
    Destination(&'a dyn DeviceMemory),
}

impl DeviceSide<'_> {
    pub(super) fn memory(&self) -> &dyn DeviceMemory {
        match self {
            DeviceSide::Source(memory) | DeviceSide::Destination(memory) => *memory,
        }
    }

    pub(super) fn direction(&self) -> Direction {
        match self {
            DeviceSide::Source(_) => Direction::DeviceToHost,
            DeviceSide::Destination(_) => Direction::HostToDevice,
        }
    }
}

/// A small transfer on the driver's own synchronous path (no staging).
pub(super) fn driver_path(
    host: HostRange,
    device: DeviceSide<'_>,
    offset: usize,
) -> Result<(), Error> {
    let addr = core::ptr::with_exposed_provenance_mut::<u8>(host.addr);
    match device {
        DeviceSide::Source(device) => {
            // SAFETY: `host` comes from a `HostMemoryMut` borrow our caller
            // holds for the call: `len` writable bytes no one else touches.
            let bytes = unsafe { core::slice::from_raw_parts_mut(addr, host.len) };
            device::copy_to_host(device, offset, bytes)
        }
        DeviceSide::Destination(device) => {
            // SAFETY: `host` comes from a `HostMemory` borrow our caller
            // holds for the call: `len` initialized bytes no one writes.
            let bytes = unsafe { core::slice::from_raw_parts(addr.cast_const(), host.len) };
            device::copy_from_host(device, offset, bytes)
        }
    }
}

/// A failed [`Stager::device_to_pinned`] or [`Stager::pinned_to_device`]:
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

impl Stager {
    /// Copies `dst.len()` bytes from byte `offset` of `src` into pinned
    /// memory with one asynchronous driver copy (the link's speed, no
    /// staging), waits for it, and gives `dst` back.
    ///
    /// `dst` is taken by value because after a sticky context error the
    /// wait returns at once while the driver's copy may still be writing
    /// it: it is then leaked ([`PinnedTransferError`]), never handed back
    /// to safe code, and the device allocation is kept for good. If the
    /// stager's streams cannot be drained after an error, it also refuses
    /// further work, as after a failed staged transfer.
    pub fn device_to_pinned<S: DeviceMemory>(
        &mut self,
        dst: PinnedBuffer,
        src: &S,
        offset: usize,
    ) -> Result<PinnedBuffer, PinnedTransferError> {
        let _relaxed = RelaxedCapture::new();
        if let Err(error) = self
            .check_usable()
            .and_then(|()| self.context.expect_same(src.memory_context()))
            .and_then(|()| device_range(src, offset, dst.len()))
        {
            return Err(PinnedTransferError {
                error,
                buffer: Some(dst),
            });
        }
        if dst.is_empty() {
            return Ok(dst);
        }
        let stream = self.lanes.streams[0].as_stream();
        // SAFETY: `dst` is pinned, `len` writable bytes, owned here until
        // `settle_pinned` has seen the copy finish; if it cannot, the
        // buffer is leaked, so nothing reads, writes or frees it while the
        // copy may still write it.
        let queued = unsafe { stream.copy_device_to_host(dst.raw_ptr(), src, offset, dst.len()) };
        self.settle_pinned(queued, dst, src.memory_in_use())
    }

    /// Copies all of pinned `src` to byte `offset` of `dst` with one
    /// asynchronous driver copy, waits for it, and gives `src` back.
    ///
    /// `src` is taken by value for the reason given in
    /// [`device_to_pinned`](Self::device_to_pinned): after a sticky error
    /// the copy may still be reading it, and it is leaked.
    pub fn pinned_to_device<D: DeviceMemory>(
        &mut self,
        dst: &mut D,
        offset: usize,
        src: PinnedBuffer,
    ) -> Result<PinnedBuffer, PinnedTransferError> {
        let _relaxed = RelaxedCapture::new();
        if let Err(error) = self
            .check_usable()
            .and_then(|()| self.context.expect_same(dst.memory_context()))
            .and_then(|()| device_range(dst, offset, src.len()))
        {
            return Err(PinnedTransferError {
                error,
                buffer: Some(src),
            });
        }
        if src.is_empty() {
            return Ok(src);
        }
        let stream = self.lanes.streams[0].as_stream();
        // SAFETY: `src` is pinned and owned here until `settle_pinned` has
        // seen the copy finish; if it cannot, the buffer is leaked, so no
        // one writes or frees it while the copy may still read it. `dst`
        // is mutably borrowed.
        let queued = unsafe { stream.copy_host_to_device(dst, offset, src.raw_ptr(), src.len()) };
        self.settle_pinned(queued, src, dst.memory_in_use())
    }

    /// Waits for a copy queued on stream 0 between `pinned` and `device`
    /// (if it was queued), draining the streams after an error. Gives
    /// `pinned` back unless a copy may still use it; keeps `device` for
    /// good in that case.
    fn settle_pinned(
        &mut self,
        queued: Result<(), Error>,
        pinned: PinnedBuffer,
        device: DeviceInUse,
    ) -> Result<PinnedBuffer, PinnedTransferError> {
        let was_queued = queued.is_ok();
        let result = queued.and_then(|()| Ok(self.lanes.streams[0].as_stream().synchronize()?));
        let Err(error) = result else {
            return Ok(pinned);
        };
        self.drain();
        // A copy the driver refused was never queued; drained streams have
        // finished every copy. Otherwise the copy may still run.
        if !was_queued || self.undrained.is_none() {
            return Err(PinnedTransferError {
                error,
                buffer: Some(pinned),
            });
        }
        crate::cuda::retire::kept_pinned_buffers(1);
        core::mem::forget(pinned);
        self.release(device);
        Err(PinnedTransferError {
            error,
            buffer: None,
        })
    }
}
