"""The edges of a process's life and of the binding's calls, against the
simulated driver: panics inside calls made without the GIL, fork and exit
with transfers in flight, several event loops, captures on another device,
malformed model files, implicit closes. Each risky scenario runs in a
process of its own, with a timeout, since what they guard against are
hangs.
"""

import os
import struct
import subprocess
import sys
import textwrap
import types

import pytest

import hostcopy
from conftest import SIM_SCRIPT_PRELUDE

pytestmark = pytest.mark.skipif(
    not hasattr(hostcopy._native, "sim_install"),
    reason="this wheel has no simulated driver (ci.sh builds one with --features simulator)",
)

PRELUDE = SIM_SCRIPT_PRELUDE


def run(body: str, timeout: float):
    """(returncode or "timeout", stdout, stderr) of the prelude + body in a fresh interpreter."""
    script = PRELUDE + textwrap.dedent(body)
    try:
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as expired:
        out = expired.stdout.decode() if isinstance(expired.stdout, bytes) else (expired.stdout or "")
        err = expired.stderr.decode() if isinstance(expired.stderr, bytes) else (expired.stderr or "")
        return "timeout", out, err
    return done.returncode, done.stdout, done.stderr


def test_a_panic_inside_a_detached_call_raises_instead_of_hanging_with_the_gil():
    # Only a thread that comes back after the exit handler parks inside
    # life::detach: an ordinary Rust panic in the closure (here the
    # simulator's drain with a bad ordinal) goes on to pyo3, which raises
    # PanicException, while the other thread keeps running.
    code, out, err = run(
        """
        ticks = []
        threading.Thread(target=lambda: [ticks.append(time.sleep(0.01)) for _ in range(10**6)], daemon=True).start()
        try:
            native.sim_drain(device + 1000)
        except BaseException as error:
            print("raised", type(error).__name__, flush=True)
        """,
        timeout=15,
    )
    assert code != "timeout", "the process hung (GIL held by a parked thread) instead of raising PanicException"
    assert "raised PanicException" in out, (out, err)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork")
def test_a_forked_child_dropping_a_transfer_whose_stager_went_first_leaves_it_alone():
    # The Python Stager is dropped in the parent while a Transfer still
    # holds the stager's shared state. Dropping that Transfer in a forked
    # child leaves the state, the stager's with it, alone: the stager's
    # drop would join a copier thread the child does not have.
    code, out, err = run(
        """
        dst = numpy.empty(SIZE, numpy.uint8)
        pending = hostcopy.Stager(device, chunk=256 << 10, buffers=2, workers=1, driver_path_below=0).copy_to_host(
            dst, source, blocking=False
        )
        pending.wait()
        pid = os.fork()
        if pid == 0:
            try:
                del pending
                print("child: dropped quietly", flush=True)
            except BaseException as error:
                print("child: drop raised", type(error).__name__, error, flush=True)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        print("child status", status, flush=True)
        """,
        timeout=30,
    )
    assert code == 0, (code, err)
    assert "child: dropped quietly" in out, (out, err[-2000:])
    assert "threads should not terminate unexpectedly" not in err, err[-2000:]


def test_exit_is_bounded_by_the_grace_even_with_a_transfer_held_in_a_global():
    # The exit handler waits EXIT_GRACE (5 s) for a device whose work never
    # ends, then gives up; a module-global Transfer dropped during
    # finalisation afterwards is left alone instead of waiting for its
    # copies for good: the process exits.
    code, out, err = run(
        """
        stager = hostcopy.Stager(device, chunk=256 << 10, buffers=2, workers=1, driver_path_below=0)
        dst = numpy.empty(SIZE, numpy.uint8)
        native.sim_hold(device)          # a kernel that never ends
        pending = stager.copy_to_host(dst, source, blocking=False)
        print("exiting", flush=True)
        """,
        timeout=20,
    )
    assert "exiting" in out, (out, err)
    assert code != "timeout", "exit hung past the 5 s grace: finalization drops the global Transfer, which waits for good"


