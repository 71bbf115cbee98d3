"""A KV cache for transformers' ``generate`` whose layers live in pageable
host memory (``hostcopy.empty``, registered with the driver in the
background unless ``register=`` says otherwise)::

    cache = hostcopy.offload.transformers.HostOffloadedCache(config=model.config)
    out = model.generate(input_ids, past_key_values=cache, max_new_tokens=64)

transformers' own offloaded cache (``cache_implementation="offloaded"``,
in 5.x ``DynamicCache(offloading=True)``) moves each layer's whole keys
and values to the CPU after its update (``.to("cpu", non_blocking=True)``
on the compute stream, into pinned memory from torch's host allocator)
and the next layer's back before its update (on a stream of its own),
four torch copies per layer and token.

Here each full-attention layer's keys and values live in one region of
host memory, ``[2, batch, heads, capacity, head_dim]`` (keys, then
values), at a capacity that grows by half as the sequence does. Per
layer and decoded token:

- one hostcopy call for ``group`` layers (default 2; with ``group=1``
  one a layer): the layer's positions
  in host memory, keys and values together, brought back into one new
  device buffer (a batch of ``2 * batch * heads`` blocks a layer), queued
  ``prefetch`` layers ahead on a stream of its own, so that it waits for
  no compute; the compute stream waits for its event just before the
  layer's attention;
- no write to the host: the newest positions (up to ``tail``, default
  64) stay on the device in a small buffer per layer; when it is full,
  they and the new ones go to the host in one call, queued after the
  next layers' uploads: the write waits for this layer's compute, and
  queued first it would hold them up in the stager's queue.

The attention sees what ``DynamicCache`` gives it: the cached positions
followed by the new ones, contiguous, of the same dtype (one
``torch.cat`` of the uploaded part, the device part and the new
positions). With ``counters=True``, ``counters`` says what the cache did
(hostcopy calls, bytes, time in them); by default nothing is counted.

Sliding-window layers (small by construction) stay on the device as
``DynamicCache`` keeps them. ``layer.keys`` / ``layer.values`` of an
offloaded layer are CPU tensors viewing the host memory (``[..., :length,
:]``), made when read, once the device part is written and every write
has landed.
"""

from __future__ import annotations

import importlib
import time
from collections import deque
from typing import Any, NamedTuple, Optional

from .. import _memory, _staging
from .._errors import OffloadArgumentTypeError
from ._registration import DEFAULT, check_register, region
from ._ring import check_count
from ._torch import CudaStreams, DeviceRange, device_range
from ._upload import Upload


def _modules() -> tuple[Any, Any, Any]:
    try:  # typed as Any: all three are optional
        torch = importlib.import_module("torch")
        cache_utils = importlib.import_module("transformers.cache_utils")
        numpy = importlib.import_module("numpy")
    except ImportError as missing:
        raise ImportError(f"hostcopy.offload.transformers needs torch and transformers: {missing}") from None
    return torch, cache_utils, numpy


torch, cache_utils, np = _modules()
_DynamicLayer: Any = cache_utils.DynamicLayer
_DynamicCache: Any = cache_utils.DynamicCache

#: Positions a layer keeps on the device before they go to the host in
#: one write (``HostOffloadedCache(tail=...)``).
TAIL = 64

#: Consecutive offloaded layers that come back in one call
#: (``HostOffloadedCache(group=...)``): two, because the offload
#: benchmark's ``generate`` ran 1.04-1.10x as many tokens a second with
#: two as with one in every run whose cache kinds changed places between
#: rounds (seven, docs/offload.md), for one more layer's keys and values on
#: the device.
GROUP = 2


