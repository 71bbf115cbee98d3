/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * hostcopy_stager.h: staged transfers between device memory and ordinary
 * pageable host memory for C and C++ programs, through hostcopy's staging
 * engine (pinned staging buffers of its own, a copier thread and copy
 * workers; see docs/engine.md). The library is libhostcopy_stager (.a or
 * .so); it opens libcuda at run time, so a program linked with it starts
 * on a machine without a driver and is told so by its first call.
 *
 * Hand-written, like hostcopy.h. driver/capi/ci.sh keeps it in step with
 * the library: each prototype's types are compared with the Rust
 * function's (src/header_check.rs); every function declared here is
 * exported by the library and every hostcopy_* function the library
 * exports is declared here or in hostcopy.h; the structures' layouts are
 * asserted below and, with the same numbers, in the Rust source (a
 * compile-time check on both sides); the C test
 * (driver/capi/tests/stager_sim.c) calls every function.
 *
 * Errors. Every function that can fail returns a hostcopy_status
 * (HOSTCOPY_OK is 0) and writes its results only on success. The message
 * of the last error on the calling thread is thread-local:
 * hostcopy_last_error_message() copies it, hostcopy_last_error_driver_code()
 * gives the CUresult behind a HOSTCOPY_ERROR_DRIVER. A successful call
 * leaves them as they were (as errno). No function lets a Rust panic or
 * unwind cross into C: a panic is caught, reported as HOSTCOPY_ERROR_PANIC
 * with its message; a stager or host buffer whose call panicked refuses
 * further use with the same status. Two cases abort the process instead
 * (a message on stderr first), where going on could let the driver or a
 * copy write memory the caller has been given back: a panic inside the
 * engine while it queues a transfer's copies (between queuing them and
 * handing them to the copier, where unwinding would give up on copies the
 * driver already holds), and, after a context error, a direct copy to a
 * registered host buffer that the driver may still run when fresh pages
 * could not be put under the bytes it writes. Both are bugs or system
 * failures, never a result of the arguments.
 *
 * Contexts. A stager works in a device's primary context (the one the
 * CUDA runtime, torch and cupy use). Every call leaves the calling thread's
 * current context as it found it.
 *
 * Ownership (what the library keeps alive, and what the caller must):
 *  - A started transfer (hostcopy_stager_start) holds what it uses that
 *    the library made: the stager's engine, the hostcopy_device_buffer and
 *    the hostcopy_host_buffer it copies. Freeing any of them, the stager
 *    included, while the transfer is in flight is allowed: the memory
 *    stays allocated until the transfer is freed (and, after a context
 *    error, for as long as a queued copy may still touch it); the host
 *    buffer is let go of sooner, once hostcopy_transfer_wait() has
 *    returned (whatever it returned: the transfer has ended then).
 *  - While a transfer holds a hostcopy_host_buffer, no other transfer may
 *    write the bytes it reads or writes, nor read the bytes it writes:
 *    hostcopy_stager_start() and _run() refuse such a transfer with BUSY
 *    (whichever stager starts it). Transfers of other bytes of the same
 *    buffer, and transfers that only read the same bytes, run at once.
 *  - Raw host memory (hostcopy_copy.host) is the caller's: it must stay
 *    allocated, and nothing else may write it (nor read it, for a copy to
 *    the host) until hostcopy_transfer_wait() or hostcopy_transfer_free()
 *    has returned for that transfer. Freeing it before is undefined
 *    behaviour: use a hostcopy_host_buffer where a transfer's lifetime is
 *    hard to follow. It must be initialized memory, a copy's destination
 *    too (the engine reads a byte of each destination page to make it
 *    present): memory straight from malloc() is written first (memset,
 *    or calloc() instead); memory from mmap() is zeroed already. The
 *    library cannot see two transfers writing the same raw bytes: that is
 *    the caller's to prevent, as for any memory two threads write.
 *  - Foreign device memory (hostcopy_device_buffer_wrap) is kept by its
 *    release callback: the library calls it once nothing uses the memory
 *    any more; the caller frees the memory there, never before.
 *  - Passing a handle after freeing it, or freeing it twice, is undefined
 *    behaviour, as for free(). Every free function accepts NULL.
 *
 * Thread safety, per call, is stated at each function: "any thread" means
 * the call may run at the same time as any other call on the same object,
 * except its free.
 */
