//! A transfer's arguments as Python gives them, recognised once, here: the
//! stream it is ordered on, its device side and its host side, and for a
//! `blocking=False` transfer the host memory it cannot hold.
//!
//! - **Stream**: a torch or cupy stream (`.cuda_stream`, `.ptr`), a
//!   cuda.core `Stream` (`__cuda_stream__`), a cuda.bindings `CUstream`,
//!   an object with a `.handle` of those, or an int handle; none (or 0) is
//!   1, the legacy default stream.
//! - **Device side**: a plain CUDA torch tensor, read from its attributes
//!   (no DLPack export); a cuda.core `Buffer` (told by its type); anything
//!   with `__dlpack__` (exported for the transfer's stream); anything with
//!   `__cuda_array_interface__`. Host memory there is `NotDeviceMemory`, a
//!   jax array as a destination a `hostcopy.ArgumentTypeError`.
//!
//! Every refusal is a `hostcopy.Error`: what an argument's own code, or
//! Python reading it, raises is mapped to hostcopy's, naming the argument
//! ([`read`], `errors::refusal`).
//! - **Host side**: the buffer protocol, or a CPU tensor through DLPack.
//!
//! Every Python object is looked at as the package's Python code would:
//! attributes read with `getattr`'s default where one may be missing, an
//! array library found in `sys.modules`, never imported.

use hostcopy_driver::cuda::{CUdeviceptr, CUstream, Context, DeviceView, StreamRef};
use pyo3::exceptions::{PyAttributeError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{
    PyBool, PyBytes, PyDict, PyFloat, PyInt, PyMemoryView, PySlice, PyString, PyTuple, PyType,
};

use crate::buffer::{Export, HostMemory, buffer_region, exported_host_memory};
use crate::dlpack::{dlpack_device_destination, dlpack_host_memory, dlpack_region};
use crate::errors::{Class, error, layer_error, refusal, wrong_state, wrong_type, wrong_value};
use crate::integers::{out_of_range, word};
use crate::life;

/// DLPack device types: CPU, CUDA, CUDA host (pinned), CUDA managed.
const DL_CPU: i64 = 1;
const DL_CUDA: i64 = 2;
const DL_CUDA_HOST: i64 = 3;
const DL_CUDA_MANAGED: i64 = 13;

/// How many owners deep the `blocking=False` check follows host memory
/// (a numpy array's `.base`, a memoryview's `.obj`), and how many
/// `.handle`s deep a stream is looked for.
const DEPTH: usize = 64;

/// Where a device array's bytes are, what keeps them, and the streams a
/// transfer waits for first.
pub(crate) struct DeviceSide {
    pub(crate) ptr: CUdeviceptr,
    pub(crate) nbytes: usize,
    pub(crate) owner: Py<PyAny>,
    pub(crate) wait_for: Vec<usize>,
    /// The device holding the bytes, where the array said so as it was
    /// read (a torch tensor's device, a DLPack capsule's).
    ordinal: Ordinal,
}

/// What reading a device side told of its device.
enum Ordinal {
    /// The array said which device holds it.
    Known(usize),
    /// A cuda.core `Buffer`: its `device_id`, read only where the device
    /// is wanted (a property that may call the driver, and that older
    /// cuda.core refuses for a `Buffer` with no memory resource).
    Buffer,
    /// Only the driver can say, for the pointer.
    Ask,
}

impl DeviceSide {
    /// The ordinal of the device holding the bytes, as `device_of` gives
    /// it for the same memory: what the module's copies look their default
    /// stager up by, read with the side rather than before it.
    pub(crate) fn ordinal<'py>(&self, py: Python<'py>, side: &str) -> PyResult<Bound<'py, PyAny>> {
        let told = match self.ordinal {
            Ordinal::Known(ordinal) => Some(ordinal),
            // A `device_id` that is no ordinal, or that its property
            // refuses, leaves it to the driver.
            Ordinal::Buffer => attribute(self.owner.bind(py), "device_id")
                .ok()
                .flatten()
                .filter(|id| id.is_instance_of::<PyInt>())
                .and_then(|id| id.extract().ok()),
            Ordinal::Ask => None,
        };
        match told {
            Some(ordinal) => Ok(ordinal.into_pyobject(py)?.into_any()),
            None => device_holding(&(self.ptr as usize).into_pyobject(py)?.into_any(), side),
        }
    }
}

/// Both sides of a transfer and the stream it is ordered on.
pub(crate) struct Sides<'py> {
    pub(crate) device: DeviceSide,
    pub(crate) host: Bound<'py, HostMemory>,
    pub(crate) consumer: usize,
}

/// What every transfer reads, in this order (its caller has refused the
/// call in a forked child or at exit, before any of it): for
/// `blocking=False`, whether the host side is memory the transfer can
/// hold, before anything is exported; the stream; the device side; the
/// host side (`to_device`: `dst` is the device side).
pub(crate) fn read<'py>(
    dst: &Bound<'py, PyAny>,
    src: &Bound<'py, PyAny>,
    to_device: bool,
    stream: Option<&Bound<'py, PyAny>>,
    blocking: bool,
) -> PyResult<Sides<'py>> {
    let py = dst.py();
    let ((device, device_name), (host, host_name)) = if to_device {
        ((dst, "dst"), (src, "src"))
    } else {
        ((src, "src"), (dst, "dst"))
    };
    // Each argument's errors as hostcopy's, naming it (`errors::refusal`:
    // what an argument's own code, or Python reading it, raised).
    if !blocking {
        refuse_memory_not_held(host, host_name).map_err(named(py, host_name, Some(host)))?;
    }
    let consumer = consumer_stream(stream).map_err(named(py, "stream", stream))?;
    let device = device_side(device, device_name, to_device, consumer).map_err(named(
        py,
        device_name,
        Some(device),
    ))?;
    let host = host_side(host, host_name, !to_device).map_err(named(py, host_name, Some(host)))?;
    let host = Bound::new(py, host)?;
    Ok(Sides {
        device,
        host,
        consumer,
    })
}

