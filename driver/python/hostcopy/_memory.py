"""``hostcopy.empty``: host memory made to be copied into at once."""

from __future__ import annotations

import math
import operator
import sys
from typing import TYPE_CHECKING, Any, Iterable, SupportsIndex, Union

from . import _native

if TYPE_CHECKING:
    import numpy


def empty(shape: Union[SupportsIndex, Iterable[SupportsIndex]], dtype: Any = None) -> "numpy.ndarray[Any, Any]":
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
    GIL released; its bytes are zero and its address is page-aligned. It is
    not pinned (no driver call, no registration, nothing locked: the kernel
    may still swap it out), and it is freed when the last array over it
    goes. ``HostMemoryError`` (a ``MemoryError``) if the mapping is refused;
    ``TypeError`` for a dtype of no bytes or one holding Python objects
    (``object``, or a structured dtype with an ``object`` field).
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
    raw = np.asarray(_native.PageableMemory(math.prod(dims) * kind.itemsize))
    # numpy lays the array out as numpy.empty would (a subarray dtype adds
    # its dimensions); its base is `raw`, whose base is the memory.
    made: numpy.ndarray[Any, Any] = np.ndarray(dims, kind, buffer=raw)
    return made
