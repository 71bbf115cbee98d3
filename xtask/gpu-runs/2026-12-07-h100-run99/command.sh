# The bundle of a8841a7 (a transfer that ends without its stager; the awaiting layer without its state machine; the review's fixes).
B=target/hostcopy-gpu-bundle; PLAN_SECONDS=250 OUT=$OUT bash $B/plan.sh tests
