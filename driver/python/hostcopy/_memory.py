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
from ._errors import ArgumentError, ArgumentTypeError, IntegerOutOfRange, refused

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
    ``ArgumentTypeError`` (a ``TypeError``) for a dtype of no bytes or one
    holding Python objects (``object``, or a structured dtype with an
    ``object`` field), or a shape that is no integer or sequence of them;
    ``IntegerOutOfRange`` (a ``ValueError`` and an ``OverflowError``) for a
    negative dimension or more bytes than a signed word counts; numpy's own
    refusal of a dtype as hostcopy's. The shape is checked before numpy
    sees it or any memory is mapped.

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
    kind, dims = _checked(np, shape, dtype)
    ordinal = _native.device_ordinal(device)
    raw = np.asarray(_native.PageableMemory(math.prod(dims) * kind.itemsize, register, ordinal))
    # numpy lays the array out as numpy.empty would (a subarray dtype adds
    # its dimensions); its base is `raw`, whose base is the memory.
    made: numpy.ndarray[Any, Any] = np.ndarray(dims, kind, buffer=raw)
    return made


def _checked(np: Any, shape: Any, dtype: Any) -> tuple[Any, tuple[int, ...]]:
    """``hostcopy.empty``'s dtype and shape, checked before numpy sees the
    shape (or any memory is mapped), so that each refusal is hostcopy's:
    a dtype numpy refuses (its error as hostcopy's, ``refused``), one of
    no bytes or holding objects (``ArgumentTypeError``); a shape that is no
    integer or sequence of them (``ArgumentTypeError``; not ``bool``), a
    dimension that is negative or past numpy's (``IntegerOutOfRange``),
    more dimensions than numpy takes (``ArgumentError``), more bytes than a
    signed word counts (``IntegerOutOfRange``, ``name`` ``"nbytes"``)."""
    try:
        kind = np.dtype(np.uint8 if dtype is None else dtype)
    except (TypeError, ValueError, OverflowError) as failure:
        raise refused(failure, "dtype", dtype)
    if kind.itemsize == 0:
        raise ArgumentTypeError(f"dtype {kind} has no bytes", argument="dtype", value=dtype)
    if kind.hasobject:
        # Zeroed bytes are null references, and no one would free the
        # objects stored there: the memory is freed as bytes.
        raise ArgumentTypeError(
            f"dtype {kind} holds Python object references: hostcopy.empty makes plain bytes",
            argument="dtype",
            value=dtype,
        )
    given: Any = shape
    not_a_shape = ArgumentTypeError(
        f"shape must be an integer or a sequence of integers, not {type(shape).__name__}", argument="shape", value=shape
    )
    if isinstance(given, (bool, str, bytes)):
        raise not_a_shape
    try:
        given = (operator.index(given),)
    except TypeError as failure:
        if not hasattr(given, "__iter__"):
            raise not_a_shape from failure
        try:
            given = tuple(given)
        except (TypeError, ValueError, OverflowError) as failure:
            raise refused(failure, "shape", shape)
    except (ValueError, OverflowError) as failure:
        raise refused(failure, "shape", shape)
    largest = int(np.iinfo(np.intp).max)
    dims: list[int] = []
    for index, dim in enumerate(given):
        name = f"shape[{index}]"
        if isinstance(dim, bool) or not hasattr(dim, "__index__"):
            raise ArgumentTypeError(f"{name} must be an integer, not {type(dim).__name__}", argument=name, value=dim)
        try:
            dim = operator.index(dim)
        except (TypeError, ValueError, OverflowError) as failure:
            raise refused(failure, name, dim)
        if not 0 <= dim <= largest:
            why = "negative dimensions are not allowed" if dim < 0 else "past numpy's largest dimension"
            raise IntegerOutOfRange(f"{name} = {dim}: {why} (0..={largest})", name=name, value=dim, max=largest)
        dims.append(dim)
    # numpy's limit on dimensions (NPY_MAXDIMS), a subarray dtype's own
    # counted: 64 from numpy 2 on, 32 before.
    most = 64 if int(np.__version__.split(".")[0]) >= 2 else 32
    if len(dims) + kind.ndim > most:
        raise ArgumentError(
            f"shape of {len(dims)} dimensions (dtype {kind} adds {kind.ndim}): numpy takes at most {most}",
            argument="shape",
            value=shape,
        )
    nbytes = math.prod(dims) * kind.itemsize
    if nbytes > largest:
        raise IntegerOutOfRange(
            f"shape {tuple(dims)} of dtype {kind} is {nbytes} bytes, more than {largest}",
            name="nbytes",
            value=nbytes,
            max=largest,
        )
    return kind, tuple(dims)


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
    raise ArgumentTypeError(
        f"{call}: expected an array made by hostcopy.empty (or a view of one), got a "
        f"{type(array).__module__}.{type(array).__qualname__} whose memory is not hostcopy.empty's",
        argument="array",
        value=array,
    )


def registration(array: Any) -> Registration:
    """How far the registration of ``array``'s memory has got, without
    waiting: ``array`` is a numpy array made by ``hostcopy.empty`` or a
    view of one (whose ``.base`` chain ends at its memory). Memory made
    with ``register="never"`` tells ``Registration(0, nbytes, None,
    True)``. ``ArgumentTypeError`` (a ``TypeError``) for other memory; ``CudaUnavailable`` in a child
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
