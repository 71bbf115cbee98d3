"""A pure-Python consumer of hostcopy: no extension module of its own.

Loads the core's shared library with ctypes and hands `hostcopy_fn` to the
CUDA driver, which calls it on its host-function thread. Context, streams,
memory and graphs come from NVIDIA's cuda-bindings (`cuda.bindings.driver`).

The stream launch goes straight to libcuda's `cuLaunchHostFunc` through
ctypes: cuda-bindings' own `cuLaunchHostFunc` wraps the function in a
trampoline that takes the interpreter lock, which is what hostcopy exists to
avoid. Graph host nodes made with cuda-bindings keep the function pointer as
given.

Usage: python3 launch_hostcopy.py path/to/libhostcopy.so
Prints one line per check and exits nonzero if any failed.
"""

import ctypes
import struct
import sys
import time

import numpy as np
from cuda.bindings import driver as cu


class HostCopyArgs(ctypes.Structure):
    """struct hostcopy_args from include/hostcopy.h."""

    _fields_ = [("dst", ctypes.c_size_t), ("src", ctypes.c_size_t), ("nbytes", ctypes.c_size_t)]


def ok(result):
    """Unwraps a cuda-bindings result tuple, raising on any error."""
    err = result[0]
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"{err!r} ({cu.cuGetErrorName(err)[1]})")
    return result[1] if len(result) == 2 else result[1:]


def pattern(n, seed):
    return ((np.arange(n, dtype=np.uint64) * 2654435761 + seed) >> 13).astype(np.uint8)


failures = []


def check(name, condition, detail=""):
    print(f"{'ok  ' if condition else 'FAIL'} {name}{': ' + detail if detail and not condition else ''}")
    if not condition:
        failures.append(name)


def main(library_path):
    core = ctypes.CDLL(library_path)
    core.hostcopy_rejected.restype = ctypes.c_size_t
    host_fn = ctypes.cast(core.hostcopy_fn, ctypes.c_void_p).value
    libcuda = ctypes.CDLL("libcuda.so.1")
    libcuda.cuLaunchHostFunc.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    libcuda.cuLaunchHostFunc.restype = ctypes.c_int
    libcuda.cuStreamSynchronize.argtypes = [ctypes.c_void_p]
    libcuda.cuStreamSynchronize.restype = ctypes.c_int

    def launch(stream, user_data):
        code = libcuda.cuLaunchHostFunc(ctypes.c_void_p(int(stream)), ctypes.c_void_p(host_fn),
                                        ctypes.c_void_p(user_data))
        if code != 0:
            raise RuntimeError(f"cuLaunchHostFunc: {code}")

    ok(cu.cuInit(0))
    device = ok(cu.cuDeviceGet(0))
    context = ok(cu.cuDevicePrimaryCtxRetain(device))
    ok(cu.cuCtxSetCurrent(context))
    stream = ok(cu.cuStreamCreate(1))  # CU_STREAM_NON_BLOCKING

    # 1. Staged device-to-host: D2H into a pinned slot, then hostcopy_fn
    #    copies the slot into pageable numpy memory, in stream order.
    n = 8 << 20
    data = pattern(n, 1)
    device_buffer = ok(cu.cuMemAlloc(n))
    ok(cu.cuMemcpyHtoD(device_buffer, data.ctypes.data, n))
    pinned = ok(cu.cuMemHostAlloc(n, 0x01))  # CU_MEMHOSTALLOC_PORTABLE
    pageable = np.zeros(n, np.uint8)
    record = HostCopyArgs(pageable.ctypes.data, pinned, n)
    ok(cu.cuMemcpyDtoHAsync(pinned, device_buffer, n, stream))
    launch(stream, ctypes.addressof(record))
    ok(cu.cuStreamSynchronize(stream))
    check("staged D2H through a pinned slot into numpy memory", np.array_equal(pageable, data))

    # 2. No interpreter lock: the copy completes while this thread holds the
    #    GIL and never lets go of it (no other Python thread exists, and the
    #    switch interval is far longer than the wait).
    small = 1 << 16
    src = pattern(small, 2)
    dst = np.zeros(small, np.uint8)
    record2 = HostCopyArgs(dst.ctypes.data, src.ctypes.data, small)
    sys.setswitchinterval(60.0)
    launch(stream, ctypes.addressof(record2))
    deadline = time.perf_counter() + 2.0
    while dst[-1] != src[-1] and time.perf_counter() < deadline:
        pass
    ran_while_holding_gil = bool(dst[-1] == src[-1])
    sys.setswitchinterval(0.005)
    ok(cu.cuStreamSynchronize(stream))
    check("hostcopy_fn runs while Python holds the GIL", ran_while_holding_gil and np.array_equal(dst, src))

    # 3. A record packed at an odd offset of a byte buffer, passed as an integer.
    dst3 = np.zeros(4096, np.uint8)
    src3 = pattern(4096, 3)
    packed = ctypes.create_string_buffer(3 + ctypes.sizeof(HostCopyArgs))
    struct.pack_into("@3N", packed, 3, dst3.ctypes.data, src3.ctypes.data, 4096)
    launch(stream, ctypes.addressof(packed) + 3)
    ok(cu.cuStreamSynchronize(stream))
    check("unaligned record in a byte buffer", np.array_equal(dst3, src3))

    # 4. Contract violations are counted, never silent.
    before = core.hostcopy_rejected()
    bad = HostCopyArgs(0, src3.ctypes.data, 16)
    launch(stream, 0)
    launch(stream, ctypes.addressof(bad))
    ok(cu.cuStreamSynchronize(stream))
    check("null user_data and null dst are rejected and counted", core.hostcopy_rejected() - before == 2,
          f"rejected {core.hostcopy_rejected() - before}, expected 2")

    # 5. A graph host node made with cuda-bindings, replayed: every replay copies.
    graph = ok(cu.cuGraphCreate(0))
    params = cu.CUDA_HOST_NODE_PARAMS()
    params.fn = cu.CUhostFn(host_fn)
    src5 = np.zeros(4096, np.uint8)
    dst5 = np.zeros(4096, np.uint8)
    record5 = HostCopyArgs(dst5.ctypes.data, src5.ctypes.data, 4096)
    params.userData = ctypes.addressof(record5)
    ok(cu.cuGraphAddHostNode(graph, None, 0, params))
    executable = ok(cu.cuGraphInstantiate(graph, 0))
    replays_ok = True
    for replay in range(10):
        src5[:] = pattern(4096, 100 + replay)
        ok(cu.cuGraphLaunch(executable, stream))
        ok(cu.cuStreamSynchronize(stream))
        replays_ok &= bool(np.array_equal(dst5, src5))
    check("graph host node: 10 replays, 10 copies", replays_ok)

    ok(cu.cuGraphExecDestroy(executable))
    ok(cu.cuGraphDestroy(graph))
    ok(cu.cuMemFreeHost(pinned))
    ok(cu.cuMemFree(device_buffer))
    ok(cu.cuStreamDestroy(stream))
    ok(cu.cuDevicePrimaryCtxRelease(device))

    print(f"python consumer: {5 - len(failures)} of 5 checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
