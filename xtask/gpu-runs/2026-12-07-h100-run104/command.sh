# Run 104, 2026-12-07, NVIDIA H100 80GB HBM3, driver 580.159.04: the bundle
# of 59cdb9f (every GPU test; the registered group; the C API beside the
# Rust API; one call's cost), then stager_copy twice more with 11 runs.
B=target/hostcopy-gpu-bundle
PLAN_SECONDS=540 BENCH_GROUPS=registered BENCH_RUNS=3 BENCH_SECONDS=150 PY_BENCHES="one_call" OUT=$OUT bash $B/plan.sh all
for i in 1 2; do $B/bin/stager_copy 1024 11; done
# (printed: to host C/Rust 1.006 and 1.000, to device 0.994 and 0.999)