/// An error of reading the argument `argument` (`value`) as hostcopy's
/// (`errors::refusal`).
fn named<'a, 'py>(
    py: Python<'py>,
    argument: &'a str,
    value: Option<&'a Bound<'py, PyAny>>,
) -> impl FnOnce(PyErr) -> PyErr + 'a {
    move |failure| refusal(py, failure, argument, value)
}

/// `getattr(obj, name, None)`: `None` where `obj` has no such attribute
/// (or it is `None`); any other error of the lookup is raised.
fn attribute<'py>(obj: &Bound<'py, PyAny>, name: &str) -> PyResult<Option<Bound<'py, PyAny>>> {
    match obj.getattr(name) {
        Ok(value) if value.is_none() => Ok(None),
        Ok(value) => Ok(Some(value)),
        Err(failure) if failure.is_instance_of::<PyAttributeError>(obj.py()) => Ok(None),
        Err(failure) => Err(failure),
    }
}

/// `sys.modules`, read from the `sys` module's attribute without importing
/// `sys` (an import goes through the import machinery: microseconds that
/// every transfer would pay several times over).
pub(crate) fn modules(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    // SAFETY: the GIL is held (`py`); `PySys_GetObject` takes a
    // NUL-terminated name and returns a borrowed reference to the attribute
    // (null, with no exception set, where there is none), of which
    // `from_borrowed_ptr_or_opt` takes a reference of its own.
    let modules = unsafe {
        Bound::from_borrowed_ptr_or_opt(py, pyo3::ffi::PySys_GetObject(c"modules".as_ptr()))
    };
    let modules = modules.ok_or_else(|| PyRuntimeError::new_err("sys.modules is not set"))?;
    Ok(modules.cast_into::<PyDict>()?)
}

/// The module `name` if something imported it (`sys.modules`).
fn loaded<'py>(py: Python<'py>, name: &str) -> PyResult<Option<Bound<'py, PyAny>>> {
    modules(py)?.get_item(name)
}

/// `type(obj).__name__`.
fn type_name(obj: &Bound<'_, PyAny>) -> PyResult<String> {
    Ok(obj.get_type().name()?.to_string())
}

/// The top-level package of `type(obj).__module__` (`"torch"` for
/// `torch.nn.Parameter`); empty where the type says none.
fn library_of(obj: &Bound<'_, PyAny>) -> String {
    let module = obj
        .get_type()
        .getattr("__module__")
        .and_then(|module| module.extract::<String>())
        .unwrap_or_default();
    module.split('.').next().unwrap_or_default().to_owned()
}

/// `int(value)` as the integer type `T`.
fn int_of<'py, T: FromPyObjectOwned<'py>>(value: &Bound<'py, PyAny>) -> PyResult<T> {
    value
        .py()
        .get_type::<PyInt>()
        .call1((value,))?
        .extract()
        .map_err(Into::into)
}

/// `int(value)` as a native word (a pointer, a length, a stream handle):
/// `IntegerOutOfRange` named `name` outside `0..=usize::MAX`,
/// `ArgumentTypeError` for a bool or a float (which `int()` would take, or
/// cut), and what `int()` raises as hostcopy's (`errors::refusal`).
pub(crate) fn word_of(value: &Bound<'_, PyAny>, name: &str) -> PyResult<usize> {
    let py = value.py();
    if value.is_instance_of::<PyBool>()
        || value.is_instance_of::<PyFloat>()
        || value.is_instance_of::<PyString>()
        || value.is_instance_of::<PyBytes>()
    {
        return Err(wrong_type(
            name,
            value,
            format!("{name} must be an integer, not {}", type_name(value)?),
        ));
    }
    let int = py
        .get_type::<PyInt>()
        .call1((value,))
        .map_err(|failure| refusal(py, failure, name, Some(value)))?;
    match int.extract::<usize>() {
        Ok(word) => Ok(word),
        Err(_) => Err(out_of_range(value.py(), name, int)?),
    }
}

/// The two items of a pair a protocol returns (a tuple, or any sequence
/// of two, as Python's unpacking takes it), or `ArgumentTypeError` for
/// the argument `argument`, naming `what`.
fn two<'py>(
    value: &Bound<'py, PyAny>,
    argument: &str,
    what: &str,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
    let items = value
        .try_iter()
        .and_then(|items| items.collect::<PyResult<Vec<_>>>())
        .ok()
        .filter(|items| items.len() == 2);
    match items.map(<[_; 2]>::try_from) {
        Some(Ok([first, second])) => Ok((first, second)),
        _ => Err(wrong_type(
            argument,
            value,
            format!("{argument}: {what}: expected a pair, got {}", value.repr()?),
        )),
    }
}

