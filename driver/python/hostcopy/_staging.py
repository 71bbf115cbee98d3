"""Staged transfers between GPU memory and the host memory you already
have, at the link's speed, in one call (the Rust layer's ``Stager``).

The device side may be a cuda.core ``Buffer``, anything with ``__dlpack__``
(torch and cupy arrays, jax arrays) or ``__cuda_array_interface__``
(numba device arrays, cupy, torch). The host side may be anything with the
buffer protocol (numpy arrays, ``bytearray``, ``memoryview``, ``mmap``;
``bytes`` as a source) or a CPU tensor through DLPack. Both must be
C-contiguous; a destination must be writable, and a DLPack destination
proven so: its capsule must be versioned (DLPack >= 1.0: torch, numpy >=
2.1 when asked with ``max_version``) and not flagged read-only or a copy;
an unversioned capsule (jax, producers before DLPack 1.0) cannot say, so it
is refused as a destination (``ReadOnlyBuffer``; pass a buffer-protocol
view instead). Host memory given as the device side (a CPU tensor, a numpy
array, any buffer) raises ``NotDeviceMemory``.

``nbytes``, ``dst_offset``, ``src_offset`` and every field of a block are
integers in ``operator.index``'s sense (``int``, numpy integer scalars;
not ``bool``, ``float`` or ``str``, which raise ``TypeError``); one that
is negative or wider than the platform's word raises ``IntegerOutOfRange``
naming it (``nbytes``, ``blocks[3].host_offset``). The native module
recognises them (src/integers.rs, src/blocks.rs).

What each bad argument of a copy raises; a call refused so copies nothing
(every class is in ``hostcopy`` and a ``hostcopy.Error``; all but
``TypeError``, ``MemoryNotHeld`` (a ``TypeError``) and ``StreamCapturing``
are ``ValueError`` subclasses):

- ``TypeError``: ``nbytes``, an offset or a block field that is no integer
  (``float``, ``str``, ``bool``); ``blocks`` that are no triples (``"123"``,
  a dict, an array not of shape ``(n, 3)``) or an array of a non-integer
  dtype; a side of no known kind; GPU memory as the host side; a jax array
  as a destination.
- ``MemoryNotHeld``: a torch CPU tensor, or a numpy array or memoryview
  over one or over a DLPack export, as the host side of a
  ``blocking=False`` copy (torch can free its memory under the copy).
- ``IntegerOutOfRange``: ``nbytes``, an offset or a block field that is
  negative or wider than a word (``>= 2**64``), with its ``name``.
- ``OutOfBounds``: a range past the end of either side;
  ``BlockOutOfBounds``: a block past either; ``BlocksOverlap``: two blocks
  writing the same bytes.
- ``NotDeviceMemory``: host memory (a CPU tensor, a numpy array, a
  ``bytearray``) as the device side.
- ``NotContiguous``: a strided side. ``ReadOnlyBuffer``: a destination that
  is read-only or not proven writable (above).
- ``WrongDevice``: memory or a stream of another device than the stager's;
  ``StreamCapturing``: a ``stream`` capturing a graph; ``StagerClosed``: a
  closed stager.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any, Literal, Optional, Sequence, SupportsIndex, TypedDict, Union, overload

from . import _native
from ._errors import MemoryNotHeld, NotContiguous, NotDeviceMemory, ReadOnlyBuffer, StreamCapturing

#: DLPack device types.
_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_CUDA_MANAGED = 1, 2, 3, 13

#: A copy under way, from a ``blocking=False`` call: ``wait()`` blocks (the
#: GIL released), ``done()`` polls, ``await transfer`` completes through the
#: running asyncio or uvloop event loop (``hostcopy._awaiting``): the
#: stager's finish thread, native and GIL-free, waits and wakes the loop
#: through a pipe. ``await`` returns ``None`` or raises the error ``wait()``
#: raises; awaiting an ended transfer (again, or after ``wait()``) returns
#: at once; several tasks may await one transfer. Cancelling the awaiting
#: task leaves the transfer in the finish thread's hands, its memory kept
#: until the copy is done.
Transfer = _native.Transfer


def _stream_handle(stream: Any) -> int:
    """A cuda.core Stream (``__cuda_stream__``), a torch or cupy stream
    (``.cuda_stream`` / ``.ptr``), a cuda.bindings ``CUstream``, an object
    with a ``.handle`` of those, or an int handle (0: the legacy default
    stream)."""
    from . import _stream_handle as handle_of  # the launch functions' reading

    for name in ("cuda_stream", "ptr"):  # torch.cuda.Stream, cupy.cuda.Stream
        value = getattr(stream, name, None)
        if isinstance(value, int) and not isinstance(stream, int):
            return value
    return handle_of(stream)


def _contiguous(shape: tuple[int, ...], strides: Optional[tuple[int, ...]], item: int) -> bool:
    if strides is None or 0 in shape:
        return True
    expected = item
    for extent, stride in zip(reversed(shape), reversed(strides)):
        if extent != 1 and stride != expected:
            return False
        expected *= extent
    return True


def _is_cuda_core_buffer(obj: Any) -> bool:
    """A cuda.core ``Buffer``, or an object shaped as one (``handle``,
    ``size``, ``memory_resource``): what packing and transfers read of it.
    Looked up on the type, so that no property runs (a Buffer's
    ``is_host_accessible`` calls the driver when it has no memory
    resource)."""
    kind = type(obj)
    return all(hasattr(kind, name) for name in ("handle", "size", "memory_resource"))


class _Device:
    """Where a device array's bytes are, what keeps them, and the streams a
    transfer waits for first."""

    def __init__(self, ptr: int, nbytes: int, owner: Any, streams: list[int]) -> None:
        self.ptr, self.nbytes, self.owner, self.streams = ptr, nbytes, owner, streams


def _is_jax_array(obj: Any) -> bool:
    return type(obj).__module__.split(".")[0] in ("jax", "jaxlib")


def _refuse_jax_destination(obj: Any, side: str) -> None:
    """jax arrays are immutable, on any device, but their unversioned
    DLPack capsules cannot say so: they are told by their type, for the
    message (an unversioned host capsule is refused as a destination
    anyway, src/dlpack.rs; a jax device array has no other guard)."""
    if _is_jax_array(obj):
        raise TypeError(f"{side} is a jax array: jax arrays are immutable, so they cannot be a destination")


def _host_memory_as_device(obj: Any, side: str, device_type: Optional[int] = None) -> NotDeviceMemory:
    """``NotDeviceMemory`` for host memory given where GPU memory is expected:
    a DLPack array of a host device type (``device_type``: a CPU tensor, a
    numpy array, pinned memory) or a buffer-protocol object, with its
    address where it can be read."""
    addr = 0
    try:
        if device_type is None:
            addr = _native.buffer_region(obj, False, side)[0]
            what = f"a {type(obj).__name__}, host memory"
        else:
            addr = _native.dlpack_region(obj.__dlpack__())[0]
            what = f"DLPack device type {device_type}"
    except Exception:  # the address is only for the message: a strided array has one too
        what = f"a {type(obj).__name__}" if device_type is None else f"DLPack device type {device_type}"
    return NotDeviceMemory(
        f"{side} is not GPU memory ({what}): pass host arrays as the other side",
        side=side,
        addr=addr,
    )


def _is_host_buffer(obj: Any) -> bool:
    try:
        memoryview(obj).release()
    except TypeError:
        return False
    return True


def _producer_stream(obj: Any) -> Optional[int]:
    """The current stream of the library that made ``obj``, on which its
    DLPack export orders its pending work and its graph captures run:
    torch's and cupy's (looked up, never imported); ``None`` for others."""
    root = type(obj).__module__.partition(".")[0]
    library = sys.modules.get(root)
    if library is None:
        return None
    if root == "torch":
        return int(library.cuda.current_stream().cuda_stream)  # what its __dlpack__ orders
    if root == "cupy":
        return int(library.cuda.get_current_stream().ptr)
    return None


def _refuse_during_capture(obj: Any, side: str, consumer: int) -> None:
    """``StreamCapturing`` when ``obj``'s library captures a graph on its
    current stream and the export would order that stream before another
    one: the producer's event wait would join ``consumer`` to the capture
    and break it (``torch.cuda.graph`` then fails, with every later random
    number call). Given that very stream as ``stream=``, the producer does
    not wait, and the transfer's own check refuses the capturing stream."""
    current = _producer_stream(obj)
    if current is not None and current != consumer:
        _refuse_capturing(current, side)


