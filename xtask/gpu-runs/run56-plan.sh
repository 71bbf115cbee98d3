#!/bin/bash
# Run 56: huge pages faulted in by a zero written to each 4 KiB page
# (`prefault::write_pages`) instead of MADV_POPULATE_WRITE, in
# `HostBuffer` / `hostcopy.empty` and in the stagers' prefault of a
# never-touched destination. Every GPU test, the pool and never-touched
# rows in Python (`empty_pool.py`) and Rust (`staged_copy --only fresh`),
# the populate probe again. One call: `run56-plan.sh`.
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
    echo "== $name rc=$rc ${t}s"; tail -n 4 $RES/$name.log
    save
}
export HOSTCOPY_REQUIRE_GPU=1
{ date -u; nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader; nproc;
  cat /sys/kernel/mm/transparent_hugepage/enabled /sys/kernel/mm/transparent_hugepage/defrag;
  grep -E "MemTotal|MemFree|^Cached|AnonHugePages" /proc/meminfo; } > $RES/machine.txt 2>&1
PART=${1:-all}
cd $B
if [ $PART != bench ]; then
step staging 200 bin/gpu_staging --test-threads=1
step gpu 90 bin/gpu --test-threads=1
step fault 60 bin/gpu_fault
step cudarc 45 bin/gpu_cudarc
step loading 30 bin/driver_loading
PY=/tmp/pyhc
python3 -m pip install -q --no-index --no-deps --target $PY python/wheels/hostcopy-*.whl > $RES/pip.log 2>&1
export PYTHONPATH=$PY
cd $PY
step pytests 150 python3 -m pytest -q -rs -p no:cacheprovider $(ls $B/python/tests/test_gpu*.py)
fi
if [ $PART != tests ]; then
PY=/tmp/pyhc
[ -d $PY/hostcopy ] || python3 -m pip install -q --no-index --no-deps --target $PY $B/python/wheels/hostcopy-*.whl > $RES/pip.log 2>&1
export PYTHONPATH=$PY
cd $PY
step pool 150 python3 $B/python/bench/empty_pool.py --pool-gib 4 64 --sizes-mib 1024 4096 --runs 3
cd $B
step populate 60 bin/populate-probe 2
step fresh 120 bin/staged_copy --only fresh --runs 3 --max-gib 4 --out $RES
fi
echo; cat $RES/machine.txt; printf '%s' "$summary"
tail -n 20 $RES/pool.log
cat $RES/populate.log
grep -i -A12 "never-touched\|making a host" $RES/bench.txt 2>/dev/null | head -40
save
