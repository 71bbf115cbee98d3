"""``HostOffloadedCache`` over a model whose full-attention layers are not
all of one shape (layer-wise KV heads or head dims, as some models have),
against test_offload_sim.py's stand-ins for torch, transformers and the
copies, with real ``hostcopy.empty`` memory.

What is pinned down: with ``group`` 1, 2, 4 and every layer, each layer
reads back exactly its own keys and values at every step (a prefill
longer than the device part, decode steps that read the host part back,
a chunk that makes the regions larger, then decode again), whether the
cache's layers are made up front (from a config, as transformers makes
them) or as they are first updated. With layers made up front, a
layer's shape is known only at its first update, after the first
layer's write laid the group's region out for parts of the first
layer's shape: a layer of another shape leaves the region then, and
the members left must still find their memory where it was laid out
for them, not at a place counted from their index among the members.
"""

import importlib.util
import pathlib
import sys
import types

import pytest

import hostcopy.offload as offload
from test_offload_sim import KV, FakeStagingModule, fake_cache_utils, fake_torch

#: Eight full-attention layers: layers 1 and 5 have other KV heads, or other
#: key and value head dims, than the rest (so that, in a group of 4 or of
#: every layer, same-shaped layers follow one of another shape).
USUAL = {"heads": 2, "key_dim": 4, "value_dim": 4}
SHAPES = {
    "kv heads": [USUAL, {**USUAL, "heads": 4}, USUAL, USUAL, USUAL, {**USUAL, "heads": 1}, USUAL, USUAL],
    "head dims": [
        USUAL,
        {**USUAL, "key_dim": 8, "value_dim": 8},
        USUAL,
        USUAL,
        USUAL,
        {**USUAL, "key_dim": 4, "value_dim": 6},
        USUAL,
        USUAL,
    ],
}
LAYERS = 8
#: New positions per step: a prefill longer than the device part (so the
#: first layer writes, laying out its group's region, before the next
#: layer is made), single tokens, a chunk of 300 (every region made again
#: larger), single tokens again.
TAIL = 4
STEPS = [6, 1, 1, 1, 1, 1, 1, 300, 1, 1, 1, 1, 1]


@pytest.fixture
def kv(monkeypatch, numpy):
    """hostcopy.offload.transformers over test_offload_sim.py's stand-ins
    for torch, transformers and the copies; its host memory is real."""
    log: list = []
    cache_utils = fake_cache_utils()

    class DynamicCache(cache_utils.DynamicCache):
        """With a config, a layer for each of the model's layers, made up
        front, as transformers' ``DynamicCache(config=...)`` makes them."""

        def __init__(self, config=None):
            super().__init__(config)
            if config is not None:
                self.layers = [cache_utils.DynamicLayer() for _ in range(config.num_hidden_layers)]
                self.layer_class_to_replicate = None

    cache_utils.DynamicCache = DynamicCache
    transformers = types.ModuleType("transformers")
    transformers.cache_utils = cache_utils
    monkeypatch.setitem(sys.modules, "torch", fake_torch(log))
    monkeypatch.setitem(sys.modules, "transformers", transformers)
    monkeypatch.setitem(sys.modules, "transformers.cache_utils", cache_utils)
    path = pathlib.Path(offload.__file__).with_name("transformers.py")
    spec = importlib.util.spec_from_file_location("hostcopy.offload._transformers_shapes_with_stand_ins", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    staging = FakeStagingModule(log)
    monkeypatch.setattr(module, "_staging", staging)
    return KV(module, log, sys.modules["torch"], staging, numpy)


def decode(kv, cache, shapes, steps):
    """Runs ``steps`` (new positions per step) through every layer, each
    layer's keys and values of its own shape, checking that every update
    returns exactly the positions given to that layer so far; returns
    them per layer, and the uploads of each step."""
    np = kv.np
    expected: list = [None] * len(shapes)
    uploads = []
    for step, count in enumerate(steps):
        before = cache.counters.uploads
        for index, shape in enumerate(shapes):
            keys, values = kv.states(count, **shape)
            got_keys, got_values = cache.update(keys, values, index)
            new = (keys.array.copy(), values.array.copy())
            expected[index] = (
                new
                if expected[index] is None
                else tuple(np.concatenate([old, part], axis=-2) for old, part in zip(expected[index], new))
            )
            for name, got, want in zip(("keys", "values"), (got_keys, got_values), expected[index]):
                same = got.shape == want.shape and bool(np.array_equal(got.array, want))
                assert same, f"step {step}, layer {index}: not the {name} it was given"
        uploads.append(cache.counters.uploads - before)
    return expected, uploads


def config(layers):
    """What the cache reads of a model's config: its layer count (every layer a full-attention one)."""
    return types.SimpleNamespace(num_hidden_layers=layers)


@pytest.mark.parametrize("with_config", [True, False], ids=["layers made up front", "layers made as updated"])
@pytest.mark.parametrize("kind", list(SHAPES))
@pytest.mark.parametrize("group", [1, 2, 4, LAYERS], ids=["group 1", "group 2", "group 4", "every layer"])
def test_each_layer_reads_its_own_keys_and_values_whatever_the_shapes_of_its_group(kv, kind, group, with_config):
    shapes = SHAPES[kind]
    cache = kv.module.HostOffloadedCache(config(LAYERS) if with_config else None, prefetch=2, tail=TAIL, group=group, counters=True)
    expected, uploads = decode(kv, cache, shapes, STEPS)
    # The host memory holds each layer's own positions, once the device part is written.
    for index, (layer, (keys, values)) in enumerate(zip(cache.layers, expected)):
        same = bool(kv.np.array_equal(layer.keys.array, keys)) and bool(kv.np.array_equal(layer.values.array, values))
        assert same, f"layer {index}: host memory not its keys and values"
    # The layers of another shape each have memory of their own; the rest
    # still share theirs (a decode step brings them back in fewer calls
    # than layers), each member's part where its region laid it out.
    for index in (1, 5):
        assert cache.layers[index].region.members == [cache.layers[index]]
    per_token = [calls for count, calls in zip(STEPS[1:], uploads[1:]) if count == 1]
    if group == 1:
        assert per_token == [LAYERS] * len(per_token), uploads
    else:
        assert max(per_token) < LAYERS, uploads
    for region in dict.fromkeys(layer.region for layer in cache.layers):
        for member in region.members:
            part = region.parts[member]
            assert member.host.ctypes.data == region.host.ctypes.data + part.offset
            assert member.host.nbytes == part.nbytes == member.part_bytes(region.capacity)


def test_a_layer_leaving_a_laid_out_group_moves_no_other_layers_memory(kv):
    # Four layers in one group; the second is of another shape and made
    # only after the first laid the region out for four parts of its own
    # shape: it leaves, and the third and fourth keep the parts laid out
    # for them (the second's stays unused until the region grows).
    shapes = SHAPES["kv heads"][:4]
    cache = kv.module.HostOffloadedCache(config(4), prefetch=1, tail=TAIL, group=4, counters=True)
    _, uploads = decode(kv, cache, shapes, [6, 1, 1, 1])
    first, second, third, fourth = cache.layers
    region = first.region
    assert second.region is not region and region.members == [first, third, fourth]
    part = first.part_bytes(region.capacity)
    assert [region.parts[member].offset for member in region.members] == [0, 2 * part, 3 * part]
    # Per decoded token: the first alone (the next is not in its region),
    # the second, the last two together.
    assert uploads[1:] == [3, 3, 3], uploads
