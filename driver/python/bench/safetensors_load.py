"""A model file to the GPU, side by side in one process: a ~5 GiB
safetensors file in /tmp of ~300 bf16 tensors from 1 KiB to 256 MiB (the
sizes of a 3B-parameter model's layers), its pages warm in the page cache
(read once first), loaded by

- hostcopy.safetensors.load_file (one mapping, one allocation, one staged
  transfer),
- safetensors.torch.load_file(device="cuda"),
- safetensors.safe_open + get_tensor(name).to("cuda") per tensor,
- hostcopy.safetensors.safe_open + get_tensor(name) (one staged transfer
  per tensor, each into an allocation of its own).

- fastsafetensors' ``fastsafe_open(nogds=True)`` (its pinned bounce-buffer
  path; GPUDirect Storage is not set up on the GPU host), where the package
  is installed (the GPU bundle carries its wheel): as it comes (reads with
  ``O_DIRECT``, past the page cache) and with ``FASTSAFETENSORS_ODIRECT=0``
  (buffered reads, which the warm page cache serves).

GB/s of the data region, best of --repeat, ratios to safetensors.torch,
every row checked bit-exact against safetensors once. The target: warm,
>= 40 GB/s and >= 8x safetensors.torch.load_file.

Then cold (--cold, on by default): before each load the file's pages are
dropped from the page cache (``posix_fadvise(POSIX_FADV_DONTNEED)`` after
an ``fsync``; the share of pages still resident is read back with
``mincore`` and printed, so a file system that keeps them, tmpfs for one,
shows as such), each loader once, beside the disk's own sequential read
speed (64 MiB ``read`` calls into one buffer, same drop first).

Prints the tables last and exits 1 if a row differs (not when the target is
missed: that is read from the table).
"""

import argparse
import ctypes
import mmap
import os
import tempfile
import time

import torch
from safetensors import __version__ as safetensors_version
from safetensors import safe_open
from safetensors.torch import load_file as safetensors_load_file
from safetensors.torch import save_file

import hostcopy
import hostcopy.safetensors

try:
    from fastsafetensors import __version__ as fastsafetensors_version
    from fastsafetensors import fastsafe_open
except ImportError:
    fastsafe_open = None
    fastsafetensors_version = None

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


def layer_sizes(total: int) -> list[int]:
    """Byte sizes of a transformer's tensors until ``total``: per layer four
    attention matrices (18 MiB), three MLP matrices (48 MiB), two norms and
    three biases (6 KiB) and a 1 KiB scale, and an embedding and an LM
    head of 256 MiB: about 300 tensors in 5 GiB."""
    hidden = 3072
    sizes = [256 * MiB]
    per_layer = [hidden * hidden * 2] * 4 + [hidden * 8192 * 2] * 3 + [hidden * 2] * 5 + [KiB]
    while sum(sizes) + sum(per_layer) + 256 * MiB <= total:
        sizes += per_layer
    sizes.append(256 * MiB)
    return sizes