/// `torch.Tensor`, if torch is loaded.
fn torch_tensor(py: Python<'_>) -> PyResult<Option<Bound<'_, PyType>>> {
    let Some(torch) = loaded(py, "torch")? else {
        return Ok(None);
    };
    Ok(attribute(&torch, "Tensor")?.and_then(|tensor| tensor.cast_into::<PyType>().ok()))
}

/// The stream handle a transfer is ordered on: 1 (the legacy default
/// stream) for none, and for 0, which names the same stream.
pub(crate) fn consumer_stream(stream: Option<&Bound<'_, PyAny>>) -> PyResult<usize> {
    let handle = match stream {
        None => 0,
        Some(stream) => stream_handle(stream)?,
    };
    Ok(if handle == 0 { 1 } else { handle })
}

/// A torch or cupy stream (`.cuda_stream`, `.ptr`), or what
/// [`protocol_stream_handle`] reads.
fn stream_handle(stream: &Bound<'_, PyAny>) -> PyResult<usize> {
    if !stream.is_instance_of::<PyInt>() {
        for name in ["cuda_stream", "ptr"] {
            if let Some(value) = attribute(stream, name)?
                && value.is_instance_of::<PyInt>()
                && !value.is_instance_of::<PyBool>()
            {
                return word_of(&value, "stream");
            }
        }
    }
    protocol_stream_handle(stream)
}

/// The launch functions' reading of a stream:
/// a cuda.core `Stream` (`__cuda_stream__`), a cuda.bindings `CUstream`,
/// an object with a `.handle` of those, or an int handle.
pub(crate) fn protocol_stream_handle(stream: &Bound<'_, PyAny>) -> PyResult<usize> {
    let mut stream = stream.clone();
    for _ in 0..DEPTH {
        let is_int = stream.is_instance_of::<PyInt>();
        if !is_int && let Some(protocol) = attribute(&stream, "__cuda_stream__")? {
            let pair = if protocol.is_callable() {
                protocol.call0()?
            } else {
                protocol
            };
            let (_version, handle) = two(&pair, "stream", "__cuda_stream__()")?;
            return word_of(&handle, "stream");
        }
        let cu_stream = type_name(&stream)? == "CUstream";
        if !is_int && !cu_stream && stream.hasattr("handle")? {
            stream = stream.getattr("handle")?;
            continue;
        }
        if stream.is_instance_of::<PyBool>() {
            return Err(wrong_type(
                "stream",
                &stream,
                "stream must be a handle, not bool".into(),
            ));
        }
        if is_int || cu_stream {
            return word_of(&stream, "stream");
        }
        let message = format!(
            "stream: expected a cuda.bindings CUstream or an int handle, got {}",
            type_name(&stream)?
        );
        return Err(wrong_type("stream", &stream, message));
    }
    let message = format!("stream: no handle found {DEPTH} .handle attributes deep");
    Err(wrong_type("stream", &stream, message))
}

/// A torch tensor, of a subclass defined anywhere.
fn is_torch_tensor(obj: &Bound<'_, PyAny>, tensor: Option<&Bound<'_, PyType>>) -> PyResult<bool> {
    if let Some(tensor) = tensor
        && obj.is_instance(tensor)?
    {
        return Ok(true);
    }
    Ok(library_of(obj) == "torch" && obj.hasattr("untyped_storage")?)
}

/// Refuses, for a `blocking=False` transfer, host memory whose owner can
/// free it while the transfer holds the object (`MemoryNotHeld`): a torch
/// tensor (of any subclass), reached directly or as the owner of a numpy
/// array or memoryview over it (through `.base` and `.obj`, and an
/// array-interface wrapper's `.base`, as `as_strided` makes), and memory
/// numpy borrowed through a DLPack capsule (whose producer may be torch).
/// Measured with torch 2.11 (bench/torch_storage_probe.py): a live capsule
/// of a CPU tensor keeps none of its memory across `resize_` (grow),
/// `set_`, `.data =`, `share_memory_` or a resizing `out=`.
fn refuse_memory_not_held(obj: &Bound<'_, PyAny>, side: &str) -> PyResult<()> {
    let py = obj.py();
    let ndarray = match loaded(py, "numpy")? {
        Some(numpy) => Some(numpy.getattr("ndarray")?),
        None => None,
    };
    let tensor = torch_tensor(py)?;
    let mut link = obj.clone();
    for _ in 0..DEPTH {
        if link.is_none() {
            return Ok(());
        }
        if is_torch_tensor(&link, tensor.as_ref())? {
            let owner = if link.is(obj) {
                String::new()
            } else {
                format!(" (the owner of this {})", type_name(obj)?)
            };
            let message = format!(
                "{side} is a torch tensor{owner}: torch frees a tensor's memory under any reference to it \
                 when it is resized or given other storage (resize_(), set_(), share_memory_(), t.data = ..., \
                 an out= of another shape), so a blocking=False transfer cannot keep it for its copies. \
                 Copy with blocking=True (the GIL is released: in asyncio, asyncio.to_thread), or keep the \
                 host memory in numpy (a = numpy.empty(n, numpy.uint8); t = torch.from_numpy(a)) and pass a"
            );
            return Err(memory_not_held(py, message, side));
        }
        if type_name(&link)? == "PyCapsule" {
            let message = format!(
                "{side} is a numpy array over a DLPack export (numpy.from_dlpack): its producer (torch, for \
                 one) can free the memory while the array is alive, so a blocking=False transfer cannot keep \
                 it for its copies. Copy with blocking=True, or pass memory numpy owns"
            );
            return Err(memory_not_held(py, message, side));
        }
        let is_ndarray = match &ndarray {
            Some(ndarray) => link.is_instance(ndarray)?,
            None => false,
        };
        link = if is_ndarray {
            link.getattr("base")?
        } else if link.is_instance_of::<PyMemoryView>() {
            link.getattr("obj")?
        } else if link.hasattr("__array_interface__")? && link.hasattr("base")? {
            // numpy's as_strided wraps its input so.
            link.getattr("base")?
        } else {
            return Ok(());
        };
    }
    Ok(())
}

fn memory_not_held(py: Python<'_>, message: String, side: &str) -> PyErr {
    match side.into_pyobject(py) {
        Ok(side) => error(
            py,
            Class::MemoryNotHeld,
            message,
            [("side", side.into_any())],
        ),
        Err(failure) => failure.into(),
    }
}

/// `hostcopy.NotDeviceMemory` for host memory given where GPU memory is
/// expected: a DLPack array of a host device type (`device_type`: a CPU
/// tensor, a numpy array, pinned memory) or a buffer-protocol object
/// (`None`), with its address where it can be read.
pub(crate) fn not_device_memory(
    obj: &Bound<'_, PyAny>,
    side: &str,
    device_type: Option<i64>,
) -> PyResult<PyErr> {
    let py = obj.py();
    let read = || -> PyResult<usize> {
        Ok(match device_type {
            None => buffer_region(obj, false, side)?.0,
            Some(_) => dlpack_region(&obj.call_method0("__dlpack__")?, "device")?.0,
        })
    };
    // The address is only for the message: a strided array has one too.
    let addr = read().ok();
    let what = match (device_type, addr) {
        (Some(device_type), _) => format!("DLPack device type {device_type}"),
        (None, Some(_)) => format!("a {}, host memory", type_name(obj)?),
        (None, None) => format!("a {}", type_name(obj)?),
    };
    Ok(error(
        py,
        Class::NotDeviceMemory,
        format!("{side} is not GPU memory ({what}): pass host arrays as the other side"),
        [
            ("side", side.into_pyobject(py)?.into_any()),
            ("addr", addr.unwrap_or(0).into_pyobject(py)?.into_any()),
        ],
    ))
}

/// [`not_device_memory`] as the package's Python code raises it (choosing
/// a device's stager): the exception, not raised.
#[pyfunction]
#[pyo3(name = "not_device_memory", signature = (obj, side, device_type=None))]
pub(crate) fn py_not_device_memory<'py>(
    obj: &Bound<'py, PyAny>,
    side: &str,
    device_type: Option<i64>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = obj.py();
    Ok(not_device_memory(obj, side, device_type)?
        .into_value(py)
        .into_bound(py)
        .into_any())
}

