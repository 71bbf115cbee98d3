"""``use_hostcopy``'s hooks against a stand-in for accelerate's
``accelerate.hooks`` (its ``ModelHook``, ``SequentialHook``,
``add_hook_to_module`` and ``remove_hook_from_module`` as accelerate
writes them, and an ``AlignDevicesHook`` that tracks where a module's
weights are), without torch or accelerate.

What is pinned down: each module's ``HostcopyHook`` is a ``ModelHook``
subclass attached with ``add_hook_to_module``, whose forward runs the
module's hook with its offloading ``AlignDevicesHook`` as with
``offload=False``; giving the hooks back attaches the same objects with
``add_hook_to_module`` without running their ``init_hook`` again (which
would note the meta device as the weights' place); accelerate's own
``remove_hook_from_module`` first gives every hook back, then detaches
as accelerate does, the weights back where they were.
"""

import copy
import functools
import sys
import types

import pytest

import hostcopy.offload.accelerate as offload_accelerate


class ModelHook:
    no_grad = False

    def init_hook(self, module):
        return module

    def pre_forward(self, module, *args, **kwargs):
        return args, kwargs

    def post_forward(self, module, output):
        return output

    def detach_hook(self, module):
        return module


class SequentialHook(ModelHook):
    def __init__(self, *hooks):
        self.hooks = hooks

    def init_hook(self, module):
        for hook in self.hooks:
            module = hook.init_hook(module)
        return module

    def pre_forward(self, module, *args, **kwargs):
        for hook in self.hooks:
            args, kwargs = hook.pre_forward(module, *args, **kwargs)
        return args, kwargs

    def post_forward(self, module, output):
        for hook in self.hooks:
            output = hook.post_forward(module, output)
        return output

    def detach_hook(self, module):
        for hook in self.hooks:
            module = hook.detach_hook(module)
        return module


class AlignDevicesHook(ModelHook):
    """Where the module's weights are: ``module.where`` (``"cpu"`` as made,
    ``"meta"`` between forwards once offloaded, ``"device"`` during one
    when this hook loads them)."""

    def __init__(self, offload=True, weights_map=None, no_grad=False):
        self.offload, self.weights_map, self.no_grad = offload, weights_map, no_grad
        self.original_devices = None
        self.inits = 0

    def init_hook(self, module):
        self.inits += 1
        if self.offload:
            self.original_devices = module.where
            module.where = "meta"
        return module

    def pre_forward(self, module, *args, **kwargs):
        if self.offload:
            module.where = "device"
        return args, kwargs

    def post_forward(self, module, output):
        if self.offload:
            module.where = "meta"
        return output

    def detach_hook(self, module):
        if self.offload:
            module.where = self.original_devices
        return module


def add_hook_to_module(module, hook, append=False):
    """accelerate's, less its GraphModule case."""
    CALLS.append(("add", module.name, hook))
    if append and getattr(module, "_hf_hook", None) is not None:
        old_hook = module._hf_hook
        remove_hook_from_module(module)
        hook = SequentialHook(old_hook, hook)
    if hasattr(module, "_hf_hook") and hasattr(module, "_old_forward"):
        old_forward = module._old_forward
    else:
        old_forward = module.forward
        module._old_forward = old_forward
    module = hook.init_hook(module)
    module._hf_hook = hook

    def new_forward(module, *args, **kwargs):
        args, kwargs = module._hf_hook.pre_forward(module, *args, **kwargs)
        output = module._old_forward(*args, **kwargs)
        return module._hf_hook.post_forward(module, output)

    module.forward = functools.update_wrapper(functools.partial(new_forward, module), old_forward)
    return module


def remove_hook_from_module(module, recurse=False):
    """accelerate's, less its GraphModule case."""
    CALLS.append(("remove", module.name))
    if hasattr(module, "_hf_hook"):
        module._hf_hook.detach_hook(module)
        delattr(module, "_hf_hook")
    if hasattr(module, "_old_forward"):
        module.forward = module._old_forward
        delattr(module, "_old_forward")
    if recurse:
        for child in module.children:
            remove_hook_from_module(child, recurse)
    return module


CALLS: list = []


class Module:
    def __init__(self, name, children=()):
        self.name, self.children, self.where, self.seen = name, list(children), "cpu", []

    def forward(self, x):
        self.seen.append(self.where)  # where the weights were when the forward ran
        return x + 1


@pytest.fixture
def accelerate(monkeypatch):
    hooks = types.ModuleType("accelerate.hooks")
    for item in (ModelHook, SequentialHook, AlignDevicesHook, add_hook_to_module, remove_hook_from_module):
        setattr(hooks, item.__name__, item)
    utils = types.ModuleType("accelerate.utils")
    package = types.ModuleType("accelerate")
    package.hooks, package.utils = hooks, utils
    for name, module in (("accelerate", package), ("accelerate.hooks", hooks), ("accelerate.utils", utils)):
        monkeypatch.setitem(sys.modules, name, module)
    CALLS.clear()
    return package


