#!/bin/bash
# Run 63: where a medium transfer's fixed costs go. The benchmark's
# one-transfer groups (64 MiB to 1 GiB against pinned; by chunk, buffers,
# edge chunks and streams, with a traced timeline of one 64 MiB transfer
# per setting) and the per-chunk and CPU rows. Benchmarks only.
#     bash target/hostcopy-gpu-bundle/run63-plan.sh
set -u
here=$(cd "$(dirname "$0")" && pwd)
if [ -x "$here/bin/staged_copy" ]; then B=$here; else B=$PWD/target/hostcopy-gpu-bundle; fi
OUT=${OUT:-$B/out}
RES=/tmp/res
rm -rf $RES
mkdir -p $OUT $RES/bench
export HOSTCOPY_REQUIRE_GPU=1
{ date -u; nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader; nproc; cat $B/MANIFEST; } > $RES/machine.txt 2>&1
cd $B
timeout -k 5 400 bin/staged_copy --only one-transfer,chunk-cost --runs 5 --out $RES/bench > $RES/staged_copy.log 2>&1
echo "staged_copy rc=$?" >> $RES/machine.txt
tar -czf $OUT/results.tgz -C /tmp res
{
    cat $RES/machine.txt
    grep -E '^one transfer, (D2H|H2D) [0-9]+ [MG]iB of pinned|^per chunk of|^the host side alone, per copy|^CPU seconds per GiB' $RES/bench/bench.txt | cut -c1-400
    sed -n '/^timeline/,/finished/p' $RES/bench/bench.txt
} > $OUT/summary.txt 2>&1
cat $OUT/summary.txt
