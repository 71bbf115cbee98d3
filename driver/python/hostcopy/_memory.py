"""``hostcopy.empty``: host memory made to be copied into at once, and
registered with the driver where asked (``register=``), with
``hostcopy.registration`` and ``hostcopy.wait_registered`` to read how far
that has got."""

from __future__ import annotations

import math
import operator
import sys
from typing import TYPE_CHECKING, Any, Iterable, Literal, NamedTuple, Optional, SupportsIndex, Union

from . import _native
from ._staging import _device_ordinal

if TYPE_CHECKING:
    import numpy

#: When ``hostcopy.empty`` registers its memory with the driver: ``"never"``
#: (no driver call), ``"background"`` (on a thread of its own, range by
#: range, the call returning at once) or ``"now"`` (in the call).
Register = Literal["never", "background", "now"]


class Registration(NamedTuple):
    """How far the registration of ``hostcopy.empty`` memory has got
    (``hostcopy.registration``, ``hostcopy.wait_registered``).

    Registration goes from the first byte on (in the background one 64 MiB
    range at a time, ``"now"`` in one piece), so ``registered`` bytes from
    the start are page-locked and copied directly; the rest is staged. ``refused``: why the driver refused the
    range after those (its error, such as ``"CUDA driver error 2
    (CUDA_ERROR_OUT_OF_MEMORY)"``), which ended the registration there;
    ``None`` where it did not. ``finished``: registering has ended (every
    range registered, one refused, or never asked for).
    """

    registered: int
    nbytes: int
    refused: Optional[str]
    finished: bool

    @property
    def complete(self) -> bool:
        """Whether every byte is registered."""
        return self.registered == self.nbytes


def empty(
    shape: Union[SupportsIndex, Iterable[SupportsIndex]],
    dtype: Any = None,
    *,
    register: Register = "never",
    device: Any = None,
) -> "numpy.ndarray[Any, Any]":
    """A C-contiguous, writable numpy array of ``shape`` and ``dtype``
    (default ``uint8``) over pageable host memory whose pages are present
    when it is returned: what a KV pool, a checkpoint buffer or the
    destination of large copies should be made with.

    A ``numpy.empty`` array has no pages until they are written, and a copy
    into it runs at the pace of its page faults (on the H200 host, 11 to 12
    GB/s into a never-touched destination, against the link's 55). Here the
    memory is mapped privately (``mmap``, anonymous), advised onto
    transparent huge pages where the kernel has them in ``madvise`` mode,
    and made present by several threads (``MADV_POPULATE_WRITE``) with the
    GIL released; its bytes are zero and its address is page-aligned. Unless
    ``register`` asks for it to be registered (below), it is not pinned (no
    driver call, nothing locked: the kernel may still swap it out); it is
    freed when the last array over it goes. ``HostMemoryError`` (a ``MemoryError``) if the mapping is refused;
    ``TypeError`` for a dtype of no bytes or one holding Python objects
    (``object``, or a structured dtype with an ``object`` field).

    ``register``: ``"background"`` or ``"now"`` registers the memory with
    the driver (``cuMemHostRegister``, portable to every context):
    ``"now"`` in one piece, ``"background"`` 64 MiB at a time from its
    first byte on; ``"never"`` (the default) makes no driver call. Staged copies (``copy_to_host``, ``copy_to_device``, a
    ``Stager``'s) copy its registered bytes directly, at the link's speed
    and with no CPU copy, and stage the rest; torch sees it as pinned
    (``torch.from_numpy(a).is_pinned()``). The driver refuses a copy that
    spans two registrations (``invalid argument``): hostcopy's copies never
    do, but torch's own copies of memory registered in the background may,
    so memory torch copies itself is registered ``"now"``. ``"now"`` returns once every
    range is registered (about 0.1 to 0.2 s a GiB, the GIL released);
    ``"background"`` returns at once and registers on a thread of its own
    while copies of the memory stage what is not registered yet. Registered
    memory is locked: the kernel cannot swap it out or reclaim it until the
    last array over it goes, which unregisters it. A range the driver
    refuses (a locked-memory limit, ``ulimit -l``) ends the registration
    there, never an error: ``hostcopy.registration(a)`` tells how far it
    got and why, ``hostcopy.wait_registered(a)`` waits for it to end.
    ``device``: the GPU (an ordinal, or a cuda.core, torch or cupy device)
    whose primary context registers it, by default 0. Anything but the
    three words raises ``InvalidOption`` (a ``ValueError``, ``option``
    ``"register"``) before any memory is mapped; registering without a
    driver raises ``CudaUnavailable``, on a device that does not exist
    ``CudaError``, before any memory is mapped too.
    """
    np: Any = sys.modules.get("numpy")
    if np is None:
        try:
            import numpy as np
        except ImportError as missing:
            raise ImportError("hostcopy.empty returns a numpy array: install numpy") from missing
    kind = np.dtype(np.uint8 if dtype is None else dtype)
    given: Any = shape
    try:
        dims: tuple[int, ...] = (operator.index(given),)
    except TypeError:
        if not hasattr(given, "__iter__"):
            raise
        dims = tuple(operator.index(dim) for dim in given)
    if any(dim < 0 for dim in dims):
        raise ValueError(f"negative dimensions are not allowed: {dims}")
    if kind.itemsize == 0:
        raise TypeError(f"dtype {kind} has no bytes")
    if kind.hasobject:
        # Zeroed bytes are null references, and no one would free the
        # objects stored there: the memory is freed as bytes.
        raise TypeError(f"dtype {kind} holds Python object references: hostcopy.empty makes plain bytes")
    ordinal = _device_ordinal(device)
    raw = np.asarray(_native.PageableMemory(math.prod(dims) * kind.itemsize, register, ordinal))
    # numpy lays the array out as numpy.empty would (a subarray dtype adds
    # its dimensions); its base is `raw`, whose base is the memory.
    made: numpy.ndarray[Any, Any] = np.ndarray(dims, kind, buffer=raw)
    return made


