//! `cargo xtask release`: the release artifacts of one version in one
//! folder, and (`--check`) what each of them holds.
//!
//! Into `target/release-artifacts/hostcopy-VERSION/`:
//!
//! ```text
//! hostcopy-core-VERSION.crate, hostcopy-driver-VERSION.crate   cargo package (no compile)
//! hostcopy-VERSION.tar.gz                                      the Python sdist (maturin sdist, no compile)
//! hostcopy-VERSION-cp39-abi3-manylinux_2_17_ARCH.whl           driver/python/build-wheel.sh: release,
//!                                                              linked by zig against glibc 2.17's symbols,
//!                                                              maturin's auditwheel check
//! c/*-VERSION-TRIPLE.tar.gz                                    the C archives in target/dist (this
//!                                                              machine's made again by `cargo xtask dist`,
//!                                                              the cross ones as `dist --check` left them)
//! ```
//!
//! The wheel is the one compile (about 40 CPU seconds on a fresh machine):
//! the Python tests run on a debug build with the simulated driver
//! (`driver/python/ci.sh`), which no package index should get.
//!
//! `--check`, every artifact: the licence texts, byte for byte the
//! repository's; every C header shipped opening with the SPDX line, and
//! equal to the repository's; the name, the version (the workspace's) and
//! the licence expression in its metadata (a crate's `Cargo.toml`, the
//! sdist's `PKG-INFO`, the wheel's `METADATA`, a `.pc` file's `Version`).
//! The wheel besides: its tag (`cp39-abi3`, `manylinux_2_17` for this
//! machine's architecture) against its extension's glibc symbol versions
//! and the libraries it needs (the manylinux2014 list; never libcuda), and
//! `pip install` of it into a fresh virtual environment, offline, then
//! `import hostcopy` from outside the source tree. Every failure is
//! collected and reported together.

use std::collections::BTreeSet;
use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use crate::checks::{Workspace, create_dir};
use crate::command::run;
use crate::dist;
use crate::report::progress;

