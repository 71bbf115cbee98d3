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


@pytest.fixture
def numpy():
    return pytest.importorskip("numpy", reason="numpy is not installed (ci.sh installs it)")
