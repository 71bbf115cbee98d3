"""Importing and packing need no NVIDIA driver; launches and transfers say
clearly that they do.

Each check runs in a fresh interpreter whose libcuda is a path that does not
exist (HOSTCOPY_LIBCUDA), so it holds on a GPU machine too.
"""

import os
import subprocess
import sys
import tempfile
import textwrap

MISSING = "/nonexistent/libcuda.so.1"


def run_python(code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, HOSTCOPY_LIBCUDA=MISSING)
    # Outside the source tree: `python -c` puts the working folder first on
    # sys.path, where driver/python/hostcopy has no compiled half.
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        cwd=tempfile.gettempdir(),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_import_and_packing_load_no_libcuda():
    done = run_python(
        """
        import ctypes, hostcopy
        src = b"pinned slot"
        dst = bytearray(len(src))
        holder = ctypes.create_string_buffer(hostcopy.pack_host_copy_args(dst, src))
        hostcopy.HOST_COPY_FN(ctypes.addressof(holder))
        assert dst == src
        with open("/proc/self/maps") as maps:
            assert "libcuda" not in maps.read(), "libcuda was loaded"
        print("ok")
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_launch_functions_raise_cuda_unavailable_naming_the_library():
    done = run_python(
        """
        import hostcopy
        class Device:
            __cuda_array_interface__ = {"shape": (8,), "typestr": "|u1", "data": (0x7f0000000000, False), "version": 3}
        checks = [
            lambda: hostcopy.launch_host_copy(0, bytearray(8), bytes(8)),
            lambda: hostcopy.launch_host_copy_args(0, hostcopy.pack_host_copy_args(bytearray(8), bytes(8))),
            lambda: hostcopy.add_host_copy_node(0x1234, bytearray(8), bytes(8)),
            lambda: hostcopy.copy_to_host(bytearray(8), Device()),
            lambda: hostcopy.Stager(0),
        ]
        for check in checks:
            try:
                check()
            except hostcopy.CudaUnavailable as error:
                print(error)
            else:
                raise SystemExit("launched without a driver")
        """
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 5
    for line in lines:
        assert MISSING in line and "install the NVIDIA driver" in line


def test_packing_errors_come_before_the_driver_is_needed():
    done = run_python(
        """
        import hostcopy
        try:
            hostcopy.launch_host_copy(0, bytes(8), bytes(8))
        except hostcopy.ReadOnlyBuffer:
            print("refused")
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "refused"


def test_stager_options_are_refused_by_name_before_the_driver_is_needed():
    done = run_python(
        """
        import ctypes, hostcopy
        GIB, WORD_MAX = 1 << 30, (1 << (8 * ctypes.sizeof(ctypes.c_void_p))) - 1
        cases = [
            (dict(chunk=0), ("chunk", 0, 4096, GIB)),
            (dict(chunk=4095), ("chunk", 4095, 4096, GIB)),
            (dict(chunk=GIB + 1), ("chunk", GIB + 1, 4096, GIB)),
            (dict(buffers=0), ("buffers", 0, 1, 64)),
            (dict(buffers=65), ("buffers", 65, 1, 64)),
            (dict(workers=1025), ("workers", 1025, 0, 1024)),
            (dict(workers=1 << 70), ("workers", 1 << 70, 0, 1024)),
            (dict(chunk=-1), ("chunk", -1, 4096, GIB)),
            (dict(driver_path_below=-1), ("driver_path_below", -1, 0, WORD_MAX)),
            (dict(chunk=4096.0), ("chunk", 4096.0, 4096, GIB)),
            (dict(buffers="4"), ("buffers", "4", 1, 64)),
            (dict(buffers=True), ("buffers", True, 1, 64)),
        ]
        for options, expected in cases:
            try:
                hostcopy.Stager(0, **options)
            except hostcopy.InvalidOption as error:
                assert isinstance(error, ValueError)
                found = (error.option, error.value, error.min, error.max)
                assert found == expected and type(error.value) is type(expected[1]), (options, found)
                if not isinstance(expected[1], int) or isinstance(expected[1], bool):
                    assert isinstance(error.__cause__, TypeError), options
                print(error)
            else:
                raise SystemExit(f"accepted {options}")
        """
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 12
    assert lines[0] == "staging option chunk = 0 is outside 4096..=1073741824"
    assert lines[-1] == "staging option buffers = True is not an integer: it takes 1..=64"
