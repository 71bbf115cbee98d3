"""The exceptions hostcopy raises. Each carries the numbers that make it.

Every class derives from ``hostcopy.Error`` (``except hostcopy.Error``
catches whatever hostcopy raises for a reason of its own, every refused
argument included) and keeps a built-in base (``ValueError``,
``TypeError``, ``OverflowError``, ``RuntimeError``, ``MemoryError``,
``OSError``), so code that catches those keeps working. An argument of a
wrong type is ``ArgumentTypeError`` (a ``TypeError``), an integer outside
a word ``IntegerOutOfRange`` (a ``ValueError`` and an ``OverflowError``),
another refused value ``ArgumentError`` or a class that says more (a
``ValueError``); ``refused`` turns an argument's error that Python, numpy
or the argument's own code raised into these, in one place.

Packing's refusals are ``PackError`` subclasses, named as the variants of
the Rust ``hostcopy_driver::PackError``; a batch's refusals and memory a
transfer cannot use are ``TransferError`` subclasses. src/errors.rs maps
every variant of the Rust crate's errors to one of these classes (the
classes are fetched once, when the native module loads), without a
wildcard arm: ``cuda::Error``'s ``Driver`` is ``CudaUnavailable`` or
``CudaError``, ``Pool`` ``RecordPoolError``, ``Pack`` a ``PackError``,
``Capturing`` ``StreamCapturing``, ``DeviceOutOfBounds`` ``OutOfBounds``,
``ContextMismatch`` ``WrongDevice``, and the others the class of the same
name; ``HostBufferError`` is ``HostMemoryError``, and
``parallel::StartError`` ``WorkerStartError``. ``SafetensorsError`` is
Python's own: a model file ``hostcopy.safetensors`` refuses.

From the interpreter's exit handler on, the native module raises each
class's built-in base instead, with the same message (making a class's
instance runs this module's Python code, which may no longer run then).
"""

from __future__ import annotations

import ctypes
from typing import Any, Optional, Sequence


class Error(Exception):
    """The base of every exception hostcopy raises: ``except hostcopy.Error``.

    Each class's fields, named in its docstring, are attributes, passed
    as keyword arguments (declared on each class for type checkers); a
    field the case does not give keeps the class's default.
    """

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message)
        for name, value in fields.items():
            setattr(self, name, value)


class PackError(Error, ValueError):
    """A record could not be packed, or an argument of a copy is refused: the
    base of every such refusal.

    Subclasses mirror ``hostcopy_driver::PackError``'s variants and add
    those only Python can meet (``NotContiguous``, ``ReadOnlyBuffer``,
    ``IntegerOutOfRange``), which transfers raise too.
    """


class TransferError(Error, ValueError):
    """A transfer refused before anything is queued, for a reason of the
    transfer itself: a batch's blocks (``BlockOutOfBounds``,
    ``BlocksOverlap``), device memory it cannot use (``OrderNotKept``,
    ``ReadOnlyDevice``), a closed stager (``StagerClosed``)."""


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


class BlockOutOfBounds(TransferError):
    """Block ``index`` of a batch lies outside the ``side`` memory (``"host"`` or ``"device"``): ``offset + nbytes`` is past its ``len``."""

    index: int
    side: str
    offset: int
    nbytes: int
    len: int


class BlocksOverlap(TransferError):
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


class IntegerOutOfRange(PackError, OverflowError):
    """An address, offset, length, count or ordinal that is negative or
    wider than a pointer (``name``, ``value``, ``max``): a ``ValueError``,
    and an ``OverflowError`` as Python's own conversions of such an integer
    raise.

    ``name`` is the argument's (``"nbytes"``, ``"dst_offset"``,
    ``"device"``, ``"shape[1]"``), for a block its index and field
    (``"blocks[3].host_offset"``); ``value`` the integer given, ``max`` the
    largest the argument takes (a word's largest, ``hostcopy.empty``'s
    sizes a signed word's)."""

    name: str
    value: int
    max: int


class ArgumentTypeError(Error, TypeError):
    """An argument of a type hostcopy does not take (``argument``: its name,
    such as ``"nbytes"``, ``"stream"``, ``"blocks[2]"``, ``"shape"``;
    ``value``: what was given): an offset, size, count or stream that is no
    integer (a ``bool``, ``float`` or ``str``), a side that is no memory of
    the kind asked for, blocks that are no triples, a dtype or a record of
    the wrong kind. Raised before anything is copied, mapped or queued.

    Also what a ``TypeError`` raised by an argument's own code while
    hostcopy reads it becomes (an ``__index__``, a ``__cuda_stream__``):
    that error is its ``__cause__``."""

    argument: Optional[str] = None
    value: Any = None