/// jax arrays are immutable, on any device, but their unversioned DLPack
/// capsules cannot say so: they are told by their type, for the message
/// (an unversioned host capsule is refused as a destination anyway,
/// `crate::dlpack`; a jax device array has no other guard).
fn refuse_jax_destination(obj: &Bound<'_, PyAny>, side: &str) -> PyResult<()> {
    if matches!(library_of(obj).as_str(), "jax" | "jaxlib") {
        return Err(wrong_type(
            side,
            obj,
            format!(
                "{side} is a jax array: jax arrays are immutable, so they cannot be a destination"
            ),
        ));
    }
    Ok(())
}

/// `obj`'s DLPack device type, if it has `__dlpack__` and
/// `__dlpack_device__`, given as the argument `side`: a pair whose first
/// item is an integer (`ArgumentTypeError` otherwise).
fn dlpack_device_type(obj: &Bound<'_, PyAny>, side: &str) -> PyResult<Option<i64>> {
    if !(obj.hasattr("__dlpack__")? && obj.hasattr("__dlpack_device__")?) {
        return Ok(None);
    }
    let device = obj.call_method0("__dlpack_device__")?;
    let (device_type, _device_id) = two(&device, side, "__dlpack_device__()")?;
    let device_type = word(&device_type, || format!("{side}.__dlpack_device__()[0]"))?;
    Ok(Some(i64::try_from(device_type).unwrap_or(i64::MAX)))
}

/// `obj.__dlpack__(**kwargs, max_version=(1, 0))`, or without
/// `max_version` for producers older than DLPack 1.0, which refuse it
/// (`TypeError`): a versioned capsule can say whether the tensor may be
/// written.
fn export_dlpack<'py>(
    obj: &Bound<'py, PyAny>,
    kwargs: &Bound<'py, PyDict>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = obj.py();
    let versioned = kwargs.copy()?;
    versioned.set_item("max_version", (1, 0))?;
    match obj.call_method("__dlpack__", (), Some(&versioned)) {
        Err(failure) if failure.is_instance_of::<PyTypeError>(py) => {
            obj.call_method("__dlpack__", (), Some(kwargs))
        }
        exported => exported,
    }
}

/// `NotContiguous` for a strided device side of `shape` and `strides`.
fn not_contiguous(
    py: Python<'_>,
    side: &str,
    shape: Bound<'_, PyTuple>,
    strides: Bound<'_, PyAny>,
) -> PyResult<PyErr> {
    Ok(error(
        py,
        Class::NotContiguous,
        format!(
            "{side} is strided (shape {}, strides {}): a transfer moves one contiguous run of bytes",
            shape.repr()?,
            strides.str()?
        ),
        [
            ("side", side.into_pyobject(py)?.into_any()),
            ("shape", shape.into_any()),
            ("strides", strides),
        ],
    ))
}

/// Whether the stream `handle` (a library's current stream) is capturing a
/// graph: asked before a DLPack producer is told to order its work before
/// another stream, which would join that stream to the capture and break
/// it. Reading the capture state changes nothing (measured on the H200
/// host, during a torch capture).
pub(crate) fn is_capturing(py: Python<'_>, handle: usize) -> PyResult<bool> {
    life::use_cuda()?;
    life::detach(py, || {
        crate::keeping_current(|| {
            let raw = handle as CUstream;
            // SAFETY: the handle is a live stream of the library that
            // reported it as current, for this call.
            let context = unsafe { Context::of_stream(raw) }?;
            // SAFETY: as above, for the life of this `StreamRef`; it only
            // reads the capture state (a capture another thread begins
            // meanwhile is seen or not, never torn).
            let stream = unsafe { StreamRef::from_raw(&context, raw) };
            Ok(stream.is_capturing()?)
        })
    })
    .map_err(|failure| layer_error(py, "copy", "stream", failure))
}

