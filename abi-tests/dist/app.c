/*
 * A C consumer of a hostcopy dist folder: calls hostcopy_fn through a
 * CUhostFn-shaped pointer (as cuLaunchHostFunc would), checks the copy, the
 * rejected count and the ABI version of the library it loaded. Valid C99
 * and C++11, so check.sh also compiles the header through it in each
 * language standard. Exit status 0 when every check held.
 */
#include <stdio.h>
#include <string.h>

#include "hostcopy.h"

typedef void(HOSTCOPY_CB *host_fn_t)(void *user_data);

int main(void) {
    static unsigned char src[4096];
    static unsigned char dst[4096];
    struct hostcopy_args record;
    host_fn_t host_fn = hostcopy_fn;
    size_t rejected_before = hostcopy_rejected();
    size_t i;
    int failures = 0;

    for (i = 0; i < sizeof src; i++) {
        src[i] = (unsigned char)(i * 7 + 1);
    }
    record.dst = (uintptr_t)dst;
    record.src = (uintptr_t)src;
    record.nbytes = sizeof src;
    host_fn(&record);
    if (memcmp(dst, src, sizeof src) != 0) {
        fprintf(stderr, "hostcopy_fn: the destination differs from the source\n");
        failures++;
    }

    host_fn(NULL);
    if (hostcopy_rejected() != rejected_before + 1) {
        fprintf(stderr, "hostcopy_rejected: a null record was not counted\n");
        failures++;
    }

    if (hostcopy_abi_version() != HOSTCOPY_ABI_VERSION) {
        fprintf(stderr, "hostcopy_abi_version: library %u, header %u\n",
                (unsigned)hostcopy_abi_version(), (unsigned)HOSTCOPY_ABI_VERSION);
        failures++;
    }

    printf("hostcopy %d.%d.%d (ABI %u), %u-byte record: %s\n", HOSTCOPY_VERSION_MAJOR,
           HOSTCOPY_VERSION_MINOR, HOSTCOPY_VERSION_PATCH, (unsigned)hostcopy_abi_version(),
           (unsigned)sizeof record, failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
