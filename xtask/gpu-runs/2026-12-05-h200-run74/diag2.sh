#!/bin/bash
set -u
bundle="$(cd "$(dirname "$0")" && pwd)"
target="$(mktemp -d)"
python3 -m pip install --quiet --no-index --no-deps --target "$target" "$bundle"/python/wheels/hostcopy-*.whl || exit 2
export PYTHONPATH="$target"
cd "$target"
timeout 60 python3 "$bundle/lock_probe.py" 2>&1 | tail -14
for args in "later legacy both 4" "now legacy both 4" "later own both 4" "later legacy d2h 4" "later legacy h2d 4" "later legacy both 1" "later legacy both 2"; do
    t0=$SECONDS
    r=$(timeout 20 python3 "$bundle/lag_probe.py" $args 2>&1 | tail -1)
    echo "lag probe [$args]: ${r:-no output} ($((SECONDS - t0)) s; 20 s: hung)"
done
