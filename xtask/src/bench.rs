//! `cargo xtask bench`: builds and runs the side-by-side benchmark
//! (`driver/benches/staged_copy.rs`) on this machine's GPU. Without a GPU it
//! says so and exits; on a GPU host without Rust, use `cargo xtask
//! gpu-bundle`, whose run script runs the same benchmark.

use std::process::{Command, ExitCode};

pub(crate) const USAGE: &str = "\
usage: cargo xtask bench [--total-mib N] [--runs N] [--out DIR] [--quick]

Runs driver/benches/staged_copy.rs: the driver's device-to-host paths
against staged copies with hostcopy_fn and hostcopy_parallel_fn (and the
way back), host-function costs, and the core's copy paths by size. Prints
a table last; writes bench.csv, bench.svg and bench.txt to DIR
(default bench-out).";

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
