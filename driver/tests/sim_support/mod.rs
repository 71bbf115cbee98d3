//! What the simulated-driver test binaries share: a simulated device of the
//! test's own, and iteration counts scaled down under Miri.

#![allow(dead_code, unreachable_pub)]

use hostcopy_driver::cuda::Context;
use hostcopy_driver::cuda::sim;

/// `n` normally, `miri` under Miri (same scenario, fewer iterations).
pub const fn scaled(n: usize, miri: usize) -> usize {
    if cfg!(miri) { miri } else { n }
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
