#!/bin/sh
# Uses hostcopy's dist archives the way C vendors and firmware authors do,
# with nothing of the workspace in reach but the documents and the sample
# sources here. The commands for them (docs/c-and-firmware.md; the README's
# first C program) are code blocks marked
# `<!-- checked: NAME -->`; each runs here exactly as written
# (readme-block.sh prints one), in a fresh folder that holds the archives,
# app.c, vendor.c and the firmware's main.c, startup.c and board.ld:
#   - first-c, first-c-build: the README's first C program, built and run;
#   - pkg-config: programs linked shared and static, run from another folder
#     (the shared one through the .pc's run-time search path);
#   - cmake, cmake-lists: the guide's CMakeLists.txt, built, installed, run
#     from the build folder and from the install folder moved elsewhere;
#   - embed: two shared libraries that each embed libhostcopy.a keep their
#     own hostcopy_rejected count and export no hostcopy_* (and, built
#     without the guide's flag, they do share it: the check can fail);
#   - embed-cmake: the guide's CMake line for the same, in CMakeLists.txt;
#   - firmware, firmware-nomem: the thumbv7em firmware, linked and run under
#     qemu-system-arm, with the archive's memcpy and with newlib's.
# Besides: every archive's licence texts (the repository's) and the SPDX
# line its header opens with; the header as C99, C11, C++11 and C++17 (gcc
# and clang, -Wall -Wextra -pedantic -Werror) and a broken copy refused;
# SONAME, links, no debug info; CMake's hostcopy::hostcopy_static and the
# major-version rule; each Linux cross archive's program linked with its
# cross gcc, static and shared, and run under qemu-user; in this machine's
# archive the staging engine's library (hostcopy_stager.h): its header
# from C99 to C++17, docs/c-api.md's program linked through pkg-config and
# CMake, shared and static, and run (stopping at its first call: no GPU).
# Run by `cargo xtask dist --check`, which builds the archives.
#
# usage: check.sh ARCHIVE.tar.gz...   (this machine's, x86_64 Linux, among them)
set -eu

[ $# -ge 1 ] || { echo "usage: $0 ARCHIVE.tar.gz..." >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
readme=$here/../../docs/c-and-firmware.md
front=$here/../../README.md
work=$(mktemp -d "${TMPDIR:-/tmp}/hostcopy-dist-check.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM

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
# Runs the block NAME of docs/c-and-firmware.md (or of FILE) with sh -eu
# in the current folder.
run_block() {
    block=$(sh "$here/readme-block.sh" "${2:-$readme}" "$1") || fail "${2:-$readme} has no block '$1'"
    quietly sh -euc "$block"
}
# The triple of an archive hostcopy-VERSION-TRIPLE.tar.gz.
triple_of() {
    basename "$1" .tar.gz | sed 's/^hostcopy-[0-9]*\.[0-9]*\.[0-9]*-//'
}

mkdir "$work/readme" "$work/src"
cp "$here"/app.c "$here"/vendor.c "$here"/two_vendors.c "$here"/CMakeLists.txt "$work/src/"
cp "$here"/app.c "$here"/vendor.c "$here"/firmware/main.c "$here"/firmware/startup.c \
    "$here"/firmware/board.ld "$work/readme/"
host="" cross="" firmware=""
for archive in "$@"; do
    archive=$(cd "$(dirname "$archive")" && pwd)/$(basename "$archive")
    cp "$archive" "$work/readme/"
    triple=$(triple_of "$archive")
    mkdir "$work/$triple"
    tar -xzf "$archive" -C "$work/$triple" --strip-components=1
    case $triple in
    x86_64-unknown-linux-gnu) host=$triple ;;
    thumbv7em-none-eabihf) firmware=$triple ;;
    *-linux-gnu) cross="$cross $triple" ;;
    *) echo "check.sh: nothing to check for $triple" >&2; exit 2 ;;
    esac
done
[ -n "$host" ] || fail "no x86_64-unknown-linux-gnu archive among $*"
cd "$work"

warnings="-Wall -Wextra -pedantic -Werror"

echo "hostcopy dist check in $work"

check "contents: the licence texts and the header's SPDX line, in every archive"
for archive in "$@"; do
    name=$(basename "$archive")
    triple=$(triple_of "$archive")
    for licence in LICENSE-MIT LICENSE-APACHE; do
        [ -f "$triple/$licence" ] || fail "$name has no $licence"
        cmp -s "$triple/$licence" "$here/../../$licence" || fail "$name's $licence is not the repository's"
    done
    head -n 1 "$triple/include/hostcopy.h" | grep -Fqx '/* SPDX-License-Identifier: MIT OR Apache-2.0 */' ||
        fail "$name's include/hostcopy.h does not open with its SPDX-License-Identifier line"
