"""Every kind of buffer-protocol object on both sides of packing, of
host_memory and of a staged transfer.

`bytearray`, `bytes` and `mmap` fill their export with `PyBuffer_FillInfo`,
which points the view's `shape` and `strides` at the view's own `len` and
`itemsize`; `memoryview` and `array.array` point them elsewhere. A view moved
after the export reads a stale shape, and the contiguity check refuses the
buffer (or, by luck, passes): these tests fail in a debug build then.
"""

import array
import ctypes
import mmap

import pytest

import hostcopy
from conftest import pattern, run_record

N = 64


def _bytearray(data):
    return bytearray(data)


def _bytes(data):
    return bytes(data)


def _mmap(data):
    region = mmap.mmap(-1, len(data))
    region.write(data)
    region.seek(0)
    return region


def _memoryview(data):
    return memoryview(bytearray(data))


def _memoryview_readonly(data):
    return memoryview(bytes(data))


def _array_bytes(data):
    return array.array("B", data)


def _array_ints(data):
    # Items of 4 bytes: shape is len / 4, strides 4.
    return array.array("i", data)


WRITABLE = {
    "bytearray": _bytearray,
    "mmap": _mmap,
    "memoryview": _memoryview,
    "array-B": _array_bytes,
    "array-i": _array_ints,
}
READABLE = dict(WRITABLE, bytes=_bytes, **{"memoryview-readonly": _memoryview_readonly})


def contents(obj) -> bytes:
    with memoryview(obj) as view:
        return view.tobytes()


def address(obj) -> int:
    """Where a writable object's bytes are, as ctypes finds them."""
    with memoryview(obj) as view, view.cast("B") as flat:
        return ctypes.addressof(ctypes.c_char.from_buffer(flat))


@pytest.mark.parametrize("dst_kind", sorted(WRITABLE))
@pytest.mark.parametrize("src_kind", sorted(READABLE))
def test_every_pair_of_buffer_kinds_packs_and_copies(dst_kind, src_kind):
    data = pattern(N, seed=7)
    dst, src = WRITABLE[dst_kind](bytes(N)), READABLE[src_kind](data)
    record = hostcopy.pack_host_copy_args(dst, src)
    unpacked = hostcopy.unpack_host_copy_args(record)
    assert unpacked.nbytes == N
    assert unpacked.dst == address(dst)
    run_record(record)
    assert contents(dst) == data


@pytest.mark.parametrize("kind", sorted(READABLE))
def test_host_memory_exports_every_kind_whole(kind):
    obj = READABLE[kind](pattern(N))
    assert len(hostcopy._native.host_memory(obj, False, "src")) == N
    addr, length = hostcopy._native.buffer_region(obj, False, "src")
    assert length == N
    if kind in WRITABLE:
        assert len(hostcopy._native.host_memory(obj, True, "dst")) == N
        assert addr == address(obj)


@pytest.mark.parametrize("kind", ["bytes", "memoryview-readonly"])
def test_read_only_kinds_are_refused_as_destinations_by_their_length(kind):
    obj = READABLE[kind](bytes(N))
    with pytest.raises(hostcopy.ReadOnlyBuffer) as refused:
        hostcopy.pack_host_copy_args(obj, bytes(N))
    assert (refused.value.side, refused.value.len) == ("dst", N)


@pytest.mark.parametrize("kind", sorted(READABLE))
def test_every_kind_is_staged_both_ways(sim, kind):
    device = sim.device()
    data = pattern(N, seed=3)
    array_on_device = sim.array(device, bytes(N))
    with hostcopy.Stager(device, chunk=4096, buffers=2, workers=1, driver_path_below=0) as stager:
        stager.copy_to_device(array_on_device, READABLE[kind](data))
        assert array_on_device.read() == data
        if kind in WRITABLE:
            dst = WRITABLE[kind](bytes(N))
            stager.copy_to_host(dst, array_on_device)
            assert contents(dst) == data
    sim.assert_no_violations(device)
