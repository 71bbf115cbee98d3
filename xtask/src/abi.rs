//! `cargo xtask abi`: the C ABI of hostcopy-core, target by target.
//!
//! For every row of [`TARGETS`]:
//! 1. build hostcopy-core's rlib for it, with and without `defmt` (its
//!    compile-time layout asserts then hold there), and the C libraries
//!    of `core/capi`;
//! 2. compare the record's layout as rustc sees it (`abi-tests/src/layout.rs`)
//!    with what clang makes of `hostcopy.h` (`abi-tests/c/layout_report.c`),
//!    both read out of object files built for the target;
//! 3. check that the static library defines `hostcopy_fn` as a global
//!    function under the name a C caller on that target links against;
//! 4. run the core's tests there (natively or under qemu-user), and link and
//!    run the C consumer from `abi-tests/c` (on Windows it is also linked
//!    against the DLL's import library);
//! 5. print one table, then every failure, and exit non-zero if there was one.
//!
//! Everything is built under `target/abi`, away from other cargo runs. The
//! steps themselves are in `checks.rs`; this module runs them and reports.

use std::process::ExitCode;

use crate::checks::{Checks, Workspace, compare_layouts, progress};
use crate::layout_report::Layout;
use crate::report::{self, Failure, Outcome};
use crate::self_test;
use crate::targets::{AbiTarget, CLANG, LLVM_NM, LLVM_READOBJ, TARGETS};
use crate::toolchain::{self, Install, Requirement};

pub(crate) const USAGE: &str = "\
cargo xtask abi [--self-test] [--no-install] [--target TRIPLE]...

  Checks the C ABI of hostcopy-core on every supported target: builds it,
  compares the record layout from Rust and from hostcopy.h, checks the
  exported hostcopy_fn symbol, runs the core's tests and the C consumer
  where this machine can (natively or under qemu-user). Installs the
  Debian packages it needs (clang, llvm, qemu-user, cross gcc) when run as
  root or with passwordless sudo.

  --self-test    build deliberately broken variants (fields swapped, an extra
                 field, another ABI version, a 32-bit nbytes, a caller without
                 HOSTCOPY_CB, a renamed symbol) and fail unless the checks
                 catch every one
  --no-install   never install packages: checks that need a missing tool
                 show as \"not run\" with the package that provides it
  --target T     only this target (repeatable)";

struct Options {
    self_test: bool,
    install: Install,
    only: Vec<String>,
}

fn parse_options(args: &[String]) -> Result<Options, String> {
    let mut options = Options {
        self_test: false,
        install: Install::WhenPossible,
        only: Vec::new(),
    };
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--self-test" => options.self_test = true,
            "--no-install" => options.install = Install::Never,
            "--target" => {
                let target = args.next().ok_or("--target needs a target triple")?;
                if !TARGETS.iter().any(|t| t.rust == target) {
                    let known: Vec<&str> = TARGETS.iter().map(|t| t.rust).collect();
                    return Err(format!(
                        "unknown target `{target}`; the table has: {}",
                        known.join(", ")
                    ));
                }
                options.only.push(target.clone());
            }
            other => return Err(format!("unknown option `{other}`")),
        }
    }
    Ok(options)
}

