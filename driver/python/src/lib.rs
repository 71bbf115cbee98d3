//! The native half of the `hostcopy` Python package (`hostcopy._native`).
//!
//! What Python cannot do itself lives here: the addresses of the compiled
//! host functions, reading a buffer-protocol object's address, packing with
//! `hostcopy-driver`'s checks, the parallel copy workers, and launches whose
//! records this module owns until the driver is done with them. The Python
//! half (`hostcopy/__init__.py`) classifies arguments and raises the errors.
//!
//! libcuda is never linked: the `driver` module opens `libcuda.so.1` the first time a
//! launch function is called, so `import hostcopy` works without a driver.

use pyo3::prelude::*;

mod buffer;
mod driver;
mod launch;
mod packing;
mod parallel;

/// The address of `hostcopy_fn`.
#[pyfunction]
fn host_copy_fn_address() -> usize {
    let f: hostcopy_core::HostFn = hostcopy_core::hostcopy_fn;
    f as usize
}

/// The count of records `hostcopy_fn` rejected in this process.
#[pyfunction]
fn rejected() -> usize {
    hostcopy_core::hostcopy_rejected()
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("HOST_COPY_ARGS_SIZE", hostcopy_core::HostCopyArgs::SIZE)?;
    m.add("ABI_VERSION", hostcopy_core::ABI_VERSION)?;
    m.add_function(wrap_pyfunction!(host_copy_fn_address, m)?)?;
    m.add_function(wrap_pyfunction!(rejected, m)?)?;
    m.add_function(wrap_pyfunction!(buffer::buffer_region, m)?)?;
    m.add_function(wrap_pyfunction!(packing::pack_regions, m)?)?;
    m.add_function(wrap_pyfunction!(
        parallel::host_copy_parallel_fn_address,
        m
    )?)?;
    m.add_function(wrap_pyfunction!(parallel::set_parallel_workers, m)?)?;
    m.add_function(wrap_pyfunction!(parallel::parallel_workers, m)?)?;
    m.add_function(wrap_pyfunction!(launch::launch_owned, m)?)?;
    m.add_function(wrap_pyfunction!(launch::add_host_node, m)?)?;
    m.add_function(wrap_pyfunction!(launch::owned_record_counts, m)?)?;
    m.add_function(wrap_pyfunction!(driver::load_driver, m)?)?;
    Ok(())
}
