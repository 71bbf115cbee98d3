"""Every input typed: what a transfer takes as an integer, a block and
device memory, against the simulated driver. Each test is a program a new
user might write, and each mistake in it gets one documented error
instead of being truncated, wrapped or misread.
"""

import ctypes
import sys

import pytest

import hostcopy
from conftest import HostArray, LegacyHostArray, pattern

CHUNK = 64 << 10
WORD_MAX = (1 << (8 * ctypes.sizeof(ctypes.c_void_p))) - 1


@pytest.fixture
def stager(device) -> hostcopy.Stager:
    """A stager of small chunks on the test's device, staged at every size."""
    return hostcopy.Stager(device, chunk=CHUNK, buffers=2, workers=1, driver_path_below=0)


class CpuTensor(HostArray):
    """What a CPU torch tensor shows: DLPack on the CPU, and a
    ``__cuda_array_interface__`` that raises AttributeError (torch's property
    does for a tensor not on a GPU)."""

    @property
    def __cuda_array_interface__(self):
        raise AttributeError("Can't get __cuda_array_interface__ on non-CUDA tensor type: torch.FloatTensor")


def address_of(buffer) -> int:
    return ctypes.addressof((ctypes.c_char * len(buffer)).from_buffer(buffer))


@pytest.mark.parametrize(
    "blocks, named",
    [
        ([(0.5, 0.0, 8.9)], r"blocks\[0\]\.device_offset"),  # was truncated to (0, 0, 8)
        ([(0, 0, 8), (16, 8, 8.0)], r"blocks\[1\]\.nbytes"),
        ([(0, "8", 8)], r"blocks\[0\]\.host_offset"),
        ([(True, 0, 8)], r"blocks\[0\]\.device_offset"),  # a bool is not an offset
        (["123"], r"blocks\[0\]"),  # was the block (1, 2, 3)
        ([b"\x00\x08\x08"], r"blocks\[0\]"),
        ("000", r"blocks: expected"),
        ([(0, 0, 8), 7], r"blocks\[1\]"),
        ([{0: 0, 1: 0, 2: 8}], r"blocks\[0\]"),
    ],
)
def test_block_fields_that_are_not_integers_are_refused_not_truncated(sim, numpy, device, stager, blocks, named):
    source = sim.array(device, pattern(256, 3))
    pool = numpy.zeros(256, numpy.uint8)
    with pytest.raises(TypeError, match=named):
        stager.copy_blocks_to_host(pool, source, blocks)
    with pytest.raises(TypeError, match=named):
        hostcopy.copy_blocks_to_device(source, pool, blocks)
    assert not pool.any(), "nothing was copied"
    assert sim.copies_queued(device) == 0, "nothing was queued"
    sim.assert_no_violations(device)


def test_blocks_take_python_and_numpy_integers_in_tuples_lists_and_rows(sim, numpy, device, stager):
    data = pattern(256, 5)
    source = sim.array(device, data)
    rows = numpy.array([[32, 8, 8]], numpy.int64)
    for blocks in (
        [(numpy.int64(16), numpy.uint32(0), numpy.int8(8)), [32, 8, 8]],
        [(16, 0, 8), rows[0]],
    ):
        pool = numpy.zeros(16, numpy.uint8)
        stager.copy_blocks_to_host(pool, source, blocks)
        assert pool.tobytes() == data[16:24] + data[32:40]
    sim.assert_no_violations(device)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", ">i8", "<u4"])
def test_block_arrays_of_every_integer_dtype_are_read_as_they_are(sim, numpy, device, stager, dtype):
    data = pattern(256, 7)
    source = sim.array(device, data)
    pool = numpy.zeros(24, numpy.uint8)
    blocks = numpy.array([[100, 0, 8], [0, 8, 16]], dtype=dtype)
    stager.copy_blocks_to_host(pool, source, blocks)
    assert pool.tobytes() == data[100:108] + data[0:16]
    strided = numpy.array([[100, 0, 8, 0], [0, 8, 16, 0]], dtype=dtype)[:, :3]
    pool[:] = 0
    stager.copy_blocks_to_host(pool, source, strided)
    assert pool.tobytes() == data[100:108] + data[0:16]
    sim.assert_no_violations(device)


