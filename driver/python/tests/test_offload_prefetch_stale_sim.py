"""``HostOffloadedCache``'s uploads queued ahead, when a layer's host part
changes through the layer's own methods (``cache.layers[i].reorder_cache``,
``crop``, ``batch_select_indices``, ``batch_repeat_interleave``, ``reset``)
rather than the cache's, which wait for every copy in flight first.
Against test_offload_sim.py's stand-ins for torch, transformers and the
copies, with real ``hostcopy.empty`` memory, and a stager whose copies run
as soon as they are queued (as a GPU that got there at once): an upload
queued ahead holds the bytes the host part had then.

What is pinned down: a change of a layer's host part leaves an upload of
it queued before unused, even where the layer holds as many positions in
host memory as the upload brought back (a reorder keeps them; a crop, or
a reset, followed by as many new positions): every update then returns
exactly what ``DynamicCache`` would, driven the same way; and every
upload, the unused ones included, is waited for before it is let go of.
"""

import importlib.util
import pathlib
import sys
import types

import pytest

import hostcopy.offload as offload
from test_offload_sim import KV, FakeStaging, FakeStagingModule, FakeTensor, fake_cache_utils, fake_torch

LAYERS = 3
#: Positions a layer keeps on the device: the prefill of 3 goes to the
#: host, and every third token after it with the two kept, so that after
#: ``DECODE`` every layer has its 6 positions in host memory, none on the
#: device, and the last layer's update has queued the upload of the first
#: (and, with ``prefetch=2``, the second) for the next token.
TAIL = 2
DECODE = [3, 1, 1, 1]


@pytest.fixture
def kv(monkeypatch, numpy):
    """hostcopy.offload.transformers over test_offload_sim.py's stand-ins
    (under its own name: the real module stays unimported)."""
    log: list = []
    torch = fake_torch(log)
    cache_utils = fake_cache_utils()
    transformers = types.ModuleType("transformers")
    transformers.cache_utils = cache_utils
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "transformers", transformers)
    monkeypatch.setitem(sys.modules, "transformers.cache_utils", cache_utils)
    path = pathlib.Path(offload.__file__).with_name("transformers.py")
    spec = importlib.util.spec_from_file_location("hostcopy.offload._transformers_prefetch_stale_with_stand_ins", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "_staging", FakeStagingModule(log))
    return KV(module, log, torch, module._staging, numpy)


class Eager(FakeStaging):
    """A stager whose copies run when queued: an upload reads the host
    part as it is then, not as it is when the upload is read."""

    def _copy(self, *args):
        copy = super()._copy(*args)
        copy.run()
        return copy


class Reference:
    """What ``DynamicCache``'s layers hold, driven the same way: each
    layer's keys and values, numpy arrays, and what its methods make of
    them (as ``DynamicLayer``'s do)."""

    def __init__(self, np):
        self.np = np
        self.layers: list = [None] * LAYERS

    def update(self, index, keys, values):
        new = (keys.array.copy(), values.array.copy())
        old = self.layers[index]
        self.layers[index] = new if old is None else tuple(self.np.concatenate(pair, axis=-2) for pair in zip(old, new))
        return self.layers[index]

    def apply(self, index, change):
        """``change`` of each plane: a function of an array."""
        self.layers[index] = tuple(change(plane) for plane in self.layers[index])


def check(kv, reference, index, keys, values, got):
    want = reference.update(index, keys, values)
    for name, have, expected in zip(("keys", "values"), got, want):
        same = have.shape == expected.shape and bool(kv.np.array_equal(have.array, expected))
        assert same, f"layer {index}: not the {name} DynamicCache gives"


def step(kv, cache, reference, count, batch=2):
    """One forward: ``count`` new positions through every layer, via the cache."""
    for index in range(LAYERS):
        keys, values = kv.states(count, batch=batch)
        check(kv, reference, index, keys, values, cache.update(keys, values, index))


def update_layer(kv, cache, reference, index, count, batch=2):
    """``count`` new positions through the layer's own ``update``."""
    keys, values = kv.states(count, batch=batch)
    check(kv, reference, index, keys, values, cache.layers[index].update(keys, values))


