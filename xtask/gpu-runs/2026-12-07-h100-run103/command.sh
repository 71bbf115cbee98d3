# Run 103, 2026-12-07, NVIDIA H100 80GB HBM3, driver 580.159.04: the bundle
# of abece1b (background registration steps aside between ranges).
B=target/hostcopy-gpu-bundle
PLAN_SECONDS=570 BENCH_GROUPS=registered BENCH_RUNS=3 BENCH_SECONDS=230 PY_BENCHES="offload_loop" OUT=$OUT bash $B/plan.sh benches
