//! A pending transfer dropped after a sticky error while the stager's
//! copier is copying it with the workers: the drop returns only once the
//! copier is done with it (so the host memory is no longer written), and
//! the stager's drop then stops its workers, which nothing uses any more,
//! and keeps its staging buffer, which the undrained streams may still
//! write. (Before, a host function on the driver's thread did that copy,
//! and a stager dropped then joined and freed its copy pool under it: a
//! use after free that AddressSanitizer showed in `CopyPool::copy`.) Its
//! own process: the count of running workers is process-wide.

#![cfg(all(feature = "cuda", feature = "simulator"))]

mod sim_support;

use std::time::{Duration, Instant};

use hostcopy_driver::cuda::DeviceBuffer;
use hostcopy_driver::cuda::sim;
use hostcopy_driver::cuda::staging::{self, to_host};
use hostcopy_driver::parallel::running_workers;
use hostcopy_driver::{HostRange, RawHostMemory};
use sim_support::device;

#[test]
#[cfg_attr(miri, ignore = "waits for a copy in progress: too slow under Miri")]
fn a_transfer_dropped_after_a_sticky_error_mid_copy_waits_for_the_copier() {
    let device = device();
    let len = 128 << 20;
    // One chunk: the transfer's ends do not ramp.
    let mut stager = device.stager(
        sim_support::options(len, 1, 1)
            .driver_path_below(0)
            .edge_chunk(usize::MAX),
    );
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
    // The copier is copying once the first byte has arrived.
    let start = Instant::now();
    // SAFETY: a byte of the leaked buffer; the copy writes it once.
    while unsafe { core::ptr::read_volatile(probe) } == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the copier never started"
        );
        std::hint::spin_loop();
    }
    sim::fail_context(device.ordinal, 719);
    drop(pending);
    // The copy in progress ended before the drop returned (one chunk, so
    // the copier skipped nothing after it).
    // SAFETY: the leaked buffer, which nothing writes any more.
    let copied = unsafe { core::slice::from_raw_parts(probe, len) };
    let short = copied.iter().position(|&byte| byte != 0xA5);
    assert!(
        short.is_none(),
        "the drop returned while the copier was still writing: byte {short:?}"
    );
    let leaked = staging::leaked().buffers;
    drop(stager); // its streams cannot drain
    assert!(
        staging::leaked().buffers > leaked,
        "the staging buffer is not kept"
    );
    assert_eq!(
        running_workers(),
        workers - 1,
        "the stager's worker was left running"
    );
}
