/*
 * The C consumer as a program: `cargo xtask abi` links it against the
 * static library built for each target and runs it (natively or under
 * qemu-user). Prints the C-side layout and exits nonzero on any failure.
 */
#include <stdio.h>

#include "consumer.h"

int main(void) {
    uint32_t layout[7];
    int failed_line;

    hostcopy_c_layout(layout);
    printf("layout size=%u align=%u dst=%u src=%u nbytes=%u abi=%u pointer=%u\n",
           (unsigned)layout[0], (unsigned)layout[1], (unsigned)layout[2], (unsigned)layout[3],
           (unsigned)layout[4], (unsigned)layout[5], (unsigned)layout[6]);
    failed_line = hostcopy_c_contract();
    if (failed_line != 0) {
        printf("contract check failed at consumer.c:%d\n", failed_line);
        return 1;
    }
    printf("contract ok\n");
    return 0;
}
