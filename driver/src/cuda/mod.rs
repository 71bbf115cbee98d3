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
//! # The host-function thread
//!
//! Every host function of a context runs on one driver thread, in order,
//! whatever its stream: a long copy delays the host functions of every other
//! stream of the context. Measured on an H200 host (BENCHMARKS.md): a 200 ms
//! host function on one stream delayed a host function on another stream of
//! the same context by 200 ms. Another context has a thread of its own: two
//! GPUs' contexts ran single-thread `hostcopy_fn` pipelines side by side at
//! 13.2 GB/s together, twice one GPU's rate. A faster copy
//! ([`crate::parallel`]) shortens the wait for everyone in the context.
//!
//! # Chunk size for staged copies
//!
//! Measured on the same host, 1 GiB device to pageable memory through pinned
//! slots (slot `k` on stream `k`):
//! - 16 MiB chunks and 3 or 4 slots with `hostcopy_parallel_fn` (8 to 12
//!   workers) reached 52 to 54 GB/s, 95 to 98% of pinned D2H and 3.5x the
//!   driver's pageable `cuMemcpyDtoH`; the calling thread spent about 1% of
//!   the transfer in driver calls (two per chunk).
//! - Small chunks fill the driver's queue: at 1 MiB the enqueuing thread
//!   waited 84 to 99% of the time, at 4 MiB 11 to 64%, at 16 MiB under 2%.
//! - Large chunks fall out of the host's cache between the GPU's write and
//!   the host copy: 64 MiB chunks reached 37 to 40 GB/s.

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
#[cfg(feature = "simulator")]
#[cfg_attr(docsrs, doc(cfg(feature = "simulator")))]
pub mod sim;
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
