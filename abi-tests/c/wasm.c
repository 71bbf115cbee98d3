/*
 * The C consumer on wasm32: node (abi-tests/wasm/run.mjs) provides the
 * output and calls the exported entry point.
 */
#include <stddef.h>

#include "freestanding.h"

__attribute__((import_module("env"), import_name("hostcopy_write"))) void
host_write(const char *text, size_t len);

void hostcopy_platform_write(const char *text) {
    size_t len = 0;
    while (text[len])
        len++;
    host_write(text, len);
}

__attribute__((export_name("hostcopy_consumer_main"))) int hostcopy_consumer_main(void);
int hostcopy_consumer_main(void) { return hostcopy_freestanding_main(); }
