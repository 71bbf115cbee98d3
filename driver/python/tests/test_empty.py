"""``hostcopy.empty``: pageable host memory whose pages are present when
it is returned, as numpy arrays of any shape and dtype, usable as either
side of every copy."""

import sys

import pytest

import hostcopy

numpy = pytest.importorskip("numpy", reason="numpy is not installed (ci.sh installs it)")

PAGE = 4096


def resident_bytes(array) -> int:
    """The bytes of ``array``'s mapping that are present (``Rss`` in
    /proc/self/smaps, which lists the mapping that holds the address)."""
    address = array.ctypes.data
    with open("/proc/self/smaps") as smaps:
        inside = False
        for line in smaps:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                start, end = (int(part, 16) for part in head.split("-"))
                inside = start <= address < end
            elif inside and head == "Rss:":
                return int(line.split()[1]) * 1024
    raise AssertionError("no mapping holds the array")


def test_shape_dtype_zeros_alignment_and_writes():
    array = hostcopy.empty((3, 1000), numpy.float32)
    assert array.shape == (3, 1000) and array.dtype == numpy.float32
    assert array.flags.c_contiguous and array.flags.writeable
    assert array.ctypes.data % PAGE == 0, "page-aligned"
    assert not array.any(), "zeroed"
    array[1, 7] = 2.5
    assert array[1, 7] == 2.5
    assert hostcopy.empty(5).dtype == numpy.uint8 and hostcopy.empty(5).shape == (5,)
    assert hostcopy.empty([2, 2], "<i8").nbytes == 32


def test_the_memory_lives_as_long_as_any_view_of_it():
    array = hostcopy.empty(1 << 20)
    array[:4] = (1, 2, 3, 4)
    view = array[2:6]
    owner = array.base
    while isinstance(owner, numpy.ndarray):
        owner = owner.base
    assert type(owner).__name__ == "PageableMemory" and owner.nbytes == 1 << 20
    del array, owner
    view[3] = 9  # still mapped: the view keeps its base
    assert list(view) == [3, 4, 0, 9]


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/self/smaps")
def test_its_pages_are_present_when_it_is_returned():
    size = 64 << 20
    fresh = numpy.empty(size, numpy.uint8)  # numpy's: no pages until written
    made = hostcopy.empty(size)
    assert resident_bytes(made) >= size, "every page of hostcopy.empty's memory is present"
    assert resident_bytes(fresh) < size // 2, "numpy.empty's memory is not (the comparison means something)"


def test_zero_sized_and_bad_arguments():
    assert hostcopy.empty(0).size == 0
    assert hostcopy.empty((4, 0), numpy.int32).shape == (4, 0)
    with pytest.raises(ValueError, match="negative"):
        hostcopy.empty((2, -1))
    with pytest.raises(TypeError):
        hostcopy.empty(2.5)
    with pytest.raises(TypeError):
        hostcopy.empty(4, "not a dtype")
    with pytest.raises(OverflowError):
        hostcopy.empty(1 << 70)


def test_it_is_host_memory_for_every_copy_non_blocking_too(sim, device):
    data = bytes(range(256)) * 64
    source = sim.array(device, data)
    pool = hostcopy.empty((16, 1024))
    stager = hostcopy.Stager(device, chunk=4096, buffers=2, workers=1, driver_path_below=0)
    stager.copy_to_host(pool, source, blocking=False).wait()
    assert pool.tobytes() == data
    back = sim.array(device, bytes(len(data)))
    hostcopy.copy_to_device(back, pool, blocking=False).wait()
    assert back.read() == data
    sim.assert_no_violations(device)


@pytest.mark.parametrize("prefault", [True, False])
def test_a_fresh_destination_is_byte_exact_with_prefault_on_and_off(sim, device, prefault):
    data = bytes(range(256)) * (8 << 10)  # 2 MiB
    source = sim.array(device, data)
    with hostcopy.Stager(device, chunk=256 << 10, buffers=2, workers=1, driver_path_below=0, prefault=prefault) as stager:
        assert stager.options["prefault"] is prefault
        fresh = numpy.empty(len(data), numpy.uint8)
        stager.copy_to_host(fresh, source)
        assert fresh.tobytes() == data
    sim.assert_no_violations(device)


def test_shapes_and_dtypes_as_numpy_empty_takes_them():
    for shape, dtype in [(range(2, 4), None), (numpy.array([2, 3]), "f8"), (4, (numpy.float32, (3,))), ((2, 2), "i4,f8")]:
        expected = numpy.empty(shape, numpy.uint8 if dtype is None else dtype)
        made = hostcopy.empty(shape, dtype)
        assert (made.shape, made.dtype) == (expected.shape, expected.dtype), (shape, dtype)
        assert made.flags.c_contiguous and made.flags.writeable
