"""An application's use of hostcopy, as its author would write it.

driver/python/ci.sh checks this file with ``mypy --strict`` against the
installed package, then runs it: the public API must type-check without a
cast or an ignore, and the types must be the ones the package really hands
back. It needs numpy; without an NVIDIA driver the launch fails with the
package's own error, which the script reports.
"""

from __future__ import annotations

import ctypes
import json
import mmap
import os
import struct
import sys
import tempfile
from typing import Any, Callable, Optional

import numpy as np
from numpy.typing import NDArray

import hostcopy
import hostcopy.safetensors

CHUNK = 1 << 16
SLOTS = 4


class HostAllocation:
    """Host memory from the application's own allocator, described the way a
    cuda.core ``Buffer`` describes itself (packing reads these attributes)."""

    class Resource:
        is_host_accessible = True

    def __init__(self, size: int) -> None:
        self._memory = (ctypes.c_char * size)()

    @property
    def memory_resource(self) -> HostAllocation.Resource:
        return HostAllocation.Resource()

    @property
    def handle(self) -> int:
        return ctypes.addressof(self._memory)

    @property
    def size(self) -> int:
        return len(self._memory)

    @property
    def is_host_accessible(self) -> bool:
        return True


def stage_into(dst: NDArray[np.uint8], staging: list[bytearray]) -> bytes:
    """Records that copy each staging slot into its chunk of ``dst``, packed
    into one ring buffer (one ``user_data`` per slot), and run on this thread
    the way the driver would run them."""
    ring = bytearray(SLOTS * hostcopy.HOST_COPY_ARGS_SIZE)
    for k, slot in enumerate(staging):
        user_data: int = hostcopy.pack_host_copy_args_into(
            ring, k * hostcopy.HOST_COPY_ARGS_SIZE, dst, slot, dst_offset=k * CHUNK
        )
        hostcopy.HOST_COPY_FN(user_data)
    return bytes(ring)


def check_ring(ring: bytes, dst_address: int) -> None:
    for k in range(SLOTS):
        record = hostcopy.unpack_host_copy_args(ring, k * hostcopy.HOST_COPY_ARGS_SIZE)
        assert record.dst == dst_address + k * CHUNK and record.nbytes == CHUNK


def report(error: hostcopy.PackError) -> str:
    """What a refusal says, from its typed fields."""
    if isinstance(error, hostcopy.OutOfBounds):
        past = error.offset + error.nbytes - error.len
        return f"{error.side.upper()}: {past} bytes past the end"
    if isinstance(error, hostcopy.Overlap):
        return f"ranges share {min(error.dst, error.src) + error.nbytes - max(error.dst, error.src)} bytes"
    if isinstance(error, hostcopy.NotContiguous):
        return f"{error.side}: shape {'x'.join(map(str, error.shape))}, strides {sum(error.strides)}"
    if isinstance(error, hostcopy.ReadOnlyBuffer):
        return f"{error.side}: {error.len} read-only bytes"
    if isinstance(error, (hostcopy.NullWithLength, hostcopy.AddressOverflow)):
        return f"{error.side}: {error.nbytes:#x} bytes"
    if isinstance(error, hostcopy.NotHostAccessible):
        return f"{error.side} at {error.addr:#x}"
    if isinstance(error, hostcopy.IntegerOutOfRange):
        return f"{error.name} = {error.value} > {error.max:#x}"
    return str(error)


def refusals(dst: NDArray[np.uint8]) -> list[str]:
    seen: list[str] = []
    attempts: list[Callable[[], bytes]] = [
        lambda: hostcopy.pack_host_copy_args(dst, bytes(CHUNK), dst_offset=dst.nbytes),
        lambda: hostcopy.pack_host_copy_args(dst, dst[8:], 16),
        lambda: hostcopy.pack_host_copy_args(dst.reshape(-1, 2)[:, :1], bytes(8)),
        lambda: hostcopy.pack_host_copy_args(b"read-only", bytearray(4)),
        lambda: hostcopy.pack_host_copy_args(0, bytearray(4)),
        lambda: hostcopy.pack_host_copy_args(dst, 0, 1 << 80),
    ]
    for attempt in attempts:
        try:
            attempt()
        except hostcopy.PackError as error:
            seen.append(f"{type(error).__name__}: {report(error)}")
    return seen


