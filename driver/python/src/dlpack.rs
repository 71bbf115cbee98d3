//! Reading a DLPack capsule (`__dlpack__()`'s result, unversioned
//! `"dltensor"` or versioned `"dltensor_versioned"`): where the tensor's
//! bytes are, how many, on which device, whether they are one C-ordered
//! run, and (versioned only) whether the producer marked them read-only or
//! handed out a copy. Only a versioned capsule can prove a destination
//! writable: an unversioned one has no flags, so it is refused as one.
//! The capsule is not consumed: whoever holds it keeps the tensor alive,
//! and its destructor releases the tensor when it goes.

use core::ffi::{CStr, c_void};

use crate::errors::{Class, error, wrong_type, wrong_value};
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

/// `DLManagedTensorVersioned` (DLPack 1.0), up to its `DLTensor`.
#[repr(C)]
struct DlManagedTensorVersioned {
    /// `DLPackVersion`: `(major, minor)`.
    version: [u32; 2],
    /// Layout only: the producer's, for its deleter.
    #[allow(dead_code)]
    manager_ctx: *mut c_void,
    /// Layout only: the capsule's destructor calls it, not this module.
    #[allow(dead_code)]
    deleter: Option<unsafe extern "C" fn(*mut DlManagedTensorVersioned)>,
    flags: u64,
    dl_tensor: DlTensor,
}

// The header's layout on 64-bit targets (the only ones the driver builds for).
const _: () = assert!(core::mem::size_of::<DlTensor>() == 48);
const _: () = assert!(core::mem::offset_of!(DlTensor, byte_offset) == 40);
const _: () = assert!(core::mem::offset_of!(DlManagedTensorVersioned, flags) == 24);
const _: () = assert!(core::mem::offset_of!(DlManagedTensorVersioned, dl_tensor) == 32);

/// `DLPACK_FLAG_BITMASK_READ_ONLY`: the producer forbids writes.
const DLPACK_FLAG_BITMASK_READ_ONLY: u64 = 1;
/// `DLPACK_FLAG_BITMASK_IS_COPIED`: the tensor is a copy the producer made
/// for this export, so bytes written into it never reach the array.
const DLPACK_FLAG_BITMASK_IS_COPIED: u64 = 1 << 1;
/// The DLPack major version whose `DLManagedTensorVersioned` is read here.
const DLPACK_MAJOR_VERSION: u32 = 1;

/// DLPack device types: CPU, CUDA host (pinned).
const DL_CPU: i32 = 1;
const DL_CUDA_HOST: i32 = 3;

/// What a capsule says about its tensor.
struct Tensor {
    /// `data + byte_offset`.
    addr: usize,
    /// `shape` x item size.
    nbytes: usize,
    device_type: i32,
    device_id: i32,
    shape: Vec<i64>,
    strides: Vec<i64>,
    contiguous: bool,
    /// The `flags` of a versioned capsule; `None` for an unversioned one,
    /// which cannot say whether the tensor is read-only or a copy.
    flags: Option<u64>,
}