def write_model(path: str, total: int) -> int:
    tensors = {}
    generator = torch.Generator().manual_seed(0)
    # Random bits (a few NaNs among them: the check is on bytes), each
    # tensor a copy of its own from a different place of one random pool.
    pool = torch.randint(-(2**15), 2**15, (384 * MiB // 2,), dtype=torch.int16, generator=generator)
    for index, size in enumerate(layer_sizes(total)):
        count = size // 2
        start = (index * 7919 * KiB) % (pool.numel() - count + 1)
        tensors[f"model.{index:04d}.weight"] = pool[start : start + count].clone().view(torch.bfloat16)
    save_file(tensors, path, metadata={"format": "pt"})
    return len(tensors)


def best(fn, repeat: int) -> tuple[float, object]:
    result = None
    times = []
    for _ in range(repeat):
        result = None
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        start = time.perf_counter()
        result = fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return min(times), result


def same(ours: dict, theirs: dict) -> bool:
    if sorted(ours) != sorted(theirs):
        return False
    for name, tensor in theirs.items():
        mine = ours[name]
        if mine.dtype != tensor.dtype or mine.shape != tensor.shape or mine.device != tensor.device:
            return False
        if not torch.equal(mine.view(-1).view(torch.uint8), tensor.view(-1).view(torch.uint8)):
            return False
    return True


def drop_from_page_cache(path: str) -> float:
    """Asks the kernel to drop the file's clean pages; returns the share of
    its pages still resident afterwards (0.0: cold)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return resident_share(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)


def resident_share(fd: int, size: int) -> float:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if addr in (None, ctypes.c_void_p(-1).value):
        return float("nan")
    try:
        pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
        vec = (ctypes.c_ubyte * pages)()
        if libc.mincore(ctypes.c_void_p(addr), size, vec) != 0:
            return float("nan")
        return (pages - bytes(vec).count(0)) / pages
    finally:
        libc.munmap(ctypes.c_void_p(addr), size)


def read_sequentially(path: str) -> None:
    buffer = bytearray(64 * MiB)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as file:
        while file.readinto(view):
            pass


def file_system(path: str) -> str:
    best_mount, kind = "", "?"
    with open("/proc/mounts") as mounts:
        for line in mounts:
            _, mount, fs, *_ = line.split()
            if path.startswith(mount) and len(mount) > len(best_mount):
                best_mount, kind = mount, fs
    return f"{kind} at {best_mount}"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--total-gib", type=float, default=5.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="keep the file")
    parser.add_argument("--dir", default="/tmp", help="where the file is written (default /tmp)")
    parser.add_argument("--no-cold", dest="cold", action="store_false", help="skip the cold page-cache rows")
    args = parser.parse_args()
    started = time.perf_counter()
    print(
        f"{torch.cuda.get_device_name(0)}, hostcopy {hostcopy.__version__}, torch {torch.__version__}, "
        f"safetensors {safetensors_version}; fastsafetensors "
        f"{fastsafetensors_version or 'not installed (no row)'}"
    )
    handle, path = tempfile.mkstemp(suffix=".safetensors", dir=args.dir)
    os.close(handle)
    try:
        count = write_model(path, int(args.total_gib * GiB))
        header = hostcopy.safetensors.read_header(path)
        data = header.data_len
        with open(path, "rb") as file:  # warm: every page in the page cache
            while file.read(64 * MiB):
                pass
        print(
            f"{path} ({file_system(os.path.realpath(path))}): {count} bf16 tensors, {data / GiB:.2f} GiB, "
            f"written and read in {time.perf_counter() - started:.1f} s"
        )

        def per_tensor():
            with safe_open(path, framework="pt", device="cpu") as f:
                return {name: f.get_tensor(name).to("cuda") for name in f.keys()}

        def hostcopy_per_tensor():
            with hostcopy.safetensors.safe_open(path, framework="pt", device="cuda:0") as f:
                return {name: f.get_tensor(name) for name in f.keys()}

        paths = [
            ("hostcopy.safetensors.load_file", lambda: hostcopy.safetensors.load_file(path, device="cuda:0")),
            ("safetensors.torch.load_file(cuda)", lambda: safetensors_load_file(path, device="cuda:0")),
            ("safe_open + .to(cuda) per tensor", per_tensor),
            ("hostcopy safe_open, per tensor", hostcopy_per_tensor),
        ]
        if fastsafe_open is not None:

            def fastsafetensors_load():
                with fastsafe_open(filenames=[path], nogds=True, device="cuda:0") as f:
                    return {name: f.get_tensor(name) for name in f.keys()}

            def fastsafetensors_buffered():
                # Its default reads with O_DIRECT, past the page cache: warm
                # or cold, the disk's pace. Buffered, it reads the cache.
                os.environ["FASTSAFETENSORS_ODIRECT"] = "0"
                try:
                    return fastsafetensors_load()
                finally:
                    del os.environ["FASTSAFETENSORS_ODIRECT"]

            paths.append(("fastsafetensors (nogds, O_DIRECT)", fastsafetensors_load))
            paths.append(("fastsafetensors (nogds, buffered)", fastsafetensors_buffered))
        theirs = safetensors_load_file(path, device="cuda:0")
        rows, exact = [], True
        for label, fn in paths:
            seconds, result = best(fn, args.repeat)
            ok = same(result, theirs)  # type: ignore[arg-type]
            exact = exact and ok
            rows.append((label, data / seconds / 1e9, ok))
            del result
        cold_rows = []
        if args.cold:
            share = drop_from_page_cache(path)
            seconds, _ = best(lambda: read_sequentially(path), 1)
            cold_rows.append(("disk: sequential read, 64 MiB calls", data / seconds / 1e9, share, True))
            for label, fn in paths:
                share = drop_from_page_cache(path)
                seconds, result = best(fn, 1)
                ok = same(result, theirs)  # type: ignore[arg-type]
                exact = exact and ok
                cold_rows.append((label, data / seconds / 1e9, share, ok))
                del result
        del theirs
    finally:
        if not args.keep:
            os.unlink(path)
    base = rows[1][1]
    print()
    print(f"{'path':36} {'GB/s':>7} {'x safetensors':>14} {'bit-exact':>10}")
    for label, rate, ok in rows:
        print(f"{label:36} {rate:7.1f} {rate / base:13.2f}x {'yes' if ok else 'NO':>10}")
    ours = rows[0][1]
    met = ours >= 40 and ours / base >= 8
    print(
        f"target: warm >= 40 GB/s and >= 8x safetensors.torch.load_file: {'met' if met else 'NOT met'} ({ours:.1f} GB/s, {ours / base:.1f}x)"
    )
    if cold_rows:
        disk = cold_rows[0][1]
        print()
        print("cold: the file's pages dropped from the page cache before each row, one load each")
        print(f"{'path':36} {'GB/s':>7} {'x disk read':>12} {'resident':>9} {'bit-exact':>10}")
        for label, rate, share, ok in cold_rows:
            print(f"{label:36} {rate:7.1f} {rate / disk:11.2f}x {share:8.1%} {'yes' if ok else 'NO':>10}")
    print(f"total {time.perf_counter() - started:.1f} s")
    return 0 if exact else 1


if __name__ == "__main__":
    raise SystemExit(main())
