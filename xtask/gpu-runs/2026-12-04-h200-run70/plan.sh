#!/bin/bash
# Run 70, on the final code: `tests` runs every GPU test of the bundle (the
# Rust test binaries and examples; the Python suite through gpu.sh with the
# async, offload, README and safetensors-parity tests; the exit reproducer
# ten times); `benches` the rows the open issues read (the Rust
# staged_copy groups one-transfer, sizes and chunk-cost; the Python offload
# loop with generate, one call, await lag three runs a loop). Two calls,
# each under 9 minutes: each step has its own limit, cut further so the
# whole ends by DEADLINE; a step with no time left is skipped and says so.
# Logs in $OUT/results.tgz, the summary also in $OUT/summary.txt, and
# printed last.
#     bash target/hostcopy-gpu-bundle/run70-plan.sh tests
#     bash target/hostcopy-gpu-bundle/run70-plan.sh benches
set -u
T0=$(date +%s)
DEADLINE=$((T0 + ${PLAN_SECONDS:-525}))
here=$(cd "$(dirname "$0")" && pwd)
if [ -x "$here/bin/staged_copy" ]; then B=$here; else B=$PWD/target/hostcopy-gpu-bundle; fi
OUT=${OUT:-$B/out}
MODE=${1:?usage: run70-plan.sh tests|benches}
RES=/tmp/res-$MODE
rm -rf $RES
mkdir -p $OUT $RES/python $RES/bench
summary=""
save() { tar -czf $OUT/results.tgz -C /tmp res-$MODE 2>/dev/null; }
step() { # step NAME SECONDS COMMAND...: output in $RES/NAME.log
    name=$1 lim=$2
    shift 2
    left=$((DEADLINE - $(date +%s)))
    [ "$lim" -gt "$left" ] && lim=$left
    if [ "$lim" -lt 15 ]; then
        summary="$summary$(printf '%-13s skipped: no time left' "$name")
"
        echo "== $name skipped: no time left"
        return
    fi
    s=$(date +%s)
    timeout -k 5 "$lim" "$@" > $RES/$name.log 2>&1
    rc=$?
    t=$(($(date +%s) - s))
    case $rc in 0) result=passed ;; 124 | 137) result="TIMED OUT (${lim}s)" ;; *) result="FAILED rc=$rc" ;; esac
    summary="$summary$(printf '%-13s %-20s %4ss  %s' "$name" "$result" "$t" "$(counts $RES/$name.log)")
"
    echo "== $name $result ${t}s"
    tail -n 3 $RES/$name.log
    save
}
counts() { # the pass/fail counts a log states: libtest's, pytest's, the exit reproducer's
    {
        grep -h '^test result:' "$@" | awk '{p += $4; f += $6} END {if (NR) printf "rust %d passed %d failed; ", p, f}'
        grep -h -E '^=* ?[0-9]+ (passed|failed|skipped|error)' "$@" | tail -n 1 | tr -d '='
        grep -h '^exit reproducer:' "$@"
    } 2>/dev/null | tr '\n' ' '
}
export HOSTCOPY_REQUIRE_GPU=1 PYTHONUNBUFFERED=1
{
    date -u
    nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader
    nproc
    grep -E "MemTotal|MemFree" /proc/meminfo
    cat $B/MANIFEST
} > $RES/machine.txt 2>&1
PY=/tmp/pyhc
python3 -m pip install -q --no-index --no-deps --target $PY $B/python/wheels/hostcopy-*.whl > $RES/pip.log 2>&1

# The Rust GPU tests and the examples, each binary the bundle holds.
cd $B
if [ "$MODE" = tests ]; then
    [ -x bin/gpu_staging ] && step gpu_staging 120 bin/gpu_staging --test-threads=1
    [ -x bin/gpu ] && step gpu 60 bin/gpu --test-threads=1
    for t in gpu_fault:45 gpu_cudarc:45 driver_loading:30; do
        [ -x bin/${t%:*} ] && step ${t%:*} ${t#*:} bin/${t%:*}
    done
    for t in staged_d2h kv_offload; do
        [ -x bin/$t ] && step $t 30 bin/$t
    done
    step python 300 env HOSTCOPY_GPU_BENCHES= OUT=$RES/python bash $B/python/gpu.sh $B/python/wheels
    {
        echo
        head -n 5 $RES/machine.txt
        echo "-- failing tests"
        grep -h -E '^(test .* FAILED|FAILED |ERROR )|panicked at|^_{3,} .* _{3,}$' $RES/*.log $RES/python/*.log 2>/dev/null | head -n 20
        grep -h 'exit reproducer' $RES/python/python_exit.log 2>/dev/null | tail -n 2
        echo "-- steps (name, result, seconds, counts)"
        printf '%s' "$summary"
    } > $OUT/summary.txt 2>&1
else
    step staged_copy 200 bin/staged_copy --only one-transfer,sizes,chunk-cost --runs 3 --max-gib 4 --out $RES/bench
    cd $PY
    export PYTHONPATH=$PY
    step offload_loop 170 python3 $B/python/bench/offload_loop.py
    step one_call 60 python3 $B/python/bench/one_call.py --sizes-mib 64 1024 --repeat 3 --csv $RES/python/one_call.csv
    step async_lag 90 python3 $B/python/bench/async_lag.py --seconds 1.5
    {
        echo
        head -n 5 $RES/machine.txt
        echo "-- Rust rows"
        grep -E '^one transfer, (D2H|H2D) [0-9]+ [MG]iB of pinned \(|^interleaved, (D2H|H2D)|^per chunk of|^the host side alone, per copy|^foreign host functions|^CPU seconds per GiB' $RES/bench/bench.txt 2>/dev/null | cut -c1-400
        awk '!/^\|/ {split($0, g, " [(]"); group = g[1]} (group ~ /^sizes, / || group ~ /^back to back/) && /staged|pinned/ {print group " " $0}' $RES/bench/bench.txt 2>/dev/null | cut -c1-160
        sed -n '/^timeline/,/finished/p' $RES/bench/bench.txt 2>/dev/null | head -n 30
        echo "-- offload loop"
        grep -E '^(model:|hostcopy: made ready|pinned: made ready|prefill|generate|per decoded token)' $RES/offload_loop.log | cut -c1-300
        sed -n '/^| ratio /,$p' $RES/offload_loop.log
        echo "-- one call"
        grep -E '^(per call,|blocking=False return,)' $RES/one_call.log
        echo "-- async lag"
        grep -E '^(asyncio|uvloop)' $RES/async_lag.log | cut -c1-400
        echo "-- steps (name, result, seconds, counts)"
        printf '%s' "$summary"
    } > $OUT/summary.txt 2>&1
fi
save
cat $OUT/summary.txt
