#!/bin/bash
# Run 60, on the final code of issue 40: every GPU test of the bundle (the
# Rust test binaries and examples, the Python suite through gpu.sh with the
# offload tests, the README's GPU blocks, the safetensors parity and the
# exit reproducer ten times), then the benchmark rows issue 40 reads: the
# Rust `staged_copy` groups after the 1 GiB reference, at 4 GiB and below
# (one transfer by size both ways, blocking and in a scope; the per-chunk
# cost; another library's host functions; CPU seconds per GiB; any newer
# group such as queued non-blocking uploads), and the Python offload loop,
# one call and await lag. One call, under 9 minutes: each step has its own
# limit, cut further so the whole ends by DEADLINE; a step with no time
# left is skipped and says so. Logs in $OUT/results.tgz (res/NAME.log,
# res/python/*.log, res/bench/bench.{txt,csv}), the summary also in
# $OUT/summary.txt, and printed last.
#
# From the repository root, after `cargo xtask gpu-bundle` (which copies
# this script into the bundle):
#     bash target/hostcopy-gpu-bundle/run60-plan.sh
set -u
T0=$(date +%s)
DEADLINE=$((T0 + ${PLAN_SECONDS:-525}))
here=$(cd "$(dirname "$0")" && pwd)
if [ -x "$here/bin/staged_copy" ]; then B=$here; else B=$PWD/target/hostcopy-gpu-bundle; fi
OUT=${OUT:-$B/out}
RES=/tmp/res
rm -rf $RES
mkdir -p $OUT $RES/python $RES/bench
summary=""
save() { tar -czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
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
# (Arguments as the bundle's run.sh gives them.)
[ -x bin/gpu_staging ] && step gpu_staging 120 bin/gpu_staging --test-threads=1
[ -x bin/gpu ] && step gpu 60 bin/gpu --test-threads=1
for t in gpu_fault:45 gpu_cudarc:45 driver_loading:30; do
    [ -x bin/${t%:*} ] && step ${t%:*} ${t#*:} bin/${t%:*}
done
for t in staged_d2h kv_offload; do
    [ -x bin/$t ] && step $t 30 bin/$t
done

# The Python GPU suite: the tests and the exit reproducer (the benchmarks
# run below, each with its own limit).
step python 220 env HOSTCOPY_GPU_BENCHES= OUT=$RES/python bash $B/python/gpu.sh $B/python/wheels

# The Rust rows: every group but those issue 40 does not read (a group the
# bench has gained since runs too): sizes (64 MiB to 4 GiB beside the
# driver's path), batches (one transfer by size against pinned, blocking and
# in a scope), chunk-cost (per chunk, the host side alone, another
# library's host functions, CPU seconds per GiB); 3 runs each.
groups=$(bin/staged_copy --only none 2>&1 | sed -n 's/.*(groups: \(.*\))/\1/p' | tr -d ' ')
only=$(echo "$groups" | tr ',' '\n' | grep -v -x -E 'sweep|small|two-gpus|fresh|cudarc' | paste -sd, -)
only=${only:-sizes,batches,chunk-cost}
echo "groups $groups; run: $only" > $RES/staged_copy.groups
step staged_copy 170 bin/staged_copy --only "$only" --runs 3 --max-gib 4 --out $RES/bench

# The Python rows, from the installed wheel (never the source tree).
cd $PY
export PYTHONPATH=$PY
step offload_loop 150 python3 $B/python/bench/offload_loop.py
step one_call 100 python3 $B/python/bench/one_call.py --sizes-mib 64 1024 --repeat 3 --csv $RES/python/one_call.csv
step async_lag 60 python3 $B/python/bench/async_lag.py --seconds 1.5

{
    echo
    cat $RES/machine.txt | head -n 5
    echo "staged_copy: $(cat $RES/staged_copy.groups)"
    echo "-- steps: result, time, counts (total $(($(date +%s) - T0)) s)"
    printf '%s' "$summary"
    echo "-- failing tests"
    grep -h -E '^(test .* FAILED|FAILED |ERROR )|panicked at|^_{3,} .* _{3,}$' $RES/*.log | head -n 15
    grep -v 'rc=0, FATAL or not rethrown: 0' $RES/python/python_exit.log 2>/dev/null | head -n 12
    echo "-- Rust rows (bench.txt notes): one transfer % of pinned; per chunk; CPU; foreign host functions"
    grep -E '^one transfer, (D2H|H2D) [0-9]+ [MG]iB of pinned \(|^per chunk of|^the host side alone, per copy|^foreign host functions|^CPU seconds per GiB|^caller share, ' $RES/bench/bench.txt 2>/dev/null | cut -c1-330
    awk '!/^\|/ {split($0, g, " [(]"); group = g[1]} group ~ /^sizes, / && /staged/ {print group " " $0}' $RES/bench/bench.txt 2>/dev/null
    grep -q -E '^one transfer, (D2H|H2D) 4 GiB' $RES/bench/bench.txt 2>/dev/null || echo "(no one-transfer row at 4 GiB in this bench)"
    queued=$(grep -i -E '405|back to back|queued' $RES/bench/bench.txt 2>/dev/null | grep -v '^|' | cut -c1-330)
    echo "${queued:-(no row of eight non-blocking 405 MB uploads queued back to back in this bench)}"
    echo "-- offload loop"
    grep -E '^(model:|hostcopy: made ready|pinned: made ready|prefill|generate)' $RES/offload_loop.log | cut -c1-300
    sed -n '/^| ratio /,$p' $RES/offload_loop.log
    echo "-- one call"
    grep -E '^(per call,|blocking=False return,)' $RES/one_call.log
    echo "-- async lag"
    grep -E '^(asyncio|uvloop): await max lag' $RES/async_lag.log
    echo "-- steps (name, result, seconds, counts)"
    printf '%s' "$summary"
} > $OUT/summary.txt 2>&1
save
cat $OUT/summary.txt
