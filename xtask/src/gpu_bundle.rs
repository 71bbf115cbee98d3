//! `cargo xtask gpu-bundle`: builds what runs on a GPU host that has no Rust
//! toolchain (the GPU test binaries, the staged example, the benchmark, the
//! core's shared library for the Python consumer) into one folder with a
//! `run.sh` that runs them all and prints a summary table last.
//!
//! The binaries link `libcuda.so.1` by name: built here against the stub,
//! they load the GPU host's driver there.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use crate::command;

pub(crate) const USAGE: &str = "\
usage: cargo xtask gpu-bundle [--out DIR]

Builds the GPU test binaries, the staged_d2h example, the staged_copy
benchmark and libhostcopy_core.so (profile `gpu-bundle`) into DIR
(default target/hostcopy-gpu-bundle) with run.sh. On the GPU host:
    sh DIR/run.sh        # results in $OUT, or DIR/out";

/// The bundle must travel to the GPU host in one call.
const SIZE_LIMIT: u64 = 64 << 20;

pub(crate) fn main(args: &[String]) -> ExitCode {
    let mut out = PathBuf::from("target/hostcopy-gpu-bundle");
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--out" => match args.next() {
                Some(dir) => out = PathBuf::from(dir),
                None => return usage_error("--out needs a folder"),
            },
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            other => return usage_error(&format!("unknown option `{other}`")),
        }
    }
    match bundle(&out) {
        Ok(size) => {
            println!(
                "gpu-bundle: {} ({:.1} MiB); run `sh {}/run.sh` on the GPU host",
                out.display(),
                size as f64 / f64::from(1 << 20),
                out.display()
            );
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("gpu-bundle: {error}");
            ExitCode::FAILURE
        }
    }
}

fn usage_error(message: &str) -> ExitCode {
    eprintln!("error: {message}\n\n{USAGE}");
    ExitCode::from(2)
}

fn bundle(out: &Path) -> Result<u64, String> {
    let _ = fs::remove_dir_all(out);
    for dir in ["bin", "lib", "python"] {
        fs::create_dir_all(out.join(dir)).map_err(|e| format!("{}: {e}", out.display()))?;
    }
    println!("gpu-bundle: building (profile gpu-bundle)");
    let tests = built_executables(cargo().args([
        "test",
        "--no-run",
        "-p",
        "hostcopy-driver",
        "--all-features",
        "--test",
        "gpu",
        "--test",
        "gpu_fault",
        "--test",
        "gpu_staging",
    ]))?;
    let programs = built_executables(cargo().args([
        "build",
        "-p",
        "hostcopy-driver",
        "--all-features",
        "--example",
        "staged_d2h",
        "--bench",
        "staged_copy",
    ]))?;
    let core = built_files(cargo().args(["build", "-p", "hostcopy-core"]))?;

    for (name, path) in tests.iter().chain(&programs) {
        copy(path, &out.join("bin").join(name))?;
    }
    let shared = core
        .iter()
        .find(|path| path.extension().is_some_and(|e| e == "so"))
        .ok_or("the build made no libhostcopy_core.so")?;
    copy(shared, &out.join("lib/libhostcopy_core.so"))?;
    copy(
        Path::new("abi-tests/python/launch_hostcopy.py"),
        &out.join("python/launch_hostcopy.py"),
    )?;
    fs::write(out.join("run.sh"), RUN_SH).map_err(|e| e.to_string())?;
    fs::write(out.join("MANIFEST"), manifest(out)?).map_err(|e| e.to_string())?;

    let size = folder_size(out)?;
    if size > SIZE_LIMIT {
        return Err(format!(
            "the bundle is {size} bytes, over the {SIZE_LIMIT}-byte limit of a GPU call"
        ));
    }
    Ok(size)
}

fn cargo() -> Command {
    let mut cargo = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cargo.args(["--quiet"]);
    cargo
}

/// Runs a cargo build with JSON messages; the executables it made, by target name.
fn built_executables(command: &mut Command) -> Result<Vec<(String, PathBuf)>, String> {
    let messages = build(command)?;
    let built: Vec<_> = messages
        .lines()
        .filter(|line| line.contains("\"reason\":\"compiler-artifact\""))
        .filter_map(|line| {
            Some((
                json_string(line, "\"target\":{")?,
                json_string(line, "\"executable\":")?,
            ))
        })
        .map(|(target, executable)| (target, PathBuf::from(executable)))
        .collect();
    if built.is_empty() {
        return Err(format!(
            "`{}` made no executables",
            command::command_line(command)
        ));
    }
    Ok(built)
}

/// Runs a cargo build with JSON messages; every file it made.
fn built_files(command: &mut Command) -> Result<Vec<PathBuf>, String> {
    let messages = build(command)?;
    Ok(messages
        .lines()
        .filter(|line| line.contains("\"reason\":\"compiler-artifact\""))
        .filter_map(|line| {
            line.split("\"filenames\":[")
                .nth(1)?
                .split(']')
                .next()
                .map(str::to_owned)
        })
        .flat_map(|list| {
            list.split(',')
                .map(|f| PathBuf::from(f.trim().trim_matches('"')))
                .collect::<Vec<_>>()
        })
        .collect())
}

fn build(command: &mut Command) -> Result<String, String> {
    command.args([
        "--profile",
        "gpu-bundle",
        "--message-format",
        "json-render-diagnostics",
    ]);
    Ok(command::run(command)?.stdout)
}

/// The string value after `key` in one line of cargo's JSON: `"name":"..."`
/// inside the object `key` opens, or the value right after `key`.
fn json_string(line: &str, key: &str) -> Option<String> {
    let rest = line.split(key).nth(1)?;
    let rest = if key.ends_with('{') {
        rest.split("\"name\":").nth(1)?
    } else {
        rest
    };
    let value = rest.strip_prefix('"')?;
    Some(value[..value.find('"')?].to_owned())
}

