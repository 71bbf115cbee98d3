"""accelerate's CPU offload through hostcopy, without rewriting the program::

    model = accelerate.cpu_offload(model, execution_device="cuda")   # or dispatch_model(model, device_map)
    handle = hostcopy.offload.accelerate.use_hostcopy(model)
    model(input_ids)                    # the offloaded layers come through hostcopy
    handle.remove()                     # back to accelerate's own copies

accelerate puts an ``AlignDevicesHook(offload=True)`` on every module with
tensors of its own whose weights live in a ``weights_map`` on the CPU; its
``pre_forward`` moves them one tensor at a time (``.to(device)`` from
pageable memory) and its ``post_forward`` puts them back on the meta
device. ``use_hostcopy`` groups those modules (one group per decoder
layer: each entry of the ``device_map`` that says ``"cpu"``, or else each
child of a ``ModuleList``), copies each group's weights into one region of
``hostcopy.empty`` memory, and brings the group in through
``hostcopy.offload``'s ring before the group's forward.

What stays as accelerate has it:

- the hooks stay accelerate's: each module whose hook offloads gets a
  ``HostcopyHook`` (a ``ModelHook``, attached with accelerate's
  ``add_hook_to_module``) that does what the module's hook did with its
  offloading ``AlignDevicesHook`` as with ``offload=False`` (inputs and
  outputs moved to the execution device, ``io_same_device``), while the
  group's tensors are views of the ring slot during its forward and on
  the meta device outside it, as before.
- ``weights_map``: its CPU tensors become views of the host region (same
  values; the old memory is freed, so host memory is the weights once).
- ``remove_hook_from_module`` (on any of those modules, or recursively on
  the model) first gives every module its accelerate hook back (the same
  object, attached again with ``add_hook_to_module``), then accelerate
  detaches as it always does (weights back to their original device,
  from the weights map).
- left to accelerate: weights offloaded to disk, tied weights, int8
  weights with their statistics, modules whose weights map holds another
  dtype than the module.
"""

from __future__ import annotations

import copy
import importlib
from typing import Any, Callable, Optional, Sequence

from .._errors import OffloadArgumentError, OffloadArgumentTypeError
from .._memory import Register
from .._staging import Stager
from ._registration import DEFAULT, check_register
from ._ring import check_count
from ._torch import TorchKit
from ._weights import Entry, Offloader


def _accelerate() -> Any:
    try:  # typed as Any: accelerate is optional
        accelerate = importlib.import_module("accelerate")
        importlib.import_module("accelerate.hooks")
        importlib.import_module("accelerate.utils")
    except ImportError as missing:
        raise ImportError(f"hostcopy.offload.accelerate needs accelerate: {missing}") from None
    return accelerate


class _AccelerateKit(TorchKit):
    """Tensors go in and out of the module's tables as accelerate's own
    ``set_module_tensor_to_device`` puts them: a new ``Parameter`` over the
    device view during the forward (one per slot, made once), the meta
    tensor accelerate left outside it."""

    def device_view(self, buffer: Any, entry: Entry) -> Any:
        view = super().device_view(buffer, entry)
        if entry.kind != "parameter":
            return view
        meta = entry.resting
        with self.torch.inference_mode(False):
            return type(meta)(view, requires_grad=meta.requires_grad)

    def place(self, entry: Entry, value: Any) -> None:
        table = entry.owner._parameters if entry.kind == "parameter" else entry.owner._buffers
        table[entry.name] = value

    def restored(self, entry: Entry) -> Any:
        return entry.resting


#: ``HostcopyHook`` for each ``ModelHook`` class it was made for (made at
#: first use: accelerate is optional, and importing this module needs none).
_HOOK_CLASSES: dict[type, type] = {}