class _TensorLike:
    """A block table as torch and jax hand them over: no buffer protocol,
    ``__array__`` (refused, as a CUDA tensor refuses it, when ``on_device``)
    and ``tolist()``, counted."""

    def __init__(self, array, on_device=False):
        self.array, self.on_device, self.tolist_calls = array, on_device, 0

    def __array__(self, dtype=None, copy=None):
        if self.on_device:
            raise TypeError("can't convert a device tensor to numpy")
        return self.array

    def tolist(self):
        self.tolist_calls += 1
        return self.array.tolist()


def test_a_tensor_of_blocks_is_read_as_an_array_without_a_python_object_per_block(sim, numpy, device, stager):
    """Before, a CPU tensor's blocks went through ``tolist()``: 64 Ki rows
    cost about 18 ms a call in Python objects, against about 2 as an array."""
    data = pattern(256, 3)
    source = sim.array(device, data)
    pool = numpy.zeros(24, numpy.uint8)
    table = _TensorLike(numpy.array([[100, 0, 8], [0, 8, 16]], dtype=numpy.int64))
    stager.copy_blocks_to_host(pool, source, table)
    assert pool.tobytes() == data[100:108] + data[0:16]
    assert table.tolist_calls == 0, "read through __array__"
    on_device = _TensorLike(numpy.array([[100, 0, 8], [0, 8, 16]], dtype=numpy.int64), on_device=True)
    pool[:] = 0
    stager.copy_blocks_to_host(pool, source, on_device)
    assert pool.tobytes() == data[100:108] + data[0:16]
    assert on_device.tolist_calls == 1, "a table numpy cannot take goes through tolist()"
    # A float table is no integer array: its tolist() reaches the
    # per-block reading, which names the block.
    floats = _TensorLike(numpy.array([[100.0, 0, 8]]))
    with pytest.raises(TypeError, match=r"blocks\[0\]"):
        stager.copy_blocks_to_host(pool, source, floats)
    sim.assert_no_violations(device)


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "bool", "object", "complex64", "complex128"])
def test_block_arrays_of_other_dtypes_are_refused_never_cast_naming_the_dtype(sim, numpy, device, stager, dtype):
    source = sim.array(device, pattern(256, 9))
    pool = numpy.zeros(256, numpy.uint8)
    blocks = numpy.array([[0.5, 0, 8.9]]).astype(dtype)
    for call in (stager.copy_blocks_to_host, hostcopy.copy_blocks_to_host):
        with pytest.raises(TypeError, match=rf"blocks: an \(n, 3\) array of dtype {dtype} "):
            call(pool, source, blocks)
        with pytest.raises(TypeError, match=rf"dtype {dtype} "):
            call(pool, source, memoryview(numpy.ascontiguousarray(blocks)) if dtype != "object" else blocks)
    with pytest.raises(TypeError, match=r"dtype str "):
        stager.copy_blocks_to_host(pool, source, numpy.array([["0", "0", "8"]]))
    assert not pool.any() and sim.copies_queued(device) == 0


def test_a_negative_or_too_wide_block_field_raises_IntegerOutOfRange_naming_block_and_field(sim, numpy, device, stager):
    source = sim.array(device, pattern(256, 11))
    pool = numpy.zeros(256, numpy.uint8)
    cases = [
        ([(0, 0, 8), (0, 8, 8), (0, 16, 8), (0, -24, 8)], "blocks[3].host_offset", -24),
        ([(0, 0, 1 << 64)], "blocks[0].nbytes", 1 << 64),
        (numpy.array([[0, 0, 8], [-5, 8, 8]], numpy.int64), "blocks[1].device_offset", -5),
        (numpy.array([[0, 0, -1]], numpy.int8), "blocks[0].nbytes", -1),
    ]
    for blocks, name, value in cases:
        with pytest.raises(hostcopy.IntegerOutOfRange) as refused:
            stager.copy_blocks_to_host(pool, source, blocks)
        assert (refused.value.name, refused.value.value, refused.value.max) == (name, value, WORD_MAX)
        assert name in str(refused.value)
    assert sim.copies_queued(device) == 0


@pytest.mark.parametrize(
    "argument, value",
    [("nbytes", -1), ("dst_offset", -1), ("src_offset", -8), ("nbytes", 1 << 64), ("dst_offset", 1 << 64), ("src_offset", 1 << 70)],
)
def test_offsets_and_lengths_negative_or_wider_than_a_word_raise_IntegerOutOfRange(sim, numpy, device, stager, argument, value):
    source = sim.array(device, pattern(256, 13))
    host = numpy.zeros(256, numpy.uint8)
    calls = [
        lambda **given: stager.copy_to_host(host, source, **given),
        lambda **given: stager.copy_to_device(source, host, **given),
        lambda **given: hostcopy.copy_to_host(host, source, **given),
        lambda **given: hostcopy.copy_to_device(source, host, **given),
    ]
    for call in calls:
        with pytest.raises(hostcopy.IntegerOutOfRange) as refused:
            call(**{argument: value})
        assert (refused.value.name, refused.value.value, refused.value.max) == (argument, value, WORD_MAX)
        assert isinstance(refused.value, ValueError)
    assert not host.any() and sim.copies_queued(device) == 0
    sim.assert_no_violations(device)


