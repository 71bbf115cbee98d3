//! The parallel host function: same record, same contract as `hostcopy_fn`,
//! whatever the size, with several callers at once and many jobs in a row.

#![cfg(feature = "std")]

use std::sync::Once;

use hostcopy_driver::parallel::{
    CopyPool, CopyWorkers, PARALLEL_THRESHOLD, Stores, hostcopy_parallel_fn,
};
use hostcopy_driver::{HostCopyArgs, hostcopy_rejected};

fn workers() -> &'static CopyWorkers {
    static START: Once = Once::new();
    START.call_once(|| {
        CopyWorkers::start(3).expect("start the copy workers");
    });
    CopyWorkers::get().unwrap()
}

fn pattern(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_add(seed).wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect()
}

fn copy_and_check(len: usize, seed: u32) {
    const GUARD: usize = 64;
    let src = pattern(len, seed);
    let mut dst = vec![0xA5u8; GUARD + len + GUARD];
    let record = HostCopyArgs::new(
        dst[GUARD..].as_mut_ptr().expose_provenance(),
        src.as_ptr().expose_provenance(),
        len,
    );
    // SAFETY: the record describes two live, disjoint vectors.
    unsafe { hostcopy_parallel_fn(record.user_data()) };
    assert!(
        dst[GUARD..GUARD + len] == src[..],
        "{len} bytes: wrong copy"
    );
    assert!(
        dst[..GUARD]
            .iter()
            .chain(&dst[GUARD + len..])
            .all(|&b| b == 0xA5),
        "{len} bytes: wrote outside"
    );
}

#[test]
#[cfg_attr(miri, ignore = "megabyte copies on threads: too slow under Miri")]
fn copies_are_exact_at_every_size_around_the_split() {
    assert_eq!(workers().workers(), 3);
    for len in [
        0,
        1,
        4095,
        PARALLEL_THRESHOLD - 1,
        PARALLEL_THRESHOLD,
        PARALLEL_THRESHOLD + 1,
        3 << 20,
        (5 << 20) + 77,
        16 << 20,
    ] {
        copy_and_check(len, len as u32);
    }
}

#[test]
#[cfg_attr(miri, ignore = "megabyte copies on threads: too slow under Miri")]
fn many_jobs_in_a_row_never_mix_up_their_parts() {
    workers();
    for job in 0..300u32 {
        copy_and_check(PARALLEL_THRESHOLD + (job as usize % 7) * 4096 + 13, job);
    }
}

#[test]
#[cfg_attr(miri, ignore = "megabyte copies on threads: too slow under Miri")]
fn several_callers_at_once_each_get_their_own_copy() {
    workers();
    std::thread::scope(|scope| {
        for caller in 0..4u32 {
            scope.spawn(move || {
                for job in 0..40 {
                    copy_and_check(
                        (2 << 20) + job * 1000 + caller as usize,
                        caller * 1000 + job as u32,
                    );
                }
            });
        }
    });
}

#[test]
#[cfg_attr(miri, ignore = "megabyte copies on threads: too slow under Miri")]
fn fewer_active_workers_still_copy_everything() {
    let pool = workers();
    for active in [0, 1, 3] {
        pool.set_active(active);
        assert_eq!(pool.active(), active);
        copy_and_check((6 << 20) + 5, active as u32);
    }
    pool.set_active(99);
    assert_eq!(pool.active(), 3, "capped at the workers started");
}

#[test]
#[cfg_attr(miri, ignore = "megabyte copies on threads: too slow under Miri")]
fn overlapping_records_copy_as_memmove() {
    workers();
    let len = 4 << 20;
    let original = pattern(len + 4096, 9);
    let mut buffer = original.clone();
    let base = buffer.as_mut_ptr().expose_provenance();
    let record = HostCopyArgs::new(base + 4096, base, len);
    // SAFETY: both ranges lie inside `buffer`.
    unsafe { hostcopy_parallel_fn(record.user_data()) };
    assert!(buffer[4096..] == original[..len]);
}

#[test]
fn rejected_records_are_rejected_once() {
    workers();
    // The rejection count is process-wide: other tests here reject nothing.
    let before = hostcopy_rejected();
    let src = [0u8; 16];
    let record = HostCopyArgs::new(0, src.as_ptr().expose_provenance(), 8 << 20);
    // SAFETY: null user_data and a null destination are rejected untouched.
    unsafe {
        hostcopy_parallel_fn(core::ptr::null_mut());
        hostcopy_parallel_fn(record.user_data());
    }
    assert_eq!(hostcopy_rejected() - before, 2);
}

#[test]
fn a_copy_above_the_threshold_splits_across_the_workers() {
    // Runs under Miri too (the others are too slow there): five parts of
    // 256 KiB for the caller and three workers, checked against a pattern
    // cheap enough to build in the interpreter.
    workers();
    let len = PARALLEL_THRESHOLD + 4096 + 13;
    let mut src = vec![0x3Cu8; len];
    for (i, byte) in src.iter_mut().enumerate().step_by(4093) {
        *byte = (i / 4093) as u8;
    }
    let mut dst = vec![0u8; len];
    let record = HostCopyArgs::new(
        dst.as_mut_ptr().expose_provenance(),
        src.as_ptr().expose_provenance(),
        len,
    );
    // SAFETY: the record describes two live, disjoint vectors.
    unsafe { hostcopy_parallel_fn(record.user_data()) };
    assert!(dst == src, "the split copy differs");
}

#[test]
fn an_own_pool_copies_with_either_store_kind_and_any_active_count() {
    // A pool of its own, beside the process-wide one; runs under Miri too.
    let pool = CopyPool::new(3);
    assert_eq!(pool.workers(), 3);
    let len = (3 << 18) + 4096 + 13;
    let mut src = vec![0x5Au8; len];
    for (i, byte) in src.iter_mut().enumerate().step_by(4093) {
        *byte = (i / 4093) as u8;
    }
    for stores in [Stores::Streaming, Stores::Cached] {
        for active in [3, 1, 0] {
            pool.set_active(active);
            assert_eq!(pool.active(), active);
            let mut dst = vec![0u8; len];
            let record = HostCopyArgs::new(
                dst.as_mut_ptr().expose_provenance(),
                src.as_ptr().expose_provenance(),
                len,
            );
            // SAFETY: the record describes two live, disjoint vectors.
            unsafe { pool.copy(&record, stores) };
            assert!(dst == src, "{stores:?} with {active} active: wrong copy");
        }
    }
}
