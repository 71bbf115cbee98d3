//! The address and length of a buffer-protocol object, with the checks a
//! record needs: C-contiguous, and writable for a destination.
//!
//! pyo3 withholds `PyObject_GetBuffer` from abi3 builds below Python 3.11,
//! where it is not yet part of the stable ABI. Every CPython 3 exports it
//! with the `Py_buffer` layout below (unchanged since 3.3, and frozen by the
//! stable ABI from 3.11 on), so it is declared here.

use core::ffi::{c_char, c_int, c_void};

use pyo3::exceptions::PyTypeError;

use crate::errors::{Class, error, refusal, wrong_type};
use pyo3::ffi;
use pyo3::prelude::*;

/// CPython's `Py_buffer`.
#[repr(C)]
struct PyBufferView {
    buf: *mut c_void,
    obj: *mut ffi::PyObject,
    len: isize,
    itemsize: isize,
    readonly: c_int,
    ndim: c_int,
    format: *mut c_char,
    shape: *mut isize,
    strides: *mut isize,
    suboffsets: *mut isize,
    internal: *mut c_void,
}

/// `PyBUF_FULL_RO`: strides, suboffsets and format, read-only accepted. The
/// widest request, so that every exporter answers and the checks below
/// (not the exporter's refusal) say what is wrong.
const PYBUF_FULL_RO: c_int = 0x100 | 0x10 | 0x08 | 0x04;

unsafe extern "C" {
    fn PyObject_GetBuffer(obj: *mut ffi::PyObject, view: *mut PyBufferView, flags: c_int) -> c_int;
    fn PyBuffer_Release(view: *mut PyBufferView);
}

/// An exported buffer, released on drop.
pub(crate) struct Export {
    /// Boxed before `PyObject_GetBuffer` fills it, and never moved after:
    /// exporters that fill the view with `PyBuffer_FillInfo` (`bytearray`,
    /// `bytes`, `mmap`) point its `shape` and `strides` at the view's own
    /// `len` and `itemsize`, so a view moved after the call (into a struct,
    /// out of a function, into a pyclass) reads them from where it used to
    /// be. The box keeps one address from the export to `PyBuffer_Release`,
    /// which CPython also expects to be given the view it filled.
    view: Box<PyBufferView>,
}

impl Export {
    pub(crate) fn new(obj: &Bound<'_, PyAny>) -> PyResult<Export> {
        // SAFETY: every field is an integer or a raw pointer, for which all
        // zero bytes are a valid value (0, null): a valid out-parameter. It
        // is moved into the box before the call, while nothing points into
        // it yet.
        let mut view: Box<PyBufferView> = Box::new(unsafe { core::mem::zeroed() });
        // SAFETY: `obj` is a live object (we hold the GIL and a reference);
        // `view` is a valid `Py_buffer` at the address it keeps until it is
        // dropped, after `PyBuffer_Release`; on success the view holds the
        // export until then.
        let status = unsafe { PyObject_GetBuffer(obj.as_ptr(), &mut *view, PYBUF_FULL_RO) };
        if status != 0 {
            return Err(PyErr::fetch(obj.py()));
        }
        Ok(Export { view })
    }

    /// `(shape, strides)` as Python sees them.
    pub(crate) fn layout(&self) -> (Vec<isize>, Vec<isize>) {
        let ndim = usize::try_from(self.view.ndim).unwrap_or(0);
        let read = |ptr: *mut isize| {
            if ptr.is_null() {
                Vec::new()
            } else {
                // SAFETY: a non-null shape or strides array has `ndim` entries.
                unsafe { core::slice::from_raw_parts(ptr, ndim) }.to_vec()
            }
        };
        (read(self.view.shape), read(self.view.strides))
    }

    /// The struct-module format of an item (`"B"` where the exporter gave none).
    pub(crate) fn format(&self) -> String {
        if self.view.format.is_null() {
            return "B".into();
        }
        // SAFETY: a non-null format is a NUL-terminated string owned by the
        // exporter for as long as the export lasts.
        unsafe { core::ffi::CStr::from_ptr(self.view.format) }
            .to_string_lossy()
            .into_owned()
    }

