#!/usr/bin/env bash
# Builds the hostcopy wheel (abi3, one per platform) into FOLDER with maturin,
# from a virtual environment kept in target/python-build (made on first use).
# Usage: driver/python/build-wheel.sh FOLDER   (PYTHON picks the interpreter)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:?usage: build-wheel.sh FOLDER}"
venv="$here/../../target/python-build"
if [ ! -x "$venv/bin/maturin" ]; then
    "${PYTHON:-python3}" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet maturin
fi
"$venv/bin/maturin" build --quiet --release --manifest-path "$here/Cargo.toml" --out "$out"