done
ok

check "header: C99, C11 (gcc, clang); C++11, C++17 (g++, clang++)"
for cc in gcc clang; do
    for std in c99 c11; do
        quietly $cc -std=$std $warnings -I$host/include -c src/app.c -o header.o
    done
done
for cxx in g++ clang++; do
    for std in c++11 c++17; do
        quietly $cxx -x c++ -std=$std $warnings -I$host/include -c src/app.c -o header.o
    done
done
ok

check "header: its layout checks stop C99 and C++11 on a broken copy"
mkdir broken
sed -e 's/uintptr_t dst;/uintptr_t swapped;/' -e 's/uintptr_t src;/uintptr_t dst;/' \
    -e 's/uintptr_t swapped;/uintptr_t src;/' $host/include/hostcopy.h >broken/hostcopy.h
cmp -s $host/include/hostcopy.h broken/hostcopy.h && fail "sed left the header unchanged"
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
readelf -d $host/lib/libhostcopy.so.[0-9]*.[0-9]*.[0-9]* | grep -q 'SONAME.*\[libhostcopy\.so\.[0-9]*\]' ||
    fail "libhostcopy.so.X.Y.Z has no SONAME libhostcopy.so.X"
soname=$(readelf -d $host/lib/libhostcopy.so.*.*.* | sed -n 's/.*SONAME.*\[\(.*\)\].*/\1/p')
[ -L "$host/lib/$soname" ] && [ -L $host/lib/libhostcopy.so ] || fail "lib/$soname and lib/libhostcopy.so are not links"
for lib in */lib/libhostcopy.a */lib/libhostcopy.so.*.*.*; do
    if readelf -S "$lib" | grep -q '\.debug_'; then
        fail "$lib has debug sections"
    fi
done
ok "$soname"

check "README first-c: the first C program, built against the archive and run"
sh "$here/readme-block.sh" "$front" first-c >readme/first.c || fail "README.md has no block 'first-c'"
(cd readme && run_block first-c-build "$front")
ok "$(tail -n 1 out.txt)"

check "guide pkg-config: shared and static programs, run from another folder"
(cd readme && run_block pkg-config)
needs_hostcopy_so readme/app || fail "app does not load libhostcopy.so"
needs_hostcopy_so readme/app-static && fail "app-static loads libhostcopy.so"
readelf -d readme/app | grep -Eq '(RUNPATH|RPATH).*/lib\]' || fail "app has no run-time search path"
(cd / && env -u LD_LIBRARY_PATH "$work/readme/app" >"$work/out.txt" 2>&1) || fail "app from /: $(cat out.txt)"
ok "$(cat out.txt)"

check "guide cmake: its CMakeLists.txt built, installed, run from the build and the moved install folder"
sh "$here/readme-block.sh" "$readme" cmake-lists >readme/CMakeLists.txt || fail "docs/c-and-firmware.md has no block 'cmake-lists'"
(cd readme && run_block cmake)
needs_hostcopy_so readme/installed/bin/app || fail "the installed app does not load libhostcopy.so"
mv readme/installed moved
(cd / && "$work/moved/bin/app" >"$work/out.txt" 2>&1) || fail "installed app, moved, from /: $(cat out.txt)"
ok "$(cat out.txt)"

check "guide embed: two shared libraries with hostcopy inside keep their own count"
vendor_libraries() { # FLAG-FILTER: builds libvendor_a.so and libvendor_b.so from the guide's block
    for v in a b; do
        rm -rf "embed-$v" && mkdir "embed-$v"
        { echo "#define VENDOR_REJECT vendor_${v}_reject"; cat src/vendor.c; } >"embed-$v/vendor.c"
        block=$(sh "$here/readme-block.sh" "$readme" embed) || fail "docs/c-and-firmware.md has no block 'embed'"
        (cd "embed-$v" && export PKG_CONFIG_PATH="$work/$host/lib/pkgconfig" && quietly sh -euc "$(echo "$block" | $1)")
        mv "embed-$v/libvendor.so" "libvendor_$v.so"
    done
    quietly cc -std=c99 $warnings src/two_vendors.c -L. -lvendor_a -lvendor_b -Wl,-rpath,"$work" -o two_vendors
    quietly ./two_vendors
}
vendor_libraries cat
grep -q '^separate' out.txt || fail "the two libraries share hostcopy: $(cat out.txt)"
result=$(cat out.txt)
for v in a b; do
    exported=$(nm -D --defined-only "libvendor_$v.so" | grep ' hostcopy_' || true)
    [ -z "$exported" ] || fail "libvendor_$v.so exports $exported"
