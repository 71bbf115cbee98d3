# The compiled half, `hostcopy._native` (src/*.rs), as type checkers see it.
# driver/python/ci.sh compares this file with the built module (mypy's
# stubtest): a function added, removed or re-signed there fails CI until this
# file says the same.
#
# The protocols and `StagerOptions` (marked `type_check_only`) and the aliases `HostBuffer` and
# `HostRegion` exist for type checkers only, nothing defines them at run
# time: they name what packing accepts, so that the Python half can annotate
# `dst` and `src` with them (imported under `typing.TYPE_CHECKING`). The
# `sim_*` functions and `Sim*` classes exist only in a build with
# `--features simulator` (ci.sh's, which stubtest checks).

from types import TracebackType
from typing import Any, Generator, Literal, Optional, Protocol, Sequence, SupportsIndex, SupportsInt, TypedDict, Union, final, overload, type_check_only

from typing_extensions import Buffer, Self, TypeAlias, disjoint_base  # type checkers bundle these stubs: no run-time dependency

from ._errors import NotDeviceMemory
from ._memory import Register

__all__ = [
    "HOST_COPY_ARGS_SIZE",
    "ABI_VERSION",
    "__version__",
    "host_copy_fn_address",
    "rejected",
    "load_driver",
    "buffer_region",
    "host_memory",
    "dlpack_region",
    "stream_capturing",
    "device_ordinal",
    "default_stager",
    "default_stager_of",
    "copy_to_host",
    "copy_to_device",
    "copy_blocks_to_host",
    "copy_blocks_to_device",
    "not_device_memory",
    "dlpack_host_memory",
    "pack_regions",
    "host_copy_parallel_fn_address",
    "set_parallel_workers",
    "parallel_workers",
    "launch_owned",
    "add_host_node",
    "owned_record_counts",
    "HostMemory",
    "PageableMemory",
    "Stager",
    "Transfer",
    "Wakeup",
    "sim_install",
    "sim_new_device",
    "sim_make_current",
    "sim_current_device",
    "sim_device_state",
    "sim_hold",
    "sim_release",
    "sim_release_later",
    "sim_drain",
    "sim_fail_call",
    "sim_fail_context",
    "sim_take_violations",
    "sim_registered_memory",
    "sim_error_samples",
    "SimDeviceArray",
    "SimStream",
    "SimGraph",
]

@type_check_only
class SupportsArrayInterface(Protocol):
    """A numpy array or scalar: numpy's stubs declare ``__buffer__`` only from
    Python 3.12 on, so before that a numpy array is no ``Buffer`` to a type
    checker. Another type with ``__array_interface__`` but no buffer protocol
    (a PIL image) passes the type check and is refused at run time with
    ``hostcopy.ArgumentTypeError``."""

    @property
    def __array_interface__(self) -> object: ...

# A buffer-protocol object: numpy arrays, `bytearray`, `memoryview`, `mmap`,
# `array.array`, ctypes arrays, `bytes`. Run-time checks refuse a strided one
# (NotContiguous) and, as a destination, a read-only one (ReadOnlyBuffer).
HostBuffer: TypeAlias = Union[Buffer, SupportsArrayInterface]

@type_check_only
class MemoryResourceLike(Protocol):
    @property
    def is_host_accessible(self) -> bool: ...

@type_check_only
class CudaCoreBuffer(Protocol):
    """A cuda.core ``Buffer``: the attributes packing reads, without a driver
    call. Packing looks them up on the type, as properties, so that telling
    a Buffer from a buffer-protocol object runs no code of the object."""

    @property
    def handle(self) -> SupportsInt: ...
    @property
    def size(self) -> SupportsInt: ...
    @property
    def memory_resource(self) -> Optional[MemoryResourceLike]: ...
    @property
    def is_host_accessible(self) -> bool: ...

# What `pack_host_copy_args` takes as `dst` and `src`: a buffer, a
# host-accessible cuda.core Buffer, or an address the caller answers for.
HostRegion: TypeAlias = Union[HostBuffer, CudaCoreBuffer, int]
# A batch of `(device_offset, host_offset, nbytes)` blocks: rows, or an `(n, 3)` integer array.
_Blocks: TypeAlias = Union[Sequence[Sequence[SupportsIndex]], Any]

HOST_COPY_ARGS_SIZE: int
ABI_VERSION: int
__version__: str

def host_copy_fn_address() -> int: ...
def host_copy_parallel_fn_address() -> int: ...
def rejected() -> int: ...
def load_driver() -> None: ...
def buffer_region(obj: HostBuffer, writable: bool, side: str) -> tuple[int, int]: ...
def host_memory(obj: HostBuffer, writable: bool, side: str) -> HostMemory: ...
def dlpack_region(capsule: object, side: str = "device") -> tuple[int, int, int, int, bool]:
    """``(address, nbytes, device_type, device_id, c_contiguous)`` of a
    DLPack capsule's tensor; ``hostcopy.AddressOverflow`` or
    ``hostcopy.NullWithLength``, naming ``side``, for one that cannot be
    memory."""
