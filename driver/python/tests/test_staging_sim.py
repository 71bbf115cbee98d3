"""copy_to_host, copy_to_device and Stager against the simulated driver:
byte-exact both ways for every host type, what a transfer keeps alive,
stream order, and every refusal, each with its numbers.
"""

import faulthandler
import inspect
import mmap
import sys
import threading
import time
import weakref

import pytest

import hostcopy
from conftest import HostArray, pattern

CHUNK = 256 << 10
LAUNCH_FAILED = 719
SIZES = [1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 17]


def small_stager(device: int, **options) -> hostcopy.Stager:
    settings = dict(chunk=CHUNK, buffers=3, workers=2, driver_path_below=0)
    settings.update(options)
    return hostcopy.Stager(device, **settings)


@pytest.fixture
def stager(device) -> hostcopy.Stager:
    """A stager of small chunks on the test's device, staged at every size."""
    return small_stager(device)


class Tensor:
    """A device array as a library hands it out: its memory is freed when
    the array goes (weak references tell when)."""

    def __init__(self, array):
        self.array = array

    @property
    def __cuda_array_interface__(self):
        return self.array.__cuda_array_interface__

    def __del__(self):
        self.array.free()


@pytest.mark.parametrize("size", SIZES)
def test_both_ways_byte_exact_for_sizes_not_multiples_of_the_chunk(sim, numpy, device, stager, size):
    data = pattern(size, 5)
    source = sim.array(device, data)
    dst = numpy.empty(size, numpy.uint8)
    assert stager.copy_to_host(dst, source) is None
    assert dst.tobytes() == data
    target = sim.array(device, bytes(size))
    stager.copy_to_device(target, dst)
    assert target.read() == data
    stager.close()
    sim.assert_no_violations(device)


def test_every_host_type_both_ways(sim, numpy, device, tmp_path):
    stager = small_stager(device, h2d_streaming=True)
    size = 2 * CHUNK + 3
    data = pattern(size, 7)
    source = sim.array(device, data)
    backing = tmp_path / "mapped"
    backing.write_bytes(bytes(size))
    with open(backing, "r+b") as file, mmap.mmap(file.fileno(), size) as mapped:
        dsts = [numpy.empty(size, numpy.uint8), bytearray(size), memoryview(bytearray(size)), mapped]
        dsts.append(HostArray(numpy.zeros(size, numpy.uint8)))
        for dst in dsts:
            stager.copy_to_host(dst, source)
            got = dst.numpy_array.tobytes() if isinstance(dst, HostArray) else bytes(dst)
            assert got == data, type(dst).__name__
        sources = [data, bytearray(data), numpy.frombuffer(data, numpy.uint8)]
        sources.append(HostArray(numpy.frombuffer(data, numpy.uint8).copy()))  # DLPack: writable arrays only
        for src in sources:
            target = sim.array(device, bytes(size))
            stager.copy_to_device(target, src)
            assert target.read() == data, type(src).__name__
    sim.assert_no_violations(device)


def test_the_one_call_functions_use_a_stager_per_device(sim, numpy, device):
    size = (3 << 20) + 5  # above the default crossover: staged
    data = pattern(size, 9)
    source = sim.array(device, data)
    dst = numpy.empty(size, numpy.uint8)
    hostcopy.copy_to_host(dst, source)
    assert dst.tobytes() == data
    target = sim.array(device, bytes(size))
    hostcopy.copy_to_device(target, dst)
    assert target.read() == data
    assert sim.state(device)["wait_value_ops"] > 0, "staged (an upload's chunk waits on its buffer's counter), not the driver's path"
    sim.assert_no_violations(device)


def test_offsets_and_lengths(sim, numpy, device, stager):
    data = pattern(CHUNK * 2, 11)
    source = sim.array(device, data)
    dst = numpy.zeros(CHUNK * 2, numpy.uint8)
    stager.copy_to_host(dst, source, 1000, dst_offset=7, src_offset=13)
    assert dst[7:1007].tobytes() == data[13:1013]
    assert not dst[:7].any() and not dst[1007:].any()
    target = sim.array(device, bytes(CHUNK * 2))
    stager.copy_to_device(target, dst, 500, dst_offset=3, src_offset=7)
    assert target.read()[3:503] == data[13:513]


