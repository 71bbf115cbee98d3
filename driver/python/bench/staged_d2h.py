"""A 1 GiB staged device-to-host copy from pure Python with cuda.core, side by side in one process.

Per chunk: a D2H copy into pinned slot k on stream k (cuda.core), then a host
function on the same stream copies the slot into pageable numpy memory.
Compared, with the same chunks, slots and streams:

- hostcopy's HOST_COPY_PARALLEL_FN, the main thread idle (waiting in
  Stream.sync) and the main thread spinning in Python, holding the GIL,
  until the last copy set a flag;
- hostcopy's HOST_COPY_FN (one thread);
- a Python ctypes callback that does the copy with ctypes.memmove;
- a pinned D2H of the whole buffer (the link) and the driver's pageable
  cuMemcpyDtoH into pre-faulted memory.

Prints one table with GB/s (median of --repeat runs) and ratios. Every
staged variant is checked byte-exact once. Usage:
    python staged_d2h.py [--size-mib 1024] [--chunk-mib 16] [--slots 4] [--workers N] [--repeat 5]
"""

import argparse
import ctypes
import os
import statistics
import struct
import sys
import time

import numpy as np
from cuda.bindings import driver as cu
from cuda.core import Buffer, Device, LegacyPinnedMemoryResource, PinnedMemoryResource

import hostcopy

MiB = 1 << 20
RECORD = struct.Struct("@3N")


def pattern(n: int) -> np.ndarray:
    return ((np.arange(n, dtype=np.uint64) * 2654435761 + 1) >> 13).astype(np.uint8)


def host_view(buffer) -> np.ndarray:
    return np.ctypeslib.as_array((ctypes.c_uint8 * buffer.size).from_address(int(buffer.handle)))


def pinned_resource(device):
    """Staging memory from ``cuMemHostAlloc`` (cuda.core's
    LegacyPinnedMemoryResource). On the H200 host a copy into cuda.core's
    host-pool PinnedMemoryResource ran at a quarter of the link (14 GB/s
    against 55) and blocked its caller: the pool's row below shows it."""
    return LegacyPinnedMemoryResource(), "LegacyPinnedMemoryResource (cuMemHostAlloc)"


def pool_pinned(device, size):
    """A host-pool pinned buffer (PinnedMemoryResource), or None with why."""
    try:
        if not device.properties.host_memory_pools_supported:
            return None, "the device has no host memory pools"
        return PinnedMemoryResource().allocate(size, stream=device.default_stream), None
    except Exception as failure:
        return None, str(failure)


def check(result):
    err = result[0]
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"{err!r}")
    return result[1:]


class Pipeline:
    """The staged pipeline's fixed parts: device source, pinned slots, one
    stream per slot, device chunk views, and the destination."""

    def __init__(self, device, size, chunk, slots):
        assert size % chunk == 0, "--size-mib must be a multiple of --chunk-mib"
        self.device = device
        self.size, self.chunk, self.slots = size, chunk, slots
        self.streams = [device.create_stream() for _ in range(slots)]
        self.pinned, self.pinned_name = pinned_resource(device)
        self.staging = [self.pinned.allocate(chunk, stream=s) for s in self.streams]
        self.expected = pattern(size)
        full = self.pinned.allocate(size, stream=self.streams[0])
        self.streams[0].sync()
        host_view(full)[:] = self.expected
        self.source = device.allocate(size, stream=self.streams[0])
        self.source.copy_from(full, stream=self.streams[0])
        self.streams[0].sync()
        self.full_pinned = full  # also the target of the link measurement
        base = int(self.source.handle)
        self.offsets = list(range(0, size, chunk))
        self.pieces = [Buffer.from_handle(base + offset, chunk) for offset in self.offsets]
        self.destination = np.empty(size, np.uint8)
        self.destination.fill(0)  # pre-faulted: first-touch page faults are not the copy
        self.records = [
            hostcopy.pack_host_copy_args(self.destination, self.staging[i % slots], chunk, dst_offset=offset)
            for i, offset in enumerate(self.offsets)
        ]
        # Completion flags, one per stream, each set by a 1-byte host copy
        # after the stream's last chunk: what the GIL-holding spinner watches.
        self.flags = bytearray(slots)
        self.one = bytes([1])
        self.flag_records = [hostcopy.pack_host_copy_args(self.flags, self.one, 1, dst_offset=k) for k in range(slots)]

    def run(self, launch, wait):
        """Enqueues every chunk with ``launch(stream, index)`` then calls
        ``wait()``. Returns (seconds, seconds spent enqueueing)."""
        self.flags[:] = bytes(self.slots)
        start = time.perf_counter()
        for index in range(len(self.offsets)):
            k = index % self.slots
            self.pieces[index].copy_to(self.staging[k], stream=self.streams[k])
            launch(self.streams[k], index)
        for k, stream in enumerate(self.streams):
            hostcopy.launch_host_copy_args(stream, self.flag_records[k])
        enqueued = time.perf_counter()
        wait()
        end = time.perf_counter()
        for stream in self.streams:
            stream.sync()
        return end - start, enqueued - start

    def sync_all(self):
        for stream in self.streams:
            stream.sync()

    def spin_holding_the_gil(self):
        previous = sys.getswitchinterval()
        sys.setswitchinterval(60.0)
        try:
            while self.flags.count(1) < self.slots:
                pass
        finally:
            sys.setswitchinterval(previous)