def dlpack_host_memory(capsule: object, writable: bool, side: str) -> HostMemory: ...
def stream_capturing(handle: int) -> bool: ...
def device_ordinal(device: Any = None) -> int:
    """The ordinal ``Stager(device)`` takes ``device`` for (``hostcopy.empty``'s ``device``)."""
def not_device_memory(obj: object, side: str, device_type: Optional[int] = None) -> NotDeviceMemory:
    """``hostcopy.NotDeviceMemory`` for host memory ``obj`` given as the
    device side ``side`` (``device_type``: its DLPack device type), not raised."""
def pack_regions(
    dst: tuple[int, Optional[int], bool],
    dst_offset: int,
    src: tuple[int, Optional[int], bool],
    src_offset: int,
    nbytes: int,
) -> bytes: ...
def set_parallel_workers(workers: SupportsIndex) -> tuple[int, int]:
    """``(started, active)`` workers of the copy worker pool, started with
    ``workers`` threads by the first call. ``hostcopy.WorkerStartError``
    (an ``OSError``) if a thread could not start; the pool keeps those
    that did."""
def parallel_workers() -> tuple[int, int]: ...
def launch_owned(stream: Any, record: HostBuffer, parallel: bool) -> bool: ...
def add_host_node(graph: int, record: HostBuffer, dependencies: Sequence[int], parallel: bool) -> int: ...
def owned_record_counts() -> tuple[int, int]: ...
@final
class HostMemory:
    """Host memory held for a transfer (a buffer export, or a DLPack capsule's owner)."""

    def __len__(self) -> int: ...

# `(registered, nbytes, refused, finished)`: `hostcopy.Registration`'s fields.
_Registration: TypeAlias = tuple[int, int, Optional[str], bool]

@final
class PageableMemory:
    """``hostcopy.empty``'s memory: zeroed, its pages present, viewed by
    numpy through ``__array_interface__``, registered with device
    ``device``'s primary context as ``register`` says (anything but a
    ``hostcopy.Register`` word raises ``hostcopy.InvalidOption`` before
    the memory is mapped)."""

    def __new__(cls, nbytes: int, register: Register = "never", device: int = 0) -> Self: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def __array_interface__(self) -> dict[str, Any]: ...
    def registration(self) -> _Registration:
        """How far its registration has got, without waiting."""
    def wait_registered(self) -> _Registration:
        """Waits (the GIL released) until its registration has ended."""

@type_check_only
class StagerOptions(TypedDict):
    """``Stager.options``: ``hostcopy.StagerOptions`` (hostcopy/_staging.py) says what each is."""

    chunk: int
    buffers: int
    workers: int
    h2d_streaming: Optional[bool]
    driver_path_below: int
    prefault: bool

