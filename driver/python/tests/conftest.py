"""Helpers shared by the CPU tests."""

import ctypes

import pytest

import hostcopy


def pattern(n: int, seed: int = 1) -> bytes:
    """Bytes with no short period, so a shifted or partial copy never matches by accident."""
    return bytes(((i * 2654435761 + seed) >> 13) & 0xFF for i in range(n))


def run_record(record: bytes, fn=hostcopy.HOST_COPY_FN) -> None:
    """Calls the host function through ctypes as the driver would: with the record's address."""
    holder = ctypes.create_string_buffer(record, len(record))
    fn(ctypes.addressof(holder))


class MemoryResourceStandIn:
    """The attributes of a cuda.core MemoryResource that packing reads."""

    def __init__(self, host: bool, device: bool):
        self._host = host
        self._device = device

    @property
    def is_host_accessible(self) -> bool:
        return self._host

    @property
    def is_device_accessible(self) -> bool:
        return self._device

    @property
    def device_id(self) -> int:
        return -1 if not self._device else 0


class BufferStandIn:
    """An object with cuda.core 1.2.0 Buffer's attributes (handle, size,
    memory_resource, is_host_accessible, is_closed). Its own
    ``is_host_accessible`` counts reads: on a real Buffer without a memory
    resource that property calls the driver, so packing must not read it."""

    def __init__(self, address: int, size: int, resource, keep=None):
        self._address = address
        self._size = size
        self._resource = resource
        self._keep = keep
        self.closed = False
        self.host_accessible_reads = 0

    @property
    def handle(self) -> int:
        return self._address

    @property
    def size(self) -> int:
        return self._size

    @property
    def memory_resource(self):
        return self._resource

    @property
    def is_host_accessible(self) -> bool:
        self.host_accessible_reads += 1
        return self._resource is not None and self._resource.is_host_accessible

    @property
    def is_closed(self) -> bool:
        return self.closed


def host_buffer(data: bytes) -> BufferStandIn:
    """A host-accessible (pinned-like) Buffer stand-in holding ``data``."""
    array = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
    return BufferStandIn(ctypes.addressof(array), len(data), MemoryResourceStandIn(True, True), keep=array)


def buffer_bytes(buffer: BufferStandIn) -> bytes:
    return ctypes.string_at(buffer.handle, buffer.size)


class HostArray:
    """A host array with only DLPack (as a CPU torch tensor has), whose
    ``__dlpack__`` takes ``max_version`` as DLPack 1.0 producers do (torch,
    numpy >= 2.1): asked for it, numpy hands out a versioned capsule, which
    carries the read-only flag."""

    def __init__(self, numpy_array):
        self.numpy_array = numpy_array

    def __dlpack__(self, stream=None, max_version=None):
        if max_version is None:
            return self.numpy_array.__dlpack__()
        return self.numpy_array.__dlpack__(max_version=max_version)

    def __dlpack_device__(self):
        return self.numpy_array.__dlpack_device__()


class LegacyHostArray(HostArray):
    """A host array of a producer older than DLPack 1.0: ``__dlpack__``
    takes no ``max_version``, and its unversioned capsule cannot say whether
    the array is read-only."""

    def __dlpack__(self, stream=None):
        return self.numpy_array.__dlpack__()


@pytest.fixture
def numpy():
    return pytest.importorskip("numpy", reason="numpy is not installed (ci.sh installs it)")


class Sim:
    """The simulated driver (wheels built with ``--features simulator``):
    devices, device arrays, streams and graphs on them, and its controls."""

    def __init__(self, native):
        self.native = native

    def device(self) -> int:
        """A fresh simulated device, its primary context current here."""
        ordinal = self.native.sim_new_device()
        self.native.sim_make_current(ordinal)
        return ordinal

    def copies_queued(self, device: int) -> int:
        """Asynchronous and batch copies queued on `device` so far: what a
        staged chunk or a small transfer on the driver's path makes, and a
        refused transfer never does."""
        state = self.state(device)
        return state["async_copy_calls"] + state["batch_copy_calls"]

    def array(self, device: int, data: bytes, stream=None):
        array = self.native.SimDeviceArray(device, len(data), stream)
        array.write(data)
        return array

    def stream(self, device: int):
        return self.native.SimStream(device)

    def graph(self, device: int):
        return self.native.SimGraph(device)

    def state(self, device: int) -> dict:
        return self.native.sim_device_state(device)

    def hold(self, device: int) -> None:
        self.native.sim_hold(device)

    def release(self, device: int) -> None:
        self.native.sim_release(device)

    def drain(self, device: int) -> None:
        self.native.sim_drain(device)

    def fail_call(self, device: int, entry: str, nth: int, code: int) -> None:
        self.native.sim_fail_call(entry, device, nth, code)

    def fail_context(self, device: int, code: int) -> None:
        self.native.sim_fail_context(device, code)

    def assert_no_violations(self, device: int) -> None:
        self.native.sim_drain(device)
        violations = self.native.sim_take_violations(device)
        assert violations == [], violations


@pytest.fixture
def sim():
    """The simulated driver, installed for this process; skipped (or, with
    HOSTCOPY_REQUIRE_SIM=1 as ci.sh sets it, failed) in a wheel without it."""
    import os

    native = hostcopy._native
    if not hasattr(native, "sim_install"):
        reason = "this wheel has no simulated driver (ci.sh builds one with --features simulator)"
        if os.environ.get("HOSTCOPY_REQUIRE_SIM") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    native.sim_install()
    return Sim(native)


@pytest.fixture
def device(sim) -> int:
    """A fresh simulated device of the test's own, its primary context current."""
    return sim.device()


#: The start of a script run in a fresh interpreter against the simulated
#: driver (test_life_sim.py, test_life_edges_sim.py): one device, its
#: context current, and `source`, 1 MiB of device memory holding a pattern.
SIM_SCRIPT_PRELUDE = """
import atexit, os, sys, threading, time, warnings
warnings.simplefilter("ignore", DeprecationWarning)
import numpy
import hostcopy
native = hostcopy._native
native.sim_install()
device = native.sim_new_device()
native.sim_make_current(device)
SIZE = 1 << 20
source = native.SimDeviceArray(device, SIZE, None)
source.write(bytes(range(256)) * (SIZE // 256))
"""
