"""``await transfer`` against the simulated driver, under asyncio and (where
installed) uvloop: byte-exact both ways, errors of the class ``wait()``
raises, cancellation that frees nothing under the copy, many awaits at once,
and an event loop that sleeps until the transfer has finished (no polling,
no Python thread).
"""

import asyncio
import gc
import selectors
import subprocess
import sys
import textwrap
import threading
import time
import weakref

import pytest

import hostcopy
from conftest import pattern

CHUNK = 256 << 10
LAUNCH_FAILED = 719


def _uvloop_loop() -> asyncio.AbstractEventLoop:
    uvloop = pytest.importorskip("uvloop", reason="uvloop is not installed (ci.sh installs it)")
    return uvloop.new_event_loop()


LOOPS = {"asyncio": asyncio.new_event_loop, "uvloop": _uvloop_loop}


@pytest.fixture(params=sorted(LOOPS))
def run(request):
    """Runs a coroutine to completion on a fresh loop of the parametrised kind."""

    def run(coroutine):
        loop = LOOPS[request.param]()
        try:
            return loop.run_until_complete(coroutine)
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    return run


@pytest.fixture
def stager(device) -> hostcopy.Stager:
    """A stager of small chunks on the test's device, staged at every size."""
    return hostcopy.Stager(device, chunk=CHUNK, buffers=3, workers=2, driver_path_below=0)


class Tensor:
    """A device array whose memory is freed when it goes (weak references tell when)."""

    def __init__(self, array):
        self.array = array

    @property
    def __cuda_array_interface__(self):
        return self.array.__cuda_array_interface__

    def __del__(self):
        self.array.free()


