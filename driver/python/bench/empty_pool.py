"""Host memory for copying into, in one process on one GPU: making a pool,
and device-to-host copies into memory whose pages were never touched.

Making a pool (--pool-gib, default 4 and 64 GiB): ``hostcopy.empty``
(pageable, huge-page-advised, its pages made present in parallel; made
twice, the second time on pages the kernel had just freed) against
``cuMemHostAlloc`` (pinned) and ``cuMemHostRegister`` of a numpy array of
the same size (its pages faulted in by the registration), each timed
alone, its memory freed before the next.

Copies (64 MiB, 1 GiB, 4 GiB; best of --runs): ``copy_to_host`` from a
torch CUDA tensor into a fresh ``numpy.empty`` destination through a
stager with ``prefault`` on (the default) and off, into a
``hostcopy.empty`` destination (present before the copy, the pool's
case), and torch's ``t.to("cpu")`` (a fresh tensor too); each printed in
GB/s and as a fraction of the same copy into present memory. Every copy
is checked byte-exact once.
"""

import argparse
import sys
import time

import numpy as np
import torch
from cuda.bindings import driver as cu

import hostcopy

GiB = 1 << 30
MiB = 1 << 20


def checked(result):
    error, *values = result
    if error != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA error {error}")
    return values[0] if len(values) == 1 else values


def timed(make) -> tuple:
    start = time.perf_counter()
    made = make()
    return time.perf_counter() - start, made


def pool_rows(gib: int) -> list:
    nbytes = gib * GiB
    rows = []
    # Twice: the first pool of a size may be the first use of that much of
    # a new VM's memory (the hypervisor backs each page at its first touch);
    # the second reuses the pages the kernel had just freed, which is the
    # guest kernel's own cost alone.
    for name in ("hostcopy.empty", "hostcopy.empty, again"):
        seconds, pool = timed(lambda: hostcopy.empty(nbytes))
        assert pool[:: 1 << 20].sum() == 0
        del pool
        rows.append((name, seconds))
    seconds, pinned = timed(lambda: checked(cu.cuMemHostAlloc(nbytes, 0)))
    checked((cu.cuMemFreeHost(pinned)[0], None))
    rows.append(("cuMemHostAlloc", seconds))
    array = np.empty(nbytes, np.uint8)  # numpy's: mapped, no pages yet
    seconds, _ = timed(lambda: checked((cu.cuMemHostRegister(array.ctypes.data, nbytes, 0)[0], None)))
    checked((cu.cuMemHostUnregister(array.ctypes.data)[0], None))
    del array
    rows.append(("numpy.empty + cuMemHostRegister", seconds))
    return rows


def best(runs: int, copy) -> float:
    """The best seconds of `runs` calls of `copy()`, each given its own
    fresh destination (made outside the timing)."""
    times = []
    for _ in range(runs):
        prepare = copy()
        torch.cuda.synchronize()
        start = time.perf_counter()
        prepare()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return min(times)


def copy_rows(nbytes: int, runs: int, on: hostcopy.Stager, off: hostcopy.Stager) -> list:
    index = torch.arange(nbytes // 4, dtype=torch.int32, device="cuda")
    source = ((index * 1103515245 + 12345) >> 7).view(torch.uint8)
    del index
    expected = source.cpu().numpy()

    def into_fresh(stager):
        def prepare():
            dst = np.empty(nbytes, np.uint8)
            return lambda: stager.copy_to_host(dst, source)

        return prepare

    present = np.ones(nbytes, np.uint8)
    on.copy_to_host(present, source)
    assert np.array_equal(present, expected)
    for stager in (on, off):
        fresh = np.empty(nbytes, np.uint8)
        stager.copy_to_host(fresh, source)
        assert np.array_equal(fresh, expected)
        del fresh
    pool = hostcopy.empty(nbytes)
    on.copy_to_host(pool, source)
    assert np.array_equal(pool, expected)
    baseline = best(runs, lambda: lambda: on.copy_to_host(present, source))
    rows = [
        ("into present memory", baseline),
        ("into np.empty, prefault on", best(runs, into_fresh(on))),
        ("into np.empty, prefault off", best(runs, into_fresh(off))),
        ("into hostcopy.empty (made before)", best(runs, lambda: lambda: on.copy_to_host(pool, source))),
        ('torch t.to("cpu")', best(runs, lambda: lambda: source.to("cpu"))),
    ]
    return [(name, nbytes / seconds / 1e9, baseline / seconds) for name, seconds in rows]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pool-gib", type=int, nargs="*", default=[4, 64])
    parser.add_argument("--sizes-mib", type=int, nargs="*", default=[64, 1024, 4096])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    torch.cuda.init()
    checked((cu.cuInit(0)[0], None))
    # The pinned allocations need a current context: the device's primary
    # one, which torch and hostcopy use too.
    primary = checked(cu.cuDevicePrimaryCtxRetain(checked(cu.cuDeviceGet(0))))
    checked((cu.cuCtxSetCurrent(primary)[0], None))
    print(f"{torch.cuda.get_device_name(0)}, hostcopy {hostcopy.__version__}, torch {torch.__version__}")
    print("\nmaking a host pool (seconds, GB/s)")
    for gib in args.pool_gib:
        for name, seconds in pool_rows(gib):
            print(f"  {gib:3d} GiB  {name:34s} {seconds:8.3f} s  {gib * GiB / seconds / 1e9:6.1f} GB/s", flush=True)
    on = hostcopy.Stager(0)
    off = hostcopy.Stager(0, prefault=False)
    print("\ndevice to host (GB/s, and x the copy into present memory)")
    for mib in args.sizes_mib:
        for name, rate, ratio in copy_rows(mib * MiB, args.runs, on, off):
            print(f"  {mib:5d} MiB  {name:34s} {rate:6.1f} GB/s  {ratio:5.2f}x", flush=True)
    on.close()
    off.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
