# The bundle of 1eceb0a (lean rows with 4 and 8 MiB chunks, decode_loop --stagers); baseline 70698ac in $B/base.
B=target/hostcopy-gpu-bundle; GENERATE_VARIANTS=all PLAN_SECONDS=230 BENCH_GROUPS=lean BENCH_RUNS=3 BENCH_SECONDS=100 PY_BENCHES="generate_gqa" OUT=$OUT bash $B/plan.sh benches
OUT=/tmp/side SIDE_BENCHES="one_call decode_loop" DECODE_ARGS="--rounds 2 --matmuls 16 --kinds none,pinned,hostcopy --stagers w4,w2,c4,c8" timeout 220 bash $B/side_by_side.sh $B/base 1