def test_offsets_and_lengths_are_integers_not_bools_or_floats(sim, numpy, device, stager):
    data = pattern(256, 15)
    source = sim.array(device, data)
    host = numpy.zeros(256, numpy.uint8)
    for given in ({"nbytes": True}, {"nbytes": 8.0}, {"dst_offset": 0.5}, {"src_offset": "8"}, {"dst_offset": False}):
        with pytest.raises(TypeError, match=next(iter(given))):
            stager.copy_to_host(host, source, **given)
        with pytest.raises(TypeError, match=next(iter(given))):
            stager.copy_to_device(source, host, **given)
    assert not host.any()
    stager.copy_to_host(host, source, numpy.uint16(8), dst_offset=numpy.int64(4), src_offset=numpy.int32(16))
    assert host[4:12].tobytes() == data[16:24] and not host[:4].any() and not host[12:].any()
    sim.assert_no_violations(device)


def test_host_memory_given_as_the_device_side_raises_NotDeviceMemory(sim, numpy, device, stager):
    source = sim.array(device, pattern(64, 17))
    cpu = numpy.zeros(64, numpy.uint8)
    tensor = CpuTensor(cpu)
    raw = bytearray(64)
    out = numpy.zeros(64, numpy.uint8)
    cases = [
        (lambda: hostcopy.copy_to_host(out, tensor), "src", cpu.ctypes.data),
        (lambda: stager.copy_to_host(out, tensor), "src", cpu.ctypes.data),
        (lambda: hostcopy.copy_to_device(tensor, out), "dst", cpu.ctypes.data),
        (lambda: hostcopy.copy_to_host(out, raw), "src", address_of(raw)),
        (lambda: stager.copy_to_host(out, raw), "src", address_of(raw)),
        (lambda: stager.copy_to_device(memoryview(raw), out), "dst", address_of(raw)),
        (lambda: hostcopy.copy_to_device(raw, out), "dst", address_of(raw)),
        (lambda: hostcopy.copy_blocks_to_host(out, tensor, [(0, 0, 8)]), "src", cpu.ctypes.data),
        (lambda: stager.copy_blocks_to_device(raw, out, [(0, 0, 8)]), "dst", address_of(raw)),
        (lambda: hostcopy.copy_to_host(out, cpu), "src", cpu.ctypes.data),
    ]
    for call, side, addr in cases:
        with pytest.raises(hostcopy.NotDeviceMemory, match="not GPU memory") as refused:
            call()
        assert (refused.value.side, refused.value.addr) == (side, addr)
    assert not out.any() and raw == bytearray(64)
    sim.assert_no_violations(device)


class CopyingHostArray(HostArray):
    """A DLPack 1.0 producer that hands out a copy of its array (numpy does
    for ``copy=True``, and flags the capsule ``IS_COPIED``)."""

    def __dlpack__(self, stream=None, max_version=None):
        return self.numpy_array.__dlpack__(max_version=max_version, copy=True)


