# Run 109, 2026-12-07, NVIDIA H100 80GB HBM3, driver 580.159.04, another
# host than run 108's: the bundle of abb3102 (the paced wait per size
# class, timed from before queuing). First call: every GPU test and the
# registered group (a stager_copy of 61 runs after it ran past its 80 s
# limit on this host and printed nothing).
B=target/hostcopy-gpu-bundle
PLAN_SECONDS=470 BENCH_GROUPS=registered BENCH_RUNS=3 BENCH_SECONDS=110 PY_BENCHES="" OUT=$OUT bash $B/plan.sh all > $OUT/plan.txt 2>&1
timeout 80 $B/bin/stager_copy 1024 61 > $OUT/stager_copy_61.log 2>&1
# Second call, the same lease: the registered group at 16 MiB alone with
# 15 runs, then stager_copy with 41 runs.
cd $B
timeout 60 bin/staged_copy --only registered --quick --runs 15 --out $OUT/reg16 > $OUT/reg16.log 2>&1
timeout 110 bin/stager_copy 1024 41 > $OUT/stager_copy_41.log 2>&1
# (printed: C/Rust 0.941 / 1.042, run by run 0.966 (0.803 to 1.171) /
# 0.990 (0.843 to 1.186); this host moved 1 GiB staged at 24-36 GB/s)
