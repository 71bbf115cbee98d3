//! Copies between pinned host memory and the device, on the stager's
//! first stream: no staging, one driver copy, waited for; after an error
//! the pinned buffer is given back only where no copy can touch it.

use super::Engine;
use crate::cuda::capture::RelaxedCapture;
use crate::cuda::device::{DeviceInUse, DeviceMemory, device_range};
use crate::cuda::error::Error;
use crate::cuda::pinned::PinnedBuffer;
use crate::cuda::retire::{self, Kept};
use crate::cuda::staging::driver_path::PinnedTransferError;
use crate::cuda::staging::in_flight::InUse;

impl Engine {
    /// See [`Stager::device_to_pinned`](crate::cuda::staging::Stager::device_to_pinned).
    pub(in crate::cuda::staging) fn device_to_pinned<S: DeviceMemory>(
        &mut self,
        dst: PinnedBuffer,
        src: &S,
        device_offset: usize,
    ) -> Result<PinnedBuffer, PinnedTransferError> {
        let _relaxed = RelaxedCapture::new();
        if let Err(error) = self
            .check_usable()
            .and_then(|()| self.context.expect_same(src.memory_context()))
            .and_then(|()| device_range(src, device_offset, dst.len()))
        {
            return Err(PinnedTransferError::new(error, Some(dst)));
        }
        if dst.is_empty() {
            return Ok(dst);
        }
        let stream = self.lanes.streams[0].as_stream();
        if let Err(error) = self.order.order_lane(0, stream) {
            return Err(PinnedTransferError::new(error, Some(dst)));
        }
        // SAFETY: `dst` is pinned, `len` writable bytes, owned here until
        // `settle_pinned` has seen the copy finish; if it cannot, the
        // buffer is leaked, so nothing reads, writes or frees it while the
        // copy may still write it.
        let queued =
            unsafe { stream.copy_device_to_host(dst.raw_ptr(), src, device_offset, dst.len()) };
        self.settle_pinned(queued, dst, src.memory_in_use())
    }

    /// See [`Stager::pinned_to_device`](crate::cuda::staging::Stager::pinned_to_device).
    pub(in crate::cuda::staging) fn pinned_to_device<D: DeviceMemory>(
        &mut self,
        dst: &mut D,
        src: PinnedBuffer,
        device_offset: usize,
    ) -> Result<PinnedBuffer, PinnedTransferError> {
        let _relaxed = RelaxedCapture::new();
        if let Err(error) = self
            .check_usable()
            .and_then(|()| self.context.expect_same(dst.memory_context()))
            .and_then(|()| device_range(dst, device_offset, src.len()))
        {
            return Err(PinnedTransferError::new(error, Some(src)));
        }
        if src.is_empty() {
            return Ok(src);
        }
        let stream = self.lanes.streams[0].as_stream();
        if let Err(error) = self.order.order_lane(0, stream) {
            return Err(PinnedTransferError::new(error, Some(src)));
        }
        // SAFETY: `src` is pinned and owned here until `settle_pinned` has
        // seen the copy finish; if it cannot, the buffer is leaked, so no
        // one writes or frees it while the copy may still read it. `dst`
        // is mutably borrowed.
        let queued =
            unsafe { stream.copy_host_to_device(dst, device_offset, src.raw_ptr(), src.len()) };
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
        if !was_queued || self.drained() {
            return Err(PinnedTransferError::new(error, Some(pinned)));
        }
        retire::keep(pinned, Kept::PinnedBuffer);
        self.release(InUse::device(device));
        Err(PinnedTransferError::new(error, None))
    }
}
