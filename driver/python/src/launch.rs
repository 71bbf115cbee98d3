//! Launches whose records this package owns: on a stream (freed by the host
//! function once it ran, on the driver's thread, without the GIL), in a
//! stream capture and as a graph node (owned by the graph through a CUDA
//! user object, freed when the graph and its executables are destroyed).

use core::ffi::c_void;
use core::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use hostcopy_core::{HostCopyArgs, hostcopy_fn};
use hostcopy_driver::parallel::hostcopy_parallel_fn;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::driver::{self, CudaError, Driver, Handle, HostFn, HostNodeParams};

static CREATED: AtomicUsize = AtomicUsize::new(0);
static FREED: AtomicUsize = AtomicUsize::new(0);

/// Held around every driver call of a launch (capture check, user object,
/// `cuLaunchHostFunc`) and of a graph node (user object, `cuGraphAddHostNode`).
/// CUDA graphs are not thread-safe: two Python threads launching on two
/// streams of one capture, or adding nodes to one graph, would otherwise
/// change the same graph at once. One lock for the process, because from a
/// stream handle alone we cannot tell which graph it captures into before
/// asking the driver, and the answer must still hold when we launch.
static GRAPH_CALLS: Mutex<()> = Mutex::new(());

/// Takes [`GRAPH_CALLS`]. Nothing panics while holding it, and the `()` it
/// guards cannot be left half-changed, so a poisoned lock is still sound.
fn lock_graph_calls() -> MutexGuard<'static, ()> {
    GRAPH_CALLS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A record on the heap, its address the `user_data` of a host function.
fn new_record(args: HostCopyArgs) -> *mut c_void {
    CREATED.fetch_add(1, Ordering::Relaxed);
    Box::into_raw(Box::new(args)).cast()
}

/// Frees a record from [`new_record`].
///
/// # Safety
///
/// `record` came from [`new_record`], and nothing uses it after this call.
unsafe fn free_record(record: *mut c_void) {
    // SAFETY: a box leaked by `new_record` (our caller), freed once.
    drop(unsafe { Box::from_raw(record.cast::<HostCopyArgs>()) });
    FREED.fetch_add(1, Ordering::Release);
}

/// Stream launch: runs the record, then frees it.
///
/// # Safety
///
/// `user_data` is a record from [`new_record`] that the launch handed over.
unsafe extern "C" fn run_owned(user_data: *mut c_void) {
    // SAFETY: a record whose ranges the caller of the launch answers for.
    unsafe { hostcopy_fn(user_data) };
    // SAFETY: this launch owned the record; nothing uses it after.
    unsafe { free_record(user_data) };
}

/// [`run_owned`] with the parallel copy.
///
/// # Safety
///
/// As for [`run_owned`].
unsafe extern "C" fn run_owned_parallel(user_data: *mut c_void) {
    // SAFETY: as in `run_owned`.
    unsafe { hostcopy_parallel_fn(user_data) };
    // SAFETY: as in `run_owned`.
    unsafe { free_record(user_data) };
}

/// Destructor of the user object that gives a graph its record.
///
/// # Safety
///
/// `record` is the record the user object was created for; the driver calls
/// this once, after the graph and every executable made from it are gone.
unsafe extern "C" fn free_graph_owned(record: *mut c_void) {
    // SAFETY: the user object owned the record; no host node runs it anymore.
    unsafe { free_record(record) };
}

fn copy_fn(parallel: bool) -> HostFn {
    if parallel {
        hostcopy_parallel_fn
    } else {
        hostcopy_fn
    }
}

fn record_from_bytes(record: &[u8]) -> PyResult<HostCopyArgs> {
    let bytes: &[u8; HostCopyArgs::SIZE] = record.try_into().map_err(|_| {
        PyValueError::new_err(format!(
            "a packed record is {} bytes, not {}",
            HostCopyArgs::SIZE,
            record.len()
        ))
    })?;
    Ok(HostCopyArgs::from_bytes(bytes))
}

/// The graph `stream` is capturing into, if it is capturing.
fn capture_graph(driver: &Driver, stream: Handle) -> Result<Option<Handle>, CudaError> {
    let mut status = 0;
    let mut id = 0u64;
    let mut graph: Handle = core::ptr::null_mut();
    // SAFETY: writes status, id and graph; the dependency outputs are
    // optional and left null.
    let code = unsafe {
        (driver.stream_get_capture_info)(
            stream,
            &mut status,
            &mut id,
            &mut graph,
            core::ptr::null_mut(),
            core::ptr::null_mut(),
        )
    };
    driver.check("cuStreamGetCaptureInfo_v2", code)?;
    let active = status == driver::CU_STREAM_CAPTURE_STATUS_ACTIVE && !graph.is_null();
    Ok(active.then_some(graph))
}

