//! The record `hostcopy_fn` reads: what to copy, as three native-width words.

use core::ffi::c_void;
use core::mem::{align_of, offset_of, size_of};

/// Version of the record layout and of the host function's contract.
///
/// Version 1 is the layout below and the behaviour documented on
/// [`hostcopy_fn`](crate::hostcopy_fn). Any incompatible change bumps it; the C
/// header carries the same number as `HOSTCOPY_ABI_VERSION`.
pub const ABI_VERSION: u32 = 1;

/// One copy for [`hostcopy_fn`](crate::hostcopy_fn): `nbytes` bytes from `src` to `dst`.
///
/// The C view, from `include/hostcopy.h`:
///
/// ```c
/// struct hostcopy_args { uintptr_t dst; uintptr_t src; size_t nbytes; };
/// ```
///
/// Three native-width fields in this order with no padding: 24 bytes with
/// alignment 8 on 64-bit targets, 12 bytes with alignment 4 on 32-bit targets,
/// native endianness. The addresses are plain integers so that a record can be
/// built by any runtime (C, Python's ctypes, a firmware agent) and sent
/// through `user_data` as a pointer or as an integer.
///
/// Nothing here checks the addresses: the host function rejects null and
/// wrapping ranges, and `hostcopy-driver` packs records from real buffers with
/// bounds checks.
///
/// ```
/// use hostcopy_core::HostCopyArgs;
///
/// let record = HostCopyArgs::new(0x1000, 0x2000, 64);
/// let bytes = record.to_bytes();
/// assert_eq!(bytes.len(), 3 * size_of::<usize>());
/// assert_eq!(HostCopyArgs::from_bytes(&bytes), record);
/// ```
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct HostCopyArgs {
    /// Address of the first destination byte.
    pub dst: usize,
    /// Address of the first source byte.
    pub src: usize,
    /// Number of bytes to copy; zero copies nothing.
    pub nbytes: usize,
}

const WORD: usize = size_of::<usize>();

impl HostCopyArgs {
    /// Size of the record in bytes: `3 * size_of::<usize>()`.
    pub const SIZE: usize = size_of::<Self>();

    /// A record copying `nbytes` bytes from address `src` to address `dst`.
    pub const fn new(dst: usize, src: usize, nbytes: usize) -> Self {
        Self { dst, src, nbytes }
    }

    /// The record as bytes in native endianness, the way C lays it out.
    pub fn to_bytes(&self) -> [u8; Self::SIZE] {
        let mut bytes = [0; Self::SIZE];
        for (word, field) in bytes
            .chunks_exact_mut(WORD)
            .zip([self.dst, self.src, self.nbytes])
        {
            word.copy_from_slice(&field.to_ne_bytes());
        }
        bytes
    }

    /// Reads a record from bytes in native endianness (the inverse of [`to_bytes`](Self::to_bytes)).
    pub fn from_bytes(bytes: &[u8; Self::SIZE]) -> Self {
        let field = |index: usize| {
            let mut word = [0; WORD];
            word.copy_from_slice(&bytes[index * WORD..(index + 1) * WORD]);
            usize::from_ne_bytes(word)
        };
        Self::new(field(0), field(1), field(2))
    }

    /// Reads the record that `user_data` points to, at any alignment, the way
    /// the host function does. `None` for a null pointer.
    ///
    /// # Safety
    ///
    /// `user_data` is null or points to [`SIZE`](Self::SIZE) readable bytes.
    pub unsafe fn read(user_data: *const c_void) -> Option<Self> {
        if user_data.is_null() {
            return None;
        }
        // SAFETY: not null, and the caller promises SIZE readable bytes there;
        // an unaligned read accepts any address, and every bit pattern is a
        // valid record (three integers).
        Some(unsafe { user_data.cast::<Self>().read_unaligned() })
    }

