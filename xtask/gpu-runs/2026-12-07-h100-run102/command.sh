# The same bundle as run 101, the machine still warm: the link-bound generate shape and the decode loop (staged_copy given no group: it exits at once).
B=target/hostcopy-gpu-bundle; PLAN_SECONDS=300 BENCH_GROUPS=none PY_BENCHES="generate_link decode_loop" GENERATE_VARIANTS=register OUT=$OUT bash $B/plan.sh benches
