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

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec::Vec;

    /// The entry's `.param` list, as `(name, bytes)`: what the driver
    /// passes the kernel, read from the image itself.
    fn params() -> Vec<(&'static str, usize)> {
        let entry = GATHER_PTX
            .split(".entry hostcopy_gather(")
            .nth(1)
            .and_then(|rest| rest.split(')').next())
            .expect("the entry's parameter list");
        entry
            .split(',')
            .map(|param| {
                let words: Vec<&str> = param.split_whitespace().collect();
                let name = words.last().expect("a named parameter");
                let bytes = match words.iter().find(|w| w.starts_with(".u") || *w == &".b8") {
                    Some(&".u64") => 8,
                    Some(&".u32") => 4,
                    Some(&".b8") => {
                        let (_, len) = name.split_once('[').expect("an array");
                        len.trim_end_matches(']').parse().expect("its length")
                    }
                    other => panic!("parameter type {other:?}"),
                };
                (name.split('[').next().unwrap(), bytes)
            })
            .collect()
    }

    /// The launch packs `staging` (u64), `count` and `scatter` (u32) and
    /// the table (`crate::cuda::gather`, the simulator reading them back by
    /// the same types): the image must declare exactly those, in that
    /// order, `GATHER_PARAMS_BYTES` in all. A kernel edited apart from
    /// this layout fails here, not on the device.
    #[test]
    fn the_image_declares_the_parameters_the_launch_packs() {
        assert_eq!(
            params(),
            [
                ("staging", 8),
                ("count", 4),
                ("scatter", 4),
                ("entries", size_of::<GatherTable>()),
            ]
        );
        let declared: usize = params().iter().map(|&(_, bytes)| bytes).sum();
        assert_eq!(declared, GATHER_PARAMS_BYTES);
        assert!(GATHER_PTX.contains(".param .align 16 .b8 entries["));
        assert_eq!(align_of::<GatherTable>(), 16);
        assert!(GATHER_PTX.contains(&std::format!(
            ".visible .entry {}(",
            GATHER_NAME.to_str().unwrap()
        )));
        assert!(GATHER_PTX.ends_with('\0'));
    }
}
