"""hostcopy: copies between GPU memory and the host memory you already
have at the link's speed, and the compiled CUDA host functions under them.

The one-call copies, from a torch or cupy CUDA array (or jax, numba, a
cuda.core Buffer) into a numpy array (or a bytearray, an mmap, a CPU
tensor), and back, with the GIL released for the whole copy::

    hostcopy.copy_to_host(numpy_array, cuda_tensor)
    hostcopy.copy_to_device(cuda_tensor, numpy_array)

A transfer keeps both arrays alive, not their storage: do not ``resize_`` or
free the storage of either side while a transfer runs (a torch tensor's
``resize_()``, a cuda.core Buffer's ``close()``), from any thread.

A safetensors model file to the GPU in one transfer, each tensor a view
of one device allocation (``import hostcopy.safetensors``; torch needed)::

    state = hostcopy.safetensors.load_file("model.safetensors", device="cuda:0")

Below them, for pipelines of your own:
``HOST_COPY_FN`` is a ctypes ``CUhostFn`` pointing at compiled code: the
driver calls it on its host-function thread with no Python frame and no GIL.
Its ``user_data`` is a 24-byte record (``dst``, ``src``, ``nbytes``) that
``pack_host_copy_args`` builds with bounds checks::

    gb.callback(hostcopy.HOST_COPY_FN, user_data=hostcopy.pack_host_copy_args(dst, src))

A record holds addresses, not references: whoever runs it keeps ``dst`` and
``src`` alive, unmoved and unresized until the host function has run (for a
graph node: until the graph and every executable made from it are
destroyed). Importing this module needs no NVIDIA driver: transfers and
launches open ``libcuda.so.1`` on first use, and raise ``CudaUnavailable``
without one.
"""

from __future__ import annotations

import ctypes
import struct
from typing import TYPE_CHECKING, Any, NamedTuple, Sequence, cast

from . import _native
from ._errors import refused as _refused
from ._errors import (
    AddressOverflow,
    ArgumentBufferError,
    ArgumentError,
    ArgumentRuntimeError,
    ArgumentTypeError,
    BlockOutOfBounds,
    BlocksOverlap,
    CudaError,
    CudaUnavailable,
    Error,
    ForeignNode,
    HostMemoryError,
    IntegerOutOfRange,
    InvalidOption,
    MemoryNotHeld,
    NoCurrentContext,
    NotContiguous,
    NotDeviceMemory,
    NotHostAccessible,
    NotPrimaryContext,
    NullWithLength,
    OffloadArgumentError,
    OffloadArgumentTypeError,
    OffloadError,
    OrderNotKept,
    OutOfBounds,
    Overlap,
    PackError,
    ReadOnlyBuffer,
    ReadOnlyDevice,
    RecordPoolError,
    SafetensorsError,
    ScopeOpen,
    StagerClosed,
    StreamMemoryWaitsUnsupported,
    StreamCapturing,
    TransferError,
    WorkerStartError,
    WrongDevice,
)
from ._memory import Register, Registration, empty, registration, wait_registered
from ._staging import (
    Stager,
    StagerOptions,
    Transfer,
    copy_blocks_to_device,
    copy_blocks_to_host,
    copy_to_device,
    copy_to_host,
    default_stager,
)

if TYPE_CHECKING:
    from typing_extensions import Buffer

    from ._native import HostBuffer, HostRegion

#: The package's version (the Rust crates' version, from one place).
__version__: str = _native.__version__

