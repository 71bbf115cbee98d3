//! The CUDA layer's errors (`hostcopy_driver::cuda::Error`) as the
//! package's exception classes (defined in `hostcopy/_errors.py`): one
//! class per variant, each with the variant's numbers as attributes.
//!
//! | Rust | Python |
//! |---|---|
//! | `Driver` | `CudaUnavailable` (no usable driver), `CudaError` |
//! | `Pool` | `RecordPoolError` |
//! | `Pack` | the `PackError` subclass of the same name |
//! | `Capturing` | `StreamCapturing` |
//! | `DeviceOutOfBounds` | `OutOfBounds` |
//! | `ForeignNode` | `ForeignNode` |
//! | `ScopeOpen` | `ScopeOpen` |
//! | `NoCurrentContext` | `NoCurrentContext` |
//! | `NotPrimaryContext` | `NotPrimaryContext` |
//! | `NotDeviceMemory` | `NotDeviceMemory` |
//! | `ContextMismatch` | `WrongDevice` |
//! | `BlockOutOfBounds` | `BlockOutOfBounds` |
//! | `BlocksOverlap` | `BlocksOverlap` |
//! | `InvalidOption` | `InvalidOption` |
//! | `OrderNotKept`, `ReadOnlyDevice` | `RuntimeError` (cudarc's memory only, which the package never hands the layer) |

use hostcopy_driver::PoolError;
use hostcopy_driver::cuda::{BlockSide, DriverError, Error};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

use crate::packing::{error, out_of_bounds, pack_error};

/// `failure` of the call `operation` (a Python-level name, such as
/// `"copy_to_host"`), with `side` naming the device side where the error
/// is about device memory.
pub(crate) fn layer_error(py: Python<'_>, operation: &str, side: &str, failure: Error) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let int = |value: usize| value.into_pyobject(py).map(|v| v.into_any());
        let text = |value: &str| value.into_pyobject(py).map(|v| v.into_any());
        let message = failure.to_string();
        Ok(match failure {
            Error::Driver(driver) => driver_error(py, operation, driver),
            Error::Pack(packing) => pack_error(py, packing)?,
            Error::DeviceOutOfBounds {
                offset,
                nbytes,
                len,
            } => out_of_bounds(py, message, side, offset, nbytes, len)?,
            Error::NotDeviceMemory { addr } => error(
                py,
                "NotDeviceMemory",
                message,
                [("side", text(side)?), ("addr", int(addr)?)],
            ),
            Error::ContextMismatch { expected, found } => error(
                py,
                "WrongDevice",
                message,
                [("expected", int(expected)?), ("found", int(found)?)],
            ),
            Error::Capturing => error(py, "StreamCapturing", message, []),
            Error::BlockOutOfBounds {
                index,
                side: block_side,
                offset,
                nbytes,
                len,
            } => {
                let block_side = match block_side {
                    BlockSide::Host => "host",
                    BlockSide::Device => "device",
                };
                error(
                    py,
                    "BlockOutOfBounds",
                    message,
                    [
                        ("index", int(index)?),
                        ("side", text(block_side)?),
                        ("offset", int(offset)?),
                        ("nbytes", int(nbytes)?),
                        ("len", int(len)?),
                    ],
                )
            }
            Error::BlocksOverlap { first, second } => error(
                py,
                "BlocksOverlap",
                message,
                [("first", int(first)?), ("second", int(second)?)],
            ),
            Error::Pool(pool) => {
                let (field, value) = match pool {
                    PoolError::Exhausted { capacity } => ("capacity", capacity),
                    PoolError::NotFromThisPool { user_data } => ("user_data", user_data),
                    PoolError::NotHeld { index } => ("index", index),
                    // `PoolError` is `#[non_exhaustive]`: a variant added
                    // later is still a `RecordPoolError`, without numbers.
                    _ => return Ok(error(py, "RecordPoolError", message, [])),
                };
                error(py, "RecordPoolError", message, [(field, int(value)?)])
            }
            Error::ForeignNode => error(py, "ForeignNode", message, []),
            Error::ScopeOpen => error(py, "ScopeOpen", message, []),
            Error::NoCurrentContext => error(py, "NoCurrentContext", message, []),
            Error::NotPrimaryContext { device } => {
                error(py, "NotPrimaryContext", message, [("device", int(device)?)])
            }
            Error::InvalidOption {
                option,
                value,
                min,
                max,
            } => invalid_option(py, message, option, int(value)?, min, max)?,
            // Refusals of cudarc's memory, which the package never hands
            // the layer: no class of their own.
            Error::OrderNotKept | Error::ReadOnlyDevice => {
                PyRuntimeError::new_err(format!("{operation}: {message}"))
            }
            // `Error` is `#[non_exhaustive]`: every variant of this version
            // has its arm above, so this one is reached only by a variant
            // added to hostcopy-driver after this binding was written, until
            // it gets its own class.
            _ => PyRuntimeError::new_err(format!("{operation}: {message}")),
        })
    };
    build().unwrap_or_else(|failure| failure)
}

/// A driver error: `CudaUnavailable` where no usable driver was found,
/// `CudaError` (with `code`, `name` and `function`) otherwise.
pub(crate) fn driver_error(py: Python<'_>, operation: &str, failure: DriverError) -> PyErr {
    if failure.is_driver_missing() {
        return error(
            py,
            "CudaUnavailable",
            format!("{failure}. Packing and HOST_COPY_FN work without a driver."),
            [],
        );
    }
    let fields = || -> PyResult<_> {
        Ok([
            ("code", failure.code().into_pyobject(py)?.into_any()),
            ("name", failure.name().into_pyobject(py)?.into_any()),
            ("function", operation.into_pyobject(py)?.into_any()),
        ])
    };
    match fields() {
        Ok(fields) => error(py, "CudaError", format!("{operation}: {failure}"), fields),
        Err(failure) => failure,
    }
}

/// `hostcopy.InvalidOption`: `value` (an int as given, or the object that
/// is not one) for `option`, which takes `min..=max`.
pub(crate) fn invalid_option(
    py: Python<'_>,
    message: String,
    option: &str,
    value: Bound<'_, PyAny>,
    min: usize,
    max: usize,
) -> PyResult<PyErr> {
    let int = |value: usize| value.into_pyobject(py).map(|v| v.into_any());
    Ok(error(
        py,
        "InvalidOption",
        message,
        [
            ("option", option.into_pyobject(py)?.into_any()),
            ("value", value),
            ("min", int(min)?),
            ("max", int(max)?),
        ],
    ))
}
