//! Packing through `hostcopy-driver`'s checks (its refusals mapped by
//! `crate::errors`).

use hostcopy_driver::{RawRegion, Record};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::pack_error;

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
        Err(failure) => Err(pack_error(py, failure)),
    }
}
