"""The offloader's schedule, apart from torch: groups of bytes kept in
host memory, a ring of device buffers they are brought into, and the
order of the copies and the streams that use them.

Nothing here knows what a tensor is. A ``Device`` (``_torch.TorchDevice``
for torch, a stand-in over the simulated driver in the tests) makes the
device buffers, streams and events; the copies go through hostcopy's
``copy_to_device`` and ``copy_to_host``.

The ordering, for a group ``g`` brought into ring slot ``s``:

- the upload is queued on slot ``s``'s own stream, which first waits for
  ``s.free``: an event recorded on the compute stream right after the
  last forward that read slot ``s``. So a slot is overwritten only once
  the forward that used it has finished on the GPU, and the upload waits
  for nothing else (not for other uploads, not for later compute).
- hostcopy orders the slot stream after the upload (``copy_to_device``
  with ``stream=``: work queued there afterwards waits for the copy), and
  ``s.ready`` is recorded there; the compute stream waits for ``s.ready``
  just before ``g``'s forward.
- each slot has a stream of its own, so consecutive uploads into
  different slots wait for each other only inside hostcopy's queue, which
  takes them back to back.

The CPU runs ahead of the GPU by at most the ring: before a slot is given
a new upload, the ``Transfer`` of its previous one is waited for (it
finished long before, as a forward read it). Each step is the upload cycle
of ``_upload``, which the KV cache shares.
"""

from __future__ import annotations

import itertools
from collections import deque
from typing import Any, Callable, Optional, Protocol, Sequence

from .. import _staging
from .._errors import OffloadArgumentError, OffloadArgumentTypeError, OffloadError
from ._upload import Upload


def check_count(argument: str, value: Any, minimum: int) -> int:
    """``value`` as an integer of at least ``minimum``: an ``int`` (or a
    numpy integer), not a ``bool`` or a ``float``
    (``OffloadArgumentTypeError``), nor smaller (``OffloadArgumentError``)."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise OffloadArgumentTypeError(
            f"{argument} must be an integer >= {minimum}, not {value!r} ({type(value).__name__})",
            argument=argument,
            value=value,
        )
    count = int(value.__index__())
    if count < minimum:
        raise OffloadArgumentError(f"{argument} must be an integer >= {minimum}, not {value!r}", argument=argument, value=value)
    return count


class Device(Protocol):
    """What the schedule needs from an array library's device."""

    @property
    def ordinal(self) -> int:
        """The device's ordinal: the offloader registers its host regions
        in this device's primary context (``register=``)."""

    def buffer(self, nbytes: int) -> Any:
        """Device memory of ``nbytes`` bytes, kept until dropped."""

    def memory(self, buffer: Any) -> Any:
        """``buffer`` as ``copy_to_device`` takes it as ``dst`` without
        ordering it after any stream of the library's own."""

    def stream(self) -> Any:
        """A new stream (``copy_to_device`` takes it as ``stream=``)."""

    def current_stream(self) -> Any:
        """The stream the forwards run on now."""

    def event(self) -> Any:
        """A new event."""

    def record(self, event: Any, stream: Any) -> None:
        """Records ``event`` on ``stream``."""

    def wait(self, stream: Any, event: Any) -> None:
        """Makes ``stream`` wait for the last record of ``event``."""


class Slot:
    """One device buffer of the ring, its stream and its two events."""

    def __init__(self, index: int, buffer: Any, stream: Any, ready: Any, free: Any) -> None:
        self.index = index
        self.buffer = buffer
        self.stream = stream
        #: Recorded on ``stream`` after the latest upload into the slot.
        self.ready = ready
        #: Recorded on the compute stream after the latest forward that read it.
        self.free = free
        #: The group whose bytes the slot holds (or will, once ``upload`` ends).
        self.group: Optional[int] = None
        #: The latest upload into the slot (its transfer until waited for).
        self.upload: Optional[Upload] = None
        #: A forward reads the slot now.
        self.in_use = False
        #: Queued ahead of its forward and not yet entered.
        self.reserved = False
        #: When the slot was last entered (for least-recently-used choice).
        self.last_used = -1