done
vendor_libraries "sed s/-Wl,--exclude-libs,libhostcopy.a//"
grep -q '^shared' out.txt || fail "without --exclude-libs the libraries should share hostcopy: $(cat out.txt)"
ok "$result; without the flag: $(cat out.txt)"

check "CMake: hostcopy::hostcopy_static, the guide's embed line, another major version refused"
sh "$here/readme-block.sh" "$readme" embed-cmake >embed.cmake || fail "docs/c-and-firmware.md has no block 'embed-cmake'"
while IFS= read -r line; do
    grep -Fxq "$line" src/CMakeLists.txt || fail "src/CMakeLists.txt lacks the guide's line: $line"
done <embed.cmake
quietly cmake -S src -B build-cmake -DCMAKE_PREFIX_PATH="$work/$host" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_FLAGS="$warnings"
quietly cmake --build build-cmake
needs_hostcopy_so build-cmake/app_cmake_static && fail "app_cmake_static loads libhostcopy.so"
quietly build-cmake/app_cmake_static
exported=$(nm -D --defined-only build-cmake/libvendor.so | grep ' hostcopy_' || true)
[ -z "$exported" ] || fail "CMake's libvendor.so exports $exported"
sed 's/find_package(hostcopy 0.1 REQUIRED)/find_package(hostcopy 1.0 REQUIRED)/' src/CMakeLists.txt >CMakeLists.v1
mkdir src-v1 && cp src/app.c src/vendor.c src-v1/ && mv CMakeLists.v1 src-v1/CMakeLists.txt
if cmake -S src-v1 -B build-v1 -DCMAKE_PREFIX_PATH="$work/$host" >v1.txt 2>&1; then
    fail "find_package(hostcopy 1.0) accepted version $(grep -o 'hostcopy_VERSION.*' v1.txt)"
fi
grep -q 'compatible with requested version "1.0"' v1.txt || fail "refused, but not for its version: $(cat v1.txt)"
ok

check "stager: hostcopy_stager.h as C99, C11, C++11, C++17; the library's SONAME and links"
for std in c99 c11; do
    quietly gcc -std=$std $warnings -fsyntax-only -x c $host/include/hostcopy_stager.h
done
for std in c++11 c++17; do
    quietly g++ -std=$std $warnings -fsyntax-only -x c++ $host/include/hostcopy_stager.h
done
readelf -d $host/lib/libhostcopy_stager.so.*.*.* | grep -q 'SONAME.*\[libhostcopy_stager\.so\.[0-9]*\]' ||
    fail "libhostcopy_stager.so.X.Y.Z has no SONAME libhostcopy_stager.so.X"
[ -L $host/lib/libhostcopy_stager.so ] || fail "lib/libhostcopy_stager.so is not a link"
ok

# docs/c-api.md's program, built from the archive alone. No GPU here: it
# must stop at its first call with the driver's error, from any folder.
stager_runs() { # PROGRAM
    if (cd / && HOSTCOPY_LIBCUDA=/nonexistent/libcuda.so.1 "$1" >"$work/out.txt" 2>&1); then
        fail "$1 succeeded without a driver"
    fi
    grep -q 'hostcopy_stager_new: HOSTCOPY_ERROR_DRIVER' out.txt || fail "$1: $(cat out.txt)"
}
needs_stager_so() {
    readelf -d "$1" | grep -q 'NEEDED.*\[libhostcopy_stager\.so\.'
}
sh "$here/readme-block.sh" "$here/../../docs/c-api.md" c-api-program >src/stager_app.c ||
    fail "docs/c-api.md has no block 'c-api-program'"

check "stager pkg-config: docs/c-api.md's program, hostcopy-stager (shared) and hostcopy-stager-static"
export PKG_CONFIG_PATH="$work/$host/lib/pkgconfig"
# shellcheck disable=SC2046 # pkg-config prints flags to split
quietly cc -std=c99 $warnings src/stager_app.c $(pkg-config --cflags --libs hostcopy-stager) -o stager_app
needs_stager_so stager_app || fail "stager_app does not load libhostcopy_stager.so"
stager_runs "$work/stager_app"
# shellcheck disable=SC2046
quietly cc -std=c99 $warnings src/stager_app.c $(pkg-config --cflags --libs hostcopy-stager-static) -o stager_app_static
needs_stager_so stager_app_static && fail "stager_app_static loads libhostcopy_stager.so"
stager_runs "$work/stager_app_static"
unset PKG_CONFIG_PATH
ok "without a driver: $(cut -c1-60 out.txt)..."

