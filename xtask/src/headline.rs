//! The README's headline table against BENCHMARKS.md, as a test (`cargo
//! test -p xtask`, which CI's `cargo test --workspace` runs).
//!
//! A row of BENCHMARKS.md that a headline figure comes from carries, in its
//! first cell, `<!-- headline: KEY FOLDER... -->`: its key and the run
//! folders under `xtask/gpu-runs/` its figures were measured in. Each row
//! of the README's headline table names in its first cell the rows it
//! quotes, `<!-- from: KEY... -->`, and in its last the card and runs, as
//! `H200, run 78` or `H200, runs 55 and 57`. The check:
//!
//! - every figure of a headline row (a number with a decimal point, a
//!   percentage or a factor such as `4.77x`, outside the first and last
//!   cells) is a number of the rows it names: a figure that changes in
//!   BENCHMARKS.md must change in the README, and the README cannot quote
//!   a figure BENCHMARKS.md does not have;
//! - its card and runs are those of the folders the rows name, each folder
//!   is in `xtask/gpu-runs/`, and its `machine.txt`, where it has one, names
//!   that card;
//! - the paragraph above the table names every card (`NVIDIA H200`) and the
//!   dates the rows were measured, `measured FIRST to LAST`.
//!
//! Beside it, a test that `docs/chart-gbps.svg` (GB/s by size, shown in
//! both documents) is what `xtask/gpu-runs/chart.py --check` makes of its
//! run's `bench.csv`.

use std::collections::{BTreeMap, BTreeSet};

/// One marked row of BENCHMARKS.md.
#[derive(Debug)]
struct Source {
    /// The row's text, which the README's figures must come from.
    row: String,
    /// Its run folders under `xtask/gpu-runs/`.
    folders: Vec<String>,
}

/// A run folder's name, `DATE-CARD-runN` (`2026-12-06-h200-run78`,
/// `2026-11-30-h200x2-run5`), taken apart: date, card (`H200`), run.
fn folder_parts(folder: &str) -> Option<(&str, String, u32)> {
    let date = folder.get(..10)?;
    let (card, run) = folder.get(11..)?.split_once("-run")?;
    let card = card.split('x').next()?.to_uppercase();
    Some((date, card, run.parse().ok()?))
}

/// The marked rows of BENCHMARKS.md by key, and what is wrong with the marks.
fn sources(benchmarks: &str) -> (BTreeMap<String, Source>, Vec<String>) {
    let (mut sources, mut errors) = (BTreeMap::new(), Vec::new());
    for line in benchmarks.lines() {
        let Some(words) = comment(line, "headline:") else { continue };
        let mut words = words.split_whitespace().map(str::to_owned);
        let Some(key) = words.next() else {
            errors.push(format!("BENCHMARKS.md: a headline mark without a key: {line}"));
            continue;
        };
        let folders: Vec<String> = words.collect();
        if folders.is_empty() {
            errors.push(format!("BENCHMARKS.md: the headline row {key} names no run folder"));
        }
        let source = Source { row: without_comments(line), folders };
        if sources.insert(key.clone(), source).is_some() {
            errors.push(format!("BENCHMARKS.md: two headline rows are called {key}"));
        }
    }
    (sources, errors)
}

