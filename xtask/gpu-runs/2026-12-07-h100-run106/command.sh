# Run 106, 2026-12-07, NVIDIA H100 80GB HBM3, driver 580.159.04: the bundle
# of 801753a (the module's copies look their stager up by the device their
# device side named; the offloaded KV cache's stale uploads; the registered
# group with registered and pinned memory through cuMemcpy and registered
# memory polled): every GPU test, the registered group, one call, then
# stager_copy twice with 11 runs.
B=target/hostcopy-gpu-bundle
PLAN_SECONDS=520 BENCH_GROUPS=registered BENCH_RUNS=3 BENCH_SECONDS=130 PY_BENCHES="one_call" OUT=$OUT bash $B/plan.sh all > $OUT/plan.txt 2>&1
for i in 1 2; do $B/bin/stager_copy 1024 11 > $OUT/stager_copy_11_$i.log 2>&1; done
# (printed: to host C/Rust 0.996 and 1.022, to device 0.987 and 1.049)
