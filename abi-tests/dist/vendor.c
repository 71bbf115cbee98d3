/*
 * A vendor's shared library that embeds hostcopy's static library, as the
 * README's "Inside your own shared library" builds it: its one function
 * hands a null record to its own hostcopy_fn (rejected) and returns its own
 * rejected count. check.sh builds two of them (vendor_a, vendor_b) and links
 * both into one program (two_vendors.c).
 */
#include <stddef.h>

#include "hostcopy.h"

#ifndef VENDOR_REJECT
#define VENDOR_REJECT vendor_reject
#endif

size_t VENDOR_REJECT(void);

size_t VENDOR_REJECT(void) {
    hostcopy_fn(NULL);
    return hostcopy_rejected();
}
