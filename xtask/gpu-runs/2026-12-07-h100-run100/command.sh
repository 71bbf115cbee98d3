# The bundle of 36dc87b (registered host memory: HostBuffer::register, the direct route, Python register=, offload register=).
B=target/hostcopy-gpu-bundle; PLAN_SECONDS=585 BENCH_GROUPS=registered BENCH_RUNS=5 BENCH_SECONDS=200 PY_BENCHES="decode_loop" OUT=$OUT bash $B/plan.sh all
