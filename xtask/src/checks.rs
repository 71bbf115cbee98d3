//! The steps of `cargo xtask abi` for one target row: build, the layout from
//! both sides, the symbols, the shared library's exports, the core's tests and
//! the C consumer. Each returns
//! what it found or an error that carries the failing command and its output.
//! Every program built for the target runs through the row's runner, the
//! same `CARGO_TARGET_<TRIPLE>_RUNNER` that cargo uses.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::command::{Output, run};
use crate::layout_report::Layout;
use crate::symbols::{self, DefinedSymbol};
use crate::targets::{Format, Libraries, Target, Tests};

/// Where the sources are and where the checks write (`target/abi`, away
/// from other cargo runs).
pub(crate) struct Workspace {
    pub(crate) root: PathBuf,
    pub(crate) out: PathBuf,
    /// rustc's host triple: a target's LINKER would also apply to build
    /// scripts when the target is the host, so the host keeps the default.
    pub(crate) host: String,
}

/// What the build of one target left.
pub(crate) struct Built {
    /// hostcopy-core's rlib and the folder of its dependencies.
    rlib: PathBuf,
    deps: PathBuf,
    /// `libhostcopy.a` (`hostcopy.lib` with MSVC) from `core/capi`, and what
    /// a C program links with it.
    pub(crate) staticlib: PathBuf,
    native_libs: Vec<String>,
    /// `libhostcopy.so`, `hostcopy.dll` or `hostcopy.wasm`, where the target has one.
    pub(crate) shared: Option<PathBuf>,
    /// `libhostcopy.dll.a`: what a C program links to call into the DLL.
    import_lib: Option<PathBuf>,
}

/// What a C consumer compiles with, beyond the row's flags (the self-test adds some).
pub(crate) const C_SOURCES: [&str; 2] = ["consumer.c", "layout_report.c"];

impl Workspace {
    pub(crate) fn locate() -> Self {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask is in the workspace");
        let host = run(Command::new(rustc()).arg("-vV"))
            .ok()
            .and_then(|v| v.stdout.lines().find_map(|l| l.strip_prefix("host: ").map(str::to_owned)))
            .unwrap_or_default();
        Workspace { root: root.to_path_buf(), out: root.join("target/abi"), host }
    }

    pub(crate) fn scratch(&self, target: &Target) -> PathBuf {
        self.out.join("checks").join(target.triple)
    }

    pub(crate) fn c_dir(&self) -> PathBuf {
        self.root.join("abi-tests/c")
    }

