//! One measured row, and the table and CSV made of them: every figure
//! beside the link (pinned) and the driver's pageable path of the same run.

use std::fmt::Write as _;
use std::time::Duration;

/// One measured path at one size.
#[derive(Clone, Debug)]
pub(crate) struct Row {
    /// Which table: "1 GiB D2H", "sizes H2D", "never touched", ...
    pub(crate) group: String,
    pub(crate) path: String,
    pub(crate) bytes: usize,
    /// Median over the runs.
    pub(crate) seconds: f64,
    /// The pinned (link) figure to compare with, GB/s.
    pub(crate) pinned_gbps: f64,
    /// The driver's pageable path at the same size, GB/s.
    pub(crate) driver_gbps: f64,
    /// Share of the transfer the caller spent in driver calls (NaN: n/a).
    pub(crate) caller_share: f64,
    /// Why the row was not measured (`seconds` is then NaN).
    pub(crate) not_run: Option<String>,
}

impl Row {
    pub(crate) fn gbps(&self) -> f64 {
        self.bytes as f64 / self.seconds / 1e9
    }
}

/// The median of `times`, in seconds.
pub(crate) fn median(times: &[Duration]) -> f64 {
    let mut seconds: Vec<f64> = times.iter().map(Duration::as_secs_f64).collect();
    seconds.sort_by(f64::total_cmp);
    seconds[seconds.len() / 2]
}

pub(crate) fn size(bytes: usize) -> String {
    match bytes {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 => format!("{} MiB", b >> 20),
        b => format!("{} KiB", b >> 10),
    }
}

fn ratio(value: f64, base: f64) -> String {
    if base.is_finite() && base > 0.0 {
        format!("{:.2}", value / base)
    } else {
        "-".into()
    }
}

/// The rows as a table, grouped, with ratios to pinned and to the driver.
pub(crate) fn text(rows: &[Row]) -> String {
    let mut out = String::new();
    let mut group = "";
    for row in rows {
        if row.group != group {
            group = &row.group;
            let _ = writeln!(
                out,
                "\n{group}\n| path | size | GB/s | x pinned | x driver | caller in driver calls |\n|---|---:|---:|---:|---:|---:|"
            );
        }
        if let Some(reason) = &row.not_run {
            let _ = writeln!(
                out,
                "| {} | {} | not run ({reason}) | - | - | - |",
                row.path,
                size(row.bytes),
            );
            continue;
        }
        let caller = if row.caller_share.is_finite() {
            format!("{:.2}%", 100.0 * row.caller_share)
        } else {
            "-".into()
        };
        let _ = writeln!(
            out,
            "| {} | {} | {:.1} | {} | {} | {caller} |",
            row.path,
            size(row.bytes),
            row.gbps(),
            ratio(row.gbps(), row.pinned_gbps),
            ratio(row.gbps(), row.driver_gbps),
        );
    }
    out
}

/// The rows as CSV, one line each; group, path and the reason a row was
/// not run quoted (they hold commas), figures of a row not run NaN.
pub(crate) fn csv(rows: &[Row]) -> String {
    let mut out =
        String::from("group,path,bytes,seconds,gbps,x_pinned,x_driver,caller_share,not_run\n");
    for row in rows {
        let _ = writeln!(
            out,
            "{},{},{},{:.6},{:.3},{:.4},{:.4},{:.5},{}",
            quoted(&row.group),
            quoted(&row.path),
            row.bytes,
            row.seconds,
            row.gbps(),
            row.gbps() / row.pinned_gbps,
            row.gbps() / row.driver_gbps,
            row.caller_share,
            quoted(row.not_run.as_deref().unwrap_or("")),
        );
    }
    out
}

/// A CSV field in double quotes, its own double quotes doubled.
fn quoted(field: &str) -> String {
    format!("\"{}\"", field.replace('"', "\"\""))
}