#ifndef HOSTCOPY_STAGER_H
#define HOSTCOPY_STAGER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this API: bumped when a function or structure changes. */
#define HOSTCOPY_STAGER_API_VERSION 1

/* ---- Status codes -------------------------------------------------- */

typedef int32_t hostcopy_status;

#define HOSTCOPY_OK 0
/* A pointer argument that must not be NULL was NULL. */
#define HOSTCOPY_ERROR_NULL_ARGUMENT 1
/* A structure whose struct_size is not this header's sizeof, or an
   argument outside its range (an option, a direction, a length). */
#define HOSTCOPY_ERROR_INVALID_ARGUMENT 2
/* A range or a block outside its memory (device or host). */
#define HOSTCOPY_ERROR_OUT_OF_BOUNDS 3
/* Two blocks of a batch write the same bytes. */
#define HOSTCOPY_ERROR_BLOCKS_OVERLAP 4
/* The address given as device memory is not device memory. */
#define HOSTCOPY_ERROR_NOT_DEVICE_MEMORY 5
/* Memory or a handle of another device than the stager's. */
#define HOSTCOPY_ERROR_CONTEXT_MISMATCH 6
/* The driver refused a call; hostcopy_last_error_driver_code() has its
   CUresult (34, CUDA_ERROR_STUB_LIBRARY, where no driver could be loaded). */
#define HOSTCOPY_ERROR_DRIVER 7
/* A host buffer is in use: registering it while a transfer holds it, a
   transfer of bytes another transfer in flight writes (or of bytes it
   reads, for a transfer that writes), or a transfer of it while the
   first hostcopy_host_buffer_register() call on it is under way. */
#define HOSTCOPY_ERROR_BUSY 8
/* Host memory could not be mapped. */
#define HOSTCOPY_ERROR_OUT_OF_MEMORY 9
/* Not available here (the device refuses stream memory waits, say). */
#define HOSTCOPY_ERROR_UNSUPPORTED 10
/* A panic inside the library was caught; the object it happened on
   refuses further use. A bug: please report the message. */
#define HOSTCOPY_ERROR_PANIC 11
/* Any other error of the engine; the message says which. */
#define HOSTCOPY_ERROR_OTHER 12

/* The status's name ("HOSTCOPY_ERROR_DRIVER"), a static string; "unknown"
   for a value that is none. Any thread. */
const char *hostcopy_status_name(hostcopy_status status);

/* Copies the message of the last error on the calling thread into buf
   (at most size - 1 bytes and a NUL; nothing if size is 0) and returns the
   message's length without the NUL, so a caller can size buf: a return
   >= size means it was cut. "" where no call on this thread has failed.
   Any thread (the message is the calling thread's). */
size_t hostcopy_last_error_message(char *buf, size_t size);

/* The CUresult of the last HOSTCOPY_ERROR_DRIVER on the calling thread,
   0 if its last error was of another kind or there was none. */
int32_t hostcopy_last_error_driver_code(void);

/* ---- Stagers ------------------------------------------------------- */

typedef struct hostcopy_stager hostcopy_stager;

/* hostcopy_stager_new's device for the calling thread's current context
   (which must be a primary context). */
#define HOSTCOPY_CURRENT_CONTEXT (-1)

/* workers: the default, the cores less a few, shared between `stagers`. */
#define HOSTCOPY_WORKERS_DEFAULT SIZE_MAX

/* Stores for host-to-device copies into staging buffers: cached or
   streaming for every upload, or (the default) chosen per upload:
   streaming for a blocking one of up to 256 MiB staged, cached for the
   rest. hostcopy_stager_options_default() sets BY_UPLOAD; a structure
   filled with zeros by hand asks for CACHED (0). */
