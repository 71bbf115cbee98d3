/*
 * The record's layout as this target's C compiler sees it through
 * hostcopy.h. `cargo xtask abi` compiles this file for each target (no libc
 * needed) and reads the values back from the object file: they follow the
 * 16-byte marker, as 32-bit integers in the target's byte order.
 * abi-tests/src/layout.rs writes the same report from Rust.
 */
#include "hostcopy.h"

#include "layout_report.h"

/*
 * The size of one field: with size and offsets alone, a `uint32_t nbytes`
 * would pass on 64-bit targets (the struct keeps 24 bytes through padding).
 */
#define FIELD_SIZE(field) ((uint32_t)sizeof(((const struct hostcopy_args *)0)->field))

__attribute__((used)) const struct hostcopy_layout_report hostcopy_c_layout_report = {
    HOSTCOPY_LAYOUT_MAGIC,
    {
        (uint32_t)sizeof(struct hostcopy_args),
        (uint32_t)HOSTCOPY_ALIGNOF(struct hostcopy_args),
        (uint32_t)offsetof(struct hostcopy_args, dst),
        (uint32_t)offsetof(struct hostcopy_args, src),
        (uint32_t)offsetof(struct hostcopy_args, nbytes),
        FIELD_SIZE(dst),
        FIELD_SIZE(src),
        FIELD_SIZE(nbytes),
        (uint32_t)HOSTCOPY_ABI_VERSION,
        (uint32_t)sizeof(void *),
    },
};
