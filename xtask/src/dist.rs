//! `cargo xtask dist`: the C libraries as a folder and a `.tar.gz` per
//! target, for a C vendor to unpack anywhere.
//!
//! Per target, `target/dist/hostcopy-VERSION-TARGET/`:
//!
//! ```text
//! LICENSE-MIT, LICENSE-APACHE           the licence texts (either, at the user's option)
//! include/hostcopy.h                    its first line the SPDX licence identifier
//! lib/libhostcopy.a                     debug info stripped (MSVC: hostcopy.lib)
//! lib/libhostcopy-nomem.a               bare metal, wasm: without memcpy, memmove,
//!                                       memset, memcmp (the C library's instead)
//! lib/libhostcopy.so.MAJOR.MINOR.PATCH  Linux: SONAME libhostcopy.so.MAJOR,
//! lib/libhostcopy.so.MAJOR -> ...       and the two usual links
//! lib/libhostcopy.so -> ...
//! bin/hostcopy.dll                      Windows (GNU): the DLL and
//! lib/libhostcopy.dll.a                 its import library
//! lib/pkgconfig/hostcopy.pc             shared where there is one, else static
//! lib/pkgconfig/hostcopy-static.pc      always the static library
//! lib/cmake/hostcopy/hostcopyConfig.cmake, hostcopyConfigVersion.cmake
//! ```
//!
//! This machine's archive (x86_64 Linux) also carries the staging engine's
//! C library (`driver/capi`, see [`package_stager`]):
//!
//! ```text
//! include/hostcopy_stager.h
//! lib/libhostcopy_stager.a, lib/libhostcopy_stager.so.MAJOR.MINOR.PATCH and links
//! lib/pkgconfig/hostcopy-stager.pc, hostcopy-stager-static.pc
//! lib/cmake/hostcopy/hostcopyStagerTargets.cmake   hostcopy::stager (included by hostcopyConfig)
//! ```
//!
//! The libraries are those `cargo xtask abi` checks: `core/capi` in its
//! release profile, built with the row's cargo settings (a hand-run `cargo
//! build --manifest-path core/capi/Cargo.toml --target T` needs the same
//! `CARGO_TARGET_<TRIPLE>_LINKER`); the pkg-config and CMake files come from
//! `xtask/dist/`; the version is the workspace's (see [`version`]).
//! `--check` runs `abi-tests/dist/check.sh` on the archives of this machine,
//! aarch64 and ppc64le Linux and thumbv7em: the commands of
//! `docs/c-and-firmware.md` and the README's first C program as written,
//! and more (see the script).
//!
//! Not cargo-c (`cargo cinstall`, as rustls-ffi uses): Debian 12's package
//! (0.9.14) embeds cargo 0.66, which cannot read edition-2024 manifests;
//! `cargo install cargo-c` builds the cargo library and hundreds of crates on
//! every fresh CI machine, minutes of a 2-core budget for a folder layout, two
//! links and three templates; and it writes no CMake package.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use crate::checks::{Workspace, create_dir, write};
use crate::command::run;
use crate::setup;
use crate::targets::{Format, TARGETS, Target, parse_args};

pub(crate) const USAGE: &str = "\
cargo xtask dist [--target TRIPLE]... [--check]

  Builds the C libraries of hostcopy (core/capi) for each target into
  target/dist/hostcopy-VERSION-TRIPLE/ and a .tar.gz of it: the licence
  texts (LICENSE-MIT, LICENSE-APACHE), include/, lib/ (static, shared
  with SONAME and links, or DLL and import library; on bare metal also
  libhostcopy-nomem.a), lib/pkgconfig/hostcopy.pc, lib/cmake/hostcopy/;
  this machine's archive also the staging engine's C library
  (hostcopy_stager.h, libhostcopy_stager, hostcopy-stager.pc,
  hostcopy::stager).
  VERSION is the workspace's (Cargo.toml). Default target: this
  machine's. Any target of `cargo xtask abi` is accepted. The last
  lines printed are the archives' paths (`dist: wrote PATH`).

  --check       also package aarch64 and ppc64le Linux and
                thumbv7em-none-eabihf, and run abi-tests/dist/check.sh:
                the licence texts and SPDX line in every archive,
                docs/c-and-firmware.md's commands as written (pkg-config, CMake,
                a shared library embedding the static one, a firmware
                under qemu-system-arm), the header as C99 to C++17
                (pedantic, -Werror), the cross programs under qemu-user";