#define HOSTCOPY_STORES_CACHED 0
#define HOSTCOPY_STORES_STREAMING 1
#define HOSTCOPY_STORES_BY_UPLOAD 2

/* A stager's options, as the Rust StagingOptions builder has them
   (docs/tuning.md says what each does). Fill it with
   hostcopy_stager_options_default(), then change what you need. */
typedef struct hostcopy_stager_options {
    size_t struct_size;       /* sizeof(hostcopy_stager_options) */
    size_t chunk;             /* bytes a chunk, 4 KiB .. 1 GiB (default 16 MiB) */
    size_t h2d_chunk;         /* bytes a chunk to the device, >= 4 KiB (default
                                 SIZE_MAX: the chunk) */
    size_t edge_chunk;        /* first and last chunks, >= 4 KiB (default
                                 SIZE_MAX: the chunk) */
    size_t buffers;           /* staging buffers, 1 .. 64 (default 4) */
    size_t streams;           /* streams the chunks go on, >= 1 (default
                                 SIZE_MAX: one per buffer) */
    size_t workers;           /* copy workers, or HOSTCOPY_WORKERS_DEFAULT */
    size_t stagers;           /* stagers at once, sharing the default workers */
    size_t d2h_workers;       /* workers copying to the host (default SIZE_MAX:
                                 all) */
    size_t driver_path_below; /* single transfers below: the driver's path
                                 (default 2 MiB; 0 stages everything) */
    size_t kernel_below;      /* batches of blocks averaging below: the gather
                                 kernel (default 32 KiB; 0 never) */
    uint32_t prefault;        /* 1: make a cold destination's pages present
                                 (default 1) */
    uint32_t h2d_stores;      /* HOSTCOPY_STORES_BY_UPLOAD (default), _CACHED or _STREAMING */
} hostcopy_stager_options;

/* Writes the defaults (and struct_size) into *options. Any thread. */
hostcopy_status hostcopy_stager_options_default(hostcopy_stager_options *options);

/* A stager on device `device`'s primary context (HOSTCOPY_CURRENT_CONTEXT:
   the calling thread's current context), with `options` (NULL: the
   defaults). Allocates the staging buffers and starts its threads.
   Refused: a bad option (INVALID_ARGUMENT, the message names it), no such
   device or no driver (DRIVER), a device without stream memory waits
   (UNSUPPORTED). Any thread. */
hostcopy_status hostcopy_stager_new(int device, const hostcopy_stager_options *options,
                                    hostcopy_stager **out);

/* Frees the stager. Transfers it started go on and are finished by
   hostcopy_transfer_wait()/_free() as before: each holds the engine's
   part it needs (its streams, their drain state). The free first waits
   for the stager's copier thread to finish the host side of the
   transfers in flight (so it returns once their copies have run), then
   frees the staging buffers and stops the threads. NULL: nothing. Not at
   the same time as another call on this stager. */
void hostcopy_stager_free(hostcopy_stager *stager);

/* The device ordinal the stager works on. Any thread. */
hostcopy_status hostcopy_stager_device(const hostcopy_stager *stager, int *device);

/* The options the stager was made with (workers: the count asked for),
   and the worker threads running (fewer if the system refused some).
   Either out pointer may be NULL. Any thread. */
hostcopy_status hostcopy_stager_get_options(const hostcopy_stager *stager,
                                            hostcopy_stager_options *options,
                                            size_t *workers_running);

/* ---- Device memory ------------------------------------------------- */

typedef struct hostcopy_device_buffer hostcopy_device_buffer;

/* `len` bytes of device memory (cuMemAlloc) on the stager's device. Freed
   once the handle is freed and no transfer uses it. Any thread. */
hostcopy_status hostcopy_device_buffer_new(const hostcopy_stager *stager, size_t len,
                                           hostcopy_device_buffer **out);