class ArgumentError(Error, ValueError):
    """An argument of the right type whose value hostcopy refuses where no
    class above says more (``argument``, ``value``): a closed cuda.core
    Buffer, a packed record of the wrong length, a shape of more dimensions
    than numpy takes, a dtype numpy refuses. Raised before anything is
    copied, mapped or queued.

    Also what a ``ValueError`` raised by an argument's own code while
    hostcopy reads it becomes (``int()`` of a handle): that error is its
    ``__cause__``."""

    argument: Optional[str] = None
    value: Any = None


class ArgumentRuntimeError(Error, RuntimeError):
    """An argument in a state its own library will not lend its memory in
    (``argument``, ``value``), a ``RuntimeError`` as that library's own
    refusal is: a torch tensor that requires grad (pass ``t.detach()``,
    the same memory), or that has the conjugate or negative bit (pass
    ``t.resolve_conj()``, ``t.resolve_neg()``). Raised before anything is
    copied, mapped or queued.

    Also what a ``RuntimeError`` raised by an argument's own code while
    hostcopy reads it becomes (a producer's ``__dlpack__`` that will not
    export, a stream whose ``cuda_stream`` raises): that error is its
    ``__cause__``."""

    argument: Optional[str] = None
    value: Any = None


class ArgumentBufferError(Error, BufferError):
    """An argument whose own code refused to export its memory as hostcopy
    read it, raising a ``BufferError`` (``argument``, ``value``): a
    producer's ``__dlpack__`` or buffer export that will not lend its
    memory. That error is its ``__cause__``. Raised before anything is
    copied, mapped or queued."""

    argument: Optional[str] = None
    value: Any = None


class OrderNotKept(TransferError):
    """Device memory whose owner orders its use on a stream of its own (the
    Rust layer's cudarc memory), given to a transfer that cannot keep that
    order. The package never hands the layer such memory."""


class ReadOnlyDevice(TransferError):
    """Device memory lent for reading only given as a destination (``side``).
    The package never hands the layer such memory."""

    side: str = ""


class StagerClosed(TransferError):
    """The stager is closed (``close()``, or its ``with`` block ended), or
    the interpreter is exiting: transfers and new stagers are refused."""


class HostMemoryError(Error, MemoryError):
    """``hostcopy.empty`` could not map the memory (``nbytes``, ``errno``:
    what ``mmap`` said, or ``None`` where this platform has no ``mmap``)."""

    nbytes: int = 0
    errno: Optional[int] = None


class StreamMemoryWaitsUnsupported(Error, RuntimeError):
    """The GPU ``device`` (an ordinal), or its driver, refuses stream memory
    waits (``cuStreamWaitValue32``), which every staged transfer queues: no
    ``Stager`` is made there. Pinned memory and the driver's own copies
    still work."""

    device: int = 0


class CudaUnavailable(Error, RuntimeError):
    """The NVIDIA driver (libcuda.so.1) could not be loaded or initialized: launch functions need it."""


class CudaError(Error, RuntimeError):
    """A driver call failed (``function``, ``code``, ``name``, e.g. ``CUDA_ERROR_INVALID_HANDLE``)."""

    function: str = ""
    code: int = 0
    name: str = ""


class NotDeviceMemory(Error, ValueError):
    """The device side of a transfer is not GPU memory (``side``, ``addr``): host memory
    (a CPU tensor or numpy array through DLPack, a buffer-protocol object), or
    an address the driver does not know as device memory. ``addr`` is 0 where
    it could not be read."""

    side: str = ""
    addr: int = 0


class MemoryNotHeld(Error, TypeError):
    """Host memory that a ``blocking=False`` transfer cannot keep for its
    copies (``side``): a torch CPU tensor, or a numpy array or memoryview
    over one (``t.numpy()``) or over a DLPack export (``numpy.from_dlpack``).
    torch frees a tensor's memory under any reference to the tensor when
    it is resized or given other storage (``resize_()``, ``set_()``,
    ``share_memory_()``, ``t.data = ...``, an ``out=`` of another shape), so
    the transfer would write or read freed memory. A blocking copy of the
    same memory is fine."""

    side: str = ""


class WrongDevice(Error, ValueError):
    """Memory or a stream of one device given to a stager or call of another (``expected``, ``found``: device ordinals)."""

    expected: int = 0
    found: int = 0


class StreamCapturing(Error, RuntimeError):
    """The stream is capturing a graph: a staged transfer cannot become part of it."""


class InvalidOption(Error, ValueError):
    """A ``Stager`` option the Rust layer cannot work with: outside ``min..=max``,
    or not an integer (``operator.index`` refuses it, or it is a ``bool``).
    Raised before any driver call, so without a GPU too.

    ``option``: the keyword (``"chunk"``, ``"buffers"``, ``"workers"``,
    ``"driver_path_below"``); ``value``:
    what was given (the object itself where it is not an integer); ``min``,
    ``max``: the range accepted, both included (``chunk``: 4 KiB to 1 GiB,
    ``buffers``: 1 to 64, ``workers``: 0 to 1024).
    """

    option: str = ""
    value: Any = None
    min: int = 0
    max: int = 0


