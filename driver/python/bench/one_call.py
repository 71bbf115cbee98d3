"""The one-call copies side by side with what Python users have, in one
process, on one GPU: GB/s (median of --repeat runs) and ratios.

Device to host, into an existing (pre-faulted) numpy array:
- pinned: torch's copy into a pinned tensor (the link);
- hostcopy.copy_to_host(numpy_array, tensor);
- torch ``out.copy_(t)`` into a pageable tensor over the same memory;
- cupy ``a.get(out=numpy_array)``;
- cuda.core ``Buffer.copy_to`` a pinned buffer (where it applies: pinned only);
- hostcopy into a fresh ``np.empty`` (first touch in the copy), and with
  another Python thread spinning, holding the GIL between bytecodes.
Host to device from numpy: pinned (the link), hostcopy.copy_to_device,
torch ``t.copy_(from_numpy)``, cupy ``a.set(numpy_array)``.

Sizes: --sizes-mib (default 64, 1024, 4096). Every hostcopy row is checked
byte-exact once. Then what one call costs beyond its bytes: --calls
(default 1000) copies of 64 KiB each way, one after the other, per call
beside torch's ``copy_`` of the same tensor and the pinned copy (the
driver's own floor for one small copy); target: hostcopy within 50 us of
the pinned copy. And how soon a ``blocking=False`` call of --return-gib
(default 16; 0 skips it) returns against the whole transfer, each way
(target: under 2%). Prints the table last; --csv writes the rows.
"""

import argparse
import statistics
import sys
import threading
import time

import numpy as np
import torch

import hostcopy

MiB = 1 << 20