    /// Whether [`hostcopy_fn`](crate::hostcopy_fn) refuses this record and
    /// counts it: a null address, a range that wraps around the address
    /// space, or more bytes than any object can hold (`isize::MAX`), with
    /// `nbytes > 0`. An empty record is never rejected: it copies nothing.
    ///
    /// ```
    /// use hostcopy_core::HostCopyArgs;
    ///
    /// assert!(HostCopyArgs::new(0, 0x1000, 8).is_rejected());
    /// assert!(!HostCopyArgs::new(0, 0, 0).is_rejected());
    /// ```
    pub const fn is_rejected(&self) -> bool {
        self.nbytes > 0
            && (self.dst == 0
                || self.src == 0
                || self.nbytes > isize::MAX as usize
                || self.dst.checked_add(self.nbytes).is_none()
                || self.src.checked_add(self.nbytes).is_none())
    }

    /// This record's address as the `user_data` argument of a host function.
    ///
    /// The host function only reads through it. The record must stay alive
    /// and unmoved until the host function has run.
    pub const fn user_data(&self) -> *mut c_void {
        (self as *const Self).cast_mut().cast()
    }
}

// The layout is the contract: these hold on every target that compiles the crate.
const _: () = assert!(
    size_of::<usize>() == size_of::<*const u8>(),
    "usize is pointer-sized"
);
const _: () = assert!(
    size_of::<HostCopyArgs>() == 3 * WORD,
    "three words, no padding"
);
const _: () = assert!(
    align_of::<HostCopyArgs>() == align_of::<usize>(),
    "word alignment"
);
const _: () = assert!(offset_of!(HostCopyArgs, dst) == 0, "dst first");
const _: () = assert!(offset_of!(HostCopyArgs, src) == WORD, "src second");
const _: () = assert!(offset_of!(HostCopyArgs, nbytes) == 2 * WORD, "nbytes third");
#[cfg(target_pointer_width = "64")]
const _: () = assert!(HostCopyArgs::SIZE == 24 && align_of::<HostCopyArgs>() == 8);
#[cfg(target_pointer_width = "32")]
const _: () = assert!(HostCopyArgs::SIZE == 12 && align_of::<HostCopyArgs>() == 4);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_are_the_fields_in_native_endianness_in_declaration_order() {
        let record = HostCopyArgs::new(1, 2, usize::MAX);
        let bytes = record.to_bytes();
        assert_eq!(bytes[..WORD], 1usize.to_ne_bytes());
        assert_eq!(bytes[WORD..2 * WORD], 2usize.to_ne_bytes());
        assert_eq!(bytes[2 * WORD..], usize::MAX.to_ne_bytes());
        assert_eq!(HostCopyArgs::from_bytes(&bytes), record);
    }

    #[test]
    fn read_accepts_any_alignment_and_refuses_null() {
        let record = HostCopyArgs::new(0xdead, 0xbeef, 7);
        let mut buffer = [0u8; HostCopyArgs::SIZE + 8];
        for offset in 0..8 {
            buffer[offset..offset + HostCopyArgs::SIZE].copy_from_slice(&record.to_bytes());
            let at = buffer[offset..].as_ptr().cast();
            // SAFETY: `at` has SIZE readable bytes after it.
            assert_eq!(unsafe { HostCopyArgs::read(at) }, Some(record));
        }
        // SAFETY: null is allowed.
        assert_eq!(unsafe { HostCopyArgs::read(core::ptr::null()) }, None);
    }

    #[test]
    fn rejected_records_are_exactly_the_null_or_wrapping_ones() {
        let ok = |dst, src, nbytes| !HostCopyArgs::new(dst, src, nbytes).is_rejected();
        assert!(ok(1, 1, 1));
        assert!(ok(usize::MAX - 1, 1, 1), "ends at the last address");
        assert!(!ok(usize::MAX, 1, 1), "dst + nbytes wraps");
        assert!(!ok(1, usize::MAX, 1), "src + nbytes wraps");
        assert!(!ok(0, 1, 1), "null dst");
        assert!(!ok(1, 0, 1), "null src");
        assert!(ok(1, 1, isize::MAX as usize));
        assert!(!ok(1, 1, isize::MAX as usize + 1), "longer than any object");
        assert!(ok(0, 0, 0), "an empty record is not rejected");
    }

    #[test]
    fn user_data_is_the_record_address() {
        let record = HostCopyArgs::new(1, 2, 3);
        assert_eq!(
            record.user_data().cast_const(),
            (&record as *const HostCopyArgs).cast()
        );
    }
}
