#!/usr/bin/env bash
# Builds the hostcopy wheel for a package index into FOLDER: abi3 (one wheel
# for CPython >= 3.9) and manylinux_2_17 (manylinux2014), so pip installs it
# on any Linux of the wheel's architecture with glibc 2.17 or newer.
# Usage: driver/python/build-wheel.sh FOLDER [MATURIN BUILD OPTIONS...]
#   e.g. --target aarch64-unknown-linux-gnu (after `rustup target add` of it)
#
# Linked the usual way, the extension takes the build machine's glibc symbol
# versions (on glibc 2.36: GLIBC_2.34 for dlopen and pthread_create, which
# moved into libc there). Zig links against glibc 2.17's versions instead,
# with no manylinux container; maturin then refuses a symbol newer than the
# tag. `--auditwheel check` also refuses any shared library outside the
# manylinux policy rather than copying it into the wheel: libcuda.so.1 above
# all, which the CUDA layer opens at run time and must never be NEEDED.
#
# maturin and zig (the `ziglang` package) live in a virtual environment kept
# in target/python-build, made on first use and updated when the pins change.
# PYTHON picks the interpreter that makes it (default python3).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:?usage: build-wheel.sh FOLDER [MATURIN BUILD OPTIONS...]}"
shift
venv="$here/../../target/python-build"
# Zig releases change their command line: the pin is the version this build was checked with.
requirements=("maturin>=1.7,<2" "ziglang==0.17.1")
if [ "$(cat "$venv/requirements" 2>/dev/null)" != "${requirements[*]}" ]; then
    [ -x "$venv/bin/python" ] || "${PYTHON:-python3}" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet "${requirements[@]}"
    echo "${requirements[*]}" >"$venv/requirements"
fi

# A refused build may still leave its wheel behind: only a checked one reaches FOLDER.
staging="$(mktemp -d)"
trap 'rm -rf "$staging"' EXIT
CARGO_ZIGBUILD_PYTHON_PATH="$venv/bin/python" "$venv/bin/maturin" build --quiet --release \
    --zig --compatibility manylinux_2_17 --auditwheel check \
    --manifest-path "$here/Cargo.toml" --out "$staging" "$@"
mkdir -p "$out"
for wheel in "$staging"/*.whl; do
    # The licence texts travel in the wheel (pyproject.toml's license-files).
    "$venv/bin/python" - "$wheel" LICENSE-MIT LICENSE-APACHE <<'EOF'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
missing = [n for n in sys.argv[2:] if not any(f.endswith(".dist-info/licenses/" + n) for f in names)]
if missing:
    sys.exit(f"{sys.argv[1]} has no .dist-info/licenses/ {' '.join(missing)}")
EOF
    mv "$wheel" "$out/"
    echo "$out/$(basename "$wheel")"
done
