"""Every refusal is a clear exception carrying its numbers."""

import ctypes

import pytest

import hostcopy
from conftest import BufferStandIn, MemoryResourceStandIn, host_buffer, run_record

WORD_MAX = 2 ** (8 * ctypes.sizeof(ctypes.c_void_p)) - 1


def test_destination_shorter_than_the_source_is_out_of_bounds():
    with pytest.raises(hostcopy.OutOfBounds) as refused:
        hostcopy.pack_host_copy_args(bytearray(10), bytes(100))
    error = refused.value
    assert (error.side, error.offset, error.nbytes, error.len) == ("dst", 0, 100, 10)
    assert "100 bytes" in str(error) and "10-byte" in str(error)


def test_source_range_past_its_end_is_out_of_bounds():
    with pytest.raises(hostcopy.OutOfBounds) as refused:
        hostcopy.pack_host_copy_args(bytearray(100), bytes(50), 20, src_offset=40)
    assert (refused.value.side, refused.value.offset, refused.value.nbytes, refused.value.len) == ("src", 40, 20, 50)
    with pytest.raises(hostcopy.OutOfBounds) as refused:
        hostcopy.pack_host_copy_args(bytearray(100), bytes(50), src_offset=51)
    assert refused.value.offset == 51


def test_offset_plus_length_that_overflows_is_out_of_bounds_not_a_wrap():
    with pytest.raises(hostcopy.OutOfBounds):
        hostcopy.pack_host_copy_args(bytearray(10), bytes(10), WORD_MAX, dst_offset=2)


@pytest.mark.parametrize(
    "dst",
    [bytes(16), memoryview(bytes(16)), memoryview(bytearray(16)).toreadonly()],
    ids=["bytes", "memoryview of bytes", "read-only memoryview"],
)
def test_read_only_destination_is_refused(dst):
    with pytest.raises(hostcopy.ReadOnlyBuffer) as refused:
        hostcopy.pack_host_copy_args(dst, bytes(16))
    assert refused.value.side == "dst" and refused.value.len == 16


def test_read_only_numpy_destination_is_refused(numpy):
    dst = numpy.zeros(16, numpy.uint8)
    dst.flags.writeable = False
    with pytest.raises(hostcopy.ReadOnlyBuffer):
        hostcopy.pack_host_copy_args(dst, bytes(16))


def test_strided_views_are_refused_with_their_shape_and_strides(numpy):
    array = numpy.zeros((8, 8), numpy.uint16)
    with pytest.raises(hostcopy.NotContiguous) as refused:
        hostcopy.pack_host_copy_args(array[:, :2], bytes(32))
    assert refused.value.side == "dst"
    assert refused.value.shape == [8, 2] and refused.value.strides == [16, 2]
    with pytest.raises(hostcopy.NotContiguous) as refused:
        hostcopy.pack_host_copy_args(bytearray(64), numpy.arange(64, dtype=numpy.uint8)[::2])
    assert refused.value.side == "src" and refused.value.strides == [2]
    with pytest.raises(hostcopy.NotContiguous):
        hostcopy.pack_host_copy_args(bytearray(64), array.T)


def test_arrays_of_python_objects_are_refused(numpy):
    with pytest.raises(TypeError, match="object references"):
        hostcopy.pack_host_copy_args(numpy.empty(4, dtype=object), bytes(4 * ctypes.sizeof(ctypes.c_void_p)))


def test_strided_memoryview_is_refused():
    with pytest.raises(hostcopy.NotContiguous):
        hostcopy.pack_host_copy_args(memoryview(bytearray(64))[::2], bytes(32))


def test_device_only_buffer_is_not_host_accessible():
    device = BufferStandIn(0x7F00_0000_0000, 1 << 20, MemoryResourceStandIn(host=False, device=True))
    with pytest.raises(hostcopy.NotHostAccessible) as refused:
        hostcopy.pack_host_copy_args(bytearray(16), device, 16)
    assert refused.value.side == "src" and refused.value.addr == 0x7F00_0000_0000
    assert "0x7f0000000000" in str(refused.value)
    with pytest.raises(hostcopy.NotHostAccessible) as refused:
        hostcopy.pack_host_copy_args(device, bytes(16))
    assert refused.value.side == "dst"
    assert device.host_accessible_reads == 0


