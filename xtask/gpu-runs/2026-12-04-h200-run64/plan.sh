#!/bin/bash
# Run 64: a medium transfer's timeline with the device's own stamps (the
# chunk's wait met, its copy done), under three ways of waiting: as built;
# the copier polling each chunk's event; and polling with the workers
# spinning 1 ms between chunks. Benchmarks only.
#     bash target/hostcopy-gpu-bundle/run64-plan.sh
set -u
here=$(cd "$(dirname "$0")" && pwd)
if [ -x "$here/bin/staged_copy" ]; then B=$here; else B=$PWD/target/hostcopy-gpu-bundle; fi
OUT=${OUT:-$B/out}
RES=/tmp/res
rm -rf $RES
mkdir -p $OUT $RES
export HOSTCOPY_REQUIRE_GPU=1
{ date -u; nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader; nproc; head -2 $B/MANIFEST; } > $RES/machine.txt 2>&1
cd $B
for v in base poll pollspin; do
    case $v in
        base) env= ;;
        poll) env="HOSTCOPY_X_COPIER_POLL=1" ;;
        pollspin) env="HOSTCOPY_X_COPIER_POLL=1 HOSTCOPY_X_WORKER_SPIN_US=1000" ;;
    esac
    timeout -k 5 100 env $env bin/staged_copy --only one-transfer --runs 5 --out $RES/$v > $RES/$v.log 2>&1
    echo "$v rc=$?" >> $RES/machine.txt
done
tar -czf $OUT/results.tgz -C /tmp res
{
    cat $RES/machine.txt
    for v in base poll pollspin; do
        echo "=== $v"
        grep -E '^one transfer, (D2H|H2D) [0-9]+ [MG]iB of pinned' $RES/$v/bench.txt | cut -c1-400
    done
    for v in base pollspin; do
        echo "=== timelines $v"
        sed -n '/^timeline.*16 MiB, 1 streams\|^timeline.*2 MiB, 1 streams/,/finished/p' $RES/$v/bench.txt
    done
} > $OUT/summary.txt 2>&1
cat $OUT/summary.txt
