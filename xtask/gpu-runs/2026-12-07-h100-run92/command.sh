# The bundle of 3e8c12b (bundle copies the benches as in 2961703); baseline 70698ac in BASE.
B=target/hostcopy-gpu-bundle; PLAN_SECONDS=545 BENCH_GROUPS=lean,chunk-cost BENCH_RUNS=3 BENCH_SECONDS=220 PY_BENCHES="" OUT=$OUT bash $B/plan.sh all
