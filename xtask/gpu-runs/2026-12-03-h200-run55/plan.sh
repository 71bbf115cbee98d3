#!/bin/bash
# Run 55: the batch check on a bitmap (no sort of a batch's random
# slots), the kernel's launches off the staging buffer's turn (to the
# host packed before the wait for the buffer, to the device scattered
# after its event), and the populate probe (`populate-probe.c`, built
# statically on the development host into the bundle's bin/: mmap,
# MADV_HUGEPAGE and MADV_POPULATE_WRITE over 8, 12 and 16 threads, 1 to
# 64 GiB, with the kernel's THP fault counters; after the pool rows, so
# that their first pool is still the VM's first touch of that memory).
# Every GPU test, both block benchmarks, the pool and never-touched
# rows. One call: `run55-plan.sh`.
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
step blocks 120 python3 $B/python/bench/blocks.py --total-mib 256 --repeat 3 --blocks-kib 4,16,64,256
cd $B
step bench 200 bin/staged_copy --only batches --runs 3 --max-gib 1 --out $RES
cd $PY
step pool 150 python3 $B/python/bench/empty_pool.py --pool-gib 4 64 --sizes-mib 1024 4096 --runs 3
cd $B
step populate 60 bin/populate-probe 4
fi
echo; cat $RES/machine.txt; printf '%s' "$summary"
tail -n 22 $RES/blocks.log
tail -n 20 $RES/pool.log
cat $RES/populate.log
grep -i "scattered\|staged, DeviceCopies" $RES/bench.txt 2>/dev/null | head -40
save
