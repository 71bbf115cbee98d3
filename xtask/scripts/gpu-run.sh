#!/bin/sh
# hostcopy GPU run, copied into the bundle by `cargo xtask gpu-bundle`.
# Runs each line of ./steps (NAME<TAB>SECONDS<TAB>COMMAND, from the bundle's
# folder, with $out the results folder): the GPU tests, the sticky-error
# test, the Python consumer, the examples, the benchmark; prints a
# summary table last. Results in $OUT (or ./out next to this script):
# run.log, machine.txt, bench.{txt,csv,svg}.
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$here/out}
export out
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

cd "$here"
tab=$(printf '\t')
while IFS="$tab" read -r name limit command; do
    step "$name" "$limit" sh -c "$command" < /dev/null
done < "$here/steps"

grep -E '^(test |test result|    )' "$log" | grep -v '^test result: ok. 0 passed' | tail -n 40
[ -f "$out/bench.txt" ] && cat "$out/bench.txt"
[ -f "$out/python_one_call.log" ] && tail -n 45 "$out/python_one_call.log"
[ -f "$out/python_safetensors.log" ] && tail -n 7 "$out/python_safetensors.log"
[ -f "$out/python_async.log" ] && tail -n 14 "$out/python_async.log"
printf '\n'
cat "$out/machine.txt"
printf '| step         | result                 |  time |\n|---|---|---|\n%s' "$summary"