def test_a_transfer_dropped_after_the_exit_handler_gave_up_keeps_its_destination_for_good():
    # The exit handler gives up on a device that does not finish within
    # the grace. A Transfer dropped afterwards (finalisation dropping a
    # global) leaves its state alone, and its destination array with it:
    # the copier may still write it once the device goes on. Released,
    # the array's memory would go back to the allocator, and the late
    # copy would write whatever was allocated there next.
    code, out, err = run(
        """
        import gc, weakref
        stager = hostcopy.Stager(device, chunk=256 << 10, buffers=2, workers=1, driver_path_below=0)
        dst = numpy.zeros(SIZE, numpy.uint8)
        alive = weakref.ref(dst)
        native.sim_hold(device)                   # the device does not finish within the grace
        pending = stager.copy_to_host(dst, source, blocking=False)
        del dst
        atexit._run_exitfuncs()                   # hostcopy's exit handler: waits 5 s, gives up
        del pending
        gc.collect()
        print("destination kept:", alive() is not None, flush=True)
        later = [numpy.zeros(SIZE, numpy.uint8) for _ in range(4)]
        native.sim_release(device)                # the copier writes now
        time.sleep(1)
        print("later arrays written:", sum(int(array.any()) for array in later), flush=True)
        """,
        timeout=30,
    )
    assert code != "timeout", (out, err)
    assert "destination kept: True" in out, (out, err[-2000:])
    assert "later arrays written: 0" in out, (out, err[-2000:])


def test_a_stager_made_while_the_exit_handler_runs_is_closed_too():
    # A stager is registered for the exit handler under the lock the
    # handler takes, and refused once it has run: one made by another
    # thread while the handler runs (context creation is long on a GPU)
    # is closed too, never left open for a transfer at driver teardown.
    code, out, err = run(
        """
        first = hostcopy.Stager(device, chunk=256 << 10, buffers=2, workers=1)  # registers the handler
        made, stop = [], threading.Event()
        def make():
            while not stop.is_set():
                try:
                    made.append(hostcopy.Stager(device, chunk=256 << 10, buffers=2, workers=1))
                except ValueError:
                    return
        threading.Thread(target=make, daemon=True).start()
        time.sleep(0.3)
        atexit._run_exitfuncs()          # the interpreter's exit handlers, hostcopy's among them
        stop.set()
        time.sleep(0.3)
        still_open = 0
        for stager in made:
            try:
                stager.copy_to_host(numpy.empty(4096, numpy.uint8), source, nbytes=4096)
                still_open += 1
            except ValueError:
                pass
        print("open after the exit handler:", still_open, flush=True)
        """,
        timeout=60,
    )
    assert code == 0, (code, err)
    assert "open after the exit handler: 0" in out, out


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork")
def test_a_forked_child_raises_cuda_unavailable_even_while_a_parent_thread_held_the_default_stager_lock():
    # The default stagers' registry (src/default_stager.rs) is locked while
    # a device's default stager is made (context creation: long on a GPU,
    # here held until the simulated device is released). A fork meanwhile
    # would leave the lock held in the child; the child gets a registry of
    # its own, and its copy of a DLPack array raises CudaUnavailable at
    # once, before the array's export is called.
    code, out, err = run(
        """
        other = native.sim_new_device()
        other_source = native.SimDeviceArray(other, 4096, None)
        hostcopy.copy_to_host(numpy.empty(4096, numpy.uint8), source, nbytes=4096)   # CUDA used: a fork is refused
        native.sim_hold(other)           # its stager is made once the device runs again
        threading.Thread(target=lambda: hostcopy.copy_to_host(numpy.empty(4096, numpy.uint8), other_source), daemon=True).start()
        time.sleep(0.3)
        native.sim_release_later(other, 1000)
        class CudaTensor:                # a torch/cupy CUDA array as the device lookup reads it
            def __dlpack_device__(self):
                return (2, device)
            def __dlpack__(self, stream=None):
                raise RuntimeError("not reached")
        pid = os.fork()
        if pid == 0:
            try:
                hostcopy.copy_to_host(numpy.empty(4096, numpy.uint8), CudaTensor())
                print("child: no error", flush=True)
            except hostcopy.CudaUnavailable:
                print("child: CudaUnavailable", flush=True)
            os._exit(0)
        for _ in range(100):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.05)
        else:
            print("child hung", flush=True)
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        """,
        timeout=30,
    )
    assert code == 0, (code, err)
    assert "child hung" not in out, "the child blocked on the default stagers' lock, held by a parent thread the fork left behind"
    assert "child: CudaUnavailable" in out, out


