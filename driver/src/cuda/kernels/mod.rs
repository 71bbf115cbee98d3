//! The device code hostcopy runs, and what its parameters look like: one
//! kernel, `hostcopy_gather` (`gather.ptx`, PTX that the driver compiles
//! for the device when the module is loaded), which moves many small
//! blocks to or from one staging range in a launch.
//!
//! Only the layout lives here, no driver call: the staging engine launches
//! the kernel (`crate::cuda::gather`), and the simulator, which runs it on
//! the host, reads its parameters by the same types.

use core::ffi::CStr;

/// The PTX image, NUL-terminated as `cuModuleLoadData` takes text.
pub(crate) const GATHER_PTX: &str = concat!(include_str!("gather.ptx"), "\0");

/// The kernel's name in the image.
pub(crate) const GATHER_NAME: &CStr = c"hostcopy_gather";

/// Entries one launch carries.
pub(crate) const GATHER_ENTRIES: usize = 255;

/// Threads of a block of the grid (one block of the grid per entry).
pub(crate) const GATHER_THREADS: u32 = 256;

/// One block to move: its device address, its offset in the staging range
/// and its length, as `gather.ptx` reads them.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct GatherEntry {
    pub(crate) device: u64,
    pub(crate) offset: u32,
    pub(crate) len: u32,
}

/// The kernel's last parameter: the entries, by value.
#[repr(C, align(16))]
#[derive(Clone, Copy, Debug)]
pub(crate) struct GatherTable(pub(crate) [GatherEntry; GATHER_ENTRIES]);

/// The kernel's parameters in their order: `staging` (u64), `count` (u32),
/// `scatter` (u32), then the table, 4,096 bytes in all: the most any
/// driver takes (newer ones take more, for images built for them).
pub(crate) const GATHER_PARAMS_BYTES: usize = 8 + 4 + 4 + size_of::<GatherTable>();

const _: () = assert!(size_of::<GatherEntry>() == 16);
const _: () = assert!(align_of::<GatherEntry>() == 8);
const _: () = assert!(size_of::<GatherTable>() == 4080);
const _: () = assert!(GATHER_PARAMS_BYTES == 4096);
