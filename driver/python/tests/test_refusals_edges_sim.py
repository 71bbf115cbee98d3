"""Refusals at the edges, on the simulated driver: what an argument's own
code raises as hostcopy reads it (a producer's ``__dlpack__`` refusing with
``RuntimeError`` or ``BufferError``, a stream's property raising), a
``__cuda_array_interface__`` missing a key and a ``blocking=`` that is no
``bool`` are all ``hostcopy.Error``; the default stager's registry is never
locked across Python code and replaces a closed stager; and
``hostcopy.Stager`` can be weak-referenced and subclassed."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import weakref

import pytest

import hostcopy
from conftest import pattern

SIZE = 256


class TorchLikeRefusingExport:
    """A CUDA array whose ``__dlpack__`` refuses as torch's does for a tensor
    that requires grad (``RuntimeError: Can't export tensors that require
    gradient, use tensor.detach()``), or that has the conjugate or negative
    bit: ``copy_to_host(dst, model.weight)`` with an ``nn.Parameter``."""

    def __init__(self, device: int, raised: BaseException) -> None:
        self.device = device
        self.raised = raised

    def __dlpack_device__(self):
        return (2, self.device)

    def __dlpack__(self, stream=None, max_version=None):
        raise self.raised


class CpuTensorRefusingExport:
    """A CPU tensor stand-in (no buffer protocol) whose ``__dlpack__`` raises
    torch's ``RuntimeError`` (requires grad): the host side of a copy."""

    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, stream=None, max_version=None):
        raise RuntimeError("Can't export tensors that require gradient, use tensor.detach()")


class Interface:
    def __init__(self, interface) -> None:
        self.__cuda_array_interface__ = interface


@pytest.fixture
def env(sim, numpy, device):
    source = sim.array(device, pattern(SIZE, 1))
    stager = hostcopy.Stager(device, chunk=64 << 10, buffers=2, workers=1, driver_path_below=0)
    yield sim, numpy, device, source, stager
    stager.close()


def _refused_as_hostcopy(call, dst) -> None:
    before = bytes(dst)
    with pytest.raises(hostcopy.Error):
        call()
    assert bytes(dst) == before


@pytest.mark.parametrize("through", ["module", "stager"])
@pytest.mark.parametrize("raised", [RuntimeError("Can't export tensors that require gradient"), BufferError("no")])
def test_a_device_side_whose_dlpack_export_refuses_is_a_hostcopy_error(env, through, raised):
    # The producer's own refusal (torch raises RuntimeError for a tensor
    # that requires grad or has the conjugate or negative bit; numpy and
    # others raise BufferError) becomes ArgumentRuntimeError or
    # ArgumentBufferError, keeping the built-in base and the original as
    # the cause.
    sim, numpy, device, source, stager = env
    dst = numpy.zeros(SIZE, numpy.uint8)
    src = TorchLikeRefusingExport(device, raised)
    copy = hostcopy.copy_to_host if through == "module" else stager.copy_to_host
    _refused_as_hostcopy(lambda: copy(dst, src), dst)
    with pytest.raises(type(raised)) as refused:
        copy(dst, src)
    assert refused.value.__cause__ is raised and refused.value.argument == "src"


def test_a_cpu_tensor_host_side_whose_dlpack_export_refuses_is_a_hostcopy_error(env):
    sim, numpy, device, source, stager = env
    dst = sim.array(device, bytes(SIZE))
    with pytest.raises(hostcopy.Error):
        stager.copy_to_device(dst, CpuTensorRefusingExport())


@pytest.mark.parametrize("missing", ["shape", "typestr"])
@pytest.mark.parametrize("through", ["module", "stager"])
def test_a_cuda_array_interface_without_a_required_key_is_a_hostcopy_error(env, missing, through):
    # Refused as a malformed interface (ArgumentTypeError), never a KeyError.
    sim, numpy, device, source, stager = env
    interface = {"data": (source.ptr, False), "shape": (SIZE,), "typestr": "|u1", "version": 3}
    del interface[missing]
    dst = numpy.zeros(SIZE, numpy.uint8)
    copy = hostcopy.copy_to_host if through == "module" else stager.copy_to_host
    _refused_as_hostcopy(lambda: copy(dst, Interface(interface)), dst)
    with pytest.raises(hostcopy.ArgumentTypeError, match=f"no '{missing}'"):
        copy(dst, Interface(interface))