    /// Whether the bytes are one C-ordered run: no strides, or strides
    /// that a C array of this shape would have (dimensions of length 1
    /// may have any stride; an empty array is contiguous).
    fn is_c_contiguous(&self) -> bool {
        if !self.view.suboffsets.is_null() {
            return false;
        }
        let (shape, strides) = self.layout();
        if strides.is_empty() || shape.contains(&0) {
            return true;
        }
        let mut expected = self.view.itemsize;
        for (&extent, &stride) in shape.iter().zip(&strides).rev() {
            if extent != 1 && stride != expected {
                return false;
            }
            expected *= extent;
        }
        true
    }
}

impl Drop for Export {
    fn drop(&mut self) {
        // SAFETY: releases the export `new` made, once (`Drop` runs once).
        // `PyBuffer_Release` needs the GIL, and an `Export` is dropped only
        // where it is held: in `checked_export`'s error returns,
        // `buffer_region` and `crate::blocks` (called with the GIL), or, once it is
        // inside a `HostMemory` (which a `Transfer` may hold long after the
        // call returned), when that pyclass is deallocated, which Python
        // does with the GIL held. A `HostMemory` never gives its export out.
        unsafe { PyBuffer_Release(&mut *self.view) };
    }
}

/// Exports `obj`'s buffer with the checks a copy needs: C-contiguous, plain
/// bytes, and for a destination (`writable`) not read-only.
///
/// Raises `hostcopy.NotContiguous` or `hostcopy.ReadOnlyBuffer`, and
/// `hostcopy.ArgumentTypeError` for an object without the buffer protocol
/// (the exporter's own error as hostcopy's, `errors::refusal`, otherwise).
pub(crate) fn checked_export(
    obj: &Bound<'_, PyAny>,
    writable: bool,
    side: &str,
) -> PyResult<Export> {
    let py = obj.py();
    let export = match Export::new(obj) {
        Ok(export) => export,
        Err(failure) if failure.is_instance_of::<PyTypeError>(py) => {
            let message = format!(
                "{side}: expected a buffer (numpy, bytearray, memoryview, mmap, bytes as a \
                 source), a cuda.core Buffer or an int address, got {}",
                obj.get_type().name()?
            );
            let refused = wrong_type(side, obj, message);
            refused.set_cause(py, Some(failure));
            return Err(refused);
        }
        Err(failure) => return Err(refusal(py, failure, side, Some(obj))),
    };
    checked(obj, export, writable, side)
}

/// Whether a PEP 3118 buffer format holds object references (`O`), read
/// outside the field names, which a structured format encloses in colons
/// (numpy's `T{<i:Offset:}`).
fn holds_objects(format: &str) -> bool {
    format
        .split(':')
        .step_by(2)
        .any(|codes| codes.contains('O'))
}

/// `export`, of `obj`, if it passes [`checked_export`]'s checks.
fn checked(obj: &Bound<'_, PyAny>, export: Export, writable: bool, side: &str) -> PyResult<Export> {
    let view = &export.view;
    let format = export.format();
    if holds_objects(&format) {
        // Copying object pointers as bytes would skip their reference counts.
        return Err(wrong_type(
            side,
            obj,
            format!(
                "{side} holds Python object references (buffer format {format:?}): a copy moves plain bytes"
            ),
        ));
    }
    if !export.is_c_contiguous() {
        let (shape, strides) = export.layout();
        let message = if view.suboffsets.is_null() {
            format!(
                "{side} is strided (shape {shape:?}, strides {strides:?}, item size {}): a copy moves one contiguous run of bytes; pass a C-contiguous array (numpy.ascontiguousarray) or one copy per row",
                view.itemsize
            )
        } else {
            format!(
                "{side} uses indirect (suboffset) buffers: a copy moves one contiguous run of bytes"
            )
        };
        return Err(error(
            obj.py(),
            Class::NotContiguous,
            message,
            [
                ("side", side.into_pyobject(obj.py())?.into_any()),
                ("shape", shape.into_pyobject(obj.py())?.into_any()),
                ("strides", strides.into_pyobject(obj.py())?.into_any()),
            ],
        ));
    }
    if writable && view.readonly != 0 {
        let what = format!("a read-only buffer ({})", obj.get_type().name()?);
        let len = usize::try_from(view.len).unwrap_or(0);
        return Err(read_only(obj.py(), side, len, &what));
    }
    Ok(export)
}