__all__ = [
    "Stager",
    "StagerOptions",
    "Transfer",
    "copy_blocks_to_device",
    "copy_blocks_to_host",
    "copy_to_device",
    "copy_to_host",
    "default_stager",
    "empty",
    "Register",
    "Registration",
    "registration",
    "wait_registered",
    "ABI_VERSION",
    "CUHOSTFN",
    "HOST_COPY_ARGS_SIZE",
    "HOST_COPY_FN",
    "HOST_COPY_PARALLEL_FN",
    "HostCopyArgs",
    "add_host_copy_node",
    "launch_host_copy",
    "launch_host_copy_args",
    "owned_record_counts",
    "pack_host_copy_args",
    "pack_host_copy_args_into",
    "parallel_workers",
    "rejected",
    "set_parallel_workers",
    "unpack_host_copy_args",
    "AddressOverflow",
    "ArgumentBufferError",
    "ArgumentError",
    "ArgumentRuntimeError",
    "ArgumentTypeError",
    "BlockOutOfBounds",
    "BlocksOverlap",
    "CudaError",
    "CudaUnavailable",
    "Error",
    "ForeignNode",
    "HostMemoryError",
    "IntegerOutOfRange",
    "InvalidOption",
    "MemoryNotHeld",
    "NoCurrentContext",
    "NotContiguous",
    "NotDeviceMemory",
    "NotHostAccessible",
    "NotPrimaryContext",
    "NullWithLength",
    "OffloadArgumentError",
    "OffloadArgumentTypeError",
    "OffloadError",
    "OrderNotKept",
    "OutOfBounds",
    "Overlap",
    "PackError",
    "ReadOnlyBuffer",
    "ReadOnlyDevice",
    "RecordPoolError",
    "SafetensorsError",
    "ScopeOpen",
    "StagerClosed",
    "StreamMemoryWaitsUnsupported",
    "StreamCapturing",
    "TransferError",
    "WorkerStartError",
    "WrongDevice",
]

#: The ``CUhostFn`` prototype, ``void (*)(void *)``, as ctypes spells it.
CUHOSTFN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

#: ``hostcopy_fn``: copies the bytes its record describes, on the calling
#: thread (the driver's), without the GIL. Rejects (and counts, see
#: ``rejected()``) null and wrapping records; copies nothing for ``nbytes == 0``.
HOST_COPY_FN = CUHOSTFN(_native.host_copy_fn_address())

#: ``hostcopy_parallel_fn``: the same record and contract, the copy split
#: across a pool of worker threads started by ``set_parallel_workers``.
#: Before that call (or for records under 1 MiB) it is ``HOST_COPY_FN``.
HOST_COPY_PARALLEL_FN = CUHOSTFN(_native.host_copy_parallel_fn_address())

#: Size of a packed record in bytes: three native words.
HOST_COPY_ARGS_SIZE: int = _native.HOST_COPY_ARGS_SIZE
#: Version of the record layout and the host function's contract.
ABI_VERSION: int = _native.ABI_VERSION

_RECORD = struct.Struct("@3N")
assert _RECORD.size == HOST_COPY_ARGS_SIZE, "the record is three size_t words"
_WORD_MAX = (1 << (8 * ctypes.sizeof(ctypes.c_void_p))) - 1


class HostCopyArgs(NamedTuple):
    """A record read back: ``nbytes`` bytes from address ``src`` to address ``dst``."""

    dst: int
    src: int
    nbytes: int


def _word(name: str, value: object) -> int:
    """An integer that fits a native word, or a clear refusal."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentTypeError(f"{name} must be an int, not {type(value).__name__}", argument=name, value=value)
    if not 0 <= value <= _WORD_MAX:
        raise IntegerOutOfRange(
            f"{name} = {value} is outside 0..={_WORD_MAX} (a native word)",
            name=name,
            value=value,
            max=_WORD_MAX,
        )
    return value


def _int_of(value: Any, name: str) -> int:
    """``int(value)`` of a handle or size (an ``int``, or an object with
    ``__int__`` such as cuda.bindings' handles), as src/sides.rs reads
    them: a ``bool``, ``float``, ``str`` or ``bytes`` is no handle
    (``ArgumentTypeError``), and what ``int()`` raises is hostcopy's."""
    if isinstance(value, (bool, float, str, bytes)):
        raise ArgumentTypeError(f"{name} must be an integer, not {type(value).__name__}", argument=name, value=value)
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError) as failure:
        raise _refused(failure, name, value)


def _is_cuda_core_buffer(obj: Any) -> bool:
    """A cuda.core ``Buffer``, or an object shaped as one (``handle``,
    ``size``, ``memory_resource``): what packing reads of it (a transfer
    reads it in src/sides.rs, by the same rule). Looked up on the type, so
    that no property runs (a Buffer's ``is_host_accessible`` calls the
    driver when it has no memory resource)."""
    kind = type(obj)
    return all(hasattr(kind, name) for name in ("handle", "size", "memory_resource"))


