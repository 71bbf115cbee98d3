#ifndef HOSTCOPY_CONSUMER_H
#define HOSTCOPY_CONSUMER_H

#include <stdint.h>

/* Fills size, align, offsetof dst, src, nbytes, ABI version, pointer size. */
void hostcopy_c_layout(uint32_t out[7]);

/* 0 when every contract check passes, else the line of consumer.c that failed. */
int hostcopy_c_contract(void);

#endif