# Subclassable, and so a disjoint base (PEP 800): its instances are laid
# out by the extension, so a class cannot derive from it and another such
# class at once.
@disjoint_base
class Stager:
    """Pinned staging buffers, one stream each, and copy workers of its own,
    on one device (``hostcopy.Stager``: its docstring says the rest). The
    overloads type the result by ``blocking``: ``None`` when it is
    ``True``, a ``Transfer`` when ``False``."""

    def __new__(
        cls,
        device: Any = None,
        *,
        chunk: Optional[SupportsIndex] = None,
        buffers: Optional[SupportsIndex] = None,
        workers: Optional[SupportsIndex] = None,
        h2d_streaming: Optional[bool] = None,
        driver_path_below: Optional[SupportsIndex] = None,
        prefault: Optional[bool] = None,
    ) -> Self: ...
    @property
    def device(self) -> int: ...
    @property
    def options(self) -> StagerOptions: ...
    def close(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(self, *_exc: object) -> None: ...
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
    @overload
    def copy_blocks_to_host(
        self,
        dst: Any,
        src: Any,
        blocks: _Blocks,
        *,
        stream: Any = None,
        blocking: Literal[True] = True,
    ) -> None: ...
    @overload
    def copy_blocks_to_host(
        self,
        dst: Any,
        src: Any,
        blocks: _Blocks,
        *,
        stream: Any = None,
        blocking: Literal[False],
    ) -> Transfer: ...
    @overload
    def copy_blocks_to_host(
        self,
        dst: Any,
        src: Any,
        blocks: _Blocks,
        *,
        stream: Any = None,
        blocking: bool = True,
    ) -> Optional[Transfer]: ...
    @overload
    def copy_blocks_to_device(
        self,
        dst: Any,
        src: Any,
        blocks: _Blocks,
        *,
        stream: Any = None,
        blocking: Literal[True] = True,
    ) -> None: ...
    @overload
    def copy_blocks_to_device(
        self,
        dst: Any,
        src: Any,
        blocks: _Blocks,
        *,
        stream: Any = None,
        blocking: Literal[False],
    ) -> Transfer: ...
    @overload
    def copy_blocks_to_device(
        self,
        dst: Any,
        src: Any,
        blocks: _Blocks,
        *,
        stream: Any = None,
        blocking: bool = True,
    ) -> Optional[Transfer]: ...

def default_stager(device: Any = None) -> Stager: ...
def default_stager_of(memory: Any, side: str) -> Stager:
    """The default stager of the device holding the device memory ``memory``
    (given as the argument ``side``): what the module's copies use for it."""

# The module's copies, through the default stager of the device side's device.
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
@overload
def copy_blocks_to_host(
    dst: Any,
    src: Any,
    blocks: _Blocks,
    *,
    stream: Any = None,
    blocking: Literal[True] = True,
) -> None: ...
@overload
def copy_blocks_to_host(
    dst: Any,
    src: Any,
    blocks: _Blocks,
    *,
    stream: Any = None,
    blocking: Literal[False],
) -> Transfer: ...
@overload
def copy_blocks_to_host(
    dst: Any,
    src: Any,
    blocks: _Blocks,
    *,
    stream: Any = None,
    blocking: bool = True,
) -> Optional[Transfer]: ...
@overload
def copy_blocks_to_device(
    dst: Any,
    src: Any,
    blocks: _Blocks,
    *,
    stream: Any = None,
    blocking: Literal[True] = True,
) -> None: ...
@overload
def copy_blocks_to_device(
    dst: Any,
    src: Any,
    blocks: _Blocks,
    *,
    stream: Any = None,
    blocking: Literal[False],
) -> Transfer: ...
@overload
def copy_blocks_to_device(
    dst: Any,
    src: Any,
    blocks: _Blocks,
    *,
    stream: Any = None,
    blocking: bool = True,
) -> Optional[Transfer]: ...

@final
class Transfer:
    """A copy under way (``copy_to_host``/``copy_to_device`` with ``blocking=False``)."""

    def wait(self) -> None:
        """Waits until the bytes have arrived, without holding the stager
        meanwhile (it takes it only to settle the transfer, after another
        thread's blocking copy on it if one is under way); the transfer's
        error, if any, the same every time. After the stager's ``close()``,
        which waited for every copy, it reports how this one ended."""
    def done(self) -> bool:
        """Whether the bytes have arrived, without waiting for them or for the
        stager: ``False`` while another thread's ``wait()``, or the
        stager's finish thread, is ending it."""
    def __await__(self) -> Generator[Any, None, None]:
        """``await transfer`` on the running asyncio (or uvloop) event loop:
        ``None`` once the bytes have arrived, or the error ``wait()`` raises.
        The stager's finish thread waits, without the GIL, and wakes the
        loop through a pipe: no polling, no Python on another thread.
        Cancelling the await leaves the transfer to that thread, which
        finishes it; see ``hostcopy._awaiting``."""
    def _notify_when_finished(self, wakeup: Wakeup, token: int) -> bool: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        _exc_value: Optional[BaseException],
        _traceback: Optional[TracebackType],
    ) -> Literal[False]: ...

@final
class Wakeup:
    """One event loop's wakeup pipe for awaited transfers (``hostcopy._awaiting``)."""

    def __new__(cls) -> Self: ...
    def fileno(self) -> int: ...
    def take(self) -> list[int]: ...

# The simulated driver (builds with `--features simulator` only).
def sim_install() -> None: ...
def sim_new_device() -> int: ...
def sim_make_current(ordinal: int) -> None: ...
def sim_current_device() -> Optional[int]: ...
def sim_device_state(ordinal: int) -> dict[str, Any]: ...
def sim_hold(ordinal: int) -> None: ...
def sim_release(ordinal: int) -> None: ...
def sim_release_later(ordinal: int, ms: int) -> None: ...
def sim_drain(ordinal: int) -> None: ...
def sim_fail_call(entry: str, ordinal: int, nth: int, code: int) -> None: ...
def sim_fail_context(ordinal: int, code: int) -> None: ...
def sim_take_violations(ordinal: int) -> list[str]: ...
def sim_registered_memory(nbytes: int, register: Register, ordinal: int, range: int) -> PageableMemory:
    """``hostcopy.empty``'s memory registered in ranges of ``range`` bytes."""
def sim_error_samples() -> list[tuple[str, BaseException]]:
    """One error of every variant of the Rust crate's errors, as raised:
    ``(variant, exception)`` pairs."""
@final
class SimDeviceArray:
    def __new__(cls, ordinal: int, nbytes: int, stream: Optional[int] = None) -> Self: ...
    @property
    def __cuda_array_interface__(self) -> dict[str, Any]: ...
    @property
    def ptr(self) -> int: ...
    def write(self, data: bytes) -> None: ...
    def read(self) -> bytes: ...
    def free(self) -> None: ...

@final
class SimStream:
    def __new__(cls, ordinal: int) -> Self: ...
    @property
    def handle(self) -> int: ...
    def __cuda_stream__(self) -> tuple[int, int]: ...
    def begin_capture(self) -> None: ...
    def end_capture(self) -> SimGraph: ...
    def synchronize(self) -> None: ...

@final
class SimGraph:
    def __new__(cls, ordinal: int) -> Self: ...
    @property
    def handle(self) -> int: ...
    def launch(self, stream: SimStream) -> None: ...
    def destroy(self) -> None: ...
