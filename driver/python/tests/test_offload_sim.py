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

import collections
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
from hostcopy.offload import _ring  # noqa: E402
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


def test_a_ring_looks_up_the_shared_stager_once(monkeypatch):
    uploads = FailingUploads(fail_at=0)
    lookups = []
    monkeypatch.setattr(_ring._staging, "default_stager_of", lambda memory, side: lookups.append(side) or uploads)
    ring = Ring(RingDevice(), [bytearray(16) for _ in range(4)], prefetch=2)
    for group in range(4):
        ring.enter(group)
        ring.leave(group)
    assert uploads.calls >= 4 and lookups == ["dst"]
    ring.close()


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


# -- the KV cache, with stand-ins for torch ----------------------------------
#
# The stand-ins hold real bytes (numpy arrays, "device" ones included) and
# the host memory is real hostcopy.empty memory; the copies are queued as
# the stager would run them: an upload when the stream that waits for its
# event runs on (``wait_event``) or when it is waited for, a write to the
# host only when it is waited for. So a cache that reads host memory
# before its write landed, or device memory before its upload arrived,
# returns wrong keys here.


class FakeTensor:
    """A tensor over a numpy array (views share its memory, as torch's do)."""

    def __init__(self, array, device="cuda:0", log=None, name=""):
        self.array, self.device, self.log, self.name = array, device, log, name
        self.is_cuda = device != "cpu"

    @property
    def shape(self):
        return tuple(self.array.shape)

    @property
    def dtype(self):
        return self.array.dtype.type

    def _like(self, array):
        return FakeTensor(array, self.device, self.log)

    def element_size(self):
        return self.array.itemsize

    def numel(self):
        return self.array.size

    def data_ptr(self):
        return self.array.ctypes.data

    def is_contiguous(self):
        return self.array.flags.c_contiguous

    def __getitem__(self, index):
        parts = index if isinstance(index, tuple) else (index,)
        parts = tuple(part.array if isinstance(part, FakeTensor) else part for part in parts)
        return self._like(self.array[parts])

    def view(self, *shape):
        import numpy

        if len(shape) == 1 and isinstance(shape[0], type) and issubclass(shape[0], numpy.generic):
            return self._like(self.array.view(shape[0]))
        viewed = self.array.view()
        viewed.shape = shape  # raises where a copy would be needed, as torch's view does
        return self._like(viewed)

    def copy_(self, source):
        import numpy

        if self.is_cuda:
            self.log.append(("copy_",))
        numpy.copyto(self.array, source.array)
        return self

    def contiguous(self):
        import numpy

        return self if self.is_contiguous() else self._like(numpy.ascontiguousarray(self.array))

    def record_stream(self, stream):
        self.log.append(("record_stream", stream.name))

    def index_select(self, dim, index):
        import numpy

        return self._like(numpy.take(self.array, index.array, axis=dim))

    def repeat_interleave(self, repeats, dim):
        import numpy

        return self._like(numpy.repeat(self.array, repeats, axis=dim))

    def to(self, device):
        return FakeTensor(self.array, device, self.log)


class FakeStream:
    def __init__(self, log, name):
        self.log, self.name = log, name
        #: Copies queued on the stream and not yet run.
        self.pending = []

    def wait_event(self, event):
        self.log.append(("wait_event", self.name, event.name))
        for copy in event.captured:
            copy.run()


class FakeEvent:
    def __init__(self, log, count):
        self.log, self.name, self.captured = log, f"event{count}", []

    def record(self, stream):
        self.log.append(("record", stream.name, self.name))
        self.captured = list(stream.pending)


class FakeCopy:
    """A queued copy: the blocks between a device buffer and host memory."""

    def __init__(self, log, name, device, host, blocks, to_device, staging):
        self.log, self.name, self.device, self.host = log, name, device, host
        self.blocks, self.to_device, self.staging = [tuple(int(x) for x in row) for row in blocks], to_device, staging
        self.ran = False

    def run(self):
        if self.ran:
            return
        self.ran = True
        device = self.device.owner.array.reshape(-1).view("u1")
        for device_offset, host_offset, nbytes in self.blocks:
            if self.to_device:
                device[device_offset : device_offset + nbytes] = self.host[host_offset : host_offset + nbytes]
            else:
                self.host[host_offset : host_offset + nbytes] = device[device_offset : device_offset + nbytes]

    def wait(self):
        self.log.append(("wait", self.name))
        self.run()

    def done(self):
        if not self.staging.finished:
            return False  # as if the GPU had not got there yet
        self.run()
        return True


