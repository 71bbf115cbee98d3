"""``hostcopy.empty(register=...)`` against the simulated driver: memory
registered now or in the background reads as complete, and every copy of
it is byte-exact both ways, direct where it is registered (one driver copy
a range) and staged elsewhere; a range the driver refuses ends the
registration there, readable and never an error; a bad ``register=`` is
refused before any memory is mapped; ``"never"`` needs no driver at all;
the memory's last view unregisters it.
"""

import os
import subprocess
import sys
import tempfile
import textwrap

import pytest

import hostcopy
from conftest import SIM_SCRIPT_PRELUDE

numpy = pytest.importorskip("numpy", reason="numpy is not installed (ci.sh installs it)")

CHUNK = 64 << 10
#: A size no range of 256 MiB splits, not a multiple of the chunk.
SIZE = 16 * CHUNK + 4096 + 17
#: The ranges of `sim_registered_memory`'s tests: four chunks.
RANGE = 4 * CHUNK
#: `CUDA_ERROR_OUT_OF_MEMORY`, as a locked-memory limit is reported.
OUT_OF_MEMORY = 2
REFUSED = "CUDA driver error 2 (CUDA_ERROR_OUT_OF_MEMORY)"


def pattern(n: int, seed: int) -> "numpy.ndarray":
    return ((numpy.arange(n, dtype=numpy.uint64) * 2654435761 + seed) >> 13).astype(numpy.uint8)


def small_stager(device: int) -> hostcopy.Stager:
    """Staged at every size, a driver copy per chunk."""
    return hostcopy.Stager(device, chunk=CHUNK, buffers=2, workers=1, driver_path_below=0)


def round_trip(sim, device: int, host, seed: int, stager=None) -> tuple:
    """Copies `host`'s bytes (set to a pattern) to the device and back into
    `host` (zeroed between), checks them, and returns the driver copies
    queued each way."""
    copy_to_device = hostcopy.copy_to_device if stager is None else stager.copy_to_device
    copy_to_host = hostcopy.copy_to_host if stager is None else stager.copy_to_host
    bytes_of = host.reshape(-1).view(numpy.uint8)
    expected = pattern(bytes_of.size, seed)
    bytes_of[:] = expected
    target = sim.array(device, bytes(bytes_of.size))
    before = sim.copies_queued(device)
    copy_to_device(target, host)
    uploads = sim.copies_queued(device) - before
    assert target.read() == expected.tobytes(), "host to device differs"
    bytes_of[:] = 0
    before = sim.copies_queued(device)
    copy_to_host(host, target)
    downloads = sim.copies_queued(device) - before
    assert numpy.array_equal(bytes_of, expected), "device to host differs"
    return uploads, downloads


