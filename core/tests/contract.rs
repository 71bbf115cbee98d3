//! Each line of the host function's contract, through the exported function.
//!
//! The rejection counter is checked in `rejected_count.rs`, a binary of its
//! own, because tests here run in parallel and also reject records.

use core::ffi::c_void;
use core::ptr;

use hostcopy_core::{HOST_COPY_FN, HostCopyArgs, HostFn, NON_TEMPORAL_THRESHOLD, hostcopy_fn};

fn record(dst: &mut [u8], src: &[u8]) -> HostCopyArgs {
    HostCopyArgs::new(
        dst.as_mut_ptr().expose_provenance(),
        src.as_ptr().expose_provenance(),
        src.len(),
    )
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
}

/// Runs `hostcopy_fn` on `record` the way the driver does.
///
/// # Safety
///
/// As for `hostcopy_fn`.
unsafe fn run(record: &HostCopyArgs) {
    // SAFETY: forwarded.
    unsafe { hostcopy_fn(record.user_data()) }
}

#[test]
fn copies_nbytes_and_nothing_more() {
    let src = pattern(1000);
    let mut dst = vec![0xEEu8; 1200];
    let mut args = record(&mut dst[100..], &src);
    args.nbytes = 900;
    // SAFETY: both ranges are inside live vectors.
    unsafe { run(&args) };
    assert_eq!(dst[100..1000], src[..900]);
    assert!(dst[..100].iter().chain(&dst[1000..]).all(|&b| b == 0xEE));
}

#[test]
fn null_user_data_returns() {
    // SAFETY: null is part of the contract.
    unsafe { hostcopy_fn(ptr::null_mut()) };
}

#[test]
fn record_is_read_at_any_alignment() {
    let src = pattern(33);
    for offset in 0..HostCopyArgs::SIZE {
        let mut dst = vec![0u8; 33];
        let args = record(&mut dst, &src);
        let mut packed = [0u8; HostCopyArgs::SIZE * 2];
        packed[offset..offset + HostCopyArgs::SIZE].copy_from_slice(&args.to_bytes());
        // SAFETY: a whole record at `offset`, describing live vectors.
        unsafe { hostcopy_fn(packed[offset..].as_mut_ptr().cast::<c_void>()) };
        assert_eq!(dst, src, "record at offset {offset}");
    }
}

#[test]
fn zero_bytes_touch_neither_side_even_if_null_or_dangling() {
    for (dst, src) in [(0, 0), (0, 8), (8, 0), (usize::MAX, usize::MAX), (16, 16)] {
        // These addresses are never dereferenced: nbytes is zero.
        // SAFETY: the contract allows any addresses when nbytes is zero.
        unsafe { run(&HostCopyArgs::new(dst, src, 0)) };
    }
}

#[test]
fn null_or_wrapping_ranges_are_not_touched() {
    let src = pattern(64);
    let mut dst = vec![0x11u8; 64];
    let d = dst.as_mut_ptr().expose_provenance();
    let s = src.as_ptr().expose_provenance();
    let rejected = [
        HostCopyArgs::new(0, s, 64),
        HostCopyArgs::new(d, 0, 64),
        HostCopyArgs::new(d, s, usize::MAX - s + 1),
        HostCopyArgs::new(d, usize::MAX - 8, 64),
        HostCopyArgs::new(usize::MAX - 8, s, 64),
        HostCopyArgs::new(d, s, isize::MAX as usize + 1),
    ];
    for args in rejected {
        // SAFETY: each record is rejected before any access (the contract).
        unsafe { run(&args) };
        assert!(dst.iter().all(|&b| b == 0x11), "{args:?} touched dst");
    }
    assert_eq!(src, pattern(64), "source unchanged");
}

#[test]
fn overlapping_ranges_copy_as_memmove() {
    let lengths: &[usize] = if cfg!(miri) {
        &[5, 100]
    } else {
        &[5, 100, 4096, NON_TEMPORAL_THRESHOLD + 100]
    };
    for &len in lengths {
        for shift in [1usize, 3, 64] {
            let original = pattern(len + shift);
            let mut forward = original.clone();
            let base = forward.as_mut_ptr().expose_provenance();
            // SAFETY: both ranges are inside `forward`.
            unsafe { run(&HostCopyArgs::new(base + shift, base, len)) };
            assert_eq!(forward[shift..], original[..len], "forward {len}/{shift}");

            let mut backward = original.clone();
            let base = backward.as_mut_ptr().expose_provenance();
            // SAFETY: both ranges are inside `backward`.
            unsafe { run(&HostCopyArgs::new(base, base + shift, len)) };
            assert_eq!(backward[..len], original[shift..], "backward {len}/{shift}");
        }
    }
}

#[test]
fn same_range_copy_leaves_bytes_unchanged() {
    let original = pattern(300);
    let mut buffer = original.clone();
    let base = buffer.as_mut_ptr().expose_provenance();
    // SAFETY: dst == src inside `buffer`.
    unsafe { run(&HostCopyArgs::new(base, base, 300)) };
    assert_eq!(buffer, original);
}

#[test]
fn large_copies_are_exact() {
    let len = if cfg!(miri) {
        1000
    } else {
        4 * NON_TEMPORAL_THRESHOLD + 3
    };
    let src = pattern(len);
    let mut dst = vec![0u8; len];
    // SAFETY: disjoint live vectors of `len` bytes.
    unsafe { run(&record(&mut dst, &src)) };
    assert!(dst == src);
}

#[test]
fn callable_through_a_host_fn_pointer_with_the_record_address_as_an_integer() {
    let src = pattern(77);
    let mut dst = vec![0u8; 77];
    let args = record(&mut dst, &src);
    // What a ring-slot runtime does: keep the record's address as an integer
    // and turn it back into `user_data` when launching.
    let address: usize = (&args as *const HostCopyArgs).expose_provenance();
    let host_fn: HostFn = HOST_COPY_FN;
    let user_data = ptr::with_exposed_provenance_mut::<c_void>(address);
    // SAFETY: `user_data` is the record's address; the record describes live vectors.
    unsafe { host_fn(user_data) };
    assert_eq!(dst, src);
}

#[test]
fn record_is_read_not_written() {
    let src = pattern(8);
    let mut dst = vec![0u8; 8];
    let args = record(&mut dst, &src);
    let before = args;
    // SAFETY: live vectors.
    unsafe { run(&args) };
    assert_eq!(args, before);
}
