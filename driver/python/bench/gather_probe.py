"""Tiny scattered blocks moved by a gather kernel, beside hostcopy's block
calls, in one process on one GPU (a design probe for the GPU-gathered
path: what the kernel reaches, and how it should be used).

256 MiB in blocks of 4, 16 and 64 KiB at random slots of a 512 MiB cupy
cache, to and from packed slots. The kernel is ``hostcopy_gather`` from
``driver/src/cuda/kernels/gather.ptx`` (path in --ptx), loaded with cupy.

Rows, device to host (D2H) and host to device (H2D):

- hostcopy ``copy_blocks_to_host`` / ``_to_device`` into / from a
  pageable numpy pool (today's path: the copy engine, one descriptor per
  block);
- the kernel writing straight into (reading straight from) pinned host
  memory, 255 blocks per launch (what fits in a 4 KiB parameter table),
  and one launch per 16 MiB chunk;
- the kernel gathering into (scattering from) device scratch, 16 MiB a
  chunk, and one copy-engine copy per chunk, on two streams in turn.

Each kernel row is checked byte-exact once; an edge sweep first checks
odd lengths and offsets both ways. GB/s, median of --repeat; ratios to
hostcopy's block call. Prints the table last.
"""

import argparse
import statistics
import time

import cupy as cp
import numpy as np

import hostcopy

KiB, MiB = 1 << 10, 1 << 20
CHUNK = 16 * MiB
THREADS = 256


def table(device_addresses, staging_offsets, lengths):
    """The kernel's 16-byte entries, in device memory."""
    entries = np.zeros(len(lengths), dtype=[("device", "<u8"), ("offset", "<u4"), ("len", "<u4")])
    entries["device"], entries["offset"], entries["len"] = device_addresses, staging_offsets, lengths
    return cp.asarray(entries.view(np.uint8))


def launch(kernel, entries, count, staging, scatter, stream):
    grid = max(1, min(count, 65535))
    kernel((grid,), (THREADS,), (entries, np.uint32(count), np.uint64(staging), np.uint32(scatter)), stream=stream)


def timed(fn, repeat):
    fn()
    cp.cuda.Device().synchronize()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        cp.cuda.Device().synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def pinned_array(nbytes):
    memory = cp.cuda.alloc_pinned_memory(nbytes)
    return np.frombuffer(memory, dtype=np.uint8, count=nbytes), memory


