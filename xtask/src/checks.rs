//! The steps of `cargo xtask abi` for one target: build the core, read the
//! layout reports, list symbols, run the tests and the C consumer. Each step
//! returns what it found or an error that carries the failing command and
//! its output; `abi.rs` turns them into the table and the failure list.

use std::env;
use std::ffi::OsStr;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::command;
use crate::layout_report::Layout;
use crate::report::Outcome;
use crate::symbols::{self, DefinedSymbol};
use crate::targets::{
    AbiTarget, CLANG, CToolchain, CoreTests, LLVM_NM, LLVM_READOBJ, ObjectFormat,
};
use crate::toolchain::Toolbox;

/// Where the sources are and where the checks write.
pub(crate) struct Workspace {
    pub(crate) root: PathBuf,
    /// `target/abi`: its own folder, so these builds never wait for or
    /// invalidate those of other cargo runs.
    pub(crate) out: PathBuf,
    /// rustc's host triple: cargo applies a target's linker setting to the
    /// host's build scripts and proc macros too, so the host target keeps
    /// the default linker, and defmt's proc macros are not rebuilt per target.
    pub(crate) host: String,
}

impl Workspace {
    pub(crate) fn locate() -> Self {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("xtask lives in the workspace")
            .to_path_buf();
        let out = root.join("target").join("abi");
        let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
        let host = command::run(Command::new(rustc).arg("-vV"))
            .ok()
            .and_then(|version| {
                version
                    .stdout
                    .lines()
                    .find_map(|line| line.strip_prefix("host: ").map(str::to_owned))
            })
            .unwrap_or_default();
        Workspace { root, out, host }
    }

    /// CARGO_TARGET_DIR of the library builds (steps 1 to 3), apart from the
    /// test builds so that neither rebuilds what the other left.
    fn build_dir(&self) -> PathBuf {
        self.out.join("build")
    }

    fn test_dir(&self) -> PathBuf {
        self.out.join("test")
    }

    pub(crate) fn scratch(&self, target: &AbiTarget) -> PathBuf {
        self.out.join("checks").join(target.rust)
    }

    pub(crate) fn header_dir(&self) -> PathBuf {
        self.root.join("core").join("include")
    }

    /// The crate that builds the C libraries (`libhostcopy.a`, `.so`, `.dll`).
    pub(crate) fn capi_manifest(&self) -> PathBuf {
        self.root.join("core").join("capi").join("Cargo.toml")
    }

    pub(crate) fn c_dir(&self) -> PathBuf {
        self.root.join("abi-tests").join("c")
    }
}

/// The library built for one target, and what a C program must link with it.
pub(crate) struct BuiltCore {
    pub(crate) rlib: PathBuf,
    pub(crate) deps: PathBuf,
    pub(crate) staticlib: PathBuf,
    /// Built where the target's linker is here.
    pub(crate) cdylib: Option<PathBuf>,
    /// The cdylib's import library (`libhostcopy.dll.a`), on Windows:
    /// what a C program links against to call into the DLL.
    pub(crate) import_lib: Option<PathBuf>,
    pub(crate) native_static_libs: Vec<String>,
}

/// The checks, with what they need: the workspace and the tools found.
pub(crate) struct Checks<'a> {
    pub(crate) workspace: &'a Workspace,
    pub(crate) toolbox: &'a Toolbox,
}

