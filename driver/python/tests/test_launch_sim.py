"""Owned launches and graph nodes from Python, against the simulated driver:
who owns and frees each record is the Rust layer's (one implementation,
also run under Miri); these check that the package reaches it.
"""

import threading

import pytest

import hostcopy
from conftest import pattern

LAUNCH_FAILED = 719


def alive() -> int:
    created, freed = hostcopy.owned_record_counts()
    return created - freed


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


class CUgraph(CUstream):
    pass


class CUgraphNode(CUstream):
    pass


class HasHandle:
    def __init__(self, handle):
        self.handle = handle


@pytest.mark.parametrize("form", ["int", "__cuda_stream__", "CUstream", ".handle", "legacy 0"])
@pytest.mark.parametrize("parallel", [False, True])
def test_stream_launch_copies_and_frees_its_record(sim, form, parallel):
    device = sim.device()
    stream = sim.stream(device)
    handle = {
        "int": stream.handle,
        "__cuda_stream__": CudaCoreStream(stream.handle),
        "CUstream": CUstream(stream.handle),
        ".handle": HasHandle(CUstream(stream.handle)),
        "legacy 0": 0,
    }[form]
    src = pattern(4096, 1)
    dst = bytearray(4096)
    before = alive()
    assert hostcopy.launch_host_copy(handle, dst, src, parallel=parallel) is False
    sim.drain(device)
    assert dst == src
    assert alive() == before
    sim.assert_no_violations(device)


def test_a_failed_launch_names_the_code_and_frees_the_record(sim):
    device = sim.device()
    stream = sim.stream(device)
    before = alive()
    sim.fail_call(device, "cuLaunchHostFunc", 1, LAUNCH_FAILED)
    with pytest.raises(hostcopy.CudaError) as failed:
        hostcopy.launch_host_copy(stream, bytearray(8), bytes(8))
    assert (failed.value.code, failed.value.name) == (LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED")
    assert failed.value.function == "launch_host_copy"
    assert "CUDA_ERROR_LAUNCH_FAILED" in str(failed.value)
    assert alive() == before
    sim.assert_no_violations(device)


def test_the_null_stream_on_a_thread_without_a_current_context_is_no_current_context(sim):
    sim.device()  # current on this thread only
    caught = []

    def launch():
        try:
            hostcopy.launch_host_copy(0, bytearray(8), bytes(8))
        except Exception as error:  # re-raised below, on the test's thread
            caught.append(error)

    thread = threading.Thread(target=launch)
    thread.start()
    thread.join()
    assert len(caught) == 1 and type(caught[0]) is hostcopy.NoCurrentContext, caught
    assert "pass a stream" in str(caught[0])


def test_capture_gives_the_record_to_the_graph_and_replays_keep_working(sim):
    device = sim.device()
    capturing = sim.stream(device)
    src = bytearray(pattern(1024, 2))
    dst = bytearray(1024)
    before = alive()
    capturing.begin_capture()
    assert hostcopy.launch_host_copy(CudaCoreStream(capturing.handle), dst, src) is True
    graph = capturing.end_capture()
    assert dst == bytes(1024), "a captured launch does not run"
    runner = sim.stream(device)
    for replay in range(3):
        src[:] = pattern(1024, 10 + replay)
        graph.launch(runner)
        assert dst == src
        assert alive() == before + 1, "the graph still owns the record"
    graph.destroy()
    sim.drain(device)
    assert alive() == before
    sim.assert_no_violations(device)


def test_graph_node_record_belongs_to_the_graph(sim):
    device = sim.device()
    graph = sim.graph(device)
    src = bytearray(pattern(2 << 20, 3))
    dst = bytearray(2 << 20)
    before = alive()
    hostcopy.set_parallel_workers(2)
    node = hostcopy.add_host_copy_node(graph.handle, dst, src, parallel=True)
    second = hostcopy.add_host_copy_node(CUgraph(graph.handle), dst, src, 16, dependencies=[node, CUgraphNode(node)])
    assert node and second and node != second
    assert alive() == before + 2
    runner = sim.stream(device)
    for replay in range(2):
        src[:16] = pattern(16, 20 + replay)
        graph.launch(runner)
        assert dst == src
    graph.destroy()
    sim.drain(device)
    assert alive() == before
    sim.assert_no_violations(device)


def test_graph_handles_must_be_ints_or_cuda_bindings_graphs():
    with pytest.raises(TypeError):
        hostcopy.add_host_copy_node(CudaCoreStream(1), bytearray(8), bytes(8))
    with pytest.raises(TypeError):
        hostcopy.add_host_copy_node(0x1234, bytearray(8), bytes(8), dependencies=[object()])


def test_no_growth_over_20000_stream_launches(sim):
    device = sim.device()
    stream = sim.stream(device)
    src = pattern(64, 4)
    dst = bytearray(64)
    record = hostcopy.pack_host_copy_args(dst, src)
    before = alive()
    created_before, _ = hostcopy.owned_record_counts()
    for _ in range(20_000):
        hostcopy.launch_host_copy_args(stream, record)
    sim.drain(device)
    assert hostcopy.owned_record_counts()[0] >= created_before + 20_000
    assert alive() == before
    assert dst == src
    sim.assert_no_violations(device)


def test_threads_never_change_one_graph_at_once(sim):
    # Two threads launch on two streams of one capture and add nodes to one
    # raw graph; the simulator records two calls inside one graph at once
    # as a violation, which the layer's capture lock and graph lock prevent.
    device = sim.device()
    capturing, joined = sim.stream(device), sim.stream(device)
    graph = sim.graph(device)
    launches = 50
    start = threading.Barrier(2)
    failures = []
    buffers = [(bytearray(64), pattern(64, 30 + i)) for i in range(2)]
    capturing.begin_capture()
    joined.begin_capture()

    def work(stream, dst, src):
        try:
            sim.native.sim_make_current(device)  # for the raw graph's calls
            start.wait()
            for _ in range(launches):
                assert hostcopy.launch_host_copy(stream, dst, src) is True
                hostcopy.add_host_copy_node(graph.handle, dst, src)
        except BaseException as failure:
            failures.append(failure)

    threads = [
        threading.Thread(target=work, args=(stream, dst, src))
        for stream, (dst, src) in zip((capturing, CudaCoreStream(joined.handle)), buffers)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    captured = [capturing.end_capture(), joined.end_capture()]
    runner = sim.stream(device)
    graph.launch(runner)
    assert all(dst == src for dst, src in buffers)
    for each in captured + [graph]:
        each.destroy()
    sim.assert_no_violations(device)
