//! The CUDA layer (feature `cuda`): contexts, streams, graphs, pinned and
//! device buffers, and launches of `hostcopy_fn` with borrowed, owned and raw
//! records.
//!
//! Ownership, in short:
//! - A scoped launch ([`StreamRef::scope`]) borrows its buffers; the scope
//!   returns only once every host function it launched has finished or can
//!   no longer touch them, also after a context error.
//! - An owned launch ([`StreamRef::launch_owned`]) copies the record; the host
//!   function frees the copy after running it. In a stream capture the copy
//!   belongs to the captured graph instead, as do records of graph nodes
//!   ([`Graph::add_host_copy`]): freed when the graph and every executable
//!   made from it are destroyed, so a graph replayed N times copies N times.
//! - A raw launch ([`StreamRef::launch_host_fn`]) is `unsafe`: the caller
//!   keeps the record and its buffers alive.
//!
//! Every host function of a context runs on one driver thread, in order,
//! whatever its stream: a long copy delays the host functions of every other
//! stream of the context.

#[cfg(not(target_pointer_width = "64"))]
compile_error!(
    "the `cuda` feature needs a 64-bit target: CUDA runs on no other, and \
     cuda-driver-sys's bindings assume one"
);

mod context;
mod device;
mod error;
mod event;
mod ffi;
mod graph;
mod host_fns;
mod list;
mod pinned;
mod scope;
mod stream;

pub use context::{Context, driver_version};
pub use device::DeviceBuffer;
pub use error::{CUDA_ERROR_NO_DEVICE, CUDA_ERROR_STUB_LIBRARY, DriverError, Error};
pub use event::Event;
pub use graph::{Graph, GraphExec, GraphNode};
pub use pinned::{HostRegistration, PinnedBuffer};
pub use scope::LaunchScope;
pub use stream::{CaptureMode, Stream, StreamRef};

/// The raw driver handle types, for wrapping handles another runtime owns.
pub use cuda_driver_sys::{CUcontext, CUdeviceptr, CUgraph, CUstream};