/// `hostcopy.ReadOnlyBuffer` for a destination `side` of `len` bytes that
/// is `what` (a read-only buffer, a tensor marked read-only).
pub(crate) fn read_only(py: Python<'_>, side: &str, len: usize, what: &str) -> PyErr {
    let message = format!("{side} is {what} of {len} bytes: a destination must be writable");
    let fields = || -> PyResult<_> {
        Ok([
            ("side", side.into_pyobject(py)?.into_any()),
            ("len", len.into_pyobject(py)?.into_any()),
        ])
    };
    match fields() {
        Ok(fields) => error(py, Class::ReadOnlyBuffer, message, fields),
        Err(failure) => failure,
    }
}

impl Export {
    /// The address of the first byte and the length in bytes.
    pub(crate) fn range(&self) -> (usize, usize) {
        (
            self.view.buf as usize,
            usize::try_from(self.view.len).unwrap_or(0),
        )
    }

    /// The size in bytes of one item.
    pub(crate) fn itemsize(&self) -> usize {
        usize::try_from(self.view.itemsize).unwrap_or(0)
    }

    /// Whether the exporter uses indirect (suboffset) buffers.
    pub(crate) fn is_indirect(&self) -> bool {
        !self.view.suboffsets.is_null()
    }
}

/// `(address, length)` of a C-contiguous buffer-protocol object; for a
/// destination (`writable`) also refuses a read-only one. The export ends
/// on return: the caller keeps the object alive and unresized.
#[pyfunction]
pub(crate) fn buffer_region(
    obj: &Bound<'_, PyAny>,
    writable: bool,
    side: &str,
) -> PyResult<(usize, usize)> {
    Ok(checked_export(obj, writable, side)?.range())
}

/// Host memory a staged transfer reads or writes, held for as long as the
/// transfer may touch it: a buffer export (which also keeps a `bytearray`
/// from being resized meanwhile), or the object that owns memory described
/// another way (a DLPack capsule of a CPU tensor). Made for one side of
/// one transfer, with that side's checks (writable for a destination), by
/// the transfer's own call (`crate::sides`).
#[pyclass(module = "hostcopy._native", frozen)]
pub(crate) struct HostMemory {
    addr: usize,
    len: usize,
    /// Released on drop (with the GIL: a pyclass is dropped by Python).
    _export: Option<Export>,
    _owner: Option<Py<PyAny>>,
}

// SAFETY: an `Export` is only raw pointers into CPython's `Py_buffer`, which
// any thread may release as long as it holds the GIL; it is released only
// in `Drop`, and every drop happens with the GIL held (see `Drop for
// Export`), whichever thread that is.
unsafe impl Send for Export {}
// SAFETY: every `&self` method of `Export` (its range, format, layout,
// contiguity) only reads the `Py_buffer` fields, which the exporter keeps
// fixed for as long as the export lasts; nothing writes them through a
// shared reference, so reading them from two threads is no race.
unsafe impl Sync for Export {}

impl HostMemory {
    /// `(address, length)`.
    pub(crate) fn range(&self) -> hostcopy_driver::HostRange {
        hostcopy_driver::HostRange {
            addr: self.addr,
            len: self.len,
        }
    }

    /// Memory at `addr` that `owner` keeps allocated.
    pub(crate) fn owned_by(addr: usize, len: usize, owner: Py<PyAny>) -> HostMemory {
        HostMemory {
            addr,
            len,
            _export: None,
            _owner: Some(owner),
        }
    }
}

#[pymethods]
impl HostMemory {
    /// The length in bytes.
    fn __len__(&self) -> usize {
        self.len
    }
}

/// `obj`'s buffer, exported for a transfer (see [`HostMemory`]).
#[pyfunction]
pub(crate) fn host_memory(
    obj: &Bound<'_, PyAny>,
    writable: bool,
    side: &str,
) -> PyResult<HostMemory> {
    exported_host_memory(obj, Export::new(obj)?, writable, side)
}

/// The host memory of `export`, `obj`'s buffer, with the checks of
/// [`checked_export`].
pub(crate) fn exported_host_memory(
    obj: &Bound<'_, PyAny>,
    export: Export,
    writable: bool,
    side: &str,
) -> PyResult<HostMemory> {
    let export = checked(obj, export, writable, side)?;
    let (addr, len) = export.range();
    Ok(HostMemory {
        addr,
        len,
        _export: Some(export),
        _owner: None,
    })
}