def _hook_class() -> Any:
    """``HostcopyHook``, a subclass of accelerate's ``ModelHook``."""
    acc = _accelerate()
    model_hook = acc.hooks.ModelHook
    made = _HOOK_CLASSES.get(model_hook)
    if made is not None:
        return made

    class HostcopyHook(model_hook):  # type: ignore[misc, valid-type]
        """Stands in for a module's accelerate hook (``original``: an
        ``AlignDevicesHook``, or a ``SequentialHook`` holding it) while
        hostcopy brings the module's weights: ``pre_forward`` and
        ``post_forward`` are the original's with each hook of ``offloading``
        as with ``offload=False`` (the weights come from the ring);
        ``init_hook`` leaves the module as the original left it;
        ``detach_hook`` (``remove_hook_from_module``) hands every module
        back to accelerate, then detaches as the original does."""

        def __init__(self, original: Any, offloading: Sequence[Any], on_detach: Callable[[], None]) -> None:
            self.original = original
            self.shadow = _shadow(original, offloading, acc.hooks.SequentialHook)
            self.no_grad = getattr(original, "no_grad", False)
            self._on_detach = on_detach

        def pre_forward(self, module: Any, *args: Any, **kwargs: Any) -> Any:
            return self.shadow.pre_forward(module, *args, **kwargs)

        def post_forward(self, module: Any, output: Any) -> Any:
            return self.shadow.post_forward(module, output)

        def detach_hook(self, module: Any) -> Any:
            self._on_detach()
            return self.original.detach_hook(module)

        def __repr__(self) -> str:
            return f"HostcopyHook({self.original!r})"

    _HOOK_CLASSES[model_hook] = HostcopyHook
    return HostcopyHook


def __getattr__(name: str) -> Any:
    if name == "HostcopyHook":
        return _hook_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _shadow(hook: Any, offloading: Sequence[Any], sequential: Any) -> Any:
    """``hook`` with each hook of ``offloading`` in it as with
    ``offload=False`` (a shallow copy: the original keeps its state for
    accelerate's own removal)."""
    if any(hook is other for other in offloading):
        shadow = copy.copy(hook)
        shadow.offload = False
        return shadow
    if isinstance(hook, sequential):
        return sequential(*(_shadow(member, offloading, sequential) for member in hook.hooks))
    return hook


def _unchanged(module: Any) -> Any:
    return module


def _give_back(module: Any, hook: Any) -> None:
    """Attaches ``hook`` to ``module`` again with accelerate's
    ``add_hook_to_module``, without its ``init_hook``: that ran when
    accelerate first attached it, moving the weights to the meta device
    and noting where they had been (``AlignDevicesHook.original_devices``);
    run again, it would note the meta device, and accelerate's removal
    could no longer put the weights back."""
    hook.init_hook = _unchanged  # an instance attribute: the class's method for this one call
    try:
        _accelerate().hooks.add_hook_to_module(module, hook)
    finally:
        del hook.init_hook


class _Hooked:
    """One offloading ``AlignDevicesHook`` of a module (the module's hook,
    or one of its ``SequentialHook``)."""

    def __init__(self, name: str, module: Any, hook: Any) -> None:
        self.name, self.module, self.hook = name, module, hook


class _Standing:
    """The ``HostcopyHook``s standing in for modules' accelerate hooks,
    each attached with accelerate's ``add_hook_to_module`` (``place``);
    ``give_back()`` attaches the originals again. ``on_detach``: what a
    ``HostcopyHook`` calls when accelerate detaches it."""

    def __init__(self, on_detach: Callable[[], None]) -> None:
        self.on_detach = on_detach
        #: (module, its accelerate hook, the HostcopyHook standing in for it).
        self.placed: list[tuple[Any, Any, Any]] = []

    def place(self, hooked: Sequence[_Hooked]) -> None:
        """A ``HostcopyHook`` on each module of ``hooked``, for its hooks there."""
        add_hook_to_module = _accelerate().hooks.add_hook_to_module
        make = _hook_class()
        offloading: dict[int, tuple[Any, list[Any]]] = {}
        for item in hooked:
            offloading.setdefault(id(item.module), (item.module, []))[1].append(item.hook)
        for module, hooks in offloading.values():
            original = module._hf_hook
            hook = make(original, hooks, self.on_detach)
            add_hook_to_module(module, hook)
            self.placed.append((module, original, hook))

    def give_back(self) -> None:
        """Each module its accelerate hook again, where a ``HostcopyHook``
        still stands in for it."""
        placed, self.placed = self.placed, []
        for module, original, hook in placed:
            if getattr(module, "_hf_hook", None) is hook:
                _give_back(module, original)


def _offloading_hooks(model: Any) -> list[_Hooked]:
    acc = _accelerate()
    align = acc.hooks.AlignDevicesHook
    sequential = acc.hooks.SequentialHook
    found = []
    for name, module in model.named_modules():
        hook = getattr(module, "_hf_hook", None)
        if hook is None:
            continue
        members = list(hook.hooks) if isinstance(hook, sequential) else [hook]
        for member in members:
            if isinstance(member, align) and member.offload and member.weights_map is not None:
                found.append(_Hooked(name, module, member))
    return found


