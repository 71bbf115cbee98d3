"""GPU tests of hostcopy.offload with the real torch, transformers and
accelerate: a small Llama-shaped model built from a config with random
weights (nothing downloaded), its decoder layers offloaded three ways
(``hostcopy.offload.offload``, ``accelerate.cpu_offload`` then
``use_hostcopy``, ``dispatch_model`` with a ``device_map`` then
``use_hostcopy``): logits bit-equal to the model run wholly on the GPU,
no pinned allocation by torch's host allocator, host regions that are not
pinned with ``register="never"`` and registered with the driver with
``"now"`` and (once waited for) ``"background"``, the default, for the
same logits bit for bit, hooks that come off, and an exception inside a
forward that leaves no upload in flight. The host KV cache:
``generate``'s tokens equal to ``DynamicCache``'s, with no pinned
allocation beyond generate's own, and every step's logits bit-equal
whether its regions are registered or not, a region grown larger
registered as the first was.

Skipped, with the reason, where torch, transformers, accelerate or a GPU
is missing; HOSTCOPY_REQUIRE_GPU=1 (the GPU bundle sets it) makes that a
failure.
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
accelerate = _need("accelerate")
if not torch.cuda.is_available():
    if REQUIRE:
        pytest.fail("HOSTCOPY_REQUIRE_GPU=1 but torch sees no GPU", pytrace=False)
    pytest.skip("no GPU (torch.cuda.is_available() is False)", allow_module_level=True)

import hostcopy  # noqa: E402
import hostcopy.offload  # noqa: E402
import hostcopy.offload.accelerate  # noqa: E402
import hostcopy.offload.transformers  # noqa: E402
from accelerate.hooks import remove_hook_from_module  # noqa: E402

LAYERS = 4


def _config():
    return transformers.LlamaConfig(
        hidden_size=256,
        intermediate_size=688,
        num_hidden_layers=LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=512,
        max_position_embeddings=1024,
    )


def _model():
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(_config()).to(torch.bfloat16).eval()


@pytest.fixture(scope="module")
def cpu_model():
    return _model()


@pytest.fixture(scope="module")
def inputs():
    generator = torch.Generator().manual_seed(1)
    return torch.randint(0, 512, (2, 24), generator=generator).cuda()


@pytest.fixture(scope="module")
def reference(cpu_model, inputs):
    model = copy.deepcopy(cpu_model).cuda()
    with torch.inference_mode():
        return model(inputs).logits.clone()


def _logits(model, inputs):
    with torch.inference_mode():
        return model(inputs).logits


def _pinned_allocations():
    """torch's pinned host allocator's allocation counters ({} in a torch without them).

    Reading a CUDA scalar (``.item()``, ``bool()``, and so ``torch.equal``
    on CUDA tensors) takes one 1-byte block from this allocator
    (``_local_scalar_dense_cuda`` copies into pinned memory), so the tests
    compare logits after the snapshot that closes a window, not inside it.
    """
    stats_of = getattr(torch.cuda.memory, "host_memory_stats", None)
    stats = {} if stats_of is None else stats_of()
    return {key: value for key, value in stats.items() if "alloc" in key and "current" not in key and "time" not in key}


def _grown(before, after):
    """Each allocation counter's growth from ``before`` to ``after`` (the
    ``freed`` ones left out: they count blocks given back, not taken)."""
    return {key: value - before.get(key, 0) for key, value in after.items() if "free" not in key}


def _not_pinned(address: int) -> None:
    """The driver does not know ``address`` as pinned memory."""
    driver = pytest.importorskip("cuda.bindings.driver", reason="cuda.bindings is not installed")
    error, _ = driver.cuMemHostGetFlags(address)
    assert error != driver.CUresult.CUDA_SUCCESS, f"{address:#x} is pinned"


def _gpu_model_with_layers_on_cpu(cpu_model):
    model = copy.deepcopy(cpu_model).cuda()
    model.model.layers.to("cpu")
    return model


def test_offloaded_layers_give_the_gpu_models_logits(cpu_model, inputs, reference):
    model = _gpu_model_with_layers_on_cpu(cpu_model)
    params = {name: p for name, p in model.named_parameters()}
    before = {name: p.detach().clone() for name, p in model.model.layers.named_parameters()}
    pinned = _pinned_allocations()
    off = hostcopy.offload.offload(model.model.layers, prefetch=2, model=model, register="never")
    assert off.tensor_bytes <= off.host_bytes <= 1.05 * off.tensor_bytes
    logits = [_logits(model, inputs) for _ in range(3)]  # the first forward learns the order; the next ones wrap
    assert _pinned_allocations() == pinned, "torch's host allocator pinned memory"
    assert all(torch.equal(each, reference) for each in logits)
    assert off.ring.misses == 1
    for host in off.hosts:
        _not_pinned(host.ctypes.data)
    for layer in model.model.layers:
        assert all(p.device.type == "cpu" for p in layer.parameters())
    off.remove()
    assert {name: p for name, p in model.named_parameters()} == params  # the same Parameter objects
    for name, p in model.model.layers.named_parameters():
        assert p.device.type == "cpu" and torch.equal(p, before[name])
    model.model.layers.cuda()
    assert torch.equal(_logits(model, inputs), reference)


def test_prefetch_depths_and_ring_sizes_give_the_same_logits(cpu_model, inputs, reference):
    model = _gpu_model_with_layers_on_cpu(cpu_model)
    for prefetch, slots in ((0, None), (1, None), (3, None), (1, 4)):
        with hostcopy.offload.offload(model.model.layers, prefetch=prefetch, slots=slots):
            assert torch.equal(_logits(model, inputs), reference)
            assert torch.equal(_logits(model, inputs), reference)


def _pinned_by_torch(region) -> bool:
    """Whether torch sees a ``hostcopy.empty`` region as pinned (memory
    registered with the driver is)."""
    return bool(torch.from_numpy(region).is_pinned())


@pytest.mark.parametrize("register", ["now", "background"])
def test_registered_regions_give_the_logits_of_staged_ones_bit_equal(cpu_model, inputs, reference, register):
    model = _gpu_model_with_layers_on_cpu(cpu_model)
    logits = {}
    for word in ("never", register):
        pinned = _pinned_allocations()
        with hostcopy.offload.offload(model.model.layers, prefetch=2, model=model, register=word) as off:
            # With "background", the first forward may run while the regions
            # register: each upload direct for what is registered, staged for the rest.
            logits[word] = [_logits(model, inputs)]
            told = [hostcopy.wait_registered(host) for host in off.hosts]
            logits[word] += [_logits(model, inputs) for _ in range(2)]
            seen_pinned = [_pinned_by_torch(host) for host in off.hosts]
            sizes = [host.nbytes for host in off.hosts]
        assert _pinned_allocations() == pinned, "torch's host allocator pinned memory"
        if word == "never":
            assert told == [hostcopy.Registration(0, size, None, True) for size in sizes]
            assert not any(seen_pinned)
        else:
            assert told == [hostcopy.Registration(size, size, None, True) for size in sizes], (
                f"not registered: {told} (the locked-memory limit, ulimit -l?)"
            )
            assert all(each.complete for each in told) and all(seen_pinned)
    for word, each in logits.items():
        assert all(torch.equal(one, reference) for one in each), word


def test_use_hostcopy_registered_now_gives_the_same_logits(cpu_model, inputs, reference):
    model = copy.deepcopy(cpu_model).cuda()
    for layer in model.model.layers:
        accelerate.cpu_offload(layer, execution_device=torch.device("cuda", 0))
    handle = hostcopy.offload.accelerate.use_hostcopy(model, register="now")
    hosts = handle.offloader.hosts
    assert len(hosts) == LAYERS
    told = [hostcopy.registration(host) for host in hosts]
    assert all(each.complete for each in told), f"not registered: {told} (the locked-memory limit, ulimit -l?)"
    assert all(_pinned_by_torch(host) for host in hosts)
    logits = [_logits(model, inputs) for _ in range(2)]
    assert all(torch.equal(each, reference) for each in logits)
    remove_hook_from_module(model, recurse=True)
    assert torch.equal(_logits(model, inputs), reference)


def test_hooks_come_off(cpu_model):
    model = _gpu_model_with_layers_on_cpu(cpu_model)
    hooks = [(dict(layer._forward_pre_hooks), dict(layer._forward_hooks)) for layer in model.model.layers]
    off = hostcopy.offload.offload(model.model.layers, model=model)
    assert all(len(layer._forward_pre_hooks) == len(before[0]) + 1 for layer, before in zip(model.model.layers, hooks))
    off.remove()
    assert [(dict(layer._forward_pre_hooks), dict(layer._forward_hooks)) for layer in model.model.layers] == hooks
    assert not model._forward_hooks


def test_an_exception_inside_a_forward_leaves_no_upload_in_flight(cpu_model, inputs, reference):
    model = _gpu_model_with_layers_on_cpu(cpu_model)
    off = hostcopy.offload.offload(model.model.layers, prefetch=3, model=model)
    failing = model.model.layers[1].mlp
    original = failing.forward

    def fail(*args, **kwargs):
        raise RuntimeError("a failure inside the second decoder layer")

    failing.forward = fail
    with pytest.raises(RuntimeError, match="second decoder layer"):
        _logits(model, inputs)
    assert off.in_flight() == 0
    assert all(not slot.in_use for slot in off.ring.slots)
    for layer in model.model.layers:
        assert all(p.device.type == "cpu" for p in layer.parameters())
    failing.forward = original
    assert torch.equal(_logits(model, inputs), reference)
    off.remove()


def test_autograd_through_offloaded_weights_is_refused(cpu_model, inputs):
    model = _gpu_model_with_layers_on_cpu(cpu_model)
    with hostcopy.offload.offload(model.model.layers):
        with pytest.raises(hostcopy.OffloadError, match="requires grad"):
            model(inputs)


def test_accelerate_cpu_offload_through_hostcopy(cpu_model, inputs, reference):
    model = copy.deepcopy(cpu_model).cuda()
    for layer in model.model.layers:
        accelerate.cpu_offload(layer, execution_device=torch.device("cuda", 0))
    assert torch.equal(_logits(model, inputs), reference)  # accelerate's own path
    pinned = _pinned_allocations()
    handle = hostcopy.offload.accelerate.use_hostcopy(model, register="never")
    assert handle.groups == [f"model.layers.{i}" for i in range(LAYERS)]
    assert handle.skipped == []
    logits = [_logits(model, inputs) for _ in range(2)]
    assert _pinned_allocations() == pinned
    assert all(torch.equal(each, reference) for each in logits)
    for host in handle.offloader.hosts:
        _not_pinned(host.ctypes.data)
    # Outside a forward the offloaded weights are on the meta device, as accelerate keeps them.
    assert all(p.device.type == "meta" for p in model.model.layers.parameters())
    # accelerate's own removal undoes both: the weights back on their device.
    remove_hook_from_module(model, recurse=True)
    assert not any(hasattr(m, "_hf_hook") for m in model.modules())
    assert all(p.device.type == "cuda" for p in model.parameters())
    assert handle.in_flight() == 0
    assert torch.equal(_logits(model, inputs), reference)


def test_use_hostcopy_removed_gives_accelerate_its_hooks_back(cpu_model, inputs, reference):
    model = copy.deepcopy(cpu_model).cuda()
    for layer in model.model.layers:
        accelerate.cpu_offload(layer, execution_device=torch.device("cuda", 0))
    hooks = {name: m._hf_hook for name, m in model.named_modules() if hasattr(m, "_hf_hook")}
    handle = hostcopy.offload.accelerate.use_hostcopy(model)
    assert {name: m._hf_hook for name, m in model.named_modules() if hasattr(m, "_hf_hook")} != hooks
    handle.remove()
    assert {name: m._hf_hook for name, m in model.named_modules() if hasattr(m, "_hf_hook")} == hooks
    assert torch.equal(_logits(model, inputs), reference)  # accelerate's copies, from the shared host regions


def test_dispatch_model_device_map_through_hostcopy(cpu_model, inputs, reference):
    model = copy.deepcopy(cpu_model)
    device_map = {"model.embed_tokens": 0, "model.rotary_emb": 0, "model.norm": 0, "lm_head": 0}
    for i in range(LAYERS):
        device_map[f"model.layers.{i}"] = 0 if i == 0 else "cpu"
    model = accelerate.dispatch_model(model, device_map=device_map, main_device=0)
    assert torch.equal(_logits(model, inputs), reference)
    handle = hostcopy.offload.accelerate.use_hostcopy(model)
    assert handle.groups == [f"model.layers.{i}" for i in range(1, LAYERS)]
    for _ in range(2):
        assert torch.equal(_logits(model, inputs), reference)
    # An exception inside an offloaded layer leaves no upload in flight.
    mlp = model.model.layers[2].mlp
    original = mlp.forward
    mlp.forward = lambda *a, **k: (_ for _ in ()).throw(RuntimeError("layer 2 failed"))
    with pytest.raises(RuntimeError, match="layer 2 failed"):
        _logits(model, inputs)
    assert handle.in_flight() == 0
    mlp.forward = original
    assert torch.equal(_logits(model, inputs), reference)
    remove_hook_from_module(model, recurse=True)
    assert not any(hasattr(m, "_hf_hook") for m in model.modules())
    assert all(p.device.type == "cpu" for p in model.model.layers[1].parameters())


def test_host_kv_cache_generates_dynamic_caches_tokens(cpu_model):
    model = copy.deepcopy(cpu_model).cuda()
    generator = torch.Generator().manual_seed(2)
    prompt = torch.randint(0, 512, (2, 40), generator=generator).cuda()
    settings = dict(max_new_tokens=48, do_sample=False, min_new_tokens=48)
    expected = model.generate(prompt, past_key_values=transformers.DynamicCache(config=model.config), **settings)
    # generate reads GPU scalars itself (its stopping checks), each one a
    # 1-byte pinned block: the host cache may take exactly as many as a
    # second DynamicCache generate of the same tokens, and nothing more.
    start = _pinned_allocations()
    again = model.generate(prompt, past_key_values=transformers.DynamicCache(config=model.config), **settings)
    middle = _pinned_allocations()
    cache = hostcopy.offload.transformers.HostOffloadedCache(config=model.config, register="never", counters=True)
    tokens = model.generate(prompt, past_key_values=cache, **settings)
    end = _pinned_allocations()
    assert _grown(middle, end) == _grown(start, middle), "the host cache pinned memory beyond generate's own"
    assert torch.equal(again, expected) and torch.equal(tokens, expected)
    assert cache.get_seq_length() == tokens.shape[1] - 1
    # At most one upload a layer per decoded token (and the next token's
    # first ones, queued ahead); each position written to the host once.
    decoded = settings["max_new_tokens"] - 1  # the first new token comes from the prefill's forward
    assert 0 < cache.counters.uploads <= LAYERS * decoded + 2
    layer = cache.layers[0]
    assert layer.keys.device.type == "cpu" and layer.keys.shape[-2] == cache.get_seq_length()
    for each in cache.layers:
        each.keys  # the positions still on the device go to the host
    assert cache.counters.write_bytes == LAYERS * cache.get_seq_length() * prompt.shape[0] * config_kv_row(model.config)
    _not_pinned(layer.host.ctypes.data)
    cache.drain()
    # transformers' own offloaded cache, for the same tokens.
    offloaded = model.generate(prompt, cache_implementation="offloaded", **settings)
    assert torch.equal(offloaded, expected)


def config_kv_row(config):
    """Bytes of one position's keys and values of one sequence in one layer (bf16)."""
    head_dim = config.hidden_size // config.num_attention_heads
    return config.num_key_value_heads * 2 * head_dim * 2


