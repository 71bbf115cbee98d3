//! One wineserver per wine prefix for a whole run of `cargo xtask abi`.
//!
//! Every wine program talks to its prefix's wineserver. Debian's wine starts
//! one on demand with a persistence of 0 s, so it shuts down as soon as the
//! last program of the prefix has exited, and a program that connects during
//! the shutdown dies with `wine client error:0: recvmsg: Connection reset by
//! peer`. A run starts dozens of wine programs per prefix (test binaries, the
//! C consumers, the self-test's), milliseconds to seconds apart, so now and
//! then one lands in that window: the Windows rows failed two runs in four.
//!
//! Waiting for the server to exit after each row (`wineserver -w`) would
//! close only the gaps between rows: within a row, cargo starts one test
//! binary after another and the consumers follow the tests, with the same
//! race. Waiting after every program would close those too, at the cost of
//! a server start and wine's start-up services for each of them. A server
//! started with `wineserver -p` (persistent) never shuts down on its own:
//! while it runs there is no shutdown to race with, whatever the timing. So
//! the run starts one per prefix before the first row (ending any server
//! left over and waiting for it first) and stops it after the last row;
//! `xtask/scripts/wine-runner.sh --server-start/--server-stop` does both with
//! the same environment as the programs it runs.

use std::path::PathBuf;
use std::process::Command;

use crate::checks::Workspace;
use crate::command::run;
use crate::targets::{Target, WINE};

/// The persistent servers of one run; dropping it stops those still running.
#[derive(Debug)]
pub(crate) struct WineServers {
    runner: PathBuf,
    /// The runner's architecture argument of each prefix with a server.
    running: Vec<&'static str>,
}

impl WineServers {
    /// Starts a persistent server for the prefix of each Windows row among
    /// `targets`; the errors are those of the prefixes where it failed.
    pub(crate) fn start(workspace: &Workspace, targets: &[&Target]) -> (Self, Vec<String>) {
        let mut servers = WineServers { runner: workspace.root.join(WINE), running: Vec::new() };
        let mut errors = Vec::new();
        let mut archs: Vec<&'static str> = targets.iter().filter_map(|t| wine_arch(t)).collect();
        archs.sort_unstable();
        archs.dedup();
        for arch in archs {
            match run(Command::new(&servers.runner).args([arch, "--server-start"])) {
                Ok(_) => {
                    eprintln!("wineserver: a persistent server for the {arch} prefix");
                    servers.running.push(arch);
                }
                Err(error) => errors.push(format!("the {arch} prefix's wineserver: {error}")),
            }
        }
        (servers, errors)
    }

    /// Stops every server this started; the errors are those of the prefixes
    /// whose server was no longer running or did not stop.
    pub(crate) fn stop(&mut self) -> Vec<String> {
        let stop = |arch: &str| run(Command::new(&self.runner).args([arch, "--server-stop"]));
        let errors = self.running.iter().filter_map(|arch| stop(arch).err()).collect();
        self.running.clear();
        errors
    }
}

impl Drop for WineServers {
    /// A run that ends early (a panic) leaves no server behind.
    fn drop(&mut self) {
        for error in self.stop() {
            eprintln!("wineserver: {error}");
        }
    }
}

/// The runner's architecture argument where the row runs under wine.
fn wine_arch(target: &Target) -> Option<&'static str> {
    match target.runner {
        [WINE, arch, ..] => Some(arch),
        _ => None,
    }
}