def _weights_table(hook: Any, name: str) -> Optional[tuple[dict[str, Any], str]]:
    """The dict holding ``name``'s CPU tensor behind ``hook.weights_map``
    and its key there, or ``None`` (a weight on disk, or a map of an
    unknown kind)."""
    weights, prefix = hook.weights_map, ""
    if hasattr(weights, "dataset") and hasattr(weights, "prefix"):  # PrefixedDataset
        weights, prefix = weights.dataset, weights.prefix
    table = getattr(weights, "state_dict", weights)  # OffloadedWeightsLoader keeps a dict
    if not isinstance(table, dict) or prefix + name not in table:
        return None
    return table, prefix + name


def _entries(hooked: _Hooked) -> Optional[list[tuple[Entry, dict[str, Any], str]]]:
    acc = _accelerate()
    hook, module = hooked.hook, hooked.module
    if getattr(hook, "tied_params_names", None):
        return None
    found = []
    for name, current in acc.utils.named_module_tensors(
        module, include_buffers=hook.offload_buffers, recurse=hook.place_submodules, remove_non_persistent=True
    ):
        where = _weights_table(hook, name)
        if where is None:
            return None
        value = where[0][where[1]]
        if value.device.type != "cpu" or value.dtype != current.dtype or tuple(value.shape) != tuple(current.shape):
            return None
        if value.dtype.is_floating_point is False and value.element_size() == 1 and "weight" in name:
            return None  # int8 weights come with statistics accelerate passes along
        owner, _, leaf = name.rpartition(".")
        owner_module = module.get_submodule(owner) if owner else module
        kind = "parameter" if leaf in owner_module._parameters else "buffer"
        entry = Entry(owner_module, leaf, kind, value, value.numel() * value.element_size())
        entry.resting = current  # the meta tensor accelerate keeps between forwards
        found.append((entry, where[0], where[1]))
    return found


def _check_groups(model: Any, groups: Any) -> None:
    """``groups``: ``None`` or a list of module names of ``model`` (``""``
    is the model itself); one string, a name that is no string, or a name
    of no module is refused."""
    if groups is None:
        return
    if isinstance(groups, (str, bytes)) or not hasattr(groups, "__iter__"):
        raise OffloadArgumentTypeError(
            f"groups: a list of module names (groups=[{groups!r}]), not {type(groups).__name__}",
            argument="groups",
            value=groups,
        )
    for name in groups:
        if not isinstance(name, str):
            raise OffloadArgumentTypeError(
                f"groups: module names are strings, not {type(name).__name__} ({name!r})", argument="groups", value=name
            )
        try:
            model.get_submodule(name)
        except AttributeError:
            raise OffloadArgumentError(f"groups: {name!r} names no module of the model", argument="groups", value=name) from None


def _group_names(model: Any, hooked: Sequence[_Hooked], groups: Optional[Sequence[str]]) -> dict[str, str]:
    """Each hooked module's group, by module name (none for a module
    outside the groups named)."""
    if groups is None:
        device_map = getattr(model, "hf_device_map", None)
        if isinstance(device_map, dict) and any(v == "cpu" for v in device_map.values()):
            groups = [name for name, where in device_map.items() if where == "cpu"]
    torch = importlib.import_module("torch")
    lists = {
        name for name, module in model.named_modules() if isinstance(module, (torch.nn.ModuleList, torch.nn.Sequential))
    }
    chosen = {}
    for item in hooked:
        group = item.name
        if groups is not None:
            matches = [g for g in groups if g == "" or item.name == g or item.name.startswith(g + ".")]
            if not matches:
                continue  # outside the groups named: left to accelerate
            group = max(matches, key=len)
        else:
            parts = item.name.split(".")
            for cut in range(len(parts) - 1, 0, -1):
                if ".".join(parts[: cut - 1]) in lists or (cut == 1 and "" in lists):
                    group = ".".join(parts[:cut])
                    break
        chosen[item.name] = group
    return chosen