const TEMPLATE_PC: &str = include_str!("../dist/hostcopy.pc.in");
const TEMPLATE_CONFIG: &str = include_str!("../dist/hostcopyConfig.cmake.in");
const TEMPLATE_CONFIG_VERSION: &str = include_str!("../dist/hostcopyConfigVersion.cmake.in");
const TEMPLATE_STAGER_TARGETS: &str = include_str!("../dist/hostcopyStagerTargets.cmake.in");
const DESCRIPTION: &str = "CUDA host function (CUhostFn) that copies bytes in stream order";
/// The licence texts, from the workspace's root to the archive's.
const LICENCES: &[&str] = &["LICENSE-MIT", "LICENSE-APACHE"];

/// The targets `--check` packages besides this machine's, and what its script runs.
const CHECK_TARGETS: &[&str] = &["aarch64-unknown-linux-gnu", "powerpc64le-unknown-linux-gnu", "thumbv7em-none-eabihf"];
const CHECK_APT: &[&str] = &[
    "cmake",
    "pkg-config",
    "g++",
    "binutils",
    "qemu-user",
    "qemu-system-arm",
    "gcc-arm-none-eabi",
    "libnewlib-arm-none-eabi",
];

pub(crate) fn main(args: &[String]) -> ExitCode {
    let workspace = Workspace::locate();
    let (check, mut triples) = match parse_args(args, "--check", USAGE) {
        Ok(parsed) => parsed,
        Err(code) => return ExitCode::from(code),
    };
    if triples.is_empty() || check {
        triples.push(&workspace.host);
    }
    if check {
        triples.extend(CHECK_TARGETS);
    }
    let targets: Vec<&Target> = TARGETS.iter().filter(|t| triples.contains(&t.triple)).collect();
    let errors = dist(&workspace, &targets, check);
    for error in &errors {
        eprintln!("dist: {error}");
    }
    if errors.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

/// Packages every target, then checks; the errors of all of them.
fn dist(workspace: &Workspace, targets: &[&Target], check: bool) -> Vec<String> {
    if let Err(error) = setup::prepare(targets, if check { CHECK_APT } else { &[] }) {
        return vec![format!("set-up: {error}")];
    }
    let version = match version(workspace) {
        Ok(version) => version,
        Err(error) => return vec![error],
    };
    let (mut archives, mut errors) = (Vec::new(), Vec::new());
    for target in targets {
        match package(workspace, target, &version) {
            Ok(folder) => archives.push(archive_of(&folder)),
            Err(error) => errors.push(format!("{}: {error}", target.triple)),
        }
    }
    // Last, where the reader looks: the archives to copy or unpack.
    for archive in &archives {
        println!("dist: wrote {}", archive.display());
    }
    if check && errors.is_empty() {
        // This machine's archive first: the script runs the documents' C commands on it.
        let script = workspace.root.join("abi-tests/dist/check.sh");
        let status = Command::new("sh").arg(&script).args(&archives).status();
        if !status.as_ref().is_ok_and(|s| s.success()) {
            errors.push(format!("{} failed ({status:?})", script.display()));
        }
    }
    errors
}

/// The `.tar.gz` beside a target's folder, which `package` writes.
fn archive_of(folder: &Path) -> PathBuf {
    let mut name = folder.file_name().unwrap_or_default().to_owned();
    name.push(".tar.gz");
    folder.with_file_name(name)
}

/// The version the archives carry, from one place: `version` in the
/// `[workspace.package]` table of the root `Cargo.toml`, which
/// hostcopy-core and hostcopy-driver inherit. The copies that cannot inherit
/// it must say the same: `core/capi`'s own (a workspace of its own; its major
/// number is the SONAME's) and the header's `HOSTCOPY_VERSION_*`.
fn version(workspace: &Workspace) -> Result<(String, u32), String> {
    let root = read(&workspace.root.join("Cargo.toml"))?;
    let version = workspace_version(&root).ok_or("Cargo.toml has no `version` in [workspace.package]")?;
    let header = read(&workspace.root.join("core/include/hostcopy.h"))?;
    let parts = ["MAJOR", "MINOR", "PATCH"].map(|part| {
        let define = format!("#define HOSTCOPY_VERSION_{part} ");
        header.lines().find_map(|line| line.strip_prefix(&define)?.trim().parse::<u32>().ok())
    });
    let [Some(major), Some(minor), Some(patch)] = parts else {
        return Err("hostcopy.h lacks a `#define HOSTCOPY_VERSION_MAJOR` (MINOR, PATCH) number".to_owned());
    };
    let capi = read(&workspace.root.join("core/capi/Cargo.toml"))?;
    let capi = capi.lines().find_map(|line| line.strip_prefix("version = ")).unwrap_or_default();
    let mut disagree = Vec::new();
    if format!("{major}.{minor}.{patch}") != version {
        disagree.push(format!("core/include/hostcopy.h says {major}.{minor}.{patch}"));
    }
    if capi.trim().trim_matches('"') != version {
        disagree.push(format!("core/capi/Cargo.toml says {}", capi.trim()));
    }
    match disagree.is_empty() {
        true => Ok((version.to_owned(), major)),
        false => Err(format!("the workspace's version is {version}, but {}", disagree.join(" and "))),
    }
}

/// `version` of the `[workspace.package]` table of a root `Cargo.toml`.
fn workspace_version(manifest: &str) -> Option<&str> {
    let table = manifest.split("\n[").find(|table| table.starts_with("workspace.package]"))?;
    let line = table.lines().find_map(|line| line.strip_prefix("version = "))?;
    Some(line.trim().trim_matches('"'))
}

/// Builds the libraries for one target and lays out its folder and archive.
fn package(workspace: &Workspace, target: &Target, (version, major): &(String, u32)) -> Result<PathBuf, String> {
    let (built, native_libs) = workspace.build_capi(target)?;
    let name = format!("hostcopy-{version}-{}", target.triple);
    let dist_dir = workspace.root.join("target/dist");
    let folder = dist_dir.join(&name);
    let _ = fs::remove_dir_all(&folder);
    let lib = folder.join("lib");
    for dir in ["include", "lib/pkgconfig", "lib/cmake/hostcopy"] {
        create_dir(&folder.join(dir))?;
    }
    for licence in LICENCES {
        copy(&workspace.root.join(licence), &folder.join(licence))?;
    }
    copy(&workspace.root.join("core/include/hostcopy.h"), &folder.join("include/hostcopy.h"))?;
    let staticlib = target.staticlib_name();
    copy(&built.join(staticlib), &lib.join(staticlib))?;
    // Debian 12's llvm-strip (LLVM 14) cannot rewrite the wasm objects of
    // today's rustc ("invalid relocation offset"): that archive keeps its
    // debug info (a linker of wasm drops it unless asked to keep it).
    if target.format != Format::Wasm {
        run(Command::new("llvm-strip").arg("--strip-debug").arg(lib.join(staticlib)))?;
    }
    without_c_memory_functions(&lib.join(staticlib), &lib.join(NOMEM))?;

    // The shared library, as (path under the prefix, import library, SONAME).
    let (mut shared, mut implib, mut soname) = (String::new(), String::new(), String::new());
    if target.format == Format::Elf && built.join("libhostcopy.so").is_file() {
        let real = format!("libhostcopy.so.{version}");
        soname = format!("libhostcopy.so.{major}");
        copy(&built.join("libhostcopy.so"), &lib.join(&real))?;
        symlink(&real, &lib.join(&soname))?;
        symlink(&soname, &lib.join("libhostcopy.so"))?;
        shared = format!("lib/{real}");
    } else if target.format == Format::Coff && built.join("hostcopy.dll").is_file() {
        create_dir(&folder.join("bin"))?;
        copy(&built.join("hostcopy.dll"), &folder.join("bin/hostcopy.dll"))?;
        copy(&built.join("libhostcopy.dll.a"), &lib.join("libhostcopy.dll.a"))?;
        (shared, implib) = ("bin/hostcopy.dll".to_owned(), "lib/libhostcopy.dll.a".to_owned());
    }

    let native = native_libs.join(" ");
    let pc = |name: &str, libs: &str, private: &str| {
        let fields = [
            ("NAME", name),
            ("DESCRIPTION", DESCRIPTION),
            ("VERSION", version.as_str()),
            ("LIBS", libs),
            ("LIBS_PRIVATE", private),
        ];
        fill(TEMPLATE_PC, &fields)
    };
    let static_libs = format!("${{libdir}}/{staticlib} {native}");
    // A program linked through pkg-config runs where it was built: the
    // run-time search path names the folder (see the template's comment).
    let shared_libs = match target.format {
        Format::Elf => "-L${libdir} -Wl,-rpath,${libdir} -lhostcopy",
        _ => "-L${libdir} -lhostcopy",
    };
    let default_pc = match shared.is_empty() {
        true => pc("hostcopy", static_libs.trim(), ""),
        false => pc("hostcopy", shared_libs, &native),
    };
    write(&lib.join("pkgconfig/hostcopy.pc"), &default_pc)?;
    write(&lib.join("pkgconfig/hostcopy-static.pc"), &pc("hostcopy-static", static_libs.trim(), ""))?;

    let cmake_libs: Vec<&str> = native_libs.iter().map(|l| l.strip_prefix("-l").unwrap_or(l)).collect();
    let (major, pointer_bytes) = (major.to_string(), (target.pointer_width / 8).to_string());
    let fields = [
        ("VERSION", version.as_str()),
        ("MAJOR", &major),
        ("TARGET", target.triple),
        ("STATIC_LIBRARY", &format!("lib/{staticlib}")),
        ("SHARED_LIBRARY", &shared),
        ("IMPORT_LIBRARY", &implib),
        ("SONAME", &soname),
        ("STATIC_LINK_LIBRARIES", &cmake_libs.join(";")),
        ("POINTER_BYTES", &pointer_bytes),
    ];
    let cmake_dir = lib.join("cmake/hostcopy");
    write(&cmake_dir.join("hostcopyConfig.cmake"), &fill(TEMPLATE_CONFIG, &fields))?;
    write(&cmake_dir.join("hostcopyConfigVersion.cmake"), &fill(TEMPLATE_CONFIG_VERSION, &fields))?;
    if target.triple == workspace.host && target.format == Format::Elf && target.pointer_width == 64 {
        package_stager(workspace, &folder, version, &major)?;
    }
    // tar keeps the links as links; the archive is `archive_of(&folder)`.
    run(Command::new("tar").current_dir(&dist_dir).arg("-czf").arg(format!("{name}.tar.gz")).arg(&name))?;
    println!("dist: {}", folder.display());
    print_sizes(&folder, &[&format!("lib/{staticlib}"), &format!("lib/{NOMEM}"), &shared])?;
    Ok(folder)
}

/// The staging engine's C library (`driver/capi`, release, no features)
/// into `folder`: its header, static and shared libraries, pkg-config
/// files and CMake targets. Built for this machine only: the engine needs
/// std, threads and a 64-bit host, and cross builds of it are not set up.
fn package_stager(workspace: &Workspace, folder: &Path, version: &str, major: &str) -> Result<(), String> {
    let capi = workspace.root.join("driver/capi");
    let target_dir = capi.join("target");
    let mut cargo = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cargo.current_dir(&workspace.root).arg("rustc").arg("--manifest-path").arg(capi.join("Cargo.toml"));
    cargo.args(["--release", "--lib", "--target-dir"]).arg(&target_dir);
    let output = run(cargo.args(["--", "--print", "native-static-libs"]))?;
    // Less -lcuda: the library opens libcuda at run time and takes nothing
    // from it (driver/build.rs), and a machine without a driver has none.
    let native: Vec<&str> = output
        .stderr
        .lines()
        .find_map(|line| line.trim().strip_prefix("note: native-static-libs:"))
        .map(|libs| libs.split_whitespace().filter(|l| *l != "-lcuda").collect())
        .unwrap_or_default();
    let built = target_dir.join("release");
    let lib = folder.join("lib");
    copy(&capi.join("include/hostcopy_stager.h"), &folder.join("include/hostcopy_stager.h"))?;
    copy(&built.join("libhostcopy_stager.a"), &lib.join("libhostcopy_stager.a"))?;
    run(Command::new("llvm-strip").arg("--strip-debug").arg(lib.join("libhostcopy_stager.a")))?;
    let (real, soname) = (format!("libhostcopy_stager.so.{version}"), format!("libhostcopy_stager.so.{major}"));
    copy(&built.join("libhostcopy_stager.so"), &lib.join(&real))?;
    symlink(&real, &lib.join(&soname))?;
    symlink(&soname, &lib.join("libhostcopy_stager.so"))?;

    let description = "Staged GPU <-> pageable host memory transfers at the link's speed (hostcopy_stager.h)";
    let native = native.join(" ");
    let pc = |name: &str, libs: &str, private: &str| {
        let fields = [
            ("NAME", name),
            ("DESCRIPTION", description),
            ("VERSION", version),
            ("LIBS", libs),
            ("LIBS_PRIVATE", private),
        ];
        fill(TEMPLATE_PC, &fields)
    };
    let shared = pc("hostcopy-stager", "-L${libdir} -Wl,-rpath,${libdir} -lhostcopy_stager", &native);
    let static_libs = format!("${{libdir}}/libhostcopy_stager.a {native}");
    write(&lib.join("pkgconfig/hostcopy-stager.pc"), &shared)?;
    write(&lib.join("pkgconfig/hostcopy-stager-static.pc"), &pc("hostcopy-stager-static", static_libs.trim(), ""))?;
    let cmake_libs: Vec<&str> = native.split_whitespace().map(|l| l.strip_prefix("-l").unwrap_or(l)).collect();
    let fields = [
        ("VERSION", version),
        ("TARGET", workspace.host.as_str()),
        ("SONAME", soname.as_str()),
        ("STATIC_LINK_LIBRARIES", &cmake_libs.join(";")),
    ];
    write(&lib.join("cmake/hostcopy/hostcopyStagerTargets.cmake"), &fill(TEMPLATE_STAGER_TARGETS, &fields))?;
    println!("dist: {} (and the staging engine's C library)", folder.display());
    print_sizes(folder, &["lib/libhostcopy_stager.a", &format!("lib/{real}")])
}

/// The static library without the C library's memory functions, for a
/// firmware whose C library provides them.
const NOMEM: &str = "libhostcopy-nomem.a";

/// The functions compiler_builtins defines for targets without a C library
/// (bare metal, wasm32), each as a weak symbol in an archive member of its own.
const C_MEMORY_FUNCTIONS: &[&str] = &["memcpy", "memmove", "memset", "memcmp", "bcmp"];

/// Writes `nomem`, a copy of `archive` without the members that define the C
/// memory functions (and their `__aeabi_` forms on Arm), where `archive` has
/// any. A linker takes an archive member only for a symbol still undefined
/// when it reaches the archive, and keeps a weak definition it has, so with
/// `libhostcopy.a` a firmware gets these for its own calls too and never its C
/// library's (newlib's): from `nomem`, hostcopy's calls go to the C library.
fn without_c_memory_functions(archive: &Path, nomem: &Path) -> Result<(), String> {
    let nm = ["--no-llvm-bc", "-A", "--defined-only", "--extern-only"];
    let listing = run(Command::new("llvm-nm").args(nm).arg(archive))?.stdout;
    let is_memory_function = |name: &str| {
        let name = name.strip_prefix("__aeabi_").map(|n| n.trim_end_matches(['4', '8'])).unwrap_or(name);
        C_MEMORY_FUNCTIONS.contains(&name) || name == "memclr"
    };
    // `archive:member: value class name`
    let symbols: Vec<(&str, &str)> = listing
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(&format!("{}:", archive.display()))?;
            let (member, symbol) = rest.split_once(": ")?;
            Some((member, symbol.split_whitespace().last()?))
        })
        .collect();
    // Where the C library provides them (Linux), the archive defines at most
    // the `__aeabi_` forms, which call the C library's: nothing to leave out.
    if !symbols.iter().any(|(_, s)| C_MEMORY_FUNCTIONS.contains(s)) {
        return Ok(());
    }
    let mut members: Vec<&str> = symbols.iter().filter(|(_, s)| is_memory_function(s)).map(|(m, _)| *m).collect();
    members.sort_unstable();
    members.dedup();
    // Dropping a member that defines anything else would drop that too.
    let others: Vec<&str> =
        symbols.iter().filter(|(m, s)| members.contains(m) && !is_memory_function(s)).map(|(_, s)| *s).collect();
    if !others.is_empty() {
        return Err(format!("{}: members of memory functions also define {}", archive.display(), others.join(", ")));
    }
    copy(archive, nomem)?;
    run(Command::new("llvm-ar").arg("d").arg(nomem).args(&members))?;
    Ok(())
}

