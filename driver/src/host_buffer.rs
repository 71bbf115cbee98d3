//! [`HostBuffer`]: pageable host memory made to be copied into at once.

use core::ops::{Deref, DerefMut};
use core::ptr::NonNull;

use crate::memory::{HostMemory, HostMemoryMut, HostRange};
use crate::prefault::{self, FaultIn};

/// Pageable, private anonymous host memory whose pages are present when it
/// is made: a host pool for a KV cache, a checkpoint buffer, the
/// destination of large staged copies (feature `std`; Unix).
///
/// A `Vec` of the same size has no pages until they are written, and a
/// copy into it runs at the pace of the page faults (on the H200 host, a
/// staged copy into a never-touched destination ran at a fifth of the
/// link). A `HostBuffer` is mapped with `mmap`, advised `MADV_HUGEPAGE`
/// where the kernel's transparent huge pages are in `madvise` mode (Linux),
/// and faulted in by several threads before [`new`](Self::new) returns
/// (huge pages by writing a byte of each 4 KiB page, small ones with
/// `MADV_POPULATE_WRITE`); its bytes are zero. Unlike pinned memory
/// (`cuMemHostAlloc`) it needs no driver and no registration, and is not
/// locked: the kernel may still swap it out under memory pressure.
///
/// It is `[u8]` (`Deref`, `DerefMut`), so it is host memory for every
/// staged copy, and for packing records:
///
/// ```
/// use hostcopy_driver::HostBuffer;
///
/// let mut pool = HostBuffer::new(8 << 20)?;
/// assert!(pool.iter().all(|&byte| byte == 0));
/// pool[..4].copy_from_slice(b"kv00");
/// let source = *b"data";
/// let record = hostcopy_driver::Record::pack(&mut pool[4..8], &source)?;
/// // SAFETY: the record's ranges are alive and disjoint.
/// unsafe { hostcopy_driver::hostcopy_fn(record.user_data()) };
/// assert_eq!(&pool[..8], b"kv00data");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// The memory is unmapped when the buffer is dropped.
#[derive(Debug)]
pub struct HostBuffer {
    ptr: NonNull<u8>,
    len: usize,
    /// Its registration with the driver, once asked for
    /// ([`register`](Self::register)).
    #[cfg(feature = "cuda")]
    registrar: Option<crate::cuda::registration::Registrar>,
}

// SAFETY: the buffer owns its mapping alone, as a `Box<[u8]>` owns its
// allocation: moving it to another thread moves that ownership.
unsafe impl Send for HostBuffer {}
// SAFETY: shared access gives only `&[u8]`, which is `Sync`.
unsafe impl Sync for HostBuffer {}

/// Why a [`HostBuffer`] could not be made.
#[derive(Debug)]
#[non_exhaustive]
pub enum HostBufferError {
    /// The kernel refused the mapping (out of memory or address space, or
    /// a limit on mappings).
    Map {
        /// Bytes asked for.
        len: usize,
        /// What `mmap` said.
        error: std::io::Error,
    },
    /// Mapping is not available on this platform.
    Unsupported,
}

impl core::fmt::Display for HostBufferError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            HostBufferError::Map { len, error } => {
                write!(f, "mapping {len} bytes of host memory failed: {error}")
            }
            HostBufferError::Unsupported => {
                f.write_str("host buffers are mapped with mmap, which this platform lacks")
            }
        }
    }
}

impl HostBufferError {
    /// The variant, as [`HostBufferErrorKind`] (see
    /// [`PackError::kind`](crate::PackError::kind)).
    #[doc(hidden)]
    pub fn kind(&self) -> HostBufferErrorKind<'_> {
        match self {
            HostBufferError::Map { len, error } => HostBufferErrorKind::Map { len: *len, error },
            HostBufferError::Unsupported => HostBufferErrorKind::Unsupported,
        }
    }
}

