//! `hostcopy_rejected` counts exactly the rejected records.
//!
//! One test in its own binary: the counter is process-wide, and a parallel
//! test rejecting records would make exact deltas meaningless.

#![cfg(target_has_atomic = "ptr")]

use core::ptr;

use hostcopy_core::{HostCopyArgs, hostcopy_fn, hostcopy_rejected};

#[test]
fn rejected_count_rises_by_one_per_rejected_record_and_not_otherwise() {
    let src = [1u8; 16];
    let mut dst = [0u8; 16];
    let d = dst.as_mut_ptr().expose_provenance();
    let s = src.as_ptr().expose_provenance();

    let cases: [(&str, Option<HostCopyArgs>, usize); 8] = [
        ("null user_data", None, 1),
        ("null dst", Some(HostCopyArgs::new(0, s, 16)), 1),
        ("null src", Some(HostCopyArgs::new(d, 0, 16)), 1),
        ("dst wraps", Some(HostCopyArgs::new(usize::MAX, s, 16)), 1),
        (
            "longer than any object",
            Some(HostCopyArgs::new(d, s, usize::MAX / 2 + 1)),
            1,
        ),
        ("empty with null ends", Some(HostCopyArgs::new(0, 0, 0)), 0),
        ("valid copy", Some(HostCopyArgs::new(d, s, 16)), 0),
        (
            "valid overlapping copy",
            Some(HostCopyArgs::new(d, d + 1, 8)),
            0,
        ),
    ];
    for (what, args, expected) in cases {
        let before = hostcopy_rejected();
        let user_data = args
            .as_ref()
            .map_or(ptr::null_mut(), HostCopyArgs::user_data);
        // SAFETY: each record is rejected, empty, or describes `dst`/`src`.
        unsafe { hostcopy_fn(user_data) };
        assert_eq!(hostcopy_rejected().wrapping_sub(before), expected, "{what}");
    }
    assert_eq!(src, [1u8; 16]);
}