class Ring:
    """Brings groups of host bytes into a ring of device buffers ahead of
    the forwards that read them.

    ``hosts[g]`` is group ``g``'s host memory (a C-contiguous buffer, in
    practice a ``hostcopy.empty`` array, registered with the driver or
    not: hostcopy's copies move what is registered directly and stage the
    rest).
    ``prefetch`` uploads are kept queued ahead of the forward that runs;
    the ring has ``prefetch + 1`` slots (the one being read, and one per
    upload in flight), or ``slots`` if given (at least that many). The
    groups are predicted in the order they ran last time (at first, the
    order given); with ``wrap`` the first groups of the next forward are
    brought in while the last ones run.

    ``enter(g)`` before group ``g``'s forward returns the slot holding its
    bytes, the compute stream ordered after their arrival; ``leave(g)``
    after it. ``drain()`` waits for every upload in flight; ``close()``
    drains and lets go of the device buffers.
    """

    def __init__(
        self,
        device: Device,
        hosts: Sequence[Any],
        *,
        prefetch: int = 2,
        slots: Optional[int] = None,
        wrap: bool = True,
        stager: Optional[_staging.Stager] = None,
        on_upload: Optional[Callable[[int, Slot], None]] = None,
    ) -> None:
        prefetch = check_count("prefetch", prefetch, 0)
        count = prefetch + 1 if slots is None else check_count("slots", slots, prefetch + 1)
        if not hosts:
            raise OffloadArgumentError("no groups to offload", argument="groups", value=list(hosts))
        self.device = device
        self.hosts = list(hosts)
        self.sizes = [memoryview(host).nbytes for host in self.hosts]
        self.prefetch = prefetch
        self.wrap = wrap
        #: ``stager=``, or the device's shared stager once a copy looked it up.
        self.stager = stager
        self.on_upload = on_upload
        if slots is None:
            count = min(count, len(self.hosts))  # every group in place at once needs no more
        size = max(self.sizes)
        self.slots = [
            Slot(i, device.buffer(size), device.stream(), device.event(), device.event()) for i in range(count)
        ]
        #: Learned successors: which group ran after which, last time.
        self._next: dict[int, int] = {}
        self._previous: Optional[int] = None
        self._queued: deque[int] = deque()  # groups uploaded ahead, in order
        self._active: dict[int, Slot] = {}
        self._clock = itertools.count()
        self._closed = False
        #: Uploads queued, and how many of them were found in place by ``enter``.
        self.uploads = 0
        self.misses = 0

    # -- the two calls around a forward ------------------------------------

    def enter(self, group: int) -> Slot:
        """Before ``group``'s forward: the slot holding its bytes, with the
        compute stream made to wait for their arrival; the next groups'
        uploads queued."""
        self._check_open()
        if group in self._active:
            raise OffloadError(f"group {group} entered twice (its forward called from within itself)")
        slot = self._holding(group)
        if slot is None:
            # Not predicted: what was queued ahead stays valid where it
            # landed, but the prediction starts again from this group.
            self.misses += 1
            self._queued.clear()
            for other in self.slots:
                other.reserved = False
            slot = self._free_slot()
            if slot is None:
                raise OffloadError(
                    f"every ring slot is read by a running forward ({len(self.slots)} slots): "
                    "give the offloader more slots than groups that run nested in one another"
                )
            self._upload(group, slot)
        else:
            if group in self._queued:
                self._queued.remove(group)
        slot.reserved = False
        slot.in_use = True
        slot.last_used = next(self._clock)
        self._active[group] = slot
        try:
            if self._previous is not None and self._previous != group:
                self._next[self._previous] = group
            self._previous = group
            self._top_up(group)
            # A slot holds a group only once an upload into it was made.
            assert slot.upload is not None
            slot.upload.read_on(self.device, self.device.current_stream())
        except BaseException:
            # No forward runs, and no leave() comes: the group is not
            # entered, or its next forward would be refused as nested.
            self._active.pop(group, None)
            slot.in_use = False
            raise
        return slot

    def leave(self, group: int, failed: bool = False) -> None:
        """After ``group``'s forward (also when it raised: ``failed``, which
        waits for every upload in flight and forgets the prediction)."""
        slot = self._active.pop(group, None)
        if slot is not None:
            self.device.record(slot.free, self.device.current_stream())
            slot.in_use = False
        if failed:
            self.drain()

    # -- keeping the link busy --------------------------------------------

    def _successor(self, group: int) -> Optional[int]:
        following = self._next.get(group)
        if following is not None:
            return following
        following = group + 1
        if following < len(self.hosts):
            return following
        return 0 if self.wrap else None

    def _top_up(self, group: int) -> None:
        last = self._queued[-1] if self._queued else group
        while len(self._queued) < self.prefetch:
            following = self._successor(last)
            if following is None or following in self._queued or following in self._active:
                return
            if following == group:
                return  # went round: every group is in place or queued
            slot = self._holding(following)
            if slot is None:
                slot = self._free_slot()
                if slot is None:
                    return
                self._upload(following, slot)
            slot.reserved = True
            self._queued.append(following)
            last = following

    def _holding(self, group: int) -> Optional[Slot]:
        for slot in self.slots:
            if slot.group == group and not slot.in_use:
                return slot
        return None

    def _free_slot(self) -> Optional[Slot]:
        """The least recently used slot that no forward reads and no
        prediction holds."""
        candidates = [slot for slot in self.slots if not slot.in_use and not slot.reserved]
        if not candidates:
            return None
        return min(candidates, key=lambda slot: slot.last_used)

    def _upload(self, group: int, slot: Slot) -> None:
        self._settle(slot)
        slot.group = None
        host, nbytes = self.hosts[group], self.sizes[group]
        memory = self.device.memory(slot.buffer)
        copy = self._stager(memory).copy_to_device
        # After the forward that last read this slot has finished (an event
        # never recorded is waited for at once).
        slot.upload = Upload(
            self.device,
            slot.stream,
            slot.ready,
            lambda stream: copy(memory, host, nbytes, stream=stream, blocking=False),
            after=slot.free,
        )
        slot.group = group
        self.uploads += 1
        if self.on_upload is not None:
            self.on_upload(group, slot)

    def _stager(self, memory: Any) -> _staging.Stager:
        """What makes the copies: ``stager=``, else the shared stager of the
        device holding ``memory``, looked up once (the module's functions
        look it up again on every call)."""
        if self.stager is None:
            self.stager = _staging.default_stager_of(memory, "dst")
        return self.stager

    def _settle(self, slot: Slot) -> None:
        if slot.upload is not None:
            try:
                slot.upload.settle()
            except BaseException:
                slot.group = None
                raise

    # -- writing back, draining, closing ----------------------------------

    def write_back(self, group: int, ranges: Sequence[tuple[int, int]]) -> None:
        """Copies byte ranges ``(offset, nbytes)`` of ``group``'s slot back
        into its host memory, after the work queued on the compute stream
        (blocking: the bytes are in when this returns)."""
        slot = self._active.get(group)
        if slot is None:
            raise OffloadError(f"group {group} is not in a forward")
        memory = self.device.memory(slot.buffer)
        copy = self._stager(memory).copy_to_host
        stream = self.device.current_stream()
        for offset, nbytes in ranges:
            if nbytes:
                copy(
                    self.hosts[group],
                    memory,
                    nbytes,
                    stream=stream,
                    dst_offset=offset,
                    src_offset=offset,
                )

    def in_flight(self) -> int:
        """Uploads not yet waited for."""
        return sum(1 for slot in self.slots if slot.upload is not None and slot.upload.pending())

    def drain(self) -> None:
        """Waits for every upload in flight (all of them, even when one
        fails: the first error is raised after) and forgets the prediction;
        the bytes that arrived stay where they are."""
        error: Optional[BaseException] = None
        for slot in self.slots:
            try:
                self._settle(slot)
            except BaseException as failure:  # every slot is settled first
                error = error or failure
            slot.reserved = False
        self._queued.clear()
        if error is not None:
            raise error

    def close(self) -> None:
        """Drains, then lets go of the device buffers (idempotent)."""
        if self._closed:
            return
        try:
            self.drain()
        finally:
            self._closed = True
            self._active.clear()
            self.slots = []

    def _check_open(self) -> None:
        if self._closed:
            raise OffloadError("this offloader was removed")
