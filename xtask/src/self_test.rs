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
//! and must fail when it runs under wine; and builds that changed on both
//! sides at once (a field moved, a function renamed), which only the
//! comparison with the frozen ABI version 1 can report. The unmodified
//! header, probe and consumer pass first on each target (the frozen check
//! too), so a variant counts as caught only where the real thing passes.

use std::fs;

use crate::checks::{self, Workspace};
use crate::frozen::{Abi, Frozen};
use crate::layout_report::Layout;
use crate::report::{self, progress};
use crate::targets::Target;

/// A deliberately broken input, the targets it applies to, and what must catch it.
struct Variant {
    name: &'static str,
    breaks: Breaks,
    applies_to: fn(&Target) -> bool,
}

enum Breaks {
    /// Text replacements in a copy of `hostcopy.h` (each must find its text), and what the layout check must do.
    Header(&'static [(&'static str, &'static str)], Expect),
    /// `symbol_probe.c` compiled with these flags: the symbol check must fail.
    Probe(&'static [&'static str]),
    /// The C consumer compiled with these flags: it must link, and fail when it runs on the target.
    Consumer(&'static [&'static str]),
    /// What the real build showed, changed as a change made on both sides
    /// alike would change it: the frozen ABI check must fail.
    Frozen(fn(&mut Abi)),
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

const VARIANTS: &[Variant] = &[
    header("header: dst and src swapped", &[SWAP[0], SWAP[1], SWAP[2], NO_ASSERTS], MISMATCH),
    header("header: extra field (wrong size)", &[("size_t nbytes;", "size_t nbytes; int x;"), NO_ASSERTS], MISMATCH),
    header("header: ABI version bumped", &[("ABI_VERSION 1", "ABI_VERSION 2")], MISMATCH),
    header("header: dst and src swapped, asserts kept", &SWAP, Expect::CompileError("hostcopy: dst first")),
    // On a 64-bit target the struct keeps 24 bytes (4 bytes of padding after
    // nbytes) and every offset, so (with the header's own asserts off) the size
    // and offset comparisons pass it; only the field sizes show it. On 32-bit
    // targets uint32_t is size_t's width: no bug there.
    Variant {
        applies_to: |t| t.pointer_width == 64,
        ..header(
            "header: uint32_t nbytes (64-bit)",
            &[("size_t nbytes;", "uint32_t nbytes;"), NO_ASSERTS],
            Expect::Mismatch(Some("sizeof nbytes")),
        )
    },
    // An empty CUDA_CB makes HOSTCOPY_CB empty: a cdecl declaration, which
    // references `_hostcopy_fn` instead of `_hostcopy_fn@4`.
    Variant {
        name: "caller without HOSTCOPY_CB (cdecl)",
        breaks: Breaks::Probe(&["-DCUDA_CB="]),
        applies_to: i686_windows,
    },
    Variant {
        name: "caller of a renamed hostcopy_fn",
        breaks: Breaks::Probe(&["-Dhostcopy_fn=hostcopy_fn_v2"]),
        applies_to: |_| true,
    },
    // The declaration stays stdcall (it links), the pointer it is called
    // through is cdecl: the stack moves 4 bytes a call.
    Variant {
        name: "cdecl caller at run time (i686 Windows)",
        breaks: Breaks::Consumer(&["-DHOSTCOPY_CALLER_CB=", "-Wno-incompatible-pointer-types"]),
        applies_to: i686_windows,
    },
    // The same the other way round: the caller expects the callee to pop its
    // argument, and the C convention's callee does not.
    Variant {
        name: "stdcall caller at run time (i686 Linux)",
        breaks: Breaks::Consumer(&["-DHOSTCOPY_CALLER_CB=__attribute__((stdcall))", "-Wno-incompatible-pointer-types"]),
        applies_to: |t| t.triple == "i686-unknown-linux-gnu",
    },
    // Changes made to the Rust record and the header together pass every
    // comparison of one side with the other: the frozen ABI reports them.
    Variant {
        name: "frozen ABI: nbytes moved first, on both sides",
        breaks: Breaks::Frozen(|abi| {
            let [size, align, dst, src, nbytes, rest @ ..] = abi.layout.values();
            let mut values = [size, align, nbytes, dst, src, 0, 0, 0, 0, 0];
            values[5..].copy_from_slice(&rest);
            abi.layout = Layout::from_values(values);
        }),
        applies_to: |_| true,
    },
    Variant {
        name: "frozen ABI: hostcopy_rejected renamed, everywhere",
        breaks: Breaks::Frozen(|abi| {
            let rename = |name: &mut String| *name = name.replace("hostcopy_rejected", "hostcopy_refused");
            abi.symbols.iter_mut().for_each(rename);
            abi.exports.iter_mut().flatten().for_each(rename);
        }),
        applies_to: |_| true,
    },
];
const MISMATCH: Expect = Expect::Mismatch(None);

