//! Memory a record may point into: host memory by type, and raw regions that
//! say which address space they are in.

/// Plain data: every byte initialized and every bit pattern a valid value,
/// so bytes can be copied into and out of it freely.
///
/// Implemented for the integer and float types and arrays of them.
///
/// # Safety
///
/// The type has no padding bytes, no invalid bit patterns (so not `bool`,
/// `char`, references or enums), and no interior mutability.
pub unsafe trait Plain: Copy + 'static {}

macro_rules! plain {
    ($($t:ty),*) => {
        // SAFETY: primitive integers and floats have no padding and accept every bit pattern.
        $(unsafe impl Plain for $t {})*
    };
}
plain!(
    u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize, f32, f64
);

// SAFETY: an array of plain data has no padding between its elements.
unsafe impl<T: Plain, const N: usize> Plain for [T; N] {}

/// A range of host memory: an address (with exposed provenance, see
/// [`core::ptr::with_exposed_provenance`]) and a length in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct HostRange {
    /// Address of the first byte.
    pub addr: usize,
    /// Length in bytes.
    pub len: usize,
}

impl HostRange {
    fn of_slice<T>(slice: &[T]) -> Self {
        HostRange {
            addr: slice.as_ptr().expose_provenance(),
            len: size_of_val(slice),
        }
    }

    fn of_slice_mut<T>(slice: &mut [T]) -> Self {
        HostRange {
            addr: slice.as_mut_ptr().expose_provenance(),
            len: size_of_val(slice),
        }
    }
}

/// Memory the host can read, at an address that stays put while it is
/// borrowed. What a record may copy from.
///
/// Implemented for slices, arrays and `heapless::Vec` of [`Plain`] data,
/// `Vec` with the `alloc` feature, hostcopy's own `HostBuffer` with the
/// `std` feature, and pinned host buffers with the `cuda` feature. Device
/// memory does not implement it, so packing from it does not compile; a
/// [`RawRegion`] in device memory is refused at run time.
///
/// # Safety
///
/// For as long as `self` is borrowed, [`host_range`](Self::host_range)
/// describes initialized plain-data bytes that the host can read from any
/// thread, and that no one writes to while the borrow lasts.
pub unsafe trait HostMemory {
    /// The bytes, as an address and a length.
    fn host_range(&self) -> HostRange;
}

/// Host memory that can also be written: what a record may copy into.
///
/// # Safety
///
/// As for [`HostMemory`], and for as long as `self` is mutably borrowed,
/// [`host_range_mut`](Self::host_range_mut) describes bytes that the host may
/// write from any thread with any byte values, and that nothing else reads or
/// writes while the borrow lasts.
pub unsafe trait HostMemoryMut: HostMemory {
    /// The bytes, as an address and a length, with write permission.
    fn host_range_mut(&mut self) -> HostRange;
}

// SAFETY: a slice borrow pins its elements in place and is host memory by
// construction; `Plain` makes every byte initialized and any byte value valid.
unsafe impl<T: Plain> HostMemory for [T] {
    fn host_range(&self) -> HostRange {
        HostRange::of_slice(self)
    }
}

// SAFETY: as above, and a unique borrow excludes other readers and writers.
unsafe impl<T: Plain> HostMemoryMut for [T] {
    fn host_range_mut(&mut self) -> HostRange {
        HostRange::of_slice_mut(self)
    }
}

// SAFETY: an array is a slice with a known length.
unsafe impl<T: Plain, const N: usize> HostMemory for [T; N] {
    fn host_range(&self) -> HostRange {
        HostRange::of_slice(self)
    }
}

// SAFETY: an array is a slice with a known length.
unsafe impl<T: Plain, const N: usize> HostMemoryMut for [T; N] {
    fn host_range_mut(&mut self) -> HostRange {
        HostRange::of_slice_mut(self)
    }
}

// SAFETY: the initialized elements of a heapless vector are an ordinary
// slice in the vector's own storage, which the borrow keeps in place.
unsafe impl<T: Plain, const N: usize, L: heapless::LenType> HostMemory for heapless::Vec<T, N, L> {
    fn host_range(&self) -> HostRange {
        HostRange::of_slice(self.as_slice())
    }
}