def launch(dst: NDArray[np.uint8], pinned: mmap.mmap, stream: int) -> str:
    """Enqueues the host copy on ``stream``; without a driver, says why not."""
    try:
        capturing: bool = hostcopy.launch_host_copy(stream, dst, pinned, CHUNK, dst_offset=0, parallel=True)
    except hostcopy.CudaUnavailable as error:
        return f"no driver: {error}"
    except hostcopy.CudaError as error:
        return f"{error.function} failed: {error.name} ({error.code})"
    created, freed = hostcopy.owned_record_counts()
    return f"launched (capturing: {capturing}); {created - freed} records in flight"


def download(stager: hostcopy.Stager, tensor: object, out: NDArray[np.uint8], stream: object) -> str:
    """Copies a CUDA array (a torch tensor, a cupy array) into ``out``: the
    first half at once, the second while this thread does other work."""
    half = out.nbytes // 2
    try:
        stager.copy_to_host(out, tensor, half, stream=stream)
        pending = stager.copy_to_host(
            out, tensor, out.nbytes - half, stream=stream, blocking=False, dst_offset=np.int64(half), src_offset=half
        )
        with pending:  # blocking=False is typed Transfer
            busy = not pending.done()
    except hostcopy.WrongDevice as error:
        return f"the array is on device {error.found}, the stager on {error.expected}"
    except hostcopy.NotDeviceMemory as error:
        return f"{error.side} at {error.addr:#x} is not GPU memory"
    return f"{out.nbytes} bytes; the second half was {'still' if busy else 'already'} under way"


async def download_awaited(stager: hostcopy.Stager, tensor: object, out: NDArray[np.uint8]) -> None:
    """Copies a CUDA array into ``out`` while the event loop runs other tasks."""
    pending: hostcopy.Transfer = stager.copy_to_host(out, tensor, blocking=False)
    await pending  # the transfer's error, if any, raised here


def upload(tensor: object, data: bytes) -> None:
    """The one-call copies, blocking (typed ``None``): ``data`` to the GPU
    and back; then the same started with ``blocking=False`` (typed
    ``Transfer``), and one whose ``blocking`` is known only at run time."""
    hostcopy.copy_to_device(tensor, data)
    back = bytearray(len(data))
    hostcopy.copy_to_host(back, tensor)
    assert back == data
    started: hostcopy.Transfer = hostcopy.copy_to_device(tensor, data, blocking=False)
    started.wait()
    wait = os.environ.get("HOSTCOPY_EXAMPLE_BLOCKING") == "1"
    maybe: Optional[hostcopy.Transfer] = hostcopy.copy_to_host(back, tensor, blocking=wait)
    if maybe is not None:
        maybe.wait()


def offload(cache: object, pool: NDArray[np.uint8], evicted: NDArray[np.int64], block: int) -> str:
    """A KV-cache offload: the evicted blocks of ``cache`` to the first slots
    of ``pool``, in one call, then back into the same device blocks."""
    blocks = np.stack([evicted * block, np.arange(evicted.size) * block, np.full(evicted.size, block)], axis=1)
    try:
        hostcopy.copy_blocks_to_host(pool, cache, blocks)
        restored = hostcopy.copy_blocks_to_device(cache, pool, [(int(d), int(h), int(n)) for d, h, n in blocks], blocking=False)
        restored.wait()
    except hostcopy.BlockOutOfBounds as error:
        return f"block {error.index} is outside the {error.side} memory"
    except hostcopy.BlocksOverlap as error:
        return f"blocks {error.first} and {error.second} overlap"
    except hostcopy.IntegerOutOfRange as error:  # a negative id, say: named blocks[i].device_offset
        return f"{error.name} = {error.value} is not a byte offset (0..={error.max})"
    return f"{evicted.size} blocks offloaded and restored"


