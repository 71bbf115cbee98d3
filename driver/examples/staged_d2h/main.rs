//! Staged device-to-host copy into pageable memory with `hostcopy_fn`: the
//! calling thread only enqueues, the driver's host-function thread copies
//! each pinned slot into the destination, in stream order.
//!
//! ```text
//! cargo run --release --example staged_d2h --features cuda,std -- \
//!     [--slots 3] [--chunk-mib 16] [--total-mib 1024] [--workers 0]
//! ```
//!
//! `--workers N` (N > 0) uses `hostcopy_parallel_fn` with N copy workers.

mod pipeline;

use std::process::ExitCode;

use hostcopy_driver::cuda::Context;
use hostcopy_driver::parallel::{CopyWorkers, hostcopy_parallel_fn};
use hostcopy_driver::{HostFn, hostcopy_fn};
use pipeline::{Ring, device_with_pattern, gb_per_s, pattern};

struct Options {
    slots: usize,
    chunk_mib: usize,
    total_mib: usize,
    workers: usize,
}

fn parse() -> Result<Options, String> {
    let mut options = Options {
        slots: 3,
        chunk_mib: 16,
        total_mib: 1024,
        workers: 0,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let value: usize = value
            .parse()
            .map_err(|_| format!("{flag}: not a number: {value}"))?;
        match flag.as_str() {
            "--slots" => options.slots = value,
            "--chunk-mib" => options.chunk_mib = value,
            "--total-mib" => options.total_mib = value,
            "--workers" => options.workers = value,
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    if options.slots == 0 || options.chunk_mib == 0 || options.total_mib == 0 {
        return Err("--slots, --chunk-mib and --total-mib must be at least 1".into());
    }
    Ok(options)
}

fn main() -> ExitCode {
    let options = match parse() {
        Ok(options) => options,
        Err(message) => {
            eprintln!(
                "staged_d2h: {message}\nusage: staged_d2h [--slots N] [--chunk-mib N] [--total-mib N] [--workers N]"
            );
            return ExitCode::from(2);
        }
    };
    match run(&options) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("staged_d2h: {message}");
            // Exit without unwinding: after a context error the driver may
            // still be running a host function on the destination.
            std::process::exit(1)
        }
    }
}

fn run(options: &Options) -> Result<(), String> {
    let context = Context::primary(0).map_err(|e| format!("no GPU: {e}"))?;
    let name = context.device_name().map_err(|e| e.to_string())?;
    let total = options.total_mib << 20;
    let chunk = options.chunk_mib << 20;
    let host_fn: HostFn = if options.workers > 0 {
        CopyWorkers::start(options.workers).map_err(|e| format!("start copy workers: {e}"))?;
        hostcopy_parallel_fn
    } else {
        hostcopy_fn
    };
    println!(
        "{name}: {} MiB device -> pageable, {} slots of {} MiB, {}",
        options.total_mib,
        options.slots,
        options.chunk_mib,
        if options.workers > 0 {
            format!("hostcopy_parallel_fn with {} workers", options.workers)
        } else {
            "hostcopy_fn".into()
        }
    );
    let device = device_with_pattern(&context, total, 7).map_err(|e| e.to_string())?;
    // Host functions write `dst`: after a context error one may still be
    // running when the error comes back, so `dst` is never freed on that
    // path (the process exits).
    let mut dst = std::mem::ManuallyDrop::new(vec![0u8; total]);
    // `vec![0; n]` maps untouched zero pages: fault every page in now, or
    // the copy pays for first-touch faults (a few GB/s at most).
    dst.fill(0xA5);
    let ring = Ring::new(&context, options.slots, chunk).map_err(|e| e.to_string())?;
    let mut last_tenth = 0;
    let timing = ring
        .device_to_host(&device, &mut dst, host_fn, |done, chunks| {
            let tenth = done * 10 / chunks;
            if tenth > last_tenth {
                last_tenth = tenth;
                println!("  queued {done}/{chunks} chunks");
            }
        })
        .map_err(|e| e.to_string())?;
    let expected = pattern(total, 7);
    let wrong = dst.iter().zip(&expected).filter(|(a, b)| a != b).count();
    // Every host function has finished: the destination can go.
    drop(std::mem::ManuallyDrop::into_inner(dst));
    if wrong != 0 {
        return Err(format!("{wrong} bytes of the destination are wrong"));
    }
    println!(
        "verified; {:.1} GB/s, caller blocked {:.2?} of {:.2?} ({:.1}%)",
        gb_per_s(total, timing.total),
        timing.blocked,
        timing.total,
        100.0 * timing.blocked.as_secs_f64() / timing.total.as_secs_f64()
    );
    Ok(())
}
