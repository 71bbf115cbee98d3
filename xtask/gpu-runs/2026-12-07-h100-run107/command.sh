# Run 107, 2026-12-07, the same H100 host and lease as run 106, right after
# it, the same bundle (801753a): the one-transfer group, the offload rows
# and the KV cache's generate on the GQA shape, then stager_copy with 31 runs.
B=target/hostcopy-gpu-bundle
PLAN_SECONDS=480 BENCH_GROUPS=one-transfer BENCH_RUNS=3 BENCH_SECONDS=60 PY_BENCHES="offload_loop generate_gqa" OUT=$OUT bash $B/plan.sh benches > $OUT/plan.txt 2>&1
$B/bin/stager_copy 1024 31 > $OUT/stager_copy_31.log 2>&1
# (printed: to host C/Rust 0.979, to device 1.066)
