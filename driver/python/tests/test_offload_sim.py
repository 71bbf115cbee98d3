"""The weights offloader's schedule (hostcopy.offload) against the
simulated driver, without torch: stand-in modules, parameters and events
around real hostcopy transfers into simulated device memory.

What is pinned down: every forward reads its own group's bytes; uploads
are queued ``prefetch`` groups ahead, each into a slot whose previous
reader has left (its stream waits for the event recorded after that
forward); an exception inside a forward leaves no upload in flight;
removal puts every tensor and hook back; write-back copies only what a
forward changed.
"""

import contextlib
import importlib.util
import itertools
import pathlib
import sys
import types

import pytest

import hostcopy
from conftest import pattern

torch_was_imported = "torch" in sys.modules
import hostcopy.offload as offload  # noqa: E402
from hostcopy.offload import Entry, Offloader  # noqa: E402
from hostcopy.offload._ring import Ring  # noqa: E402


def test_importing_the_offload_package_imports_no_torch():
    assert ("torch" in sys.modules) == torch_was_imported


class Log:
    def __init__(self):
        self.items = []

    def add(self, *item):
        self.items.append(item)


class Event:
    def __init__(self, name):
        self.name = name


class SimDevice:
    """``_ring.Device`` over the simulated driver; events are names in the log."""

    def __init__(self, sim, ordinal, log):
        self.sim, self.ordinal, self.log = sim, ordinal, log
        self.compute = sim.stream(ordinal)
        self.count = 0

    def buffer(self, nbytes):
        return self.sim.native.SimDeviceArray(self.ordinal, nbytes, None)

    def memory(self, buffer):
        return buffer

    def stream(self):
        return self.sim.stream(self.ordinal)

    def current_stream(self):
        return self.compute

    def event(self):
        self.count += 1
        return Event(f"event{self.count}")

    def record(self, event, stream):
        self.log.add("record", event.name, stream.handle)

    def wait(self, stream, event):
        self.log.add("wait", stream.handle, event.name)


class Param:
    def __init__(self, payload):
        self.payload = payload
        self.data = payload
        self.version = 0


class HostView:
    def __init__(self, host, entry):
        self.host, self.offset, self.nbytes = host, entry.offset, entry.nbytes

    def read(self):
        return self.host[self.offset : self.offset + self.nbytes].tobytes()


class DeviceView:
    def __init__(self, sim, ordinal, buffer, entry):
        self.sim, self.ordinal, self.buffer = sim, ordinal, buffer
        self.offset, self.nbytes = entry.offset, entry.nbytes

    def read(self):
        self.sim.drain(self.ordinal)
        return self.buffer.read()[self.offset : self.offset + self.nbytes]

    def write(self, data):
        whole = bytearray(self.buffer.read())
        whole[self.offset : self.offset + len(data)] = data
        self.buffer.write(bytes(whole))


class Handle:
    def __init__(self, hooks, hook):
        self.hooks, self.hook = hooks, hook

    def remove(self):
        self.hooks.remove(self.hook)


class Module:
    """A stand-in for a torch module: parameters, forward pre-hooks and
    forward hooks that torch runs even when the forward raises (inside its
    ``except`` clause, as ``always_call`` hooks are)."""

    def __init__(self, name, sizes, seed, log, fail=False):
        self.name, self.log, self.fail = name, log, fail
        self.params = {f"w{i}": Param(pattern(size, seed + i)) for i, size in enumerate(sizes)}
        self.pre, self.post = [], []
        self.seen = []
        self.change = None

    def __call__(self):
        for hook in list(self.pre):
            hook(self, ())
        try:
            self.log.add("forward", self.name)
            self.seen.append({name: p.data.read() for name, p in self.params.items()})
            if self.change is not None:
                name, data = self.change
                self.params[name].data.write(data)
                self.params[name].version += 1
            if self.fail:
                raise ValueError(f"{self.name} failed")
        except Exception:
            for hook in list(self.post):
                hook(self, (), None)
            raise
        for hook in list(self.post):
            hook(self, (), "out")


