//! Project automation, run as `cargo xtask <command>` (the alias is in
//! `.cargo/config.toml`). Standard library only: each command is a module.

mod abi;
mod bench;
mod checks;
mod command;
mod dist;
mod frozen;
mod gpu_bundle;
// A test only: the README's headline table against BENCHMARKS.md.
#[cfg(test)]
mod headline;
mod layout_report;
mod release;
mod report;
mod self_test;
mod setup;
mod symbols;
mod targets;
mod wineserver;

use std::env;
use std::process::ExitCode;

const USAGE: &str = "\
usage: cargo xtask <command> [options]

commands:
  abi         check the C ABI of hostcopy-core on every supported target
  dist        package the C libraries per target (pkg-config, CMake)
  gpu-bundle  build the GPU tests, example and benchmark for a GPU host
  bench       run the side-by-side benchmark on this machine's GPU
  release     build the release artifacts (crates, Python sdist and wheel, C archives)
(`cargo xtask <command> --help` for each command's options)";

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("abi") => abi::main(&args[1..]),
        Some("dist") => dist::main(&args[1..]),
        Some("gpu-bundle") => gpu_bundle::main(&args[1..]),
        Some("bench") => bench::main(&args[1..]),
        Some("release") => release::main(&args[1..]),
        Some("-h" | "--help" | "help") => {
            println!(
                "{USAGE}\n\n{}\n\n{}\n\n{}\n\n{}\n\n{}",
                abi::USAGE,
                dist::USAGE,
                gpu_bundle::USAGE,
                bench::USAGE,
                release::USAGE
            );
            ExitCode::SUCCESS
        }
        Some(unknown) => {
            eprintln!("error: unknown command `{unknown}`\n\n{USAGE}");
            ExitCode::from(2)
        }
        None => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}