/// Hands `record` to `graph`: a user object whose destructor frees it, with
/// the only reference moved into the graph. On failure the record is freed.
///
/// # Safety
///
/// The caller owns `record` (from [`new_record`]) and hands it over.
unsafe fn give_to_graph(
    driver: &Driver,
    graph: Handle,
    record: *mut c_void,
) -> Result<(), CudaError> {
    let mut object: Handle = core::ptr::null_mut();
    // SAFETY: the destructor frees the record, which stays allocated until then.
    let code = unsafe {
        (driver.user_object_create)(
            &mut object,
            record,
            free_graph_owned,
            1,
            driver::CU_USER_OBJECT_NO_DESTRUCTOR_SYNC,
        )
    };
    if let Err(error) = driver.check("cuUserObjectCreate", code) {
        // SAFETY: no object owns the record: still ours.
        unsafe { free_record(record) };
        return Err(error);
    }
    // SAFETY: moves our one reference into the graph.
    let code = unsafe {
        (driver.graph_retain_user_object)(graph, object, 1, driver::CU_GRAPH_USER_OBJECT_MOVE)
    };
    if let Err(error) = driver.check("cuGraphRetainUserObject", code) {
        // Releasing our reference runs the destructor, which frees the record.
        // SAFETY: the reference is ours.
        let _ = unsafe { (driver.user_object_release)(object, 1) };
        return Err(error);
    }
    Ok(())
}

/// Launches a copy of `args` on `stream`. Whether it went into a captured
/// graph.
///
/// Holds [`GRAPH_CALLS`] from the capture check to the launch, so launches
/// through this package never change one captured graph at once. Code
/// outside it may still begin, end or join a capture of `stream`: that is
/// the caller's to rule out.
///
/// # Safety
///
/// `stream` is a valid stream (or 0, the legacy default stream of the
/// current context), and the record's ranges stay valid until the host
/// function has run (until the captured graph and its executables are
/// destroyed, when the stream is capturing). No other thread changes the
/// capture state of `stream`, or the graph it captures into, during the call.
unsafe fn launch(
    driver: &Driver,
    stream: Handle,
    args: HostCopyArgs,
    parallel: bool,
) -> Result<bool, CudaError> {
    let _graph_calls = lock_graph_calls();
    let capture = capture_graph(driver, stream)?;
    let record = new_record(args);
    match capture {
        Some(graph) => {
            // SAFETY: the record is ours to give.
            unsafe { give_to_graph(driver, graph, record) }?;
            // Replays run the record as it is: no host function may free it.
            // SAFETY: the graph keeps the record until it and its executables
            // are gone; the ranges are our caller's.
            let code = unsafe { (driver.launch_host_func)(stream, copy_fn(parallel), record) };
            driver.check("cuLaunchHostFunc", code)?;
            Ok(true)
        }
        None => {
            let run: HostFn = if parallel {
                run_owned_parallel
            } else {
                run_owned
            };
            // SAFETY: `run` runs the record and frees it; ranges: our caller's.
            let code = unsafe { (driver.launch_host_func)(stream, run, record) };
            if let Err(error) = driver.check("cuLaunchHostFunc", code) {
                // Not queued: still ours.
                // SAFETY: no host function has the record.
                unsafe { free_record(record) };
                return Err(error);
            }
            Ok(false)
        }
    }
}

/// Launches the packed `record` on the stream whose handle is `stream`; the
/// package owns a copy until the host function has run, or, on a capturing
/// stream, gives it to the captured graph. Returns whether the stream was
/// capturing. The GIL is released for the driver calls; the launch lock is
/// held for them, so launches from several threads into one capture are
/// serialized.
#[pyfunction]
pub(crate) fn launch_owned(
    py: Python<'_>,
    stream: usize,
    record: &[u8],
    parallel: bool,
) -> PyResult<bool> {
    let args = record_from_bytes(record)?;
    let driver = driver::driver(py)?;
    // SAFETY: the Python API documents what the caller keeps alive and
    // valid: the stream, and both ranges until the copy has run.
    py.detach(|| unsafe { launch(driver, stream as Handle, args, parallel) })
        .map_err(|error| error.into_py(py, driver))
}

/// Adds a host node running a copy of `record` to the graph whose handle is
/// `graph`, after the nodes in `dependencies`; the graph owns the copy.
/// Returns the node's handle. Holds the launch lock for the driver calls,
/// so several threads may add nodes to one graph through this package; any
/// other code changing the graph at the same time is the caller's to rule
/// out.
#[pyfunction]
pub(crate) fn add_host_node(
    py: Python<'_>,
    graph: usize,
    record: &[u8],
    dependencies: Vec<usize>,
    parallel: bool,
) -> PyResult<usize> {
    let args = record_from_bytes(record)?;
    let driver = driver::driver(py)?;
    let add = || -> Result<usize, CudaError> {
        // The user object and the node change the graph: one caller at a time.
        let _graph_calls = lock_graph_calls();
        let graph = graph as Handle;
        let record = new_record(args);
        // SAFETY: the record is ours to give.
        unsafe { give_to_graph(driver, graph, record) }?;
        let params = HostNodeParams {
            host_fn: Some(copy_fn(parallel)),
            user_data: record,
        };
        let dependencies: Vec<Handle> = dependencies.iter().map(|&node| node as Handle).collect();
        let mut node: Handle = core::ptr::null_mut();
        // SAFETY: the graph owns the record until it and its executables are
        // gone; the driver copies the parameters and the dependency array.
        let code = unsafe {
            (driver.graph_add_host_node)(
                &mut node,
                graph,
                dependencies.as_ptr(),
                dependencies.len(),
                &params,
            )
        };
        driver.check("cuGraphAddHostNode", code)?;
        Ok(node as usize)
    };
    py.detach(add).map_err(|error| error.into_py(py, driver))
}

/// `(created, freed)`: records this package copied to the heap for launches
/// and graph nodes, and those freed so far.
#[pyfunction]
pub(crate) fn owned_record_counts() -> (usize, usize) {
    let freed = FREED.load(Ordering::Acquire);
    (CREATED.load(Ordering::Relaxed), freed)
}
