//! The memory of `hostcopy.empty`: a [`HostBuffer`] that numpy views.

use hostcopy_driver::HostBuffer;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// Pageable host memory made to be copied into: privately mapped, advised
/// onto transparent huge pages where the kernel has them in `madvise`
/// mode, its pages made present by several threads before it is returned,
/// its bytes zero (`hostcopy_driver::HostBuffer`). numpy views it through
/// `__array_interface__`: the array's base is this object, so the memory
/// lives as long as any view of it, and is unmapped after the last.
#[pyclass(module = "hostcopy._native", frozen)]
pub(crate) struct PageableMemory {
    /// Owned here, never read or written by Rust after it was made: Python
    /// writes the bytes through `addr`.
    buffer: HostBuffer,
    /// Its first byte's address, taken once when it was made.
    addr: usize,
}

#[pymethods]
impl PageableMemory {
    /// `nbytes` zeroed bytes, their pages present (made with the GIL
    /// released: 1 GiB takes tens of milliseconds).
    #[new]
    fn new(py: Python<'_>, nbytes: usize) -> PyResult<Self> {
        let mut buffer = crate::life::detach(py, || HostBuffer::new(nbytes))
            .map_err(|failure| crate::errors::host_buffer_error(py, &failure))?;
        // Through `&mut`: Python writes through this address.
        let addr = buffer.as_mut_ptr().expose_provenance();
        Ok(PageableMemory { buffer, addr })
    }

    /// Its length in bytes.
    #[getter]
    fn nbytes(&self) -> usize {
        self.buffer.len()
    }

    /// The bytes as a writable one-dimensional `uint8` array (numpy's array
    /// interface, version 3).
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let interface = PyDict::new(py);
        interface.set_item("version", 3)?;
        interface.set_item("shape", (self.buffer.len(),))?;
        interface.set_item("typestr", "|u1")?;
        interface.set_item("data", (self.addr, false))?;
        Ok(interface)
    }
}