def test_a_transfer_keeps_both_sides_alive_until_it_is_done(sim, numpy, device, stager):
    size = 3 * CHUNK
    data = pattern(size, 13)
    source = Tensor(sim.array(device, data))
    dst = numpy.empty(size, numpy.uint8)
    gone = weakref.ref(source)
    sim.hold(device)
    transfer = stager.copy_to_host(dst, source, blocking=False)
    allocations = sim.state(device)["device_allocations"]
    del source
    assert gone() is not None, "the transfer let go of its source"
    assert sim.state(device)["device_allocations"] == allocations
    assert not transfer.done()
    sim.release(device)
    del transfer  # dropped unwaited: it waits
    assert dst.tobytes() == data
    assert gone() is None, "the source outlived its transfer"
    sim.assert_no_violations(device)


def test_a_transfer_waits_and_reports_as_a_context_manager(sim, numpy, device, stager):
    data = pattern(2 * CHUNK, 15)
    source = sim.array(device, data)
    dst = numpy.empty(2 * CHUNK, numpy.uint8)
    with stager.copy_to_host(dst, source, blocking=False) as transfer:
        pass
    assert transfer.done() and dst.tobytes() == data
    transfer.wait()  # again: at once
    target = sim.array(device, bytes(2 * CHUNK))
    with stager.copy_to_device(target, dst, blocking=False, stream=sim.stream(device)):
        pass
    assert target.read() == data


def test_a_bytearray_cannot_be_resized_under_a_transfer(sim, device, stager):
    source = sim.array(device, pattern(CHUNK, 17))
    dst = bytearray(CHUNK)
    sim.hold(device)
    transfer = stager.copy_to_host(dst, source, blocking=False)
    with pytest.raises(BufferError):
        dst.extend(b"x")
    sim.release(device)
    sim.drain(device)
    # The device has run it; the stager's copier makes the host side then.
    deadline = time.monotonic() + 30
    while not transfer.done():
        assert time.monotonic() < deadline, "the transfer never finished"
        time.sleep(0.001)
    with pytest.raises(BufferError):
        dst.extend(b"x")  # done() does not let go of it: wait() does
    transfer.wait()
    dst.extend(b"x")


def test_the_gil_is_released_while_a_transfer_blocks(sim, numpy, device, stager):
    data = pattern(2 * CHUNK, 19)
    source = sim.array(device, data)
    dst = numpy.empty(2 * CHUNK, numpy.uint8)
    sim.hold(device)
    started = threading.Event()

    def copy():
        started.set()
        stager.copy_to_host(dst, source)

    copier = threading.Thread(target=copy)
    # A copy that held the GIL while the device is held would stop this
    # thread for good: end the process with a traceback instead.
    faulthandler.dump_traceback_later(120, exit=True)
    try:
        copier.start()
        started.wait()
        spins = sum(1 for _ in range(100_000))  # Python runs meanwhile
        sim.release(device)
        copier.join()
    finally:
        faulthandler.cancel_dump_traceback_later()
    assert spins == 100_000 and dst.tobytes() == data


def test_streams_order_the_transfer_and_capturing_ones_are_refused(sim, numpy, device, stager):
    data = pattern(CHUNK + 1, 21)
    producer = sim.stream(device)
    source = sim.array(device, data, stream=producer.handle)  # a CAI stream
    dst = numpy.empty(CHUNK + 1, numpy.uint8)
    for stream in (None, producer, producer.handle, 0):
        dst[:] = 0
        stager.copy_to_host(dst, source, stream=stream)
        assert dst.tobytes() == data
    capturing = sim.stream(device)
    capturing.begin_capture()
    with pytest.raises(hostcopy.StreamCapturing):
        stager.copy_to_host(dst, source, stream=capturing)
    capturing.end_capture().destroy()
    sim.assert_no_violations(device)


def test_memory_or_streams_of_another_device_are_refused(sim, numpy):
    first, second = sim.device(), sim.device()
    stager = small_stager(first)
    foreign = sim.array(second, bytes(64))
    dst = numpy.empty(64, numpy.uint8)
    with pytest.raises(hostcopy.WrongDevice) as refused:
        stager.copy_to_host(dst, foreign)
    assert (refused.value.expected, refused.value.found) == (first, second)
    mine = sim.array(first, bytes(64))
    with pytest.raises(hostcopy.WrongDevice):
        stager.copy_to_host(dst, mine, stream=sim.stream(second))
    # The one-call function picks the array's own device.
    hostcopy.copy_to_host(dst, foreign)
    sim.assert_no_violations(first)
    sim.assert_no_violations(second)


class FakeDevice:
    """Claims to be GPU memory at a host address."""

    def __init__(self, address, size):
        self.__cuda_array_interface__ = {"shape": (size,), "typestr": "|u1", "data": (address, False), "version": 3}


