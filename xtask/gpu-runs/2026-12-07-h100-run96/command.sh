# The bundle of 6aa6241 (lean variants: chunks, streaming stores, one stream with 2 MiB edges).
B=target/hostcopy-gpu-bundle; PLAN_SECONDS=200 BENCH_GROUPS=lean BENCH_RUNS=5 BENCH_SECONDS=180 PY_BENCHES="" OUT=$OUT bash $B/plan.sh benches