def edge_sweep(kernel):
    """Odd lengths at odd offsets, both ways, against numpy."""
    rng = np.random.default_rng(7)
    lengths = np.array([1, 2, 3, 15, 16, 17, 255, 4095, 4096, 4097, 65535, 65537] * 3, dtype=np.uint64)
    device = cp.asarray(rng.integers(0, 256, 4 * MiB, dtype=np.uint8))
    starts = np.sort(rng.choice(4 * MiB // 70000, size=len(lengths), replace=False)) * 70000 + rng.integers(0, 16, len(lengths))
    offsets = np.concatenate([[0], np.cumsum(lengths + 3)[:-1]]).astype(np.uint64) + 1
    host, _keep = pinned_array(int(offsets[-1] + lengths[-1] + 16))
    host[:] = 0
    entries = table(device.data.ptr + starts.astype(np.uint64), offsets, lengths)
    launch(kernel, entries, len(lengths), host.ctypes.data, 0, cp.cuda.Stream.null)
    cp.cuda.Device().synchronize()
    reference = device.get()
    triples = list(zip(starts.tolist(), offsets.tolist(), lengths.tolist()))
    for s, o, n in triples:
        assert np.array_equal(host[o:o + n], reference[s:s + n]), f"gather differs at length {n}"
    gaps = np.ones(len(host), bool)
    for _, o, n in triples:
        gaps[o:o + n] = False
    assert not host[gaps].any(), "gather wrote outside its blocks"
    host[:] = rng.integers(0, 256, len(host), dtype=np.uint8)
    before = device.get()
    launch(kernel, entries, len(lengths), host.ctypes.data, 1, cp.cuda.Stream.null)
    cp.cuda.Device().synchronize()
    after = device.get()
    untouched = np.ones(len(after), bool)
    for s, o, n in triples:
        assert np.array_equal(after[s:s + n], host[o:o + n]), f"scatter differs at length {n}"
        untouched[s:s + n] = False
    assert np.array_equal(after[untouched], before[untouched]), "scatter wrote outside its blocks"
    return len(lengths)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ptx", required=True)
    parser.add_argument("--total-mib", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    kernel = cp.RawModule(path=args.ptx).get_function("hostcopy_gather")
    print(f"{cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}, hostcopy {hostcopy.__version__}, cupy {cp.__version__}")
    print(f"edge sweep: {edge_sweep(kernel)} blocks of odd lengths and offsets, gather and scatter byte-exact")
    total = args.total_mib * MiB
    streams = [cp.cuda.Stream(non_blocking=True) for _ in range(2)]
    scratch = [cp.empty(CHUNK, cp.uint8) for _ in range(2)]
    pinned, _keep = pinned_array(total)
    rows = []
    for block in (4 * KiB, 16 * KiB, 64 * KiB):
        count, slots = total // block, 2 * total // block
        cache = cp.random.randint(0, 256, slots * block, dtype=cp.uint8)
        chosen = np.random.default_rng(block).choice(slots, size=count, replace=False)
        blocks = np.stack([chosen * block, np.arange(count) * block, np.full(count, block)], axis=1)
        expected = cache.reshape(slots, block)[cp.asarray(chosen)].ravel().get()
        pool = np.zeros(total, np.uint8)
        device_addresses = cache.data.ptr + chosen.astype(np.uint64) * block
        offsets = (np.arange(count, dtype=np.uint64) * block)
        per_chunk = CHUNK // block
        whole = table(device_addresses, offsets, np.full(count, block, np.uint64))
        chunk_tables = [table(device_addresses[i:i + per_chunk], offsets[i:i + per_chunk] - offsets[i], np.full(len(offsets[i:i + per_chunk]), block, np.uint64))
                        for i in range(0, count, per_chunk)]
        rates = {}

        def kernel_direct(scatter, per_launch):
            def run():
                for n, at in enumerate(range(0, count, per_launch)):
                    k = min(per_launch, count - at)
                    launch(kernel, whole[at * 16:], k, pinned.ctypes.data, scatter, streams[n % 2])
            return run

        def via_scratch(scatter):
            def run():
                for n, entries in enumerate(chunk_tables):
                    stream, buf = streams[n % 2], scratch[n % 2]
                    k = len(entries) // 16
                    host_at = pinned.ctypes.data + n * CHUNK
                    if scatter:
                        cp.cuda.runtime.memcpyAsync(buf.data.ptr, host_at, k * block, 1, stream.ptr)
                        launch(kernel, entries, k, buf.data.ptr, 1, stream)
                    else:
                        launch(kernel, entries, k, buf.data.ptr, 0, stream)
                        cp.cuda.runtime.memcpyAsync(host_at, buf.data.ptr, k * block, 2, stream.ptr)
            return run

        def check_d2h(name, fn):
            pinned[:] = 0
            fn()
            cp.cuda.Device().synchronize()
            assert np.array_equal(pinned, expected), f"{name} differs"
            rates[("D2H", name)] = total / timed(fn, args.repeat) / 1e9

        def check_h2d(name, fn):
            cache[:] = 0
            pinned[:] = expected
            fn()
            cp.cuda.Device().synchronize()
            assert np.array_equal(cache.reshape(slots, block)[cp.asarray(chosen)].ravel().get(), expected), f"{name} differs"
            rates[("H2D", name)] = total / timed(fn, args.repeat) / 1e9

        hostcopy.copy_blocks_to_host(pool, cache, blocks)
        assert np.array_equal(pool, expected), "hostcopy D2H differs"
        rates[("D2H", "hostcopy blocks (copy engine)")] = total / timed(lambda: hostcopy.copy_blocks_to_host(pool, cache, blocks), args.repeat) / 1e9
        check_d2h("kernel -> pinned, 255 a launch", kernel_direct(0, 255))
        check_d2h("kernel -> pinned, a chunk a launch", kernel_direct(0, per_chunk))
        check_d2h("kernel -> scratch + copy", via_scratch(0))
        saved = cache.copy()
        cache[:] = 0
        hostcopy.copy_blocks_to_device(cache, pool, blocks)
        assert np.array_equal(cache.reshape(slots, block)[cp.asarray(chosen)].ravel().get(), expected), "hostcopy H2D differs"
        rates[("H2D", "hostcopy blocks (copy engine)")] = total / timed(lambda: hostcopy.copy_blocks_to_device(cache, pool, blocks), args.repeat) / 1e9
        check_h2d("pinned -> kernel, 255 a launch", kernel_direct(1, 255))
        check_h2d("pinned -> kernel, a chunk a launch", kernel_direct(1, per_chunk))
        check_h2d("copy + scratch -> kernel", via_scratch(1))
        del saved
        for (direction, name), value in rates.items():
            rows.append((block // KiB, direction, name, value, value / rates[(direction, "hostcopy blocks (copy engine)")]))
        del cache, whole, chunk_tables
        cp.get_default_memory_pool().free_all_blocks()
    print()
    print(f"{'block':>6} {'dir':4} {'path':36} {'GB/s':>7} {'x hostcopy':>10}")
    for kib, direction, name, value, ratio in rows:
        print(f"{kib:>4}K  {direction:4} {name:36} {value:7.1f} {ratio:9.2f}x")


if __name__ == "__main__":
    main()
