/*
 * A C firmware that links hostcopy's static library, as the README's "In
 * firmware" section builds it: copies a block with hostcopy_fn, copies it
 * again with the firmware's own memcpy (the C library's or the archive's,
 * see the README), and checks both, the rejected count and the ABI version.
 * `cargo xtask dist --check` links it with the README's command lines and
 * runs it on QEMU's mps2-an386 board (Cortex-M4F); startup.c reports.
 */
#include <stdint.h>
#include <string.h>

#include "hostcopy.h"

void report(const char *text);

static uint8_t source[1024];
static uint8_t by_hostcopy[sizeof source];
static uint8_t by_memcpy[sizeof source];

int main(void) {
    struct hostcopy_args record;
    size_t i;
    int ok;

    for (i = 0; i < sizeof source; i++)
        source[i] = (uint8_t)(i * 7 + 1);
    record.dst = (uintptr_t)by_hostcopy;
    record.src = (uintptr_t)source;
    record.nbytes = sizeof source;
    hostcopy_fn(&record);
    memcpy(by_memcpy, source, sizeof source);
    hostcopy_fn(NULL); /* rejected: counted in .bss, which startup.c zeroed */

    ok = memcmp(by_hostcopy, source, sizeof source) == 0 &&
         memcmp(by_memcpy, source, sizeof source) == 0 && hostcopy_rejected() == 1 &&
         hostcopy_abi_version() == HOSTCOPY_ABI_VERSION;
    report(ok ? "hostcopy firmware: ok\n" : "hostcopy firmware: FAILED\n");
    return ok ? 0 : 1;
}
