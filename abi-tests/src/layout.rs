//! The record's layout as this target's Rust compiler sees it.
//!
//! `cargo xtask abi` also compiles this file on its own for each target
//! (`rustc --emit obj`) and reads [`HOSTCOPY_RUST_LAYOUT_REPORT`] back from
//! the object file, next to the same report from `c/layout_report.c`. So it
//! may use only `core` and `hostcopy_core`.

use core::mem::{align_of, offset_of, size_of};

use hostcopy_core::HostCopyArgs;

/// The layout facts both sides report, in this order.
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
    /// `HOSTCOPY_ABI_VERSION`.
    pub abi_version: u32,
    /// `sizeof(void *)`.
    pub pointer_size: u32,
}

/// The layout of [`HostCopyArgs`] on the target this is compiled for.
pub const RUST_LAYOUT: Layout = Layout {
    size: size_of::<HostCopyArgs>() as u32,
    align: align_of::<HostCopyArgs>() as u32,
    dst: offset_of!(HostCopyArgs, dst) as u32,
    src: offset_of!(HostCopyArgs, src) as u32,
    nbytes: offset_of!(HostCopyArgs, nbytes) as u32,
    abi_version: hostcopy_core::ABI_VERSION,
    pointer_size: size_of::<*const u8>() as u32,
};

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