/// Reads the tensor of an unconsumed `"dltensor"` or `"dltensor_versioned"`
/// capsule given as `side`.
fn tensor_of(capsule: &Bound<'_, PyAny>, side: &str) -> PyResult<Tensor> {
    let py = capsule.py();
    let obj = capsule;
    let capsule = capsule.cast::<PyCapsule>().map_err(|_| {
        wrong_type(
            side,
            obj,
            format!("{side}: __dlpack__() did not return a capsule"),
        )
    })?;
    let name = capsule.name()?;
    // SAFETY: a capsule's name, when set, is a NUL-terminated string the
    // capsule's maker keeps; DLPack producers name theirs with static
    // strings, and no Python code (which could rename the capsule) runs
    // between here and the name's last use below.
    let name = name.map(|name| unsafe { name.as_cstr() });
    let (tensor, flags) = if name == Some(c"dltensor") {
        let tensor = capsule.pointer_checked(Some(c"dltensor"))?;
        // SAFETY: a "dltensor" capsule points at a `DLManagedTensor`, whose
        // first member is the `DLTensor`; the producer keeps it alive while
        // the unconsumed capsule lives (the caller holds it for this call).
        (unsafe { &*tensor.as_ptr().cast::<DlTensor>() }, None)
    } else if name == Some(c"dltensor_versioned") {
        let managed = capsule.pointer_checked(Some(c"dltensor_versioned"))?;
        // SAFETY: a "dltensor_versioned" capsule points at a
        // `DLManagedTensorVersioned`, alive while the unconsumed capsule
        // lives (as above). Its `version` member comes first in every major
        // version; the rest is read only once the major version is 1.
        let managed = unsafe { &*managed.as_ptr().cast::<DlManagedTensorVersioned>() };
        if managed.version[0] != DLPACK_MAJOR_VERSION {
            return Err(wrong_value(
                side,
                obj,
                format!(
                    "{side}: a DLPack {}.{} tensor: this reads major version {DLPACK_MAJOR_VERSION}",
                    managed.version[0], managed.version[1]
                ),
            ));
        }
        (&managed.dl_tensor, Some(managed.flags))
    } else {
        let message = format!(
            "{side}: expected an unconsumed DLPack capsule named \"dltensor\" or \"dltensor_versioned\", got {:?}",
            name.map(CStr::to_string_lossy)
        );
        return Err(wrong_value(side, obj, message));
    };
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
        let message = format!(
            "{side}: a DLPack tensor of {}-bit elements (type code {}) is not whole bytes",
            tensor.dtype.bits, tensor.dtype.code
        );
        return Err(wrong_value(side, obj, message));
    }
    let item = bits / 8;
    let count = shape
        .iter()
        .try_fold(1usize, |count, &extent| {
            count.checked_mul(usize::try_from(extent).ok()?)
        })
        .ok_or_else(|| {
            wrong_value(
                side,
                obj,
                format!("{side}: a DLPack tensor of shape {shape:?}"),
            )
        })?;
    let nbytes = count.checked_mul(item).ok_or_else(|| {
        wrong_value(
            side,
            obj,
            format!("{side}: a DLPack tensor larger than memory"),
        )
    })?;
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
    let addr = match usize::try_from(tensor.byte_offset)
        .ok()
        .and_then(|offset| (tensor.data as usize).checked_add(offset))
        .filter(|addr| addr.checked_add(nbytes).is_some())
    {
        Some(addr) => addr,
        None => {
            let message = format!(
                "{side}: a DLPack tensor at {:#x} + byte_offset {} of {nbytes} bytes passes the end of the address space",
                tensor.data as usize, tensor.byte_offset
            );
            return Err(error(
                py,
                Class::AddressOverflow,
                message,
                [
                    ("side", side.into_pyobject(py)?.into_any()),
                    ("addr", (tensor.data as usize).into_pyobject(py)?.into_any()),
                    ("nbytes", nbytes.into_pyobject(py)?.into_any()),
                ],
            ));
        }
    };
    if tensor.data.is_null() && nbytes > 0 {
        let message = format!("{side}: a DLPack tensor of {nbytes} bytes at a null data pointer");
        return Err(error(
            py,
            Class::NullWithLength,
            message,
            [
                ("side", side.into_pyobject(py)?.into_any()),
                ("nbytes", nbytes.into_pyobject(py)?.into_any()),
            ],
        ));
    }
    Ok(Tensor {
        addr,
        nbytes,
        device_type: tensor.device.device_type,
        device_id: tensor.device.device_id,
        shape,
        strides,
        contiguous,
        flags,
    })
}

/// `(address, nbytes, device_type, device_id, c_contiguous)` of the tensor
/// in a `"dltensor"` or `"dltensor_versioned"` capsule. `device_type` is
/// DLPack's: 1 CPU, 2 CUDA, 3 CUDA host (pinned), 13 CUDA managed. A
/// tensor past the end of the address space raises
/// `hostcopy.AddressOverflow`, one of bytes at a null pointer
/// `hostcopy.NullWithLength`, each naming `side`.
#[pyfunction]
#[pyo3(signature = (capsule, side="device"))]
pub(crate) fn dlpack_region(
    capsule: &Bound<'_, PyAny>,
    side: &str,
) -> PyResult<(usize, usize, i32, i32, bool)> {
    let tensor = tensor_of(capsule, side)?;
    Ok((
        tensor.addr,
        tensor.nbytes,
        tensor.device_type,
        tensor.device_id,
        tensor.contiguous,
    ))
}

