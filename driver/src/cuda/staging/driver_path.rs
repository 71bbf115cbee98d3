//! The driver's own path: transfers below the crossover
//! ([`StagingOptions::driver_path_below`](super::StagingOptions::driver_path_below)),
//! and pinned host memory, which needs no staging at all.

use super::{Direction, Stager};
use crate::HostRange;
use crate::cuda::device::DeviceBuffer;
use crate::cuda::error::Error;
use crate::cuda::pinned::PinnedBuffer;

/// The device side of a transfer: read from, or written to.
#[derive(Debug)]
pub(super) enum DeviceSide<'a> {
    Source(&'a DeviceBuffer),
    Destination(&'a mut DeviceBuffer),
}

impl DeviceSide<'_> {
    pub(super) fn buffer(&self) -> &DeviceBuffer {
        match self {
            DeviceSide::Source(buffer) => buffer,
            DeviceSide::Destination(buffer) => buffer,
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
            device.copy_to_host(offset, bytes)
        }
        DeviceSide::Destination(device) => {
            // SAFETY: `host` comes from a `HostMemory` borrow our caller
            // holds for the call: `len` initialized bytes no one writes.
            let bytes = unsafe { core::slice::from_raw_parts(addr.cast_const(), host.len) };
            device.copy_from_host(offset, bytes)
        }
    }
}

impl Stager {
    /// Copies `dst.len()` bytes from byte `offset` of `src` into pinned
    /// memory with one asynchronous driver copy (the link's speed, no
    /// staging), and waits for it.
    ///
    /// If waiting fails and the context cannot be drained either (a sticky
    /// error), the stager refuses further work, as after a failed staged
    /// transfer.
    pub fn device_to_pinned(
        &mut self,
        dst: &mut PinnedBuffer,
        src: &DeviceBuffer,
        offset: usize,
    ) -> Result<(), Error> {
        self.check_usable()?;
        src.range(offset, dst.len())?;
        if dst.is_empty() {
            return Ok(());
        }
        let stream = self.streams[0].as_stream();
        // SAFETY: `dst` is pinned, `len` writable bytes, mutably borrowed
        // until the copy has finished: `settle_pinned` waits for it (or
        // drains the context) before the borrow ends.
        let queued = unsafe { stream.copy_device_to_host(dst.raw_ptr(), src, offset, dst.len()) };
        self.settle_pinned(queued)
    }

    /// Copies all of pinned `src` to byte `offset` of `dst` with one
    /// asynchronous driver copy, and waits for it.
    pub fn pinned_to_device(
        &mut self,
        dst: &mut DeviceBuffer,
        offset: usize,
        src: &PinnedBuffer,
    ) -> Result<(), Error> {
        self.check_usable()?;
        dst.range(offset, src.len())?;
        if src.is_empty() {
            return Ok(());
        }
        let stream = self.streams[0].as_stream();
        // SAFETY: `src` is pinned and borrowed until the copy has finished
        // (`settle_pinned` waits or drains); `dst` is mutably borrowed.
        let queued = unsafe { stream.copy_host_to_device(dst, offset, src.raw_ptr(), src.len()) };
        self.settle_pinned(queued)
    }

    /// Waits for a copy queued on stream 0 (if it was), draining the
    /// context after an error.
    fn settle_pinned(&mut self, queued: Result<(), Error>) -> Result<(), Error> {
        let result = queued.and_then(|()| Ok(self.streams[0].as_stream().synchronize()?));
        if result.is_err() {
            self.drain_after_error();
        }
        result
    }
}
