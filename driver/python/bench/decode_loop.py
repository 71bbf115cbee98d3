"""A decode-like loop by hand, side by side in one process on one GPU: one
Python thread launches each layer's kernels on a compute stream and starts
a 16 MiB upload a layer, two layers ahead, on a side stream; what the
uploads add to the time of a token, hostcopy's against torch's pinned
copies.

The loop: --layers layers (default 32). Layer ``i`` of a token, on the
compute stream: a layer norm, a chain of --matmuls (default 4)
``[1, H] x [H, H]`` bf16 matmuls (H = --hidden, default 4096; each layer
its own weights, resident on the GPU), then an attention-like read of the
layer's 16 MiB (--upload-mib) device buffer as ``[R, H]`` bf16 rows
(``softmax(x @ kv.T) @ kv``, added to ``x``). After issuing layer ``i``'s
kernels the thread starts the upload of layer ``i + 2``'s host bytes
(wrapping into the next token) into a ring of --slots (default 4) device
buffers; the side stream first waits for the compute that last read the
slot, and the compute stream waits for the upload's ready event just
before the layer that reads it. Every token ends with a device
synchronize (a decode step needs its token on the host).

Kinds (each layer's host bytes the same in all, 16 MiB a layer, distinct
per layer):

- ``none``: compute alone, each layer reading a resident device copy of
  its bytes (the baseline; the same kernels as every other kind);
- ``torch pinned``: host bytes in pinned torch tensors,
  ``slot.copy_(host, non_blocking=True)`` on the side stream, an event
  recorded there, the compute stream waiting for it;
- ``hostcopy``: host bytes in one ``hostcopy.empty`` pool (pageable,
  nothing pinned), ``hostcopy.copy_to_device(slot, host, stream=side,
  blocking=False)``: hostcopy makes work queued on ``side`` after the call
  wait for the copy, so an event recorded there after it orders the
  compute stream after the bytes; the slot is given as
  ``__cuda_array_interface__`` with no stream, so that the upload is
  ordered after ``side`` alone (a torch tensor through DLPack would also
  order it after torch's current stream, the compute stream, and so after
  the layer being launched). A slot's previous ``Transfer`` is waited for
  before the slot takes the next upload (the offloader's ring does the
  same);
- ``hostcopy registered``: as ``hostcopy``, the pool made with
  ``hostcopy.empty(..., register="now")``: registered with the driver
  before the rounds, so every upload is one direct driver copy (no
  staging, no CPU copy, no copy worker woken); what registered uploads
  add a token, beside torch's pinned copies;
- ``torch pageable``: ``copy_(non_blocking=True)`` from ordinary CPU
  tensors (the driver stages it, blocking the thread), for context;
- ``hostcopy/VARIANT`` (``--stagers``): ``hostcopy`` through a
  ``hostcopy.Stager`` of its own, made with the options VARIANT names:
  ``w4`` 4 copy workers, ``c4`` chunks of 4 MiB, ``b8`` 8 staging
  buffers, ``s`` streaming stores, ``k`` cached stores (for every
  upload; the default chooses per upload), ``r`` the pool registered
  (``register="now"``), together as in ``w4c4`` or ``w4r``.

Each kind runs --warmup tokens (default 4) then --tokens timed tokens
(default 64) per round, over --rounds rounds (default 5) whose order turns
(round ``r`` starts at kind ``r``, every other set of rounds backwards).
Reported: ms a token (median over rounds of each round's median token),
the ms an upload kind adds over ``none`` (median over rounds of the
difference within the round), the ms the thread took to issue a token,
and the ratios hostcopy added / torch pinned added (target <= 1.2) and
hostcopy registered added / torch pinned added. Then, for context, the
uploads alone (no compute) for pinned and the hostcopy kinds: a token of
uploads against compute alone says whether the loop is bound by the link
or by compute.

Checked every round: each ring slot's bytes equal the host bytes of the
layer last uploaded into it, and the last token's output equals
``none``'s bit for bit (a layer reading its slot before the upload landed
would differ). A wrong byte or output exits 1.

Usage: python driver/python/bench/decode_loop.py [--quick] [--layers N]
[--tokens N] [--rounds N] [--warmup N] [--hidden H] [--matmuls N]
[--upload-mib N] [--slots N] [--kinds none,pinned,hostcopy,registered,pageable]
[--stagers VARIANT,...] [--csv PATH]
"""

