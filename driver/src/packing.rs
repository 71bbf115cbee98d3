//! Packing records: every mistake is caught here, because the host function
//! cannot report one.
//!
//! Packing makes no driver call, allocates nothing and takes no lock, so it
//! works on a host-function thread too.

use core::ffi::c_void;
use core::marker::PhantomData;

use hostcopy_core::HostCopyArgs;

use crate::error::{PackError, Side};
use crate::memory::{HostMemory, HostMemoryMut, MemorySpace, RawRegion};

/// A record whose ranges lie inside buffers borrowed for `'a`: the
/// destination uniquely, the source shared.
///
/// Its address is a valid `user_data` for `hostcopy_fn` (the type is a
/// transparent wrapper of [`HostCopyArgs`]). The borrow keeps both buffers
/// alive and in place for as long as the record exists; a launch that runs
/// it later must keep the record (and so the borrow) alive until the host
/// function has run, which the launch API in this crate expresses in types.
///
/// ```
/// use hostcopy_driver::Record;
///
/// let pinned_slot = [7u8; 64];
/// let mut pageable = vec![0u8; 256];
/// let record = Record::pack_range(&mut pageable[..], 128, &pinned_slot, 0, 64)?;
/// assert_eq!(record.args().nbytes, 64);
///
/// // SAFETY: the record's buffers are borrowed and alive.
/// unsafe { hostcopy_driver::hostcopy_fn(record.user_data()) };
/// drop(record);
/// assert_eq!(pageable[128..192], [7u8; 64]);
/// # Ok::<(), hostcopy_driver::PackError>(())
/// ```
#[repr(transparent)]
#[derive(Debug, PartialEq, Eq)]
pub struct Record<'a> {
    args: HostCopyArgs,
    _buffers: PhantomData<(&'a mut [u8], &'a [u8])>,
}

impl<'a> Record<'a> {
    /// A record copying all of `src` into the start of `dst`.
    ///
    /// `dst` may be longer than `src`; a shorter `dst` is
    /// [`PackError::OutOfBounds`].
    pub fn pack<D, S>(dst: &'a mut D, src: &'a S) -> Result<Self, PackError>
    where
        D: HostMemoryMut + ?Sized,
        S: HostMemory + ?Sized,
    {
        let nbytes = src.host_range().len;
        Self::pack_range(dst, 0, src, 0, nbytes)
    }

    /// A record copying `nbytes` bytes from byte `src_offset` of `src` to
    /// byte `dst_offset` of `dst`.
    ///
    /// Offsets and lengths are in bytes, whatever the element type.
    pub fn pack_range<D, S>(
        dst: &'a mut D,
        dst_offset: usize,
        src: &'a S,
        src_offset: usize,
        nbytes: usize,
    ) -> Result<Self, PackError>
    where
        D: HostMemoryMut + ?Sized,
        S: HostMemory + ?Sized,
    {
        let dst = RawRegion::from(dst.host_range_mut());
        let src = RawRegion::from(src.host_range());
        check(dst, dst_offset, src, src_offset, nbytes).map(Self::new)
    }

    fn new(args: HostCopyArgs) -> Self {
        Record {
            args,
            _buffers: PhantomData,
        }
    }

    /// The plain record: what `hostcopy_fn` reads.
    pub const fn args(&self) -> HostCopyArgs {
        self.args
    }

    /// This record's address, as the `user_data` of `hostcopy_fn`.
    pub const fn user_data(&self) -> *mut c_void {
        self.args.user_data()
    }
}

