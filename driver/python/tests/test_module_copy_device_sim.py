"""Which device's stager a copy uses, and what reading the device side
costs: a cuda.core ``Buffer``'s ``device_id`` (a property that may call the
driver, and that cuda.core before 1.0 refuses for a ``Buffer`` with no
memory resource) is read only by the module's copies, which need the
device, and a refusal there leaves the device to the driver."""

import hostcopy
from conftest import pattern


class OldCoreBuffer:
    """A cuda.core ``Buffer`` as ``Buffer.from_handle(ptr, size)`` made one
    before cuda.core 1.0: no memory resource, and ``device_id`` raises."""

    def __init__(self, array, size, device=None):
        self._array = array
        self._size = size
        self._device = device
        self.device_id_reads = 0

    @property
    def handle(self):
        return self._array.ptr

    @property
    def size(self):
        return self._size

    @property
    def memory_resource(self):
        return None

    @property
    def device_id(self):
        self.device_id_reads += 1
        raise NotImplementedError("this property only supports buffers with a memory resource")


class CoreBuffer(OldCoreBuffer):
    """cuda.core 1.x: ``device_id`` answers (through the driver, for a
    ``Buffer`` with no memory resource)."""

    @property
    def device_id(self):
        self.device_id_reads += 1
        return self._device


def test_a_stagers_copy_never_reads_a_buffers_device_id(sim, numpy, device):
    data = pattern(4096, 3)
    buffer = CoreBuffer(sim.array(device, data), 4096, device)
    with hostcopy.Stager(device) as stager:
        dst = numpy.empty(4096, numpy.uint8)
        stager.copy_to_host(dst, buffer)
        assert dst.tobytes() == data
        stager.copy_to_device(buffer, bytes(4096))
    assert buffer.device_id_reads == 0


def test_a_stagers_copy_takes_a_buffer_whose_device_id_refuses(sim, numpy, device):
    data = pattern(4096, 5)
    buffer = OldCoreBuffer(sim.array(device, data), 4096)
    with hostcopy.Stager(device) as stager:
        dst = numpy.empty(4096, numpy.uint8)
        stager.copy_to_host(dst, buffer)
        assert dst.tobytes() == data


def test_the_modules_copy_reads_device_id_once_and_asks_the_driver_where_it_refuses(sim, numpy, device):
    data = pattern(4096, 7)
    told = CoreBuffer(sim.array(device, data), 4096, device)
    dst = numpy.empty(4096, numpy.uint8)
    hostcopy.copy_to_host(dst, told)
    assert dst.tobytes() == data
    assert told.device_id_reads == 1
    refusing = OldCoreBuffer(sim.array(device, data), 4096)
    dst = numpy.empty(4096, numpy.uint8)
    hostcopy.copy_to_host(dst, refusing)
    assert dst.tobytes() == data
    assert refusing.device_id_reads == 1
