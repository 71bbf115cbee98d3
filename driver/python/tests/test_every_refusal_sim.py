"""Every refusal of the public entry points is a ``hostcopy.Error`` that
keeps its built-in base, and changes nothing.

Each entry point of ``hostcopy.__all__`` that takes arguments (the
module's functions, ``Stager`` and its copies, ``hostcopy.empty`` and the
registration readers, packing, launches, the parallel workers) is called
with one argument made wrong at a time: of a wrong type, a wrong size, a
wrong value. Each call must raise a subclass of ``hostcopy.Error`` that is
also the built-in class a caller catches today (``TypeError``,
``ValueError``, ``OverflowError``; an integer outside a word is both a
``ValueError`` and an ``OverflowError``), and leave every destination as it
was: no byte of host or device memory written, no copy queued, no record
launched. Calls with the wrong number of arguments are Python's own
``TypeError`` before any hostcopy code runs, and are not counted here;
``hostcopy.offload`` has its own classes (test_offload_sim.py).
"""

from __future__ import annotations

import ctypes
from typing import Any, Callable

import pytest

import hostcopy
from conftest import BufferStandIn, MemoryResourceStandIn, Sim, pattern

SIZE = 256
WORD_MAX = (1 << (8 * ctypes.sizeof(ctypes.c_void_p))) - 1

#: What a call refuses: (built-in classes the refusal must also be, call).
Refusal = tuple[tuple[type[BaseException], ...], Callable[["Env"], Any]]

TYPE = (TypeError,)
VALUE = (ValueError,)
#: An integer outside a native word: hostcopy.IntegerOutOfRange, a
#: ValueError as it always was and an OverflowError as Python's own
#: conversions of such an integer are.
RANGE = (ValueError, OverflowError)


class Opaque:
    """An object of no kind hostcopy knows."""


class Interface:
    """An object with a ``__cuda_array_interface__`` as given."""

    def __init__(self, interface: Any) -> None:
        self.__cuda_array_interface__ = interface


class StreamProtocol:
    """cuda.core's Stream protocol, answering what it is told to."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer

    def __cuda_stream__(self) -> Any:
        return self.answer


class DlpackDevice:
    """An object with DLPack's methods, whose device answer is as given."""

    def __init__(self, device: Any) -> None:
        self.device = device

    def __dlpack__(self, stream: Any = None, max_version: Any = None) -> Any:
        raise AssertionError("never exported: its device is refused first")

    def __dlpack_device__(self) -> Any:
        return self.device


class BadIndex:
    """An integer-like object whose ``__index__`` raises."""

    def __init__(self, raised: BaseException) -> None:
        self.raised = raised

    def __index__(self) -> int:
        raise self.raised


class BadInt:
    """A handle-like object whose ``__int__`` raises."""

    def __init__(self, raised: BaseException) -> None:
        self.raised = raised

    def __int__(self) -> int:
        raise self.raised


class Env:
    """One simulated device, its memory, a stager and a stream, shared by
    every case (nothing is ever copied, so nothing changes between cases),
    with every destination a case might write."""

    def __init__(self, sim: Sim, numpy: Any) -> None:
        self.sim = sim
        self.numpy = numpy
        self.device = sim.device()
        self.source = sim.array(self.device, pattern(SIZE, 1))
        self.device_dst = sim.array(self.device, bytes(SIZE))
        self.host_src = numpy.frombuffer(pattern(SIZE, 2), numpy.uint8).copy()
        self.host_dst = numpy.zeros(SIZE, numpy.uint8)
        self.raw_dst = bytearray(SIZE)
        self.record_dst = bytearray(64)
        self.stager = hostcopy.Stager(self.device, chunk=64 << 10, buffers=2, workers=1, driver_path_below=0)
        self.stream = sim.stream(self.device)
        self.made = hostcopy.empty(64)

    def snapshot(self) -> tuple[Any, ...]:
        self.sim.drain(self.device)
        return (
            self.source.read(),
            self.device_dst.read(),
            self.host_src.tobytes(),
            self.host_dst.tobytes(),
            bytes(self.raw_dst),
            bytes(self.record_dst),
            self.made.tobytes(),
            self.sim.copies_queued(self.device),
            hostcopy.owned_record_counts(),
            hostcopy.parallel_workers(),
        )


# --- the arguments, made wrong one at a time -------------------------------

#: Integers of a transfer or of packing (nbytes, offsets): a wrong type, or
#: outside a word.
BAD_INTEGERS: list[tuple[str, tuple[type[BaseException], ...], Any]] = [
    ("str", TYPE, "8"),
    ("float", TYPE, 8.0),
    ("bool", TYPE, True),
    ("list", TYPE, [8]),
    ("object", TYPE, Opaque()),
    ("bytes", TYPE, b"8"),
    ("complex", TYPE, 8j),
    ("index raising TypeError", TYPE, BadIndex(TypeError("no"))),
    ("index raising ValueError", VALUE, BadIndex(ValueError("no"))),
    ("negative", RANGE, -1),
    ("2**64", RANGE, 1 << 64),
    ("2**200", RANGE, 1 << 200),
]