def test_register_now_is_complete_when_empty_returns_and_copies_are_byte_exact(sim, device):
    array = hostcopy.empty((SIZE // 4, 4), numpy.float32, register="now", device=device)
    nbytes = array.nbytes
    assert hostcopy.registration(array) == hostcopy.Registration(nbytes, nbytes, None, True)
    assert hostcopy.registration(array).complete
    assert hostcopy.registration(array[3:]) == hostcopy.registration(array), "a view reads its memory's"
    assert hostcopy.wait_registered(array) == hostcopy.registration(array)
    assert sim.state(device)["registrations"] == 1
    assert array.flags.c_contiguous and array.flags.writeable and not array.any()
    round_trip(sim, device, array, 3)
    round_trip(sim, device, array, 4, small_stager(device))
    del array
    assert sim.state(device)["registrations"] == 0, "the last view unregisters it"
    sim.assert_no_violations(device)


def test_registered_bytes_are_copied_directly_and_never_registered_ones_staged(sim, device):
    stager = small_stager(device)
    staged = hostcopy.empty(SIZE, device=device)
    registered = hostcopy.empty(SIZE, register="now", device=device)
    chunks = -(-SIZE // CHUNK)
    assert round_trip(sim, device, staged, 5, stager) == (chunks, chunks)
    # One range holds the whole array: one driver copy up; down, one into
    # its whole pages, and the 17 bytes past its last page boundary staged
    # (a download copies directly into whole pages only).
    assert round_trip(sim, device, registered, 6, stager) == (1, 2)
    stager.close()
    sim.assert_no_violations(device)


def test_register_background_then_wait_is_complete_and_copies_are_byte_exact(sim, device):
    array = hostcopy.empty(SIZE, register="background", device=device)
    # Copies while it may still be registering are byte-exact too.
    round_trip(sim, device, array, 7)
    done = hostcopy.wait_registered(array)
    assert done == hostcopy.Registration(SIZE, SIZE, None, True) and done.complete
    assert hostcopy.registration(array) == done
    round_trip(sim, device, array, 8)
    del array
    assert sim.state(device)["registrations"] == 0
    sim.assert_no_violations(device)


def test_a_refused_second_range_ends_registration_readably_and_copies_stay_byte_exact(sim, device):
    sim.fail_call(device, "cuMemHostRegister_v2", 2, OUT_OF_MEMORY)
    memory = sim.native.sim_registered_memory(SIZE, "now", device, RANGE)
    array = numpy.asarray(memory)
    told = hostcopy.registration(array)
    assert told == hostcopy.Registration(RANGE, SIZE, REFUSED, True)
    assert not told.complete
    assert sim.state(device)["registrations"] == 1
    # The first range direct, the rest staged a chunk at a time.
    stager = small_stager(device)
    staged = -(-(SIZE - RANGE) // CHUNK)
    assert round_trip(sim, device, array, 9, stager) == (1 + staged, 1 + staged)
    round_trip(sim, device, array, 10)
    assert hostcopy.wait_registered(array) == told, "registration ended at the refusal"
    del array, memory
    assert sim.state(device)["registrations"] == 0
    stager.close()
    sim.assert_no_violations(device)


@pytest.mark.parametrize("register", ["now", "background"])
def test_a_refused_first_range_registers_nothing_and_is_no_error(sim, device, register):
    sim.fail_call(device, "cuMemHostRegister_v2", 1, OUT_OF_MEMORY)
    array = hostcopy.empty(SIZE, register=register, device=device)
    told = hostcopy.wait_registered(array)
    assert told == hostcopy.Registration(0, SIZE, REFUSED, True) and not told.complete
    assert sim.state(device)["registrations"] == 0
    round_trip(sim, device, array, 11)
    del array
    sim.assert_no_violations(device)


def test_registering_keeps_the_threads_current_context(sim, device):
    other = sim.native.sim_new_device()
    array = hostcopy.empty(SIZE, register="now", device=other)
    assert hostcopy.registration(array).complete
    assert sim.native.sim_current_device() == device
    assert sim.state(other)["registrations"] == 1
    del array
    assert sim.native.sim_current_device() == device, "the drop keeps it too"
    assert sim.state(other)["registrations"] == 0


@pytest.mark.parametrize("register", ["always", "Now", "", " now", b"now", True, None, 1])
def test_a_bad_register_value_is_refused_before_any_memory_is_mapped(sim, device, register):
    # Mapped first, 2**60 bytes would be HostMemoryError.
    with pytest.raises(hostcopy.InvalidOption) as refused:
        hostcopy.empty(1 << 60, register=register, device=device)
    error = refused.value
    assert isinstance(error, ValueError) and isinstance(error, hostcopy.Error)
    assert error.option == "register" and error.value is register
    assert str(error) == (
        f'hostcopy.empty: register = {register!r} is not one of "never", "background", "now"'
    )
    with pytest.raises(hostcopy.HostMemoryError):
        hostcopy.empty(1 << 60, register="never")


def test_registering_on_a_device_that_does_not_exist_is_refused_before_mapping(sim, device):
    with pytest.raises(hostcopy.CudaError) as refused:
        hostcopy.empty(1 << 60, register="now", device=1 << 20)
    assert refused.value.function == "empty"


def test_register_never_reads_as_nothing_registered_and_registers_nothing(sim, device):
    array = hostcopy.empty(SIZE, device=device)
    told = hostcopy.registration(array)
    assert told == hostcopy.Registration(0, SIZE, None, True) and not told.complete
    assert hostcopy.wait_registered(array) == told
    assert sim.state(device)["registrations"] == 0
    assert hostcopy.registration(hostcopy.empty(0, register="now", device=device)).complete


@pytest.mark.parametrize(
    "memory",
    [numpy.zeros(8, numpy.uint8), bytearray(8), memoryview(bytearray(8)), 3],
    ids=["numpy.zeros", "bytearray", "memoryview", "int"],
)
def test_registration_refuses_memory_not_made_by_hostcopy_empty(memory):
    for read in (hostcopy.registration, hostcopy.wait_registered):
        with pytest.raises(TypeError, match=r"expected an array made by hostcopy\.empty"):
            read(memory)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork")
def test_a_forked_child_refuses_to_wait_for_the_parents_registration_and_drops_it_quietly():
    # The registering thread is the parent's: a child that joined it would
    # wait for good, and one that unregistered would undo the parent's.
    script = SIM_SCRIPT_PRELUDE + textwrap.dedent(
        """
        pool = hostcopy.empty(SIZE, register="background", device=device)
        plain = hostcopy.empty(SIZE)
        pid = os.fork()
        if pid == 0:
            try:
                hostcopy.wait_registered(pool)
                print("child: waited", flush=True)
            except hostcopy.CudaUnavailable:
                print("child: refused", flush=True)
            print("child: plain", hostcopy.wait_registered(plain), flush=True)
            del pool, plain
            print("child: dropped quietly", flush=True)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        print("child status", status, flush=True)
        print("parent:", hostcopy.wait_registered(pool).complete, flush=True)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "child: refused",
        f"child: plain Registration(registered=0, nbytes={1 << 20}, refused=None, finished=True)",
        "child: dropped quietly",
        "child status 0",
        "parent: True",
    ], (done.stdout, done.stderr[-2000:])


def run_without_driver(code: str) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter whose libcuda is a path that does not exist."""
    env = dict(os.environ, HOSTCOPY_LIBCUDA="/nonexistent/libcuda.so.1")
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        cwd=tempfile.gettempdir(),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_register_never_needs_no_driver_and_the_others_say_they_do():
    done = run_without_driver(
        """
        import hostcopy
        array = hostcopy.empty(1 << 20, register="never")
        assert hostcopy.registration(array) == (0, 1 << 20, None, True)
        del array
        try:
            hostcopy.empty(1 << 20, register="bad")
        except hostcopy.InvalidOption:
            pass
        with open("/proc/self/maps") as maps:
            assert "libcuda" not in maps.read(), "libcuda was loaded"
        for register in ("now", "background"):
            try:
                hostcopy.empty(1 << 20, register=register)
            except hostcopy.CudaUnavailable as error:
                print(error)
        """
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 2 and all("/nonexistent/libcuda.so.1" in line for line in lines), lines
