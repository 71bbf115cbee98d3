#!/bin/bash
# Run 51: the gather kernel probe (tiny blocks both ways: hostcopy's block
# calls beside the kernel into pinned memory and through device scratch),
# then the block benchmark at 64 KiB and up for reference.
set -u
B=$PWD/target/hostcopy-gpu-bundle
RES=/tmp/res; mkdir -p $RES
save() { tar -czf $OUT/results.tgz -C /tmp res 2>/dev/null; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader; nproc; } > $RES/machine.txt 2>&1
PY=/tmp/pyhc
python3 -m pip install -q --no-index --no-deps --target $PY $B/python/wheels/hostcopy-*.whl > $RES/pip.log 2>&1
export PYTHONPATH=$PY
cd $PY
timeout 300 python3 $B/python/bench/gather_probe.py --ptx $B/python/bench/gather.ptx > $RES/gather_probe.log 2>&1; echo "gather_probe rc=$?"; save
timeout 150 python3 $B/python/bench/blocks.py --total-mib 512 --repeat 3 > $RES/blocks.log 2>&1; echo "blocks rc=$?"; save
cat $RES/machine.txt; tail -n 25 $RES/gather_probe.log; tail -n 12 $RES/blocks.log
