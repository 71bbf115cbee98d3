# Run 105, 2026-12-07, NVIDIA H100 80GB HBM3, driver 580.159.04: the bundle
# of 26ae86c (the registered bench's large buffer four ways).
B=target/hostcopy-gpu-bundle
cd $B && mkdir -p $OUT/bench && timeout 200 ./bin/staged_copy --only registered --runs 3 --out $OUT/bench > $OUT/staged_copy.log 2>&1
