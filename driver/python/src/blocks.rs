//! The blocks of a batch (`copy_blocks_to_host`, `copy_blocks_to_device`),
//! recognised once, here: `(device_offset, host_offset, nbytes)` triples
//! given as
//!
//! - a sequence (any iterable but `str`, `bytes`, `bytearray`) of entries
//!   that are sequences of exactly three items (tuples, lists, numpy rows;
//!   not strings), each item an integer as `crate::integers::word` takes
//!   them (`int`, numpy integer scalars; not `bool`, `float` or `str`);
//! - or a buffer-protocol object of shape `(n, 3)` whose items are
//!   integers of 1, 2, 4 or 8 bytes, signed or not, in either byte order
//!   (numpy's `int8` to `int64` and `uint8` to `uint64`): read as they
//!   are, without a Python object per block. Any other item type (floats,
//!   `bool`, objects) is refused, never cast.
//!
//! A field that is negative or wider than a word raises
//! `hostcopy.IntegerOutOfRange` named `blocks[i].field`; anything else
//! that is not a block, `hostcopy.ArgumentTypeError` naming the block.

use crate::errors::{refusal, wrong_type};
use hostcopy_driver::cuda::staging::Block;
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyString};

use crate::buffer::Export;
use crate::integers::{out_of_range, word};

/// The fields of a block, in order.
const FIELDS: [&str; 3] = ["device_offset", "host_offset", "nbytes"];

const EXPECTED: &str = "expected (device_offset, host_offset, nbytes) triples \
     (a sequence of 3-item sequences, or an (n, 3) integer array)";

/// The blocks `blocks` describes, or the error that says which block and
/// field is wrong: a `hostcopy.Error` (what the table's own code, or
/// Python reading it, raised as hostcopy's: `errors::refusal`).
pub(crate) fn to_blocks(blocks: &Bound<'_, PyAny>) -> PyResult<Vec<Block>> {
    read_blocks(blocks).map_err(|failure| refusal(blocks.py(), failure, "blocks", Some(blocks)))
}

/// `ArgumentTypeError` for `blocks`, which are no triples.
fn not_triples(blocks: &Bound<'_, PyAny>) -> PyErr {
    let kind = blocks
        .get_type()
        .name()
        .map(|name| name.to_string())
        .unwrap_or_default();
    wrong_type("blocks", blocks, format!("blocks: {EXPECTED}, got {kind}"))
}

fn read_blocks(blocks: &Bound<'_, PyAny>) -> PyResult<Vec<Block>> {
    if is_text(blocks) {
        return Err(not_triples(blocks));
    }
    match Export::new(blocks) {
        Ok(export) => return from_array(blocks, &export),
        // No buffer protocol: a sequence, read below.
        Err(failure) if failure.is_instance_of::<PyTypeError>(blocks.py()) => {}
        Err(failure) => return Err(failure),
    }
    let entries = blocks.try_iter().map_err(|_| not_triples(blocks))?;
    let mut triples = Vec::new();
    for (index, entry) in entries.enumerate() {
        let entry = entry?;
        let fields = triple(&entry).ok_or_else(|| -> PyErr {
            let shown = entry.repr().map(|r| r.to_string()).unwrap_or_default();
            wrong_type(
                &format!("blocks[{index}]"),
                &entry,
                format!(
                    "blocks[{index}]: expected (device_offset, host_offset, nbytes), got {shown}"
                ),
            )
        })?;
        let mut words = [0usize; 3];
        for ((slot, field), value) in words.iter_mut().zip(FIELDS).zip(&fields) {
            *slot = word(value, || format!("blocks[{index}].{field}"))?;
        }
        triples.push(Block::new(words[0], words[1], words[2]));
    }
    Ok(triples)
}

/// `blocks` as [`to_blocks`] is to read it: a numpy array, or another
/// buffer with `tolist` (an `array.array`, a memoryview), as a fresh
/// C-ordered copy of its own dtype (`numpy.array` copies: no other thread
/// holds the copy, so none writes it while it is read; an integer dtype is
/// read as it is, any other refused by `to_blocks`, never cast; without
/// numpy, the buffer's `tolist()`); an array
/// of another library that numpy takes as an integer array (a CPU torch
/// tensor, a jax array: `__array__`) the same way, without a Python object
/// per block; other arrays (a CUDA tensor, a cupy array, which refuse
/// `__array__`) as their `tolist()`; anything else as it is.
pub(crate) fn private_table<'py>(blocks: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    read_table(blocks).map_err(|failure| refusal(blocks.py(), failure, "blocks", Some(blocks)))
}

