"""``register=`` of the offload entry points (``offload``, ``use_hostcopy``,
``HostOffloadedCache``) against the simulated driver, without torch: the
weights offloader over test_offload_sim.py's stand-in modules with real
transfers, the KV cache over its stand-ins for torch and transformers
with real ``hostcopy.empty`` memory.

What is pinned down: the words reach every region (registered in the
device's primary context with ``"now"``, complete once waited for with
``"background"``, the default, untouched with ``"never"``), a grown KV
region is registered as the first was, the forwards and the cache read
the same bytes whatever ``register`` says, the ring's uploads of a
registered region are one driver copy where a staged one takes a chunk
each, a region the driver refuses or cannot register stays staged and is
no error, and a bad word is refused before anything is made or hooked.
"""

import gc
import importlib.util
import inspect
import pathlib
import sys
import types

import pytest

import hostcopy
import hostcopy.offload as offload
import hostcopy.offload.accelerate as offload_accelerate
from hostcopy.offload import Offloader
from hostcopy.offload import _registration
from test_offload_sim import KV, FakeStagingModule, FakeTensor, Module, Log, SimKit, fake_cache_utils, fake_torch

#: Staged at every size, a driver copy per chunk.
CHUNK = 64 << 10
#: Each group's tensors: a region of several chunks.
SIZES = [(3 * CHUNK + 100, CHUNK // 2), (2 * CHUNK + 7,), (CHUNK + 4000, 3000, 17)]
#: `CUDA_ERROR_OUT_OF_MEMORY`, as a locked-memory limit is reported.
OUT_OF_MEMORY = 2
REFUSED = "CUDA driver error 2 (CUDA_ERROR_OUT_OF_MEMORY)"
BAD = ["always", "Now", "", " now", b"now", True, None, 1]


def small_stager(device):
    return hostcopy.Stager(device, chunk=CHUNK, buffers=2, workers=1, driver_path_below=0)


def make(sim, device, count=len(SIZES)):
    log = Log()
    modules = [Module(f"m{i}", SIZES[i % len(SIZES)], 7 * i + 1, log) for i in range(count)]
    return modules, SimKit(sim, device, log)


def run(modules, times=2):
    for _ in range(times):
        for module in modules:
            module()


def seen_bytes(modules):
    return [module.seen for module in modules]


# -- the weights offloader ---------------------------------------------------


def test_the_entry_points_register_in_the_background_by_default():
    for entry in (offload.offload, offload_accelerate.use_hostcopy, Offloader):
        assert inspect.signature(entry).parameters["register"].default == "background", entry


@pytest.mark.parametrize("register", ["now", "background"])
def test_the_regions_are_registered_in_the_devices_context_as_asked(sim, numpy, device, register):
    modules, kit = make(sim, device)
    off = Offloader(kit, modules, prefetch=1, register=register)
    assert off.register == register
    read = hostcopy.wait_registered if register == "background" else hostcopy.registration
    told = [read(host) for host in off.hosts]
    assert told == [hostcopy.Registration(host.nbytes, host.nbytes, None, True) for host in off.hosts]
    assert all(each.complete and each.registered > 0 for each in told)
    assert sim.state(device)["registrations"] == len(off.hosts)
    run(modules)
    off.remove()
    # The modules' tensors at rest view the regions; the last view unregisters them.
    del off, modules, kit
    gc.collect()
    assert sim.state(device)["registrations"] == 0
    sim.assert_no_violations(device)


def test_never_leaves_the_regions_unregistered(sim, numpy, device):
    modules, kit = make(sim, device)
    off = Offloader(kit, modules, prefetch=1, register="never")
    for host in off.hosts:
        assert hostcopy.registration(host) == hostcopy.Registration(0, host.nbytes, None, True)
    assert sim.state(device)["registrations"] == 0
    off.remove()


def test_forwards_read_the_same_bytes_registered_or_staged(sim, numpy, device):
    seen = {}
    for register in ("never", "now", "background"):
        modules, kit = make(sim, device, count=5)
        with Offloader(kit, modules, prefetch=2, register=register):
            run(modules, times=3)
        for module in modules:
            assert module.seen == [{name: p.payload for name, p in module.params.items()}] * 3
        seen[register] = seen_bytes(modules)
    assert seen["never"] == seen["now"] == seen["background"]
    sim.assert_no_violations(device)


def test_a_registered_region_is_uploaded_in_one_driver_copy_and_a_staged_one_a_chunk_at_a_time(sim, numpy, device):
    copies = {}
    for register in ("never", "now"):
        modules, kit = make(sim, device)
        stager = small_stager(device)
        off = Offloader(kit, modules, prefetch=1, stager=stager, register=register)
        before = sim.copies_queued(device)
        run(modules)
        off.drain()
        copies[register] = (sim.copies_queued(device) - before, off.ring.uploads, off.hosts)
        off.remove()
        stager.close()
    uploads = copies["now"][1]
    assert uploads == copies["never"][1] >= len(SIZES)
    assert copies["now"][0] == uploads, "one direct copy an upload"
    chunks = [-(-host.nbytes // CHUNK) for host in copies["never"][2]]
    assert copies["never"][0] > uploads and min(chunks) > 1, "staged a chunk at a time"
    sim.assert_no_violations(device)


def test_a_region_the_driver_refuses_stays_staged_and_is_no_error(sim, numpy, device):
    sim.fail_call(device, "cuMemHostRegister_v2", 1, OUT_OF_MEMORY)
    modules, kit = make(sim, device)
    off = Offloader(kit, modules, prefetch=1, register="now")
    first, *rest = [hostcopy.registration(host) for host in off.hosts]
    assert first == hostcopy.Registration(0, off.hosts[0].nbytes, REFUSED, True)
    assert all(told.complete for told in rest)
    run(modules)
    for module in modules:
        assert module.seen[-1] == {name: p.payload for name, p in module.params.items()}
    off.remove()
    sim.assert_no_violations(device)


def test_a_region_with_no_context_to_register_in_is_made_unregistered(sim, numpy, device):
    # A device that does not exist: hostcopy.empty would raise CudaError.
    with pytest.raises(hostcopy.CudaError):
        hostcopy.empty(4096, register="now", device=1 << 20)
    for register in ("now", "background"):
        made = _registration.region(4096, register, 1 << 20)
        assert made.nbytes == 4096 and made.dtype == numpy.uint8
        assert hostcopy.registration(made) == hostcopy.Registration(0, 4096, None, True)


@pytest.mark.parametrize("register", BAD)
def test_a_bad_register_is_refused_before_any_memory_is_made_or_hook_placed(sim, numpy, device, register):
    modules, kit = make(sim, device)
    made = []
    kit.fill = lambda host, entry: made.append(entry)  # the packing step, never reached
    cls = hostcopy.OffloadArgumentError if isinstance(register, str) else hostcopy.OffloadArgumentTypeError
    with pytest.raises(cls) as refused:
        Offloader(kit, modules, register=register)
    error = refused.value
    assert isinstance(error, ValueError) and isinstance(error, hostcopy.Error)
    assert isinstance(error, TypeError) == (cls is hostcopy.OffloadArgumentTypeError)
    assert error.argument == "register" and error.value is register
    assert '"never", "background", "now"' in str(error)
    assert made == [] and all(not m.pre and not m.post for m in modules)


@pytest.mark.parametrize("register", ["always", True])
def test_offload_and_use_hostcopy_refuse_a_bad_register_before_looking_at_the_model(register):
    # Neither torch nor accelerate is needed to refuse it: nothing was looked at.
    with pytest.raises(hostcopy.OffloadArgumentError) as refused:
        offload.offload(object(), register=register)
    assert refused.value.argument == "register"
    with pytest.raises(hostcopy.OffloadArgumentError) as refused:
        offload_accelerate.use_hostcopy(object(), register=register)
    assert refused.value.argument == "register"


# -- the KV cache, with stand-ins for torch ----------------------------------


@pytest.fixture
def kv(monkeypatch, numpy):
    """hostcopy.offload.transformers over test_offload_sim.py's stand-ins
    for torch, transformers and the copies; its host memory is real."""
    log = []
    cache_utils = fake_cache_utils()
    transformers = types.ModuleType("transformers")
    transformers.cache_utils = cache_utils
    monkeypatch.setitem(sys.modules, "torch", fake_torch(log))
    monkeypatch.setitem(sys.modules, "transformers", transformers)
    monkeypatch.setitem(sys.modules, "transformers.cache_utils", cache_utils)
    path = pathlib.Path(offload.__file__).with_name("transformers.py")
    spec = importlib.util.spec_from_file_location("hostcopy.offload._transformers_registered_with_stand_ins", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    staging = FakeStagingModule(log)
    monkeypatch.setattr(module, "_staging", staging)
    return KV(module, log, sys.modules["torch"], staging, numpy)


def decode(kv, device, caches, layers, steps):
    """The same new keys and values (on the test's device) through every
    cache of ``caches``, ``steps`` new positions at a time; what each cache
    returned, per cache."""
    returned = [[] for _ in caches]
    for count in steps:
        for index in range(layers):
            states = [FakeTensor(state.array, f"cuda:{device}", kv.log) for state in kv.states(count)]
            for cache, got in zip(caches, returned):
                keys, values = cache.update(*states, index)
                got.append((keys.array.copy(), values.array.copy()))
    return returned


def regions(cache):
    return list(dict.fromkeys(layer.region for layer in cache.layers))


def test_the_cache_registers_its_regions_in_the_background_by_default(sim, device, kv):
    assert inspect.signature(kv.module.HostOffloadedCache).parameters["register"].default == "background"
    cache = kv.module.HostOffloadedCache(tail=2)
    assert cache.register == "background"
    decode(kv, device, [cache], 4, [5, 1, 1])
    assert len(regions(cache)) == 2
    for region in regions(cache):
        assert hostcopy.wait_registered(region.host).complete


def test_the_cache_registers_now_or_never_as_asked_and_returns_the_same_keys(sim, device, kv):
    caches = [kv.module.HostOffloadedCache(prefetch=1, tail=2, register=word) for word in ("never", "now")]
    never, now = caches
    returned = decode(kv, device, caches, 3, [6, 1, 1, 1, 4, 1])
    assert len(returned[0]) == len(returned[1]) > 0
    for ours, theirs in zip(*returned):
        kv.np.testing.assert_array_equal(ours[0], theirs[0])
        kv.np.testing.assert_array_equal(ours[1], theirs[1])
    for first, second in zip(never.layers, now.layers):
        # Read first: the positions on the device go to the host.
        kv.np.testing.assert_array_equal(first.keys.array, second.keys.array)
        kv.np.testing.assert_array_equal(first.values.array, second.values.array)
        assert first.host.tobytes() == second.host.tobytes()
        assert hostcopy.registration(first.host) == hostcopy.Registration(0, first.region.host.nbytes, None, True)
        told = hostcopy.registration(second.host)
        assert told.complete and told.registered == second.region.host.nbytes > 0


def test_a_grown_region_is_registered_as_the_first_was(sim, device, kv):
    cache = kv.module.HostOffloadedCache(prefetch=1, tail=2, group=2, register="now")
    decode(kv, device, [cache], 2, [300, 1])
    first, second = cache.layers
    old = first.region.host
    assert first.capacity == 512 and hostcopy.registration(old).complete
    decode(kv, device, [cache], 2, [250])  # 551 positions: a larger region, for both
    new = first.region.host
    assert first.capacity == second.capacity == 1024 and new is not old
    assert hostcopy.registration(new) == hostcopy.Registration(new.nbytes, new.nbytes, None, True)
    assert hostcopy.registration(second.host).complete


def test_a_cache_region_the_driver_refuses_stays_staged_and_is_no_error(sim, device, kv):
    sim.fail_call(device, "cuMemHostRegister_v2", 1, OUT_OF_MEMORY)
    caches = [kv.module.HostOffloadedCache(tail=2, group=1, register=word) for word in ("now", "never")]
    returned = decode(kv, device, caches, 2, [5, 1, 1])
    told = [hostcopy.registration(layer.host) for layer in caches[0].layers]
    assert told[0].refused == REFUSED and told[0].registered == 0 and told[1].complete
    for ours, theirs in zip(*returned):
        kv.np.testing.assert_array_equal(ours[0], theirs[0])


@pytest.mark.parametrize("register", BAD)
def test_the_cache_refuses_a_bad_register_when_made(kv, register):
    cls = hostcopy.OffloadArgumentError if isinstance(register, str) else hostcopy.OffloadArgumentTypeError
    with pytest.raises(cls) as refused:
        kv.module.HostOffloadedCache(register=register)
    assert refused.value.argument == "register" and refused.value.value is register
    with pytest.raises(cls):
        kv.module.HostLayer(register=register)
