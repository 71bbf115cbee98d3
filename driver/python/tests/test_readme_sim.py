"""The Python blocks of the README, docs/python.md and the package's own
README run as written, each in a fresh interpreter in an empty folder.

A block that imports no GPU library runs against the simulated driver
(installed before the block, a device of its own current), so anything it
asks of CUDA is answered without a GPU. A block that imports torch, cupy,
cuda.core or safetensors needs that library and a real GPU: without them
it is skipped with the reason; on a GPU host, with the wheel installed
(no simulator in it), this file runs every block:

    python -m pytest -q -rs driver/python/tests/test_readme_sim.py

A block with ``<!-- not run: REASON -->`` on the line above it (the
README's offload example, which downloads a model) is compiled, and run
only with ``HOSTCOPY_GUIDE_DOWNLOADS=1``, as docs/offload.md's blocks that
download one are; test_offload_guide_sim.py checks the hostcopy names it
uses.
"""

import ast
import ctypes
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import hostcopy

ROOT = Path(__file__).resolve().parents[3]
DOCUMENTS = ["README.md", "docs/python.md", "driver/python/README.md"]

#: Imported top-level modules that make a block a GPU block, with the
#: distribution to install for each.
GPU_MODULES = {
    "torch": "torch",
    "cupy": "cupy",
    "cuda": "cuda-core",
    "safetensors": "safetensors",
    "transformers": "transformers",
    "accelerate": "accelerate",
}

#: The line above a block that is not run without HOSTCOPY_GUIDE_DOWNLOADS=1,
#: a comment the reader does not see.
NOT_RUN = re.compile(r"^<!-- not run: (?P<reason>.+?) -->$")

GPU_HOST_COMMAND = "python -m pytest -q -rs driver/python/tests/test_readme_sim.py"

#: Run before a block that needs no GPU library: the simulated driver as
#: the process's driver, with one device whose primary context is current.
SIM_PRELUDE = """
import hostcopy as _hostcopy
_native = _hostcopy._native
_native.sim_install()
_native.sim_make_current(_native.sim_new_device())
del _hostcopy, _native
"""


def python_blocks(document):
    """(line, source) of each ```python block of `document`, in order."""
    text = (ROOT / document).read_text(encoding="utf-8")
    blocks = []
    for match in re.finditer(r"^```python\n(.*?)^```$", text, re.S | re.M):
        line = text.count("\n", 0, match.start()) + 2
        blocks.append((line, match.group(1)))
    return blocks


def not_run_reason(document, line):
    """The reason of a ``<!-- not run: REASON -->`` line above the block
    whose source starts at `line` of `document`, or ``None``."""
    lines = (ROOT / document).read_text(encoding="utf-8").splitlines()
    before = [text for text in lines[: line - 2] if text.strip()]
    marked = NOT_RUN.match(before[-1].strip()) if before else None
    return marked.group("reason") if marked else None


def all_blocks():
    return [(document, line, source) for document in DOCUMENTS for line, source in python_blocks(document)]


def imported_modules(source):
    """The top-level modules `source` imports."""
    modules = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            modules.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module.split(".")[0])
    return modules


def module_present(name):
    if name == "cuda":
        try:
            return importlib.util.find_spec("cuda.core") is not None
        except ModuleNotFoundError:
            return False
    return importlib.util.find_spec(name) is not None


def gpu_count():
    """CUDA devices the driver reports (0 without a driver or a GPU)."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    count = ctypes.c_int(0)
    if libcuda.cuInit(0) != 0 or libcuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return count.value


def has_simulator():
    return hasattr(hostcopy._native, "sim_install")


def block_id(block):
    document, line, _ = block
    return f"{document}:{line}"


BLOCKS = all_blocks()


def test_every_document_has_python_blocks():
    for document in DOCUMENTS:
        assert python_blocks(document), f"{document} has no ```python block: the extraction found none"


@pytest.mark.parametrize("block", BLOCKS, ids=block_id)
def test_block_is_valid_python(block):
    document, line, source = block
    compile(source, f"{document}:{line}", "exec")


@pytest.mark.parametrize("block", BLOCKS, ids=block_id)
def test_block_runs_as_written(block, tmp_path):
    document, line, source = block
    reason = not_run_reason(document, line)
    if reason is not None and os.environ.get("HOSTCOPY_GUIDE_DOWNLOADS") != "1":
        pytest.skip(f"not run: {reason}; on a GPU host: HOSTCOPY_GUIDE_DOWNLOADS=1 {GPU_HOST_COMMAND}")
    gpu_modules = sorted(imported_modules(source) & GPU_MODULES.keys())
    if gpu_modules:
        missing = [GPU_MODULES[name] for name in gpu_modules if not module_present(name)]
        if missing:
            pytest.skip(f"needs {', '.join(missing)} (not installed) and a GPU; on a GPU host: {GPU_HOST_COMMAND}")
        if gpu_count() == 0:
            pytest.skip(f"needs a CUDA GPU (the driver reports none); on a GPU host: {GPU_HOST_COMMAND}")
        script = source
    elif has_simulator():
        script = SIM_PRELUDE + source
    elif os.environ.get("HOSTCOPY_REQUIRE_SIM") == "1":
        pytest.fail("this wheel has no simulated driver (ci.sh builds one with --features simulator)")
    elif gpu_count() == 0:
        pytest.skip("this wheel has no simulated driver and the driver reports no GPU")
    else:
        script = source
    # A fresh interpreter per block: the simulator, a CUDA context and the
    # stagers of one block never meet another's; the empty folder is the
    # block's working folder for the files it writes.
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, (
        f"the block at {document}:{line} failed (exit {result.returncode}):\n{result.stdout}\n{result.stderr}"
    )