fn read_table<'py>(blocks: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let py = blocks.py();
    let numpy = crate::sides::modules(py)?.get_item("numpy")?;
    let c_ordered = |array: &Bound<'py, PyAny>, numpy: &Bound<'py, PyAny>| {
        let order = PyDict::new(py);
        order.set_item("order", "C")?;
        numpy.call_method("array", (array,), Some(&order))
    };
    if let Some(numpy) = &numpy
        && blocks.is_instance(&numpy.getattr("ndarray")?)?
    {
        let dtype = blocks.getattr("dtype")?;
        if matches!(
            dtype.getattr("kind")?.extract::<String>()?.as_str(),
            "M" | "m"
        ) {
            // numpy exports no buffer of datetime64 or timedelta64 (its
            // ValueError would say nothing of blocks): refused here, as
            // `to_blocks` refuses every other non-integer dtype.
            let message = format!(
                "blocks: an array of dtype {}: blocks are integers (int8 to int64, uint8 to \
                 uint64), and other dtypes are refused, not cast",
                dtype.str()?
            );
            return Err(wrong_type("blocks", blocks, message));
        }
        return c_ordered(blocks, numpy);
    }
    if let Some(numpy) = &numpy
        && blocks.is_instance(&numpy.getattr("generic")?)?
    {
        // A numpy scalar (a `datetime64`, whose export numpy refuses with
        // a `ValueError`, an `int64`): one number, no table.
        return Err(not_triples(blocks));
    }
    if !blocks.hasattr("tolist")? {
        return Ok(blocks.clone());
    }
    match Export::new(blocks) {
        // A buffer (an array.array, a memoryview): a copy of it, numpy's
        // (of the buffer's format) or its `tolist()`, as the memory it
        // views may be written by another thread meanwhile.
        Ok(export) => {
            drop(export);
            return match &numpy {
                Some(numpy) => c_ordered(blocks, numpy),
                None => blocks.call_method0("tolist"),
            };
        }
        Err(failure) if failure.is_instance_of::<PyTypeError>(py) => {}
        Err(failure) => return Err(failure),
    }
    if let Some(numpy) = &numpy
        && blocks.hasattr("__array__")?
    {
        match numpy.call_method1("asarray", (blocks,)) {
            Ok(array) => {
                let kind = array
                    .getattr("dtype")?
                    .getattr("kind")?
                    .extract::<String>()?;
                if matches!(kind.as_str(), "i" | "u") {
                    return c_ordered(&array, numpy);
                }
            }
            // Refused (a device array): its tolist().
            Err(failure)
                if failure.is_instance_of::<PyTypeError>(py)
                    || failure.is_instance_of::<PyValueError>(py)
                    || failure.is_instance_of::<PyRuntimeError>(py) => {}
            Err(failure) => return Err(failure),
        }
    }
    blocks.call_method0("tolist")
}

/// `str`, `bytes` and `bytearray`: sequences, but never of blocks (`"123"`
/// is no block `(1, 2, 3)`).
fn is_text(obj: &Bound<'_, PyAny>) -> bool {
    obj.is_instance_of::<PyString>()
        || obj.is_instance_of::<PyBytes>()
        || obj.is_instance_of::<PyByteArray>()
}

/// The three items of a block entry: a sequence (`PySequence_Check`, which
/// numpy rows pass and mappings do not) of length 3 that is not text.
fn triple<'py>(entry: &Bound<'py, PyAny>) -> Option<[Bound<'py, PyAny>; 3]> {
    // SAFETY: `entry` is a live object and the GIL is held;
    // `PySequence_Check` cannot fail.
    let sequence = unsafe { ffi::PySequence_Check(entry.as_ptr()) } == 1;
    if !sequence || is_text(entry) || entry.len().ok()? != 3 {
        return None;
    }
    Some([
        entry.get_item(0).ok()?,
        entry.get_item(1).ok()?,
        entry.get_item(2).ok()?,
    ])
}

/// An item type of the struct module's syntax as blocks take it: whether
/// it is signed and whether it is stored big-endian.
fn integer_format(format: &str) -> Option<(bool, bool)> {
    let (big_endian, code) = match format.as_bytes() {
        [b'<', code] => (false, *code),
        [b'>' | b'!', code] => (true, *code),
        [b'@' | b'=', code] | [code] => (cfg!(target_endian = "big"), *code),
        _ => return None,
    };
    match code {
        b'b' | b'h' | b'i' | b'l' | b'q' | b'n' => Some((true, big_endian)),
        b'B' | b'H' | b'I' | b'L' | b'Q' | b'N' => Some((false, big_endian)),
        _ => None,
    }
}

/// The numpy name of a refused item type, for the error (a buffer export
/// gives only the struct module's code): `d` is `float64`, `?` `bool`, `O`
/// `object`; a code numpy has no name for is shown as it is.
fn dtype_name(format: &str) -> String {
    let code = format.trim_start_matches(['@', '=', '<', '>', '!']);
    let name = match code {
        "?" => "bool",
        "e" => "float16",
        "f" => "float32",
        "d" => "float64",
        "g" => "longdouble",
        "Zf" => "complex64",
        "Zd" => "complex128",
        "Zg" => "clongdouble",
        "O" => "object",
        code if code.ends_with('s') => "bytes",
        code if code.ends_with('w') => "str",
        _ => return format!("{format:?}"),
    };
    name.into()
}

