# Run 111, call 1: the 16 MiB registered row of this bundle (new: the
# paced wait timed from one event before the copies, each upload's stores
# chosen for it) and of 66dec38 (mid) in turn, then every GPU test on the
# new bundle.
B=target/hostcopy-gpu-bundle
MID=target/cmp/mid
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/machine.txt
nproc >> $R/machine.txt
step() { local name=$1 limit=$2; shift 2; local t0=$(date +%s); timeout $limit "$@" > $R/$name.log 2>&1; echo "$name rc $? $(( $(date +%s) - t0 )) s" >> $R/steps.txt; }
for b in mid new mid new mid new; do
    dir=$(pwd)/$B; [ $b = mid ] && dir=$(pwd)/$MID
    n=$(ls $R | grep -c "^reg16-$b")
    step reg16-$b-$n 40 bash -c "cd $dir && bin/staged_copy --only registered --quick --runs 15 --out $R/reg16-$b-$n"
done
PLAN_SECONDS=400 OUT=$R/plan PLAN_RES=$R/plan-res bash $B/plan.sh tests > $R/plan.txt 2>&1
echo "plan rc $?" >> $R/steps.txt
tar czf $OUT/run.tgz -C $OUT r
{
cat $R/machine.txt $R/steps.txt
for f in $R/reg16-*/bench.txt; do echo "== $f"; grep -E "registered memory, (D2H|H2D): (pinned|registered HostBuffer),.*16 MiB" $f | head -4; done
tail -16 $R/plan.txt
} > $OUT/summary.txt
rm -rf $R
cat $OUT/summary.txt