/// Prints the size of each library file and, for a shared library, of its code.
fn print_sizes(folder: &Path, files: &[&str]) -> Result<(), String> {
    for file in files.iter().filter(|f| !f.is_empty()).map(|f| folder.join(f)).filter(|f| f.is_file()) {
        let bytes = fs::metadata(&file).map_err(|e| format!("{}: {e}", file.display()))?.len();
        let mut line = format!("dist:   {} {bytes} bytes", file.strip_prefix(folder).unwrap_or(&file).display());
        if !file.extension().is_some_and(|e| e == "a" || e == "lib") {
            // llvm-size's Berkeley columns: text data bss dec hex filename.
            let size = run(Command::new("llvm-size").arg(&file))?.stdout;
            let text = size.lines().nth(1).and_then(|l| l.split_whitespace().next()).unwrap_or("?");
            line += &format!(", code and read-only data {text} bytes");
        }
        println!("{line}");
    }
    Ok(())
}

/// Replaces every `@KEY@` of a template; a key left over is an error in the
/// template or in the table, so it panics.
fn fill(template: &str, fields: &[(&str, &str)]) -> String {
    let mut text = template.to_owned();
    for (key, value) in fields {
        text = text.replace(&format!("@{key}@"), value);
    }
    let leftover = text
        .split('@')
        .skip(1)
        .step_by(2)
        .find(|key| !key.is_empty() && key.chars().all(|c| c.is_ascii_uppercase() || c == '_'));
    assert!(leftover.is_none(), "template key @{}@ has no value", leftover.unwrap_or_default());
    text
}