def offloaded(name, sequential=False):
    """A module as ``accelerate.cpu_offload`` leaves it: its weights on the
    meta device, an offloading ``AlignDevicesHook`` (in a ``SequentialHook``
    after an io hook, with ``sequential``)."""
    module = Module(name)
    hook = AlignDevicesHook(offload=True, weights_map={}, no_grad=True)
    if sequential:
        add_hook_to_module(module, SequentialHook(ModelHook(), hook))
    else:
        add_hook_to_module(module, hook)
    return module, hook


def stand_in(modules):
    hooked = [offload_accelerate._Hooked(m.name, m, hook) for m, hook in modules]
    detached = []
    standing = offload_accelerate._Standing(lambda: (detached.append(1), standing.give_back()))
    standing.place(hooked)
    return standing, detached


@pytest.mark.parametrize("sequential", [False, True])
def test_each_module_gets_a_model_hook_subclass_attached_with_add_hook_to_module(accelerate, sequential):
    module, hook = offloaded("layer", sequential)
    original = module._hf_hook
    CALLS.clear()
    standing, _ = stand_in([(module, hook)])
    placed = module._hf_hook
    assert isinstance(placed, ModelHook) and type(placed).__name__ == "HostcopyHook"
    assert type(placed) is offload_accelerate.HostcopyHook
    assert CALLS == [("add", "layer", placed)] and placed.original is original
    assert placed.no_grad == original.no_grad
    # The forward runs the module's hook with the offloading one as with
    # offload=False: the weights stay where hostcopy puts them (the meta
    # device here: no ring in this test), inputs and outputs pass through.
    assert module.forward(1) == 2 and module.seen == ["meta"] and module.where == "meta"
    assert hook.offload and hook.inits == 1  # the original as accelerate left it
    if sequential:
        assert original.hooks[1] is hook and placed.shadow.hooks[0] is original.hooks[0]
        assert placed.shadow.hooks[1] is not hook and not placed.shadow.hooks[1].offload


@pytest.mark.parametrize("sequential", [False, True])
def test_giving_back_attaches_the_same_hook_with_add_hook_to_module_without_its_init_again(accelerate, sequential):
    module, hook = offloaded("layer", sequential)
    original = module._hf_hook
    standing, _ = stand_in([(module, hook)])
    CALLS.clear()
    standing.give_back()
    assert module._hf_hook is original and CALLS == [("add", "layer", original)]
    assert hook.inits == 1 and hook.original_devices == "cpu"
    assert "init_hook" not in vars(original)
    assert module.forward(1) == 2 and module.seen == ["device"]  # accelerate's own loading again
    standing.give_back()  # once only
    assert len(CALLS) == 1


def test_remove_hook_from_module_gives_every_hook_back_then_detaches_as_accelerate_does(accelerate):
    first, first_hook = offloaded("first")
    second, second_hook = offloaded("second", sequential=True)
    originals = [first._hf_hook, second._hf_hook]
    standing, detached = stand_in([(first, first_hook), (second, second_hook)])
    model = Module("model", [first, second])
    CALLS.clear()
    remove_hook_from_module(model, recurse=True)
    assert detached == [1]  # the first HostcopyHook detached gave every module its hook back
    assert [c for c in CALLS if c[0] == "add"] == [("add", "first", originals[0]), ("add", "second", originals[1])]
    assert not any(hasattr(m, "_hf_hook") or hasattr(m, "_old_forward") for m in (first, second))
    assert first.where == second.where == "cpu"  # accelerate put the weights back where they were


def test_the_hook_class_is_made_for_accelerates_model_hook_and_needs_accelerate(monkeypatch):
    monkeypatch.setitem(sys.modules, "accelerate", None)  # not importable
    with pytest.raises(ImportError, match="accelerate"):
        offload_accelerate.HostcopyHook
    with pytest.raises(AttributeError):
        offload_accelerate.NoSuchThing


def test_a_model_hook_subclass_per_model_hook_class(accelerate):
    made = offload_accelerate.HostcopyHook
    assert issubclass(made, ModelHook) and offload_accelerate.HostcopyHook is made
    accelerate.hooks.ModelHook = type("ModelHook", (), {"no_grad": False})
    other = offload_accelerate.HostcopyHook
    assert other is not made and issubclass(other, accelerate.hooks.ModelHook)


def test_a_shadow_leaves_the_original_as_it_was():
    hook = AlignDevicesHook(offload=True)
    kept = ModelHook()
    sequence = SequentialHook(kept, hook)
    shadow = offload_accelerate._shadow(sequence, [hook], SequentialHook)
    assert sequence.hooks == (kept, hook) and hook.offload
    assert shadow.hooks[0] is kept and not shadow.hooks[1].offload and copy.copy(hook).offload