class SimKit:
    def __init__(self, sim, ordinal, log):
        self.sim, self.ordinal = sim, ordinal
        self.device = SimDevice(sim, ordinal, log)

    def entries(self, module, buffers):
        return [Entry(module, name, "parameter", p, len(p.payload)) for name, p in module.params.items()]

    def fill(self, host, entry):
        entry.origin = "cpu"
        host[entry.offset : entry.offset + entry.nbytes] = list(entry.tensor.payload)

    def host_view(self, host, entry):
        return HostView(host, entry)

    def device_view(self, buffer, entry):
        return DeviceView(self.sim, self.ordinal, buffer, entry)

    def place(self, entry, value):
        entry.owner.params[entry.name].data = value

    def restored(self, entry):
        return entry.resting

    def version(self, entry):
        return entry.owner.params[entry.name].version

    def refuse_autograd(self, entries, what):
        pass

    def hook(self, module, before, after):
        module.pre.append(before)
        module.post.append(after)
        return [Handle(module.pre, before), Handle(module.post, after)]


SIZES = [(3000, 17, 512), (4096, 1), (100, 2000, 3), (5000,), (8, 8, 8, 8)]


def make(sim, device, count=len(SIZES), fail_at=None):
    log = Log()
    modules = [Module(f"m{i}", SIZES[i % len(SIZES)], 10 * i, log, fail=i == fail_at) for i in range(count)]
    return log, modules, SimKit(sim, device, log)


def run(modules):
    for module in modules:
        module()


def assert_each_forward_saw_its_own_bytes(modules, forwards):
    for module in modules:
        assert len(module.seen) == forwards
        for seen in module.seen:
            assert seen == {name: p.payload for name, p in module.params.items()}


def uploads(offloader, log):
    def on_upload(group, slot):
        log.add("upload", group, slot.index)

    offloader.ring.on_upload = on_upload


@pytest.mark.parametrize("prefetch", [0, 1, 2, 3])
def test_each_forward_reads_its_groups_bytes_through_the_ring(sim, numpy, device, prefetch):
    log, modules, kit = make(sim, device, count=7)
    off = Offloader(kit, modules, prefetch=prefetch)
    assert len(off.ring.slots) == prefetch + 1
    for _ in range(3):
        run(modules)
    assert_each_forward_saw_its_own_bytes(modules, 3)
    # Between forwards, the parameters are views of the host regions.
    for module in modules:
        for p in module.params.values():
            assert isinstance(p.data, HostView) and p.data.read() == p.payload
    off.remove()
    sim.assert_no_violations(device)


@pytest.mark.parametrize("prefetch", [1, 2, 3])
def test_uploads_run_prefetch_groups_ahead_and_wrap_to_the_next_forward(sim, numpy, device, prefetch):
    log, modules, kit = make(sim, device, count=6)
    off = Offloader(kit, modules, prefetch=prefetch)
    uploads(off, log)
    run(modules)
    run(modules)
    events = log.items
    forwards = [i for i, item in enumerate(events) if item[0] == "forward"]
    for number, at in enumerate(forwards[len(modules) :]):  # the second forward: prediction learned
        group = number % len(modules)
        queued = [item[1] for item in events[:at] if item[0] == "upload"]
        entered = [item[1] for item in events[:at] if item[0] == "forward"]
        ahead = queued[len(entered) :]  # uploaded and not yet read (this group first), in order
        expected = [(group + k) % len(modules) for k in range(prefetch + 1)]
        assert ahead == expected, (group, ahead)
    assert off.ring.misses == 1  # only the very first group was not predicted
    off.remove()


def test_a_slot_is_overwritten_only_after_the_forward_that_read_it(sim, numpy, device):
    log, modules, kit = make(sim, device, count=5)
    off = Offloader(kit, modules, prefetch=2)
    uploads(off, log)
    slots = {slot.index: slot for slot in off.ring.slots}
    streams = {slot.stream.handle: slot.index for slot in off.ring.slots}
    free = {slot.free.name: slot.index for slot in off.ring.slots}
    compute = kit.device.compute.handle
    for _ in range(3):
        run(modules)
    reader = {}  # slot -> the group whose forward read it last, and whether it left
    last_wait = {}
    for item in log.items:
        if item[0] == "wait" and item[1] in streams:
            assert free.get(item[2]) == streams[item[1]], "a slot stream waits for its own slot's free event"
            last_wait[streams[item[1]]] = len(reader)
        elif item[0] == "upload":
            slot = item[2]
            previous = reader.get(slot)
            if previous is not None:
                group, left = previous
                assert left, f"slot {slot} overwritten while group {group}'s forward reads it"
                assert slot in last_wait, "no wait on the slot's free event before its upload"
            reader[slot] = (item[1], True)
        elif item[0] == "forward":
            group = int(item[1][1:])
            slot = next(s for s, (g, _) in reader.items() if g == group)
            reader[slot] = (group, False)
        elif item[0] == "record" and item[2] == compute and item[1] in free:
            slot = free[item[1]]
            group, _ = reader[slot]
            reader[slot] = (group, True)
    assert slots and off.ring.uploads >= 3 * len(modules) - 2
    off.remove()


