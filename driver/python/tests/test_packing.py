"""Records packed from every accepted input type, run by HOST_COPY_FN through ctypes."""

import ctypes
import mmap
import subprocess
import sys

import pytest

import hostcopy
from conftest import BufferStandIn, MemoryResourceStandIn, buffer_bytes, host_buffer, pattern, run_record

N = 4096


def test_host_copy_fns_have_the_cuhostfn_prototype_cuda_core_checks():
    for fn in (hostcopy.HOST_COPY_FN, hostcopy.HOST_COPY_PARALLEL_FN):
        assert isinstance(fn, ctypes._CFuncPtr)
        assert fn.restype is None
        assert tuple(fn.argtypes) == (ctypes.c_void_p,)
        assert ctypes.cast(fn, ctypes.c_void_p).value
    assert ctypes.cast(hostcopy.HOST_COPY_FN, ctypes.c_void_p).value != ctypes.cast(
        hostcopy.HOST_COPY_PARALLEL_FN, ctypes.c_void_p
    ).value


def test_record_size_is_three_native_words():
    assert hostcopy.HOST_COPY_ARGS_SIZE == 3 * ctypes.sizeof(ctypes.c_void_p)
    assert len(hostcopy.pack_host_copy_args(bytearray(8), bytes(8))) == hostcopy.HOST_COPY_ARGS_SIZE


# Each source kind: (make(data) -> (object, keep-alive), needs nbytes).
def _src_bytes(data):
    return data, None


def _src_bytearray(data):
    return bytearray(data), None


def _src_memoryview_readonly(data):
    return memoryview(data), None


def _src_int(data):
    array = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
    return ctypes.addressof(array), array


def _src_buffer(data):
    buffer = host_buffer(data)
    return buffer, buffer


def _src_mmap(data):
    region = mmap.mmap(-1, len(data))
    region.write(data)
    return region, region


SOURCES = {
    "bytes": _src_bytes,
    "bytearray": _src_bytearray,
    "memoryview": _src_memoryview_readonly,
    "int": _src_int,
    "cuda.core Buffer (host)": _src_buffer,
    "mmap": _src_mmap,
}


@pytest.mark.parametrize("kind", SOURCES)
def test_host_copy_fn_copies_from_every_source_type(kind):
    data = pattern(N, seed=len(kind))
    src, _keep = SOURCES[kind](data)
    dst = bytearray(N)
    record = hostcopy.pack_host_copy_args(dst, src, N if kind == "int" else None)
    run_record(record)
    assert bytes(dst) == data


def test_host_copy_fn_copies_from_numpy_arrays_of_any_dtype_and_rank(numpy):
    src = numpy.arange(64 * 32, dtype=numpy.float64).reshape(64, 32)
    dst = numpy.zeros_like(src)
    run_record(hostcopy.pack_host_copy_args(dst, src))
    assert numpy.array_equal(dst, src)
    # A C-contiguous slice of rows is one run of bytes.
    dst_rows = numpy.zeros((8, 32))
    run_record(hostcopy.pack_host_copy_args(dst_rows, src[8:16]))
    assert numpy.array_equal(dst_rows, src[8:16])


DESTINATIONS = ["bytearray", "memoryview", "numpy", "int", "cuda.core Buffer (host)", "mmap"]


@pytest.mark.parametrize("kind", DESTINATIONS)
def test_host_copy_fn_copies_into_every_destination_type(kind, request):
    data = pattern(N, seed=7)
    if kind == "bytearray":
        dst = bytearray(N)
        read = lambda: bytes(dst)  # noqa: E731
    elif kind == "memoryview":
        backing = bytearray(N)
        dst = memoryview(backing)
        read = lambda: bytes(backing)  # noqa: E731
    elif kind == "numpy":
        numpy = request.getfixturevalue("numpy")
        dst = numpy.zeros(N, numpy.uint8)
        read = dst.tobytes
    elif kind == "int":
        backing = (ctypes.c_uint8 * N)()
        dst = ctypes.addressof(backing)
        read = lambda: bytes(backing)  # noqa: E731
    elif kind == "mmap":
        dst = mmap.mmap(-1, N)
        read = lambda: dst[:]  # noqa: E731
    else:
        dst = host_buffer(bytes(N))
        read = lambda: buffer_bytes(dst)  # noqa: E731
    run_record(hostcopy.pack_host_copy_args(dst, data))
    assert read() == data


def test_offsets_copy_the_middle_of_both_buffers():
    src = pattern(N)
    dst = bytearray(N)
    run_record(hostcopy.pack_host_copy_args(dst, src, 100, dst_offset=1000, src_offset=2000))
    assert dst[1000:1100] == src[2000:2100]
    assert dst[:1000] == bytes(1000) and dst[1100:] == bytes(N - 1100)


