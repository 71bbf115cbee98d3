//! Device memory: [`DeviceBuffer`], allocated here, and [`DeviceView`],
//! memory another runtime owns (a torch tensor, a cupy array, a cuda.core
//! buffer), both [`DeviceMemory`] that stagers and stream copies read and
//! write. Not host memory: a record cannot point into either (packing from
//! [`DeviceBuffer::raw_region`] is refused, and neither implements
//! `HostMemory`).

use core::ffi::{c_int, c_uint, c_void};
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

// SAFETY: a device pointer may be used from any thread of the process.
unsafe impl Send for Allocation {}
// SAFETY: only the driver reads or writes through the pointer.
unsafe impl Sync for Allocation {}

/// A range of device memory that another runtime allocated and frees,
/// kept allocated by an owner this view holds.
///
/// Made by [`DeviceView::new`], which asks the driver where the memory
/// lives: device memory of the context's device, the whole range inside one
/// allocation. A staged transfer that cannot be drained after an error
/// keeps the owner for good, as it keeps a [`DeviceBuffer`]'s allocation.
/// Not `Clone`: a destination taken as `&mut DeviceView` is this view's
/// alone, as a `&mut DeviceBuffer` is.
pub struct DeviceView {
    context: Context,
    ptr: CUdeviceptr,
    len: usize,
    owner: Arc<dyn Send + Sync>,
}

/// Device memory a [`Stager`](super::staging::Stager) or a stream copy can
/// read or write: a [`DeviceBuffer`] or a [`DeviceView`]. Sealed: every
/// implementation keeps its memory allocated while queued work may use it.
pub trait DeviceMemory: sealed::Sealed {}

pub(crate) mod sealed {
    use super::{Context, DeviceInUse};
    use crate::cuda::error::Error;
    use crate::cuda::ffi::CUdeviceptr;

    /// What the layer reads of device memory.
    pub trait Sealed {
        /// The context the memory belongs to.
        fn memory_context(&self) -> &Context;
        /// The device address of the first byte; [`Error::OrderNotKept`]
        /// for memory whose owner hands it out only with its ordering
        /// ([`memory_order`](Self::memory_order)).
        fn memory_ptr(&self) -> Result<CUdeviceptr, Error>;
        /// Length in bytes.
        fn memory_len(&self) -> usize;
        /// A share that keeps the memory allocated while queued work uses it.
        fn memory_in_use(&self) -> DeviceInUse;
        /// How the memory's owner orders a use of it, for memory whose
        /// address comes only with that ordering (cudarc's); `None` for
        /// memory the caller orders (through `Stager::wait_for`, say).
        #[cfg(feature = "cudarc")]
        fn memory_order(&self) -> Option<&dyn OwnerOrder> {
            None
        }
    }

    /// Device memory whose owner orders every use of it on a stream (cudarc's,
    /// through its events): a blocking transfer checks it, orders its own
    /// streams after the owner's, and asks for the address, with the owner's
    /// ordering around the transfer, only once everything is checked.
    #[cfg(feature = "cudarc")]
    pub trait OwnerOrder {
        /// Refusals that need no driver work: a transfer that `writes` memory
        /// lent for reading ([`Error::ReadOnlyDevice`]), the owner's streams of
        /// another context than `context`, an error the owner kept from a call
        /// that could not return it.
        fn check(&self, context: &Context, writes: bool) -> Result<(), Error>;
        /// [`Error::Capturing`] if a stream of the owner's is capturing a
        /// graph (checked once the transfer is known to copy something).
        fn check_not_capturing(&self, context: &Context) -> Result<(), Error>;
        /// The stream the transfer is ordered with, and the memory's own
        /// stream where that is another: live for as long as `self`.
        fn streams(
            &self,
        ) -> (
            crate::cuda::ffi::CUstream,
            Option<crate::cuda::ffi::CUstream>,
        );
        /// Runs `transfer` on the memory (whose address it may now take),
        /// between the owner's wait for earlier uses and its record of this
        /// one (a write if `writes`).
        fn in_order(
            &self,
            writes: bool,
            transfer: &mut dyn FnMut(&dyn super::DeviceMemory) -> Result<(), Error>,
        ) -> Result<(), Error>;
    }
}

/// A share of device memory held by driver work that reads or writes it:
/// the memory stays allocated while the share lives, and for good once
/// given to [`keep`](Self::keep). Empty for memory that a borrow keeps allocated
/// instead, which nothing here can keep.
pub struct DeviceInUse(Option<Arc<dyn Send + Sync>>);

impl DeviceInUse {
    /// No share: for memory that the caller's borrow keeps allocated for
    /// the whole call that uses it (cudarc's, in a blocking call).
    #[cfg(feature = "cudarc")]
    pub(crate) fn borrowed() -> DeviceInUse {
        DeviceInUse(None)
    }

