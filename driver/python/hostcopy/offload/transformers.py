"""A KV cache for transformers' ``generate`` whose layers live in pageable
host memory (``hostcopy.empty``, nothing pinned)::

    cache = hostcopy.offload.transformers.HostOffloadedCache(config=model.config)
    out = model.generate(input_ids, past_key_values=cache, max_new_tokens=64)

transformers' own offloaded cache (``cache_implementation="offloaded"``,
in 5.x ``DynamicCache(offloading=True)``) moves each layer's whole keys
and values to the CPU after its update (``.to("cpu", non_blocking=True)``,
into pinned memory from torch's host allocator) and back before the next
step, through torch's copies. Here each full-attention layer's keys and
values stay in host memory at a capacity that doubles as the sequence
grows (``[batch, heads, capacity, head_dim]``); an update writes only the
new positions to the host (one blocks copy, device to host), and the
next layer's keys and values come back while the current one runs (one
blocks copy per tensor, host to device, into a contiguous
``[batch, heads, length, head_dim]`` tensor), on a stream of their own
ordered with the compute stream by events. The attention then sees what
``DynamicCache`` would give it: the cached positions followed by the new
ones, contiguous, of the same dtype.

Sliding-window layers (small by construction) stay on the device as
``DynamicCache`` keeps them. ``layer.keys`` / ``layer.values`` of an
offloaded layer are CPU tensors viewing the host memory (``[..., :length,
:]``), made when read, once the layer's writes to the host have
landed.
"""

from __future__ import annotations

import importlib
from typing import Any, Optional

from .. import _memory, _staging
from .._errors import OffloadError
from ._torch import DeviceRange, device_range


def _modules() -> tuple[Any, Any]:
    try:  # typed as Any: both are optional
        torch = importlib.import_module("torch")
        cache_utils = importlib.import_module("transformers.cache_utils")
    except ImportError as missing:
        raise ImportError(f"hostcopy.offload.transformers needs torch and transformers: {missing}") from None
    return torch, cache_utils


torch, cache_utils = _modules()
_DynamicLayer: Any = cache_utils.DynamicLayer
_DynamicCache: Any = cache_utils.DynamicCache