#: Objects that are no host memory at all (type), or host memory a copy
#: cannot take (value).
BAD_HOST: list[tuple[str, tuple[type[BaseException], ...], Callable[[Env], Any]]] = [
    ("object", TYPE, lambda e: Opaque()),
    ("str", TYPE, lambda e: "abc"),
    ("int", TYPE, lambda e: 5),
    ("None", TYPE, lambda e: None),
    ("float", TYPE, lambda e: 1.5),
    ("list", TYPE, lambda e: [0] * SIZE),
    ("device memory", TYPE, lambda e: e.device_dst),
    ("object array", TYPE, lambda e: e.numpy.empty(SIZE, dtype=object)),
    ("strided", VALUE, lambda e: e.numpy.zeros(2 * SIZE, e.numpy.uint8)[::2]),
    ("too small", VALUE, lambda e: e.numpy.zeros(SIZE // 2, e.numpy.uint8)),
    ("gpu dlpack", TYPE, lambda e: DlpackDevice((2, 0))),
    ("dlpack device not a pair", TYPE, lambda e: DlpackDevice(5)),
    ("dlpack device type not an int", TYPE, lambda e: DlpackDevice(("cpu", 0))),
]

#: The same, for a destination only: read-only memory.
BAD_HOST_DST = BAD_HOST + [
    ("bytes", VALUE, lambda e: bytes(SIZE)),
    ("read-only memoryview", VALUE, lambda e: memoryview(bytearray(SIZE)).toreadonly()),
]


def closed_buffer(e: Env) -> BufferStandIn:
    buffer = BufferStandIn(e.device_dst.ptr, SIZE, MemoryResourceStandIn(host=False, device=True))
    buffer.closed = True
    return buffer


#: Objects that are no GPU memory at all (type), or GPU memory described
#: wrongly (type or value).
BAD_DEVICE: list[tuple[str, tuple[type[BaseException], ...], Callable[[Env], Any]]] = [
    ("object", TYPE, lambda e: Opaque()),
    ("str", TYPE, lambda e: "abc"),
    ("int", TYPE, lambda e: 5),
    ("None", TYPE, lambda e: None),
    ("float", TYPE, lambda e: 1.5),
    ("list", TYPE, lambda e: [0] * SIZE),
    ("numpy array", VALUE, lambda e: e.numpy.zeros(SIZE, e.numpy.uint8)),
    ("bytearray", VALUE, lambda e: bytearray(SIZE)),
    ("interface data not a pair", TYPE, lambda e: Interface({"data": 5, "shape": (SIZE,), "typestr": "|u1"})),
    ("interface without data", TYPE, lambda e: Interface({"shape": (SIZE,), "typestr": "|u1"})),
    ("interface not a dict", TYPE, lambda e: Interface(5)),
    (
        "interface pointer a str",
        TYPE,
        lambda e: Interface({"data": ("0x1000", False), "shape": (SIZE,), "typestr": "|u1", "version": 3}),
    ),
    (
        "interface shape of str",
        TYPE,
        lambda e: Interface({"data": (e.device_dst.ptr, False), "shape": ("a",), "typestr": "|u1", "version": 3}),
    ),
    (
        "interface typestr not a type",
        VALUE,
        lambda e: Interface({"data": (e.device_dst.ptr, False), "shape": (SIZE,), "typestr": "|ux", "version": 3}),
    ),
    (
        "interface negative pointer",
        RANGE,
        lambda e: Interface({"data": (-16, False), "shape": (SIZE,), "typestr": "|u1", "version": 3}),
    ),
    ("closed buffer", VALUE, closed_buffer),
    (
        "buffer handle a str",
        TYPE,
        lambda e: BufferStandIn("x", SIZE, MemoryResourceStandIn(host=False, device=True)),
    ),
    (
        "buffer handle raising ValueError",
        VALUE,
        lambda e: BufferStandIn(BadInt(ValueError("no")), SIZE, MemoryResourceStandIn(host=False, device=True)),
    ),
    (
        "buffer size negative",
        RANGE,
        lambda e: BufferStandIn(e.device_dst.ptr, -1, MemoryResourceStandIn(host=False, device=True)),
    ),
    ("host dlpack", VALUE, lambda e: DlpackDevice((1, 0))),
    ("dlpack device not a pair", TYPE, lambda e: DlpackDevice(5)),
    ("dlpack device type not an int", TYPE, lambda e: DlpackDevice(("cuda", 0))),
]

BAD_STREAMS: list[tuple[str, tuple[type[BaseException], ...], Callable[[Env], Any]]] = [
    ("str", TYPE, lambda e: "stream"),
    ("float", TYPE, lambda e: 1.5),
    ("bool", TYPE, lambda e: True),
    ("object", TYPE, lambda e: Opaque()),
    ("list", TYPE, lambda e: [1]),
    ("negative", RANGE, lambda e: -1),
    ("2**64", RANGE, lambda e: 1 << 64),
    ("protocol answering an int", TYPE, lambda e: StreamProtocol(5)),
    ("protocol answering a str handle", TYPE, lambda e: StreamProtocol((0, "s"))),
    ("protocol answering a negative handle", RANGE, lambda e: StreamProtocol((0, -1))),
]

BAD_BLOCKS: list[tuple[str, tuple[type[BaseException], ...], Callable[[Env], Any]]] = [
    ("str", TYPE, lambda e: "123"),
    ("bytes", TYPE, lambda e: b"\x00\x00\x08"),
    ("int", TYPE, lambda e: 5),
    ("None", TYPE, lambda e: None),
    ("float", TYPE, lambda e: 1.5),
    ("dict", TYPE, lambda e: {0: (0, 0, 8)}),
    ("pair", TYPE, lambda e: [(0, 8)]),
    ("quadruple", TYPE, lambda e: [(0, 0, 8, 0)]),
    ("row of str", TYPE, lambda e: [(0, 0, "8")]),
    ("row of float", TYPE, lambda e: [(0, 0, 8.0)]),
    ("row of bool", TYPE, lambda e: [(True, 0, 8)]),
    ("row a str", TYPE, lambda e: ["123"]),
    ("row an int", TYPE, lambda e: [(0, 0, 8), 7]),
    ("row a dict", TYPE, lambda e: [{0: 0, 1: 0, 2: 8}]),
    ("row of None", TYPE, lambda e: [(None, 0, 8)]),
    ("float array", TYPE, lambda e: e.numpy.array([[0.0, 0.0, 8.0]])),
    ("bool array", TYPE, lambda e: e.numpy.array([[False, False, True]])),
    ("object array", TYPE, lambda e: e.numpy.array([[0, 0, 8]], dtype=object)),
    ("str array", TYPE, lambda e: e.numpy.array([["0", "0", "8"]])),
    ("array of shape (1, 2)", TYPE, lambda e: e.numpy.zeros((1, 2), e.numpy.int64)),
    ("array of shape (3,)", TYPE, lambda e: e.numpy.zeros(3, e.numpy.int64)),
    ("array of shape (1, 3, 1)", TYPE, lambda e: e.numpy.zeros((1, 3, 1), e.numpy.int64)),
    ("datetime64 array", TYPE, lambda e: e.numpy.zeros((1, 3), "datetime64[ns]")),
    ("timedelta64 array", TYPE, lambda e: e.numpy.zeros((1, 3), "timedelta64[s]")),
    ("datetime64 scalar", TYPE, lambda e: e.numpy.datetime64(5, "ns")),
    ("int64 scalar", TYPE, lambda e: e.numpy.int64(5)),
    ("float memoryview", TYPE, lambda e: memoryview(e.numpy.zeros((1, 3), e.numpy.float64))),
    ("negative field", RANGE, lambda e: [(0, 0, 8), (-1, 0, 8)]),
    ("field 2**64", RANGE, lambda e: [(0, 0, 1 << 64)]),
    ("negative array field", RANGE, lambda e: e.numpy.array([[0, -8, 8]], e.numpy.int64)),
    ("block past the end", VALUE, lambda e: [(0, 0, SIZE + 1)]),
    ("block offset past the end", VALUE, lambda e: [(SIZE, 0, 8)]),
    ("field index raising TypeError", TYPE, lambda e: [(BadIndex(TypeError("no")), 0, 8)]),
]

#: Blocks writing the same bytes of the destination: the host's, the device's.
OVERLAPPING_HOST = [(0, 0, 16), (16, 8, 16)]
OVERLAPPING_DEVICE = [(0, 0, 16), (8, 16, 16)]

#: The integers of packing, which takes ``int`` only (not numpy's, nor
#: other objects with ``__index__``: no ``__index__`` is called).
BAD_PACKING_INTEGERS = [
    (kind, TYPE if kind.startswith("index raising") else expected, value) for kind, expected, value in BAD_INTEGERS
]


def range_copies() -> list[tuple[str, Callable[[Env], tuple[Callable[..., Any], dict[str, Any], bool]]]]:
    """Each range copy: (name, env -> (call, good arguments, to the device))."""
    return [
        ("copy_to_host", lambda e: (hostcopy.copy_to_host, {"dst": e.host_dst, "src": e.source}, False)),
        ("Stager.copy_to_host", lambda e: (e.stager.copy_to_host, {"dst": e.host_dst, "src": e.source}, False)),
        ("copy_to_device", lambda e: (hostcopy.copy_to_device, {"dst": e.device_dst, "src": e.host_src}, True)),
        ("Stager.copy_to_device", lambda e: (e.stager.copy_to_device, {"dst": e.device_dst, "src": e.host_src}, True)),
    ]


def block_copies() -> list[tuple[str, Callable[[Env], tuple[Callable[..., Any], dict[str, Any], bool]]]]:
    good = [(0, 0, SIZE)]
    return [
        (
            "copy_blocks_to_host",
            lambda e: (hostcopy.copy_blocks_to_host, {"dst": e.host_dst, "src": e.source, "blocks": good}, False),
        ),
        (
            "Stager.copy_blocks_to_host",
            lambda e: (e.stager.copy_blocks_to_host, {"dst": e.host_dst, "src": e.source, "blocks": good}, False),
        ),
        (
            "copy_blocks_to_device",
            lambda e: (hostcopy.copy_blocks_to_device, {"dst": e.device_dst, "src": e.host_src, "blocks": good}, True),
        ),
        (
            "Stager.copy_blocks_to_device",
            lambda e: (e.stager.copy_blocks_to_device, {"dst": e.device_dst, "src": e.host_src, "blocks": good}, True),
        ),
    ]


def with_argument(
    entry: Callable[[Env], tuple[Callable[..., Any], dict[str, Any], bool]], name: str, value: Callable[[Env], Any]
):
    def call(e: Env) -> Any:
        function, arguments, _ = entry(e)
        return function(**{**arguments, name: value(e)})

    return call


def side_argument(entry, device_side: bool, value):
    """The host side or the device side of `entry`'s copy made `value`."""

    def call(e: Env) -> Any:
        function, arguments, to_device = entry(e)
        name = "dst" if to_device == device_side else "src"
        return function(**{**arguments, name: value(e)})

    return call


def transfer_refusals() -> list[tuple[str, Refusal]]:
    cases: list[tuple[str, Refusal]] = []
    copies = range_copies() + block_copies()
    for copy, entry in copies:
        for blocking in (True, False):
            mode = "" if blocking else " blocking=False"

            def entry_mode(e: Env, entry=entry, blocking=blocking):
                function, arguments, to_device = entry(e)
                return function, {**arguments, "blocking": blocking}, to_device

            for kind, expected, value in BAD_DEVICE:
                cases.append((f"{copy}{mode} device side {kind}", (expected, side_argument(entry_mode, True, value))))
            to_device = copy.endswith("device")
            for kind, expected, value in BAD_HOST_DST:
                # Read-only memory is refused only as a destination; a
                # small source of a range copy is a shorter copy.
                if to_device and (
                    kind in ("bytes", "read-only memoryview") or (kind == "too small" and "blocks" not in copy)
                ):
                    continue
                cases.append((f"{copy}{mode} host side {kind}", (expected, side_argument(entry_mode, False, value))))
            for kind, expected, value in BAD_STREAMS:
                cases.append((f"{copy}{mode} stream {kind}", (expected, with_argument(entry_mode, "stream", value))))
    for copy, entry in range_copies():
        for argument in ("nbytes", "dst_offset", "src_offset"):
            for kind, expected, value in BAD_INTEGERS:
                cases.append(
                    (f"{copy} {argument} {kind}", (expected, with_argument(entry, argument, lambda e, v=value: v)))
                )
        cases.append((f"{copy} nbytes past the end", (VALUE, with_argument(entry, "nbytes", lambda e: SIZE + 1))))
        cases.append(
            (f"{copy} src_offset past the end", (VALUE, with_argument(entry, "src_offset", lambda e: SIZE + 1)))
        )
        cases.append((f"{copy} dst_offset past the end", (VALUE, with_argument(entry, "dst_offset", lambda e: SIZE))))
    for copy, entry in block_copies():
        for kind, expected, value in BAD_BLOCKS:
            cases.append((f"{copy} blocks {kind}", (expected, with_argument(entry, "blocks", value))))
        overlapping = OVERLAPPING_DEVICE if copy.endswith("device") else OVERLAPPING_HOST
        cases.append(
            (f"{copy} blocks overlapping", (VALUE, with_argument(entry, "blocks", lambda e, o=overlapping: o)))
        )
    return cases


def stager_refusals() -> list[tuple[str, Refusal]]:
    cases: list[tuple[str, Refusal]] = []
    devices = [
        ("str", TYPE, "0"),
        ("float", TYPE, 0.5),
        ("bool", TYPE, True),
        ("object", TYPE, Opaque()),
        ("list", TYPE, [0]),
        ("torch-like device of no index", TYPE, type("device", (), {"index": None})()),
        ("negative", RANGE, -1),
        ("2**64", RANGE, 1 << 64),
        ("2**64 as an index", RANGE, type("device", (), {"index": 1 << 64})()),
        ("no such device", (RuntimeError,), 4096),
    ]
    for kind, expected, value in devices:
        cases.append((f"Stager device {kind}", (expected, lambda e, v=value: hostcopy.Stager(v))))
        cases.append((f"default_stager device {kind}", (expected, lambda e, v=value: hostcopy.default_stager(v))))
    for option in ("chunk", "buffers", "workers", "driver_path_below"):
        for kind, value in (
            ("str", "8"),
            ("float", 8.5),
            ("bool", True),
            ("negative", -1),
            ("2**64", 1 << 64),
            ("object", Opaque()),
        ):
            cases.append(
                (f"Stager {option} {kind}", (VALUE, lambda e, o=option, v=value: hostcopy.Stager(e.device, **{o: v})))
            )
    for option in ("h2d_streaming", "prefault"):
        for kind, value in (("str", "yes"), ("int", 1), ("float", 1.0), ("object", Opaque()), ("list", [True])):
            cases.append(
                (f"Stager {option} {kind}", (TYPE, lambda e, o=option, v=value: hostcopy.Stager(e.device, **{o: v})))
            )
    return cases


def empty_refusals() -> list[tuple[str, Refusal]]:
    cases: list[tuple[str, Refusal]] = []
    shapes = [
        ("str", TYPE, "12"),
        ("float", TYPE, 2.5),
        ("None", TYPE, None),
        ("bool", TYPE, True),
        ("object", TYPE, Opaque()),
        ("tuple of float", TYPE, (2, 2.5)),
        ("tuple of str", TYPE, ("2",)),
        ("tuple of tuple", TYPE, ((2,),)),
        ("negative", RANGE, -1),
        ("negative dimension", RANGE, (2, -1)),
        ("2**70", RANGE, 1 << 70),
        ("dimension 2**64", RANGE, (1 << 64,)),
        ("dimensions of 2**80 elements", RANGE, (1 << 40, 1 << 40)),
        ("bytes past a signed word", RANGE, (1 << 62, 4)),
        ("65 dimensions", VALUE, (1,) * 65),
        ("index raising ValueError", VALUE, BadIndex(ValueError("no"))),
    ]
    for kind, expected, value in shapes:
        cases.append((f"empty shape {kind}", (expected, lambda e, v=value: hostcopy.empty(v))))
    dtypes = [
        ("not a dtype", TYPE, "not a dtype"),
        ("object", TYPE, object),
        ("structured with an object", TYPE, [("a", "i8"), ("b", object)]),
        ("subarray of objects", TYPE, ("O", (2,))),
        ("of no bytes", TYPE, "V0"),
        ("an int", TYPE, 5),
        ("a malformed structure", TYPE, [("a",)]),
        ("a negative subarray", VALUE, ("i4", (-1,))),
    ]
    for kind, expected, value in dtypes:
        cases.append((f"empty dtype {kind}", (expected, lambda e, v=value: hostcopy.empty(4, v))))
    for kind, value in (("int", 5), ("word", "sometimes"), ("None", None), ("bool", True)):
        cases.append((f"empty register {kind}", (VALUE, lambda e, v=value: hostcopy.empty(4, register=v))))
    devices = [
        ("str", TYPE, "0"),
        ("float", TYPE, 0.5),
        ("bool", TYPE, True),
        ("object", TYPE, Opaque()),
        ("negative", RANGE, -1),
        ("2**64", RANGE, 1 << 64),
    ]
    for kind, expected, value in devices:
        cases.append((f"empty device {kind}", (expected, lambda e, v=value: hostcopy.empty(4, device=v))))
        cases.append(
            (
                f"empty registered device {kind}",
                (expected, lambda e, v=value: hostcopy.empty(4, register="now", device=v)),
            )
        )
    for reader in ("registration", "wait_registered"):
        for kind, value in (
            ("numpy array", lambda e: e.numpy.zeros(4)),
            ("object", lambda e: Opaque()),
            ("str", lambda e: "x"),
            ("None", lambda e: None),
            ("bytearray", lambda e: bytearray(4)),
        ):
            cases.append((f"{reader} {kind}", (TYPE, lambda e, r=reader, v=value: getattr(hostcopy, r)(v(e)))))
    return cases


def packing_refusals() -> list[tuple[str, Refusal]]:
    cases: list[tuple[str, Refusal]] = []
    host_regions: list[tuple[str, tuple[type[BaseException], ...], Callable[[Env], Any]]] = [
        ("object", TYPE, lambda e: Opaque()),
        ("str", TYPE, lambda e: "abc"),
        ("None", TYPE, lambda e: None),
        ("float", TYPE, lambda e: 1.5),
        ("bool", TYPE, lambda e: True),
        ("list", TYPE, lambda e: [0] * 8),
        ("object array", TYPE, lambda e: e.numpy.empty(8, dtype=object)),
        ("negative address", RANGE, lambda e: -1),
        ("address 2**64", RANGE, lambda e: 1 << 64),
        ("strided", VALUE, lambda e: e.numpy.zeros(64, e.numpy.uint8)[::2]),
        ("null address", VALUE, lambda e: 0),
        ("closed buffer", VALUE, closed_buffer),
        ("buffer handle a str", TYPE, lambda e: BufferStandIn("x", 8, MemoryResourceStandIn(host=True, device=False))),
        (
            "buffer handle raising ValueError",
            VALUE,
            lambda e: BufferStandIn(BadInt(ValueError("no")), 8, MemoryResourceStandIn(host=True, device=False)),
        ),
        (
            "buffer handle an object",
            TYPE,
            lambda e: BufferStandIn(Opaque(), 8, MemoryResourceStandIn(host=True, device=False)),
        ),
        (
            "buffer size negative",
            RANGE,
            lambda e: BufferStandIn(0x1000, -1, MemoryResourceStandIn(host=True, device=False)),
        ),
        (
            "device-only buffer",
            VALUE,
            lambda e: BufferStandIn(0x1000, 8, MemoryResourceStandIn(host=False, device=True)),
        ),
    ]

    def pack(e: Env, **changed: Any) -> Any:
        arguments = {"dst": e.record_dst, "src": bytes(8), "nbytes": 8, **changed}
        return hostcopy.pack_host_copy_args(**arguments)

    def pack_into(e: Env, **changed: Any) -> Any:
        arguments = {"buffer": e.record_dst, "offset": 0, "dst": e.raw_dst, "src": bytes(8), "nbytes": 8, **changed}
        return hostcopy.pack_host_copy_args_into(**arguments)

    def launch(e: Env, **changed: Any) -> Any:
        arguments = {"stream": e.stream.handle, "dst": e.raw_dst, "src": bytes(8), "nbytes": 8, **changed}
        return hostcopy.launch_host_copy(**arguments)

    def node(e: Env, **changed: Any) -> Any:
        arguments = {"graph": 0x1234, "dst": e.raw_dst, "src": bytes(8), "nbytes": 8, **changed}
        return hostcopy.add_host_copy_node(**arguments)

    for name, call in (
        ("pack_host_copy_args", pack),
        ("pack_host_copy_args_into", pack_into),
        ("launch_host_copy", launch),
        ("add_host_copy_node", node),
    ):
        for side in ("dst", "src"):
            for kind, expected, value in host_regions:
                if side == "src" and kind == "null address":
                    continue
                cases.append(
                    (f"{name} {side} {kind}", (expected, lambda e, c=call, s=side, v=value: c(e, **{s: v(e)})))
                )
        for argument in ("nbytes", "dst_offset", "src_offset"):
            for kind, expected, value in BAD_PACKING_INTEGERS:
                cases.append(
                    (f"{name} {argument} {kind}", (expected, lambda e, c=call, a=argument, v=value: c(e, **{a: v})))
                )
        cases.append((f"{name} read-only dst", (VALUE, lambda e, c=call: c(e, dst=bytes(8)))))
        cases.append((f"{name} dst too small", (VALUE, lambda e, c=call: c(e, dst=bytearray(4)))))
        cases.append((f"{name} nbytes missing for an address", (TYPE, lambda e, c=call: c(e, src=0x1000, nbytes=None))))
        cases.append(
            (
                f"{name} overlapping",
                (VALUE, lambda e, c=call: c(e, src=e.raw_dst, dst=memoryview(e.raw_dst)[4:], nbytes=8)),
            )
        )
    for kind, expected, value in [
        ("object", TYPE, lambda e: Opaque()),
        ("str", TYPE, lambda e: "abc"),
        ("int", TYPE, lambda e: 0x1000),
        ("read-only", VALUE, lambda e: bytes(64)),
        ("too small", VALUE, lambda e: bytearray(16)),
        ("strided", VALUE, lambda e: e.numpy.zeros(128, e.numpy.uint8)[::2]),
        ("object array", TYPE, lambda e: e.numpy.empty(8, dtype=object)),
    ]:
        cases.append(
            (f"pack_host_copy_args_into buffer {kind}", (expected, lambda e, v=value: pack_into(e, buffer=v(e))))
        )
    for kind, expected, value in BAD_PACKING_INTEGERS + [("past the end", VALUE, 48)]:
        cases.append((f"pack_host_copy_args_into offset {kind}", (expected, lambda e, v=value: pack_into(e, offset=v))))
    for kind, expected, value in [
        ("object", TYPE, lambda e: Opaque()),
        ("int", TYPE, lambda e: 5),
        ("str", TYPE, lambda e: "abc"),
        ("None", TYPE, lambda e: None),
        ("too short", VALUE, lambda e: bytes(8)),
        ("strided", TYPE, lambda e: memoryview(bytearray(48))[::2]),
    ]:
        cases.append(
            (f"unpack_host_copy_args data {kind}", (expected, lambda e, v=value: hostcopy.unpack_host_copy_args(v(e))))
        )
    for kind, expected, value in BAD_PACKING_INTEGERS:
        cases.append(
            (
                f"unpack_host_copy_args offset {kind}",
                (expected, lambda e, v=value: hostcopy.unpack_host_copy_args(bytes(24), v)),
            )
        )
    cases.append(
        ("unpack_host_copy_args offset past the end", (VALUE, lambda e: hostcopy.unpack_host_copy_args(bytes(24), 1)))
    )
    return cases


def launch_refusals() -> list[tuple[str, Refusal]]:
    cases: list[tuple[str, Refusal]] = []

    def record(e: Env) -> bytes:
        return hostcopy.pack_host_copy_args(e.record_dst, bytes(8))

    for kind, expected, value in BAD_STREAMS:
        cases.append(
            (
                f"launch_host_copy_args stream {kind}",
                (expected, lambda e, v=value: hostcopy.launch_host_copy_args(v(e), record(e))),
            )
        )
        cases.append(
            (
                f"launch_host_copy stream {kind}",
                (expected, lambda e, v=value: hostcopy.launch_host_copy(v(e), e.record_dst, bytes(8))),
            )
        )
    for kind, expected, value in [
        ("object", TYPE, lambda e: Opaque()),
        ("str", TYPE, lambda e: "abc"),
        ("None", TYPE, lambda e: None),
        ("int", TYPE, lambda e: 24),
        ("negative int", TYPE, lambda e: -1),
        ("huge int", TYPE, lambda e: 1 << 70),
        ("float", TYPE, lambda e: 24.0),
        ("list", TYPE, lambda e: [0] * 24),
        ("too short", VALUE, lambda e: bytes(8)),
        ("too long", VALUE, lambda e: bytes(32)),
        ("strided", VALUE, lambda e: memoryview(bytearray(48))[::2]),
        ("null destination", VALUE, lambda e: (ctypes.c_size_t * 3)(0, 0x1000, 8)),
    ]:
        cases.append(
            (
                f"launch_host_copy_args record {kind}",
                (expected, lambda e, v=value: hostcopy.launch_host_copy_args(e.stream.handle, v(e))),
            )
        )
    graphs = [
        ("str", TYPE, "graph"),
        ("float", TYPE, 1.5),
        ("bool", TYPE, True),
        ("object", TYPE, Opaque()),
        ("a stream", TYPE, StreamProtocol((0, 1))),
        ("negative", RANGE, -1),
        ("2**64", RANGE, 1 << 64),
    ]
    for kind, expected, value in graphs:
        cases.append(
            (
                f"add_host_copy_node graph {kind}",
                (expected, lambda e, v=value: hostcopy.add_host_copy_node(v, e.record_dst, bytes(8))),
            )
        )
    dependencies = [
        ("int", TYPE, 5),
        ("object", TYPE, Opaque()),
        ("of str", TYPE, ["node"]),
        ("of float", TYPE, [1.5]),
        ("of object", TYPE, [Opaque()]),
        ("of None", TYPE, [None]),
        ("of negative", RANGE, [-1]),
        ("of 2**64", RANGE, [1 << 64]),
    ]
    for kind, expected, value in dependencies:
        cases.append(
            (
                f"add_host_copy_node dependencies {kind}",
                (
                    expected,
                    lambda e, v=value: hostcopy.add_host_copy_node(0x1234, e.record_dst, bytes(8), dependencies=v),
                ),
            )
        )
    for kind, expected, value in [
        ("str", TYPE, "4"),
        ("float", TYPE, 4.0),
        ("bool", TYPE, True),
        ("object", TYPE, Opaque()),
        ("negative", RANGE, -1),
        ("2**64", RANGE, 1 << 64),
    ]:
        cases.append((f"set_parallel_workers {kind}", (expected, lambda e, v=value: hostcopy.set_parallel_workers(v))))
    return cases


REFUSALS: list[tuple[str, Refusal]] = (
    transfer_refusals() + stager_refusals() + empty_refusals() + packing_refusals() + launch_refusals()
)


def test_the_cases_cover_every_public_entry_point_that_takes_arguments():
    called = {name.split(" ")[0].split(".")[0] for name, _ in REFUSALS}
    takes_arguments = {
        name
        for name in hostcopy.__all__
        if callable(getattr(hostcopy, name))
        and not (isinstance(getattr(hostcopy, name), type) and issubclass(getattr(hostcopy, name), BaseException))
    }
    # Without arguments to refuse: the counters, the records' and options'
    # named tuples and typed dict, the Register alias, the ctypes prototype and the compiled
    # host functions (C function pointers the driver calls), and Transfer,
    # which only a copy makes (its methods take no arguments).
    without = {
        "rejected",
        "parallel_workers",
        "owned_record_counts",
        "HostCopyArgs",
        "Registration",
        "StagerOptions",
        "CUHOSTFN",
        "HOST_COPY_FN",
        "HOST_COPY_PARALLEL_FN",
        "Transfer",
        "Register",
    }
    assert takes_arguments - without <= called, sorted(takes_arguments - without - called)
    assert len(REFUSALS) >= 1400, len(REFUSALS)


@pytest.fixture(scope="module")
def env():
    numpy = pytest.importorskip("numpy", reason="numpy is not installed (ci.sh installs it)")
    native = hostcopy._native
    if not hasattr(native, "sim_install"):
        import os

        reason = "this wheel has no simulated driver (ci.sh builds one with --features simulator)"
        if os.environ.get("HOSTCOPY_REQUIRE_SIM") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    native.sim_install()
    made = Env(Sim(native), numpy)
    yield made
    made.stager.close()


@pytest.mark.parametrize("expected, call", [case for _, case in REFUSALS], ids=[name for name, _ in REFUSALS])
def test_every_refusal_is_a_hostcopy_error_of_its_builtin_class_and_changes_nothing(env, expected, call):
    env.sim.native.sim_make_current(env.device)
    before = env.snapshot()
    with pytest.raises(hostcopy.Error) as refused:
        transfer = call(env)
        # A call that did not refuse: its transfer waited for, so that the
        # comparison below sees what it wrote.
        if isinstance(transfer, hostcopy.Transfer):
            transfer.wait()
    for builtin in expected:
        assert isinstance(refused.value, builtin), (type(refused.value).__mro__, builtin)
    assert type(refused.value).__module__ == "hostcopy._errors", type(refused.value)
    assert str(refused.value), "a refusal says why"
    assert env.snapshot() == before, "a refused call changed nothing"


def test_except_typeerror_valueerror_and_overflowerror_keep_working(env):
    """The built-in bases stay: code written against them catches the same."""
    with pytest.raises(TypeError):
        hostcopy.copy_to_host(env.host_dst, env.source, "8")
    with pytest.raises(ValueError):
        hostcopy.copy_to_host(env.host_dst, env.source, SIZE + 1)
    with pytest.raises(OverflowError):
        hostcopy.empty(1 << 70)
    with pytest.raises(OverflowError):
        hostcopy.Stager(-1)
    with pytest.raises(hostcopy.ArgumentTypeError) as refused:
        hostcopy.copy_to_host(env.host_dst, env.source, 8.0)
    assert refused.value.argument == "nbytes" and refused.value.value == 8.0
    with pytest.raises(hostcopy.IntegerOutOfRange) as out_of_range:
        hostcopy.Stager(1 << 64)
    assert (out_of_range.value.name, out_of_range.value.value) == ("device", 1 << 64)
    assert isinstance(out_of_range.value, OverflowError) and isinstance(out_of_range.value, ValueError)
    with pytest.raises(hostcopy.IntegerOutOfRange) as out_of_range:
        hostcopy.empty((2, -3))
    assert (out_of_range.value.name, out_of_range.value.value) == ("shape[1]", -3)


def test_the_argument_classes_keep_their_built_in_bases():
    assert issubclass(hostcopy.ArgumentTypeError, TypeError) and issubclass(hostcopy.ArgumentTypeError, hostcopy.Error)
    assert issubclass(hostcopy.ArgumentError, ValueError) and issubclass(hostcopy.ArgumentError, hostcopy.Error)
    assert issubclass(hostcopy.IntegerOutOfRange, OverflowError) and issubclass(hostcopy.IntegerOutOfRange, ValueError)
    assert issubclass(hostcopy.IntegerOutOfRange, hostcopy.PackError)


def test_an_arguments_own_error_is_the_cause_of_hostcopys(env):
    raised = ValueError("an __index__ of its own")
    with pytest.raises(hostcopy.ArgumentError) as refused:
        hostcopy.copy_to_host(env.host_dst, env.source, BadIndex(raised))
    assert refused.value.__cause__ is raised and refused.value.argument == "nbytes"
    raised = TypeError("a __cuda_stream__ of its own")

    class Stream:
        def __cuda_stream__(self):
            raise raised

    with pytest.raises(hostcopy.ArgumentTypeError) as refused:
        hostcopy.copy_to_host(env.host_dst, env.source, stream=Stream())
    assert refused.value.__cause__ is raised and refused.value.argument == "stream"
    assert not env.host_dst.any()
