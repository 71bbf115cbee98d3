# Run 111, call 1: the 16 MiB registered row of this bundle (new: the
# paced wait timed from one event before the copies; each upload's stores
# chosen for it) and of 66dec38 (mid) in turn; the lean group (the
# engine's default stores beside cached and streaming stores for every
# upload, the lean rings); the decode-like loop with stagers of cached
# (k) and streaming (s) stores beside the default.
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
step lean 200 bash -c "cd $B && bin/staged_copy --only lean --runs 5 --out $R/lean"
T=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --target $T $B/python/wheels/hostcopy-*.whl > $R/pip.log 2>&1
step decode 180 env PYTHONPATH=$T python3 $B/python/bench/decode_loop.py --kinds none,pinned,hostcopy --stagers k,s --csv $R/decode.csv
tar czf $OUT/run.tgz -C $OUT r
{
cat $R/machine.txt $R/steps.txt
for f in $R/reg16-*.log; do echo "== ${f#$R/}"; grep "^registered memory: D2H" $f | sed 's/, registered through cuMemcpy[^;]*;/;/g' | cut -c1-400; done
grep -E "^ *lean, (D2H|H2D)|^lean:" $R/lean.log | cut -c1-700
tail -14 $R/decode.log
} > $OUT/summary.txt
rm -rf $R
cat $OUT/summary.txt
