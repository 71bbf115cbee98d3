/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * hostcopy.h: the C interface of hostcopy-core.
 *
 * hostcopy_fn is a CUDA host function (CUhostFn) that copies the bytes one
 * record describes, on the driver's host-function thread, in stream order.
 * Hand it to cuLaunchHostFunc or to a graph host node with the address of a
 * struct hostcopy_args as user_data. It never allocates, blocks, calls CUDA
 * or unwinds.
 *
 * Hand-written; `cargo xtask abi` compiles it for every supported target and
 * compares sizeof, _Alignof and offsetof with the Rust definition.
 *
 * Link libhostcopy.a (static) or libhostcopy.so / hostcopy.dll (shared).
 */
#ifndef HOSTCOPY_H
#define HOSTCOPY_H

#include <stddef.h>
#include <stdint.h>

/* Version of the record layout and of the contract of hostcopy_fn. */
#define HOSTCOPY_ABI_VERSION 1

/* Version of the library this header comes with (hostcopy-core's). */
#define HOSTCOPY_VERSION_MAJOR 0
#define HOSTCOPY_VERSION_MINOR 1
#define HOSTCOPY_VERSION_PATCH 0

/*
 * The calling convention of CUDA_CB: __stdcall on Windows (which only
 * matters on 32-bit x86), nothing elsewhere. cuda.h is not needed.
 */
#if defined(CUDA_CB)
#define HOSTCOPY_CB CUDA_CB
#elif defined(_WIN32)
#define HOSTCOPY_CB __stdcall
#else
#define HOSTCOPY_CB
#endif

#ifdef __cplusplus
extern "C" {
#endif

/*
 * One copy: nbytes bytes from src to dst. Three native-width fields in this
 * order, no padding: 24 bytes, alignment 8 on 64-bit targets; 12 bytes,
 * alignment 4 on 32-bit targets. Native endianness.
 *
 * The record must stay alive and unmoved until the host function has run
 * (for a graph node: until the graph and every executable made from it are
 * destroyed).
 */
struct hostcopy_args {
    uintptr_t dst;    /* address of the first destination byte */
    uintptr_t src;    /* address of the first source byte */
    size_t nbytes;    /* number of bytes to copy; 0 copies nothing */
};

/*
 * Copies the bytes that the struct hostcopy_args at user_data describes.
 *
 * - user_data == NULL: returns; counted as rejected.
 * - The record is read unaligned: any address works.
 * - nbytes == 0: returns without touching dst or src.
 * - dst or src NULL with nbytes > 0, addr + nbytes past the end of the
 *   address space, or nbytes > PTRDIFF_MAX: returns without touching
 *   memory; counted as rejected.
 * - Overlapping ranges: as if copied through a temporary (memmove).
 * - Otherwise copies nbytes bytes; the bytes are visible to other threads
 *   when it returns.
 */
void HOSTCOPY_CB hostcopy_fn(void *user_data);

/*
 * How many records hostcopy_fn has rejected in this process. Counts up and
 * wraps at SIZE_MAX. Defined on targets with pointer-width atomics (every
 * target CUDA runs on; not, for example, Cortex-M0).
 */
size_t hostcopy_rejected(void);

/*
 * The HOSTCOPY_ABI_VERSION of the library that is running: compare it with
 * the header's to know which library the loader gave this program.
 */
uint32_t hostcopy_abi_version(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

/*
 * The layout is the contract: these checks stop the compiler on a target
 * where the header and the library could disagree. C11 and C++11 have a
 * static assertion; C99 (and C++98) get an array type whose size is
 * negative when the condition is false ("size of array is negative" names
 * hostcopy_static_assert_line_N: the check on line N of this file), and
 * alignment from the offset of a member after a char.
 */
#if defined(__cplusplus) && (__cplusplus >= 201103L || (defined(_MSC_VER) && _MSC_VER >= 1900))
#define HOSTCOPY_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#define HOSTCOPY_ALIGNOF(type) alignof(type)
#elif !defined(__cplusplus) && defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#define HOSTCOPY_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#define HOSTCOPY_ALIGNOF(type) _Alignof(type)
#else
#define HOSTCOPY_CONCAT_(a, b) a##b
#define HOSTCOPY_CONCAT(a, b) HOSTCOPY_CONCAT_(a, b)
#define HOSTCOPY_STATIC_ASSERT(cond, msg) \
    typedef char HOSTCOPY_CONCAT(hostcopy_static_assert_line_, __LINE__)[(cond) ? 1 : -1]
struct hostcopy_alignof_args_ { char before; struct hostcopy_args member; };
struct hostcopy_alignof_word_ { char before; uintptr_t member; };
#define HOSTCOPY_ALIGNOF_ARGS_ offsetof(struct hostcopy_alignof_args_, member)
#define HOSTCOPY_ALIGNOF_WORD_ offsetof(struct hostcopy_alignof_word_, member)
#endif
#ifdef HOSTCOPY_ALIGNOF
#define HOSTCOPY_ALIGNOF_ARGS_ HOSTCOPY_ALIGNOF(struct hostcopy_args)
#define HOSTCOPY_ALIGNOF_WORD_ HOSTCOPY_ALIGNOF(uintptr_t)
#endif

HOSTCOPY_STATIC_ASSERT(sizeof(size_t) == sizeof(uintptr_t),
                       "hostcopy: size_t and uintptr_t have the same width");
HOSTCOPY_STATIC_ASSERT(sizeof(struct hostcopy_args) == 3 * sizeof(uintptr_t),
                       "hostcopy: three words, no padding");
HOSTCOPY_STATIC_ASSERT(HOSTCOPY_ALIGNOF_ARGS_ == HOSTCOPY_ALIGNOF_WORD_,
                       "hostcopy: word alignment");
HOSTCOPY_STATIC_ASSERT(offsetof(struct hostcopy_args, dst) == 0, "hostcopy: dst first");
HOSTCOPY_STATIC_ASSERT(offsetof(struct hostcopy_args, src) == sizeof(uintptr_t),
                       "hostcopy: src second");
HOSTCOPY_STATIC_ASSERT(offsetof(struct hostcopy_args, nbytes) == 2 * sizeof(uintptr_t),
                       "hostcopy: nbytes third");
HOSTCOPY_STATIC_ASSERT(sizeof(((struct hostcopy_args *)0)->nbytes) == sizeof(uintptr_t),
                       "hostcopy: nbytes is one word");

#endif /* HOSTCOPY_H */