fn read(path: &Path) -> Result<String, String> {
    fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))
}

fn copy(from: &Path, to: &Path) -> Result<(), String> {
    let copied = fs::copy(from, to);
    copied.map(drop).map_err(|e| format!("copying {} to {}: {e}", from.display(), to.display()))
}

fn symlink(points_to: &str, link: &Path) -> Result<(), String> {
    let linked = std::os::unix::fs::symlink(points_to, link);
    linked.map_err(|e| format!("linking {} to {points_to}: {e}", link.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_have_a_value_for_every_key_and_a_missing_one_panics() {
        let keys = ["NAME", "DESCRIPTION", "VERSION", "MAJOR", "TARGET", "LIBS", "LIBS_PRIVATE", "SHARED_LIBRARY"];
        let more = ["IMPORT_LIBRARY", "SONAME", "STATIC_LINK_LIBRARIES", "POINTER_BYTES", "STATIC_LIBRARY"];
        let fields: Vec<(&str, &str)> = keys.iter().chain(&more).map(|key| (*key, "1")).collect();
        for template in [TEMPLATE_PC, TEMPLATE_CONFIG, TEMPLATE_CONFIG_VERSION, TEMPLATE_STAGER_TARGETS] {
            assert!(!fill(template, &fields).contains("@VERSION@"));
        }
        assert!(std::panic::catch_unwind(|| fill("set(x \"@SONAME@\")", &fields[..3])).is_err());
    }

    #[test]
    fn the_archive_is_the_folder_name_with_tar_gz_beside_it() {
        let folder = Path::new("/w/target/dist/hostcopy-0.1.0-x86_64-unknown-linux-gnu");
        let archive = Path::new("/w/target/dist/hostcopy-0.1.0-x86_64-unknown-linux-gnu.tar.gz");
        assert_eq!(archive_of(folder), archive);
    }

    #[test]
    fn the_version_is_read_from_the_workspace_table_only() {
        let manifest = "[workspace]\nmembers = []\n\n[workspace.package]\nedition = \"2024\"\nversion = \"1.2.3\"\n\n\
                        [workspace.dependencies]\nfoo = { version = \"9.9.9\" }\n";
        assert_eq!(workspace_version(manifest), Some("1.2.3"));
        assert_eq!(workspace_version("[package]\nversion = \"1.0.0\"\n"), None);
        let root = include_str!("../../Cargo.toml");
        assert!(workspace_version(root).is_some_and(|v| v.split('.').count() == 3), "{root}");
    }
}
