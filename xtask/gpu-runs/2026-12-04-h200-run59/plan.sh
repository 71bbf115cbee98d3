#!/bin/bash
# Run 59, on the final code: every GPU test (Rust and Python), then the
# never-touched rows side by side on one machine: `staged_copy_ahead`
# (the code before, commit 14e0ed7: each chunk populated before its copy)
# against `staged_copy` (a chunk the prefault has not reached faulted in
# by its own copy), alternating, twice each; the model file warm with
# fastsafetensors read buffered beside its default O_DIRECT. One call:
# `run59-plan.sh`.
set -u
ROOT=$PWD
B=$ROOT/target/hostcopy-gpu-bundle
RES=/tmp/res; mkdir -p $RES
summary=""
save() { tar -czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
step() {
    name=$1; lim=$2; shift 2
    s=$(date +%s)
    timeout $lim "$@" > $RES/$name.log 2>&1
    rc=$?
    t=$(( $(date +%s) - s ))
    summary="$summary$name rc=$rc ${t}s
"
    echo "== $name rc=$rc ${t}s"; tail -n 3 $RES/$name.log
    save
}
export HOSTCOPY_REQUIRE_GPU=1 PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader; nproc;
  grep -E "MemTotal|MemFree|^Cached|AnonHugePages" /proc/meminfo; } > $RES/machine.txt 2>&1
PY=/tmp/pyhc
python3 -m pip install -q --no-index --no-deps --target $PY $B/python/wheels/hostcopy-*.whl $B/python/other-wheels/*.whl > $RES/pip.log 2>&1
export PYTHONPATH=$PY
cd $B
step staging 200 bin/gpu_staging --test-threads=1
step gpu 90 bin/gpu --test-threads=1
step fault 60 bin/gpu_fault
step cudarc 45 bin/gpu_cudarc
step loading 30 bin/driver_loading
cd $PY
step pytests 150 python3 -m pytest -q -rs -p no:cacheprovider $(ls $B/python/tests/test_gpu*.py)
cd $B
for round in 1 2; do
    for v in staged_copy_ahead staged_copy; do
        mkdir -p $RES/$v$round
        step $v$round 90 bin/$v --only fresh --runs 3 --max-gib 4 --out $RES/$v$round
    done
done
cd $PY
step safetensors 120 python3 $B/python/bench/safetensors_load.py --repeat 3 --no-cold
echo; cat $RES/machine.txt; printf '%s' "$summary"
for round in 1 2; do for v in staged_copy_ahead staged_copy; do
    echo "-- $v, round $round"; grep "never-touched vec" -A15 $RES/$v$round/bench.txt | grep "prefault\|HostBuffer"
done; done
tail -n 12 $RES/safetensors.log
save