/// Everything wrong with the README's headline table against BENCHMARKS.md
/// and the run folders in `runs` (each folder's `machine.txt` read through
/// `machine`).
fn check(readme: &str, benchmarks: &str, machine: &dyn Fn(&str) -> Option<Option<String>>) -> Vec<String> {
    let (sources, mut errors) = sources(benchmarks);
    let lines: Vec<&str> = readme.lines().collect();
    let Some(first_marked) = lines.iter().position(|line| comment(line, "from:").is_some()) else {
        return vec!["README.md has no headline row (`<!-- from: KEY -->` in a table row)".to_owned()];
    };
    let is_row = |line: &&str| line.trim_start().starts_with('|');
    let start = lines[..first_marked].iter().rposition(|line| !is_row(line)).map_or(0, |at| at + 1);
    let end = lines[start..].iter().position(|line| !is_row(line)).map_or(lines.len(), |at| start + at);
    // The paragraph above the table, from the heading or blank line before it.
    let above = lines[..start].iter().rposition(|line| line.starts_with('#')).map_or(0, |at| at + 1);
    let intro = lines[above..start].join(" ");

    let (mut cards, mut dates) = (BTreeSet::new(), BTreeSet::new());
    // The header and the alignment row, then the body.
    for line in lines.iter().take(end).skip(start + 2) {
        let cells: Vec<&str> = line.trim().trim_matches('|').split('|').map(str::trim).collect();
        let label = without_comments(cells[0]);
        let Some(keys) = comment(cells[0], "from:") else {
            errors.push(format!(
                "README.md: the headline row `{label}` names no BENCHMARKS.md row (`<!-- from: KEY -->`)"
            ));
            continue;
        };
        let (mut numbers, mut row_cards, mut row_runs) = (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
        for key in keys.split_whitespace() {
            let Some(source) = sources.get(key) else {
                errors.push(format!("README.md: `{label}` names {key}, which no BENCHMARKS.md row is"));
                continue;
            };
            numbers.extend(all_numbers(&source.row));
            for folder in &source.folders {
                let Some((date, card, run)) = folder_parts(folder) else {
                    errors.push(format!("BENCHMARKS.md: {key}'s folder {folder} is not DATE-CARD-runN"));
                    continue;
                };
                match machine(folder) {
                    None => errors.push(format!("BENCHMARKS.md: {key}'s folder {folder} is not in xtask/gpu-runs/")),
                    Some(Some(text)) if !text.contains(&format!("NVIDIA {card}")) => {
                        errors.push(format!("xtask/gpu-runs/{folder}/machine.txt does not name NVIDIA {card}"))
                    }
                    Some(_) => {}
                }
                dates.insert(date.to_owned());
                row_cards.insert(card);
                row_runs.insert(run);
            }
        }
        let (figures, last) = (&cells[1..cells.len() - 1], cells[cells.len() - 1]);
        for figure in figures.iter().flat_map(|cell| figures_in(&without_comments(cell))) {
            if !numbers.contains(&figure) {
                errors.push(format!("README.md: `{label}` says {figure}, which the BENCHMARKS.md rows {keys} do not"));
            }
        }
        let (card_part, run_part) = last.split_once(',').unwrap_or((last, ""));
        let said_cards: BTreeSet<String> =
            card_part.split_whitespace().filter(|w| w.starts_with('H')).map(str::to_owned).collect();
        let said_runs: BTreeSet<u32> = all_numbers(run_part).iter().filter_map(|n| n.parse().ok()).collect();
        if said_cards != row_cards || said_runs != row_runs {
            let runs: Vec<String> = row_runs.iter().map(u32::to_string).collect();
            let wanted = format!(
                "{}, run(s) {}",
                row_cards.iter().cloned().collect::<Vec<_>>().join(" and "),
                runs.join(" and ")
            );
            errors.push(format!("README.md: `{label}` says it ran on `{last}`, its rows on {wanted}"));
        }
        cards.extend(row_cards);
    }
    for card in &cards {
        if !intro.contains(&format!("NVIDIA {card}")) {
            errors.push(format!("README.md: the paragraph above the headline table does not name NVIDIA {card}"));
        }
    }
    let measured = match (dates.first(), dates.last()) {
        (Some(first), Some(last)) if first != last => format!("measured {first} to {last}"),
        (Some(only), _) => format!("measured {only}"),
        _ => String::new(),
    };
    if !intro.contains(&measured) {
        errors.push(format!("README.md: the paragraph above the headline table does not say `{measured}`"));
    }
    errors
}

/// The words of the first `<!-- PREFIX ... -->` comment in `text`.
fn comment<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let rest = text.split("<!--").nth(1)?.trim_start().strip_prefix(prefix)?;
    Some(rest.split("-->").next()?.trim())
}