    /// cargo in its own target folder under `target/abi`, with the row's
    /// per-target settings, as a user would export them.
    fn cargo(&self, target: &Target, dir: &str) -> Command {
        let mut cargo = Command::new(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
        cargo.current_dir(&self.root).env("CARGO_TARGET_DIR", self.out.join(dir));
        let prefix = target.cargo_env_prefix();
        if let Some(linker) = target.linker.filter(|_| target.triple != self.host) {
            cargo.env(format!("{prefix}LINKER"), linker);
        }
        if !target.rustflags.is_empty() {
            cargo.env(format!("{prefix}RUSTFLAGS"), target.rustflags);
            // Doctests are linked by rustdoc, which reads only RUSTDOCFLAGS.
            cargo.env("RUSTDOCFLAGS", target.rustflags);
        }
        if !target.runner.is_empty() {
            cargo.env(format!("{prefix}RUNNER"), self.runner(target).join(" "));
        }
        cargo
    }

    /// The row's runner with its script paths made absolute.
    fn runner(&self, target: &Target) -> Vec<String> {
        let absolute = |word: &&str| match word.contains('/') && !word.starts_with('/') {
            true => self.root.join(word).display().to_string(),
            false => word.to_string(),
        };
        target.runner.iter().map(absolute).collect()
    }

    /// Runs a program built for the target, through its runner.
    fn run_on_target(&self, target: &Target, program: &Path) -> Result<Output, String> {
        let runner = self.runner(target);
        let mut command = match runner.split_first() {
            Some((first, args)) => {
                let mut command = Command::new(first);
                command.args(args).arg(program);
                command
            }
            None => Command::new(program),
        };
        run(command.current_dir(&self.root))
    }

    /// Step 1: hostcopy-core as a Rust dependency (with and without defmt:
    /// its compile-time layout asserts hold), and the C libraries of
    /// `core/capi` in its release profile (what `cargo xtask dist` ships).
    pub(crate) fn build(&self, target: &Target) -> Result<Built, String> {
        let core = |features: &[&str]| {
            let mut cargo = self.cargo(target, "core");
            run(cargo.args(["build", "-p", "hostcopy-core", "--target", target.triple]).args(features))
        };
        core(&["--features", "defmt"])?;
        core(&[])?;
        let (capi_dir, native_libs) = self.build_capi(target)?;
        let core_dir = self.out.join("core").join(target.triple).join("debug");
        let existing = |name: &str| Some(capi_dir.join(name)).filter(|path| path.is_file());
        let built = Built {
            rlib: core_dir.join("libhostcopy_core.rlib"),
            deps: core_dir.join("deps"),
            staticlib: capi_dir.join(target.staticlib_name()),
            native_libs,
            shared: ["libhostcopy.so", "hostcopy.dll", "hostcopy.wasm"].into_iter().find_map(existing),
            import_lib: existing("libhostcopy.dll.a"),
        };
        if let Some(missing) = [&built.rlib, &built.staticlib].into_iter().find(|p| !p.is_file()) {
            return Err(format!("the build made no {}", missing.display()));
        }
        Ok(built)
    }

    /// The C libraries of `core/capi` for the target, in its release profile:
    /// the folder they are in, and the native libraries the static one needs.
    pub(crate) fn build_capi(&self, target: &Target) -> Result<(PathBuf, Vec<String>), String> {
        let mut cargo = self.cargo(target, "capi");
        cargo.args(["rustc", "--manifest-path", "core/capi/Cargo.toml", "--release"]);
        if let Libraries::StaticOnly(_) = target.libraries {
            cargo.args(["--crate-type", "staticlib"]);
        }
        let output = run(cargo.args(["--target", target.triple, "--", "--print", "native-static-libs"]))?;
        // With MSVC rustc names `/defaultlib:msvcrt`, the DLL C runtime, for
        // every static library. This one needs only memcpy and memmove, which
        // the program's own C runtime provides, static (/MT) or DLL (/MD) alike,
        // and naming msvcrt would clash with /MT: left out.
        let native_libs = output
            .stderr
            .lines()
            .find_map(|line| line.trim().strip_prefix("note: native-static-libs:"))
            .map(|libs| libs.split_whitespace().filter(|l| !l.starts_with("/defaultlib:")).map(str::to_owned).collect())
            .unwrap_or_default();
        Ok((self.out.join("capi").join(target.triple).join("release"), native_libs))
    }

    /// Step 2, Rust side: `abi-tests/src/layout.rs` compiled alone for the
    /// target, against the core built for it, into an object file.
    pub(crate) fn rust_layout(&self, target: &Target, built: &Built) -> Result<Layout, String> {
        let scratch = self.scratch(target);
        create_dir(&scratch)?;
        let layout_rs = self.root.join("abi-tests/src/layout.rs");
        let root = scratch.join("rust_layout.rs");
        write(&root, &format!("#![no_std]\n#[path = {:?}]\npub mod layout;\n", layout_rs.display().to_string()))?;
        let object = scratch.join("rust_layout.o");
        run(Command::new(rustc())
            .args(["--edition", "2024", "--crate-type", "lib", "--crate-name", "hostcopy_abi_layout"])
            .args(["--target", target.triple, "-C", "codegen-units=1"])
            .arg(format!("--emit=obj={}", object.display()))
            .arg("--extern")
            .arg(format!("hostcopy_core={}", built.rlib.display()))
            .arg(format!("-Ldependency={}", built.deps.display()))
            .arg(&root))?;
        let layout = read_layout(&object, target)?;
        let violations = layout.contract_violations(target.pointer_width);
        if violations.is_empty() {
            Ok(layout)
        } else {
            Err(format!("the Rust layout breaks the contract (is the row right?): {}", violations.join("; ")))
        }
    }

    /// clang for the target, freestanding: the header needs only stddef.h and
    /// stdint.h, which clang brings for every target.
    fn clang(&self, target: &Target, include_dirs: &[PathBuf], defines: &[String]) -> Command {
        let mut clang = Command::new("clang");
        clang.args(target.clang).args(["-ffreestanding", "-std=c11", "-Wall", "-Wextra", "-Werror"]);
        clang.args(defines);
        for dir in include_dirs.iter().chain([&self.root.join("core/include"), &self.c_dir()]) {
            clang.arg("-I").arg(dir);
        }
        clang
    }

    /// Step 2, C side: `layout_report.c` compiled for the target with the
    /// header found first in `include_dirs` (the self-test puts broken copies there).
    pub(crate) fn c_layout(&self, target: &Target, include_dirs: &[PathBuf], object: &Path) -> Result<Layout, String> {
        create_dir(object.parent().expect("a file in a folder"))?;
        let source = self.c_dir().join("layout_report.c");
        run(self.clang(target, include_dirs, &[]).arg("-c").arg(source).arg("-o").arg(object))?;
        read_layout(object, target)
    }

    /// Step 3: the names a C caller on the target links against: the
    /// undefined symbols of `symbol_probe.c` compiled for it.
    pub(crate) fn probe_references(
        &self,
        target: &Target,
        defines: &[String],
        name: &str,
    ) -> Result<Vec<String>, String> {
        let object = self.scratch(target).join(name);
        create_dir(&self.scratch(target))?;
        let source = self.c_dir().join("symbol_probe.c");
        run(self.clang(target, &[], defines).arg("-c").arg(source).arg("-o").arg(&object))?;
        let listing = run(Command::new("llvm-nm")
            .args(["--no-llvm-bc", "--undefined-only", "--format=just-symbols"])
            .arg(&object))?;
        let references = symbols::hostcopy_references(&listing.stdout);
        match references.iter().any(|name| name.contains("hostcopy_fn")) {
            true => Ok(references),
            false => Err(format!("{} references no hostcopy_fn ({})", object.display(), references.join(", "))),
        }
    }

    /// Step 3: the global symbols `libhostcopy.a` defines.
    pub(crate) fn archive_symbols(&self, built: &Built) -> Result<Vec<DefinedSymbol>, String> {
        // Debian 12's llvm-nm (LLVM 14) cannot read the newer bitcode rustc
        // embeds; the machine code's symbol tables are what a linker reads.
        let listing = run(Command::new("llvm-nm")
            .args(["--no-llvm-bc", "--format=sysv", "--defined-only", "--extern-only"])
            .arg(&built.staticlib))?;
        Ok(symbols::parse_sysv(&listing.stdout))
    }

    /// Step 3: the names a C caller references are global functions of the
    /// static library.
    pub(crate) fn symbols(&self, target: &Target, built: &Built) -> Result<Vec<String>, String> {
        let defined = self.archive_symbols(built)?;
        let references = self.probe_references(target, &[], "symbol_probe.o")?;
        check_references(target, &references, &defined)?;
        Ok(references)
    }

    /// The hostcopy names the shared library exports, sorted; `None` where
    /// the target has none.
    pub(crate) fn hostcopy_exports(&self, target: &Target, built: &Built) -> Result<Option<Vec<String>>, String> {
        let Some(shared) = &built.shared else {
            return Ok(None);
        };
        let mut names: Vec<String> = self
            .shared_exports(target, shared)?
            .into_iter()
            .filter(|name| name.starts_with("hostcopy_") && !name.contains("hostcopy_core"))
            .collect();
        names.sort();
        names.dedup();
        Ok(Some(names))
    }

    /// Step 4: the shared library, where the target has one, exports the
    /// plain names (what `dlsym`, `GetProcAddress` and a wasm host look up).
    pub(crate) fn shared_library(&self, target: &Target, built: &Built) -> Result<String, String> {
        let Some(shared) = &built.shared else {
            return match target.tests {
                Tests::Firmware => Ok("none (bare metal)".to_owned()),
                _ => Err("the build made no shared library".to_owned()),
            };
        };
        let exports = self.shared_exports(target, shared)?;
        let missing: Vec<&str> =
            DYNAMIC_EXPORTS.into_iter().filter(|name| !exports.iter().any(|e| e == name)).collect();
        if !missing.is_empty() {
            return Err(format!("{} does not export {}", shared.display(), missing.join(", ")));
        }
        Ok(format!(
            ".{} exports all {}",
            shared.extension().unwrap_or_default().to_string_lossy(),
            DYNAMIC_EXPORTS.len()
        ))
    }

    /// What `dlsym`, `GetProcAddress` or a wasm host finds in the shared library.
    fn shared_exports(&self, target: &Target, shared: &Path) -> Result<Vec<String>, String> {
        let script = self.root.join("abi-tests/wasm/run.mjs").display().to_string();
        let list: &[&str] = match target.format {
            Format::Coff => &["llvm-readobj", "--coff-exports"],
            Format::Wasm => &["node", &script, "--exports"],
            Format::Elf => &["llvm-nm", "--dynamic", "--defined-only", "--format=just-symbols"],
        };
        let listing = run(Command::new(list[0]).args(&list[1..]).arg(shared))?.stdout;
        let names = listing.lines().map(|line| line.trim().trim_start_matches("Name: "));
        Ok(names.map(str::to_owned).collect())
    }

    /// Step 5: the core's contract on the target, by the row's means.
    pub(crate) fn core_tests(&self, target: &Target, built: &Built) -> Result<String, String> {
        let how = self.how_it_runs(target);
        match target.tests {
            Tests::Cargo => {
                let mut cargo = self.cargo(target, "test");
                let output = run(cargo.args(["test", "-p", "hostcopy-core", "--target", target.triple]))?;
                // A runner that starts nothing and exits 0 (wine does) must not pass.
                match passed_tests(&output.stdout) {
                    0 => Err(format!("no test ran:\n{}", output.stdout)),
                    passed => Ok(format!("{passed} tests, {how}")),
                }
            }
            Tests::Firmware => {
                let mut cargo = self.cargo(target, "firmware");
                let manifest = ["--manifest-path", "abi-tests/firmware/Cargo.toml"];
                let output = run(cargo.args(["run", "--target", target.triple]).args(manifest))?;
                Ok(format!("{} cases, {how}", closing_count(&output.stdout)?))
            }
            Tests::WasmExports => {
                let module = built.shared.as_deref().ok_or("the build made no hostcopy.wasm")?;
                let output = self.run_on_target(target, module)?;
                Ok(format!("{} cases, {how}", closing_count(&output.stdout)?))
            }
            Tests::NotRun(why) => Err(format!("the row says the core's tests cannot run here: {why}")),
        }
    }

    /// Step 6: the C consumer linked against the static library (and on
    /// Windows against the DLL) and run on the target; its layout line must
    /// be Rust's. `extra` are the self-test's flags.
    pub(crate) fn c_consumer(
        &self,
        target: &Target,
        built: &Built,
        rust: &Layout,
        extra: &[&str],
    ) -> Result<String, String> {
        let scratch = self.scratch(target);
        create_dir(&scratch)?;
        let suffix = if target.format == Format::Elf { "" } else { ".exe" };
        let suffix = if target.format == Format::Wasm { ".wasm" } else { suffix };
        let mut libraries: Vec<(&str, Vec<&Path>)> = vec![("static", vec![&built.staticlib])];
        if let (Some(import_lib), Some(dll)) = (&built.import_lib, &built.shared) {
            libraries.push(("dll", vec![import_lib, dll]));
        }
        let import_libs = self.import_libs(target)?;
        for (kind, files) in &libraries {
            let dir = scratch.join(format!("consumer-{kind}"));
            create_dir(&dir)?;
            let program = dir.join(format!("consumer{suffix}"));
            let mut cc = Command::new(target.cc[0]);
            cc.current_dir(&self.root).args(&target.cc[1..]);
            if target.cc[0] == "clang" {
                cc.args(target.clang).arg("-ffreestanding");
            }
            cc.args(["-std=c11", "-O1", "-Wall", "-Wextra", "-Werror"]).args(extra);
            cc.arg("-Icore/include").arg("-Iabi-tests/c");
            cc.args(C_SOURCES.iter().chain(target.c_main).map(|file| self.c_dir().join(file)));
            cc.arg(files[0]).args(&import_libs).arg("-o").arg(&program);
            if *kind == "static" {
                cc.args(&built.native_libs);
            } else {
                // Windows finds a DLL next to the program first.
                fs::copy(files[1], dir.join(files[1].file_name().expect("a file")))
                    .map_err(|e| format!("copying {}: {e}", files[1].display()))?;
            }
            run(&mut cc).map_err(|e| format!("linking the C consumer ({kind}): {e}"))?;
            let output = self.run_on_target(target, &program)?;
            let c = Layout::from_consumer_output(&output.stdout)?;
            let differences = c.differences(rust, "C consumer");
            if !differences.is_empty() {
                return Err(format!("the C consumer's layout differs: {}", differences.join("; ")));
            }
        }
        let kinds: Vec<&str> = libraries.iter().map(|(kind, _)| *kind).collect();
        Ok(format!("{}, {}", kinds.join("+"), self.how_it_runs(target)))
    }

    /// The row's import libraries, made from its `.def` files by llvm-dlltool.
    fn import_libs(&self, target: &Target) -> Result<Vec<PathBuf>, String> {
        if target.import_libs.is_empty() {
            return Ok(Vec::new());
        }
        let machine = match target.triple.split('-').next() {
            Some("x86_64") => "i386:x86-64",
            Some("i686") => "i386",
            Some("aarch64") => "arm64",
            arch => return Err(format!("no llvm-dlltool machine for {arch:?}")),
        };
        let dir = self.scratch(target).join("import-libs");
        create_dir(&dir)?;
        let make = |def: &&str| {
            let def = self.c_dir().join(def);
            let lib = dir.join(def.with_extension("lib").file_name().expect("a file"));
            run(Command::new("llvm-dlltool").args(["-m", machine, "-d"]).arg(&def).arg("-l").arg(&lib))?;
            Ok(lib)
        };
        target.import_libs.iter().map(make).collect()
    }

    /// How the row's programs run here, for the table.
    pub(crate) fn how_it_runs(&self, target: &Target) -> String {
        let words: Vec<&str> = target.runner.iter().take(2).filter(|w| !w.starts_with('-')).copied().collect();
        let words: Vec<&str> = words.iter().map(|w| w.rsplit('/').next().unwrap_or(w)).collect();
        if words.is_empty() { "native".to_owned() } else { words.join(" ") }
    }
}

/// Both sides report the same layout.
pub(crate) fn compare_layouts(target: &Target, rust: &Layout, c: &Layout) -> Result<(), String> {
    let differences = c.differences(rust, "C");
    match differences.is_empty() {
        true => Ok(()),
        false => Err(format!(
            "struct hostcopy_args differs between Rust and hostcopy.h (clang {}): {}",
            target.clang.join(" "),
            differences.join("; ")
        )),
    }
}

/// Every name the C caller references is a global function in the library.
pub(crate) fn check_references(
    target: &Target,
    references: &[String],
    defined: &[DefinedSymbol],
) -> Result<(), String> {
    let errors: Vec<String> =
        references.iter().filter_map(|name| symbols::check_defined(defined, name, target.format).err()).collect();
    if errors.is_empty() { Ok(()) } else { Err(errors.join("\n")) }
}

/// What the shared library exports, by these plain names on every target.
const DYNAMIC_EXPORTS: [&str; 3] = ["hostcopy_fn", "hostcopy_rejected", "hostcopy_abi_version"];

fn rustc() -> std::ffi::OsString {
    env::var_os("RUSTC").unwrap_or_else(|| "rustc".into())
}

fn read_layout(object: &Path, target: &Target) -> Result<Layout, String> {
    let bytes = fs::read(object).map_err(|e| format!("reading {}: {e}", object.display()))?;
    Layout::from_object(&bytes, target.endian).map_err(|e| format!("{}: {e}", object.display()))
}

/// Sums cargo test's `test result: ok. N passed` lines.
fn passed_tests(stdout: &str) -> u32 {
    let counts = stdout.lines().filter_map(|line| line.strip_prefix("test result: ok. "));
    counts.filter_map(|rest| rest.split_whitespace().next()?.parse::<u32>().ok()).sum()
}

/// The passed count of a `N passed, 0 failed` closing line (firmware, wasm).
fn closing_count(stdout: &str) -> Result<u32, String> {
    let line = stdout.lines().rev().find(|line| line.contains(" passed, ")).unwrap_or_default();
    match line.split_once(" passed, ") {
        Some((passed, "0 failed")) => passed.trim().parse().map_err(|_| format!("cannot read `{line}`")),
        _ => Err(format!("no `N passed, 0 failed` line in:\n{stdout}")),
    }
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
    fn counts_are_read_from_closing_lines() {
        let cargo = "test result: ok. 9 passed; 0 failed\ntest result: ok. 1 passed; 0 failed\n";
        assert_eq!(passed_tests(cargo), 10);
        assert_eq!(closing_count("layout ...\n623 passed, 0 failed\n"), Ok(623));
        assert!(closing_count("8 passed, 1 failed\n").is_err());
        assert!(closing_count("contract ok\n").is_err());
    }
}