pub(crate) const USAGE: &str = "\
cargo xtask release [--check]

  Gathers the release artifacts of the workspace's version into
  target/release-artifacts/hostcopy-VERSION/: the .crate files of
  hostcopy-core and hostcopy-driver (cargo package), the Python sdist
  (maturin sdist) and its abi3 manylinux_2_17 wheel
  (driver/python/build-wheel.sh: a release build linked by zig), and the
  C archives of target/dist (this machine's made by `cargo xtask dist`).

  --check       also check what each holds: the licence texts (the
                repository's), the SPDX line of every C header shipped, the
                name, version and licence expression of its metadata; the
                wheel's tag against its extension's glibc symbol versions
                and libraries; the wheel installed offline into a fresh
                virtual environment and imported";

/// The licence expression every artifact states (the workspace's `license`).
const LICENCE: &str = "MIT OR Apache-2.0";
/// The licence texts, at the root of the repository and of every artifact.
const LICENCES: [&str; 2] = ["LICENSE-MIT", "LICENSE-APACHE"];
/// The first line of every C header shipped.
const SPDX: &str = "/* SPDX-License-Identifier: MIT OR Apache-2.0 */";
/// The crates a Rust user depends on.
const CRATES: [&str; 2] = ["hostcopy-core", "hostcopy-driver"];
/// The Python distribution's name.
const PYTHON_NAME: &str = "hostcopy";
/// The manylinux tag build-wheel.sh builds for, and the newest glibc and
/// libgcc symbol versions it allows (PEP 599, manylinux2014).
const MANYLINUX: &str = "manylinux_2_17";
const NEWEST_GLIBC: (u32, u32) = (2, 17);
const NEWEST_GCC: (u32, u32) = (4, 8);
/// The libraries a manylinux2014 wheel may need from the system (PEP 599),
/// and the dynamic loader.
const MANYLINUX_LIBRARIES: &[&str] = &[
    "libgcc_s.so.1",
    "libstdc++.so.6",
    "libm.so.6",
    "libdl.so.2",
    "librt.so.1",
    "libc.so.6",
    "libnsl.so.1",
    "libutil.so.1",
    "libpthread.so.0",
    "libresolv.so.2",
    "libX11.so.6",
    "libXext.so.6",
    "libXrender.so.1",
    "libICE.so.6",
    "libSM.so.6",
    "libGL.so.1",
    "libgobject-2.0.so.0",
    "libgthread-2.0.so.0",
    "libglib-2.0.so.0",
    "ld-linux-x86-64.so.2",
    "ld-linux-aarch64.so.1",
];

pub(crate) fn main(args: &[String]) -> ExitCode {
    let mut check = false;
    for arg in args {
        match arg.as_str() {
            "--check" => check = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            other => {
                eprintln!("error: unknown option `{other}`\n\n{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    let errors = release(&Workspace::locate(), check);
    for error in &errors {
        eprintln!("release: {error}");
    }
    if errors.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

/// The artifacts of one version, by kind.
#[derive(Debug, Default)]
struct Artifacts {
    crates: Vec<PathBuf>,
    sdist: Option<PathBuf>,
    wheel: Option<PathBuf>,
    archives: Vec<PathBuf>,
}

/// Builds every artifact, then checks them; the errors of all of them.
fn release(workspace: &Workspace, check: bool) -> Vec<String> {
    let root = &workspace.root;
    let version = match fs::read_to_string(root.join("Cargo.toml")) {
        Ok(manifest) => match workspace_version(&manifest) {
            Some(version) => version.to_owned(),
            None => return vec!["Cargo.toml has no `version` in [workspace.package]".to_owned()],
        },
        Err(error) => return vec![format!("reading Cargo.toml: {error}")],
    };
    let out = root.join(format!("target/release-artifacts/hostcopy-{version}"));
    let _ = fs::remove_dir_all(&out);
    if let Err(error) = create_dir(&out.join("c")) {
        return vec![error];
    }
    let (artifacts, mut errors) = gather(workspace, &version, &out);
    for path in artifacts.crates.iter().chain(&artifacts.sdist).chain(&artifacts.wheel).chain(&artifacts.archives) {
        let bytes = fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        println!("release: {} ({bytes} bytes)", path.strip_prefix(root).unwrap_or(path).display());
    }
    if check {
        errors.extend(check_all(root, &version, &artifacts, &out.join("unpacked")));
    }
    let _ = fs::remove_dir_all(out.join("unpacked"));
    errors
}

/// Builds or collects each kind of artifact into `out`; what it has, and what failed.
fn gather(workspace: &Workspace, version: &str, out: &Path) -> (Artifacts, Vec<String>) {
    let root = &workspace.root;
    let (mut artifacts, mut errors) = (Artifacts::default(), Vec::new());

    let crates = progress("the crates: cargo package", || {
        let mut cargo = Command::new(cargo());
        cargo.current_dir(root).args(["package", "--no-verify", "--allow-dirty", "--quiet"]);
        run(cargo.args(CRATES.iter().flat_map(|name| ["-p", name])))?;
        CRATES
            .iter()
            .map(|name| copy_into(&root.join(format!("target/package/{name}-{version}.crate")), out))
            .collect::<Result<Vec<_>, _>>()
    });
    match crates {
        Ok(crates) => artifacts.crates = crates,
        Err(error) => errors.push(format!("the crates: {error}")),
    }

    // build-wheel.sh makes (or reuses) target/python-build, a virtual
    // environment with maturin and zig; the sdist takes its maturin.
    let python = root.join("driver/python");
    let wheel = progress("the wheel: driver/python/build-wheel.sh (release, zig, manylinux_2_17)", || {
        run(Command::new(python.join("build-wheel.sh")).arg(out))?;
        only_file(out, |name| name.ends_with(".whl"))
    });
    match wheel {
        Ok(wheel) => artifacts.wheel = Some(wheel),
        Err(error) => errors.push(format!("the wheel: {error}")),
    }
    let sdist = progress("the sdist: maturin sdist", || {
        let maturin = root.join("target/python-build/bin/maturin");
        run(Command::new(maturin)
            .arg("sdist")
            .arg("--manifest-path")
            .arg(python.join("Cargo.toml"))
            .arg("--out")
            .arg(out))?;
        only_file(out, |name| name.starts_with(&format!("{PYTHON_NAME}-")) && name.ends_with(".tar.gz"))
    });
    match sdist {
        Ok(sdist) => artifacts.sdist = Some(sdist),
        Err(error) => errors.push(format!("the sdist: {error}")),
    }

    // This machine's archive made again (its libraries are built by then:
    // seconds); the others as the last `cargo xtask dist` left them.
    if dist::main(&[]) != ExitCode::SUCCESS {
        errors.push("`cargo xtask dist` failed (above)".to_owned());
    }
    let dist_dir = root.join("target/dist");
    let infix = format!("-{version}-");
    let mut archives: Vec<PathBuf> = fs::read_dir(&dist_dir)
        .map(|entries| entries.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    archives.retain(|path| file_name(path).contains(&infix) && file_name(path).ends_with(".tar.gz"));
    archives.sort();
    if !archives.iter().any(|path| file_name(path).ends_with(&format!("{}.tar.gz", workspace.host))) {
        errors.push(format!("no C archive of {version} for {} in {}", workspace.host, dist_dir.display()));
    }
    for archive in archives {
        match copy_into(&archive, &out.join("c")) {
            Ok(copied) => artifacts.archives.push(copied),
            Err(error) => errors.push(error),
        }
    }
    (artifacts, errors)
}

/// Every check on every artifact, each unpacked under `scratch`.
fn check_all(root: &Path, version: &str, artifacts: &Artifacts, scratch: &Path) -> Vec<String> {
    let mut errors = Vec::new();
    let mut checked = |label: &str, result: Result<Vec<String>, String>| match result {
        Ok(found) => errors.extend(found.into_iter().map(|e| format!("{label}: {e}"))),
        Err(error) => errors.push(format!("{label}: {error}")),
    };
    for (name, path) in CRATES.iter().zip(&artifacts.crates) {
        let label = file_name(path).to_owned();
        checked(&label, progress(&format!("check {label}"), || check_crate(root, name, version, path, scratch)));
    }
    if let Some(sdist) = &artifacts.sdist {
        let label = file_name(sdist).to_owned();
        checked(&label, progress(&format!("check {label}"), || check_sdist(root, version, sdist, scratch)));
    }
    if let Some(wheel) = &artifacts.wheel {
        let label = file_name(wheel).to_owned();
        checked(&label, progress(&format!("check {label}"), || check_wheel(root, version, wheel, scratch)));
        let installed = progress("the wheel in a fresh virtual environment: pip install, import hostcopy", || {
            install_and_import(version, wheel, scratch)
        });
        checked(&label, installed.map(|()| Vec::new()));
    }
    for archive in &artifacts.archives {
        let label = file_name(archive).to_owned();
        checked(&label, progress(&format!("check {label}"), || check_archive(root, version, archive, scratch)));
    }
    errors
}

/// A `.crate`: licence texts, README, `Cargo.toml`'s name, version and licence, headers.
fn check_crate(root: &Path, name: &str, version: &str, path: &Path, scratch: &Path) -> Result<Vec<String>, String> {
    let dir = untar(path, scratch)?.join(format!("{name}-{version}"));
    let mut errors = licence_texts(root, &dir);
    if !dir.join("README.md").is_file() {
        errors.push("no README.md".to_owned());
    }
    let manifest = read(&dir.join("Cargo.toml"))?;
    let package = toml_table(&manifest, "package");
    for (key, wanted) in [("name", name), ("version", version), ("license", LICENCE)] {
        let found = toml_string(package, key);
        if found != Some(wanted) {
            errors.push(format!("Cargo.toml's {key} is {found:?}, not {wanted:?}"));
        }
    }
    if name == "hostcopy-core" && !dir.join("include/hostcopy.h").is_file() {
        errors.push("no include/hostcopy.h".to_owned());
    }
    errors.extend(headers(root, &dir)?);
    Ok(errors)
}

/// The sdist: licence texts beside pyproject.toml, `PKG-INFO`, headers of the Rust sources it carries.
fn check_sdist(root: &Path, version: &str, path: &Path, scratch: &Path) -> Result<Vec<String>, String> {
    let dir = untar(path, scratch)?.join(format!("{PYTHON_NAME}-{version}"));
    let mut errors = licence_texts(root, &dir);
    if !dir.join("pyproject.toml").is_file() {
        errors.push("no pyproject.toml".to_owned());
    }
    errors.extend(core_metadata(&read(&dir.join("PKG-INFO"))?, version).into_iter().map(|e| format!("PKG-INFO: {e}")));
    errors.extend(headers(root, &dir)?);
    Ok(errors)
}

/// The wheel: its name and tags, `METADATA`, the licence texts in
/// `.dist-info/licenses/`, and its extension's symbol versions and libraries.
fn check_wheel(root: &Path, version: &str, path: &Path, scratch: &Path) -> Result<Vec<String>, String> {
    let mut errors = Vec::new();
    let arch = env::consts::ARCH;
    let name = file_name(path);
    let wanted = format!("{PYTHON_NAME}-{version}-cp39-abi3-");
    if !name.starts_with(&wanted) || !name.contains(&format!("{MANYLINUX}_{arch}")) {
        errors.push(format!("the name is not {wanted}...{MANYLINUX}_{arch}...whl"));
    }
    let dir = scratch.join(name);
    let python = env::var_os("PYTHON").unwrap_or_else(|| "python3".into());
    run(Command::new(python).args(["-m", "zipfile", "-e"]).arg(path).arg(&dir))?;
    let dist_info = dir.join(format!("{PYTHON_NAME}-{version}.dist-info"));
    let metadata = read(&dist_info.join("METADATA"))?;
    errors.extend(core_metadata(&metadata, version).into_iter().map(|e| format!("METADATA: {e}")));
    let listed: BTreeSet<&str> = fields(&metadata, "License-File").collect();
    if listed != LICENCES.into_iter().collect() {
        errors.push(format!("METADATA's License-File fields are {listed:?}, not {LICENCES:?}"));
    }
    errors.extend(licence_texts(root, &dist_info.join("licenses")));
    let wheel_file = read(&dist_info.join("WHEEL"))?;
    let tags: Vec<&str> = fields(&wheel_file, "Tag").collect();
    if !tags.contains(&format!("cp39-abi3-{MANYLINUX}_{arch}").as_str()) {
        errors.push(format!("WHEEL's tags {tags:?} lack cp39-abi3-{MANYLINUX}_{arch}"));
    }
    let extension = dir.join("hostcopy/_native.abi3.so");
    if !extension.is_file() {
        errors.push("no hostcopy/_native.abi3.so".to_owned());
        return Ok(errors);
    }
    let dynamic = run(Command::new("readelf").args(["--dynamic", "--version-info", "--wide"]).arg(&extension))?.stdout;
    errors.extend(manylinux_violations(&dynamic));
    Ok(errors)
}

/// What in `readelf --dynamic --version-info` output breaks the
/// manylinux2014 policy: a library outside its list, a glibc or libgcc
/// symbol version newer than it allows.
fn manylinux_violations(readelf: &str) -> Vec<String> {
    let mut errors = Vec::new();
    for line in readelf.lines().filter(|line| line.contains("(NEEDED)")) {
        let library = line.split('[').nth(1).and_then(|rest| rest.split(']').next()).unwrap_or(line);
        if !MANYLINUX_LIBRARIES.contains(&library) {
            errors.push(format!("the extension needs {library}, outside manylinux2014's libraries"));
        }
    }
    // `Name: GLIBC_2.14  Flags: none  Version: 5` in the version needs.
    let versions = readelf.lines().filter_map(|line| line.split("Name: ").nth(1)?.split_whitespace().next());
    for version in versions {
        let (newest, number) = match version.split_once('_') {
            Some(("GLIBC", number)) => (NEWEST_GLIBC, number),
            Some(("GCC", number)) => (NEWEST_GCC, number),
            _ => continue,
        };
        let mut parts = number.split('.').map(|part| part.parse::<u32>().unwrap_or(u32::MAX));
        let found = (parts.next().unwrap_or(u32::MAX), parts.next().unwrap_or(0));
        if found > newest {
            errors.push(format!("the extension needs {version}, newer than {MANYLINUX} allows"));
        }
    }
    errors
}

/// `pip install` of the wheel alone (offline, no dependencies: it has none
/// but its extras) into a fresh virtual environment, then `import hostcopy`
/// from a folder outside the source tree: the installed package, its
/// version, its native part loaded.
fn install_and_import(version: &str, wheel: &Path, scratch: &Path) -> Result<(), String> {
    let venv = scratch.join("venv");
    let python = env::var_os("PYTHON").unwrap_or_else(|| "python3".into());
    run(Command::new(python).args(["-m", "venv"]).arg(&venv))?;
    let pip = ["-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--disable-pip-version-check"];
    run(Command::new(venv.join("bin/python")).args(pip).arg(wheel))?;
    let script = "import importlib.metadata as m, pathlib, sys\n\
                  import hostcopy, hostcopy._native as native\n\
                  assert pathlib.Path(sys.prefix) in pathlib.Path(native.__file__).parents, native.__file__\n\
                  print(m.version('hostcopy'), native.__file__)";
    let imported = run(Command::new(venv.join("bin/python")).current_dir(scratch).args(["-c", script]))?;
    let found = imported.stdout.split_whitespace().next().unwrap_or_default().to_owned();
    if found != version {
        return Err(format!("the installed hostcopy says version {found:?}, not {version}"));
    }
    println!("release: installed and imported {}", imported.stdout.trim());
    Ok(())
}

/// A C archive: licence texts, headers, every `.pc` file's version.
fn check_archive(root: &Path, version: &str, path: &Path, scratch: &Path) -> Result<Vec<String>, String> {
    let folder = file_name(path).trim_end_matches(".tar.gz").to_owned();
    let dir = untar(path, scratch)?.join(folder);
    let mut errors = licence_texts(root, &dir);
    if !dir.join("include").is_dir() {
        errors.push("no include/".to_owned());
    }
    errors.extend(headers(root, &dir)?);
    let pkgconfig = dir.join("lib/pkgconfig");
    let pcs: Vec<PathBuf> = fs::read_dir(&pkgconfig)
        .map(|entries| entries.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    if pcs.is_empty() {
        errors.push("no lib/pkgconfig/*.pc".to_owned());
    }
    for pc in pcs {
        let found = fields(&read(&pc)?, "Version").next().map(str::to_owned);
        if found.as_deref() != Some(version) {
            errors.push(format!("{}'s Version is {found:?}, not {version}", file_name(&pc)));
        }
    }
    Ok(errors)
}

/// The licence texts in `dir`, each the repository's byte for byte.
fn licence_texts(root: &Path, dir: &Path) -> Vec<String> {
    let mut errors = Vec::new();
    for licence in LICENCES {
        match (fs::read(dir.join(licence)), fs::read(root.join(licence))) {
            (Ok(found), Ok(wanted)) if found == wanted => {}
            (Ok(_), Ok(_)) => errors.push(format!("{licence} is not the repository's text")),
            (Err(_), _) => errors.push(format!("no {licence} in {}", dir.file_name().unwrap_or_default().display())),
            (_, Err(error)) => errors.push(format!("reading the repository's {licence}: {error}")),
        }
    }
    errors
}

/// Every `.h` under `dir`: it opens with the SPDX line, and where the
/// repository has a header of its name in an `include/` folder, it is that one.
fn headers(root: &Path, dir: &Path) -> Result<Vec<String>, String> {
    let mut errors = Vec::new();
    for header in files_under(dir)?.into_iter().filter(|path| path.extension().is_some_and(|e| e == "h")) {
        let text = read(&header)?;
        let shown = header.strip_prefix(dir).unwrap_or(&header).display().to_string();
        if text.lines().next() != Some(SPDX) {
            errors.push(format!("{shown} does not open with `{SPDX}`"));
        }
        let name = file_name(&header);
        let source = ["core/include", "driver/capi/include"].map(|d| root.join(d).join(name));
        if let Some(source) = source.iter().find(|path| path.is_file())
            && read(source)? != text
        {
            errors.push(format!("{shown} differs from {} (stale? rebuild it)", source.display()));
        }
    }
    Ok(errors)
}

/// Name, version and licence of core metadata (`PKG-INFO`, `METADATA`):
/// the expression as `License-Expression` (metadata 2.4) or `License`.
fn core_metadata(metadata: &str, version: &str) -> Vec<String> {
    let mut errors = Vec::new();
    let headers = metadata.split("\n\n").next().unwrap_or_default();
    for (field, wanted) in [("Name", PYTHON_NAME), ("Version", version)] {
        let found: Vec<&str> = fields(headers, field).collect();
        if found != [wanted] {
            errors.push(format!("{field} is {found:?}, not {wanted:?}"));
        }
    }
    let licence: Vec<&str> = fields(headers, "License-Expression").chain(fields(headers, "License")).collect();
    if licence.is_empty() || licence.iter().any(|found| *found != LICENCE) {
        errors.push(format!("the licence is {licence:?}, not {LICENCE:?}"));
    }
    errors
}

/// The values of an email-style header field (`Name: value`), in order.
fn fields<'a>(text: &'a str, field: &'a str) -> impl Iterator<Item = &'a str> {
    text.lines().filter_map(move |line| line.strip_prefix(field)?.strip_prefix(": ").map(str::trim))
}

/// The lines of a TOML table, up to the next table header.
fn toml_table<'a>(manifest: &'a str, table: &str) -> &'a str {
    let header = format!("[{table}]\n");
    let start = manifest.find(&header).map(|at| at + header.len()).unwrap_or(manifest.len());
    let rest = &manifest[start..];
    &rest[..rest.find("\n[").map(|at| at + 1).unwrap_or(rest.len())]
}

/// `key = "value"` in a table's lines.
fn toml_string<'a>(table: &'a str, key: &str) -> Option<&'a str> {
    let line = table.lines().find_map(|line| line.strip_prefix(key)?.trim_start().strip_prefix('='))?;
    line.trim().strip_prefix('"')?.strip_suffix('"')
}

/// `version` of the `[workspace.package]` table of a root `Cargo.toml`.
fn workspace_version(manifest: &str) -> Option<&str> {
    toml_string(toml_table(manifest, "workspace.package"), "version")
}

/// Unpacks a `.tar.gz` (a `.crate` is one) into a folder of its own under `scratch`.
fn untar(archive: &Path, scratch: &Path) -> Result<PathBuf, String> {
    let dir = scratch.join(file_name(archive));
    create_dir(&dir)?;
    run(Command::new("tar").arg("-xzf").arg(archive).arg("-C").arg(&dir))?;
    Ok(dir)
}

/// The plain files under `dir`, at any depth (links not followed).
fn files_under(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in fs::read_dir(&dir).map_err(|e| format!("reading {}: {e}", dir.display()))? {
            let entry = entry.map_err(|e| format!("reading {}: {e}", dir.display()))?;
            let kind = entry.file_type().map_err(|e| format!("{}: {e}", entry.path().display()))?;
            match (kind.is_dir(), kind.is_file()) {
                (true, _) => pending.push(entry.path()),
                (_, true) => files.push(entry.path()),
                _ => {}
            }
        }
    }
    files.sort();
    Ok(files)
}

/// The one file in `dir` whose name `wanted` accepts.
fn only_file(dir: &Path, wanted: impl Fn(&str) -> bool) -> Result<PathBuf, String> {
    let entries = fs::read_dir(dir).map_err(|e| format!("reading {}: {e}", dir.display()))?;
    let found: Vec<PathBuf> =
        entries.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| wanted(file_name(p))).collect();
    match <[PathBuf; 1]>::try_from(found) {
        Ok([path]) => Ok(path),
        Err(found) => Err(format!("{} such files in {}, not one: {found:?}", found.len(), dir.display())),
    }
}

fn copy_into(file: &Path, dir: &Path) -> Result<PathBuf, String> {
    let to = dir.join(file_name(file));
    fs::copy(file, &to).map_err(|e| format!("copying {} to {}: {e}", file.display(), dir.display()))?;
    Ok(to)
}

fn file_name(path: &Path) -> &str {
    path.file_name().and_then(|name| name.to_str()).unwrap_or_default()
}

fn read(path: &Path) -> Result<String, String> {
    fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))
}

fn cargo() -> std::ffi::OsString {
    env::var_os("CARGO").unwrap_or_else(|| "cargo".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manylinux_policy_refuses_newer_glibc_symbols_and_other_libraries() {
        let good = " 0x0000000000000001 (NEEDED)             Shared library: [libgcc_s.so.1]\n \
                    0x0000000000000001 (NEEDED)             Shared library: [libc.so.6]\n\
                    Version needs section '.gnu.version_r' contains 2 entries:\n \
                    0x0000: Version: 1  File: libc.so.6  Cnt: 2\n  \
                    0x0010:   Name: GLIBC_2.17  Flags: none  Version: 3\n  \
                    0x0020:   Name: GLIBC_2.2.5  Flags: none  Version: 2\n  \
                    0x0030:   Name: GCC_4.2.0  Flags: none  Version: 4\n";
        assert_eq!(manylinux_violations(good), Vec::<String>::new());
        let bad = format!(
            "{good} 0x0000000000000001 (NEEDED)             Shared library: [libcuda.so.1]\n  \
             0x0040:   Name: GLIBC_2.34  Flags: none  Version: 5\n"
        );
        let errors = manylinux_violations(&bad);
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(errors[0].contains("libcuda.so.1") && errors[1].contains("GLIBC_2.34"), "{errors:?}");
    }

    #[test]
    fn metadata_must_name_the_version_and_the_licence_expression() {
        let good = "Metadata-Version: 2.4\nName: hostcopy\nVersion: 0.1.0\nLicense: MIT OR Apache-2.0\n\n# hostcopy\n";
        assert_eq!(core_metadata(good, "0.1.0"), Vec::<String>::new());
        let expression = good.replace("License:", "License-Expression:");
        assert_eq!(core_metadata(&expression, "0.1.0"), Vec::<String>::new());
        assert_eq!(core_metadata(good, "0.2.0").len(), 1);
        assert_eq!(core_metadata(&good.replace("MIT OR ", ""), "0.1.0").len(), 1);
        // A field name in the description does not count.
        assert_eq!(core_metadata("Name: hostcopy\nVersion: 0.1.0\n\nLicense: MIT OR Apache-2.0\n", "0.1.0").len(), 1);
    }

    #[test]
    fn missing_or_changed_licences_and_headers_without_the_spdx_line_are_reported() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let dir = env::temp_dir().join(format!("xtask-release-test-{}", std::process::id()));
        create_dir(&dir.join("include")).unwrap();
        fs::copy(root.join("LICENSE-MIT"), dir.join("LICENSE-MIT")).unwrap();
        assert_eq!(licence_texts(root, &dir).len(), 1, "LICENSE-APACHE is missing");
        fs::write(dir.join("LICENSE-APACHE"), "Apache, more or less").unwrap();
        assert_eq!(licence_texts(root, &dir).len(), 1, "LICENSE-APACHE is not the repository's");
        fs::copy(root.join("LICENSE-APACHE"), dir.join("LICENSE-APACHE")).unwrap();
        assert_eq!(licence_texts(root, &dir), Vec::<String>::new());

        let header = fs::read_to_string(root.join("core/include/hostcopy.h")).unwrap();
        fs::write(dir.join("include/hostcopy.h"), &header).unwrap();
        assert_eq!(headers(root, &dir).unwrap(), Vec::<String>::new());
        let (_, rest) = header.split_once('\n').unwrap();
        fs::write(dir.join("include/hostcopy.h"), rest).unwrap();
        let errors = headers(root, &dir).unwrap();
        assert!(errors.len() == 2 && errors[0].contains("SPDX") && errors[1].contains("differs"), "{errors:?}");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_packaged_manifest_is_read_table_by_table() {
        let manifest = "[package]\nedition = \"2024\"\nname = \"hostcopy-core\"\nversion = \"0.1.0\"\n\
                        license = \"MIT OR Apache-2.0\"\n\n[dependencies.defmt]\nversion = \"1.0\"\n";
        let package = toml_table(manifest, "package");
        assert_eq!(toml_string(package, "version"), Some("0.1.0"));
        assert_eq!(toml_string(package, "license"), Some(LICENCE));
        assert_eq!(toml_string(package, "readme"), None);
        assert_eq!(toml_string(toml_table(manifest, "dependencies.defmt"), "version"), Some("1.0"));
        assert!(workspace_version(include_str!("../../Cargo.toml")).is_some_and(|v| v.split('.').count() == 3));
    }
}
