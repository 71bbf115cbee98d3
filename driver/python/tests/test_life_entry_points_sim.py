"""The process's life covers every entry point, not only stagers: the exit
and fork handlers are registered when hostcopy is imported. Daemon threads
inside ``hostcopy.empty``, launches or ``load_driver`` at interpreter exit
end with the process cleanly, and a child forked after CUDA was used
through a launch alone refuses instead of hanging. Each in a process of
its own, against the simulated driver.
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


def run(body: str, timeout: float = 60) -> subprocess.CompletedProcess:
    script = SIM_SCRIPT_PRELUDE + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout)


def test_daemon_threads_in_empty_launches_and_load_driver_at_exit_end_cleanly():
    # No stager is ever made: before the handlers came with the import, a
    # daemon thread coming back from hostcopy.empty after the interpreter
    # finalised aborted the process ("exception not rethrown") in most runs.
    body = """
        stream = native.SimStream(device)
        host_src = bytearray(range(256)) * 64
        def empty():
            while True:
                hostcopy.empty(8 << 20)
        def launch():
            dst = bytearray(len(host_src))
            while True:
                hostcopy.launch_host_copy(stream, dst, host_src)
                stream.synchronize()
        def load():
            while True:
                hostcopy._native.load_driver()
        for target in (empty, empty, launch, load):
            threading.Thread(target=target, daemon=True).start()
        time.sleep(0.2)
        print("exiting", flush=True)
        """
    for _ in range(4):
        done = run(body)
        assert done.returncode == 0, (done.returncode, done.stderr)
        assert "exiting" in done.stdout, (done.stdout, done.stderr)
        assert "Fatal" not in done.stderr and "FATAL" not in done.stderr, done.stderr
        assert "not rethrown" not in done.stderr, done.stderr


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork on this platform")
def test_a_child_forked_after_a_launch_alone_refuses_cuda():
    done = run(
        """
        stream = native.SimStream(device)
        dst = bytearray(64)
        hostcopy.launch_host_copy(stream, dst, bytes(range(64)))
        stream.synchronize()
        assert bytes(dst) == bytes(range(64))
        pid = os.fork()
        if pid == 0:
            seen = []
            for attempt in (
                lambda: hostcopy.launch_host_copy(stream, bytearray(64), bytes(64)),
                lambda: hostcopy._native.load_driver(),
                lambda: hostcopy.copy_to_host(numpy.empty(SIZE, numpy.uint8), source),
            ):
                try:
                    attempt()
                    seen.append("no error")
                except hostcopy.CudaUnavailable as error:
                    seen.append("spawn" in str(error))
            # Packing and hostcopy.empty use no CUDA: they still work.
            seen.append(len(hostcopy.pack_host_copy_args(bytearray(8), bytes(8))))
            seen.append(hostcopy.empty(16).nbytes)
            print("child", seen, flush=True)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        print("child status", status, flush=True)
        """,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert "child [True, True, True, 24, 16]" in done.stdout, (done.stdout, done.stderr)
    assert "child status 0" in done.stdout, done.stdout


def test_a_child_forked_before_any_cuda_use_may_use_it():
    if not hasattr(os, "fork"):
        pytest.skip("no os.fork on this platform")
    done = run(
        """
        pid = os.fork()
        if pid == 0:
            native.sim_install()
            print("child", hostcopy.empty(16).nbytes, flush=True)
            hostcopy._native.load_driver()
            print("child loaded", flush=True)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        print("child status", status, flush=True)
        """,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert "child loaded" in done.stdout, (done.stdout, done.stderr)
    assert "child status 0" in done.stdout, done.stdout