def test_refusals_carry_their_numbers(sim, numpy, device, stager):
    source = sim.array(device, pattern(1024, 23))
    with pytest.raises(hostcopy.OutOfBounds) as refused:
        stager.copy_to_host(numpy.empty(1000, numpy.uint8), source)
    assert (refused.value.side, refused.value.nbytes, refused.value.len) == ("dst", 1024, 1000)
    with pytest.raises(hostcopy.OutOfBounds) as refused:
        stager.copy_to_host(numpy.empty(2048, numpy.uint8), source, 2000)
    assert refused.value.side == "src"
    with pytest.raises(hostcopy.ReadOnlyBuffer):
        stager.copy_to_host(bytes(1024), source)
    strided = numpy.empty((64, 32), numpy.uint8)[:, :16]
    with pytest.raises(hostcopy.NotContiguous):
        stager.copy_to_host(strided, source)
    with pytest.raises(hostcopy.NotDeviceMemory, match="not GPU memory"):
        stager.copy_to_host(numpy.empty(1024, numpy.uint8), numpy.empty(1024, numpy.uint8))
    with pytest.raises(TypeError, match="expected GPU memory"):
        stager.copy_to_host(numpy.empty(1024, numpy.uint8), object())
    with pytest.raises(TypeError, match="expected host memory"):
        stager.copy_to_host(source, source)
    pageable = numpy.empty(1024, numpy.uint8)
    with pytest.raises(hostcopy.NotDeviceMemory) as refused:
        stager.copy_to_host(numpy.empty(1024, numpy.uint8), FakeDevice(pageable.ctypes.data, 1024))
    assert refused.value.addr == pageable.ctypes.data
    with pytest.raises(hostcopy.NotDeviceMemory):
        hostcopy.copy_to_host(numpy.empty(1024, numpy.uint8), FakeDevice(pageable.ctypes.data, 1024))
    assert sim.copies_queued(device) == 0, "nothing ran for a refused transfer"
    sim.assert_no_violations(device)


def test_an_error_mid_transfer_is_raised_and_the_stager_works_on(sim, numpy, device, stager):
    data = pattern(4 * CHUNK, 25)
    source = sim.array(device, data)
    dst = numpy.empty(4 * CHUNK, numpy.uint8)
    # The second chunk's event: its copy is queued, the rest never is.
    sim.fail_call(device, "cuEventRecord", 2, LAUNCH_FAILED)
    with pytest.raises(hostcopy.CudaError) as failed:
        stager.copy_to_host(dst, source)
    assert failed.value.code == LAUNCH_FAILED and failed.value.function == "copy_to_host"
    stager.copy_to_host(dst, source)
    assert dst.tobytes() == data
    stager.close()
    with pytest.raises(ValueError, match="closed"):
        stager.copy_to_host(dst, source)
    sim.assert_no_violations(device)


def test_a_copy_leaves_the_threads_current_device_as_it_was(sim, numpy):
    # torch, cupy and the CUDA runtime keep their current device on the
    # thread: a copy on another device must not change it.
    first, second = sim.device(), sim.device()
    on_second = sim.array(second, pattern(CHUNK, 27))  # the test's own calls bind `second`
    stream = sim.stream(second)
    dst, src = bytearray(8), bytes(8)  # alive until the launched copy has run

    def launch():
        hostcopy.launch_host_copy(stream, dst, src)
        assert sim.native.sim_current_device() == first
        stream.synchronize()  # the test's own call: binds `second`
        sim.native.sim_make_current(first)

    for call in (
        lambda: hostcopy.copy_to_host(numpy.empty(CHUNK, numpy.uint8), on_second),
        lambda: hostcopy.copy_to_device(on_second, numpy.zeros(CHUNK, numpy.uint8), blocking=False).wait(),
        launch,
        lambda: hostcopy.Stager(second).close(),
    ):
        sim.native.sim_make_current(first)
        call()
        assert sim.native.sim_current_device() == first


def test_a_second_wait_returns_only_once_the_bytes_have_arrived(sim, numpy, device, stager):
    data = pattern(3 * CHUNK, 41)
    source = sim.array(device, data)
    dst = numpy.zeros(3 * CHUNK, numpy.uint8)
    sim.hold(device)
    transfer = stager.copy_to_host(dst, source, blocking=False)
    first = threading.Thread(target=transfer.wait)
    first.start()
    returned = threading.Event()
    seen = []

    def second():
        transfer.wait()
        seen.append(dst.tobytes())
        returned.set()

    waiter = threading.Thread(target=second)
    waiter.start()
    assert not returned.wait(0.3), "a second wait returned while the copy was held"
    sim.release(device)
    first.join()
    waiter.join()
    assert seen == [data] and transfer.done()


