# run 88: generate alone, 7 rounds, with the streaming-stores stager row (the wheel of f7a4e27; the bench was 28009e3's
# with that row added, its 'group 2' row still in place: f4017cd's bench with 'group 2' where it has 'group 1')
b=$PWD/target/hostcopy-gpu-bundle; python3 -m pip install --quiet --no-index --no-deps --target /tmp/site $b/python/wheels/hostcopy-*.whl; mkdir -p $OUT; PYTHONPATH=/tmp/site timeout 400 python3 driver/python/bench/offload_loop.py --only-generate --rounds 7 > $OUT/offload_loop.log 2>&1; echo rc=$?; grep -v "^  " $OUT/offload_loop.log | tail -20
