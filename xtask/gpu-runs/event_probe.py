"""When a copy's completion becomes visible, apart from hostcopy.

A blocking transfer of registered memory waits on a blocking-sync event: it
sleeps plainly until 100 us before the copies are due, then polls that event
with cuEventQuery. Run 109 (an H100 host) found that wait at 16 MiB spending
about 60 us polling and still ending 167 us after a pinned copy would have,
while the same copies started at once and polled on a plain event ran at
99%. Either a plain sleep woke late there, or a blocking-sync event reads
complete later than a plain one recorded beside it. This probe measures
both, with cuda.bindings alone: each kind of event polled side by side
(recorded in turn first), cuEventSynchronize on the blocking one, a plain
sleep's overshoot, and the paced wait (sleep to the plain event's median
minus 100 us, then poll) on each kind of event. Registered and pinned
memory, 16 and 64 MiB, both ways; microseconds from just before the copy is
queued, medians of TRIALS:

    python3 xtask/gpu-runs/event_probe.py
"""

import ctypes
import mmap
import statistics
import sys
import time

from cuda.bindings import driver as cu

TRIALS = 25
SIZES = [16 << 20, 64 << 20]
NOT_READY = cu.CUresult.CUDA_ERROR_NOT_READY
OK = cu.CUresult.CUDA_SUCCESS


def ok(result):
    err = result[0]
    if err != OK:
        raise RuntimeError(f"driver error {err}")
    return result[1] if len(result) == 2 else result[1:]


def now_us(t0):
    return (time.perf_counter_ns() - t0) / 1000.0


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


ok(cu.cuInit(0))
dev = ok(cu.cuDeviceGet(0))
ctx = ok(cu.cuDevicePrimaryCtxRetain(dev))
ok(cu.cuCtxSetCurrent(ctx))
stream = ok(cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING))
blocking_flags = cu.CUevent_flags.CU_EVENT_BLOCKING_SYNC | cu.CUevent_flags.CU_EVENT_DISABLE_TIMING
plain_flags = cu.CUevent_flags.CU_EVENT_DISABLE_TIMING
ev_block = ok(cu.cuEventCreate(blocking_flags))
ev_plain = ok(cu.cuEventCreate(plain_flags))
name = ok(cu.cuDeviceGetName(64, dev)).split(b"\0")[0].decode()
print(f"event_probe: {name}, {TRIALS} trials, medians in us from just before the copy was queued")

# A plain sleep's overshoot.
for asked in (100, 200, 1000):
    over = []
    for _ in range(60):
        t0 = time.perf_counter_ns()
        time.sleep(asked / 1e6)
        over.append(now_us(t0) - asked)
    print(f"sleep {asked} us: overshoot median {median(over):.0f} us, p90 {pct(over, 0.9):.0f}, max {max(over):.0f}")

rows = []
for size in SIZES:
    dptr = ok(cu.cuMemAlloc(size))
    region = mmap.mmap(-1, size)
    region.write(b"\1" * size)
    reg_ptr = ctypes.addressof(ctypes.c_char.from_buffer(region))
    ok(cu.cuMemHostRegister(reg_ptr, size, cu.CU_MEMHOSTREGISTER_PORTABLE))
    pinned_ptr = ok(cu.cuMemHostAlloc(size, 0))
    for memory, host in (("registered", reg_ptr), ("pinned", pinned_ptr)):
        for direction in ("H2D", "D2H"):
            def queue():
                if direction == "H2D":
                    ok(cu.cuMemcpyHtoDAsync(dptr, host, size, stream))
                else:
                    ok(cu.cuMemcpyDtoHAsync(host, dptr, size, stream))

            # Warm up.
            for _ in range(3):
                queue()
                ok(cu.cuStreamSynchronize(stream))
            plain_done, block_done, lag, queued = [], [], [], []
            for trial in range(TRIALS):
                t0 = time.perf_counter_ns()
                queue()
                first, second = (ev_block, ev_plain) if trial % 2 == 0 else (ev_plain, ev_block)
                ok(cu.cuEventRecord(first, stream))
                ok(cu.cuEventRecord(second, stream))
                queued.append(now_us(t0))
                tb = tp = None
                while tb is None or tp is None:
                    if tp is None and cu.cuEventQuery(ev_plain)[0] == OK:
                        tp = now_us(t0)
                    if tb is None and cu.cuEventQuery(ev_block)[0] == OK:
                        tb = now_us(t0)
                plain_done.append(tp)
                block_done.append(tb)
                lag.append(tb - tp)
            sync_done = []
            for _ in range(TRIALS):
                t0 = time.perf_counter_ns()
                queue()
                ok(cu.cuEventRecord(ev_block, stream))
                ok(cu.cuEventSynchronize(ev_block))
                sync_done.append(now_us(t0))
            due = median(plain_done)
            paced = {}
            for kind, event in (("plain", ev_plain), ("blocking", ev_block)):
                done, polls = [], []
                for _ in range(TRIALS):
                    t0 = time.perf_counter_ns()
                    queue()
                    ok(cu.cuEventRecord(event, stream))
                    wake = due - 100
                    left = wake - now_us(t0)
                    if left > 0:
                        time.sleep(left / 1e6)
                    n = 0
                    while cu.cuEventQuery(event)[0] != OK:
                        n += 1
                    done.append(now_us(t0))
                    polls.append(n)
                paced[kind] = (median(done), median(polls), sum(1 for p in polls if p == 0))
            rows.append(
                (size >> 20, memory, direction, median(queued), due, median(block_done), median(lag),
                 max(lag), median(sync_done), paced["plain"], paced["blocking"])
            )
            print(
                f"{size >> 20} MiB {memory} {direction}: queued in {median(queued):.0f}; polled done: plain {due:.0f}, "
                f"blocking {median(block_done):.0f} (lag median {median(lag):.0f}, max {max(lag):.0f}); "
                f"cuEventSynchronize(blocking) {median(sync_done):.0f}; sleep to due-100 then poll: "
                f"plain {paced['plain'][0]:.0f} ({paced['plain'][2]} of {TRIALS} done at the first poll), "
                f"blocking {paced['blocking'][0]:.0f} ({paced['blocking'][2]} of {TRIALS})",
                flush=True,
            )
    ok(cu.cuMemHostUnregister(reg_ptr))
    ok(cu.cuMemFreeHost(pinned_ptr))
    ok(cu.cuMemFree(dptr))
    del region

print("| size | memory | way | plain done | blocking done | sync on blocking | paced, plain event | paced, blocking event |")
print("| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: |")
for r in rows:
    print(f"| {r[0]} MiB | {r[1]} | {r[2]} | {r[4]:.0f} | {r[5]:.0f} | {r[8]:.0f} | {r[9][0]:.0f} | {r[10][0]:.0f} |")
sys.exit(0)