pub(crate) fn main(args: &[String]) -> ExitCode {
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let options = match parse_options(args) {
        Ok(options) => options,
        Err(error) => {
            eprintln!("error: {error}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let targets: Vec<&AbiTarget> = TARGETS
        .iter()
        .filter(|t| options.only.is_empty() || options.only.iter().any(|o| o == t.rust))
        .collect();
    let workspace = Workspace::locate();

    let requirements = requirements(&targets, options.self_test);
    let rust_targets: Vec<&str> = targets.iter().map(|t| t.rust).collect();
    let (toolbox, setup_errors) = toolchain::prepare(&rust_targets, &requirements, options.install);
    let mut failures: Vec<Failure> = setup_errors
        .into_iter()
        .map(|detail| Failure {
            target: "set-up".to_owned(),
            check: "tools",
            detail,
        })
        .collect();

    let checks = Checks {
        workspace: &workspace,
        toolbox: &toolbox,
    };
    if options.self_test {
        self_test::run(&checks, &targets, &mut failures);
    } else {
        let rows: Vec<TargetRow> = targets
            .iter()
            .enumerate()
            .map(|(i, target)| {
                eprintln!("\n[{}/{}] {}", i + 1, targets.len(), target.rust);
                target_row(&checks, target, &mut failures)
            })
            .collect();
        print_table(&rows);
        if let Some(hint) = toolbox.install_hint() {
            println!("to run the checks that lack system tools: `{hint}` (as root), then rerun");
        }
    }

    report::print_failures(&failures);
    if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The system tools for the selected targets, each with what it is for.
fn requirements(targets: &[&AbiTarget], self_test: bool) -> Vec<Requirement> {
    let mut requirements = vec![
        Requirement {
            need: CLANG,
            purpose: "compiles hostcopy.h and the symbol probe for every target".to_owned(),
        },
        Requirement {
            need: LLVM_NM,
            purpose: "lists the symbols of the static libraries and objects".to_owned(),
        },
    ];
    if self_test {
        // The broken variants only need the compiler and the symbol listing.
        return requirements;
    }
    requirements.push(Requirement {
        need: LLVM_READOBJ,
        purpose: "lists the exports of the Windows DLLs".to_owned(),
    });
    for target in targets {
        if let Some(c) = target.c_toolchain {
            requirements.extend(c.needs.iter().map(|need| Requirement {
                need: *need,
                purpose: format!("links the tests and the C consumer for {}", target.rust),
            }));
        }
        requirements.extend(target.runner.needs().into_iter().map(|need| Requirement {
            need,
            purpose: format!("runs {} programs", target.rust),
        }));
    }
    requirements
}

/// One row of the table.
struct TargetRow {
    target: &'static AbiTarget,
    build: Outcome,
    rust_layout: Option<Layout>,
    c_layout: Option<Layout>,
    layout: Outcome,
    symbol: Outcome,
    core_tests: Outcome,
    c_consumer: Outcome,
}

/// Runs every step for one target; a step that cannot run says why.
fn target_row(
    checks: &Checks<'_>,
    target: &'static AbiTarget,
    failures: &mut Vec<Failure>,
) -> TargetRow {
    let mut fail = |check: &'static str, detail: String| {
        failures.push(Failure {
            target: target.rust.to_owned(),
            check,
            detail,
        })
    };
    let mut row = TargetRow {
        target,
        build: Outcome::NotRun("build failed".to_owned()),
        rust_layout: None,
        c_layout: None,
        layout: Outcome::NotRun("build failed".to_owned()),
        symbol: Outcome::NotRun("build failed".to_owned()),
        core_tests: Outcome::NotRun("build failed".to_owned()),
        c_consumer: Outcome::NotRun("build failed".to_owned()),
    };

    // Step 1: the library, with and without defmt.
    let core = match progress("build hostcopy-core (no features, defmt)", || {
        checks.build_core(target)
    }) {
        Ok(core) => {
            row.build = Outcome::Passed("ok, +defmt".to_owned());
            core
        }
        Err(error) => {
            row.build = Outcome::Failed("cargo rustc".to_owned());
            fail("build", error);
            return row;
        }
    };

    // Step 2: the record's layout, from both sides.
    match progress("layout from Rust (rustc --emit obj)", || {
        checks.rust_layout(target, &core)
    }) {
        Ok(layout) => row.rust_layout = Some(layout),
        Err(error) => fail("layout (Rust)", error),
    }
    if let Some(reason) = checks.toolbox.missing_reason(&[CLANG]) {
        row.layout = Outcome::NotRun(reason);
    } else {
        let header = checks.workspace.header_dir();
        let object = checks.workspace.scratch(target).join("c_layout.o");
        match progress("layout from C (clang, hostcopy.h)", || {
            checks.c_layout(target, &[header], &[], &object)
        }) {
            Ok(layout) => row.c_layout = Some(layout),
            Err(error) => fail("layout (C)", error),
        }
        row.layout = match (row.rust_layout, row.c_layout) {
            (Some(rust), Some(c)) => match compare_layouts(target, &rust, &c) {
                Ok(()) => Outcome::Passed("same".to_owned()),
                Err(error) => {
                    fail("layout", error);
                    Outcome::Failed("differ".to_owned())
                }
            },
            _ => Outcome::Failed("no report".to_owned()),
        };
    }

    // Step 3: the exported symbol.
    row.symbol = checks.symbol_check(target, &core, &mut fail);

    // Step 4: the core's tests and the C consumer.
    row.core_tests = checks.core_tests(target, &mut fail);
    row.c_consumer = checks.c_consumer(target, &core, row.rust_layout, &mut fail);
    row
}

fn print_table(rows: &[TargetRow]) {
    let headers = [
        "target",
        "ptr",
        "endian",
        "build",
        "Rust layout",
        "C layout",
        "layout",
        "symbol",
        "core tests",
        "C consumer",
    ];
    let show = |layout: Option<Layout>| layout.map_or("-".to_owned(), |l| l.to_string());
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            vec![
                row.target.rust.to_owned(),
                row.target.pointer_width.to_string(),
                row.target.endian.name().to_owned(),
                row.build.to_string(),
                show(row.rust_layout),
                show(row.c_layout),
                row.layout.to_string(),
                row.symbol.to_string(),
                row.core_tests.to_string(),
                row.c_consumer.to_string(),
            ]
        })
        .collect();
    println!(
        "\nhostcopy ABI, per target\n\
         (layout: size/align/offsetof dst,src,nbytes/sizeof dst,src,nbytes; symbol: the name \
         a C caller links against, defined by libhostcopy.a; .so/.dll too: the cdylib \
         exports it)\n"
    );
    println!("{}", report::render_table(&headers, &cells));
    let outcomes = rows.iter().flat_map(|row| {
        [
            &row.build,
            &row.layout,
            &row.symbol,
            &row.core_tests,
            &row.c_consumer,
        ]
    });
    let (mut passed, mut failed, mut not_run) = (0, 0, 0);
    for outcome in outcomes {
        match outcome {
            Outcome::Passed(_) => passed += 1,
            Outcome::Failed(_) => failed += 1,
            Outcome::NotRun(_) => not_run += 1,
        }
    }
    println!(
        "\n{} targets: {passed} checks passed, {failed} failed, {not_run} not run",
        rows.len()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_parsed_and_unknown_ones_refused() {
        let args = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let options = parse_options(&args(&[
            "--no-install",
            "--target",
            "wasm32-unknown-unknown",
        ]))
        .unwrap();
        assert_eq!(options.install, Install::Never);
        assert_eq!(options.only, ["wasm32-unknown-unknown"]);
        assert!(!options.self_test);
        assert!(parse_options(&args(&["--frobnicate"])).is_err());
        assert!(parse_options(&args(&["--target", "mips-unknown-linux-gnu"])).is_err());
        assert!(parse_options(&args(&["--target"])).is_err());
    }
}
