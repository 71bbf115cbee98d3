"""Every exception hostcopy raises is a ``hostcopy.Error`` and keeps a
built-in base; every variant of the Rust crate's errors reaches Python as
a class of its own (src/errors.rs maps them without a wildcard arm), never
a plain ``RuntimeError``."""

import pytest

import hostcopy
from hostcopy import _errors, _native

BUILTIN_BASES = (ValueError, TypeError, RuntimeError, MemoryError)


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
