"""The offload package's host regions registered with the driver as
``register=`` asks (``offload``, ``use_hostcopy``, ``HostOffloadedCache``):
``hostcopy.empty`` memory whose registered bytes every hostcopy copy moves
directly, the rest staged.

A region that cannot be registered stays staged, never an error: the
driver refusing a range ends its registration there (``hostcopy.empty``
tells it in ``hostcopy.registration``), and where there is no driver or
no context to register in, the region is made unregistered.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import _memory
from .._errors import CudaError, CudaUnavailable, OffloadArgumentError, OffloadArgumentTypeError

if TYPE_CHECKING:
    import numpy

#: What ``register=`` takes, as ``hostcopy.empty`` spells it.
WORDS: tuple[_memory.Register, ...] = ("never", "background", "now")

#: The entry points' ``register=``: registered on a thread of its own
#: while the first uploads stage what is not registered yet.
DEFAULT: _memory.Register = "background"


def check_register(value: Any) -> _memory.Register:
    """``value`` as one of ``WORDS``: ``OffloadArgumentTypeError`` for
    anything but a string, ``OffloadArgumentError`` for another string,
    as every refused offload argument is (both ``ValueError``), before
    any memory is made."""
    if not isinstance(value, str):
        raise OffloadArgumentTypeError(
            f'register must be one of "never", "background", "now", not {value!r} ({type(value).__name__})',
            argument="register",
            value=value,
        )
    for word in WORDS:
        if value == word:
            return word
    raise OffloadArgumentError(
        f'register must be one of "never", "background", "now", not {value!r}', argument="register", value=value
    )


def region(nbytes: int, register: _memory.Register, ordinal: int) -> "numpy.ndarray[Any, Any]":
    """``nbytes`` bytes of ``hostcopy.empty`` memory (``uint8``),
    registered with device ``ordinal``'s primary context as ``register``
    says. Without a driver, or where the device's context cannot be had,
    the region is made unregistered: its copies stage, as those of a
    range the driver refused do."""
    if register != "never":
        try:
            return _memory.empty(nbytes, register=register, device=ordinal)
        except (CudaUnavailable, CudaError):
            pass  # raised before any memory was mapped
    return _memory.empty(nbytes)
