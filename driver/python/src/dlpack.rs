//! Reading a DLPack capsule (`__dlpack__()`'s result, unversioned
//! `"dltensor"`): where the tensor's bytes are, how many, on which device,
//! and whether they are one C-ordered run. The capsule is not consumed:
//! whoever holds it keeps the tensor alive, and its destructor releases
//! the tensor when it goes.

use core::ffi::{CStr, c_void};

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

/// `DLDevice`.
#[repr(C)]
struct DlDevice {
    device_type: i32,
    device_id: i32,
}

/// `DLDataType`.
#[repr(C)]
struct DlDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

/// `DLTensor`, the first member of `DLManagedTensor`.
#[repr(C)]
struct DlTensor {
    data: *mut c_void,
    device: DlDevice,
    ndim: i32,
    dtype: DlDataType,
    shape: *const i64,
    strides: *const i64,
    byte_offset: u64,
}

/// `(address, nbytes, device_type, device_id, c_contiguous)` of the tensor
/// in a `"dltensor"` capsule. `device_type` is DLPack's: 1 CPU, 2 CUDA,
/// 3 CUDA host (pinned), 13 CUDA managed.
#[pyfunction]
pub(crate) fn dlpack_region(
    capsule: &Bound<'_, PyAny>,
) -> PyResult<(usize, usize, i32, i32, bool)> {
    let capsule = capsule
        .cast::<PyCapsule>()
        .map_err(|_| PyTypeError::new_err("__dlpack__() did not return a capsule"))?;
    let name = capsule.name()?;
    // SAFETY: a capsule's name, when set, is a NUL-terminated string that
    // lives as long as the capsule.
    let name = name.map(|name| unsafe { name.as_cstr() });
    if name != Some(c"dltensor") {
        return Err(PyValueError::new_err(format!(
            "expected an unconsumed DLPack capsule named \"dltensor\", got {:?}",
            name.map(CStr::to_string_lossy)
        )));
    }
    let tensor = capsule.pointer_checked(Some(c"dltensor"))?;
    // SAFETY: a "dltensor" capsule points at a `DLManagedTensor`, whose
    // first member is the `DLTensor`; the producer keeps it alive while
    // the unconsumed capsule lives (we hold it).
    let tensor = unsafe { &*tensor.as_ptr().cast::<DlTensor>() };
    let ndim = usize::try_from(tensor.ndim).unwrap_or(0);
    let read = |ptr: *const i64| -> Vec<i64> {
        if ptr.is_null() || ndim == 0 {
            Vec::new()
        } else {
            // SAFETY: non-null shape and strides arrays have `ndim` entries.
            unsafe { core::slice::from_raw_parts(ptr, ndim) }.to_vec()
        }
    };
    let (shape, strides) = (read(tensor.shape), read(tensor.strides));
    let bits = usize::from(tensor.dtype.bits) * usize::from(tensor.dtype.lanes);
    if bits % 8 != 0 {
        return Err(PyValueError::new_err(format!(
            "a DLPack tensor of {}-bit elements (type code {}) is not whole bytes",
            tensor.dtype.bits, tensor.dtype.code
        )));
    }
    let item = bits / 8;
    let count = shape
        .iter()
        .try_fold(1usize, |count, &extent| {
            count.checked_mul(usize::try_from(extent).ok()?)
        })
        .ok_or_else(|| PyValueError::new_err(format!("a DLPack tensor of shape {shape:?}")))?;
    let nbytes = count
        .checked_mul(item)
        .ok_or_else(|| PyValueError::new_err("a DLPack tensor larger than memory"))?;
    // DLPack strides count elements; none means C order.
    let mut contiguous = true;
    if !strides.is_empty() && count > 0 {
        let mut expected = 1i64;
        for (&extent, &stride) in shape.iter().zip(&strides).rev() {
            if extent != 1 && stride != expected {
                contiguous = false;
            }
            expected = expected.saturating_mul(extent);
        }
    }
    let addr = (tensor.data as usize).wrapping_add(tensor.byte_offset as usize);
    Ok((
        addr,
        nbytes,
        tensor.device.device_type,
        tensor.device.device_id,
        contiguous,
    ))
}

/// Host memory a DLPack capsule describes (a CPU tensor), kept for a
/// transfer by holding the capsule.
#[pyfunction]
pub(crate) fn dlpack_host_memory(
    capsule: Bound<'_, PyAny>,
    addr: usize,
    len: usize,
) -> crate::buffer::HostMemory {
    crate::buffer::HostMemory::owned_by(addr, len, capsule.unbind())
}
