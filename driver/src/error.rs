//! Why a record could not be packed, and why a pool could not give or take a slot.

use core::fmt;

/// Which range of a record an error is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Side {
    /// The destination range (`dst`).
    Dst,
    /// The source range (`src`).
    Src,
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Side::Dst => "destination",
            Side::Src => "source",
        })
    }
}

/// A record that would copy outside its buffers, or that `hostcopy_fn` would
/// reject. Each value carries the numbers that make it wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum PackError {
    /// `offset + nbytes` is past the end of a buffer of `len` bytes.
    OutOfBounds {
        /// The buffer.
        side: Side,
        /// Byte offset of the range in the buffer.
        offset: usize,
        /// Length of the range in bytes.
        nbytes: usize,
        /// Length of the buffer in bytes.
        len: usize,
    },
    /// The destination and source ranges share bytes.
    Overlap {
        /// Address of the destination range.
        dst: usize,
        /// Address of the source range.
        src: usize,
        /// Length of both ranges in bytes.
        nbytes: usize,
    },
    /// `addr + nbytes` wraps around the address space, or `nbytes` is larger
    /// than any object can be (`isize::MAX`).
    AddressOverflow {
        /// The range.
        side: Side,
        /// Its address.
        addr: usize,
        /// Its length in bytes.
        nbytes: usize,
    },
    /// A null address with a nonzero length.
    NullWithLength {
        /// The range.
        side: Side,
        /// Its length in bytes.
        nbytes: usize,
    },
    /// The memory is not readable or writable by the host (device memory).
    NotHostAccessible {
        /// The range.
        side: Side,
        /// Its address in its own address space.
        addr: usize,
    },
}

impl fmt::Display for PackError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            PackError::OutOfBounds {
                side,
                offset,
                nbytes,
                len,
            } => write!(
                f,
                "{side} range of {nbytes} bytes at offset {offset} is out of bounds of a {len}-byte buffer"
            ),
            PackError::Overlap { dst, src, nbytes } => write!(
                f,
                "destination {dst:#x} and source {src:#x} overlap over {nbytes} bytes"
            ),
            PackError::AddressOverflow { side, addr, nbytes } => write!(
                f,
                "{side} range of {nbytes} bytes at {addr:#x} runs past the end of the address space"
            ),
            PackError::NullWithLength { side, nbytes } => {
                write!(f, "{side} address is null but the length is {nbytes} bytes")
            }
            PackError::NotHostAccessible { side, addr } => {
                write!(
                    f,
                    "{side} memory at {addr:#x} is not accessible from the host"
                )
            }
        }
    }
}

impl core::error::Error for PackError {}

impl PackError {
    /// The variant, as [`PackErrorKind`]: for the Python binding, which
    /// ships with this crate and maps every variant to a class of its own
    /// without a wildcard arm.
    #[doc(hidden)]
    pub const fn kind(&self) -> PackErrorKind {
        match *self {
            PackError::OutOfBounds {
                side,
                offset,
                nbytes,
                len,
            } => PackErrorKind::OutOfBounds {
                side,
                offset,
                nbytes,
                len,
            },
            PackError::Overlap { dst, src, nbytes } => PackErrorKind::Overlap { dst, src, nbytes },
            PackError::AddressOverflow { side, addr, nbytes } => {
                PackErrorKind::AddressOverflow { side, addr, nbytes }
            }
            PackError::NullWithLength { side, nbytes } => {
                PackErrorKind::NullWithLength { side, nbytes }
            }
            PackError::NotHostAccessible { side, addr } => {
                PackErrorKind::NotHostAccessible { side, addr }
            }
        }
    }
}

/// [`PackError`]'s variants with their fields, without `#[non_exhaustive]`:
/// a variant added to `PackError` gets one here too (its `kind` has no
/// wildcard arm), so that the Python binding, which matches this without
/// one, fails to compile until it maps it. Not part of the crate's API.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum PackErrorKind {
    OutOfBounds {
        side: Side,
        offset: usize,
        nbytes: usize,
        len: usize,
    },
    Overlap {
        dst: usize,
        src: usize,
        nbytes: usize,
    },
    AddressOverflow {
        side: Side,
        addr: usize,
        nbytes: usize,
    },
    NullWithLength {
        side: Side,
        nbytes: usize,
    },
    NotHostAccessible {
        side: Side,
        addr: usize,
    },
}

/// Why a [`RecordPool`](crate::RecordPool) could not hand out or take back a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum PoolError {
    /// Every slot was held when looked at.
    Exhausted {
        /// Number of slots in the pool.
        capacity: usize,
    },
    /// The address is not the `user_data` of a slot of this pool.
    NotFromThisPool {
        /// The address.
        user_data: usize,
    },
    /// The slot is not held: it was released already.
    NotHeld {
        /// Index of the slot.
        index: usize,
    },
}

impl fmt::Display for PoolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            PoolError::Exhausted { capacity } => {
                write!(f, "all {capacity} record slots are held")
            }
            PoolError::NotFromThisPool { user_data } => {
                write!(f, "{user_data:#x} is not a record slot of this pool")
            }
            PoolError::NotHeld { index } => {
                write!(f, "record slot {index} is not held (released twice?)")
            }
        }
    }
}

impl core::error::Error for PoolError {}

impl PoolError {
    /// The variant, as [`PoolErrorKind`] (see [`PackError::kind`]).
    #[doc(hidden)]
    pub const fn kind(&self) -> PoolErrorKind {
        match *self {
            PoolError::Exhausted { capacity } => PoolErrorKind::Exhausted { capacity },
            PoolError::NotFromThisPool { user_data } => {
                PoolErrorKind::NotFromThisPool { user_data }
            }
            PoolError::NotHeld { index } => PoolErrorKind::NotHeld { index },
        }
    }
}

/// [`PoolError`]'s variants with their fields, exhaustive (see
/// [`PackErrorKind`]). Not part of the crate's API.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum PoolErrorKind {
    Exhausted { capacity: usize },
    NotFromThisPool { user_data: usize },
    NotHeld { index: usize },
}