/* Device memory another runtime allocated (cudaMalloc, torch, a pool of
   your own), `len` bytes at `ptr` (a CUdeviceptr), for transfers of
   `stager`'s device. The driver is asked first: memory that is not device
   memory is NOT_DEVICE_MEMORY, of another device CONTEXT_MISMATCH, a range
   past its allocation OUT_OF_BOUNDS. `release(user_data)` (may be NULL) is
   called once, on whichever thread lets go last, when the handle is freed
   and no transfer uses the memory: free the memory there, not before. On
   an error it is not called. Any thread. */
hostcopy_status hostcopy_device_buffer_wrap(const hostcopy_stager *stager, uint64_t ptr,
                                            size_t len, void (*release)(void *user_data),
                                            void *user_data, hostcopy_device_buffer **out);

/* Lets go of the handle; the memory goes when no transfer uses it. NULL:
   nothing. Not at the same time as another call on this buffer. */
void hostcopy_device_buffer_free(hostcopy_device_buffer *buffer);

/* The CUdeviceptr of its first byte and its length (either may be NULL).
   Any thread. */
hostcopy_status hostcopy_device_buffer_get(const hostcopy_device_buffer *buffer, uint64_t *ptr,
                                           size_t *len);

/* ---- Host memory made to be copied into ---------------------------- */

typedef struct hostcopy_host_buffer hostcopy_host_buffer;

/* `len` zeroed bytes of pageable host memory whose pages are present
   (huge pages where the kernel has them in madvise mode), not pinned:
   the Rust HostBuffer. Freed once the handle is freed and no transfer
   uses it. OUT_OF_MEMORY where the kernel refuses the mapping. Any
   thread. */
hostcopy_status hostcopy_host_buffer_new(size_t len, hostcopy_host_buffer **out);

/* Lets go of the handle; the memory is unregistered and unmapped once no
   transfer uses it. Reading or writing through hostcopy_host_buffer_data's
   pointer after this is undefined behaviour. NULL: nothing. Not at the
   same time as another call on this buffer. */
void hostcopy_host_buffer_free(hostcopy_host_buffer *buffer);

/* Its first byte (NULL for 0 bytes) and its length: the caller reads and
   writes it as any memory, but not the bytes a transfer in flight writes,
   nor writes the bytes one reads. Any thread. */
void *hostcopy_host_buffer_data(const hostcopy_host_buffer *buffer);
size_t hostcopy_host_buffer_len(const hostcopy_host_buffer *buffer);

/* When a host buffer is registered with the driver. */
#define HOSTCOPY_REGISTER_NEVER 0
/* On a thread of its own, 64 MiB at a time from the first byte on: the
   call returns at once; transfers are staged until their bytes are
   registered and direct (one driver copy, no CPU copy) from then on. */
#define HOSTCOPY_REGISTER_BACKGROUND 1
/* In the call, in one piece (up to 256 GiB). */
#define HOSTCOPY_REGISTER_NOW 2

/* How far a registration has got. */
typedef struct hostcopy_registration {
    size_t registered;   /* bytes registered, from the first byte on */
    size_t len;          /* the buffer's bytes */
    int32_t refused;     /* the CUresult the driver refused the next range
                            with (the rest stays staged), 0 if none */
    int32_t finished;    /* 1 once registering has ended (all registered,
                            a range refused, or never asked for) */
} hostcopy_registration;

/* Registers the buffer with the driver for every context (page-locked),
   as `when` says, and writes how far it got into *registration (may be
   NULL). Never an error of the driver: a refused range ends it there and
   shows in `refused`. Once asked for, a registration stays until the
   buffer goes; a second call reports the first's progress (after waiting
   for the first call to return). The first call is refused with BUSY
   while a started transfer holds the buffer: register before starting
   transfers, or once hostcopy_transfer_wait() has returned for each
   (freeing them is not needed). While the first call is under way
   (HOSTCOPY_REGISTER_NOW registers in the call: seconds for a large
   buffer), transfers of the buffer are refused with BUSY rather than
   made to wait; hostcopy_host_buffer_registration() answers at once.
   Any thread. */