// SAFETY: as above; the unique borrow excludes other readers and writers.
unsafe impl<T: Plain, const N: usize, L: heapless::LenType> HostMemoryMut
    for heapless::Vec<T, N, L>
{
    fn host_range_mut(&mut self) -> HostRange {
        HostRange::of_slice_mut(self.as_mut_slice())
    }
}

#[cfg(feature = "alloc")]
// SAFETY: the initialized elements of a `Vec` are a heap slice that cannot
// move or be freed while the vector is borrowed.
unsafe impl<T: Plain> HostMemory for alloc::vec::Vec<T> {
    fn host_range(&self) -> HostRange {
        HostRange::of_slice(self)
    }
}

#[cfg(feature = "alloc")]
// SAFETY: as above; the unique borrow excludes other readers and writers.
unsafe impl<T: Plain> HostMemoryMut for alloc::vec::Vec<T> {
    fn host_range_mut(&mut self) -> HostRange {
        HostRange::of_slice_mut(self)
    }
}

/// Host memory known only by its range: what a runtime that is not Rust
/// (Python, C) hands over, as a [`HostMemory`] (and [`HostMemoryMut`]) for
/// calls that take one, such as a staged transfer's description
/// (`cuda::staging::to_host`) given to an `unsafe` start.
///
/// ```
/// use hostcopy_driver::{HostMemory, HostRange, RawHostMemory};
///
/// let bytes = [1u8, 2, 3];
/// let range = bytes.host_range();
/// // SAFETY: `bytes` is read-only host memory that outlives `raw` and
/// // that nothing writes; `raw` is never borrowed mutably.
/// let raw = unsafe { RawHostMemory::new(range) };
/// assert_eq!(raw.host_range(), HostRange { addr: range.addr, len: 3 });
/// ```
#[derive(Debug)]
pub struct RawHostMemory {
    range: HostRange,
}

impl RawHostMemory {
    /// Host memory at `range`.
    ///
    /// # Safety
    ///
    /// For as long as the value is borrowed, and for as long as work that a
    /// borrow of it started may use the bytes (an `unsafe` start says how
    /// long), `range` is initialized host memory that stays allocated and
    /// that nothing writes; while it is borrowed mutably (as a copy's
    /// destination), it is also writable, with any byte values, and nothing
    /// else reads it.
    pub const unsafe fn new(range: HostRange) -> RawHostMemory {
        RawHostMemory { range }
    }
}

// SAFETY: the caller of `RawHostMemory::new` promised what `HostMemory`
// requires for as long as the value is borrowed.
unsafe impl HostMemory for RawHostMemory {
    fn host_range(&self) -> HostRange {
        self.range
    }
}

// SAFETY: as above, and for a mutable borrow what `HostMemoryMut` requires.
unsafe impl HostMemoryMut for RawHostMemory {
    fn host_range_mut(&mut self) -> HostRange {
        self.range
    }
}

/// Which memory an address belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum MemorySpace {
    /// Host memory: pageable, pinned or registered.
    Host,
    /// Device memory (a `CUdeviceptr`): the host function cannot touch it.
    Device,
}

/// A region known only by its address, length and address space: what a
/// runtime that is not Rust (C, Python, a firmware agent) hands over.
///
/// Packing from raw regions checks bounds, nulls, overflow, overlap and the
/// address space, but cannot check that the region is real: the `unsafe`
/// constructors that take it say so.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct RawRegion {
    /// Address of the first byte.
    pub addr: usize,
    /// Length in bytes.
    pub len: usize,
    /// Where the bytes are.
    pub space: MemorySpace,
}

impl RawRegion {
    /// A region of host memory.
    pub const fn host(addr: usize, len: usize) -> Self {
        RawRegion {
            addr,
            len,
            space: MemorySpace::Host,
        }
    }

    /// A region of device memory (packing refuses it).
    pub const fn device(addr: usize, len: usize) -> Self {
        RawRegion {
            addr,
            len,
            space: MemorySpace::Device,
        }
    }
}

impl From<HostRange> for RawRegion {
    fn from(range: HostRange) -> Self {
        RawRegion::host(range.addr, range.len)
    }
}
