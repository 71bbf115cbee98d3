"""Every exception hostcopy raises is a ``hostcopy.Error`` and keeps a
built-in base; every variant of the Rust crate's errors reaches Python as
a class of its own (src/errors.rs maps them without a wildcard arm), never
a plain ``RuntimeError``."""

import ctypes
import subprocess
import sys
import textwrap

import pytest

import hostcopy
from hostcopy import _errors, _native
from hostcopy.offload._ring import Ring
from test_offload_sim import Finished, RingDevice

BUILTIN_BASES = (ValueError, TypeError, RuntimeError, MemoryError, OSError, BufferError)


def exported_classes() -> list[type[BaseException]]:
    return [
        getattr(hostcopy, name)
        for name in hostcopy.__all__
        if isinstance(getattr(hostcopy, name), type) and issubclass(getattr(hostcopy, name), BaseException)
    ]


def test_every_class_of_the_errors_module_is_exported_and_documented():
    defined = [
        value
        for value in vars(_errors).values()
        if isinstance(value, type) and issubclass(value, BaseException) and value.__module__ == _errors.__name__
    ]
    assert len(defined) >= 30, defined
    for cls in defined:
        assert getattr(hostcopy, cls.__name__) is cls and cls.__name__ in hostcopy.__all__, cls
        assert cls.__doc__, cls
    assert set(exported_classes()) == set(defined)


def test_except_hostcopy_error_catches_an_instance_of_every_class():
    classes = exported_classes()
    assert hostcopy.Error in classes and hostcopy.TransferError in classes
    for cls in classes:
        try:
            raise cls("refused", side="dst")
        except hostcopy.Error as caught:
            assert type(caught) is cls
            assert str(caught) == "refused"
        if cls is not hostcopy.Error:
            assert issubclass(cls, BUILTIN_BASES), cls


def test_the_built_in_bases_are_kept():
    for cls, base in [
        (hostcopy.PackError, ValueError),
        (hostcopy.OutOfBounds, ValueError),
        (hostcopy.TransferError, ValueError),
        (hostcopy.BlockOutOfBounds, ValueError),
        (hostcopy.StagerClosed, ValueError),
        (hostcopy.MemoryNotHeld, TypeError),
        (hostcopy.CudaUnavailable, RuntimeError),
        (hostcopy.CudaError, RuntimeError),
        (hostcopy.StreamCapturing, RuntimeError),
        (hostcopy.HostMemoryError, MemoryError),
        (hostcopy.SafetensorsError, ValueError),
        (hostcopy.OffloadError, RuntimeError),
        (hostcopy.WorkerStartError, OSError),
    ]:
        assert issubclass(cls, base) and issubclass(cls, hostcopy.Error), cls


def test_a_batchs_refusals_are_transfer_errors_not_pack_errors():
    for cls in (hostcopy.BlockOutOfBounds, hostcopy.BlocksOverlap):
        assert issubclass(cls, hostcopy.TransferError), cls
        assert not issubclass(cls, hostcopy.PackError), cls


def test_fields_are_attributes_and_absent_ones_keep_their_defaults():
    failure = hostcopy.RecordPoolError("full", capacity=4)
    assert (failure.capacity, failure.user_data, failure.index) == (4, None, None)
    failure = hostcopy.CudaError("failed", code=700, name="CUDA_ERROR_ILLEGAL_ADDRESS", function="copy")
    assert (failure.code, failure.name, failure.function) == (700, "CUDA_ERROR_ILLEGAL_ADDRESS", "copy")


def test_every_rust_variant_maps_to_a_hostcopy_class_of_its_own(sim):
    samples = _native.sim_error_samples()
    names = [name for name, _ in samples]
    # One of each: cuda::Error's variants, PackError's and PoolError's
    # through it, and HostBufferError's.
    for name in (
        "Driver",
        "Capturing",
        "DeviceOutOfBounds",
        "ForeignNode",
        "ScopeOpen",
        "NoCurrentContext",
        "NotPrimaryContext",
        "StreamMemoryWaitsUnsupported",
        "NotDeviceMemory",
        "ContextMismatch",
        "BlockOutOfBounds",
        "InvalidOption",
        "BlocksOverlap",
        "OrderNotKept",
        "ReadOnlyDevice",
        "Pack::OutOfBounds",
        "Pack::Overlap",
        "Pack::AddressOverflow",
        "Pack::NullWithLength",
        "Pack::NotHostAccessible",
        "Pool::Exhausted",
        "Pool::NotFromThisPool",
        "Pool::NotHeld",
        "HostBufferError::Map",
        "HostBufferError::Unsupported",
    ):
        assert name in names, name
    for name, failure in samples:
        assert type(failure) not in BUILTIN_BASES, (name, failure)
        assert isinstance(failure, hostcopy.Error), (name, failure)
        assert type(failure).__module__ == "hostcopy._errors", (name, failure)
        assert str(failure), name
    by_name = dict(samples)
    assert isinstance(by_name["ContextMismatch"], hostcopy.WrongDevice)
    assert by_name["BlocksOverlap"].first == 0 and by_name["BlocksOverlap"].second == 2
    assert by_name["Pack::Overlap"].nbytes == 16
    assert by_name["Pool::Exhausted"].capacity == 4
    assert by_name["HostBufferError::Map"].errno == 12
    assert isinstance(by_name["HostBufferError::Map"], MemoryError)
    assert by_name["Driver"].code == 101 and by_name["Driver"].name == "CUDA_ERROR_INVALID_DEVICE"


