//! A [`CopyPool`]'s threads end when it is dropped. Its own binary: the count
//! of running workers is process-wide, so no other pool may start beside it.

#![cfg(feature = "std")]

use hostcopy_driver::HostCopyArgs;
use hostcopy_driver::parallel::{CopyPool, Stores, running_workers};

#[test]
fn a_dropped_pool_has_joined_its_threads() {
    assert_eq!(running_workers(), 0, "no pool started yet");
    let pool = CopyPool::new(4);
    assert_eq!(pool.workers(), 4);
    assert_eq!(running_workers(), 4);

    // Large enough to split into parts, so the workers have run a job.
    let len = (3 << 18) + 4099;
    let src: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
    let mut dst = vec![0u8; len];
    let record = HostCopyArgs::new(
        dst.as_mut_ptr().expose_provenance(),
        src.as_ptr().expose_provenance(),
        len,
    );
    // SAFETY: the record describes two live, disjoint vectors.
    unsafe { pool.copy(&record, Stores::Cached) };
    assert!(dst == src, "the split copy differs");

    drop(pool);
    assert_eq!(running_workers(), 0, "a dropped pool's workers still run");

    // A second pool after the first is gone starts and ends the same way.
    let pool = CopyPool::new(2);
    assert_eq!(running_workers(), 2);
    drop(pool);
    assert_eq!(running_workers(), 0);
}
