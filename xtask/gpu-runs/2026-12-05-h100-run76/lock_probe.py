"""Which driver calls of another thread wait while a synchronous copy on the
legacy stream waits behind a stream memory wait (a gate). Run 74's probe,
with the waits a stager's copier makes (cuEventSynchronize on a finished
event, and on one whose copy is still held back by a flag that a timer
opens 0.5 s later)."""
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
def host_flag():
    flag, = ok(cu.cuMemHostAlloc(64, 1))
    ctypes.c_uint32.from_address(int(flag)).value = 0
    dflag, = ok(cu.cuMemHostGetDevicePointer(flag, 0))
    return flag, dflag
flag, dflag = host_flag()
flag2, dflag2 = host_flag()
n = 4 << 20
dbuf, = ok(cu.cuMemAlloc(n))
dbuf2, = ok(cu.cuMemAlloc(1 << 20))
pageable = np.zeros(n, np.uint8)
pinned, = ok(cu.cuMemHostAlloc(n, 0))
own, = ok(cu.cuStreamCreate(1))
own2, = ok(cu.cuStreamCreate(1))
ev0, = ok(cu.cuEventCreate(2))
ok(cu.cuEventRecord(ev0, own))
ok(cu.cuStreamSynchronize(own))
legacy = cu.CUstream(1)  # CU_STREAM_LEGACY
opened2 = [0]
def pending(flags):
    """An event whose copy waits for flag2, opened 0.5 s from now."""
    opened2[0] += 1
    v = opened2[0]
    ev, = ok(cu.cuEventCreate(flags))
    ok(cu.cuStreamWaitValue32(own2, dflag2, v, 0))
    ok(cu.cuMemcpyHtoDAsync(dbuf2, int(pinned), 1 << 20, own2))
    ok(cu.cuEventRecord(ev, own2))
    def open_():
        ctypes.c_uint32.from_address(int(flag2)).value = v
    threading.Timer(0.5, open_).start()
    return lambda: cu.cuEventSynchronize(ev)
# name -> made before the gate (driver calls allowed), returns the call
probes = {
    "cuEventSynchronize finished": lambda: (lambda: cu.cuEventSynchronize(ev0)),
    "cuEventSynchronize pending, spin": lambda: pending(2),
    "cuEventSynchronize pending, blocking-sync": lambda: pending(3),
    "cuStreamSynchronize own idle": lambda: (lambda: cu.cuStreamSynchronize(own)),
    "cuEventQuery": lambda: (lambda: cu.cuEventQuery(ev0)),
    "cuEventRecord own": lambda: (lambda: cu.cuEventRecord(ev0, own)),
}
value = 0
for name, prepare in probes.items():
    call = prepare()
    value += 1
    ok(cu.cuStreamWaitValue32(legacy, dflag, value, 0))
    blocked_copy = threading.Thread(target=lambda: ok(cu.cuCtxSetCurrent(ctx)) or cu.cuMemcpyDtoH(pageable.ctypes.data, dbuf, n))
    blocked_copy.start()
    time.sleep(0.2)
    result = {}
    def run():
        ok(cu.cuCtxSetCurrent(ctx)); result["r"] = call()
    t = threading.Thread(target=run); t.start(); t.join(1.5)
    waited = t.is_alive()
    ctypes.c_uint32.from_address(int(flag)).value = value  # open the gate
    t.join(); blocked_copy.join()
    ok(cu.cuCtxSynchronize())
    print(f"lock probe: {name}: {'WAITS for the blocked copy' if waited else 'returns'} {result.get('r')}", flush=True)
