#ifndef HOSTCOPY_SEMIHOSTING_H
#define HOSTCOPY_SEMIHOSTING_H

/*
 * Arm semihosting, as QEMU implements it for Arm and RISC-V: the firmware
 * asks the emulator to print and to exit with a status. Each platform file
 * defines semihosting_call with its architecture's trap sequence.
 */

#define SYS_WRITE0 0x04
#define SYS_EXIT 0x18
/* SYS_EXIT reasons: QEMU exits with status 0 for the first, 1 otherwise. */
#define ADP_STOPPED_APPLICATION_EXIT 0x20026
#define ADP_STOPPED_RUN_TIME_ERROR 0x20023

long semihosting_call(long operation, const void *argument);

/* Runs the consumer, then ends the emulator with its verdict. */
_Noreturn void hostcopy_bare_start(void);

#endif
