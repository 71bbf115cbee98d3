//! Starting the parallel host function's worker pool: a worker count that
//! cannot be honoured is clamped, and a second start says what it did
//! (issue 9, finding 8). Its own binary: the pool is one per process.
//!
//! Before: `CopyWorkers::start(usize::MAX)` tried to spawn threads until the
//! system refused, left the pool claiming `usize::MAX` workers, and the next
//! large copy computed `active + 1` inside the `extern "C"` host function:
//! an overflow panic, which aborts the process. A second `start(n)` returned
//! the running pool as if it had started `n` workers.

#![cfg(feature = "std")]

use hostcopy_driver::HostCopyArgs;
use hostcopy_driver::parallel::{
    CopyWorkers, MAX_WORKERS, PARALLEL_THRESHOLD, StartError, hostcopy_parallel_fn,
};

#[test]
#[cfg_attr(miri, ignore = "starts a thousand threads: too slow under Miri")]
fn a_huge_worker_count_is_clamped_and_a_second_start_says_so() {
    let pool = CopyWorkers::start(usize::MAX).expect("start the pool");
    assert_eq!(pool.workers(), MAX_WORKERS);
    pool.set_active(usize::MAX);
    assert_eq!(pool.active(), MAX_WORKERS);

    // A copy large enough to split across every worker.
    let len = 4 * PARALLEL_THRESHOLD + 4099;
    let src: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
    let mut dst = vec![0u8; len];
    let record = HostCopyArgs::new(
        dst.as_mut_ptr().expose_provenance(),
        src.as_ptr().expose_provenance(),
        len,
    );
    // SAFETY: the record describes two live, disjoint vectors.
    unsafe { hostcopy_parallel_fn(record.user_data()) };
    assert!(dst == src, "the split copy differs");

    match CopyWorkers::start(3) {
        Err(StartError::AlreadyStarted { workers }) => assert_eq!(workers, MAX_WORKERS),
        other => panic!("a second start returned {other:?}"),
    }
}
