"""The upload cycle both offloads share: the weights' ring (``_ring``) and
the KV cache (``transformers``).

An upload brings host bytes into device memory without holding up the
stream that computes:

1. the side stream the upload runs on first waits for ``after`` where
   something must end before the bytes land (the ring: the forward that
   last read the slot; the KV cache allocates its buffer on the side
   stream, so nothing);
2. the hostcopy copy (``blocking=False``) is queued on that side stream;
3. ``ready`` is recorded there after it;
4. before the bytes are read, the reading stream waits for ``ready`` and,
   for memory torch's allocator lent (``lent``), records its use there
   (``record_stream``), so that the allocator keeps the memory until the
   reading is done even once the caller lets go of it;
5. the ``Transfer`` is waited for (``settle``) before its memory is
   written again or let go of: it finished long before, as a stream read
   the bytes, and waiting returns what hostcopy holds for it.

Nothing here imports torch: ``streams`` is what records and waits for
events (``_ring.Device``, ``_torch.CudaStreams``).
"""

from __future__ import annotations

from typing import Any, Callable, Protocol


class Streams(Protocol):
    """Events on streams, as the upload cycle uses them."""

    def record(self, event: Any, stream: Any) -> None:
        """Records ``event`` on ``stream``."""

    def wait(self, stream: Any, event: Any) -> None:
        """Makes ``stream`` wait for the last record of ``event``."""


class Upload:
    """One upload, queued on ``stream`` by ``copy(stream)`` (a hostcopy
    transfer, ``blocking=False``) after ``after`` if given, ``ready``
    recorded after it; ``lent``: device memory torch's allocator lent,
    kept for each stream that reads it."""

    __slots__ = ("transfer", "ready", "lent")

    def __init__(
        self,
        streams: Streams,
        stream: Any,
        ready: Any,
        copy: Callable[[Any], Any],
        *,
        after: Any = None,
        lent: Any = None,
    ) -> None:
        if after is not None:
            streams.wait(stream, after)
        #: hostcopy's ``Transfer``, until waited for.
        self.transfer: Any = copy(stream)
        streams.record(ready, stream)
        self.ready = ready
        self.lent = lent

    def read_on(self, streams: Streams, stream: Any) -> None:
        """Orders ``stream`` after the upload: queued work reading the bytes
        from now on sees them."""
        streams.wait(stream, self.ready)
        if self.lent is not None:
            self.lent.record_stream(stream)

    def pending(self) -> bool:
        """Whether the transfer is still to be waited for."""
        return self.transfer is not None

    def done(self) -> bool:
        """Whether the transfer has finished (waited for or not)."""
        return self.transfer is None or bool(self.transfer.done())

    def settle(self) -> None:
        """Waits for the transfer (once; raises what it raised)."""
        transfer, self.transfer = self.transfer, None
        if transfer is not None:
            transfer.wait()
