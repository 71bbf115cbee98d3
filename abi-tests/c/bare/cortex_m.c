/*
 * Cortex-M start-up for the C consumer (QEMU mps2-an386): the vector table,
 * a reset handler that enables the FPU (the hard-float ABI may use it), and
 * fault handlers that end the run as a failure instead of hanging.
 */
#include <stdint.h>

#include "semihosting.h"

extern uint32_t __stack_top;

long semihosting_call(long operation, const void *argument) {
    register long r0 __asm__("r0") = operation;
    register const void *r1 __asm__("r1") = argument;
    __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
    return r0;
}

static void reset(void) {
    volatile uint32_t *cpacr = (volatile uint32_t *)0xE000ED88u;
    *cpacr |= 0xFu << 20; /* CP10 and CP11: full access */
    __asm__ volatile("dsb\n\tisb" ::: "memory");
    hostcopy_bare_start();
}

static void fault(void) {
    semihosting_call(SYS_WRITE0, "fault\n");
    semihosting_call(SYS_EXIT, (const void *)(uintptr_t)ADP_STOPPED_RUN_TIME_ERROR);
    for (;;) {
    }
}

/* Initial stack pointer, reset, NMI, HardFault, MemManage, BusFault, UsageFault. */
__attribute__((section(".vectors"), used)) static const void *const vectors[] = {
    &__stack_top, (const void *)reset, (const void *)fault, (const void *)fault,
    (const void *)fault, (const void *)fault, (const void *)fault,
};
