# Run 111, call 2: generate with HostOffloadedCache staged (nothing
# registered) on both shapes: the stores chosen per upload beside cached
# and streaming stores for every upload, DynamicCache and transformers'
# offloaded cache beside them.
B=target/hostcopy-gpu-bundle
R=$OUT/r; mkdir -p $R
step() { local name=$1 limit=$2; shift 2; local t0=$(date +%s); timeout $limit "$@" > $R/$name.log 2>&1; echo "$name rc $? $(( $(date +%s) - t0 )) s" >> $R/steps.txt; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/machine.txt
T=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --target $T $B/python/wheels/hostcopy-*.whl > $R/pip.log 2>&1
step gqa 260 env PYTHONPATH=$T python3 $B/python/bench/offload_loop.py --only-generate --variants stores --rounds 3
step link 300 env PYTHONPATH=$T python3 $B/python/bench/offload_loop.py --only-generate --variants stores --rounds 3 --kv-heads 32 --batch 4 --prompt 2048
tar czf $OUT/run.tgz -C $OUT r
{
cat $R/machine.txt $R/steps.txt
for s in gqa link; do echo "-- $s"; grep -E '^(model:|generate tok/s)|^  (bound:|.*x the bound|DynamicCache:|transformers offloaded:|HostOffloadedCache[^:]*: [0-9])|^\| (generate tok/s|ms a decoded)' $R/$s.log | cut -c1-300; done
} > $OUT/summary.txt
rm -rf $R
cat $OUT/summary.txt
