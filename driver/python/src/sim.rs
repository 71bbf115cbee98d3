//! The simulated driver (`hostcopy_driver::cuda::sim`) for the package's
//! CPU tests, in wheels built with the `simulator` feature: its controls,
//! and device arrays, streams and graphs on simulated devices, shaped as
//! the libraries Python users bring shape theirs
//! (`__cuda_array_interface__`, `__cuda_stream__`, raw graph handles).

use hostcopy_driver::cuda::{
    CaptureMode, Context, DeviceBuffer, Error, Graph, GraphExec, Stream, sim,
};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::layer_error;

fn failed(failure: impl Into<Error>) -> PyErr {
    let failure = failure.into();
    Python::attach(|py| layer_error(py, "sim", "device", failure))
}

/// Routes this process's driver calls to the simulator (before any other).
#[pyfunction]
fn sim_install() {
    sim::install();
}

/// A fresh simulated device; its ordinal.
#[pyfunction]
fn sim_new_device() -> usize {
    sim::new_device()
}

/// Makes device `ordinal`'s primary context current on this thread and
/// keeps it retained for the process, as the CUDA runtime does for the
/// contexts it makes current (torch, cupy, cuda.core).
#[pyfunction]
fn sim_make_current(ordinal: usize) -> PyResult<()> {
    let context = Context::primary(ordinal).map_err(failed)?;
    context.make_current().map_err(failed)?;
    std::mem::forget(context);
    Ok(())
}

/// The device of the calling thread's current context, if any.
#[pyfunction]
fn sim_current_device() -> Option<usize> {
    Context::current().ok().map(|context| context.ordinal())
}

/// What device `ordinal` holds and has done, as a dict.
#[pyfunction]
fn sim_device_state(py: Python<'_>, ordinal: usize) -> PyResult<Bound<'_, PyDict>> {
    let state = sim::device_state(ordinal);
    let dict = PyDict::new(py);
    dict.set_item("context_alive", state.context_alive)?;
    dict.set_item("host_allocations", state.host_allocations)?;
    dict.set_item("device_allocations", state.device_allocations)?;
    dict.set_item("streams", state.streams)?;
    dict.set_item("events", state.events)?;
    dict.set_item("graphs", state.graphs)?;
    dict.set_item("queued", state.queued)?;
    dict.set_item("host_fns_run", state.host_fns_run)?;
    dict.set_item("host_fns_skipped", state.host_fns_skipped)?;
    dict.set_item("async_copy_calls", state.async_copy_calls)?;
    dict.set_item("batch_copy_calls", state.batch_copy_calls)?;
    dict.set_item("wait_value_ops", state.wait_value_ops)?;
    dict.set_item("event_records", state.event_records)?;
    dict.set_item("user_objects", state.user_objects)?;
    dict.set_item("registrations", state.registrations)?;
    Ok(dict)
}

/// Holds device `ordinal`'s worker: ops queue, none starts.
#[pyfunction]
fn sim_hold(ordinal: usize) {
    sim::hold(ordinal);
}

/// Lets device `ordinal`'s worker run again.
#[pyfunction]
fn sim_release(ordinal: usize) {
    sim::release(ordinal);
}

/// Releases device `ordinal`'s held work after `ms` milliseconds, from a
/// thread of its own: one that needs no GIL, for a test whose main thread
/// holds it while it waits for that work.
#[pyfunction]
fn sim_release_later(ordinal: usize, ms: u64) {
    std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(ms));
        sim::release(ordinal);
    });
}

/// Waits (the GIL released) until device `ordinal` has run what is queued.
#[pyfunction]
fn sim_drain(py: Python<'_>, ordinal: usize) {
    crate::life::detach(py, || sim::drain(ordinal));
}

/// Makes the `nth` later call of `entry` on device `ordinal` fail with `code`.
#[pyfunction]
fn sim_fail_call(entry: String, ordinal: usize, nth: u32, code: u32) -> PyResult<()> {
    let entry: &'static str = Box::leak(entry.into_boxed_str());
    std::panic::catch_unwind(|| sim::fail_call(ordinal, entry, nth, code))
        .map_err(|_| PyRuntimeError::new_err(format!("sim_fail_call: bad arguments ({entry})")))
}

