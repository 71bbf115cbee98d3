#!/bin/bash
# Run 69, on the new defaults (one stream, edges from 2 MiB, 8 MiB chunks to the device, the last chunks to the device streamed): settings compared transfer by transfer in rotation (chunk,
# buffers, edge chunks, streams, the stores that fill a staging buffer for
# the device; pinned memory in the same rotation), with traced timelines.
# Benchmarks only.
#     bash target/hostcopy-gpu-bundle/run69-plan.sh
set -u
here=$(cd "$(dirname "$0")" && pwd)
if [ -x "$here/bin/staged_copy" ]; then B=$here; else B=$PWD/target/hostcopy-gpu-bundle; fi
OUT=${OUT:-$B/out}
RES=/tmp/res
rm -rf $RES
mkdir -p $OUT $RES
export HOSTCOPY_REQUIRE_GPU=1
{ date -u; nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader; nproc; head -2 $B/MANIFEST; lscpu | grep -E 'Model name|cache|NUMA|Socket|Thread'; cat /proc/loadavg; } > $RES/machine.txt 2>&1
cd $B
for v in base; do
    case $v in
        base) env= ;;
        poll) env="HOSTCOPY_X_COPIER_POLL=1" ;;
    esac
    timeout -k 5 330 env $env bin/staged_copy --only one-transfer,sizes --runs 3 --max-gib 4 --out $RES/$v > $RES/$v.log 2>&1
    echo "$v rc=$?" >> $RES/machine.txt
done
cat /proc/loadavg >> $RES/machine.txt
tar -czf $OUT/results.tgz -C /tmp res
{
    cat $RES/machine.txt
    for v in base; do
        echo "=== $v"
        grep -E '^one transfer, (D2H|H2D) [0-9]+ [MG]iB of pinned \(|^interleaved, (D2H|H2D)|^CPU seconds per GiB|^per chunk of|back to back' $RES/$v/bench.txt | cut -c1-400
    done
    awk '!/^\|/ {split($0, g, " [(]"); group = g[1]} group ~ /^sizes, / && /staged|pinned/ {print group " " $0}' $RES/base/bench.txt | cut -c1-200
    echo "=== timelines base"
    sed -n '/^timeline/,/finished/p' $RES/base/bench.txt
} > $OUT/summary.txt 2>&1
cat $OUT/summary.txt
