"""Who owns and frees launched records, checked against a stand-in libcuda.

The stand-in (libcuda_standin.c, built here with the system C compiler) runs
host functions at once on ordinary streams, records them as graph nodes on a
capturing stream, and runs user-object destructors when a test destroys a
graph. The cases (standin_driver_cases.py) run in their own interpreter:
the driver is opened once per process.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent


def test_owned_records_with_a_stand_in_driver(tmp_path):
    compiler = shutil.which(os.environ.get("CC", "cc"))
    if compiler is None:
        pytest.skip("no C compiler to build the stand-in libcuda (set CC)")
    library = tmp_path / "libcuda_standin.so"
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-pthread", "-O1", "-o", str(library), str(HERE / "libcuda_standin.c")], check=True
    )
    env = dict(os.environ, HOSTCOPY_LIBCUDA=str(library))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(HERE / "standin_driver_cases.py")],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    print(done.stdout[-4000:])
    print(done.stderr[-4000:])
    assert done.returncode == 0, "the stand-in driver cases failed (output above)"
    assert " passed" in done.stdout and "failed" not in done.stdout
