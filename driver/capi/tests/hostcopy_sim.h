/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/* The simulated driver's hooks in libhostcopy_stager built with feature
   `simulator` (src/sim.rs), for the C test only: never shipped. */
#ifndef HOSTCOPY_SIM_H
#define HOSTCOPY_SIM_H

#include <stddef.h>
#include <stdint.h>

#include "hostcopy_stager.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Routes this process's driver calls to the simulator: call first. */
void hostcopy_sim_install(void);
/* A new simulated device: its ordinal, -1 on failure. */
int32_t hostcopy_sim_new_device(void);
/* The device runs no new queued work until released. */
hostcopy_status hostcopy_sim_hold(int32_t device);
hostcopy_status hostcopy_sim_release(int32_t device);
/* The device's context gets the sticky error `code`. */
hostcopy_status hostcopy_sim_fail_context(int32_t device, uint32_t code);
/* The nth call (from 1, from now) of driver entry point `entry_point`
   in the device's context fails with `code`. */
hostcopy_status hostcopy_sim_fail_call(int32_t device, const char *entry_point, uint32_t nth,
                                       uint32_t code);
/* Waits for the device's queue; the misuses of the driver seen on it
   (printed to stderr). */
size_t hostcopy_sim_violations(int32_t device);
/* Panics inside the library: returns HOSTCOPY_ERROR_PANIC. */
hostcopy_status hostcopy_sim_panic(void);

#ifdef __cplusplus
}
#endif

#endif