class NoCurrentContext(Error, RuntimeError):
    """No CUDA context is current on the calling thread, so the null stream (0)
    names none: pass a stream, or make a device current first (cuda.core's
    ``Device.set_current()``, torch's first CUDA call)."""


class NotPrimaryContext(Error, ValueError):
    """A stream of a context of ``device`` (an ordinal) that is not the device's
    primary context: hostcopy works in primary contexts, the ones cuda.core,
    torch, cupy and the CUDA runtime use."""

    device: int = 0


class ForeignNode(Error, ValueError):
    """A graph node given to a graph (or an executable of a graph) it does not belong to."""


class ScopeOpen(Error, RuntimeError):
    """A launch scope of the Rust layer is open on the stream: until it returns,
    the stream can neither begin a capture nor join one."""


class RecordPoolError(Error, RuntimeError):
    """A record pool of the Rust layer refused: every one of its ``capacity``
    slots is held; or (a bug to report) ``user_data`` is not a slot of the
    pool, or slot ``index`` was released twice. The attributes the case
    does not give are ``None``."""

    capacity: Optional[int] = None
    user_data: Optional[int] = None
    index: Optional[int] = None


class WorkerStartError(Error, OSError):
    """``set_parallel_workers`` could not start every worker thread it
    asked for (``started``: the workers running, which the pool keeps;
    ``errno``: what the system said, or ``None``)."""

    started: int = 0


class OffloadError(Error, RuntimeError):
    """``hostcopy.offload`` cannot run a forward as asked: a group entered
    while its own forward runs, every ring slot read by a running forward,
    an offloader used after ``remove()``, a parameter that requires grad
    while autograd is on (a backward pass would read a ring slot that later
    groups overwrote), or a ``HostLayer`` updated directly instead of
    through its ``HostOffloadedCache``."""


class OffloadArgumentError(Error, ValueError):
    """An argument of a ``hostcopy.offload`` entry point refused before
    anything is offloaded or hooked (``argument``: its name, such as
    ``"prefetch"`` or ``"groups"``; ``value``: what was given): a prefetch
    depth or ring size out of range, no groups, a group that names no
    module, a tensor in two groups, a device that is not a GPU."""

    argument: str = ""
    value: Any = None


class OffloadArgumentTypeError(OffloadArgumentError, TypeError):
    """An argument of a ``hostcopy.offload`` entry point of a type it
    refuses (``argument``, ``value``): a prefetch depth that is not an
    integer (a ``bool``, a ``float``), one string where a list of group
    names is asked for, a group that is not a module. Also a
    ``ValueError``, as every refused argument of the offloader is."""


class SafetensorsError(Error, ValueError):
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

    filename: str = ""
    reason: str = ""
    tensor: Optional[str] = None


#: The largest a native word holds: the ``max`` of an ``IntegerOutOfRange``
#: made by ``refused``.
_WORD_MAX = (1 << (8 * ctypes.sizeof(ctypes.c_void_p))) - 1


def refused(failure: BaseException, argument: Optional[str] = None, value: Any = None) -> BaseException:
    """A refusal as hostcopy raises it: the one place where an argument's
    error that Python, numpy or the argument's own code raised while
    hostcopy read it becomes hostcopy's (the native module calls this too).

    A ``hostcopy.Error`` is returned as it is; a ``TypeError`` becomes
    ``ArgumentTypeError``, an ``OverflowError`` ``IntegerOutOfRange``, a
    ``ValueError`` ``ArgumentError``, a ``RuntimeError``
    ``ArgumentRuntimeError``, a ``BufferError`` ``ArgumentBufferError``,
    each naming ``argument`` (``None`` where it is not known) and ``value``,
    with ``failure`` as its ``__cause__``; anything else (a
    ``KeyboardInterrupt``, a ``MemoryError``, a ``RecursionError``: the
    interpreter's, not the argument's) is returned as it is."""
    if isinstance(failure, Error):
        return failure
    made: Error
    named = f"{argument}: " if argument else ""
    if isinstance(failure, OverflowError):
        made = IntegerOutOfRange(f"{named}{failure}", name=argument or "", value=value, max=_WORD_MAX)
    elif isinstance(failure, TypeError):
        made = ArgumentTypeError(f"{named}{failure}", argument=argument, value=value)
    elif isinstance(failure, ValueError):
        made = ArgumentError(f"{named}{failure}", argument=argument, value=value)
    elif isinstance(failure, BufferError):
        made = ArgumentBufferError(f"{named}{failure}", argument=argument, value=value)
    elif isinstance(failure, RuntimeError) and not isinstance(failure, RecursionError):
        made = ArgumentRuntimeError(f"{named}{failure}", argument=argument, value=value)
    else:
        return failure
    made.__cause__ = failure
    return made
