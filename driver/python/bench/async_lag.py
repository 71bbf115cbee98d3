"""Event-loop lag and throughput of transfers driven from asyncio, in one
process, on one GPU: ``await transfer`` beside the same transfers done with
blocking calls in a thread executor and with ``done()`` polled every
millisecond.

Four tasks, each with its own size (64, 256, 512 and 1024 MiB by default:
--sizes-mib), copy in a loop for --seconds (default 3) per run, alternating
directions: device to host into a pre-faulted numpy array, then that array
back to a second torch tensor. All go through the device's default stager
(the one-call functions'). Meanwhile a heartbeat task sleeps 1 ms at a
time and records how late it wakes (the loop's lag). Each run prints the
aggregate GB/s and the heartbeat's p99 and max lag; every mode runs under
asyncio, and under uvloop if it is importable (reported skipped
otherwise). Every task's round trip is checked byte-exact once, by await,
before the timed runs.

A ``blocking=False`` call made on the loop's thread queues every chunk
before it returns (so that work queued on the stream after it waits only
for work already queued: see docs/python.md): the ``await`` mode runs
--runs times (default 3) per loop, each run printing its longest start
call (what the call held the loop for) and its lag. The start call alone,
the stager idle, is timed by size too.

Targets, printed beside: with ``await``, max lag <= 2 ms in every run;
throughput >= the blocking calls' in the executor. The longest start call
is printed beside 0.2 ms, a target the call meets only for transfers of
up to about 64 MiB (about 9 us a chunk).
"""

import argparse
import asyncio
import concurrent.futures
import gc
import statistics
import sys
import time
from typing import Any

import numpy as np
import torch

import hostcopy
import hostcopy._staging

MiB = 1 << 20
HEARTBEAT = 0.001
POLL = 0.001


class Side:
    """One task's memory: a device pattern, a second device tensor that
    uploads land in, and a pre-faulted pageable numpy array."""

    def __init__(self, nbytes: int, seed: int) -> None:
        index = torch.arange(nbytes, dtype=torch.int32, device="cuda")
        self.device = ((index * 1103515245 + seed) >> 13).to(torch.uint8)
        del index
        self.upload = torch.empty_like(self.device)
        self.host = np.ones(nbytes, np.uint8)
        self.nbytes = nbytes


async def round_trip_checked(side: Side) -> None:
    await copies.copy_to_host(side.host, side.device, blocking=False)
    side.upload.zero_()
    await copies.copy_to_device(side.upload, side.host, blocking=False)
    torch.cuda.synchronize()
    if not torch.equal(side.upload, side.device):
        raise AssertionError(f"{side.nbytes >> 20} MiB round trip by await differs")


#: The longest pause of the garbage collector in the current run: a
#: collection runs on the loop's thread, and a full one walks every object
#: torch made.
gc_pause = {"longest": 0.0, "began": 0.0}


def on_gc(phase: str, info: dict) -> None:
    now = time.perf_counter()
    if phase == "start":
        gc_pause["began"] = now
    else:
        gc_pause["longest"] = max(gc_pause["longest"], now - gc_pause["began"])


#: What the tasks copy through: the module's functions (the default
#: stager), or a ``Stager`` of ``--workers`` copy threads.
copies: Any = hostcopy


#: How long each start (the synchronous call that returns the Transfer)
#: held the loop, in the current run: the part of the lag that is
#: hostcopy's own.
starts: list = []


def started(mode: str, start: float) -> None:
    starts.append(time.perf_counter() - start)


async def by_await(side: Side, d2h: bool) -> None:
    start = time.perf_counter()
    if d2h:
        transfer = copies.copy_to_host(side.host, side.device, blocking=False)
    else:
        transfer = copies.copy_to_device(side.upload, side.host, blocking=False)
    started("await", start)
    await transfer


def executor_mode(pool: concurrent.futures.Executor):
    async def by_executor(side: Side, d2h: bool) -> None:
        loop = asyncio.get_running_loop()
        if d2h:
            await loop.run_in_executor(pool, copies.copy_to_host, side.host, side.device)
        else:
            await loop.run_in_executor(pool, copies.copy_to_device, side.upload, side.host)

    return by_executor


async def by_polling(side: Side, d2h: bool) -> None:
    start = time.perf_counter()
    if d2h:
        transfer = copies.copy_to_host(side.host, side.device, blocking=False)
    else:
        transfer = copies.copy_to_device(side.upload, side.host, blocking=False)
    started("poll", start)
    while not transfer.done():
        await asyncio.sleep(POLL)
    transfer.wait()  # done: lets go of the arrays at once


