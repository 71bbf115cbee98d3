"""The native copies (``hostcopy.Stager``'s and the module's: ``src/sides.rs``,
``src/staging.rs``, ``src/default_stager.rs``) against the documented behaviour,
under the simulated driver: a batch without a table, a cuda.core Buffer's
ordering, structured buffers, the side an error names, the protocols'
pairs, refused integers, a forked child, and a transfer dropped unwaited
that cannot be finished.
"""

import gc
import subprocess
import sys
import time
import weakref

import pytest

import hostcopy
from conftest import SIM_SCRIPT_PRELUDE, pattern
from test_error_classes import unversioned_capsule


@pytest.fixture
def stager(device) -> hostcopy.Stager:
    return hostcopy.Stager(device, chunk=64 << 10, buffers=2, workers=1, driver_path_below=0)


class BufferOver:
    """A cuda.core Buffer's shape (handle, size, memory_resource) over a
    simulated device array."""

    def __init__(self, array, size):
        self._array, self._size = array, size

    @property
    def handle(self):
        return self._array.ptr

    @property
    def size(self):
        return self._size

    memory_resource = None


# --- a batch without a table is refused, not taken for a range ----------


def test_blocks_none_is_refused_not_taken_for_a_whole_range_copy(sim, numpy, device, stager):
    data = pattern(4096, 3)
    target = sim.array(device, data)
    with pytest.raises(TypeError):
        hostcopy.copy_blocks_to_device(target, numpy.zeros(4096, numpy.uint8), None)
    assert target.read() == data
    dst = numpy.zeros(4096, numpy.uint8)
    with pytest.raises(TypeError):
        stager.copy_blocks_to_host(dst, target, None)
    assert not dst.any()


# --- a cuda.core Buffer is ordered after stream= ------------------------


def test_a_buffer_device_side_is_ordered_after_stream(sim, numpy, device, stager):
    data = pattern(4096, 5)
    array = sim.array(device, data)
    buffer = BufferOver(array, 4096)
    dst = numpy.zeros(4096, numpy.uint8)
    capturing = sim.stream(device)
    capturing.begin_capture()
    try:
        # A Buffer names no stream of its own: the transfer waits for
        # `stream=`, so a capturing one is refused as for an array.
        with pytest.raises(hostcopy.StreamCapturing):
            stager.copy_to_host(dst, array, stream=capturing)
        with pytest.raises(hostcopy.StreamCapturing):
            stager.copy_to_host(dst, buffer, stream=capturing)
    finally:
        capturing.end_capture().destroy()


def test_a_buffer_device_side_refuses_a_stream_of_another_device(sim, numpy):
    first, second = sim.device(), sim.device()
    stager = hostcopy.Stager(first, chunk=64 << 10, buffers=2, workers=1, driver_path_below=0)
    array = sim.array(first, pattern(4096, 7))
    dst = numpy.zeros(4096, numpy.uint8)
    foreign = sim.stream(second)
    with pytest.raises(hostcopy.WrongDevice):
        stager.copy_to_host(dst, array, stream=foreign)
    with pytest.raises(hostcopy.WrongDevice):
        stager.copy_to_host(dst, BufferOver(array, 4096), stream=foreign)


# --- a structured dtype whose field name holds an "O" -------


def test_a_structured_array_with_a_field_named_Offset_is_plain_bytes(sim, numpy, device, stager):
    source = sim.array(device, pattern(4096, 9))
    dst = numpy.zeros(1024, dtype=[("Offset", "<i4")])  # buffer format "T{i:Offset:}"
    stager.copy_to_host(dst, source)
    assert dst.tobytes() == pattern(4096, 9)


# --- errors name the side, src or dst -------------------------------------


class CudaDlpack:
    def __init__(self, data, nbytes):
        self.data, self.nbytes = data, nbytes

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, stream=None, max_version=None):
        capsule, self.kept = unversioned_capsule(self.data or 0, self.nbytes, device_type=2)
        return capsule


def test_a_dlpack_source_at_a_null_pointer_names_src(sim, numpy, device, stager):
    with pytest.raises(hostcopy.NullWithLength) as refused:
        stager.copy_to_host(numpy.zeros(64, numpy.uint8), CudaDlpack(None, 64))
    assert refused.value.side == "src"


def test_a_device_side_past_its_allocation_names_its_side(sim, numpy, device, stager):
    array = sim.array(device, bytes(4096))

    class TooLong:
        __cuda_array_interface__ = {"shape": (8192,), "typestr": "|u1", "data": (array.ptr, False), "version": 3}

    with pytest.raises(hostcopy.OutOfBounds) as refused:
        stager.copy_to_host(numpy.zeros(8192, numpy.uint8), TooLong())
    assert refused.value.side == "src"


# --- the protocols' pairs as Python unpacks them; refused integers -----


def test_a_list_where_a_pair_is_expected_is_read_as_before(sim, numpy, device, stager):
    data = pattern(4096, 11)
    array = sim.array(device, data)

    class ListData:
        __cuda_array_interface__ = {"shape": (4096,), "typestr": "|u1", "data": [array.ptr, False], "version": 3}

    dst = numpy.zeros(4096, numpy.uint8)
    # Read as Python unpacks it: ptr, readonly = interface["data"].
    stager.copy_to_host(dst, ListData())
    assert dst.tobytes() == data


