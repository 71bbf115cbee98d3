//! `cargo xtask dist`: the C libraries as a folder and a `.tar.gz` per
//! target, for a C vendor to unpack anywhere.
//!
//! Per target, `target/dist/hostcopy-VERSION-TARGET/`:
//!
//! ```text
//! include/hostcopy.h
//! lib/libhostcopy.a                     debug info stripped
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
//! The libraries are those `cargo xtask abi` checks: `core/capi` in its
//! release profile, built with the row's cargo settings (a hand-run `cargo
//! build --manifest-path core/capi/Cargo.toml --target T` needs the same
//! `CARGO_TARGET_<TRIPLE>_LINKER`); the pkg-config and CMake files come from
//! `xtask/dist/`; the version is the header's, which must be `core/capi`'s.
//! `--check` runs `abi-tests/dist/check.sh` on the host's and the aarch64
//! archives (pkg-config and CMake consumers, static and shared, C99 to C++17,
//! aarch64 under qemu-aarch64).
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
  target/dist/hostcopy-VERSION-TRIPLE/ and a .tar.gz of it: include/,
  lib/ (static, shared with SONAME and links, or DLL and import library),
  lib/pkgconfig/hostcopy.pc, lib/cmake/hostcopy/. Default target: this
  machine's.

  --check       also package aarch64-unknown-linux-gnu and run
                abi-tests/dist/check.sh: C programs through pkg-config
                and CMake, static and shared, from the folders alone;
                the header as C99, C11, C++11, C++17 (pedantic, -Werror);
                the aarch64 program under qemu-aarch64";

const TEMPLATE_PC: &str = include_str!("../dist/hostcopy.pc.in");
const TEMPLATE_CONFIG: &str = include_str!("../dist/hostcopyConfig.cmake.in");
const TEMPLATE_CONFIG_VERSION: &str = include_str!("../dist/hostcopyConfigVersion.cmake.in");
const DESCRIPTION: &str = "CUDA host function (CUhostFn) that copies bytes in stream order";

/// The cross target `--check` runs under qemu-user, and what its script runs.
const CHECK_CROSS_TARGET: &str = "aarch64-unknown-linux-gnu";
const CHECK_APT: &[&str] = &["cmake", "pkg-config", "g++", "binutils", "qemu-user"];

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
        triples.push(CHECK_CROSS_TARGET);
    }
    let targets: Vec<&Target> = TARGETS.iter().filter(|t| triples.contains(&t.triple)).collect();
    match dist(&workspace, &targets, check) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("dist: {error}");
            ExitCode::FAILURE
        }
    }
}

fn dist(workspace: &Workspace, targets: &[&Target], check: bool) -> Result<(), String> {
    setup::prepare(targets, if check { CHECK_APT } else { &[] })?;
    let version = version(workspace)?;
    let mut archives = Vec::new();
    for target in targets {
        let folder = package(workspace, target, &version)?;
        println!("dist: {}", folder.display());
        archives.push(PathBuf::from(format!("{}.tar.gz", folder.display())));
    }
    if check {
        let script = workspace.root.join("abi-tests/dist/check.sh");
        let host = archives[targets.iter().position(|t| t.triple == workspace.host).expect("added")].clone();
        let cross = archives[targets.iter().position(|t| t.triple == CHECK_CROSS_TARGET).expect("added")].clone();
        let status = Command::new("sh").arg(&script).arg(host).arg(cross).status();
        if !status.as_ref().is_ok_and(|s| s.success()) {
            return Err(format!("{} failed ({status:?})", script.display()));
        }
    }
    Ok(())
}

/// The library version `MAJOR.MINOR.PATCH` from the header, checked against `core/capi`.
fn version(workspace: &Workspace) -> Result<(String, u32), String> {
    let header = read(&workspace.root.join("core/include/hostcopy.h"))?;
    let parts = ["MAJOR", "MINOR", "PATCH"].map(|part| {
        let define = format!("#define HOSTCOPY_VERSION_{part} ");
        header.lines().find_map(|line| line.strip_prefix(&define)?.trim().parse::<u32>().ok())
    });
    let [Some(major), Some(minor), Some(patch)] = parts else {
        return Err("hostcopy.h lacks a `#define HOSTCOPY_VERSION_MAJOR` (MINOR, PATCH) number".to_owned());
    };
    let version = format!("{major}.{minor}.{patch}");
    let manifest = read(&workspace.root.join("core/capi/Cargo.toml"))?;
    let package = manifest.lines().find_map(|line| line.strip_prefix("version = ")).unwrap_or_default();
    match package.trim().trim_matches('"') == version {
        true => Ok((version, major)),
        false => Err(format!("hostcopy.h says version {version}, core/capi/Cargo.toml {package}")),
    }
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
    copy(&workspace.root.join("core/include/hostcopy.h"), &folder.join("include/hostcopy.h"))?;
    copy(&built.join("libhostcopy.a"), &lib.join("libhostcopy.a"))?;
    run(Command::new("llvm-strip").arg("--strip-debug").arg(lib.join("libhostcopy.a")))?;

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
    let static_libs = format!("${{libdir}}/libhostcopy.a {native}");
    let default_pc = match shared.is_empty() {
        true => pc("hostcopy", static_libs.trim(), ""),
        false => pc("hostcopy", "-L${libdir} -lhostcopy", &native),
    };
    write(&lib.join("pkgconfig/hostcopy.pc"), &default_pc)?;
    write(&lib.join("pkgconfig/hostcopy-static.pc"), &pc("hostcopy-static", static_libs.trim(), ""))?;

    let cmake_libs: Vec<&str> = native_libs.iter().map(|l| l.strip_prefix("-l").unwrap_or(l)).collect();
    let (major, pointer_bytes) = (major.to_string(), (target.pointer_width / 8).to_string());
    let fields = [
        ("VERSION", version.as_str()),
        ("MAJOR", &major),
        ("TARGET", target.triple),
        ("SHARED_LIBRARY", &shared),
        ("IMPORT_LIBRARY", &implib),
        ("SONAME", &soname),
        ("STATIC_LINK_LIBRARIES", &cmake_libs.join(";")),
        ("POINTER_BYTES", &pointer_bytes),
    ];
    let cmake_dir = lib.join("cmake/hostcopy");
    write(&cmake_dir.join("hostcopyConfig.cmake"), &fill(TEMPLATE_CONFIG, &fields))?;
    write(&cmake_dir.join("hostcopyConfigVersion.cmake"), &fill(TEMPLATE_CONFIG_VERSION, &fields))?;
    // tar keeps the links as links.
    run(Command::new("tar").current_dir(&dist_dir).arg("-czf").arg(format!("{name}.tar.gz")).arg(&name))?;
    Ok(folder)
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
        let more = ["IMPORT_LIBRARY", "SONAME", "STATIC_LINK_LIBRARIES", "POINTER_BYTES"];
        let fields: Vec<(&str, &str)> = keys.iter().chain(&more).map(|key| (*key, "1")).collect();
        for template in [TEMPLATE_PC, TEMPLATE_CONFIG, TEMPLATE_CONFIG_VERSION] {
            assert!(!fill(template, &fields).contains("@VERSION@"));
        }
        assert!(std::panic::catch_unwind(|| fill("set(x \"@SONAME@\")", &fields[..3])).is_err());
    }
}