def test_concurrent_event_loops_on_threads_can_await_transfers():
    # Awaits from event loops on several threads at once: _awaiting.wait
    # reads the table of loops from a copy while other threads add or
    # remove their own loop's entry. A short switch interval makes a race
    # there show in every run.
    code, out, err = run(
        """
        import asyncio
        stager = hostcopy.Stager(device, chunk=4096, buffers=2, workers=1, driver_path_below=0)
        sys.setswitchinterval(1e-6)
        errors = []
        async def one():
            await stager.copy_to_host(numpy.empty(4096, numpy.uint8), source, nbytes=4096, blocking=False)
        def worker():
            for _ in range(300):
                try:
                    asyncio.run(one())
                except RuntimeError as error:
                    errors.append(str(error))
                    return
        threads = [threading.Thread(target=worker) for _ in range(6)]
        [thread.start() for thread in threads]
        [thread.join() for thread in threads]
        print("errors:", errors[:2], flush=True)
        """,
        timeout=120,
    )
    assert code == 0, (code, err)
    assert "errors: []" in out, out


def test_a_torch_tensor_on_another_device_than_the_current_one_is_refused_during_a_capture(
    sim, numpy, monkeypatch
):
    # torch's Tensor.__dlpack__(stream) orders torch.cuda.current_stream()
    # (the current device's current stream, not the tensor's) before
    # `stream`, so that is the stream the capture check asks: with the
    # tensor on device 1 while device 0 is current and captures, the copy
    # is refused before the export would record inside the capture.
    current_device = sim.device()
    tensor_device = sim.device()
    capturing = sim.stream(current_device)
    idle = sim.stream(tensor_device)
    streams = {current_device: capturing.handle, tensor_device: idle.handle}

    def current_stream(device=None):
        index = current_device if device is None else int(device)
        return types.SimpleNamespace(cuda_stream=streams[index])

    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(current_stream=current_stream)
    monkeypatch.setitem(sys.modules, "torch", torch)
    asked_during_capture = []

    class Tensor:
        device = tensor_device

        def __dlpack_device__(self):
            return (2, tensor_device)

        def __dlpack__(self, stream=None):
            # What torch does here: record on current_stream() (no device).
            sync = torch.cuda.current_stream().cuda_stream
            asked_during_capture.append(hostcopy._native.stream_capturing(sync))
            raise RuntimeError("exported")

    Tensor.__module__ = "torch"
    stager = hostcopy.Stager(tensor_device, chunk=256 << 10, buffers=2, workers=1, driver_path_below=0)
    capturing.begin_capture()
    try:
        with pytest.raises((hostcopy.StreamCapturing, RuntimeError)):
            stager.copy_to_host(numpy.empty(64, numpy.uint8), Tensor())
    finally:
        capturing.end_capture().destroy()
        stager.close()
    assert asked_during_capture == [], (
        "the export ran while torch's current stream (current device) was capturing: torch records an "
        "event inside the capture and breaks it"
    )


def test_a_deeply_nested_header_raises_safetensors_error():
    # Every file either reader refuses raises SafetensorsError (a
    # ValueError), a header nested deeper than json.loads recurses too.
    from hostcopy import _safetensors_format as fmt

    body = b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    raw = struct.pack("<Q", len(body)) + body
    with pytest.raises(hostcopy.SafetensorsError):
        fmt.parse_header(raw, len(raw), "deep.safetensors")


