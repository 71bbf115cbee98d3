"""One wakeup of an event loop resolves the futures of every transfer that
ended since the last one (``hostcopy._awaiting``): the list of tokens and the
pipe's byte are taken together, so none of those futures may be left
pending when resolving one of them raises, under asyncio and (where
installed) uvloop, against the simulated driver.
"""

import asyncio
import time

import pytest

import hostcopy
from conftest import pattern
from hostcopy import _awaiting

CHUNK = 256 << 10
TRANSFERS = 3


def _uvloop_loop() -> asyncio.AbstractEventLoop:
    uvloop = pytest.importorskip("uvloop", reason="uvloop is not installed (ci.sh installs it)")
    return uvloop.new_event_loop()


LOOPS = {"asyncio": asyncio.new_event_loop, "uvloop": _uvloop_loop}


class RaisingOnce:
    """Stands in for a transfer in its loop's table of awaits: its first
    ``wait()`` raises ``error`` (a ``KeyboardInterrupt`` arriving while the
    loop's reader resolves the futures; a ``StopIteration``, which a future
    refuses as its exception with a ``TypeError``), later ones are the
    transfer's."""

    def __init__(self, transfer: hostcopy.Transfer, error: type) -> None:
        self.transfer, self.error, self.raised = transfer, error, 0

    def wait(self) -> None:
        if not self.raised:
            self.raised += 1
            raise self.error()
        self.transfer.wait()


async def _await(transfer: hostcopy.Transfer) -> None:
    await transfer


def _ended_in_one_batch(sim, device: int, transfers: list) -> None:
    """Lets the held device run and, with the loop not running, waits until
    every transfer has ended: the finish thread has then told the loop's
    wakeup of all of them, read by one call of its reader."""
    sim.release(device)
    deadline = time.monotonic() + 30
    while not all(transfer.done() for transfer in transfers):
        assert time.monotonic() < deadline, "the transfers did not end"
        time.sleep(0.002)
    time.sleep(0.1)  # `done()` turns true just before the token is written


@pytest.mark.parametrize("error", [KeyboardInterrupt, StopIteration])
@pytest.mark.parametrize("kind", sorted(LOOPS))
def test_every_future_of_a_wakeup_resolves_when_resolving_one_raises(sim, numpy, device, kind, error):
    stager = hostcopy.Stager(device, chunk=CHUNK, buffers=3, workers=2, driver_path_below=0)
    data = [pattern(2 * CHUNK, 80 + i) for i in range(TRANSFERS)]
    sources = [sim.array(device, each) for each in data]
    dsts = [numpy.zeros(2 * CHUNK, numpy.uint8) for _ in range(TRANSFERS)]
    loop = LOOPS[kind]()
    reported = []
    loop.set_exception_handler(lambda _, context: reported.append(context.get("exception")))
    sim.hold(device)
    try:
        transfers = [stager.copy_to_host(dst, src, blocking=False) for dst, src in zip(dsts, sources)]
        tasks = [loop.create_task(_await(transfer)) for transfer in transfers]
        loop.run_until_complete(asyncio.sleep(0.05))  # every await registered
        waiters = _awaiting._by_loop[loop]
        assert len(waiters.pending) == TRANSFERS
        for token, (transfer, future) in list(waiters.pending.items()):
            waiters.pending[token] = (RaisingOnce(transfer, error), future)
        _ended_in_one_batch(sim, device, transfers)
        if error is KeyboardInterrupt:
            # Raised out of the loop's run, as a Ctrl-C is.
            with pytest.raises(KeyboardInterrupt):
                loop.run_until_complete(asyncio.gather(*tasks))
        loop.run_until_complete(asyncio.wait(tasks, timeout=5))
        pending = [task for task in tasks if not task.done()]
        assert pending == [], f"{len(pending)} of {TRANSFERS} awaits never completed"
        # Each took the transfer's own outcome, asked again.
        assert [task.exception() for task in tasks] == [None] * TRANSFERS
        assert [dst.tobytes() for dst in dsts] == data
        if error is StopIteration:
            # The future's refusal is reported through the loop's handler.
            assert [type(each) for each in reported] == [TypeError]
        assert loop not in _awaiting._by_loop
    finally:
        sim.release(device)
        for task in asyncio.all_tasks(loop):
            task.cancel()
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()
    stager.close()
    sim.assert_no_violations(device)
