"""Model files (safetensors) to the GPU in one transfer::

    import hostcopy.safetensors
    state = hostcopy.safetensors.load_file("model.safetensors", device="cuda:0")
    model.load_state_dict(state)

``load_file`` returns what ``safetensors.torch.load_file(filename,
device=...)`` returns: the same names in the same order (that of the
tensors' bytes in the file, as safetensors >= 0.6 gives them; 0.5 and
older sorted them by name), dtypes, shapes and bytes. It maps the file
once, allocates one device buffer for the whole data region
(``torch.empty(data_len, dtype=torch.uint8)``), copies the region into it
with one staged ``copy_to_device`` (the format puts the tensors back to
back, so the region is one range), and makes each tensor a view of that
buffer. On the H200 host, the same path written by hand (one block call
into one allocation) took a 5.9 GiB file of 369 bf16
tensors to the GPU at 47.2 GB/s, against 5.1 GB/s for
``safetensors.torch`` and 22.4 GB/s for hostcopy tensor by tensor;
``bench/safetensors_load.py`` measures this function.

What differs from safetensors, and how:

- **One allocation.** The tensors are views of one device buffer (their
  ``untyped_storage()`` is the whole region). Freeing or dropping one
  tensor frees nothing: the buffer goes when the last tensor of the file
  does. ``torch.save`` of one tensor writes the whole buffer (``clone()``
  it first); ``safetensors.torch.save_file`` handles such views (they do
  not overlap). A ``resize_()`` of one tensor's storage would take the
  others' bytes with it: do not.
- **Alignment.** A torch view with a dtype must start at a multiple of the
  dtype's size. Files safetensors writes are laid out so (tensors ordered
  by descending dtype size, the header padded to 8 bytes); a tensor of a
  file that is not (``begin`` not a multiple of its element size) is
  copied on the device, out of the buffer, into an allocation of its own,
  so its address is aligned as torch's allocator aligns any tensor.
- **Empty tensors** (a 0 in the shape) are fresh ``torch.empty`` tensors,
  as safetensors makes them.
- **Checks** are safetensors' own, JSON as serde_json reads it included
  (``hostcopy._safetensors_format`` lists them): a file safetensors
  refuses raises ``SafetensorsError`` (a ``ValueError``) with a
  ``reason``, before any device memory is allocated, and a file it reads
  is read with the same tensors and metadata (a name given twice: its
  last entry, as there). ``tests/test_safetensors_parity.py`` compares
  the two readers on a generated corpus.

``safe_open`` is the lazy form, safetensors' context manager with
``keys()``, ``offset_keys()``, ``metadata()`` and ``get_tensor(name)``,
each tensor copied on its own into an allocation of its own (the speed of
one transfer per tensor). ``read_header`` and ``copy_data_to_device`` work
without torch: the checked header, and the data region copied into any
device memory hostcopy takes (a cupy array, a cuda.core ``Buffer``).

torch is imported by ``load_file`` and ``safe_open`` only.
"""

from __future__ import annotations

import mmap
import os
from types import TracebackType
from typing import TYPE_CHECKING, Any, BinaryIO, Optional, Union

from . import _staging
from ._errors import SafetensorsError
from ._safetensors_format import DTYPES, Dtype, Header, TensorInfo, TensorView, plan_views
from ._safetensors_format import read_header as _read_open_header

if TYPE_CHECKING:
    import torch

__all__ = [
    "Dtype",
    "Header",
    "SafetensorsError",
    "TensorInfo",
    "TensorView",
    "copy_data_to_device",
    "load_file",
    "plan_views",
    "read_header",
    "safe_open",
    "DTYPES",
]

FileName = Union[str, "os.PathLike[str]"]


def read_header(filename: FileName) -> Header:
    """The checked header of a safetensors file: its ``metadata``, its
    ``tensors`` in the order of their bytes, and where its data region is
    (``data_offset``, ``data_len``). Reads the header only."""
    name = os.fspath(filename)
    with open(name, "rb") as file:
        return _read_open_header(file, name)


