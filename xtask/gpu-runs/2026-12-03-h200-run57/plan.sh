#!/bin/bash
# Run 57: what run 56 was planned for (huge pages faulted in by a zero
# written to each 4 KiB page, in `HostBuffer` / `hostcopy.empty` and the
# stagers' prefault of a never-touched destination), plus the block rows
# both ways and the model file warm and cold beside safetensors and
# fastsafetensors (its wheel in the bundle's python/other-wheels). Every
# GPU test first. One call: `run57-plan.sh`.
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
export HOSTCOPY_REQUIRE_GPU=1 PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader; nproc;
  cat /sys/kernel/mm/transparent_hugepage/enabled /sys/kernel/mm/transparent_hugepage/defrag;
  grep -E "MemTotal|MemFree|^Cached|AnonHugePages" /proc/meminfo; df -h /tmp; } > $RES/machine.txt 2>&1
PART=${1:-all}
PY=/tmp/pyhc
python3 -m pip install -q --no-index --no-deps --target $PY $B/python/wheels/hostcopy-*.whl $B/python/other-wheels/*.whl > $RES/pip.log 2>&1
export PYTHONPATH=$PY
cd $B
if [ $PART != bench ]; then
step staging 200 bin/gpu_staging --test-threads=1
step gpu 90 bin/gpu --test-threads=1
step fault 60 bin/gpu_fault
step cudarc 45 bin/gpu_cudarc
step loading 30 bin/driver_loading
cd $PY
step pytests 150 python3 -m pytest -q -rs -p no:cacheprovider $(ls $B/python/tests/test_gpu*.py)
fi
if [ $PART != tests ]; then
cd $PY
step pool 150 python3 $B/python/bench/empty_pool.py --pool-gib 4 64 --sizes-mib 1024 4096 --runs 3
cd $B
step fresh 120 bin/staged_copy --only fresh --runs 3 --max-gib 4 --out $RES
mv $RES/bench.txt $RES/fresh.txt 2>/dev/null
step bench 200 bin/staged_copy --only batches --runs 3 --max-gib 1 --out $RES
cd $PY
step blocks 120 python3 $B/python/bench/blocks.py --total-mib 256 --repeat 3 --blocks-kib 4,16,64,256
step safetensors 240 python3 $B/python/bench/safetensors_load.py --repeat 3
fi
echo; cat $RES/machine.txt; printf '%s' "$summary"
tail -n 18 $RES/pool.log
grep -i -A10 "never-touched" $RES/fresh.txt 2>/dev/null | head -24
grep -i "scattered" $RES/bench.txt 2>/dev/null | head -24
tail -n 17 $RES/blocks.log
tail -n 20 $RES/safetensors.log
save