/// `text` without its `<!-- ... -->` comments, trimmed.
fn without_comments(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some((before, after)) = rest.split_once("<!--") {
        out.push_str(before);
        rest = after.split_once("-->").map_or("", |(_, after)| after);
    }
    out.push_str(rest);
    out.trim().to_owned()
}

/// Every number in `text`, as written (`96.6`, `4`).
fn all_numbers(text: &str) -> Vec<String> {
    numbers_with_next(text).into_iter().map(|(number, _)| number).collect()
}

/// The figures in a README cell: numbers with a decimal point, and numbers
/// followed by `%` or `x` (a share, a factor); not a size such as `256 MiB`.
fn figures_in(text: &str) -> Vec<String> {
    let figure = |(number, next): &(String, Option<char>)| number.contains('.') || matches!(next, Some('%' | 'x'));
    numbers_with_next(text).into_iter().filter(figure).map(|(number, _)| number).collect()
}

/// Each number in `text` with the character after it.
fn numbers_with_next(text: &str) -> Vec<(String, Option<char>)> {
    let chars: Vec<char> = text.chars().collect();
    let (mut found, mut at) = (Vec::new(), 0);
    while at < chars.len() {
        // A number starts at a digit that does not continue a word (`H200`, `run78`).
        let starts = chars[at].is_ascii_digit() && (at == 0 || !chars[at - 1].is_alphanumeric());
        if !starts {
            at += 1;
            continue;
        }
        let begin = at;
        while at < chars.len()
            && (chars[at].is_ascii_digit()
                || (chars[at] == '.' && chars.get(at + 1).is_some_and(|c| c.is_ascii_digit())))
        {
            at += 1;
        }
        found.push((chars[begin..at].iter().collect(), chars.get(at).copied()));
    }
    found
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::path::Path;

    use super::*;

    /// A run folder's `machine.txt`: `None` for no such folder, `Some(None)` for a folder without one.
    fn machine_txt(root: &Path, folder: &str) -> Option<Option<String>> {
        let dir = root.join("xtask/gpu-runs").join(folder);
        dir.is_dir().then(|| fs::read_to_string(dir.join("machine.txt")).ok())
    }

    #[test]
    fn the_readme_headline_table_agrees_with_benchmarks_md() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let readme = fs::read_to_string(root.join("README.md")).unwrap();
        let benchmarks = fs::read_to_string(root.join("BENCHMARKS.md")).unwrap();
        let errors = check(&readme, &benchmarks, &|folder| machine_txt(root, folder));
        assert!(errors.is_empty(), "the README's headline table and BENCHMARKS.md disagree:\n{}", errors.join("\n"));
    }

    /// docs/chart-gbps.svg is what xtask/gpu-runs/chart.py makes of its run's
    /// data (where this machine has a python3 to run it).
    #[test]
    fn the_chart_is_what_its_script_makes_of_the_run_data() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let script = root.join("xtask/gpu-runs/chart.py");
        match std::process::Command::new("python3").arg(script).arg("--check").output() {
            Ok(output) => assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr)),
            Err(error) => eprintln!("not checked: python3: {error}"),
        }
    }

    const BENCHMARKS: &str = "\
| size | direction | hostcopy GB/s | pinned | raw data |
| --- | --- | ---: | ---: | --- |
| 1 GiB <!-- headline: d2h 2026-12-06-h200-run78 --> | D2H | 54.4 | 55.2 / 98.5% | run 78 |
| 1 GiB <!-- headline: h2d 2026-12-06-h200-run78 --> | H2D | 49.5 | 55.4 | run 78 |
| 4 KiB <!-- headline: blocks 2026-12-03-h200-run55 2026-12-03-h200-run57 --> | D2H | 34.6 to 36.7 | 4.77x | |
";

    fn readme(rows: &str) -> String {
        format!(
            "## How fast\n\nNVIDIA H200; measured 2026-12-03 to 2026-12-06.\n\n\
             | 1 GiB | hostcopy | pinned | card, run |\n| --- | ---: | ---: | --- |\n{rows}\nMore text: 12.5.\n"
        )
    }

    fn errors(rows: &str) -> Vec<String> {
        let machine = |folder: &str| folder.starts_with("2026").then(|| Some("NVIDIA H200, 580.159.04".to_owned()));
        check(&readme(rows), BENCHMARKS, &machine)
    }

    const GOOD: &str = "\
| to the host <!-- from: d2h --> | 54.4 (98.5%) | 55.2 | H200, run 78 |
| to the device <!-- from: h2d --> | 49.5 | 55.4 | H200, run 78 |
| 4 KiB blocks, 256 MiB <!-- from: blocks --> | 34.6-36.7, 4.77x | | H200, runs 55 and 57 |";

    #[test]
    fn figures_cards_runs_and_dates_that_agree_pass() {
        assert_eq!(errors(GOOD), Vec::<String>::new());
    }

    #[test]
    fn a_figure_benchmarks_md_does_not_have_fails() {
        // The disagreement the table had: 1 GiB to the device 52.6-53.4 in the README, 49.5 in BENCHMARKS.md.
        let found = errors(&GOOD.replace("| 49.5 |", "| 52.6-53.4 |"));
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].contains("52.6") && found[1].contains("53.4"), "{found:?}");
        let found = errors(&GOOD.replace("(98.5%)", "(97%)"));
        assert!(found.len() == 1 && found[0].contains("97"), "{found:?}");
    }

    #[test]
    fn a_wrong_card_run_or_date_fails() {
        let found = errors(&GOOD.replace("H200, run 78 |\n| to the device", "H100, run 78 |\n| to the device"));
        assert!(found.len() == 1 && found[0].contains("H100, run 78"), "{found:?}");
        let found = errors(&GOOD.replace("runs 55 and 57", "run 55"));
        assert!(found.len() == 1 && found[0].contains("run 55"), "{found:?}");
        let found = check(&readme(GOOD).replace("2026-12-03 to", "2026-12-02 to"), BENCHMARKS, &|_| Some(None));
        assert!(found.len() == 1 && found[0].contains("measured 2026-12-03 to 2026-12-06"), "{found:?}");
        let found = check(&readme(GOOD), BENCHMARKS, &|_| Some(Some("NVIDIA H100 80GB HBM3".to_owned())));
        assert!(found.len() == 4 && found.iter().all(|e| e.contains("NVIDIA H200")), "{found:?}");
    }

    #[test]
    fn a_row_without_its_source_or_a_source_without_its_row_fails() {
        let found = errors(&format!("{GOOD}\n| torch <!-- from: torch --> | 13.7 | | H200, run 43 |"));
        assert!(found.iter().any(|e| e.contains("names torch")), "{found:?}");
        let found = errors(&format!("{GOOD}\n| torch | 13.7 | | H200, run 43 |"));
        assert!(found.len() == 1 && found[0].contains("names no BENCHMARKS.md row"), "{found:?}");
        let found = check(&readme(GOOD), BENCHMARKS, &|_| None);
        assert!(found.len() == 4 && found.iter().all(|e| e.contains("not in xtask/gpu-runs")), "{found:?}");
    }

    #[test]
    fn figures_are_decimals_shares_and_factors_not_sizes_or_names() {
        let text = "`copy_`, 256 MiB: 4.77x / 2.46x slower; 52.8 (96%) on H200, run78, 1.2-1.5";
        assert_eq!(figures_in(text), ["4.77", "2.46", "52.8", "96", "1.2", "1.5"]);
        assert_eq!(all_numbers("| 16 MiB x 4, 12 | 98.5 / 98.6% |"), ["16", "4", "12", "98.5", "98.6"]);
        assert_eq!(folder_parts("2026-11-30-h200x2-run5"), Some(("2026-11-30", "H200".to_owned(), 5)));
        assert_eq!(without_comments("1 GiB <!-- headline: a b --> | D2H"), "1 GiB  | D2H");
    }
}
