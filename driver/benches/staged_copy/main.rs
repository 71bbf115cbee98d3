//! The side-by-side benchmark of staged transfers (`cuda::staging`) against
//! the link (pinned memory) and the driver's own pageable path, in one
//! process, with ratios. `cargo xtask bench`, or the GPU bundle's
//! `staged_copy`.
//!
//! ```text
//! staged_copy [--runs N] [--max-gib N] [--small-reps N] [--out DIR] [--quick] [--simulated]
//!             [--only GROUP,...]
//! ```
//!
//! Groups (`groups.rs`): 1 GiB with default options (D2H; H2D with
//! streaming and with cached stores), the options around the defaults (chunk size, staging buffers, workers), sizes
//! 64 MiB to `--max-gib` (default 16; sizes that do not fit the GPU or half
//! the host's available memory are skipped with a message), small sizes
//! 4 KiB to 4 MiB staged vs the driver's path (to set the crossover), and
//! two GPUs at once where there are two. Then (`fresh.rs`) a never-touched
//! `vec![0; n]` at 64 MiB, 1 GiB and 4 GiB (driver, prefault off and on,
//! a `HostBuffer`), and the time to make a 16 GiB host buffer usable
//! (`HostBuffer` vs pinned). Then (`batches.rs`) batches of
//! scattered blocks (64 KiB, 256 KiB and 2 MiB, 1 GiB in all) through the
//! stager with the driver's batch copy and with a loop, beside a loop of
//! the driver's copies and `cuMemcpyBatchAsync` called directly (pageable
//! and pinned); the caller's share of a scope transfer, 64 MiB to 16 GiB;
//! and one transfer of 64 MiB, 256 MiB and 1 GiB, blocking and in a
//! scope, beside pinned memory. Then (`chunk_cost.rs`) where a chunk's
//! fixed cost goes (the driver's copies alone, an empty host function per
//! chunk, a host function copying with a pool, the stager, an event per
//! chunk with the calling thread copying), transfers beside another
//! library's busy host functions, and CPU seconds per GiB against the
//! driver's path. Then (`lean.rs`) a lean staging ring written in the
//! benchmark itself (persistent worker threads, a ring of pinned slots,
//! events polled) beside pinned memory and the stager at 16 MiB, 64 MiB,
//! 256 MiB and 1 GiB both ways, so that the stager's overhead is a ratio
//! (target: stager >= 0.97x the lean ring). Then (`registered.rs`)
//! hostcopy's own memory registered with the driver beside pinned memory
//! and the same memory staged, at the same sizes, with CPU seconds per
//! GiB, and a 64 GiB buffer registered in the background while its first
//! GiB is uploaded. A default run takes about
//! two minutes on an H200 host; `--quick` runs each group once at small sizes
//! (CI: proves it builds and runs); with `--simulated` (feature
//! `simulator`) it runs against the simulated driver, which checks the
//! benchmark's logic and byte checks but measures nothing real (the rows
//! that call the driver directly say "not run" there). With feature
//! `cudarc`, last (`cudarc.rs`): a `CudaSlice` that a cudarc kernel wrote
//! beside a `DeviceBuffer`, both ways, runs interleaved.
//!
//! `--only` runs the named groups alone (after the 1 GiB reference, which
//! the others compare with): `sweep`, `sizes`, `small`, `two-gpus`,
//! `fresh`, `batches`, `one-transfer`, `chunk-cost`, `lean`, `registered`,
//! `cudarc`.

mod batches;
mod chunk_cost;
#[cfg(feature = "cudarc")]
mod cudarc;
mod fresh;
mod groups;
mod lean;
mod machine;
mod paths;
mod registered;
mod report;
mod table;

use std::process::ExitCode;

use hostcopy_driver::cuda::{Context, Error};

use crate::report::{Reference, Report};

/// What to run.
#[derive(Debug)]
pub(crate) struct Options {
    pub(crate) runs: usize,
    pub(crate) max_bytes: usize,
    pub(crate) small_reps: usize,
    pub(crate) out: std::path::PathBuf,
    pub(crate) quick: bool,
    /// Against the simulated driver (feature `simulator`): checks the
    /// benchmark's own logic without a GPU; the figures mean nothing.
    pub(crate) simulated: bool,
    /// `--only`: the groups to run; `None`, all of them.
    pub(crate) only: Option<Vec<String>>,
}

/// The groups `--only` names.
const GROUPS: [&str; 11] = [
    "sweep",
    "sizes",
    "small",
    "two-gpus",
    "fresh",
    "batches",
    "one-transfer",
    "chunk-cost",
    "lean",
    "registered",
    "cudarc",
];

impl Options {
    /// Whether group `name` (one of [`GROUPS`]) runs.
    pub(crate) fn runs_group(&self, name: &str) -> bool {
        debug_assert!(GROUPS.contains(&name));
        self.only
            .as_ref()
            .is_none_or(|only| only.iter().any(|group| group == name))
    }
}