    /// Keeps the memory for the rest of the process, counted in
    /// [`leaked`](super::staging::leaked): a copy the driver may still run
    /// uses it. (Borrowed memory has no share to keep: its owner answers
    /// for it.)
    pub(crate) fn keep(self) {
        if let Some(share) = self.0 {
            super::retire::keep(share, super::retire::Kept::DeviceAllocation);
        }
    }
}

impl fmt::Debug for DeviceInUse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("DeviceInUse")
    }
}

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

    /// Copies `src` to byte `offset` of the buffer and waits for the copy.
    pub fn copy_from_host(&mut self, offset: usize, src: &[u8]) -> Result<(), Error> {
        copy_from_host(self, offset, src)
    }

    /// Copies bytes from `offset` of the buffer into `dst` and waits for the copy.
    pub fn copy_to_host(&self, offset: usize, dst: &mut [u8]) -> Result<(), Error> {
        copy_to_host(self, offset, dst)
    }
}

/// `CU_POINTER_ATTRIBUTE_*` values the view checks (cuda.h).
const ATTRIBUTE_MEMORY_TYPE: c_uint = 2;
const ATTRIBUTE_DEVICE_ORDINAL: c_uint = 9;
const ATTRIBUTE_RANGE_START_ADDR: c_uint = 11;
const ATTRIBUTE_RANGE_SIZE: c_uint = 12;
/// `CU_MEMORYTYPE_DEVICE`: device memory (managed memory reports it too).
const MEMORY_TYPE_DEVICE: c_uint = 2;

impl DeviceView {
    /// A view of `len` bytes of device memory at `ptr`, which `owner` keeps
    /// allocated, for transfers in `context`.
    ///
    /// Asks the driver first: memory that is not device memory (host
    /// memory, pinned or not, or an address no allocation holds) is
    /// [`Error::NotDeviceMemory`]; memory of another device is
    /// [`Error::ContextMismatch`]; a range that runs past its allocation is
    /// [`Error::DeviceOutOfBounds`]. An empty view is not checked.
    ///
    /// # Safety
    ///
    /// Nothing frees the memory while `owner` (or a clone of the view)
    /// lives: dropping the last of them may free it. Other work that writes
    /// it is ordered with the transfers that use the view (through the
    /// streams the caller hands the stager, for instance).
    pub unsafe fn new(
        context: &Context,
        ptr: CUdeviceptr,
        len: usize,
        owner: Arc<dyn Send + Sync>,
    ) -> Result<DeviceView, Error> {
        if len > 0 {
            check_device_range(context, ptr, len)?;
        }
        Ok(DeviceView {
            context: context.clone(),
            ptr,
            len,
            owner,
        })
    }

    /// The ordinal of the device whose memory holds `ptr`, as the driver
    /// reports it; [`Error::NotDeviceMemory`] for host memory (pinned or
    /// not) and for an address no allocation holds. With it, a binding
    /// finds the context for memory another runtime allocated:
    /// `Context::primary(DeviceView::device_holding(ptr)?)`.
    pub fn device_holding(ptr: CUdeviceptr) -> Result<usize, Error> {
        // SAFETY: plain driver initialization.
        unsafe { ffi::cuInit(0) }.ok()?;
        let not_device = |_| Error::NotDeviceMemory { addr: ptr as usize };
        let memory_type: c_uint =
            pointer_attribute(ATTRIBUTE_MEMORY_TYPE, ptr).map_err(not_device)?;
        if memory_type != MEMORY_TYPE_DEVICE {
            return Err(Error::NotDeviceMemory { addr: ptr as usize });
        }
        let ordinal: c_int = pointer_attribute(ATTRIBUTE_DEVICE_ORDINAL, ptr)?;
        Ok(usize::try_from(ordinal).unwrap_or(usize::MAX))
    }

