/*
 * A C consumer of hostcopy-core: includes the header, calls hostcopy_fn the
 * way the CUDA driver does (through a CUhostFn-typed pointer), and checks
 * each line of the contract. Linked into the Rust tests by build.rs and into
 * a standalone program (main.c, or freestanding.c where there is no OS) by
 * `cargo xtask abi`. Needs no C library: the compiler's memset and memcpy
 * calls resolve to the static library's.
 */
#include <stdint.h>

#include "hostcopy.h"

#include "consumer.h"
#include "layout_report.h"

/*
 * How the caller (the CUDA driver, here this file) calls a host function:
 * cuda.h has `typedef void (CUDA_CB *CUhostFn)(void *userData);`. The
 * self-test of `cargo xtask abi` gets it wrong on purpose on 32-bit x86 (a
 * cdecl caller of the stdcall function on Windows, a stdcall caller of the
 * cdecl one on Linux), which must fail at run time (see stack_is_balanced);
 * it compiles with -Wno-incompatible-pointer-types, as a caller that casts
 * would.
 */
#ifndef HOSTCOPY_CALLER_CB
#define HOSTCOPY_CALLER_CB HOSTCOPY_CB
#endif
typedef void(HOSTCOPY_CALLER_CB *host_fn_t)(void *user_data);

#define memset __builtin_memset
#define memcpy __builtin_memcpy

#define GUARD 32
#define GUARD_BYTE 0xA5
#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond))                                                                               \
            return __LINE__;                                                                       \
    } while (0)

static unsigned char pattern_byte(size_t i) { return (unsigned char)(i * 7u + i / 251u); }

static int guards_intact(const unsigned char *buffer, size_t len) {
    for (size_t i = 0; i < GUARD; i++)
        if (buffer[i] != GUARD_BYTE || buffer[GUARD + len + i] != GUARD_BYTE)
            return 0;
    return 1;
}

static int bytes_equal_pattern(const unsigned char *p, size_t len, size_t first) {
    for (size_t i = 0; i < len; i++)
        if (p[i] != pattern_byte(first + i))
            return 0;
    return 1;
}

size_t hostcopy_c_layout(uint32_t *out, size_t capacity) {
    for (size_t i = 0; i < HOSTCOPY_LAYOUT_FIELDS && i < capacity; i++)
        out[i] = hostcopy_c_layout_report.values[i];
    return HOSTCOPY_LAYOUT_FIELDS;
}

/*
 * Calls host_fn many times, reading the stack pointer at the same point of
 * each iteration: on 32-bit x86, where caller and callee disagree on who
 * pops the argument (cdecl against stdcall), it moves by 4 bytes a call.
 * Elsewhere arguments travel in registers, and this only calls. On a
 * mismatch the stack pointer is put back where this function expects it, so
 * that it returns and the check reports its line instead of crashing.
 */
static int stack_is_balanced(host_fn_t host_fn, void *record) {
    uintptr_t first = 0;
    for (int i = 0; i < 64; i++) {
        uintptr_t sp = 0;
#if defined(__i386__)
        __asm__ volatile("movl %%esp, %0" : "=r"(sp));
#endif
        if (i == 0) {
            first = sp;
        } else if (sp != first) {
#if defined(__i386__)
            __asm__ volatile("movl %0, %%esp" : : "r"(first) : "memory");
#endif
            return 0;
        }
        host_fn(record);
    }
    return 1;
}

int hostcopy_c_contract(void) {
    static unsigned char src[4096 + 64];
    static unsigned char dst[GUARD + 4096 + 64 + GUARD];
    /* Opaque, as the driver holds it: the compiler cannot call hostcopy_fn directly. */
    host_fn_t volatile host_fn = hostcopy_fn;
    size_t rejected = hostcopy_rejected();

    for (size_t i = 0; i < sizeof src; i++)
        src[i] = pattern_byte(i);

    /* First, the calling convention: the stack is where the caller left it. */
    {
        struct hostcopy_args args;
        args.dst = (uintptr_t)(dst + GUARD);
        args.src = (uintptr_t)src;
        args.nbytes = 64;
        CHECK(stack_is_balanced(host_fn, &args));
        CHECK(bytes_equal_pattern(dst + GUARD, 64, 0));
    }

    /* Every length to 300 and a few larger ones, at mixed alignments. */
    for (size_t len = 0; len <= 4096; len += (len < 300 ? 1 : 509)) {
        size_t shift = len % 8;
        struct hostcopy_args args;
        memset(dst, GUARD_BYTE, sizeof dst);
        args.dst = (uintptr_t)(dst + GUARD);
        args.src = (uintptr_t)(src + shift);
        args.nbytes = len;
        host_fn(&args);
        CHECK(bytes_equal_pattern(dst + GUARD, len, shift));
        CHECK(guards_intact(dst, len));
    }
    CHECK(hostcopy_rejected() == rejected);

    /* A record packed at an odd address in a byte buffer, passed as an integer. */
    {
        unsigned char packed[sizeof(struct hostcopy_args) + 3];
        struct hostcopy_args args;
        uintptr_t address;
        memset(dst, GUARD_BYTE, sizeof dst);
        args.dst = (uintptr_t)(dst + GUARD);
        args.src = (uintptr_t)src;
        args.nbytes = 100;
        memcpy(packed + 3, &args, sizeof args);
        address = (uintptr_t)(packed + 3);
        host_fn((void *)address);
        CHECK(bytes_equal_pattern(dst + GUARD, 100, 0));
        CHECK(guards_intact(dst, 100));
    }

    /* Zero bytes: nothing touched, not rejected, even with null ends. */
    {
        struct hostcopy_args args = {0, 0, 0};
        host_fn(&args);
        CHECK(hostcopy_rejected() == rejected);
    }

    /* Null user_data, null ends and wrapping ranges: rejected and counted, nothing touched. */
    {
        struct hostcopy_args bad[4];
        memset(dst, GUARD_BYTE, sizeof dst);
        bad[0].dst = 0;
        bad[0].src = (uintptr_t)src;
        bad[0].nbytes = 16;
        bad[1].dst = (uintptr_t)(dst + GUARD);
        bad[1].src = 0;
        bad[1].nbytes = 16;
        bad[2].dst = UINTPTR_MAX - 4;
        bad[2].src = (uintptr_t)src;
        bad[2].nbytes = 16;
        bad[3].dst = (uintptr_t)(dst + GUARD);
        bad[3].src = UINTPTR_MAX - 4;
        bad[3].nbytes = 16;
        host_fn(NULL);
        for (int i = 0; i < 4; i++)
            host_fn(&bad[i]);
        CHECK(hostcopy_rejected() - rejected == 5);
        for (size_t i = 0; i < sizeof dst; i++)
            CHECK(dst[i] == GUARD_BYTE);
    }

    /* Overlap in both directions: memmove. */
    {
        static unsigned char buffer[1000];
        struct hostcopy_args args;
        for (size_t i = 0; i < sizeof buffer; i++)
            buffer[i] = pattern_byte(i);
        args.dst = (uintptr_t)(buffer + 3);
        args.src = (uintptr_t)buffer;
        args.nbytes = 900;
        host_fn(&args);
        CHECK(bytes_equal_pattern(buffer + 3, 900, 0));

        for (size_t i = 0; i < sizeof buffer; i++)
            buffer[i] = pattern_byte(i);
        args.dst = (uintptr_t)buffer;
        args.src = (uintptr_t)(buffer + 3);
        host_fn(&args);
        CHECK(bytes_equal_pattern(buffer, 900, 3));
    }
    return 0;
}