def _region(obj: Any, side: str, writable: bool) -> tuple[int, int | None, bool]:
    """(address, length or None for a bare integer, host-accessible)."""
    if isinstance(obj, bool):
        raise ArgumentTypeError(
            f"{side} must be an address, a buffer or a cuda.core Buffer, not bool", argument=side, value=obj
        )
    if isinstance(obj, int):
        return _word(side, obj), None, True
    if _is_cuda_core_buffer(obj):
        if getattr(obj, "is_closed", False):
            raise ArgumentError(f"{side} is a closed cuda.core Buffer", argument=side, value=obj)
        addr = _word(f"{side}.handle", _int_of(obj.handle, f"{side}.handle"))
        size = _word(f"{side}.size", _int_of(obj.size, f"{side}.size"))
        resource = obj.memory_resource
        if resource is None:
            raise NotHostAccessible(
                f"{side} memory at {addr:#x} is a cuda.core Buffer without a memory resource: whether "
                "the host can touch it is known only through a driver call (cuPointerGetAttributes), "
                f"which packing never makes; pass int({side}.handle) with nbytes if you know it is host memory",
                side=side,
                addr=addr,
            )
        return addr, size, bool(resource.is_host_accessible)
    addr, length = _native.buffer_region(obj, writable, side)
    return addr, length, True


def pack_host_copy_args(
    dst: HostRegion, src: HostRegion, nbytes: int | None = None, *, dst_offset: int = 0, src_offset: int = 0
) -> bytes:
    """A record that copies ``nbytes`` bytes from ``src`` to ``dst``, as bytes.

    ``dst`` and ``src`` may be:

    - a buffer-protocol object: numpy arrays, ``bytearray``, ``memoryview``,
      ``mmap``, pinned memory exposed as a buffer, and ``bytes`` as a source.
      It must be C-contiguous (strided views are refused: ``NotContiguous``),
      and ``dst`` writable (``ReadOnlyBuffer``). Host memory by construction.
    - a cuda.core ``Buffer``: accepted where its memory resource says it is
      host-accessible (``PinnedMemoryResource``, ``LegacyPinnedMemoryResource``,
      managed memory). Known without a driver call, so packing works on a
      host-function thread too; a device-only buffer, or one without a memory
      resource, is ``NotHostAccessible``.
    - an ``int`` address: the caller answers for it (that it is host memory
      valid for ``nbytes`` bytes); only nulls, wrapping and overlap are checked.

    ``nbytes`` defaults to the size of ``src`` (from ``src_offset`` on); it
    is required when ``src`` is an int. Offsets are in bytes. Every refusal is
    a ``PackError`` subclass carrying its numbers: ``OutOfBounds``,
    ``Overlap``, ``AddressOverflow``, ``NullWithLength``,
    ``NotHostAccessible``, ``NotContiguous``, ``ReadOnlyBuffer``,
    ``IntegerOutOfRange``.

    The record holds addresses only. Keep ``dst`` and ``src`` alive, in
    place and at their size (no ``bytearray`` or numpy resize) until every
    host function that runs the record has run; a graph runs it on every
    replay, so until the graph and all its executables are destroyed.
    """
    dst_offset = _word("dst_offset", dst_offset)
    src_offset = _word("src_offset", src_offset)
    dst_region = _region(dst, "dst", writable=True)
    src_region = _region(src, "src", writable=False)
    if nbytes is None:
        if src_region[1] is None:
            raise ArgumentTypeError("nbytes is required when src is an integer address", argument="nbytes", value=None)
        if src_offset > src_region[1]:
            raise OutOfBounds(
                f"source offset {src_offset} is past the end of a {src_region[1]}-byte buffer",
                side="src",
                offset=src_offset,
                nbytes=0,
                len=src_region[1],
            )
        nbytes = src_region[1] - src_offset
    nbytes = _word("nbytes", nbytes)
    return _native.pack_regions(dst_region, dst_offset, src_region, src_offset, nbytes)


