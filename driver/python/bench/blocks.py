"""Scattered blocks (a KV-cache offload) side by side, in one process, on
one GPU: 1 GiB (--total-mib) in blocks of 64 KiB, 256 KiB and 2 MiB
(--blocks-kib; blocks under 64 KiB take hostcopy's gather kernel) at
random slots of a cache twice that size, to and from packed slots of a
pageable numpy pool.

Rows, device to host: hostcopy.copy_blocks_to_host; torch gathering the
blocks on the GPU (``cache[ids]``) then ``pool.copy_`` (one pageable
copy); a torch loop of ``pool[i].copy_(cache[id])`` (one pageable copy per
block); torch into a pinned pool (the link, for reference). Host to
device: hostcopy.copy_blocks_to_device; torch ``cache[ids] = pool``
(a pageable upload, then a scatter on the GPU). GB/s, median of
--repeat, ratios to the torch gather; every hostcopy row checked
byte-exact once. Prints the table last.
"""

import argparse
import statistics
import time

import numpy as np
import torch

import hostcopy

MiB = 1 << 20


def timed(fn, repeat: int) -> float:
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--total-mib", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--blocks-kib", default="64,256,2048", help="block sizes in KiB, comma-separated")
    args = parser.parse_args()
    total = args.total_mib * MiB
    print(f"{torch.cuda.get_device_name(0)}, hostcopy {hostcopy.__version__}, torch {torch.__version__}")
    rows = []
    for block in [int(kib) << 10 for kib in args.blocks_kib.split(",")]:
        count, slots = total // block, 2 * total // block
        cache = torch.randint(0, 256, (slots, block), dtype=torch.uint8, device="cuda")
        rng = np.random.default_rng(block)
        chosen = rng.choice(slots, size=count, replace=False)
        ids = torch.from_numpy(chosen).cuda()
        blocks = np.stack([chosen * block, np.arange(count) * block, np.full(count, block)], axis=1)
        pool = np.zeros((count, block), np.uint8)  # pre-faulted
        pool_t = torch.from_numpy(pool)
        pinned = torch.empty((count, block), dtype=torch.uint8, pin_memory=True)
        rates = {}

        def rate(direction, path, seconds):
            rates[(direction, path)] = total / seconds / 1e9

        hostcopy.copy_blocks_to_host(pool, cache, blocks)
        assert torch.equal(pool_t.cuda(), cache[ids]), "hostcopy D2H differs"
        rate("D2H", "hostcopy copy_blocks_to_host", timed(lambda: hostcopy.copy_blocks_to_host(pool, cache, blocks), args.repeat))
        rate("D2H", "torch gather + pool.copy_", timed(lambda: pool_t.copy_(cache[ids]), args.repeat))
        rate("D2H", "torch gather into pinned (link)", timed(lambda: pinned.copy_(cache[ids], non_blocking=True), args.repeat))
        if count <= 4096:

            def loop():
                for slot, index in enumerate(chosen.tolist()):
                    pool_t[slot].copy_(cache[index])

            rate("D2H", "torch loop of pool[i].copy_", timed(loop, max(1, args.repeat // 2)))
        restored = torch.zeros_like(cache)
        hostcopy.copy_blocks_to_device(restored, pool, blocks)
        assert torch.equal(restored[ids], cache[ids]), "hostcopy H2D differs"
        rate("H2D", "hostcopy copy_blocks_to_device", timed(lambda: hostcopy.copy_blocks_to_device(restored, pool, blocks), args.repeat))

        def torch_scatter():
            restored[ids] = pool_t.cuda()

        rate("H2D", "torch pool.cuda() + scatter", timed(torch_scatter, args.repeat))
        for (direction, path), value in rates.items():
            base = rates[(direction, "torch gather + pool.copy_" if direction == "D2H" else "torch pool.cuda() + scatter")]
            rows.append((block >> 10, direction, path, value, value / base))
        del cache, ids, pinned, restored
        torch.cuda.empty_cache()
    print()
    print(f"{'block':>7} {'dir':4} {'path':34} {'GB/s':>7} {'x torch':>8}")
    for block_kib, direction, path, value, ratio in rows:
        print(f"{block_kib:>5}K  {direction:4} {path:34} {value:7.1f} {ratio:7.2f}x")


if __name__ == "__main__":
    main()