/// [`HostBufferError`]'s variants with their fields, exhaustive (see
/// [`PackErrorKind`](crate::PackErrorKind)). Not part of the crate's API.
#[doc(hidden)]
#[derive(Debug)]
#[allow(missing_docs)]
pub enum HostBufferErrorKind<'a> {
    Map {
        len: usize,
        error: &'a std::io::Error,
    },
    Unsupported,
}

impl std::error::Error for HostBufferError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            HostBufferError::Map { error, .. } => Some(error),
            HostBufferError::Unsupported => None,
        }
    }
}

/// Bytes each populating thread takes at least: below this, a thread's
/// start costs more than it saves.
const PER_THREAD: usize = 64 << 20;

impl HostBuffer {
    /// Maps `len` zeroed bytes and makes their pages present, with up to
    /// [`populate_threads`](Self::populate_threads) threads. `len` 0 maps
    /// nothing.
    pub fn new(len: usize) -> Result<HostBuffer, HostBufferError> {
        HostBuffer::with_threads(len, HostBuffer::populate_threads(len))
    }

    /// [`new`](Self::new) with `threads` populating threads (0 or 1: the
    /// calling thread alone).
    pub fn with_threads(len: usize, threads: usize) -> Result<HostBuffer, HostBufferError> {
        let mut buffer = HostBuffer::unpopulated(len)?;
        if len > 0 {
            let mut how = FaultIn::Advise;
            if let Some(huge) = prefault::huge_page_advice()
                && len >= huge
            {
                // The whole mapping is ours, private and anonymous: advise
                // without looking it up. Huge pages are then faulted in
                // fastest by a write to each page (`prefault::write_pages`:
                // on the H200 host 44 to 56 GB/s against 6 to 9.5 for the
                // kernel's populate); the edges outside whole huge pages
                // are a few small pages each.
                let start = buffer.ptr.as_ptr().expose_provenance();
                sys::advise_huge(start, len);
                how = FaultIn::Write;
            }
            populate_parallel(&mut buffer, threads.max(1), how);
        }
        Ok(buffer)
    }

    /// The threads [`new`](Self::new) populates `len` bytes with: one per
    /// 64 MiB, at most one per available core.
    ///
    /// On the 2-core development VM 1, 2 and 4 threads populated 1 GiB of
    /// huge pages at the same 7 to 9 GB/s (the VM's memory is the limit);
    /// on the 16-core H200 host 12 threads reached 76.5 GB/s, so the count
    /// follows the cores.
    pub fn populate_threads(len: usize) -> usize {
        let cores = std::thread::available_parallelism().map_or(1, |cores| cores.get());
        (len / PER_THREAD).clamp(1, cores)
    }

    /// Maps `len` zeroed bytes without making any page present (for
    /// tests and measurements of what [`new`](Self::new) saves).
    pub fn unpopulated(len: usize) -> Result<HostBuffer, HostBufferError> {
        if len == 0 {
            return Ok(HostBuffer {
                ptr: NonNull::dangling(),
                len: 0,
                #[cfg(feature = "cuda")]
                registrar: None,
            });
        }
        let ptr = sys::map(len).map_err(|error| match error {
            Some(error) => HostBufferError::Map { len, error },
            None => HostBufferError::Unsupported,
        })?;
        Ok(HostBuffer {
            ptr,
            len,
            #[cfg(feature = "cuda")]
            registrar: None,
        })
    }