impl Checks<'_> {
    /// Step 3: the names a C caller references are global functions in the
    /// static library, and the cdylib, where built, exports them.
    pub(crate) fn symbol_check(
        &self,
        target: &AbiTarget,
        core: &BuiltCore,
        fail: &mut impl FnMut(&'static str, String),
    ) -> Outcome {
        if let Some(reason) = self.toolbox.missing_reason(&[CLANG, LLVM_NM, LLVM_READOBJ]) {
            return Outcome::NotRun(reason);
        }
        let checked = progress("symbols (symbol_probe.c vs libhostcopy.a)", || {
            let symbols = self.archive_symbols(core)?;
            let references = self.probe_references(target, &[], "symbol_probe.o")?;
            check_references(target, &references, &symbols)?;
            Ok(references)
        })
        .and_then(|references| {
            if let Some(cdylib) = &core.cdylib {
                let label = format!("dynamic exports ({})", file_name(cdylib));
                progress(&label, || self.check_dynamic_exports(target, cdylib))?;
            }
            Ok(references)
        });
        match checked {
            Ok(references) => {
                let host_fn = references
                    .iter()
                    .find(|name| name.contains("hostcopy_fn"))
                    .cloned()
                    .unwrap_or_default();
                let kind = match target.object_format {
                    ObjectFormat::Elf => "global FUNC",
                    ObjectFormat::Coff | ObjectFormat::Wasm => "global T",
                };
                let dynamic = match core.cdylib.as_deref().and_then(Path::extension) {
                    Some(extension) => format!(", .{} too", extension.to_string_lossy()),
                    None => String::new(),
                };
                Outcome::Passed(format!("{host_fn} ({kind}{dynamic})"))
            }
            Err(error) => {
                fail("symbol", error);
                Outcome::Failed("not what a C caller links".to_owned())
            }
        }
    }

    fn cargo(&self, target: &AbiTarget, target_dir: PathBuf) -> Command {
        let mut cargo = Command::new(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
        cargo
            .current_dir(&self.workspace.root)
            .env("CARGO_TARGET_DIR", target_dir);
        if target.c_toolchain.is_some_and(|c| c.link_static) {
            cargo.env(
                format!("{}RUSTFLAGS", target.cargo_env_prefix()),
                "-C target-feature=+crt-static",
            );
        }
        cargo
    }

    fn set_linker(&self, cargo: &mut Command, target: &AbiTarget, c: &CToolchain) {
        if target.rust != self.workspace.host {
            cargo.env(format!("{}LINKER", target.cargo_env_prefix()), c.gcc);
        }
    }

    /// Step 1. The core's rlib (with `defmt`, then without: both leave it
    /// under the same name, and the checks after this one read the plain
    /// one), then the C libraries from `core/capi` (its own workspace, in
    /// its release profile: what `cargo xtask dist` ships). The static
    /// library needs no linker; the shared one does, so it is built (and its
    /// exports checked) only where the target's linker is here. A statically
    /// linked target has no shared library.
    pub(crate) fn build_core(&self, target: &AbiTarget) -> Result<BuiltCore, String> {
        let linker = target
            .c_toolchain
            .filter(|c| self.toolbox.missing_reason(c.needs).is_none());
        let with_cdylib = linker.is_some_and(|c| !c.link_static);
        for features in [&["--features", "defmt"][..], &[]] {
            let mut cargo = self.cargo(target, self.workspace.build_dir());
            cargo
                .args(["build", "-p", "hostcopy-core", "--target", target.rust])
                .args(features);
            command::run(&mut cargo)?;
        }
        let mut cargo = self.cargo(target, self.workspace.build_dir());
        cargo
            .arg("rustc")
            .arg("--manifest-path")
            .arg(self.workspace.capi_manifest())
            .args([
                "--release",
                "--target",
                target.rust,
                "--crate-type",
                "staticlib",
            ]);
        if with_cdylib {
            cargo.args(["--crate-type", "cdylib"]);
        }
        if let Some(c) = &linker {
            self.set_linker(&mut cargo, target, c);
        }
        let capi = command::run(cargo.args(["--", "--print", "native-static-libs"]))?;
        let native_static_libs = capi
            .stderr
            .lines()
            .find_map(|line| line.trim().strip_prefix("note: native-static-libs:"))
            .map(|libs| libs.split_whitespace().map(str::to_owned).collect())
            .unwrap_or_default();
        let out = self.workspace.build_dir().join(target.rust);
        let (rlibs, libs) = (out.join("debug"), out.join("release"));
        let coff_dll = with_cdylib && target.object_format == ObjectFormat::Coff;
        let core = BuiltCore {
            rlib: rlibs.join("libhostcopy_core.rlib"),
            deps: rlibs.join("deps"),
            staticlib: libs.join("libhostcopy.a"),
            cdylib: with_cdylib.then(|| {
                libs.join(match target.object_format {
                    ObjectFormat::Coff => "hostcopy.dll",
                    ObjectFormat::Elf | ObjectFormat::Wasm => "libhostcopy.so",
                })
            }),
            import_lib: coff_dll.then(|| libs.join("libhostcopy.dll.a")),
            native_static_libs,
        };
        for artifact in [
            Some(&core.rlib),
            Some(&core.staticlib),
            core.cdylib.as_ref(),
            core.import_lib.as_ref(),
        ]
        .into_iter()
        .flatten()
        {
            if !artifact.is_file() {
                return Err(format!("cargo did not produce {}", artifact.display()));
            }
        }
        Ok(core)
    }

    /// Step 2, Rust side: `abi-tests/src/layout.rs` compiled on its own for
    /// the target, against the core built for it, into an object file.
    pub(crate) fn rust_layout(
        &self,
        target: &AbiTarget,
        core: &BuiltCore,
    ) -> Result<Layout, String> {
        let scratch = self.workspace.scratch(target);
        create_dir(&scratch)?;
        let layout_rs = self.workspace.root.join("abi-tests/src/layout.rs");
        let root = scratch.join("rust_layout.rs");
        write(
            &root,
            &format!(
                "//! Generated by `cargo xtask abi`: the Rust layout report alone, for one target.\n\
                 #![no_std]\n#[path = {:?}]\npub mod layout;\n",
                layout_rs.display().to_string()
            ),
        )?;
        let object = scratch.join("rust_layout.o");
        let mut rustc = Command::new(env::var_os("RUSTC").unwrap_or_else(|| "rustc".into()));
        rustc
            .args(["--edition", "2024", "--crate-type", "lib"])
            .args([
                "--crate-name",
                "hostcopy_abi_layout",
                "--target",
                target.rust,
            ])
            .args(["-C", "codegen-units=1"])
            .arg(format!("--emit=obj={}", object.display()))
            .arg("--extern")
            .arg(format!("hostcopy_core={}", core.rlib.display()))
            .arg("-L")
            .arg(format!("dependency={}", core.deps.display()))
            .arg(&root);
        command::run(&mut rustc)?;
        let layout = read_layout(&object, target)?;
        let violations = layout.contract_violations(target.pointer_width);
        if violations.is_empty() {
            Ok(layout)
        } else {
            Err(format!(
                "the Rust layout is not the contract's for a {}-bit {}-endian target \
                 (is the target table right?): {}",
                target.pointer_width,
                target.endian.name(),
                violations.join("; ")
            ))
        }
    }

    fn clang(&self, target: &AbiTarget, include_dirs: &[PathBuf], defines: &[String]) -> Command {
        let mut clang = Command::new("clang");
        // Freestanding everywhere: the header needs only stddef.h and
        // stdint.h, which clang brings for every target, so no target's C
        // library has to be installed for the layout and symbol checks.
        clang
            .args(target.clang)
            .args(["-ffreestanding", "-std=c11", "-Wall", "-Wextra", "-Werror"])
            .args(defines);
        for dir in include_dirs {
            clang.arg("-I").arg(dir);
        }
        clang
            .arg("-I")
            .arg(self.workspace.header_dir())
            .arg("-I")
            .arg(self.workspace.c_dir());
        clang
    }

    /// Step 2, C side: `layout_report.c` compiled for the target with the
    /// header found first in `include_dirs` (the self-test puts broken copies there).
    pub(crate) fn c_layout(
        &self,
        target: &AbiTarget,
        include_dirs: &[PathBuf],
        defines: &[String],
        object: &Path,
    ) -> Result<Layout, String> {
        if let Some(dir) = object.parent() {
            create_dir(dir)?;
        }
        let mut clang = self.clang(target, include_dirs, defines);
        clang
            .arg("-c")
            .arg(self.workspace.c_dir().join("layout_report.c"))
            .arg("-o")
            .arg(object);
        command::run(&mut clang)?;
        read_layout(object, target)
    }

    /// Step 3: the symbols a C caller on the target references, from the probe's undefined symbols.
    pub(crate) fn probe_references(
        &self,
        target: &AbiTarget,
        defines: &[String],
        object_name: &str,
    ) -> Result<Vec<String>, String> {
        let scratch = self.workspace.scratch(target);
        create_dir(&scratch)?;
        let object = scratch.join(object_name);
        let mut clang = self.clang(target, &[], defines);
        clang
            .arg("-c")
            .arg(self.workspace.c_dir().join("symbol_probe.c"))
            .arg("-o")
            .arg(&object);
        command::run(&mut clang)?;
        let listing = command::run(
            Command::new("llvm-nm")
                .args(["--no-llvm-bc", "--undefined-only", "--format=just-symbols"])
                .arg(&object),
        )?;
        let references = symbols::hostcopy_references(&listing.stdout);
        if !references.iter().any(|name| name.contains("hostcopy_fn")) {
            return Err(format!(
                "{} references no hostcopy_fn symbol (it lists: {})",
                object.display(),
                references.join(", ")
            ));
        }
        Ok(references)
    }

    /// Step 3: the global symbols `libhostcopy.a` defines for the target.
    pub(crate) fn archive_symbols(&self, core: &BuiltCore) -> Result<Vec<DefinedSymbol>, String> {
        // Debian 12's llvm-nm (LLVM 14) cannot read the LLVM bitcode that
        // std's objects embed next to their machine code; the machine code's
        // symbol tables are what a linker reads anyway.
        let listing = command::run(
            Command::new("llvm-nm")
                .args([
                    "--no-llvm-bc",
                    "--format=sysv",
                    "--defined-only",
                    "--extern-only",
                ])
                .arg(&core.staticlib),
        )?;
        Ok(symbols::parse_sysv(&listing.stdout))
    }

    /// Step 3, dynamic library: `ctypes.CDLL`, `dlsym` and `GetProcAddress`
    /// look the functions up by their plain names in its export table.
    fn check_dynamic_exports(&self, target: &AbiTarget, cdylib: &Path) -> Result<(), String> {
        let exported: Vec<String> = match target.object_format {
            ObjectFormat::Coff => {
                let listing = command::run(
                    Command::new("llvm-readobj")
                        .arg("--coff-exports")
                        .arg(cdylib),
                )?;
                listing
                    .stdout
                    .lines()
                    .filter_map(|line| line.trim().strip_prefix("Name: "))
                    .map(str::to_owned)
                    .collect()
            }
            ObjectFormat::Elf | ObjectFormat::Wasm => {
                let listing = command::run(
                    Command::new("llvm-nm")
                        .args([
                            "--no-llvm-bc",
                            "--dynamic",
                            "--defined-only",
                            "--format=sysv",
                        ])
                        .arg(cdylib),
                )?;
                let symbols = symbols::parse_sysv(&listing.stdout);
                let errors: Vec<String> = DYNAMIC_EXPORTS
                    .iter()
                    .filter_map(|name| {
                        symbols::check_defined(&symbols, name, target.object_format).err()
                    })
                    .collect();
                if !errors.is_empty() {
                    return Err(format!("{}: {}", cdylib.display(), errors.join("; ")));
                }
                symbols.into_iter().map(|symbol| symbol.name).collect()
            }
        };
        let missing: Vec<&str> = DYNAMIC_EXPORTS
            .iter()
            .copied()
            .filter(|name| !exported.iter().any(|e| e == name))
            .collect();
        if missing.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{} does not export {}",
                cdylib.display(),
                missing.join(", ")
            ))
        }
    }

    /// Step 4: `cargo test -p hostcopy-core` for the target, with its linker and runner.
    pub(crate) fn core_tests(
        &self,
        target: &AbiTarget,
        fail: &mut impl FnMut(&'static str, String),
    ) -> Outcome {
        let build_only = match target.core_tests {
            CoreTests::NotRun(reason) => return Outcome::NotRun(reason.to_owned()),
            CoreTests::BuildOnly(reason) => Some(reason),
            CoreTests::Run => None,
        };
        let Some(c) = target.c_toolchain else {
            return Outcome::NotRun("no linker for this target".to_owned());
        };
        let mut needs = c.needs.to_vec();
        if build_only.is_none() {
            needs.extend(target.runner.needs());
        }
        if let Some(reason) = self.toolbox.missing_reason(&needs) {
            return Outcome::NotRun(reason);
        }
        let mut cargo = self.cargo(target, self.workspace.test_dir());
        let prefix = target.cargo_env_prefix();
        cargo.args(["test", "-p", "hostcopy-core", "--target", target.rust]);
        self.set_linker(&mut cargo, target, &c);
        if c.link_static {
            // Doctests are linked by rustdoc, which reads only RUSTDOCFLAGS.
            cargo.env("RUSTDOCFLAGS", "-C target-feature=+crt-static");
        }
        if build_only.is_some() {
            cargo.arg("--no-run");
        } else if let Some(runner) = target.runner.command().filter(|r| !r.is_empty()) {
            cargo.env(format!("{prefix}RUNNER"), runner.join(" "));
        }
        let label = match build_only {
            Some(_) => format!("core tests: build only (linker {})", c.gcc),
            None => format!("core tests: cargo test ({})", how_it_runs(target)),
        };
        match progress(&label, || command::run(&mut cargo)) {
            Ok(output) => match build_only {
                Some(reason) => Outcome::NotRun(format!("{reason}; built")),
                None => Outcome::Passed(format!(
                    "passed ({} tests, {})",
                    passed_tests(&output.stdout),
                    how_it_runs(target)
                )),
            },
            Err(error) => {
                fail("core tests", error);
                Outcome::Failed("cargo test".to_owned())
            }
        }
    }

    /// Step 4: the C consumer (`abi-tests/c/main.c`) linked against the
    /// target's static library and run; its layout line must match Rust's.
    /// On Windows it is also linked against the DLL's import library, which
    /// must provide the names the header makes a C caller reference
    /// (`hostcopy_fn@4` on i686).
    pub(crate) fn c_consumer(
        &self,
        target: &AbiTarget,
        core: &BuiltCore,
        rust_layout: Option<Layout>,
        fail: &mut impl FnMut(&'static str, String),
    ) -> Outcome {
        let Some(c) = target.c_toolchain else {
            return Outcome::NotRun("no C library for this target".to_owned());
        };
        let mut needs = c.needs.to_vec();
        needs.extend(target.runner.needs());
        if let Some(reason) = self.toolbox.missing_reason(&needs) {
            return Outcome::NotRun(reason);
        }
        let windows = target.rust.contains("windows");
        let scratch = self.workspace.scratch(target);
        let executable = scratch.join(if windows { "consumer.exe" } else { "consumer" });
        let static_libs: Vec<&OsStr> = std::iter::once(core.staticlib.as_os_str())
            .chain(core.native_static_libs.iter().map(OsStr::new))
            .collect();
        if let Err(error) = progress(&format!("C consumer: link ({})", c.gcc), || {
            self.link_consumer(&c, &static_libs, &executable)
        }) {
            fail("C consumer", error);
            return Outcome::Failed("link".to_owned());
        }
        let mut linked = "linked".to_owned();
        if let Some(import_lib) = &core.import_lib {
            let dll_executable = scratch.join("consumer_dll.exe");
            let label = format!(
                "C consumer: link against the DLL ({})",
                file_name(import_lib)
            );
            if let Err(error) = progress(&label, || {
                self.link_consumer(&c, &[import_lib.as_os_str()], &dll_executable)
            }) {
                fail(
                    "C consumer (DLL)",
                    format!(
                        "a C program that includes hostcopy.h cannot link against the DLL \
                         through {}:\n{error}",
                        import_lib.display()
                    ),
                );
                return Outcome::Failed("link against the DLL".to_owned());
            }
            linked = "linked with .a and .dll".to_owned();
        }
        let Some(runner) = target.runner.command() else {
            return Outcome::NotRun(format!("{}; {linked}", target.runner.describe()));
        };
        let mut run = match runner.split_first() {
            Some((program, args)) => {
                let mut run = Command::new(program);
                run.args(args).arg(&executable);
                run
            }
            None => Command::new(&executable),
        };
        let label = format!("C consumer: run ({})", how_it_runs(target));
        let checked = progress(&label, || {
            let output = command::run(&mut run)?;
            let c_layout = Layout::from_consumer_output(&output.stdout)?;
            if let Some(rust) = rust_layout {
                let differences = c_layout.differences(&rust, "C consumer (gcc)");
                if !differences.is_empty() {
                    return Err(format!(
                        "the C consumer's layout differs: {}",
                        differences.join("; ")
                    ));
                }
            }
            Ok(())
        });
        match checked {
            Ok(()) => Outcome::Passed(format!("passed ({})", how_it_runs(target))),
            Err(error) => {
                fail("C consumer", error);
                Outcome::Failed("run".to_owned())
            }
        }
    }

    /// Links `main.c` and the consumer with the given libraries (an archive
    /// and the native libraries it needs, or an import library).
    fn link_consumer(
        &self,
        c: &CToolchain,
        libraries: &[&OsStr],
        executable: &Path,
    ) -> Result<(), String> {
        let c_dir = self.workspace.c_dir();
        let mut gcc = Command::new(c.gcc);
        gcc.args(["-std=c11", "-O1", "-Wall", "-Wextra", "-Werror"])
            .arg("-I")
            .arg(self.workspace.header_dir())
            .arg("-I")
            .arg(&c_dir)
            .args(["main.c", "consumer.c", "layout_report.c"].map(|file| c_dir.join(file)))
            .args(libraries)
            .arg("-o")
            .arg(executable);
        if c.link_static {
            gcc.arg("-static");
        }
        command::run(&mut gcc).map(drop)
    }
}

/// Both sides report the same layout, and it is the contract's for the target.
pub(crate) fn compare_layouts(target: &AbiTarget, rust: &Layout, c: &Layout) -> Result<(), String> {
    let differences = c.differences(rust, "C");
    if differences.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "struct hostcopy_args differs between Rust and hostcopy.h (clang {}): {}",
            target.clang.join(" "),
            differences.join("; ")
        ))
    }
}

