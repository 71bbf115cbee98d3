//! What the simulated-driver test binaries share: a simulated device of the
//! test's own, iteration counts scaled down under Miri, the byte pattern
//! transfers are checked with, and the stager options every test sets.

#![allow(dead_code, unreachable_pub)]

use hostcopy_driver::cuda::Context;
use hostcopy_driver::cuda::sim;
use hostcopy_driver::cuda::staging::{Stager, StagingOptions, StagingOptionsBuilder};

/// `n` normally, `miri` under Miri (same scenario, fewer iterations).
pub const fn scaled(n: usize, miri: usize) -> usize {
    if cfg!(miri) { miri } else { n }
}

/// A byte pattern with no period shorter than the data (a multiplicative
/// hash of the offset): a chunk copied to the wrong place never matches by
/// accident. (A pattern that repeats every 64 KiB hid chunks swapped.)
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len as u64)
        .map(|i| {
            let x = (i ^ (u64::from(seed) << 48)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            (x >> 56) as u8 ^ (x >> 29) as u8
        })
        .collect()
}

/// Options with the three sizes every test picks (bytes a chunk, staging
/// buffers, workers); the caller sets the rest, `driver_path_below` first.
pub fn options(chunk: usize, buffers: usize, workers: usize) -> StagingOptionsBuilder {
    StagingOptions::builder()
        .chunk(chunk)
        .buffers(buffers)
        .workers(workers)
}

/// A simulated device with its primary context.
pub struct Device {
    pub ordinal: usize,
    pub context: Context,
}

/// A new simulated device of the caller's own.
pub fn device() -> Device {
    sim::install();
    let ordinal = sim::new_device();
    let context = Context::primary(ordinal).expect("the simulated device's primary context");
    Device { ordinal, context }
}

impl Device {
    /// A stager on this device's primary context, with options the test
    /// knows to be valid.
    pub fn stager(&self, options: StagingOptionsBuilder) -> Stager {
        let options = options.build().expect("the test's staging options");
        Stager::with_options(&self.context, options).expect("a stager on the simulated device")
    }

    pub fn state(&self) -> sim::DeviceState {
        sim::device_state(self.ordinal)
    }

    /// Waits for the queue and late destructors, then fails on any misuse
    /// the simulator saw on this device.
    pub fn assert_no_violations(&self) {
        sim::drain(self.ordinal);
        let violations = sim::take_violations(self.ordinal);
        assert!(
            violations.is_empty(),
            "driver misuse on device {}: {violations:#?}",
            self.ordinal
        );
    }
}
