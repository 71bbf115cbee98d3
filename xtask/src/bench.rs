//! `cargo xtask bench`: builds and runs the side-by-side benchmark
//! (`driver/benches/staged_copy/`) on this machine's GPU. Without a GPU it
//! says so and exits; on a GPU host without Rust, use `cargo xtask
//! gpu-bundle`, whose run script runs the same benchmark.

use std::process::{Command, ExitCode};

pub(crate) const USAGE: &str = "\
usage: cargo xtask bench [--runs N] [--max-gib N] [--small-reps N] [--out DIR] [--quick]

Runs driver/benches/staged_copy/: staged transfers (cuda::staging, default
options) beside pinned memory (the link) and the driver's pageable path, both
ways, with ratios: 1 GiB (H2D with streaming and with cached stores), a
never-touched destination, sizes 64 MiB to --max-gib (default 16), small
sizes 4 KiB to 4 MiB (the crossover), two GPUs at once where present;
batches of scattered blocks (the stager's batch copy and loop beside the
driver's loop and cuMemcpyBatchAsync), the caller's share of a scope
transfer, one transfer of 64 MiB to 1 GiB beside pinned memory. Prints a
table last; writes bench.txt and bench.csv to DIR (default bench-out).";

pub(crate) fn main(args: &[String]) -> ExitCode {
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args(["bench", "-p", "hostcopy-driver", "--features", "cuda,std", "--bench", "staged_copy", "--"])
        .args(args)
        .status();
    match status {
        Ok(status) if status.success() => ExitCode::SUCCESS,
        Ok(status) => {
            eprintln!("bench: the benchmark failed ({status})");
            ExitCode::FAILURE
        }
        Err(error) => {
            eprintln!("bench: cannot run cargo: {error}");
            ExitCode::FAILURE
        }
    }
}
