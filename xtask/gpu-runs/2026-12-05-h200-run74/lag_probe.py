"""Four tasks awaiting transfers on one loop, alternating directions, for
3 s: prints 'ok N' or hangs. argv: later|now legacy|own both|d2h|h2d TASKS"""
import asyncio, sys, time
import numpy as np, torch, hostcopy
mode, where, dirs, tasks = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
if mode == "now":
    hostcopy._staging._on_event_loop = lambda: False
MiB = 1 << 20
sizes = [64, 256, 512, 1024][:tasks]
sides = [(torch.ones(n * MiB, dtype=torch.uint8, device="cuda"), torch.zeros(n * MiB, dtype=torch.uint8, device="cuda"), np.ones(n * MiB, np.uint8)) for n in sizes]
streams = [torch.cuda.Stream() if where == "own" else None for _ in sizes]
stop, moved = False, 0
async def worker(i):
    global moved
    src, dst, host = sides[i]
    d2h = dirs != "h2d"
    while not stop:
        if d2h:
            t = hostcopy.copy_to_host(host, src, stream=streams[i], blocking=False)
        else:
            t = hostcopy.copy_to_device(dst, host, stream=streams[i], blocking=False)
        await t
        moved += 1
        if dirs == "both":
            d2h = not d2h
async def main():
    global stop
    ws = [asyncio.ensure_future(worker(i)) for i in range(len(sizes))]
    await asyncio.sleep(3)
    stop = True
    await asyncio.gather(*ws)
asyncio.run(main())
print("ok", moved, flush=True)
