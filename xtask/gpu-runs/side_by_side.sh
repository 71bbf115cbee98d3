#!/bin/bash
# Two builds of hostcopy measured side by side in one lease of the GPU host:
# the bundle's (`cargo xtask gpu-bundle`) and a baseline built the same way
# from another commit into BASE (BASE/wheels/hostcopy-*.whl and
# BASE/bin/staged_copy, the benchmark built with profile gpu-bundle). Each
# benchmark runs for each build in turn, ROUNDS times, the order turning
# every round, so that a machine whose speed drifts drifts under both:
#   - python/bench/one_call.py: a call's cost beyond a pinned copy;
#   - python/bench/decode_loop.py: what uploads add to a decode step,
#     against torch's pinned copies in the same process;
#   - staged_copy --only one-transfer: one transfer against pinned memory.
# Each process compares with pinned memory inside itself; the two builds
# are compared through those ratios.
#
#     bash target/hostcopy-gpu-bundle/side_by_side.sh BASE [ROUNDS]
#
# SIDE_BENCHES (default "one_call decode_loop staged_copy") picks the
# benchmarks; DECODE_ARGS (default "--rounds 3 --matmuls 16 --kinds
# none,pinned,hostcopy": compute of about the link's time for the uploads)
# are decode_loop's arguments.
# Logs in $OUT (default BUNDLE/out-side-by-side): NAME-BUILD-ROUND.log; the
# summary last, also in $OUT/summary.txt.
set -u
base=${1:?usage: side_by_side.sh BASE [ROUNDS]}
rounds=${2:-2}
here=$(cd "$(dirname "$0")" && pwd)
if [ -d "$here/bin" ]; then bundle=$here; else bundle=$PWD/target/hostcopy-gpu-bundle; fi
out=${OUT:-$bundle/out-side-by-side}
python=${PYTHON:-python3}
mkdir -p "$out"
export PYTHONUNBUFFERED=1

if ! nvidia-smi -L 2> /dev/null | grep -q '^GPU '; then
    echo "side_by_side: skipped: no GPU (nvidia-smi lists none)"
    exit 2
fi
for need in "$base/bin/staged_copy" "$bundle/bin/staged_copy"; do
    [ -x "$need" ] || { echo "side_by_side: $need is missing" >&2; exit 2; }
done

# Each build's wheel in a folder of its own, found through PYTHONPATH.
sites=$(mktemp -d)
trap 'rm -rf "$sites"' EXIT
declare -A wheel=([new]="$bundle/python/wheels" [base]="$base/wheels")
declare -A bench=([new]="$bundle/bin/staged_copy" [base]="$base/bin/staged_copy")
for build in new base; do
    "$python" -m pip install -q --no-index --no-deps --target "$sites/$build" \
        "${wheel[$build]}"/hostcopy-*.whl > "$out/pip-$build.log" 2>&1 ||
        { echo "side_by_side: the $build wheel did not install (pip-$build.log)" >&2; exit 1; }
done

run() { # run NAME BUILD ROUND LIMIT COMMAND...
    local name=$1 build=$2 round=$3 limit=$4
    shift 4
    echo "== $name $build round $round"
    (cd "$sites/$build" && PYTHONPATH="$sites/$build" timeout -k 5 "$limit" "$@") \
        > "$out/$name-$build-$round.log" 2>&1
    echo "   exit $?"
}

benches=${SIDE_BENCHES-one_call decode_loop staged_copy}
read -r -a decode_args <<< "${DECODE_ARGS-"--rounds 3 --matmuls 16 --kinds none,pinned,hostcopy"}"
for round in $(seq 1 "$rounds"); do
    if [ $((round % 2)) -eq 1 ]; then order="new base"; else order="base new"; fi
    for build in $order; do
        for name in $benches; do
            case $name in
                one_call) run one_call "$build" "$round" 90 "$python" \
                    "$bundle/python/bench/one_call.py" --sizes-mib 64 --repeat 3 ;;
                decode_loop) run decode_loop "$build" "$round" 150 "$python" \
                    "$bundle/python/bench/decode_loop.py" "${decode_args[@]}" ;;
                staged_copy) run staged_copy "$build" "$round" 120 "${bench[$build]}" \
                    --only one-transfer --runs 3 --out "$out/staged_copy-$build-$round" ;;
                *) echo "side_by_side: no benchmark $name" >&2; exit 2 ;;
            esac
        done
    done
done

{
    echo "side by side: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
    for build in new base; do
        for round in $(seq 1 "$rounds"); do
            echo "-- $build, round $round"
            grep -h -E '^(per call|call parts)' "$out/one_call-$build-$round.log" 2> /dev/null
            grep -h -E '^(decode_loop|bound): |^\| (kind|ms |none|torch|hostcopy)' \
                "$out/decode_loop-$build-$round.log" 2> /dev/null
            grep -h -E '^one transfer|^\| (pinned|staged)' \
                "$out/staged_copy-$build-$round.log" 2> /dev/null
        done
    done
} | tee "$out/summary.txt"
