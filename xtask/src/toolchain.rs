//! Set-up: the rustup targets and the system tools (Debian packages) the
//! checks need.
//!
//! Missing packages are installed when this process can (root or
//! passwordless sudo, and apt-get exists) unless `--no-install` says not to;
//! otherwise they are named, and every check that needs them shows as
//! "not run" with the package to install, never as passed.

use std::collections::BTreeMap;
use std::env;
use std::path::Path;
use std::process::Command;

use crate::command;
use crate::targets::{Need, Provides};

/// A system tool a check needs, and what for (printed when it is installed or missing).
#[derive(Clone, Debug)]
pub(crate) struct Requirement {
    pub(crate) need: Need,
    pub(crate) purpose: String,
}

/// What is on this machine after set-up.
#[derive(Debug)]
pub(crate) struct Toolbox {
    missing: Vec<Need>,
}

impl Toolbox {
    /// Why a check that needs `needs` cannot run here, or None when it can.
    pub(crate) fn missing_reason(&self, needs: &[Need]) -> Option<String> {
        let missing: Vec<&Need> = needs
            .iter()
            .filter(|need| self.missing.contains(need))
            .collect();
        if missing.is_empty() {
            return None;
        }
        let names: Vec<&str> = missing.iter().map(|need| need.short_name()).collect();
        let mut packages: Vec<&str> = missing.iter().map(|need| need.package).collect();
        packages.dedup();
        Some(format!(
            "no {} (apt: {})",
            names.join(", "),
            packages.join(", ")
        ))
    }

    /// The command that installs what is missing, when something is.
    pub(crate) fn install_hint(&self) -> Option<String> {
        let mut packages: Vec<&str> = self.missing.iter().map(|need| need.package).collect();
        packages.sort_unstable();
        packages.dedup();
        (!packages.is_empty()).then(|| {
            format!(
                "apt-get install --no-install-recommends {}",
                packages.join(" ")
            )
        })
    }
}

/// Whether missing Debian packages may be installed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Install {
    WhenPossible,
    Never,
}

/// Adds missing rustup targets and provides the system tools; returns what is
/// there and the set-up errors (a failed install is a failure, a tool left
/// missing on purpose is not).
pub(crate) fn prepare(
    rust_targets: &[&str],
    requirements: &[Requirement],
    install: Install,
) -> (Toolbox, Vec<String>) {
    let mut errors = Vec::new();
    if let Err(error) = add_rustup_targets(rust_targets) {
        errors.push(error);
    }

    let missing = missing_needs(requirements);
    if missing.is_empty() {
        eprintln!("set-up: every system tool is there");
        return (
            Toolbox {
                missing: Vec::new(),
            },
            errors,
        );
    }
    let packages = packages_for(&missing, requirements);
    let install_command = format!(
        "apt-get install --no-install-recommends {}",
        packages.keys().cloned().collect::<Vec<_>>().join(" ")
    );
    let refusal = match install {
        Install::Never => Some("--no-install".to_owned()),
        Install::WhenPossible => installer().err(),
    };
    if let Some(refusal) = refusal {
        eprintln!("set-up: missing system tools, not installing them ({refusal}):");
        print_packages(&packages);
        eprintln!("  the checks that need them show as \"not run\"; to install: {install_command}");
        return (Toolbox { missing }, errors);
    }

    eprintln!("set-up: installing the Debian packages these checks need:");
    print_packages(&packages);
    let sudo = installer().unwrap_or_default();
    let names: Vec<&str> = packages.keys().map(String::as_str).collect();
    if let Err(error) = apt_install(sudo.as_deref(), &names) {
        errors.push(format!("installing {}: {error}", names.join(" ")));
    }
    let still_missing = missing_needs(requirements);
    if still_missing.is_empty() {
        eprintln!("set-up: installed");
    } else {
        let names: Vec<&str> = still_missing.iter().map(Need::name).collect();
        errors.push(format!(
            "still missing after `{install_command}`: {}",
            names.join(", ")
        ));
    }
    (
        Toolbox {
            missing: still_missing,
        },
        errors,
    )
}

fn add_rustup_targets(wanted: &[&str]) -> Result<(), String> {
    let installed = command::run(Command::new("rustup").args(["target", "list", "--installed"]))
        .map_err(|error| format!("listing rustup targets: {error}"))?;
    let installed: Vec<&str> = installed.stdout.lines().map(str::trim).collect();
    let missing: Vec<&str> = wanted
        .iter()
        .copied()
        .filter(|target| !installed.contains(target))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!(
        "set-up: adding rustup targets {} (hostcopy-core is built for each)",
        missing.join(" ")
    );
    command::run(
        Command::new("rustup")
            .args(["target", "add"])
            .args(&missing),
    )
    .map(drop)
    .map_err(|error| format!("adding rustup targets: {error}"))
}

