//! Launches whose records the CUDA layer owns (`hostcopy_driver::cuda`):
//! on a stream (freed by the host function once it ran, on the driver's
//! thread, without the GIL), in a stream capture and as a graph node (owned
//! by the graph, freed when the graph and its executables are destroyed).
//! This module only converts: the ownership, the capture lock and the
//! driver calls are the Rust layer's.

use hostcopy_core::HostCopyArgs;
use hostcopy_driver::Record;
use hostcopy_driver::cuda::{
    CUgraph, CUstream, Context, Error, Graph, HostCopy, Launched, StreamRef,
};
use pyo3::prelude::*;

use crate::buffer::checked_export;
use crate::errors::{layer_error, refusal, wrong_value};
use crate::sides::protocol_stream_handle;

fn copy(parallel: bool) -> HostCopy {
    if parallel {
        HostCopy::Parallel
    } else {
        HostCopy::Single
    }
}

/// The record a packed record describes, as the Rust layer takes it:
/// `record` is its bytes as `pack_host_copy_args` returns them, or any
/// C-contiguous buffer of them (`ArgumentTypeError` for what is no buffer,
/// an `int` included, `ArgumentError` for one of another length).
fn record_from(record: &Bound<'_, PyAny>) -> PyResult<Record<'static>> {
    let py = record.py();
    let export = checked_export(record, false, "record")?;
    let (addr, len) = export.range();
    if len != HostCopyArgs::SIZE {
        let message = format!(
            "record: a packed record is {} bytes, not {len}",
            HostCopyArgs::SIZE
        );
        return Err(wrong_value("record", record, message));
    }
    let mut bytes = [0u8; HostCopyArgs::SIZE];
    // SAFETY: the export is of `len` (= `SIZE`) contiguous readable bytes at
    // `addr`, held until the end of this function; no Python code runs
    // meanwhile.
    unsafe {
        core::ptr::copy_nonoverlapping(
            core::ptr::with_exposed_provenance::<u8>(addr),
            bytes.as_mut_ptr(),
            HostCopyArgs::SIZE,
        );
    }
    drop(export);
    let args = HostCopyArgs::from_bytes(&bytes);
    // SAFETY: the Python API documents the caller's promise: both ranges
    // are host memory that stays valid until the copy has run (until the
    // graph and its executables are destroyed, for a graph).
    unsafe { Record::from_raw_parts(args.dst, args.src, args.nbytes) }
        .map_err(|failure| layer_error(py, "pack", "dst", failure.into()))
}

/// Launches the packed `record` on `stream` (read as
/// [`protocol_stream_handle`] reads it: a cuda.core `Stream`, a
/// cuda.bindings `CUstream`, an object with a `.handle` of those, or an
/// int); the layer owns a copy until the host function has run, or, on a
/// capturing stream, gives it to the captured graph. Returns whether the stream was
/// capturing. The GIL is released for the driver calls.
#[pyfunction]
pub(crate) fn launch_owned(
    py: Python<'_>,
    stream: &Bound<'_, PyAny>,
    record: &Bound<'_, PyAny>,
    parallel: bool,
) -> PyResult<bool> {
    let stream = protocol_stream_handle(stream)
        .map_err(|failure| refusal(py, failure, "stream", Some(stream)))?;
    let record = record_from(record)?;
    crate::life::use_cuda()?;
    let launch = move || -> Result<bool, Error> {
        let raw = stream as CUstream;
        // SAFETY: the Python API documents what the caller keeps valid: the
        // stream, for the call, and its capture state, changed by no other
        // code while the call runs.
        let context = unsafe { Context::of_stream(raw) }?;
        // SAFETY: as above, for the life of this `StreamRef`.
        let stream = unsafe { StreamRef::from_raw(&context, raw) };
        Ok(stream.launch_owned(copy(parallel), record)? == Launched::Captured)
    };
    crate::life::detach(py, || crate::keeping_current(launch))
        .map_err(|failure| layer_error(py, "launch_host_copy", "dst", failure))
}

/// Adds a host node running a copy of `record` to the graph whose handle is
/// `graph` (in the current context), after the nodes in `dependencies`;
/// the graph owns the copy. Returns the node's handle.
#[pyfunction]
pub(crate) fn add_host_node(
    py: Python<'_>,
    graph: usize,
    record: &Bound<'_, PyAny>,
    dependencies: Vec<usize>,
    parallel: bool,
) -> PyResult<usize> {
    let record = record_from(record)?;
    crate::life::use_cuda()?;
    let add = || -> Result<usize, Error> {
        let context = Context::current()?;
        // SAFETY: the Python API documents the caller's promise: `graph` is
        // a valid graph of the current context that no other code changes
        // or destroys while the call runs; the wrapper never destroys it.
        let mut graph = unsafe { Graph::borrow_raw(&context, graph as CUgraph) };
        let dependencies: Vec<_> = dependencies
            .iter()
            // SAFETY: the Python API documents the caller's promise: each
            // dependency is a node of this graph (a node of another graph,
            // or a destroyed one, is not checked here).
            .map(|&node| unsafe { graph.node_from_raw(node as _) })
            .collect();
        let node = graph.add_host_copy(copy(parallel), record, &dependencies)?;
        Ok(node.raw() as usize)
    };
    crate::life::detach(py, || crate::keeping_current(add))
        .map_err(|failure| layer_error(py, "add_host_copy_node", "dst", failure))
}

/// `(created, freed)`: records the layer copied to the heap for owned
/// launches and graph nodes, and those freed so far.
#[pyfunction]
pub(crate) fn owned_record_counts() -> (usize, usize) {
    let counts = hostcopy_driver::owned_record_counts();
    (counts.created, counts.freed)
}
