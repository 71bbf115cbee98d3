#!/bin/sh
# Runs a bare-metal ELF under QEMU system emulation, with semihosting for its
# output (on stdout) and exit status, and a time limit (a hang is a failure):
# the runner of the bare-metal rows of `cargo xtask abi`
# (CARGO_TARGET_<TRIPLE>_RUNNER).
#   qemu-system.sh arm|riscv32 FIRMWARE.elf
set -eu
case $1 in
arm) machine="qemu-system-arm -machine mps2-an386 -cpu cortex-m4" ;;
riscv32) machine="qemu-system-riscv32 -machine virt -bios none" ;;
*) echo "qemu-system.sh: unknown board $1" >&2; exit 2 ;;
esac
exec timeout "${HOSTCOPY_RUN_TIMEOUT:-120}" $machine -display none -monitor none -serial none \
    -chardev stdio,id=out -semihosting-config enable=on,target=native,chardev=out -kernel "$2"