fn missing_needs(requirements: &[Requirement]) -> Vec<Need> {
    let mut missing: Vec<Need> = Vec::new();
    for requirement in requirements {
        if !is_present(&requirement.need) && !missing.contains(&requirement.need) {
            missing.push(requirement.need);
        }
    }
    missing
}

fn is_present(need: &Need) -> bool {
    match need.what {
        Provides::Program(name) => program_on_path(name),
        Provides::File(path) => Path::new(path).exists(),
    }
}

fn program_on_path(name: &str) -> bool {
    env::var_os("PATH")
        .map(|path| env::split_paths(&path).any(|dir| dir.join(name).is_file()))
        .unwrap_or(false)
}

/// Package name -> what it provides and what for, in a stable order.
fn packages_for(missing: &[Need], requirements: &[Requirement]) -> BTreeMap<String, Vec<String>> {
    let mut packages: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for need in missing {
        let purposes = packages.entry(need.package.to_owned()).or_default();
        for requirement in requirements.iter().filter(|r| r.need == *need) {
            let line = format!("{}: {}", need.name(), requirement.purpose);
            if !purposes.contains(&line) {
                purposes.push(line);
            }
        }
    }
    packages
}

fn print_packages(packages: &BTreeMap<String, Vec<String>>) {
    for (package, purposes) in packages {
        eprintln!("  {package:<26} {}", purposes.join("; "));
    }
}

/// How to run apt-get: `Ok(None)` as root, `Ok(Some("sudo"))` through
/// passwordless sudo; the error says why installing is not possible.
fn installer() -> Result<Option<String>, String> {
    if !program_on_path("apt-get") {
        return Err("no apt-get on this machine".to_owned());
    }
    let uid = command::run(Command::new("id").arg("-u")).map(|out| out.stdout.trim().to_owned());
    if uid.as_deref() == Ok("0") {
        return Ok(None);
    }
    if program_on_path("sudo") && command::run(Command::new("sudo").args(["-n", "true"])).is_ok() {
        return Ok(Some("sudo".to_owned()));
    }
    Err("not root, and `sudo -n` needs a password".to_owned())
}

fn apt_install(sudo: Option<&str>, packages: &[&str]) -> Result<(), String> {
    let apt = |args: &[&str]| {
        let mut command = match sudo {
            Some(sudo) => {
                let mut command = Command::new(sudo);
                command.args(["-n", "env", "DEBIAN_FRONTEND=noninteractive", "apt-get"]);
                command
            }
            None => {
                let mut command = Command::new("apt-get");
                command.env("DEBIAN_FRONTEND", "noninteractive");
                command
            }
        };
        command.args(args);
        command
    };
    // A fresh machine has no package lists yet.
    eprintln!("  apt-get update ...");
    command::run(&mut apt(&["update", "-q"]))?;
    eprintln!("  apt-get install {} ...", packages.join(" "));
    let mut install = apt(&["install", "-y", "-q", "--no-install-recommends"]);
    install.args(packages);
    command::run(&mut install).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_reason_names_the_tool_and_its_package() {
        let qemu = Need {
            what: Provides::Program("qemu-aarch64"),
            package: "qemu-user",
        };
        let toolbox = Toolbox {
            missing: vec![qemu],
        };
        assert_eq!(
            toolbox.missing_reason(&[qemu]).as_deref(),
            Some("no qemu-aarch64 (apt: qemu-user)")
        );
        assert_eq!(toolbox.missing_reason(&[]), None);
    }

    #[test]
    fn several_missing_tools_are_named_with_their_packages() {
        let gcc = Need {
            what: Provides::Program("powerpc-linux-gnu-gcc"),
            package: "gcc-powerpc-linux-gnu",
        };
        let libc = Need {
            what: Provides::File("/usr/powerpc-linux-gnu/lib/libc.a"),
            package: "libc6-dev-powerpc-cross",
        };
        let toolbox = Toolbox {
            missing: vec![libc, gcc],
        };
        assert_eq!(
            toolbox.missing_reason(&[gcc, libc]).as_deref(),
            Some(
                "no powerpc-linux-gnu-gcc, libc.a (apt: gcc-powerpc-linux-gnu, libc6-dev-powerpc-cross)"
            )
        );
        assert_eq!(
            toolbox.install_hint().as_deref(),
            Some(
                "apt-get install --no-install-recommends gcc-powerpc-linux-gnu libc6-dev-powerpc-cross"
            )
        );
    }

    #[test]
    fn packages_group_what_they_provide() {
        let clang = Need {
            what: Provides::Program("clang"),
            package: "clang",
        };
        let requirements = [
            Requirement {
                need: clang,
                purpose: "compiles hostcopy.h".into(),
            },
            Requirement {
                need: clang,
                purpose: "compiles hostcopy.h".into(),
            },
        ];
        let packages = packages_for(&[clang], &requirements);
        assert_eq!(packages["clang"], ["clang: compiles hostcopy.h"]);
    }
}
