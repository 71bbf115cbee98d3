#!/bin/bash
# Run 58: the never-touched rows alone, on the code where a chunk the
# prefault has not reached is faulted in by its own copy (cache-warm,
# cached stores, parts cut at huge-page multiples) instead of being
# populated first: the Rust `fresh` group and the Python pool and
# never-touched rows (4 GiB pool only). One call.
B=target/hostcopy-gpu-bundle; export HOSTCOPY_REQUIRE_GPU=1 PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --target /tmp/pyhc $B/python/wheels/*.whl
mkdir -p /tmp/res
(cd $B && timeout 150 bin/staged_copy --only fresh --runs 3 --max-gib 4 --out /tmp/res > /tmp/res/fresh.log 2>&1)
cd /tmp/pyhc && PYTHONPATH=/tmp/pyhc timeout 100 python3 $OLDPWD/$B/python/bench/empty_pool.py --pool-gib 4 --sizes-mib 1024 4096 --runs 3 > /tmp/res/pool.log 2>&1
cp /tmp/res/* $OUT/
grep -A16 "never-touched vec" /tmp/res/bench.txt; grep "never-touched" /tmp/res/bench.txt | tail -3; tail -14 /tmp/res/pool.log