def test_a_dlpack_destination_not_proven_writable_is_refused(sim, numpy, device, stager):
    data = pattern(4096, 19)
    source = sim.array(device, data)
    legacy = numpy.zeros(len(data), numpy.uint8)
    read_only = numpy.zeros(len(data), numpy.uint8)
    read_only.flags.writeable = False
    copied = numpy.zeros(len(data), numpy.uint8)
    cases = [
        # Unversioned (as a jax CPU array's capsule is): no flag can say it is writable.
        (LegacyHostArray(legacy), "unversioned capsule"),
        (HostArray(read_only), "marked read-only"),
        (CopyingHostArray(copied), "a copy its producer made"),
    ]
    for target, why in cases:
        calls = [
            lambda: stager.copy_to_host(target, source),
            lambda: hostcopy.copy_to_host(target, source, blocking=False),
            lambda: stager.copy_blocks_to_host(target, source, [(0, 0, 16)]),
        ]
        for call in calls:
            with pytest.raises(hostcopy.ReadOnlyBuffer, match=why) as refused:
                call()
            assert (refused.value.side, refused.value.len) == ("dst", len(data))
    # Buffer-protocol objects that are read-only, as before.
    for target in (bytes(len(data)), memoryview(bytearray(len(data))).toreadonly(), read_only):
        with pytest.raises(hostcopy.ReadOnlyBuffer):
            stager.copy_to_host(target, source)
    assert not legacy.any() and not read_only.any() and not copied.any()
    assert sim.copies_queued(device) == 0, "nothing was queued"
    # Each is a source like any other; a versioned writable array a destination.
    for host in (LegacyHostArray(numpy.frombuffer(data, numpy.uint8).copy()), CopyingHostArray(numpy.frombuffer(data, numpy.uint8))):
        target = sim.array(device, bytes(len(data)))
        stager.copy_to_device(target, host)
        assert target.read() == data
    writable = numpy.zeros(len(data), numpy.uint8)
    stager.copy_to_host(HostArray(writable), source)
    assert writable.tobytes() == data
    sim.assert_no_violations(device)


def test_a_gpu_destination_whose_versioned_capsule_is_read_only_is_refused(sim, numpy, device):
    # The producer's DLPack 1.0 capsule marks the tensor read-only: the
    # copy refuses it as a destination (ReadOnlyBuffer) before any driver
    # call. (numpy's capsule stands in for a GPU producer's: the flag is
    # what is read.) A writable one gets past the check.
    class DeviceTensor:
        def __init__(self, array):
            self.array = array

        def __dlpack_device__(self):
            return (2, 0)  # kDLCUDA

        def __dlpack__(self, stream=None, max_version=None):
            assert max_version == (1, 0)
            return self.array.__dlpack__(max_version=max_version)

    frozen = numpy.zeros(64, numpy.uint8)
    frozen.setflags(write=False)
    queued = sim.copies_queued(device)
    with pytest.raises(hostcopy.ReadOnlyBuffer, match="read-only"):
        hostcopy.copy_to_device(DeviceTensor(frozen), bytes(64))
    assert sim.copies_queued(device) == queued
    with pytest.raises(hostcopy.NotDeviceMemory):
        hostcopy.copy_to_device(DeviceTensor(numpy.zeros(64, numpy.uint8)), bytes(64))



class Tensor(HostArray):
    """What hostcopy sees of a torch CPU tensor: DLPack, a type of the
    ``torch`` module with ``untyped_storage``, and an
    ``__array_interface__``, through which ``numpy.asarray`` gives an array
    whose base is the tensor (as torch's ``tensor.numpy()`` does)."""

    __module__ = "torch"

    def untyped_storage(self):
        return self.numpy_array

    @property
    def __array_interface__(self):
        return self.numpy_array.__array_interface__


def test_a_torch_cpu_tensor_as_the_host_side_of_a_non_blocking_copy_is_refused_naming_why(sim, numpy, device, stager):
    # torch frees a CPU tensor's memory under a live reference on resize_,
    # set_, share_memory_, .data = and a resizing out= (measured with torch
    # 2.11; docs/design-record.md, "A torch CPU tensor is refused as the
    # host side of a non-blocking copy"): a Transfer holding the tensor
    # cannot keep it.
    data = pattern(4096, 21)
    source = sim.array(device, data)
    host = Tensor(numpy.zeros(4096, numpy.uint8))
    for copy in (
        lambda: stager.copy_to_host(host, source, blocking=False),
        lambda: hostcopy.copy_to_device(source, host, blocking=False),
        lambda: stager.copy_blocks_to_host(host, source, [(0, 0, 64)], blocking=False),
        lambda: hostcopy.copy_blocks_to_device(source, host, [(0, 0, 64)], blocking=False),
    ):
        with pytest.raises(hostcopy.MemoryNotHeld, match=r"torch tensor.*resize_\(\).*blocking=True.*from_numpy") as raised:
            copy()
        assert raised.value.side in ("dst", "src") and isinstance(raised.value, TypeError)
    assert sim.copies_queued(device) == 0, "nothing was queued"
    # Blocking, the same tensor is copied: the call returns with the bytes in.
    stager.copy_to_host(host, source)
    assert host.numpy_array.tobytes() == data
    sim.assert_no_violations(device)


