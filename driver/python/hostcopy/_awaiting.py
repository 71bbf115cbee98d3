"""``await transfer``: a ``Transfer``'s completion through the running
asyncio event loop (or uvloop), without polling and without Python code on
any other thread.

``Transfer.__await__`` (native) calls :func:`wait`. The stager's finish
thread (Rust, ``hostcopy_driver::awaiting``) finishes the transfer exactly
as ``wait()`` does, without the GIL, then makes the loop's one wakeup pipe
readable; the loop's reader callback resolves the futures of every
transfer finished since. One pipe per loop, not per transfer: one reader
serves any number of concurrent awaits, and a batch of completions costs
one wakeup. The reader is added while the loop has awaits outstanding and
removed when it has none.

Rules:

- Awaiting a transfer that has ended (waited, awaited before, or dropped
  into the ``Ended`` state) completes at once with the same outcome as
  ``wait()``: ``None`` or the same exception class.
- Two tasks may await one transfer; both complete when it does. Awaiting
  and ``wait()`` on another thread may mix; each sees the bytes arrived.
- Cancelling the awaiting task cancels only the await: the transfer stays
  registered with the finish thread, which finishes it; its device and
  host memory are kept until the copies are done. Dropping the
  ``Transfer`` after a cancelled await does not wait for the copy (a
  ``Transfer`` never awaited still waits when dropped): the finish thread
  lets go of the host memory once the copies are done.
"""

import asyncio
import itertools
from typing import TYPE_CHECKING, Optional

from . import _native

if TYPE_CHECKING:
    from ._native import Transfer

__all__ = ["wait"]


class _LoopWaiters:
    """One event loop's outstanding awaits, keyed by token, and its wakeup."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.wakeup = _native.Wakeup()
        self.pending: dict[int, tuple["Transfer", "asyncio.Future[None]"]] = {}
        self.reading = False

    def register(self, transfer: "Transfer") -> "Optional[asyncio.Future[None]]":
        """A future resolved once ``transfer`` has ended; ``None`` when it has
        ended already."""
        token = next(_tokens)
        if transfer._notify_when_finished(self.wakeup, token):
            return None
        future: "asyncio.Future[None]" = self.loop.create_future()
        # The entry holds the Transfer, so that a caller who drops it while
        # awaiting does not drop it here.
        self.pending[token] = (transfer, future)
        future.add_done_callback(lambda done: self._forget(token, done))
        if not self.reading:
            self.loop.add_reader(self.wakeup.fileno(), self._finished)
            self.reading = True
        return future

    def _forget(self, token: int, future: "asyncio.Future[None]") -> None:
        # A cancelled await: the finish thread still finishes the transfer
        # (and lets go of its host memory if nobody holds the Transfer).
        if future.cancelled():
            self.pending.pop(token, None)
            self._release_if_idle()

    def _finished(self) -> None:
        """Resolves the future of every transfer in the wakeup's list. The
        list and the pipe's byte are taken together, so a token taken here
        never comes again: every one is resolved whatever another raises (a
        ``KeyboardInterrupt`` while a ``wait()`` runs, a future that refuses
        its outcome), and the first such error is raised once they all
        are."""
        raised: Optional[BaseException] = None
        try:
            for token in self.wakeup.take():
                entry = self.pending.pop(token, None)
                if entry is None:
                    continue  # its await was cancelled
                error = _resolve(*entry)
                if raised is None:
                    raised = error
        finally:
            self._release_if_idle()
        if raised is not None:
            raise raised

    def _release_if_idle(self) -> None:
        """With no await outstanding: removes the reader and forgets the
        loop (a later await makes a fresh wakeup)."""
        if self.pending:
            return
        if self.reading:
            self.reading = False
            if not self.loop.is_closed():
                self.loop.remove_reader(self.wakeup.fileno())
        if _by_loop.get(self.loop) is self:
            del _by_loop[self.loop]


def _resolve(transfer: "Transfer", future: "asyncio.Future[None]") -> Optional[BaseException]:
    """Resolves ``future`` with how ``transfer`` ended (it has: ``wait()``
    returns or raises at once). What interrupts that (a
    ``KeyboardInterrupt`` or ``SystemExit`` during ``wait()``, an error of
    the future itself) is returned, not raised, and the outcome asked for
    once more; should that fail too, the future is cancelled: it is never
    left pending, as no wakeup would come for it again."""
    interrupted: Optional[BaseException] = None
    for _ in range(2):
        if future.done():
            return interrupted
        try:
            try:
                transfer.wait()  # ended: returns or raises at once
            except Exception as error:
                future.set_exception(error)
            else:
                future.set_result(None)
            return interrupted
        except BaseException as error:
            if interrupted is None:
                interrupted = error
    if not future.done():
        future.cancel()
    return interrupted


_tokens = itertools.count()
#: The loops with awaits outstanding (an entry goes when its last await
#: completes or is cancelled).
_by_loop: "dict[asyncio.AbstractEventLoop, _LoopWaiters]" = {}


async def wait(transfer: "Transfer") -> None:
    """Waits for ``transfer`` on the running event loop; what ``await
    transfer`` does. Returns ``None`` once the bytes have arrived, or raises
    the transfer's error (the class ``wait()`` raises)."""
    loop = asyncio.get_running_loop()
    waiters = _by_loop.get(loop)
    if waiters is None:
        # A loop closed with awaits still outstanding (tasks abandoned, not
        # cancelled) never reads its wakeup again: forget it here, and with
        # it the Transfers it held (the finish thread finishes them).
        for closed in [other for other in list(_by_loop) if other.is_closed()]:
            del _by_loop[closed]
        waiters = _by_loop[loop] = _LoopWaiters(loop)
    try:
        future = waiters.register(transfer)
    finally:
        waiters._release_if_idle()  # ended at once, or refused: nothing outstanding
    if future is None:
        transfer.wait()  # ended: returns or raises at once
    else:
        await future