def pack_host_copy_args_into(
    buffer: HostBuffer,
    offset: int,
    dst: HostRegion,
    src: HostRegion,
    nbytes: int | None = None,
    *,
    dst_offset: int = 0,
    src_offset: int = 0,
) -> int:
    """Packs a record into ``buffer`` at byte ``offset`` (one record per ring
    slot, say) and returns the record's address, a ``user_data`` for
    ``HOST_COPY_FN`` (any alignment works: the record is read unaligned).

    Checks as ``pack_host_copy_args``. ``buffer`` must be writable and
    C-contiguous; it must stay alive and unmoved, and the record unchanged,
    until every host function given that address has run.
    """
    record = pack_host_copy_args(dst, src, nbytes, dst_offset=dst_offset, src_offset=src_offset)
    offset = _word("offset", offset)
    addr, length = _native.buffer_region(buffer, True, "buffer")
    if offset + HOST_COPY_ARGS_SIZE > length:
        raise OutOfBounds(
            f"buffer range of {HOST_COPY_ARGS_SIZE} bytes at offset {offset} is out of bounds of a {length}-byte buffer",
            side="buffer",
            offset=offset,
            nbytes=HOST_COPY_ARGS_SIZE,
            len=length,
        )
    ctypes.memmove(addr + offset, record, HOST_COPY_ARGS_SIZE)
    return addr + offset


def unpack_host_copy_args(data: HostBuffer, offset: int = 0) -> HostCopyArgs:
    """Reads a record back from ``data`` (bytes or any C-contiguous buffer) at byte ``offset``."""
    try:
        # numpy arrays are buffers too; their stubs say so from Python 3.12 on.
        view = memoryview(cast("Buffer", data)).cast("B")
    except (TypeError, ValueError) as failure:
        raise _refused(failure, "data", data) from failure
    offset = _word("offset", offset)
    if offset + HOST_COPY_ARGS_SIZE > len(view):
        raise OutOfBounds(
            f"record of {HOST_COPY_ARGS_SIZE} bytes at offset {offset} is out of bounds of a {len(view)}-byte buffer",
            side="data",
            offset=offset,
            nbytes=HOST_COPY_ARGS_SIZE,
            len=len(view),
        )
    return HostCopyArgs(*_RECORD.unpack_from(view, offset))


def rejected() -> int:
    """How many records the host functions rejected in this process (null
    ``user_data``, null addresses with a length, wrapping ranges)."""
    return _native.rejected()


def set_parallel_workers(workers: int) -> int:
    """Sets how many worker threads ``HOST_COPY_PARALLEL_FN`` splits a copy
    across, besides the driver's own thread; returns the number now active.

    The first call starts the pool (``workers`` threads, once per process);
    later calls let only the first ``workers`` of those take part, so a
    larger number than the first call's is capped. 0 copies on the driver's
    thread alone. On the H200 host 12 workers reached the link's speed.
    """
    return _native.set_parallel_workers(workers)[1]


def parallel_workers() -> tuple[int, int]:
    """``(started, active)`` worker threads of ``HOST_COPY_PARALLEL_FN``."""
    return _native.parallel_workers()


def owned_record_counts() -> tuple[int, int]:
    """``(created, freed)``: records the launch functions copied to the heap,
    and how many have been freed (after their host function ran, or with
    their graph). The difference is what is in flight or held by graphs."""
    return _native.owned_record_counts()


def _handle(obj: Any, what: str, type_name: str) -> int:
    if isinstance(obj, bool):
        raise ArgumentTypeError(f"{what} must be a handle, not bool", argument=what, value=obj)
    if isinstance(obj, int):
        return _word(what, obj)
    if type(obj).__name__ == type_name:
        return _word(what, _int_of(obj, what))
    raise ArgumentTypeError(
        f"{what}: expected a cuda.bindings {type_name} or an int handle, got {type(obj).__name__}", argument=what, value=obj
    )


