//! The native half of the `hostcopy` Python package (`hostcopy._native`).
//!
//! What Python cannot do itself lives here, as thin conversions over the
//! Rust crates: the addresses of the compiled host functions, reading a
//! buffer-protocol object or a DLPack capsule, packing with
//! `hostcopy-driver`'s checks, the parallel copy workers, owned launches
//! and graph nodes, and staged transfers (`hostcopy_driver::cuda`, which
//! opens libcuda when first needed, so `import hostcopy` works without a
//! driver): `hostcopy.Stager` and the module's copies are this module's
//! (`staging.rs`, `default_stager.rs`). A transfer's arguments are
//! recognised here, once: its sides and stream (`sides.rs`), its integers
//! (offsets, lengths, blocks: `integers.rs`, `blocks.rs`); the Python half
//! (`hostcopy/__init__.py`) classifies the arguments of packing and
//! launches.

use pyo3::prelude::*;

mod awaiting;
mod blocks;
mod buffer;
mod default_stager;
mod dlpack;
mod errors;
mod integers;
mod launch;
mod life;
mod packing;
mod pageable;
mod parallel;
mod sides;
#[cfg(feature = "simulator")]
mod sim;
mod staging;

/// Runs `f` with the calling thread's current CUDA context put back
/// afterwards: the Rust layer leaves the context of the resource it used
/// current, while torch, cupy and the CUDA runtime keep their own current
/// device on the thread, which a copy must not change.
pub(crate) fn keeping_current<T>(
    f: impl FnOnce() -> Result<T, hostcopy_driver::cuda::Error>,
) -> Result<T, hostcopy_driver::cuda::Error> {
    let _saved = hostcopy_driver::cuda::Context::save_current()?;
    f()
}

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

/// Loads the NVIDIA driver now (transfers and launches do it on first use).
#[pyfunction]
fn load_driver(py: Python<'_>) -> PyResult<()> {
    life::use_cuda()?;
    crate::life::detach(py, hostcopy_driver::cuda::driver_version)
        .map(drop)
        .map_err(|failure| errors::driver_error(py, "load_driver", failure))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("HOST_COPY_ARGS_SIZE", hostcopy_core::HostCopyArgs::SIZE)?;
    m.add("ABI_VERSION", hostcopy_core::ABI_VERSION)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(host_copy_fn_address, m)?)?;
    m.add_function(wrap_pyfunction!(rejected, m)?)?;
    m.add_function(wrap_pyfunction!(load_driver, m)?)?;
    m.add_function(wrap_pyfunction!(buffer::buffer_region, m)?)?;
    m.add_function(wrap_pyfunction!(buffer::host_memory, m)?)?;
    m.add_function(wrap_pyfunction!(dlpack::dlpack_region, m)?)?;
    m.add_function(wrap_pyfunction!(staging::stream_capturing, m)?)?;
    m.add_function(wrap_pyfunction!(sides::py_device_ordinal, m)?)?;
    m.add_function(wrap_pyfunction!(default_stager::default_stager, m)?)?;
    m.add_function(wrap_pyfunction!(default_stager::stager_for, m)?)?;
    m.add_function(wrap_pyfunction!(default_stager::copy_to_host, m)?)?;
    m.add_function(wrap_pyfunction!(default_stager::copy_to_device, m)?)?;
    m.add_function(wrap_pyfunction!(default_stager::copy_blocks_to_host, m)?)?;
    m.add_function(wrap_pyfunction!(default_stager::copy_blocks_to_device, m)?)?;
    m.add_function(wrap_pyfunction!(sides::py_not_device_memory, m)?)?;
    m.add_function(wrap_pyfunction!(dlpack::dlpack_host_memory, m)?)?;
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
    m.add_class::<buffer::HostMemory>()?;
    m.add_class::<pageable::PageableMemory>()?;
    m.add_class::<staging::PyStager>()?;
    m.add_class::<staging::Transfer>()?;
    m.add_class::<awaiting::Wakeup>()?;
    #[cfg(feature = "simulator")]
    sim::register(m)?;
    errors::load(m.py())?;
    life::install(m)?;
    default_stager::install(m)?;
    Ok(())
}
