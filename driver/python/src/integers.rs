//! The integers a transfer takes (`nbytes`, `dst_offset`, `src_offset`,
//! and the fields of every block), recognised in one place: integers in
//! `operator.index`'s sense (`int`, numpy's integer scalars), not `bool`
//! (`nbytes=True` is a mistake, not 1), `float` (never truncated) or
//! `str`; and each a `usize`, so that a negative value or one wider than
//! the platform's word is refused by name rather than wrapped or taken
//! for an out-of-bounds offset.

use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyInt};

use crate::errors::{Class, error};

/// `value` as a `usize`, for the argument `name` (`"nbytes"`,
/// `"blocks[3].host_offset"`, made only for an error): `TypeError` if it
/// is no integer, `hostcopy.IntegerOutOfRange` (`name`, `value`, `max`) if
/// it is negative or wider than a word.
pub(crate) fn word(value: &Bound<'_, PyAny>, name: impl FnOnce() -> String) -> PyResult<usize> {
    let py = value.py();
    let integer = if value.is_instance_of::<PyBool>() {
        None
    } else if value.is_instance_of::<PyInt>() {
        Some(value.clone())
    } else {
        // An `__index__` may be Python code (see `life::python_code`).
        let index = || {
            // SAFETY: `value` is a live object (the GIL is held, and we hold
            // a reference); `PyNumber_Index` returns a new reference, or
            // null with an exception set, which `from_owned_ptr_or_err`
            // takes over.
            unsafe { Bound::from_owned_ptr_or_err(py, ffi::PyNumber_Index(value.as_ptr())) }.ok()
        };
        crate::life::python_code(index).ok_or_else(crate::errors::exiting)?
    };
    let Some(integer) = integer else {
        return Err(PyTypeError::new_err(format!(
            "{} must be an integer (int or a numpy integer), not {}",
            name(),
            value.get_type().name()?
        )));
    };
    match integer.extract::<usize>() {
        Ok(word) => Ok(word),
        Err(_) => Err(out_of_range(py, &name(), integer)?),
    }
}

/// `hostcopy.IntegerOutOfRange` for the argument `name` given `value` (a
/// Python int, of any size).
pub(crate) fn out_of_range<'py>(
    py: Python<'py>,
    name: &str,
    value: Bound<'py, PyAny>,
) -> PyResult<PyErr> {
    let message = format!(
        "{name} = {value} is outside 0..={} (a native word)",
        usize::MAX
    );
    Ok(error(
        py,
        Class::IntegerOutOfRange,
        message,
        [
            ("name", name.into_pyobject(py)?.into_any()),
            ("value", value),
            ("max", usize::MAX.into_pyobject(py)?.into_any()),
        ],
    ))
}
