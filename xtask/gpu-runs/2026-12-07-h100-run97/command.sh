# The bundle of 6aa6241 with uploads below 256 MiB through streaming stores
# (the rule of bb4c844 at 256 MiB; reverted in 4a0a645); baseline 70698ac in $B/base.
B=target/hostcopy-gpu-bundle; GENERATE_VARIANTS=default PLAN_SECONDS=340 BENCH_GROUPS=lean BENCH_RUNS=3 BENCH_SECONDS=70 PY_BENCHES="generate_gqa generate_link" OUT=$OUT bash $B/plan.sh all
OUT=/tmp/side SIDE_BENCHES="decode_loop" DECODE_ARGS="--rounds 2 --matmuls 16 --kinds none,pinned,hostcopy --stagers k,s" timeout 170 bash $B/side_by_side.sh $B/base 1
