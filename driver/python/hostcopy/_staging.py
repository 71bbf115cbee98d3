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
not ``bool``, ``float`` or ``str``, which raise ``ArgumentTypeError``, a
``TypeError``); one that is negative or wider than the platform's word
raises ``IntegerOutOfRange`` (a ``ValueError`` and an ``OverflowError``)
naming it (``nbytes``, ``blocks[3].host_offset``). Every copy is one call
of the native stager's ``transfer``, which recognises all of its
arguments: the sides and the stream (src/sides.rs), the integers
(src/integers.rs) and the blocks (src/blocks.rs).

What each bad argument of a copy raises; a call refused so copies nothing
(every class is in ``hostcopy`` and a ``hostcopy.Error``; all but
``ArgumentTypeError`` and ``MemoryNotHeld`` (``TypeError`` subclasses) and
``StreamCapturing`` (a ``RuntimeError``) are ``ValueError`` subclasses):

- ``ArgumentTypeError`` (``argument``, ``value``): ``nbytes``, an offset, a
  block field or a stream that is no integer (``float``, ``str``,
  ``bool``); ``blocks`` that are no triples (``"123"``, a dict, a scalar,
  an array not of shape ``(n, 3)``) or an array of a non-integer dtype; a
  side of no known kind; GPU memory as the host side; a jax array as a
  destination; a malformed ``__cuda_array_interface__``,
  ``__dlpack_device__`` or ``__cuda_stream__``.
- ``ArgumentError`` (``argument``, ``value``): a closed cuda.core
  ``Buffer``; a ``ValueError`` an argument's own code raised while it was
  read (its ``__cause__``).
- ``MemoryNotHeld``: a torch CPU tensor, or a numpy array or memoryview
  over one or over a DLPack export, as the host side of a
  ``blocking=False`` copy (torch can free its memory under the copy).
- ``IntegerOutOfRange``: ``nbytes``, an offset, a block field or a stream
  handle that is negative or wider than a word (``>= 2**64``), with its
  ``name``.
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

import operator
import os
import threading
from typing import Any, Literal, Optional, Sequence, SupportsIndex, TypedDict, Union, overload

from . import _native
from ._errors import ArgumentTypeError, refused

#: DLPack device types of GPU memory.
_DL_CUDA, _DL_CUDA_MANAGED = 2, 13

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


def _is_cuda_core_buffer(obj: Any) -> bool:
    """A cuda.core ``Buffer``, or an object shaped as one (``handle``,
    ``size``, ``memory_resource``): what packing and the choice of a
    device's stager read of it (a transfer reads it in src/sides.rs, by the
    same rule). Looked up on the type, so that no property runs (a Buffer's
    ``is_host_accessible`` calls the driver when it has no memory
    resource)."""
    kind = type(obj)
    return all(hasattr(kind, name) for name in ("handle", "size", "memory_resource"))


def _is_host_buffer(obj: Any) -> bool:
    try:
        memoryview(obj).release()
    except TypeError:
        return False
    return True


def _device_ordinal(device: Any) -> int:
    if device is None:
        return 0
    for name in ("device_id", "index", "id"):  # cuda.core Device, torch.device, cupy Device
        value = getattr(device, name, None)
        if isinstance(value, int):
            return value
    if isinstance(device, int) and not isinstance(device, bool):
        return device
    raise ArgumentTypeError(
        f"device: expected an ordinal or a device object, got {type(device).__name__}", argument="device", value=device
    )


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
        return self._native.transfer("copy_to_host", dst, src, nbytes, dst_offset, src_offset, None, stream, blocking)

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
        return self._native.transfer("copy_to_device", dst, src, nbytes, dst_offset, src_offset, None, stream, blocking)

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
        return self._native.transfer("copy_blocks_to_host", dst, src, None, 0, 0, blocks, stream, blocking)

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
        return self._native.transfer("copy_blocks_to_device", dst, src, None, 0, 0, blocks, stream, blocking)


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
    """The ordinal of the device holding ``obj``, given as the device side
    ``side``; what reading it raises as hostcopy's (``refused``)."""
    try:
        return _read_device_of(obj, side)
    except (TypeError, ValueError, OverflowError) as failure:
        raise refused(failure, side, obj)


def _read_device_of(obj: Any, side: str) -> int:
    if _is_cuda_core_buffer(obj):
        device_id = getattr(obj, "device_id", None)
        if isinstance(device_id, int) and device_id >= 0:
            return device_id
        return int(_native.device_holding(obj.handle, side))
    if hasattr(obj, "__dlpack_device__"):
        device_type, device_id = obj.__dlpack_device__()
        if operator.index(device_type) in (_DL_CUDA, _DL_CUDA_MANAGED):
            return operator.index(device_id)
        if hasattr(obj, "__dlpack__"):
            raise _native.not_device_memory(obj, side, operator.index(device_type))
    interface = getattr(obj, "__cuda_array_interface__", None)
    if interface is not None:
        data = interface.get("data") if isinstance(interface, dict) else None
        if data is None:
            raise ArgumentTypeError(
                f"{side}: __cuda_array_interface__ is {interface!r}, not a dict with a 'data' pair",
                argument=side,
                value=obj,
            )
        return int(_native.device_holding(data[0] or 0, side))
    if _is_host_buffer(obj):
        raise _native.not_device_memory(obj, side)
    raise ArgumentTypeError(
        f"{side}: expected GPU memory (a cuda.core Buffer, or an array with __dlpack__ or "
        f"__cuda_array_interface__), got {type(obj).__name__}",
        argument=side,
        value=obj,
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
    ``bool`` or ``float``: ``ArgumentTypeError``, a ``TypeError``); a
    negative one, or one wider than a word, raises ``IntegerOutOfRange``
    with its ``name``. Host memory
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
    stager = _stager_for(src, "src")
    return stager._native.transfer("copy_to_host", dst, src, nbytes, dst_offset, src_offset, None, stream, blocking)


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
    stager = _stager_for(dst, "dst")
    return stager._native.transfer("copy_to_device", dst, src, nbytes, dst_offset, src_offset, None, stream, blocking)


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
    ``ArgumentTypeError``, a ``TypeError``, naming the block), or an ``(n, 3)`` array of an integer
    dtype (``int8``, ``int16``, ``int32``, ``int64``, ``uint8``, ``uint16``,
    ``uint32``, ``uint64``, either byte order, any strides; a float, bool,
    complex, string or object array raises ``ArgumentTypeError`` naming the dtype,
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
    return _stager_for(src, "src")._native.transfer("copy_blocks_to_host", dst, src, None, 0, 0, blocks, stream, blocking)


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
    return _stager_for(dst, "dst")._native.transfer("copy_blocks_to_device", dst, src, None, 0, 0, blocks, stream, blocking)
