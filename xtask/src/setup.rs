//! Machine set-up, in one place: the rustup targets and the Debian packages
//! that the selected rows name. Missing packages are installed (as root, or
//! through passwordless sudo); what cannot be installed is an error, never a
//! check quietly left out.

use std::collections::BTreeSet;
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
    eprintln!("set-up: apt-get install {}", missing.join(" "));
    let root = run(Command::new("id").arg("-u")).is_ok_and(|id| id.stdout.trim() == "0");
    let as_root = |program: &str| {
        let mut command = Command::new(if root { program } else { "sudo" });
        if !root {
            command.args(["-n", program]);
        }
        command.env("DEBIAN_FRONTEND", "noninteractive");
        command
    };
    // wine32 is an i386 package: Debian installs it beside wine64 (multiarch).
    let foreign = run(Command::new("dpkg").arg("--print-foreign-architectures"))?.stdout;
    if missing.iter().any(|p| p.ends_with(":i386")) && !foreign.contains("i386") {
        run(as_root("dpkg").args(["--add-architecture", "i386"]))?;
    }
    // A partial update (one mirror index failing) still leaves usable lists.
    if let Err(error) = run(as_root("apt-get").args(["update", "-q"])) {
        eprintln!("set-up: apt-get update reported an error, installing anyway:\n{error}");
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

fn is_installed(package: &str) -> bool {
    run(Command::new("dpkg-query").args(["-W", "-f=${db:Status-Abbrev}", package]))
        .is_ok_and(|status| status.stdout.starts_with("ii"))
}
