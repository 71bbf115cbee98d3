//! The core's contract, case by case, on the target: each case calls
//! `hostcopy_fn` (through the `CUhostFn` pointer type, as the driver would) on
//! a record and checks what happened to memory and to the rejected count.

use core::ffi::c_void;
use core::ptr;

use hostcopy_core::{
    ABI_VERSION, HOST_COPY_FN, HostCopyArgs, hostcopy_abi_version, hostcopy_rejected,
};

/// One check: its name, and whether it held.
pub(crate) struct Case {
    pub(crate) name: &'static str,
    pub(crate) run: fn() -> bool,
}

pub(crate) const CASES: &[Case] = &[
    Case {
        name: "copies the bytes a record describes",
        run: copies_bytes,
    },
    Case {
        name: "zero length touches nothing, rejects nothing",
        run: zero_length,
    },
    Case {
        name: "null user_data is rejected and counted",
        run: null_user_data,
    },
    Case {
        name: "null dst is rejected without a write",
        run: null_dst,
    },
    Case {
        name: "a range that wraps is rejected without a write",
        run: wrapping_range,
    },
    Case {
        name: "overlapping ranges copy as memmove",
        run: overlap,
    },
    Case {
        name: "a record at an odd address is read unaligned",
        run: unaligned_record,
    },
    Case {
        name: "hostcopy_abi_version is ABI_VERSION",
        run: abi_version,
    },
];

/// What a run of every case found.
pub(crate) struct Tally {
    pub(crate) passed: u32,
    pub(crate) failed: u32,
    /// The name of the first case that failed.
    pub(crate) first_failure: Option<&'static str>,
}

/// Runs every case, in order.
pub(crate) fn run_all() -> Tally {
    let mut tally = Tally {
        passed: 0,
        failed: 0,
        first_failure: None,
    };
    for case in CASES {
        if (case.run)() {
            tally.passed += 1;
        } else {
            tally.failed += 1;
            tally.first_failure.get_or_insert(case.name);
        }
    }
    tally
}

fn address<T>(p: *const T) -> usize {
    p.expose_provenance()
}

/// Runs one record through the host-function pointer; returns how many
/// records it rejected.
fn host_fn(user_data: *mut c_void) -> usize {
    let before = hostcopy_rejected();
    // SAFETY: every caller passes null or a record whose ranges, when not
    // rejected, are live buffers of the calling case.
    unsafe { HOST_COPY_FN(user_data) };
    hostcopy_rejected().wrapping_sub(before)
}

fn run(record: &HostCopyArgs) -> usize {
    host_fn(record.user_data())
}

fn pattern<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    for (i, byte) in bytes.iter_mut().enumerate() {
        *byte = (i as u8).wrapping_mul(31).wrapping_add(7);
    }
    bytes
}

fn copies_bytes() -> bool {
    let src = pattern::<300>();
    let mut dst = [0u8; 302];
    let record = HostCopyArgs::new(
        address(dst[1..].as_mut_ptr()),
        address(src.as_ptr()),
        src.len(),
    );
    run(&record) == 0 && dst[1..301] == src[..] && dst[0] == 0 && dst[301] == 0
}

fn zero_length() -> bool {
    let src = [1u8; 4];
    let mut dst = [0u8; 4];
    let empty = HostCopyArgs::new(address(dst.as_mut_ptr()), address(src.as_ptr()), 0);
    run(&empty) == 0 && run(&HostCopyArgs::new(0, 0, 0)) == 0 && dst == [0; 4]
}

fn null_user_data() -> bool {
    host_fn(ptr::null_mut()) == 1
}

fn null_dst() -> bool {
    let src = [1u8; 8];
    run(&HostCopyArgs::new(0, address(src.as_ptr()), src.len())) == 1
}

fn wrapping_range() -> bool {
    let src = [1u8; 8];
    let mut dst = [0u8; 8];
    let wraps = HostCopyArgs::new(usize::MAX - 3, address(src.as_ptr()), src.len());
    let src_wraps = HostCopyArgs::new(address(dst.as_mut_ptr()), usize::MAX, 2);
    run(&wraps) == 1 && run(&src_wraps) == 1 && dst == [0; 8]
}

fn overlap() -> bool {
    let original = pattern::<64>();
    let mut forward = original;
    let base = address(forward.as_mut_ptr());
    let ok_forward = run(&HostCopyArgs::new(base + 5, base, 50)) == 0
        && forward[5..55] == original[..50]
        && forward[..5] == original[..5];
    let mut backward = original;
    let base = address(backward.as_mut_ptr());
    let ok_backward = run(&HostCopyArgs::new(base, base + 5, 50)) == 0
        && backward[..50] == original[5..55]
        && backward[50..] == original[50..];
    ok_forward && ok_backward
}

fn unaligned_record() -> bool {
    let src = pattern::<16>();
    let mut dst = [0u8; 16];
    let record = HostCopyArgs::new(address(dst.as_mut_ptr()), address(src.as_ptr()), src.len());
    let mut buffer = [0u8; HostCopyArgs::SIZE + 1];
    buffer[1..].copy_from_slice(&record.to_bytes());
    host_fn(buffer[1..].as_mut_ptr().cast()) == 0 && dst == src
}

fn abi_version() -> bool {
    hostcopy_abi_version() == ABI_VERSION
}
