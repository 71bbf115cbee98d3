# The bundle of bb4c844 (uploads below 512 MiB through streaming stores; reverted in 4a0a645).
B=target/hostcopy-gpu-bundle; GENERATE_VARIANTS=default PLAN_SECONDS=450 BENCH_GROUPS=lean BENCH_RUNS=3 BENCH_SECONDS=70 PY_BENCHES="generate_gqa generate_link decode_loop" OUT=$OUT bash $B/plan.sh all