def test_an_exception_inside_a_forward_leaves_no_upload_in_flight(sim, numpy, device):
    log, modules, kit = make(sim, device, count=5, fail_at=2)
    off = Offloader(kit, modules, prefetch=3)
    with pytest.raises(ValueError, match="m2 failed"):
        run(modules)
    assert off.in_flight() == 0
    assert all(not slot.in_use for slot in off.ring.slots)
    for module in modules:
        for p in module.params.values():
            assert isinstance(p.data, HostView)
    sim.drain(device)
    assert sim.state(device)["queued"] == 0
    # The offloader keeps working after it.
    modules[2].fail = False
    run(modules)
    assert_each_forward_saw_its_own_bytes(modules[:3], 2)
    assert_each_forward_saw_its_own_bytes(modules[3:], 1)
    off.remove()
    sim.assert_no_violations(device)


def test_an_exception_between_groups_drains_through_the_models_hook(sim, numpy, device):
    log, modules, kit = make(sim, device, count=4)
    root = Module("model", [], 99, log)
    off = Offloader(kit, modules, prefetch=2, root=root)
    for hook in list(root.pre):
        hook(root, ())
    run(modules[:2])  # m2 and m3 are queued ahead now
    assert off.in_flight() > 0
    try:
        raise RuntimeError("the model's head failed")
    except RuntimeError:
        for hook in list(root.post):
            hook(root, (), None)
    assert off.in_flight() == 0
    off.remove()


def test_removal_restores_tensors_and_hooks(sim, numpy, device):
    log, modules, kit = make(sim, device, count=4)
    originals = [{name: p for name, p in m.params.items()} for m in modules]
    off = Offloader(kit, modules, prefetch=2)
    assert all(len(m.pre) == 1 and len(m.post) == 1 for m in modules)
    run(modules)
    off.remove()
    off.remove()  # idempotent
    assert all(m.pre == [] and m.post == [] for m in modules)
    for module, params in zip(modules, originals):
        assert module.params == params  # the same parameter objects
        for p in module.params.values():
            assert p.data.read() == p.payload
    assert off.in_flight() == 0 and off.ring.slots == []
    with pytest.raises(hostcopy.OffloadError, match="removed"):
        off.ring.enter(0)


def test_forwards_out_of_the_predicted_order_still_read_their_bytes(sim, numpy, device):
    log, modules, kit = make(sim, device, count=6)
    off = Offloader(kit, modules, prefetch=2)
    for order in ([0, 1, 2, 3, 4, 5], [0, 3, 1, 5, 2, 4], [5, 4, 3, 2, 1, 0], [2, 2, 0]):
        for index in order:
            modules[index]()
    for module in modules:
        for seen in module.seen:
            assert seen == {name: p.payload for name, p in module.params.items()}
    assert off.ring.misses > 1
    off.remove()
    sim.assert_no_violations(device)


def test_groups_that_fit_the_ring_are_uploaded_once(sim, numpy, device):
    log, modules, kit = make(sim, device, count=3)
    off = Offloader(kit, modules, prefetch=2)
    for _ in range(4):
        run(modules)
    assert off.ring.uploads == 3
    assert_each_forward_saw_its_own_bytes(modules, 4)
    off.remove()


def test_write_back_copies_only_what_a_forward_changed(sim, numpy, device):
    log, modules, kit = make(sim, device, count=3)
    off = Offloader(kit, modules, prefetch=1, write_back=True)
    new = bytes(reversed(modules[1].params["w1"].payload))
    modules[1].change = ("w1", new)
    run(modules)
    modules[1].change = None
    host = off.hosts[1]
    entries = {e.name: e for e in off.entries[1]}
    w1, w0 = entries["w1"], entries["w0"]
    assert host[w1.offset : w1.offset + w1.nbytes].tobytes() == new
    assert host[w0.offset : w0.offset + w0.nbytes].tobytes() == modules[1].params["w0"].payload
    off.remove()


def test_without_write_back_a_forwards_change_is_not_kept(sim, numpy, device):
    log, modules, kit = make(sim, device, count=4)
    off = Offloader(kit, modules, prefetch=1)
    modules[0].change = ("w0", bytes(len(modules[0].params["w0"].payload)))
    run(modules)
    e = off.entries[0][0]
    assert off.hosts[0][e.offset : e.offset + e.nbytes].tobytes() == modules[0].params["w0"].payload
    off.remove()