async def measure(sides: list, copy, seconds: float) -> tuple:
    """(GB/s, p99 lag s, max lag s, lags over 2 ms, beats, longest gc pause
    s, longest start call s or nan) of the four tasks copying with `copy`."""
    stop = False
    starts.clear()
    moved = 0
    lags = []

    async def heartbeat() -> None:
        while not stop:
            before = time.perf_counter()
            await asyncio.sleep(HEARTBEAT)
            lags.append(time.perf_counter() - before - HEARTBEAT)

    async def worker(side: Side) -> None:
        nonlocal moved
        d2h = True
        while not stop:
            await copy(side, d2h)
            moved += side.nbytes
            d2h = not d2h

    gc_pause["longest"] = 0.0
    beat = asyncio.ensure_future(heartbeat())
    await asyncio.sleep(0.01)
    started = time.perf_counter()
    workers = [asyncio.ensure_future(worker(side)) for side in sides]
    await asyncio.sleep(seconds)
    stop = True
    await asyncio.gather(*workers)
    elapsed = time.perf_counter() - started
    await beat
    lags.sort()
    p99 = lags[min(len(lags) - 1, int(0.99 * len(lags)))] if lags else float("nan")
    late = sum(1 for lag in lags if lag > 0.002)
    longest_start = max(starts) if starts else float("nan")
    return (
        moved / elapsed / 1e9,
        p99,
        (lags[-1] if lags else float("nan")),
        late,
        len(lags),
        gc_pause["longest"],
        longest_start,
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes-mib", type=int, nargs=4, default=[64, 256, 512, 1024])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--runs", type=int, default=3, help="runs of the await mode per loop")
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="copy through a Stager of this many workers (default: the default stager's, cores - 4)",
    )
    args = parser.parse_args()
    print(f"{torch.cuda.get_device_name(0)}, hostcopy {hostcopy.__version__}, torch {torch.__version__}, python {sys.version.split()[0]}")
    sides = [Side(size * MiB, seed) for seed, size in enumerate(args.sizes_mib)]
    global copies
    if args.workers is not None:
        copies = hostcopy.Stager(0, workers=args.workers)
    print(f"copy workers: {copies.options['workers'] if args.workers is not None else 'those of the default stager'}")
    loops = {"asyncio": asyncio.new_event_loop}
    try:
        import uvloop

        loops["uvloop"] = uvloop.new_event_loop
    except ImportError as missing:
        print(f"uvloop: skipped ({missing})")
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=len(sides))
    gc.callbacks.append(on_gc)

    async def idle(side: Side, d2h: bool) -> None:
        await asyncio.sleep(0.01)  # the loop's own lag: no transfer at all

    async def by_await_gc_frozen(side: Side, d2h: bool) -> None:
        await by_await(side, d2h)

    modes = {
        "idle (no transfer)": (idle, 1),
        "await": (by_await, args.runs),
        # What a server does once its models are loaded: gc.freeze() moves
        # every object made so far out of the collector's reach.
        "await, gc.freeze()": (by_await_gc_frozen, 1),
        "blocking in executor": (executor_mode(pool), 1),
        "poll done() 1 ms": (by_polling, 1),
    }
    results = {}
    for loop_name, new_loop in loops.items():
        loop = new_loop()
        try:
            for side in sides:
                loop.run_until_complete(round_trip_checked(side))
            for mode, (copy, runs) in modes.items():
                for run in range(1, runs + 1):
                    if copy is by_await_gc_frozen:
                        gc.collect()
                        gc.freeze()
                    try:
                        results[(loop_name, mode, run)] = loop.run_until_complete(measure(sides, copy, args.seconds))
                    finally:
                        gc.unfreeze()
        finally:
            loop.close()
    pool.shutdown()
    # The start call alone, the stager idle: what a blocking=False call
    # holds the loop for, by size.
    chunk = copies.options["chunk"] if isinstance(copies, hostcopy.Stager) else 16 * MiB

    async def start_calls(side: Side) -> list:
        took = []
        for _ in range(9):
            start = time.perf_counter()
            transfer = copies.copy_to_host(side.host, side.device, blocking=False)
            took.append(time.perf_counter() - start)
            await transfer
        return sorted(took)

    print("\nstart call of copy_to_host(blocking=False) on an asyncio loop, stager idle, 9 calls")
    print(f"  {'size':>9} {'chunks':>6} {'median':>9} {'longest':>9} {'per chunk':>10}")
    for side in sides:
        took = asyncio.run(start_calls(side))
        chunks = -(-side.nbytes // chunk)
        print(
            f"  {side.nbytes >> 20:5d} MiB {chunks:6d} {took[4] * 1e3:6.3f} ms {took[-1] * 1e3:6.3f} ms"
            f" {took[4] / chunks * 1e6:7.1f} us"
        )
    print(f"\nfour tasks, {', '.join(map(str, args.sizes_mib))} MiB, both directions, {args.seconds:g} s a run; heartbeat {HEARTBEAT * 1e3:g} ms")
    print(
        f"{'loop':8} {'mode':25} {'run':>3} {'GB/s':>7} {'p99 lag ms':>11} {'max lag ms':>11} "
        f"{'beats > 2 ms':>15} {'max gc ms':>10} {'longest start ms':>17}"
    )
    for (loop_name, mode, run), (rate, p99, worst, late, beats, pause, longest) in results.items():
        shown = "-" if mode.startswith("idle") else f"{rate:.1f}"
        start_shown = "-" if longest != longest else f"{longest * 1e3:.3f}"
        print(
            f"{loop_name:8} {mode:25} {run:>3} {shown:>7} {p99 * 1e3:11.3f} {worst * 1e3:11.3f} "
            f"{late:>6} of {beats:<6} {pause * 1e3:10.3f} {start_shown:>17}"
        )
    for loop_name in loops:
        runs = [results[(loop_name, "await", run)] for run in range(1, args.runs + 1)]
        lags = [r[2] for r in runs]
        longest = [r[6] for r in runs]
        frozen = results[(loop_name, "await, gc.freeze()", 1)]
        blocking = results[(loop_name, "blocking in executor", 1)][0]
        polled = results[(loop_name, "poll done() 1 ms", 1)][0]
        rate = statistics.mean(r[0] for r in runs)
        print(
            f"{loop_name}: await, {args.runs} runs: max lag {', '.join(f'{lag * 1e3:.3f}' for lag in lags)} ms "
            f"(target <= 2 in every run: {'met' if max(lags) <= 0.002 else 'missed'}); longest start call "
            f"{', '.join(f'{t * 1e3:.3f}' for t in longest)} ms (0.2: {'met' if max(longest) <= 0.0002 else 'missed'}); "
            f"await / blocking in executor {rate / blocking:.2f}x (target >= 1.00), await / polling {rate / polled:.2f}x; "
            f"with gc.freeze() max lag {frozen[2] * 1e3:.3f} ms, {frozen[0] / blocking:.2f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