/// The host memory a DLPack capsule of a CPU (or pinned) tensor describes,
/// kept for a transfer by holding the capsule. The address and length are
/// the capsule's own (`data + byte_offset`, shape x item size), never the
/// caller's. Refuses GPU memory (`hostcopy.ArgumentTypeError`), a strided tensor
/// (`hostcopy.NotContiguous`) and, for a destination (`writable`), any
/// tensor not proven writable (`hostcopy.ReadOnlyBuffer`): one whose
/// versioned capsule marks it read-only or a copy, and every unversioned
/// capsule (DLPack before 1.0 has no read-only flag, and immutable arrays,
/// jax's among them, export through it).
#[pyfunction]
pub(crate) fn dlpack_host_memory(
    capsule: Bound<'_, PyAny>,
    writable: bool,
    side: &str,
) -> PyResult<crate::buffer::HostMemory> {
    let py = capsule.py();
    let tensor = tensor_of(&capsule, side)?;
    if !matches!(tensor.device_type, DL_CPU | DL_CUDA_HOST) {
        let message = format!(
            "{side} is not host memory (DLPack device type {}, device {}); host memory is expected here",
            tensor.device_type, tensor.device_id
        );
        return Err(wrong_type(side, &capsule, message));
    }
    if !tensor.contiguous {
        let message = format!(
            "{side} is strided (shape {:?}, strides {:?} in elements): a transfer moves one contiguous run of bytes",
            tensor.shape, tensor.strides
        );
        return Err(error(
            py,
            Class::NotContiguous,
            message,
            [
                ("side", side.into_pyobject(py)?.into_any()),
                ("shape", tensor.shape.into_pyobject(py)?.into_any()),
                ("strides", tensor.strides.into_pyobject(py)?.into_any()),
            ],
        ));
    }
    if writable {
        let unproven = match tensor.flags {
            None => Some(
                "comes in an unversioned capsule (DLPack before 1.0), which cannot say whether it \
                 is read-only, so it is not proven writable: pass a writable buffer-protocol view \
                 of it (a torch CPU tensor's .numpy()) or use a producer of DLPack 1.0",
            ),
            Some(flags) if flags & DLPACK_FLAG_BITMASK_READ_ONLY != 0 => {
                Some("is marked read-only by its producer")
            }
            Some(flags) if flags & DLPACK_FLAG_BITMASK_IS_COPIED != 0 => Some(
                "is a copy its producer made for the export (DLPACK_FLAG_BITMASK_IS_COPIED): \
                 bytes written there would never reach the array",
            ),
            Some(_) => None,
        };
        if let Some(why) = unproven {
            let message = format!(
                "{side}, a DLPack tensor of {} bytes, {why}; a destination must be writable",
                tensor.nbytes
            );
            return Err(error(
                py,
                Class::ReadOnlyBuffer,
                message,
                [
                    ("side", side.into_pyobject(py)?.into_any()),
                    ("len", tensor.nbytes.into_pyobject(py)?.into_any()),
                ],
            ));
        }
    }
    Ok(crate::buffer::HostMemory::owned_by(
        tensor.addr,
        tensor.nbytes,
        capsule.unbind(),
    ))
}

/// Refuses a DLPack capsule of GPU memory as a destination where its
/// producer says it must not be written (`hostcopy.ReadOnlyBuffer`): a
/// versioned capsule marked read-only, or a copy made for the export
/// (whose bytes would never reach the array). An unversioned capsule has
/// no flags and is taken as the array's library exports it: torch and cupy
/// export writable device memory through it, and the one immutable GPU
/// array of note, jax's, is refused by name before its export.
pub(crate) fn dlpack_device_destination(capsule: &Bound<'_, PyAny>, side: &str) -> PyResult<()> {
    let py = capsule.py();
    let tensor = tensor_of(capsule, side)?;
    let why = match tensor.flags {
        Some(flags) if flags & DLPACK_FLAG_BITMASK_READ_ONLY != 0 => {
            "is marked read-only by its producer"
        }
        Some(flags) if flags & DLPACK_FLAG_BITMASK_IS_COPIED != 0 => {
            "is a copy its producer made for the export (DLPACK_FLAG_BITMASK_IS_COPIED): bytes \
             written there would never reach the array"
        }
        _ => return Ok(()),
    };
    Err(error(
        py,
        Class::ReadOnlyBuffer,
        format!(
            "{side}, a DLPack tensor of {} bytes of GPU memory, {why}; a destination must be writable",
            tensor.nbytes
        ),
        [
            ("side", side.into_pyobject(py)?.into_any()),
            ("len", tensor.nbytes.into_pyobject(py)?.into_any()),
        ],
    ))
}
