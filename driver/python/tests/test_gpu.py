"""GPU tests: hostcopy from pure Python with cuda.core 1.2.0 on a real driver.

Skipped, with the reason, where cuda.core, numpy or a GPU is missing;
HOSTCOPY_REQUIRE_GPU=1 turns that skip into a failure (the GPU bundle sets it).
"""

import ctypes
import os
import sys
import time

import pytest

import hostcopy


def _skip_or_fail(reason: str):
    if os.environ.get("HOSTCOPY_REQUIRE_GPU") == "1":
        pytest.fail(f"HOSTCOPY_REQUIRE_GPU=1 but {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


try:
    import numpy as np
    from cuda.bindings import driver as cu
    from cuda.core import Buffer, Device, LegacyPinnedMemoryResource, PinnedMemoryResource
except ImportError as missing:
    _skip_or_fail(f"no GPU stack to test with: {missing} (needs cuda.core 1.2.0, cuda-bindings, numpy)")


def _gpu_count() -> int:
    init = cu.cuInit(0)[0]
    if init != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuInit: {init!r}")
    err, count = cu.cuDeviceGetCount()
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuDeviceGetCount: {err!r}")
    return count


try:
    if _gpu_count() == 0:
        _skip_or_fail("the driver reports no GPU")
except Exception as failure:  # cuda-bindings raises its own error where libcuda is missing
    _skip_or_fail(f"no usable GPU driver: {type(failure).__name__}: {failure}")

MiB = 1 << 20


def pattern(n: int, seed: int) -> "np.ndarray":
    return ((np.arange(n, dtype=np.uint64) * 2654435761 + seed) >> 13).astype(np.uint8)


def host_view(buffer) -> "np.ndarray":
    """A numpy view of a host-accessible cuda.core Buffer."""
    return np.ctypeslib.as_array((ctypes.c_uint8 * buffer.size).from_address(int(buffer.handle)))


_PINNED = []


def pinned_resource(device):
    """cuda.core's stream-ordered pinned memory resource; the legacy one
    (cuMemHostAlloc) where the device or this cuda.core build has no host
    memory pools."""
    if not _PINNED:
        try:
            if not device.properties.host_memory_pools_supported:
                raise RuntimeError("the device has no host memory pools")
            resource = PinnedMemoryResource()
            resource.allocate(64, stream=device.default_stream).close()
        except Exception as failure:
            print(f"PinnedMemoryResource unavailable ({failure}); using LegacyPinnedMemoryResource")
            resource = LegacyPinnedMemoryResource()
        _PINNED.append(resource)
    return _PINNED[0]


@pytest.fixture(scope="module")
def device():
    device = Device(0)
    device.set_current()
    return device


@pytest.fixture
def stream(device):
    stream = device.create_stream()
    yield stream
    stream.sync()
    stream.close()


def device_buffer_with(device, stream, data: "np.ndarray"):
    """A device Buffer holding ``data`` (through a pinned buffer)."""
    staging = pinned_resource(device).allocate(data.nbytes, stream=stream)
    stream.sync()
    host_view(staging)[:] = data
    buffer = device.allocate(data.nbytes, stream=stream)
    buffer.copy_from(staging, stream=stream)
    stream.sync()
    staging.close(stream)
    return buffer


def staged_device_to_host(device, source, destination, chunk, slots, parallel):
    """The staged pipeline of the README: per chunk, a D2H copy into pinned
    slot k on stream k, then the host copy from the slot into ``destination``
    on the same stream. Returns once everything was enqueued."""
    streams = [device.create_stream() for _ in range(slots)]
    pinned = pinned_resource(device)
    staging = [pinned.allocate(chunk, stream=s) for s in streams]
    base = int(source.handle)
    for index, offset in enumerate(range(0, source.size, chunk)):
        k = index % slots
        size = min(chunk, source.size - offset)
        piece = Buffer.from_handle(base + offset, size)  # a view: no ownership
        slot = staging[k] if size == chunk else Buffer.from_handle(int(staging[k].handle), size)
        piece.copy_to(slot, stream=streams[k])
        hostcopy.launch_host_copy(streams[k], destination, staging[k], size, dst_offset=offset, parallel=parallel)
    return streams, staging


def wait_for_owned_records(target_alive: int, what: str):
    """User-object destructors run on a driver thread after the graph is gone:
    poll (generously) until the package's count of live records drops."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        created, freed = hostcopy.owned_record_counts()
        if created - freed <= target_alive:
            return
        time.sleep(0.01)
    created, freed = hostcopy.owned_record_counts()
    pytest.fail(f"{what}: {created - freed} records alive after 30 s, expected {target_alive}")


@pytest.fixture(scope="module", autouse=True)
def workers():
    hostcopy.set_parallel_workers(max(1, min(12, (os.cpu_count() or 2) - 2)))


@pytest.mark.parametrize("parallel", [False, True], ids=["HOST_COPY_FN", "HOST_COPY_PARALLEL_FN"])
def test_staged_pipeline_is_byte_exact(device, stream, parallel):
    size = 64 * MiB + 12345  # a short last chunk too
    data = pattern(size, 1)
    source = device_buffer_with(device, stream, data)
    destination = np.zeros(size, np.uint8)
    streams, staging = staged_device_to_host(device, source, destination, 4 * MiB, 3, parallel)
    for s in streams:
        s.sync()
    assert np.array_equal(destination, data)
    for buffer, s in zip(staging, streams):
        buffer.close(s)
    source.close(stream)


@pytest.mark.parametrize("form", ["cuda.core Stream", "CUstream", "int", "legacy default (0)"])
def test_stream_launch_accepts_every_stream_form(device, stream, form):
    handle = {"cuda.core Stream": stream, "CUstream": stream.handle, "int": int(stream.handle)}.get(form, 0)
    src = pattern(1 * MiB, 2)
    dst = np.zeros_like(src)
    assert hostcopy.launch_host_copy(handle, dst, src) is False
    if form == "legacy default (0)":
        device.sync()
    else:
        stream.sync()
    assert np.array_equal(dst, src)


@pytest.mark.parametrize("fn", ["HOST_COPY_FN", "HOST_COPY_PARALLEL_FN"])
def test_graph_builder_callback_with_packed_bytes_replays(device, stream, fn):
    src = pattern(4 * MiB, 3)
    dst = np.zeros_like(src)
    builder = device.create_graph_builder().begin_building()
    builder.callback(getattr(hostcopy, fn), user_data=hostcopy.pack_host_copy_args(dst, src))
    graph = builder.end_building().complete()
    for replay in range(5):
        src[:] = pattern(src.size, 100 + replay)
        graph.launch(stream)
        stream.sync()
        assert np.array_equal(dst, src), f"replay {replay}"
    graph.close()
    builder.close()


def test_launch_on_a_capturing_stream_gives_the_record_to_the_graph(device, stream):
    src = pattern(1 * MiB, 4)
    dst = np.zeros_like(src)
    created, freed = hostcopy.owned_record_counts()
    alive = created - freed
    builder = device.create_graph_builder().begin_building()
    assert hostcopy.launch_host_copy(builder, dst, src, parallel=True) is True
    graph = builder.end_building().complete()
    assert not dst.any(), "captured, not run"
    for replay in range(5):
        src[:] = pattern(src.size, 200 + replay)
        graph.launch(stream)
        stream.sync()
        assert np.array_equal(dst, src), f"replay {replay}: the record must survive every run"
    created, freed = hostcopy.owned_record_counts()
    assert created - freed == alive + 1
    graph.close()
    builder.close()
    wait_for_owned_records(alive, "after closing the captured graph")


def test_raw_graph_host_node_owns_its_record(device, stream):
    src = pattern(2 * MiB, 5)
    dst = np.zeros_like(src)
    created, freed = hostcopy.owned_record_counts()
    alive = created - freed
    err, graph = cu.cuGraphCreate(0)
    assert err == cu.CUresult.CUDA_SUCCESS
    first = hostcopy.add_host_copy_node(graph, dst, src, MiB, parallel=True)
    hostcopy.add_host_copy_node(
        graph, dst, src, MiB, dst_offset=MiB, src_offset=MiB, dependencies=[cu.CUgraphNode(first)]
    )
    err, executable = cu.cuGraphInstantiate(graph, 0)
    assert err == cu.CUresult.CUDA_SUCCESS
    for replay in range(5):
        src[:] = pattern(src.size, 300 + replay)
        assert cu.cuGraphLaunch(executable, stream.handle)[0] == cu.CUresult.CUDA_SUCCESS
        stream.sync()
        assert np.array_equal(dst, src), f"replay {replay}"
    assert cu.cuGraphExecDestroy(executable)[0] == cu.CUresult.CUDA_SUCCESS
    assert cu.cuGraphDestroy(graph)[0] == cu.CUresult.CUDA_SUCCESS
    wait_for_owned_records(alive, "after destroying the graph and its executable")


def test_no_growth_over_100000_stream_launches(stream):
    src = pattern(64, 6)
    dst = np.zeros_like(src)
    record = hostcopy.pack_host_copy_args(dst, src)
    created, freed = hostcopy.owned_record_counts()
    alive = created - freed
    for batch in range(10):
        for _ in range(10_000):
            hostcopy.launch_host_copy_args(stream, record)
        stream.sync()
        now_created, now_freed = hostcopy.owned_record_counts()
        assert now_created - created == (batch + 1) * 10_000
        assert now_created - now_freed == alive, f"records left alive after batch {batch}"
    assert np.array_equal(dst, src)


@pytest.mark.parametrize("parallel", [False, True], ids=["HOST_COPY_FN", "HOST_COPY_PARALLEL_FN"])
def test_copies_complete_while_the_launching_thread_holds_the_gil(stream, parallel):
    # The switch interval is far longer than the wait and no other Python
    # thread exists: this thread never lets go of the GIL while it spins.
    src = pattern(8 * MiB, 7)
    dst = bytearray(src.size)
    last = int(src[-1]) or 1
    src[-1] = last
    previous = sys.getswitchinterval()
    sys.setswitchinterval(60.0)
    try:
        hostcopy.launch_host_copy(stream, dst, src, parallel=parallel)
        deadline = time.perf_counter() + 10.0
        while dst[-1] != last and time.perf_counter() < deadline:
            pass
        finished = dst[-1] == last
    finally:
        sys.setswitchinterval(previous)
    stream.sync()
    assert finished, "the copy did not finish while Python held the GIL"
    assert bytes(dst) == src.tobytes()


_EXIT_SCRIPT = r"""
import faulthandler, sys, threading, time
faulthandler.enable()
import numpy as np
from cuda.core import Device
import hostcopy
device = Device(0)
device.set_current()
SIZE = 256 << 20
stream = device.create_stream()
buffer = device.allocate(SIZE, stream=stream)
stream.sync()
host = np.empty(SIZE, np.uint8)
def loop(blocking):
    dst = np.empty(SIZE, np.uint8)
    while True:
        try:
            transfer = hostcopy.copy_to_host(dst, buffer, blocking=blocking)
            if transfer is not None:
                transfer.wait()
        except ValueError:
            pass
hostcopy.copy_to_host(host, buffer)
for blocking in (True, False, True):
    threading.Thread(target=loop, args=(blocking,), daemon=True).start()
time.sleep(0.05)
"""


def test_daemon_threads_copying_at_exit_let_the_process_end_cleanly():
    # Before: SIGSEGV at exit in 10 runs of 10 (the driver unmapped the
    # pinned staging buffers under a copy), or an abort (pthread_exit
    # unwinding into the extension); then SIGSEGV in 4 runs of 8 (that
    # unwind, of a thread asking for the GIL as the interpreter finalised:
    # docs/design-record.md, "Threads that come back at exit park before
    # asking for the GIL"). Now the exit handler closes every stager first, and a
    # thread that comes back after it parks before asking for the GIL.
    import subprocess

    for run in range(3):
        done = subprocess.run([sys.executable, "-c", _EXIT_SCRIPT], capture_output=True, text=True, timeout=120)
        # faulthandler's report of every thread comes first in stderr.
        assert done.returncode == 0, (run, done.returncode, done.stderr[:6000])
        assert "Fatal" not in done.stderr and "FATAL" not in done.stderr, done.stderr[-2000:]


_FORK_SCRIPT = r"""
import os, sys, threading, time, warnings
warnings.simplefilter("ignore", DeprecationWarning)
import numpy as np
from cuda.core import Device
import hostcopy
device = Device(0)
device.set_current()
stream = device.create_stream()
buffer = device.allocate(64 << 20, stream=stream)
stream.sync()
host = np.empty(64 << 20, np.uint8)
hostcopy.copy_to_host(host, buffer)
stop = threading.Event()
def loop():
    while not stop.is_set():
        hostcopy.copy_to_host(host, buffer)
copier = threading.Thread(target=loop)
copier.start()
time.sleep(0.05)
pid = os.fork()
if pid == 0:
    try:
        hostcopy.copy_to_host(np.empty(4 << 20, np.uint8), buffer, nbytes=4 << 20)
        print("child: copied", flush=True)
    except hostcopy.CudaUnavailable as error:
        print("child: refused", "spawn" in str(error), flush=True)
    os._exit(0)
_, status = os.waitpid(pid, 0)
stop.set()
copier.join()
print("parent: child status", status, flush=True)
"""


def test_a_forked_child_refuses_the_parents_stagers_at_once():
    # Before: the child's first copy waited for good on the stager's lock,
    # held by the parent's copying thread at the fork.
    import subprocess

    done = subprocess.run([sys.executable, "-c", _FORK_SCRIPT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert "child: refused True" in done.stdout, (done.stdout, done.stderr[-2000:])
    assert "parent: child status 0" in done.stdout, done.stdout
async def _await(transfer) -> None:
    await transfer


def test_await_a_transfer_each_way_byte_exact_and_a_cancelled_one_still_lands(device, stream):
    import asyncio

    size = 256 * MiB + 4321  # a short last chunk too
    data = pattern(size, 9)
    source = device_buffer_with(device, stream, data)
    target = device.allocate(size, stream=stream)
    stream.sync()
    host, back, late = (np.zeros(size, np.uint8) for _ in range(3))
    with hostcopy.Stager(0) as stager:

        async def round_trip():
            await stager.copy_to_host(host, source, blocking=False)
            await stager.copy_to_device(target, host, blocking=False)
            await stager.copy_to_host(back, target, blocking=False)

        asyncio.run(round_trip())
        assert np.array_equal(host, data), "await of a D2H transfer"
        assert np.array_equal(back, data), "await of an H2D transfer (read back by await)"

        async def cancelled():
            transfer = stager.copy_to_host(late, source, blocking=False)
            task = asyncio.ensure_future(_await(transfer))
            await asyncio.sleep(0)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            return transfer

        transfer = asyncio.run(cancelled())  # the loop is gone; the waiter thread is not
        transfer.wait()
        assert np.array_equal(late, data), "a cancelled await's transfer"
    target.close(stream)
    source.close(stream)
