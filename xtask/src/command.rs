//! Running the external tools the checks use (cargo, rustc, clang, llvm-nm,
//! gcc, qemu, apt-get), with their output captured: a failure carries the
//! command line and the end of what the tool printed, so that the report at
//! the end says what to rerun.

use std::io::ErrorKind;
use std::process::Command;

/// What a finished command printed.
#[derive(Debug)]
pub(crate) struct Output {
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

/// Lines of output kept in an error: enough for a compiler error, short enough for a report.
const TAIL_LINES: usize = 25;

/// Runs `command` to completion; an error unless it exits with status 0.
pub(crate) fn run(command: &mut Command) -> Result<Output, String> {
    // Debug shows the environment it sets and every argument, quoted.
    let line = format!("{command:?}");
    let output = command.output().map_err(|error| match error.kind() {
        ErrorKind::NotFound => format!("`{line}`: program not found"),
        _ => format!("`{line}`: {error}"),
    })?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    if output.status.success() {
        Ok(Output { stdout, stderr })
    } else {
        let status = match output.status.code() {
            Some(code) => format!("exit status {code}"),
            None => "killed by a signal".to_owned(),
        };
        Err(format!("`{line}` failed ({status}):\n{}", tail(&format!("{stdout}{stderr}"))))
    }
}

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let start = lines.len().saturating_sub(TAIL_LINES);
    lines[start..].iter().map(|line| format!("    {line}")).collect::<Vec<_>>().join("\n")
}