    /// Its bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it has none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Its first byte as a raw pointer taken from the mapping itself, not
    /// through a borrow of its bytes (`Deref`): a pointer to hand to code
    /// outside Rust (a C caller, a driver) that reads and writes the
    /// buffer for as long as it lives. Its accesses must not overlap a
    /// borrow of the same bytes in use (a slice from `Deref` or
    /// `DerefMut`); a later borrow does not take its permission away once
    /// that borrow is no longer used. Dangling (never null) for 0 bytes;
    /// valid until the buffer is dropped.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

/// Registration with the driver (feature `cuda`): see
/// [`cuda::registration`](crate::cuda::registration).
#[cfg(feature = "cuda")]
#[cfg_attr(docsrs, doc(cfg(feature = "cuda")))]
impl HostBuffer {
    /// Registers the buffer's memory with the driver (page-locked, portable
    /// to every context), as `when` says: in the background in ranges of
    /// [`REGISTER_RANGE`](crate::cuda::registration::REGISTER_RANGE) bytes
    /// from its first byte on, now in one piece
    /// ([`default_range`](crate::cuda::registration::default_range)). Staged transfers copy its registered bytes
    /// straight between them and the device, at the link and with no CPU
    /// copy, and stage the rest; a transfer over a half-registered buffer
    /// is staged where it is not yet registered.
    ///
    /// Nothing here fails: a range the driver refuses (a locked-memory
    /// limit, a platform that registers nothing) ends the registration
    /// there and is told by [`registration`](Self::registration). Once
    /// asked for, a registration stays until the buffer is dropped: a
    /// second call returns how far the first has got. The drop stops it
    /// and unregisters the memory.
    ///
    /// Registered memory is locked: the kernel cannot swap it out or
    /// reclaim it while the buffer lives.
    ///
    /// ```no_run
    /// use hostcopy_driver::HostBuffer;
    /// use hostcopy_driver::cuda::Context;
    /// use hostcopy_driver::cuda::registration::Register;
    ///
    /// let context = Context::primary(0)?;
    /// let mut pool = HostBuffer::new(64 << 30)?;
    /// // Usable at once (staged); direct as its ranges are registered.
    /// pool.register(&context, Register::Background);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn register(
        &mut self,
        context: &crate::cuda::Context,
        when: crate::cuda::registration::Register,
    ) -> crate::cuda::registration::Registration {
        let range = crate::cuda::registration::default_range(when);
        self.register_in_ranges(context, when, range)
    }

    /// [`register`](Self::register) in ranges of `range` bytes (rounded up
    /// to whole pages): no direct copy spans two ranges.
    pub fn register_in_ranges(
        &mut self,
        context: &crate::cuda::Context,
        when: crate::cuda::registration::Register,
        range: usize,
    ) -> crate::cuda::registration::Registration {
        if self.registrar.is_none() {
            let start = self.ptr.as_ptr().expose_provenance();
            // SAFETY: the mapping is the buffer's own, registered by no one
            // else (the buffer has no registrar yet); `Drop` unmaps it only
            // after `end` returned `true`.
            self.registrar = unsafe {
                crate::cuda::registration::Registrar::start(context, start, self.len, when, range)
            };
        }
        self.registration()
    }

    /// How far its registration has got.
    pub fn registration(&self) -> crate::cuda::registration::Registration {
        match &self.registrar {
            Some(registrar) => registrar.status(),
            None => crate::cuda::registration::Registration::none(self.len),
        }
    }

    /// Waits until its registration has ended (every range registered, or
    /// one refused) and returns how far it got.
    pub fn wait_registered(&self) -> crate::cuda::registration::Registration {
        match &self.registrar {
            Some(registrar) => registrar.wait(),
            None => crate::cuda::registration::Registration::none(self.len),
        }
    }
}

/// Puts fresh pages holding the same bytes under `[start, start + len)` of
/// a `HostBuffer`'s mapping, so that a driver copy that may still write
/// the old pages (kept, registered, for good) writes nothing safe code can
/// see; `false` where this system cannot.
///
/// # Safety
///
/// The range lies in a live `HostBuffer`'s mapping, and no one reads or
/// writes any byte of the pages it touches during the call (the pages are
/// copied and replaced whole: a range of whole pages touches no byte
/// outside it).
#[cfg(feature = "cuda")]
pub(crate) unsafe fn replace_pages(start: usize, len: usize) -> bool {
    // SAFETY: our caller's contract.
    unsafe { sys::replace_pages(start, len) }
}