def launch_host_copy_args(stream: Any, record: HostBuffer, *, parallel: bool = False) -> bool:
    """Launches ``HOST_COPY_FN`` (or, with ``parallel``, ``HOST_COPY_PARALLEL_FN``)
    on ``stream`` with a packed ``record`` (the bytes ``pack_host_copy_args``
    returns, or any C-contiguous buffer of those 24 bytes; anything else is
    ``ArgumentTypeError``, a record of another length ``ArgumentError``),
    in stream order.

    ``stream``: a cuda.core ``Stream`` or ``GraphBuilder`` (``__cuda_stream__``),
    a cuda.bindings ``CUstream``, or an int handle (0: the legacy default
    stream of the current context). Works where cuda-bindings'
    ``cuLaunchHostFunc`` would not: that one calls through a trampoline that
    takes the GIL.

    The package owns a heap copy of the record until the host function has
    run; the host function frees it on the driver's thread, without the GIL.
    If the stream is capturing, the copy instead belongs to the captured
    graph (a CUDA user object) and is freed when the graph and every
    executable made from it are destroyed, so replays keep working. Returns
    whether the stream was capturing.

    The caller keeps the record's buffers alive and in place until the copy
    has run (synchronize the stream or an event recorded after the launch
    before reading, freeing or resizing them); in a capture, until the graph
    and its executables are destroyed. Whether the stream is capturing is
    read just before the launch (``cuStreamGetCaptureInfo``). A process-wide
    lock, held from that check to ``cuLaunchHostFunc`` and by
    ``add_host_copy_node``, keeps these calls from changing one graph at
    once, so threads may launch on several streams of one capture. What
    stays the caller's promise, as CUDA graphs are not thread-safe: while
    this call runs, no other code (cuda-python, another library) begins or
    ends a capture of this stream, joins it to one through an event wait, or
    adds work to the graph it captures into. After a context error the driver skips
    host functions: the copy never happens and its record stays allocated
    (see ``owned_record_counts``). The stream must belong to its device's
    primary context (as cuda.core's, torch's and cupy's do). Raises
    ``CudaUnavailable`` without a driver and ``CudaError`` when a driver
    call fails.
    """
    return _native.launch_owned(stream, record, bool(parallel))


def launch_host_copy(
    stream: Any,
    dst: HostRegion,
    src: HostRegion,
    nbytes: int | None = None,
    *,
    parallel: bool = False,
    dst_offset: int = 0,
    src_offset: int = 0,
) -> bool:
    """``launch_host_copy_args(stream, pack_host_copy_args(dst, src, nbytes, ...))``:
    packs with every check, then launches. What the caller keeps alive, and
    until when, is as described there."""
    record = pack_host_copy_args(dst, src, nbytes, dst_offset=dst_offset, src_offset=src_offset)
    return launch_host_copy_args(stream, record, parallel=parallel)


def add_host_copy_node(
    graph: Any,
    dst: HostRegion,
    src: HostRegion,
    nbytes: int | None = None,
    *,
    dependencies: Sequence[Any] = (),
    parallel: bool = False,
    dst_offset: int = 0,
    src_offset: int = 0,
) -> int:
    """Adds a host node running ``HOST_COPY_FN`` (or the parallel one) to a raw
    cuda.bindings graph (``CUgraph`` or int handle), after ``dependencies``
    (``CUgraphNode`` objects or int handles). Returns the node's handle as an
    int (``cuda.bindings.driver.CUgraphNode(node)`` wraps it).

    The graph owns a heap copy of the record through a CUDA user object: it
    is freed when the graph and every executable instantiated from it are
    destroyed, so every replay finds it. The caller keeps ``dst`` and ``src``
    alive and in place that long.

    Calls from several threads on one graph are serialized by the lock
    ``launch_host_copy_args`` takes; no other code may change the graph
    (add or remove nodes, instantiate or destroy it) while this call runs.
    ``graph`` belongs to the current context and ``dependencies`` are nodes
    of ``graph``: handles of other graphs' nodes, or of destroyed ones, are
    passed to the driver unchecked.
    """
    record = pack_host_copy_args(dst, src, nbytes, dst_offset=dst_offset, src_offset=src_offset)
    graph_handle = _handle(graph, "graph", "CUgraph")
    try:
        nodes = list(dependencies)
    except TypeError as failure:
        raise ArgumentTypeError(
            f"dependencies: expected a sequence of graph nodes, got {type(dependencies).__name__}",
            argument="dependencies",
            value=dependencies,
        ) from failure
    handles = [_handle(node, f"dependencies[{index}]", "CUgraphNode") for index, node in enumerate(nodes)]
    return _native.add_host_node(graph_handle, record, handles, bool(parallel))
