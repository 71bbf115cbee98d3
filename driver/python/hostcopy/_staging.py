"""Staged transfers between GPU memory and the host memory you already
have, at the link's speed, in one call (the Rust layer's ``Stager``).

The device side may be a cuda.core ``Buffer``, anything with ``__dlpack__``
(torch and cupy arrays, jax arrays) or ``__cuda_array_interface__``
(numba device arrays, cupy, torch). The host side may be anything with the
buffer protocol (numpy arrays, ``bytearray``, ``memoryview``, ``mmap``;
``bytes`` as a source) or a CPU tensor through DLPack. Both must be
C-contiguous; a destination must be writable, and a DLPack destination
proven so: its capsule must be versioned (DLPack >= 1.0: torch, numpy >=
2.1 when asked with ``max_version``) and not flagged read-only or a copy;
an unversioned capsule (jax, producers before DLPack 1.0) cannot say, so it
is refused as a destination (``ReadOnlyBuffer``; pass a buffer-protocol
view instead). Host memory given as the device side (a CPU tensor, a numpy
array, any buffer) raises ``NotDeviceMemory``.

``nbytes``, ``dst_offset``, ``src_offset`` and every field of a block are
integers in ``operator.index``'s sense (``int``, numpy integer scalars;
not ``bool``, ``float`` or ``str``, which raise ``ArgumentTypeError``, a
``TypeError``); one that is negative or wider than the platform's word
raises ``IntegerOutOfRange`` (a ``ValueError`` and an ``OverflowError``)
naming it (``nbytes``, ``blocks[3].host_offset``). Every copy is one native
call (``Stager``, ``Transfer``, the module's copies and ``default_stager``
are the native classes and functions of src/staging.rs and
src/default_stager.rs, named here; their types are in ``_native.pyi``),
which recognises all of its arguments: the sides and the stream
(src/sides.rs), the integers (src/integers.rs) and the blocks
(src/blocks.rs).

What each bad argument of a copy raises; a call refused so copies nothing
(every class is in ``hostcopy`` and a ``hostcopy.Error``; all but
``ArgumentTypeError`` and ``MemoryNotHeld`` (``TypeError`` subclasses),
``StreamCapturing`` and ``ArgumentRuntimeError`` (``RuntimeError``
subclasses) and ``ArgumentBufferError`` (a ``BufferError``) are
``ValueError`` subclasses):

- ``ArgumentTypeError`` (``argument``, ``value``): ``nbytes``, an offset, a
  block field or a stream that is no integer (``float``, ``str``,
  ``bool``); ``blocks`` that are no triples (``"123"``, a dict, a scalar,
  an array not of shape ``(n, 3)``) or an array of a non-integer dtype; a
  side of no known kind; GPU memory as the host side; a jax array as a
  destination; a malformed ``__cuda_array_interface__``,
  ``__dlpack_device__`` or ``__cuda_stream__``; a ``blocking`` that is no
  ``bool`` (``None`` included).
- ``ArgumentError`` (``argument``, ``value``): a closed cuda.core
  ``Buffer``; a ``ValueError`` an argument's own code raised while it was
  read (its ``__cause__``).
- ``ArgumentRuntimeError`` (``argument``, ``value``): a torch CUDA tensor
  that requires grad, or has the conjugate or negative bit (pass
  ``t.detach()``, ``t.resolve_conj()``, ``t.resolve_neg()``); a
  ``RuntimeError`` an argument's own code raised while it was read (a
  ``__dlpack__`` that will not export, a stream's ``cuda_stream``), its
  ``__cause__``. ``ArgumentBufferError``: the same for a ``BufferError``.
- ``MemoryNotHeld``: a torch CPU tensor, or a numpy array or memoryview
  over one or over a DLPack export, as the host side of a
  ``blocking=False`` copy (torch can free its memory under the copy).
- ``IntegerOutOfRange``: ``nbytes``, an offset, a block field or a stream
  handle that is negative or wider than a word (``>= 2**64``), with its
  ``name``.
- ``OutOfBounds``: a range past the end of either side;
  ``BlockOutOfBounds``: a block past either; ``BlocksOverlap``: two blocks
  writing the same bytes.
- ``NotDeviceMemory``: host memory (a CPU tensor, a numpy array, a
  ``bytearray``) as the device side.
- ``NotContiguous``: a strided side. ``ReadOnlyBuffer``: a destination that
  is read-only or not proven writable (above).
- ``WrongDevice``: memory or a stream of another device than the stager's;
  ``StreamCapturing``: a ``stream`` capturing a graph; ``StagerClosed``: a
  closed stager.
"""

from __future__ import annotations

from typing import Optional, TypedDict

from . import _native

__all__ = [
    "Stager",
    "StagerOptions",
    "Transfer",
    "copy_blocks_to_device",
    "copy_blocks_to_host",
    "copy_to_device",
    "copy_to_host",
    "default_stager",
]

#: Pinned staging buffers, one stream each, and copy workers of its own, on
#: one device (see its docstring).
Stager = _native.Stager

#: A copy under way, from a ``blocking=False`` call: ``wait()`` blocks (the
#: GIL released), ``done()`` polls, ``await transfer`` completes through the
#: running asyncio or uvloop event loop (``hostcopy._awaiting``): the
#: stager's finish thread, native and GIL-free, waits and wakes the loop
#: through a pipe. ``await`` returns ``None`` or raises the error ``wait()``
#: raises; awaiting an ended transfer (again, or after ``wait()``) returns
#: at once; several tasks may await one transfer. Cancelling the awaiting
#: task leaves the transfer in the finish thread's hands, its memory kept
#: until the copy is done.
Transfer = _native.Transfer

#: The device's shared ``Stager``, made on first use: what the copies below
#: use for memory of that device.
default_stager = _native.default_stager
#: The default stager of the device holding device memory (``memory``,
#: ``side``), as the copies below find it: what ``hostcopy.offload`` uses.
default_stager_of = _native.default_stager_of

copy_to_host = _native.copy_to_host
copy_to_device = _native.copy_to_device
copy_blocks_to_host = _native.copy_blocks_to_host
copy_blocks_to_device = _native.copy_blocks_to_device


class StagerOptions(TypedDict):
    """``Stager.options``: what the stager works with."""

    #: Bytes per chunk (each staging buffer's size).
    chunk: int
    #: Pinned staging buffers, each on its own stream.
    buffers: int
    #: Copy threads of the stager's own pool as started (fewer than asked
    #: where the system refused a thread).
    workers: int
    #: Whether host-to-device chunks are written with streaming stores;
    #: None: chosen per upload (streaming for a blocking one of up to
    #: 256 MiB, cached otherwise).
    h2d_streaming: Optional[bool]
    #: Transfers below this many bytes take the driver's own path.
    driver_path_below: int
    #: Whether a never-touched destination's pages are made present ahead
    #: of its copies (see ``Stager``).
    prefault: bool
