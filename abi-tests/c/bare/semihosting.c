/*
 * The bare-metal side shared by every architecture: output and exit status
 * through semihosting, around the freestanding consumer.
 */
#include <stdint.h>

#include "../freestanding.h"
#include "semihosting.h"

void hostcopy_platform_write(const char *text) { semihosting_call(SYS_WRITE0, text); }

_Noreturn void hostcopy_bare_start(void) {
    long reason = hostcopy_freestanding_main() == 0 ? ADP_STOPPED_APPLICATION_EXIT
                                                    : ADP_STOPPED_RUN_TIME_ERROR;
    semihosting_call(SYS_EXIT, (const void *)(uintptr_t)reason);
    for (;;) {
    }
}