def test_wait_after_close_reports_the_copy_and_lets_go_of_the_arrays(sim, numpy, device, stager):
    data = pattern(3 * CHUNK, 43)
    source = Tensor(sim.array(device, data))
    gone = weakref.ref(source)
    dst = numpy.zeros(3 * CHUNK, numpy.uint8)
    transfer = stager.copy_to_host(dst, source, blocking=False)
    del source
    stager.close()  # finishes the transfer first
    assert dst.tobytes() == data
    transfer.wait()  # how it ended: fine
    del transfer
    assert gone() is None, "the source was kept after its copy finished"


def test_close_on_another_thread_keeps_the_destination_until_its_copy_ran(sim, numpy, device, stager):
    data = pattern(8 * CHUNK, 45)
    source = sim.array(device, data)
    dst = numpy.zeros(8 * CHUNK, numpy.uint8)
    alive = weakref.ref(dst)
    sim.hold(device)
    transfer = stager.copy_to_host(dst, source, blocking=False)
    del dst  # only the transfer holds it now
    closer = threading.Thread(target=stager.close)
    closer.start()
    threading.Timer(0.3, sim.release, args=(device,)).start()
    transfer.wait()  # waits for close(), which finished the copy
    closer.join()
    assert alive() is None or alive().tobytes() == data
    del transfer
    assert alive() is None


def test_a_thousand_transfers_waited_or_dropped_leave_nothing_behind(sim, numpy, device, stager):
    # A Transfer holds its pending transfer itself: waited or dropped, it
    # lets go of its events, chunk records and arrays, with the stager open.
    data = pattern(CHUNK + 17, 47)
    source = sim.array(device, data)
    target = sim.array(device, bytes(CHUNK + 17))
    stager.copy_to_host(numpy.empty(CHUNK + 17, numpy.uint8), source)  # the stager's own events made
    before = sim.state(device)
    most = 0
    hosts = []
    for i in range(1000):
        host = numpy.frombuffer(bytearray(data), numpy.uint8) if i % 4 >= 2 else numpy.zeros(CHUNK + 17, numpy.uint8)
        hosts.append(weakref.ref(host))
        if i % 4 >= 2:
            transfer = stager.copy_to_device(target, host, blocking=False)
        else:
            transfer = stager.copy_to_host(host, source, blocking=False)
        if i % 2:
            transfer.wait()
            assert transfer.done()
            if i % 4 < 2:
                assert host.tobytes() == data
        del host, transfer  # the even ones dropped unwaited: they wait
        most = max(most, sim.state(device)["events"])
    assert [ref for ref in hosts if ref() is not None] == [], "host arrays kept after their transfers"
    after = sim.state(device)
    assert most <= before["events"] + 8, f"{most} events alive at once, {before['events']} before"
    assert after["events"] <= before["events"] + 8
    assert after["device_allocations"] == before["device_allocations"]
    assert after["host_allocations"] == before["host_allocations"]
    assert target.read() == data
    stager.close()
    sim.assert_no_violations(device)


def test_done_answers_without_waiting_for_the_stager(sim, numpy, device, stager):
    # done() asks the transfer's own events: another thread's blocking copy
    # holding the stager does not hold it up.
    data = pattern(2 * CHUNK, 49)
    source = sim.array(device, data)
    dst = numpy.zeros(2 * CHUNK, numpy.uint8)
    sim.hold(device)
    transfer = stager.copy_to_host(dst, source, blocking=False)
    copier = threading.Thread(target=lambda: stager.copy_to_host(numpy.zeros(2 * CHUNK, numpy.uint8), source))
    faulthandler.dump_traceback_later(120, exit=True)
    try:
        copier.start()
        threading.Event().wait(0.2)  # the copier holds the stager, waiting for the device
        assert transfer.done() is False
        sim.release(device)
        copier.join()
        transfer.wait()
        assert transfer.done() and dst.tobytes() == data
    finally:
        faulthandler.cancel_dump_traceback_later()
    stager.close()


def test_options_are_read_without_waiting_for_a_blocking_copy(sim, numpy, device, stager):
    source = sim.array(device, bytes(4 * CHUNK))
    dst = numpy.zeros(4 * CHUNK, numpy.uint8)
    sim.hold(device)
    copier = threading.Thread(target=lambda: stager.copy_to_host(dst, source))
    faulthandler.dump_traceback_later(120, exit=True)
    try:
        copier.start()
        time_limit = threading.Event()
        time_limit.wait(0.2)  # the copier holds the stager, waiting for the device
        assert stager.options["chunk"] == CHUNK  # would wait for the copy, holding the GIL
        sim.release(device)
        copier.join()
    finally:
        faulthandler.cancel_dump_traceback_later()


