#!/bin/sh
# Uses hostcopy's dist archives the way a C vendor does, with nothing of the
# workspace in reach: each archive is unpacked into a fresh temporary folder
# with app.c and CMakeLists.txt from here, and
#   - the header compiles as C99, C11, C++11 and C++17 (gcc and clang) with
#     -Wall -Wextra -pedantic -Werror, and a broken copy of it does not;
#   - app.c links through pkg-config (hostcopy: shared, hostcopy-static) and
#     through CMake (hostcopy::hostcopy, hostcopy::hostcopy_static), and runs;
#   - the shared library has its SONAME, programs linked statically do not
#     need it, and no debug info is left in the libraries;
#   - the aarch64 archive's program links with aarch64-linux-gnu-gcc and runs
#     under qemu-aarch64, static and shared.
# Run by `cargo xtask dist --check`, which builds the archives.
#
# usage: check.sh HOST_ARCHIVE.tar.gz AARCH64_ARCHIVE.tar.gz
set -eu

[ $# -eq 2 ] || { echo "usage: $0 HOST_ARCHIVE.tar.gz AARCH64_ARCHIVE.tar.gz" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
host_archive=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
aarch64_archive=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
work=$(mktemp -d "${TMPDIR:-/tmp}/hostcopy-dist-check.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM

mkdir "$work/host" "$work/aarch64" "$work/src"
tar -xzf "$host_archive" -C "$work/host" --strip-components=1
tar -xzf "$aarch64_archive" -C "$work/aarch64" --strip-components=1
cp "$here/app.c" "$here/CMakeLists.txt" "$work/src/"
cd "$work"

check() {
    printf '  %s ... ' "$1"
}
ok() {
    echo "ok${1:+ ($1)}"
}
fail() {
    echo FAILED
    echo "check.sh: $*" >&2
    exit 1
}
# Runs a command; on failure prints its output and stops.
quietly() {
    if ! "$@" >"$work/out.txt" 2>&1; then
        cat "$work/out.txt" >&2
        fail "$*"
    fi
}
needs_hostcopy_so() {
    readelf -d "$1" | grep -q 'NEEDED.*\[libhostcopy\.so\.'
}

warnings="-Wall -Wextra -pedantic -Werror"

echo "hostcopy dist check in $work"

check "header: C99, C11 (gcc, clang); C++11, C++17 (g++, clang++)"
for cc in gcc clang; do
    for std in c99 c11; do
        quietly $cc -std=$std $warnings -Ihost/include -c src/app.c -o header.o
    done
done
for cxx in g++ clang++; do
    for std in c++11 c++17; do
        quietly $cxx -x c++ -std=$std $warnings -Ihost/include -c src/app.c -o header.o
    done
done
ok

check "header: its layout checks stop C99 and C++11 on a broken copy"
mkdir broken
sed -e 's/uintptr_t dst;/uintptr_t swapped;/' -e 's/uintptr_t src;/uintptr_t dst;/' \
    -e 's/uintptr_t swapped;/uintptr_t src;/' host/include/hostcopy.h >broken/hostcopy.h
cmp -s host/include/hostcopy.h broken/hostcopy.h && fail "sed left the header unchanged"
if gcc -std=c99 -Ibroken -c src/app.c -o broken.o 2>broken.txt; then
    fail "C99 compiled a header with dst and src swapped"
fi
grep -q 'hostcopy_static_assert_line_' broken.txt || fail "C99: not the header's check: $(cat broken.txt)"
if g++ -x c++ -std=c++11 -Ibroken -c src/app.c -o broken.o 2>broken.txt; then
    fail "C++11 compiled a header with dst and src swapped"
fi
grep -q 'hostcopy: dst first' broken.txt || fail "C++11: not the header's check: $(cat broken.txt)"
ok

check "libraries: SONAME, links, no debug info"
readelf -d host/lib/libhostcopy.so.[0-9]*.[0-9]*.[0-9]* | grep -q 'SONAME.*\[libhostcopy\.so\.[0-9]*\]' ||
    fail "libhostcopy.so.X.Y.Z has no SONAME libhostcopy.so.X"
soname=$(readelf -d host/lib/libhostcopy.so.*.*.* | sed -n 's/.*SONAME.*\[\(.*\)\].*/\1/p')
[ -L "host/lib/$soname" ] && [ -L host/lib/libhostcopy.so ] || fail "lib/$soname and lib/libhostcopy.so are not links"
for lib in host/lib/libhostcopy.a host/lib/libhostcopy.so.*.*.* aarch64/lib/libhostcopy.a; do
    if readelf -S "$lib" | grep -q '\.debug_'; then
        fail "$lib has debug sections"
    fi
done
ok "$soname"

export PKG_CONFIG_PATH="$work/host/lib/pkgconfig"
check "pkg-config: hostcopy (shared), built and run"
libdir=$(pkg-config --variable=libdir hostcopy)
# shellcheck disable=SC2046 # pkg-config prints flags to split
quietly cc -std=c99 $warnings src/app.c $(pkg-config --cflags --libs hostcopy) \
    -Wl,-rpath,"$libdir" -o app_pc_shared
needs_hostcopy_so app_pc_shared || fail "app_pc_shared does not load libhostcopy.so"
quietly ./app_pc_shared
ok "$(cat out.txt)"

check "pkg-config: hostcopy-static, built and run"
# shellcheck disable=SC2046
quietly cc -std=c99 $warnings src/app.c $(pkg-config --cflags --libs hostcopy-static) -o app_pc_static
needs_hostcopy_so app_pc_static && fail "app_pc_static loads libhostcopy.so"
quietly ./app_pc_static
ok "$(cat out.txt)"
unset PKG_CONFIG_PATH

check "CMake: find_package(hostcopy), hostcopy::hostcopy and hostcopy::hostcopy_static, built and run"
quietly cmake -S src -B build-cmake -DCMAKE_PREFIX_PATH="$work/host" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_FLAGS="$warnings"
quietly cmake --build build-cmake
needs_hostcopy_so build-cmake/app_cmake_shared || fail "app_cmake_shared does not load libhostcopy.so"
needs_hostcopy_so build-cmake/app_cmake_static && fail "app_cmake_static loads libhostcopy.so"
quietly build-cmake/app_cmake_shared
quietly build-cmake/app_cmake_static
ok

check "CMake: a request for another major version is refused"
sed 's/find_package(hostcopy 0.1 REQUIRED)/find_package(hostcopy 1.0 REQUIRED)/' src/CMakeLists.txt >CMakeLists.v1
mkdir src-v1 && cp src/app.c src-v1/ && mv CMakeLists.v1 src-v1/CMakeLists.txt
if cmake -S src-v1 -B build-v1 -DCMAKE_PREFIX_PATH="$work/host" >v1.txt 2>&1; then
    fail "find_package(hostcopy 1.0) accepted version $(grep -o 'hostcopy_VERSION.*' v1.txt)"
fi
grep -q 'compatible with requested version "1.0"' v1.txt || fail "refused, but not for its version: $(cat v1.txt)"
ok

export PKG_CONFIG_PATH="$work/aarch64/lib/pkgconfig"
sysroot=/usr/aarch64-linux-gnu
check "aarch64: hostcopy-static through pkg-config, aarch64-linux-gnu-gcc, qemu-aarch64"
# shellcheck disable=SC2046
quietly aarch64-linux-gnu-gcc -std=c99 $warnings src/app.c $(pkg-config --cflags --libs hostcopy-static) \
    -o app_aarch64_static
readelf -h app_aarch64_static | grep -q 'AArch64' || fail "app_aarch64_static is not an AArch64 program"
quietly qemu-aarch64 -L "$sysroot" ./app_aarch64_static
ok "$(cat out.txt)"

check "aarch64: hostcopy (shared) through pkg-config, qemu-aarch64"
libdir=$(pkg-config --variable=libdir hostcopy)
# shellcheck disable=SC2046
quietly aarch64-linux-gnu-gcc -std=c99 $warnings src/app.c $(pkg-config --cflags --libs hostcopy) \
    -Wl,-rpath,"$libdir" -o app_aarch64_shared
needs_hostcopy_so app_aarch64_shared || fail "app_aarch64_shared does not load libhostcopy.so"
quietly qemu-aarch64 -L "$sysroot" ./app_aarch64_shared
ok "$(cat out.txt)"

echo "hostcopy dist check: every check passed"
