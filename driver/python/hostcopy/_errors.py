"""The exceptions hostcopy raises. Each carries the numbers that make it.

Packing's refusals are ``PackError`` subclasses, named as the variants of
the Rust ``hostcopy_driver::PackError``. The CUDA layer's errors
(``hostcopy_driver::cuda::Error``) each have a class (src/errors.rs maps
them, one arm per variant): ``Driver`` is ``CudaUnavailable`` or
``CudaError``, ``Pool`` ``RecordPoolError``, ``Pack`` a ``PackError``,
``Capturing`` ``StreamCapturing``, ``DeviceOutOfBounds`` ``OutOfBounds``,
``ContextMismatch`` ``WrongDevice``, and ``ForeignNode``, ``ScopeOpen``,
``NoCurrentContext``, ``NotPrimaryContext``, ``NotDeviceMemory``,
``BlockOutOfBounds``, ``BlocksOverlap`` and ``InvalidOption`` the class of
the same name. A ``RuntimeError`` that is none of these comes from a
variant newer than this package. ``SafetensorsError`` is Python's own:
a model file ``hostcopy.safetensors`` refuses.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence


class PackError(ValueError):
    """A record could not be packed: the base of every refusal.

    Subclasses mirror ``hostcopy_driver::PackError``'s variants and add
    those only Python can meet; each has the fields named in its docstring
    as attributes, declared below for type checkers (the native module and
    ``__init__.py`` pass them as keyword arguments).
    """

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message)
        for name, value in fields.items():
            setattr(self, name, value)


class OutOfBounds(PackError):
    """``offset + nbytes`` is past the end of a ``len``-byte buffer (``side``, ``offset``, ``nbytes``, ``len``)."""

    side: str
    offset: int
    nbytes: int
    len: int


class Overlap(PackError):
    """The destination and source ranges share bytes (``dst``, ``src``, ``nbytes``)."""

    dst: int
    src: int
    nbytes: int


class BlockOutOfBounds(OutOfBounds):
    """Block ``index`` of a batch lies outside the ``side`` memory (``"host"`` or ``"device"``): ``offset + nbytes`` is past its ``len``."""

    index: int


class BlocksOverlap(PackError):
    """Blocks ``first`` and ``second`` of a batch (``first < second``) write some of the same bytes."""

    first: int
    second: int


class AddressOverflow(PackError):
    """``addr + nbytes`` wraps the address space, or ``nbytes`` exceeds what an object can hold (``side``, ``addr``, ``nbytes``)."""

    side: str
    addr: int
    nbytes: int


class NullWithLength(PackError):
    """A null address with a nonzero length (``side``, ``nbytes``)."""

    side: str
    nbytes: int


class NotHostAccessible(PackError):
    """The memory is not known to be host-accessible, e.g. a device-only cuda.core Buffer (``side``, ``addr``)."""

    side: str
    addr: int


class NotContiguous(PackError):
    """A strided or indirect buffer: a record copies one contiguous run (``side``, ``shape``, ``strides``)."""

    side: str
    shape: Sequence[int]  # a list from packing, a tuple from a transfer
    strides: Sequence[int]


class ReadOnlyBuffer(PackError):
    """The destination is read-only, or not proven writable (``side``, ``len``):
    a read-only buffer, or a DLPack tensor whose capsule is unversioned
    (DLPack before 1.0 cannot mark a tensor read-only) or flagged read-only
    or a copy."""

    side: str
    len: int


class IntegerOutOfRange(PackError):
    """An address, offset or length that is negative or wider than a pointer (``name``, ``value``, ``max``).

    ``name`` is the argument's (``"nbytes"``, ``"dst_offset"``), for a
    block its index and field (``"blocks[3].host_offset"``); ``value`` the
    integer given, ``max`` the largest a word holds."""

    name: str
    value: int
    max: int


class CudaUnavailable(RuntimeError):
    """The NVIDIA driver (libcuda.so.1) could not be loaded or initialized: launch functions need it."""

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message)


class CudaError(RuntimeError):
    """A driver call failed (``function``, ``code``, ``name``, e.g. ``CUDA_ERROR_INVALID_HANDLE``)."""

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.function: str = fields.get("function", "")
        self.code: int = fields.get("code", 0)
        self.name: str = fields.get("name", "")


class NotDeviceMemory(ValueError):
    """The device side of a transfer is not GPU memory (``side``, ``addr``): host memory
    (a CPU tensor or numpy array through DLPack, a buffer-protocol object), or
    an address the driver does not know as device memory. ``addr`` is 0 where
    it could not be read."""

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.side: str = fields.get("side", "")
        self.addr: int = fields.get("addr", 0)


class MemoryNotHeld(TypeError):
    """Host memory that a ``blocking=False`` transfer cannot keep for its
    copies (``side``): a torch CPU tensor, or a numpy array or memoryview
    over one (``t.numpy()``) or over a DLPack export (``numpy.from_dlpack``).
    torch frees a tensor's memory under any reference to the tensor when
    it is resized or given other storage (``resize_()``, ``set_()``,
    ``share_memory_()``, ``t.data = ...``, an ``out=`` of another shape), so
    the transfer would write or read freed memory. A blocking copy of the
    same memory is fine."""

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.side: str = fields.get("side", "")


class WrongDevice(ValueError):
    """Memory or a stream of one device given to a stager or call of another (``expected``, ``found``: device ordinals)."""

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.expected: int = fields.get("expected", 0)
        self.found: int = fields.get("found", 0)


class StreamCapturing(RuntimeError):
    """The stream is capturing a graph: a staged transfer cannot become part of it."""

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message)


class InvalidOption(ValueError):
    """A ``Stager`` option the Rust layer cannot work with: outside ``min..=max``,
    or not an integer (``operator.index`` refuses it, or it is a ``bool``).
    Raised before any driver call, so without a GPU too.

    ``option``: the keyword (``"chunk"``, ``"buffers"``, ``"workers"``,
    ``"driver_path_below"``); ``value``:
    what was given (the object itself where it is not an integer); ``min``,
    ``max``: the range accepted, both included (``chunk``: 4 KiB to 1 GiB,
    ``buffers``: 1 to 64, ``workers``: 0 to 1024).
    """

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.option: str = fields.get("option", "")
        self.value: Any = fields.get("value")
        self.min: int = fields.get("min", 0)
        self.max: int = fields.get("max", 0)


class NoCurrentContext(RuntimeError):
    """No CUDA context is current on the calling thread, so the null stream (0)
    names none: pass a stream, or make a device current first (cuda.core's
    ``Device.set_current()``, torch's first CUDA call)."""

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message)


