// Populate rates of anonymous memory: mmap, MADV_HUGEPAGE, then
// MADV_POPULATE_WRITE split over N threads; first and again; with the
// kernel's THP fault counters around each.
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
struct part { char *p; size_t n; int how; };
static void *run(void *a) {
    struct part *w = a;
    if (w->how == 0) madvise(w->p, w->n, MADV_POPULATE_WRITE);
    else for (size_t i = 0; i < w->n; i += 4096) w->p[i] = 0;
    return 0;
}
static long vmstat(const char *key) {
    FILE *f = fopen("/proc/vmstat", "r"); char k[128]; long v, r = -1;
    while (fscanf(f, "%127s %ld", k, &v) == 2) if (!strcmp(k, key)) r = v;
    fclose(f); return r;
}
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static void one(size_t gib, int threads, int huge, int how, const char *label) {
    size_t n = gib << 30;
    long a0 = vmstat("thp_fault_alloc"), f0 = vmstat("thp_fault_fallback");
    double t0 = now();
    char *p = mmap(0, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) { perror("mmap"); exit(1); }
    if (huge) madvise(p, n, MADV_HUGEPAGE);
    pthread_t t[64]; struct part w[64];
    size_t part = ((n / threads) + (2 << 20) - 1) & ~((size_t)(2 << 20) - 1);
    int k = 0;
    for (size_t off = 0; off < n; off += part, k++) {
        w[k].p = p + off; w[k].n = off + part > n ? n - off : part; w[k].how = how;
        pthread_create(&t[k], 0, run, &w[k]);
    }
    for (int i = 0; i < k; i++) pthread_join(t[i], 0);
    double s = now() - t0;
    printf("%3zu GiB %2d threads %-14s %-8s %-6s %7.3f s %6.1f GB/s  thp alloc +%ld fallback +%ld\n",
           gib, threads, huge ? "MADV_HUGEPAGE" : "4 KiB pages", how ? "touch" : "populate", label, s, n / s / 1e9,
           vmstat("thp_fault_alloc") - a0, vmstat("thp_fault_fallback") - f0);
    fflush(stdout);
    double u0 = now();
    munmap(p, n);
    (void)u0;
}
int main(int argc, char **argv) {
    size_t sizes[] = {1, 4, 16, 64};
    int nsizes = argc > 1 ? atoi(argv[1]) : 4;
    for (int s = 0; s < nsizes; s++) {
        size_t g = sizes[s];
        one(g, 16, 1, 0, "first");
        one(g, 16, 1, 0, "again");
        if (g <= 16) {
            one(g, 8, 1, 0, "again");
            one(g, 12, 1, 0, "again");
            one(g, 16, 1, 1, "again");
            one(g, 16, 0, 0, "again");
        }
    }
    return 0;
}