def _refuse_capturing(current: int, side: str) -> None:
    """``StreamCapturing`` when the library's current stream ``current``
    captures a graph. The legacy default stream (0 or 1) never captures:
    it is not asked (which needs no current context)."""
    if current not in (0, 1) and _native.stream_capturing(current):
        raise StreamCapturing(
            f"{side}'s library is capturing a graph on its current stream ({current:#x}): a staged transfer "
            "cannot become part of it, and ordering it after that stream would break the capture; copy "
            "before or after the capture"
        )


def _torch_current_stream(torch: Any, device: int) -> int:
    """torch's current stream on ``device``, as a handle (0: the legacy
    default stream); through torch's raw accessor where it has one (no
    Stream object is made)."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return int(raw(device))
    return int(torch.cuda.current_stream(device).cuda_stream)


def _torch_device_side(obj: Any, side: str, consumer: int) -> Optional[_Device]:
    """A plain CUDA torch tensor's device side read from the tensor, not
    through a DLPack export (which costs a capsule and, for another stream,
    an event, a third of a small call): its address and length, kept alive
    by the tensor, ordered after torch's current stream by the stager's own
    wait where that is not ``consumer`` (so a capturing one is refused
    before anything is queued, as the export's wait would break the
    capture). ``None`` for anything else, which the DLPack path reads (and
    refuses what torch does not export: a tensor that requires grad, with
    the conjugate or negative bit, sparse, quantized)."""
    torch = sys.modules.get("torch")
    tensor = getattr(torch, "Tensor", None)
    if not (isinstance(tensor, type) and isinstance(obj, tensor)):
        return None
    if (
        getattr(obj, "is_cuda", False) is not True
        or obj.layout is not torch.strided
        or obj.requires_grad
        or obj.is_conj()
        or obj.is_neg()
        or obj.is_quantized
    ):
        return None
    if not obj.is_contiguous():
        raise NotContiguous(
            f"{side} is strided (shape {tuple(obj.shape)}, strides {obj.stride()}): a transfer moves one "
            "contiguous run of bytes",
            side=side,
            shape=tuple(obj.shape),
            strides=obj.stride(),
        )
    current = _torch_current_stream(torch, obj.device.index)
    streams = [consumer]
    # 0 and 1 both name the legacy default stream.
    if current != consumer and not (current in (0, 1) and consumer in (0, 1)):
        _refuse_capturing(current, side)
        streams.append(current)
    return _Device(int(obj.data_ptr()), int(obj.nbytes), obj, streams)


def _device_side(obj: Any, side: str, writable: bool, consumer: int) -> _Device:
    if writable:
        _refuse_jax_destination(obj, side)
    torch_side = _torch_device_side(obj, side, consumer)
    if torch_side is not None:
        return torch_side
    if _is_cuda_core_buffer(obj):
        if getattr(obj, "is_closed", False):
            raise ValueError(f"{side} is a closed cuda.core Buffer")
        return _Device(int(obj.handle), int(obj.size), obj, [])
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        device_type, _ = obj.__dlpack_device__()
        if int(device_type) not in (_DL_CUDA, _DL_CUDA_MANAGED):
            raise _host_memory_as_device(obj, side, int(device_type))
        _refuse_during_capture(obj, side, consumer)
        # The producer orders its pending work (on its current stream)
        # before `consumer`; the transfer then waits for `consumer`. A
        # versioned capsule (DLPack 1.0) says whether a destination may be
        # written; producers older than it take no max_version.
        try:
            capsule = obj.__dlpack__(stream=consumer, max_version=(1, 0))
        except TypeError:
            capsule = obj.__dlpack__(stream=consumer)
        if writable:
            _native.dlpack_device_destination(capsule, side)
        ptr, nbytes, _, _, contiguous = _native.dlpack_region(capsule)
        if not contiguous:
            raise NotContiguous(f"{side} is strided: a transfer moves one contiguous run of bytes", side=side, shape=(), strides=())
        return _Device(ptr, nbytes, (obj, capsule), [consumer])
    interface = getattr(obj, "__cuda_array_interface__", None)
    if interface is not None:
        ptr, readonly = interface["data"]
        shape = tuple(interface["shape"])
        item = int(interface["typestr"][2:])
        strides = interface.get("strides")
        if not _contiguous(shape, None if strides is None else tuple(strides), item):
            raise NotContiguous(
                f"{side} is strided (shape {shape}, strides {strides}): a transfer moves one contiguous run of bytes",
                side=side,
                shape=shape,
                strides=strides,
            )
        if writable and readonly:
            raise ReadOnlyBuffer(f"{side} is read-only: a destination must be writable", side=side, len=0)
        nbytes = item
        for extent in shape:
            nbytes *= extent
        streams = [consumer]
        producer = interface.get("stream")
        if producer is not None and producer != consumer:
            streams.append(int(producer))
        return _Device(int(ptr or 0), nbytes, obj, streams)
    if _is_host_buffer(obj):
        raise _host_memory_as_device(obj, side)
    raise TypeError(
        f"{side}: expected GPU memory (a cuda.core Buffer, or an array with __dlpack__ or "
        f"__cuda_array_interface__), got {type(obj).__name__}"
    )


def _host_side(obj: Any, side: str, writable: bool) -> Any:
    if writable:
        _refuse_jax_destination(obj, side)
    if _is_host_buffer(obj):
        return _native.host_memory(obj, writable, side)
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        device_type, _ = obj.__dlpack_device__()
        if int(device_type) not in (_DL_CPU, _DL_CUDA_HOST):
            raise TypeError(
                f"{side} is GPU memory (DLPack device type {int(device_type)}); host memory is expected here"
            )
        # A versioned capsule (DLPack 1.0) can say that the tensor is
        # read-only or a copy; producers older than it take no max_version,
        # and their unversioned capsule is refused as a destination (it
        # cannot prove the tensor writable) but read as a source.
        try:
            capsule = obj.__dlpack__(max_version=(1, 0))
        except TypeError:
            capsule = obj.__dlpack__()
        # The address and length come from the capsule, read in Rust.
        return _native.dlpack_host_memory(capsule, writable, side)
    raise TypeError(
        f"{side}: expected host memory (the buffer protocol: numpy, bytearray, memoryview, mmap; "
        f"or a CPU tensor with __dlpack__), got {type(obj).__name__}"
    )


def _is_torch_tensor(obj: Any) -> bool:
    """A torch tensor, of a subclass defined anywhere (looked up, never imported)."""
    torch = sys.modules.get("torch")
    tensor = getattr(torch, "Tensor", None)
    if isinstance(tensor, type) and isinstance(obj, tensor):
        return True
    return type(obj).__module__.partition(".")[0] == "torch" and hasattr(obj, "untyped_storage")


def _refuse_memory_not_held(obj: Any, side: str) -> None:
    """Refuses, for a ``blocking=False`` transfer, host memory whose owner
    can free it while the transfer holds the object (``MemoryNotHeld``):
    a torch tensor (of any subclass), reached directly or as the owner of
    a numpy array or memoryview over it (through ``.base`` and ``.obj``,
    and an array-interface wrapper's ``.base``, as ``as_strided`` makes),
    and memory numpy borrowed through a DLPack capsule
    (whose producer may be torch). Measured with torch 2.11
    (bench/torch_storage_probe.py): a live capsule of a CPU tensor keeps
    none of its memory across ``resize_`` (grow), ``set_``, ``.data =``,
    ``share_memory_`` or a resizing ``out=``."""
    numpy = sys.modules.get("numpy")
    link, depth = obj, 0
    while link is not None and depth < 64:
        if _is_torch_tensor(link):
            owner = "" if link is obj else f" (the owner of this {type(obj).__name__})"
            raise MemoryNotHeld(
                f"{side} is a torch tensor{owner}: torch frees a tensor's memory under any reference to it "
                "when it is resized or given other storage (resize_(), set_(), share_memory_(), t.data = ..., "
                "an out= of another shape), so a blocking=False transfer cannot keep it for its copies. "
                "Copy with blocking=True (the GIL is released: in asyncio, asyncio.to_thread), or keep the "
                "host memory in numpy (a = numpy.empty(n, numpy.uint8); t = torch.from_numpy(a)) and pass a",
                side=side,
            )
        if type(link).__name__ == "PyCapsule":
            raise MemoryNotHeld(
                f"{side} is a numpy array over a DLPack export (numpy.from_dlpack): its producer (torch, for "
                "one) can free the memory while the array is alive, so a blocking=False transfer cannot keep "
                "it for its copies. Copy with blocking=True, or pass memory numpy owns",
                side=side,
            )
        if numpy is not None and isinstance(link, numpy.ndarray):
            link = link.base
        elif isinstance(link, memoryview):
            link = link.obj
        elif hasattr(link, "__array_interface__") and hasattr(link, "base"):
            link = link.base  # numpy's as_strided wraps its input so
        else:
            return
        depth += 1


def _blocks(blocks: Any) -> Any:
    """The blocks for the native call, which recognises them (src/blocks.rs):
    a numpy array as a fresh C-ordered copy of its own dtype (numpy.array
    copies by default: no other thread holds the copy, so none writes it
    while it is read; an integer dtype is read as it is, any other refused
    there, never cast); an array of another library that numpy takes as an
    integer array (a CPU torch tensor, a jax array: ``__array__``) the same
    way, without a Python object per block; other arrays (a CUDA tensor, a
    cupy array, which refuse ``__array__``) as their ``tolist()``; anything
    else as it is."""
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(blocks, numpy.ndarray):
        if blocks.dtype.kind in "Mm":
            # numpy exports no buffer of datetime64 or timedelta64 (its
            # ValueError would say nothing of blocks): refused here, as the
            # native module refuses every other non-integer dtype.
            raise TypeError(
                f"blocks: an array of dtype {blocks.dtype}: blocks are integers (int8 to int64, "
                "uint8 to uint64), and other dtypes are refused, not cast"
            )
        return numpy.array(blocks, order="C")
    if hasattr(blocks, "tolist") and not _is_host_buffer(blocks):
        if numpy is not None and hasattr(blocks, "__array__"):
            try:
                as_array = numpy.asarray(blocks)
            except (TypeError, ValueError, RuntimeError):
                as_array = None  # refused (a device array): its tolist()
            if as_array is not None and as_array.dtype.kind in "iu":
                return numpy.array(as_array, order="C")
        return blocks.tolist()
    return blocks


def _sides(dst: Any, src: Any, to_device: bool, stream: Any, blocking: bool) -> tuple[_Device, Any, int]:
    """What every transfer reads first, in this order: the stream it is
    ordered on (none given: 1, the legacy default stream), its device side,
    then its host side (``to_device``: ``dst`` is the device side); in a
    forked child or at exit, nothing (``_native.check_usable``). The host
    side of a ``blocking=False`` transfer is checked for memory it cannot
    hold before anything is exported."""
    _native.check_usable()
    if not blocking:
        _refuse_memory_not_held(src if to_device else dst, "src" if to_device else "dst")
    consumer = 1 if stream is None else (_stream_handle(stream) or 1)
    if to_device:
        return _device_side(dst, "dst", True, consumer), _host_side(src, "src", False), consumer
    return _device_side(src, "src", False, consumer), _host_side(dst, "dst", True), consumer


def _device_ordinal(device: Any) -> int:
    if device is None:
        return 0
    for name in ("device_id", "index", "id"):  # cuda.core Device, torch.device, cupy Device
        value = getattr(device, name, None)
        if isinstance(value, int):
            return value
    if isinstance(device, int) and not isinstance(device, bool):
        return device
    raise TypeError(f"device: expected an ordinal or a device object, got {type(device).__name__}")


class StagerOptions(TypedDict):
    """``Stager.options``: what the stager works with."""

    #: Bytes per chunk (each staging buffer's size).
    chunk: int
    #: Pinned staging buffers, each on its own stream.
    buffers: int
    #: Copy threads of the stager's own pool as started (fewer than asked
    #: where the system refused a thread).
    workers: int
    #: Whether host-to-device chunks are written with streaming stores.
    h2d_streaming: bool
    #: Transfers below this many bytes take the driver's own path.
    driver_path_below: int
    #: Whether a never-touched destination's pages are made present ahead
    #: of its copies (see ``Stager``).
    prefault: bool


class Stager:
    """Pinned staging buffers, one stream each, and copy workers of its own,
    on one device: what ``copy_to_host`` and ``copy_to_device`` use.

    Options left ``None`` take the Rust layer's defaults, measured on an
    H200 host: 16 MiB chunks, 4 staging buffers, workers = cores - 4 (on
    machines of more than 8 cores; cores - 1 on smaller ones), cached stores
    for host to device, the driver's own path below 2 MiB. ``chunk``,
    ``buffers``, ``workers`` and ``driver_path_below`` are integers
    (``int``, numpy integers) in the ranges ``InvalidOption`` names (chunk
    4 KiB to 1 GiB, 1 to 64 buffers, 0 to 1024 workers); anything else
    raises ``InvalidOption``, a ``ValueError``, before any driver call.
    ``close()`` (or leaving a ``with`` block) frees the staging buffers.

    ``prefault`` (on by default): a transfer to the host samples a few of
    the destination's pages (``mincore``) as it starts; where they are not
    present yet (a fresh ``np.empty``), the copier makes each range's pages
    present (``MADV_POPULATE_WRITE``: contents unchanged) just before its
    chunks are copied, and advises transparent huge pages on the whole huge
    pages of a private anonymous destination where the kernel has them in
    ``madvise`` mode (a policy that stays on that part of the mapping;
    never on file-backed or shared memory). ``prefault=False``: no system
    call, the copy takes the page faults as it writes. Memory made for
    copying into, such as a KV pool, is better made with ``hostcopy.empty``.

    Threads: a stager may be shared by any number of threads (the default
    stager of each device is, made once under a lock). One transfer starts
    or finishes on it at a time, with the GIL released while it waits: a
    blocking copy holds the stager until its bytes are in, so blocking
    copies of several threads through one stager run one after another,
    and a ``blocking=False`` call waits for them too, on an event loop's
    thread as well (a ``wait()`` or an ``await`` waits for its own copies
    without holding the stager, and holds it only briefly to settle the
    transfer afterwards). For copies
    of several threads that overlap, give each thread a ``Stager`` of its
    own, or start them with ``blocking=False``. In asyncio code, start
    transfers with ``blocking=False`` and ``await`` them: see ``Transfer``.

    A transfer holds both of its sides alive, not their storage. torch
    frees a CPU tensor's memory under any reference (``resize_()``,
    ``set_()``, ``share_memory_()``), so a ``blocking=False`` transfer
    refuses a torch CPU tensor as its host side, and a numpy array over one
    or over a DLPack export (``MemoryNotHeld``): pass memory numpy owns
    (``torch.from_numpy`` views it). Do not free the device side's memory
    while a transfer runs (a cuda.core ``Buffer``'s ``close()``), nor
    either side's from another thread during a blocking transfer, which
    releases the GIL.
    """

    def __init__(
        self,
        device: Any = None,
        *,
        chunk: Optional[SupportsIndex] = None,
        buffers: Optional[SupportsIndex] = None,
        workers: Optional[SupportsIndex] = None,
        h2d_streaming: Optional[bool] = None,
        driver_path_below: Optional[SupportsIndex] = None,
        prefault: Optional[bool] = None,
    ) -> None:
        self._native = _native.Stager(
            _device_ordinal(device), chunk, buffers, workers, h2d_streaming, driver_path_below, prefault
        )

    @property
    def device(self) -> int:
        """The device ordinal."""
        return int(self._native.device)

    @property
    def options(self) -> StagerOptions:
        """The options in force (defaults filled in), read without waiting for
        a transfer: ``chunk``, ``buffers``, ``workers``, ``h2d_streaming``,
        ``driver_path_below``, ``prefault``."""
        return self._native.options

    def close(self) -> None:
        """Waits for every transfer in flight, then frees the staging buffers.
        Later transfers raise ``StagerClosed`` (a ``ValueError``); ``wait()`` on an earlier
        ``Transfer`` returns how it ended."""
        self._native.close()

    def __enter__(self) -> "Stager":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @overload
    def copy_to_host(
        self,
        dst: Any,
        src: Any,
        nbytes: Optional[SupportsIndex] = None,
        *,
        stream: Any = None,
        blocking: Literal[True] = True,
        dst_offset: SupportsIndex = 0,
        src_offset: SupportsIndex = 0,
    ) -> None: ...

    @overload
    def copy_to_host(
        self,
        dst: Any,
        src: Any,
        nbytes: Optional[SupportsIndex] = None,
        *,
        stream: Any = None,
        blocking: Literal[False],
        dst_offset: SupportsIndex = 0,
        src_offset: SupportsIndex = 0,
    ) -> Transfer: ...

    @overload
    def copy_to_host(
        self,
        dst: Any,
        src: Any,
        nbytes: Optional[SupportsIndex] = None,
        *,
        stream: Any = None,
        blocking: bool = True,
        dst_offset: SupportsIndex = 0,
        src_offset: SupportsIndex = 0,
    ) -> Optional[Transfer]: ...

    def copy_to_host(
        self,
        dst: Any,
        src: Any,
        nbytes: Optional[SupportsIndex] = None,
        *,
        stream: Any = None,
        blocking: bool = True,
        dst_offset: SupportsIndex = 0,
        src_offset: SupportsIndex = 0,
    ) -> Optional[Transfer]:
        """Copies ``nbytes`` (default: all of ``src`` past ``src_offset``)
        from GPU memory ``src`` into host memory ``dst``; see
        ``hostcopy.copy_to_host``."""
        device, host, consumer = _sides(dst, src, False, stream, bool(blocking))
        return self._native.device_to_host(
            host,
            dst_offset,
            device.ptr,
            device.nbytes,
            device.owner,
            src_offset,
            nbytes,
            device.streams,
            consumer,
            bool(blocking),
        )

    @overload
    def copy_to_device(
        self,
        dst: Any,
        src: Any,
        nbytes: Optional[SupportsIndex] = None,
        *,
        stream: Any = None,
        blocking: Literal[True] = True,
        dst_offset: SupportsIndex = 0,
        src_offset: SupportsIndex = 0,
    ) -> None: ...

    @overload
    def copy_to_device(
        self,
        dst: Any,
        src: Any,
        nbytes: Optional[SupportsIndex] = None,
        *,
        stream: Any = None,
        blocking: Literal[False],
        dst_offset: SupportsIndex = 0,
        src_offset: SupportsIndex = 0,
    ) -> Transfer: ...

    @overload
    def copy_to_device(
        self,
        dst: Any,
        src: Any,
        nbytes: Optional[SupportsIndex] = None,
        *,
        stream: Any = None,
        blocking: bool = True,
        dst_offset: SupportsIndex = 0,
        src_offset: SupportsIndex = 0,
    ) -> Optional[Transfer]: ...

    def copy_to_device(
        self,
        dst: Any,
        src: Any,
        nbytes: Optional[SupportsIndex] = None,
        *,
        stream: Any = None,
        blocking: bool = True,
        dst_offset: SupportsIndex = 0,
        src_offset: SupportsIndex = 0,
    ) -> Optional[Transfer]:
        """Copies ``nbytes`` (default: all of ``src`` past ``src_offset``)
        from host memory ``src`` into GPU memory ``dst``; see
        ``hostcopy.copy_to_device``."""
        device, host, consumer = _sides(dst, src, True, stream, bool(blocking))
        return self._native.host_to_device(
            device.ptr,
            device.nbytes,
            device.owner,
            dst_offset,
            host,
            src_offset,
            nbytes,
            device.streams,
            consumer,
            bool(blocking),
        )

    @overload
    def copy_blocks_to_host(
        self,
        dst: Any,
        src: Any,
        blocks: Union[Sequence[Sequence[SupportsIndex]], Any],
        *,
        stream: Any = None,
        blocking: Literal[True] = True,
    ) -> None: ...

    @overload
    def copy_blocks_to_host(
        self,
        dst: Any,
        src: Any,
        blocks: Union[Sequence[Sequence[SupportsIndex]], Any],
        *,
        stream: Any = None,
        blocking: Literal[False],
    ) -> Transfer: ...

    @overload
    def copy_blocks_to_host(
        self,
        dst: Any,
        src: Any,
        blocks: Union[Sequence[Sequence[SupportsIndex]], Any],
        *,
        stream: Any = None,
        blocking: bool = True,
    ) -> Optional[Transfer]: ...

    def copy_blocks_to_host(
        self,
        dst: Any,
        src: Any,
        blocks: Union[Sequence[Sequence[SupportsIndex]], Any],
        *,
        stream: Any = None,
        blocking: bool = True,
    ) -> Optional[Transfer]:
        """Copies each block ``(device_offset, host_offset, nbytes)`` of
        ``blocks`` from GPU memory ``src`` into host memory ``dst``; see
        ``hostcopy.copy_blocks_to_host``."""
        triples = _blocks(blocks)
        device, host, consumer = _sides(dst, src, False, stream, bool(blocking))
        return self._native.device_to_host_blocks(
            host,
            device.ptr,
            device.owner,
            device.nbytes,
            triples,
            device.streams,
            consumer,
            bool(blocking),
        )

    @overload
    def copy_blocks_to_device(
        self,
        dst: Any,
        src: Any,
        blocks: Union[Sequence[Sequence[SupportsIndex]], Any],
        *,
        stream: Any = None,
        blocking: Literal[True] = True,
    ) -> None: ...

    @overload
    def copy_blocks_to_device(
        self,
        dst: Any,
        src: Any,
        blocks: Union[Sequence[Sequence[SupportsIndex]], Any],
        *,
        stream: Any = None,
        blocking: Literal[False],
    ) -> Transfer: ...

    @overload
    def copy_blocks_to_device(
        self,
        dst: Any,
        src: Any,
        blocks: Union[Sequence[Sequence[SupportsIndex]], Any],
        *,
        stream: Any = None,
        blocking: bool = True,
    ) -> Optional[Transfer]: ...

    def copy_blocks_to_device(
        self,
        dst: Any,
        src: Any,
        blocks: Union[Sequence[Sequence[SupportsIndex]], Any],
        *,
        stream: Any = None,
        blocking: bool = True,
    ) -> Optional[Transfer]:
        """Copies each block ``(device_offset, host_offset, nbytes)`` of
        ``blocks`` from host memory ``src`` into GPU memory ``dst``; see
        ``hostcopy.copy_blocks_to_device``."""
        triples = _blocks(blocks)
        device, host, consumer = _sides(dst, src, True, stream, bool(blocking))
        return self._native.host_to_device_blocks(
            device.ptr,
            device.owner,
            device.nbytes,
            host,
            triples,
            device.streams,
            consumer,
            bool(blocking),
        )


_stagers: dict[int, Stager] = {}
_stagers_lock = threading.Lock()


def _new_lock_in_child() -> None:
    # A parent's thread may hold the lock across the fork (it makes a
    # context meanwhile): the child's own copy stays locked for good.
    global _stagers_lock
    _stagers_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lock_in_child)


def _stager_for(obj: Any, side: str) -> Stager:
    """The process's default stager for the device holding ``obj``."""
    _native.check_usable()
    device = _device_of(obj, side)
    with _stagers_lock:
        stager = _stagers.get(device)
        if stager is None:
            stager = _stagers[device] = Stager(device)
        return stager


def _device_of(obj: Any, side: str) -> int:
    if _is_cuda_core_buffer(obj):
        device_id = getattr(obj, "device_id", None)
        if isinstance(device_id, int) and device_id >= 0:
            return device_id
        return int(_native.device_holding(int(obj.handle), side))
    if hasattr(obj, "__dlpack_device__"):
        device_type, device_id = obj.__dlpack_device__()
        if int(device_type) in (_DL_CUDA, _DL_CUDA_MANAGED):
            return int(device_id)
        if hasattr(obj, "__dlpack__"):
            raise _host_memory_as_device(obj, side, int(device_type))
    interface = getattr(obj, "__cuda_array_interface__", None)
    if interface is not None:
        return int(_native.device_holding(int(interface["data"][0] or 0), side))
    if _is_host_buffer(obj):
        raise _host_memory_as_device(obj, side)
    raise TypeError(
        f"{side}: expected GPU memory (a cuda.core Buffer, or an array with __dlpack__ or "
        f"__cuda_array_interface__), got {type(obj).__name__}"
    )


@overload
def copy_to_host(
    dst: Any,
    src: Any,
    nbytes: Optional[SupportsIndex] = None,
    *,
    stream: Any = None,
    blocking: Literal[True] = True,
    dst_offset: SupportsIndex = 0,
    src_offset: SupportsIndex = 0,
) -> None: ...


@overload
def copy_to_host(
    dst: Any,
    src: Any,
    nbytes: Optional[SupportsIndex] = None,
    *,
    stream: Any = None,
    blocking: Literal[False],
    dst_offset: SupportsIndex = 0,
    src_offset: SupportsIndex = 0,
) -> Transfer: ...


@overload
def copy_to_host(
    dst: Any,
    src: Any,
    nbytes: Optional[SupportsIndex] = None,
    *,
    stream: Any = None,
    blocking: bool = True,
    dst_offset: SupportsIndex = 0,
    src_offset: SupportsIndex = 0,
) -> Optional[Transfer]: ...


def copy_to_host(
    dst: Any,
    src: Any,
    nbytes: Optional[SupportsIndex] = None,
    *,
    stream: Any = None,
    blocking: bool = True,
    dst_offset: SupportsIndex = 0,
    src_offset: SupportsIndex = 0,
) -> Optional[Transfer]:
    """Copies GPU memory ``src`` into host memory ``dst`` at the link's speed.

    ``src``: a torch or cupy CUDA array, a jax array, a numba device array,
    a cuda.core ``Buffer``. ``dst``: a numpy array (a fresh ``np.empty`` is
    fine: the copy workers take its page faults in parallel), a
    ``bytearray``, an ``mmap``, a CPU tensor. ``nbytes`` defaults to all of
    ``src`` past ``src_offset``; both sides must hold it (``OutOfBounds``).
    Offsets and ``nbytes`` are integers (``int``, numpy integers; not
    ``bool`` or ``float``: ``TypeError``); a negative one, or one wider than
    a word, raises ``IntegerOutOfRange`` with its ``name``. Host memory
    given as ``src`` raises ``NotDeviceMemory`` (``side``, ``addr``); the
    module's docstring has a table of what each bad argument raises.

    Stream order: the copy starts after the work queued on ``stream``
    (a cuda.core ``Stream``, a torch or cupy stream, anything with
    ``__cuda_stream__``, an int handle) and, for DLPack arrays, after the
    work their library had queued for them (``__dlpack__(stream=...)``);
    for ``__cuda_array_interface__`` arrays, after their ``stream`` too.
    With no ``stream``, it waits for the device's legacy default stream,
    which torch, cupy and cuda.core use unless told otherwise.

    Blocking (the default): returns once the bytes are in ``dst``, the GIL
    released for the whole copy. ``blocking=False`` returns a ``Transfer``
    once every chunk of the copy is queued, not once it is done: ``wait()``
    for it, use it in a ``with`` block, or ``await`` it in a coroutine
    (``await hostcopy.copy_to_host(dst, src, blocking=False)``: the event
    loop runs other tasks meanwhile and is woken once, when the bytes are
    in). Queuing can still block, with the GIL released: for the stager
    while another thread's blocking copy on it runs, and for room in the driver's queue, which
    holds about 2,000 chunks (32 GiB in the default 16 MiB chunks; a chunk
    queues in a few microseconds: 0.2 ms for 64 MiB, 0.6 ms for 1 GiB on
    the H200, which an event loop's thread spends in the call). Every
    chunk is queued before the call returns, on an event loop's thread
    too: work queued on ``stream`` afterwards then waits only for work
    already queued, which keeps a synchronous call on that stream by any
    thread (``tensor.cpu()``) from waiting on queuing the driver holds
    back for it.
    The ``Transfer`` keeps ``dst`` and ``src`` alive, and a ``bytearray``
    side unresizable (``BufferError``), until ``wait()`` returns (or the
    ``with`` block ends, or the ``await`` completes; ``done()`` becoming
    true does not let go), and waits if dropped unwaited (dropped after an
    ``await`` was cancelled, or on an event loop's thread, it does
    not wait: the stager's finish thread finishes it and lets go of both
    sides once the copy is done); work queued on ``stream`` afterwards waits for the copy, so
    a kernel there cannot overwrite ``src`` under it (work on other
    streams is yours to order: wait for the ``Transfer`` first). Keeping an
    object alive does not stop an explicit free: torch frees a CPU tensor's
    memory under any reference on ``resize_()``, ``set_()`` or
    ``share_memory_()``, so with ``blocking=False`` a torch CPU tensor
    ``dst``, or a numpy array over one (``t.numpy()``) or over a DLPack
    export, raises ``MemoryNotHeld`` (pass a numpy array and view it with
    ``torch.from_numpy``). Do not free ``src``'s memory while a transfer
    runs (a cuda.core ``Buffer``'s ``close()``), nor either side's from
    another thread during a blocking copy, which releases the GIL. Nor read or write ``dst`` from
    another thread while the copy runs (the copy writes it without the
    GIL; what such a thread saw would be torn). Uses one ``Stager`` per
    device, made on first use and shared by every thread (see ``Stager``:
    blocking copies of several threads through it run one after another).
    """
    return _stager_for(src, "src").copy_to_host(
        dst, src, nbytes, stream=stream, blocking=blocking, dst_offset=dst_offset, src_offset=src_offset
    )


@overload
def copy_to_device(
    dst: Any,
    src: Any,
    nbytes: Optional[SupportsIndex] = None,
    *,
    stream: Any = None,
    blocking: Literal[True] = True,
    dst_offset: SupportsIndex = 0,
    src_offset: SupportsIndex = 0,
) -> None: ...


@overload
def copy_to_device(
    dst: Any,
    src: Any,
    nbytes: Optional[SupportsIndex] = None,
    *,
    stream: Any = None,
    blocking: Literal[False],
    dst_offset: SupportsIndex = 0,
    src_offset: SupportsIndex = 0,
) -> Transfer: ...


@overload
def copy_to_device(
    dst: Any,
    src: Any,
    nbytes: Optional[SupportsIndex] = None,
    *,
    stream: Any = None,
    blocking: bool = True,
    dst_offset: SupportsIndex = 0,
    src_offset: SupportsIndex = 0,
) -> Optional[Transfer]: ...


def copy_to_device(
    dst: Any,
    src: Any,
    nbytes: Optional[SupportsIndex] = None,
    *,
    stream: Any = None,
    blocking: bool = True,
    dst_offset: SupportsIndex = 0,
    src_offset: SupportsIndex = 0,
) -> Optional[Transfer]:
    """Copies host memory ``src`` into GPU memory ``dst`` at the link's
    speed: the mirror of ``copy_to_host``, with the same arguments.

    The copy starts after the work queued on ``stream`` (default: the
    device's legacy default stream); with ``blocking=False``, work queued on
    ``stream`` afterwards waits for the copy, so a kernel launched there
    next reads the new bytes. The bytes are written behind the array
    library's back: a torch tensor's version counter does not move (do not
    overwrite a tensor autograd saved), and jax arrays, being immutable,
    are refused as destinations. As for ``copy_to_host``: do not ``resize_`` or
    free the storage of either side while a transfer runs.
    """
    return _stager_for(dst, "dst").copy_to_device(
        dst, src, nbytes, stream=stream, blocking=blocking, dst_offset=dst_offset, src_offset=src_offset
    )


@overload
def copy_blocks_to_host(
    dst: Any,
    src: Any,
    blocks: Union[Sequence[Sequence[SupportsIndex]], Any],
    *,
    stream: Any = None,
    blocking: Literal[True] = True,
) -> None: ...


@overload
def copy_blocks_to_host(
    dst: Any,
    src: Any,
    blocks: Union[Sequence[Sequence[SupportsIndex]], Any],
    *,
    stream: Any = None,
    blocking: Literal[False],
) -> Transfer: ...


@overload
def copy_blocks_to_host(
    dst: Any,
    src: Any,
    blocks: Union[Sequence[Sequence[SupportsIndex]], Any],
    *,
    stream: Any = None,
    blocking: bool = True,
) -> Optional[Transfer]: ...


def copy_blocks_to_host(
    dst: Any,
    src: Any,
    blocks: Union[Sequence[Sequence[SupportsIndex]], Any],
    *,
    stream: Any = None,
    blocking: bool = True,
) -> Optional[Transfer]:
    """Copies many scattered blocks of GPU memory ``src`` into host memory
    ``dst`` in one call, at the speed of one large transfer (a KV-cache
    offload: blocks of a device cache into slots of a host pool).

    ``blocks``: ``(device_offset, host_offset, nbytes)`` triples, byte
    offsets into ``src`` and ``dst``: a sequence of 3-item sequences (a list
    of tuples; not strings) whose items are integers in ``operator.index``'s
    sense (``int``, numpy integers; a ``bool``, ``float`` or ``str`` raises
    ``TypeError`` naming the block), or an ``(n, 3)`` array of an integer
    dtype (``int8``, ``int16``, ``int32``, ``int64``, ``uint8``, ``uint16``,
    ``uint32``, ``uint64``, either byte order, any strides; a float, bool,
    complex, string or object array raises ``TypeError`` naming the dtype,
    never cast; a CPU tensor or jax array of an integer dtype is read as
    such an array, through ``__array__``; any other tensor, a CUDA one
    included, through its ``tolist()``, so a float tensor is refused by its
    first block). A field that is negative
    or wider than a word raises ``IntegerOutOfRange`` named
    ``blocks[i].device_offset``, ``.host_offset`` or ``.nbytes``. Any sizes,
    in any order; many small blocks share one
    staging chunk and one driver call. The whole batch is checked before
    anything is queued: a block outside either memory raises
    ``BlockOutOfBounds`` (with its ``index`` and ``side``), two blocks
    writing the same host bytes raise ``BlocksOverlap`` (``first``,
    ``second``). Blocks may read overlapping device bytes.

    ``stream`` and ``blocking`` work as for ``copy_to_host``, and as
    there: do not ``resize_`` or free the storage of either side while a
    transfer runs.
    """
    return _stager_for(src, "src").copy_blocks_to_host(dst, src, blocks, stream=stream, blocking=blocking)


@overload
def copy_blocks_to_device(
    dst: Any,
    src: Any,
    blocks: Union[Sequence[Sequence[SupportsIndex]], Any],
    *,
    stream: Any = None,
    blocking: Literal[True] = True,
) -> None: ...


@overload
def copy_blocks_to_device(
    dst: Any,
    src: Any,
    blocks: Union[Sequence[Sequence[SupportsIndex]], Any],
    *,
    stream: Any = None,
    blocking: Literal[False],
) -> Transfer: ...


@overload
def copy_blocks_to_device(
    dst: Any,
    src: Any,
    blocks: Union[Sequence[Sequence[SupportsIndex]], Any],
    *,
    stream: Any = None,
    blocking: bool = True,
) -> Optional[Transfer]: ...


def copy_blocks_to_device(
    dst: Any,
    src: Any,
    blocks: Union[Sequence[Sequence[SupportsIndex]], Any],
    *,
    stream: Any = None,
    blocking: bool = True,
) -> Optional[Transfer]:
    """Copies many scattered blocks of host memory ``src`` into GPU memory
    ``dst`` in one call (a KV-cache restore): the mirror of
    ``copy_blocks_to_host``. Here no two blocks may write the same device
    bytes; they may read overlapping host bytes. Do not ``resize_`` or free
    the storage of either side while a transfer runs.
    """
    return _stager_for(dst, "dst").copy_blocks_to_device(dst, src, blocks, stream=stream, blocking=blocking)