from __future__ import annotations

import argparse
import gc
import re
import statistics
import sys
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

MiB = 1 << 20
NAME = "decode_loop"


def _missing() -> List[str]:
    """What this benchmark needs and cannot import, one phrase each."""
    missing = []
    for module, why in (("numpy", "numpy"), ("torch", "torch"), ("hostcopy", "hostcopy (the wheel)")):
        try:
            __import__(module)
        except ImportError as error:
            missing.append(f"{why} is not installed ({error})")
    return missing


if __name__ == "__main__":
    _absent = _missing()
    if _absent:
        print(f"{NAME}: skipped: {'; '.join(_absent)}")
        sys.exit(0)

import numpy as np  # noqa: E402
import torch  # noqa: E402

import hostcopy  # noqa: E402

KINDS: Dict[str, str] = {
    "none": "none (compute alone)",
    "pinned": "torch pinned",
    "hostcopy": "hostcopy",
    "registered": "hostcopy registered",
    "pageable": "torch pageable",
}


class DeviceBytes:
    """``nbytes`` bytes of device memory at ``ptr`` as
    ``__cuda_array_interface__`` with no stream: hostcopy orders a copy
    into it after the ``stream=`` it is given and nothing else (a torch
    tensor passed through DLPack would also be ordered after torch's
    current stream). Keeps ``owner`` alive."""

    def __init__(self, tensor: Any) -> None:
        self.owner = tensor
        self.ptr = int(tensor.data_ptr())
        self.nbytes = int(tensor.numel() * tensor.element_size())

    @property
    def __cuda_array_interface__(self) -> Dict[str, Any]:
        return {
            "shape": (self.nbytes,),
            "typestr": "|u1",
            "data": (self.ptr, False),
            "version": 3,
            "strides": None,
            "stream": None,
        }


class Model:
    """The layers' weights (resident), their reference bytes on the GPU
    (what ``none`` reads, and what every slot is checked against), and the
    layer's kernels."""

    def __init__(self, layers: int, hidden: int, matmuls: int, upload_bytes: int) -> None:
        if upload_bytes % (2 * hidden):
            raise SystemExit(f"{NAME}: --upload-mib must hold whole bf16 rows of --hidden {hidden}")
        self.layers, self.hidden, self.upload_bytes = layers, hidden, upload_bytes
        self.rows = upload_bytes // (2 * hidden)
        generator = torch.Generator(device="cuda").manual_seed(0)
        scale = hidden ** -0.5
        self.weights = [
            [torch.randn(hidden, hidden, device="cuda", dtype=torch.bfloat16, generator=generator) * scale for _ in range(matmuls)]
            for _ in range(layers)
        ]
        # Each layer's uploaded bytes: valid bf16 values, distinct per layer.
        self.reference = [
            (torch.randn(self.rows, hidden, device="cuda", dtype=torch.bfloat16, generator=generator) * 0.5)
            .view(-1)
            .view(torch.uint8)
            for _ in range(layers)
        ]
        self.x0 = torch.randn(1, hidden, device="cuda", dtype=torch.bfloat16, generator=generator)
        self.attn_scale = hidden ** -0.5
        torch.cuda.synchronize()

    def layer(self, i: int, x: Any, data: Any) -> Any:
        """Layer ``i``'s kernels on the current stream; ``data`` its bytes
        on the GPU (uint8, ``upload_bytes``)."""
        x = torch.nn.functional.layer_norm(x, (self.hidden,))
        for w in self.weights[i]:
            x = x @ w
        kv = data.view(torch.bfloat16).view(self.rows, self.hidden)
        p = torch.softmax((x @ kv.t()) * self.attn_scale, dim=-1)
        return x + p @ kv