def timed(fn, repeat: int, sync: bool = True) -> float:
    """Median seconds of ``fn`` (one untimed warm-up first), with a device
    synchronize in the timing where ``fn`` may return before its copy is
    done (hostcopy's blocking calls return after it)."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        if sync:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


class Spinner:
    """Another Python thread busy in bytecode: it takes the GIL whenever it can."""

    def __enter__(self):
        self.stop = False
        self.thread = threading.Thread(target=self.spin)
        self.thread.start()
        return self

    def spin(self):
        count = 0
        while not self.stop:
            count += 1

    def __exit__(self, *exc):
        self.stop = True
        self.thread.join()


def per_call(calls: int, repeat: int) -> list[str]:
    """Microseconds per call of ``calls`` 64 KiB copies each way, median of
    ``repeat`` loops: hostcopy, torch ``copy_`` and the pinned copy."""
    n = 64 << 10
    expected = ((np.arange(n, dtype=np.uint64) * 2654435761 + 7) >> 13).astype(np.uint8)
    device = torch.from_numpy(expected).cuda()
    host = np.zeros(n, np.uint8)
    pinned = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    out = torch.from_numpy(host)
    hostcopy.copy_to_host(host, device)
    assert np.array_equal(host, expected), "hostcopy 64 KiB D2H differs"

    def loop(copy, sync):
        def run():
            for _ in range(calls):
                copy()
                if sync:
                    torch.cuda.synchronize()
        return 1e6 * timed(run, repeat, sync=False) / calls

    lines = []
    d2h = {
        "hostcopy": loop(lambda: hostcopy.copy_to_host(host, device), False),
        "torch out.copy_": loop(lambda: out.copy_(device), True),
        "pinned (link)": loop(lambda: pinned.copy_(device, non_blocking=True), True),
    }
    target = torch.zeros(n, dtype=torch.uint8, device="cuda")
    hostcopy.copy_to_device(target, expected)
    assert torch.equal(target.cpu(), torch.from_numpy(expected)), "hostcopy 64 KiB H2D differs"
    source = torch.from_numpy(expected)
    pinned.copy_(source)
    h2d = {
        "hostcopy": loop(lambda: hostcopy.copy_to_device(target, expected), False),
        "torch t.copy_": loop(lambda: target.copy_(source), True),
        "pinned (link)": loop(lambda: target.copy_(pinned, non_blocking=True), True),
    }
    for direction, paths in (("D2H", d2h), ("H2D", h2d)):
        shown = ", ".join(f"{path} {us:.1f} us" for path, us in paths.items())
        beyond = paths["hostcopy"] - paths["pinned (link)"]
        lines.append(f"per call, {calls} x 64 KiB {direction}: {shown}; hostcopy beyond the pinned copy {beyond:.1f} us (target <= 50)")
    return lines


def call_parts(calls: int, repeat: int) -> list[str]:
    """Where one call's time goes, microseconds per call (median of
    ``repeat`` loops of ``calls``), a 64 KiB copy each way and the start of
    a 16 MiB ``blocking=False`` upload (the offloaded KV cache's call): the
    whole call (the module's function: the device's default stager looked
    up, then its copy); the default stager's lookup; the stager's own copy
    (``Stager.copy_to_host``: the sides, the stream, the bounds and the
    copy), and the capture check of torch's current stream, which it makes
    where that stream is not the transfer's."""
    from hostcopy import _native, _staging

    n = 64 << 10
    device = torch.zeros(n, dtype=torch.uint8, device="cuda")
    host = np.zeros(n, np.uint8)
    stager = _staging.default_stager_of(device, "src")
    current = torch.cuda.current_stream().cuda_stream

    def per_call_us(fn) -> float:
        def run():
            for _ in range(calls):
                fn()
        return 1e6 * timed(run, repeat, sync=False) / calls

    def row(label, parts):
        return f"call parts, {label}: " + ", ".join(f"{name} {per_call_us(fn):.1f} us" for name, fn in parts)

    lines = [
        row("64 KiB D2H", [
            ("whole call", lambda: hostcopy.copy_to_host(host, device)),
            ("stager lookup", lambda: _staging.default_stager_of(device, "src")),
            ("stager's copy", lambda: stager.copy_to_host(host, device)),
            ("capture check", lambda: _native.stream_capturing(current or 1)),
        ]),
        row("64 KiB H2D", [
            ("whole call", lambda: hostcopy.copy_to_device(device, host)),
            ("stager's copy", lambda: stager.copy_to_device(device, host)),
        ]),
    ]
    # The same 64 KiB through a stager's own pinned buffers rather than the
    # driver's pageable path (which the default stager takes below
    # ``driver_path_below``): whether staging small copies would be cheaper.
    staging = hostcopy.Stager(device.device.index, driver_path_below=0)
    lines.append(row("64 KiB staged (driver_path_below=0)", [
        ("D2H", lambda: staging.copy_to_host(host, device)),
        ("H2D", lambda: staging.copy_to_device(device, host)),
    ]))
    staging.close()
    big = 16 << 20
    big_device = torch.zeros(big, dtype=torch.uint8, device="cuda")
    big_host = np.zeros(big, np.uint8)
    blocks = np.array([(i * (1 << 20), i * (1 << 20), 1 << 20) for i in range(16)], dtype=np.int64)
    starts = {"one range": [], "16 blocks": [], "the stager's copy": []}
    for _ in range(max(repeat, 1) * 20):
        begin = time.perf_counter()
        transfer = hostcopy.copy_to_device(big_device, big_host, blocking=False)
        starts["one range"].append(time.perf_counter() - begin)
        transfer.wait()
        begin = time.perf_counter()
        transfer = hostcopy.copy_blocks_to_device(big_device, big_host, blocks, blocking=False)
        starts["16 blocks"].append(time.perf_counter() - begin)
        transfer.wait()
        begin = time.perf_counter()
        transfer = stager.copy_to_device(big_device, big_host, blocking=False)
        starts["the stager's copy"].append(time.perf_counter() - begin)
        transfer.wait()
    lines.append(
        "call parts, 16 MiB H2D blocking=False, the call until it returns: "
        + ", ".join(f"{name} median {1e6 * statistics.median(t):.0f} us, longest {1e6 * max(t):.0f} us" for name, t in starts.items())
    )
    del device, big_device
    return lines


def non_blocking_return(gib: int, repeat: int) -> list[str]:
    """How long a ``blocking=False`` call of ``gib`` GiB takes to return,
    against the whole transfer (call to ``wait()``), each way; median of
    ``repeat`` (at most 3)."""
    n = gib << 30
    free, _ = torch.cuda.mem_get_info()
    if free < n + (1 << 30):
        return [f"blocking=False return, {gib} GiB: not run, {free >> 30} GiB free on the GPU"]
    device = torch.empty(n, dtype=torch.uint8, device="cuda")
    device[:64].fill_(7)
    host = np.ones(n, np.uint8)  # pre-faulted
    lines = []
    for direction, start in (
        ("D2H", lambda: hostcopy.copy_to_host(host, device, blocking=False)),
        ("H2D", lambda: hostcopy.copy_to_device(device, host, blocking=False)),
    ):
        shares = []
        for _ in range(min(repeat, 3)):
            begin = time.perf_counter()
            transfer = start()
            returned = time.perf_counter() - begin
            transfer.wait()
            whole = time.perf_counter() - begin
            shares.append((returned, whole))
        returned, whole = sorted(shares, key=lambda pair: pair[0] / pair[1])[len(shares) // 2]
        lines.append(
            f"blocking=False return, {gib} GiB {direction}: returned in {1e3 * returned:.2f} ms of "
            f"{1e3 * whole:.0f} ms ({100 * returned / whole:.2f}%; target < 2%)"
        )
    assert host[0] == 7, "the 16 GiB D2H did not land"
    del device
    torch.cuda.empty_cache()
    return lines


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes-mib", type=int, nargs="+", default=[64, 1024, 4096])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--return-gib", type=int, default=16)
    parser.add_argument("--csv")
    args = parser.parse_args()
    try:
        import cupy
    except Exception:
        cupy = None
    try:
        from cuda.core import Device, LegacyPinnedMemoryResource

        core_device = Device(0)
        core_device.set_current()
        core_stream = core_device.create_stream()
    except Exception:
        core_device = None
    print(f"{torch.cuda.get_device_name(0)}, hostcopy {hostcopy.__version__}, torch {torch.__version__}")
    stager = hostcopy.default_stager(torch.cuda.current_device())
    print("default stager:", stager.options)
    rows = []
    for size_mib in args.sizes_mib:
        n = size_mib * MiB
        expected = ((np.arange(n, dtype=np.uint64) * 2654435761 + 1) >> 13).astype(np.uint8)
        device = torch.from_numpy(expected).cuda()
        host = np.zeros(n, np.uint8)  # pre-faulted
        pinned = torch.empty(n, dtype=torch.uint8, pin_memory=True)
        out = torch.from_numpy(host)
        results = {}

        def record(direction, path, seconds):
            results[(direction, path)] = n / seconds / 1e9

        record("D2H", "pinned (link)", timed(lambda: pinned.copy_(device, non_blocking=True), args.repeat))
        hostcopy.copy_to_host(host, device)
        assert np.array_equal(host, expected), "hostcopy D2H differs"
        record("D2H", "hostcopy", timed(lambda: hostcopy.copy_to_host(host, device), args.repeat, sync=False))
        record("D2H", "torch out.copy_", timed(lambda: out.copy_(device), args.repeat))
        if cupy is not None:
            array = cupy.asarray(device)
            record("D2H", "cupy get(out=)", timed(lambda: array.get(out=host), args.repeat))
        if core_device is not None:
            resource = LegacyPinnedMemoryResource()
            buffer = core_device.allocate(n, stream=core_stream)
            target = resource.allocate(n, stream=core_stream)
            record("D2H", "cuda.core copy_to pinned", timed(lambda: (buffer.copy_to(target, stream=core_stream), core_stream.sync()), args.repeat))
            target.close()
            buffer.close()

        def fresh():
            into = np.empty(n, np.uint8)
            hostcopy.copy_to_host(into, device)
            return into

        assert np.array_equal(fresh(), expected), "hostcopy into np.empty differs"
        record("D2H", "hostcopy into fresh np.empty", timed(fresh, args.repeat, sync=False))

        def torch_fresh():
            return torch.empty(n, dtype=torch.uint8).copy_(device)

        if size_mib <= 1024:  # 1.2 GB/s: minutes at larger sizes
            record("D2H", "torch into fresh tensor", timed(torch_fresh, args.repeat))
        # A thread busy in Python holds the GIL until CPython's switch
        # interval (5 ms by default) forces it off: the copy runs without the
        # GIL, but the call waits that long to take it back on return.
        with Spinner():
            record("D2H", "hostcopy, a GIL-busy thread", timed(lambda: hostcopy.copy_to_host(host, device), args.repeat, sync=False))
        interval = sys.getswitchinterval()
        sys.setswitchinterval(0.0005)
        try:
            with Spinner():
                record("D2H", "... with a 0.5 ms switch interval", timed(lambda: hostcopy.copy_to_host(host, device), args.repeat, sync=False))
        finally:
            sys.setswitchinterval(interval)

        target = torch.zeros(n, dtype=torch.uint8, device="cuda")
        pinned.copy_(torch.from_numpy(expected))
        record("H2D", "pinned (link)", timed(lambda: target.copy_(pinned, non_blocking=True), args.repeat))
        hostcopy.copy_to_device(target, expected)
        assert torch.equal(target.cpu(), torch.from_numpy(expected)), "hostcopy H2D differs"
        record("H2D", "hostcopy", timed(lambda: hostcopy.copy_to_device(target, expected), args.repeat, sync=False))
        source = torch.from_numpy(expected)
        record("H2D", "torch t.copy_(from_numpy)", timed(lambda: target.copy_(source), args.repeat))
        if cupy is not None:
            array = cupy.asarray(target)
            record("H2D", "cupy set()", timed(lambda: array.set(expected), args.repeat))
        for (direction, path), rate in results.items():
            link = results[(direction, "pinned (link)")]
            rows.append((size_mib, direction, path, rate, rate / link))
        del device, pinned, out, target
        torch.cuda.empty_cache()

    # Ratios the targets name.
    summary = per_call(args.calls, args.repeat)
    summary += call_parts(args.calls, args.repeat)
    if args.return_gib > 0:
        summary += non_blocking_return(args.return_gib, args.repeat)
    for size_mib in args.sizes_mib:
        get = {(d, p): r for s, d, p, r, _ in rows if s == size_mib}
        if ("D2H", "torch out.copy_") in get:
            summary.append(f"{size_mib} MiB D2H hostcopy / torch out.copy_: {get[('D2H', 'hostcopy')] / get[('D2H', 'torch out.copy_')]:.2f}x")
        for path in ("hostcopy, a GIL-busy thread", "... with a 0.5 ms switch interval"):
            summary.append(f"{size_mib} MiB D2H {path}: costs {100 * (1 - get[('D2H', path)] / get[('D2H', 'hostcopy')]):.1f}%")
    if args.csv:
        with open(args.csv, "w") as csv:
            csv.write("size_mib,direction,path,gb_s,of_link\n")
            for row in rows:
                csv.write("%d,%s,%s,%.2f,%.3f\n" % row)
    print()
    print(f"{'size':>6} {'dir':4} {'path':32} {'GB/s':>7} {'of link':>8}")
    for size_mib, direction, path, rate, share in rows:
        print(f"{size_mib:>5}M {direction:4} {path:32} {rate:7.1f} {100 * share:7.0f}%")
    for line in summary:
        print(line)


if __name__ == "__main__":
    main()
