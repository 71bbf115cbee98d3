"""Which driver calls of another thread wait while a synchronous copy on the
legacy stream waits behind a stream memory wait (a gate)."""
import ctypes, threading, time
import numpy as np
from cuda.bindings import driver as cu
def ok(r):
    err = r[0] if isinstance(r, tuple) else r
    assert err == cu.CUresult.CUDA_SUCCESS, err
    return r[1:] if isinstance(r, tuple) and len(r) > 1 else None
ok(cu.cuInit(0))
dev, = ok(cu.cuDeviceGet(0))
ctx, = ok(cu.cuDevicePrimaryCtxRetain(dev))
ok(cu.cuCtxSetCurrent(ctx))
flag, = ok(cu.cuMemHostAlloc(64, 1))
ctypes.c_uint32.from_address(int(flag)).value = 0
dflag, = ok(cu.cuMemHostGetDevicePointer(flag, 0))
n = 4 << 20
dbuf, = ok(cu.cuMemAlloc(n))
pageable = np.zeros(n, np.uint8)
pinned, = ok(cu.cuMemHostAlloc(n, 0))
own, = ok(cu.cuStreamCreate(1))
ev0, = ok(cu.cuEventCreate(2))
legacy = cu.CUstream(1)  # CU_STREAM_LEGACY
calls = {
    "cuStreamCreate": lambda: cu.cuStreamCreate(1),
    "cuEventCreate": lambda: cu.cuEventCreate(2),
    "cuEventCreate blocking-sync": lambda: cu.cuEventCreate(1),
    "cuEventRecord own": lambda: cu.cuEventRecord(ev0, own),
    "cuStreamWaitEvent own": lambda: cu.cuStreamWaitEvent(own, ev0, 0),
    "cuMemcpyHtoDAsync pinned own": lambda: cu.cuMemcpyHtoDAsync(dbuf, int(pinned), 1 << 20, own),
    "cuStreamWaitValue32 own": lambda: cu.cuStreamWaitValue32(own, dflag, 0, 0),
    "cuEventQuery": lambda: cu.cuEventQuery(ev0),
    "cuMemHostAlloc": lambda: cu.cuMemHostAlloc(1 << 20, 1),
    "cuMemAlloc": lambda: cu.cuMemAlloc(1 << 20),
    "cuStreamDestroy": lambda: cu.cuStreamDestroy(ok(cu.cuStreamCreate(1))[0]),
    "cuEventDestroy": lambda: cu.cuEventDestroy(ok(cu.cuEventCreate(2))[0]),
}
value = 0
for name, call in calls.items():
    value += 1
    ok(cu.cuStreamWaitValue32(legacy, dflag, value, 0))
    blocked_copy = threading.Thread(target=lambda: ok(cu.cuCtxSetCurrent(ctx)) or cu.cuMemcpyDtoH(pageable.ctypes.data, dbuf, n))
    blocked_copy.start()
    time.sleep(0.2)
    result = {}
    def run():
        ok(cu.cuCtxSetCurrent(ctx)); result["r"] = call()
    t = threading.Thread(target=run); t.start(); t.join(1.0)
    waited = t.is_alive()
    ctypes.c_uint32.from_address(int(flag)).value = value  # open the gate
    t.join(); blocked_copy.join()
    ok(cu.cuCtxSynchronize())
    print(f"lock probe: {name}: {'WAITS for the blocked copy' if waited else 'returns'}", flush=True)
