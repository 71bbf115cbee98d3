//! What the GPU test binaries share: finding the GPU or saying why there is
//! none, running trials one at a time, and test data.
//!
//! Without a GPU every trial reports itself ignored with the reason (no
//! NVIDIA driver, or no device). With `HOSTCOPY_REQUIRE_GPU=1` (the GPU
//! bundle's run script sets it) a missing GPU is a failure instead.

#![allow(dead_code, unreachable_pub)]

pub mod kernel;

use std::time::{Duration, Instant};

use hostcopy_driver::cuda::{CUDA_ERROR_NO_DEVICE, Context};
use libtest_mimic::{Arguments, Completion, Failed, Trial};

/// A GPU test: gets the device's primary context, current on its thread.
pub type GpuTest = fn(&Context) -> Result<(), Failed>;

/// Runs `tests` on device 0, or reports each ignored with the reason there
/// is no GPU. Exits the process with the result.
pub fn run(binary: &str, tests: &[(&'static str, GpuTest)]) -> ! {
    let mut args = Arguments::from_args();
    // Trials share process-wide counters (owned records, rejections) and
    // the one host-function thread of the context: one at a time.
    args.test_threads = Some(1);
    let trials = match Context::primary(0) {
        Ok(context) => {
            describe(binary, &context);
            tests
                .iter()
                .map(|&(name, test)| {
                    let context = context.clone();
                    Trial::test(name, move || {
                        context.make_current()?;
                        test(&context)
                    })
                })
                .collect()
        }
        Err(error) => {
            let reason = if error.is_driver_missing() {
                error.to_string()
            } else if error.code() == CUDA_ERROR_NO_DEVICE {
                format!("no CUDA device ({error})")
            } else {
                format!("CUDA unavailable: {error}")
            };
            if std::env::var_os("HOSTCOPY_REQUIRE_GPU").is_some_and(|v| v == "1") {
                eprintln!("{binary}: HOSTCOPY_REQUIRE_GPU=1 but {reason}");
                std::process::exit(1);
            }
            eprintln!("{binary}: skipping every GPU test: {reason}");
            tests
                .iter()
                .map(|&(name, _)| {
                    let reason = reason.clone();
                    Trial::ignorable_test(name, move || Ok(Completion::ignored_with(reason)))
                })
                .collect()
        }
    };
    libtest_mimic::run(&args, trials).exit()
}

fn describe(binary: &str, context: &Context) {
    let name = context
        .device_name()
        .map(|n| n.to_string())
        .unwrap_or_default();
    let driver = hostcopy_driver::cuda::driver_version().unwrap_or(0);
    eprintln!(
        "{binary}: device 0: {name}, driver CUDA {}.{}",
        driver / 1000,
        driver % 1000 / 10
    );
}

/// A byte pattern with no period shorter than the data (a multiplicative
/// hash of the offset): a chunk copied to the wrong place never matches by
/// accident. (The one before repeated every 2 MiB.)
pub fn pattern(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u64)
        .map(|i| {
            let x = (i ^ (u64::from(seed) << 40)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            (x >> 56) as u8 ^ (x >> 29) as u8
        })
        .collect()
}

/// Checks `condition`, failing the trial with `message` otherwise.
pub fn check(condition: bool, message: impl FnOnce() -> String) -> Result<(), Failed> {
    if condition {
        Ok(())
    } else {
        Err(message().into())
    }
}

/// Polls `done` until it holds or `limit` passes (for work the driver
/// finishes on its own threads, such as user-object destructors).
pub fn eventually(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    done()
}

/// Boxed owned records alive now.
pub fn owned_alive() -> usize {
    hostcopy_driver::owned_record_counts().alive()
}
