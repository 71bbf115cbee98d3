//! Device memory, for tests, examples and pipelines. Not host memory: a
//! record cannot point into it (packing from [`DeviceBuffer::raw_region`] is
//! refused, and the type does not implement `HostMemory`).

use core::fmt;

use alloc::sync::Arc;

use super::context::Context;
use super::error::{DriverError, Error};
use super::ffi::{self, CUdeviceptr};
use crate::RawRegion;

/// Device memory from `cuMemAlloc` in a context it keeps alive, freed on drop.
///
/// The allocation is shared with the driver work that uses it: a staged
/// transfer that cannot be drained after an error (the driver's copy may
/// still read or write it) keeps the allocation for good, so dropping the
/// buffer then frees nothing (counted in
/// [`staging::leaked`](super::staging::leaked)).
///
/// ```compile_fail
/// # fn f(device: &hostcopy_driver::cuda::DeviceBuffer, dst: &mut [u8]) {
/// // Device memory is not host memory: packing from it does not compile.
/// let record = hostcopy_driver::Record::pack(dst, device);
/// # }
/// ```
pub struct DeviceBuffer {
    allocation: Arc<Allocation>,
}

/// One `cuMemAlloc` allocation, freed when the buffer and every transfer
/// that may use it are gone.
struct Allocation {
    context: Context,
    ptr: CUdeviceptr,
    len: usize,
}

/// A share of a [`DeviceBuffer`]'s allocation, held by driver work that
/// reads or writes it: the allocation is freed only once the buffer and
/// every share are dropped, and never if a share is
/// [`leak`](Self::leak)ed.
pub(crate) struct DeviceInUse(Arc<Allocation>);

impl DeviceInUse {
    /// Keeps the allocation for the rest of the process: a copy the driver
    /// may still run uses it.
    pub(crate) fn leak(self) {
        core::mem::forget(self.0);
    }
}

impl fmt::Debug for DeviceInUse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("DeviceInUse").field(&self.0.ptr).finish()
    }
}

// SAFETY: a device pointer may be used from any thread of the process.
unsafe impl Send for Allocation {}
// SAFETY: only the driver reads or writes through the pointer.
unsafe impl Sync for Allocation {}

impl DeviceBuffer {
    /// `len` bytes of device memory in `context`, their contents unspecified.
    pub fn new(context: &Context, len: usize) -> Result<DeviceBuffer, DriverError> {
        let mut ptr: CUdeviceptr = 0;
        if len > 0 {
            context.bind()?;
            // SAFETY: writes one device pointer, freed in `Drop`.
            unsafe { ffi::cuMemAlloc_v2(&mut ptr, len) }.ok()?;
        }
        Ok(DeviceBuffer {
            allocation: Arc::new(Allocation {
                context: context.clone(),
                ptr,
                len,
            }),
        })
    }

    /// The context the buffer belongs to.
    pub fn context(&self) -> &Context {
        &self.allocation.context
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.allocation.len
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The device address.
    pub fn raw(&self) -> CUdeviceptr {
        self.allocation.ptr
    }

    /// The buffer as a region in device memory: packing refuses it.
    pub fn raw_region(&self) -> RawRegion {
        RawRegion::device(self.raw() as usize, self.len())
    }

    /// A share of the allocation for driver work queued on it.
    pub(crate) fn in_use(&self) -> DeviceInUse {
        DeviceInUse(Arc::clone(&self.allocation))
    }

    /// The device address of `nbytes` bytes at `offset`, if in bounds.
    pub(crate) fn range(&self, offset: usize, nbytes: usize) -> Result<CUdeviceptr, Error> {
        match offset.checked_add(nbytes) {
            Some(end) if end <= self.len() => Ok(self.raw() + offset as u64),
            _ => Err(Error::DeviceOutOfBounds {
                offset,
                nbytes,
                len: self.len(),
            }),
        }
    }

    /// Copies `src` to byte `offset` of the buffer and waits for the copy.
    pub fn copy_from_host(&mut self, offset: usize, src: &[u8]) -> Result<(), Error> {
        let dst = self.range(offset, src.len())?;
        if src.is_empty() {
            return Ok(());
        }
        self.context().bind()?;
        // SAFETY: `dst` is in bounds; `src` is a live slice; synchronous.
        unsafe { ffi::cuMemcpyHtoD_v2(dst, src.as_ptr().cast(), src.len()) }.ok()?;
        Ok(())
    }

    /// Copies bytes from `offset` of the buffer into `dst` and waits for the copy.
    pub fn copy_to_host(&self, offset: usize, dst: &mut [u8]) -> Result<(), Error> {
        let src = self.range(offset, dst.len())?;
        if dst.is_empty() {
            return Ok(());
        }
        self.context().bind()?;
        // SAFETY: `src` is in bounds; `dst` is a live slice; synchronous.
        unsafe { ffi::cuMemcpyDtoH_v2(dst.as_mut_ptr().cast(), src, dst.len()) }.ok()?;
        Ok(())
    }
}

impl Drop for Allocation {
    fn drop(&mut self) {
        if self.len > 0 {
            let _ = self.context.bind();
            // SAFETY: frees the allocation made in `DeviceBuffer::new`, once
            // the buffer and every share of queued work are gone. After a
            // context error this fails and the context's teardown frees it.
            let _ = unsafe { ffi::cuMemFree_v2(self.ptr) };
        }
    }
}

impl fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("ptr", &self.raw())
            .field("len", &self.len())
            .finish()
    }
}