def _memory_of(array: Any, call: str) -> _native.PageableMemory:
    """The ``hostcopy.empty`` memory under ``array``: it, or the end of its
    chain of ``.base`` (a numpy array's, a view's)."""
    owner = array
    # A chain of bases ends: numpy points a view at the array that owns
    # the memory, which points at the memory. The bound is for objects
    # whose `base` never ends.
    for _ in range(64):
        if isinstance(owner, _native.PageableMemory):
            return owner
        owner = getattr(owner, "base", None)
        if owner is None:
            break
    raise TypeError(
        f"{call}: expected an array made by hostcopy.empty (or a view of one), got a "
        f"{type(array).__module__}.{type(array).__qualname__} whose memory is not hostcopy.empty's"
    )


def registration(array: Any) -> Registration:
    """How far the registration of ``array``'s memory has got, without
    waiting: ``array`` is a numpy array made by ``hostcopy.empty`` or a
    view of one (whose ``.base`` chain ends at its memory). Memory made
    with ``register="never"`` tells ``Registration(0, nbytes, None,
    True)``. ``TypeError`` for other memory; ``CudaUnavailable`` in a child
    forked after CUDA was used, for memory the parent registered.

    ::

        pool = hostcopy.empty(64 << 30, register="background")
        progress = hostcopy.registration(pool)
        print(f"{progress.registered / progress.nbytes:.0%} registered")
    """
    return Registration(*_memory_of(array, "hostcopy.registration").registration())


def wait_registered(array: Any) -> Registration:
    """Waits, with the GIL released, until the registration of ``array``'s
    memory has ended (every range registered, or one refused), and tells
    how far it got, as ``registration`` does."""
    return Registration(*_memory_of(array, "hostcopy.wait_registered").wait_registered())