def test_dropping_the_last_reference_to_a_stager_does_not_wait_with_the_gil_held():
    # Dropping the last reference to a stager closes it with the GIL
    # released, as close() does: its drop drains its streams, which wait on
    # the `stream=` of a copy it refused after ordering itself after that
    # stream. The thread that lets that stream's work end gets the GIL
    # meanwhile.
    code, out, err = run(
        """
        stream = native.SimStream(device)
        stager = hostcopy.Stager(device, chunk=256 << 10, buffers=2, workers=1, driver_path_below=0)
        native.sim_hold(device)          # work queued on `stream` not done yet
        try:
            stager.copy_blocks_to_host(numpy.empty(SIZE, numpy.uint8), source, [(0, 0, 100), (0, 50, 100)], stream=stream)
        except hostcopy.BlocksOverlap:
            print("refused", flush=True)
        def release():
            time.sleep(0.5)
            native.sim_release(device)
        threading.Thread(target=release, daemon=True).start()
        del stager
        print("dropped", flush=True)
        """,
        timeout=15,
    )
    assert "refused" in out, (out, err)
    assert code != "timeout", "del stager waited for the device with the GIL held: the releasing thread never ran"
    assert "dropped" in out, (out, err)


def test_a_stager_whose_last_reference_the_await_thread_drops_is_closed_without_the_gil():
    # The Stager and an awaited Transfer are dropped while the copy is
    # held: the registration queued with the stager's waiter thread holds
    # the last reference. Once the copy ends that thread closes the stager
    # where it is, without asking for the GIL (which it would wait for, or
    # be ended inside, as the interpreter finalises): here the main thread
    # keeps the GIL throughout, and the stager's streams still go.
    code, out, err = run(
        """
        sys.setswitchinterval(100)        # the main thread keeps the GIL when asked for it
        stager = hostcopy.Stager(device, chunk=256 << 10, buffers=2, workers=1, driver_path_below=0)
        dst = numpy.empty(SIZE, numpy.uint8)
        native.sim_hold(device)
        pending = stager.copy_to_host(dst, source, blocking=False)
        wakeup = native.Wakeup()
        print("registered:", pending._notify_when_finished(wakeup, 1) is False, flush=True)
        del pending, stager
        print("streams before:", native.sim_device_state(device)["streams"], flush=True)
        native.sim_release(device)
        until = time.perf_counter() + 10
        while native.sim_device_state(device)["streams"] and time.perf_counter() < until:
            pass                          # Python code: the GIL is never let go
        print("streams after:", native.sim_device_state(device)["streams"], flush=True)
        """,
        timeout=30,
    )
    assert code == 0, (code, err[-2000:])
    assert "registered: True" in out, (out, err)
    assert "streams before: 0" not in out, (out, err)
    assert "streams after: 0" in out, ("the await thread waited for the GIL to close the stager", out, err)