class Counters:
    """What a ``HostOffloadedCache(counters=True)`` did since it was made
    (or since ``reset_counters``): hostcopy calls, bytes, and the seconds
    the calling thread spent in them. ``updates``: calls of ``update`` on
    offloaded layers, ``update_seconds`` the time in them (the hostcopy
    calls included)."""

    __slots__ = (
        "updates",
        "update_seconds",
        "uploads",
        "upload_bytes",
        "writes",
        "write_bytes",
        "start_seconds",
        "waits",
        "wait_seconds",
    )

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Every count back to zero."""
        self.updates = 0
        self.update_seconds = 0.0
        #: Calls that bring layers back to the device (a group's in one), and their bytes.
        self.uploads = 0
        self.upload_bytes = 0
        #: Calls that write positions to host memory, and their bytes.
        self.writes = 0
        self.write_bytes = 0
        #: Seconds inside the calls that start those transfers.
        self.start_seconds = 0.0
        #: ``Transfer.wait()`` calls, and the seconds inside them.
        self.waits = 0
        self.wait_seconds = 0.0

    def as_dict(self) -> dict[str, float]:
        return {name: getattr(self, name) for name in self.__slots__}


class _Counted:
    """A transfer whose ``wait()`` calls are counted."""

    __slots__ = ("transfer", "counters")

    def __init__(self, transfer: Any, counters: Counters) -> None:
        self.transfer, self.counters = transfer, counters

    def wait(self) -> None:
        started = time.perf_counter()
        try:
            self.transfer.wait()
        finally:
            self.counters.waits += 1
            self.counters.wait_seconds += time.perf_counter() - started

    def done(self) -> bool:
        return bool(self.transfer.done())


class _Counting:
    """A stager whose copies are counted in ``counters``: only a cache made
    with ``counters=True`` puts one between its layers and their stager,
    so that counting costs nothing where it is off."""

    def __init__(self, stager: Any, counters: Counters) -> None:
        self.stager, self.counters = stager, counters

    def copy_blocks_to_device(self, dst: Any, src: Any, blocks: Any, **options: Any) -> _Counted:
        started = time.perf_counter()
        transfer = self.stager.copy_blocks_to_device(dst, src, blocks, **options)
        self.counters.start_seconds += time.perf_counter() - started
        self.counters.uploads += 1
        self.counters.upload_bytes += int(blocks[:, 2].sum())
        return _Counted(transfer, self.counters)

    def copy_blocks_to_host(self, dst: Any, src: Any, blocks: Any, **options: Any) -> _Counted:
        started = time.perf_counter()
        transfer = self.stager.copy_blocks_to_host(dst, src, blocks, **options)
        self.counters.start_seconds += time.perf_counter() - started
        self.counters.writes += 1
        self.counters.write_bytes += int(blocks[:, 2].sum())
        return _Counted(transfer, self.counters)


def _ordinal(device: Any) -> int:
    """A CUDA device's ordinal: a ``torch.device``'s index, or the number
    in its name as torch writes it (``"cuda:1"``); 0 where it has none."""
    index = getattr(device, "index", None)
    if isinstance(index, int):
        return index
    _, _, number = str(device).partition(":")
    return int(number) if number.isdigit() else 0


def _after_current(side: Any, device: Any) -> None:
    """Makes ``side`` wait for the work queued so far on ``device``'s current stream."""
    event = torch.cuda.Event()
    event.record(torch.cuda.current_stream(device))
    side.wait_event(event)


#: Uploads a layer's update has read that a ``HostLayer`` of no cache keeps
#: before it waits for the oldest (a cache keeps ``prefetch + 2``).
KEEP = 4


class _Sides:
    """What a cache's layers share for their copies: a side stream a
    device and role (``"read"``: uploads, ``"write"``: writes to the
    host), made when first needed, and the uploads the layers' updates
    have read, let go of once done (waiting for the oldest only when more
    than ``keep`` are held)."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.cuda = CudaStreams()
        self.streams: dict[tuple[Any, str], Any] = {}
        self.read: deque[_Fetched] = deque()

    def stream(self, device: Any, role: str) -> Any:
        stream = self.streams.get((device, role))
        if stream is None:
            stream = self.streams[(device, role)] = torch.cuda.Stream(device)
        return stream

    def release(self) -> None:
        read = self.read
        while read and (read[0].done() or len(read) > self.keep):
            read.popleft().settle()

    def drain(self) -> None:
        read, self.read = self.read, deque()
        for fetched in read:
            fetched.settle()


class _Fetched:
    """A layer's positions in host memory on their way to the device: as
    keys and values (views of the upload's buffer), and the upload;
    ``version``: the layer's ``host_version`` when it was queued (another
    one now: the host part changed since, and it is waited for, never read)."""

    __slots__ = ("version", "keys", "values", "upload")

    def __init__(self, version: int, keys: Any, values: Any, upload: Upload) -> None:
        self.version, self.keys, self.values, self.upload = version, keys, values, upload

    def settle(self) -> None:
        self.upload.settle()

    def done(self) -> bool:
        return self.upload.done()


def _bring_back(members: list["HostLayer"], host: Any, blocks: Any) -> list[_Fetched]:
    """Queues the upload of ``members``' positions in host memory (each as
    many, of one geometry, on one device) in one call: ``blocks`` of
    ``host`` into a new device buffer, each member's part after the one
    before (laid out as ``_split`` reads it), on the first member's read
    stream. Each member's writes must have landed."""
    first = members[0]
    positions = first.flushed
    part = first.runs * positions * (first.head_dim + first.value_dim)  # elements a layer
    sides = first.sides
    side = sides.stream(first.device, "read")
    # Allocated on the upload stream: no work of the compute stream can
    # be using its memory, so the upload waits for nothing there.
    with torch.cuda.stream(side):
        buffer = torch.empty((part * len(members),), dtype=first.dtype, device=first.device)
    memory = device_range(buffer)
    copy = first._stager(memory).copy_blocks_to_device
    upload = Upload(
        sides.cuda,
        side,
        sides.cuda.event(),
        lambda stream: copy(memory, host, blocks, stream=stream, blocking=False),
        lent=buffer,
    )
    return [
        _Fetched(member.host_version, *member._split(buffer[at * part : (at + 1) * part], positions), upload)
        for at, member in enumerate(members)
    ]