/// `StreamCapturing` when a library's current stream `current`, which the
/// transfer would order before its own, captures a graph. The legacy
/// default stream (0 or 1) never captures: it is not asked (which would
/// need a current context, and an executor's thread has none).
fn refuse_capturing(py: Python<'_>, side: &str, current: usize) -> PyResult<()> {
    if current <= 1 || !is_capturing(py, current)? {
        return Ok(());
    }
    Err(error(
        py,
        Class::StreamCapturing,
        format!(
            "{side}'s library is capturing a graph on its current stream ({current:#x}): a staged \
             transfer cannot become part of it, and ordering it after that stream would break the \
             capture; copy before or after the capture"
        ),
        [],
    ))
}

/// The current stream of the library that made `obj`, on which its DLPack
/// export orders its pending work and its graph captures run: torch's and
/// cupy's (looked up, never imported); `None` for others.
fn producer_stream(obj: &Bound<'_, PyAny>) -> PyResult<Option<usize>> {
    let root = library_of(obj);
    let Some(library) = loaded(obj.py(), &root)? else {
        return Ok(None);
    };
    let handle = match root.as_str() {
        "torch" => library
            .getattr("cuda")?
            .call_method0("current_stream")?
            .getattr("cuda_stream")?,
        "cupy" => library
            .getattr("cuda")?
            .call_method0("get_current_stream")?
            .getattr("ptr")?,
        _ => return Ok(None),
    };
    int_of(&handle).map(Some)
}

/// `StreamCapturing` when `obj`'s library captures a graph on its current
/// stream and the export would order that stream before another one: the
/// producer's event wait would join `consumer` to the capture and break it
/// (`torch.cuda.graph` then fails, with every later random number call).
/// Given that very stream as `stream=`, the producer does not wait, and
/// the transfer's own check refuses the capturing stream.
fn refuse_during_capture(obj: &Bound<'_, PyAny>, side: &str, consumer: usize) -> PyResult<()> {
    match producer_stream(obj)? {
        Some(current) if current != consumer => refuse_capturing(obj.py(), side, current),
        _ => Ok(()),
    }
}

/// A plain CUDA torch tensor's device side read from the tensor, not
/// through a DLPack export (which costs a capsule and, for another stream,
/// an event, a third of a small call): its address and length, kept alive
/// by the tensor, ordered after torch's current stream by the stager's own
/// wait where that is not `consumer` (so a capturing one is refused before
/// anything is queued, as the export's wait would break the capture).
/// A tensor that requires grad, or has the conjugate or negative bit,
/// which torch does not export, is refused (`ArgumentRuntimeError`, a
/// `RuntimeError` as torch's own refusal is, naming the
/// call that resolves it). `None` for anything else, which the DLPack path
/// reads (and refuses what torch does not export: sparse, quantized).
fn torch_device_side(
    obj: &Bound<'_, PyAny>,
    side: &str,
    consumer: usize,
) -> PyResult<Option<DeviceSide>> {
    let py = obj.py();
    let Some(tensor) = torch_tensor(py)? else {
        return Ok(None);
    };
    if !obj.is_instance(&tensor)? {
        return Ok(None);
    }
    let torch = loaded(py, "torch")?.ok_or_else(|| PyValueError::new_err("torch is not loaded"))?;
    let is_cuda = attribute(obj, "is_cuda")?.is_some_and(|value| value.is(PyBool::new(py, true)));
    if !is_cuda || !obj.getattr("layout")?.is(&torch.getattr("strided")?) {
        return Ok(None);
    }
    // What torch's DLPack export refuses with a `RuntimeError`, refused
    // here by name, with the call that makes a tensor hostcopy can read.
    for (test, what, call) in [
        ("requires_grad", "requires grad", ".detach()"),
        ("is_conj", "has the conjugate bit set", ".resolve_conj()"),
        ("is_neg", "has the negative bit set", ".resolve_neg()"),
    ] {
        let set = obj.getattr(test)?;
        let set = if test == "requires_grad" {
            set
        } else {
            set.call0()?
        };
        if set.is_truthy()? {
            return Err(wrong_state(
                side,
                obj,
                format!(
                    "{side} is a torch tensor that {what}: pass {side}{call} (a tensor of the same memory)"
                ),
            ));
        }
    }
    if obj.getattr("is_quantized")?.is_truthy()? {
        return Ok(None);
    }
    if !obj.call_method0("is_contiguous")?.is_truthy()? {
        let shape = PyTuple::new(
            py,
            obj.getattr("shape")?
                .try_iter()?
                .collect::<PyResult<Vec<_>>>()?,
        )?;
        let strides = obj.call_method0("stride")?;
        return Err(not_contiguous(py, side, shape, strides)?);
    }
    let device = obj.getattr("device")?.getattr("index")?;
    let current: usize = match attribute(&torch.getattr("_C")?, "_cuda_getCurrentRawStream")? {
        // Torch's raw accessor: no Stream object is made.
        Some(raw) => int_of(&raw.call1((&device,))?)?,
        None => int_of(
            &torch
                .getattr("cuda")?
                .call_method1("current_stream", (&device,))?
                .getattr("cuda_stream")?,
        )?,
    };
    let mut wait_for = vec![consumer];
    // 0 and 1 both name the legacy default stream.
    if current != consumer && !(current <= 1 && consumer <= 1) {
        refuse_capturing(py, side, current)?;
        wait_for.push(current);
    }
    Ok(Some(DeviceSide {
        ptr: int_of(&obj.call_method0("data_ptr")?)?,
        nbytes: int_of(&obj.getattr("nbytes")?)?,
        owner: obj.clone().unbind(),
        wait_for,
        ordinal: device.extract().map_or(Ordinal::Ask, Ordinal::Known),
    }))
}

