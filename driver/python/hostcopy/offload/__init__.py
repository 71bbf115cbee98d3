"""Offload where users run it: model weights and KV caches kept in
pageable host memory (``hostcopy.empty``) and brought to the GPU by
hostcopy ahead of the layer that needs them. Each entry point registers
that memory with the driver in the background by default
(``register=``): its registered bytes are copied directly, the rest
staged.

Three uses (torch needed for all; imported on first use, never by
``import hostcopy`` or ``import hostcopy.offload``):

- ``hostcopy.offload.offload(model.model.layers)``: each decoder layer a
  group, brought into a ring of device buffers before its forward, the
  next ones prefetched. ``.remove()`` restores the modules.
- ``hostcopy.offload.accelerate.use_hostcopy(model)``: a model after
  ``accelerate.cpu_offload`` or dispatched with a ``device_map`` whose
  layers landed on the CPU moves those layers through hostcopy instead of
  accelerate's per-tensor copies, its hooks keeping their meaning.
- ``hostcopy.offload.transformers.HostOffloadedCache``: a KV cache for
  ``generate(past_key_values=...)`` whose layers live in host memory, the
  next layer's keys and values brought back while the current one runs.

docs/offload.md is the guide.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from ._registration import DEFAULT, check_register
from ._ring import Device, Ring, Slot
from ._weights import ALIGN, Entry, Kit, Offloader, groups_of

if TYPE_CHECKING:
    from .._memory import Register
    from .._staging import Stager

__all__ = ["ALIGN", "Device", "Entry", "Kit", "Offloader", "Ring", "Slot", "groups_of", "offload"]


def offload(
    modules: Any,
    *,
    device: Any = None,
    prefetch: int = 2,
    slots: Optional[int] = None,
    buffers: bool = True,
    write_back: bool = False,
    wrap: bool = True,
    stager: Optional["Stager"] = None,
    model: Any = None,
    register: "Register" = DEFAULT,
) -> Offloader:
    """Offloads the weights of ``modules`` to pageable host memory and
    brings each group to ``device`` (default: the current CUDA device)
    before its forward::

        off = hostcopy.offload.offload(model.model.layers, prefetch=2)
        with torch.inference_mode():
            logits = model(input_ids).logits
        off.remove()                    # the layers as they were

    ``modules``: the groups, as users think of them: a ``ModuleList`` (every
    child a group, e.g. the decoder layers), a list of modules, or one
    module. Each group's parameters (and buffers, with ``buffers``) are
    copied into one flat region of ``hostcopy.empty`` memory (each tensor
    at a multiple of 256 bytes); between forwards they are CPU tensors
    viewing it, during the group's forward CUDA tensors viewing a slot of
    the ring (the ``Parameter`` objects stay the same: only ``.data``
    changes). The rest of the model stays where it is.

    ``prefetch``: uploads kept queued ahead of the running forward (the
    ring has ``prefetch + 1`` slots of the largest group's size unless
    ``slots`` says more). Each upload is a hostcopy ``blocking=False``
    transfer on its slot's stream, ordered after the forward that last read
    the slot (an event on the current torch stream) and before the forward
    that reads it (the current stream waits for it). ``wrap``: after the
    last group, the first ones are brought in for the next forward.

    ``write_back``: after a group's forward, the tensors it changed in
    place (their version counter moved: batch-norm statistics, an in-place
    update) are copied back to the host region; otherwise, as with
    accelerate's offload, changes made on the device are not kept.

    Inference only: a forward with autograd on and an offloaded parameter
    that requires grad raises (a backward pass would read a reused slot).
    An exception in a group's forward (or in ``model``'s, if given)
    waits for every upload in flight before it propagates. ``stager``: a
    ``hostcopy.Stager`` of the device (default: the device's shared one).

    ``register``: how each group's region is registered with the driver
    (``hostcopy.empty``'s ``register=``, in ``device``'s primary context):
    ``"background"`` (the default) on a thread of its own while the first
    uploads stage what is not registered yet, ``"now"`` before
    ``offload`` returns, ``"never"`` not at all. Every upload copies the
    registered bytes directly (no staging, no CPU copy) and stages the
    rest. Registered memory is locked: the kernel cannot swap it out or
    reclaim it while a tensor views a region (after ``remove()`` the
    parameters that were on the CPU still do).
    A region the driver refuses (a locked-memory limit, ``ulimit -l``)
    stays staged, never an error; ``hostcopy.registration(off.hosts[i])``
    tells how far group ``i``'s got.

    Refused arguments raise ``hostcopy.OffloadArgumentError`` (a
    ``ValueError``; ``OffloadArgumentTypeError``, also a ``TypeError``, for
    a type: a ``bool`` or ``float`` depth, a string or a non-module group,
    a ``register`` that is not a string) before any memory is made or any
    hook placed.
    """
    from ._torch import TorchKit

    register = check_register(register)
    kit = TorchKit(device)
    return Offloader(
        kit,
        groups_of(modules, kit.is_module),
        prefetch=prefetch,
        slots=slots,
        buffers=buffers,
        write_back=write_back,
        wrap=wrap,
        stager=stager,
        root=model,
        register=register,
    )