/// Gives device `ordinal`'s context the sticky error `code`.
#[pyfunction]
fn sim_fail_context(ordinal: usize, code: u32) {
    sim::fail_context(ordinal, code);
}

/// The misuse the simulator recorded on device `ordinal`, taken.
#[pyfunction]
fn sim_take_violations(ordinal: usize) -> Vec<String> {
    sim::take_violations(ordinal)
}

/// `hostcopy.empty`'s memory of `nbytes` bytes registered with device
/// `ordinal` as `register` says, in ranges of `range` bytes (the package
/// takes 256 MiB ranges): a refusal past the first range, in a test of a
/// few pages.
#[pyfunction]
fn sim_registered_memory(
    py: Python<'_>,
    nbytes: usize,
    register: crate::pageable::When,
    ordinal: usize,
    range: usize,
) -> PyResult<crate::pageable::PageableMemory> {
    crate::pageable::PageableMemory::made(py, nbytes, register, ordinal, range)
}

/// Simulated device memory shaped as a CUDA array library's one-byte
/// array: `__cuda_array_interface__` (version 3, with a `stream` when
/// given one), `write`, `read`.
#[pyclass(module = "hostcopy._native", frozen)]
struct SimDeviceArray {
    buffer: std::sync::Mutex<Option<DeviceBuffer>>,
    ptr: u64,
    nbytes: usize,
    stream: Option<usize>,
}

#[pymethods]
impl SimDeviceArray {
    #[new]
    #[pyo3(signature = (ordinal, nbytes, stream=None))]
    fn new(ordinal: usize, nbytes: usize, stream: Option<usize>) -> PyResult<Self> {
        let context = Context::primary(ordinal).map_err(failed)?;
        let buffer = DeviceBuffer::new(&context, nbytes).map_err(failed)?;
        Ok(SimDeviceArray {
            ptr: buffer.raw(),
            nbytes,
            buffer: std::sync::Mutex::new(Some(buffer)),
            stream,
        })
    }

    #[getter]
    fn __cuda_array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let dict = PyDict::new(py);
        dict.set_item("shape", (self.nbytes,))?;
        dict.set_item("typestr", "|u1")?;
        dict.set_item("data", (self.ptr, false))?;
        dict.set_item("version", 3)?;
        dict.set_item("strides", py.None())?;
        dict.set_item("stream", self.stream)?;
        Ok(dict)
    }

    #[getter]
    fn ptr(&self) -> u64 {
        self.ptr
    }

    fn write(&self, data: &[u8]) -> PyResult<()> {
        let mut buffer = self.buffer.lock().unwrap();
        let buffer = buffer
            .as_mut()
            .ok_or_else(|| PyRuntimeError::new_err("freed"))?;
        buffer.copy_from_host(0, data).map_err(failed)
    }

    fn read(&self) -> PyResult<Vec<u8>> {
        let buffer = self.buffer.lock().unwrap();
        let buffer = buffer
            .as_ref()
            .ok_or_else(|| PyRuntimeError::new_err("freed"))?;
        let mut bytes = vec![0u8; self.nbytes];
        buffer.copy_to_host(0, &mut bytes).map_err(failed)?;
        Ok(bytes)
    }

    /// Frees the memory now (as a library would when the array goes).
    fn free(&self) {
        self.release();
    }
}

impl SimDeviceArray {
    /// Frees the memory as torch and cupy do: under a device guard, so
    /// that the thread's current context is the same afterwards (a
    /// reference released by pyo3's pool frees it on whichever thread
    /// next calls into the extension, in the middle of that call).
    fn release(&self) {
        let saved = Context::save_current().ok();
        let buffer = self
            .buffer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        drop(buffer);
        drop(saved);
    }
}

impl Drop for SimDeviceArray {
    fn drop(&mut self) {
        self.release();
    }
}

/// A stream on a simulated device, with cuda.core's `__cuda_stream__`.
#[pyclass(module = "hostcopy._native", frozen)]
struct SimStream {
    stream: Stream,
}

