# Run 108, 2026-12-07, NVIDIA H100 80GB HBM3, driver 580.159.04: the bundle
# of d273b85 (the paced wait of a blocking transfer of registered memory;
# the module's copies read a cuda.core Buffer's device_id themselves):
# stager_copy with 21 runs, then every GPU test, the registered group and
# one call.
B=target/hostcopy-gpu-bundle
timeout 100 $B/bin/stager_copy 1024 21 > $OUT/stager_copy_21.log 2>&1
PLAN_SECONDS=440 BENCH_GROUPS=registered BENCH_RUNS=3 BENCH_SECONDS=110 PY_BENCHES="one_call" OUT=$OUT bash $B/plan.sh all > $OUT/plan.txt 2>&1
# (printed: C/Rust run by run, median (quartiles): to host 0.998 (0.992 to
# 1.001), to device 0.989 (0.959 to 1.023))
