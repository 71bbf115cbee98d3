//! Consumers of `hostcopy-core` from C and Rust, comparing what each sees.
//!
//! `c/consumer.c` includes `core/include/hostcopy.h`, reports the record's
//! layout and checks the host function's contract from C; `build.rs` compiles
//! it and links it here, against the core. [`layout`] is the Rust side of the
//! same report. `cargo xtask abi` repeats the comparison for every supported
//! target, reading both reports out of object files built for that target.

#![deny(missing_docs, unsafe_op_in_unsafe_fn)]

pub mod layout;

use layout::Layout;

// Keeps the core (and so `hostcopy_fn`) in the link for the C consumer.
pub use hostcopy_core;

mod c {
    unsafe extern "C" {
        pub(crate) fn hostcopy_c_layout(out: *mut u32, capacity: usize) -> usize;
        pub(crate) fn hostcopy_c_contract() -> i32;
    }
}

/// The record's layout as the C compiler sees it through the header.
///
/// # Panics
///
/// If the C report holds another number of values than [`Layout::FIELDS`]
/// (`c/layout_report.h` and `src/layout.rs` out of step).
pub fn c_layout() -> Layout {
    let mut out = [0u32; Layout::FIELDS];
    // SAFETY: `hostcopy_c_layout` writes at most `capacity` values to `out`.
    let fields = unsafe { c::hostcopy_c_layout(out.as_mut_ptr(), out.len()) };
    assert_eq!(
        fields,
        Layout::FIELDS,
        "HOSTCOPY_LAYOUT_FIELDS in c/layout_report.h differs from Layout::FIELDS"
    );
    Layout::from_values(out)
}

/// Runs the C consumer's contract checks: `Err(line)` names the failed check in `c/consumer.c`.
pub fn c_contract() -> Result<(), i32> {
    // SAFETY: takes no arguments; touches only its own static buffers.
    match unsafe { c::hostcopy_c_contract() } {
        0 => Ok(()),
        line => Err(line),
    }
}