def test_host_regions_are_pageable_memory_packed_at_the_alignment(sim, numpy, device):
    log, modules, kit = make(sim, device, count=3)
    off = Offloader(kit, modules, prefetch=1)
    for group in off.entries:
        for entry in group:
            assert entry.offset % offload.ALIGN == 0
    for index, host in enumerate(off.hosts):
        assert isinstance(host.base.base, hostcopy._native.PageableMemory)
        tensors = sum(e.nbytes for e in off.entries[index])
        assert tensors <= len(host) < tensors + offload.ALIGN * len(off.entries[index])
    off.remove()


def test_a_tensor_in_two_groups_is_refused(sim, numpy, device):
    log, modules, kit = make(sim, device, count=2)
    modules[1].params["w0"] = modules[0].params["w0"]
    with pytest.raises(ValueError, match="tied"):
        Offloader(kit, modules, prefetch=1)


def test_options_are_checked(sim, numpy, device):
    log, modules, kit = make(sim, device, count=2)
    with pytest.raises(ValueError, match="prefetch"):
        Offloader(kit, modules, prefetch=-1)
    with pytest.raises(ValueError, match="slots"):
        Offloader(kit, modules, prefetch=2, slots=2)
    with pytest.raises(ValueError, match="no groups"):
        Offloader(kit, [], prefetch=1)


@pytest.mark.parametrize(
    "options, cls, argument",
    [
        ({"prefetch": -1}, hostcopy.OffloadArgumentError, "prefetch"),
        ({"prefetch": True}, hostcopy.OffloadArgumentTypeError, "prefetch"),
        ({"prefetch": 1.0}, hostcopy.OffloadArgumentTypeError, "prefetch"),
        ({"prefetch": "2"}, hostcopy.OffloadArgumentTypeError, "prefetch"),
        ({"prefetch": 2, "slots": 2}, hostcopy.OffloadArgumentError, "slots"),
        ({"prefetch": 1, "slots": 2.5}, hostcopy.OffloadArgumentTypeError, "slots"),
    ],
)
def test_a_refused_option_is_an_offload_argument_error_raised_before_any_memory_is_made(
    sim, numpy, device, options, cls, argument
):
    log, modules, kit = make(sim, device, count=2)
    made = []
    kit.fill = lambda host, entry: made.append(entry)  # the packing step, never reached
    with pytest.raises(cls) as refused:
        Offloader(kit, modules, **options)
    error = refused.value
    assert isinstance(error, hostcopy.Error) and isinstance(error, ValueError)
    assert isinstance(error, TypeError) == (cls is hostcopy.OffloadArgumentTypeError)
    assert error.argument == argument and error.value == options[argument]
    assert made == [] and all(not m.pre and not m.post for m in modules)
    with pytest.raises(cls):
        Ring(RingDevice(), [bytearray(16)], **options)


def test_a_tensor_in_two_groups_and_no_groups_are_offload_argument_errors(sim, numpy, device):
    log, modules, kit = make(sim, device, count=2)
    modules[1].params["w0"] = modules[0].params["w0"]
    with pytest.raises(hostcopy.OffloadArgumentError, match="tied") as refused:
        Offloader(kit, modules, prefetch=1)
    assert refused.value.argument == "groups" and refused.value.value == "w0"
    with pytest.raises(hostcopy.OffloadArgumentError, match="no groups"):
        Offloader(kit, [], prefetch=1)
    with pytest.raises(hostcopy.OffloadArgumentError, match="no groups"):
        Ring(RingDevice(), [], prefetch=1)


@pytest.mark.parametrize("spec", [None, "model.layers", b"layers", {"a": 1}])
def test_a_group_spec_of_a_refused_type_is_an_offload_argument_type_error(spec):
    with pytest.raises(hostcopy.OffloadArgumentTypeError, match="modules") as refused:
        offload.groups_of(spec)
    assert isinstance(refused.value, ValueError) and isinstance(refused.value, TypeError)
    assert refused.value.argument == "modules"


def test_group_specs_as_users_write_them():
    one, two = object(), object()
    assert offload.groups_of([one, two]) == [one, two]
    assert offload.groups_of((one,)) == [one]
    assert offload.groups_of(one) == [one]
    with pytest.raises(hostcopy.OffloadArgumentError, match="no groups"):
        offload.groups_of([])
    with pytest.raises(hostcopy.OffloadArgumentTypeError, match="group 1 is a int, not a module"):
        offload.groups_of([one, 5], lambda group: group is one)


