#!/bin/bash
# Run 53: the gather kernel through device scratch. Every GPU test (the
# staging tests move blocks of 4 KiB, 4097 bytes and 16 KiB with every
# DeviceCopies, the kernel's included), the Python GPU tests, the block
# benchmark from 4 KiB (hostcopy's Auto beside torch) and the Rust batch
# benchmark (DeviceCopies::Batch, Loop and Kernel side by side).
# Also run 51's probe (the kernel writing pinned memory directly, the
# table in device memory, beside the kernel into device scratch and one
# copy), when its files are in the bundle (plans/, from commit 8040786).
# One call: `run53-plan.sh`.
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
{ date -u; nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader; nproc; } > $RES/machine.txt 2>&1
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
step bench 280 bin/staged_copy --only batches --runs 3 --max-gib 1 --out $RES
if [ -f $B/python/bench/gather_probe.py ]; then
cd $PY
step probe 120 python3 $B/python/bench/gather_probe.py --ptx $B/python/bench/gather.ptx --repeat 3
fi
fi
echo; cat $RES/machine.txt; printf '%s' "$summary"
tail -n 14 $RES/blocks.log
tail -n 20 $RES/probe.log 2>/dev/null
grep -i "scattered\|staged, DeviceCopies" $RES/bench.txt 2>/dev/null | head -40
save