class Uploader:
    """One kind's uploads: host bytes per layer, a ring of device slots, a
    side stream, and per slot a ready event (on the side stream after the
    upload) and a free event (on the compute stream after the layer that
    read it)."""

    def __init__(self, kind: str, model: Model, compute: Any, slots: int) -> None:
        self.kind, self.model, self.compute = kind, model, compute
        n = model.upload_bytes
        self.side = torch.cuda.Stream()
        self.hosts: List[Any] = []
        self.pool: Optional[Any] = None
        self.stager: Optional[Any] = None
        if kind == "pinned":
            for ref in model.reference:
                host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
                host.copy_(ref)
                self.hosts.append(host)
        elif kind == "pageable":
            for ref in model.reference:
                host = torch.empty(n, dtype=torch.uint8)
                host.copy_(ref)
                self.hosts.append(host)
        elif is_hostcopy(kind):
            self.stager = stager_of(kind)
            self.pool = hostcopy.empty((model.layers, n), dtype=np.uint8, register=register_of(kind))
            told = hostcopy.registration(self.pool)
            if register_of(kind) == "now" and not told.complete:
                print(f"{NAME}: {KINDS[kind]}: registered {told.registered} of {told.nbytes} bytes "
                      f"(refused: {told.refused}); the rest is staged", flush=True)
            for i, ref in enumerate(model.reference):
                torch.from_numpy(self.pool[i]).copy_(ref)
                self.hosts.append(self.pool[i])
        else:
            raise ValueError(kind)
        self.slots = [torch.empty(n, dtype=torch.uint8, device="cuda") for _ in range(slots)]
        self.targets = [DeviceBytes(slot) for slot in self.slots]
        self.ready = [torch.cuda.Event() for _ in range(slots)]
        self.free = [torch.cuda.Event() for _ in range(slots)]
        self.freed = [False] * slots
        self.transfers: List[Any] = [None] * slots
        self.holds: List[Optional[int]] = [None] * slots
        torch.cuda.synchronize()

    def reset(self) -> None:
        """Every transfer waited for; no slot waits for a free event."""
        self.finish()
        self.freed = [False] * len(self.slots)
        self.holds = [None] * len(self.slots)

    def start(self, g: int) -> None:
        """Starts the upload of step ``g``'s layer into slot ``g % slots``."""
        s = g % len(self.slots)
        layer = g % self.model.layers
        if self.freed[s]:
            self.side.wait_event(self.free[s])
        previous = self.transfers[s]
        if previous is not None:
            self.transfers[s] = None
            previous.wait()
        if is_hostcopy(self.kind):
            self.transfers[s] = (self.stager or hostcopy).copy_to_device(
                self.targets[s], self.hosts[layer], self.model.upload_bytes, stream=self.side, blocking=False
            )
        else:
            with torch.cuda.stream(self.side):
                self.slots[s].copy_(self.hosts[layer], non_blocking=True)
        self.ready[s].record(self.side)
        self.holds[s] = layer

    def enter(self, g: int) -> Any:
        """The compute stream waits for step ``g``'s upload; its slot."""
        s = g % len(self.slots)
        self.compute.wait_event(self.ready[s])
        return self.slots[s]

    def leave(self, g: int) -> None:
        s = g % len(self.slots)
        self.free[s].record(self.compute)
        self.freed[s] = True

    def finish(self) -> None:
        for s, transfer in enumerate(self.transfers):
            if transfer is not None:
                self.transfers[s] = None
                transfer.wait()
        torch.cuda.synchronize()

    def bytes_equal(self) -> Tuple[bool, int]:
        """Whether every slot holds the bytes of the layer last uploaded
        into it (after ``finish``); the slots checked."""
        checked, equal = 0, True
        for slot, layer in zip(self.slots, self.holds):
            if layer is not None:
                checked += 1
                equal = equal and bool(torch.equal(slot, self.model.reference[layer]))
        return equal, checked


AHEAD = 2


def is_hostcopy(kind: str) -> bool:
    return kind in ("hostcopy", "registered") or kind.startswith("hostcopy/")


