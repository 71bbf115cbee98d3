#!/bin/sh
# Runs a Windows program under wine, with a time limit: the runner of the
# Windows rows of `cargo xtask abi` (CARGO_TARGET_<TRIPLE>_RUNNER).
#   wine-runner.sh ARCH PROGRAM [ARGS...]     ARCH: x86_64 or i686
#   wine-runner.sh ARCH --server-start        a wineserver for ARCH's prefix,
#   wine-runner.sh ARCH --server-stop         kept until stopped (see below)
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

# Each wine program connects to the prefix's wineserver, starting one when
# there is none. Debian starts it with a persistence of 0 s: it shuts down
# as soon as the last program of the prefix has exited, and a program that
# connects while it shuts down dies with `wine client error:0: recvmsg:
# Connection reset by peer`. `cargo xtask abi` runs dozens of programs per
# prefix, a few milliseconds to a few seconds apart, so some start in that
# window by chance. A server started with `-p` (no delay: persistent) never
# shuts down on its own, so there is no window; `cargo xtask abi` starts one
# per prefix before the first row and stops it after the last.
case ${1-} in
--server-start)
    mkdir -p "$WINEPREFIX"
    log=$state/wineserver-$arch.log
    # A server left by an interrupted run or a program run by hand: end it
    # and wait until it is gone, so that the persistent one can take over
    # the prefix (a second server for a prefix exits at once).
    wineserver -k 2>/dev/null || true
    wineserver -w
    # wineserver returns once its socket accepts connections; the server
    # itself keeps stderr open, so it goes to a file, not to the caller.
    if ! wineserver -p 2>"$log"; then
        cat "$log" >&2
        echo "wine-runner.sh: wineserver -p for $WINEPREFIX failed" >&2
        exit 1
    fi
    exit 0
    ;;
--server-stop)
    wineserver -k
    wineserver -w
    exit 0
    ;;
esac
# The first program of a server's life starts the prefix's services
# (services.exe, winedevice.exe), which inherit its stdout and stderr and
# live as long as the server: the whole run with a persistent one. A caller
# that reads the program's output through a pipe (cargo, the xtask) would
# wait for them forever, so wine writes into files and this script, which
# ends with the program, passes them on.
out=$(mktemp "$state/run.XXXXXX")
trap 'rm -f "$out" "$out.err"' EXIT
status=0
timeout "${HOSTCOPY_RUN_TIMEOUT:-300}" wine "$@" >"$out" 2>"$out.err" || status=$?
cat "$out"
cat "$out.err" >&2
exit "$status"
