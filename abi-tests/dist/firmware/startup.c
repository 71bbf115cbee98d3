/*
 * Start-up code of the example firmware for QEMU's mps2-an386 board
 * (Cortex-M4F): the vector table, .data copied from flash, .bss zeroed, the
 * FPU enabled (the hard-float ABI uses it), then main. Output and the exit
 * status go to the emulator through semihosting; a real board would blink
 * or log instead. hostcopy needs nothing here beyond the usual .bss zeroing.
 */
#include <stdint.h>

extern uint32_t _sidata[], _sdata[], _edata[], _sbss[], _ebss[], _estack[];
int main(void);
void report(const char *text);

#define SYS_WRITE0 0x04
#define SYS_EXIT 0x18
#define ADP_STOPPED_APPLICATION_EXIT 0x20026
#define ADP_STOPPED_RUN_TIME_ERROR 0x20023

static void semihosting(long operation, const void *argument) {
    register long r0 __asm__("r0") = operation;
    register const void *r1 __asm__("r1") = argument;
    __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
}

void report(const char *text) { semihosting(SYS_WRITE0, text); }

static void stop(long reason) {
    semihosting(SYS_EXIT, (const void *)reason);
    for (;;) {
    }
}

void reset_handler(void) {
    uint32_t *from = _sidata, *to = _sdata;
    while (to < _edata)
        *to++ = *from++;
    for (to = _sbss; to < _ebss;)
        *to++ = 0;
    *(volatile uint32_t *)0xE000ED88u |= 0xFu << 20; /* CPACR: CP10, CP11 full access */
    __asm__ volatile("dsb\n\tisb" ::: "memory");
    stop(main() == 0 ? ADP_STOPPED_APPLICATION_EXIT : ADP_STOPPED_RUN_TIME_ERROR);
}

static void fault_handler(void) {
    report("fault\n");
    stop(ADP_STOPPED_RUN_TIME_ERROR);
}

/* Initial stack pointer, reset, NMI, HardFault, MemManage, BusFault, UsageFault. */
__attribute__((section(".vectors"), used)) static const void *const vectors[] = {
    _estack,       (const void *)reset_handler, (const void *)fault_handler,
    (const void *)fault_handler, (const void *)fault_handler, (const void *)fault_handler,
    (const void *)fault_handler,
};