def test_numpy_arrays_over_a_torch_tensor_or_a_dlpack_export_are_refused_when_non_blocking(sim, numpy, device, stager):
    data = pattern(4096, 22)
    source = sim.array(device, data)
    tensor = Tensor(numpy.zeros(4096, numpy.uint8))
    over_tensor = numpy.asarray(tensor)  # as tensor.numpy() is: its base is the tensor
    assert over_tensor.base is tensor
    for host in (over_tensor, over_tensor[:2048], memoryview(over_tensor[:2048])):
        with pytest.raises(hostcopy.MemoryNotHeld, match="the owner of this"):
            stager.copy_to_host(host, source, nbytes=2048, blocking=False)
    with pytest.raises(hostcopy.MemoryNotHeld, match=r"numpy\.from_dlpack"):
        stager.copy_to_host(numpy.from_dlpack(numpy.zeros(4096, numpy.uint8)), source, blocking=False)
    assert sim.copies_queued(device) == 0, "nothing was queued"
    # Memory numpy owns, or borrows through the buffer protocol (which
    # locks a bytearray's size), is held: accepted.
    for host in (numpy.zeros(4096, numpy.uint8), numpy.frombuffer(bytearray(4096), numpy.uint8)):
        stager.copy_to_host(host, source, blocking=False).wait()
        assert host.tobytes() == data
    sim.assert_no_violations(device)


def test_torch_memory_behind_as_strided_or_a_tensor_subclass_is_refused_when_non_blocking(sim, numpy, device, stager):
    source = sim.array(device, pattern(4096, 23))
    over_tensor = numpy.asarray(Tensor(numpy.zeros(4096, numpy.uint8)))
    strided = numpy.lib.stride_tricks.as_strided(over_tensor, shape=(4096,), strides=(1,))
    with pytest.raises(hostcopy.MemoryNotHeld):
        stager.copy_to_host(strided, source, blocking=False)
    # A subclass defined outside torch (as torchao's are) is a tensor too.
    torch = type(sys)("torch")
    torch.Tensor = type("Tensor", (HostArray,), {})
    subclass = type("Quantized", (torch.Tensor,), {"__module__": "torchao.dtypes"})
    sys.modules["torch"] = torch
    try:
        with pytest.raises(hostcopy.MemoryNotHeld, match="torch tensor"):
            stager.copy_to_host(subclass(numpy.zeros(4096, numpy.uint8)), source, blocking=False)
    finally:
        del sys.modules["torch"]
    assert sim.copies_queued(device) == 0, "nothing was queued"


def test_a_cuda_torch_tensor_is_read_from_its_attributes_and_ordered_after_torchs_stream(sim, numpy, device, stager, monkeypatch):
    data = pattern(4096, 24)
    memory = sim.array(device, data)
    other = sim.stream(device)
    capturing = sim.stream(device)
    current = {"stream": 0}
    torch = type(sys)("torch")
    torch.strided = object()

    class Tensor:
        """What the transfer reads of a CUDA tensor: no DLPack export."""

        is_cuda, requires_grad, is_quantized, nbytes = True, False, False, len(data)
        layout, shape = torch.strided, (1024, 4)

        def __init__(self, contiguous=True):
            self.contiguous = contiguous
            self.device = type("device", (), {"index": device})()

        def is_conj(self):
            return False

        def is_neg(self):
            return False

        def is_contiguous(self):
            return self.contiguous

        def stride(self):
            return (1, 1024)

        def data_ptr(self):
            return memory.ptr

    torch.Tensor = Tensor
    torch._C = type(sys)("torch._C")
    torch._C._cuda_getCurrentRawStream = lambda index: current["stream"]
    monkeypatch.setitem(sys.modules, "torch", torch)
    for stream in (0, other.handle):  # the legacy default stream, then another one waited for
        current["stream"] = stream
        host = numpy.zeros(len(data), numpy.uint8)
        stager.copy_to_host(host, Tensor(), blocking=False).wait()
        assert host.tobytes() == data
    with pytest.raises(hostcopy.NotContiguous) as strided:
        stager.copy_to_host(numpy.zeros(len(data), numpy.uint8), Tensor(contiguous=False))
    assert (strided.value.side, strided.value.shape, strided.value.strides) == ("src", (1024, 4), (1, 1024))
    capturing.begin_capture()
    current["stream"] = capturing.handle
    queued = sim.copies_queued(device)
    with pytest.raises(hostcopy.StreamCapturing, match="capturing a graph on its current stream"):
        stager.copy_to_device(Tensor(), bytes(len(data)))
    current["stream"] = 0
    capturing.end_capture()
    assert sim.copies_queued(device) == queued, "nothing was queued for the refused transfers"
    sim.assert_no_violations(device)