#[pymethods]
impl SimStream {
    #[new]
    fn new(ordinal: usize) -> PyResult<Self> {
        let context = Context::primary(ordinal).map_err(failed)?;
        Ok(SimStream {
            stream: Stream::new(&context).map_err(failed)?,
        })
    }

    #[getter]
    fn handle(&self) -> usize {
        self.stream.as_stream().raw() as usize
    }

    fn __cuda_stream__(&self) -> (u32, usize) {
        (0, self.handle())
    }

    fn begin_capture(&self) -> PyResult<()> {
        self.stream
            .as_stream()
            .begin_capture(CaptureMode::Relaxed)
            .map_err(failed)
    }

    /// Ends the capture: the captured graph.
    fn end_capture(&self) -> PyResult<SimGraph> {
        let graph = self.stream.as_stream().end_capture().map_err(failed)?;
        Ok(SimGraph {
            graph: std::sync::Mutex::new(Some((graph, None))),
        })
    }

    fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        crate::life::detach(py, || self.stream.as_stream().synchronize()).map_err(failed)
    }
}

/// A graph on a simulated device: its raw handle, launches, destruction.
#[pyclass(module = "hostcopy._native", frozen)]
struct SimGraph {
    graph: std::sync::Mutex<Option<(Graph, Option<GraphExec>)>>,
}

#[pymethods]
impl SimGraph {
    /// An empty graph on device `ordinal`.
    #[new]
    fn new(ordinal: usize) -> PyResult<Self> {
        let context = Context::primary(ordinal).map_err(failed)?;
        Ok(SimGraph {
            graph: std::sync::Mutex::new(Some((Graph::new(&context).map_err(failed)?, None))),
        })
    }

    #[getter]
    fn handle(&self) -> PyResult<usize> {
        let graph = self.graph.lock().unwrap();
        let (graph, _) = graph
            .as_ref()
            .ok_or_else(|| PyRuntimeError::new_err("destroyed"))?;
        Ok(graph.raw() as usize)
    }

    /// Instantiates (once) and launches on `stream`, then waits.
    fn launch(&self, py: Python<'_>, stream: &SimStream) -> PyResult<()> {
        let mut graph = self.graph.lock().unwrap();
        let (graph, exec) = graph
            .as_mut()
            .ok_or_else(|| PyRuntimeError::new_err("destroyed"))?;
        if exec.is_none() {
            *exec = Some(graph.instantiate().map_err(failed)?);
        }
        let exec = exec.as_mut().expect("just made");
        crate::life::detach(py, || {
            exec.launch(stream.stream.as_stream())?;
            Ok::<_, Error>(stream.stream.as_stream().synchronize()?)
        })
        .map_err(failed)
    }

    /// Destroys the graph and its executable.
    fn destroy(&self) {
        self.graph.lock().unwrap().take();
    }
}

