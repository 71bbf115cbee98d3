//! `cargo xtask abi`: the C ABI of hostcopy-core, target by target.
//!
//! For every row of [`TARGETS`] (`targets.rs`), the steps of `checks.rs`:
//! build, layout from both sides, symbols, the shared library's exports, the
//! core's contract and the C consumer on the target; a step the row says
//! cannot run here is shown as such, with its reason; and the build against
//! ABI version 1 as frozen (`frozen.rs`). Then one table, every failure,
//! and a non-zero exit if there was one. Machine set-up is in `setup.rs`,
//! the wine servers of the Windows rows in `wineserver.rs`.

use std::fs;
use std::process::ExitCode;

use crate::checks::{Workspace, compare_layouts};
use crate::frozen::{self, Abi, Frozen};
use crate::layout_report::Layout;
use crate::report::{self, Failure, Outcome, progress};
use crate::targets::{Libraries, TARGETS, Target, Tests, parse_args};
use crate::wineserver::WineServers;
use crate::{self_test, setup};

pub(crate) const USAGE: &str = "\
cargo xtask abi [--self-test | --bless] [--target TRIPLE]...

  Checks the C ABI of hostcopy-core on every supported target: builds it,
  compares the record layout from Rust and from hostcopy.h, checks the
  symbols of the static library and the exports of the shared one, runs
  the core's contract and the C consumer on the target (natively,
  qemu-user, QEMU system emulation, wine or node), and compares each
  build with ABI version 1 as frozen in abi-tests/abi-v1.txt (the same
  layout; every name a C caller linked and the shared library exported
  still there). What a row says cannot run on this machine shows as
  `not run: <reason>`. Installs the rustup targets and Debian packages the
  rows name.

  --self-test    build deliberately broken variants (fields swapped, an extra
                 field, another ABI version, a 32-bit nbytes, a caller without
                 HOSTCOPY_CB, a renamed symbol, a cdecl caller at run time) and
                 fail unless the checks catch every one
  --bless        write abi-tests/abi-v1.txt from this run's targets (kept
                 for the others) once every other check passed: for a new
                 target, or a new ABI version's file, alone
  --target T     only this target (repeatable)";

pub(crate) fn main(args: &[String]) -> ExitCode {
    let bless = args.iter().any(|arg| arg == "--bless");
    let args: Vec<String> = args.iter().filter(|arg| *arg != "--bless").cloned().collect();
    let (self_test, only) = match parse_args(&args, "--self-test", USAGE) {
        Ok(parsed) => parsed,
        Err(code) => return ExitCode::from(code),
    };
    if self_test && bless {
        eprintln!("error: --self-test and --bless are separate runs\n\n{USAGE}");
        return ExitCode::from(2);
    }
    let targets: Vec<&Target> = TARGETS.iter().filter(|t| only.is_empty() || only.contains(&t.triple)).collect();
    // Shared with `fail`, and read before a bless.
    let failures = std::cell::RefCell::new(Vec::new());
    let mut fail = |target: &str, check: &'static str, detail: String| {
        failures.borrow_mut().push(Failure { target: target.to_owned(), check, detail });
    };
    if let Err(error) = setup::prepare(&targets, &[]) {
        fail("set-up", "packages", error);
    }
    let workspace = Workspace::locate();
    let path = workspace.root.join(frozen::FILE);
    let mut frozen = match fs::read_to_string(&path) {
        Ok(text) => Frozen::parse(&text).unwrap_or_else(|error| {
            fail("set-up", "frozen ABI", error);
            Frozen::default()
        }),
        Err(_) if bless => Frozen::default(),
        Err(error) => {
            fail("set-up", "frozen ABI", format!("{}: {error}", path.display()));
            Frozen::default()
        }
    };
    let (mut wine, errors) = WineServers::start(&workspace, &targets);
    errors.into_iter().for_each(|error| fail("set-up", "wineserver", error));
    if self_test {
        self_test::run(&workspace, &targets, &frozen, &mut fail);
    } else {
        let mut found = Vec::new();
        let rows: Vec<Vec<Outcome>> = targets
            .iter()
            .enumerate()
            .map(|(i, target)| {
                eprintln!("\n[{}/{}] {}", i + 1, targets.len(), target.triple);
                let (outcomes, abi) = row(&workspace, target, (!bless).then_some(&frozen), &mut fail);
                found.push((target.triple, abi));
                outcomes
            })
            .collect();
        print_table(&targets, &rows);
        if bless {
            match found.into_iter().map(|(triple, abi)| Some((triple, abi?))).collect::<Option<Vec<_>>>() {
                Some(found) if failures.borrow().is_empty() => {
                    for (triple, abi) in found {
                        frozen.targets.insert(triple.to_owned(), abi);
                    }
                    match fs::write(&path, frozen.render()) {
                        Ok(()) => println!("\nwrote {}", path.display()),
                        Err(error) => fail("bless", "frozen ABI", format!("{}: {error}", path.display())),
                    }
                }
                _ => fail("bless", "frozen ABI", "not written: a check failed".to_owned()),
            }
        }
    }
    wine.stop().into_iter().for_each(|error| fail("clean-up", "wineserver", error));
    let failures = failures.into_inner();
    report::print_failures(&failures);
    if failures.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

const HEADERS: [&str; 10] = [
    "target",
    "ptr",
    "build",
    "Rust layout",
    "layout vs C",
    "symbols",
    "shared library",
    "core tests",
    "C consumer",
    "ABI v1",
];

/// Runs every step for one target; a step after a failed build is a failure
/// too. Checks the build against `frozen` where given (not when blessing);
/// returns what it found for the frozen ABI where every part of it was.
fn row(
    workspace: &Workspace,
    target: &Target,
    frozen: Option<&Frozen>,
    fail: &mut impl FnMut(&str, &'static str, String),
) -> (Vec<Outcome>, Option<Abi>) {
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
            return (outcomes, None);
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
    let symbols = progress("symbols", || workspace.symbols(target, &built));
    outcomes.push(step("symbols", symbols.as_ref().map(|names| names.join(", ")).map_err(Clone::clone)));
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
    let exports = progress("shared exports", || workspace.hostcopy_exports(target, &built));
    let abi = match (rust, symbols, exports) {
        (Ok(layout), Ok(symbols), Ok(exports)) => Ok(Abi { layout, symbols, exports }),
        (_, _, Err(error)) => Err(error),
        _ => Err("no layout or no symbols to compare".to_owned()),
    };
    outcomes.push(match (frozen, &abi) {
        (None, Ok(_)) => Outcome::Passed("to bless".to_owned()),
        (Some(frozen), Ok(abi)) => step("ABI v1", progress("ABI v1", || frozen.check(target.triple, abi))),
        (_, Err(error)) => step("ABI v1", Err(error.clone())),
    });
    (outcomes, abi.ok())
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
