//! Transfers under way, as the threads that register hostcopy's memory in
//! the background see them (they step aside between ranges while any is):
//! counted from the start call until the transfer is seen to have run
//! (waited for, polled done, finished or dropped), and not at all after a
//! refused start or one that completed in the call. One test alone in its
//! binary: the count is the process's.

#![cfg(all(feature = "cuda", feature = "simulator"))]

mod sim_support;

use hostcopy_driver::cuda::DeviceBuffer;
use hostcopy_driver::cuda::registration::transfers_under_way;
use hostcopy_driver::cuda::sim;
use hostcopy_driver::cuda::staging::{self, to_device, to_host};
use sim_support::{device, scaled};

/// Chunk size of the test.
const CHUNK: usize = scaled(1 << 20, staging::MIN_CHUNK);

#[test]
fn a_transfer_is_under_way_from_its_start_until_it_is_seen_to_have_run() {
    let device = device();
    let mut stager = device.stager(sim_support::options(CHUNK, 3, 2).driver_path_below(0));
    let len = 3 * CHUNK;
    let source = DeviceBuffer::new(&device.context, len).unwrap();
    let mut host = vec![0u8; len];
    assert_eq!(transfers_under_way(), 0);

    // Pending while the device runs nothing: under way until waited for.
    sim::hold(device.ordinal);
    // SAFETY: `host` and `source` outlive the transfer, finished below,
    // and nothing touches them before.
    let pending = unsafe { stager.start_unchecked(to_host(&mut host[..], &source)) }.unwrap();
    assert_eq!(transfers_under_way(), 1, "a started transfer is under way");
    assert!(!pending.is_finished().unwrap());
    assert_eq!(
        transfers_under_way(),
        1,
        "a transfer not yet run is under way"
    );
    sim::release(device.ordinal);
    pending.wait_arrived().unwrap();
    assert_eq!(transfers_under_way(), 0, "a transfer waited for is not");
    stager.finish_pending(pending).unwrap();
    assert_eq!(transfers_under_way(), 0);

    // Polled until done.
    // SAFETY: as above.
    let pending = unsafe { stager.start_unchecked(to_host(&mut host[..], &source)) }.unwrap();
    while !pending.is_finished().unwrap() {
        std::thread::yield_now();
    }
    assert_eq!(transfers_under_way(), 0, "a transfer polled done is not");
    stager.finish_pending(pending).unwrap();

    // Dropped unwaited: its drop waits, and it is no longer counted.
    // SAFETY: as above.
    let pending = unsafe { stager.start_unchecked(to_host(&mut host[..], &source)) }.unwrap();
    assert_eq!(transfers_under_way(), 1);
    drop(pending);
    assert_eq!(transfers_under_way(), 0, "a dropped transfer is not");

    // A blocking one, and one refused at its start (a device range past
    // the buffer's end), leave nothing counted.
    stager.run(to_host(&mut host[..], &source)).unwrap();
    let mut target = DeviceBuffer::new(&device.context, len).unwrap();
    stager.run(to_device(&mut target, &host[..])).unwrap();
    let past_end = stager.run(to_host(&mut host[..], &source).at(1));
    assert!(past_end.is_err(), "{past_end:?}");
    assert_eq!(transfers_under_way(), 0, "a finished or refused one is not");
}
