# Run 111, call 2: the lean group (the engine's default per-upload stores
# beside cached and streaming stores for every upload, the lean rings),
# then the decode-like loop with stagers of cached and of streaming
# stores beside the default.
B=target/hostcopy-gpu-bundle
R=$OUT/r; mkdir -p $R
step() { local name=$1 limit=$2; shift 2; local t0=$(date +%s); timeout $limit "$@" > $R/$name.log 2>&1; echo "$name rc $? $(( $(date +%s) - t0 )) s" >> $R/steps.txt; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/machine.txt
step lean 200 bash -c "cd $B && bin/staged_copy --only lean --runs 5 --out $R/lean"
T=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --target $T $B/python/wheels/hostcopy-*.whl > $R/pip.log 2>&1
step decode 200 env PYTHONPATH=$T python3 $B/python/bench/decode_loop.py --kinds none,pinned,hostcopy --stagers k,s --csv $R/decode.csv
tar czf $OUT/run.tgz -C $OUT r
{
cat $R/machine.txt $R/steps.txt
grep -E "^ *lean, (D2H|H2D)|^lean:" $R/lean.log | cut -c1-600
tail -14 $R/decode.log
} > $OUT/summary.txt
rm -rf $R
cat $OUT/summary.txt
