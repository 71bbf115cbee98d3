//! Feature `simulator`: hooks for the C test (`tests/hostcopy_sim.h`)
//! into the simulated driver (`hostcopy_driver::cuda::sim`). Never in a
//! shipped library.

use std::ffi::{CStr, c_char};

use hostcopy_driver::cuda::sim;

use crate::status::{Failure, entry, hostcopy_status};

/// Routes this process's driver calls to the simulator; call first.
#[unsafe(no_mangle)]
pub extern "C" fn hostcopy_sim_install() {
    crate::status::entry_void("hostcopy_sim_install", sim::install);
}

/// A new simulated device; its ordinal, or -1 if that failed.
#[unsafe(no_mangle)]
pub extern "C" fn hostcopy_sim_new_device() -> i32 {
    let mut ordinal = -1;
    entry("hostcopy_sim_new_device", || {
        ordinal = i32::try_from(sim::new_device()).unwrap_or(-1);
        Ok(())
    });
    ordinal
}

fn ordinal(device: i32) -> Result<usize, Failure> {
    usize::try_from(device).map_err(|_| Failure::invalid(format!("device {device}")))
}

/// The device's queue runs no new work until [`hostcopy_sim_release`].
#[unsafe(no_mangle)]
pub extern "C" fn hostcopy_sim_hold(device: i32) -> hostcopy_status {
    entry("hostcopy_sim_hold", || {
        sim::hold(ordinal(device)?);
        Ok(())
    })
}

/// Lets the device's queue run again.
#[unsafe(no_mangle)]
pub extern "C" fn hostcopy_sim_release(device: i32) -> hostcopy_status {
    entry("hostcopy_sim_release", || {
        sim::release(ordinal(device)?);
        Ok(())
    })
}

/// Gives the device's context the sticky error `code` from now on.
#[unsafe(no_mangle)]
pub extern "C" fn hostcopy_sim_fail_context(device: i32, code: u32) -> hostcopy_status {
    entry("hostcopy_sim_fail_context", || {
        sim::fail_context(ordinal(device)?, code);
        Ok(())
    })
}

/// The `nth` call (from 1, counted from now) to driver entry point `entry_point` on the
/// device from now on fails with `code`.
///
/// # Safety
///
/// `entry_point` is null or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hostcopy_sim_fail_call(
    device: i32,
    entry_point: *const c_char,
    nth: u32,
    code: u32,
) -> hostcopy_status {
    entry("hostcopy_sim_fail_call", || {
        if entry_point.is_null() {
            return Err(Failure::null("entry_point"));
        }
        // SAFETY: the caller's contract.
        let name = unsafe { CStr::from_ptr(entry_point) }
            .to_str()
            .map_err(|_| Failure::invalid("entry_point is not UTF-8"))?;
        // The simulator keeps entry point names for the process.
        let name: &'static str = Box::leak(name.to_owned().into_boxed_str());
        sim::fail_call(ordinal(device)?, name, nth, code);
        Ok(())
    })
}

/// Waits for the device's queue, then prints and counts every misuse of
/// the driver the simulator saw on it.
#[unsafe(no_mangle)]
pub extern "C" fn hostcopy_sim_violations(device: i32) -> usize {
    let mut count = 0;
    entry("hostcopy_sim_violations", || {
        let device = ordinal(device)?;
        sim::drain(device);
        let violations = sim::take_violations(device);
        for violation in &violations {
            eprintln!("simulated driver misuse: {violation}");
        }
        count = violations.len();
        Ok(())
    });
    count
}

/// Panics inside an exported function, for the test that no panic crosses
/// into C: returns `HOSTCOPY_ERROR_PANIC`.
#[unsafe(no_mangle)]
pub extern "C" fn hostcopy_sim_panic() -> hostcopy_status {
    entry("hostcopy_sim_panic", || {
        panic!("hostcopy_sim_panic panics on purpose")
    })
}