/// What each group after the first runs with: the GPU's context, what to
/// run, and the figures the first group measured to compare with.
pub(crate) struct Bench<'a> {
    pub(crate) context: &'a Context,
    pub(crate) options: &'a Options,
    pub(crate) reference: &'a Reference,
}

fn parse() -> Result<Options, String> {
    let mut options = Options {
        runs: 5,
        max_bytes: 16 << 30,
        small_reps: 50,
        out: "bench-out".into(),
        quick: false,
        simulated: false,
        only: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--quick" => options.quick = true,
            "--simulated" => options.simulated = true,
            "--bench" => {} // passed by `cargo bench`
            "--out" => options.out = args.next().ok_or("--out needs a value")?.into(),
            "--only" => {
                let list = args.next().ok_or("--only needs a list of groups")?;
                let groups: Vec<String> = list.split(',').map(str::to_owned).collect();
                if let Some(unknown) = groups.iter().find(|g| !GROUPS.contains(&g.as_str())) {
                    return Err(format!(
                        "--only: no group `{unknown}` (groups: {})",
                        GROUPS.join(", ")
                    ));
                }
                options.only = Some(groups);
            }
            "--runs" | "--max-gib" | "--small-reps" => {
                let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
                let n: usize = value
                    .parse()
                    .map_err(|_| format!("{flag}: not a number: {value}"))?;
                if n == 0 {
                    return Err(format!("{flag} must be at least 1"));
                }
                match flag.as_str() {
                    "--runs" => options.runs = n,
                    "--max-gib" => options.max_bytes = n << 30,
                    _ => options.small_reps = n,
                }
            }
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    if options.quick {
        options.runs = 1;
        options.max_bytes = 64 << 20;
        options.small_reps = 3;
    }
    Ok(options)
}

/// Every group file in turn, the later ones beside the reference that
/// `groups.rs` measures first; the groups share only what `report.rs` and
/// the files below it hold, so none of them calls another.
fn run_groups(context: &Context, options: &Options) -> Result<Report, Error> {
    let mut report = Report {
        rows: Vec::new(),
        notes: Vec::new(),
    };
    let reference = groups::run(context, options, &mut report)?;
    let bench = Bench {
        context,
        options,
        reference: &reference,
    };
    if options.runs_group("fresh") {
        fresh::run(&bench, &mut report)?;
    }
    if options.runs_group("batches") || options.runs_group("one-transfer") {
        batches::run(&bench, &mut report)?;
    }
    if options.runs_group("chunk-cost") {
        chunk_cost::run(&bench, &mut report)?;
    }
    if options.runs_group("lean") {
        lean::run(&bench, &mut report)?;
    }
    if options.runs_group("registered") {
        registered::run(&bench, &mut report)?;
    }
    #[cfg(feature = "cudarc")]
    if options.runs_group("cudarc") {
        cudarc::run(&bench, &mut report)?;
    }
    Ok(report)
}

fn main() -> ExitCode {
    let options = match parse() {
        Ok(options) => options,
        Err(message) => {
            eprintln!(
                "staged_copy: {message}\nusage: staged_copy [--runs N] [--max-gib N] [--small-reps N] [--out DIR] [--quick] [--simulated] [--only GROUP,...]"
            );
            return ExitCode::from(2);
        }
    };
    if options.simulated {
        #[cfg(feature = "simulator")]
        {
            use hostcopy_driver::cuda::sim;
            sim::install();
            // Two devices, so the two-GPU group runs too.
            let _ = (sim::new_device(), sim::new_device());
        }
        #[cfg(not(feature = "simulator"))]
        {
            eprintln!("staged_copy: --simulated needs the `simulator` feature");
            return ExitCode::from(2);
        }
    }
    let context = match Context::primary(0) {
        Ok(context) => context,
        Err(error) => {
            eprintln!("staged_copy: skipped: no GPU ({error})");
            let required = std::env::var_os("HOSTCOPY_REQUIRE_GPU").is_some_and(|v| v == "1");
            return if required {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    match run_groups(&context, &options) {
        Ok(report) => {
            let rows = report.rows;
            let header = machine::summary(&context);
            let text = format!(
                "{header}{}\n{}\n",
                table::text(&rows),
                report.notes.join("\n")
            );
            println!("{text}");
            let written = std::fs::create_dir_all(&options.out)
                .and_then(|()| std::fs::write(options.out.join("bench.txt"), &text))
                .and_then(|()| std::fs::write(options.out.join("bench.csv"), table::csv(&rows)));
            if let Err(error) = written {
                eprintln!("staged_copy: writing {}: {error}", options.out.display());
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("staged_copy: {error}");
            ExitCode::FAILURE
        }
    }
}
