"""Bad input the README's table says is refused raises what it says, with
the message naming the right side."""

import pytest

import hostcopy

from conftest import pattern


@pytest.mark.parametrize("dtype", ["datetime64[ns]", "timedelta64[s]", "datetime64[D]"])
def test_a_datetime_or_timedelta_block_table_raises_type_error(sim, numpy, device, dtype):
    source = sim.array(device, pattern(256, 3))
    dst = numpy.zeros(256, numpy.uint8)
    table = numpy.zeros((2, 3), dtype)
    for copy, args in (
        (hostcopy.copy_blocks_to_host, (dst, source)),
        (hostcopy.copy_blocks_to_device, (source, dst)),
    ):
        with pytest.raises(TypeError, match=r"blocks: .*dtype .*(datetime64|timedelta64)"):
            copy(*args, table)
    assert not dst.any()
    assert sim.copies_queued(device) == 0


@pytest.mark.parametrize("dtype", [object, [("a", "i8"), ("b", object)], ("O", (2,))])
def test_empty_refuses_a_dtype_holding_python_objects(numpy, dtype):
    with pytest.raises(TypeError, match="object references"):
        hostcopy.empty(4, dtype=dtype)


def test_empty_still_takes_plain_structured_dtypes(numpy):
    made = hostcopy.empty(3, dtype=[("a", "i4"), ("b", "f8")])
    assert made.shape == (3,) and not made.view(numpy.uint8).any()


def test_a_host_range_out_of_bounds_names_the_host(sim, numpy, device):
    source = sim.array(device, pattern(64, 5))
    small = numpy.zeros(32, numpy.uint8)
    with pytest.raises(hostcopy.OutOfBounds) as refused:
        hostcopy.copy_to_host(small, source)
    error = refused.value
    assert (error.side, error.offset, error.nbytes, error.len) == ("dst", 0, 64, 32)
    assert str(error).startswith("host range of 64 bytes"), str(error)
    host = numpy.frombuffer(pattern(64, 6), numpy.uint8).copy()
    with pytest.raises(hostcopy.OutOfBounds) as refused:
        hostcopy.copy_to_device(source, host, 16, src_offset=60)
    error = refused.value
    assert (error.side, error.offset, error.nbytes, error.len) == ("src", 60, 16, 64)
    assert "host range" in str(error) and "device" not in str(error), str(error)
    # The device side's message still says so.
    with pytest.raises(hostcopy.OutOfBounds, match="^device range") as refused:
        hostcopy.copy_to_host(numpy.zeros(128, numpy.uint8), source, 16, src_offset=60)
    assert refused.value.side == "src"
    assert sim.copies_queued(device) == 0
