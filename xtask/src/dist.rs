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
//! The libraries come from `core/capi` (its own workspace, release profile:
//! `panic = "abort"`, LTO, no debug info in the shared library); the
//! pkg-config and CMake files from the templates in `xtask/dist/`. The
//! version is the header's `HOSTCOPY_VERSION_*`, which must equal
//! `core/capi`'s package version. A bare-metal or wasm target gets the static
//! library only; so does a target whose C compiler is not installed (it is
//! the linker of the shared library), which the output says.
//!
//! Cross targets link with the target's gcc through cargo's own per-target
//! setting, `CARGO_TARGET_<TRIPLE>_LINKER` (for example
//! `CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc`),
//! which this sets from the target table in `targets.rs`; a hand-run
//! `cargo build --manifest-path core/capi/Cargo.toml --target T` needs the
//! same variable.
//!
//! `--check` then runs `abi-tests/dist/check.sh` on the host's and the
//! aarch64 archives: C programs built through pkg-config and CMake, static and
//! shared, from the unpacked archive alone; the header under C99 to C++17
//! with pedantic warnings as errors; the aarch64 program under qemu-aarch64.
//!
//! Why not cargo-c (`cargo cinstall`, as rustls-ffi uses): Debian 12's
//! package (0.9.14) embeds cargo 0.66, which cannot read this workspace's
//! edition-2024 manifests; `cargo install cargo-c` compiles the cargo
//! library and its hundreds of dependencies (with OpenSSL and curl headers
//! from apt) on every fresh CI machine, minutes of a 2-core budget for what
//! is here a folder layout, two links and three small templates; and it
//! writes no CMake package, which the templates would still have to add.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use crate::checks::Workspace;
use crate::command;
use crate::targets::{AbiTarget, Need, ObjectFormat, Provides, TARGETS};
use crate::toolchain::{self, Install, Requirement};

pub(crate) const USAGE: &str = "\
cargo xtask dist [--target TRIPLE]... [--check] [--no-install]

  Builds the C libraries of hostcopy (core/capi) for each target into
  target/dist/hostcopy-VERSION-TRIPLE/ and a .tar.gz of it: include/,
  lib/ (static, shared with SONAME and links, or DLL and import library),
  lib/pkgconfig/hostcopy.pc, lib/cmake/hostcopy/. Cross targets link
  with their gcc through CARGO_TARGET_<TRIPLE>_LINKER, set here.
  Default target: this machine's.

  --check       also package aarch64-unknown-linux-gnu and run
                abi-tests/dist/check.sh: C programs through pkg-config
                and CMake, static and shared, from the folders alone;
                the header as C99, C11, C++11, C++17 (pedantic, -Werror);
                the aarch64 program under qemu-aarch64
  --no-install  never install Debian packages";

const TEMPLATE_PC: &str = include_str!("../dist/hostcopy.pc.in");
const TEMPLATE_CONFIG: &str = include_str!("../dist/hostcopyConfig.cmake.in");
const TEMPLATE_CONFIG_VERSION: &str = include_str!("../dist/hostcopyConfigVersion.cmake.in");

const DESCRIPTION: &str = "CUDA host function (CUhostFn) that copies bytes in stream order";

/// The cross target `--check` runs under qemu-user.
const CHECK_CROSS_TARGET: &str = "aarch64-unknown-linux-gnu";

const fn program(name: &'static str, package: &'static str) -> Need {
    Need {
        what: Provides::Program(name),
        package,
    }
}

/// Strips debug info from archives of every object format here.
const LLVM_STRIP: Need = program("llvm-strip", "llvm");

/// What `abi-tests/dist/check.sh` runs, besides the targets' own compilers.
const CHECK_NEEDS: &[Need] = &[
    program("cmake", "cmake"),
    program("pkg-config", "pkg-config"),
    program("gcc", "gcc"),
    program("g++", "g++"),
    program("clang", "clang"),
    program("clang++", "clang"),
    program("readelf", "binutils"),
    program("qemu-aarch64", "qemu-user"),
];

struct Options {
    targets: Vec<String>,
    check: bool,
    install: Install,
}

fn parse_options(args: &[String], host: &str) -> Result<Options, String> {
    let mut options = Options {
        targets: Vec::new(),
        check: false,
        install: Install::WhenPossible,
    };
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--check" => options.check = true,
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
                options.targets.push(target.clone());
            }
            other => return Err(format!("unknown option `{other}`")),
        }
    }
    if options.targets.is_empty() {
        options.targets.push(host.to_owned());
    }
    if options.check {
        for needed in [host, CHECK_CROSS_TARGET] {
            if !options.targets.iter().any(|t| t == needed) {
                options.targets.push(needed.to_owned());
            }
        }
    }
    Ok(options)
}