def _copy_range(
    dst: Any, file: BinaryIO, offset: int, nbytes: int, stager: Optional[_staging.Stager], stream: Any
) -> None:
    """Copies bytes ``offset .. offset + nbytes`` of ``file`` into the start of
    device memory ``dst``, through one mapping of the file, in one blocking
    staged transfer (the page cache's pages are read by the stager's
    workers, in parallel)."""
    if nbytes == 0:
        return
    mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        if stager is None:
            _staging.copy_to_device(dst, mapped, nbytes, src_offset=offset, stream=stream)
        else:
            stager.copy_to_device(dst, mapped, nbytes, src_offset=offset, stream=stream)
    finally:
        try:
            mapped.close()
        except BufferError:
            # A refused copy's traceback still holds the buffer export:
            # the mapping is unmapped with it, and the refusal is what the
            # caller sees.
            pass


def copy_data_to_device(
    dst: Any, filename: FileName, *, stager: Optional[_staging.Stager] = None, stream: Any = None
) -> Header:
    """Checks the header of a safetensors file, copies its whole data region
    into the start of device memory ``dst`` (anything ``copy_to_device``
    takes; it must hold ``data_len`` bytes, or ``OutOfBounds``) in one
    blocking transfer, and returns the header: tensor ``t``'s bytes are then
    ``dst[t.begin:t.end]``. ``stager`` and ``stream`` are
    ``copy_to_device``'s (default: the device's stager, the legacy default
    stream). Nothing is copied from a file the checks refuse."""
    name = os.fspath(filename)
    with open(name, "rb") as file:
        header = _read_open_header(file, name)
        _copy_range(dst, file, header.data_offset, header.data_len, stager, stream)
    return header


def _torch() -> Any:
    try:
        import torch
    except ImportError as missing:
        raise ImportError(f"hostcopy.safetensors.load_file and safe_open make torch tensors: {missing}") from None
    return torch


def _cuda_device(torch: Any, device: Any) -> Any:
    """A ``torch.device`` of type cuda with its index, from what safetensors
    takes: ``"cuda"``, ``"cuda:1"``, an ordinal, a ``torch.device``."""
    if isinstance(device, int) and not isinstance(device, bool):
        device = torch.device("cuda", device)
    device = torch.device(device)
    if device.type != "cuda":
        raise ValueError(
            f"device: hostcopy.safetensors loads to CUDA devices, not {device}; use safetensors.torch for that"
        )
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def _torch_dtypes(torch: Any, views: list[TensorView], filename: str) -> dict[str, Any]:
    dtypes = {}
    for view in views:
        dtype = getattr(torch, view.torch_dtype, None)
        if dtype is None:
            raise SafetensorsError(
                f"{filename}: tensor {view.name!r}: this torch ({torch.__version__}) has no torch.{view.torch_dtype}",
                filename=filename,
                reason="unsupported_dtype",
                tensor=view.name,
            )
        dtypes[view.torch_dtype] = dtype
    return dtypes


def _tensors_of(torch: Any, buffer: Any, views: list[TensorView], dtypes: dict[str, Any]) -> dict[str, Any]:
    """Each tensor as a view of ``buffer`` (the data region as uint8), or
    its own copy, or a fresh empty tensor, as ``views`` plan them."""
    tensors = {}
    for view in views:
        dtype = dtypes[view.torch_dtype]
        if view.placement == "empty":
            tensors[view.name] = torch.empty(view.shape, dtype=dtype, device=buffer.device)
            continue
        raw = buffer[view.begin : view.end]
        if view.placement == "copy":
            raw = raw.clone()  # an allocation of its own, aligned for any dtype
        tensors[view.name] = raw.view(dtype).reshape(view.shape)
    return tensors