def test_a_stream_whose_attribute_raises_runtimeerror_is_a_hostcopy_error(env):
    # A stream object whose handle property raises (a closed stream of a
    # library): ArgumentRuntimeError, naming the stream.
    sim, numpy, device, source, stager = env

    class ClosedStream:
        @property
        def cuda_stream(self):
            raise RuntimeError("stream is closed")

    dst = numpy.zeros(SIZE, numpy.uint8)
    _refused_as_hostcopy(lambda: stager.copy_to_host(dst, source, stream=ClosedStream()), dst)
    with pytest.raises(hostcopy.ArgumentRuntimeError, match="stream is closed") as refused:
        stager.copy_to_host(dst, source, stream=ClosedStream())
    assert isinstance(refused.value.__cause__, RuntimeError)


def test_blocking_that_has_no_truth_value_is_a_hostcopy_error(env):
    # Flags are bool, never any object's truth, as for prefault= and
    # h2d_streaming=: an array (whose truth numpy refuses) is
    # ArgumentTypeError.
    sim, numpy, device, source, stager = env
    dst = numpy.zeros(SIZE, numpy.uint8)
    _refused_as_hostcopy(lambda: stager.copy_to_host(dst, source, blocking=numpy.array([True, False])), dst)
    _refused_as_hostcopy(lambda: hostcopy.copy_to_host(dst, source, blocking=numpy.array([True, False])), dst)
    with pytest.raises(hostcopy.ArgumentTypeError, match="blocking"):
        stager.copy_to_host(dst, source, blocking="no")


def test_blocking_none_is_refused_rather_than_taken_for_false(env):
    # `blocking=None` is no bool: refused by name rather than read as false
    # (which would return a Transfer).
    sim, numpy, device, source, stager = env
    dst = numpy.zeros(SIZE, numpy.uint8)
    with pytest.raises(hostcopy.ArgumentTypeError):
        result = stager.copy_to_host(dst, source, blocking=None)
        if result is not None:
            result.wait()


def test_the_default_stager_lock_is_not_held_across_python_code():
    # Making a stager runs Python code (atexit.unregister compares every
    # registered hook with ==; any allocation may run the cyclic GC's
    # finalisers). Python code there that asks for a default stager, on the
    # same thread, must not wait for a registry lock its own thread holds.
    script = textwrap.dedent(
        """
        import atexit, faulthandler, sys
        import hostcopy
        native = hostcopy._native
        native.sim_install()
        device = native.sim_new_device()
        native.sim_make_current(device)

        class Hook:
            def __call__(self):
                pass
            def __eq__(self, other):
                hostcopy.default_stager(device)
                return self is other
            __hash__ = object.__hash__

        atexit.register(Hook())
        hostcopy.default_stager(device)
        print("made")
        """
    )
    try:
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        pytest.fail("hostcopy.default_stager deadlocked on its own registry lock")
    assert "made" in done.stdout, done.stderr


def test_stager_is_weak_referenceable(env):
    # weakref.ref, WeakKeyDictionary caches keyed by stager, weakref.finalize.
    sim, numpy, device, source, stager = env
    assert weakref.ref(stager)() is stager
    cache = weakref.WeakKeyDictionary({stager: "kept"})
    assert cache[stager] == "kept"


def test_stager_is_subclassable(env):
    # A wrapper adding counters or logging, a test double: it copies as the
    # Stager it derives from.
    sim, numpy, device, source, stager = env

    class Counting(hostcopy.Stager):
        copies = 0

        def copy_to_host(self, *args, **kwargs):
            type(self).copies += 1
            return super().copy_to_host(*args, **kwargs)

    dst = numpy.zeros(SIZE, numpy.uint8)
    with Counting(device, chunk=64 << 10, buffers=2, workers=1) as counting:
        assert isinstance(counting, hostcopy.Stager)
        counting.copy_to_host(dst, source)
    assert Counting.copies == 1 and dst.tobytes() == pattern(SIZE, 1)


def test_closing_the_default_stager_does_not_break_the_module_copies_for_good(env):
    # `with hostcopy.default_stager(d) as s:` closes it (Stager's
    # __exit__): the next lookup makes a new one, so the module's copies of
    # that device (and hostcopy.offload's) go on working.
    sim, numpy, device, source, stager = env
    dst = numpy.zeros(SIZE, numpy.uint8)
    with hostcopy.default_stager(device) as shared:
        shared.copy_to_host(dst, source)
    dst[:] = 0
    hostcopy.copy_to_host(dst, source)
    assert dst.tobytes() == pattern(SIZE, 1)
    assert hostcopy.default_stager(device) is not shared
    assert hostcopy.default_stager(device) is hostcopy.default_stager(device)
