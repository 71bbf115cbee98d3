#ifndef HOSTCOPY_FREESTANDING_H
#define HOSTCOPY_FREESTANDING_H

/*
 * The C consumer on a target without an operating system: freestanding.c
 * prints the layout line and runs the contract checks, as main.c does on a
 * hosted target; each platform (bare/cortex_m.c, bare/riscv.c, wasm.c)
 * provides the output and calls the entry point.
 */

/* Writes a NUL-terminated line to the host (semihosting, or node). */
void hostcopy_platform_write(const char *text);

/* 0 when every check passed, 1 otherwise. */
int hostcopy_freestanding_main(void);

#endif
