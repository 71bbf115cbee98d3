/*
 * Loads two shared libraries that each embed hostcopy's static library
 * (vendor.c, built as libvendor_a.so and libvendor_b.so). Each counts the
 * records its own hostcopy_fn rejected: two rejections in a, then one in b,
 * must leave b's count at 1. Where the libraries re-export hostcopy_*, the
 * loader binds both to one copy and b counts 3. Prints "separate" or
 * "shared" and the counts; exits 0 either way, check.sh judges.
 */
#include <stddef.h>
#include <stdio.h>

size_t vendor_a_reject(void);
size_t vendor_b_reject(void);

int main(void) {
    size_t a, b;
    vendor_a_reject();
    a = vendor_a_reject();
    b = vendor_b_reject();
    printf("%s: a counted %u, b counted %u\n", a == 2 && b == 1 ? "separate" : "shared", (unsigned)a,
           (unsigned)b);
    return 0;
}
