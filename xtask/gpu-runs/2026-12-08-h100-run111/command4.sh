# Run 111, call 4, on the final bundle's warm machine: offload_loop with
# the weights offload rows side by side (pinned ring, prefetch 2 and 1,
# staged, registered) and the generate rows of --variants register.
B=target/hostcopy-gpu-bundle; T=$(mktemp -d); python3 -m pip install -q --no-index --no-deps --target $T $B/python/wheels/hostcopy-*.whl; cd $T && timeout 280 env PYTHONPATH=$T python3 /$OLDPWD/$B/python/bench/offload_loop.py --variants register --rounds 3 > $OUT/offload.log 2>&1; echo rc $?; grep -vE "^\s*$" $OUT/offload.log | grep -iE "ring|registered|staged|prefetch|pinned|x " | cut -c1-220 | tail -40
