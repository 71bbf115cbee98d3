/*
 * RISC-V start-up for the C consumer (QEMU virt, machine mode): a stack, a
 * trap vector that ends the run as a failure instead of hanging, and the
 * semihosting trap sequence (uncompressed, within one 16-byte block).
 */
#include <stdint.h>

#include "semihosting.h"

long semihosting_call(long operation, const void *argument) {
    register long a0 __asm__("a0") = operation;
    register const void *a1 __asm__("a1") = argument;
    __asm__ volatile(".balign 16\n\t.option push\n\t.option norvc\n\t"
                     "slli x0, x0, 0x1f\n\tebreak\n\tsrai x0, x0, 7\n\t.option pop"
                     : "+r"(a0)
                     : "r"(a1)
                     : "memory");
    return a0;
}

void hostcopy_trap(void);
void hostcopy_trap(void) {
    semihosting_call(SYS_WRITE0, "trap\n");
    semihosting_call(SYS_EXIT, (const void *)(uintptr_t)ADP_STOPPED_RUN_TIME_ERROR);
    for (;;) {
    }
}

__asm__(".section .text.start, \"ax\", @progbits\n"
        ".globl _start\n"
        "_start:\n"
        "  la sp, __stack_top\n"
        "  la t0, trap_entry\n"
        "  csrw mtvec, t0\n"
        "  call hostcopy_bare_start\n"
        ".balign 4\n"
        "trap_entry:\n"
        "  la sp, __stack_top\n"
        "  call hostcopy_trap\n");