def model_file(directory: str) -> str:
    """A safetensors file written by hand, its header read back and checked;
    the same file cut short, refused. ``load_file`` needs torch and a GPU:
    here it is only typed."""
    path = os.path.join(directory, "model.safetensors")
    text = json.dumps({"__metadata__": {"format": "pt"}, "w": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 8]}})
    with open(path, "wb") as file:
        file.write(struct.pack("<Q", len(text)) + text.encode() + bytes(8))
    header: hostcopy.safetensors.Header = hostcopy.safetensors.read_header(path)
    first: hostcopy.safetensors.TensorInfo = header.tensors[0]
    views: list[hostcopy.safetensors.TensorView] = hostcopy.safetensors.plan_views(header)
    load: Callable[..., dict[str, Any]] = hostcopy.safetensors.load_file
    assert callable(load) and views[0].placement == "view" and header.metadata == {"format": "pt"}
    with open(path, "r+b") as file:
        file.truncate(os.path.getsize(path) - 1)
    try:
        hostcopy.safetensors.read_header(path)
    except hostcopy.SafetensorsError as error:
        reason: str = error.reason
        return f"{first.name}: {first.dtype.name} {list(first.shape)}, {first.nbytes} bytes; cut short: {reason}"
    raise AssertionError("a truncated file was read")


def main() -> int:
    started: int = hostcopy.set_parallel_workers(2)
    workers, active = hostcopy.parallel_workers()
    dst = np.zeros(SLOTS * CHUNK, np.uint8)
    staging = [bytearray([k + 1]) * CHUNK for k in range(SLOTS)]

    ring = stage_into(dst, staging)
    check_ring(ring, dst.ctypes.data)
    assert all(dst[k * CHUNK] == k + 1 for k in range(SLOTS))

    record: bytes = hostcopy.pack_host_copy_args(dst[:CHUNK], memoryview(staging[0]))
    assert len(record) == hostcopy.HOST_COPY_ARGS_SIZE and hostcopy.ABI_VERSION == 1
    allocation = HostAllocation(CHUNK)
    from_allocation = hostcopy.unpack_host_copy_args(hostcopy.pack_host_copy_args(dst, allocation))
    assert (from_allocation.src, from_allocation.nbytes) == (allocation.handle, CHUNK)
    address = ctypes.cast(hostcopy.HOST_COPY_PARALLEL_FN, ctypes.c_void_p).value
    assert address is not None

    for line in refusals(dst):
        print(line)
    with mmap.mmap(-1, CHUNK) as pinned:
        print(launch(dst, pinned, stream=0))
    try:
        with hostcopy.Stager(0, chunk=16 << 20, buffers=4, prefault=False) as stager:
            prefaults: bool = stager.options["prefault"]
            print(f"stager on device {stager.device}: {stager.options['chunk']} byte chunks, prefault {prefaults}")
    except hostcopy.CudaUnavailable as error:
        print(f"no stager: {error}")
    try:
        print(offload(np.zeros(1 << 20, np.uint8), np.zeros(1 << 20, np.uint8), np.array([3, 1]), 4096))
    except hostcopy.NotDeviceMemory as error:  # a numpy array is host memory, not a GPU array
        print(f"refused: {error.side} at {error.addr:#x} is not GPU memory")
    with tempfile.TemporaryDirectory() as directory:
        print(model_file(directory))
    pool: np.ndarray = hostcopy.empty((4, 1024), np.float16)
    progress: hostcopy.Registration = hostcopy.registration(pool)
    print(f"pool of {pool.nbytes} bytes, all zero: {not pool.any()}, registered: {progress.complete}")
    when: hostcopy.Register = "background"
    try:
        locked = hostcopy.empty(1 << 20, register=when, device=0)
        done = hostcopy.wait_registered(locked)
        refused: Optional[str] = done.refused
        print(f"registered {done.registered} of {done.nbytes} bytes (refused: {refused})")
    except hostcopy.CudaUnavailable as error:
        print(f"not registered: {error}")
    version: str = hostcopy.__version__
    print(f"hostcopy {version}")
    print(f"{started} workers ({workers} started, {active} active), {hostcopy.rejected()} records rejected")
    return 0


if __name__ == "__main__":
    sys.exit(main())