def eventually(condition, what: str, seconds: float = 30) -> None:
    """Waits for `condition`, calling into the extension meanwhile (which
    releases the references the waiter thread let go of without the GIL)."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        hostcopy.rejected()
        time.sleep(0.002)


def test_await_copies_both_ways_byte_exact(sim, numpy, device, stager, run):
    size = 3 * CHUNK + 17
    data = pattern(size, 61)
    source = sim.array(device, data)
    target = sim.array(device, bytes(size))
    dst = numpy.zeros(size, numpy.uint8)
    blocks_dst = numpy.zeros(size, numpy.uint8)

    async def main():
        assert await stager.copy_to_host(dst, source, blocking=False) is None
        await stager.copy_to_device(target, dst, blocking=False)
        await stager.copy_blocks_to_host(blocks_dst, target, [(0, CHUNK, CHUNK), (CHUNK, 0, CHUNK)], blocking=False)
        await hostcopy.copy_to_host(numpy.zeros(8, numpy.uint8), source, 8, blocking=False)

    run(main())
    assert dst.tobytes() == data
    assert target.read() == data
    assert blocks_dst[:CHUNK].tobytes() == data[CHUNK : 2 * CHUNK]
    assert blocks_dst[CHUNK : 2 * CHUNK].tobytes() == data[:CHUNK]
    sim.assert_no_violations(device)


def test_await_raises_the_error_wait_raises(sim, numpy, device, stager, run):
    data = pattern(4 * CHUNK, 63)
    source = sim.array(device, data)
    dst = numpy.zeros(4 * CHUNK, numpy.uint8)
    sim.fail_call(device, "cuEventSynchronize", 1, LAUNCH_FAILED)
    transfer = stager.copy_to_host(dst, source, blocking=False)

    async def main():
        with pytest.raises(hostcopy.CudaError) as awaited:
            await transfer
        with pytest.raises(hostcopy.CudaError) as again:
            await transfer  # ended: at once, the same outcome
        return awaited.value, again.value

    awaited, again = run(main())
    with pytest.raises(hostcopy.CudaError) as waited:
        transfer.wait()
    assert awaited.code == again.code == waited.value.code == LAUNCH_FAILED
    assert type(awaited) is type(waited.value)
    stager.copy_to_host(dst, source)  # the stager works on
    assert dst.tobytes() == data


def test_the_loop_sleeps_until_the_transfer_has_finished(sim, numpy, device, stager):
    # A selector that counts how often the loop woke up: while the device is
    # held, an await that polled done() (or slept and looked) would wake it
    # hundreds of times; one signalled by the waiter thread wakes it once.
    class CountingSelector(selectors.DefaultSelector):
        wakeups = 0

        def select(self, timeout=None):
            ready = super().select(timeout)
            CountingSelector.wakeups += 1
            return ready

    data = pattern(3 * CHUNK, 65)
    source = sim.array(device, data)
    dst = numpy.zeros(3 * CHUNK, numpy.uint8)
    loop = asyncio.SelectorEventLoop(CountingSelector())
    threads = threading.active_count()
    sim.hold(device)
    transfer = stager.copy_to_host(dst, source, blocking=False)
    held = 0.3
    threads_meanwhile = []

    def release():
        threads_meanwhile.append(threading.active_count())
        sim.release(device)

    releaser = threading.Timer(held, release)

    async def main():
        started = time.monotonic()
        releaser.start()
        await transfer
        return time.monotonic() - started

    try:
        waited = loop.run_until_complete(main())
    finally:
        loop.close()
        releaser.join()
    assert waited >= held * 0.9, "the await returned while the device was held"
    assert dst.tobytes() == data
    assert CountingSelector.wakeups <= 6, f"the loop woke {CountingSelector.wakeups} times for one await"
    # While the device was held, the timer's was the only Python thread
    # started (an await through run_in_executor would start another).
    assert threads_meanwhile == [threads + 1], "the await ran Python on a thread of its own"


def test_a_cancelled_await_keeps_the_transfer_until_its_copies_ran(sim, device, stager, run):
    size = 3 * CHUNK
    data = pattern(size, 67)
    source = Tensor(sim.array(device, data))
    source_gone = weakref.ref(source)
    dst = bytearray(size)
    sim.hold(device)
    transfer = stager.copy_to_host(dst, source, blocking=False)
    del source
    allocations = sim.state(device)["device_allocations"]

    async def main():
        task = asyncio.ensure_future(_await(transfer))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(main())
    # A drop that waited for the copy would return only once this timer
    # lets the device run.
    unblock = threading.Timer(3, sim.release, args=(device,))
    unblock.start()
    started = time.monotonic()
    del transfer  # awaited: the waiter thread finishes it, the drop does not wait
    gc.collect()
    dropped_in = time.monotonic() - started
    unblock.cancel()
    assert dropped_in < 1, "dropping an awaited transfer waited for its copy"
    assert source_gone() is not None, "the source was let go of under the copy"
    assert sim.state(device)["device_allocations"] == allocations
    with pytest.raises(BufferError):
        dst.extend(b"x")  # the destination is still exported to the copy
    sim.release(device)
    eventually(lambda: source_gone() is None, "the source was kept after its copy ran")
    eventually(lambda: _resizable(dst), "the destination was kept after its copy ran")
    assert bytes(dst[:size]) == data
    sim.assert_no_violations(device)


async def _await(transfer):
    await transfer


def _resizable(buffer: bytearray) -> bool:
    try:
        buffer.extend(b"x")
    except BufferError:
        return False
    del buffer[-1:]
    return True


def test_many_concurrent_awaits_each_complete_byte_exact(sim, numpy, device, stager, run):
    size = 64 << 10
    expected = [pattern(size, seed) for seed in range(8)]
    sources = [sim.array(device, data) for data in expected]
    targets = [sim.array(device, bytes(size)) for _ in range(8)]
    uploads = [numpy.frombuffer(data, numpy.uint8) for data in expected]

    async def main(downloads):
        transfers = [stager.copy_to_host(dst, sources[i % 8], blocking=False) for i, dst in enumerate(downloads)]
        transfers += [stager.copy_to_device(targets[i], uploads[7 - i], blocking=False) for i in range(8)]
        # In reverse, so that most registrations wait behind a later one.
        await asyncio.gather(*(_await(t) for t in reversed(transfers)))

    allocations = sim.state(device)["device_allocations"]
    downloads = [numpy.zeros(size, numpy.uint8) for _ in range(64)]
    run(main(downloads))
    for i, dst in enumerate(downloads):
        assert dst.tobytes() == expected[i % 8]
    for i, target in enumerate(targets):
        assert target.read() == expected[7 - i]
    # Every transfer let go of its host array once awaited, and of its
    # device memory's share.
    kept = [weakref.ref(dst) for dst in downloads]
    del downloads, dst
    assert [ref for ref in kept if ref() is not None] == []
    assert sim.state(device)["device_allocations"] == allocations
    sim.assert_no_violations(device)


def test_two_tasks_await_one_transfer_and_await_after_wait_returns_at_once(sim, numpy, device, stager, run):
    data = pattern(2 * CHUNK, 69)
    source = sim.array(device, data)
    dst = numpy.zeros(2 * CHUNK, numpy.uint8)
    sim.hold(device)
    transfer = stager.copy_to_host(dst, source, blocking=False)
    seen = []

    async def watcher():
        await transfer
        seen.append(dst.tobytes())

    async def main():
        tasks = [asyncio.ensure_future(watcher()) for _ in range(2)]
        await asyncio.sleep(0.05)
        assert not any(task.done() for task in tasks)
        sim.release(device)
        await asyncio.gather(*tasks)

    run(main())
    assert seen == [data, data]
    later = stager.copy_to_host(numpy.zeros(2 * CHUNK, numpy.uint8), source, blocking=False)
    later.wait()

    async def after_wait():
        await later  # ended: completes without a wakeup

    run(after_wait())
    # A thread's wait() and an await of one transfer both see the bytes.
    sim.hold(device)
    shared = stager.copy_to_host(dst, source, blocking=False)
    waiter = threading.Thread(target=shared.wait)
    waiter.start()
    threading.Timer(0.05, sim.release, args=(device,)).start()
    run(_await(shared))
    waiter.join()
    assert shared.done() and dst.tobytes() == data


def test_await_after_close_reports_how_the_copy_ended(sim, numpy, device, stager, run):
    data = pattern(3 * CHUNK, 71)
    source = sim.array(device, data)
    dst = numpy.zeros(3 * CHUNK, numpy.uint8)
    transfer = stager.copy_to_host(dst, source, blocking=False)
    stager.close()
    run(_await(transfer))
    assert dst.tobytes() == data


def test_the_interpreter_exits_cleanly_with_a_cancelled_await_still_copying(sim):
    # The device is never released: at exit the waiter thread still holds
    # the transfer (and the destination handed to it by the drop). The
    # drop must not wait, and the thread, which never calls into Python,
    # must not crash the interpreter's finalization; the exit handler
    # waits for the stager's transfers in flight only up to its grace
    # (5 s), since this device never finishes them.
    script = textwrap.dedent(
        """
        import asyncio, hostcopy
        native = hostcopy._native
        native.sim_install()
        device = native.sim_new_device()
        native.sim_make_current(device)
        stager = hostcopy.Stager(device, chunk=256 << 10, buffers=3, workers=2, driver_path_below=0)
        source = native.SimDeviceArray(device, 3 << 18)
        dst = bytearray(3 << 18)
        native.sim_hold(device)
        transfer = stager.copy_to_host(dst, source, blocking=False)

        async def awaited():
            await transfer

        async def main():
            task = asyncio.ensure_future(awaited())
            await asyncio.sleep(0.01)
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

        asyncio.run(main())
        del transfer
        print("exiting")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout.strip()) == (0, "exiting"), done.stderr
    assert "panicked" not in done.stderr and "Fatal" not in done.stderr, done.stderr


