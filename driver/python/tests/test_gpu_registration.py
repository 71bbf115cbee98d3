"""GPU tests of ``hostcopy.empty(register=...)`` on a real driver: memory
registered now is complete when the call returns and torch sees it as
pinned (and memory never registered as not); torch's own non-blocking
copies from and into it are byte-exact; hostcopy's copies both ways are
byte-exact from registered memory, from memory still registering in the
background, and from memory never registered.

Skipped, with the reason, where torch or a GPU is missing;
HOSTCOPY_REQUIRE_GPU=1 turns that skip into a failure (the GPU bundle sets it).
"""

import os

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
SIZE = 256 * MiB
#: Four ranges and a ragged tail: registering it in the background takes
#: long enough (0.1 to 0.2 s a GiB) for a copy to start before it ends.
LARGE = 1024 * MiB + 4321


@pytest.fixture(autouse=True)
def _give_back_torchs_cache():
    """The GPU memory these tests took goes back after each: the README
    blocks that run after them in other processes need it."""
    yield
    torch.cuda.empty_cache()


def pattern(n: int, seed: int) -> "torch.Tensor":
    """`n` random bytes on the GPU (nothing larger made on the way)."""
    generator = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randint(0, 256, (n,), dtype=torch.uint8, device="cuda", generator=generator)


def complete(array) -> "hostcopy.Registration":
    told = hostcopy.registration(array)
    assert told.complete and told.finished, f"not registered: {told} (the locked-memory limit, ulimit -l?)"
    return told


def round_trip_with_hostcopy(host: "np.ndarray", seed: int) -> None:
    """hostcopy's copies into `host` from the GPU and from `host` back to
    the GPU, each checked byte for byte."""
    expected = pattern(host.nbytes, seed)
    host[:] = 0
    hostcopy.copy_to_host(host, expected)
    # Read back through a plain copy: torch's own copy of memory registered
    # in the background may span two registrations, which the driver
    # refuses.
    assert torch.equal(torch.from_numpy(np.array(host)).to("cuda"), expected), "device to host differs"
    target = torch.zeros_like(expected)
    hostcopy.copy_to_device(target, host)
    assert torch.equal(target, expected), "host to device differs"


def test_register_now_is_complete_when_empty_returns():
    array = hostcopy.empty(SIZE, register="now")
    told = complete(array)
    assert told == hostcopy.Registration(SIZE, SIZE, None, True)
    assert hostcopy.wait_registered(array) == told


def test_torch_sees_registered_memory_as_pinned_and_never_registered_as_not():
    registered = hostcopy.empty(SIZE, register="now")
    complete(registered)
    assert torch.from_numpy(registered).is_pinned()
    assert torch.from_numpy(registered[MiB:]).is_pinned(), "a view inside it too"
    never = hostcopy.empty(SIZE)
    assert not torch.from_numpy(never).is_pinned()


def test_torch_non_blocking_copies_from_and_into_registered_memory_are_byte_exact():
    # More than one background range: "now" registers it in one piece, as
    # a torch copy of all of it needs.
    size = SIZE + 4321
    source = hostcopy.empty(size, register="now")
    into = hostcopy.empty(size, register="now")
    complete(source)
    complete(into)
    expected = pattern(size, 3)
    hostcopy.copy_to_host(source, expected)
    on_device = torch.from_numpy(source).to("cuda", non_blocking=True)
    torch.cuda.synchronize()
    assert torch.equal(on_device, expected), "to('cuda', non_blocking=True) differs"
    back = torch.from_numpy(into)
    back.copy_(on_device, non_blocking=True)
    torch.cuda.synchronize()
    assert np.array_equal(into, source), "copy_(non_blocking=True) into registered memory differs"


def test_hostcopy_copies_of_registered_memory_are_byte_exact():
    array = hostcopy.empty(SIZE + 4321, register="now")
    complete(array)
    round_trip_with_hostcopy(array, 4)
    round_trip_with_hostcopy(array[4321:], 5)


def test_hostcopy_copies_of_memory_registering_in_the_background_are_byte_exact():
    array = hostcopy.empty(LARGE, register="background")
    # Started at once: its first chunks are staged while later ranges are
    # registered; whichever way each went, the bytes are the same.
    round_trip_with_hostcopy(array, 6)
    told = hostcopy.wait_registered(array)
    assert told == hostcopy.Registration(LARGE, LARGE, None, True), told
    round_trip_with_hostcopy(array, 7)


def test_hostcopy_copies_of_never_registered_memory_are_byte_exact():
    array = hostcopy.empty(SIZE + 4321)
    assert hostcopy.registration(array) == hostcopy.Registration(0, SIZE + 4321, None, True)
    round_trip_with_hostcopy(array, 8)


def test_registered_memory_freed_and_made_again_registers_again():
    for seed in range(3):
        array = hostcopy.empty(SIZE, register="now")
        complete(array)
        round_trip_with_hostcopy(array, 9 + seed)
        del array  # unregistered: the next one's range may be the same addresses
