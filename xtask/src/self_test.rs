//! `cargo xtask abi --self-test`: proof that the checks can fail.
//!
//! A check that cannot fail proves nothing, so this builds deliberately
//! broken variants and requires each check to report them, on every target
//! they apply to: copies of `hostcopy.h` with the fields swapped, an extra
//! field, another ABI version, a 32-bit `nbytes` on 64-bit targets (the
//! layout comparison must report each); symbol probes that reference a name
//! the library does not define (the i686 Windows caller declared without
//! `HOSTCOPY_CB`, a renamed function); and on i686 Windows the C consumer
//! calling the stdcall `hostcopy_fn` through a cdecl pointer, which links
//! and must fail when it runs under wine. The unmodified header, probe and
//! consumer pass first on each target, so a variant counts as caught only
//! where the real thing passes.

use std::fs;
use std::path::{Path, PathBuf};

use crate::abi::progress;
use crate::checks::{self, Workspace};
use crate::layout_report::Layout;
use crate::report;
use crate::targets::Target;

/// A broken copy of the header, and what must happen to it.
struct HeaderVariant {
    name: &'static str,
    /// Text replacements, each of which must find its text in `hostcopy.h`.
    edits: &'static [(&'static str, &'static str)],
    expect: Expect,
    applies_to: fn(&Target) -> bool,
}

/// A symbol probe or a C consumer compiled with extra flags, for the targets where they break it.
struct FlagVariant {
    name: &'static str,
    flags: &'static [&'static str],
    /// Run the C consumer (it must link, and fail on the target) instead of the symbol check.
    at_run_time: bool,
    applies_to: fn(&Target) -> bool,
}