class FakeStaging:
    """A stager: its copies, queued as the docs above say. ``finished``:
    whether its copies report done (``module``'s, for the shared one)."""

    def __init__(self, log, module=None):
        self.log, self.count, self.module, self._finished = log, 0, module, True

    @property
    def finished(self):
        return self._finished if self.module is None else self.module.finished

    @finished.setter
    def finished(self, value):
        self._finished = value

    def _copy(self, name, device, host, blocks, stream, to_device):
        self.count += 1
        copy = FakeCopy(self.log, f"{name}{self.count}", device, host, blocks, to_device, self)
        self.log.append((name, copy.name, stream.name, sum(int(row[2]) for row in blocks)))
        stream.pending.append(copy)
        return copy

    def copy_blocks_to_host(self, host, device, blocks, *, stream, blocking):
        assert not blocking
        return self._copy("copy_to_host", device, host, blocks, stream, False)

    def copy_blocks_to_device(self, device, host, blocks, *, stream, blocking):
        assert not blocking
        return self._copy("copy_to_device", device, host, blocks, stream, True)


class FakeStagingModule(FakeStaging):
    """``hostcopy._staging``: the module's copy functions (``count``), and
    ``default_stager_of``, which gives the device's shared stager (``shared``,
    its copies counted apart), as many times as it is asked
    (``lookups``)."""

    def __init__(self, log):
        super().__init__(log)
        self.shared = FakeStaging(log, module=self)
        self.lookups = 0

    def default_stager_of(self, obj, side):
        self.lookups += 1
        return self.shared


def fake_torch(log):
    import numpy

    torch = types.ModuleType("torch")
    compute = FakeStream(log, "compute")
    streams, events = itertools.count(1), itertools.count(1)
    current = [compute]

    @contextlib.contextmanager
    def stream(side):
        log.append(("allocate on", side.name))
        current.append(side)
        try:
            yield
        finally:
            current.pop()

    def empty(shape, dtype=numpy.uint8, device=None):
        array = numpy.empty(shape, dtype=dtype)
        array.fill(numpy.nan if numpy.issubdtype(array.dtype, numpy.floating) else 0xAB)  # never read unwritten
        return FakeTensor(array, "cpu" if device is None else device, log)

    def cat(tensors, dim, out=None):
        log.append(("cat", len(tensors)))
        joined = numpy.concatenate([t.array for t in tensors], axis=dim)
        if out is not None:
            numpy.copyto(out.array, joined)
            return out
        return FakeTensor(joined, tensors[0].device, log)

    torch.cuda = types.SimpleNamespace(
        Stream=lambda device: FakeStream(log, f"stream{next(streams)}"),
        Event=lambda: FakeEvent(log, next(events)),
        current_stream=lambda device: compute,
        stream=stream,
    )
    torch.empty = empty
    torch.from_numpy = lambda array: FakeTensor(array, "cpu", log)
    torch.cat = cat
    torch.compute = compute
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

        def crop(self, tokens_to_remove):
            for layer in self.layers:
                layer.crop(tokens_to_remove)

        def reorder_cache(self, beam_idx):
            for layer in self.layers:
                layer.reorder_cache(beam_idx)

        def batch_select_indices(self, indices):
            for layer in self.layers:
                layer.batch_select_indices(indices)

        def reset(self):
            for layer in self.layers:
                layer.reset()

    cache_utils.DynamicLayer, cache_utils.DynamicCache = DynamicLayer, DynamicCache
    return cache_utils


class KV:
    """The cache module over the stand-ins, and what a model would give it."""

    def __init__(self, module, log, torch, staging, numpy):
        self.module, self.log, self.torch, self.staging, self.np = module, log, torch, staging, numpy
        self.rng = numpy.random.default_rng(7)

    def states(self, count, batch=2, heads=3, key_dim=4, value_dim=5, transposed=True):
        """New keys and values as a model makes them: ``[batch, heads,
        count, dim]`` views of ``[batch, count, heads, dim]`` arrays."""
        made = []
        for dim in (key_dim, value_dim):
            array = self.rng.standard_normal((batch, count, heads, dim)).astype(self.np.float16)
            made.append(FakeTensor(array.transpose(0, 2, 1, 3) if transposed else array, "cuda:0", self.log))
        return made


