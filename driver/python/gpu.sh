#!/usr/bin/env bash
# The Python package on a GPU host: installs the built wheel offline into a
# temporary folder, runs the GPU tests with pytest (with the offload tests,
# the README's Python blocks and the safetensors header parity), the exit
# reproducer (daemon threads inside hostcopy while the interpreter exits,
# ten times), then the benchmarks. Logs go to $OUT when set
# (python_gpu_tests.log, python_exit.log, python_bench.log,
# python_one_call.log and .csv, python_blocks.log, python_safetensors.log,
# python_async.log, python_offload_loop.log). Exits nonzero if the tests,
# the exit reproducer or a benchmark fails.
#
# Usage: driver/python/gpu.sh FOLDER_WITH_THE_WHEEL
# The host needs Python 3.9+ with cuda.core, cuda-bindings, numpy and pytest
# (torch and safetensors for the model-file test and benchmark; torch,
# transformers and accelerate for the offload tests and offload_loop.py);
# no network, no Rust. PYTHON picks the interpreter (default python3).
# HOSTCOPY_REQUIRE_GPU=0 lets the tests skip where there is no GPU.
# HOSTCOPY_GPU_BENCHES names the benchmarks to run, by file name without
# .py (default: staged_d2h one_call blocks safetensors_load async_lag
# offload_loop; empty: none, the tests alone).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
wheels="$(cd "${1:?usage: gpu.sh FOLDER_WITH_THE_HOSTCOPY_WHEEL}" && pwd)"
python="${PYTHON:-python3}"
out="${OUT:-$(mktemp -d)}"
mkdir -p "$out"
target="$(mktemp -d)"
trap 'rm -rf "$target"' EXIT

shopt -s nullglob
wheel=("$wheels"/hostcopy-*.whl)
if [ "${#wheel[@]}" -ne 1 ]; then
    echo "expected one hostcopy-*.whl in $wheels, found ${#wheel[@]}" >&2
    exit 2
fi
"$python" -m pip install --quiet --no-index --no-deps --target "$target" "${wheel[0]}" || exit 2
# Packages the benchmarks compare with (fastsafetensors), where the bundle
# brought them: python/other-wheels beside this script.
other=("$here"/other-wheels/*.whl)
if [ "${#other[@]}" -gt 0 ]; then
    "$python" -m pip install --quiet --no-index --no-deps --target "$target" "${other[@]}" || exit 2
fi
export PYTHONPATH="$target${PYTHONPATH:+:$PYTHONPATH}"
export HOSTCOPY_REQUIRE_GPU="${HOSTCOPY_REQUIRE_GPU:-1}"
# From the install folder, never the source tree (whose hostcopy/ has no
# compiled half).
cd "$target"
"$python" -c 'import sys, cuda.core, hostcopy; print("python", sys.version.split()[0], "cuda.core", cuda.core.__version__, "hostcopy from", hostcopy.__file__)'

# test_readme_sim.py reads README.md, docs/python.md and
# driver/python/README.md three folders above itself: in the repository
# that is tests/ here; the GPU bundle keeps its copy, with the documents,
# under readme/.
readme="$here/readme/driver/python/tests/test_readme_sim.py"
[ -f "$readme" ] || readme="$here/tests/test_readme_sim.py"
guide="$(dirname "$readme")/test_offload_guide_sim.py"
"$python" -m pytest -q -rs -p no:cacheprovider "$here/tests/test_gpu.py" "$here/tests/test_gpu_arrays.py" "$here/tests/test_gpu_async.py" "$here/tests/test_gpu_safetensors.py" \
    "$here/tests/test_gpu_offload.py" "$here/tests/test_gpu_offload_kv_shapes.py" "$here/tests/test_gpu_registration.py" \
    "$here/tests/test_safetensors_parity.py" "$readme" "$guide" 2>&1 | tee "$out/python_gpu_tests.log"
tests=${PIPESTATUS[0]}
if [ "$tests" -eq 5 ]; then
    echo "no GPU test ran (the module skipped, or nothing was collected)" | tee -a "$out/python_gpu_tests.log"
fi

# The exit reproducer: the interpreter exits while daemon threads allocate
# host buffers and load the driver. Each run must exit 0 with no "FATAL" or
# "exception not rethrown" in its output (a bad run's last lines follow it).
exit_bad=0
for run in $(seq 10); do
    "$python" -c "
import threading, time, hostcopy
def f():
    while True: hostcopy.empty(64<<20)
def g():
    while True: hostcopy._native.load_driver()
for t in (f, f, g): threading.Thread(target=t, daemon=True).start()
time.sleep(0.3)" >"$target/exit.txt" 2>&1
    rc=$?
    fatal=$(grep -c -e FATAL -e 'not rethrown' "$target/exit.txt")
    echo "exit run $run: rc=$rc, FATAL or not rethrown: $fatal"
    if [ "$rc" -ne 0 ] || [ "$fatal" -ne 0 ]; then
        exit_bad=$((exit_bad + 1))
        tail -n 5 "$target/exit.txt" | sed 's/^/    /'
    fi
done >"$out/python_exit.log"
echo "exit reproducer: $exit_bad of 10 runs bad" | tee -a "$out/python_exit.log"
[ "$exit_bad" -eq 0 ] || [ "$tests" -ne 0 ] || tests=1

benches=" ${HOSTCOPY_GPU_BENCHES-staged_d2h one_call blocks safetensors_load async_lag offload_loop} "
bench=0
run_bench() { # run_bench NAME LOG [ARGS...]: bench/NAME.py into $out/LOG if HOSTCOPY_GPU_BENCHES names it
    local name=$1 log=$2
    shift 2
    case "$benches" in *" $name "*) ;; *) return 0 ;; esac
    "$python" "$here/bench/$name.py" "$@" 2>&1 | tee "$out/$log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || bench=1
}
run_bench staged_d2h python_bench.log
run_bench one_call python_one_call.log --csv "$out/python_one_call.csv"
run_bench blocks python_blocks.log
run_bench safetensors_load python_safetensors.log
run_bench async_lag python_async.log
run_bench offload_loop python_offload_loop.log
echo "python GPU tests: exit $tests; exit reproducer: $exit_bad bad of 10; python benchmark: exit $bench"
[ "$tests" -eq 0 ] && [ "$bench" -eq 0 ]