def register_of(kind: str) -> str:
    """How the kind's pool is registered (``hostcopy.empty``'s
    ``register=``): ``"now"`` for ``registered`` and a variant with ``r``."""
    if kind == "registered":
        return "now"
    if kind.startswith("hostcopy/") and "r" in re.findall(r"[a-z]", kind.split("/", 1)[1]):
        return "now"
    return "never"


def stager_of(kind: str) -> Optional[Any]:
    """``hostcopy/VARIANT``'s own stager (None for ``hostcopy`` and
    ``registered``: the default one): ``w<N>`` workers, ``c<MiB>`` chunk,
    ``b<N>`` buffers, ``s`` streaming stores, ``k`` cached stores (each
    for every upload; neither: chosen per upload); ``r`` (the pool registered,
    ``register_of``) leaves the stager's options as they are."""
    if kind in ("hostcopy", "registered"):
        return None
    options: Dict[str, Any] = {}
    for part in re.findall(r"[a-z]\d*", kind.split("/", 1)[1]):
        key, value = part[0], part[1:]
        if key == "w" and value:
            options["workers"] = int(value)
        elif key == "c" and value:
            options["chunk"] = int(value) * MiB
        elif key == "b" and value:
            options["buffers"] = int(value)
        elif key == "s" and not value:
            options["h2d_streaming"] = True
        elif key == "k" and not value:
            options["h2d_streaming"] = False
        elif key == "r" and not value:
            pass  # the pool registered: register_of
        else:
            raise SystemExit(f"{NAME}: --stagers: unknown option {part!r} in {kind!r} (w<N>, c<MiB>, b<N>, s, k, r)")
    return hostcopy.Stager(0, **options)


class Runner:
    """Tokens of one kind: ``token()`` launches every layer (uploads two
    layers ahead, wrapping into the next token) and synchronizes."""

    def __init__(self, model: Model, compute: Any, uploader: Optional[Uploader]) -> None:
        self.model, self.compute, self.uploader = model, compute, uploader
        self.g = 0
        self.out: Any = None

    def begin(self) -> None:
        self.g = 0
        if self.uploader is not None:
            self.uploader.reset()
            with torch.cuda.stream(self.compute):
                for ahead in range(AHEAD):
                    self.uploader.start(ahead)

    def token(self, compute: bool = True) -> Tuple[float, float]:
        """One token: (ms until the last launch returned, ms until the GPU
        was done), from a synchronized start."""
        model, up = self.model, self.uploader
        torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.cuda.stream(self.compute):
            x = model.x0
            for i in range(model.layers):
                g = self.g
                if up is None:
                    data = model.reference[i]
                else:
                    data = up.enter(g)
                if compute:
                    x = model.layer(i, x, data)
                if up is not None:
                    up.leave(g)
                    up.start(g + AHEAD)
                self.g = g + 1
            self.out = x
        issued = time.perf_counter()
        torch.cuda.synchronize()
        done = time.perf_counter()
        return (issued - start) * 1e3, (done - start) * 1e3

    def end(self) -> None:
        if self.uploader is not None:
            self.uploader.finish()
        torch.cuda.synchronize()


class Result:
    def __init__(self) -> None:
        self.token_ms: List[float] = []  # per round: the median token
        self.issue_ms: List[float] = []  # per round: the median time to issue a token
        self.bytes_equal: List[bool] = []
        self.output_equal: List[bool] = []
        self.slots_checked = 0


def run_round(runner: Runner, tokens: int, warmup: int, compute: bool = True) -> Tuple[float, float]:
    """Median (token ms, issue ms) over ``tokens`` after ``warmup``."""
    gc.collect()
    runner.begin()
    times = [runner.token(compute) for _ in range(warmup + tokens)][warmup:]
    runner.end()
    return statistics.median(t for _, t in times), statistics.median(i for i, _ in times)