def test_options_take_numpy_integers_and_name_every_option_in_force(sim, numpy, device):
    with hostcopy.Stager(
        device,
        chunk=numpy.int64(CHUNK),
        buffers=numpy.uint8(3),
        workers=2,
        h2d_streaming=True,
        driver_path_below=0,
        prefault=False,
    ) as stager:
        assert stager.options == {
            "chunk": CHUNK,
            "buffers": 3,
            "workers": 2,
            "h2d_streaming": True,
            "driver_path_below": 0,
            "prefault": False,
        }
        flags = ("h2d_streaming", "prefault")
        assert all(type(value) is int for name, value in stager.options.items() if name not in flags)
    with hostcopy.Stager(device, chunk=CHUNK, buffers=2, workers=1) as stager:
        assert stager.options["prefault"] is True, "on by default, as in the Rust layer"
        assert stager.options["h2d_streaming"] is None, "chosen per upload by default"
    with hostcopy.Stager(device, chunk=CHUNK, buffers=2, workers=1, h2d_streaming=False) as stager:
        assert stager.options["h2d_streaming"] is False


def test_options_are_a_fresh_dict_property_of_the_native_stager(sim, device):
    # hostcopy.Stager is the native class; the stub (hostcopy/_native.pyi)
    # declares a property returning a dict (it once said a method
    # returning a tuple).
    assert hostcopy.Stager is hostcopy._native.Stager
    assert inspect.isdatadescriptor(vars(hostcopy._native.Stager)["options"]), "a property, not a method"
    with hostcopy.Stager(device, chunk=CHUNK, buffers=2, workers=1) as stager:
        assert stager.options == stager.options and stager.options is not stager.options
        assert stager.options["buffers"] == 2 and stager.options["h2d_streaming"] is None
        stager.options["chunk"] = 1
        assert stager.options["chunk"] == CHUNK, "a copy: changing it changes nothing"


def test_a_jax_array_is_refused_as_a_destination(sim, device, stager):
    class Array:  # what a jax array looks like to the type check
        __module__ = "jaxlib.xla_extension"

    with pytest.raises(TypeError, match="immutable"):
        stager.copy_to_device(Array(), b"")
    assert sim.copies_queued(device) == 0


class JaxLikeHostArray(HostArray):
    """What a jax CPU array looks like to the type check: an immutable
    array whose unversioned capsule cannot say it is read-only."""

    __module__ = "jaxlib.xla_extension"


def versioned_capsule(numpy, array):
    try:
        capsule = array.__dlpack__(max_version=(1, 0))
    except TypeError:
        pytest.skip("this numpy has no DLPack 1.0 export (numpy >= 2.1 has)")
    assert "dltensor_versioned" in repr(capsule)
    return capsule


def test_dlpack_host_memory_takes_its_address_and_length_from_the_capsule(sim, numpy):
    native = hostcopy._native
    array = numpy.zeros(100, numpy.uint16)
    tail = array[10:]  # past the start of its buffer: data or byte_offset says so
    assert len(native.dlpack_host_memory(versioned_capsule(numpy, tail), True, "dst")) == tail.nbytes == 180
    assert len(native.dlpack_host_memory(tail.__dlpack__(), False, "src")) == 180  # unversioned: a source only
    with pytest.raises(TypeError):
        native.dlpack_host_memory(tail.__dlpack__(), 0x1000, 16)  # no address or length from Python
    strided = numpy.zeros((8, 8), numpy.uint16)[:, :4]
    with pytest.raises(hostcopy.NotContiguous) as refused:
        native.dlpack_host_memory(strided.__dlpack__(), False, "src")
    assert (refused.value.side, list(refused.value.shape), list(refused.value.strides)) == ("src", [8, 4], [8, 1])

    device = sim.device()
    stager = small_stager(device)
    data = pattern(180, 41)
    stager.copy_to_host(HostArray(tail), sim.array(device, data))
    assert tail.tobytes() == data and not array[:10].any(), "written where the capsule says, nowhere else"
    sim.assert_no_violations(device)