/// Populates `memory` with `threads` threads, each a contiguous part
/// (aligned to huge pages, so that no two threads fault one huge page).
fn populate_parallel(memory: &mut [u8], threads: usize, how: FaultIn) {
    let fault_in = move |part: &mut [u8]| {
        // SAFETY: `part` is borrowed exclusively for the call.
        unsafe { prefault::fault_in(part.as_mut_ptr().expose_provenance(), part.len(), how) }
    };
    let align = prefault::huge_page_advice().unwrap_or(prefault::page_size());
    let part = memory.len().div_ceil(threads).next_multiple_of(align);
    if threads == 1 || part >= memory.len() {
        fault_in(memory);
        return;
    }
    std::thread::scope(|scope| {
        let mut parts = memory.chunks_mut(part);
        let first = parts.next();
        for part in parts {
            scope.spawn(move || fault_in(part));
        }
        if let Some(first) = first {
            fault_in(first);
        }
    });
}

impl Deref for HostBuffer {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: `len` bytes mapped readable and writable, zeroed by the
        // kernel, owned by the buffer until it is dropped (or a dangling,
        // aligned pointer with `len` 0).
        unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for HostBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as for `deref`; `&mut self` makes the access exclusive.
        unsafe { core::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl AsRef<[u8]> for HostBuffer {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl AsMut<[u8]> for HostBuffer {
    fn as_mut(&mut self) -> &mut [u8] {
        self
    }
}

// SAFETY: the buffer's mapping stays at one address, readable and
// writable, every byte initialized (zeroed by the kernel), until the buffer
// is dropped, which a borrow of it prevents; as `deref` gives it.
unsafe impl HostMemory for HostBuffer {
    fn host_range(&self) -> HostRange {
        self[..].host_range()
    }
}

// SAFETY: as above, and a unique borrow of the buffer excludes every other
// reader and writer through it (`deref_mut`).
unsafe impl HostMemoryMut for HostBuffer {
    fn host_range_mut(&mut self) -> HostRange {
        self[..].host_range_mut()
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        #[cfg(feature = "cuda")]
        if let Some(registrar) = self.registrar.take()
            && !registrar.end()
        {
            // A copy the driver may still run reads or writes it (or the
            // process gave up on its copies): mapped and registered for
            // good.
            crate::cuda::retire::keep((), crate::cuda::retire::Kept::HostBuffer);
            return;
        }
        if self.len > 0 {
            // SAFETY: the mapping `new` made, unmapped once; no borrow of
            // it outlives the buffer.
            unsafe { sys::unmap(self.ptr, self.len) };
        }
    }
}

#[cfg(all(unix, not(miri)))]
mod sys {
    //! `mmap`, `munmap` and the huge page advice.

    use core::ptr::NonNull;

    /// A private anonymous read-write mapping of `len` (> 0) bytes.
    pub(super) fn map(len: usize) -> Result<NonNull<u8>, Option<std::io::Error>> {
        // SAFETY: a new anonymous mapping at an address the kernel picks:
        // no existing memory is touched.
        let ptr = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(Some(std::io::Error::last_os_error()));
        }
        NonNull::new(ptr.cast::<u8>()).ok_or(None)
    }

    /// Unmaps what [`map`] returned.
    ///
    /// # Safety
    ///
    /// `ptr` and `len` are a mapping [`map`] made, not used after this.
    pub(super) unsafe fn unmap(ptr: NonNull<u8>, len: usize) {
        // SAFETY: our caller's contract. A failure (it cannot fail for a
        // whole mapping of ours) would leave the memory mapped: a leak.
        unsafe { libc::munmap(ptr.as_ptr().cast(), len) };
    }

    #[cfg(any(target_os = "linux", target_os = "android"))]
    pub(super) fn advise_huge(start: usize, len: usize) {
        // SAFETY: only which pages later faults take in our own mapping;
        // no byte's value changes.
        unsafe {
            libc::madvise(
                core::ptr::with_exposed_provenance_mut(start),
                len,
                libc::MADV_HUGEPAGE,
            )
        };
    }

    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    pub(super) fn advise_huge(_start: usize, _len: usize) {}

    /// Moves fresh anonymous pages, holding a copy of the bytes, over the
    /// whole pages of `[start, start + len)` (`mremap`): whatever still
    /// holds the old pages (a driver's registration) keeps them, and no
    /// later access through these addresses reaches them. `false` where it
    /// cannot (the range is then as it was).
    ///
    /// # Safety
    ///
    /// The range lies in a mapping of ours that nothing else reads or
    /// writes through these addresses during the call.
    #[cfg(all(feature = "cuda", any(target_os = "linux", target_os = "android")))]
    pub(super) unsafe fn replace_pages(start: usize, len: usize) -> bool {
        let page = crate::prefault::page_size();
        let first = start / page * page;
        let span = (start + len).next_multiple_of(page) - first;
        let Ok(fresh) = map(span) else {
            return false;
        };
        let old = core::ptr::with_exposed_provenance_mut::<u8>(first);
        // SAFETY: `span` bytes at `old` lie in our mapping (our caller),
        // at `fresh` in the new one; the two do not overlap.
        unsafe { core::ptr::copy_nonoverlapping(old, fresh.as_ptr(), span) };
        // SAFETY: moves our new mapping over whole pages of our own
        // mapping; on failure neither changes.
        let moved = unsafe {
            libc::mremap(
                fresh.as_ptr().cast(),
                span,
                span,
                libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
                old.cast::<libc::c_void>(),
            )
        };
        if moved == libc::MAP_FAILED {
            // SAFETY: the mapping `map` just made, used by no one.
            unsafe { unmap(fresh, span) };
            return false;
        }
        true
    }

    #[cfg(all(feature = "cuda", not(any(target_os = "linux", target_os = "android"))))]
    pub(super) unsafe fn replace_pages(_start: usize, _len: usize) -> bool {
        false
    }
}

#[cfg(any(not(unix), miri))]
mod sys {
    //! No `mmap` here (or under Miri, which cannot run it): the memory
    //! comes from the global allocator, zeroed.

    use core::ptr::NonNull;
    use std::alloc::Layout;

    fn layout(len: usize) -> Option<Layout> {
        Layout::from_size_align(len, 4096).ok()
    }

    pub(super) fn map(len: usize) -> Result<NonNull<u8>, Option<std::io::Error>> {
        let layout = layout(len).ok_or(None)?;
        // SAFETY: `len` > 0 (our caller), so the layout is not zero-sized.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        NonNull::new(ptr).ok_or_else(|| Some(std::io::ErrorKind::OutOfMemory.into()))
    }

    /// # Safety
    ///
    /// `ptr` and `len` are what [`map`] returned, not used after this.
    pub(super) unsafe fn unmap(ptr: NonNull<u8>, len: usize) {
        if let Some(layout) = layout(len) {
            // SAFETY: allocated by `map` with this layout (our caller).
            unsafe { std::alloc::dealloc(ptr.as_ptr(), layout) };
        }
    }

    pub(super) fn advise_huge(_start: usize, _len: usize) {}

    /// Pages cannot be replaced here.
    #[cfg(feature = "cuda")]
    pub(super) unsafe fn replace_pages(_start: usize, _len: usize) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::HostBuffer;
    use std::string::ToString;

    #[test]
    fn the_raw_pointer_writes_across_later_borrows() {
        let mut buffer = HostBuffer::new(3 << 12).unwrap();
        let ptr = buffer.as_mut_ptr();
        // SAFETY: inside the buffer, no borrow of its bytes in use.
        unsafe { ptr.add(5).write(7) };
        assert_eq!(buffer[5], 7);
        buffer[6] = 8;
        // SAFETY: as above: the slices above are no longer used.
        unsafe { ptr.add(6).write(ptr.add(6).read() + 1) };
        assert_eq!(&buffer[5..7], &[7, 9]);
    }

    /// A buffer is host memory as its bytes are: a transfer takes `&buffer`
    /// as it takes `&buffer[..]`.
    #[test]
    fn a_buffer_is_host_memory_over_its_own_bytes() {
        use crate::memory::{HostMemory, HostMemoryMut};
        let mut buffer = HostBuffer::new(2 << 12).unwrap();
        let range = buffer.host_range();
        assert_eq!((range.addr, range.len), (buffer.as_ptr() as usize, 2 << 12));
        let range = buffer.host_range_mut();
        assert_eq!((range.addr, range.len), (buffer.as_ptr() as usize, 2 << 12));
    }

    #[test]
    fn a_new_buffer_is_zeroed_and_present_and_writable() {
        let len = if cfg!(miri) { 3 << 12 } else { 3 << 20 };
        let mut buffer = HostBuffer::new(len).unwrap();
        assert_eq!(buffer.len(), len);
        // Asked before any byte is read (a read would make a page present).
        #[cfg(not(miri))]
        assert!(crate::prefault::is_resident(&buffer));
        assert!(buffer.iter().all(|&byte| byte == 0));
        buffer[len - 3] = 7;
        assert_eq!(buffer[len - 3], 7);
    }

    #[test]
    fn populating_with_several_threads_leaves_every_page_present_and_zero() {
        // Parts not a multiple of the huge page: the last is short.
        let len = if cfg!(miri) {
            5 << 12
        } else {
            (5 << 20) + 4096
        };
        let buffer = HostBuffer::with_threads(len, 3).unwrap();
        // Asked before any byte is read (a read would make a page present).
        #[cfg(not(miri))]
        for part in buffer.chunks(256 << 10) {
            assert!(crate::prefault::is_resident(part));
        }
        assert!(buffer.iter().all(|&byte| byte == 0));
    }

    #[test]
    #[cfg_attr(miri, ignore = "mincore is a system call")]
    fn an_unpopulated_buffer_has_no_pages_until_written() {
        let buffer = HostBuffer::unpopulated(1 << 20).unwrap();
        assert!(!crate::prefault::is_resident(&buffer));
    }

    #[test]
    fn an_empty_buffer_maps_nothing() {
        let buffer = HostBuffer::new(0).unwrap();
        assert!(buffer.is_empty());
        assert_eq!(&*buffer, &[] as &[u8]);
    }

    #[test]
    #[cfg_attr(miri, ignore = "asks mmap for more address space than exists")]
    fn a_mapping_the_kernel_refuses_is_an_error_not_a_panic() {
        let refused = HostBuffer::new(usize::MAX & !4095).unwrap_err();
        assert!(matches!(refused, super::HostBufferError::Map { .. }));
        assert!(refused.to_string().contains("mapping"));
    }

    /// Pages set aside under a range keep every byte of the buffer, at the
    /// range's partial pages too, and the range stays writable.
    #[test]
    #[cfg(feature = "cuda")]
    #[cfg_attr(miri, ignore = "Miri cannot move pages (mremap)")]
    fn replaced_pages_keep_every_byte_and_stay_writable() {
        let page = crate::prefault::page_size();
        let len = 5 * page + 123;
        let mut buffer = HostBuffer::new(len).unwrap();
        for (index, byte) in buffer.iter_mut().enumerate() {
            *byte = (index * 7 + index / 251) as u8;
        }
        let expected = buffer.to_vec();
        let start = buffer.as_ptr().expose_provenance() + page + 17;
        // SAFETY: a range of the buffer's own mapping, touched by no one
        // during the call.
        assert!(unsafe { super::replace_pages(start, 2 * page) });
        assert!(buffer[..] == expected[..], "bytes changed");
        buffer[page + 17] ^= 0xff;
        buffer[len - 1] ^= 0xff;
        assert_eq!(buffer[page + 17], expected[page + 17] ^ 0xff);
    }

    #[test]
    fn the_populating_threads_follow_the_size_and_stop_at_the_cores() {
        assert_eq!(HostBuffer::populate_threads(1 << 20), 1);
        let cores = std::thread::available_parallelism().map_or(1, |cores| cores.get());
        assert_eq!(HostBuffer::populate_threads(1 << 40), cores);
    }
}