class AccelerateOffload:
    """The handle ``use_hostcopy`` returns: ``remove()`` gives accelerate its
    hooks back (the layers then move by accelerate's copies again)."""

    def __init__(
        self,
        model: Any,
        groups: Optional[Sequence[str]],
        prefetch: int,
        slots: Optional[int],
        stager: Optional[Stager],
        register: Register = DEFAULT,
    ) -> None:
        self.hooked: list[_Hooked] = []
        self.skipped: list[str] = []
        # Refused before any hook is replaced.
        prefetch = check_count("prefetch", prefetch, 0)
        if slots is not None:
            check_count("slots", slots, prefetch + 1)
        register = check_register(register)
        _check_groups(model, groups)
        hooked = _offloading_hooks(model)
        if not hooked:
            raise OffloadArgumentError(
                "no module of this model has an accelerate hook that offloads its weights "
                "(accelerate.cpu_offload, or dispatch_model / from_pretrained with a device_map placing layers on the CPU)",
                argument="model",
                value=type(model).__name__,
            )
        devices = {str(item.hook.execution_device) for item in hooked}
        if len(devices) != 1:
            raise OffloadArgumentError(
                f"the offloaded modules execute on several devices ({sorted(devices)}): one is supported",
                argument="model",
                value=sorted(devices),
            )
        names = _group_names(model, hooked, groups)
        order: list[str] = []
        members: dict[str, list[tuple[Entry, dict[str, Any], str]]] = {}
        seen: set[int] = set()
        for item in hooked:
            if item.name not in names:
                continue
            entries = _entries(item)
            if entries is not None and not entries:
                continue  # a hook with nothing to move (buffers not offloaded)
            if entries is None or any(id(entry.tensor) in seen for entry, _, _ in entries):
                self.skipped.append(item.name)  # on disk, int8, or tied to a module already taken
                continue
            seen.update(id(entry.tensor) for entry, _, _ in entries)
            group = names[item.name]
            if group not in members:
                order.append(group)
                members[group] = []
            members[group] += entries
            self.hooked.append(item)
        if not order:
            raise OffloadArgumentError(
                f"every offloaded module is left to accelerate (on disk, tied or int8): {self.skipped}",
                argument="groups",
                value=groups,
            )
        self.groups = order
        roots = [model.get_submodule(name) if name else model for name in order]
        kit = _AccelerateKit(next(iter(hooked)).hook.execution_device)
        self.offloader = Offloader(
            kit,
            roots,
            prefetch=prefetch,
            slots=slots,
            stager=stager,
            entries=[[entry for entry, _, _ in members[g]] for g in order],
            root=model,
            register=register,
        )
        # The weights map now reads the host regions: the old tensors go.
        for index, group in enumerate(order):
            host = self.offloader.hosts[index]
            for entry, table, key in members[group]:
                table[key] = kit.host_view(host, entry)
        self._removed = False
        self._standing = _Standing(self.remove)
        try:
            self._standing.place(self.hooked)
        except BaseException:
            self.remove()  # the hooks placed so far given back, the regions let go of
            raise

    @property
    def ready_seconds(self) -> float:
        """Seconds taken to make the host regions and copy the weights in."""
        return self.offloader.ready_seconds

    @property
    def host_bytes(self) -> int:
        """Bytes of host memory the regions hold."""
        return self.offloader.host_bytes

    def in_flight(self) -> int:
        """Uploads queued and not yet waited for."""
        return self.offloader.in_flight()

    def remove(self) -> None:
        """Gives every module its accelerate hook back and waits for the
        uploads in flight (idempotent)."""
        if self._removed:
            return
        self._removed = True
        try:
            self._standing.give_back()
        finally:
            self.offloader.remove()


def use_hostcopy(
    model: Any,
    *,
    groups: Optional[Sequence[str]] = None,
    prefetch: int = 2,
    slots: Optional[int] = None,
    stager: Optional[Stager] = None,
    register: Register = DEFAULT,
) -> AccelerateOffload:
    """Moves the CPU-offloaded layers of ``model`` (after
    ``accelerate.cpu_offload``, or ``dispatch_model`` /
    ``from_pretrained(device_map=...)`` placing layers on the CPU) through
    hostcopy instead of accelerate's per-tensor copies.

    ``groups``: module names whose offloaded submodules form one group
    each, the other offloaded modules left to accelerate (default: the
    ``device_map``'s entries on the CPU, else each child of a
    ``ModuleList`` such as the decoder layers, and each other offloaded
    module a group of its own).
    ``prefetch``, ``slots``, ``stager``: as ``hostcopy.offload.offload``.
    ``register``: as ``offload`` too (default ``"background"``), in the
    primary context of the hooks' execution device: each group's region
    registered with the driver, its registered bytes uploaded directly,
    the rest staged; a region the driver refuses stays staged.
    ``hostcopy.registration(handle.offloader.hosts[i])`` tells how far
    group ``handle.groups[i]``'s got.
    The modules left to accelerate are in ``.skipped``. Refused arguments
    (``groups`` as one string or naming no module, a depth out of range,
    a ``register`` other than ``"never"``, ``"background"``, ``"now"``, a
    model with no offloading hook) raise ``hostcopy.OffloadArgumentError``
    (``OffloadArgumentTypeError`` for a type) before any hook is replaced.
    """
    return AccelerateOffload(model, groups, prefetch, slots, stager, register)
