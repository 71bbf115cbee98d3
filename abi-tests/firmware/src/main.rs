//! A bare-metal Rust firmware that depends on hostcopy-core like any other
//! crate: its own entry point, its own panic handler, and the core's contract
//! checked on the target in [`cases`]. The outcome goes to [`report::report`].

#![no_std]
#![no_main]

mod cases;
mod report;

#[cfg(target_arch = "arm")]
use cortex_m_rt::entry;
#[cfg(target_arch = "riscv32")]
use riscv_rt::entry;

#[entry]
fn main() -> ! {
    let tally = cases::run_all();
    report::report(tally.passed, tally.failed, tally.first_failure)
}

/// The firmware's own handler: hostcopy-core defines none, so this one links.
/// A panic is a failed run.
#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    report::report(0, 1, Some("panic"))
}