hostcopy_status hostcopy_host_buffer_register(hostcopy_host_buffer *buffer,
                                              const hostcopy_stager *stager, int32_t when,
                                              hostcopy_registration *registration);

/* How far its registration has got, without waiting (while the first
   hostcopy_host_buffer_register() call is under way: nothing registered,
   not finished). Any thread. */
hostcopy_status hostcopy_host_buffer_registration(const hostcopy_host_buffer *buffer,
                                                  hostcopy_registration *registration);

/* Waits until its registration has ended, then as above. Any thread. */
hostcopy_status hostcopy_host_buffer_wait_registered(const hostcopy_host_buffer *buffer,
                                                     hostcopy_registration *registration);

/* ---- Transfers ----------------------------------------------------- */

#define HOSTCOPY_TO_HOST 0   /* device -> host */
#define HOSTCOPY_TO_DEVICE 1 /* host -> device */

/* One block of a batch: `len` bytes at `device_offset` of the device
   memory and `host_offset` of the host memory. */
typedef struct hostcopy_block {
    size_t device_offset;
    size_t host_offset;
    size_t len;
} hostcopy_block;

/* One description of a copy, for hostcopy_stager_run and _start. The host
   side is `host_len` bytes at `host` (raw memory, the caller's: see the
   ownership rules above) or at `host_offset` of `host_buffer` (exactly one
   of the two). Without blocks, all host_len bytes move from or to
   `device_offset` of `device`; with blocks (block_count > 0), each block's
   bytes, offsets relative to the host side's start and to `device`'s. */
typedef struct hostcopy_copy {
    size_t struct_size;                 /* sizeof(hostcopy_copy) */
    int32_t direction;                  /* HOSTCOPY_TO_HOST or HOSTCOPY_TO_DEVICE */
    int32_t reserved;                   /* 0 */
    hostcopy_device_buffer *device;
    size_t device_offset;
    void *host;
    hostcopy_host_buffer *host_buffer;
    size_t host_offset;
    size_t host_len;
    const hostcopy_block *blocks;       /* read during the call only */
    size_t block_count;
} hostcopy_copy;

/* A copy of `len` bytes from `device_offset` of `src` into raw host memory. */
static inline hostcopy_copy hostcopy_to_host(void *dst, size_t len,
                                             hostcopy_device_buffer *src,
                                             size_t device_offset) {
    hostcopy_copy copy;
    copy.struct_size = sizeof(hostcopy_copy);
    copy.direction = HOSTCOPY_TO_HOST;
    copy.reserved = 0;
    copy.device = src;
    copy.device_offset = device_offset;
    copy.host = dst;
    copy.host_buffer = NULL;
    copy.host_offset = 0;
    copy.host_len = len;
    copy.blocks = NULL;
    copy.block_count = 0;
    return copy;
}

/* A copy of `len` bytes of raw host memory to `device_offset` of `dst`. */
static inline hostcopy_copy hostcopy_to_device(hostcopy_device_buffer *dst,
                                               size_t device_offset, const void *src,
                                               size_t len) {
    hostcopy_copy copy = hostcopy_to_host((void *)(uintptr_t)src, len, dst, device_offset);
    copy.direction = HOSTCOPY_TO_DEVICE;
    return copy;
}

/* Runs the copy and waits for its bytes to arrive. Checked whole before
   anything is queued (bounds, every block, no two blocks writing the same
   bytes). After an error of the driver the stager drains its streams and
   works on (after a sticky error it refuses transfers with that error).
   Any thread; a stager's calls run one at a time (a second thread's call
   waits for this one). */
hostcopy_status hostcopy_stager_run(hostcopy_stager *stager, const hostcopy_copy *copy);

typedef struct hostcopy_transfer hostcopy_transfer;

