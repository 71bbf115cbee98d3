# The bundle of 2961703; baseline 70698ac in $B/base.
B=target/hostcopy-gpu-bundle; PLAN_SECONDS=405 BENCH_GROUPS=lean BENCH_RUNS=3 BENCH_SECONDS=60 PY_BENCHES="generate_gqa generate_link" OUT=$OUT bash $B/plan.sh benches
OUT=/tmp/side SIDE_BENCHES=decode_loop DECODE_ARGS="--rounds 2 --matmuls 16 --kinds none,pinned,hostcopy" timeout 150 bash $B/side_by_side.sh $B/base 2
