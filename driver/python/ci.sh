#!/usr/bin/env bash
# The Python package's CPU checks, on a fresh machine with Rust and Python 3.9+:
# its version against the workspace's, rustfmt and clippy on the extension
# crate, then a fresh virtual environment with maturin, pytest, numpy and
# uvloop, `pip install` of this folder, its sdist (twine check, licence
# texts), its types (mypy, tests/typing), its API reference (Sphinx, docs/,
# warnings as errors), and pytest.
# Usage: driver/python/ci.sh   (PYTHON picks the interpreter, default python3)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"

echo "--- version: the package's is the workspace's"
# maturin takes the version from this folder's Cargo.toml, which cannot
# inherit the workspace's (it is a workspace of its own).
version() { sed -n "/^\[$1\]/,/^\[/s/^version = \"\(.*\)\"/\1/p" "$2"; }
package_version="$(version package Cargo.toml)"
workspace_version="$(version workspace.package ../../Cargo.toml)"
if [ -z "$package_version" ] || [ "$package_version" != "$workspace_version" ]; then
    echo "driver/python/Cargo.toml has version '$package_version', the workspace '$workspace_version'" >&2
    exit 1
fi

echo "--- rustfmt and clippy (hostcopy-python is outside the workspace)"
cargo fmt --check
cargo clippy --all-targets --quiet -- -D warnings
cargo clippy --all-targets --all-features --quiet -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --quiet --all-features

venv="$(mktemp -d)/venv"
trap 'rm -rf "$(dirname "$venv")"' EXIT
echo "--- fresh virtual environment in $venv"
"${PYTHON:-python3}" -m venv "$venv" || {
    echo "could not create a virtual environment: install python3-venv (Debian, Ubuntu)" >&2
    exit 1
}
"$venv/bin/python" -m pip install --quiet --upgrade pip
# uvloop: the await tests run under it as well as under asyncio. safetensors:
# its own reader is what tests/test_safetensors_parity.py compares with.
"$venv/bin/python" -m pip install --quiet maturin pytest numpy uvloop safetensors

# With the simulated driver (`--features simulator`), so that the launch and
# staging paths run here without a GPU; HOSTCOPY_REQUIRE_SIM makes a wheel
# without it a failure rather than skipped tests. As a debug build (cargo's
# `dev` profile: unoptimised, debug assertions and overflow checks on): an
# optimised build can read a dangling pointer and still see the right value
# (a buffer export moved after CPython pointed its shape into it passed every
# test in release and failed most of them in debug), and it compiles faster.
echo "--- pip install driver/python, with the simulated driver (maturin builds the abi3 extension, debug)"
MATURIN_PEP517_ARGS="--features simulator --profile dev" "$venv/bin/python" -m pip install --quiet "$here"
export HOSTCOPY_REQUIRE_SIM=1

echo "--- the sdist as a package index takes it: maturin sdist (no compile), twine check --strict (metadata, the readme renders)"
"$venv/bin/python" -m pip install --quiet twine
"$venv/bin/maturin" sdist --out "$(dirname "$venv")/sdist"
"$venv/bin/twine" check --strict "$(dirname "$venv")"/sdist/*.tar.gz
# The wheel's are checked by tests/test_licences.py on the installed package.
echo "--- the sdist carries the licence texts (pyproject.toml's license-files)"
sdist_files="$(tar -tzf "$(dirname "$venv")"/sdist/*.tar.gz)"
for licence in LICENSE-MIT LICENSE-APACHE; do
    if ! grep -qx "hostcopy-[^/]*/$licence" <<<"$sdist_files"; then
        echo "the sdist has no $licence beside its pyproject.toml" >&2
        exit 1
    fi
done

# From outside the source tree, so that `import hostcopy` finds the installed
# package (and mypy its installed files), through the venv's scripts
# (`python -m` would put the working folder on sys.path).
cd "$(dirname "$venv")"

echo "--- types: stubtest on hostcopy._native, mypy --strict on a user's script, which then runs"
# mypy's modules are compiled (mypyc): byte-compiling its .py sources too
# would double the install's time for nothing.
"$venv/bin/python" -m pip install --quiet --no-compile mypy
"$venv/bin/python" -m mypy.stubtest --allowlist "$here/tests/typing/stubtest-allowlist.txt" hostcopy._native
"$venv/bin/mypy" --strict "$here/tests/typing/user_script.py"
"$venv/bin/python" "$here/tests/typing/user_script.py" >/dev/null

echo "--- the API reference: Sphinx from the installed package's docstrings, warnings as errors"
"$venv/bin/python" -m pip install --quiet sphinx
"$venv/bin/python" -m sphinx -W --keep-going -q -b html "$here/docs" "$(dirname "$venv")/docs-html"

echo "--- pytest"
status=0
"$venv/bin/pytest" -q -rs "$here/tests" || status=$?
if [ "$status" -eq 5 ]; then
    echo "pytest collected no tests: the CPU suite is missing" >&2
    exit 1
fi
exit "$status"
