//! The arguments the binding converts itself, in one place, rather than
//! letting pyo3 extract them in a signature (whose `TypeError` and
//! `OverflowError` are no `hostcopy.Error`): each entry takes the Python
//! object and converts it here ([`argument`], [`Argument`]), refusing it
//! by its name as a `hostcopy.Error` that keeps its built-in base.
//!
//! Integers (`nbytes`, `dst_offset`, `src_offset`, the fields of every
//! block, a device ordinal, a worker count, `hostcopy.empty`'s size) are
//! integers in `operator.index`'s sense (`int`, numpy's integer scalars),
//! not `bool` (`nbytes=True` is a mistake, not 1), `float` (never
//! truncated) or `str` (`hostcopy.ArgumentTypeError`); and each a
//! `usize`, so that a negative value or one wider than the platform's
//! word is refused by name (`hostcopy.IntegerOutOfRange`, a `ValueError`
//! and an `OverflowError`) rather than wrapped or taken for an
//! out-of-bounds offset. Flags are `bool` (or numpy's), never any object's
//! truth.

use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyInt};

use crate::errors::{Class, error, refusal, wrong_type};

/// A type an argument is converted to ([`argument`]), refused as a
/// `hostcopy.Error` naming it.
pub(crate) trait Argument: Sized {
    fn convert(value: &Bound<'_, PyAny>, name: &str) -> PyResult<Self>;
}

impl Argument for usize {
    fn convert(value: &Bound<'_, PyAny>, name: &str) -> PyResult<usize> {
        word(value, || name.to_owned())
    }
}

impl Argument for bool {
    /// `True` or `False`, Python's or numpy's (`numpy.bool_`); any other
    /// object is `ArgumentTypeError` (`prefault="no"` is no `False`).
    fn convert(value: &Bound<'_, PyAny>, name: &str) -> PyResult<bool> {
        if let Ok(flag) = value.cast::<PyBool>() {
            return Ok(flag.is_true());
        }
        let kind = value.get_type();
        let numpy_bool = kind.module().is_ok_and(|module| module == "numpy")
            && kind
                .name()
                .is_ok_and(|kind| kind == "bool" || kind == "bool_");
        if numpy_bool {
            return value.is_truthy();
        }
        Err(wrong_type(
            name,
            value,
            format!("{name} must be a bool, not {}", kind.name()?),
        ))
    }
}

/// `value`, the argument `name`, as a `T`: the one conversion of an
/// argument a Python caller gives.
pub(crate) fn argument<T: Argument>(value: &Bound<'_, PyAny>, name: &str) -> PyResult<T> {
    T::convert(value, name)
}

/// `value` as a `usize`, for the argument `name` (`"nbytes"`,
/// `"blocks[3].host_offset"`, made only for an error):
/// `hostcopy.ArgumentTypeError` if it is no integer (an `__index__` that
/// raises: its error as hostcopy's, [`refusal`]),
/// `hostcopy.IntegerOutOfRange` (`name`, `value`, `max`) if it is negative
/// or wider than a word.
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
            unsafe { Bound::from_owned_ptr_or_err(py, ffi::PyNumber_Index(value.as_ptr())) }
        };
        match crate::life::python_code(index).ok_or_else(crate::errors::exiting)? {
            Ok(integer) => Some(integer),
            // No integer (`operator.index` refuses it): below.
            Err(failure) if failure.is_instance_of::<PyTypeError>(py) => None,
            // Its own `__index__` raised otherwise (a `ValueError`).
            Err(failure) => return Err(refusal(py, failure, &name(), Some(value))),
        }
    };
    let Some(integer) = integer else {
        let name = name();
        let message = format!(
            "{name} must be an integer (int or a numpy integer), not {}",
            value.get_type().name()?
        );
        return Err(wrong_type(&name, value, message));
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
