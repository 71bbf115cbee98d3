/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * stager_copy: 1 GiB each way between device memory and pageable host
 * memory (malloc'd, touched once) through hostcopy_stager.h, byte-checked
 * at every run, with the median GB/s of RUNS runs a direction.
 *
 * Built with -DHOSTCOPY_RUST_BASELINE against a library built with
 * feature `bench` (the GPU bundle's build), it also runs every transfer
 * through the Rust API on the same stager, device buffer and host memory
 * (`stager.run(to_host(..))`, hostcopy_bench_rust_run), interleaved run
 * by run with the C API's, and prints the ratio C / Rust: what the C
 * layer costs (of the medians, and the median of each run's ratio, the
 * two paths taken back to back, with its quartiles). The C column times
 * the whole hostcopy_stager_run call.
 *
 * usage: stager_copy [MiB [RUNS [DEVICE]]]   (defaults 1024, 5, 0)
 *
 * Build (x86_64 Linux, the dist archive unpacked in $HOSTCOPY):
 *     cc -O2 stager_copy.c -I$HOSTCOPY/include $HOSTCOPY/lib/libhostcopy_stager.a \
 *         -lpthread -ldl -lm -lrt -lutil -lgcc_s -o stager_copy
 * Exit status 0, or 1 on an error or wrong bytes. Where there is no GPU
 * (no driver, or no device) it prints "stager_copy: skipped: ..." and
 * exits 0 (1 with HOSTCOPY_REQUIRE_GPU=1, as the GPU bundle runs it).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hostcopy_stager.h"
#ifdef HOSTCOPY_EXAMPLE_ON_SIMULATOR
/* driver/capi/ci.sh runs the program against the simulated driver. */
#include "hostcopy_sim.h"
#endif

#ifdef HOSTCOPY_RUST_BASELINE
/* The library's feature `bench` (driver/capi/src/bench.rs). */
hostcopy_status hostcopy_bench_rust_run(hostcopy_stager *stager, hostcopy_device_buffer *device,
                                        void *host, size_t len, int32_t direction,
                                        double *seconds);
#define PATHS 2
#else
#define PATHS 1
#endif

#define MAX_RUNS 64
/* CUDA_ERROR_STUB_LIBRARY, CUDA_ERROR_NO_DEVICE, CUDA_ERROR_INVALID_DEVICE. */
#define NO_GPU(code) ((code) == 34 || (code) == 100 || (code) == 101)

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void fail(const char *what, hostcopy_status status) {
    char message[512];
    hostcopy_last_error_message(message, sizeof message);
    fprintf(stderr, "stager_copy: %s: %s: %s\n", what, hostcopy_status_name(status), message);
    exit(1);
}

/* Each 8-byte word a hash of its index and the run's seed. */
static void fill(unsigned char *bytes, size_t len, uint64_t seed) {
    size_t i;
    for (i = 0; i + 8 <= len; i += 8) {
        uint64_t x = ((uint64_t)i ^ (seed << 40)) * 0x9E3779B97F4A7C15ull;
        x ^= x >> 29;
        memcpy(bytes + i, &x, 8);
    }
    for (; i < len; i++) bytes[i] = (unsigned char)(i ^ seed);
}

static int compare(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *values, int n) {
    qsort(values, (size_t)n, sizeof *values, compare);
    return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? (size_t)strtoull(argv[1], NULL, 10) : 1024;
    int runs = argc > 2 ? atoi(argv[2]) : 5;
    int ordinal = argc > 3 ? atoi(argv[3]) : 0;
    size_t len = mib << 20;
    /* seconds[path][direction][run]; path 0 the C API, 1 the Rust API. */
    static double seconds[2][2][MAX_RUNS];
    const char *paths[2] = {"C API", "Rust API"};
    hostcopy_stager *stager = NULL;
    hostcopy_device_buffer *device = NULL;
    hostcopy_stager_options options;
    size_t workers = 0;
    unsigned char *source, *destination;
    hostcopy_status status;
    int run, path, direction;

    if (runs < 1 || runs > MAX_RUNS || len == 0) {
        fprintf(stderr, "usage: stager_copy [MiB [RUNS (1..%d) [DEVICE]]]\n", MAX_RUNS);
        return 2;
    }
#ifdef HOSTCOPY_EXAMPLE_ON_SIMULATOR
    hostcopy_sim_install();
    ordinal = hostcopy_sim_new_device();
#endif
    status = hostcopy_stager_new(ordinal, NULL, &stager);
    if (status == HOSTCOPY_ERROR_DRIVER && NO_GPU(hostcopy_last_error_driver_code())) {
        char message[512];
        const char *require = getenv("HOSTCOPY_REQUIRE_GPU");
        hostcopy_last_error_message(message, sizeof message);
        printf("stager_copy: skipped: no GPU here (%s)\n", message);
        return require != NULL && strcmp(require, "1") == 0 ? 1 : 0;
    }
    if (status != HOSTCOPY_OK) fail("hostcopy_stager_new", status);
    if ((status = hostcopy_stager_get_options(stager, &options, &workers)) != HOSTCOPY_OK)
        fail("hostcopy_stager_get_options", status);
    if ((status = hostcopy_device_buffer_new(stager, len, &device)) != HOSTCOPY_OK)
        fail("hostcopy_device_buffer_new", status);
    source = (unsigned char *)malloc(len);
    destination = (unsigned char *)malloc(len);
    if (source == NULL || destination == NULL) {
        fprintf(stderr, "stager_copy: malloc of %zu bytes failed\n", len);
        return 1;
    }
    memset(destination, 0, len); /* pages present, as a reused buffer's are */

    printf("stager_copy: %zu MiB each way, device %d, %d runs, median GB/s; chunk %zu MiB, "
           "%zu buffers, %zu workers\n",
           mib, ordinal, runs, options.chunk >> 20, options.buffers, workers);
    for (run = 0; run < runs; run++) {
        for (path = 0; path < PATHS; path++) {
            /* Alternate which path goes first, so neither always follows
               the other's memory traffic. */
            int which = (run % 2) ? PATHS - 1 - path : path;
            uint64_t seed = (uint64_t)(run * 2 + which + 1);
            fill(source, len, seed);
            for (direction = HOSTCOPY_TO_DEVICE; direction >= HOSTCOPY_TO_HOST; direction--) {
                void *host = direction == HOSTCOPY_TO_DEVICE ? (void *)source : (void *)destination;
                double t;
                if (direction == HOSTCOPY_TO_HOST) memset(destination, 0, len);
                if (which == 0) {
                    hostcopy_copy copy = direction == HOSTCOPY_TO_DEVICE
                                             ? hostcopy_to_device(device, 0, host, len)
                                             : hostcopy_to_host(host, len, device, 0);
                    double start = now();
                    status = hostcopy_stager_run(stager, &copy);
                    t = now() - start;
                    if (status != HOSTCOPY_OK) fail("hostcopy_stager_run", status);
                } else {
#ifdef HOSTCOPY_RUST_BASELINE
                    status = hostcopy_bench_rust_run(stager, device, host, len, direction, &t);
                    if (status != HOSTCOPY_OK) fail("hostcopy_bench_rust_run", status);
#else
                    t = 0;
#endif
                }
                seconds[which][direction][run] = t;
            }
            /* Down what went up: every byte, every run, both paths. */
            if (memcmp(source, destination, len) != 0) {
                fprintf(stderr, "stager_copy: run %d, %s: wrong bytes\n", run, paths[which]);
                return 1;
            }
        }
    }

    printf("| direction | %s GB/s |%s\n", paths[0],
           PATHS > 1 ? " Rust API GB/s | C / Rust | C / Rust, run by run: median (quartiles) |" : "");
    for (direction = HOSTCOPY_TO_HOST; direction <= HOSTCOPY_TO_DEVICE; direction++) {
        double gbps[2];
        /* Each run's C speed over its Rust speed, the two taken back to
           back: what drifts across runs (the host's memory traffic, the
           link's clocks) cancels in each pair. */
        static double paired[MAX_RUNS];
        for (run = 0; run < runs; run++)
            paired[run] = PATHS > 1 ? seconds[1][direction][run] / seconds[0][direction][run] : 1;
        for (path = 0; path < PATHS; path++)
            gbps[path] = (double)len / median(seconds[path][direction], runs) / 1e9;
        printf("| %s | %.2f |", direction == HOSTCOPY_TO_HOST ? "to host" : "to device", gbps[0]);
        if (PATHS > 1) {
            double middle = median(paired, runs); /* sorts `paired` */
            printf(" %.2f | %.3f | %.3f (%.3f to %.3f) |", gbps[1], gbps[0] / gbps[1], middle,
                   paired[runs / 4], paired[(3 * runs) / 4]);
        }
        printf("\n");
    }
    printf("stager_copy: bytes checked both ways at every run: ok\n");
    hostcopy_device_buffer_free(device);
    hostcopy_stager_free(stager);
    free(source);
    free(destination);
    return 0;
}
