"""Where a decoded token's time goes with HostOffloadedCache: the offload
benchmark's model (8 layers, a 4,096-token prompt), decoded by hand one
token a step (synchronized), ms a decoded token (median of STEPS steps,
median over ROUNDS rounds, the kinds shuffled between rounds):

- DynamicCache alone;
- DynamicCache plus, before each decoder layer, one upload of 16 MiB
  (16 blocks of 1 MiB, as HostOffloadedCache's one layer) started
  blocking=False on a side stream two layers ahead, into a new device
  buffer, the transfer of two layers before waited for on the host:
  (a) the compute stream not waiting for it, (b) waiting for its event
  before the layer, (c) as (b) with one 16 MiB range, (d) as (b) with
  torch's copy_ from pinned memory;
- HostOffloadedCache; transformers' offloaded cache.

(a) - DynamicCache: what the calls and the engine cost the launching
thread and the GPU without any dependency; (b) - (a): the compute
stream waiting for uploads; HostOffloadedCache - (b): the cache's own
Python. With the argument ``more``: (b) with a stager of 1 and of 4
copy workers, and the launching thread kept busy 150 and 50 us a layer
with no upload (what its time costs the token). With ``stagers`` (five
rounds): (b) on stagers with streaming stores, 4 MiB chunks, 4 workers
with streaming stores, 6 workers, and the 150 us busy thread. Run from the repository
root with the bundle's wheel installed.
"""
import collections
import random
import statistics
import sys
import time

import numpy as np
import torch
import transformers

sys.path.insert(0, "driver/python/bench")
import hostcopy  # noqa: E402
import hostcopy.offload.transformers  # noqa: E402
from hostcopy.offload._torch import device_range  # noqa: E402
from offload_loop import config  # noqa: E402

STEPS, PROMPT = 24, 4096
ROUNDS = 5 if len(sys.argv) > 1 and sys.argv[1] == "stagers" else 3
MiB = 1 << 20


class Uploads:
    """Forward pre-hooks: one 16 MiB upload a layer, two layers ahead."""

    def __init__(self, layers, mode, stager=None, spin_us=0):
        self.mode = mode
        self.stager = stager
        self.spin_us = spin_us
        self.side = torch.cuda.Stream()
        n = len(layers)
        if mode == "pinned":
            self.hosts = [torch.empty(16 * MiB, dtype=torch.uint8, pin_memory=True) for _ in range(n)]
        else:
            self.hosts = [hostcopy.empty(32 * MiB, dtype=np.uint8) for _ in range(n)]  # capacity twice the positions
            for h in self.hosts:
                h[:] = 1
        blocks = np.empty((16, 3), dtype=np.int64)
        blocks[:, 0] = np.arange(16) * MiB
        blocks[:, 1] = np.arange(16) * 2 * MiB
        blocks[:, 2] = MiB
        self.blocks = blocks
        self.pending = {}
        self.held = collections.deque()
        self.n = n
        self.handles = [layer.register_forward_pre_hook(lambda m, a, i=i: self.before(i)) for i, layer in enumerate(layers)]

    def start(self, i):
        if self.mode == "spin":  # the launching thread busy for spin_us, no upload
            end = time.perf_counter() + self.spin_us * 1e-6
            while time.perf_counter() < end:
                pass
            self.pending[i] = (torch.empty(0, device="cuda"), None, torch.cuda.Event())
            return
        with torch.cuda.stream(self.side):
            buffer = torch.empty(16 * MiB, dtype=torch.uint8, device="cuda")
        if self.mode == "pinned":
            with torch.cuda.stream(self.side):
                buffer.copy_(self.hosts[i], non_blocking=True)
            transfer = None
        elif self.mode == "range":
            transfer = hostcopy.copy_to_device(device_range(buffer), self.hosts[i], 16 * MiB, stream=self.side, blocking=False)
        elif self.stager is not None:
            transfer = self.stager.copy_blocks_to_device(device_range(buffer), self.hosts[i], self.blocks, stream=self.side, blocking=False)
        else:
            transfer = hostcopy.copy_blocks_to_device(device_range(buffer), self.hosts[i], self.blocks, stream=self.side, blocking=False)
        ready = torch.cuda.Event()
        ready.record(self.side)
        self.pending[i] = (buffer, transfer, ready)

    def before(self, i):
        if i not in self.pending:
            self.start(i)
        buffer, transfer, ready = self.pending.pop(i)
        if self.mode not in ("nowait", "spin"):
            torch.cuda.current_stream().wait_event(ready)
        buffer.record_stream(torch.cuda.current_stream())
        self.held.append(transfer)
        while len(self.held) > 2:
            t = self.held.popleft()
            if t is not None:
                t.wait()
        self.start((i + 2) % self.n)

    def remove(self):
        for h in self.handles:
            h.remove()
        for _, t, _ in self.pending.values():
            if t is not None:
                t.wait()
        for t in self.held:
            if t is not None:
                t.wait()
        torch.cuda.synchronize()


