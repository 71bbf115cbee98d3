//! `cargo xtask abi`: the C ABI of hostcopy-core, target by target.
//!
//! For every row of [`TARGETS`] (`targets.rs`), the steps of `checks.rs`:
//! build, layout from both sides, symbols, the shared library's exports, the
//! core's contract and the C consumer on the target; a step the row says
//! cannot run here is shown as such, with its reason. Then one table, every
//! failure, and a non-zero exit if there was one. Machine set-up is in
//! `setup.rs`, the wine servers of the Windows rows in `wineserver.rs`.

use std::process::ExitCode;

use crate::checks::{Workspace, compare_layouts};
use crate::layout_report::Layout;
use crate::report::{self, Failure, Outcome, progress};
use crate::targets::{Libraries, TARGETS, Target, Tests, parse_args};
use crate::wineserver::WineServers;
use crate::{self_test, setup};

pub(crate) const USAGE: &str = "\
cargo xtask abi [--self-test] [--target TRIPLE]...

  Checks the C ABI of hostcopy-core on every supported target: builds it,
  compares the record layout from Rust and from hostcopy.h, checks the
  symbols of the static library and the exports of the shared one, runs
  the core's contract and the C consumer on the target (natively,
  qemu-user, QEMU system emulation, wine or node). What a row says cannot
  run on this machine shows as `not run: <reason>`. Installs the rustup
  targets and Debian packages the rows name.

  --self-test    build deliberately broken variants (fields swapped, an extra
                 field, another ABI version, a 32-bit nbytes, a caller without
                 HOSTCOPY_CB, a renamed symbol, a cdecl caller at run time) and
                 fail unless the checks catch every one
  --target T     only this target (repeatable)";

pub(crate) fn main(args: &[String]) -> ExitCode {
    let (self_test, only) = match parse_args(args, "--self-test", USAGE) {
        Ok(parsed) => parsed,
        Err(code) => return ExitCode::from(code),
    };
    let targets: Vec<&Target> = TARGETS.iter().filter(|t| only.is_empty() || only.contains(&t.triple)).collect();
    let mut failures = Vec::new();
    let mut fail = |target: &str, check: &'static str, detail: String| {
        failures.push(Failure { target: target.to_owned(), check, detail });
    };
    if let Err(error) = setup::prepare(&targets, &[]) {
        fail("set-up", "packages", error);
    }
    let workspace = Workspace::locate();
    let (mut wine, errors) = WineServers::start(&workspace, &targets);
    errors.into_iter().for_each(|error| fail("set-up", "wineserver", error));
    if self_test {
        self_test::run(&workspace, &targets, &mut fail);
    } else {
        let rows: Vec<Vec<Outcome>> = targets
            .iter()
            .enumerate()
            .map(|(i, target)| {
                eprintln!("\n[{}/{}] {}", i + 1, targets.len(), target.triple);
                row(&workspace, target, &mut fail)
            })
            .collect();
        print_table(&targets, &rows);
    }
    wine.stop().into_iter().for_each(|error| fail("clean-up", "wineserver", error));
    report::print_failures(&failures);
    if failures.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

const HEADERS: [&str; 9] =
    ["target", "ptr", "build", "Rust layout", "layout vs C", "symbols", "shared library", "core tests", "C consumer"];

/// Runs every step for one target; a step after a failed build is a failure too.
fn row(workspace: &Workspace, target: &Target, fail: &mut impl FnMut(&str, &'static str, String)) -> Vec<Outcome> {
    let mut step = |check: &'static str, result: Result<String, String>| match result {
        Ok(shown) => Outcome::Passed(shown),
        Err(error) => {
            fail(target.triple, check, error);
            Outcome::Failed(check.to_owned())
        }
    };
    let mut outcomes = Vec::new();
    let built = progress("build (core, core+defmt, capi)", || workspace.build(target));
    let built = match built {
        Ok(built) => built,
        Err(error) => {
            outcomes.push(step("build", Err(error)));
            outcomes.resize(HEADERS.len() - 2, Outcome::Failed("build failed".to_owned()));
            return outcomes;
        }
    };
    outcomes.push(Outcome::Passed("ok, +defmt".to_owned()));
    let rust = progress("layout from Rust", || workspace.rust_layout(target, &built));
    outcomes.push(step("layout (Rust)", rust.as_ref().map(Layout::to_string).map_err(Clone::clone)));
    let object = workspace.scratch(target).join("c_layout.o");
    let compared = progress("layout from C (clang, hostcopy.h)", || {
        let c = workspace.c_layout(target, &[], &object)?;
        compare_layouts(target, rust.as_ref().map_err(|_| "no Rust layout")?, &c).map(|()| "same".to_owned())
    });
    outcomes.push(step("layout", compared));
    outcomes.push(step("symbols", progress("symbols", || workspace.symbols(target, &built))));
    outcomes.push(match target.libraries {
        Libraries::StaticOnly(why) => not_run("shared library", why),
        Libraries::All => {
            step("shared library", progress("shared library", || workspace.shared_library(target, &built)))
        }
    });
    outcomes.push(match target.tests {
        Tests::NotRun(why) => not_run("core tests", why),
        _ => step("core tests", progress("core tests", || workspace.core_tests(target, &built))),
    });
    let consumer = progress("C consumer", || {
        workspace.c_consumer(target, &built, rust.as_ref().map_err(|_| "no Rust layout")?, &[])
    });
    outcomes.push(step("C consumer", consumer));
    outcomes
}

fn print_table(targets: &[&Target], rows: &[Vec<Outcome>]) {
    let cells: Vec<Vec<String>> = targets
        .iter()
        .zip(rows)
        .map(|(target, outcomes)| {
            let endian = format!("{}{}", target.pointer_width, ["le", "be"][target.endian as usize]);
            let first = [target.triple.to_owned(), endian];
            first.into_iter().chain(outcomes.iter().map(Outcome::to_string)).collect()
        })
        .collect();
    println!(
        "\nhostcopy ABI, per target (Rust layout: size/align/offsetof dst,src,nbytes/sizeof \
         dst,src,nbytes; symbols: the names a C caller links, defined by the static library; \
         shared library: what dlsym, GetProcAddress or a wasm host finds)\n"
    );
    println!("{}", report::render_table(&HEADERS, &cells));
    let count = |kind: fn(&Outcome) -> bool| rows.iter().flatten().filter(|o| kind(o)).count();
    let passed = count(|o| matches!(o, Outcome::Passed(_)));
    let failed = count(|o| matches!(o, Outcome::Failed(_)));
    let not_run = count(|o| matches!(o, Outcome::NotRun(_)));
    println!("\n{} targets: {passed} checks passed, {failed} failed, {not_run} not run here", rows.len());
}

/// A check the row says cannot run on this machine, with its reason.
fn not_run(label: &str, why: &str) -> Outcome {
    eprintln!("  {label} ... not run: {why}");
    Outcome::NotRun(why.to_owned())
}
