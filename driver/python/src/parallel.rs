//! The parallel host function and its worker pool (`hostcopy_driver::parallel`).

use hostcopy_driver::parallel::{CopyWorkers, StartError, hostcopy_parallel_fn};
use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;

/// The address of `hostcopy_parallel_fn`.
#[pyfunction]
pub(crate) fn host_copy_parallel_fn_address() -> usize {
    let f: unsafe extern "C" fn(*mut core::ffi::c_void) = hostcopy_parallel_fn;
    f as usize
}

/// Starts the worker pool with `workers` threads on the first call; later
/// calls let only the first `workers` of the started threads take part.
/// Returns `(started, active)`.
#[pyfunction]
pub(crate) fn set_parallel_workers(
    py: Python<'_>,
    workers: &Bound<'_, PyAny>,
) -> PyResult<(usize, usize)> {
    let workers: usize = crate::integers::argument(workers, "workers")?;
    let pool = match crate::life::detach(py, || CopyWorkers::start(workers)) {
        Ok(pool) => pool,
        // A running pool keeps its threads; only the active count changes.
        Err(StartError::AlreadyStarted { .. }) => CopyWorkers::get().ok_or_else(|| {
            PyOSError::new_err("the copy worker pool reported itself running but is not")
        })?,
        Err(StartError::Spawn { started, error }) => {
            return Err(crate::errors::worker_start_error(
                py, workers, started, &error,
            ));
        }
        // `StartError` is non-exhaustive: a reason the crate adds later
        // still raises an `OSError`, with its own message.
        Err(other) => {
            return Err(PyOSError::new_err(format!(
                "starting {workers} copy workers: {other}"
            )));
        }
    };
    pool.set_active(workers);
    Ok((pool.workers(), pool.active()))
}

/// `(started, active)` workers; `(0, 0)` before the pool was started.
#[pyfunction]
pub(crate) fn parallel_workers() -> (usize, usize) {
    CopyWorkers::get().map_or((0, 0), |pool| (pool.workers(), pool.active()))
}
