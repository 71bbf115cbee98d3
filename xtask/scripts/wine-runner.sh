#!/bin/sh
# Runs a Windows program under wine, with a time limit: the runner of the
# Windows rows of `cargo xtask abi` (CARGO_TARGET_<TRIPLE>_RUNNER).
#   wine-runner.sh ARCH PROGRAM [ARGS...]     ARCH: x86_64 or i686
set -eu
arch=$1
shift
here=$(cd "$(dirname "$0")" && pwd)
state=${HOSTCOPY_WINE_DIR:-$here/../../target/wine}
mkdir -p "$state/$arch"
# Rust's std imports ProcessPrng from bcryptprimitives.dll, which wine 8
# lacks: a stub of our own, found through WINEPATH.
stub=$state/$arch/bcryptprimitives.dll
if [ ! -f "$stub" ]; then
    "$arch-w64-mingw32-gcc" -shared -O2 -Wl,--kill-at -o "$stub" \
        "$here/bcryptprimitives.c" -ladvapi32
fi
export WINEPREFIX="$state/prefix" WINEDEBUG=-all
export WINEPATH="Z:$(printf '%s' "$state/$arch" | tr / '\\')"
exec timeout "${HOSTCOPY_RUN_TIMEOUT:-300}" wine "$@"