/* Starts the copy and returns at once with *out, a transfer in flight
   whose driver side is queued whole. It holds the stager's engine and the
   hostcopy buffers it copies (see ownership above). Wait for it with
   hostcopy_transfer_wait() and free it with hostcopy_transfer_free().
   Checked and refused as hostcopy_stager_run. Any thread, as _run. */
hostcopy_status hostcopy_stager_start(hostcopy_stager *stager, const hostcopy_copy *copy,
                                      hostcopy_transfer **out);

/* Waits until the transfer's bytes have arrived; its error if it failed.
   Once it returns, the transfer has ended (nothing it started touches its
   host memory any more) and it lets go of the hostcopy_host_buffer it
   copies: the buffer may be registered, and its bytes written by other
   transfers, before this transfer is freed. Idempotent: every call, on
   any thread, gets the same result. Any thread. */
hostcopy_status hostcopy_transfer_wait(hostcopy_transfer *transfer);

/* *finished = 1 if the bytes have arrived (or it failed: wait says how),
   0 if still in flight, without waiting. Any thread. */
hostcopy_status hostcopy_transfer_query(hostcopy_transfer *transfer, int *finished);

/* Frees the transfer, first waiting for its copies if it was not waited
   for (its error then goes unreported: wait first to see it), and lets go
   of what it held. After this, nothing touches the transfer's host memory.
   NULL: nothing. Not at the same time as another call on this transfer. */
void hostcopy_transfer_free(hostcopy_transfer *transfer);

/* ---- Layout checks (64-bit targets, the only ones CUDA has) -------- */

#if defined(__cplusplus) && __cplusplus >= 201103L
#define HOSTCOPY_STAGER_ASSERT(cond, msg) static_assert(cond, msg)
#elif !defined(__cplusplus) && defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#define HOSTCOPY_STAGER_ASSERT(cond, msg) _Static_assert(cond, msg)
#else
#define HOSTCOPY_STAGER_ASSERT_JOIN2(a, b) a##b
#define HOSTCOPY_STAGER_ASSERT_JOIN(a, b) HOSTCOPY_STAGER_ASSERT_JOIN2(a, b)
#define HOSTCOPY_STAGER_ASSERT(cond, msg)                                                  \
    typedef char HOSTCOPY_STAGER_ASSERT_JOIN(hostcopy_stager_static_assert_line_,          \
                                             __LINE__)[(cond) ? 1 : -1]
#endif

HOSTCOPY_STAGER_ASSERT(sizeof(void *) == 8, "hostcopy_stager: 64-bit targets only");
HOSTCOPY_STAGER_ASSERT(sizeof(hostcopy_stager_options) == 96,
                       "hostcopy_stager: hostcopy_stager_options is 96 bytes");
HOSTCOPY_STAGER_ASSERT(offsetof(hostcopy_stager_options, prefault) == 88,
                       "hostcopy_stager: prefault at 88");
HOSTCOPY_STAGER_ASSERT(sizeof(hostcopy_registration) == 24,
                       "hostcopy_stager: hostcopy_registration is 24 bytes");
HOSTCOPY_STAGER_ASSERT(offsetof(hostcopy_registration, refused) == 16,
                       "hostcopy_stager: refused at 16");
HOSTCOPY_STAGER_ASSERT(sizeof(hostcopy_block) == 24, "hostcopy_stager: hostcopy_block is 24 bytes");
HOSTCOPY_STAGER_ASSERT(sizeof(hostcopy_copy) == 80, "hostcopy_stager: hostcopy_copy is 80 bytes");
HOSTCOPY_STAGER_ASSERT(offsetof(hostcopy_copy, device) == 16, "hostcopy_stager: device at 16");
HOSTCOPY_STAGER_ASSERT(offsetof(hostcopy_copy, block_count) == 72,
                       "hostcopy_stager: block_count at 72");

#ifdef __cplusplus
}
#endif

#endif /* HOSTCOPY_STAGER_H */
