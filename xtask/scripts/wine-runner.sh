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
# One prefix per architecture: a prefix made without the i386 DLLs lacks syswow64.
export WINEPREFIX="$state/prefix-$arch" WINEDEBUG=-all
# Without wine32, wine64 runs 32-bit programs in its WoW64 mode: it needs
# wine's i386 PE DLLs (unpacked from libwine:i386 by `cargo xtask abi`) beside
# its own 64-bit Unix side, in one folder on WINEDLLPATH.
i386_dlls=$state/libwine-i386/usr/lib/i386-linux-gnu/wine/i386-windows
if [ "$arch" = i686 ] && [ -d "$i386_dlls" ]; then
    mkdir -p "$state/wow64"
    ln -sfn "$i386_dlls" "$state/wow64/i386-windows"
    ln -sfn /usr/lib/x86_64-linux-gnu/wine/x86_64-unix "$state/wow64/x86_64-unix"
    export WINEDLLPATH="$state/wow64"
fi
export WINEPATH="Z:$(printf '%s' "$state/$arch" | tr / '\\')"
exec timeout "${HOSTCOPY_RUN_TIMEOUT:-300}" wine "$@"