/// The integer of `N` bytes at `at`, stored big-endian or not, signed or
/// not, widened. Sized at compile time: a block table of 64 Ki rows reads
/// in a fraction of a millisecond, not milliseconds.
///
/// # Safety
///
/// `at` is readable for `N` bytes (any alignment).
unsafe fn integer<const N: usize>(at: *const u8, signed: bool, big_endian: bool) -> i128 {
    // SAFETY: readable for `N` bytes (our caller); unaligned read.
    let mut stored = unsafe { at.cast::<[u8; N]>().read_unaligned() };
    if big_endian {
        stored.reverse();
    }
    let negative = signed && stored[N - 1] & 0x80 != 0;
    let mut wide = if negative { [0xFF; 16] } else { [0; 16] };
    wide[..N].copy_from_slice(&stored);
    i128::from_le_bytes(wide)
}

/// The blocks of an `(n, 3)` integer buffer, `blocks`'s.
fn from_array(blocks: &Bound<'_, PyAny>, export: &Export) -> PyResult<Vec<Block>> {
    let py = blocks.py();
    let (shape, strides) = export.layout();
    let format = export.format();
    let item = export.itemsize();
    let [rows, 3] = shape[..] else {
        let message = format!("blocks: {EXPECTED}, got an array of shape {shape:?}");
        return Err(wrong_type("blocks", blocks, message));
    };
    let Some((signed, big_endian)) =
        integer_format(&format).filter(|_| matches!(item, 1 | 2 | 4 | 8))
    else {
        let message = format!(
            "blocks: an (n, 3) array of dtype {} (item type {format:?}, {item} bytes): blocks are \
             integers (int8 to int64, uint8 to uint64), and other dtypes are refused, not cast",
            dtype_name(&format)
        );
        return Err(wrong_type("blocks", blocks, message));
    };
    if export.is_indirect() {
        return Err(wrong_type(
            "blocks",
            blocks,
            "blocks: an array of indirect (suboffset) buffers".into(),
        ));
    }
    let item_stride = isize::try_from(item).unwrap_or(isize::MAX);
    let (row_stride, column_stride) = match strides[..] {
        [row, column] => (row, column),
        _ => (3 * item_stride, item_stride),
    };
    let (base, _) = export.range();
    let rows = usize::try_from(rows).unwrap_or(0);
    // Each item is read once, here, and only the copy is checked and used:
    // what the stager checks is what it queues.
    let mut blocks = Vec::with_capacity(rows);
    for index in 0..rows {
        let mut words = [0usize; 3];
        for (column, (slot, field)) in words.iter_mut().zip(FIELDS).enumerate() {
            // `index < shape[0]`, `column < 3`: an item of the export, whose
            // offset the exporter's strides give.
            let offset = isize::try_from(index).unwrap_or(isize::MAX) * row_stride
                + isize::try_from(column).unwrap_or(isize::MAX) * column_stride;
            let at = core::ptr::with_exposed_provenance::<u8>(base.wrapping_add_signed(offset));
            // SAFETY: `at` is the first of the `item` bytes of one item of
            // the export, which the caller holds for this call; read
            // unaligned, so any alignment does. The GIL does not stop
            // another thread writing the memory (native code that released
            // it may); the transfer entry passes a fresh private copy of
            // a numpy array, an `array.array` or a memoryview
            // ([`private_table`]), so no other code holds that. A buffer
            // of another exporter (no `tolist`) is read in place: its
            // memory written meanwhile makes this a data race, which Rust
            // does not define; on the machine, a
            // racing write can only tear the plain bytes read here, and
            // every value is range-checked after the read (below, and by
            // the stager for the batch), so a torn block is refused or
            // copies bytes inside both memories. (`item` is 1, 2, 4 or 8,
            // checked above.)
            let value = unsafe {
                match item {
                    1 => integer::<1>(at, signed, big_endian),
                    2 => integer::<2>(at, signed, big_endian),
                    4 => integer::<4>(at, signed, big_endian),
                    _ => integer::<8>(at, signed, big_endian),
                }
            };
            *slot = match usize::try_from(value) {
                Ok(word) => word,
                Err(_) => {
                    let name = format!("blocks[{index}].{field}");
                    return Err(out_of_range(
                        py,
                        &name,
                        value.into_pyobject(py)?.into_any(),
                    )?);
                }
            };
        }
        blocks.push(Block::new(words[0], words[1], words[2]));
    }
    Ok(blocks)
}