def test_a_transfer_starts_on_the_loop_while_another_is_awaited(sim, numpy, device, stager, run):
    # The waiter thread waits for the copies without the stager's lock: a
    # start on the loop's thread meanwhile queues at once (a waiter that
    # held the lock would stop the loop until the device ran).
    data = pattern(2 * CHUNK, 73)
    source = sim.array(device, data)
    first, second = numpy.zeros(2 * CHUNK, numpy.uint8), numpy.zeros(2 * CHUNK, numpy.uint8)
    sim.hold(device)
    unblock = threading.Timer(3, sim.release, args=(device,))
    unblock.start()

    async def main():
        task = asyncio.ensure_future(_await(stager.copy_to_host(first, source, blocking=False)))
        await asyncio.sleep(0.05)  # the waiter thread has it, waiting for the device
        started = time.monotonic()
        later = stager.copy_to_host(second, source, blocking=False)
        queued_in = time.monotonic() - started
        sim.release(device)
        await asyncio.gather(task, _await(later))
        return queued_in

    try:
        queued_in = run(main())
    finally:
        unblock.cancel()
    assert queued_in < 1, f"a start waited {queued_in:.2f} s for the stager while another transfer was awaited"
    assert first.tobytes() == data and second.tobytes() == data


def test_a_loop_closed_with_an_await_outstanding_is_forgotten_by_the_next_await(sim, numpy, device, stager):
    from hostcopy import _awaiting

    data = pattern(2 * CHUNK, 75)
    source = sim.array(device, data)
    dst = numpy.zeros(2 * CHUNK, numpy.uint8)
    kept = weakref.ref(dst)
    sim.hold(device)
    abandoned = asyncio.new_event_loop()
    abandoned.run_until_complete(asyncio.sleep(0))
    task = abandoned.create_task(_await(stager.copy_to_host(dst, source, blocking=False)))
    abandoned.run_until_complete(asyncio.sleep(0.02))  # the task is waiting on its future
    abandoned.close()  # with the task still pending, never cancelled
    assert abandoned in _awaiting._by_loop
    del task, dst
    sim.release(device)
    asyncio.run(_await(stager.copy_to_host(numpy.zeros(8, numpy.uint8), source, 8, blocking=False)))
    assert abandoned not in _awaiting._by_loop
    gc.collect()
    eventually(lambda: kept() is None, "the abandoned loop's transfer kept its destination")