def test_a_negative_interface_pointer_raises_a_hostcopy_error(sim, numpy, device, stager):
    class Negative:
        __cuda_array_interface__ = {"shape": (64,), "typestr": "|u1", "data": (-4096, False), "version": 3}
    with pytest.raises(hostcopy.IntegerOutOfRange):
        stager.copy_to_host(numpy.zeros(64, numpy.uint8), Negative())


def test_a_float_or_bool_stream_handle_is_refused_not_truncated(sim, numpy, device, stager):
    array = sim.array(device, pattern(4096, 13))
    dst = numpy.zeros(4096, numpy.uint8)

    class FloatStream:
        def __cuda_stream__(self):
            return (0, 1.7)

    class BoolStream:
        cuda_stream = True

    for stream in (FloatStream(), BoolStream()):
        with pytest.raises(TypeError):
            stager.copy_to_host(dst, array, stream=stream)
    assert not dst.any()


def test_a_read_only_interface_destination_reports_its_length(sim, numpy, device, stager):
    array = sim.array(device, pattern(4096, 15))

    class ReadOnly:
        __cuda_array_interface__ = {"shape": (1024,), "typestr": "<u4", "data": (array.ptr, True), "version": 3}

    with pytest.raises(hostcopy.ReadOnlyBuffer) as refused:
        stager.copy_to_device(ReadOnly(), numpy.zeros(4096, numpy.uint8))
    assert (refused.value.side, refused.value.len) == ("dst", 4096)


# --- a forked child refuses a batch before running the blocks' code -----


def test_a_forked_child_refuses_a_batch_before_reading_its_blocks(sim):
    script = SIM_SCRIPT_PRELUDE + """
stager = hostcopy.Stager(device, chunk=1 << 16, buffers=2, workers=1, driver_path_below=0)
dst = numpy.zeros(SIZE, numpy.uint8)
stager.copy_to_host(dst, source)

class Blocks:
    def tolist(self):  # a CUDA tensor's tolist() touches CUDA
        raise RuntimeError("tolist ran")

pid = os.fork()
if pid == 0:
    try:
        stager.copy_blocks_to_host(dst, source, Blocks())
    except hostcopy.CudaUnavailable:
        os._exit(0)
    except BaseException as failure:
        print(type(failure).__name__, failure, flush=True)
    os._exit(1)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


# --- a transfer dropped unwaited that cannot be finished keeps its memory --

DEINITIALIZED = 4
ILLEGAL_ADDRESS = 700


def held_download(sim, numpy, device, stager, monkeypatch):
    """A ``blocking=False`` download started with the device's work held,
    the unraisable errors reported meanwhile, and a weak reference to its
    destination that records when the destination is freed."""
    reported, freed_at = [], []
    monkeypatch.setattr(sys, "unraisablehook", reported.append)
    source = sim.array(device, pattern(1 << 20, 17))
    dst = numpy.zeros(1 << 20, numpy.uint8)
    sim.hold(device)
    transfer = stager.copy_to_host(dst, source, blocking=False)
    alive = weakref.ref(dst, lambda _: freed_at.append(time.monotonic()))
    return transfer, alive, freed_at, reported


def fail_the_drops_first_call(sim, device):
    """The next drop cannot finish its transfer: its first driver call
    (saving the thread's current context) fails."""
    gc.collect()  # earlier tests' garbage now, not during the drop
    sim.native.sim_make_current(device)
    sim.fail_call(device, "cuCtxGetCurrent", 1, DEINITIALIZED)


def test_a_transfer_dropped_unfinished_lets_go_of_its_host_memory_only_after_its_copier(
    sim, numpy, device, stager, monkeypatch
):
    # Not finished by its drop while its copies are held: the destination
    # goes once the copier is done, not before and not never.
    transfer, alive, freed_at, reported = held_download(sim, numpy, device, stager, monkeypatch)
    fail_the_drops_first_call(sim, device)
    # The drop waits for the copier with the GIL held: released from a
    # thread that needs none.
    released_after = time.monotonic() + 0.2
    sim.native.sim_release_later(device, 200)
    del transfer
    assert [type(report.exc_value) for report in reported] == [hostcopy.CudaError]
    assert alive() is None, "kept for good"
    assert freed_at and freed_at[0] >= released_after, "freed while the copy was held"


def test_a_transfer_dropped_unfinished_after_a_sticky_error_lets_go_of_its_host_memory(
    sim, numpy, device, stager, monkeypatch
):
    # The copier gives up on the transfer at the error and touches its host
    # memory no more: the destination goes (it had been kept for good).
    transfer, alive, _, reported = held_download(sim, numpy, device, stager, monkeypatch)
    sim.fail_context(device, ILLEGAL_ADDRESS)
    sim.release(device)
    fail_the_drops_first_call(sim, device)
    del transfer
    assert [type(report.exc_value) for report in reported] == [hostcopy.CudaError]
    assert alive() is None