def test_default_nbytes_is_the_rest_of_the_source():
    src = pattern(N)
    dst = bytearray(N)
    record = hostcopy.pack_host_copy_args(dst, src, src_offset=N - 10)
    assert hostcopy.unpack_host_copy_args(record).nbytes == 10


def test_parallel_fn_copies_large_records_exactly():
    assert hostcopy.set_parallel_workers(2) >= 0
    started, active = hostcopy.parallel_workers()
    assert started >= 1 and active <= started
    size = 8 << 20
    src = bytes(pattern(4096)) * (size // 4096)
    dst = bytearray(size)
    run_record(hostcopy.pack_host_copy_args(dst, src), hostcopy.HOST_COPY_PARALLEL_FN)
    assert dst == src


def test_set_parallel_workers_caps_at_the_started_count():
    hostcopy.set_parallel_workers(2)
    started, _ = hostcopy.parallel_workers()
    assert hostcopy.set_parallel_workers(started + 100) == started
    assert hostcopy.set_parallel_workers(0) == 0
    assert hostcopy.set_parallel_workers(started) == started


def test_later_set_parallel_workers_calls_change_the_active_count(tmp_path):
    # In a fresh interpreter: the pool is started once per process, and the
    # first call here must be the one that starts it.
    script = """
import hostcopy
assert hostcopy.parallel_workers() == (0, 0)
assert hostcopy.set_parallel_workers(3) == 3
assert hostcopy.parallel_workers() == (3, 3)
assert hostcopy.set_parallel_workers(1) == 1
assert hostcopy.parallel_workers() == (3, 1)
assert hostcopy.set_parallel_workers(10) == 3
assert hostcopy.parallel_workers() == (3, 3)
assert hostcopy.set_parallel_workers(0) == 0
assert hostcopy.parallel_workers() == (3, 0)
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_pack_into_a_ring_at_an_odd_offset_returns_a_user_data_address():
    src = pattern(256)
    dst = bytearray(256)
    ring = bytearray(3 + 4 * hostcopy.HOST_COPY_ARGS_SIZE)
    user_data = hostcopy.pack_host_copy_args_into(ring, 3, dst, src)
    hostcopy.HOST_COPY_FN(user_data)
    assert dst == src
    assert hostcopy.unpack_host_copy_args(ring, 3) == hostcopy.HostCopyArgs(
        *hostcopy.unpack_host_copy_args(hostcopy.pack_host_copy_args(dst, src))
    )


def test_pack_into_refuses_a_ring_too_small_or_read_only():
    with pytest.raises(hostcopy.OutOfBounds) as refused:
        hostcopy.pack_host_copy_args_into(bytearray(30), 7, bytearray(4), bytes(4))
    assert (refused.value.offset, refused.value.nbytes, refused.value.len) == (7, hostcopy.HOST_COPY_ARGS_SIZE, 30)
    with pytest.raises(hostcopy.ReadOnlyBuffer):
        hostcopy.pack_host_copy_args_into(bytes(64), 0, bytearray(4), bytes(4))


def test_unpack_round_trips_addresses_and_lengths():
    for dst, src, nbytes in [(0x10, 0x20, 3), (0x1000, 1 << 41, 1 << 40), (2**63, 2**62, 0)]:
        record = hostcopy.pack_host_copy_args(dst, src, nbytes)
        assert hostcopy.unpack_host_copy_args(record) == (dst, src, nbytes)
        assert hostcopy.unpack_host_copy_args(bytearray(5) + record, 5) == (dst, src, nbytes)
    src = pattern(16)
    dst = bytearray(32)
    unpacked = hostcopy.unpack_host_copy_args(hostcopy.pack_host_copy_args(dst, src, dst_offset=4))
    dst_addr = ctypes.addressof((ctypes.c_char * 32).from_buffer(dst))
    assert unpacked.dst == dst_addr + 4 and unpacked.nbytes == 16


def test_unpack_refuses_short_data():
    with pytest.raises(hostcopy.OutOfBounds):
        hostcopy.unpack_host_copy_args(bytes(hostcopy.HOST_COPY_ARGS_SIZE - 1))
    with pytest.raises(hostcopy.OutOfBounds):
        hostcopy.unpack_host_copy_args(bytes(hostcopy.HOST_COPY_ARGS_SIZE), 1)


def test_buffer_stand_in_is_judged_by_its_memory_resource_never_by_a_driver_query():
    buffer = host_buffer(pattern(64))
    dst = bytearray(64)
    run_record(hostcopy.pack_host_copy_args(dst, buffer))
    assert dst == pattern(64)
    assert buffer.host_accessible_reads == 0