def test_a_start_on_the_loop_returns_with_every_chunk_queued(sim, numpy, device, stager, run):
    # Work queued on the stream after the call may wait only for work
    # already queued: a wait for work another thread queues later deadlocks
    # on the real driver as soon as any thread makes a synchronous call on
    # that stream (the driver holds that thread's queuing back meanwhile).
    # So a start on the loop's thread queues its chunks in the call, after
    # another thread's blocking copy that holds the stager.
    data = pattern(2 * CHUNK, 77)
    source = sim.array(device, data)
    first, second = numpy.zeros(2 * CHUNK, numpy.uint8), numpy.zeros(2 * CHUNK, numpy.uint8)
    sim.hold(device)
    blocking = threading.Thread(target=stager.copy_to_host, args=(first, source))
    blocking.start()
    time.sleep(0.05)  # the blocking copy holds the stager, waiting for the device
    unblock = threading.Timer(0.2, sim.release, args=(device,))

    async def main():
        unblock.start()
        before = sim.copies_queued(device)
        transfer = stager.copy_to_host(second, source, blocking=False)
        queued = sim.copies_queued(device) - before
        await transfer
        return queued

    try:
        queued = run(main())
    finally:
        unblock.cancel()
        sim.release(device)
        blocking.join()
    assert queued >= 2, f"the call returned with {queued} of its 2 chunks' copies queued"
    assert first.tobytes() == data and second.tobytes() == data
    sim.assert_no_violations(device)


