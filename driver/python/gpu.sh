#!/usr/bin/env bash
# The Python package on a GPU host: installs the built wheel offline into a
# temporary folder, runs the GPU tests with pytest, then the staged D2H
# benchmarks. Logs go to $OUT when set (python_gpu_tests.log,
# python_bench.log, python_one_call.log and .csv, python_blocks.log,
# python_safetensors.log, python_async.log). Exits nonzero if either fails.
#
# Usage: driver/python/gpu.sh FOLDER_WITH_THE_WHEEL
# The host needs Python 3.9+ with cuda.core, cuda-bindings, numpy and pytest
# (torch and safetensors for the model-file test and benchmark);
# no network, no Rust. PYTHON picks the interpreter (default python3).
# HOSTCOPY_REQUIRE_GPU=0 lets the tests skip where there is no GPU.
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

"$python" -m pytest -q -rs -p no:cacheprovider "$here/tests/test_gpu.py" "$here/tests/test_gpu_arrays.py" "$here/tests/test_gpu_safetensors.py" 2>&1 | tee "$out/python_gpu_tests.log"
tests=${PIPESTATUS[0]}
if [ "$tests" -eq 5 ]; then
    echo "no GPU test ran (the module skipped, or nothing was collected)" | tee -a "$out/python_gpu_tests.log"
fi
"$python" "$here/bench/staged_d2h.py" 2>&1 | tee "$out/python_bench.log"
bench=${PIPESTATUS[0]}
"$python" "$here/bench/one_call.py" --csv "$out/python_one_call.csv" 2>&1 | tee "$out/python_one_call.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || bench=1
"$python" "$here/bench/blocks.py" 2>&1 | tee "$out/python_blocks.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || bench=1
"$python" "$here/bench/safetensors_load.py" 2>&1 | tee "$out/python_safetensors.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || bench=1
"$python" "$here/bench/async_lag.py" 2>&1 | tee "$out/python_async.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || bench=1
echo "python GPU tests: exit $tests; python benchmark: exit $bench"
[ "$tests" -eq 0 ] && [ "$bench" -eq 0 ]
