"""Weights offload for modules: each group's tensors packed into one flat
region of pageable host memory, brought into the ring before the group's
forward and bound as views of the ring slot while it runs.

What touches the array library goes through a ``Kit`` (``_torch.TorchKit``
for torch; a stand-in in the tests), so that the logic here runs in CI
without torch.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable, Optional, Protocol, Sequence

from .. import _memory, _staging
from .._errors import OffloadArgumentError, OffloadArgumentTypeError
from ._registration import DEFAULT, check_register, region
from ._ring import Device, Ring, Slot, check_count

#: Where each tensor starts in its group's region: a multiple of this, so
#: that a view of any dtype is aligned (and every copy starts on a line).
ALIGN = 256


class Entry:
    """One tensor of a group: where it lives in the module and in the region."""

    def __init__(self, owner: Any, name: str, kind: str, tensor: Any, nbytes: int) -> None:
        self.owner = owner
        self.name = name
        #: ``"parameter"`` or ``"buffer"``.
        self.kind = kind
        #: The tensor as it was before offloading (until the region is filled).
        self.tensor: Any = tensor
        self.nbytes = nbytes
        self.offset = 0
        #: What the module holds between forwards.
        self.resting: Any = None
        #: The version counter seen when the group's forward began.
        self.version = 0
        #: Views of each slot, made once per slot.
        self.views: dict[int, Any] = {}
        #: The tensor's dtype, shape and the device it was on (the kit's own kinds).
        self.dtype: Any = None
        self.shape: tuple[int, ...] = ()
        self.origin: Any = None


class Kit(Protocol):
    """What the offloader needs from an array library."""

    @property
    def device(self) -> Device:
        """The device the groups are brought to."""

    def entries(self, module: Any, buffers: bool) -> list[Entry]:
        """The tensors of ``module`` and its submodules, each once."""

    def fill(self, host: Any, entry: Entry) -> None:
        """Copies ``entry.tensor``'s bytes into ``host`` at ``entry.offset``."""

    def host_view(self, host: Any, entry: Entry) -> Any:
        """A tensor of ``entry``'s dtype and shape over ``host`` at its offset."""

    def device_view(self, buffer: Any, entry: Entry) -> Any:
        """The same over a device buffer."""

    def place(self, entry: Entry, value: Any) -> None:
        """Makes ``value`` the module's tensor ``entry.name`` (a parameter
        keeps its object: its ``.data`` changes)."""

    def restored(self, entry: Entry) -> Any:
        """What the module gets back at removal: the tensor's values on the
        device it was on before."""

    def version(self, entry: Entry) -> int:
        """``entry``'s tensor's version counter as the module holds it now."""

    def refuse_autograd(self, entries: Sequence[Entry], what: str) -> None:
        """Raises if a backward pass could read ``entries`` after the forward."""

    def hook(
        self, module: Any, before: Callable[[Any, Any], None], after: Callable[[Any, Any, Any], None]
    ) -> list[Any]:
        """Registers ``before`` as a forward pre-hook and ``after`` as a
        forward hook that runs even when the forward raises; the handles
        (each with ``remove()``)."""


def _raised() -> bool:
    """Whether a forward hook runs because the forward raised (torch calls
    hooks registered with ``always_call`` from its ``except`` clause)."""
    return sys.exc_info()[0] is not None