/// A cuda.core `Buffer`, or an object shaped as one (`handle`, `size`,
/// `memory_resource`): what packing and transfers read of it. Looked up on
/// the type, so that no property runs (a Buffer's `is_host_accessible`
/// calls the driver when it has no memory resource).
fn is_cuda_core_buffer(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    let kind = obj.get_type();
    for name in ["handle", "size", "memory_resource"] {
        if !kind.hasattr(name)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Whether C-ordered items of `item` bytes in `shape` have `strides`
/// (none: C order; an empty array is contiguous; a dimension of length 1
/// may have any stride).
fn contiguous(shape: &[i128], strides: Option<&[i128]>, item: i128) -> bool {
    let Some(strides) = strides else {
        return true;
    };
    if shape.contains(&0) {
        return true;
    }
    let mut expected = item;
    for (&extent, &stride) in shape.iter().rev().zip(strides.iter().rev()) {
        if extent != 1 && stride != expected {
            return false;
        }
        expected = expected.saturating_mul(extent);
    }
    true
}

/// The device side `obj` as `side`, a destination when `writable`, for a
/// transfer ordered on `consumer`.
fn device_side(
    obj: &Bound<'_, PyAny>,
    side: &str,
    writable: bool,
    consumer: usize,
) -> PyResult<DeviceSide> {
    let py = obj.py();
    if writable {
        refuse_jax_destination(obj, side)?;
    }
    if let Some(device) = torch_device_side(obj, side, consumer)? {
        return Ok(device);
    }
    if is_cuda_core_buffer(obj)? {
        let closed = match attribute(obj, "is_closed")? {
            Some(closed) => closed.is_truthy()?,
            None => false,
        };
        if closed {
            return Err(wrong_value(
                side,
                obj,
                format!("{side} is a closed cuda.core Buffer"),
            ));
        }
        return Ok(DeviceSide {
            ptr: word_of(&obj.getattr("handle")?, &format!("{side}.handle"))? as CUdeviceptr,
            nbytes: word_of(&obj.getattr("size")?, &format!("{side}.size"))?,
            owner: obj.clone().unbind(),
            // A Buffer names no stream of its own: ordered after `stream=`.
            wait_for: vec![consumer],
            ordinal: Ordinal::Buffer,
        });
    }
    if let Some(device_type) = dlpack_device_type(obj, side)? {
        if !matches!(device_type, DL_CUDA | DL_CUDA_MANAGED) {
            return Err(not_device_memory(obj, side, Some(device_type))?);
        }
        refuse_during_capture(obj, side, consumer)?;
        // The producer orders its pending work (on its current stream)
        // before `consumer`; the transfer then waits for `consumer`.
        let kwargs = PyDict::new(py);
        kwargs.set_item("stream", consumer)?;
        let capsule = export_dlpack(obj, &kwargs)?;
        if writable {
            dlpack_device_destination(&capsule, side)?;
        }
        let (ptr, nbytes, _, device_id, contiguous) = dlpack_region(&capsule, side)?;
        if !contiguous {
            return Err(error(
                py,
                Class::NotContiguous,
                format!("{side} is strided: a transfer moves one contiguous run of bytes"),
                [
                    ("side", side.into_pyobject(py)?.into_any()),
                    ("shape", PyTuple::empty(py).into_any()),
                    ("strides", PyTuple::empty(py).into_any()),
                ],
            ));
        }
        return Ok(DeviceSide {
            ptr: ptr as CUdeviceptr,
            nbytes,
            owner: PyTuple::new(py, [obj.clone(), capsule])?
                .into_any()
                .unbind(),
            wait_for: vec![consumer],
            ordinal: usize::try_from(device_id).map_or(Ordinal::Ask, Ordinal::Known),
        });
    }
    if let Some(interface) = attribute(obj, "__cuda_array_interface__")? {
        return array_interface_side(obj, &interface, side, writable, consumer);
    }
    match Export::new(obj) {
        Ok(export) => {
            drop(export);
            Err(not_device_memory(obj, side, None)?)
        }
        Err(failure) if failure.is_instance_of::<PyTypeError>(py) => {
            let message = format!(
                "{side}: expected GPU memory (a cuda.core Buffer, or an array with __dlpack__ or \
                 __cuda_array_interface__), got {}",
                type_name(obj)?
            );
            Err(wrong_type(side, obj, message))
        }
        Err(failure) => Err(failure),
    }
}

/// The device side of an array with `__cuda_array_interface__`, ordered
/// after the interface's `stream` too.
fn array_interface_side(
    obj: &Bound<'_, PyAny>,
    interface: &Bound<'_, PyAny>,
    side: &str,
    writable: bool,
    consumer: usize,
) -> PyResult<DeviceSide> {
    let py = obj.py();
    let Some(data) = interface
        .cast::<PyDict>()
        .ok()
        .and_then(|interface| interface.get_item("data").transpose())
        .transpose()?
    else {
        let message = format!(
            "{side}: __cuda_array_interface__ is {}, not a dict with a 'data' pair",
            interface.repr()?
        );
        return Err(wrong_type(side, obj, message));
    };
    let (ptr, readonly) = two(&data, side, "__cuda_array_interface__['data']")?;
    let required = |key: &str| -> PyResult<Bound<'_, PyAny>> {
        let value = interface.call_method1("get", (key,))?;
        if value.is_none() {
            let message = format!("{side}: __cuda_array_interface__ has no '{key}'");
            return Err(wrong_type(side, obj, message));
        }
        Ok(value)
    };
    let shape = PyTuple::new(
        py,
        required("shape")?
            .try_iter()?
            .collect::<PyResult<Vec<_>>>()?,
    )?;
    // `int(typestr[2:])`: the item size of `"<f4"` and the like.
    let size = required("typestr")?.get_item(PySlice::new(py, 2, isize::MAX, 1))?;
    let item: i128 = int_of(&size)?;
    let strides = interface.call_method1("get", ("strides",))?;
    let extents = shape.extract::<Vec<i128>>()?;
    let stride_values = if strides.is_none() {
        None
    } else {
        Some(
            strides
                .try_iter()?
                .map(|stride| stride?.extract::<i128>())
                .collect::<PyResult<Vec<_>>>()?,
        )
    };
    if !contiguous(&extents, stride_values.as_deref(), item) {
        return Err(not_contiguous(py, side, shape, strides)?);
    }
    let nbytes = extents
        .iter()
        .try_fold(item, |nbytes, &extent| nbytes.checked_mul(extent))
        .and_then(|nbytes| usize::try_from(nbytes).ok())
        .ok_or_else(|| wrong_value(side, obj, format!("{side}: an array of shape {extents:?}")))?;
    if writable && readonly.is_truthy()? {
        return Err(read_only_device(py, side, nbytes)?);
    }
    let mut wait_for = vec![consumer];
    if let Some(producer) = interface
        .call_method1("get", ("stream",))
        .map(|producer| (!producer.is_none()).then_some(producer))?
    {
        let producer = word_of(&producer, "stream")?;
        if producer != consumer {
            wait_for.push(producer);
        }
    }
    let ptr: CUdeviceptr = if ptr.is_truthy()? {
        word_of(&ptr, &format!("{side} data pointer"))? as CUdeviceptr
    } else {
        0
    };
    Ok(DeviceSide {
        ptr,
        nbytes,
        owner: obj.clone().unbind(),
        wait_for,
        // The interface names no device: the driver says, for the pointer.
        ordinal: Ordinal::Ask,
    })
}

/// `ReadOnlyBuffer` for a read-only `__cuda_array_interface__` array of
/// `nbytes` bytes as the destination `side`.
fn read_only_device(py: Python<'_>, side: &str, nbytes: usize) -> PyResult<PyErr> {
    Ok(error(
        py,
        Class::ReadOnlyBuffer,
        format!("{side} is read-only: a destination must be writable"),
        [
            ("side", side.into_pyobject(py)?.into_any()),
            ("len", nbytes.into_pyobject(py)?.into_any()),
        ],
    ))
}

/// The host side `obj` as `side`, a destination when `writable`: its
/// buffer, or a CPU (or pinned) tensor's DLPack capsule.
fn host_side(obj: &Bound<'_, PyAny>, side: &str, writable: bool) -> PyResult<HostMemory> {
    let py = obj.py();
    if writable {
        refuse_jax_destination(obj, side)?;
    }
    match Export::new(obj) {
        Ok(export) => return exported_host_memory(obj, export, writable, side),
        // No buffer protocol: DLPack, below.
        Err(failure) if failure.is_instance_of::<PyTypeError>(py) => {}
        Err(failure) => return Err(failure),
    }
    if let Some(device_type) = dlpack_device_type(obj, side)? {
        if !matches!(device_type, DL_CPU | DL_CUDA_HOST) {
            let message = format!(
                "{side} is GPU memory (DLPack device type {device_type}); host memory is expected here"
            );
            return Err(wrong_type(side, obj, message));
        }
        // A versioned capsule can say that the tensor is read-only or a
        // copy; an unversioned one is refused as a destination (it cannot
        // prove the tensor writable) but read as a source. The address and
        // length come from the capsule.
        let capsule = export_dlpack(obj, &PyDict::new(py))?;
        return dlpack_host_memory(capsule, writable, side);
    }
    let message = format!(
        "{side}: expected host memory (the buffer protocol: numpy, bytearray, memoryview, mmap; \
         or a CPU tensor with __dlpack__), got {}",
        type_name(obj)?
    );
    Err(wrong_type(side, obj, message))
}

/// The device holding the device side `obj` (as `side`), as the default
/// stager's lookup reads it, before the transfer reads the sides: a
/// cuda.core `Buffer`'s `device_id` (else the driver's answer for its
/// `handle`), a DLPack array's `__dlpack_device__()` ordinal, the driver's
/// answer for a `__cuda_array_interface__` pointer. An ordinal as the
/// object gave it (the stager's `device` conversion takes it from there);
/// host memory there is `NotDeviceMemory`, anything else
/// `ArgumentTypeError`, and what reading it raised hostcopy's
/// (`errors::refusal`).
pub(crate) fn device_of<'py>(obj: &Bound<'py, PyAny>, side: &str) -> PyResult<Bound<'py, PyAny>> {
    let py = obj.py();
    read_device_of(obj, side).map_err(|failure| refusal(py, failure, side, Some(obj)))
}