def test_a_thread_that_comes_back_without_the_gil_once_the_interpreter_finalises_parks_instead_of_crashing():
    # A daemon thread inside a call made without the GIL (a stream's
    # synchronize, on a held device) comes back after the exit handler ran
    # and would ask for the GIL while the main thread keeps it; the
    # interpreter then finalises, and a finaliser lets the GIL go. Python
    # before 3.14 ends a thread that takes the GIL then with pthread_exit,
    # a forced unwind through this extension's frames: SIGSEGV on the H200
    # host in 4 runs of 8 of the daemon-thread exit script
    # (docs/design-record.md, "Threads that come back at exit park before
    # asking for the GIL"). Such a
    # thread never asks: it parks (still there when the finaliser looks),
    # and the process exits cleanly.
    code, out, err = run(
        """
        sys.setswitchinterval(100)        # the main thread keeps the GIL when asked for it
        def after_hostcopys_handler():    # registered first: runs after hostcopy's exit handler
            native.sim_release(device)    # the synchronize ends; the thread comes back
            until = time.perf_counter() + 0.2
            while time.perf_counter() < until:
                pass
        atexit.register(after_hostcopys_handler)
        stager = hostcopy.Stager(device, chunk=256 << 10, buffers=2, workers=1, driver_path_below=0)
        stream = native.SimStream(device)
        native.sim_hold(device)
        first, second = numpy.zeros(64, numpy.uint8), numpy.ones(64, numpy.uint8)
        hostcopy.launch_host_copy(stream, first, second)
        # The thread runs no Python frame of this module, so that the
        # module's globals, the finaliser among them, go at finalisation.
        waiter = threading.Thread(target=stream.synchronize, daemon=True)
        waiter.start()
        time.sleep(0.2)                   # inside the synchronize, without the GIL
        class LetsTheGilGo:               # a finaliser that sleeps, as a driver binding's may
            def __init__(self, task):
                self.task = task
            def __del__(self):
                time.sleep(0.2)
                there = os.path.exists(self.task)
                os.write(1, b"finaliser: thread still there\\n" if there else b"finaliser: thread gone\\n")
        finaliser = LetsTheGilGo(f"/proc/self/task/{waiter.native_id}")
        print("exiting", flush=True)
        """,
        timeout=20,
    )
    assert "exiting" in out, (out, err)
    assert code == 0, (code, err[-3000:])
    if sys.platform == "linux":
        assert "finaliser: thread still there" in out, (out, err)


def test_after_the_exit_handler_no_call_runs_python_code_inside_the_extension():
    # From the exit handler on, a thread running Python code inside the
    # extension's frames (a class's __init__, an option's __index__) may be
    # ended there as the interpreter finalises: SIGSEGV or "FATAL:
    # exception not rethrown" in 3 of 10 runs of daemon threads making
    # stagers with a Python __index__. So errors come as their built-in
    # base with the same message, and a stager is refused before its
    # options are read.
    code, out, err = run(
        """
        class Slow:
            def __index__(self):
                print("index called", flush=True)
                return 2
        def after_hostcopys_handler():    # registered first: runs after hostcopy's exit handler
            try:
                hostcopy.Stager(device, buffers=Slow())
            except ValueError as error:
                print("stager:", type(error).__name__, error, flush=True)
            try:
                hostcopy.pack_host_copy_args(bytearray(8), bytes(16))
            except ValueError as error:
                print("pack:", type(error).__name__, flush=True)
        atexit.register(after_hostcopys_handler)
        hostcopy.Stager(device, chunk=256 << 10, buffers=2, workers=1)
        try:
            hostcopy.pack_host_copy_args(bytearray(8), bytes(16))
        except hostcopy.OutOfBounds:
            print("before exit: OutOfBounds", flush=True)
        """,
        timeout=20,
    )
    assert code == 0, (code, err[-3000:])
    assert "before exit: OutOfBounds" in out, (out, err)
    assert "stager: ValueError the stager is closed: the interpreter is exiting" in out, (out, err)
    assert "index called" not in out, "the option's __index__ ran inside the extension after exit"
    assert "pack: ValueError" in out, (out, err)


def test_daemon_threads_inside_python_code_called_from_the_extension_at_exit_let_the_process_end():
    # Four daemon threads make stagers whose option's __index__ is slow
    # Python code, run from inside the extension's frames, as the main
    # thread exits. Before: "FATAL: exception not rethrown" or SIGSEGV in
    # 3 of 10 runs (the interpreter ended a thread inside that code). Now
    # the exit handler waits for them and none starts after it.
    body = """
        class Slow:
            def __index__(self):
                total = 0
                for step in range(200_000):
                    total += step
                return 2
        def loop():
            while True:
                try:
                    native.Stager(device, None, Slow(), None, None, None, None).close()
                except Exception:
                    pass
        hostcopy.Stager(device)
        for _ in range(4):
            threading.Thread(target=loop, daemon=True).start()
        time.sleep(0.3)
        """
    for attempt in range(4):
        code, out, err = run(body, timeout=30)
        assert code == 0, (attempt, code, err[-3000:])