class _Part(NamedTuple):
    """Where a region laid out one member's part: ``nbytes`` bytes of its
    host memory from ``offset`` (the keys' plane, then the values', for
    the region's geometry and capacity)."""

    offset: int
    nbytes: int


class _Region:
    """The host memory of consecutive layers (``HostOffloadedCache(group=...)``,
    ``GROUP`` by default): one ``hostcopy.empty`` region, each member a
    part of it of the same size (its keys' plane, then its values'), all
    at one capacity, so that one call can bring them back together."""

    def __init__(self, members: list["HostLayer"]) -> None:
        self.members = members
        self.host: Any = None
        self.capacity = 0
        #: ``HostLayer.geometry()`` of the parts, once the region has memory.
        self.geometry: Optional[tuple[int, int, int, int]] = None
        #: The part laid out for each member when ``host`` was made: where
        #: a member's memory is, whoever left ``members`` since (a member
        #: of another geometry leaves after the layout, and the others'
        #: places in ``members`` shift; their parts stay where they were).
        self.parts: dict["HostLayer", _Part] = {}

    def grow(
        self, geometry: tuple[int, int, int, int], needed: int, register: _memory.Register, device: Any
    ) -> None:
        """Room for ``needed`` positions in every part: a new region half as
        large again (at least twice the old; the same capacity where a
        member has no part yet), each member's positions written so far
        copied in. A member already made with another geometry (its
        group's layers made before any wrote) leaves for memory of its own
        first: a part laid out for ``geometry`` is not its. The new region
        is registered as ``register`` says in ``device``'s primary context
        (portable: every device's copies see it registered); the old one
        is unregistered and freed once its last view and copy let go."""
        for member in list(self.members):
            if member.is_initialized and member.geometry() != geometry:
                member._detach()
        for member in self.members:
            member.settle()
        if needed <= self.capacity:
            capacity = self.capacity  # a member that joined after the region was made: a part for it
        else:
            capacity = -(-max(needed + needed // 2, 2 * self.capacity, 256) // 64) * 64
        runs, key_dim, value_dim, item = geometry
        part = runs * capacity * (key_dim + value_dim) * item
        host = region(part * len(self.members), register, _ordinal(device))
        parts: dict["HostLayer", _Part] = {}
        for index, member in enumerate(self.members):
            laid = parts[member] = _Part(index * part, part)
            view = host[laid.offset : laid.offset + laid.nbytes]
            if member.flushed and member.host is not None:
                for new, old in zip(member._planes(view, capacity), member._planes(member.host, member.capacity)):
                    new[:, : member.flushed] = old[:, : member.flushed]
            member.host, member.capacity = view, capacity
        self.host, self.capacity, self.geometry, self.parts = host, capacity, geometry, parts


class HostLayer(_DynamicLayer):  # type: ignore[misc]
    """One full-attention layer's keys and values: positions
    ``0 .. flushed`` in host memory, ``flushed .. length`` in a device
    buffer of ``tail`` positions.

    ``keys`` / ``values`` are made when read, after the device part is
    written to the host and every write has landed: a reader never sees
    bytes still in flight.
    """

    is_sliding = False
    # Class defaults: the base class's __init__ assigns keys and values.
    _keys: Any = None
    _values: Any = None
    #: The views no longer match the host memory (made again when read).
    _stale = False

    def __init__(self, tail: int = TAIL, *, register: _memory.Register = DEFAULT) -> None:
        #: Writes to the host not yet waited for (the first: reading ``keys`` waits for them).
        self.writes: list[Any] = []
        super().__init__()
        self.tail_positions = tail
        #: How the host regions it grows are registered with the driver (``register=``).
        self.register = check_register(register)
        #: Positions cached, and how many of them are in host memory.
        self.length = 0
        self.flushed = 0
        #: Changes with every change of the positions in host memory (a
        #: write, ``crop``, ``reset``, a rewrite: whichever method made it,
        #: the cache's or the layer's own): an upload queued at another one
        #: is of what the host part held before (``_Fetched.version``).
        self.host_version = 0
        #: Positions the host region holds per (batch, head) run.
        self.capacity = 0
        #: ``uint8``: the keys' plane ``[batch, heads, capacity, head_dim]``, then the values'.
        self.host: Any = None
        #: The device part: keys ``[batch, heads, tail, head_dim]``, then values, in one buffer.
        self.tail: Any = None
        #: Where its copies are counted (its cache's ``counters``), or ``None``.
        self.counters: Optional[Counters] = None
        #: The positions in host memory its cache brought back ahead of its
        #: next update (else the update brings them back itself).
        self.fetched: Optional[_Fetched] = None
        #: Side streams and the uploads read: its cache's, or its own.
        self.sides = _Sides(KEEP)
        #: The upload's blocks, and the (flushed, capacity, runs) they are for.
        self._read_blocks: Optional[tuple[tuple[int, int, int], Any]] = None
        #: The host memory it shares with the layers of its group (its own by default).
        self.region = _Region([self])
        #: What makes its copies: a ``Stager``; the module until its first
        #: copy, which looks up the device's shared stager (``_stager``).
        self.copies: Any = _staging

    @property
    def keys(self) -> Any:
        self._expose()
        return self._keys

    @keys.setter
    def keys(self, value: Any) -> None:
        self._keys = value

    @property
    def values(self) -> Any:
        self._expose()
        return self._values

    @values.setter
    def values(self, value: Any) -> None:
        self._values = value

    def lazy_initialization(self, key_states: Any, value_states: Any = None) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        self.batch, self.heads, _, self.head_dim = key_states.shape
        self.value_dim = self.head_dim if value_states is None else value_states.shape[-1]
        self.item = key_states.element_size()
        self.is_initialized = True
        if self.region.geometry not in (None, self.geometry()):
            self._detach()  # its group's parts are of another size: memory of its own
            self.host, self.capacity = None, 0
        self._views()

    # geometry -------------------------------------------------------------

    @property
    def runs(self) -> int:
        """(batch, head) runs per plane."""
        return int(self.batch * self.heads)

    def _split(self, buffer: Any, positions: int) -> tuple[Any, Any]:
        """Keys and values: views of a flat device buffer holding
        ``positions`` positions of each, keys first."""
        keys = self.runs * positions * self.head_dim
        return (
            buffer[:keys].view(self.batch, self.heads, positions, self.head_dim),
            buffer[keys : keys + self.runs * positions * self.value_dim].view(
                self.batch, self.heads, positions, self.value_dim
            ),
        )

    def _device_buffer(self, positions: int) -> Any:
        return torch.empty(
            (self.runs * positions * (self.head_dim + self.value_dim),), dtype=self.dtype, device=self.device
        )

    def blocks(self, host_start: int, count: int, device_positions: int) -> Any:
        """``(device offset, host offset, bytes)`` of every run of both
        planes: host positions ``host_start .. host_start + count`` against
        positions ``0 .. count`` of a device buffer laid out as ``_split``
        reads it with ``device_positions`` positions."""
        runs = np.arange(self.runs, dtype=np.int64)
        key_row, value_row = self.head_dim * self.item, self.value_dim * self.item
        keys = np.empty((self.runs, 3), dtype=np.int64)
        keys[:, 0] = runs * device_positions * key_row
        keys[:, 1] = (runs * self.capacity + host_start) * key_row
        keys[:, 2] = count * key_row
        values = np.empty((self.runs, 3), dtype=np.int64)
        values[:, 0] = self.runs * device_positions * key_row + runs * device_positions * value_row
        values[:, 1] = self.runs * self.capacity * key_row + (runs * self.capacity + host_start) * value_row
        values[:, 2] = count * value_row
        return np.concatenate([keys, values])

    # host memory ------------------------------------------------------------

    def settle(self) -> None:
        """Waits for this layer's writes to the host."""
        writes, self.writes = self.writes, []
        for write in writes:
            write.wait()

    def _planes(self, host: Any, capacity: int) -> tuple[Any, Any]:
        """The two planes of a host region, ``(runs, capacity, row bytes)``."""
        key_bytes = self.runs * capacity * self.head_dim * self.item
        return (
            host[:key_bytes].reshape(self.runs, capacity, self.head_dim * self.item),
            host[key_bytes:].reshape(self.runs, capacity, self.value_dim * self.item),
        )

    def geometry(self) -> tuple[int, int, int, int]:
        """What a host part's size and layout depend on: runs, key and value dims, item bytes."""
        return (self.runs, self.head_dim, self.value_dim, self.item)

    def part_bytes(self, capacity: int) -> int:
        """Bytes of host memory this layer's part takes at ``capacity`` positions."""
        return int(self.runs * capacity * (self.head_dim + self.value_dim) * self.item)

    def _detach(self) -> None:
        """Leaves a region shared with other layers for one of its own
        (the host memory it holds stays where it is until it grows)."""
        if len(self.region.members) > 1:
            self.region.members.remove(self)
            self.region.parts.pop(self, None)  # the others' parts stay where they were laid out
            self.region = _Region([self])

    def _grow(self, needed: int) -> None:
        """Room for ``needed`` positions: the region grows (see ``_Region.grow``)."""
        if needed <= self.capacity:
            return
        if self.region.geometry not in (None, self.geometry()):
            self._detach()
        self.region.grow(self.geometry(), needed, self.register, self.device)

    def _views(self) -> None:
        """``keys`` / ``values``: CPU tensors over the host memory."""
        self._stale = False
        if self.host is None:
            self.keys = torch.empty((self.batch, self.heads, 0, self.head_dim), dtype=self.dtype)
            self.values = torch.empty((self.batch, self.heads, 0, self.value_dim), dtype=self.dtype)
            return
        shapes = ((self.head_dim, "keys"), (self.value_dim, "values"))
        for plane, (dim, name) in zip(self._planes(self.host, self.capacity), shapes):
            view = torch.from_numpy(plane).view(self.dtype).view(self.batch, self.heads, self.capacity, dim)
            setattr(self, name, view[:, :, : self.length])

    def _expose(self) -> None:
        """Writes the device part, waits for the writes in flight, then makes
        the views if they are stale."""
        if not self.is_initialized:
            return
        if self.length > self.flushed:
            self.flush()
        if self.writes:
            self.settle()
        if self._stale:
            self._views()

    def _stager(self, device_memory: Any) -> Any:
        """What makes this layer's copies: ``stager=``, else the shared
        stager of the device holding ``device_memory``, looked up at the
        first copy and kept (the module's functions look it up again on
        every call)."""
        if self.copies is _staging:
            self.copies = _staging.default_stager_of(device_memory, "dst")
            if self.counters is not None:
                self.copies = _Counting(self.copies, self.counters)
        return self.copies

    def write(self, buffer: Any, count: int, device_positions: int, stream: Any) -> None:
        """Queues the copy of positions ``0 .. count`` of device ``buffer``
        (laid out as ``_split`` reads it) to host positions ``flushed ..
        flushed + count``, on ``stream`` after the work queued so far on the
        current stream (which fills the buffer)."""
        self._grow(self.flushed + count)
        _after_current(stream, self.device)
        blocks = self.blocks(self.flushed, count, device_positions)
        memory = device_range(buffer)
        transfer = self._stager(memory).copy_blocks_to_host(self.host, memory, blocks, stream=stream, blocking=False)
        # Writes that have landed let go of their buffers now.
        while self.writes and self.writes[0].done():
            self.writes.pop(0).wait()
        self.writes.append(transfer)
        self.flushed += count
        self.host_version += 1
        self._stale = True

    def flush(self) -> None:
        """Writes the device part to the host (waited for with the other
        writes); used outside a forward, before the host memory is read."""
        count = self.length - self.flushed
        if count <= 0:
            return
        stream = torch.cuda.Stream(self.device)
        self.write(self.tail, count, self.tail_positions, stream)
        self.settle()

    def append(self, key_states: Any, value_states: Any, fetched: Optional["_Fetched"]) -> tuple[Any, Any, Any]:
        """Queues on the current stream what puts the new positions in
        place: the keys and values for the attention (``fetched``, the
        positions in host memory brought back, then the device part, then
        the new ones, contiguous) and, when the device part has no room for
        them, a new buffer of the device part and the new positions, to be
        written to the host (returned third, with its positions; else
        ``None``)."""
        count = key_states.shape[-2]
        kept = self.length - self.flushed
        keys, values = ([fetched.keys], [fetched.values]) if fetched is not None else ([], [])
        write = None
        if kept + count <= self.tail_positions:
            if self.tail is None:
                self.tail = self._device_buffer(self.tail_positions)
            tail_keys, tail_values = self._split(self.tail, self.tail_positions)
            tail_keys[:, :, kept : kept + count].copy_(key_states)
            tail_values[:, :, kept : kept + count].copy_(value_states)
            keys.append(tail_keys[:, :, : kept + count])
            values.append(tail_values[:, :, : kept + count])
        else:
            # The device part and the new positions, in one buffer: one write.
            total = kept + count
            block = self._device_buffer(total)
            block_keys, block_values = self._split(block, total)
            if kept:
                tail_keys, tail_values = self._split(self.tail, self.tail_positions)
                torch.cat([tail_keys[:, :, :kept], key_states], dim=-2, out=block_keys)
                torch.cat([tail_values[:, :, :kept], value_states], dim=-2, out=block_values)
            else:
                block_keys.copy_(key_states)
                block_values.copy_(value_states)
            keys.append(block_keys)
            values.append(block_values)
            write = (block, total)
        self.length += count
        self._stale = True
        if write is not None and len(keys) == 1:
            return keys[0], values[0], write  # already contiguous
        return torch.cat(keys, dim=-2), torch.cat(values, dim=-2), write

    def upload_blocks(self) -> Any:
        """The blocks of an upload of the positions in host memory (into a
        device buffer laid out as ``_split`` reads it): the same until the
        next write or growth, so made once for those tokens."""
        shape = (self.flushed, self.capacity, self.runs)
        if self._read_blocks is None or self._read_blocks[0] != shape:
            self._read_blocks = (shape, self.blocks(0, self.flushed, self.flushed))
        return self._read_blocks[1]

    # the layer API --------------------------------------------------------

    def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        """As ``DynamicLayer.update``: caches the new positions and returns
        the keys and values of every position so far (on the device,
        contiguous). The positions in host memory come from the upload its
        cache queued ahead (``fetched``), else from one it queues now; the
        device part takes the new ones, or goes to the host with them in
        one write when it has no room."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        fetched = self._read()
        keys, values, write = self.append(key_states, value_states, fetched)
        if write is not None:
            buffer, count = write
            self.write(buffer, count, count, self.sides.stream(self.device, "write"))
        if fetched is not None:
            self.sides.read.append(fetched)
        self.sides.release()
        return keys, values

    def _read(self) -> Optional[_Fetched]:
        """The positions in host memory, the current stream ordered after
        their upload (``None`` while there are none)."""
        fetched, self.fetched = self.fetched, None
        if fetched is not None and fetched.version != self.host_version:
            fetched.settle()  # the host part changed under it: read again
            fetched = None
        if fetched is None and self.flushed:
            if self.writes:
                self.settle()  # the upload reads what they write
            fetched = _bring_back([self], self.host, self.upload_blocks())[0]
        if fetched is not None:
            fetched.upload.read_on(self.sides.cuda, torch.cuda.current_stream(self.device))
        return fetched

    def get_seq_length(self) -> int:
        return self.length

    def crop(self, tokens_to_remove: int) -> None:
        """As ``DynamicLayer.crop``: a negative count removes that many
        positions, a positive one (the older form) keeps that many, 0 none."""
        if tokens_to_remove == 0:
            return
        target = tokens_to_remove if tokens_to_remove > 0 else max(self.length - abs(tokens_to_remove), 0)
        if target >= self.length:
            return
        self._expose()
        self.length = self.flushed = target
        self.host_version += 1
        self._views()

    def _rewrite(self, keys: Any, values: Any) -> None:
        """Replaces the host memory with these CPU tensors' positions."""
        self.settle()
        self._detach()
        self.batch = keys.shape[0]
        self.host, self.tail = None, None
        self.capacity = self.length = self.flushed = 0
        length = keys.shape[-2]
        self._grow(max(length, 1))
        self.length = self.flushed = length
        self.host_version += 1
        self._views()
        self.keys.copy_(keys)
        self.values.copy_(values)

    def reorder_cache(self, beam_idx: Any) -> None:
        if self.length:
            index = beam_idx.to("cpu")
            self._rewrite(self.keys.index_select(0, index), self.values.index_select(0, index))

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.length:
            self._rewrite(self.keys.repeat_interleave(repeats, dim=0), self.values.repeat_interleave(repeats, dim=0))

    def batch_select_indices(self, indices: Any) -> None:
        if self.length:
            index = indices.to("cpu") if hasattr(indices, "to") else indices
            self._rewrite(self.keys[index, ...], self.values[index, ...])

    def reset(self) -> None:
        self.settle()
        self.length = self.flushed = 0
        self.host_version += 1
        if self.is_initialized:
            self._views()

    def offload(self) -> None:
        """Already in host memory."""

    def prefetch(self) -> None:
        """Brought back by its cache, ``prefetch`` layers ahead."""


class HostOffloadedCache(_DynamicCache):  # type: ignore[misc]
    """``DynamicCache`` with its full-attention layers in pageable host
    memory, the next layers brought back while the current one runs.

    ``config``: the model's config (its layer types decide which layers are
    sliding-window ones, kept on the device as ``DynamicCache`` does);
    without it every layer is offloaded. ``prefetch``: how many layers
    ahead are brought back (default 2; an integer >= 1). ``tail``: how
    many of each layer's newest positions stay on the device before they
    are written to the host in one call (default 64; an integer >= 1).
    ``group``: how many consecutive offloaded layers share one host region
    and come back in one call (default 2; 1 for a call a layer): fewer
    calls a token, for ``group - 1`` more layers' keys and values on the
    device at a time.
    ``stager``: the ``hostcopy.Stager`` that makes its copies (default: the
    device's shared one, as for ``offload``); a stager serves one device,
    so a model over several GPUs keeps the default.
    ``register``: how each host region is registered with the driver
    (``hostcopy.empty``'s ``register=``, in the primary context of the
    device of the layer that makes it): ``"background"`` (the default)
    on a thread of its own while the first uploads stage what is not
    registered yet, ``"now"`` when the region is made (during the
    ``update`` that needs it), ``"never"`` not at all. A region made
    again larger as the sequence grows is registered the same way; the
    old one is unregistered once its last view and copy let go of it.
    Uploads and writes copy the registered bytes directly and stage the
    rest. Registered memory is locked while the cache holds it; a region
    the driver refuses stays staged, never an error.
    ``hostcopy.registration(cache.layers[i].host)`` tells how far layer
    ``i``'s region has got, once it has positions in host memory.
    ``counters``: whether ``cache.counters`` counts what the cache does
    (a ``Counters``; ``None`` by default, when nothing is counted or timed).
    Refused values raise ``OffloadArgumentError``
    (``OffloadArgumentTypeError`` for a type), both ``ValueError``.

    As transformers' ``Cache.update`` with ``offloading``, the cache's
    ``update`` prefetches and the layer's ``update`` does the layer's work
    (``HostLayer.update``).

    Streams: the uploads run on a stream of their own, into buffers
    allocated on that stream, so they wait for nothing the compute stream
    does (only for the host memory to hold the positions, which the CPU
    makes sure of); the compute stream waits for an upload's event before
    its layer's attention, and the buffer is recorded on it so that
    torch's allocator keeps it until that attention has run. The writes
    run on another stream, after an event recorded on the compute stream
    once their positions are made.
    """

    layers: list[Any]
    layer_class_to_replicate: Any

    def __init__(
        self,
        config: Any = None,
        *,
        prefetch: int = 2,
        tail: int = TAIL,
        group: int = GROUP,
        stager: Optional[_staging.Stager] = None,
        register: _memory.Register = DEFAULT,
        counters: bool = False,
    ) -> None:
        prefetch = check_count("prefetch", prefetch, 1)
        tail = check_count("tail", tail, 1)
        self.group = check_count("group", group, 1)
        #: How the layers' host regions are registered with the driver.
        self.register = check_register(register)
        if stager is not None and not all(
            callable(getattr(stager, name, None)) for name in ("copy_blocks_to_device", "copy_blocks_to_host")
        ):
            raise OffloadArgumentTypeError(
                f"stager must be a hostcopy.Stager, not {stager!r} ({type(stager).__name__})",
                argument="stager",
                value=stager,
            )
        self._region: Optional[_Region] = None
        #: What ``counters=True`` counts; ``None`` when off.
        self.counters: Optional[Counters] = Counters() if counters else None
        #: What makes the copies: ``stager``, or the module (each layer looks
        #: up the device's shared stager at its first copy).
        self.copies: Any = _staging if stager is None else stager
        if stager is not None and self.counters is not None:
            self.copies = _Counting(stager, self.counters)
        #: The side streams and the uploads read, shared by the layers.
        self._sides = _Sides(prefetch + 2)
        # DynamicCache reads the config's layer types as this transformers
        # does; its full-attention layers (plain DynamicLayer) become HostLayer.
        super().__init__(config=config)
        self.tail_positions = tail
        self.layers = [self._new_layer() if type(layer) is _DynamicLayer else layer for layer in self.layers]
        if self.layer_class_to_replicate is not None:
            self.layer_class_to_replicate = self._new_layer
        self.prefetch_layers = prefetch
        #: Uploads queued ahead of layers' updates, by layer.
        self._fetched: dict[int, _Fetched] = {}
        self._order: list[int] = []
        self._order_of = -1
        #: An offloaded layer's update: prefetching, then the layer's own;
        #: timed only with counters, chosen here once.
        self._update_offloaded = self._prefetch_and_update if self.counters is None else self._counted_update

    def _new_layer(self) -> HostLayer:
        layer = HostLayer(self.tail_positions, register=self.register)
        layer.counters, layer.copies, layer.sides = self.counters, self.copies, self._sides
        # Consecutive offloaded layers share a region, ``group`` at a time.
        if self._region is not None and len(self._region.members) < self.group:
            self._region.members.append(layer)
            layer.region = self._region
        else:
            self._region = layer.region
        return layer

    def reset_counters(self) -> None:
        """Starts ``counters`` again from zero (with ``counters=True``)."""
        if self.counters is not None:
            self.counters.reset()

    # prefetching ----------------------------------------------------------

    def _host_layers(self) -> list[int]:
        if self._order_of != len(self.layers):
            self._order = [i for i, layer in enumerate(self.layers) if isinstance(layer, HostLayer)]
            self._order_of = len(self.layers)
        return self._order

    def _fetch(self, index: int) -> None:
        """Queues the upload of layer ``index``'s positions in host memory,
        with those of the next layers of its region in the same call where
        they hold as many (and are not on their way already)."""
        layer = self.layers[index]
        if index in self._fetched or not layer.is_initialized or layer.flushed == 0:
            return
        members = [index]
        parts = layer.region.parts
        if len(layer.region.members) > 1 and layer in parts:
            order = self._host_layers()
            for following in order[order.index(index) + 1 :]:
                other = self.layers[following]
                if (
                    other.region is not layer.region
                    or other not in parts  # joined after the layout: no part of this memory yet
                    or following in self._fetched
                    or not other.is_initialized
                    or other.device != layer.device  # a model over several GPUs: one call a device
                    or other.flushed != layer.flushed
                    or other.geometry() != layer.geometry()
                ):
                    break
                members.append(following)
        for member in members:
            if self.layers[member].writes:
                self.layers[member].settle()  # the upload reads what they write
        if len(members) == 1:
            host, blocks = layer.host, layer.upload_blocks()
        else:
            host = layer.region.host
            part = layer.runs * layer.flushed * (layer.head_dim + layer.value_dim) * layer.item
            shifted = []
            for at, member in enumerate(members):
                each = self.layers[member].upload_blocks().copy()
                each[:, 0] += at * part
                each[:, 1] += parts[self.layers[member]].offset  # where its part was laid out
                shifted.append(each)
            blocks = np.concatenate(shifted)
        for member, fetched in zip(members, _bring_back([self.layers[m] for m in members], host, blocks)):
            self._fetched[member] = fetched

    def _prefetch(self, index: int) -> None:
        """Before layer ``index``'s update: its positions in host memory on
        their way (with the next layers of its region in the same call, if
        not queued already, or if the host part changed since it was
        queued: a flush outside a forward, or the layer's own ``crop``,
        ``reorder_cache``...), handed to the layer; then
        the next layers', ``prefetch`` ahead. The layer's write, queued in
        its update, comes after them: it waits for this layer's compute,
        and the stager takes transfers in the order they come."""
        layer = self.layers[index]
        fetched = self._fetched.pop(index, None)
        if fetched is not None and fetched.version != layer.host_version:
            fetched.settle()  # the host part changed under it: read again
            fetched = None
        if fetched is None:
            self._fetch(index)
            fetched = self._fetched.pop(index, None)
        layer.fetched = fetched
        self._ahead(index)

    def _ahead(self, index: int) -> None:
        order = self._host_layers()
        position = order.index(index)
        for step in range(1, self.prefetch_layers + 1):
            following = order[(position + step) % len(order)]
            if following == index:
                break
            self._fetch(following)

    # the cache API ----------------------------------------------------------

    def update(self, key_states: Any, value_states: Any, layer_idx: int, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        if self.layer_class_to_replicate is not None:
            while len(self.layers) <= layer_idx:
                self.layers.append(self.layer_class_to_replicate())
        layer = self.layers[layer_idx]
        if not isinstance(layer, HostLayer):
            return layer.update(key_states, value_states, *args, **kwargs)  # type: ignore[no-any-return]
        return self._update_offloaded(layer, layer_idx, key_states, value_states, *args, **kwargs)

    def _prefetch_and_update(
        self, layer: HostLayer, index: int, key_states: Any, value_states: Any, *args: Any, **kwargs: Any
    ) -> tuple[Any, Any]:
        self._prefetch(index)
        return layer.update(key_states, value_states, *args, **kwargs)

    def _counted_update(
        self, layer: HostLayer, index: int, key_states: Any, value_states: Any, *args: Any, **kwargs: Any
    ) -> tuple[Any, Any]:
        assert self.counters is not None
        started = time.perf_counter()
        try:
            return self._prefetch_and_update(layer, index, key_states, value_states, *args, **kwargs)
        finally:
            self.counters.updates += 1
            self.counters.update_seconds += time.perf_counter() - started

    def drain(self) -> None:
        """Waits for every copy in flight (uploads ahead, writes to the host)."""
        fetched = list(self._fetched.values())
        self._fetched.clear()
        for layer in self.layers:
            if isinstance(layer, HostLayer) and layer.fetched is not None:
                fetched.append(layer.fetched)
                layer.fetched = None
        for upload in fetched:
            upload.settle()
        self._sides.drain()
        for layer in self.layers:
            if isinstance(layer, HostLayer):
                layer.settle()

    def _changed(self) -> None:
        self.drain()

    def crop(self, tokens_to_remove: int) -> None:
        self._changed()
        super().crop(tokens_to_remove)

    def reorder_cache(self, beam_idx: Any) -> None:
        self._changed()
        super().reorder_cache(beam_idx)

    def batch_repeat_interleave(self, repeats: int) -> None:
        self._changed()
        super().batch_repeat_interleave(repeats)

    def batch_select_indices(self, indices: Any) -> None:
        self._changed()
        super().batch_select_indices(indices)

    def reset(self) -> None:
        self._changed()
        super().reset()

    def host_bytes(self) -> int:
        """Bytes of host memory the offloaded layers hold."""
        return sum(
            int(layer.host.nbytes) for layer in self.layers if isinstance(layer, HostLayer) and layer.host is not None
        )


__all__ = ["Counters", "DeviceRange", "GROUP", "HostLayer", "HostOffloadedCache", "TAIL"]
