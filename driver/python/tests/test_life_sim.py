"""The process's life around the stagers, against the simulated driver:
interpreter exit with transfers in flight (they are waited for, later ones
refused, and a thread that comes back from a copy after the interpreter
finalised never returns into it), and a forked child (its stagers refuse
at once instead of waiting for the parent's threads). Each in a process of
its own.
"""

import os
import subprocess
import sys
import textwrap

import pytest

import hostcopy
from conftest import SIM_SCRIPT_PRELUDE

pytestmark = pytest.mark.skipif(
    not hasattr(hostcopy._native, "sim_install"),
    reason="this wheel has no simulated driver (ci.sh builds one with --features simulator)",
)

PRELUDE = SIM_SCRIPT_PRELUDE


def run(body: str, timeout: float = 60) -> subprocess.CompletedProcess:
    script = PRELUDE + textwrap.dedent(body)
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout
    )


def test_exit_waits_for_a_transfer_in_flight_and_refuses_later_ones():
    # The check is an exit handler registered before the stager (so run
    # after hostcopy's): by then the held transfer has been waited for and
    # copying again raises. The device is released by a thread only once
    # exit has begun, so the handler must wait for it.
    done = run(
        """
        results = {}
        def check():
            results["done"] = pending.done()
            results["bytes"] = bytes(dst[:4]) == bytes(range(4))
            try:
                stager.copy_to_host(numpy.empty(SIZE, numpy.uint8), source)
                results["later"] = "copied"
            except ValueError as error:
                results["later"] = str(error)
            print(results, flush=True)
        atexit.register(check)
        stager = hostcopy.Stager(device, chunk=256 << 10, buffers=2, workers=1, driver_path_below=0)
        dst = numpy.zeros(SIZE, numpy.uint8)
        native.sim_hold(device)
        pending = stager.copy_to_host(dst, source, blocking=False)
        def release_after_exit_began():
            time.sleep(0.2)
            native.sim_release(device)
        threading.Thread(target=release_after_exit_began, daemon=True).start()
        """
    )
    assert done.returncode == 0, done.stderr
    assert "'done': True" in done.stdout, done.stdout
    assert "'bytes': True" in done.stdout, done.stdout
    assert "the interpreter is exiting" in done.stdout, done.stdout


def test_daemon_threads_copying_at_exit_end_with_the_process_cleanly():
    # Four daemon threads copy in a loop (blocking and not) while the main
    # thread exits: the process ends with status 0 and no fatal error, in
    # every one of several runs.
    body = """
        stager = hostcopy.Stager(device, chunk=256 << 10, buffers=2, workers=1, driver_path_below=0)
        def loop(blocking):
            dst = numpy.empty(SIZE, numpy.uint8)
            while True:
                try:
                    transfer = stager.copy_to_host(dst, source, blocking=blocking)
                    if transfer is not None:
                        transfer.wait()
                except ValueError:
                    pass
        for blocking in (True, False, True, False):
            threading.Thread(target=loop, args=(blocking,), daemon=True).start()
        time.sleep(0.1)
        """
    for _ in range(3):
        done = run(body)
        assert done.returncode == 0, (done.returncode, done.stderr)
        assert "Fatal" not in done.stderr and "FATAL" not in done.stderr, done.stderr


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork on this platform")
def test_a_forked_childs_stagers_refuse_at_once_while_the_parent_holds_their_lock():
    # A parent thread's blocking transfer holds the stager's lock (its
    # device held) when the parent forks: in the child, the copy, a new
    # stager and a transfer's done() raise CudaUnavailable naming 'spawn',
    # and the child exits without waiting for threads it does not have.
    done = run(
        """
        import warnings
        warnings.simplefilter("ignore", DeprecationWarning)
        stager = hostcopy.Stager(device, chunk=256 << 10, buffers=2, workers=1, driver_path_below=0)
        pending = stager.copy_to_host(numpy.empty(SIZE, numpy.uint8), source, blocking=False)
        pending.wait()
        native.sim_hold(device)
        blocked = threading.Thread(
            target=lambda: stager.copy_to_host(numpy.empty(SIZE, numpy.uint8), source), daemon=True
        )
        blocked.start()
        time.sleep(0.2)
        pid = os.fork()
        if pid == 0:
            seen = []
            for attempt in (
                lambda: stager.copy_to_host(numpy.empty(SIZE, numpy.uint8), source),
                lambda: hostcopy.Stager(device),
                lambda: pending.done(),
            ):
                try:
                    attempt()
                    seen.append("no error")
                except hostcopy.CudaUnavailable as error:
                    seen.append("spawn" in str(error))
            print("child", seen, flush=True)
            sys.exit(0)
        _, status = os.waitpid(pid, 0)
        print("child status", status, flush=True)
        native.sim_release(device)
        blocked.join()
        """,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert "child [True, True, True]" in done.stdout, (done.stdout, done.stderr)
    assert "child status 0" in done.stdout, done.stdout
