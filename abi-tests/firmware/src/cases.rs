//! The core's contract, case by case, on the target: each case calls
//! `hostcopy_fn` (through the `CUhostFn` pointer type, as the driver would) on
//! a record and checks what happened to memory and to the rejected count.

use core::ffi::c_void;
use core::ptr;

use hostcopy_core::{
    ABI_VERSION, HOST_COPY_FN, HostCopyArgs, NON_TEMPORAL_THRESHOLD, hostcopy_abi_version,
    hostcopy_rejected,
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
    Case {
        name: "null src is rejected without a write",
        run: null_src,
    },
    Case {
        name: "every length to 64 at every alignment, nothing more",
        run: lengths_and_alignments,
    },
    Case {
        name: "a copy past the non-temporal threshold",
        run: large_copy,
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

fn null_src() -> bool {
    let mut dst = [0u8; 8];
    run(&HostCopyArgs::new(address(dst.as_mut_ptr()), 0, dst.len())) == 1 && dst == [0; 8]
}

fn lengths_and_alignments() -> bool {
    let src = pattern::<72>();
    (0..=64).all(|len| {
        (0..8).all(|shift| {
            let mut dst = [0u8; 80];
            let record = HostCopyArgs::new(
                address(dst[shift..].as_mut_ptr()),
                address(src[8 - shift..].as_ptr()),
                len,
            );
            run(&record) == 0
                && dst[shift..shift + len] == src[8 - shift..8 - shift + len]
                && dst[..shift]
                    .iter()
                    .chain(&dst[shift + len..])
                    .all(|&b| b == 0)
        })
    })
}

/// Above the threshold the copy may take another path (non-temporal stores
/// where the target has them); twice the threshold, at odd addresses.
fn large_copy() -> bool {
    const LEN: usize = 2 * NON_TEMPORAL_THRESHOLD + 3;
    static SRC: [u8; LEN + 1] = {
        let mut bytes = [0u8; LEN + 1];
        let mut i = 0;
        while i < bytes.len() {
            bytes[i] = (i % 251) as u8;
            i += 1;
        }
        bytes
    };
    static mut DST: [u8; LEN + 2] = [0; LEN + 2];
    let record = HostCopyArgs::new(
        address((&raw mut DST).cast::<u8>()) + 1,
        address(SRC.as_ptr()) + 1,
        LEN,
    );
    let rejected = run(&record);
    // SAFETY: the firmware runs its cases one at a time on one core, and the
    // copy above has returned: nothing else reads or writes DST now.
    let dst = unsafe { core::slice::from_raw_parts((&raw const DST).cast::<u8>(), LEN + 2) };
    rejected == 0 && dst[1..=LEN] == SRC[1..=LEN] && dst[0] == 0 && dst[LEN + 1] == 0
}
