#!/bin/bash
# hostcopy's GPU run plan. `cargo xtask gpu-bundle` copies it into the
# bundle; on the GPU host (no Rust, no network), from the repository root:
#
#     bash target/hostcopy-gpu-bundle/plan.sh tests     # about 3.5 minutes
#     bash target/hostcopy-gpu-bundle/plan.sh benches   # about 3.5 minutes
#
# (Runs 61 and 70: the Rust tests and examples 65 to 71 s, the Python suite
# 124 to 131 s; staged_copy with the default groups 76 s, offload_loop about
# 40 s, one_call about 37 s, async_lag 21 to 31 s.)
#
# Modes:
#   tests    every Rust GPU test binary the bundle holds (gpu_staging, gpu,
#            gpu_fault, gpu_cudarc, driver_loading), the examples
#            (staged_d2h, kv_offload), and the whole Python GPU suite
#            through python/gpu.sh: the GPU, array, async, safetensors,
#            offload and safetensors-parity tests, the README's Python
#            blocks, the exit reproducer ten times (its benchmarks off).
#   benches  the Rust benchmark `staged_copy` (the groups BENCH_GROUPS
#            names, once per BENCH_VARIANTS entry), then the Python
#            benchmarks PY_BENCHES names, each from the installed wheel.
#   all      tests, then benches, under one PLAN_SECONDS.
#
# Each step has its own time limit, cut further so the whole ends within
# PLAN_SECONDS; a step with under 15 s left is skipped and says so. Where
# nvidia-smi lists no GPU, or the bundle lacks what a step runs, the step is
# skipped with its reason; a program that reports itself skipped (a line
# "NAME: skipped: ...") counts as skipped, never as passed. The summary
# table comes last, also in $OUT/summary.txt; every log is in
# $OUT/results.tgz (NAME.log per step, python/*.log, bench*/bench.{txt,csv}).
# Exit status: 0 every step passed; 1 a step failed or ran out of time;
# 2 none failed but some were skipped (no GPU, say).
#
# Knobs (environment variables, with their defaults):
#   PLAN_SECONDS=525   the whole plan's time (one call on the GPU host is
#                      limited to 600 s)
#   OUT=BUNDLE/out     where results.tgz and summary.txt go
#   PLAN_RES=/tmp/hostcopy-plan-MODE   the logs while the plan runs
#                      (emptied first)
#   PYTHON=python3     the interpreter (3.9+, with cuda.core, numpy, pytest;
#                      torch, transformers, accelerate for the offload rows)
#   HOSTCOPY_REQUIRE_GPU=1   the tests fail, rather than skip, where the GPU
#                      is unusable
#   BENCH_GROUPS=one-transfer,sizes,chunk-cost   staged_copy --only (`all`:
#                      every group; a group this bench lacks is left out
#                      and named in the summary). Groups: sweep, sizes,
#                      small, two-gpus, fresh, batches, one-transfer,
#                      chunk-cost, cudarc.
#   BENCH_RUNS=3       staged_copy --runs
#   BENCH_MAX_GIB=4    staged_copy --max-gib
#   BENCH_SECONDS=200  staged_copy's limit, per variant
#   BENCH_VARIANTS=base   staged_copy once per entry, NAME or
#                      NAME:VAR=VALUE,VAR=VALUE (those variables set for it),
#                      e.g. "base poll:HOSTCOPY_X_COPIER_POLL=1" as runs 64
#                      and 65 compared; output in bench/ for `base`,
#                      bench-NAME/ for the others
#   PY_BENCHES="offload_loop one_call async_lag decode_loop"   python/bench/
#                      NAME.py to run, in order, with the arguments below;
#                      the bundle also has staged_d2h, blocks,
#                      safetensors_load and empty_pool; generate_gqa and
#                      generate_link run offload_loop's generate rows alone
#                      on the two shapes of issue 53
set -u
mode=${1:-}
case $mode in
    tests | benches | all) ;;
    *)
        sed -n '2,/^set -u$/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
        exit 64
        ;;
esac

t0=$(date +%s)
deadline=$((t0 + ${PLAN_SECONDS:-525}))
here=$(cd "$(dirname "$0")" && pwd)
if [ -d "$here/bin" ]; then bundle=$here; else bundle=$PWD/target/hostcopy-gpu-bundle; fi
out=${OUT:-$bundle/out}
res=${PLAN_RES:-/tmp/hostcopy-plan-$mode}
python=${PYTHON:-python3}
rm -rf "$res"
mkdir -p "$out" "$res/python" || exit 2
export HOSTCOPY_REQUIRE_GPU=${HOSTCOPY_REQUIRE_GPU:-1} PYTHONUNBUFFERED=1