/// Every name the C caller references is a global function in the library.
pub(crate) fn check_references(
    target: &AbiTarget,
    references: &[String],
    symbols: &[DefinedSymbol],
) -> Result<(), String> {
    let errors: Vec<String> = references
        .iter()
        .filter_map(|name| symbols::check_defined(symbols, name, target.object_format).err())
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("\n"))
    }
}

/// What a dynamic library of the core exports, by these plain names on every target.
const DYNAMIC_EXPORTS: [&str; 3] = ["hostcopy_fn", "hostcopy_rejected", "hostcopy_abi_version"];

fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |name| name.to_string_lossy().into_owned(),
    )
}

/// How the target's programs run here, for progress lines and the table.
fn how_it_runs(target: &AbiTarget) -> String {
    let linked = match target.c_toolchain {
        Some(c) if c.link_static => ", static",
        _ => "",
    };
    format!("{}{linked}", target.runner.describe())
}

fn read_layout(object: &Path, target: &AbiTarget) -> Result<Layout, String> {
    let bytes = fs::read(object).map_err(|e| format!("reading {}: {e}", object.display()))?;
    Layout::from_object(&bytes, target.endian).map_err(|e| format!("{}: {e}", object.display()))
}

/// Sums cargo test's `test result: ok. N passed` lines.
fn passed_tests(stdout: &str) -> u32 {
    stdout
        .lines()
        .filter_map(|line| line.strip_prefix("test result: ok. "))
        .filter_map(|rest| rest.split_whitespace().next()?.parse::<u32>().ok())
        .sum()
}

/// Runs one step with a progress line: the step, then ok or FAILED and how long it took.
pub(crate) fn progress<T>(
    label: &str,
    step: impl FnOnce() -> Result<T, String>,
) -> Result<T, String> {
    eprint!("  {label} ... ");
    let _ = std::io::stderr().flush();
    let start = Instant::now();
    let result = step();
    let verdict = if result.is_ok() { "ok" } else { "FAILED" };
    eprintln!("{verdict} ({:.1}s)", start.elapsed().as_secs_f64());
    result
}

pub(crate) fn create_dir(dir: &Path) -> Result<(), String> {
    fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))
}

pub(crate) fn write(path: &Path, contents: &str) -> Result<(), String> {
    fs::write(path, contents).map_err(|e| format!("writing {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passed_tests_add_up_over_test_binaries() {
        let stdout = "test result: ok. 9 passed; 0 failed; 0 ignored\n\
                      running 1 test\n\
                      test result: ok. 1 passed; 0 failed; 0 ignored\n";
        assert_eq!(passed_tests(stdout), 10);
    }
}
