//! The record's layout as this target's Rust compiler sees it.
//!
//! `cargo xtask abi` also compiles this file on its own for each target
//! (`rustc --emit obj`) and reads [`HOSTCOPY_RUST_LAYOUT_REPORT`] back from
//! the object file, next to the same report from `c/layout_report.c`. So it
//! may use only `core` and `hostcopy_core`.

use core::mem::{align_of, offset_of, size_of};

use hostcopy_core::HostCopyArgs;

/// The layout facts both sides report, in this order.
///
/// The field sizes catch what size and offsets alone cannot: on a 64-bit
/// target a header with `uint32_t nbytes` keeps size 24 (padding after
/// `nbytes`) and every offset.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// `sizeof(struct hostcopy_args)`.
    pub size: u32,
    /// `_Alignof(struct hostcopy_args)`.
    pub align: u32,
    /// `offsetof(struct hostcopy_args, dst)`.
    pub dst: u32,
    /// `offsetof(struct hostcopy_args, src)`.
    pub src: u32,
    /// `offsetof(struct hostcopy_args, nbytes)`.
    pub nbytes: u32,
    /// `sizeof` of the `dst` field.
    pub dst_size: u32,
    /// `sizeof` of the `src` field.
    pub src_size: u32,
    /// `sizeof` of the `nbytes` field.
    pub nbytes_size: u32,
    /// `HOSTCOPY_ABI_VERSION`.
    pub abi_version: u32,
    /// `sizeof(void *)`.
    pub pointer_size: u32,
}

impl Layout {
    /// How many values a report holds: `HOSTCOPY_LAYOUT_FIELDS` in `c/layout_report.h`.
    pub const FIELDS: usize = 10;

    /// A layout from its values in report order, as the C side writes them.
    pub const fn from_values(values: [u32; Self::FIELDS]) -> Self {
        let [
            size,
            align,
            dst,
            src,
            nbytes,
            dst_size,
            src_size,
            nbytes_size,
            abi_version,
            pointer_size,
        ] = values;
        Layout {
            size,
            align,
            dst,
            src,
            nbytes,
            dst_size,
            src_size,
            nbytes_size,
            abi_version,
            pointer_size,
        }
    }
}

/// The size of the field that `field` selects, read from the field's type,
/// so that the report follows [`HostCopyArgs`] rather than restating it.
const fn field_size<F>(_field: fn(&HostCopyArgs) -> &F) -> u32 {
    size_of::<F>() as u32
}

/// The layout of [`HostCopyArgs`] on the target this is compiled for.
pub const RUST_LAYOUT: Layout = Layout {
    size: size_of::<HostCopyArgs>() as u32,
    align: align_of::<HostCopyArgs>() as u32,
    dst: offset_of!(HostCopyArgs, dst) as u32,
    src: offset_of!(HostCopyArgs, src) as u32,
    nbytes: offset_of!(HostCopyArgs, nbytes) as u32,
    dst_size: field_size(|record| &record.dst),
    src_size: field_size(|record| &record.src),
    nbytes_size: field_size(|record| &record.nbytes),
    abi_version: hostcopy_core::ABI_VERSION,
    pointer_size: size_of::<*const u8>() as u32,
};

// Every field is one native word (`uintptr_t`, `size_t`), on every target this builds for.
const WORD: u32 = size_of::<usize>() as u32;
const _: () = assert!(RUST_LAYOUT.dst_size == WORD, "dst is one word");
const _: () = assert!(RUST_LAYOUT.src_size == WORD, "src is one word");
const _: () = assert!(RUST_LAYOUT.nbytes_size == WORD, "nbytes is one word");
const _: () = assert!(size_of::<Layout>() == 4 * Layout::FIELDS);

/// The 16 bytes that precede a [`Layout`] in an object file.
pub const LAYOUT_MAGIC: [u8; 16] = *b"HOSTCOPY-LAYOUT\0";

/// A [`Layout`] behind [`LAYOUT_MAGIC`], findable in an object file of any format.
#[repr(C)]
#[derive(Debug)]
pub struct LayoutReport {
    /// [`LAYOUT_MAGIC`].
    pub magic: [u8; 16],
    /// The facts.
    pub layout: Layout,
}

/// This target's Rust layout, kept in the object file for `cargo xtask abi`.
#[used]
#[unsafe(no_mangle)]
pub static HOSTCOPY_RUST_LAYOUT_REPORT: LayoutReport = LayoutReport {
    magic: LAYOUT_MAGIC,
    layout: RUST_LAYOUT,
};
