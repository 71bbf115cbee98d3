//! A stager dropped after a sticky error, while a host function of one of
//! its transfers may still be copying with its workers, keeps the workers:
//! before, it joined and freed its copy pool under that host function (a
//! use after free that AddressSanitizer showed in `CopyPool::copy`). Its
//! own process: the count of running workers is process-wide.

#![cfg(all(feature = "cuda", feature = "simulator"))]

mod sim_support;

use std::time::{Duration, Instant};

use hostcopy_driver::cuda::DeviceBuffer;
use hostcopy_driver::cuda::sim;
use hostcopy_driver::cuda::staging::{self, Stager, StagingOptions, to_host};
use hostcopy_driver::parallel::running_workers;
use hostcopy_driver::{HostRange, RawHostMemory};
use sim_support::device;

#[test]
#[cfg_attr(miri, ignore = "waits for a copy in progress: too slow under Miri")]
fn a_stager_dropped_after_a_sticky_error_keeps_the_workers_a_host_function_may_use() {
    let device = device();
    let len = 128 << 20;
    let options = StagingOptions::builder()
        .chunk(len)
        .buffers(1)
        .workers(1)
        .driver_path_below(0)
        .build()
        .unwrap();
    let mut stager = Stager::with_options(&device.context, options).unwrap();
    let mut source = DeviceBuffer::new(&device.context, len).unwrap();
    source.copy_from_host(0, &vec![0xA5u8; len]).unwrap();
    // Kept for good, as the unsafe contract asks of a transfer dropped unfinished.
    let host: &'static mut [u8] = vec![0u8; len].leak();
    let probe = host.as_ptr();
    let range = HostRange {
        addr: host.as_mut_ptr().expose_provenance(),
        len,
    };
    let workers = running_workers();
    // SAFETY: `host` is leaked: valid for good, and touched by nothing
    // else while the transfer may run.
    let mut raw = unsafe { RawHostMemory::new(range) };
    // SAFETY: as above; `source` outlives the transfer.
    let pending = unsafe { stager.start_unchecked(to_host(&mut raw, &source)) }.unwrap();
    // The host function is copying once its first byte has arrived.
    let start = Instant::now();
    // SAFETY: a byte of the leaked buffer; the copy writes it once.
    while unsafe { core::ptr::read_volatile(probe) } == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the host function never started"
        );
        std::hint::spin_loop();
    }
    sim::fail_context(device.ordinal, 719);
    drop(pending);
    let leaked = staging::leaked().buffers;
    drop(stager); // its streams cannot drain: the copy may still be running
    assert!(
        staging::leaked().buffers > leaked,
        "the staging buffer is not kept"
    );
    assert_eq!(
        running_workers(),
        workers,
        "the stager's workers were stopped under a host function that may still use them"
    );
}
