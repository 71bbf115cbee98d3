"""How fast the driver registers 64 GiB of host memory, by how it is asked.

A `HostBuffer` registered in the background goes range by range (64 MiB,
`REGISTER_RANGE`), one thread, sleeping 100 us (`GAP`) after each range so
that a driver call of another thread waiting behind it gets in. Runs 108
and 109 (H100 hosts) took 1.95 and 2.20 s that way against 1.69 and 2.00 s
for one `cuMemHostRegister` of the whole buffer. This probe asks the driver
the ways a registrar could, with ctypes alone (each call releases the GIL):

- `whole`: one call, the whole buffer (the target), first and last;
- `64M` and `256M`: ranges back to back on one thread;
- `64M gap`: ranges with a 100 us sleep after each, as hostcopy does now;
- `64M x2`, `x4`: ranges taken in turn by two or four threads.

Each way runs twice: alone (seconds to register, then to unregister) and
beside a neighbour, a thread doing 4 KiB device-to-host copies back to
back (how long one waited at the median, 99th percentile and worst: what
a registration costs the process's other driver calls).

    python3 xtask/gpu-runs/register_probe.py [GiB]      # 64 by default
"""

import ctypes
import statistics
import sys
import threading
import time

GIB = 1 << 30
SIZE = int(sys.argv[1]) * GIB if len(sys.argv) > 1 else 64 * GIB
PORTABLE = 1

cuda = ctypes.CDLL("libcuda.so.1")
libc = ctypes.CDLL("libc.so.6", use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.memset.restype = ctypes.c_void_p
libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
cuda.cuMemHostRegister_v2.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
cuda.cuMemHostUnregister.argtypes = [ctypes.c_void_p]
cuda.cuCtxSetCurrent.argtypes = [ctypes.c_void_p]
cuda.cuMemcpyDtoH_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t]


def ok(err, what):
    if err != 0:
        raise RuntimeError(f"{what}: CUresult {err}")


ok(cuda.cuInit(0), "cuInit")
dev = ctypes.c_int()
ok(cuda.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
ctx = ctypes.c_void_p()
ok(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
ok(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
name = ctypes.create_string_buffer(64)
cuda.cuDeviceGetName(name, 64, dev)
dptr = ctypes.c_uint64()
ok(cuda.cuMemAlloc_v2(ctypes.byref(dptr), 4096), "cuMemAlloc")

# The buffer, its pages present (written by eight threads), as a
# HostBuffer's are before they are registered.
PROT_RW, MAP_PRIVATE_ANON = 0x3, 0x22
base = libc.mmap(None, SIZE, PROT_RW, MAP_PRIVATE_ANON, -1, 0)
if base in (None, ctypes.c_void_p(-1).value):
    raise OSError(ctypes.get_errno(), "mmap")
t0 = time.perf_counter()
part = SIZE // 8
fillers = [threading.Thread(target=libc.memset, args=(base + i * part, 1, part)) for i in range(8)]
for t in fillers:
    t.start()
for t in fillers:
    t.join()
print(f"register_probe: {name.value.decode()}, {SIZE // GIB} GiB, pages written in {time.perf_counter() - t0:.2f} s", flush=True)


def ranges(step):
    return [(base + at, min(step, SIZE - at)) for at in range(0, SIZE, step)]


def register(parts, threads=1, gap=0.0):
    """Registers `parts`, taken in turn by `threads`; seconds."""
    nxt = [0]
    lock = threading.Lock()
    failed = []

    def work():
        ok(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= len(parts):
                return
            ptr, n = parts[i]
            err = cuda.cuMemHostRegister_v2(ptr, n, PORTABLE)
            if err != 0:
                failed.append(err)
                return
            if gap:
                time.sleep(gap)

    t0 = time.perf_counter()
    workers = [threading.Thread(target=work) for _ in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    took = time.perf_counter() - t0
    if failed:
        raise RuntimeError(f"cuMemHostRegister: CUresult {failed[0]}")
    return took


def unregister(parts):
    t0 = time.perf_counter()
    for ptr, _ in parts:
        ok(cuda.cuMemHostUnregister(ptr), "cuMemHostUnregister")
    return time.perf_counter() - t0


def neighbour(stop, waits):
    ok(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    host = ctypes.create_string_buffer(4096)
    while not stop.is_set():
        t0 = time.perf_counter()
        ok(cuda.cuMemcpyDtoH_v2(host, dptr.value, 4096), "cuMemcpyDtoH")
        waits.append(time.perf_counter() - t0)


WAYS = [
    ("whole", [(base, SIZE)], 1, 0.0),
    ("64M", ranges(64 << 20), 1, 0.0),
    ("64M gap", ranges(64 << 20), 1, 100e-6),
    ("256M", ranges(256 << 20), 1, 0.0),
    ("64M x2", ranges(64 << 20), 2, 0.0),
    ("64M x4", ranges(64 << 20), 4, 0.0),
    ("whole again", [(base, SIZE)], 1, 0.0),
]

rows = []
for label, parts, threads, gap in WAYS:
    alone = register(parts, threads, gap)
    off = unregister(parts)
    stop, waits = threading.Event(), []
    side = threading.Thread(target=neighbour, args=(stop, waits))
    side.start()
    time.sleep(0.05)
    before = len(waits)
    beside = register(parts, threads, gap)
    during = waits[before:]
    stop.set()
    side.join()
    unregister(parts)
    ms = sorted(w * 1e3 for w in during) or [float("nan")]
    p99 = ms[min(len(ms) - 1, int(0.99 * len(ms)))]
    rows.append((label, alone, off, beside, len(ms), statistics.median(ms), p99, ms[-1]))
    print(f"  {label}: {alone:.3f} s alone, unregistered in {off:.3f} s; beside copies {beside:.3f} s", flush=True)

whole = statistics.median([rows[0][1], rows[-1][1]])
print()
print(f"| way | register s | / whole | unregister s | beside copies s | copies | copy wait median ms | p99 ms | max ms |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for label, alone, off, beside, n, med, p99, worst in rows:
    print(f"| {label} | {alone:.3f} | {alone / whole:.3f} | {off:.3f} | {beside:.3f} | {n} | {med:.3f} | {p99:.2f} | {worst:.2f} |")