check "stager CMake: hostcopy::stager, shared and with HOSTCOPY_STATIC"
mkdir stager-cmake
cp src/stager_app.c stager-cmake/app.c
cat >stager-cmake/CMakeLists.txt <<'CMAKE'
cmake_minimum_required(VERSION 3.21)
project(stager_app LANGUAGES C)
find_package(hostcopy 0.1 REQUIRED)
add_executable(app app.c)
target_link_libraries(app PRIVATE hostcopy::stager)
CMAKE
quietly cmake -S stager-cmake -B build-stager -DCMAKE_PREFIX_PATH="$work/$host" -DCMAKE_C_FLAGS="$warnings"
quietly cmake --build build-stager
needs_stager_so build-stager/app || fail "CMake's app does not load libhostcopy_stager.so"
stager_runs "$work/build-stager/app"
quietly cmake -S stager-cmake -B build-stager-static -DCMAKE_PREFIX_PATH="$work/$host" -DHOSTCOPY_STATIC=ON \
    -DCMAKE_C_FLAGS="$warnings"
quietly cmake --build build-stager-static
needs_stager_so build-stager-static/app && fail "CMake's static app loads libhostcopy_stager.so"
stager_runs "$work/build-stager-static/app"
ok

if [ -n "$firmware" ]; then
    qemu_m4() {
        timeout 60 qemu-system-arm -machine mps2-an386 -cpu cortex-m4 -display none -monitor none \
            -serial none -chardev stdio,id=out -semihosting-config enable=on,target=native,chardev=out \
            -kernel "$1"
    }
    # The archive's memory functions are weak (W), newlib's are not (T).
    memcpy_class() {
        arm-none-eabi-nm "$1" | sed -n 's/^[0-9a-f]* \([A-Za-z]\) memcpy$/\1/p'
    }
    text_size() {
        arm-none-eabi-size "$1" | awk 'NR == 2 { print $1 }'
    }
    check "guide firmware: linked with the archive's memcpy, run under qemu-system-arm"
    (cd readme && run_block firmware)
    [ "$(memcpy_class readme/firmware.elf)" = W ] || fail "firmware.elf's memcpy is not the archive's"
    quietly qemu_m4 readme/firmware.elf
    default_text=$(text_size readme/firmware.elf)
    ok "$(cat out.txt), text $default_text bytes"

    check "guide firmware-nomem: linked with newlib's memcpy, run under qemu-system-arm"
    (cd readme && rm -f firmware.elf && run_block firmware-nomem)
    [ "$(memcpy_class readme/firmware.elf)" = T ] || fail "firmware.elf's memcpy is not newlib's"
    if arm-none-eabi-nm readme/firmware.elf | grep -q compiler_builtins; then
        fail "firmware.elf links compiler_builtins' memory functions"
    fi
    quietly qemu_m4 readme/firmware.elf
    ok "$(cat out.txt), text $(text_size readme/firmware.elf) bytes"
fi

for triple in $cross; do
    gnu=$(echo "$triple" | sed 's/-unknown-/-/')
    qemu=qemu-$(echo "$triple" | cut -d- -f1 | sed 's/^powerpc64le$/ppc64le/')
    export PKG_CONFIG_PATH="$work/$triple/lib/pkgconfig"
    check "$triple: hostcopy-static and hostcopy (shared) through pkg-config, $gnu-gcc, $qemu"
    # shellcheck disable=SC2046 # pkg-config prints flags to split
    quietly "$gnu-gcc" -std=c99 $warnings src/app.c $(pkg-config --cflags --libs hostcopy-static) \
        -o "app_${triple}_static"
    needs_hostcopy_so "app_${triple}_static" && fail "app_${triple}_static loads libhostcopy.so"
    quietly "$qemu" -L "/usr/$gnu" "./app_${triple}_static"
    # shellcheck disable=SC2046
    quietly "$gnu-gcc" -std=c99 $warnings src/app.c $(pkg-config --cflags --libs hostcopy) \
        -o "app_${triple}_shared"
    needs_hostcopy_so "app_${triple}_shared" || fail "app_${triple}_shared does not load libhostcopy.so"
    quietly "$qemu" -L "/usr/$gnu" "./app_${triple}_shared"
    ok "$(cat out.txt)"
    unset PKG_CONFIG_PATH
done

echo "hostcopy dist check: every check passed"