def test_a_group_running_inside_another_never_takes_its_slot(sim, numpy, device):
    log, modules, kit = make(sim, device, count=2)
    outer, inner = modules

    def outer_calling_inner():
        for hook in list(outer.pre):
            hook(outer, ())
        inner()
        outer.seen.append({name: p.data.read() for name, p in outer.params.items()})
        for hook in list(outer.post):
            hook(outer, (), "out")

    off = Offloader(kit, modules, prefetch=0, slots=1)
    with pytest.raises(hostcopy.OffloadError, match="every ring slot"):
        outer_calling_inner()
    off.remove()
    off = Offloader(kit, modules, prefetch=0, slots=2)
    outer_calling_inner()
    assert_each_forward_saw_its_own_bytes(modules, 1)
    off.remove()


# -- a group whose entry fails ---------------------------------------------


class RingDevice:
    """``_ring.Device`` whose buffers and streams are plain objects."""

    def buffer(self, nbytes):
        return bytearray(nbytes)

    def memory(self, buffer):
        return buffer

    def stream(self):
        return object()

    def current_stream(self):
        return "compute"

    def event(self):
        return object()

    def record(self, event, stream):
        pass

    def wait(self, stream, event):
        pass


class Finished:
    def wait(self):
        pass


class FailingUploads:
    """A stager stand-in whose upload number ``fail_at`` raises (a
    ``CudaError``, a closed stager, a ``KeyboardInterrupt``)."""

    def __init__(self, fail_at):
        self.calls, self.fail_at = 0, fail_at

    def copy_to_device(self, dst, src, nbytes, **options):
        self.calls += 1
        if self.calls == self.fail_at:
            raise KeyboardInterrupt("upload interrupted")
        return Finished()


def test_a_group_whose_entry_fails_is_not_left_entered():
    # Group 0's own upload goes; the prefetch of group 1, queued inside
    # enter(0), raises. Left in the active groups with its slot in use,
    # group 0 would be refused as nested by every later forward.
    stager = FailingUploads(fail_at=2)
    ring = Ring(RingDevice(), [bytearray(16) for _ in range(4)], prefetch=2, stager=stager)
    with pytest.raises(KeyboardInterrupt):
        ring.enter(0)
    assert not any(slot.in_use for slot in ring.slots)
    slot = ring.enter(0)
    assert slot.group == 0 and slot.in_use
    ring.leave(0)
    ring.close()


# -- the KV cache's order of operations, with stand-ins for torch ----------


class FakeTensor:
    """A CUDA tensor as the KV cache uses it; ``contiguous()`` of a view
    logs the copy kernel it would queue on the current stream."""

    def __init__(self, log, name, shape, contiguous=True):
        self.log, self.name, self.shape = log, name, tuple(shape)
        self._contiguous = contiguous
        self.dtype, self.device, self.is_cuda = "float16", "cuda:0", True

    def contiguous(self):
        if self._contiguous:
            return self
        self.log.append(("contiguous", self.name))
        return FakeTensor(self.log, f"{self.name} contiguous", self.shape)

    def element_size(self):
        return 2

    def data_ptr(self):
        return 0x10000

    def numel(self):
        count = 1
        for extent in self.shape:
            count *= extent
        return count

    def record_stream(self, stream):
        pass

    def view(self, dtype):
        return self

    def __getitem__(self, index):
        return self


class FakeStream:
    def __init__(self, log, name):
        self.log, self.name = log, name

    def wait_event(self, event):
        self.log.append(("wait_event", self.name, event.name))


class FakeEvent:
    def __init__(self, log, count):
        self.log, self.name = log, f"event{count}"

    def record(self, stream):
        self.log.append(("record", stream.name, self.name))


class FakeTransfer:
    def __init__(self, log, name):
        self.log, self.name = log, name

    def wait(self):
        self.log.append(("wait", self.name))


class FakeStaging:
    def __init__(self, log):
        self.log = log

    def copy_blocks_to_host(self, host, device, blocks, *, stream, blocking):
        self.log.append(("copy_to_host", device.owner.name, stream.name))
        return FakeTransfer(self.log, f"write of {device.owner.name}")

    def copy_blocks_to_device(self, device, host, blocks, *, stream, blocking):
        self.log.append(("copy_to_device", stream.name))
        return FakeTransfer(self.log, "read")


