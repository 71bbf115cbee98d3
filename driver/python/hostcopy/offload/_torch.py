"""The torch side of the offloader: device buffers, streams and events
from ``torch.cuda``, tensors as views of host regions and ring slots."""

from __future__ import annotations

import importlib
from typing import Any, Callable, Sequence

from .._errors import OffloadArgumentError, OffloadError
from ._weights import Entry


def _torch() -> Any:
    try:
        torch = importlib.import_module("torch")  # typed as Any: torch is optional
    except ImportError as missing:
        raise ImportError(f"hostcopy.offload needs torch for modules and tensors: {missing}") from None
    return torch


class DeviceRange:
    """``nbytes`` bytes of device memory at ``ptr`` as
    ``__cuda_array_interface__`` with no stream: hostcopy orders a copy
    into it after the stream it is given and nothing else (a torch tensor
    passed through DLPack would also order it after torch's current
    stream, and so after the forward running now). Keeps ``owner``."""

    def __init__(self, ptr: int, nbytes: int, owner: Any) -> None:
        self.ptr, self.nbytes, self.owner = ptr, nbytes, owner

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {
            "shape": (self.nbytes,),
            "typestr": "|u1",
            "data": (self.ptr, False),
            "version": 3,
            "strides": None,
            "stream": None,
        }


def device_range(tensor: Any) -> DeviceRange:
    """A contiguous CUDA tensor's bytes as a ``DeviceRange``."""
    return DeviceRange(int(tensor.data_ptr()), int(tensor.numel() * tensor.element_size()), tensor)


class CudaStreams:
    """``_upload.Streams`` over ``torch.cuda``: events recorded and waited
    for on streams of any device."""

    def __init__(self) -> None:
        self.torch = _torch()

    def event(self) -> Any:
        return self.torch.cuda.Event()

    def record(self, event: Any, stream: Any) -> None:
        event.record(stream)

    def wait(self, stream: Any, event: Any) -> None:
        stream.wait_event(event)


class TorchDevice(CudaStreams):
    """``_ring.Device`` over ``torch.cuda``."""

    def __init__(self, device: Any = None) -> None:
        super().__init__()
        torch = self.torch
        if device is None:
            device = torch.device("cuda", torch.cuda.current_device())
        device = torch.device(device)
        if device.type != "cuda":
            raise OffloadArgumentError(
                f"device: hostcopy.offload brings weights to a CUDA device, not {device}", argument="device", value=device
            )
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        self.target = device
        self.ordinal: int = device.index

    def buffer(self, nbytes: int) -> Any:
        return self.torch.empty(nbytes, dtype=self.torch.uint8, device=self.target)

    def memory(self, buffer: Any) -> Any:
        return device_range(buffer)

    def stream(self) -> Any:
        return self.torch.cuda.Stream(self.target)

    def current_stream(self) -> Any:
        return self.torch.cuda.current_stream(self.target)


class TorchKit:
    """``_weights.Kit`` for torch modules."""

    def __init__(self, device: Any = None) -> None:
        self.device = TorchDevice(device)
        self.torch = self.device.torch

    def is_module(self, value: Any) -> bool:
        """Whether ``value`` is a torch module (a group ``offload`` takes)."""
        return isinstance(value, self.torch.nn.Module)

    def entries(self, module: Any, buffers: bool) -> list[Entry]:
        found: list[Entry] = []
        seen: set[int] = set()
        for _, owner in module.named_modules():
            tables = [("parameter", owner._parameters)]
            if buffers:
                tables.append(("buffer", owner._buffers))
            for kind, table in tables:
                for name, tensor in table.items():
                    if tensor is None or id(tensor) in seen:
                        continue
                    seen.add(id(tensor))
                    if tensor.device.type == "meta":
                        raise OffloadArgumentError(
                            f"{name!r} is on the meta device: there are no bytes to offload", argument="modules", value=name
                        )
                    found.append(Entry(owner, name, kind, tensor, tensor.numel() * tensor.element_size()))
        return found

    def _raw(self, host: Any, entry: Entry) -> Any:
        return self.torch.from_numpy(host[entry.offset : entry.offset + entry.nbytes])

    def fill(self, host: Any, entry: Entry) -> None:
        tensor = entry.tensor.detach()
        entry.dtype, entry.shape, entry.origin = tensor.dtype, tuple(tensor.shape), tensor.device
        if entry.nbytes == 0:
            return
        flat = tensor.contiguous().reshape(-1).view(self.torch.uint8)
        if flat.device.type == "cuda":
            from .. import _staging

            _staging.copy_to_host(host, flat, entry.nbytes, dst_offset=entry.offset)
        else:
            self._raw(host, entry).copy_(flat)  # torch's own threads

    def host_view(self, host: Any, entry: Entry) -> Any:
        return self._raw(host, entry).view(entry.dtype).view(entry.shape)

    def device_view(self, buffer: Any, entry: Entry) -> Any:
        # Made once per slot and kept: outside inference mode, so that the
        # view is an ordinary tensor whatever mode its first forward runs in.
        with self.torch.inference_mode(False):
            raw = buffer[entry.offset : entry.offset + entry.nbytes]
            return raw.view(entry.dtype).view(entry.shape)

    def place(self, entry: Entry, value: Any) -> None:
        if entry.kind == "parameter":
            entry.owner._parameters[entry.name].data = value
        else:
            entry.owner._buffers[entry.name] = value

    def restored(self, entry: Entry) -> Any:
        origin = entry.origin
        if origin.type == "cpu":
            return entry.resting
        return entry.resting.to(origin)

    def version(self, entry: Entry) -> int:
        table = entry.owner._parameters if entry.kind == "parameter" else entry.owner._buffers
        return int(table[entry.name]._version)

    def refuse_autograd(self, entries: Sequence[Entry], what: str) -> None:
        if not self.torch.is_grad_enabled():
            return
        for entry in entries:
            if entry.kind == "parameter" and entry.owner._parameters[entry.name].requires_grad:
                raise OffloadError(
                    f"{what}: parameter {entry.name!r} requires grad and autograd is on: a backward pass would "
                    "read the ring slot after later groups overwrote it. Run the forward under torch.no_grad() "
                    "or torch.inference_mode(), or requires_grad_(False) on the offloaded modules"
                )

    def hook(
        self, module: Any, before: Callable[[Any, Any], None], after: Callable[[Any, Any, Any], None]
    ) -> list[Any]:
        return [module.register_forward_pre_hook(before), module.register_forward_hook(after, always_call=True)]