def python_callback_launcher(pipeline):
    """A Python ctypes callback doing the copy, launched through libcuda's
    cuLaunchHostFunc (ctypes), reading the same records."""
    libcuda = ctypes.CDLL("libcuda.so.1")
    libcuda.cuLaunchHostFunc.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    libcuda.cuLaunchHostFunc.restype = ctypes.c_int

    @hostcopy.CUHOSTFN
    def python_copy(user_data):
        dst, src, nbytes = RECORD.unpack(ctypes.string_at(user_data, RECORD.size))
        ctypes.memmove(dst, src, nbytes)

    ring = bytearray(b"".join(pipeline.records))
    base = ctypes.addressof((ctypes.c_char * len(ring)).from_buffer(ring))
    address = ctypes.cast(python_copy, ctypes.c_void_p).value
    handles = [int(s.handle) for s in pipeline.streams]

    def launch(stream, index):
        code = libcuda.cuLaunchHostFunc(handles[index % pipeline.slots], address, base + index * RECORD.size)
        if code:
            raise RuntimeError(f"cuLaunchHostFunc: {code}")

    launch.keep = (python_copy, ring)  # alive while launches may run
    return launch


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--chunk-mib", type=int, default=16)
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--workers", type=int, default=max(1, min(12, (os.cpu_count() or 2) - 2)))
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    device = Device(0)
    device.set_current()
    hostcopy.set_parallel_workers(args.workers)
    pipeline = Pipeline(device, args.size_mib * MiB, args.chunk_mib * MiB, args.slots)
    size = pipeline.size
    print(
        f"hostcopy staged D2H from Python on {device.name}: {args.size_mib} MiB, {args.chunk_mib} MiB chunks, "
        f"{args.slots} pinned slots on {args.slots} streams, {hostcopy.parallel_workers()[1]} workers, "
        f"median of {args.repeat}; staging: {pipeline.pinned_name}; Python {sys.version.split()[0]}",
        flush=True,
    )

    def launcher(parallel):
        def launch(stream, index):
            hostcopy.launch_host_copy_args(stream, pipeline.records[index], parallel=parallel)

        return launch

    variants = [
        ("staged HOST_COPY_PARALLEL_FN, main thread idle", launcher(True), pipeline.sync_all),
        ("staged HOST_COPY_PARALLEL_FN, main thread spins holding the GIL", launcher(True), pipeline.spin_holding_the_gil),
        ("staged HOST_COPY_FN (one thread), main thread idle", launcher(False), pipeline.sync_all),
        ("staged Python ctypes memmove callback, main thread idle", python_callback_launcher(pipeline), pipeline.sync_all),
    ]

    results = {}
    failures = []

    def measure(name, once):
        once()  # warm-up
        times = [once() for _ in range(args.repeat)]
        results[name] = (size / statistics.median(t for t, _ in times) / 1e9, statistics.median(e for _, e in times))

    stream0 = pipeline.streams[0]

    def link():
        start = time.perf_counter()
        pipeline.source.copy_to(pipeline.full_pinned, stream=stream0)
        enqueued = time.perf_counter()
        stream0.sync()
        return time.perf_counter() - start, enqueued - start

    pageable = np.empty(size, np.uint8)
    pageable.fill(0)
    source_ptr = int(pipeline.source.handle)

    def driver_pageable():
        start = time.perf_counter()
        check(cu.cuMemcpyDtoH(pageable.ctypes.data, source_ptr, size))
        elapsed = time.perf_counter() - start
        return elapsed, elapsed

    measure("pinned D2H (link)", link)
    pool_buffer, why = pool_pinned(device, size)
    if pool_buffer is None:
        print(f"  pinned D2H into PinnedMemoryResource not measured: {why}")
    else:
        def pool_link():
            start = time.perf_counter()
            pipeline.source.copy_to(pool_buffer, stream=stream0)
            enqueued = time.perf_counter()
            stream0.sync()
            return time.perf_counter() - start, enqueued - start

        measure("pinned D2H into PinnedMemoryResource (host pool)", pool_link)
    measure("driver pageable cuMemcpyDtoH", driver_pageable)
    if not np.array_equal(pageable, pipeline.expected):
        failures.append("driver pageable cuMemcpyDtoH")
    for name, launch, wait in variants:
        pipeline.destination.fill(0)  # the check must see this variant's bytes
        pipeline.run(launch, wait)
        if not np.array_equal(pipeline.destination, pipeline.expected):
            failures.append(name)
        measure(name, lambda: pipeline.run(launch, wait))
        print(f"  measured: {name}", flush=True)

    link_rate = results["pinned D2H (link)"][0]
    pageable_rate = results["driver pageable cuMemcpyDtoH"][0]
    width = max(len(name) for name in results)
    print()
    print(f"{'path':<{width}}  {'GB/s':>7}  {'x link':>7}  {'x pageable':>10}  {'enqueue ms':>10}")
    for name, (rate, enqueue) in results.items():
        print(f"{name:<{width}}  {rate:7.2f}  {rate / link_rate:7.2f}  {rate / pageable_rate:10.2f}  {enqueue * 1e3:10.2f}")
    idle = results["staged HOST_COPY_PARALLEL_FN, main thread idle"][0]
    spinning = results["staged HOST_COPY_PARALLEL_FN, main thread spins holding the GIL"][0]
    python = results["staged Python ctypes memmove callback, main thread idle"][0]
    print()
    print(f"GIL-holding spinner / idle main thread: {spinning / idle:.2f} (target >= 0.9)")
    print(f"HOST_COPY_PARALLEL_FN / Python ctypes callback: {idle / python:.2f}x")
    print(f"HOST_COPY_PARALLEL_FN / driver pageable cuMemcpyDtoH: {idle / pageable_rate:.2f}x")
    print("compare with the Rust staging API: the 'staged parallel' row of the Rust benchmark in the same GPU run")
    if failures:
        print(f"WRONG BYTES: {', '.join(failures)}")
        return 1
    print("every staged variant byte-exact")
    return 0


if __name__ == "__main__":
    sys.exit(main())
