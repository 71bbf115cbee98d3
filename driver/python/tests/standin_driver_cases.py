"""Launch cases against tests/libcuda_standin.c (run by test_standin_driver.py).

Handles the stand-in knows: any ordinary stream runs host functions at once;
CAPTURING and CAPTURING_TOO capture into GRAPH; FAILING fails every call; REFUSING fails only
cuLaunchHostFunc; FAILING_GRAPH refuses user objects.
"""

import ctypes
import os
import threading

import pytest

import hostcopy

STREAM = 0x5
CAPTURING = 0xCA9
CAPTURING_TOO = 0xCAA
FAILING = 0xBAD
REFUSING = 0xBAE
GRAPH = 0x6A
FAILING_GRAPH = 0xBAD

standin = ctypes.CDLL(os.environ["HOSTCOPY_LIBCUDA"])
standin.standin_replay.argtypes = [ctypes.c_void_p]
standin.standin_destroy_graph.argtypes = [ctypes.c_void_p]
standin.standin_set_rendezvous_us.argtypes = [ctypes.c_long]


def alive() -> int:
    created, freed = hostcopy.owned_record_counts()
    return created - freed


def pattern(n, seed):
    return bytes(((i * 2654435761 + seed) >> 13) & 0xFF for i in range(n))


class CudaCoreStream:
    """cuda.core's Stream protocol: ``__cuda_stream__() -> (version, handle)``."""

    def __init__(self, handle):
        self.handle_value = handle

    def __cuda_stream__(self):
        return (0, self.handle_value)


class CUstream:
    """What cuda.bindings' CUstream offers: ``int()``."""

    def __init__(self, handle):
        self.value = handle

    def __int__(self):
        return self.value


class HasHandle:
    def __init__(self, handle):
        self.handle = handle


@pytest.mark.parametrize(
    "stream",
    [STREAM, CudaCoreStream(STREAM), CUstream(STREAM), HasHandle(CUstream(STREAM))],
    ids=["int", "__cuda_stream__", "CUstream", ".handle"],
)
@pytest.mark.parametrize("parallel", [False, True])
def test_stream_launch_copies_and_frees_its_record(stream, parallel):
    src = pattern(4096, 1)
    dst = bytearray(4096)
    before = alive()
    created_before, _ = hostcopy.owned_record_counts()
    assert hostcopy.launch_host_copy(stream, dst, src, parallel=parallel) is False
    assert dst == src
    assert hostcopy.owned_record_counts()[0] == created_before + 1
    assert alive() == before


def test_errors_name_the_call_and_the_code_and_free_the_record():
    before = alive()
    with pytest.raises(hostcopy.CudaError) as failed:
        hostcopy.launch_host_copy(FAILING, bytearray(8), bytes(8))
    assert (failed.value.function, failed.value.code, failed.value.name) == (
        "cuStreamGetCaptureInfo_v2",
        400,
        "CUDA_ERROR_INVALID_HANDLE",
    )
    assert "CUDA_ERROR_INVALID_HANDLE" in str(failed.value)
    with pytest.raises(hostcopy.CudaError) as failed:
        hostcopy.launch_host_copy(REFUSING, bytearray(8), bytes(8))
    assert failed.value.function == "cuLaunchHostFunc"
    assert alive() == before


def test_capture_gives_the_record_to_the_graph_and_replays_keep_working():
    src = bytearray(pattern(1024, 2))
    dst = bytearray(1024)
    before = alive()
    assert hostcopy.launch_host_copy(CudaCoreStream(CAPTURING), dst, src) is True
    assert dst == bytes(1024), "a captured launch does not run"
    for replay in range(3):
        src[:] = pattern(1024, 10 + replay)
        assert standin.standin_replay(GRAPH) == 1
        assert dst == src
        assert alive() == before + 1, "the graph still owns the record"
    assert standin.standin_destroy_graph(GRAPH) == 1
    assert alive() == before


def test_graph_node_record_belongs_to_the_graph():
    graph = 0x77
    src = bytearray(pattern(2 << 20, 3))
    dst = bytearray(2 << 20)
    before = alive()
    hostcopy.set_parallel_workers(2)
    node = hostcopy.add_host_copy_node(graph, dst, src, parallel=True)
    second = hostcopy.add_host_copy_node(CUgraph(graph), dst, src, 16, dependencies=[node, CUgraphNode(node)])
    assert node and second and node != second
    assert alive() == before + 2
    for replay in range(2):
        src[:16] = pattern(16, 20 + replay)
        assert standin.standin_replay(graph) == 2
        assert dst == src
    assert standin.standin_destroy_graph(graph) == 2
    assert alive() == before


class CUgraph(CUstream):
    pass


class CUgraphNode(CUstream):
    pass


def test_failed_user_object_frees_the_record():
    before = alive()
    with pytest.raises(hostcopy.CudaError) as failed:
        hostcopy.add_host_copy_node(FAILING_GRAPH, bytearray(8), bytes(8))
    assert failed.value.function == "cuGraphRetainUserObject"
    assert alive() == before


def test_graph_handles_must_be_ints_or_cuda_bindings_graphs():
    with pytest.raises(TypeError):
        hostcopy.add_host_copy_node(CudaCoreStream(1), bytearray(8), bytes(8))
    with pytest.raises(TypeError):
        hostcopy.add_host_copy_node(GRAPH, bytearray(8), bytes(8), dependencies=[object()])


def test_no_growth_over_100000_stream_launches():
    src = pattern(64, 4)
    dst = bytearray(64)
    record = hostcopy.pack_host_copy_args(dst, src)
    before = alive()
    created_before, _ = hostcopy.owned_record_counts()
    for _ in range(100_000):
        hostcopy.launch_host_copy_args(STREAM, record)
    assert hostcopy.owned_record_counts()[0] == created_before + 100_000
    assert alive() == before
    assert dst == src


def test_threads_never_change_one_graph_at_once():
    # Two threads launch on two streams of one capture and add nodes to one
    # raw graph. In the stand-in, each call that changes a graph waits for
    # another thread to join it on that graph and counts it if one does; the
    # launch lock must keep the count at zero (every call then waits its full
    # rendezvous alone, hence the few iterations).
    graph = 0x78
    launches = 3
    before = alive()
    overlaps = standin.standin_overlaps()
    start = threading.Barrier(2)
    failures = []
    buffers = [(bytearray(64), pattern(64, 30 + i)) for i in range(2)]

    def work(stream, dst, src):
        try:
            start.wait()
            for _ in range(launches):
                assert hostcopy.launch_host_copy(stream, dst, src) is True
                hostcopy.add_host_copy_node(graph, dst, src)
        except BaseException as failure:
            failures.append(failure)

    threads = [
        threading.Thread(target=work, args=(stream, dst, src))
        for stream, (dst, src) in zip((CAPTURING, CudaCoreStream(CAPTURING_TOO)), buffers)
    ]
    standin.standin_set_rendezvous_us(20_000)
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        standin.standin_set_rendezvous_us(0)
    assert failures == []
    assert standin.standin_overlaps() == overlaps, "two threads changed one graph at once"
    assert alive() == before + 4 * launches
    assert standin.standin_replay(GRAPH) == 2 * launches
    assert standin.standin_replay(graph) == 2 * launches
    assert all(dst == src for dst, src in buffers)
    assert standin.standin_destroy_graph(GRAPH) == 2 * launches
    assert standin.standin_destroy_graph(graph) == 2 * launches
    assert alive() == before
