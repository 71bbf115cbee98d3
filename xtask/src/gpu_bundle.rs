//! `cargo xtask gpu-bundle`: builds what runs on a GPU host that has no Rust
//! toolchain (the GPU test binaries, the examples, the benchmark, the
//! Python package's wheel, its GPU tests and benchmarks) into one folder
//! with `run.sh` (`xtask/scripts/gpu-run.sh`), which runs each of [`STEPS`]
//! and prints a summary table last, and the run plan
//! (`xtask/gpu-runs/plan.sh`, modes `tests` and `benches`, its knobs at its
//! top) as it is. The plan each recorded run ran is in that run's folder.
//!
//! The binaries open `libcuda.so.1` at run time (nothing links it): built
//! here, they load the GPU host's driver there.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use crate::command;

pub(crate) const USAGE: &str = "\
usage: cargo xtask gpu-bundle [--out DIR]

Builds the GPU test binaries (cudarc's among them), the staged_d2h and
kv_offload examples, the staged_copy benchmark (profile `gpu-bundle`), the C API's
stager_copy example (driver/capi) and the Python wheel (driver/python) into DIR (default target/hostcopy-gpu-bundle) with run.sh, the
Python GPU tests and benchmarks, and the run plan xtask/gpu-runs/plan.sh.
On the GPU host (results in $OUT, or DIR/out):
    bash DIR/plan.sh tests     # every GPU test and example, the Python suite
    bash DIR/plan.sh benches   # staged_copy, stager_copy and the Python benchmarks
    sh DIR/run.sh              # every step of ./steps, the whole benchmark";

/// What `run.sh` runs, in order: a name, a time limit in seconds, and a shell
/// command run from the bundle's folder (`$out` is the results folder).
const STEPS: &[(&str, u32, &str)] = &[
    ("gpu-tests", 240, "bin/gpu --test-threads=1"),
    ("gpu-fault", 120, "bin/gpu_fault"),
    ("gpu-staging", 240, "bin/gpu_staging --test-threads=1"),
    ("gpu-cudarc", 120, "bin/gpu_cudarc"),
    ("driver-loading", 60, "bin/driver_loading"),
    ("python", 600, "python/gpu.sh python/wheels"),
    ("example", 90, "bin/staged_d2h"),
    ("kv-offload", 90, "bin/kv_offload"),
    ("bench", 480, "bin/staged_copy --out \"$out\""),
    ("capi-example", 120, "bin/stager_copy"),
];

/// Files copied into the bundle as they are: (from the workspace, to the bundle).
const FILES: &[(&str, &str)] = &[
    ("xtask/scripts/gpu-run.sh", "run.sh"),
    ("xtask/gpu-runs/plan.sh", "plan.sh"),
    ("xtask/gpu-runs/side_by_side.sh", "side_by_side.sh"),
    ("driver/python/gpu.sh", "python/gpu.sh"),
    ("driver/python/tests/conftest.py", "python/tests/conftest.py"),
    ("driver/python/tests/test_gpu.py", "python/tests/test_gpu.py"),
    ("driver/python/tests/test_gpu_arrays.py", "python/tests/test_gpu_arrays.py"),
    ("driver/python/tests/test_gpu_async.py", "python/tests/test_gpu_async.py"),
    ("driver/python/tests/test_gpu_safetensors.py", "python/tests/test_gpu_safetensors.py"),
    ("driver/python/tests/test_gpu_offload.py", "python/tests/test_gpu_offload.py"),
    ("driver/python/tests/test_gpu_offload_kv_shapes.py", "python/tests/test_gpu_offload_kv_shapes.py"),
    ("driver/python/tests/test_gpu_registration.py", "python/tests/test_gpu_registration.py"),
    ("driver/python/tests/test_safetensors_parity.py", "python/tests/test_safetensors_parity.py"),
    // test_readme_sim.py reads its documents three folders above itself:
    // under python/readme/ they keep their places in the repository.
    ("driver/python/tests/test_readme_sim.py", "python/readme/driver/python/tests/test_readme_sim.py"),
    // The offload guide's test beside it: its GPU blocks run there, with
    // the stand-ins it borrows from test_offload_sim.py and the reference
    // page it checks.
    ("driver/python/tests/test_offload_guide_sim.py", "python/readme/driver/python/tests/test_offload_guide_sim.py"),
    ("driver/python/tests/test_offload_sim.py", "python/readme/driver/python/tests/test_offload_sim.py"),
    ("driver/python/tests/conftest.py", "python/readme/driver/python/tests/conftest.py"),
    ("docs/offload.md", "python/readme/docs/offload.md"),
    ("driver/python/docs/offload.rst", "python/readme/driver/python/docs/offload.rst"),
    ("README.md", "python/readme/README.md"),
    ("docs/python.md", "python/readme/docs/python.md"),
    ("driver/python/README.md", "python/readme/driver/python/README.md"),
    ("driver/python/bench/staged_d2h.py", "python/bench/staged_d2h.py"),
    ("driver/python/bench/one_call.py", "python/bench/one_call.py"),
    ("driver/python/bench/blocks.py", "python/bench/blocks.py"),
    ("driver/python/bench/safetensors_load.py", "python/bench/safetensors_load.py"),
    ("driver/python/bench/async_lag.py", "python/bench/async_lag.py"),
    ("driver/python/bench/empty_pool.py", "python/bench/empty_pool.py"),
    ("driver/python/bench/offload_loop.py", "python/bench/offload_loop.py"),
    ("driver/python/bench/decode_loop.py", "python/bench/decode_loop.py"),
];

/// The bundle must travel to the GPU host in one call.
const SIZE_LIMIT: u64 = 64 << 20;

pub(crate) fn main(args: &[String]) -> ExitCode {
    let out = match args {
        [] => PathBuf::from("target/hostcopy-gpu-bundle"),
        [flag, dir] if flag == "--out" => PathBuf::from(dir),
        [help] if help == "-h" || help == "--help" => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        _ => {
            eprintln!("error: unknown options {args:?}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match bundle(&out) {
        Ok(size) => {
            let (mib, out) = (size as f64 / f64::from(1 << 20), out.display());
            println!("gpu-bundle: {out} ({mib:.1} MiB); on the GPU host: `bash {out}/plan.sh tests|benches`");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("gpu-bundle: {error}");
            ExitCode::FAILURE
        }
    }
}

fn bundle(out: &Path) -> Result<u64, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask is in the workspace");
    let _ = fs::remove_dir_all(out);
    for dir in ["bin", "python/tests", "python/bench", "python/wheels", "python/other-wheels"] {
        fs::create_dir_all(out.join(dir)).map_err(|e| format!("{}: {e}", out.display()))?;
    }
    println!("gpu-bundle: building (profile gpu-bundle)");
    let driver = ["-p", "hostcopy-driver", "--all-features", "--profile", "gpu-bundle"];
    let tests = [
        "test",
        "--no-run",
        "--test",
        "gpu",
        "--test",
        "gpu_fault",
        "--test",
        "gpu_staging",
        "--test",
        "gpu_cudarc",
        "--test",
        "driver_loading",
    ];
    let programs = ["build", "--example", "staged_d2h", "--example", "kv_offload", "--bench", "staged_copy"];
    for build in [&tests[..], &programs[..]] {
        for (name, path) in executables(cargo(root).args(build).args(driver))? {
            copy(&path, &out.join("bin").join(name))?;
        }
    }
    capi_example(root, &out.join("bin/stager_copy"))?;
    for (from, to) in FILES {
        copy(&root.join(from), &out.join(to))?;
    }
    // The Python package's abi3 wheel (maturin); gpu.sh installs it offline.
    command::run(Command::new(root.join("driver/python/build-wheel.sh")).arg(out.join("python/wheels")))?;
    other_wheels(&out.join("python/other-wheels"));
    let steps: String = STEPS.iter().map(|(name, limit, command)| format!("{name}\t{limit}\t{command}\n")).collect();
    fs::write(out.join("steps"), steps).map_err(|e| e.to_string())?;
    fs::write(out.join("MANIFEST"), manifest(out)?).map_err(|e| e.to_string())?;
    let size = folder_size(out)?;
    if size > SIZE_LIMIT {
        return Err(format!("the bundle is {size} bytes, over the {SIZE_LIMIT}-byte limit of a GPU call"));
    }
    Ok(size)
}

/// `driver/capi/examples/stager_copy.c`, linked with the staging engine's
/// C library built with feature `bench`: 1 GiB each way through the C API
/// and the Rust API side by side, on one stager.
fn capi_example(root: &Path, program: &Path) -> Result<(), String> {
    let capi = root.join("driver/capi");
    let target = capi.join("target");
    let manifest = capi.join("Cargo.toml");
    let build = ["build", "--release", "--features", "bench", "--manifest-path"];
    command::run(cargo(root).args(build).arg(&manifest).arg("--target-dir").arg(&target))?;
    // The static library's native dependencies (rustc's list, less the
    // -lcuda it opens at run time instead).
    let native = ["-ldl", "-lgcc_s", "-lutil", "-lrt", "-lpthread", "-lm", "-lc"];
    let mut cc = Command::new("cc");
    cc.args(["-std=c99", "-O2", "-s", "-D_POSIX_C_SOURCE=200809L", "-DHOSTCOPY_RUST_BASELINE", "-I"])
        .arg(capi.join("include"))
        .arg(capi.join("examples/stager_copy.c"))
        .arg(target.join("release/libhostcopy_stager.a"))
        .args(native)
        .arg("-o")
        .arg(program);
    command::run(&mut cc).map(drop)
}

/// Wheels of other projects the benchmarks compare with and the GPU host
/// lacks, for its Python (CPython 3.12, x86-64 Linux). Optional: where pip
/// cannot fetch one, the bundle is built without it and the benchmark prints
/// that it has no row for that package.
const OTHER_WHEELS: &[&str] = &["fastsafetensors==0.5.0"];

fn other_wheels(folder: &Path) {
    let platforms = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"];
    for wheel in OTHER_WHEELS {
        let mut pip = Command::new("python3");
        pip.args(["-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:"])
            .args(["--python-version", "3.12", "--implementation", "cp"])
            .args(platforms.iter().flat_map(|platform| ["--platform", platform]))
            .arg("-d")
            .arg(folder)
            .arg(wheel);
        match command::run(&mut pip) {
            Ok(_) => println!("gpu-bundle: {wheel} in python/other-wheels"),
            Err(error) => println!("gpu-bundle: without {wheel} (its benchmark row is left out): {error}"),
        }
    }
}

fn cargo(root: &Path) -> Command {
    let mut cargo = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cargo.current_dir(root).arg("--quiet");
    cargo
}

/// Runs a cargo build with JSON messages; the executables it made, by target name.
fn executables(command: &mut Command) -> Result<Vec<(String, PathBuf)>, String> {
    let messages = command::run(command.args(["--message-format", "json-render-diagnostics"]))?.stdout;
    let built: Vec<(String, PathBuf)> = messages
        .lines()
        .filter(|line| line.contains("\"reason\":\"compiler-artifact\""))
        .filter_map(|line| Some((json_string(line, "\"target\":{")?, json_string(line, "\"executable\":")?.into())))
        .collect();
    if built.is_empty() { Err(format!("`{command:?}` made no executables")) } else { Ok(built) }
}

/// The string value after `key` in one line of cargo's JSON: `"name":"..."`
/// inside the object `key` opens, or the value right after `key`.
fn json_string(line: &str, key: &str) -> Option<String> {
    let rest = line.split(key).nth(1)?;
    let rest = if key.ends_with('{') { rest.split("\"name\":").nth(1)? } else { rest };
    let value = rest.strip_prefix('"')?;
    Some(value[..value.find('"')?].to_owned())
}

fn copy(from: &Path, to: &Path) -> Result<(), String> {
    if let Some(folder) = to.parent() {
        fs::create_dir_all(folder).map_err(|e| format!("{}: {e}", folder.display()))?;
    }
    fs::copy(from, to).map(drop).map_err(|e| format!("copy {} to {}: {e}", from.display(), to.display()))
}

fn folder_size(dir: &Path) -> Result<u64, String> {
    let mut size = 0;
    for entry in fs::read_dir(dir).map_err(|e| e.to_string())? {
        let entry = entry.map_err(|e| e.to_string())?;
        let meta = entry.metadata().map_err(|e| e.to_string())?;
        size += if meta.is_dir() { folder_size(&entry.path())? } else { meta.len() };
    }
    Ok(size)
}

/// The revision and toolchain the bundle was built from, and its files' sizes.
fn manifest(out: &Path) -> Result<String, String> {
    let revision = command::run(Command::new("git").args(["describe", "--always", "--dirty"]));
    let rustc = command::run(Command::new("rustc").arg("--version"));
    let mut text = format!("hostcopy GPU bundle\nrevision: {}", revision.map(|o| o.stdout).unwrap_or_default());
    text += &rustc.map(|o| o.stdout).unwrap_or_default();
    for dir in ["bin", "python/wheels", "python/other-wheels"] {
        for entry in fs::read_dir(out.join(dir)).map_err(|e| e.to_string())?.flatten() {
            let len = entry.metadata().map(|m| m.len()).unwrap_or(0);
            text += &format!("{dir}/{}: {len} bytes\n", entry.file_name().to_string_lossy());
        }
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_string_finds_target_names_and_executables() {
        let line =
            r#"{"reason":"compiler-artifact","target":{"kind":["test"],"name":"gpu"},"executable":"/w/gpu-0123"}"#;
        assert_eq!(json_string(line, "\"target\":{").as_deref(), Some("gpu"));
        assert_eq!(json_string(line, "\"executable\":").as_deref(), Some("/w/gpu-0123"));
        assert_eq!(json_string(r#"{"executable":null}"#, "\"executable\":"), None);
    }

    #[test]
    fn every_step_runs_something_the_bundle_has() {
        let script = include_str!("../scripts/gpu-run.sh");
        assert!(script.contains("export HOSTCOPY_REQUIRE_GPU=1"));
        assert!(script.trim_end().lines().last().unwrap().contains("summary"), "summary last");
        let bundled = [
            "bin/gpu",
            "bin/gpu_fault",
            "bin/gpu_staging",
            "bin/gpu_cudarc",
            "bin/driver_loading",
            "bin/staged_d2h",
            "bin/kv_offload",
            "bin/staged_copy",
            "bin/stager_copy",
        ];
        for (name, _, command) in STEPS {
            let program = command.split_whitespace().next().unwrap();
            let file = FILES.iter().any(|(_, to)| to == &program);
            assert!(file || bundled.contains(&program), "step {name} runs {program}");
        }
    }

    /// The plan travels in the bundle; its `tests` mode runs every test
    /// binary and example that run.sh runs, its `benches` mode the
    /// benchmark, and every Python benchmark it names is in the bundle.
    #[test]
    fn the_plan_runs_what_the_bundle_holds() {
        assert!(FILES.contains(&("xtask/gpu-runs/plan.sh", "plan.sh")), "gpu-bundle copies plan.sh");
        let plan = include_str!("../gpu-runs/plan.sh");
        let body = |mode: &str| {
            let start = plan.find(&format!("\n{mode}() {{\n")).unwrap_or_else(|| panic!("plan.sh has no {mode}()"));
            &plan[start..start + plan[start..].find("\n}\n").unwrap()]
        };
        let (tests, benches) = (body("tests"), body("benches"));
        for (name, _, command) in STEPS {
            let program = command.split_whitespace().next().unwrap();
            let Some(binary) = program.strip_prefix("bin/") else { continue };
            let mode = if binary == "staged_copy" || binary == "stager_copy" { benches } else { tests };
            let runs = mode.lines().any(|line| {
                line.trim_start().starts_with("step ") && line.split_whitespace().any(|word| word == program)
            });
            assert!(runs, "plan.sh does not run {program} (run.sh's step {name})");
        }
        assert!(tests.contains("python/gpu.sh"), "plan.sh tests runs the Python suite");
        let bundled = |to: &str| FILES.iter().any(|(_, bundle)| *bundle == to);
        let defaults = plan.split("PY_BENCHES-").nth(1).and_then(|rest| rest.split('}').next()).unwrap_or("");
        let cases = plan.split("py_bench_args() {").nth(1).unwrap().split("esac").next().unwrap();
        let named: Vec<&str> =
            cases.lines().filter_map(|line| line.trim().split_once(") echo")).map(|(n, _)| n).collect();
        assert!(defaults.split_whitespace().count() >= 3, "PY_BENCHES defaults: {defaults:?}");
        for bench in defaults.split_whitespace().chain(named.iter().copied().filter(|n| *n != "*")) {
            // generate_*: offload_loop.py's generate rows on one shape.
            let script = if bench.starts_with("generate_") { "offload_loop" } else { bench };
            assert!(bundled(&format!("python/bench/{script}.py")), "plan.sh runs python/bench/{script}.py");
        }
        assert!(plan.contains("generate_*) script=offload_loop"), "plan.sh runs generate_* from offload_loop.py");
    }

    /// Every test file and benchmark that gpu.sh runs is copied into the
    /// bundle, and every file the bundle copies exists.
    #[test]
    fn the_bundle_holds_what_gpu_sh_runs() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        for (from, _) in FILES {
            assert!(root.join(from).is_file(), "{from} is not in the workspace");
        }
        let bundled = |to: &str| FILES.iter().any(|(_, bundle)| *bundle == to);
        let gpu_sh = include_str!("../../driver/python/gpu.sh");
        let tests: Vec<&str> =
            gpu_sh.split("\"$here/tests/").skip(1).map(|rest| &rest[..rest.find('"').unwrap()]).collect();
        assert!(tests.len() >= 6, "gpu.sh names its test files as \"$here/tests/NAME\": {tests:?}");
        for test in tests {
            let readme = format!("python/readme/driver/python/tests/{test}");
            assert!(bundled(&format!("python/tests/{test}")) || bundled(&readme), "gpu.sh runs tests/{test}");
        }
        let benches: Vec<&str> =
            gpu_sh.lines().filter_map(|line| line.strip_prefix("run_bench ")?.split_whitespace().next()).collect();
        assert!(benches.contains(&"offload_loop"), "gpu.sh runs its benchmarks as `run_bench NAME LOG`: {benches:?}");
        for bench in benches {
            assert!(bundled(&format!("python/bench/{bench}.py")), "gpu.sh runs bench/{bench}.py");
        }
    }
}