def test_read_only_host_memory_is_refused_as_a_destination(sim, device, stager):
    source = sim.array(device, pattern(64, 43))
    target = bytes(64)
    with pytest.raises(hostcopy.ReadOnlyBuffer) as refused:
        stager.copy_to_host(target, source)
    assert (refused.value.side, refused.value.len) == ("dst", 64)
    with pytest.raises(hostcopy.ReadOnlyBuffer):
        stager.copy_blocks_to_host(target, source, [(0, 0, 64)])
    assert target == bytes(64), "nothing written into read-only memory"
    writable = bytearray(64)
    stager.copy_to_host(writable, source)
    assert bytes(writable) == pattern(64, 43)
    assert sim.copies_queued(device) == 1, "nothing was queued for the refused transfers"
    sim.assert_no_violations(device)


def test_a_versioned_capsule_marked_read_only_is_refused_as_a_destination(sim, numpy, device, stager):
    data = pattern(CHUNK + 5, 45)
    source = sim.array(device, data)
    read_only = numpy.frombuffer(bytes(len(data)), numpy.uint8)
    versioned_capsule(numpy, read_only)
    with pytest.raises(hostcopy.ReadOnlyBuffer) as refused:
        stager.copy_to_host(HostArray(read_only), source)
    assert (refused.value.side, refused.value.len) == ("dst", len(data))
    with pytest.raises(hostcopy.ReadOnlyBuffer):
        stager.copy_blocks_to_host(HostArray(read_only), source, [(0, 0, 16)])
    assert not read_only.any()
    # A source may be read-only; a writable array is a destination as before.
    target = sim.array(device, bytes(len(data)))
    stager.copy_to_device(target, HostArray(numpy.frombuffer(data, numpy.uint8)))
    assert target.read() == data
    writable = numpy.zeros(len(data), numpy.uint8)
    stager.copy_to_host(HostArray(writable), source)
    assert writable.tobytes() == data
    sim.assert_no_violations(device)


def test_a_jax_host_array_is_refused_as_a_destination(sim, numpy, device, stager):
    data = pattern(4096, 47)
    source = sim.array(device, data)
    immutable = numpy.zeros(len(data), numpy.uint8)
    with pytest.raises(TypeError, match="immutable"):
        stager.copy_to_host(JaxLikeHostArray(immutable), source)
    with pytest.raises(TypeError, match="immutable"):
        stager.copy_blocks_to_host(JaxLikeHostArray(immutable), source, [(0, 0, 16)])
    assert not immutable.any()
    target = sim.array(device, bytes(len(data)))
    stager.copy_to_device(target, JaxLikeHostArray(numpy.frombuffer(data, numpy.uint8).copy()))
    assert target.read() == data, "a jax array is a source like any other"
    sim.assert_no_violations(device)


def scattered(count: int, block: int) -> list[tuple[int, int, int]]:
    """Blocks of unequal sizes at device slots out of order, packed on the host with gaps."""
    blocks, host = [], 5
    for index in range(count):
        nbytes = block + 3 * index
        blocks.append((((index * 7) % count) * 2 * block + 11, host, nbytes))
        host += nbytes + 9
    return blocks


def test_blocks_both_ways_byte_exact_from_tuples_and_arrays(sim, numpy, device, stager):
    blocks = scattered(40, 9000)
    device_len = 2 * 9000 * 40 + 1000
    host_len = blocks[-1][1] + blocks[-1][2] + 7
    device_bytes = pattern(device_len, 21)
    source = sim.array(device, device_bytes)
    pool = numpy.full(host_len, 0xEE, numpy.uint8)
    assert stager.copy_blocks_to_host(pool, source, blocks) is None
    expected = bytearray(b"\xee" * host_len)
    for device_offset, host_offset, nbytes in blocks:
        expected[host_offset : host_offset + nbytes] = device_bytes[device_offset : device_offset + nbytes]
    assert pool.tobytes() == bytes(expected)

    target = sim.array(device, bytes(device_len))
    as_array = numpy.array(blocks, dtype=numpy.int64)
    transfer = stager.copy_blocks_to_device(target, pool, as_array, blocking=False)
    transfer.wait()
    back = bytearray(device_len)
    for device_offset, host_offset, nbytes in blocks:
        back[device_offset : device_offset + nbytes] = pool[host_offset : host_offset + nbytes].tobytes()
    assert target.read() == bytes(back)
    stager.close()
    sim.assert_no_violations(device)


