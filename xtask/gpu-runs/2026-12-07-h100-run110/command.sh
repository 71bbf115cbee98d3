# The bundle of the paced wait timed on the GPU (new) and of abb3102
# (base) on one lease: the probes, the 16 MiB registered row of each in
# turn, then every GPU test and the registered group on the new bundle.
B=target/hostcopy-gpu-bundle
BASE=target/bundle-base
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/machine.txt
nproc >> $OUT/machine.txt
step() { local name=$1 limit=$2; shift 2; local t0=$(date +%s); timeout $limit "$@" > $OUT/$name.log 2>&1; echo "$name rc $? $(( $(date +%s) - t0 )) s" >> $OUT/steps.txt; }
step event_probe 60 python3 xtask/gpu-runs/event_probe.py
step register_probe 120 python3 xtask/gpu-runs/register_probe.py
for b in base new base new; do
    dir=$B; [ $b = base ] && dir=$BASE
    n=$(ls $OUT | grep -c "^reg16-$b")
    step reg16-$b-$n 45 bash -c "cd $dir && bin/staged_copy --only registered --quick --runs 9 --out $OUT/reg16-$b-$n"
done
PLAN_SECONDS=380 BENCH_GROUPS=registered BENCH_RUNS=3 BENCH_SECONDS=110 PY_BENCHES="" OUT=$OUT bash $B/plan.sh all > $OUT/plan.txt 2>&1
echo "plan rc $?" >> $OUT/steps.txt
cat $OUT/machine.txt $OUT/steps.txt
grep -E "^\|" $OUT/register_probe.log
tail -25 $OUT/event_probe.log
for f in $OUT/reg16-*/bench.txt; do echo "== $f"; grep -E "16 MiB" $f | head -6; done
tail -14 $OUT/plan.txt