def test_a_blocking_copy_on_the_stream_after_a_start_on_the_loop_reads_what_it_uploaded(sim, numpy, device, stager, run):
    # The download, blocking on another thread, is ordered after the
    # stream the upload started on the loop was ordered before: it sees the
    # new bytes, and neither waits for the other forever.
    data = pattern(3 * CHUNK, 79)
    stream = sim.stream(device)
    target = sim.array(device, bytes(3 * CHUNK))
    uploaded = numpy.frombuffer(data, numpy.uint8).copy()
    back = numpy.zeros(3 * CHUNK, numpy.uint8)

    async def main():
        transfer = stager.copy_to_device(target, uploaded, stream=stream, blocking=False)
        download = asyncio.get_running_loop().run_in_executor(
            None, lambda: stager.copy_to_host(back, target, stream=stream)
        )
        await asyncio.wait_for(asyncio.gather(_await(transfer), download), 30)

    run(main())
    assert back.tobytes() == data
    sim.assert_no_violations(device)


def test_a_start_on_the_loop_raises_what_the_stager_refuses_at_the_call(sim, numpy, device, stager, run):
    # Block checks are the stager's, made as the transfer starts, in the
    # call: on the loop's thread as anywhere else.
    source = sim.array(device, pattern(4 * CHUNK, 81))
    dst = numpy.zeros(4 * CHUNK, numpy.uint8)
    queued = sim.copies_queued(device)

    async def main():
        with pytest.raises(hostcopy.BlocksOverlap):
            stager.copy_blocks_to_host(dst, source, [(0, 0, CHUNK), (CHUNK, 8, CHUNK)], blocking=False)

    run(main())
    assert sim.copies_queued(device) == queued, "a refused transfer queued copies"
    stager.copy_to_host(dst, source)  # the stager works on
    assert dst.tobytes() == pattern(4 * CHUNK, 81)


def test_a_transfer_started_on_the_loop_and_dropped_does_not_block_it_and_keeps_its_memory(sim, device, stager, run):
    # Dropped unwaited on the loop's thread, the transfer goes to the
    # finish thread: the drop does not wait for the copy (the loop would
    # stop until the device runs), and the destination stays held until
    # the copy is done.
    size = 3 * CHUNK
    data = pattern(size, 83)
    source = sim.array(device, data)
    dst = bytearray(size)
    sim.hold(device)
    unblock = threading.Timer(3, sim.release, args=(device,))

    async def main():
        unblock.start()  # a drop that waits returns only then
        transfer = stager.copy_to_host(dst, source, blocking=False)
        started = time.monotonic()
        del transfer
        gc.collect()
        return time.monotonic() - started

    try:
        dropped_in = run(main())
        assert dropped_in < 1, f"dropping a transfer started on the loop waited {dropped_in:.2f} s for its copy"
        with pytest.raises(BufferError):
            dst.extend(b"x")  # still exported to the copy
    finally:
        unblock.cancel()
        sim.release(device)
    eventually(lambda: _resizable(dst), "the destination was kept after its copy ran")
    assert bytes(dst[:size]) == data
    sim.assert_no_violations(device)


def test_a_transfer_dropped_as_an_exception_propagates_keeps_that_exception(sim, numpy, device, stager, run):
    # Transfers dropped unwaited while an exception unwinds their frame are
    # finished (or, on a loop's thread, handed to the finish thread)
    # without replacing that exception.
    source = sim.array(device, pattern(2 * CHUNK, 85))
    dsts = [numpy.zeros(2 * CHUNK, numpy.uint8) for _ in range(2)]

    def start_then_fail():
        return [stager.copy_to_host(dst, source, blocking=False) for dst in dsts] + [1 // 0]

    with pytest.raises(ZeroDivisionError):
        start_then_fail()
    assert all(dst.tobytes() == pattern(2 * CHUNK, 85) for dst in dsts)

    async def main():
        with pytest.raises(ZeroDivisionError):
            start_then_fail()

    run(main())
    sim.assert_no_violations(device)
