"""GPU test of ``hostcopy.offload.transformers.HostOffloadedCache`` on a
model whose full-attention layers differ in KV heads (as some models'
do, layer by layer): greedy ``generate`` with the host cache at ``group``
1, 2, 4 and every layer gives ``DynamicCache``'s tokens and every step's
logits bit for bit, and each layer's keys and values in host memory are
``DynamicCache``'s.

The model: a small Llama built from a config with random weights
(nothing downloaded), then, before it goes to the GPU, the attention of
layers 1 and 5 replaced by transformers' own ``LlamaAttention`` made
from a copy of the config its stock attention was made with, with another
``num_key_value_heads``
(4 and 1 where the others have 2; same query heads and head dim, so the
rotary embedding and the output projection fit), its projections drawn
as the model draws its own (normal, ``initializer_range``). transformers'
Llama takes its KV heads from the config its attention is made with, so
each layer computes and caches keys and values with its own head count;
no stock class takes a per-layer list. The prompt is longer than the
cache's device part, so the first layer writes to the host (laying out
its group's memory) before the next layers have made theirs: the case
where a layer of another shape leaves its group after the layout.

Skipped, with the reason, where torch, transformers or a GPU is missing;
HOSTCOPY_REQUIRE_GPU=1 (the GPU bundle sets it) makes that a failure.
"""

import copy
import importlib
import os

import pytest

REQUIRE = os.environ.get("HOSTCOPY_REQUIRE_GPU") == "1"


def _need(module: str):
    try:
        return importlib.import_module(module)
    except Exception as missing:  # ImportError, or a CUDA init failure at import
        if REQUIRE:
            pytest.fail(f"HOSTCOPY_REQUIRE_GPU=1 but {module} is unusable: {missing}", pytrace=False)
        pytest.skip(f"{module} is unusable here: {missing}", allow_module_level=True)


torch = _need("torch")
transformers = _need("transformers")
if not torch.cuda.is_available():
    if REQUIRE:
        pytest.fail("HOSTCOPY_REQUIRE_GPU=1 but torch sees no GPU", pytrace=False)
    pytest.skip("no GPU (torch.cuda.is_available() is False)", allow_module_level=True)

import hostcopy.offload.transformers  # noqa: E402
from transformers.models.llama.modeling_llama import LlamaAttention  # noqa: E402

#: Each layer's KV heads: layers 1 and 5 differ from the rest, so that in a
#: group of 4 (and of every layer) same-shaped layers follow one of another shape.
KV_HEADS = [2, 4, 2, 2, 2, 1, 2, 2]
LAYERS = len(KV_HEADS)
#: Positions each layer keeps on the device: fewer than the prompt's.
TAIL = 8


def _model():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=256,
        intermediate_size=688,
        num_hidden_layers=LAYERS,
        num_attention_heads=4,
        num_key_value_heads=KV_HEADS[0],
        vocab_size=512,
        max_position_embeddings=1024,
    )
    model = transformers.LlamaForCausalLM(config)
    for index, heads in enumerate(KV_HEADS):
        if heads == config.num_key_value_heads:
            continue
        # The config the layer's stock attention was made with (the
        # attention implementation the model chose included), with this
        # layer's KV heads.
        own = copy.deepcopy(model.model.layers[index].self_attn.config)
        own.num_key_value_heads = heads
        attention = LlamaAttention(own, layer_idx=index)
        for parameter in attention.parameters():
            torch.nn.init.normal_(parameter.data, mean=0.0, std=config.initializer_range)
        model.model.layers[index].self_attn = attention
    return model.to(torch.bfloat16).cuda().eval()


@pytest.fixture(scope="module")
def model():
    return _model()


@pytest.fixture(scope="module")
def prompt():
    generator = torch.Generator().manual_seed(4)
    return torch.randint(0, 512, (2, 3 * TAIL), generator=generator).cuda()


def _generate(model, prompt, cache):
    return model.generate(
        prompt,
        past_key_values=cache,
        max_new_tokens=40,
        min_new_tokens=40,
        do_sample=False,
        return_dict_in_generate=True,
        output_logits=True,
    )


@pytest.fixture(scope="module")
def reference(model, prompt):
    cache = transformers.DynamicCache(config=model.config)
    out = _generate(model, prompt, cache)
    # The layers really differ: each cached its keys and values with its own KV heads.
    assert [layer.keys.shape[1] for layer in cache.layers] == KV_HEADS
    assert [layer.values.shape[1] for layer in cache.layers] == KV_HEADS
    return out, cache


@pytest.mark.parametrize("group", [1, 2, 4, LAYERS], ids=["group 1", "group 2", "group 4", "every layer"])
def test_layers_of_other_kv_heads_decode_bit_exact_to_dynamic_cache(model, prompt, reference, group):
    expected, dynamic = reference
    cache = hostcopy.offload.transformers.HostOffloadedCache(
        config=model.config, tail=TAIL, group=group, counters=True
    )
    out = _generate(model, prompt, cache)
    steps = [
        step for step, (ours, theirs) in enumerate(zip(out.logits, expected.logits)) if not torch.equal(ours, theirs)
    ]
    assert len(out.logits) == len(expected.logits) and steps == [], f"steps whose logits differ: {steps}"
    assert torch.equal(out.sequences, expected.sequences)
    # Each layer's keys and values in host memory are the ones DynamicCache holds.
    for index, (ours, theirs) in enumerate(zip(cache.layers, dynamic.layers)):
        assert torch.equal(ours.keys, theirs.keys.cpu()), f"layer {index}: keys"
        assert torch.equal(ours.values, theirs.values.cpu()), f"layer {index}: values"
    if group > 1:
        # Layers of one shape still share memory and come back together.
        assert cache.counters.uploads < LAYERS * (len(out.logits) - 1)
    cache.drain()