fn read_device_of<'py>(obj: &Bound<'py, PyAny>, side: &str) -> PyResult<Bound<'py, PyAny>> {
    let py = obj.py();
    if is_cuda_core_buffer(obj)? {
        if let Some(device_id) = attribute(obj, "device_id")?
            && device_id.is_instance_of::<PyInt>()
            && device_id.ge(0)?
        {
            return Ok(device_id);
        }
        return device_holding(&obj.getattr("handle")?, side);
    }
    if obj.hasattr("__dlpack_device__")? {
        let (device_type, device_id) = unpack_pair(&obj.call_method0("__dlpack_device__")?)?;
        let device_type = index(&device_type)?;
        if device_type.eq(DL_CUDA)? || device_type.eq(DL_CUDA_MANAGED)? {
            return index(&device_id);
        }
        if obj.hasattr("__dlpack__")? {
            return Err(not_device_memory(obj, side, Some(device_type.extract()?))?);
        }
    }
    if let Some(interface) = attribute(obj, "__cuda_array_interface__")? {
        let data = match interface.cast::<PyDict>() {
            Ok(dict) => Some(dict.call_method1("get", ("data",))?).filter(|data| !data.is_none()),
            Err(_) => None,
        };
        let Some(data) = data else {
            let message = format!(
                "{side}: __cuda_array_interface__ is {}, not a dict with a 'data' pair",
                interface.repr()?
            );
            return Err(wrong_type(side, obj, message));
        };
        let ptr = data.get_item(0)?;
        let ptr = if ptr.is_truthy()? {
            ptr
        } else {
            0usize.into_pyobject(py)?.into_any()
        };
        return device_holding(&ptr, side);
    }
    match PyMemoryView::from(obj) {
        Ok(view) => {
            view.call_method0("release")?;
            Err(not_device_memory(obj, side, None)?)
        }
        Err(failure) if failure.is_instance_of::<PyTypeError>(py) => {
            let message = format!(
                "{side}: expected GPU memory (a cuda.core Buffer, or an array with __dlpack__ or \
                 __cuda_array_interface__), got {}",
                type_name(obj)?
            );
            Err(wrong_type(side, obj, message))
        }
        Err(failure) => Err(failure),
    }
}