def test_a_closed_stager_raises_stager_closed(sim):
    device = sim.device()
    source = sim.array(device, bytes(range(64)))
    stager = hostcopy.Stager(device)
    stager.close()
    with pytest.raises(hostcopy.StagerClosed, match="the stager is closed"):
        stager.copy_to_host(bytearray(64), source)


class DlDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DlDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DlManagedTensor(ctypes.Structure):
    """``DLManagedTensor``: its ``DLTensor`` first, then the producer's fields."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DlDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DlDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
    ]


def unversioned_capsule(data: int, nbytes: int, device_type: int = 1):
    """A ``"dltensor"`` capsule of ``nbytes`` one-byte elements at ``data``
    (no destructor: the structure is Python's, kept by the capsule's
    holder through the returned tuple)."""
    shape = (ctypes.c_int64 * 1)(nbytes)
    managed = DlManagedTensor(data, DlDevice(device_type, 0), 1, DlDataType(1, 8, 1), shape, None, 0, None, None)
    new = ctypes.pythonapi.PyCapsule_New
    new.restype = ctypes.py_object
    new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    return new(ctypes.addressof(managed), b"dltensor", None), (managed, shape)


def test_a_dlpack_tensor_past_the_end_of_the_address_space_raises_address_overflow():
    capsule, _kept = unversioned_capsule(2**64 - 16, 64)
    with pytest.raises(hostcopy.AddressOverflow) as raised:
        _native.dlpack_host_memory(capsule, False, "src")
    assert (raised.value.side, raised.value.addr, raised.value.nbytes) == ("src", 2**64 - 16, 64)
    with pytest.raises(hostcopy.AddressOverflow) as raised:
        _native.dlpack_region(capsule)
    assert raised.value.side == "device"


def test_a_dlpack_tensor_of_bytes_at_a_null_pointer_raises_null_with_length():
    capsule, _kept = unversioned_capsule(0, 64)
    with pytest.raises(hostcopy.NullWithLength) as raised:
        _native.dlpack_host_memory(capsule, False, "dst")
    assert (raised.value.side, raised.value.nbytes) == ("dst", 64)
    with pytest.raises(hostcopy.NullWithLength) as raised:
        _native.dlpack_region(capsule, "src")
    assert raised.value.side == "src"
    empty, _kept_empty = unversioned_capsule(0, 0)
    assert _native.dlpack_region(empty)[:2] == (0, 0), "an empty tensor may have no data pointer"


class UploadsOnly:
    """A stager stand-in whose uploads end at once."""

    def copy_to_device(self, dst, src, nbytes, **options):
        return Finished()


def test_the_offloaders_refusals_are_offload_errors():
    ring = Ring(RingDevice(), [bytearray(16) for _ in range(2)], prefetch=0, slots=1, stager=UploadsOnly())
    ring.enter(0)
    with pytest.raises(hostcopy.OffloadError, match="entered twice"):
        ring.enter(0)
    with pytest.raises(hostcopy.OffloadError, match="every ring slot"):
        ring.enter(1)
    with pytest.raises(hostcopy.OffloadError, match="not in a forward"):
        ring.write_back(1, [(0, 4)])
    ring.leave(0)
    ring.close()
    with pytest.raises(hostcopy.OffloadError, match="removed"):
        ring.enter(0)


def test_a_worker_thread_that_cannot_start_raises_worker_start_error():
    # The address space is capped just above what the process maps, so
    # the worker threads' stacks cannot all be mapped.
    script = textwrap.dedent(
        """
        import resource
        import hostcopy
        mapped = int(next(l for l in open("/proc/self/status") if l.startswith("VmSize:")).split()[1]) * 1024
        resource.setrlimit(resource.RLIMIT_AS, (mapped + (24 << 20), resource.RLIM_INFINITY))
        try:
            hostcopy.set_parallel_workers(256)
            print("started all", flush=True)
        except hostcopy.Error as error:
            started, active = hostcopy.parallel_workers()
            print(type(error).__name__, isinstance(error, OSError), error.started == started, error.errno, flush=True)
        """
    )
    if not sys.platform.startswith("linux"):
        pytest.skip("reads /proc/self/status")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("WorkerStartError True True"), (done.stdout, done.stderr[-2000:])
