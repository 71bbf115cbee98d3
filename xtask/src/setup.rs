//! Machine set-up, in one place: the rustup targets and the Debian packages
//! that the selected rows name. Missing packages are installed (as root, or
//! through passwordless sudo); what cannot be installed is an error, never a
//! check quietly left out.
//!
//! A package of another architecture (`libwine:i386`) is unpacked into
//! `target/wine`, not installed: wine64 runs 32-bit Windows programs in its
//! WoW64 mode with nothing of wine32 but its i386 PE DLLs
//! (`xtask/scripts/wine-runner.sh` points wine at them), while installing
//! `wine32:i386` would bring a whole i386 userland through multiarch, which
//! needs every i386 index of the mirror in step with the amd64 ones.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use crate::command::run;
use crate::targets::{COMMON_APT, Target};

/// Provides what `targets` name, and the `extra` packages.
pub(crate) fn prepare(targets: &[&Target], extra: &[&str]) -> Result<(), String> {
    let installed = run(Command::new("rustup").args(["target", "list", "--installed"]))?.stdout;
    let triples: Vec<&str> = targets
        .iter()
        .map(|t| t.triple)
        .filter(|triple| !installed.lines().any(|line| line.trim() == *triple))
        .collect();
    if !triples.is_empty() {
        eprintln!("set-up: rustup target add {}", triples.join(" "));
        run(Command::new("rustup").args(["target", "add"]).args(&triples))?;
    }

    let wanted: BTreeSet<&str> =
        COMMON_APT.iter().chain(extra).chain(targets.iter().flat_map(|t| t.apt)).copied().collect();
    let missing: Vec<&str> = wanted.into_iter().filter(|p| !is_installed(p)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!("set-up: Debian packages {}", missing.join(" "));
    let root = run(Command::new("id").arg("-u")).is_ok_and(|id| id.stdout.trim() == "0");
    let as_root = |program: &str| {
        let mut command = Command::new(if root { program } else { "sudo" });
        if !root {
            command.args(["-n", program]);
        }
        command.env("DEBIAN_FRONTEND", "noninteractive");
        command
    };
    let (unpack, missing): (Vec<&str>, Vec<&str>) = missing.into_iter().partition(|p| p.contains(':'));
    // Package lists of the other architectures too, for `apt-get download`
    // only: the machine's own architectures stay as they are. A partial
    // update (one mirror index failing) still leaves usable lists.
    let native = run(Command::new("dpkg").arg("--print-architecture"))?.stdout;
    let mut archs: Vec<&str> = unpack.iter().filter_map(|p| p.split(':').nth(1)).collect();
    archs.push(native.trim());
    let archs: Vec<String> = archs.iter().map(|arch| format!("-oAPT::Architectures::={arch}")).collect();
    if let Err(error) = run(as_root("apt-get").args(&archs).args(["update", "-q"])) {
        let errors = error.lines().filter(|line| line.trim_start().starts_with("E:"));
        eprintln!("set-up: apt-get update: {}", errors.collect::<Vec<_>>().join(" "));
    }
    for package in unpack {
        let dir = unpacked(package);
        let parent = dir.parent().expect("in target/wine");
        std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
        run(Command::new("apt-get").current_dir(parent).args(&archs).args(["download", package]))?;
        let (name, arch) = package.split_once(':').expect("name:arch");
        let deb = format!("{name}_*_{arch}.deb");
        let unpack = format!("dpkg-deb -x {deb} {} && rm {deb}", dir.display());
        run(Command::new("sh").arg("-c").arg(unpack).current_dir(parent))?;
    }
    if missing.is_empty() {
        return Ok(());
    }
    let install = |packages: &[&str]| {
        run(as_root("apt-get").args(["install", "-y", "-q", "--no-install-recommends"]).args(packages))
    };
    if install(&missing).is_ok() {
        return Ok(());
    }
    // One row's package failing must not keep the others' off the machine.
    let errors: Vec<String> = missing.iter().filter_map(|p| install(&[p]).err()).collect();
    if errors.is_empty() { Ok(()) } else { Err(errors.join("\n")) }
}

/// Where a package of another architecture is unpacked: `target/wine/libwine-i386`.
fn unpacked(package: &str) -> std::path::PathBuf {
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("in the workspace").join("target/wine");
    target.join(package.replace(':', "-"))
}

fn is_installed(package: &str) -> bool {
    if package.contains(':') {
        return unpacked(package).is_dir();
    }
    run(Command::new("dpkg-query").args(["-W", "-f=${db:Status-Abbrev}", package]))
        .is_ok_and(|status| status.stdout.starts_with("ii"))
}