def fake_torch(log):
    torch = types.ModuleType("torch")
    compute = FakeStream(log, "compute")
    streams, events = itertools.count(1), itertools.count(1)
    torch.cuda = types.SimpleNamespace(
        Stream=lambda device: FakeStream(log, f"stream{next(streams)}"),
        Event=lambda: FakeEvent(log, next(events)),
        current_stream=lambda device: compute,
        stream=lambda stream: contextlib.nullcontext(),
    )
    torch.empty = lambda shape, dtype=None, device=None: FakeTensor(log, "empty", shape)
    torch.from_numpy = lambda array: FakeTensor(log, "host", array.shape)
    torch.cat = lambda tensors, dim: FakeTensor(log, "cat", tensors[-1].shape)
    return torch


def fake_cache_utils():
    cache_utils = types.ModuleType("transformers.cache_utils")

    class DynamicLayer:
        is_sliding = False

        def __init__(self):
            self.keys, self.values, self.is_initialized = None, None, False

    class DynamicCache:
        def __init__(self, config=None):
            self.layers, self.layer_class_to_replicate = [], DynamicLayer

    cache_utils.DynamicLayer, cache_utils.DynamicCache = DynamicLayer, DynamicCache
    return cache_utils


@pytest.fixture
def kv_cache(monkeypatch):
    """hostcopy.offload.transformers loaded over stand-ins for torch,
    transformers and the copies (under its own name: the real module
    stays unimported), and the log of what it did."""
    log = []
    cache_utils = fake_cache_utils()
    transformers = types.ModuleType("transformers")
    transformers.cache_utils = cache_utils
    monkeypatch.setitem(sys.modules, "torch", fake_torch(log))
    monkeypatch.setitem(sys.modules, "transformers", transformers)
    monkeypatch.setitem(sys.modules, "transformers.cache_utils", cache_utils)
    path = pathlib.Path(offload.__file__).with_name("transformers.py")
    spec = importlib.util.spec_from_file_location("hostcopy.offload._transformers_with_stand_ins", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "_staging", FakeStaging(log))
    return module, log


def test_new_positions_are_made_contiguous_before_the_event_their_copy_to_the_host_waits_for(kv_cache):
    # The prefill's keys and values are transposed views: .contiguous()
    # queues a copy kernel on the compute stream. The copy to the host
    # waits for an event recorded on the compute stream: recorded before
    # that kernel, it would let the copy read the new tensor unfilled.
    module, log = kv_cache
    cache = module.HostOffloadedCache(prefetch=1)
    keys = FakeTensor(log, "keys", (1, 2, 5, 4), contiguous=False)
    values = FakeTensor(log, "values", (1, 2, 5, 4), contiguous=False)
    cache.update(keys, values, 0)
    copies = [entry for entry in log if entry[0] == "copy_to_host"]
    assert [entry[1] for entry in copies] == ["keys contiguous", "values contiguous"], log
    write_stream = copies[0][2]
    (waited,) = [entry[2] for entry in log if entry[:2] == ("wait_event", write_stream)]
    recorded = log.index(("record", "compute", waited))
    assert log.index(("contiguous", "keys")) < recorded, log
    assert log.index(("contiguous", "values")) < recorded, log
    assert recorded < log.index(copies[0]), log


def test_a_layers_keys_and_values_are_shown_only_once_its_writes_to_the_host_have_landed(kv_cache):
    module, log = kv_cache
    cache = module.HostOffloadedCache(prefetch=1)
    cache.update(FakeTensor(log, "keys", (1, 2, 5, 4)), FakeTensor(log, "values", (1, 2, 5, 4)), 0)
    layer = cache.layers[0]
    assert not [entry for entry in log if entry[0] == "wait"], "the writes are still in flight"
    assert layer.keys is not None
    assert [entry for entry in log if entry[0] == "wait"] == [("wait", "write of keys"), ("wait", "write of values")]
    assert layer.get_seq_length() == 5 and layer.values is not None
    assert len([entry for entry in log if entry[0] == "wait"]) == 2, "waited for once"


def test_a_host_layer_updated_directly_raises_offload_error(kv_cache):
    module, log = kv_cache
    with pytest.raises(hostcopy.OffloadError):
        module.HostLayer().update(FakeTensor(log, "keys", (1, 1, 1, 1)), FakeTensor(log, "values", (1, 1, 1, 1)))
