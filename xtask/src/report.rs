//! What the checks found: a progress line per step as it runs, one outcome
//! per check, the failures collected over the whole run, and the table that
//! shows them side by side.

use std::fmt;
use std::time::Instant;

/// Runs one step with a progress line: the step, then ok or FAILED and how long it took.
pub(crate) fn progress<T>(label: &str, step: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    let start = Instant::now();
    let result = step();
    let verdict = if result.is_ok() { "ok" } else { "FAILED" };
    eprintln!("  {label} ... {verdict} ({:.1}s)", start.elapsed().as_secs_f64());
    result
}

/// The result of one check on one target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Passed; the text is what the table shows (a symbol name, a test count).
    Passed(String),
    /// Failed; the text is the short form for the table, the details are in the failure list.
    Failed(String),
    /// Cannot run on this machine; the text says why (the row's own words).
    NotRun(String),
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Passed(text) => f.write_str(text),
            Outcome::Failed(text) => write!(f, "FAILED: {text}"),
            Outcome::NotRun(why) => write!(f, "not run: {why}"),
        }
    }
}

/// One failed check, with everything needed to understand it without rerunning.
#[derive(Clone, Debug)]
pub(crate) struct Failure {
    /// A target triple, "set-up", or a self-test variant.
    pub(crate) target: String,
    pub(crate) check: &'static str,
    pub(crate) detail: String,
}

/// Prints every failure; the caller exits non-zero when there was any.
pub(crate) fn print_failures(failures: &[Failure]) {
    if !failures.is_empty() {
        println!("\n{} failure(s):", failures.len());
    }
    for failure in failures {
        println!("- {} / {}:", failure.target, failure.check);
        failure.detail.lines().for_each(|line| println!("    {line}"));
    }
}

/// Lays out rows of cells in columns padded to the widest cell.
pub(crate) fn render_table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells.iter().zip(&widths).map(|(cell, w)| format!("{cell:<w$}")).collect();
        padded.join(" | ").trim_end().to_owned()
    };
    let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
    let body = rows.iter().map(|row| line(row.iter().map(String::as_str).collect()));
    [line(headers.to_vec()), rule.join("-+-")].into_iter().chain(body).collect::<Vec<_>>().join("\n")
}