class HostLayer(_DynamicLayer):  # type: ignore[misc]
    """One full-attention layer's keys and values in host memory.

    ``keys`` / ``values`` are made when read, after this layer's writes
    to the host have landed: a reader never sees bytes still in flight.
    """

    is_sliding = False
    # Class defaults: the base class's __init__ assigns keys and values.
    _keys: Any = None
    _values: Any = None
    #: The views no longer match the host memory (made again when read).
    _stale = False

    def __init__(self) -> None:
        #: The device to host writes of the latest update, until waited for
        #: (first: reading ``keys`` waits for them).
        self.writes: list[Any] = []
        super().__init__()
        self.length = 0
        self.capacity = 0
        self.host_keys: Any = None
        self.host_values: Any = None

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

    def _expose(self) -> None:
        """Waits for the writes in flight, then makes the views if they are stale."""
        if self.writes:
            self.settle()
        if self._stale:
            self._views()

    def lazy_initialization(self, key_states: Any, value_states: Any = None) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        self.batch, self.heads, _, self.head_dim = key_states.shape
        self.value_dim = self.head_dim if value_states is None else value_states.shape[-1]
        self.item = key_states.element_size()
        self.is_initialized = True
        self._views()

    # host memory --------------------------------------------------------

    def settle(self) -> None:
        """Waits for this layer's writes to the host."""
        writes, self.writes = self.writes, []
        for write in writes:
            write.wait()

    def _grow(self, needed: int) -> None:
        if needed <= self.capacity:
            return
        self.settle()
        capacity = max(needed, 2 * self.capacity, 256)
        keys = _memory.empty((self.batch, self.heads, capacity, self.head_dim * self.item))
        values = _memory.empty((self.batch, self.heads, capacity, self.value_dim * self.item))
        if self.length:
            keys[:, :, : self.length] = self.host_keys[:, :, : self.length]
            values[:, :, : self.length] = self.host_values[:, :, : self.length]
        self.host_keys, self.host_values, self.capacity = keys, values, capacity

    def _views(self) -> None:
        """``keys`` / ``values``: CPU tensors over the host memory."""
        self._stale = False
        if self.host_keys is None:
            self.keys = torch.empty((self.batch, self.heads, 0, self.head_dim), dtype=self.dtype)
            self.values = torch.empty((self.batch, self.heads, 0, self.value_dim), dtype=self.dtype)
            return
        self.keys = torch.from_numpy(self.host_keys).view(self.dtype)[:, :, : self.length]
        self.values = torch.from_numpy(self.host_values).view(self.dtype)[:, :, : self.length]

    def _blocks(self, dim: int, start: int, count: int, device_length: int) -> list[tuple[int, int, int]]:
        """(device offset, host offset, bytes) of each (batch, head) run:
        host positions ``start .. start + count`` against the first
        ``count`` positions of a contiguous device tensor
        ``[batch, heads, device_length, dim]``."""
        row = dim * self.item
        blocks = []
        for b in range(self.batch):
            for h in range(self.heads):
                run = b * self.heads + h
                blocks.append((run * device_length * row, (run * self.capacity + start) * row, count * row))
        return blocks

    def write(self, key_states: Any, value_states: Any, stream: Any) -> None:
        """Queues the new positions' copy to the host on ``stream``, after
        the work queued so far on the current stream (which made them)."""
        count = key_states.shape[-2]
        self._grow(self.length + count)
        # Made contiguous before the event is recorded: for a view (the
        # prefill's transposed states) .contiguous() queues a copy kernel
        # on the current stream, which the copy to the host must follow.
        keys = key_states.contiguous()
        values = value_states.contiguous()
        _after_current(stream, self.device)
        for host, device, dim in ((self.host_keys, keys, self.head_dim), (self.host_values, values, self.value_dim)):
            self.writes.append(
                _staging.copy_blocks_to_host(
                    host, device_range(device), self._blocks(dim, self.length, count, count), stream=stream, blocking=False
                )
            )
        self.length += count
        self._stale = True  # made when read, once these writes have landed

    def read(self, stream: Any) -> tuple[Any, Any, list[Any]]:
        """Queues the cached positions' copy to new contiguous device
        tensors, on ``stream``; returns them and the transfers."""
        self.settle()
        keys = torch.empty((self.batch, self.heads, self.length, self.head_dim), dtype=self.dtype, device=self.device)
        values = torch.empty((self.batch, self.heads, self.length, self.value_dim), dtype=self.dtype, device=self.device)
        transfers = []
        for host, device, dim in ((self.host_keys, keys, self.head_dim), (self.host_values, values, self.value_dim)):
            transfers.append(
                _staging.copy_blocks_to_device(
                    device_range(device), host, self._blocks(dim, 0, self.length, self.length), stream=stream, blocking=False
                )
            )
        return keys, values, transfers

    # the layer API --------------------------------------------------------

    def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> Any:
        raise OffloadError("HostLayer is updated through its HostOffloadedCache")

    def get_seq_length(self) -> int:
        return self.length

    def crop(self, max_length: int) -> None:
        if max_length < 0:
            max_length = self.length - abs(max_length)
        if self.length <= max_length:
            return
        self.settle()
        self.length = max_length
        self._views()

    def _rewrite(self, keys: Any, values: Any) -> None:
        """Replaces the host memory with these CPU tensors' positions."""
        self.settle()
        self.batch = keys.shape[0]
        self.host_keys = self.host_values = None
        self.capacity = 0
        length, self.length = keys.shape[-2], 0
        self._grow(max(length, 1))
        self.length = length
        self._views()
        self.keys.copy_(keys)
        self.values.copy_(values)

    def reorder_cache(self, beam_idx: Any) -> None:
        if self.length:
            self.settle()
            index = beam_idx.to("cpu")
            self._rewrite(self.keys.index_select(0, index), self.values.index_select(0, index))

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.length:
            self.settle()
            self._rewrite(self.keys.repeat_interleave(repeats, dim=0), self.values.repeat_interleave(repeats, dim=0))

    def batch_select_indices(self, indices: Any) -> None:
        if self.length:
            self.settle()
            index = indices.to("cpu") if hasattr(indices, "to") else indices
            self._rewrite(self.keys[index, ...], self.values[index, ...])

    def reset(self) -> None:
        self.settle()
        self.length = 0
        if self.is_initialized:
            self._views()

    def offload(self) -> None:
        """Already in host memory."""

    def prefetch(self) -> None:
        """Brought back by its cache, one layer ahead."""


def _after_current(side: Any, device: Any) -> None:
    """Makes ``side`` wait for the work queued so far on ``device``'s current stream."""
    event = torch.cuda.Event()
    event.record(torch.cuda.current_stream(device))
    side.wait_event(event)


class _Fetched:
    """A layer's keys and values on their way to the device."""

    def __init__(self, layer: int, length: int, keys: Any, values: Any, transfers: list[Any], ready: Any) -> None:
        self.layer, self.length, self.keys, self.values, self.transfers, self.ready = (
            layer,
            length,
            keys,
            values,
            transfers,
            ready,
        )

    def settle(self) -> None:
        transfers, self.transfers = self.transfers, []
        for transfer in transfers:
            transfer.wait()


