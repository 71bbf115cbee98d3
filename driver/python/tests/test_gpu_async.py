"""GPU tests: ``blocking=False`` started on an event loop's thread keeps the
stream order a call made elsewhere keeps, and a synchronous call on the
stream after it (``tensor.cpu()``) neither deadlocks nor runs ahead, with
torch kernels on both sides of the call, on a stream of torch's and on the
legacy default stream.

Skipped, with the reason, where torch or a GPU is missing;
HOSTCOPY_REQUIRE_GPU=1 turns that skip into a failure (the GPU bundle sets it).
"""

import asyncio
import os
import time

import pytest

import hostcopy


def _skip_or_fail(reason: str):
    if os.environ.get("HOSTCOPY_REQUIRE_GPU") == "1":
        pytest.fail(f"HOSTCOPY_REQUIRE_GPU=1 but {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


try:
    import numpy as np
    import torch
except ImportError as missing:
    _skip_or_fail(f"no GPU stack to test with: {missing} (needs torch with CUDA, numpy)")

if not torch.cuda.is_available():
    _skip_or_fail("torch sees no CUDA device")

MiB = 1 << 20
SIZE = 256 * MiB + 4321  # a short last chunk too


def pattern(n: int, seed: int) -> "torch.Tensor":
    index = torch.arange(n, dtype=torch.int64, device="cuda")
    return ((index * 2654435761 + seed) >> 13).to(torch.uint8)


def busy(stream: "torch.cuda.Stream") -> None:
    """About 50 ms of a kernel on `stream`, so that what is queued after it
    is still pending while the transfer's chunks are queued and copied."""
    with torch.cuda.stream(stream):
        torch.cuda._sleep(50_000_000)


@pytest.fixture(params=["torch stream", "legacy default stream"])
def stream(request):
    if request.param == "torch stream":
        return torch.cuda.Stream()
    return torch.cuda.default_stream()


def test_a_download_started_on_the_loop_reads_what_was_queued_before_the_call_not_after(stream):
    expected = pattern(SIZE, 3)
    src = torch.empty(SIZE, dtype=torch.uint8, device="cuda")
    host = np.zeros(SIZE, np.uint8)
    torch.cuda.synchronize()
    explicit = None if stream == torch.cuda.default_stream() else stream

    async def main():
        busy(stream)
        with torch.cuda.stream(stream):
            src.copy_(expected)  # queued before the call: the copy reads it
        started = time.perf_counter()
        transfer = hostcopy.copy_to_host(host, src, stream=explicit, blocking=False)
        returned_in = time.perf_counter() - started
        with torch.cuda.stream(stream):
            src.fill_(0)  # queued after the call: runs after the copy
        await transfer
        return returned_in

    returned_in = asyncio.run(main())
    torch.cuda.synchronize()
    assert np.array_equal(host, expected.cpu().numpy()), "the download did not read what was queued before the call"
    assert int(src.count_nonzero()) == 0, "the fill queued after the call did not run"
    print(f"start call on the loop: {returned_in * 1e3:.3f} ms")


def test_an_upload_started_on_the_loop_is_seen_by_work_queued_after_the_call(stream):
    expected = pattern(SIZE, 5)
    host = expected.cpu().numpy().copy()  # numpy-owned: a torch-owned array is refused
    dst = torch.zeros(SIZE, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    explicit = None if stream == torch.cuda.default_stream() else stream

    async def main():
        busy(stream)
        transfer = hostcopy.copy_to_device(dst, host, stream=explicit, blocking=False)
        with torch.cuda.stream(stream):
            seen = dst.clone()  # queued after the call: reads the new bytes
        await transfer
        return seen

    seen = asyncio.run(main())
    torch.cuda.synchronize()
    assert torch.equal(seen, expected), "work queued after the call ran before the upload"
    assert torch.equal(dst, expected)


def test_a_blocking_copy_on_another_thread_after_uploads_started_on_the_loop_sees_them(stream):
    # Two uploads started on the loop, ordered before the stream, with a
    # synchronous torch copy on that stream between them (``data.cpu()``
    # on the legacy stream), then a blocking download of the second on
    # another thread, ordered after the stream: it reads the new bytes, and
    # nothing waits forever (run 73 hung here when a thread of the stager's
    # queued the chunks after the call).
    first, second = pattern(SIZE, 7), pattern(SIZE, 11)
    targets = [torch.zeros(SIZE, dtype=torch.uint8, device="cuda") for _ in range(2)]
    back = np.zeros(SIZE, np.uint8)
    torch.cuda.synchronize()
    explicit = None if stream == torch.cuda.default_stream() else stream
    stager = hostcopy.Stager(0)

    async def main():
        busy(stream)
        transfers = [
            stager.copy_to_device(target, data.cpu().numpy().copy(), stream=explicit, blocking=False)
            for target, data in zip(targets, (first, second))
        ]
        download = asyncio.get_running_loop().run_in_executor(
            None, lambda: stager.copy_to_host(back, targets[1], stream=explicit)
        )
        await asyncio.wait_for(asyncio.gather(*transfers, download), 60)

    try:
        asyncio.run(main())
    finally:
        stager.close()
    assert np.array_equal(back, second.cpu().numpy()), "the blocking download ran before the upload"
    assert torch.equal(targets[0], first)