fn copy(from: &Path, to: &Path) -> Result<(), String> {
    fs::copy(from, to)
        .map(drop)
        .map_err(|e| format!("copy {} to {}: {e}", from.display(), to.display()))
}

fn folder_size(dir: &Path) -> Result<u64, String> {
    let mut size = 0;
    for entry in fs::read_dir(dir).map_err(|e| e.to_string())? {
        let entry = entry.map_err(|e| e.to_string())?;
        let meta = entry.metadata().map_err(|e| e.to_string())?;
        size += if meta.is_dir() {
            folder_size(&entry.path())?
        } else {
            meta.len()
        };
    }
    Ok(size)
}

fn manifest(out: &Path) -> Result<String, String> {
    let revision = command::run(Command::new("git").args(["describe", "--always", "--dirty"]))
        .map(|o| o.stdout.trim().to_owned())
        .unwrap_or_else(|_| "unknown".into());
    let rustc = command::run(Command::new("rustc").arg("--version"))
        .map(|o| o.stdout.trim().to_owned())
        .unwrap_or_default();
    let mut text = format!("hostcopy GPU bundle\nrevision: {revision}\n{rustc}\n");
    for dir in ["bin", "lib", "python"] {
        for entry in fs::read_dir(out.join(dir))
            .map_err(|e| e.to_string())?
            .flatten()
        {
            let len = entry.metadata().map(|m| m.len()).unwrap_or(0);
            text.push_str(&format!(
                "{dir}/{}: {len} bytes\n",
                entry.file_name().to_string_lossy()
            ));
        }
    }
    Ok(text)
}

/// Everything the GPU host runs, in one call: tests, fault test, Python
/// consumer, example, benchmark. Logs go to one file (the device tool returns
/// few files); the summary table is the last thing printed.
const RUN_SH: &str = r#"#!/bin/sh
# hostcopy GPU run, written by `cargo xtask gpu-bundle`.
# Runs every GPU test, the sticky-error test, the Python consumer, the staged
# example and the benchmark; prints a summary table last. Results in $OUT
# (or ./out next to this script): run.log, machine.txt, bench.{txt,csv,svg}.
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$here/out}
mkdir -p "$out"
log="$out/run.log"
: > "$log"
# A machine without a usable GPU fails the run instead of skipping it.
export HOSTCOPY_REQUIRE_GPU=1
summary=""

step() { # step NAME SECONDS COMMAND...
    name=$1 limit=$2
    shift 2
    printf '\n==> %s\n' "$name" | tee -a "$log"
    start=$(date +%s)
    timeout "$limit" "$@" >> "$log" 2>&1
    status=$?
    seconds=$(($(date +%s) - start))
    case $status in
        0) result=passed ;;
        124) result="TIMED OUT (${limit}s)" ;;
        *) result="FAILED (exit $status)" ;;
    esac
    printf '%s: %s in %ss\n' "$name" "$result" "$seconds" | tee -a "$log"
    summary="$summary$(printf '| %-12s | %-22s | %5ss |' "$name" "$result" "$seconds")
"
}

{
    date -u
    nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current,memory.total --format=csv,noheader
    echo "host cores: $(nproc)"
    grep -m1 'model name' /proc/cpuinfo
    python3 -c 'import cuda.bindings; print("cuda-bindings", cuda.bindings.__version__)'
} > "$out/machine.txt" 2>&1

step gpu-tests 240 "$here/bin/gpu" --test-threads=1
step gpu-fault 120 "$here/bin/gpu_fault"
step gpu-staging 240 "$here/bin/gpu_staging" --test-threads=1
step python 90 python3 "$here/python/launch_hostcopy.py" "$here/lib/libhostcopy_core.so"
step example 90 "$here/bin/staged_d2h"
step bench 480 "$here/bin/staged_copy" --out "$out"

grep -E '^(test |test result|    )' "$log" | grep -v '^test result: ok. 0 passed' | tail -n 40
[ -f "$out/bench.txt" ] && cat "$out/bench.txt"
printf '\n'
cat "$out/machine.txt"
printf '| step         | result                 |  time |\n|---|---|---|\n%s' "$summary"
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_string_finds_target_names_and_executables() {
        let line = r#"{"reason":"compiler-artifact","package_id":"x","target":{"kind":["test"],"crate_types":["bin"],"name":"gpu","src_path":"/w/driver/tests/gpu.rs"},"executable":"/w/target/gpu-bundle/deps/gpu-0123","fresh":true}"#;
        assert_eq!(json_string(line, "\"target\":{").as_deref(), Some("gpu"));
        assert_eq!(
            json_string(line, "\"executable\":").as_deref(),
            Some("/w/target/gpu-bundle/deps/gpu-0123")
        );
        assert_eq!(
            json_string(r#"{"executable":null}"#, "\"executable\":"),
            None
        );
    }

    #[test]
    fn run_script_requires_a_gpu_and_prints_the_summary_last() {
        assert!(RUN_SH.contains("export HOSTCOPY_REQUIRE_GPU=1"));
        for binary in [
            "bin/gpu\"",
            "bin/gpu_fault\"",
            "bin/gpu_staging\"",
            "bin/staged_d2h\"",
            "bin/staged_copy\"",
            "launch_hostcopy.py\"",
        ] {
            assert!(RUN_SH.contains(binary), "run.sh does not run {binary}");
        }
        let last = RUN_SH.trim_end().lines().last().unwrap();
        assert!(
            last.contains("summary"),
            "the summary is not printed last: {last}"
        );
    }
}
