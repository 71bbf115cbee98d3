//! What the checks found: one outcome per check, the failures collected over
//! the whole run, and the table that shows them side by side.

use std::fmt;

/// The result of one check on one target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Passed; the text is what the table shows (a symbol name, a test count).
    Passed(String),
    /// Failed; the text is the short form for the table, the details are in the failure list.
    Failed(String),
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Passed(text) => f.write_str(text),
            Outcome::Failed(text) => write!(f, "FAILED: {text}"),
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
    if failures.is_empty() {
        return;
    }
    println!("\n{} failure(s):", failures.len());
    for failure in failures {
        println!("- {} / {}:", failure.target, failure.check);
        for line in failure.detail.lines() {
            println!("    {line}");
        }
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
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        padded.join(" | ").trim_end().to_owned()
    };
    let mut out = vec![line(headers.to_vec())];
    out.push(
        widths
            .iter()
            .map(|w| "-".repeat(*w))
            .collect::<Vec<_>>()
            .join("-+-"),
    );
    for row in rows {
        out.push(line(row.iter().map(String::as_str).collect()));
    }
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_read_as_the_table_shows_them() {
        assert_eq!(
            Outcome::Passed("passed (20)".into()).to_string(),
            "passed (20)"
        );
        assert!(
            Outcome::Failed("size".into())
                .to_string()
                .starts_with("FAILED")
        );
    }

    #[test]
    fn table_columns_line_up() {
        let table = render_table(
            &["target", "ptr"],
            &[
                vec!["x86_64-unknown-linux-gnu".into(), "64".into()],
                vec!["wasm32".into(), "32".into()],
            ],
        );
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines[0], "target                   | ptr");
        assert_eq!(lines[1], "-------------------------+----");
        assert_eq!(lines[2], "x86_64-unknown-linux-gnu | 64");
        assert_eq!(lines[3], "wasm32                   | 32");
    }
}
