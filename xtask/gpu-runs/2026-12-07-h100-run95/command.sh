# The bundle of 828f05b (a traced transfer of each engine kind at 16 MiB).
B=target/hostcopy-gpu-bundle; PLAN_SECONDS=150 BENCH_GROUPS=lean BENCH_RUNS=5 BENCH_SECONDS=120 PY_BENCHES="" OUT=$OUT bash $B/plan.sh benches
