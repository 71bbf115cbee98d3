//! Fault injection: a sticky context error, and a chosen error on the N-th
//! call of one entry point.

use std::format;

use super::super::ffi::{ENTRY_POINT_NAMES, OPTIONAL_ENTRY_POINT_NAMES};
use super::registry::{Fault, lock};

/// Gives device `ordinal`'s live primary context the sticky error `code`, as
/// a failed kernel would: from now on every call in that context returns
/// `code` with no effect (retain, release and binding the context excepted),
/// and its queued ops never run (host functions count as skipped). An op
/// running now completes on its own, while synchronizing calls already
/// return `code`.
///
/// # Panics
///
/// If the device has no live context, or `code` is 0.
pub fn fail_context(ordinal: usize, code: u32) {
    assert_ne!(code, 0, "fail_context: 0 is CUDA_SUCCESS, not an error");
    let mut state = lock();
    let ctx = state
        .devices
        .get(ordinal)
        .and_then(|d| d.context)
        .unwrap_or_else(|| panic!("fail_context: device {ordinal} has no live context"));
    state.contexts.get_mut(&ctx).expect("live").sticky = Some(code);
    state.discard_queue(ctx);
}

/// Makes the `nth` call (1-based, counted from now) of driver entry point
/// `entry` in device `ordinal`'s context return `code` with no effect.
/// Calls that need no device (`cuInit`, `cuDriverGetVersion`,
/// `cuGetErrorName`, `cuDeviceGetCount`) cannot be failed.
///
/// # Panics
///
/// If `entry` is not an entry point the crate uses, `nth` is 0, `code` is 0,
/// or there is no such device.
pub fn fail_call(ordinal: usize, entry: &'static str, nth: u32, code: u32) {
    assert!(
        ENTRY_POINT_NAMES.contains(&entry) || OPTIONAL_ENTRY_POINT_NAMES.contains(&entry),
        "fail_call: {entry} is not a driver entry point this crate uses"
    );
    assert!(nth > 0, "fail_call: nth counts from 1");
    assert_ne!(code, 0, "fail_call: 0 is CUDA_SUCCESS, not an error");
    let mut state = lock();
    let device = state
        .devices
        .get_mut(ordinal)
        .unwrap_or_else(|| panic!("{}", format!("fail_call: no device {ordinal}")));
    device.faults.push(Fault {
        entry,
        remaining: nth,
        code,
    });
}