def test_buffer_without_a_memory_resource_is_refused_without_a_driver_query():
    unknown = BufferStandIn(0x1000, 64, None)
    with pytest.raises(hostcopy.NotHostAccessible) as refused:
        hostcopy.pack_host_copy_args(bytearray(64), unknown)
    assert "cuPointerGetAttributes" in str(refused.value)
    assert unknown.host_accessible_reads == 0


def test_closed_buffer_is_refused():
    buffer = host_buffer(bytes(16))
    buffer.closed = True
    with pytest.raises(ValueError, match="closed"):
        hostcopy.pack_host_copy_args(bytearray(16), buffer)


def test_buffer_beyond_its_size_is_out_of_bounds():
    with pytest.raises(hostcopy.OutOfBounds) as refused:
        hostcopy.pack_host_copy_args(host_buffer(bytes(16)), bytes(17))
    assert refused.value.len == 16


@pytest.mark.parametrize("value", [-1, -(2**70), WORD_MAX + 1, 2**200])
@pytest.mark.parametrize("name", ["dst", "src", "nbytes", "dst_offset", "src_offset"])
def test_negative_or_huge_integers_are_refused(name, value):
    args = {"dst": 0x1000, "src": 0x9000, "nbytes": 16}
    if name in args:
        args[name] = value
    else:
        args[name] = value
    with pytest.raises(hostcopy.IntegerOutOfRange) as refused:
        hostcopy.pack_host_copy_args(**args)
    assert refused.value.value == value and refused.value.max == WORD_MAX
    assert str(value) in str(refused.value)


def test_null_address_with_a_length_is_refused():
    with pytest.raises(hostcopy.NullWithLength) as refused:
        hostcopy.pack_host_copy_args(0, bytes(8))
    assert (refused.value.side, refused.value.nbytes) == ("dst", 8)


def test_range_past_the_end_of_the_address_space_is_refused():
    with pytest.raises(hostcopy.AddressOverflow) as refused:
        hostcopy.pack_host_copy_args(WORD_MAX - 10, bytes(100))
    assert (refused.value.side, refused.value.addr, refused.value.nbytes) == ("dst", WORD_MAX - 10, 100)


def test_overlapping_ranges_are_refused():
    backing = bytearray(64)
    base = ctypes.addressof((ctypes.c_char * 64).from_buffer(backing))
    with pytest.raises(hostcopy.Overlap) as refused:
        hostcopy.pack_host_copy_args(base + 8, base, 16)
    assert (refused.value.dst, refused.value.src, refused.value.nbytes) == (base + 8, base, 16)
    with pytest.raises(hostcopy.Overlap):
        hostcopy.pack_host_copy_args(backing, memoryview(backing)[4:20])


def test_objects_that_are_not_memory_are_type_errors():
    with pytest.raises(TypeError):
        hostcopy.pack_host_copy_args(object(), bytes(8))
    with pytest.raises(TypeError):
        hostcopy.pack_host_copy_args(bytearray(8), True, 8)
    with pytest.raises(TypeError, match="nbytes is required"):
        hostcopy.pack_host_copy_args(bytearray(8), 0x1000)
    with pytest.raises(TypeError):
        hostcopy.pack_host_copy_args(bytearray(8), bytes(8), 4.0)


def test_every_refusal_is_a_pack_error_and_a_value_error():
    for cls in (
        hostcopy.OutOfBounds,
        hostcopy.Overlap,
        hostcopy.AddressOverflow,
        hostcopy.NullWithLength,
        hostcopy.NotHostAccessible,
        hostcopy.NotContiguous,
        hostcopy.ReadOnlyBuffer,
        hostcopy.IntegerOutOfRange,
    ):
        assert issubclass(cls, hostcopy.PackError) and issubclass(cls, ValueError)


def test_rejected_counts_records_the_host_function_refuses():
    before = hostcopy.rejected()
    hostcopy.HOST_COPY_FN(None)  # null user_data
    null_dst = (ctypes.c_size_t * 3)(0, 0x1000, 8)  # packing refuses this; built by hand
    hostcopy.HOST_COPY_FN(ctypes.addressof(null_dst))
    wrapping = (ctypes.c_size_t * 3)(WORD_MAX - 4, 0x1000, 8)
    hostcopy.HOST_COPY_PARALLEL_FN(ctypes.addressof(wrapping))
    assert hostcopy.rejected() - before == 3
    empty = (ctypes.c_size_t * 3)(0, 0, 0)  # copies nothing, rejects nothing
    hostcopy.HOST_COPY_FN(ctypes.addressof(empty))
    assert hostcopy.rejected() - before == 3
