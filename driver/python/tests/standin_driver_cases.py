"""Launch cases against tests/libcuda_standin.c (run by test_standin_driver.py).

Handles the stand-in knows: any ordinary stream runs host functions at once;
CAPTURING captures into GRAPH; FAILING fails every call; REFUSING fails only
cuLaunchHostFunc; FAILING_GRAPH refuses user objects.
"""

import ctypes
import os

import pytest

import hostcopy

STREAM = 0x5
CAPTURING = 0xCA9
FAILING = 0xBAD
REFUSING = 0xBAE
GRAPH = 0x6A
FAILING_GRAPH = 0xBAD

standin = ctypes.CDLL(os.environ["HOSTCOPY_LIBCUDA"])
standin.standin_replay.argtypes = [ctypes.c_void_p]
standin.standin_destroy_graph.argtypes = [ctypes.c_void_p]


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