impl Record<'static> {
    /// A record from raw addresses: `nbytes` bytes from `src` to `dst`.
    ///
    /// Null addresses with a nonzero length, ranges that wrap around the
    /// address space and overlapping ranges are refused. Bounds cannot be
    /// checked: nothing says how large the memory is.
    ///
    /// # Safety
    ///
    /// The caller answers for the addresses: whenever the record is run,
    /// `src` is readable and `dst` writable host memory for `nbytes` bytes,
    /// with provenance exposed (see [`core::ptr::with_exposed_provenance`]).
    pub unsafe fn from_raw_parts(dst: usize, src: usize, nbytes: usize) -> Result<Self, PackError> {
        check(
            RawRegion::host(dst, nbytes),
            0,
            RawRegion::host(src, nbytes),
            0,
            nbytes,
        )
        .map(Self::new)
    }

    /// A record copying `nbytes` bytes from byte `src_offset` of region `src`
    /// to byte `dst_offset` of region `dst`, with every check: bounds,
    /// address space, nulls, overflow and overlap.
    ///
    /// ```
    /// use hostcopy_driver::{PackError, RawRegion, Record, Side};
    ///
    /// let device = RawRegion::device(0x7f00_0000_0000, 1 << 20);
    /// let host = RawRegion::host(0x1000, 4096);
    /// // SAFETY: refused before anything could run it.
    /// let refused = unsafe { Record::from_raw_regions(host, 0, device, 0, 4096) };
    /// assert_eq!(refused, Err(PackError::NotHostAccessible { side: Side::Src, addr: 0x7f00_0000_0000 }));
    /// ```
    ///
    /// # Safety
    ///
    /// The caller answers for the regions: whenever the record is run, each
    /// region in [`MemorySpace::Host`] is readable (`src`) or writable
    /// (`dst`) host memory for its whole length, with provenance exposed.
    pub unsafe fn from_raw_regions(
        dst: RawRegion,
        dst_offset: usize,
        src: RawRegion,
        src_offset: usize,
        nbytes: usize,
    ) -> Result<Self, PackError> {
        check(dst, dst_offset, src, src_offset, nbytes).map(Self::new)
    }
}

impl<'a> AsRef<HostCopyArgs> for Record<'a> {
    fn as_ref(&self) -> &HostCopyArgs {
        &self.args
    }
}

/// Every check packing makes, in the order its errors are reported.
fn check(
    dst: RawRegion,
    dst_offset: usize,
    src: RawRegion,
    src_offset: usize,
    nbytes: usize,
) -> Result<HostCopyArgs, PackError> {
    let dst_addr = range(Side::Dst, dst, dst_offset, nbytes)?;
    let src_addr = range(Side::Src, src, src_offset, nbytes)?;
    if nbytes > 0 && dst_addr.abs_diff(src_addr) < nbytes {
        return Err(PackError::Overlap {
            dst: dst_addr,
            src: src_addr,
            nbytes,
        });
    }
    Ok(HostCopyArgs::new(dst_addr, src_addr, nbytes))
}

/// The address of `nbytes` bytes at `offset` in `region`, if the host
/// function may touch them.
fn range(side: Side, region: RawRegion, offset: usize, nbytes: usize) -> Result<usize, PackError> {
    if region.space != MemorySpace::Host {
        return Err(PackError::NotHostAccessible {
            side,
            addr: region.addr,
        });
    }
    let in_bounds = offset
        .checked_add(nbytes)
        .is_some_and(|end| end <= region.len);
    if !in_bounds {
        return Err(PackError::OutOfBounds {
            side,
            offset,
            nbytes,
            len: region.len,
        });
    }
    if nbytes == 0 {
        // Never dereferenced: any address will do, and wrapping keeps it total.
        return Ok(region.addr.wrapping_add(offset));
    }
    if region.addr == 0 {
        return Err(PackError::NullWithLength { side, nbytes });
    }
    let overflow = PackError::AddressOverflow {
        side,
        addr: region.addr,
        nbytes: offset + nbytes,
    };
    let addr = region.addr.checked_add(offset).ok_or(overflow)?;
    if nbytes > isize::MAX as usize || addr.checked_add(nbytes).is_none() {
        return Err(PackError::AddressOverflow { side, addr, nbytes });
    }
    Ok(addr)
}