def test_bad_batches_are_refused_with_the_offending_blocks(sim, numpy, device, stager):
    source = sim.array(device, bytes(4096))
    pool = numpy.zeros(4096, numpy.uint8)
    with pytest.raises(hostcopy.BlocksOverlap) as overlap:
        stager.copy_blocks_to_host(pool, source, [(0, 0, 100), (1000, 500, 100), (2000, 550, 10)])
    assert (overlap.value.first, overlap.value.second) == (1, 2)
    with pytest.raises(hostcopy.BlockOutOfBounds) as outside:
        stager.copy_blocks_to_device(source, pool, [(0, 0, 10), (4000, 0, 100)])
    error = outside.value
    assert (error.index, error.side, error.offset, error.nbytes, error.len) == (1, "device", 4000, 100, 4096)
    assert isinstance(error, hostcopy.TransferError) and not isinstance(error, hostcopy.PackError)
    with pytest.raises(TypeError, match=r"blocks\[1\]"):
        stager.copy_blocks_to_host(pool, source, [(0, 0, 1), (1, 2)])
    with pytest.raises(ValueError, match=r"blocks\[0\]"):
        stager.copy_blocks_to_host(pool, source, [(0, -1, 1)])
    with pytest.raises(ValueError, match=r"blocks\[1\]"):
        stager.copy_blocks_to_host(pool, source, numpy.array([[0, 0, 1], [5, -1, 1]]))
    with pytest.raises(TypeError, match=r"\(n, 3\)"):
        stager.copy_blocks_to_host(pool, source, numpy.zeros((2, 2), numpy.int64))
    with pytest.raises(hostcopy.BlocksOverlap):
        stager.copy_blocks_to_host(pool, source, numpy.array([[0, 0, 8], [100, 4, 8]], numpy.uint32))
    assert sim.copies_queued(device) == 0, "nothing was queued"
    sim.assert_no_violations(device)


def test_the_one_call_block_functions(sim, numpy, device):
    blocks = [(4 << 20, 0, 3 << 20), (0, 3 << 20, (1 << 20) + 1)]
    data = pattern(8 << 20, 3)
    source = sim.array(device, data)
    pool = numpy.zeros((4 << 20) + 1, numpy.uint8)
    hostcopy.copy_blocks_to_host(pool, source, blocks)
    assert pool[: 3 << 20].tobytes() == data[4 << 20 : 7 << 20]
    assert pool[3 << 20 :].tobytes() == data[: (1 << 20) + 1]
    target = sim.array(device, bytes(8 << 20))
    hostcopy.copy_blocks_to_device(target, pool, blocks)
    assert target.read()[4 << 20 : 7 << 20] == data[4 << 20 : 7 << 20]
    sim.assert_no_violations(device)


def test_events_stay_bounded_over_thousands_of_empty_and_small_copies(sim, numpy, device, stager):
    # Every copy given a stream waits for it: before, each kept an event
    # until a later staged transfer finished (2,000 empty copies, 2,000
    # live events).
    producer = sim.stream(device)
    source = sim.array(device, pattern(64, 3))
    empty = numpy.empty(0, numpy.uint8)
    most = 0
    for _ in range(2000):
        stager.copy_to_host(empty, source, stream=producer, nbytes=0)
        most = max(most, sim.state(device)["events"])
    assert most <= 64 + 8, f"{most} events alive at once"
    stager.close()
    sim.assert_no_violations(device)


def test_a_copy_during_a_libraries_capture_is_refused_before_its_export_breaks_the_capture(
    sim, numpy, device, stager, monkeypatch
):
    # A torch tensor's DLPack export, asked to order its work before the
    # legacy stream while torch captures on its current stream, would make
    # that stream wait on the capture (torch.cuda.graph then failed, 906).
    # The copy asks the library's current stream first and refuses without
    # calling the export; the capture ends intact, and once it has, the
    # same copy runs.
    import types

    capturing = sim.stream(device)
    current = {"stream": capturing.handle}
    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(current_stream=lambda device=None: types.SimpleNamespace(cuda_stream=current["stream"]))
    monkeypatch.setitem(sys.modules, "torch", torch)
    source = sim.array(device, pattern(CHUNK, 3))
    exported = []

    class Tensor:
        device = 0

        def __dlpack_device__(self):
            return (2, 0)  # kDLCUDA

        def __dlpack__(self, stream=None):
            exported.append(stream)
            raise RuntimeError("exported")

    Tensor.__module__ = "torch"
    capturing.begin_capture()
    dst = numpy.empty(CHUNK, numpy.uint8)
    with pytest.raises(hostcopy.StreamCapturing, match="capturing a graph"):
        stager.copy_to_host(dst, Tensor())
    assert exported == []
    capturing.end_capture().destroy()
    sim.assert_no_violations(device)
    # No capture: the export is asked to order its work before the legacy
    # stream (1), as before.
    with pytest.raises(RuntimeError, match="exported"):
        stager.copy_to_host(dst, Tensor())
    assert exported == [1]
    del source


