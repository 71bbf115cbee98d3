//! Where the firmware's outcome goes: the one place that knows how a board
//! (or an emulator) learns whether the cases passed.
//!
//! Today the outcome is stored in [`HOSTCOPY_FIRMWARE_OUTCOME`], where a
//! debugger or an emulator's memory dump reads it, and the core halts.
//! Printing the outcome and exiting an emulator with a status (semihosting
//! `SYS_WRITE0`, `SYS_EXIT`) belongs here too, in place of the halt.

use core::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

/// What a run found, readable at the symbol `HOSTCOPY_FIRMWARE_OUTCOME`.
#[repr(C)]
pub(crate) struct Outcome {
    passed: AtomicU32,
    failed: AtomicU32,
    /// Address and length of the first failed case's name (UTF-8); 0 and 0 if none.
    first_failure: [AtomicUsize; 2],
    /// Set to 1 last, once the other fields hold the outcome.
    done: AtomicU32,
}

#[used]
#[unsafe(no_mangle)]
pub(crate) static HOSTCOPY_FIRMWARE_OUTCOME: Outcome = Outcome {
    passed: AtomicU32::new(0),
    failed: AtomicU32::new(0),
    first_failure: [AtomicUsize::new(0), AtomicUsize::new(0)],
    done: AtomicU32::new(0),
};

/// Publishes the outcome of the cases, then stops the core.
pub(crate) fn report(passed: u32, failed: u32, first_failure: Option<&'static str>) -> ! {
    let outcome = &HOSTCOPY_FIRMWARE_OUTCOME;
    outcome.passed.store(passed, Ordering::Relaxed);
    outcome.failed.store(failed, Ordering::Relaxed);
    if let Some(name) = first_failure {
        outcome.first_failure[0].store(name.as_ptr().expose_provenance(), Ordering::Relaxed);
        outcome.first_failure[1].store(name.len(), Ordering::Relaxed);
    }
    outcome.done.store(1, Ordering::Release);
    loop {
        core::hint::spin_loop();
    }
}
