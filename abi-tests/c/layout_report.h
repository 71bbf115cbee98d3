#ifndef HOSTCOPY_LAYOUT_REPORT_H
#define HOSTCOPY_LAYOUT_REPORT_H

#include <stdint.h>

/* 15 characters and the terminating NUL: 16 bytes, as in layout.rs. */
#define HOSTCOPY_LAYOUT_MAGIC "HOSTCOPY-LAYOUT"
#define HOSTCOPY_LAYOUT_FIELDS 10

/*
 * size, align, offsetof dst, src, nbytes, sizeof dst, src, nbytes, ABI
 * version, pointer size: the order of Layout in layout.rs.
 */
struct hostcopy_layout_report {
    char magic[16];
    uint32_t values[HOSTCOPY_LAYOUT_FIELDS];
};

extern const struct hostcopy_layout_report hostcopy_c_layout_report;

#endif
