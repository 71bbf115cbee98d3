//! The first driver call of a process, against the simulated driver,
//! which answers `cuCtxGetCurrent` before `cuInit` as libcuda does
//! (`CUDA_ERROR_NOT_INITIALIZED`): a process of its own, since `cuInit`
//! is process-wide.

#![cfg(all(feature = "cuda", feature = "simulator"))]

use hostcopy_driver::cuda::{Context, sim};

/// A binding saves the caller's current context before its first call of
/// the layer (the Python package's first `Stager`, before torch or any
/// other library has touched CUDA). Before, saving it was the process's
/// first driver call and failed with `CUDA_ERROR_NOT_INITIALIZED`.
#[test]
fn the_current_context_is_saved_before_anything_initialized_the_driver() {
    sim::install();
    let ordinal = sim::new_device();
    let saved = Context::save_current();
    assert!(saved.is_ok(), "{:?}", saved.err());
    let context = Context::primary(ordinal).unwrap();
    drop(saved);
    drop(context);
}
