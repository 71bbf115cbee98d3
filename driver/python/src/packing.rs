//! Packing through `hostcopy-driver`'s checks, and its errors as the
//! package's exception classes (defined in `hostcopy/_errors.py`).

use hostcopy_driver::{PackError, RawRegion, Record, Side};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

/// An exception of class `name` from `hostcopy._errors`, with `message` and
/// the given attributes.
pub(crate) fn error<'py, const N: usize>(
    py: Python<'py>,
    name: &str,
    message: String,
    fields: [(&str, Bound<'py, PyAny>); N],
) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let class = py.import("hostcopy._errors")?.getattr(name)?;
        let kwargs = PyDict::new(py);
        for (key, value) in fields {
            kwargs.set_item(key, value)?;
        }
        // The class's `__init__` is Python code (see `life::python_code`):
        // from the exit handler on, its built-in base carries the message.
        match crate::life::python_code(|| class.call((message.as_str(),), Some(&kwargs))) {
            Some(made) => Ok(PyErr::from_value(made?)),
            None => {
                let base = builtin_base(&class)?;
                Ok(PyErr::from_value(base.call1((message,)).unwrap_or(base)))
            }
        }
    };
    build().unwrap_or_else(|failure| failure)
}

/// The first class of `class`'s method resolution order that Python
/// itself defines (`ValueError`, `TypeError`, `RuntimeError`): made and
/// raised without running any Python code.
fn builtin_base<'py>(class: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    for base in class.getattr("__mro__")?.try_iter()? {
        let base = base?;
        if base.getattr("__module__")?.extract::<String>()? == "builtins" {
            return Ok(base);
        }
    }
    Ok(class.clone())
}

/// `hostcopy.OutOfBounds`: `nbytes` bytes at `offset` of the `len`-byte
/// buffer on `side`.
pub(crate) fn out_of_bounds(
    py: Python<'_>,
    message: String,
    side: &str,
    offset: usize,
    nbytes: usize,
    len: usize,
) -> PyResult<PyErr> {
    let int = |value: usize| value.into_pyobject(py).map(|v| v.into_any());
    Ok(error(
        py,
        "OutOfBounds",
        message,
        [
            ("side", side.into_pyobject(py)?.into_any()),
            ("offset", int(offset)?),
            ("nbytes", int(nbytes)?),
            ("len", int(len)?),
        ],
    ))
}

fn side_name(side: Side) -> &'static str {
    match side {
        Side::Dst => "dst",
        Side::Src => "src",
    }
}

/// A [`PackError`] as the exception class of the same name.
pub(crate) fn pack_error(py: Python<'_>, failure: PackError) -> PyResult<PyErr> {
    let message = failure.to_string();
    let int = |value: usize| value.into_pyobject(py).map(|v| v.into_any());
    let side = |value: Side| side_name(value).into_pyobject(py).map(|v| v.into_any());
    Ok(match failure {
        PackError::OutOfBounds {
            side: s,
            offset,
            nbytes,
            len,
        } => out_of_bounds(py, message, side_name(s), offset, nbytes, len)?,
        PackError::Overlap { dst, src, nbytes } => error(
            py,
            "Overlap",
            message,
            [
                ("dst", int(dst)?),
                ("src", int(src)?),
                ("nbytes", int(nbytes)?),
            ],
        ),
        PackError::AddressOverflow {
            side: s,
            addr,
            nbytes,
        } => error(
            py,
            "AddressOverflow",
            message,
            [
                ("side", side(s)?),
                ("addr", int(addr)?),
                ("nbytes", int(nbytes)?),
            ],
        ),
        PackError::NullWithLength { side: s, nbytes } => error(
            py,
            "NullWithLength",
            message,
            [("side", side(s)?), ("nbytes", int(nbytes)?)],
        ),
        PackError::NotHostAccessible { side: s, addr } => error(
            py,
            "NotHostAccessible",
            message,
            [("side", side(s)?), ("addr", int(addr)?)],
        ),
        // A variant added to the driver crate later: still the base class,
        // still its message.
        _ => error(py, "PackError", message, []),
    })
}

/// A region as the Python half describes it: address, length (`None` for a
/// bare integer address, whose length the caller answers for) and whether
/// the host can touch it.
type Region = (usize, Option<usize>, bool);

fn raw_region((addr, len, host): Region, offset: usize, nbytes: usize) -> RawRegion {
    // An integer address has no known length: exactly the bytes asked for,
    // so bounds pass and only nulls, overflow and overlap are checked.
    let len = len.unwrap_or(offset.saturating_add(nbytes));
    if host {
        RawRegion::host(addr, len)
    } else {
        RawRegion::device(addr, len)
    }
}

/// Packs a record copying `nbytes` bytes from byte `src_offset` of `src` to
/// byte `dst_offset` of `dst`, with every check of
/// `Record::from_raw_regions`; the record's bytes, or the `PackError`
/// variant's exception.
#[pyfunction]
pub(crate) fn pack_regions<'py>(
    py: Python<'py>,
    dst: Region,
    dst_offset: usize,
    src: Region,
    src_offset: usize,
    nbytes: usize,
) -> PyResult<Bound<'py, PyBytes>> {
    let dst = raw_region(dst, dst_offset, nbytes);
    let src = raw_region(src, src_offset, nbytes);
    // SAFETY: nothing runs the record here; it leaves as bytes, and the
    // Python API says that whoever launches it answers for the memory (the
    // buffers stay alive and unmoved until the host function has run).
    let packed = unsafe { Record::from_raw_regions(dst, dst_offset, src, src_offset, nbytes) };
    match packed {
        Ok(record) => Ok(PyBytes::new(py, &record.args().to_bytes())),
        Err(failure) => Err(pack_error(py, failure)?),
    }
}