# Why nothing here can run on a GPU (empty: it can).
no_gpu=""
if [ ! -d "$bundle/bin" ]; then
    no_gpu="no bundle at $bundle (build it with \`cargo xtask gpu-bundle\`)"
elif ! command -v nvidia-smi > /dev/null; then
    no_gpu="no GPU: nvidia-smi not found"
elif ! nvidia-smi -L 2> /dev/null | grep -q '^GPU '; then
    no_gpu="no GPU: nvidia-smi lists none"
fi

rows=""
failed=0
skipped=0
row() { # row NAME RESULT SECONDS COUNTS: one line of the summary table
    rows="$rows$(printf '| %-16s | %-36s | %5s | %s |' "$1" "$2" "$3" "$4")
"
}
save() { tar -czf "$out/results.tgz" -C "$(dirname "$res")" "$(basename "$res")" 2> /dev/null; }
skip() { # skip NAME REASON
    row "$1" "skipped: $2" - ""
    skipped=$((skipped + 1))
    echo "== $1 skipped: $2"
}
counts() { # counts LOG...: the counts the logs state: libtest's, pytest's, the exit reproducer's
    {
        grep -h '^test result:' "$@" |
            awk '{p += $4; f += $6; i += $8} END {if (NR) printf "rust %d passed, %d failed, %d ignored; ", p, f, i}'
        grep -h -E '^=* ?[0-9]+ (passed|failed|skipped|error)' "$@" | tail -n 1 | tr -d '='
        grep -h '^exit reproducer:' "$@" | tail -n 1
    } 2> /dev/null | tr '\n' ' ' | sed 's/ *$//'
}
step() { # step NAME SECONDS COMMAND...: run from the current folder, output in $res/NAME.log
    local name=$1 limit=$2 left start rc seconds result
    shift 2
    if [ -n "$no_gpu" ]; then skip "$name" "$no_gpu"; return; fi
    local arg
    for arg in "$@"; do
        case $arg in
            bin/*) [ -x "$arg" ] || { skip "$name" "$arg is not in the bundle"; return; } ;;
        esac
    done
    left=$((deadline - $(date +%s)))
    [ "$limit" -gt "$left" ] && limit=$left
    if [ "$limit" -lt 15 ]; then skip "$name" "no time left (PLAN_SECONDS)"; return; fi
    start=$(date +%s)
    timeout -k 5 "$limit" "$@" > "$res/$name.log" 2>&1
    rc=$?
    seconds=$(($(date +%s) - start))
    case $rc in
        0) result=passed ;;
        124 | 137) result="TIMED OUT (${limit}s)" ;;
        *) result="FAILED (exit $rc)" ;;
    esac
    local own
    own=$(grep -m1 -E '^[A-Za-z0-9_.-]+: skipped' "$res/$name.log")
    if [ "$rc" -eq 0 ] && [ -n "$own" ]; then
        result="skipped (${own#*: skipped: })"
        skipped=$((skipped + 1))
    elif [ "$rc" -ne 0 ]; then
        failed=$((failed + 1))
    fi
    local logs=("$res/$name.log")
    [ "$name" = python ] && logs+=("$res"/python/*.log)
    row "$name" "$result" "$seconds" "$(counts "${logs[@]}")"
    echo "== $name $result ${seconds}s"
    tail -n 3 "$res/$name.log"
    save
}

{
    date -u
    if [ -n "$no_gpu" ]; then echo "$no_gpu"; else
        nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader
    fi
    echo "host cores: $(nproc)"
    grep -E 'MemTotal|MemFree' /proc/meminfo
    lscpu 2> /dev/null | grep -E 'Model name|cache|NUMA|Socket|Thread'
    echo "load: $(cat /proc/loadavg)"
    cat "$bundle/MANIFEST" 2> /dev/null || echo "no MANIFEST in $bundle"
} > "$res/machine.txt" 2>&1

tests() {
    cd "$bundle" 2> /dev/null || true
    step gpu_staging 120 bin/gpu_staging --test-threads=1
    step gpu 60 bin/gpu --test-threads=1
    step gpu_fault 45 bin/gpu_fault
    step gpu_cudarc 45 bin/gpu_cudarc
    step driver_loading 30 bin/driver_loading
    step staged_d2h 30 bin/staged_d2h
    step kv_offload 30 bin/kv_offload
    if [ -z "$no_gpu" ] && ! command -v "$python" > /dev/null; then
        skip python "$python not found (PYTHON)"
    else
        step python 300 env HOSTCOPY_GPU_BENCHES= OUT="$res/python" PYTHON="$python" \
            bash "$bundle/python/gpu.sh" "$bundle/python/wheels"
    fi
}

# The arguments each Python benchmark ran with in the recorded runs.
py_bench_args() { # py_bench_args NAME: its limit in seconds, then its arguments
    case $1 in
        offload_loop) echo 170 ;;
        # offload_loop's generate rows alone, on the two shapes issue 53
        # holds HostOffloadedCache to.
        generate_gqa) echo 200 --only-generate --variants "${GENERATE_VARIANTS:-default}" --rounds 3 ;;
        generate_link) echo 240 --only-generate --variants "${GENERATE_VARIANTS:-default}" --rounds 3 --kv-heads 32 --batch 4 --prompt 2048 ;;
        one_call) echo 90 --sizes-mib 64 1024 --repeat 3 --csv "$res/python/one_call.csv" ;;
        async_lag) echo 90 --seconds 1.5 ;;
        decode_loop) echo 120 --csv "$res/python/decode_loop.csv" ;;
        staged_d2h) echo 90 ;;
        blocks) echo 120 --total-mib 256 --repeat 3 --blocks-kib 4,16,64,256 ;;
        safetensors_load) echo 120 --repeat 3 --no-cold ;;
        empty_pool) echo 150 --pool-gib 4 64 --sizes-mib 1024 4096 --runs 3 ;;
        *) echo 120 ;;
    esac
}

bench_dirs=""
benches() {
    cd "$bundle" 2> /dev/null || true
    local groups=${BENCH_GROUPS:-one-transfer,sizes,chunk-cost} only=() known
    if [ "$groups" != all ]; then
        # The bench names its groups when --only names none it has.
        known=$(bin/staged_copy --only none 2>&1 | sed -n 's/.*(groups: \(.*\))/\1/p' | tr -d ' ')
        if [ -n "$known" ]; then
            local kept
            kept=$(echo "$groups" | tr ',' '\n' | grep -x -F "$(echo "$known" | tr ',' '\n')" | paste -sd, -)
            [ "$kept" = "$groups" ] || echo "staged_copy: groups $groups asked, $known known: running ${kept:-none}" > "$res/staged_copy.groups"
            groups=$kept
        fi
        only=(--only "${groups:-none}")
    fi
    local variant name dir assigns step_name
    for variant in ${BENCH_VARIANTS:-base}; do
        name=${variant%%:*}
        assigns=()
        [ "$name" = "$variant" ] || IFS=, read -ra assigns <<< "${variant#*:}"
        if [ "$name" = base ]; then
            dir=bench step_name=staged_copy
        else
            dir=bench-$name step_name=staged_copy-$name
        fi
        bench_dirs="$bench_dirs $dir"
        step "$step_name" "${BENCH_SECONDS:-200}" env "${assigns[@]}" bin/staged_copy "${only[@]}" \
            --runs "${BENCH_RUNS:-3}" --max-gib "${BENCH_MAX_GIB:-4}" --out "$res/$dir"
    done
    # The C API beside the Rust API on one stager, 1 GiB each way, 5 runs
    # (driver/capi/examples/stager_copy.c).
    step stager_copy 120 bin/stager_copy 1024 5

    # The Python rows, from the installed wheel (never the source tree).
    local py="" bench limit args
    if [ -z "$no_gpu" ]; then
        if ! command -v "$python" > /dev/null; then
            py="$python not found (PYTHON)"
        else
            target=$(mktemp -d)
            # shellcheck disable=SC2064 # the folder is known now
            trap "rm -rf '$target'" EXIT
            local pip=("$python" -m pip install -q --no-index --no-deps --target "$target")
            if ! "${pip[@]}" "$bundle"/python/wheels/hostcopy-*.whl > "$res/pip.log" 2>&1; then
                py="the hostcopy wheel did not install (pip.log)"
            fi
            # The packages the benchmarks compare with, where the bundle has
            # them (a benchmark says which rows it lacks without them).
            local other
            for other in "$bundle"/python/other-wheels/*.whl; do
                [ -f "$other" ] && "${pip[@]}" "$other" >> "$res/pip.log" 2>&1
            done
            cd "$target" || py="no install folder"
            export PYTHONPATH=$target
        fi
    fi
    local script
    for bench in ${PY_BENCHES-offload_loop one_call async_lag decode_loop}; do
        read -r limit args <<< "$(py_bench_args "$bench")"
        script=$bench
        case $bench in generate_*) script=offload_loop ;; esac
        if [ -n "$no_gpu" ]; then
            skip "$bench" "$no_gpu"
        elif [ ! -f "$bundle/python/bench/$script.py" ]; then
            skip "$bench" "python/bench/$script.py is not in the bundle"
        elif [ -n "$py" ]; then
            skip "$bench" "$py"
        else
            # shellcheck disable=SC2086 # the arguments split at spaces
            step "$bench" "$limit" "$python" "$bundle/python/bench/$script.py" $args
        fi
    done
    echo "load after: $(cat /proc/loadavg)" >> "$res/machine.txt"
}

case $mode in
    tests) tests ;;
    benches) benches ;;
    all)
        tests
        benches
        ;;
esac

{
    echo
    head -n 3 "$res/machine.txt"
    grep -m1 '^revision' "$res/machine.txt"
    if [ "$mode" != benches ] && [ -z "$no_gpu" ]; then
        echo "-- failing tests"
        grep -h -E '^(test .* FAILED|FAILED |ERROR )|panicked at|^_{3,} .* _{3,}$' "$res"/*.log "$res"/python/*.log 2> /dev/null | head -n 20
        grep -h -v 'rc=0, FATAL or not rethrown: 0' "$res/python/python_exit.log" 2> /dev/null | head -n 12
    fi
    if [ "$mode" != tests ] && [ -z "$no_gpu" ]; then
        cat "$res/staged_copy.groups" 2> /dev/null
        for dir in $bench_dirs; do
            txt=$res/$dir/bench.txt
            [ -f "$txt" ] || continue
            echo "-- Rust rows ($dir)"
            grep -E '^one transfer, (D2H|H2D) [0-9]+ [MG]iB of pinned \(|^interleaved, (D2H|H2D)|^per chunk of|^the host side alone, per copy|^foreign host functions|^CPU seconds per GiB|^caller share, |^ *lean, (D2H|H2D) |^lean:' "$txt" | cut -c1-400
            awk '!/^\|/ {split($0, g, " [(]"); group = g[1]} (group ~ /^sizes, / || group ~ /^back to back/) && /staged|pinned/ {print group " " $0}' "$txt" | cut -c1-160
            sed -n '/^timeline/,/finished/p' "$txt" | head -n 40
        done
        if [ -f "$res/offload_loop.log" ]; then
            echo "-- offload loop"
            grep -E '^(model:|hostcopy: made ready|pinned: made ready|prefill|generate|per decoded token)' "$res/offload_loop.log" | cut -c1-300
            sed -n '/^| ratio /,$p' "$res/offload_loop.log"
        fi
        for bench in generate_gqa generate_link; do
            [ -f "$res/$bench.log" ] || continue
            echo "-- $bench"
            grep -E '^(model:|generate tok/s)|^  (bound:|.*x the bound|DynamicCache:|transformers offloaded:|HostOffloadedCache[^:]*: [0-9])' "$res/$bench.log" | cut -c1-300
        done
        if [ -f "$res/one_call.log" ]; then
            echo "-- one call"
            grep -E '^(per call,|call parts,|blocking=False return,)' "$res/one_call.log" | cut -c1-400
        fi
        if [ -f "$res/async_lag.log" ]; then
            echo "-- async lag"
            grep -E '^(asyncio|uvloop)' "$res/async_lag.log" | cut -c1-400
        fi
        if [ -f "$res/decode_loop.log" ]; then
            echo "-- decode loop"
            grep -E '^(decode_loop: |bound:)' "$res/decode_loop.log" | cut -c1-400
            sed -n '/^| kind /,$p' "$res/decode_loop.log" | grep '^|'
        fi
        for bench in staged_d2h blocks safetensors_load empty_pool; do
            [ -f "$res/$bench.log" ] && { echo "-- $bench"; tail -n 15 "$res/$bench.log"; }
        done
    fi
    echo
    echo "hostcopy GPU plan, $mode: $(($(date +%s) - t0)) s; $failed failed, $skipped skipped"
    echo "| step             | result                               |     s | counts |"
    echo "| ---------------- | ------------------------------------ | ----: | ------ |"
    printf '%s' "$rows"
} > "$out/summary.txt" 2>&1
save
cat "$out/summary.txt"
if [ "$failed" -gt 0 ]; then exit 1; elif [ "$skipped" -gt 0 ]; then exit 2; fi
