//! What the groups hand back and compare with: the rows and notes of the
//! report, the reference figures the first group measures, and the rows
//! made from timed runs (each printed as it is measured). Below every
//! group, so that the groups import it and none imports another.

use hostcopy_driver::cuda::Error;

use crate::paths::Timed;
use crate::table::{Row, median, size};

/// What every group is compared with: the link, and the staged default.
pub(crate) struct Reference {
    pub(crate) pinned_d2h: f64,
    pub(crate) pinned_h2d: f64,
    pub(crate) staged_d2h: f64,
}

/// The rows, and lines that say what they mean (crossover, two GPUs).
pub(crate) struct Report {
    pub(crate) rows: Vec<Row>,
    pub(crate) notes: Vec<String>,
}

/// Ends the run (exit 1) if a transfer's bytes are wrong.
pub(crate) fn check(what: &str, got: &[u8], expected: &[u8]) -> Result<(), Error> {
    if got != expected {
        eprintln!("staged_copy: {what}: wrong bytes");
        std::process::exit(1);
    }
    Ok(())
}

pub(crate) fn gbps(bytes: usize, timed: &Timed) -> f64 {
    bytes as f64 / median(&timed.times) / 1e9
}

pub(crate) fn row(
    group: &str,
    path: &str,
    bytes: usize,
    timed: &Timed,
    pinned: f64,
    driver: f64,
) -> Row {
    println!(
        "  {group}: {path}, {}: {:.1} GB/s",
        size(bytes),
        gbps(bytes, timed)
    );
    Row {
        group: group.into(),
        path: path.into(),
        bytes,
        seconds: median(&timed.times),
        pinned_gbps: pinned,
        driver_gbps: driver,
        caller_share: timed.caller_share,
        not_run: None,
    }
}

/// A row that was not measured, and why.
pub(crate) fn not_run(group: &str, path: &str, bytes: usize, reason: &str) -> Row {
    println!("  {group}: {path}, {}: not run ({reason})", size(bytes));
    Row {
        group: group.into(),
        path: path.into(),
        bytes,
        seconds: f64::NAN,
        pinned_gbps: f64::NAN,
        driver_gbps: f64::NAN,
        caller_share: f64::NAN,
        not_run: Some(reason.into()),
    }
}
