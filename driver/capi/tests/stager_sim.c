/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * The C API of hostcopy_stager.h against the simulated driver: every
 * function, every refusal the API defines, transfers byte-checked both
 * ways (one range, at an offset, batches, host buffers, started and
 * blocking), handles freed while a transfer they feed is in flight, driver
 * errors (one-off and sticky), a caught panic, waits from two threads and
 * two threads transferring on one stager.
 * Built and run by driver/capi/ci.sh (C99, -Wall -Wextra -pedantic
 * -Werror), linked with libhostcopy_stager.a built with `simulator`.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostcopy_sim.h"
#include "hostcopy_stager.h"

#define MIB ((size_t)1 << 20)
/* CUDA_ERROR_LAUNCH_FAILED (sticky) and CUDA_ERROR_OUT_OF_MEMORY. */
#define LAUNCH_FAILED 719
#define OUT_OF_MEMORY 2

static int failures;
static int checks;

static void fail(int line, const char *what) {
    char message[512];
    hostcopy_last_error_message(message, sizeof message);
    fprintf(stderr, "stager_sim.c:%d: FAILED %s (last error: %s)\n", line, what, message);
    failures++;
}

#define CHECK(cond)                                                                              \
    do {                                                                                         \
        checks++;                                                                                \
        if (!(cond)) fail(__LINE__, #cond);                                                      \
    } while (0)

/* The call returns `expected`; on a refusal, a message is there. */
#define EXPECT(expected, call)                                                                   \
    do {                                                                                         \
        hostcopy_status got_ = (call);                                                           \
        checks++;                                                                                \
        if (got_ != (expected)) {                                                                \
            char what_[600];                                                                     \
            snprintf(what_, sizeof what_, "%s returned %s, expected %s", #call,                  \
                     hostcopy_status_name(got_), hostcopy_status_name(expected));                \
            fail(__LINE__, what_);                                                               \
        } else if ((expected) != HOSTCOPY_OK && hostcopy_last_error_message(NULL, 0) == 0) {    \
            fail(__LINE__, #call ": a refusal without a message");                               \
        }                                                                                        \
    } while (0)

#define OK(call) EXPECT(HOSTCOPY_OK, call)

/* A byte pattern with no short period (a chunk in the wrong place never
   matches by accident). */
static void fill(unsigned char *bytes, size_t len, unsigned seed) {
    size_t i;
    for (i = 0; i < len; i++) {
        uint64_t x = ((uint64_t)i ^ ((uint64_t)seed << 48)) * 0x9E3779B97F4A7C15ull;
        bytes[i] = (unsigned char)((x >> 56) ^ (x >> 29));
    }
}

static int last_message_has(const char *needle) {
    char message[512];
    hostcopy_last_error_message(message, sizeof message);
    return strstr(message, needle) != NULL;
}

static int released;
static void release_counter(void *user_data) {
    *(int *)user_data += 1;
}

static void errors_and_names(void) {
    char small[8];
    size_t len;
    CHECK(strcmp(hostcopy_status_name(HOSTCOPY_OK), "HOSTCOPY_OK") == 0);
    CHECK(strcmp(hostcopy_status_name(HOSTCOPY_ERROR_OTHER), "HOSTCOPY_ERROR_OTHER") == 0);
    CHECK(strcmp(hostcopy_status_name(HOSTCOPY_ERROR_DRIVER), "HOSTCOPY_ERROR_DRIVER") == 0);
    CHECK(strcmp(hostcopy_status_name(-1), "unknown") == 0);
    CHECK(strcmp(hostcopy_status_name(13), "unknown") == 0);
    CHECK(hostcopy_last_error_message(NULL, 0) == 0); /* nothing failed yet */
    CHECK(hostcopy_last_error_driver_code() == 0);
    EXPECT(HOSTCOPY_ERROR_NULL_ARGUMENT, hostcopy_stager_options_default(NULL));
    len = hostcopy_last_error_message(small, sizeof small);
    CHECK(len > sizeof small && strlen(small) == sizeof small - 1); /* cut, NUL-terminated */
    CHECK(last_message_has("options"));
    CHECK(hostcopy_last_error_message(small, 0) == len);
    /* A panic inside the library is a status, not an unwind into C. */
    EXPECT(HOSTCOPY_ERROR_PANIC, hostcopy_sim_panic());
    CHECK(last_message_has("on purpose"));
}

static hostcopy_stager_options test_options(void) {
    hostcopy_stager_options options;
    hostcopy_stager_options_default(&options);
    options.chunk = 1 * MIB;
    options.h2d_chunk = 1 * MIB;
    options.edge_chunk = 1 * MIB;
    options.buffers = 3;
    options.workers = 1;
    options.driver_path_below = 0; /* stage everything */
    return options;
}

static void stagers(int device) {
    hostcopy_stager_options options, bad, read_back;
    hostcopy_stager *stager = NULL;
    int ordinal = -7;
    size_t running = 0;

    OK(hostcopy_stager_options_default(&options));
    CHECK(options.struct_size == sizeof options);
    CHECK(options.chunk == 16 * MIB && options.buffers >= 1);
    CHECK(options.workers == HOSTCOPY_WORKERS_DEFAULT && options.stagers == 1);
    CHECK(options.prefault == 1 && options.h2d_stores == HOSTCOPY_STORES_BY_UPLOAD);

    options = test_options();
    EXPECT(HOSTCOPY_ERROR_NULL_ARGUMENT, hostcopy_stager_new(device, &options, NULL));
    bad = options;
    bad.struct_size = sizeof bad - 8;
    EXPECT(HOSTCOPY_ERROR_INVALID_ARGUMENT, hostcopy_stager_new(device, &bad, &stager));
    CHECK(last_message_has("struct_size"));
    bad = options;
    bad.chunk = 0;
    EXPECT(HOSTCOPY_ERROR_INVALID_ARGUMENT, hostcopy_stager_new(device, &bad, &stager));
    CHECK(last_message_has("chunk"));
    bad = options;
    bad.buffers = 0;
    EXPECT(HOSTCOPY_ERROR_INVALID_ARGUMENT, hostcopy_stager_new(device, &bad, &stager));
    bad = options;
    bad.prefault = 2;
    EXPECT(HOSTCOPY_ERROR_INVALID_ARGUMENT, hostcopy_stager_new(device, &bad, &stager));
    bad = options;
    bad.h2d_stores = 5;
    EXPECT(HOSTCOPY_ERROR_INVALID_ARGUMENT, hostcopy_stager_new(device, &bad, &stager));
    EXPECT(HOSTCOPY_ERROR_INVALID_ARGUMENT, hostcopy_stager_new(-5, &options, &stager));
    EXPECT(HOSTCOPY_ERROR_DRIVER, hostcopy_stager_new(4096, &options, &stager));
    CHECK(hostcopy_last_error_driver_code() != 0);
    /* No context is current on this thread. */
    EXPECT(HOSTCOPY_ERROR_INVALID_ARGUMENT,
           hostcopy_stager_new(HOSTCOPY_CURRENT_CONTEXT, &options, &stager));
    CHECK(stager == NULL); /* nothing written on a refusal */

    OK(hostcopy_stager_new(device, NULL, &stager)); /* the defaults */
    hostcopy_stager_free(stager);
    stager = NULL;
    OK(hostcopy_stager_new(device, &options, &stager));
    OK(hostcopy_stager_device(stager, &ordinal));
    CHECK(ordinal == device);
    EXPECT(HOSTCOPY_ERROR_NULL_ARGUMENT, hostcopy_stager_device(NULL, &ordinal));
    EXPECT(HOSTCOPY_ERROR_NULL_ARGUMENT, hostcopy_stager_device(stager, NULL));
    OK(hostcopy_stager_get_options(stager, &read_back, &running));
    CHECK(read_back.chunk == MIB && read_back.buffers == 3 && read_back.workers == 1);
    CHECK(read_back.struct_size == sizeof read_back && read_back.driver_path_below == 0);
    CHECK(running == 1);
    CHECK(read_back.h2d_stores == HOSTCOPY_STORES_BY_UPLOAD);
    OK(hostcopy_stager_get_options(stager, NULL, NULL));
    EXPECT(HOSTCOPY_ERROR_NULL_ARGUMENT, hostcopy_stager_get_options(NULL, &read_back, NULL));
    hostcopy_stager_free(stager);
    hostcopy_stager_free(NULL);
    /* Stores set for every upload read back as set. */
    for (size_t i = 0; i < 2; i++) {
        const uint32_t set = i == 0 ? HOSTCOPY_STORES_CACHED : HOSTCOPY_STORES_STREAMING;
        options.h2d_stores = set;
        stager = NULL;
        OK(hostcopy_stager_new(device, &options, &stager));
        OK(hostcopy_stager_get_options(stager, &read_back, NULL));
        CHECK(read_back.h2d_stores == set);
        hostcopy_stager_free(stager);
    }
}

static void device_buffers(hostcopy_stager *stager, hostcopy_stager *other_device_stager) {
    hostcopy_device_buffer *buffer = NULL, *wrapped = NULL;
    uint64_t ptr = 0;
    size_t len = 0;
    int local = 0;
    int counter = 0;

    EXPECT(HOSTCOPY_ERROR_NULL_ARGUMENT, hostcopy_device_buffer_new(NULL, MIB, &buffer));
    EXPECT(HOSTCOPY_ERROR_NULL_ARGUMENT, hostcopy_device_buffer_new(stager, MIB, NULL));
    OK(hostcopy_device_buffer_new(stager, 4 * MIB, &buffer));
    OK(hostcopy_device_buffer_get(buffer, &ptr, &len));
    CHECK(ptr != 0 && len == 4 * MIB);
    OK(hostcopy_device_buffer_get(buffer, NULL, NULL));
    EXPECT(HOSTCOPY_ERROR_NULL_ARGUMENT, hostcopy_device_buffer_get(NULL, &ptr, &len));

    /* Wrapping: the driver is asked first. */
    EXPECT(HOSTCOPY_ERROR_NOT_DEVICE_MEMORY,
           hostcopy_device_buffer_wrap(stager, (uint64_t)(uintptr_t)&local, sizeof local,
                                       release_counter, &counter, &wrapped));
    EXPECT(HOSTCOPY_ERROR_OUT_OF_BOUNDS,
           hostcopy_device_buffer_wrap(stager, ptr + 3 * MIB, 2 * MIB, release_counter,
                                       &counter, &wrapped));
    EXPECT(HOSTCOPY_ERROR_CONTEXT_MISMATCH,
           hostcopy_device_buffer_wrap(other_device_stager, ptr, MIB, release_counter, &counter,
                                       &wrapped));
    EXPECT(HOSTCOPY_ERROR_NULL_ARGUMENT,
           hostcopy_device_buffer_wrap(NULL, ptr, MIB, NULL, NULL, &wrapped));
    EXPECT(HOSTCOPY_ERROR_NULL_ARGUMENT,
           hostcopy_device_buffer_wrap(stager, ptr, MIB, NULL, NULL, NULL));
    CHECK(counter == 0 && wrapped == NULL); /* a refusal calls no release */
    OK(hostcopy_device_buffer_wrap(stager, ptr + MIB, MIB, release_counter, &counter, &wrapped));
    OK(hostcopy_device_buffer_get(wrapped, &ptr, &len));
    CHECK(len == MIB);
    hostcopy_device_buffer_free(wrapped);
    CHECK(counter == 1); /* released once nothing uses it */
    hostcopy_device_buffer_free(buffer);
    hostcopy_device_buffer_free(NULL);
}

/* One range each way, at an offset, byte-checked. */
static void blocking_transfers(hostcopy_stager *stager) {
    const size_t len = 3 * MIB + 17;
    unsigned char *up = (unsigned char *)malloc(len), *down = (unsigned char *)malloc(len);
    hostcopy_device_buffer *device = NULL;
    hostcopy_copy copy;

    fill(up, len, 1);
    memset(down, 0, len);
    OK(hostcopy_device_buffer_new(stager, 8 * MIB, &device));
    copy = hostcopy_to_device(device, 4096, up, len);
    OK(hostcopy_stager_run(stager, &copy));
    copy = hostcopy_to_host(down, len, device, 4096);
    OK(hostcopy_stager_run(stager, &copy));
    CHECK(memcmp(up, down, len) == 0);
    /* Empty: nothing to do. */
    copy = hostcopy_to_host(down, 0, device, 0);
    OK(hostcopy_stager_run(stager, &copy));

    /* Every refusal of a description, before anything is queued. */
    EXPECT(HOSTCOPY_ERROR_NULL_ARGUMENT, hostcopy_stager_run(stager, NULL));
    copy = hostcopy_to_host(down, len, device, 0);
    EXPECT(HOSTCOPY_ERROR_NULL_ARGUMENT, hostcopy_stager_run(NULL, &copy));
    copy.struct_size = 64;
    EXPECT(HOSTCOPY_ERROR_INVALID_ARGUMENT, hostcopy_stager_run(stager, &copy));
    copy = hostcopy_to_host(down, len, device, 0);
    copy.direction = 7;
    EXPECT(HOSTCOPY_ERROR_INVALID_ARGUMENT, hostcopy_stager_run(stager, &copy));
    copy = hostcopy_to_host(down, len, device, 0);
    copy.reserved = 1;
    EXPECT(HOSTCOPY_ERROR_INVALID_ARGUMENT, hostcopy_stager_run(stager, &copy));
    copy = hostcopy_to_host(down, len, NULL, 0);
    EXPECT(HOSTCOPY_ERROR_NULL_ARGUMENT, hostcopy_stager_run(stager, &copy));
    copy = hostcopy_to_host(NULL, len, device, 0);
    EXPECT(HOSTCOPY_ERROR_NULL_ARGUMENT, hostcopy_stager_run(stager, &copy));
    copy = hostcopy_to_host(down, len, device, 0);
    copy.host_offset = 1;
    EXPECT(HOSTCOPY_ERROR_INVALID_ARGUMENT, hostcopy_stager_run(stager, &copy));
    copy = hostcopy_to_host((void *)(uintptr_t)(UINTPTR_MAX - 15), 64, device, 0);
    EXPECT(HOSTCOPY_ERROR_INVALID_ARGUMENT, hostcopy_stager_run(stager, &copy));
    copy = hostcopy_to_host(down, len, device, 8 * MIB - len + 1); /* one byte past the end */
    EXPECT(HOSTCOPY_ERROR_OUT_OF_BOUNDS, hostcopy_stager_run(stager, &copy));
    copy = hostcopy_to_device(device, SIZE_MAX - 4, up, 16); /* offset + len wraps */
    EXPECT(HOSTCOPY_ERROR_OUT_OF_BOUNDS, hostcopy_stager_run(stager, &copy));
    copy = hostcopy_to_host(down, len, device, 0);
    copy.block_count = 2; /* blocks NULL */
    EXPECT(HOSTCOPY_ERROR_NULL_ARGUMENT, hostcopy_stager_run(stager, &copy));

    hostcopy_device_buffer_free(device);
    free(up);
    free(down);
}

/* Scattered blocks both ways, into and out of a host buffer. */
static void batches(hostcopy_stager *stager) {
    const size_t block = 64 * 1024;
    const size_t len = 64 * block;
    unsigned char *source = (unsigned char *)malloc(len);
    hostcopy_device_buffer *device = NULL;
    hostcopy_host_buffer *pool = NULL;
    hostcopy_block blocks[3];
    hostcopy_copy copy;
    unsigned char *bytes;
    size_t i;

    fill(source, len, 2);
    OK(hostcopy_device_buffer_new(stager, len, &device));
    copy = hostcopy_to_device(device, 0, source, len);
    OK(hostcopy_stager_run(stager, &copy));
    OK(hostcopy_host_buffer_new(8 * block, &pool));
    bytes = (unsigned char *)hostcopy_host_buffer_data(pool);
    /* Device blocks 5, 40 and 17 to pool slots 0, 1 and 2. */
    blocks[0].device_offset = 5 * block;
    blocks[0].host_offset = 0;
    blocks[0].len = block;
    blocks[1].device_offset = 40 * block;
    blocks[1].host_offset = block;
    blocks[1].len = block;
    blocks[2].device_offset = 17 * block;
    blocks[2].host_offset = 2 * block;
    blocks[2].len = block - 100;
    copy = hostcopy_to_host(NULL, 0, device, 0);
    copy.host = NULL;
    copy.host_buffer = pool;
    copy.host_len = 8 * block;
    copy.blocks = blocks;
    copy.block_count = 3;
    OK(hostcopy_stager_run(stager, &copy));
    CHECK(memcmp(bytes, source + 5 * block, block) == 0);
    CHECK(memcmp(bytes + block, source + 40 * block, block) == 0);
    CHECK(memcmp(bytes + 2 * block, source + 17 * block, block - 100) == 0);
    {
        size_t nonzero = 0; /* the rest of the pool untouched */
        for (i = 2 * block + block - 100; i < 8 * block; i++) nonzero += bytes[i] != 0;
        CHECK(nonzero == 0);
    }
    /* Back, into device blocks 60, 61 and 62. */
    for (i = 0; i < 3; i++) blocks[i].device_offset = (60 + i) * block;
    copy.direction = HOSTCOPY_TO_DEVICE;
    OK(hostcopy_stager_run(stager, &copy));
    {
        unsigned char *check = (unsigned char *)calloc(3 * block, 1);
        hostcopy_copy back = hostcopy_to_host(check, 3 * block - 100, device, 60 * block);
        OK(hostcopy_stager_run(stager, &back));
        CHECK(memcmp(check, bytes, 3 * block - 100) == 0);
        free(check);
    }

    /* Refusals of a batch. */
    blocks[1].device_offset = blocks[0].device_offset; /* two blocks write the same device bytes */
    EXPECT(HOSTCOPY_ERROR_BLOCKS_OVERLAP, hostcopy_stager_run(stager, &copy));
    blocks[1].device_offset = 61 * block;
    blocks[2].host_offset = 8 * block; /* past the host side */
    EXPECT(HOSTCOPY_ERROR_OUT_OF_BOUNDS, hostcopy_stager_run(stager, &copy));
    blocks[2].host_offset = 2 * block;
    blocks[2].device_offset = len; /* past the device buffer */
    EXPECT(HOSTCOPY_ERROR_OUT_OF_BOUNDS, hostcopy_stager_run(stager, &copy));
    /* A host buffer's range is checked too. */
    copy = hostcopy_to_host(NULL, 0, device, 0);
    copy.host = NULL;
    copy.host_buffer = pool;
    copy.host_offset = block;
    copy.host_len = 8 * block;
    EXPECT(HOSTCOPY_ERROR_OUT_OF_BOUNDS, hostcopy_stager_run(stager, &copy));
    copy.host = source; /* both sides given */
    copy.host_offset = 0;
    EXPECT(HOSTCOPY_ERROR_INVALID_ARGUMENT, hostcopy_stager_run(stager, &copy));

    hostcopy_host_buffer_free(pool);
    hostcopy_device_buffer_free(device);
    free(source);
}

static void host_buffers(hostcopy_stager *stager) {
    hostcopy_host_buffer *buffer = NULL, *empty = NULL;
    hostcopy_registration registration;
    unsigned char *bytes;
    size_t i, nonzero = 0;

    EXPECT(HOSTCOPY_ERROR_NULL_ARGUMENT, hostcopy_host_buffer_new(MIB, NULL));
    OK(hostcopy_host_buffer_new(0, &empty));
    CHECK(hostcopy_host_buffer_data(empty) == NULL && hostcopy_host_buffer_len(empty) == 0);
    OK(hostcopy_host_buffer_register(empty, stager, HOSTCOPY_REGISTER_NOW, &registration));
    CHECK(registration.len == 0 && registration.finished == 1 && registration.refused == 0);
    hostcopy_host_buffer_free(empty);
    CHECK(hostcopy_host_buffer_data(NULL) == NULL && hostcopy_host_buffer_len(NULL) == 0);

    OK(hostcopy_host_buffer_new(4 * MIB, &buffer));
    bytes = (unsigned char *)hostcopy_host_buffer_data(buffer);
    CHECK(bytes != NULL && hostcopy_host_buffer_len(buffer) == 4 * MIB);
    for (i = 0; i < 4 * MIB; i++) nonzero += bytes[i] != 0;
    CHECK(nonzero == 0);

    OK(hostcopy_host_buffer_registration(buffer, &registration));
    CHECK(registration.registered == 0 && registration.len == 4 * MIB);
    CHECK(registration.finished == 1 && registration.refused == 0);
    EXPECT(HOSTCOPY_ERROR_NULL_ARGUMENT, hostcopy_host_buffer_registration(buffer, NULL));
    EXPECT(HOSTCOPY_ERROR_NULL_ARGUMENT, hostcopy_host_buffer_registration(NULL, &registration));
    EXPECT(HOSTCOPY_ERROR_INVALID_ARGUMENT,
           hostcopy_host_buffer_register(buffer, stager, 9, &registration));
    EXPECT(HOSTCOPY_ERROR_NULL_ARGUMENT,
           hostcopy_host_buffer_register(buffer, NULL, HOSTCOPY_REGISTER_NOW, NULL));
    EXPECT(HOSTCOPY_ERROR_NULL_ARGUMENT,
           hostcopy_host_buffer_register(NULL, stager, HOSTCOPY_REGISTER_NOW, NULL));
    OK(hostcopy_host_buffer_register(buffer, stager, HOSTCOPY_REGISTER_BACKGROUND, NULL));
    OK(hostcopy_host_buffer_wait_registered(buffer, &registration));
    CHECK(registration.finished == 1 && registration.len == 4 * MIB);
    CHECK(registration.registered == 4 * MIB && registration.refused == 0);
    EXPECT(HOSTCOPY_ERROR_NULL_ARGUMENT, hostcopy_host_buffer_wait_registered(NULL, &registration));
    hostcopy_host_buffer_free(buffer);

    OK(hostcopy_host_buffer_new(2 * MIB, &buffer));
    OK(hostcopy_host_buffer_register(buffer, stager, HOSTCOPY_REGISTER_NOW, &registration));
    CHECK(registration.registered == 2 * MIB && registration.finished == 1);
    hostcopy_host_buffer_free(buffer);
    OK(hostcopy_host_buffer_new(2 * MIB, &buffer));
    OK(hostcopy_host_buffer_register(buffer, stager, HOSTCOPY_REGISTER_NEVER, &registration));
    CHECK(registration.registered == 0 && registration.finished == 1);
    hostcopy_host_buffer_free(buffer);
    hostcopy_host_buffer_free(NULL);
}

struct waiter {
    hostcopy_transfer *transfer;
    hostcopy_status status;
};

static void *wait_on_thread(void *arg) {
    struct waiter *waiter = (struct waiter *)arg;
    waiter->status = hostcopy_transfer_wait(waiter->transfer);
    return NULL;
}

static void *free_on_thread(void *stager) {
    hostcopy_stager_free((hostcopy_stager *)stager);
    return NULL;
}

/* Started transfers: a handle to query, wait for (on two threads) and
   free, and every handle it uses freed while it is in flight. */
static void started_transfers(int device_ordinal) {
    const size_t len = 5 * MIB + 3;
    hostcopy_stager_options options = test_options();
    hostcopy_stager *stager = NULL;
    hostcopy_device_buffer *device = NULL, *wrapped = NULL;
    hostcopy_host_buffer *pool = NULL;
    hostcopy_transfer *transfer = NULL, *second = NULL;
    /* A destination is initialized memory (the header's rule): calloc. */
    unsigned char *source = (unsigned char *)malloc(len), *down = (unsigned char *)calloc(len, 1);
    hostcopy_copy copy;
    hostcopy_registration registration;
    uint64_t ptr = 0;
    int finished = -1;
    pthread_t thread, freeing;
    struct waiter waiter;

    fill(source, len, 3);
    memset(down, 0, len);
    OK(hostcopy_stager_new(device_ordinal, &options, &stager));
    OK(hostcopy_device_buffer_new(stager, len, &device));
    copy = hostcopy_to_device(device, 0, source, len);
    OK(hostcopy_stager_start(stager, &copy, &transfer));
    OK(hostcopy_transfer_wait(transfer));
    OK(hostcopy_transfer_wait(transfer)); /* idempotent */
    OK(hostcopy_transfer_query(transfer, &finished));
    CHECK(finished == 1);
    hostcopy_transfer_free(transfer);

    /* The device memory wrapped, the wrapper and the stager freed while
       a transfer reads it: the transfer finishes, and the memory is
       released only once the transfer is freed. */
    OK(hostcopy_device_buffer_get(device, &ptr, NULL));
    released = 0;
    OK(hostcopy_device_buffer_wrap(stager, ptr, len, release_counter, &released, &wrapped));
    hostcopy_sim_hold(device_ordinal);
    copy = hostcopy_to_host(down, len, wrapped, 0);
    OK(hostcopy_stager_start(stager, &copy, &transfer));
    OK(hostcopy_transfer_query(transfer, &finished));
    CHECK(finished == 0);
    hostcopy_device_buffer_free(wrapped);
    CHECK(released == 0);
    /* The stager's free waits for its copier to finish the host side of
       the transfers in flight: on another thread, while this one lets
       the device run. */
    CHECK(pthread_create(&freeing, NULL, free_on_thread, stager) == 0);
    waiter.transfer = transfer;
    waiter.status = -1;
    CHECK(pthread_create(&thread, NULL, wait_on_thread, &waiter) == 0);
    hostcopy_sim_release(device_ordinal);
    OK(hostcopy_transfer_wait(transfer));
    CHECK(pthread_join(thread, NULL) == 0);
    CHECK(pthread_join(freeing, NULL) == 0);
    CHECK(waiter.status == HOSTCOPY_OK);
    CHECK(memcmp(source, down, len) == 0);
    CHECK(released == 0);
    hostcopy_transfer_free(transfer);
    CHECK(released == 1);

    /* A host buffer freed while transfers write it, registering one that
       a transfer holds, and two transfers in flight writing the same
       bytes of one (the second refused) or other bytes (both run). */
    OK(hostcopy_stager_new(device_ordinal, &options, &stager));
    OK(hostcopy_host_buffer_new(len, &pool));
    copy = hostcopy_to_host(NULL, 0, device, 0);
    copy.host = NULL;
    copy.host_buffer = pool;
    copy.host_len = len / 2;
    hostcopy_sim_hold(device_ordinal);
    OK(hostcopy_stager_start(stager, &copy, &transfer));
    EXPECT(HOSTCOPY_ERROR_BUSY,
           hostcopy_host_buffer_register(pool, stager, HOSTCOPY_REGISTER_NOW, &registration));
    EXPECT(HOSTCOPY_ERROR_BUSY, hostcopy_stager_start(stager, &copy, &second));
    copy.host_offset = len / 2;
    OK(hostcopy_stager_start(stager, &copy, &second));
    hostcopy_host_buffer_free(pool);
    hostcopy_sim_release(device_ordinal);
    OK(hostcopy_transfer_wait(transfer));
    hostcopy_transfer_free(transfer);
    hostcopy_transfer_free(second); /* freed without a wait: waits first */
    hostcopy_transfer_free(NULL);

    /* Refusals of the started front. */
    EXPECT(HOSTCOPY_ERROR_NULL_ARGUMENT, hostcopy_stager_start(stager, &copy, NULL));
    copy = hostcopy_to_host(down, len, device, 1);
    EXPECT(HOSTCOPY_ERROR_OUT_OF_BOUNDS, hostcopy_stager_start(stager, &copy, &transfer));
    EXPECT(HOSTCOPY_ERROR_NULL_ARGUMENT, hostcopy_transfer_wait(NULL));
    EXPECT(HOSTCOPY_ERROR_NULL_ARGUMENT, hostcopy_transfer_query(NULL, &finished));
    copy = hostcopy_to_host(down, len, device, 0);
    OK(hostcopy_stager_start(stager, &copy, &transfer));
    EXPECT(HOSTCOPY_ERROR_NULL_ARGUMENT, hostcopy_transfer_query(transfer, NULL));
    OK(hostcopy_transfer_wait(transfer));
    hostcopy_transfer_free(transfer);

    hostcopy_device_buffer_free(device);
    hostcopy_stager_free(stager);
    free(source);
    free(down);
}

/* Errors of the driver: reported with the driver's code, never a hang;
   the stager works on after one that is not sticky. */
static void driver_errors(int ordinal) {
    const size_t len = 5 * MIB;
    hostcopy_stager_options options = test_options();
    hostcopy_stager *stager = NULL;
    hostcopy_device_buffer *device = NULL;
    hostcopy_transfer *transfer = NULL;
    /* A destination is initialized memory (the header's rule): calloc. */
    unsigned char *source = (unsigned char *)malloc(len), *down = (unsigned char *)calloc(len, 1);
    hostcopy_copy copy;

    fill(source, len, 4);
    OK(hostcopy_stager_new(ordinal, &options, &stager));
    OK(hostcopy_device_buffer_new(stager, len, &device));
    copy = hostcopy_to_device(device, 0, source, len);
    OK(hostcopy_stager_run(stager, &copy));

    EXPECT(HOSTCOPY_ERROR_NULL_ARGUMENT, hostcopy_sim_fail_call(ordinal, NULL, 1, 1));
    OK(hostcopy_sim_fail_call(ordinal, "cuEventRecord", 3, LAUNCH_FAILED));
    copy = hostcopy_to_host(down, len, device, 0);
    EXPECT(HOSTCOPY_ERROR_DRIVER, hostcopy_stager_run(stager, &copy));
    CHECK(hostcopy_last_error_driver_code() == LAUNCH_FAILED);
    CHECK(last_message_has("719") || last_message_has("LAUNCH"));
    memset(down, 0, len);
    OK(hostcopy_stager_run(stager, &copy));
    CHECK(memcmp(source, down, len) == 0);

    OK(hostcopy_sim_fail_call(ordinal, "cuEventSynchronize", 1, OUT_OF_MEMORY));
    OK(hostcopy_stager_start(stager, &copy, &transfer));
    EXPECT(HOSTCOPY_ERROR_DRIVER, hostcopy_transfer_wait(transfer));
    CHECK(hostcopy_last_error_driver_code() == OUT_OF_MEMORY);
    EXPECT(HOSTCOPY_ERROR_DRIVER, hostcopy_transfer_wait(transfer)); /* the same result */
    hostcopy_transfer_free(transfer);
    transfer = NULL;
    memset(down, 0, len);
    OK(hostcopy_stager_run(stager, &copy)); /* not sticky: it works on */
    CHECK(memcmp(source, down, len) == 0);

    /* A sticky error: every later transfer is refused with it, nothing
       hangs, and everything can still be freed. */
    OK(hostcopy_stager_start(stager, &copy, &transfer));
    OK(hostcopy_sim_fail_context(ordinal, LAUNCH_FAILED));
    {
        hostcopy_status status = hostcopy_transfer_wait(transfer);
        CHECK(status == HOSTCOPY_OK || status == HOSTCOPY_ERROR_DRIVER);
    }
    EXPECT(HOSTCOPY_ERROR_DRIVER, hostcopy_stager_run(stager, &copy));
    CHECK(hostcopy_last_error_driver_code() == LAUNCH_FAILED);
    hostcopy_transfer_free(transfer);
    hostcopy_device_buffer_free(device);
    hostcopy_stager_free(stager);
    free(source);
    free(down);
}

struct runner {
    hostcopy_stager *stager;
    hostcopy_device_buffer *device;
    size_t offset;
    unsigned seed;
    int ok;
};

static void *round_trip_on_thread(void *arg) {
    struct runner *runner = (struct runner *)arg;
    const size_t len = 2 * MIB + 5;
    unsigned char *up = (unsigned char *)malloc(len), *down = (unsigned char *)calloc(len, 1);
    hostcopy_copy copy;
    fill(up, len, runner->seed);
    copy = hostcopy_to_device(runner->device, runner->offset, up, len);
    runner->ok = hostcopy_stager_run(runner->stager, &copy) == HOSTCOPY_OK;
    copy = hostcopy_to_host(down, len, runner->device, runner->offset);
    runner->ok = runner->ok && hostcopy_stager_run(runner->stager, &copy) == HOSTCOPY_OK;
    runner->ok = runner->ok && memcmp(up, down, len) == 0;
    free(up);
    free(down);
    return NULL;
}

/* One stager, two threads transferring at once (its calls take turns). */
static void concurrent_runs(hostcopy_stager *stager) {
    hostcopy_device_buffer *device = NULL;
    struct runner runners[2];
    pthread_t threads[2];
    int i;
    OK(hostcopy_device_buffer_new(stager, 8 * MIB, &device));
    for (i = 0; i < 2; i++) {
        runners[i].stager = stager;
        runners[i].device = device;
        runners[i].offset = (size_t)i * 4 * MIB;
        runners[i].seed = 10 + (unsigned)i;
        runners[i].ok = 0;
        CHECK(pthread_create(&threads[i], NULL, round_trip_on_thread, &runners[i]) == 0);
    }
    for (i = 0; i < 2; i++) {
        CHECK(pthread_join(threads[i], NULL) == 0);
        CHECK(runners[i].ok);
    }
    hostcopy_device_buffer_free(device);
}

int main(void) {
    int device, other, faulty;
    hostcopy_stager_options options = test_options();
    hostcopy_stager *stager = NULL, *other_stager = NULL;

    hostcopy_sim_install();
    device = hostcopy_sim_new_device();
    other = hostcopy_sim_new_device();
    faulty = hostcopy_sim_new_device();
    CHECK(device >= 0 && other > device && faulty > other);

    errors_and_names();
    stagers(device);
    OK(hostcopy_stager_new(device, &options, &stager));
    OK(hostcopy_stager_new(other, &options, &other_stager));
    device_buffers(stager, other_stager);
    {
        /* Device memory of another device than the stager's. */
        hostcopy_device_buffer *elsewhere = NULL;
        char host[64];
        hostcopy_copy copy;
        OK(hostcopy_device_buffer_new(other_stager, 64, &elsewhere));
        copy = hostcopy_to_host(host, sizeof host, elsewhere, 0);
        EXPECT(HOSTCOPY_ERROR_CONTEXT_MISMATCH, hostcopy_stager_run(stager, &copy));
        hostcopy_device_buffer_free(elsewhere);
    }
    blocking_transfers(stager);
    batches(stager);
    host_buffers(stager);
    concurrent_runs(stager);
    hostcopy_stager_free(stager);
    hostcopy_stager_free(other_stager);
    started_transfers(device);
    driver_errors(faulty);

    CHECK(hostcopy_sim_violations(device) == 0);
    CHECK(hostcopy_sim_violations(other) == 0);
    printf("stager_sim: %d checks, %d failed\n", checks, failures);
    return failures == 0 ? 0 : 1;
}
