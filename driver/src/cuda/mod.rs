//! The CUDA layer (feature `cuda`, which implies `std`): contexts, streams,
//! graphs, pinned and device buffers, and launches of a host copy function
//! (`hostcopy_fn` or `hostcopy_parallel_fn`, chosen per launch by
//! [`HostCopy`]) with borrowed, owned and raw records.
//!
//! Safe code cannot free a record, a buffer or a handle the driver may still
//! touch:
//! - Every resource holds a clone of its [`Context`], so the primary context
//!   outlives all of them, and every call on a resource binds that context
//!   on the calling thread first: resources work from any thread.
//! - A scoped launch ([`StreamRef::scope`]) borrows its buffers; the scope
//!   returns only once every host function it launched has finished or can
//!   no longer touch them, also after a context error.
//! - An owned launch ([`StreamRef::launch_owned`]) copies the record; the host
//!   function frees the copy after running it. In a stream capture the copy
//!   belongs to the captured graph instead, as do records of graph nodes
//!   ([`Graph::add_host_copy`]): freed when the graph and every executable
//!   made from it are destroyed, so a graph replayed N times copies N times.
//!   A record set on an executable's node ([`GraphExec::set_host_copy`]) is
//!   freed once no launch in flight may run it.
//! - Capture transitions and every "is this stream capturing?" check with
//!   the launch it guards hold one process-wide lock, so the answer cannot
//!   change in between (see `capture.rs`).
//! - A raw launch ([`StreamRef::launch_host_fn`]) is `unsafe`: the caller
//!   keeps the record and its buffers alive.
//!
//! The modules read bottom-up, none importing one that imports it back:
//! `ffi` (entry points), `error`, `context`, `capture` (the capture lock,
//! over raw stream handles), then the handles (`stream`, `event` with
//! `wait_event`, `pinned`, `device`), record ownership (`crate::owned`: slot
//! states and the host functions that move them), and the launch forms:
//! `graph` (graphs, executables, `begin_capture` and `end_capture`),
//! `launch` (owned launches) and `scope` (scoped launches).
//!
//! # The host-function thread
//!
//! Every host function of a context runs on one driver thread, in order,
//! whatever its stream: a long copy delays the host functions of every other
//! stream of the context. Measured on an H200 host (docs/design-record.md,
//! "A copier thread completes each chunk, not a host function"): a 200 ms
//! host function on one stream delayed a host function on another stream of
//! the same context by 200 ms. Another context has a thread of its own: two
//! GPUs' contexts ran single-thread `hostcopy_fn` pipelines side by side at
//! 13.2 GB/s together, twice one GPU's rate. A faster copy
//! ([`crate::parallel`]) shortens the wait for everyone in the context.
//!
//! # Chunk size for staged copies
//!
//! Measured on the same host, 1 GiB device to pageable memory through pinned
//! staging buffers (buffer `k` on stream `k`):
//! - 16 MiB chunks and 3 or 4 staging buffers with `hostcopy_parallel_fn` (8 to 12
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

mod capture;
mod context;
mod device;
mod error;
mod event;
mod ffi;
mod gather;
mod graph;
mod kernels;
mod launch;
mod pinned;
pub mod registration;
pub(crate) mod retire;
mod scope;
#[cfg(feature = "simulator")]
#[cfg_attr(docsrs, doc(cfg(feature = "simulator")))]
pub mod sim;
pub mod staging;
mod stream;

pub use context::{Context, SavedCurrent, driver_version};
pub use device::{DeviceBuffer, DeviceMemory, DeviceView};
#[doc(hidden)]
pub use error::ErrorKind;
pub use error::{
    BlockSide, CUDA_ERROR_INSUFFICIENT_DRIVER, CUDA_ERROR_NO_DEVICE, CUDA_ERROR_STUB_LIBRARY,
    DriverError, Error,
};
pub use event::Event;
pub use graph::{CaptureMode, Graph, GraphExec, GraphNode};
pub use launch::Launched;
pub use pinned::{HostRegistration, PinnedBuffer};
pub use scope::LaunchScope;
pub use stream::{Stream, StreamRef};

pub use crate::owned::HostCopy;

/// The raw driver handle types, for wrapping handles another runtime owns.
pub use cuda_driver_sys::{CUcontext, CUdeviceptr, CUgraph, CUstream};