class NotPrimaryContext(ValueError):
    """A stream of a context of ``device`` (an ordinal) that is not the device's
    primary context: hostcopy works in primary contexts, the ones cuda.core,
    torch, cupy and the CUDA runtime use."""

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.device: int = fields.get("device", 0)


class ForeignNode(ValueError):
    """A graph node given to a graph (or an executable of a graph) it does not belong to."""

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message)


class ScopeOpen(RuntimeError):
    """A launch scope of the Rust layer is open on the stream: until it returns,
    the stream can neither begin a capture nor join one."""

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message)


class RecordPoolError(RuntimeError):
    """A record pool of the Rust layer refused: every one of its ``capacity``
    slots is held; or (a bug to report) ``user_data`` is not a slot of the
    pool, or slot ``index`` was released twice. The attributes the case
    does not give are ``None``."""

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.capacity: Optional[int] = fields.get("capacity")
        self.user_data: Optional[int] = fields.get("user_data")
        self.index: Optional[int] = fields.get("index")


class SafetensorsError(ValueError):
    """A safetensors file that ``hostcopy.safetensors`` refuses, as
    safetensors' own reader would (``filename``, ``reason``, and ``tensor``:
    the tensor's name, or ``None`` for the file as a whole). Raised before
    any device memory is allocated or any byte copied.

    ``reason``: ``"header_too_small"`` (under 8 bytes), ``"header_too_large"``
    (a header length over 100,000,000), ``"invalid_header_length"`` (the
    header reaches past the file), ``"invalid_header"`` (not UTF-8, not
    JSON, not an object), ``"duplicate_name"`` (a tensor named twice),
    ``"invalid_metadata"`` (``__metadata__`` not an object of strings, or a
    key in it twice), ``"invalid_tensor_info"`` (a field missing, repeated
    or of the wrong type, or a byte length that is not the shape's),
    ``"unknown_dtype"``, ``"unsupported_dtype"`` (known to the format, not
    to torch), ``"misaligned_slice"`` (sub-byte elements that do not fill
    whole bytes), ``"validation_overflow"`` (a size past 64 bits),
    ``"invalid_offsets"`` (a gap, an overlap, or an end before the begin),
    ``"data_truncated"`` (tensors past the end of the file),
    ``"trailing_bytes"`` (bytes past the last tensor).
    """

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.filename: str = fields.get("filename", "")
        self.reason: str = fields.get("reason", "")
        self.tensor: Optional[str] = fields.get("tensor")