/// `operator.index(value)`.
fn index<'py>(value: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    // SAFETY: the GIL is held (`value`); `PyNumber_Index` returns a new
    // reference, or null with an exception set.
    unsafe { Bound::from_owned_ptr_or_err(value.py(), pyo3::ffi::PyNumber_Index(value.as_ptr())) }
}

/// `first, second = value`, raising what Python's unpacking raises.
fn unpack_pair<'py>(value: &Bound<'py, PyAny>) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
    if let Ok(tuple) = value.cast::<PyTuple>()
        && tuple.len() == 2
    {
        return Ok((tuple.get_item(0)?, tuple.get_item(1)?));
    }
    let mut items = value.try_iter().map_err(|failure| {
        if failure.is_instance_of::<PyTypeError>(value.py()) {
            let name = type_name(value).unwrap_or_default();
            PyTypeError::new_err(format!("cannot unpack non-iterable {name} object"))
        } else {
            failure
        }
    })?;
    let mut taken = Vec::with_capacity(2);
    for item in items.by_ref().take(3) {
        taken.push(item?);
    }
    match <[_; 2]>::try_from(taken) {
        Ok([first, second]) => Ok((first, second)),
        Err(taken) if taken.len() > 2 => Err(PyValueError::new_err(
            "too many values to unpack (expected 2)",
        )),
        Err(taken) => Err(PyValueError::new_err(format!(
            "not enough values to unpack (expected 2, got {})",
            taken.len()
        ))),
    }
}

/// The ordinal of the device whose memory holds the address `ptr` (read
/// as the pointer of `side`), as the driver reports it
/// (`NotDeviceMemory` for host memory and unknown addresses).
fn device_holding<'py>(ptr: &Bound<'py, PyAny>, side: &str) -> PyResult<Bound<'py, PyAny>> {
    let py = ptr.py();
    let ptr = word_of(ptr, &format!("{side} data pointer"))? as CUdeviceptr;
    life::use_cuda()?;
    let ordinal = life::detach(py, || {
        crate::keeping_current(|| DeviceView::device_holding(ptr))
    })
    .map_err(|failure| layer_error(py, "copy", side, failure))?;
    Ok(ordinal.into_pyobject(py)?.into_any())
}

/// The ordinal a `Stager`'s `device` names, as an integer object (the
/// stager converts it to a word, refusing it by its name): `None` is 0; a
/// device object's `device_id`, `index` or `id` (cuda.core's `Device`,
/// `torch.device`, cupy's `Device`); an `int` itself, not a `bool`.
pub(crate) fn device_ordinal<'py>(
    py: Python<'py>,
    device: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let Some(device) = device.filter(|device| !device.is_none()) else {
        return Ok(0usize.into_pyobject(py)?.into_any());
    };
    for name in ["device_id", "index", "id"] {
        if let Some(value) = attribute(device, name)?
            && value.is_instance_of::<PyInt>()
        {
            return Ok(value);
        }
    }
    if device.is_instance_of::<PyInt>() && !device.is_instance_of::<PyBool>() {
        return Ok(device.clone());
    }
    let message = format!(
        "device: expected an ordinal or a device object, got {}",
        type_name(device)?
    );
    Err(wrong_type("device", device, message))
}

/// [`device_ordinal`] for the package's Python code (`hostcopy.empty`'s
/// `device`).
#[pyfunction]
#[pyo3(name = "device_ordinal", signature = (device=None))]
pub(crate) fn py_device_ordinal<'py>(
    py: Python<'py>,
    device: Option<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    device_ordinal(py, device.as_ref())
}
