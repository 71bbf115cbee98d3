/*
 * The C consumer's entry point on targets without an operating system (see
 * freestanding.h): the same output as main.c, without a C library.
 */
#include "consumer.h"
#include "freestanding.h"
#include "layout_report.h"

static char *append(char *out, const char *text) {
    while (*text)
        *out++ = *text++;
    return out;
}

static char *append_number(char *out, uint32_t value) {
    char digits[10];
    int count = 0;
    do {
        digits[count++] = (char)('0' + value % 10);
        value /= 10;
    } while (value);
    while (count)
        *out++ = digits[--count];
    return out;
}

int hostcopy_freestanding_main(void) {
    /* The names main.c prints, in the order of layout_report.h. */
    static const char *const names[HOSTCOPY_LAYOUT_FIELDS] = {
        "size",     "align",    "dst",         "src", "nbytes",
        "dst_size", "src_size", "nbytes_size", "abi", "pointer",
    };
    uint32_t layout[HOSTCOPY_LAYOUT_FIELDS];
    char line[256];
    char *end = append(line, "layout");
    int failed_line;

    if (hostcopy_c_layout(layout, HOSTCOPY_LAYOUT_FIELDS) != HOSTCOPY_LAYOUT_FIELDS) {
        hostcopy_platform_write("layout report has an unexpected number of values\n");
        return 1;
    }
    for (int i = 0; i < HOSTCOPY_LAYOUT_FIELDS; i++) {
        end = append(append(append(end, " "), names[i]), "=");
        end = append_number(end, layout[i]);
    }
    *append(end, "\n") = '\0';
    hostcopy_platform_write(line);

    failed_line = hostcopy_c_contract();
    if (failed_line != 0) {
        end = append_number(append(line, "contract check failed at consumer.c:"),
                            (uint32_t)failed_line);
        *append(end, "\n") = '\0';
        hostcopy_platform_write(line);
        return 1;
    }
    hostcopy_platform_write("contract ok\n");
    return 0;
}