@pytest.mark.parametrize("prefetch, tail, group", [(1, 1, 1), (1, 4, 1), (3, 5, 1), (2, 1000, 1), (2, 4, 2), (1, 3, 3)])
def test_host_kv_cache_gives_the_same_tokens_whatever_its_depth_device_part_and_group(cpu_model, prefetch, tail, group):
    model = copy.deepcopy(cpu_model).cuda()
    generator = torch.Generator().manual_seed(3)
    prompt = torch.randint(0, 512, (2, 17), generator=generator).cuda()
    settings = dict(max_new_tokens=21, do_sample=False, min_new_tokens=21)
    expected = model.generate(prompt, past_key_values=transformers.DynamicCache(config=model.config), **settings)
    cache = hostcopy.offload.transformers.HostOffloadedCache(
        config=model.config, prefetch=prefetch, tail=tail, group=group
    )
    assert torch.equal(model.generate(prompt, past_key_values=cache, **settings), expected)
    # The keys in host memory are the ones DynamicCache holds.
    reference = transformers.DynamicCache(config=model.config)
    model.generate(prompt, past_key_values=reference, **settings)
    for ours, theirs in zip(cache.layers, reference.layers):
        assert torch.equal(ours.keys, theirs.keys.cpu()) and torch.equal(ours.values, theirs.values.cpu())