class HostOffloadedCache(_DynamicCache):  # type: ignore[misc]
    """``DynamicCache`` with its full-attention layers in pageable host
    memory, the next layer brought back while the current one runs.

    ``config``: the model's config (its layer types decide which layers are
    sliding-window ones, kept on the device as ``DynamicCache`` does);
    without it every layer is offloaded. ``prefetch``: how many layers
    ahead are brought back (default 2).

    Streams: the uploads run on a stream of their own, into tensors
    allocated on that stream, so they wait for nothing the compute stream
    does (only for the host memory to hold the previous step's positions,
    which the CPU makes sure of); the compute stream waits for an upload's
    event before its layer's attention, and the tensors are recorded on it
    so that torch's allocator keeps them until that attention has run. The
    writes of new positions run on another stream, after an event recorded
    on the compute stream once the positions are made.
    """

    layers: list[Any]
    layer_class_to_replicate: Any

    def __init__(self, config: Any = None, *, prefetch: int = 2) -> None:
        # DynamicCache reads the config's layer types as this transformers
        # does; its full-attention layers (plain DynamicLayer) become HostLayer.
        super().__init__(config=config)
        self.layers = [HostLayer() if type(layer) is _DynamicLayer else layer for layer in self.layers]
        if self.layer_class_to_replicate is not None:
            self.layer_class_to_replicate = HostLayer
        if prefetch < 1:
            raise ValueError(f"prefetch must be >= 1, not {prefetch}")
        self.prefetch_layers = prefetch
        self._fetched: dict[int, _Fetched] = {}
        #: Uploads already read by the compute stream, waited for one layer later.
        self._consumed: list[_Fetched] = []
        self._streams: dict[tuple[Any, str], Any] = {}

    # streams and events ---------------------------------------------------

    def _side(self, device: Any, role: str) -> Any:
        stream = self._streams.get((device, role))
        if stream is None:
            stream = self._streams[(device, role)] = torch.cuda.Stream(device)
        return stream

    def _host_layers(self) -> list[int]:
        return [i for i, layer in enumerate(self.layers) if isinstance(layer, HostLayer)]

    def _fetch(self, index: int) -> None:
        layer = self.layers[index]
        if index in self._fetched or not layer.is_initialized or layer.length == 0:
            return
        side = self._side(layer.device, "read")
        # Allocated on the upload stream: no work of the compute stream can
        # be using their memory, so the upload waits for nothing there.
        with torch.cuda.stream(side):
            keys, values, transfers = layer.read(side)
        ready = torch.cuda.Event()
        ready.record(side)
        self._fetched[index] = _Fetched(index, layer.length, keys, values, transfers, ready)

    def _take(self, index: int) -> Optional[_Fetched]:
        layer = self.layers[index]
        fetched = self._fetched.pop(index, None)
        if fetched is not None and fetched.length != layer.length:
            fetched.settle()  # the cache changed under it (crop, reorder): read again
            fetched = None
        if fetched is None and layer.length:
            self._fetch(index)
            fetched = self._fetched.pop(index)
        if fetched is not None:
            current = torch.cuda.current_stream(layer.device)
            current.wait_event(fetched.ready)
            if fetched.keys.is_cuda:
                fetched.keys.record_stream(current)
                fetched.values.record_stream(current)
        return fetched

    def _ahead(self, index: int) -> None:
        order = self._host_layers()
        if not order:
            return
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
        if not layer.is_initialized:
            layer.lazy_initialization(key_states, value_states)
        fetched = self._take(layer_idx)
        if fetched is None:
            keys, values = key_states, value_states
        else:
            keys = torch.cat([fetched.keys, key_states], dim=-2)
            values = torch.cat([fetched.values, value_states], dim=-2)
        # The previous layer's upload is over by now (the compute stream read
        # it); this one's Transfer keeps its tensors until it is waited for.
        for old in self._consumed:
            old.settle()
        self._consumed = [fetched] if fetched is not None else []
        layer.write(key_states, value_states, self._side(layer.device, "write"))
        self._ahead(layer_idx)
        return keys, values

    def drain(self) -> None:
        """Waits for every copy in flight (uploads ahead, writes to the host)."""
        for fetched in [*self._fetched.values(), *self._consumed]:
            fetched.settle()
        self._fetched.clear()
        self._consumed = []
        for layer in self.layers:
            if isinstance(layer, HostLayer):
                layer.settle()

    def _changed(self) -> None:
        self.drain()

    def crop(self, max_length: int) -> None:
        self._changed()
        super().crop(max_length)

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
            layer.host_keys.nbytes + layer.host_values.nbytes
            for layer in self.layers
            if isinstance(layer, HostLayer) and layer.host_keys is not None
        )


__all__ = ["DeviceRange", "HostLayer", "HostOffloadedCache"]