def stager_options(up: Optional[Uploader]) -> str:
    """The options of the default stager the hostcopy kind's uploads use
    (what ``copy_to_device`` picks for the slot's device)."""
    if up is None:
        return "-"
    try:
        return str(hostcopy._staging.default_stager_of(up.targets[0], "dst").options)
    except Exception as error:  # a private lookup: say why rather than stop
        return f"? ({type(error).__name__}: {error})"


def order_of(kinds: Sequence[str], round_: int) -> List[str]:
    """Round ``round_``'s order: it starts at kind ``round_ % len``, and
    every other set of ``len`` rounds runs backwards, so that each kind is
    first, last and beside each other kind as often over enough rounds."""
    turn = round_ % len(kinds)
    order = list(kinds[turn:]) + list(kinds[:turn])
    if (round_ // len(kinds)) % 2:
        order.reverse()
    return order


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="8 layers, 8 tokens, 2 rounds, 2 warm-up tokens (where not given)")
    parser.add_argument("--layers", type=int, default=None, help="layers a token (default 32)")
    parser.add_argument("--tokens", type=int, default=None, help="timed tokens a kind a round (default 64)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds, the kinds' order turning (default 5)")
    parser.add_argument("--warmup", type=int, default=None, help="untimed tokens before each kind's timed ones (default 4)")
    parser.add_argument("--hidden", type=int, default=4096, help="H of the [1, H] x [H, H] bf16 matmuls")
    parser.add_argument("--matmuls", type=int, default=4, help="matmuls a layer besides the read of its uploaded bytes")
    parser.add_argument("--upload-mib", type=int, default=16, help="MiB uploaded a layer")
    parser.add_argument("--slots", type=int, default=4, help="device buffers in the ring (at least 3)")
    parser.add_argument("--kinds", default="none,pinned,hostcopy,registered,pageable",
                        help="comma-separated, of: none, pinned (torch pinned), hostcopy (a hostcopy.empty pool, "
                             "staged), registered (hostcopy registered: the pool made with register=\"now\", "
                             "every upload direct), pageable (torch pageable); none is always run")
    parser.add_argument("--stagers", default="",
                        help="comma-separated hostcopy variants run beside the rest, each with a stager of its own: "
                             "w<N> workers, c<MiB> chunk, b<N> buffers, s streaming stores, k cached stores, r the pool registered "
                             "(register=\"now\") (e.g. w4,c4,w4c4,r,w4r)")
    parser.add_argument("--csv", help="write the rows to this CSV file")
    args = parser.parse_args()
    quick = {"layers": 8, "tokens": 8, "rounds": 2, "warmup": 2}
    full = {"layers": 32, "tokens": 64, "rounds": 5, "warmup": 4}
    for name, value in (quick if args.quick else full).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        parser.error(f"--kinds: unknown {unknown}; known: {', '.join(KINDS)}")
    args.kinds = ["none"] + [k for k in KINDS if k in kinds and k != "none"]
    for variant in [v.strip() for v in args.stagers.split(",") if v.strip()]:
        kind = f"hostcopy/{variant}"
        KINDS[kind] = kind
        args.kinds.append(kind)
    if args.slots < AHEAD + 1:
        parser.error(f"--slots must be at least {AHEAD + 1}")
    for name in ("layers", "tokens", "rounds", "matmuls", "upload_mib", "hidden"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.warmup < 0:
        parser.error("--warmup must be at least 0")
    return args


def main() -> int:
    args = parse()
    if not torch.cuda.is_available():
        print(f"{NAME}: skipped: no GPU (torch.cuda.is_available() is False)")
        return 0
    upload_bytes = args.upload_mib * MiB
    print(
        f"{NAME}: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, hostcopy {hostcopy.__version__}; "
        f"{args.layers} layers, {args.matmuls} x [1, {args.hidden}] x [{args.hidden}, {args.hidden}] bf16 matmuls "
        f"and a read of {args.upload_mib} MiB a layer, an upload a layer {AHEAD} layers ahead into a ring of "
        f"{args.slots}; {args.tokens} tokens after {args.warmup} warm-up, {args.rounds} rounds",
        flush=True,
    )
    try:
        model = Model(args.layers, args.hidden, args.matmuls, upload_bytes)
    except torch.cuda.OutOfMemoryError as error:
        print(f"{NAME}: skipped: the model does not fit on the GPU ({error})")
        return 0
    compute = torch.cuda.Stream()
    build = time.perf_counter()
    uploaders: Dict[str, Uploader] = {k: Uploader(k, model, compute, args.slots) for k in args.kinds if k != "none"}
    print(f"host bytes: {args.layers} x {args.upload_mib} MiB per kind, made in {time.perf_counter() - build:.1f} s; "
          f"hostcopy's default stager: {stager_options(uploaders.get('hostcopy'))}", flush=True)
    runners: Dict[str, Runner] = {k: Runner(model, compute, uploaders.get(k)) for k in args.kinds}
    results: Dict[str, Result] = {k: Result() for k in args.kinds}

    with torch.inference_mode():
        # Warm-up of every kind once (allocator, cuBLAS handles, hostcopy's stager and threads).
        for kind in args.kinds:
            run_round(runners[kind], 1, max(1, args.warmup))
        for round_ in range(args.rounds):
            order = order_of(args.kinds, round_)
            for kind in order:
                token_ms, issue_ms = run_round(runners[kind], args.tokens, args.warmup)
                result = results[kind]
                result.token_ms.append(token_ms)
                result.issue_ms.append(issue_ms)
                up = uploaders.get(kind)
                if up is not None:
                    equal, checked = up.bytes_equal()
                    result.bytes_equal.append(equal)
                    result.slots_checked += checked
            # The last token's output, every kind against none (the same kernels on the same bytes).
            reference_out = runners["none"].out
            for kind in args.kinds:
                if kind != "none":
                    results[kind].output_equal.append(bool(torch.equal(runners[kind].out, reference_out)))
            print(f"round {round_ + 1} ({', '.join(order)}): "
                  + ", ".join(f"{k} {results[k].token_ms[-1]:.2f}" for k in order) + " ms a token; issued in "
                  + ", ".join(f"{results[k].issue_ms[-1]:.2f}" for k in order) + " ms", flush=True)

        # For context: the uploads alone (no compute), a token of them.
        alone: Dict[str, float] = {}
        for kind in args.kinds:
            if kind == "pinned" or is_hostcopy(kind):
                alone[kind] = run_round(runners[kind], args.tokens, args.warmup, compute=False)[0]
                up = uploaders[kind]
                equal, checked = up.bytes_equal()
                results[kind].bytes_equal.append(equal)
                results[kind].slots_checked += checked

    none_ms = statistics.median(results["none"].token_ms)
    rows: List[Dict[str, Any]] = []
    for kind in args.kinds:
        result = results[kind]
        added = statistics.median(t - b for t, b in zip(result.token_ms, results["none"].token_ms))
        rows.append({
            "kind": kind,
            "label": KINDS[kind],
            "token_ms": statistics.median(result.token_ms),
            "added_ms": added,
            "issue_ms": statistics.median(result.issue_ms),
            "rounds_ms": result.token_ms,
            "bytes_equal": all(result.bytes_equal) if kind != "none" else None,
            "output_equal": all(result.output_equal) if kind != "none" else None,
            "slots_checked": result.slots_checked,
        })
    by_kind = {row["kind"]: row for row in rows}
    link_gb_s = {k: args.layers * upload_bytes / (ms / 1e3) / 1e9 for k, ms in alone.items()}

    if args.csv:
        with open(args.csv, "w") as csv:
            csv.write("kind,ms_per_token,added_ms,issue_ms,rounds_ms,bytes_equal,output_equal\n")
            for row in rows:
                csv.write(f"{row['kind']},{row['token_ms']:.3f},{row['added_ms']:.3f},{row['issue_ms']:.3f},"
                          f"{' '.join(f'{t:.3f}' for t in row['rounds_ms'])},{row['bytes_equal']},{row['output_equal']}\n")
            for kind, ms in alone.items():
                csv.write(f"{kind} uploads alone,{ms:.3f},,,,{all(results[kind].bytes_equal)},\n")

    print()
    print("| kind | ms a token | added over none | issued in (ms) | per round | bytes equal | output equal |")
    print("| --- | ---: | ---: | ---: | --- | --- | --- |")
    for row in rows:
        check = "-" if row["kind"] == "none" else f"{row['bytes_equal']} ({row['slots_checked']} slots)"
        output = "-" if row["kind"] == "none" else str(row["output_equal"])
        added = "-" if row["kind"] == "none" else f"{row['added_ms']:+.2f}"
        print(f"| {row['label']} | {row['token_ms']:.2f} | {added} | {row['issue_ms']:.2f} | "
              f"{' '.join(f'{t:.2f}' for t in row['rounds_ms'])} | {check} | {output} |")
    for kind, ms in alone.items():
        print(f"| {KINDS[kind]}, uploads alone (no compute) | {ms:.2f} | | | "
              f"{link_gb_s[kind]:.1f} GB/s | {all(results[kind].bytes_equal)} | - |")
    print()
    if alone:
        floor = max([none_ms] + [alone[k] for k in alone])
        bound = "the link" if max(alone.values()) > none_ms else "compute"
        print(f"bound: compute alone {none_ms:.2f} ms a token, uploads alone "
              + ", ".join(f"{KINDS[k]} {ms:.2f}" for k, ms in alone.items())
              + f" ms: the loop is bound by {bound} (floor about {floor:.2f} ms a token)")
    if "pinned" in by_kind and "hostcopy" in by_kind:
        pinned_added, hc_added = by_kind["pinned"]["added_ms"], by_kind["hostcopy"]["added_ms"]
        ratio = f"{hc_added / pinned_added:.2f}" if pinned_added > 0.05 else f"n/a (pinned adds {pinned_added:+.2f} ms)"
        print("| ratio | value | target |")
        print("| --- | ---: | --- |")
        print(f"| ms added a token: hostcopy / torch pinned | {ratio} | <= 1.2 |")
        print(f"| ms a token: hostcopy / torch pinned | {by_kind['hostcopy']['token_ms'] / by_kind['pinned']['token_ms']:.3f} | |")
        if "registered" in by_kind:
            registered_added = by_kind["registered"]["added_ms"]
            registered_ratio = f"{registered_added / pinned_added:.2f}" if pinned_added > 0.05 else "n/a"
            print(f"| ms added a token: hostcopy registered / torch pinned | {registered_ratio} | |")
            print(f"| ms a token: hostcopy registered / hostcopy | "
                  f"{by_kind['registered']['token_ms'] / by_kind['hostcopy']['token_ms']:.3f} | |")
        if "pageable" in by_kind:
            print(f"| ms a token: torch pageable / hostcopy | "
                  f"{by_kind['pageable']['token_ms'] / by_kind['hostcopy']['token_ms']:.2f} | |")
        print(f"decode_loop: added a token: hostcopy {hc_added:+.2f} ms, torch pinned {pinned_added:+.2f} ms "
              f"(ratio {ratio}; target <= 1.2)")
        if "registered" in by_kind:
            print(f"decode_loop: added a token: hostcopy registered {by_kind['registered']['added_ms']:+.2f} ms "
                  f"(ratio to torch pinned {registered_ratio}; issued in {by_kind['registered']['issue_ms']:.2f} ms)")
        for kind in [k for k in args.kinds if k.startswith("hostcopy/")]:
            added = by_kind[kind]["added_ms"]
            ratio = f"{added / pinned_added:.2f}" if pinned_added > 0.05 else "n/a"
            print(f"decode_loop: added a token: {kind} {added:+.2f} ms (ratio to torch pinned {ratio}; "
                  f"issued in {by_kind[kind]['issue_ms']:.2f} ms)")
    wrong = [row["label"] for row in rows if row["kind"] != "none" and not (row["bytes_equal"] and row["output_equal"])]
    if wrong:
        print(f"{NAME}: WRONG bytes or output: {', '.join(wrong)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