@pytest.mark.parametrize(
    "stager_options, group",
    [(None, 1), ({"workers": 4}, 1), ({"workers": 2, "chunk": 1 << 20}, 1), (None, 2), (None, LAYERS)],
    ids=["shared", "4 workers", "2 workers, 1 MiB chunks", "shared, group 2", "shared, one group"],
)
def test_host_kv_cache_gives_dynamic_caches_logits_bit_exact_on_any_stager(cpu_model, stager_options, group):
    # Teacher-forced: every step's logits, not only the argmax, so that an
    # upload that brought back wrong bytes cannot hide behind a clear
    # argmax. 8 sequences of 960 positions: a layer's upload is 4 MiB in
    # 32 blocks (a group's, as many of those as it has layers); with a
    # 16-position device part, decode steps write too.
    model = copy.deepcopy(cpu_model).cuda()
    generator = torch.Generator().manual_seed(6)
    tokens = torch.randint(0, 512, (8, 1000), generator=generator).cuda()
    stager = None if stager_options is None else hostcopy.Stager(0, **stager_options)
    caches = {
        "dynamic": transformers.DynamicCache(config=model.config),
        "host": hostcopy.offload.transformers.HostOffloadedCache(
            config=model.config, tail=16, stager=stager, group=group, counters=True
        ),
    }
    logits = {}
    with torch.inference_mode():
        for name, cache in caches.items():
            steps = [model(tokens[:, :960], past_key_values=cache, use_cache=True).logits[:, -1]]
            for at in range(960, 1000):
                steps.append(model(tokens[:, at : at + 1], past_key_values=cache, use_cache=True).logits[:, -1])
            logits[name] = torch.stack(steps)
    uploads = caches["host"].counters.uploads
    assert uploads >= -(-LAYERS // group) * 40 and caches["host"].counters.writes > LAYERS
    if group > 1:
        assert uploads < LAYERS * 40, "the layers of a group came back in one call"
    differing = (logits["host"] != logits["dynamic"]).any(dim=-1).any(dim=-1).nonzero().flatten().tolist()
    assert differing == [], f"steps whose logits differ from DynamicCache's: {differing}"
    caches["host"].drain()


def _region_hosts(cache):
    """The host memory of each region of ``cache`` (a group of layers shares one)."""
    return [region.host for region in dict.fromkeys(layer.region for layer in cache.layers)]


def test_host_kv_cache_registered_now_gives_the_logits_of_a_staged_one_bit_exact(cpu_model):
    # Teacher-forced, every step's logits: a prefill of 200 positions
    # (regions of 320), a chunk of 200 that makes them again larger (640),
    # then single tokens that read them back, a device part of 16 written
    # as it fills.
    model = copy.deepcopy(cpu_model).cuda()
    generator = torch.Generator().manual_seed(7)
    tokens = torch.randint(0, 512, (4, 440), generator=generator).cuda()
    caches = {
        word: hostcopy.offload.transformers.HostOffloadedCache(
            config=model.config, tail=16, register=word, counters=True
        )
        for word in ("never", "now")
    }
    logits, regions = {}, {}
    with torch.inference_mode():
        for word, cache in caches.items():
            steps = [model(tokens[:, :200], past_key_values=cache, use_cache=True).logits[:, -1]]
            first = _region_hosts(cache)
            steps.append(model(tokens[:, 200:400], past_key_values=cache, use_cache=True).logits[:, -1])
            grown = _region_hosts(cache)
            for at in range(400, 440):
                steps.append(model(tokens[:, at : at + 1], past_key_values=cache, use_cache=True).logits[:, -1])
            logits[word] = torch.stack(steps)
            regions[word] = (first, grown)
            cache.drain()
    for word, (first, grown) in regions.items():
        assert len(first) == len(grown) == -(-LAYERS // hostcopy.offload.transformers.GROUP)
        assert all(new is not old for new, old in zip(grown, first)), "the chunk grew every region"
        assert caches[word].layers[0].capacity == 640
        for region in first + grown:
            told = hostcopy.registration(region)
            if word == "never":
                assert told == hostcopy.Registration(0, region.nbytes, None, True)
                assert not _pinned_by_torch(region)
            else:
                assert told == hostcopy.Registration(region.nbytes, region.nbytes, None, True), (
                    f"not registered: {told} (the locked-memory limit, ulimit -l?)"
                )
                assert _pinned_by_torch(region)
    differing = (logits["now"] != logits["never"]).any(dim=-1).any(dim=-1).nonzero().flatten().tolist()
    assert differing == [], f"steps whose logits differ between registered and staged regions: {differing}"
    assert caches["now"].counters.uploads >= LAYERS // 2 * 40


def test_refused_offload_arguments_are_offload_argument_errors(cpu_model):
    model = _gpu_model_with_layers_on_cpu(cpu_model)
    for modules, prefetch, cls in (
        ("model.layers", 2, hostcopy.OffloadArgumentTypeError),
        ([model.model.layers[0], "not a module"], 2, hostcopy.OffloadArgumentTypeError),
        (model.model.layers, -1, hostcopy.OffloadArgumentError),
        (model.model.layers, 2.0, hostcopy.OffloadArgumentTypeError),
    ):
        with pytest.raises(cls) as refused:
            hostcopy.offload.offload(modules, prefetch=prefetch)
        assert isinstance(refused.value, ValueError) and isinstance(refused.value, hostcopy.Error)
    with pytest.raises(hostcopy.OffloadArgumentError, match="CUDA device"):
        hostcopy.offload.offload(model.model.layers, device="cpu")
    with pytest.raises(hostcopy.OffloadArgumentError, match="register") as refused:
        hostcopy.offload.offload(model.model.layers, register="always")
    assert refused.value.argument == "register"
    assert all(not layer._forward_pre_hooks for layer in model.model.layers), "nothing hooked"
    dispatched = copy.deepcopy(cpu_model).cuda()
    for layer in dispatched.model.layers:
        accelerate.cpu_offload(layer, execution_device=torch.device("cuda", 0))
    hooks = {name: m._hf_hook for name, m in dispatched.named_modules() if hasattr(m, "_hf_hook")}
    for options, cls in (
        ({"groups": "model.layers"}, hostcopy.OffloadArgumentTypeError),
        ({"groups": ["model.nothing"]}, hostcopy.OffloadArgumentError),
        ({"prefetch": True}, hostcopy.OffloadArgumentTypeError),
        ({"prefetch": 1, "slots": 1}, hostcopy.OffloadArgumentError),
        ({"register": "pinned"}, hostcopy.OffloadArgumentError),
        ({"register": True}, hostcopy.OffloadArgumentTypeError),
    ):
        with pytest.raises(cls):
            hostcopy.offload.accelerate.use_hostcopy(dispatched, **options)
        # Refused before any hook was replaced.
        assert {name: m._hf_hook for name, m in dispatched.named_modules() if hasattr(m, "_hf_hook")} == hooks
    with pytest.raises(hostcopy.OffloadArgumentError, match="prefetch"):
        hostcopy.offload.transformers.HostOffloadedCache(config=dispatched.config, prefetch=0)
    with pytest.raises(hostcopy.OffloadArgumentError, match="register"):
        hostcopy.offload.transformers.HostOffloadedCache(config=dispatched.config, register="sometimes")


def test_host_kv_cache_without_a_config_offloads_every_layer(cpu_model):
    model = copy.deepcopy(cpu_model).cuda()
    prompt = torch.arange(7, 7 + 30).reshape(1, 30).cuda()
    settings = dict(max_new_tokens=20, do_sample=False, min_new_tokens=20)
    expected = model.generate(prompt, **settings)
    cache = hostcopy.offload.transformers.HostOffloadedCache(prefetch=2)
    assert torch.equal(model.generate(prompt, past_key_values=cache, **settings), expected)
    assert len(cache.layers) == LAYERS
    assert all(isinstance(layer, hostcopy.offload.transformers.HostLayer) for layer in cache.layers)