def _torch_stand_in(monkeypatch, current: dict):
    """A ``torch`` module with what the transfers read of a CUDA tensor
    without exporting it: ``Tensor``, ``strided`` and the raw current
    stream of a device (``current[device]``)."""
    import types

    torch = types.ModuleType("torch")
    torch.strided = object()
    torch._C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda device: current[device])

    class Tensor:
        """A contiguous CUDA uint8 tensor over a simulated device array."""

        is_cuda, is_quantized, requires_grad = True, False, False

        def __init__(self, array, device: int):
            self.array, self.layout = array, torch.strided
            self.device = types.SimpleNamespace(index=device)
            self.shape, self.exported = (array.__cuda_array_interface__["shape"][0],), []

        def data_ptr(self) -> int:
            return self.array.__cuda_array_interface__["data"][0]

        @property
        def nbytes(self) -> int:
            return self.shape[0]

        def stride(self):
            return (1,)

        def is_contiguous(self) -> bool:
            return True

        def is_conj(self) -> bool:
            return False

        def is_neg(self) -> bool:
            return False

        def __dlpack_device__(self):
            return (2, self.device.index)  # kDLCUDA

        def __dlpack__(self, stream=None, max_version=None):
            self.exported.append(stream)
            raise RuntimeError("exported")

    torch.Tensor = Tensor
    monkeypatch.setitem(sys.modules, "torch", torch)
    return torch


def test_a_cuda_torch_tensor_is_read_without_an_export_and_ordered_after_torchs_stream(
    sim, numpy, device, stager, monkeypatch
):
    # A plain CUDA tensor is read from its attributes, not exported through
    # DLPack (a capsule and an event a call): the bytes move both ways, and
    # the transfer waits for torch's current stream where it is not the
    # stream the copy is ordered on.
    producer = sim.stream(device)
    current = {device: 0}
    torch = _torch_stand_in(monkeypatch, current)
    data = pattern(CHUNK + 5, 21)
    tensor = torch.Tensor(sim.array(device, data), device)
    host = numpy.zeros(len(data), numpy.uint8)

    def events_recorded(copy) -> int:
        before = sim.state(device)["event_records"]
        copy()
        return sim.state(device)["event_records"] - before

    on_legacy = events_recorded(lambda: stager.copy_to_host(host, tensor))
    assert host.tobytes() == data
    current[device] = producer.handle
    on_producer = events_recorded(lambda: stager.copy_to_host(host, tensor))
    assert on_producer == on_legacy + 1, "the copy did not wait for torch's current stream"
    uploaded = pattern(CHUNK + 5, 22)
    stager.copy_to_device(tensor, numpy.frombuffer(uploaded, numpy.uint8).copy())
    assert tensor.array.read() == uploaded
    assert tensor.exported == []
    # Ordered on a stream of its own while torch's current stream is the
    # legacy one, from a thread with no current context (an executor's):
    # the legacy stream never captures, so nothing asks the driver about it.
    current[device] = 0
    outcome = []
    copier = threading.Thread(target=lambda: outcome.append(stager.copy_to_host(host, tensor, stream=producer)))
    copier.start()
    copier.join()
    assert outcome == [None], "the copy on another thread did not finish"
    assert host.tobytes() == uploaded
    current[device] = producer.handle
    # Capturing on torch's current stream: refused before anything is
    # queued, the capture intact.
    producer.begin_capture()
    with pytest.raises(hostcopy.StreamCapturing, match="capturing a graph"):
        stager.copy_to_host(host, tensor)
    producer.end_capture().destroy()
    # What torch refuses to export is refused before any export, as a
    # hostcopy error that is a RuntimeError as torch's refusal is, naming
    # the call that makes a tensor of the same memory hostcopy reads.
    tensor.requires_grad = True
    with pytest.raises(hostcopy.ArgumentRuntimeError, match=r"requires grad: pass src\.detach\(\)") as refused:
        stager.copy_to_host(host, tensor)
    assert refused.value.argument == "src" and refused.value.value is tensor
    tensor.requires_grad = False
    for bit, call in [("is_conj", "resolve_conj"), ("is_neg", "resolve_neg")]:
        setattr(tensor, bit, lambda: True)
        with pytest.raises(hostcopy.ArgumentRuntimeError, match=rf"pass src\.{call}\(\)"):
            hostcopy.copy_to_host(host, tensor)
        delattr(tensor, bit)
    assert tensor.exported == []
    sim.assert_no_violations(device)