class Offloader:
    """Keeps the tensors of ``groups`` (modules; each group's tensors one
    flat region of host memory from ``hostcopy.empty``, registered with
    the driver as ``register`` says) and brings each group to the device
    before its forward, into a ring of device buffers, ``prefetch`` groups
    ahead. ``remove()`` restores the modules (their tensors back where
    they were, the hooks gone); a ``with`` block removes at its end.

    ``register``: how each region is registered with the driver, in the
    primary context of the kit's device (``kit.device.ordinal``), as
    ``hostcopy.offload.offload`` says."""

    def __init__(
        self,
        kit: Kit,
        groups: Sequence[Any],
        *,
        prefetch: int = 2,
        slots: Optional[int] = None,
        buffers: bool = True,
        write_back: bool = False,
        wrap: bool = True,
        stager: Optional[_staging.Stager] = None,
        entries: Optional[Sequence[Sequence[Entry]]] = None,
        on_upload: Optional[Callable[[int, Slot], None]] = None,
        root: Any = None,
        register: _memory.Register = DEFAULT,
    ) -> None:
        started = time.perf_counter()
        self.kit = kit
        self.modules = list(groups)
        if not self.modules:
            raise OffloadArgumentError("no groups to offload", argument="groups", value=groups)
        # Refused before any memory is made or any hook placed.
        prefetch = check_count("prefetch", prefetch, 0)
        if slots is not None:
            check_count("slots", slots, prefetch + 1)
        #: How the regions are registered with the driver (``register=``).
        self.register = check_register(register)
        self.write_back = write_back
        if entries is None:
            entries = [kit.entries(module, buffers) for module in self.modules]
        self.entries = [list(group) for group in entries]
        self._refuse_shared()
        #: Each group's region (``uint8``, ``hostcopy.empty`` memory):
        #: ``hostcopy.registration(off.hosts[i])`` tells how far its
        #: registration has got.
        self.hosts = [self._pack(group) for group in self.entries]
        #: Bytes of host memory held (the regions, alignment included).
        self.host_bytes = sum(len(host) for host in self.hosts)
        #: Bytes of the tensors themselves.
        self.tensor_bytes = sum(entry.nbytes for group in self.entries for entry in group)
        self.ring = Ring(
            kit.device, self.hosts, prefetch=prefetch, slots=slots, wrap=wrap, stager=stager, on_upload=on_upload
        )
        self._handles: list[Any] = []
        self._index = {id(module): i for i, module in enumerate(self.modules)}
        self._running: list[int] = []
        self._removed = False
        self.install()
        if root is not None:
            self._handles += kit.hook(root, lambda _m, _a: None, self._after_root)
        #: Seconds taken to make the regions and copy the tensors in.
        self.ready_seconds = time.perf_counter() - started

    # -- making the regions ------------------------------------------------

    def _refuse_shared(self) -> None:
        seen: dict[int, int] = {}
        for index, group in enumerate(self.entries):
            for entry in group:
                other = seen.setdefault(id(entry.tensor), index)
                if other != index:
                    raise OffloadArgumentError(
                        f"tensor {entry.name!r} of group {index} is also in group {other} (tied weights): "
                        "a tensor can be offloaded with one group only; leave it out of one of them",
                        argument="groups",
                        value=entry.name,
                    )

    def _pack(self, group: list[Entry]) -> Any:
        offset = 0
        for entry in group:
            entry.offset = offset
            offset += -(-entry.nbytes // ALIGN) * ALIGN
        host = region(max(offset, 1), self.register, self.kit.device.ordinal)
        for entry in group:
            self.kit.fill(host, entry)
            entry.resting = self.kit.host_view(host, entry) if entry.resting is None else entry.resting
            entry.tensor = None  # the region holds the bytes now: the old memory can go
        return host

    def install(self) -> None:
        """Puts each group's tensors at rest and registers the hooks."""
        for index, module in enumerate(self.modules):
            for entry in self.entries[index]:
                self.kit.place(entry, entry.resting)
            self._handles += self.kit.hook(module, self._before, self._after)

    # -- around each forward -----------------------------------------------

    def _before(self, module: Any, _args: Any) -> None:
        index = self._index[id(module)]
        group = self.entries[index]
        self.kit.refuse_autograd(group, f"group {index}")
        slot = self.ring.enter(index)
        self._running.append(index)
        try:
            for entry in group:
                view = entry.views.get(slot.index)
                if view is None:
                    view = entry.views[slot.index] = self.kit.device_view(slot.buffer, entry)
                self.kit.place(entry, view)
                entry.version = self.kit.version(entry)
        except BaseException:
            self._finish(index, failed=True)
            raise

    def _after(self, module: Any, _args: Any, _output: Any) -> None:
        index = self._index[id(module)]
        if index not in self._running:
            return  # the pre-hook raised before entering
        failed = _raised()
        try:
            if self.write_back and not failed:
                changed = [e for e in self.entries[index] if self.kit.version(e) != e.version]
                self.ring.write_back(index, [(e.offset, e.nbytes) for e in changed])
        finally:
            self._finish(index, failed)

    def _after_root(self, _module: Any, _args: Any, _output: Any) -> None:
        """An exception anywhere in the model's forward (between groups too)
        leaves no upload running."""
        if _raised():
            self.ring.drain()

    def _finish(self, index: int, failed: bool) -> None:
        self._running.remove(index)
        for entry in self.entries[index]:
            self.kit.place(entry, entry.resting)
        self.ring.leave(index, failed=failed)

    # -- state and removal -------------------------------------------------

    def in_flight(self) -> int:
        """Uploads queued and not yet waited for."""
        return self.ring.in_flight()

    def drain(self) -> None:
        """Waits for every upload in flight."""
        self.ring.drain()

    def remove(self) -> None:
        """Waits for the uploads in flight, removes the hooks, and gives
        every tensor back to its module on the device it was on (a CPU
        tensor stays a view of the host region: no copy). Idempotent."""
        if self._removed:
            return
        self._removed = True
        for handle in self._handles:
            handle.remove()
        self._handles = []
        try:
            self.ring.close()
        finally:
            for group in self.entries:
                for entry in group:
                    self.kit.place(entry, self.kit.restored(entry))
                    entry.views.clear()

    def __enter__(self) -> "Offloader":
        return self

    def __exit__(self, *_exc: object) -> None:
        self.remove()


def groups_of(modules: Any, is_module: Optional[Callable[[Any], bool]] = None) -> list[Any]:
    """Groups as users name them: a ``ModuleList`` or ``Sequential`` (each
    child a group), a list of modules, or one module (one group).

    Refused (``OffloadArgumentTypeError``): ``None``, a string or bytes, a
    mapping, and, with ``is_module``, any group it says is no module;
    ``OffloadArgumentError``: no groups at all."""
    if modules is None or isinstance(modules, (str, bytes, bytearray, dict)):
        raise OffloadArgumentTypeError(
            f"modules: a module, a ModuleList or a list of modules, not {type(modules).__name__}",
            argument="modules",
            value=modules,
        )
    if isinstance(modules, (list, tuple)):
        groups = list(modules)
    elif hasattr(modules, "__iter__") and hasattr(modules, "__len__"):
        groups = list(iter(modules))
    else:
        groups = [modules]
    if not groups:
        raise OffloadArgumentError("no groups to offload", argument="modules", value=modules)
    if is_module is not None:
        for index, group in enumerate(groups):
            if not is_module(group):
                raise OffloadArgumentTypeError(
                    f"modules: group {index} is a {type(group).__name__}, not a module",
                    argument="modules",
                    value=group,
                )
    return groups
