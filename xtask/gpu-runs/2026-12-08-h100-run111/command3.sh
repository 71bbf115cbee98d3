# Run 111, call 3, on the final bundle (each upload's stores chosen by
# whether its caller waits for it): every GPU test; the lean group at
# 16 MiB; the registered 16 MiB row; the decode-like loop beside a
# stager of cached stores (k); generate on both shapes with the staged
# cache's stores variants.
B=target/hostcopy-gpu-bundle
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/machine.txt
nproc >> $R/machine.txt
step() { local name=$1 limit=$2; shift 2; local t0=$(date +%s); timeout $limit "$@" > $R/$name.log 2>&1; echo "$name rc $? $(( $(date +%s) - t0 )) s" >> $R/steps.txt; }
PLAN_SECONDS=380 OUT=$R/plan PLAN_RES=$R/plan-res bash $B/plan.sh tests > $R/plan.txt 2>&1
echo "plan rc $?" >> $R/steps.txt
for n in 0 1 2; do
    step reg16-$n 40 bash -c "cd $B && bin/staged_copy --only registered --quick --runs 15 --out $R/reg16-$n"
done
step lean16 60 bash -c "cd $B && bin/staged_copy --only lean --quick --runs 9 --out $R/lean16"
T=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --target $T $B/python/wheels/hostcopy-*.whl > $R/pip.log 2>&1
step decode 90 env PYTHONPATH=$T python3 $B/python/bench/decode_loop.py --kinds none,pinned,hostcopy --stagers k --csv $R/decode.csv
step gqa 90 env PYTHONPATH=$T python3 $B/python/bench/offload_loop.py --only-generate --variants stores --rounds 3
step link 90 env PYTHONPATH=$T python3 $B/python/bench/offload_loop.py --only-generate --variants stores --rounds 3 --kv-heads 32 --batch 4 --prompt 2048
tar czf $OUT/run.tgz -C $OUT r
{
cat $R/machine.txt $R/steps.txt
tail -16 $R/plan.txt
for f in $R/reg16-*.log; do echo "== ${f#$R/}"; grep "^registered memory: D2H" $f | cut -c1-600; done
grep -E "^lean, (D2H|H2D)" $R/lean16.log | cut -c1-500
tail -6 $R/decode.log
for s in gqa link; do echo "-- $s"; grep -E '^  (bound:|DynamicCache:|transformers offloaded:|HostOffloadedCache[^:]*: [0-9])|^generate tok/s' $R/$s.log | cut -c1-160; done
} > $OUT/summary.txt
rm -rf $R
cat $OUT/summary.txt