def decode_ms(model, prompt, cache):
    with torch.inference_mode():
        out = model(prompt, past_key_values=cache, use_cache=True)
        tok = out.logits[:, -1:].argmax(-1)
        times = []
        for _ in range(STEPS + 2):
            torch.cuda.synchronize()
            start = time.perf_counter()
            out = model(tok, past_key_values=cache, use_cache=True)
            tok = out.logits[:, -1:].argmax(-1)
            torch.cuda.synchronize()
            times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times[2:])


def main():
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = transformers.LlamaForCausalLM(config()).to(torch.bfloat16).eval()
    layers = model.model.layers
    prompt = torch.randint(0, 1024, (1, PROMPT), device="cuda")
    cfg = model.config

    def with_uploads(mode, **options):
        def run():
            hooks = Uploads(layers, mode, **options)
            try:
                return decode_ms(model, prompt, transformers.DynamicCache(config=cfg))
            finally:
                hooks.remove()
        return run

    kinds = {
        "DynamicCache": lambda: decode_ms(model, prompt, transformers.DynamicCache(config=cfg)),
        "(a) + hostcopy blocks, no wait": with_uploads("nowait"),
        "(b) + hostcopy blocks, waited": with_uploads("blocks"),
        "(c) + hostcopy range, waited": with_uploads("range"),
        "(d) + pinned copy_, waited": with_uploads("pinned"),
        **({} if len(sys.argv) < 2 or sys.argv[1] != "stagers" else {
            "(i) + hostcopy blocks, waited, streaming stores": with_uploads("blocks", stager=hostcopy.Stager(0, h2d_streaming=True)),
            "(j) + hostcopy blocks, waited, 4 MiB chunks": with_uploads("blocks", stager=hostcopy.Stager(0, chunk=4 << 20)),
            "(k) + hostcopy blocks, waited, 4 workers, streaming": with_uploads("blocks", stager=hostcopy.Stager(0, workers=4, h2d_streaming=True)),
            "(l) + hostcopy blocks, waited, 6 workers": with_uploads("blocks", stager=hostcopy.Stager(0, workers=6)),
            "(g) + launching thread busy 150 us a layer": with_uploads("spin", spin_us=150),
        }),
        **({} if len(sys.argv) < 2 or sys.argv[1] != "more" else {
            "(e) + hostcopy blocks, waited, 1 worker": with_uploads("blocks", stager=hostcopy.Stager(0, workers=1)),
            "(f) + hostcopy blocks, waited, 4 workers": with_uploads("blocks", stager=hostcopy.Stager(0, workers=4)),
            "(g) + launching thread busy 150 us a layer": with_uploads("spin", spin_us=150),
            "(h) + launching thread busy 50 us a layer": with_uploads("spin", spin_us=50),
        }),
        "HostOffloadedCache": lambda: decode_ms(model, prompt, hostcopy.offload.transformers.HostOffloadedCache(config=cfg)),
        "transformers offloaded": lambda: decode_ms(model, prompt, transformers.DynamicCache(config=cfg, offloading=True)),
    }
    for kind in kinds:
        kinds[kind]()  # warm-up
    results = {k: [] for k in kinds}
    order = list(kinds)
    shuffle = random.Random(0).shuffle
    for r in range(ROUNDS):
        if r:
            shuffle(order)
        for kind in order:
            results[kind].append(kinds[kind]())
        print(f"round {r + 1}: " + ", ".join(f"{k} {results[k][-1]:.2f}" for k in order), flush=True)
    base = statistics.median(results["DynamicCache"])
    print("\n| kind | ms a decoded token | - DynamicCache |")
    print("| --- | ---: | ---: |")
    for kind, values in results.items():
        m = statistics.median(values)
        print(f"| {kind} | {m:.2f} | {m - base:+.2f} |")


if __name__ == "__main__":
    main()