def order(kv, *indices):
    return FakeTensor(kv.np.array(indices), "cuda:0", kv.log)


def reorder(kv, cache, reference):
    for index, layer in enumerate(cache.layers):
        layer.reorder_cache(order(kv, 1, 0))
        reference.apply(index, lambda plane: plane[[1, 0]])
    return 2


def select_as_many(kv, cache, reference):
    for index, layer in enumerate(cache.layers):
        layer.batch_select_indices(order(kv, 1, 0))
        reference.apply(index, lambda plane: plane[[1, 0]])
    return 2


def select_fewer(kv, cache, reference):
    for index, layer in enumerate(cache.layers):
        layer.batch_select_indices(order(kv, 1))
        reference.apply(index, lambda plane: plane[[1]])
    return 1


def repeat(kv, cache, reference):
    for index, layer in enumerate(cache.layers):
        layer.batch_repeat_interleave(2)
        reference.apply(index, lambda plane: kv.np.repeat(plane, 2, axis=0))
    return 4


def crop_and_refill(kv, cache, reference):
    # Three positions fewer, then three new ones through the layer's own
    # update (more than the device part holds: written to the host), so
    # that the layer again has 6 positions in host memory, 3 of them new.
    for index, layer in enumerate(cache.layers):
        layer.crop(-3)
        reference.apply(index, lambda plane: plane[:, :, :-3])
        update_layer(kv, cache, reference, index, 3)
    return 2


def reset_and_refill(kv, cache, reference):
    for index, layer in enumerate(cache.layers):
        layer.reset()
        reference.layers[index] = None
        update_layer(kv, cache, reference, index, 6)
    return 2


CHANGES = [reorder, select_as_many, select_fewer, repeat, crop_and_refill, reset_and_refill]


def assert_every_upload_was_waited_for(kv, cache):
    cache.drain()
    uploads = [entry[1] for entry in kv.log if entry[0] == "copy_to_device"]
    waited = {entry[1] for entry in kv.log if entry[0] == "wait"}
    assert uploads and not [name for name in uploads if name not in waited]


@pytest.mark.parametrize("change", CHANGES, ids=[change.__name__ for change in CHANGES])
@pytest.mark.parametrize("group, prefetch", [(1, 1), (1, 2), (2, 1)])
def test_a_layer_changed_through_its_own_methods_never_reads_an_upload_queued_before(kv, change, group, prefetch):
    cache = kv.module.HostOffloadedCache(prefetch=prefetch, tail=TAIL, group=group, stager=Eager(kv.log))
    reference = Reference(kv.np)
    for count in DECODE:
        step(kv, cache, reference, count)
    assert 0 in cache._fetched, "the first layer's upload is queued for the next token"
    assert all(layer.flushed == layer.length == 6 for layer in cache.layers)
    batch = change(kv, cache, reference)
    for count in [1, 1, 1, 2, 1]:
        step(kv, cache, reference, count, batch)
    assert_every_upload_was_waited_for(kv, cache)


def test_a_layer_changed_after_its_cache_handed_it_an_upload_never_reads_it(kv, monkeypatch):
    # The cache hands the layer its upload just before the layer's update;
    # a layer whose update reorders it first (as a subclass might) must
    # not read it.
    cache = kv.module.HostOffloadedCache(prefetch=1, tail=TAIL, group=1, stager=Eager(kv.log))
    reference = Reference(kv.np)
    for count in DECODE:
        step(kv, cache, reference, count)
    original = kv.module.HostLayer.update

    def update(layer, key_states, value_states, *args, **kwargs):
        assert layer.fetched is not None
        layer.reorder_cache(order(kv, 1, 0))
        reference.apply(cache.layers.index(layer), lambda plane: plane[[1, 0]])
        return original(layer, key_states, value_states, *args, **kwargs)

    monkeypatch.setattr(kv.module.HostLayer, "update", update)
    step(kv, cache, reference, 1)
    monkeypatch.setattr(kv.module.HostLayer, "update", original)
    step(kv, cache, reference, 1)
    assert_every_upload_was_waited_for(kv, cache)