#[derive(Clone, Copy)]
enum Expect {
    /// The layout comparison reports a difference; where this names a fact,
    /// in that fact alone (the variant gets past every other one).
    Mismatch(Option<&'static str>),
    /// The header's own static asserts stop the compiler, with this message.
    CompileError(&'static str),
}

const SWAP: [(&str, &str); 3] =
    [("uintptr_t dst;", "uintptr_t SRC;"), ("uintptr_t src;", "uintptr_t dst;"), ("uintptr_t SRC;", "uintptr_t src;")];
/// Makes the header's own asserts always hold (clang compiles it as C11), so
/// that a broken layout reaches the comparison instead of stopping the compiler.
const NO_ASSERTS: (&str, &str) = ("_Static_assert(cond, msg)", "_Static_assert(1, msg)");

const HEADER_VARIANTS: &[HeaderVariant] = &[
    variant("header: dst and src swapped", &[SWAP[0], SWAP[1], SWAP[2], NO_ASSERTS], MISMATCH),
    variant("header: extra field (wrong size)", &[("size_t nbytes;", "size_t nbytes; int x;"), NO_ASSERTS], MISMATCH),
    variant("header: ABI version bumped", &[("ABI_VERSION 1", "ABI_VERSION 2")], MISMATCH),
    variant("header: dst and src swapped, asserts kept", &SWAP, Expect::CompileError("hostcopy: dst first")),
    // On a 64-bit target the struct keeps 24 bytes (4 bytes of padding after
    // nbytes) and every offset, so (with the header's own asserts off) the size
    // and offset comparisons pass it; only the field sizes show it. On 32-bit
    // targets uint32_t is size_t's width: no bug there.
    HeaderVariant {
        applies_to: |t| t.pointer_width == 64,
        ..variant(
            "header: uint32_t nbytes (64-bit)",
            &[("size_t nbytes;", "uint32_t nbytes;"), NO_ASSERTS],
            Expect::Mismatch(Some("sizeof nbytes")),
        )
    },
];
const MISMATCH: Expect = Expect::Mismatch(None);

const fn variant(name: &'static str, edits: &'static [(&'static str, &'static str)], expect: Expect) -> HeaderVariant {
    HeaderVariant { name, edits, expect, applies_to: |_| true }
}

const FLAG_VARIANTS: &[FlagVariant] = &[
    // An empty CUDA_CB makes HOSTCOPY_CB empty: a cdecl declaration, which
    // references `_hostcopy_fn` instead of `_hostcopy_fn@4`.
    FlagVariant {
        name: "caller without HOSTCOPY_CB (cdecl)",
        flags: &["-DCUDA_CB="],
        at_run_time: false,
        applies_to: i686_windows,
    },
    FlagVariant {
        name: "caller of a renamed hostcopy_fn",
        flags: &["-Dhostcopy_fn=hostcopy_fn_v2"],
        at_run_time: false,
        applies_to: |_| true,
    },
    // The declaration stays stdcall (it links), the pointer it is called
    // through is cdecl: the stack moves 4 bytes a call.
    FlagVariant {
        name: "cdecl caller at run time (i686 Windows)",
        flags: &["-DHOSTCOPY_CALLER_CB=", "-Wno-incompatible-pointer-types"],
        at_run_time: true,
        applies_to: i686_windows,
    },
    // The same the other way round: the caller expects the callee to pop its
    // argument, and the C convention's callee does not.
    FlagVariant {
        name: "stdcall caller at run time (i686 Linux)",
        flags: &["-DHOSTCOPY_CALLER_CB=__attribute__((stdcall))", "-Wno-incompatible-pointer-types"],
        at_run_time: true,
        applies_to: |t| t.triple == "i686-unknown-linux-gnu",
    },
];

fn i686_windows(target: &Target) -> bool {
    target.triple == "i686-pc-windows-gnu"
}

/// What one variant did on the targets it applies to.
#[derive(Default)]
struct Tally {
    caught: Vec<&'static str>,
    missed: Vec<(&'static str, String)>,
    example: Option<String>,
}

impl Tally {
    fn record(&mut self, target: &'static str, result: Result<String, String>) {
        match result {
            Ok(message) => {
                self.caught.push(target);
                self.example.get_or_insert(format!("{target}: {message}"));
            }
            Err(why) => self.missed.push((target, why)),
        }
    }
}

pub(crate) fn run(workspace: &Workspace, targets: &[&Target], fail: &mut impl FnMut(&str, &'static str, String)) {
    let variants_dir = workspace.out.join("self-test");
    let header_dirs: Vec<Option<PathBuf>> = HEADER_VARIANTS
        .iter()
        .map(|variant| {
            write_header_variant(workspace, variant, &variants_dir)
                .map_err(|error| fail(variant.name, "self-test", error))
                .ok()
        })
        .collect();
    let names = HEADER_VARIANTS.iter().map(|v| v.name).chain(FLAG_VARIANTS.iter().map(|v| v.name));
    let mut tallies: Vec<Tally> = names.clone().map(|_| Tally::default()).collect();
    let (header_tallies, flag_tallies) = tallies.split_at_mut(HEADER_VARIANTS.len());

    for (i, target) in targets.iter().enumerate() {
        eprintln!("\n[{}/{}] {}", i + 1, targets.len(), target.triple);
        let control = progress("control: the real header, probe and consumer pass", || {
            let built = workspace.build(target)?;
            let rust = workspace.rust_layout(target, &built)?;
            let defined = workspace.archive_symbols(&built)?;
            let object = workspace.scratch(target).join("self_test_control.o");
            checks::compare_layouts(target, &rust, &workspace.c_layout(target, &[], &object)?)?;
            let references = workspace.probe_references(target, &[], "self_test_probe.o")?;
            checks::check_references(target, &references, &defined)?;
            if FLAG_VARIANTS.iter().any(|v| v.at_run_time && (v.applies_to)(target)) {
                workspace.c_consumer(target, &built, &rust, &[])?;
            }
            Ok((built, rust, defined))
        });
        let (built, rust, defined) = match control {
            Ok(control) => control,
            Err(error) => {
                let why = "the unmodified checks fail, so no variant can show anything";
                fail(target.triple, "self-test control", format!("{why}:\n{error}"));
                continue;
            }
        };
        for ((variant, dir), tally) in HEADER_VARIANTS.iter().zip(&header_dirs).zip(&mut *header_tallies) {
            let Some(dir) = dir.as_ref().filter(|_| (variant.applies_to)(target)) else {
                continue;
            };
            let object = workspace.scratch(target).join(format!("self_test_{}.o", slug(variant.name)));
            let result = progress(variant.name, || {
                let compiled = workspace.c_layout(target, std::slice::from_ref(dir), &object);
                judge_header(variant.expect, &rust, compiled)
            });
            tally.record(target.triple, result);
        }
        for (variant, tally) in FLAG_VARIANTS.iter().zip(&mut *flag_tallies) {
            if !(variant.applies_to)(target) {
                continue;
            }
            let result = progress(variant.name, || {
                if variant.at_run_time {
                    return match workspace.c_consumer(target, &built, &rust, variant.flags) {
                        Err(error) if error.starts_with("linking") => Err(format!("it did not link: {error}")),
                        Err(error) => Ok(first_line(&error)),
                        Ok(_) => Err("the C consumer passed with the wrong calling convention".to_owned()),
                    };
                }
                let flags: Vec<String> = variant.flags.iter().map(|d| d.to_string()).collect();
                let object = format!("self_test_{}.o", slug(variant.name));
                let references = workspace.probe_references(target, &flags, &object)?;
                match checks::check_references(target, &references, &defined) {
                    Err(report) => Ok(first_line(&report)),
                    Ok(()) => Err(format!("the symbol check passed {}", references.join(", "))),
                }
            });
            tally.record(target.triple, result);
        }
    }

    let mut rows = Vec::new();
    for (name, tally) in names.zip(&tallies) {
        let applicable = tally.caught.len() + tally.missed.len();
        let verdict = match (applicable, tally.missed.len()) {
            (0, _) => "no selected target it applies to".to_owned(),
            (_, 0) => format!("caught on {}/{applicable}", tally.caught.len()),
            (_, missed) => format!("MISSED on {missed}/{applicable}"),
        };
        rows.push(vec![name.to_owned(), verdict, tally.example.clone().unwrap_or_default()]);
        for (target, why) in &tally.missed {
            fail(target, "self-test: not caught", format!("{name}: {why}"));
        }
    }
    println!("\nself-test: each broken variant must be reported by the checks\n");
    println!("{}", report::render_table(&["variant", "result", "first report"], &rows));
}

/// Ok(what the check reported) when the variant was caught as expected; Err(why not) otherwise.
fn judge_header(expect: Expect, rust: &Layout, compiled: Result<Layout, String>) -> Result<String, String> {
    match (expect, compiled) {
        (Expect::Mismatch(only), Ok(c)) => {
            let differences = c.differences(rust, "C");
            let other = differences.iter().find(|d| only.is_some_and(|fact| !d.starts_with(&format!("{fact}:"))));
            match (differences.is_empty(), other) {
                (true, _) => Err(format!("the layout comparison passed a broken header ({c})")),
                // Meant to get past every other fact: else it no longer shows that this one is needed.
                (false, Some(other)) => Err(format!("expected a difference in {only:?} only, but also: {other}")),
                (false, None) => Ok(differences.join("; ")),
            }
        }
        (Expect::Mismatch(_), Err(error)) => Err(format!("the broken header did not compile: {error}")),
        (Expect::CompileError(message), Err(error)) if error.contains(message) => {
            Ok(format!("clang: static assertion failed: \"{message}\""))
        }
        (Expect::CompileError(message), result) => Err(format!("no static assert \"{message}\": {result:?}")),
    }
}

fn write_header_variant(
    workspace: &Workspace,
    variant: &HeaderVariant,
    variants_dir: &Path,
) -> Result<PathBuf, String> {
    let original_path = workspace.root.join("core/include/hostcopy.h");
    let original =
        fs::read_to_string(&original_path).map_err(|e| format!("reading {}: {e}", original_path.display()))?;
    let broken = apply_edits(&original, variant.edits)?;
    let dir = variants_dir.join(slug(variant.name));
    checks::create_dir(&dir)?;
    checks::write(&dir.join("hostcopy.h"), &broken)?;
    Ok(dir)
}

/// Applies each edit to the header's text; an edit that finds nothing to
/// change is an error, so a reworded header cannot make a variant silently
/// identical to the original.
fn apply_edits(header: &str, edits: &[(&str, &str)]) -> Result<String, String> {
    let mut text = header.to_owned();
    for (find, replace) in edits {
        if !text.contains(find) {
            return Err(format!("hostcopy.h has no `{find}` to edit"));
        }
        text = text.replacen(find, replace, 1);
    }
    Ok(text)
}

fn slug(name: &str) -> String {
    let words = name.split(|c: char| !c.is_ascii_alphanumeric()).filter(|w| !w.is_empty());
    words.map(str::to_ascii_lowercase).collect::<Vec<_>>().join("_")
}

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or_default().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = include_str!("../../core/include/hostcopy.h");

    #[test]
    fn every_header_variant_still_applies_to_the_real_header() {
        for variant in HEADER_VARIANTS {
            assert_ne!(apply_edits(HEADER, variant.edits).unwrap(), HEADER, "{}", variant.name);
        }
        let swapped = apply_edits(HEADER, &SWAP).unwrap();
        assert!(swapped.find("uintptr_t src;") < swapped.find("uintptr_t dst;"));
        assert!(apply_edits("struct nothing;\n", &[NO_ASSERTS]).is_err());
    }

    #[test]
    fn only_the_expected_report_counts_as_caught() {
        // size, align, offsets, field sizes, ABI version, pointer size.
        let lp64 = Layout::from_values([24, 8, 0, 8, 16, 8, 8, 8, 1, 8]);
        assert!(judge_header(MISMATCH, &lp64, Ok(lp64)).unwrap_err().contains("passed a broken header"));
        let swapped = Layout::from_values([24, 8, 8, 0, 16, 8, 8, 8, 1, 8]);
        let expected = "offsetof dst: Rust 0, C 8; offsetof src: Rust 8, C 0";
        assert_eq!(judge_header(MISMATCH, &lp64, Ok(swapped)).unwrap(), expected);
        let error = Err("error: static assertion failed: hostcopy: dst first".to_owned());
        let assert = Expect::CompileError("hostcopy: dst first");
        assert!(judge_header(assert, &lp64, error.clone()).is_ok());
        assert!(judge_header(MISMATCH, &lp64, error).is_err());
        assert!(judge_header(assert, &lp64, Err("error: unknown type name".to_owned())).is_err());
        assert!(judge_header(assert, &lp64, Ok(lp64)).is_err());
        let narrow_only = Expect::Mismatch(Some("sizeof nbytes"));
        let narrow = Layout::from_values([24, 8, 0, 8, 16, 8, 8, 4, 1, 8]);
        assert_eq!(judge_header(narrow_only, &lp64, Ok(narrow)).unwrap(), "sizeof nbytes: Rust 8, C 4");
        let also_moved = Layout::from_values([24, 8, 0, 8, 20, 8, 8, 4, 1, 8]);
        assert!(judge_header(narrow_only, &lp64, Ok(also_moved)).unwrap_err().contains("but also: offsetof nbytes"));
    }

    #[test]
    fn slugs_are_file_names() {
        assert_eq!(slug("header: dst and src swapped, asserts kept"), "header_dst_and_src_swapped_asserts_kept");
    }
}
