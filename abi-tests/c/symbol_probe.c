/*
 * The names a C caller of hostcopy-core links against, on the target this
 * is compiled for. `cargo xtask abi` compiles it (no libc needed) and lists
 * the object's undefined symbols: the compiler has applied the target's
 * decoration, so on i686 Windows, where HOSTCOPY_CB is __stdcall, the
 * reference is _hostcopy_fn@4. Each name must be a global function in
 * libhostcopy.a for that target.
 */
#include "hostcopy.h"

void hostcopy_symbol_probe(void *record);

/* Calls each function the header declares, through its declaration. */
void hostcopy_symbol_probe(void *record) {
    hostcopy_fn(record);
    (void)hostcopy_rejected();
    (void)hostcopy_abi_version();
}