@pytest.fixture
def kv(monkeypatch, numpy):
    """hostcopy.offload.transformers loaded over stand-ins for torch,
    transformers and the copies (under its own name: the real module
    stays unimported)."""
    log = []
    torch = fake_torch(log)
    cache_utils = fake_cache_utils()
    transformers = types.ModuleType("transformers")
    transformers.cache_utils = cache_utils
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "transformers", transformers)
    monkeypatch.setitem(sys.modules, "transformers.cache_utils", cache_utils)
    path = pathlib.Path(offload.__file__).with_name("transformers.py")
    spec = importlib.util.spec_from_file_location("hostcopy.offload._transformers_with_stand_ins", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    staging = FakeStagingModule(log)
    monkeypatch.setattr(module, "_staging", staging)
    return KV(module, log, torch, staging, numpy)


def generate(kv, cache, layers, steps, check=True, expected=None):
    """Runs ``steps`` (a list of new-position counts) through every layer,
    checking each update's keys and values against every position given
    so far (``expected``: those of an earlier call); returns the expected
    keys and values per layer."""
    np = kv.np
    expected = [None] * layers if expected is None else expected
    for count in steps:
        for index in range(layers):
            keys, values = kv.states(count)
            before = len(kv.log)
            kv.log.append(("update", index))
            got_keys, got_values = cache.update(keys, values, index)
            if expected[index] is None:
                expected[index] = (keys.array.copy(), values.array.copy())
            else:
                expected[index] = tuple(
                    np.concatenate([old, new.array], axis=-2) for old, new in zip(expected[index], (keys, values))
                )
            if check:
                assert got_keys.is_contiguous() and got_values.is_contiguous()
                np.testing.assert_array_equal(got_keys.array, expected[index][0])
                np.testing.assert_array_equal(got_values.array, expected[index][1])
            assert cache.layers[index].get_seq_length() == expected[index][0].shape[-2], kv.log[before:]
    return expected


def test_updates_give_every_position_so_far_across_prefill_decode_and_writes(kv):
    cache = kv.module.HostOffloadedCache(prefetch=2, tail=4)
    # A prefill longer than the device part, single tokens across several
    # writes, a chunk that overflows it, then single tokens again.
    expected = generate(kv, cache, 3, [6, 1, 1, 1, 1, 1, 1, 3, 1, 1, 5, 1])
    for index, layer in enumerate(cache.layers):
        kv.np.testing.assert_array_equal(layer.keys.array, expected[index][0])
        kv.np.testing.assert_array_equal(layer.values.array, expected[index][1])
        assert layer.keys.device == "cpu" and layer.flushed == layer.length == 23
        assert isinstance(layer.host.base.base, hostcopy._native.PageableMemory)


def test_a_cache_given_a_stager_makes_every_copy_through_it(kv):
    stager = FakeStaging(kv.log)
    cache = kv.module.HostOffloadedCache(prefetch=1, tail=2, stager=stager, counters=True)
    generate(kv, cache, 2, [3, 1, 1, 1])
    for layer in cache.layers:
        layer.keys  # the device part written to the host through it too
    # Uploads and writes alike: the stager given, never the shared one.
    assert stager.count == cache.counters.uploads + cache.counters.writes > 0
    assert kv.staging.count == kv.staging.shared.count == kv.staging.lookups == 0


def test_a_cache_looks_up_the_shared_stager_once_a_layer_not_once_a_call(kv):
    cache = kv.module.HostOffloadedCache(prefetch=2, tail=2, counters=True)
    generate(kv, cache, 3, [3] + [1] * 6)
    # Every upload and write through the device's shared stager, which
    # each layer looked up once, at its first copy; never through the
    # module's functions, which look it up at every call.
    assert kv.staging.shared.count == cache.counters.uploads + cache.counters.writes > 3
    assert kv.staging.count == 0
    assert kv.staging.lookups == 3


def test_a_group_over_two_devices_comes_back_in_one_call_a_device(kv):
    cache = kv.module.HostOffloadedCache(prefetch=2, tail=2, group=2, counters=True)
    np = kv.np
    expected = [None, None]
    for count in [4, 1, 1, 1, 1]:
        for index, device in enumerate(("cuda:0", "cuda:1")):
            keys, values = (state.to(device) for state in kv.states(count))
            got_keys, got_values = cache.update(keys, values, index)
            new = (keys.array.copy(), values.array.copy())
            expected[index] = new if expected[index] is None else tuple(
                np.concatenate([old, part], axis=-2) for old, part in zip(expected[index], new)
            )
            np.testing.assert_array_equal(got_keys.array, expected[index][0])
            np.testing.assert_array_equal(got_values.array, expected[index][1])
    # The two layers share host memory, but each device's upload is its
    # own call, into a buffer on that device.
    assert cache.layers[0].region is cache.layers[1].region
    read = {device: cache._sides.streams[(device, "read")].name for device in ("cuda:0", "cuda:1")}
    calls = collections.Counter(entry[2] for entry in kv.log if entry[0] == "copy_to_device")
    assert calls[read["cuda:0"]] >= 4 and calls[read["cuda:1"]] >= 4
    assert sum(calls.values()) == calls[read["cuda:0"]] + calls[read["cuda:1"]] == cache.counters.uploads


def test_a_cache_refuses_a_stager_that_is_not_one(kv):
    with pytest.raises(hostcopy.OffloadArgumentTypeError) as refused:
        kv.module.HostOffloadedCache(stager="stager")
    assert refused.value.argument == "stager" and isinstance(refused.value, TypeError)


def test_each_position_is_written_to_the_host_once(kv):
    cache = kv.module.HostOffloadedCache(prefetch=1, tail=4, counters=True)
    generate(kv, cache, 2, [6] + [1] * 9)
    row = 2 * 3 * (4 + 5) * 2  # batch * heads * (key_dim + value_dim) * item
    # Per layer: the prefill's 6; the 4 tokens kept on the device and the
    # 5th, which finds no room there, in one write; 4 tokens left there.
    assert cache.counters.write_bytes == 2 * (6 + 5) * row
    assert cache.counters.writes == 2 * 2
    assert (cache.layers[0].length, cache.layers[0].flushed) == (15, 11)
    cache.layers[0].keys  # the device part goes to the host when read
    assert cache.counters.write_bytes == 2 * (6 + 5) * row + 4 * row


def test_a_decoded_token_makes_one_upload_per_layer_and_a_write_per_tail(kv):
    cache = kv.module.HostOffloadedCache(prefetch=2, tail=8, group=1, counters=True)
    expected = generate(kv, cache, 4, [16])
    counts = []
    for _ in range(10):
        uploads, writes = cache.counters.uploads, cache.counters.writes
        generate(kv, cache, 4, [1], expected=expected)
        counts.append((cache.counters.uploads - uploads, cache.counters.writes - writes))
    # Every token: the 4 layers' host part brought back, keys and values in
    # one call each; the 9th finds the device part full: one write a layer.
    assert counts == [(4, 0)] * 8 + [(4, 4)] + [(4, 0)], counts
    moved = cache.counters.upload_bytes
    assert moved > 0 and cache.counters.updates == 4 * 11


def test_by_default_two_layers_come_back_in_one_call(kv):
    assert kv.module.GROUP == 2
    cache = kv.module.HostOffloadedCache(prefetch=2, tail=8, counters=True)
    expected = generate(kv, cache, 4, [16])
    assert [len(region.members) for region in dict.fromkeys(layer.region for layer in cache.layers)] == [2, 2]
    uploads = cache.counters.uploads
    for _ in range(3):
        generate(kv, cache, 4, [1], expected=expected)
    assert cache.counters.uploads - uploads == 3 * 2  # a call for each two layers, every token


def test_an_upload_runs_on_its_own_stream_and_the_compute_stream_waits_for_it_before_the_attention(kv):
    cache = kv.module.HostOffloadedCache(prefetch=1, tail=2)
    generate(kv, cache, 2, [3, 1])
    log = kv.log
    uploads = [entry for entry in log if entry[0] == "copy_to_device"]
    assert len(uploads) == 3 and all(entry[2] != "compute" for entry in uploads)
    side = uploads[0][2]
    assert ("allocate on", side) in log
    # Each upload's event is recorded on its stream after it, and waited for
    # on the compute stream before the cat that reads it (the last is the
    # next token's, not yet read).
    for upload in uploads[:2]:
        start = log.index(upload)
        recorded = next(e for e in log[start:] if e[0] == "record" and e[1] == side)
        waited = log.index(("wait_event", "compute", recorded[2]))
        assert any(e[0] == "cat" for e in log[waited:]), log[start:]
        assert ("record_stream", "compute") in log[waited:]


def test_a_write_follows_the_event_after_its_positions_are_made_and_the_uploads_queued_before_it(kv):
    cache = kv.module.HostOffloadedCache(prefetch=2, tail=2)
    generate(kv, cache, 3, [3, 1, 1, 1])
    log = kv.log
    writes = [i for i, entry in enumerate(log) if entry[0] == "copy_to_host"]
    assert len(writes) == 3 * 2  # the prefill; the third token finds the device part full
    for at in writes:
        stream = log[at][2]
        # The write stream waits for an event recorded on the compute stream
        # after the positions were copied into the written buffer.
        waited = [e for e in log[:at] if e[:2] == ("wait_event", stream)][-1][2]
        recorded = log.index(("record", "compute", waited))
        update = max(i for i, e in enumerate(log[:at]) if e[0] == "update")
        assert update < recorded < at
        assert [e for e in log[update:recorded] if e[0] in ("copy_", "cat")], "the buffer is filled before"
        assert not [e for e in log[recorded:at] if e[0] in ("copy_", "cat")], "and not after"
        # No upload of the same update is queued after it: they came first.
        following = log[at + 1 :]
        rest = following[: next((i for i, e in enumerate(following) if e[0] == "update"), len(following))]
        assert not [e for e in rest if e[0] == "copy_to_device"], log[at:]
    # ... and there were uploads in those updates, before the write.
    update = max(i for i, e in enumerate(log[: writes[-1]]) if e[0] == "update")
    assert [e for e in log[update : writes[-1]] if e[0] == "copy_to_device"]


def test_a_layer_is_uploaded_only_after_its_writes_are_waited_for(kv):
    # Writes run only when waited for: an upload that did not wait would
    # bring back zeros, and the keys would differ.
    cache = kv.module.HostOffloadedCache(prefetch=1, tail=2)
    generate(kv, cache, 3, [5, 1, 1, 1, 1])
    log = kv.log
    for at, entry in enumerate(log):
        if entry[0] == "copy_to_host":
            name = entry[1]
            waited = log.index(("wait", name))
            assert waited > at


def test_uploads_read_are_let_go_of_once_done_or_past_the_bound(kv):
    cache = kv.module.HostOffloadedCache(prefetch=1, tail=64)
    expected = generate(kv, cache, 5, [70, 1])
    kv.staging.finished = False  # nothing reports done: the oldest is waited for past prefetch + 2
    generate(kv, cache, 5, [1, 1], expected=expected)
    assert len(cache._sides.read) == 1 + 2
    kv.staging.finished = True
    generate(kv, cache, 5, [1], expected=expected)
    assert len(cache._sides.read) <= 1
    cache.drain()
    assert not cache._sides.read and not cache._fetched


def test_keys_are_shown_only_once_the_device_part_is_written_and_landed(kv):
    cache = kv.module.HostOffloadedCache(prefetch=1, tail=8)
    expected = generate(kv, cache, 1, [3, 1])
    layer = cache.layers[0]
    assert layer.flushed == 0 and layer.length == 4
    assert not [e for e in kv.log if e[0] == "wait"]
    kv.np.testing.assert_array_equal(layer.keys.array, expected[0][0])
    assert layer.flushed == 4 and [e[0] for e in kv.log if e[0] == "wait"] == ["wait"]
    kv.np.testing.assert_array_equal(layer.values.array, expected[0][1])
    assert len([e for e in kv.log if e[0] == "wait"]) == 1, "written and waited for once"
    # After a read outside a forward, the next token reads the host part again.
    generate(kv, cache, 1, [1], expected=expected)


def test_crop_reorder_and_batch_select_then_decode_on(kv):
    np = kv.np
    cache = kv.module.HostOffloadedCache(prefetch=1, tail=4)
    expected = generate(kv, cache, 2, [5, 1, 1])
    cache.crop(-2)  # removes two positions
    assert cache.layers[0].get_seq_length() == 5
    cache.crop(0)  # removes none
    assert cache.layers[1].get_seq_length() == 5
    order = FakeTensor(np.array([1, 0]), "cuda:0", kv.log)
    cache.reorder_cache(order)
    for index, layer in enumerate(cache.layers):
        np.testing.assert_array_equal(layer.keys.array, expected[index][0][[1, 0], :, :5])
    cache.batch_select_indices(FakeTensor(np.array([1]), "cuda:0", kv.log))
    keys, values = kv.states(1, batch=1)
    got, _ = cache.update(keys, values, 0)
    np.testing.assert_array_equal(got.array, np.concatenate([expected[0][0][[0], :, :5], keys.array], axis=-2))


@pytest.mark.parametrize("group, prefetch", [(2, 1), (2, 2), (3, 1), (4, 3)])
def test_a_group_of_layers_comes_back_in_one_call(kv, group, prefetch):
    layers = 5
    cache = kv.module.HostOffloadedCache(prefetch=prefetch, tail=3, group=group, counters=True)
    expected = generate(kv, cache, layers, [7, 1])
    regions = [layer.region for layer in cache.layers]
    # Consecutive layers share a region, group at a time, each its own part of it.
    assert [len(region.members) for region in dict.fromkeys(regions)] == [
        min(group, layers - start) for start in range(0, layers, group)
    ]
    for region in dict.fromkeys(regions):
        for at, member in enumerate(region.members):
            assert member.host.ctypes.data == region.host.ctypes.data + at * member.part_bytes(region.capacity)
    uploads = cache.counters.uploads
    generate(kv, cache, layers, [1, 1, 1, 1, 1, 3, 1], expected=expected)
    per_token = (cache.counters.uploads - uploads) / 7
    assert per_token < layers, per_token  # fewer calls than layers
    for index, layer in enumerate(cache.layers):
        kv.np.testing.assert_array_equal(layer.keys.array, expected[index][0])
        kv.np.testing.assert_array_equal(layer.values.array, expected[index][1])


def test_layers_of_a_group_of_other_shapes_each_get_memory_of_their_own(kv):
    # Both layers of a group are made before either writes (a prompt
    # shorter than the device part): the first write must not give the
    # other layer a part laid out for the first one's shape.
    np = kv.np
    cache = kv.module.HostOffloadedCache(prefetch=1, tail=4, group=2)
    shapes = [{"heads": 3, "key_dim": 4, "value_dim": 5}, {"heads": 5, "key_dim": 8, "value_dim": 8}]
    expected = [None, None]
    for count in [2] + [1] * 12:
        for index, shape in enumerate(shapes):
            keys, values = kv.states(count, **shape)
            got_keys, got_values = cache.update(keys, values, index)
            new = (keys.array, values.array)
            expected[index] = new if expected[index] is None else tuple(
                np.concatenate([old, part], axis=-2) for old, part in zip(expected[index], new)
            )
            np.testing.assert_array_equal(got_keys.array, expected[index][0])
            np.testing.assert_array_equal(got_values.array, expected[index][1])
    first, second = cache.layers
    assert first.region is not second.region and first.flushed > 0 and second.flushed > 0
    for layer, (keys, values) in zip(cache.layers, expected):
        np.testing.assert_array_equal(layer.keys.array, keys)
        np.testing.assert_array_equal(layer.values.array, values)


def test_layers_of_a_group_grow_together_and_a_rewritten_one_leaves_it(kv):
    np = kv.np
    cache = kv.module.HostOffloadedCache(prefetch=1, tail=2, group=2)
    expected = generate(kv, cache, 2, [300, 1, 1, 1])
    first, second = cache.layers
    assert first.region is second.region and first.capacity == second.capacity == 512  # 300 and half again
    host = first.region.host
    expected = generate(kv, cache, 2, [250], expected=expected)  # 553 positions: the region grows, for both
    assert first.region is second.region and first.capacity == second.capacity == 1024
    assert first.region.host is not host
    cache.batch_select_indices(FakeTensor(np.array([1]), "cuda:0", kv.log))
    assert first.region is not second.region  # each rewritten into memory of its own
    keys, values = kv.states(1, batch=1)
    got, _ = cache.update(keys, values, 0)
    np.testing.assert_array_equal(got.array, np.concatenate([expected[0][0][[1]], keys.array], axis=-2))


def test_a_refused_prefetch_or_tail_is_an_offload_argument_error(kv):
    with pytest.raises(hostcopy.OffloadArgumentError, match="prefetch"):
        kv.module.HostOffloadedCache(prefetch=0)
    with pytest.raises(hostcopy.OffloadArgumentTypeError, match="tail"):
        kv.module.HostOffloadedCache(tail=True)
    with pytest.raises(hostcopy.OffloadArgumentError, match="tail"):
        kv.module.HostOffloadedCache(tail=0)
    with pytest.raises(hostcopy.OffloadArgumentTypeError, match="group"):
        kv.module.HostOffloadedCache(group=1.5)


def test_a_host_layer_updated_directly_does_the_layers_work_as_dynamic_layer_update_does(kv):
    # No cache: the layer brings its host part back itself, on a side
    # stream of its own, and writes a full device part to the host.
    np = kv.np
    layer = kv.module.HostLayer(2)
    expected = None
    for count in [3, 1, 1, 1, 2, 1]:
        keys, values = kv.states(count)
        got_keys, got_values = layer.update(keys, values)
        new = (keys.array.copy(), values.array.copy())
        expected = new if expected is None else tuple(
            np.concatenate([old, part], axis=-2) for old, part in zip(expected, new)
        )
        assert got_keys.is_contiguous() and got_values.is_contiguous()
        np.testing.assert_array_equal(got_keys.array, expected[0])
        np.testing.assert_array_equal(got_values.array, expected[1])
        assert layer.get_seq_length() == expected[0].shape[-2]
    assert layer.flushed > 0
    uploads = [entry for entry in kv.log if entry[0] == "copy_to_device"]
    assert uploads and all(entry[2] != "compute" for entry in uploads)
    np.testing.assert_array_equal(layer.keys.array, expected[0])
    np.testing.assert_array_equal(layer.values.array, expected[1])


def test_the_cache_only_prefetches_and_its_layers_update_themselves(kv, monkeypatch):
    cache = kv.module.HostOffloadedCache(prefetch=1, tail=2, group=1)
    expected = generate(kv, cache, 2, [3, 1])
    updated = []
    original = kv.module.HostLayer.update

    def update(layer, key_states, value_states, *args, **kwargs):
        # The cache has queued this layer's host part (handed to it) and
        # the next layer's before the layer's own update runs.
        updated.append((cache.layers.index(layer), layer.fetched is not None, sorted(cache._fetched)))
        return original(layer, key_states, value_states, *args, **kwargs)

    monkeypatch.setattr(kv.module.HostLayer, "update", update)
    generate(kv, cache, 2, [1], expected=expected)
    assert updated == [(0, True, [1]), (1, True, [0])]


def test_counters_are_off_by_default_and_cost_no_timing_call(kv, monkeypatch):
    calls = []
    real = kv.module.time.perf_counter
    monkeypatch.setattr(kv.module.time, "perf_counter", lambda: calls.append(1) or real())
    cache = kv.module.HostOffloadedCache(prefetch=2, tail=2)
    generate(kv, cache, 3, [3, 1, 1, 1])
    assert cache.counters is None and calls == []
    cache.reset_counters()  # nothing to reset
    # The copies go to the stager itself: nothing between them to count.
    assert all(layer.copies is kv.staging.shared for layer in cache.layers)
    assert cache._update_offloaded == cache._prefetch_and_update


def test_counters_when_asked_count_calls_bytes_waits_and_updates(kv):
    cache = kv.module.HostOffloadedCache(prefetch=2, tail=2, group=1, counters=True)
    generate(kv, cache, 3, [3, 1, 1, 1])
    cache.drain()
    counted = cache.counters
    log = kv.log
    assert counted.updates == 3 * 4 and counted.update_seconds > 0
    assert counted.uploads == len([e for e in log if e[0] == "copy_to_device"])
    assert counted.upload_bytes == sum(e[3] for e in log if e[0] == "copy_to_device")
    assert counted.writes == len([e for e in log if e[0] == "copy_to_host"])
    assert counted.write_bytes == sum(e[3] for e in log if e[0] == "copy_to_host")
    assert counted.waits == len([e for e in log if e[0] == "wait"]) > 0
    cache.reset_counters()
    assert cache.counters is counted and counted.as_dict() == dict.fromkeys(counted.__slots__, 0)
