"""How many stream operations the driver takes before an enqueue blocks,
for the patterns a staging engine could queue per chunk; and whether a
stream waits on a flag in pinned host memory set later by the CPU."""
import ctypes, sys, threading, time
from cuda.bindings import driver as cu

def ck(r):
    err = r[0]
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"{err}")
    return r[1:] if len(r) > 2 else (r[1] if len(r) == 2 else None)

ck(cu.cuInit(0))
dev = ck(cu.cuDeviceGet(0))
ctx = ck(cu.cuDevicePrimaryCtxRetain(dev))
ck(cu.cuCtxSetCurrent(ctx))
for name in ["CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1", "CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS",
             "CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR", "CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM",
             "CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING"]:
    attr = getattr(cu.CUdevice_attribute, name, None)
    if attr is None:
        print("attr", name, "absent"); continue
    try:
        print("attr", name, ck(cu.cuDeviceGetAttribute(attr, dev)))
    except Exception as e:
        print("attr", name, "error", e)

CHUNK = 16 << 20
NS = 4
devbuf = ck(cu.cuMemAlloc(NS * CHUNK))
devint = int(devbuf)
pinned = [ck(cu.cuMemHostAlloc(CHUNK, 0)) for _ in range(NS)]
flagp = ck(cu.cuMemHostAlloc(4096, cu.CU_MEMHOSTALLOC_DEVICEMAP if hasattr(cu, "CU_MEMHOSTALLOC_DEVICEMAP") else 2))
flag = ctypes.c_uint32.from_address(int(flagp))
flag.value = 0
flag_dev = int(ck(cu.cuMemHostGetDevicePointer(flagp, 0)))
streams = [ck(cu.cuStreamCreate(1)) for _ in range(NS)]
GEQ = cu.CUstreamWaitValue_flags.CU_STREAM_WAIT_VALUE_GEQ
libc = ctypes.CDLL(None)
free_ptr = ctypes.cast(libc.free, ctypes.c_void_p).value

def sync_all():
    for s in streams:
        ck(cu.cuStreamSynchronize(s))

def pattern(name, n, per_chunk, blocked):
    """Queues n chunks; blocked: every stream first waits on the flag
    (unset), so nothing runs and the queue only fills."""
    global flag
    flag.value = 0
    events = [ck(cu.cuEventCreate(cu.CUevent_flags.CU_EVENT_DISABLE_TIMING)) for _ in range(n)]
    if blocked:
        for s in streams:
            ck(cu.cuStreamWaitValue32(s, flag_dev, 1, GEQ))
    release = threading.Timer(3.0, lambda: setattr(flag, "value", 1))
    if blocked:
        release.start()
    t0 = time.perf_counter()
    first_block = None
    slowest = 0.0
    for i in range(n):
        a = time.perf_counter()
        per_chunk(i, streams[i % NS], events[i])
        d = time.perf_counter() - a
        slowest = max(slowest, d)
        if first_block is None and d > 0.5e-3 * (50 if blocked else 1):
            first_block = i
    t1 = time.perf_counter()
    if not blocked:
        flag.value = 1
    sync_all()
    t2 = time.perf_counter()
    release.cancel()
    for e in events:
        ck(cu.cuEventDestroy(e))
    print(f"{name:44s} n={n} blocked_start={blocked} first_slow_enqueue={first_block} "
          f"queue_s={t1-t0:.4f} total_s={t2-t0:.4f} per_chunk_us={(t1-t0)/n*1e6:.1f} slowest_ms={slowest*1e3:.2f}")
    sys.stdout.flush()

def dma(i, s, e):
    ck(cu.cuMemcpyDtoHAsync(pinned[i % NS], devint + (i % NS) * CHUNK, CHUNK, s))
def dma_rec(i, s, e):
    dma(i, s, e); ck(cu.cuEventRecord(e, s))
def wait_dma_rec(i, s, e):
    ck(cu.cuStreamWaitValue32(s, flag_dev, 1 if flag.value else 0, GEQ)); dma_rec(i, s, e)
def dma_hostfn(i, s, e):
    dma(i, s, e); ck(cu.cuLaunchHostFunc(s, free_ptr, 0))

# warm-up
pattern("warm-up dma+record", 64, dma_rec, False)
for n in (1024, 4096):
    pattern("dma+record", n, dma_rec, False)
    pattern("flagwait+dma+record", n, wait_dma_rec, False)
    pattern("dma+hostfn", n, dma_hostfn, False)
for n in (4096,):
    pattern("BLOCKED dma+record", n, dma_rec, True)
    pattern("BLOCKED flagwait+dma+record", n, wait_dma_rec, True)
    pattern("BLOCKED dma+hostfn", n, dma_hostfn, True)

# A stream waits on a host flag the CPU sets later; order seen by an event.
flag.value = 5
ck(cu.cuStreamWaitValue32(streams[0], flag_dev, 7, GEQ))
e = ck(cu.cuEventCreate(0))
ck(cu.cuEventRecord(e, streams[0]))
time.sleep(0.05)
q1 = cu.cuEventQuery(e)[0]
t = time.perf_counter(); flag.value = 7
ck(cu.cuEventSynchronize(e)); lat = time.perf_counter() - t
print("host-flag wait: before set:", q1, " after set: released in", f"{lat*1e6:.1f} us")
# cyclic compare across wrap
flag.value = 0xFFFFFFF0
ck(cu.cuStreamWaitValue32(streams[1], flag_dev, 0x00000005, GEQ))
ck(cu.cuEventRecord(e, streams[1])); time.sleep(0.05)
q2 = cu.cuEventQuery(e)[0]
flag.value = 0x6
ck(cu.cuEventSynchronize(e))
print("cyclic GEQ across wrap: before:", q2, "after: released")
print("probe done")
