# The bundle of the review's fixes and Register::Now in one piece (the commit "Register::Now registers a buffer in one piece").
B=target/hostcopy-gpu-bundle; PLAN_SECONDS=580 BENCH_GROUPS=registered BENCH_RUNS=5 BENCH_SECONDS=170 PY_BENCHES="generate_gqa" GENERATE_VARIANTS=register OUT=$OUT bash $B/plan.sh all
