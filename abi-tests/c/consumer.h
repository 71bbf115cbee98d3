#ifndef HOSTCOPY_CONSUMER_H
#define HOSTCOPY_CONSUMER_H

#include <stddef.h>
#include <stdint.h>

/*
 * Writes up to capacity values of the layout report, in the order of
 * layout_report.h, and returns how many it holds (HOSTCOPY_LAYOUT_FIELDS).
 */
size_t hostcopy_c_layout(uint32_t *out, size_t capacity);

/* 0 when every contract check passes, else the line of consumer.c that failed. */
int hostcopy_c_contract(void);

#endif