    /// The context the view's transfers run in.
    pub fn context(&self) -> &Context {
        &self.context
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the view is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The device address.
    pub fn raw(&self) -> CUdeviceptr {
        self.ptr
    }

    /// Copies `src` to byte `offset` of the view and waits for the copy.
    pub fn copy_from_host(&mut self, offset: usize, src: &[u8]) -> Result<(), Error> {
        copy_from_host(self, offset, src)
    }

    /// Copies bytes from `offset` of the view into `dst` and waits for the copy.
    pub fn copy_to_host(&self, offset: usize, dst: &mut [u8]) -> Result<(), Error> {
        copy_to_host(self, offset, dst)
    }
}

/// One pointer attribute of `ptr`, as the driver reports it.
fn pointer_attribute<T: Default>(attribute: c_uint, ptr: CUdeviceptr) -> Result<T, DriverError> {
    let mut value = T::default();
    // SAFETY: the driver writes one value of the attribute's type, which
    // the callers below pair with it (cuda.h).
    unsafe { ffi::cuPointerGetAttribute((&mut value as *mut T).cast::<c_void>(), attribute, ptr) }
        .ok()?;
    Ok(value)
}

/// Checks with the driver that `[ptr, ptr + len)` is device memory of
/// `context`'s device inside one allocation.
fn check_device_range(context: &Context, ptr: CUdeviceptr, len: usize) -> Result<(), Error> {
    context.bind()?;
    let ordinal = DeviceView::device_holding(ptr)?;
    if ordinal != context.ordinal() {
        return Err(Error::ContextMismatch {
            expected: context.ordinal(),
            found: ordinal,
        });
    }
    let start: CUdeviceptr = pointer_attribute(ATTRIBUTE_RANGE_START_ADDR, ptr)?;
    let size: usize = pointer_attribute(ATTRIBUTE_RANGE_SIZE, ptr)?;
    let offset = (ptr - start) as usize;
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(Error::DeviceOutOfBounds {
            offset,
            nbytes: len,
            len: size,
        }),
    }
}

/// The device address of `nbytes` bytes at `offset` of `memory`, if in bounds.
pub(crate) fn device_range<M: DeviceMemory + ?Sized>(
    memory: &M,
    offset: usize,
    nbytes: usize,
) -> Result<CUdeviceptr, Error> {
    let len = memory.memory_len();
    let ptr = memory.memory_ptr()?;
    match offset.checked_add(nbytes) {
        Some(end) if end <= len => Ok(ptr + offset as u64),
        _ => Err(Error::DeviceOutOfBounds {
            offset,
            nbytes,
            len,
        }),
    }
}

/// Copies `src` to byte `offset` of `memory` and waits for the copy.
pub(crate) fn copy_from_host<M: DeviceMemory + ?Sized>(
    memory: &M,
    offset: usize,
    src: &[u8],
) -> Result<(), Error> {
    let dst = device_range(memory, offset, src.len())?;
    if src.is_empty() {
        return Ok(());
    }
    memory.memory_context().bind()?;
    // SAFETY: `dst` is in bounds; `src` is a live slice, which the driver
    // has read (into its staging memory if pageable) when the call returns.
    unsafe { ffi::cuMemcpyHtoD_v2(dst, src.as_ptr().cast(), src.len()) }.ok()?;
    // From pageable memory the call returns before the bytes reach the
    // device: wait for them on the legacy stream, which the copy went
    // through, so that work not ordered with that stream (a non-blocking
    // stream's, a stream-ordered free) finds them there.
    // SAFETY: synchronizes the legacy default stream of the bound context.
    if let Err(error) = unsafe { ffi::cuStreamSynchronize(core::ptr::null_mut()) }.ok() {
        // The bytes may still land: keep the memory allocated for good, as
        // a staged transfer that cannot be drained does.
        memory.memory_in_use().keep();
        return Err(error.into());
    }
    Ok(())
}

/// Copies bytes from `offset` of `memory` into `dst` and waits for the copy.
pub(crate) fn copy_to_host<M: DeviceMemory + ?Sized>(
    memory: &M,
    offset: usize,
    dst: &mut [u8],
) -> Result<(), Error> {
    let src = device_range(memory, offset, dst.len())?;
    if dst.is_empty() {
        return Ok(());
    }
    memory.memory_context().bind()?;
    // SAFETY: `src` is in bounds; `dst` is a live slice; synchronous.
    unsafe { ffi::cuMemcpyDtoH_v2(dst.as_mut_ptr().cast(), src, dst.len()) }.ok()?;
    Ok(())
}

impl DeviceMemory for DeviceBuffer {}

impl sealed::Sealed for DeviceBuffer {
    fn memory_context(&self) -> &Context {
        self.context()
    }
    fn memory_ptr(&self) -> Result<CUdeviceptr, Error> {
        Ok(self.raw())
    }
    fn memory_len(&self) -> usize {
        self.len()
    }
    fn memory_in_use(&self) -> DeviceInUse {
        DeviceInUse(Some(self.allocation.clone()))
    }
}

impl DeviceMemory for DeviceView {}

impl sealed::Sealed for DeviceView {
    fn memory_context(&self) -> &Context {
        &self.context
    }
    fn memory_ptr(&self) -> Result<CUdeviceptr, Error> {
        Ok(self.ptr)
    }
    fn memory_len(&self) -> usize {
        self.len
    }
    fn memory_in_use(&self) -> DeviceInUse {
        DeviceInUse(Some(self.owner.clone()))
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

impl fmt::Debug for DeviceView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceView")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .finish()
    }
}
