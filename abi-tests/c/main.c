/*
 * The C consumer as a program on hosted targets: `cargo xtask abi` links it
 * against the static library built for each target (and against the DLL's
 * import library on Windows) and runs it through the target's runner (native,
 * qemu-user, wine). Prints the C-side layout and exits nonzero on any failure.
 * Targets without an OS use freestanding.c instead.
 */
#include <stdio.h>

#include "consumer.h"
#include "layout_report.h"

int main(void) {
    uint32_t layout[HOSTCOPY_LAYOUT_FIELDS];
    int failed_line;

    if (hostcopy_c_layout(layout, HOSTCOPY_LAYOUT_FIELDS) != HOSTCOPY_LAYOUT_FIELDS) {
        printf("layout report has an unexpected number of values\n");
        return 1;
    }
    printf("layout size=%u align=%u dst=%u src=%u nbytes=%u dst_size=%u src_size=%u "
           "nbytes_size=%u abi=%u pointer=%u\n",
           (unsigned)layout[0], (unsigned)layout[1], (unsigned)layout[2], (unsigned)layout[3],
           (unsigned)layout[4], (unsigned)layout[5], (unsigned)layout[6], (unsigned)layout[7],
           (unsigned)layout[8], (unsigned)layout[9]);
    failed_line = hostcopy_c_contract();
    if (failed_line != 0) {
        printf("contract check failed at consumer.c:%d\n", failed_line);
        return 1;
    }
    printf("contract ok\n");
    return 0;
}