/// One error of every variant of the Rust crate's errors, as the binding
/// raises it: `(variant, exception)` pairs, for the test that none is a
/// plain `RuntimeError` and every one a `hostcopy.Error`. The driver's
/// error is a real one of the simulator (device `usize::MAX` does not
/// exist), so install it first. A variant added to the crate fails to
/// compile in `errors.rs` until it is mapped: add it here too.
#[pyfunction]
fn sim_error_samples(py: Python<'_>) -> PyResult<Vec<(String, PyErr)>> {
    use hostcopy_driver::cuda::BlockSide;
    use hostcopy_driver::{HostBufferError, PackError, PoolError, Side};
    let driver = match Context::primary(usize::MAX) {
        Err(failure) => failure,
        Ok(_) => return Err(PyRuntimeError::new_err("device usize::MAX exists")),
    };
    let layer = [
        Error::Driver(driver),
        Error::Pool(PoolError::Exhausted { capacity: 4 }),
        Error::Pool(PoolError::NotFromThisPool { user_data: 0x10 }),
        Error::Pool(PoolError::NotHeld { index: 2 }),
        Error::Pack(PackError::OutOfBounds {
            side: Side::Src,
            offset: 8,
            nbytes: 16,
            len: 12,
        }),
        Error::Pack(PackError::Overlap {
            dst: 0x1000,
            src: 0x1008,
            nbytes: 16,
        }),
        Error::Pack(PackError::AddressOverflow {
            side: Side::Dst,
            addr: usize::MAX,
            nbytes: 2,
        }),
        Error::Pack(PackError::NullWithLength {
            side: Side::Dst,
            nbytes: 8,
        }),
        Error::Pack(PackError::NotHostAccessible {
            side: Side::Src,
            addr: 0x2000,
        }),
        Error::Capturing,
        Error::DeviceOutOfBounds {
            offset: 4,
            nbytes: 8,
            len: 10,
        },
        Error::ForeignNode,
        Error::ScopeOpen,
        Error::NoCurrentContext,
        Error::NotPrimaryContext { device: 1 },
        Error::StreamMemoryWaitsUnsupported { device: 1 },
        Error::NotDeviceMemory { addr: 0x3000 },
        Error::ContextMismatch {
            expected: 0,
            found: 1,
        },
        Error::BlockOutOfBounds {
            index: 3,
            side: BlockSide::Host,
            offset: 0,
            nbytes: 64,
            len: 32,
        },
        Error::BlockOutOfBounds {
            index: 1,
            side: BlockSide::Device,
            offset: 0,
            nbytes: 64,
            len: 32,
        },
        Error::InvalidOption {
            option: "chunk",
            value: 0,
            min: 4096,
            max: 1 << 30,
        },
        Error::BlocksOverlap {
            first: 0,
            second: 2,
        },
        Error::OrderNotKept,
        Error::ReadOnlyDevice,
    ];
    let mut samples: Vec<(String, PyErr)> = layer
        .into_iter()
        .map(|failure| {
            let name = format!("{:?}", failure.kind());
            let name = name.split([' ', '(', '{']).next().unwrap_or_default();
            let name = match failure {
                Error::Pack(packing) => format!("Pack::{:?}", packing.kind()),
                Error::Pool(pool) => format!("Pool::{:?}", pool.kind()),
                _ => name.to_owned(),
            };
            let name = name.split([' ', '{']).next().unwrap_or_default().to_owned();
            (
                name,
                crate::errors::layer_error(py, "sample", "device", failure),
            )
        })
        .collect();
    for failure in [
        HostBufferError::Map {
            len: 1 << 40,
            error: std::io::Error::from_raw_os_error(12),
        },
        HostBufferError::Unsupported,
    ] {
        let name = format!("HostBufferError::{:?}", failure.kind());
        let name = name.split([' ', '{']).next().unwrap_or_default().to_owned();
        samples.push((name, crate::errors::host_buffer_error(py, &failure)));
    }
    Ok(samples)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(sim_error_samples, m)?)?;
    m.add_function(wrap_pyfunction!(sim_install, m)?)?;
    m.add_function(wrap_pyfunction!(sim_new_device, m)?)?;
    m.add_function(wrap_pyfunction!(sim_make_current, m)?)?;
    m.add_function(wrap_pyfunction!(sim_current_device, m)?)?;
    m.add_function(wrap_pyfunction!(sim_device_state, m)?)?;
    m.add_function(wrap_pyfunction!(sim_hold, m)?)?;
    m.add_function(wrap_pyfunction!(sim_release, m)?)?;
    m.add_function(wrap_pyfunction!(sim_release_later, m)?)?;
    m.add_function(wrap_pyfunction!(sim_drain, m)?)?;
    m.add_function(wrap_pyfunction!(sim_fail_call, m)?)?;
    m.add_function(wrap_pyfunction!(sim_fail_context, m)?)?;
    m.add_function(wrap_pyfunction!(sim_take_violations, m)?)?;
    m.add_function(wrap_pyfunction!(sim_registered_memory, m)?)?;
    m.add_class::<SimDeviceArray>()?;
    m.add_class::<SimStream>()?;
    m.add_class::<SimGraph>()?;
    Ok(())
}