const fn header(name: &'static str, edits: &'static [(&'static str, &'static str)], expect: Expect) -> Variant {
    Variant { name, breaks: Breaks::Header(edits, expect), applies_to: |_| true }
}

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

pub(crate) fn run(
    workspace: &Workspace,
    targets: &[&Target],
    frozen: &Frozen,
    fail: &mut impl FnMut(&str, &'static str, String),
) {
    let mut tallies: Vec<Tally> = VARIANTS.iter().map(|_| Tally::default()).collect();
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
            if VARIANTS.iter().any(|v| matches!(v.breaks, Breaks::Consumer(_)) && (v.applies_to)(target)) {
                workspace.c_consumer(target, &built, &rust, &[])?;
            }
            let exports = workspace.hostcopy_exports(target, &built)?;
            let abi = Abi { layout: rust, symbols: references, exports };
            frozen.check(target.triple, &abi)?;
            Ok((built, rust, defined, abi))
        });
        let (built, rust, defined, abi) = match control {
            Ok(control) => control,
            Err(error) => {
                let why = "the unmodified checks fail, so no variant can show anything";
                fail(target.triple, "self-test control", format!("{why}:\n{error}"));
                continue;
            }
        };
        for (variant, tally) in VARIANTS.iter().zip(&mut tallies).filter(|(v, _)| (v.applies_to)(target)) {
            let file = format!("self_test_{}", slug(variant.name));
            let result = progress(variant.name, || match variant.breaks {
                Breaks::Header(edits, expect) => {
                    let dir = workspace.out.join("self-test").join(&file);
                    let header = fs::read_to_string(workspace.root.join("core/include/hostcopy.h"));
                    checks::create_dir(&dir)?;
                    checks::write(&dir.join("hostcopy.h"), &apply_edits(&header.map_err(|e| e.to_string())?, edits)?)?;
                    let object = workspace.scratch(target).join(file + ".o");
                    judge_header(expect, &rust, workspace.c_layout(target, &[dir], &object))
                }
                Breaks::Probe(flags) => {
                    let flags: Vec<String> = flags.iter().map(|d| d.to_string()).collect();
                    let references = workspace.probe_references(target, &flags, &(file + ".o"))?;
                    match checks::check_references(target, &references, &defined) {
                        Err(report) => Ok(first_line(&report)),
                        Ok(()) => Err(format!("the symbol check passed {}", references.join(", "))),
                    }
                }
                Breaks::Consumer(flags) => match workspace.c_consumer(target, &built, &rust, flags) {
                    Err(error) if error.starts_with("linking") => Err(format!("it did not link: {error}")),
                    Err(error) => Ok(error.lines().last().unwrap_or_default().trim().to_owned()),
                    Ok(_) => Err("the C consumer passed with the wrong calling convention".to_owned()),
                },
                Breaks::Frozen(change) => {
                    let mut changed = abi.clone();
                    change(&mut changed);
                    match frozen.check(target.triple, &changed) {
                        Err(report) => Ok(report),
                        Ok(_) => Err("the frozen ABI check passed the changed build".to_owned()),
                    }
                }
            });
            tally.record(target.triple, result);
        }
    }

    let mut rows = Vec::new();
    for (Variant { name, .. }, tally) in VARIANTS.iter().zip(&tallies) {
        let applicable = tally.caught.len() + tally.missed.len();
        let verdict = match (applicable, tally.missed.len()) {
            (0, _) => "no selected target it applies to".to_owned(),
            (_, 0) => format!("caught on {}/{applicable}", tally.caught.len()),
            (_, missed) => format!("MISSED on {missed}/{applicable}"),
        };
        rows.push(vec![name.to_string(), verdict, tally.example.clone().unwrap_or_default()]);
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
        for variant in VARIANTS {
            if let Breaks::Header(edits, _) = variant.breaks {
                assert_ne!(apply_edits(HEADER, edits).unwrap(), HEADER, "{}", variant.name);
            }
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
