#!/usr/bin/env bash
# The C API of the staging engine (driver/capi), as CI checks it: format,
# clippy, rustdoc and the Rust unit tests; the committed header in step
# with the library; the C test against the simulated driver.
#
# In step: include/hostcopy_stager.h is hand-written (as core's hostcopy.h
# is). A unit test (src/header_check.rs) compares each prototype's
# parameter and return types with the Rust function's, and proves that a
# changed type, a dropped parameter or a missing function fails it. The
# library built here must export exactly the functions declared by it, by core/include/hostcopy.h (the library carries hostcopy-core, so
# a program links this library or libhostcopy, not both) and, in this
# simulator build only, by tests/hostcopy_sim.h; the structures' layouts
# are asserted with the same numbers in the header and in the Rust source;
# and tests/stager_sim.c, compiled as C99 with -Wall -Wextra -pedantic
# -Werror (and the header as C++17), calls every declared function. The
# Rust tests of tests/ (struct_size_and_holds.rs: structures of another
# struct_size refused before being read past, host buffers let go of at
# the wait, overlapping transfers of a host buffer refused) run with the
# unit tests.
#
# usage: driver/capi/ci.sh   (from anywhere; its own target folder)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
# Its own target folder, whatever the environment names: the paths below
# are in it.
export CARGO_TARGET_DIR=$here/target

step() { printf -- '--- driver/capi: %s\n' "$*"; }

step "fmt, clippy, rustdoc, unit tests (the header's prototypes against the Rust signatures among them) and tests/*.rs"
cargo fmt --check
cargo clippy --quiet --all-targets -- -D warnings
cargo clippy --quiet --features simulator --all-targets -- -D warnings
RUSTDOCFLAGS=-Dwarnings cargo doc --quiet --no-deps --features simulator
cargo test --quiet --features simulator --lib --tests

step "build with the simulated driver"
cargo build --quiet --features simulator
lib=target/debug

step "the headers declare what the library exports, no more, no less"
declared() {
    # Prototypes start at the line's first column with their return type;
    # `static inline` helpers are the header's own, not exported.
    grep -hE '^[A-Za-z_][A-Za-z0-9_ ]*[ *]hostcopy_[a-z0-9_]+\(' "$@" | grep -v '^static' |
        sed -E 's/^.*[ *](hostcopy_[a-z0-9_]+)\(.*/\1/'
}
declared include/hostcopy_stager.h ../../core/include/hostcopy.h tests/hostcopy_sim.h | sort -u >"$lib/declared.txt"
nm -D --defined-only "$lib/libhostcopy_stager.so" | awk '$2 == "T" { print $3 }' | grep '^hostcopy_' |
    sort -u >"$lib/exported.txt"
if ! diff -u "$lib/declared.txt" "$lib/exported.txt"; then
    echo "driver/capi: the headers (-) and libhostcopy_stager.so's exports (+) differ" >&2
    exit 1
fi
echo "$(wc -l <"$lib/exported.txt") functions declared and exported"

step "the header as C99, C11, C++11 and C++17 (-pedantic -Werror)"
warnings="-Wall -Wextra -pedantic -Werror"
for std in c99 c11; do
    gcc -std=$std $warnings -Iinclude -fsyntax-only -x c include/hostcopy_stager.h
done
for std in c++11 c++17; do
    g++ -std=$std $warnings -Iinclude -fsyntax-only -x c++ include/hostcopy_stager.h
done

step "the C test against the simulated driver (tests/stager_sim.c)"
# The static library's native dependencies, as rustc reports them, less
# -lcuda: the library opens libcuda at run time and takes nothing from it.
native="-ldl -lgcc_s -lutil -lrt -lpthread -lm -lc"
gcc -std=c99 -D_POSIX_C_SOURCE=200809L $warnings -Iinclude -Itests tests/stager_sim.c \
    "$lib/libhostcopy_stager.a" $native -o "$lib/stager_sim"
# The test's caught panic prints through Rust's panic hook: expected.
RUST_BACKTRACE=0 timeout 120 "$lib/stager_sim"

step "examples/stager_copy.c against the simulated driver, with the Rust API beside it (8 MiB, 2 runs)"
cargo build --quiet --features simulator,bench
gcc -std=c99 -D_POSIX_C_SOURCE=200809L $warnings -DHOSTCOPY_RUST_BASELINE -DHOSTCOPY_EXAMPLE_ON_SIMULATOR \
    -Iinclude -Itests examples/stager_copy.c "$lib/libhostcopy_stager.a" $native -o "$lib/stager_copy"
timeout 60 "$lib/stager_copy" 8 2

step "docs/c-api.md's program, compiled and linked as written (run: it stops at its first call without a GPU)"
sh ../../abi-tests/dist/readme-block.sh ../../docs/c-api.md c-api-program >"$lib/c_api_program.c"
gcc -std=c99 $warnings -Iinclude "$lib/c_api_program.c" "$lib/libhostcopy_stager.a" $native -o "$lib/c_api_program"
if HOSTCOPY_LIBCUDA=/nonexistent/libcuda.so.1 "$lib/c_api_program" 2>"$lib/c_api_program.txt"; then
    echo "docs/c-api.md's program succeeded without a driver" >&2
    exit 1
fi
grep -q 'hostcopy_stager_new: HOSTCOPY_ERROR_DRIVER' "$lib/c_api_program.txt" ||
    { cat "$lib/c_api_program.txt" >&2; exit 1; }
echo "built; without a driver: $(cat "$lib/c_api_program.txt")"