pub(crate) fn main(args: &[String]) -> ExitCode {
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let workspace = Workspace::locate();
    let options = match parse_options(args, &workspace.host) {
        Ok(options) => options,
        Err(error) => {
            eprintln!("error: {error}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&workspace, &options) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("dist: {error}");
            ExitCode::FAILURE
        }
    }
}

fn run(workspace: &Workspace, options: &Options) -> Result<(), String> {
    let targets: Vec<&AbiTarget> = options
        .targets
        .iter()
        .filter_map(|name| TARGETS.iter().find(|t| t.rust == name))
        .collect();
    let mut requirements = vec![Requirement {
        need: LLVM_STRIP,
        purpose: "strips debug info from the static libraries".to_owned(),
    }];
    for target in &targets {
        if let Some(c) = target.c_toolchain {
            requirements.extend(c.needs.iter().map(|need| Requirement {
                need: *need,
                purpose: format!("links the shared library for {}", target.rust),
            }));
        }
    }
    if options.check {
        requirements.extend(CHECK_NEEDS.iter().map(|need| Requirement {
            need: *need,
            purpose: "builds and runs the C consumers of the dist folders".to_owned(),
        }));
    }
    let rust_targets: Vec<&str> = targets.iter().map(|t| t.rust).collect();
    let (toolbox, errors) = toolchain::prepare(&rust_targets, &requirements, options.install);
    if !errors.is_empty() {
        return Err(errors.join("\n"));
    }
    if let Some(reason) = toolbox.missing_reason(&[LLVM_STRIP]) {
        return Err(reason);
    }

    let version = Version::of(workspace)?;
    let mut folders = Vec::new();
    for target in targets {
        let with_shared = match target.c_toolchain {
            Some(c) => match toolbox.missing_reason(c.needs) {
                None => true,
                Some(reason) => {
                    eprintln!("dist: {}: static library only ({reason})", target.rust);
                    false
                }
            },
            None => false,
        };
        let folder = package(workspace, target, &version, with_shared)?;
        println!("dist: {}", folder.display());
        folders.push((target.rust, folder));
    }

    if options.check {
        if let Some(reason) = toolbox.missing_reason(CHECK_NEEDS) {
            return Err(format!("--check cannot run: {reason}"));
        }
        // The script unpacks the archives: what a vendor downloads.
        let archive_of = |triple: &str| {
            folders
                .iter()
                .find(|(t, _)| *t == triple)
                .map(|(_, folder)| {
                    let mut archive = folder.clone().into_os_string();
                    archive.push(".tar.gz");
                    PathBuf::from(archive)
                })
                .expect("--check adds the host and aarch64 targets")
        };
        let script = workspace.root.join("abi-tests/dist/check.sh");
        let mut check = Command::new("sh");
        check
            .arg(&script)
            .arg(archive_of(&workspace.host))
            .arg(archive_of(CHECK_CROSS_TARGET));
        eprintln!("dist: {}", command::command_line(&check));
        let status = check
            .status()
            .map_err(|e| format!("running {}: {e}", script.display()))?;
        if !status.success() {
            return Err(format!("{} failed ({status})", script.display()));
        }
    }
    Ok(())
}

/// The library version, from the header, checked against `core/capi`.
struct Version {
    major: u32,
    minor: u32,
    patch: u32,
}

impl Version {
    fn of(workspace: &Workspace) -> Result<Self, String> {
        let header = read(&workspace.header_dir().join("hostcopy.h"))?;
        let define = |name: &str| -> Result<u32, String> {
            header
                .lines()
                .find_map(|line| {
                    let value = line.strip_prefix("#define ")?.strip_prefix(name)?;
                    value.strip_prefix(' ')?.trim().parse().ok()
                })
                .ok_or_else(|| format!("hostcopy.h has no `#define {name} <number>`"))
        };
        let version = Version {
            major: define("HOSTCOPY_VERSION_MAJOR")?,
            minor: define("HOSTCOPY_VERSION_MINOR")?,
            patch: define("HOSTCOPY_VERSION_PATCH")?,
        };
        let manifest = read(&workspace.capi_manifest())?;
        let package_version = manifest
            .lines()
            .find_map(|line| line.strip_prefix("version = "))
            .map(|v| v.trim().trim_matches('"'))
            .ok_or("core/capi/Cargo.toml has no `version = ` line")?;
        if package_version != version.to_string() {
            return Err(format!(
                "hostcopy.h says version {version}, core/capi/Cargo.toml {package_version}: \
                 make them equal"
            ));
        }
        Ok(version)
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// Builds the libraries for one target and lays out its folder and archive.
fn package(
    workspace: &Workspace,
    target: &AbiTarget,
    version: &Version,
    with_shared: bool,
) -> Result<PathBuf, String> {
    let build_dir = workspace.root.join("target/dist/build");
    let mut cargo = Command::new(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cargo
        .current_dir(&workspace.root)
        .env("CARGO_TARGET_DIR", &build_dir)
        .arg("rustc")
        .arg("--manifest-path")
        .arg(workspace.capi_manifest())
        .args(["--release", "--target", target.rust])
        .args(["--crate-type", "staticlib"]);
    if with_shared {
        cargo.args(["--crate-type", "cdylib"]);
        if let Some(c) = target.c_toolchain.filter(|_| target.rust != workspace.host) {
            cargo.env(format!("{}LINKER", target.cargo_env_prefix()), c.gcc);
        }
    }
    let built = command::run(cargo.args(["--", "--print", "native-static-libs"]))?;
    let native_libs: Vec<&str> = built
        .stderr
        .lines()
        .find_map(|line| line.trim().strip_prefix("note: native-static-libs:"))
        .map(|libs| libs.split_whitespace().collect())
        .unwrap_or_default();
    let built_dir = build_dir.join(target.rust).join("release");

    let name = format!("hostcopy-{version}-{}", target.rust);
    let dist_dir = workspace.root.join("target/dist");
    let folder = dist_dir.join(&name);
    if folder.exists() {
        fs::remove_dir_all(&folder).map_err(|e| format!("removing {}: {e}", folder.display()))?;
    }
    let lib = folder.join("lib");
    for dir in ["include", "lib/pkgconfig", "lib/cmake/hostcopy"] {
        create_dir(&folder.join(dir))?;
    }
    copy(
        &workspace.header_dir().join("hostcopy.h"),
        &folder.join("include/hostcopy.h"),
    )?;
    let archive = lib.join("libhostcopy.a");
    copy(&built_dir.join("libhostcopy.a"), &archive)?;
    command::run(
        Command::new("llvm-strip")
            .arg("--strip-debug")
            .arg(&archive),
    )?;

    // The shared library, as (path under the prefix, import library, SONAME).
    let mut shared: Option<(String, String, String)> = None;
    if with_shared {
        match target.object_format {
            ObjectFormat::Elf => {
                let real = format!("libhostcopy.so.{version}");
                let soname = format!("libhostcopy.so.{}", version.major);
                copy(&built_dir.join("libhostcopy.so"), &lib.join(&real))?;
                symlink(&real, &lib.join(&soname))?;
                symlink(&soname, &lib.join("libhostcopy.so"))?;
                shared = Some((format!("lib/{real}"), String::new(), soname));
            }
            ObjectFormat::Coff => {
                create_dir(&folder.join("bin"))?;
                copy(
                    &built_dir.join("hostcopy.dll"),
                    &folder.join("bin/hostcopy.dll"),
                )?;
                copy(
                    &built_dir.join("libhostcopy.dll.a"),
                    &lib.join("libhostcopy.dll.a"),
                )?;
                shared = Some((
                    "bin/hostcopy.dll".to_owned(),
                    "lib/libhostcopy.dll.a".to_owned(),
                    String::new(),
                ));
            }
            ObjectFormat::Wasm => {}
        }
    }

    let native = native_libs.join(" ");
    let version_text = version.to_string();
    let pc = |name: &str, libs: &str, private: &str| {
        fill(
            TEMPLATE_PC,
            &[
                ("NAME", name),
                ("DESCRIPTION", DESCRIPTION),
                ("VERSION", &version_text),
                ("LIBS", libs),
                ("LIBS_PRIVATE", private),
            ],
        )
    };
    let static_libs = format!("${{libdir}}/libhostcopy.a {native}");
    let default_pc = if shared.is_some() {
        pc("hostcopy", "-L${libdir} -lhostcopy", &native)
    } else {
        pc("hostcopy", static_libs.trim(), "")
    };
    write(&lib.join("pkgconfig/hostcopy.pc"), &default_pc)?;
    write(
        &lib.join("pkgconfig/hostcopy-static.pc"),
        &pc("hostcopy-static", static_libs.trim(), ""),
    )?;

    let (shared_path, implib, soname) = shared.unwrap_or_default();
    let cmake_libs = native_libs
        .iter()
        .map(|l| l.strip_prefix("-l").unwrap_or(l))
        .collect::<Vec<_>>()
        .join(";");
    let pointer_bytes = (target.pointer_width / 8).to_string();
    let fields = [
        ("VERSION", version_text.as_str()),
        ("MAJOR", &version.major.to_string()),
        ("TARGET", target.rust),
        ("SHARED_LIBRARY", &shared_path),
        ("IMPORT_LIBRARY", &implib),
        ("SONAME", &soname),
        ("STATIC_LINK_LIBRARIES", &cmake_libs),
        ("POINTER_BYTES", &pointer_bytes),
    ]
    .map(|(key, value)| (key, value.to_owned()));
    let fields: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let cmake_dir = lib.join("cmake/hostcopy");
    write(
        &cmake_dir.join("hostcopyConfig.cmake"),
        &fill(TEMPLATE_CONFIG, &fields),
    )?;
    write(
        &cmake_dir.join("hostcopyConfigVersion.cmake"),
        &fill(TEMPLATE_CONFIG_VERSION, &fields),
    )?;

    // tar keeps the links as links.
    command::run(
        Command::new("tar")
            .current_dir(&dist_dir)
            .arg("-czf")
            .arg(format!("{name}.tar.gz"))
            .arg(&name),
    )?;
    Ok(folder)
}

/// Replaces every `@KEY@` of a template; a key left over is an error in the
/// template or in the table, so it panics.
fn fill(template: &str, fields: &[(&str, &str)]) -> String {
    let mut text = template.to_owned();
    for (key, value) in fields {
        text = text.replace(&format!("@{key}@"), value);
    }
    if let Some(start) = text.find('@')
        && let Some(len) = text[start + 1..].find('@')
    {
        let key = &text[start + 1..start + 1 + len];
        assert!(
            !key.chars().all(|c| c.is_ascii_uppercase() || c == '_'),
            "template key @{key}@ has no value"
        );
    }
    text
}

fn read(path: &Path) -> Result<String, String> {
    fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    fs::write(path, text).map_err(|e| format!("writing {}: {e}", path.display()))
}

fn create_dir(dir: &Path) -> Result<(), String> {
    fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))
}

fn copy(from: &Path, to: &Path) -> Result<(), String> {
    fs::copy(from, to)
        .map(drop)
        .map_err(|e| format!("copying {} to {}: {e}", from.display(), to.display()))
}

fn symlink(points_to: &str, link: &Path) -> Result<(), String> {
    std::os::unix::fs::symlink(points_to, link)
        .map_err(|e| format!("linking {} to {points_to}: {e}", link.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_have_a_value_for_every_key() {
        let fields = [
            ("NAME", "hostcopy"),
            ("DESCRIPTION", "d"),
            ("VERSION", "0.1.0"),
            ("MAJOR", "0"),
            ("TARGET", "x86_64-unknown-linux-gnu"),
            ("LIBS", "-lhostcopy"),
            ("LIBS_PRIVATE", "-lc"),
            ("SHARED_LIBRARY", "lib/libhostcopy.so.0.1.0"),
            ("IMPORT_LIBRARY", ""),
            ("SONAME", "libhostcopy.so.0"),
            ("STATIC_LINK_LIBRARIES", "c"),
            ("POINTER_BYTES", "8"),
        ];
        for template in [TEMPLATE_PC, TEMPLATE_CONFIG, TEMPLATE_CONFIG_VERSION] {
            let text = fill(template, &fields);
            assert!(!text.contains("@VERSION@") && !text.contains("@MAJOR@"));
        }
        let pc = fill(TEMPLATE_PC, &fields);
        assert!(pc.contains("Version: 0.1.0\n") && pc.contains("Libs: -lhostcopy\n"));
    }

    #[test]
    #[should_panic(expected = "@SONAME@ has no value")]
    fn a_key_without_a_value_panics() {
        fill("set(x \"@SONAME@\")", &[("VERSION", "1")]);
    }

    #[test]
    fn check_adds_the_host_and_the_qemu_target() {
        let args = ["--check".to_owned()];
        let options = parse_options(&args, "x86_64-unknown-linux-gnu").unwrap();
        assert_eq!(
            options.targets,
            ["x86_64-unknown-linux-gnu", CHECK_CROSS_TARGET]
        );
        assert!(parse_options(&["--target".to_owned()], "x").is_err());
        assert!(parse_options(&["--frobnicate".to_owned()], "x").is_err());
    }
}