def load_file(
    filename: FileName, device: Any = "cuda:0", *, stager: Optional[_staging.Stager] = None
) -> dict[str, "torch.Tensor"]:
    """Loads every tensor of a safetensors file onto a CUDA device: what
    ``safetensors.torch.load_file(filename, device=device)`` returns, through
    one mapping of the file, one device allocation and one staged transfer.

    ``device``: ``"cuda"`` (the current device), ``"cuda:N"``, an ordinal or
    a ``torch.device``. ``stager``: a ``hostcopy.Stager`` of that device
    (default: the device's shared one). The copy is ordered after the work
    queued on the device's current torch stream, and done when this returns.

    The tensors share one allocation (the module's docstring says what that
    changes); a malformed file raises ``SafetensorsError`` before anything is
    allocated.
    """
    torch = _torch()
    target = _cuda_device(torch, device)
    name = os.fspath(filename)
    with open(name, "rb") as file:
        header = _read_open_header(file, name)
        views = plan_views(header, name)
        dtypes = _torch_dtypes(torch, views, name)
        buffer = torch.empty(header.data_len, dtype=torch.uint8, device=target)
        _copy_range(buffer, file, header.data_offset, header.data_len, stager, torch.cuda.current_stream(target))
    return _tensors_of(torch, buffer, views, dtypes)


class safe_open:
    """safetensors' ``safe_open`` for torch on a CUDA device, lazily: each
    ``get_tensor`` copies one tensor into an allocation of its own (one
    transfer per tensor; ``load_file`` is faster for a whole file)::

        with hostcopy.safetensors.safe_open("model.safetensors", framework="pt", device="cuda:0") as f:
            embedding = f.get_tensor("embed_tokens.weight")

    The header is checked on opening (``SafetensorsError``); the file is
    mapped until the ``with`` block ends (or ``close()``).
    """

    def __init__(
        self,
        filename: FileName,
        framework: str = "pt",
        device: Any = "cuda:0",
        *,
        stager: Optional[_staging.Stager] = None,
    ) -> None:
        if framework not in ("pt", "torch", "pytorch"):
            raise ValueError(f"framework: hostcopy.safetensors makes torch tensors ('pt'), not {framework!r}")
        self._torch = _torch()
        self._device = _cuda_device(self._torch, device)
        self._stager = stager
        self._name = os.fspath(filename)
        self._file: Optional[BinaryIO] = open(self._name, "rb")
        try:
            self._header = _read_open_header(self._file, self._name)
            self._views = {view.name: view for view in plan_views(self._header, self._name)}
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> "safe_open":
        return self

    def __exit__(
        self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException], traceback: Optional[TracebackType]
    ) -> None:
        self.close()

    def close(self) -> None:
        """Closes the file; tensors already loaded stay."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def keys(self) -> list[str]:
        """The tensors' names, sorted (as safetensors' ``keys()``)."""
        return sorted(self._views)

    def offset_keys(self) -> list[str]:
        """The tensors' names in the order of their bytes (``load_file``'s)."""
        return list(self._views)

    def metadata(self) -> Optional[dict[str, str]]:
        """The header's ``__metadata__``, or ``None`` without one."""
        return None if self._header.metadata is None else dict(self._header.metadata)

    def get_tensor(self, name: str) -> "torch.Tensor":
        """One tensor, copied to the device into an allocation of its own."""
        if self._file is None:
            raise ValueError(f"{self._name} is closed")
        view = self._views.get(name)
        if view is None:
            raise KeyError(f"{self._name} has no tensor named {name!r}")
        torch = self._torch
        dtypes = _torch_dtypes(torch, [view], self._name)
        nbytes = view.end - view.begin
        buffer = torch.empty(nbytes, dtype=torch.uint8, device=self._device)
        offset = self._header.data_offset + view.begin
        _copy_range(buffer, self._file, offset, nbytes, self._stager, torch.cuda.current_stream(self._device))
        own = view._replace(begin=0, end=nbytes, placement="empty" if nbytes == 0 else "view")
        return _tensors_of(torch, buffer, [own], dtypes)[name]
