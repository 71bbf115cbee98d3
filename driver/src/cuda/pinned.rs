//! Pinned host memory: allocated by the driver, or pageable memory the
//! driver pins in place. Both are host memory a record may point into, and
//! what the GPU copies to and from at the link's full speed.

use core::fmt;
use core::marker::PhantomData;
use core::ops::{Deref, DerefMut};
use core::ptr::NonNull;

use super::context::Context;
use super::error::DriverError;
use super::ffi;
use crate::RawRegion;
use crate::memory::{HostMemory, HostMemoryMut, HostRange};

/// Page-locked host memory from `cuMemHostAlloc` (portable to every
/// context), zeroed, freed on drop. It keeps its context alive: the driver
/// frees a context's pinned memory with the context.
///
/// It is host memory: records pack from and into it like any slice. In a
/// staged pipeline the GPU writes a pinned slot between host copies, which
/// the borrow checker cannot follow; such pipelines build records from
/// [`raw_region`](Self::raw_region) and answer for the stream order.
pub struct PinnedBuffer {
    context: Context,
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: plain host memory, owned by this value.
unsafe impl Send for PinnedBuffer {}
// SAFETY: shared access only reads.
unsafe impl Sync for PinnedBuffer {}

impl PinnedBuffer {
    /// `len` zeroed bytes of pinned host memory.
    pub fn new(context: &Context, len: usize) -> Result<PinnedBuffer, DriverError> {
        if len == 0 {
            return Ok(PinnedBuffer {
                context: context.clone(),
                ptr: NonNull::dangling(),
                len,
            });
        }
        context.bind()?;
        let mut raw: *mut core::ffi::c_void = core::ptr::null_mut();
        // SAFETY: writes one pointer to `len` bytes, freed in `Drop`.
        unsafe { ffi::cuMemHostAlloc(&mut raw, len, ffi::CU_MEMHOSTALLOC_PORTABLE) }.ok()?;
        let ptr = NonNull::new(raw.cast::<u8>()).expect("cuMemHostAlloc returned success and null");
        // SAFETY: `len` writable bytes; zeroed so the slice views are initialized.
        unsafe { ptr.as_ptr().write_bytes(0, len) };
        Ok(PinnedBuffer {
            context: context.clone(),
            ptr,
            len,
        })
    }

    /// The context the buffer belongs to.
    pub fn context(&self) -> &Context {
        &self.context
    }

    /// The first byte's address, for transfers whose order the caller
    /// answers for (a device-to-host copy into a slot that host functions
    /// read later). Creates no reference to the contents.
    pub fn raw_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The address the device sees the buffer at
    /// (`cuMemHostGetDevicePointer_v2`): what a stream memory wait
    /// ([`StreamRef::wait_value32_geq`](super::StreamRef::wait_value32_geq))
    /// reads a flag through.
    pub(crate) fn device_ptr(&self) -> Result<ffi::CUdeviceptr, DriverError> {
        self.context.bind()?;
        let mut dptr: ffi::CUdeviceptr = 0;
        // SAFETY: writes one address; the pointer is this buffer's own
        // allocation, alive while `self` is.
        unsafe { ffi::cuMemHostGetDevicePointer_v2(&mut dptr, self.ptr.as_ptr().cast(), 0) }
            .ok()?;
        Ok(dptr)
    }

    /// The buffer as a raw host region, for records whose stream order the
    /// caller answers for.
    pub fn raw_region(&self) -> RawRegion {
        RawRegion::host(self.ptr.as_ptr().expose_provenance(), self.len)
    }
}

impl Deref for PinnedBuffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `len` initialized bytes owned by `self`.
        unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for PinnedBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: `len` initialized bytes owned by `self`, borrowed uniquely.
        unsafe { core::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

// SAFETY: pinned memory is ordinary host memory that stays in place until drop.
unsafe impl HostMemory for PinnedBuffer {
    fn host_range(&self) -> HostRange {
        HostRange {
            addr: self.ptr.as_ptr().expose_provenance(),
            len: self.len,
        }
    }
}

// SAFETY: as above; a unique borrow excludes other readers and writers.
unsafe impl HostMemoryMut for PinnedBuffer {
    fn host_range_mut(&mut self) -> HostRange {
        HostRange {
            addr: self.ptr.as_ptr().expose_provenance(),
            len: self.len,
        }
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        if self.len > 0 {
            let _ = self.context.bind();
            // SAFETY: frees the allocation made in `new`, while the context
            // (held by `self`) still lives.
            let _ = unsafe { ffi::cuMemFreeHost(self.ptr.as_ptr().cast()) };
        }
    }
}

impl fmt::Debug for PinnedBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PinnedBuffer")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .finish()
    }
}

/// Pageable memory pinned in place with `cuMemHostRegister` for as long as
/// this value lives; unregistered on drop.
///
/// Forgetting it ([`core::mem::forget`]) is a leak, not undefined
/// behaviour: the range stays registered (page-locked), and since the
/// forgotten value holds a clone of its [`Context`], the context is never
/// destroyed either, so the range stays registered for the rest of the
/// process. The borrow of the buffer still ends: nothing of this layer
/// reaches the range through the forgotten registration, so the buffer may
/// be used, moved or freed; registering an overlapping range again fails
/// (`CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED`).
pub struct HostRegistration<'a> {
    context: Context,
    ptr: NonNull<u8>,
    len: usize,
    _buffer: PhantomData<&'a mut [u8]>,
}

impl<'a> HostRegistration<'a> {
    /// Pins `buffer` in `context` (it must not be empty).
    pub fn new(
        context: &Context,
        buffer: &'a mut [u8],
    ) -> Result<HostRegistration<'a>, DriverError> {
        context.bind()?;
        let len = buffer.len();
        let ptr = NonNull::from(buffer).cast::<u8>();
        // SAFETY: `len` bytes of live memory, borrowed for 'a; unregistered in `Drop`.
        unsafe {
            ffi::cuMemHostRegister_v2(ptr.as_ptr().cast(), len, ffi::CU_MEMHOSTREGISTER_PORTABLE)
        }
        .ok()?;
        Ok(HostRegistration {
            context: context.clone(),
            ptr,
            len,
            _buffer: PhantomData,
        })
    }

    /// Start of the pinned bytes.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the registration is empty (never: registering nothing fails).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for HostRegistration<'_> {
    fn drop(&mut self) {
        let _ = self.context.bind();
        // SAFETY: unregisters what `new` registered.
        let _ = unsafe { ffi::cuMemHostUnregister(self.ptr.as_ptr().cast()) };
    }
}

impl fmt::Debug for HostRegistration<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostRegistration")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .finish()
    }
}
