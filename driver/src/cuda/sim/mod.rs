//! A simulated CUDA driver (feature `simulator`): a deterministic,
//! in-process test double of the libcuda entry points this crate uses, so
//! that the CUDA layer's ownership logic runs in tests and under Miri
//! without a GPU.
//!
//! After [`install`], every driver call of this process goes to the
//! simulator instead of libcuda. Tests in one binary run in parallel, so
//! each takes devices of its own ([`new_device`]) and every control is per
//! device.
//!
//! ```
//! use hostcopy_driver::cuda::{Context, sim};
//!
//! sim::install();
//! let device = sim::new_device();
//! let context = Context::primary(device).unwrap();
//! assert!(sim::device_state(device).context_alive);
//! drop(context);
//! assert!(!sim::device_state(device).context_alive);
//! assert!(sim::take_violations(device).is_empty());
//! ```
//!
//! # What it models
//!
//! - Handles are ids in registries, never pointers to driver state. A
//!   destroyed or unknown handle returns `CUDA_ERROR_INVALID_HANDLE` and is
//!   recorded as a violation ([`violations`]): in the driver it is undefined
//!   behaviour.
//! - One primary context per device, retain/release counted. The last
//!   release destroys it: queued ops are dropped (the release waits for an
//!   op already running, and for the context's worker to end), its pinned and device
//!   allocations are really freed (Miri sees a use after free), every
//!   handle made in it becomes invalid.
//! - A current context per OS thread. Calls that create something use it
//!   (`CUDA_ERROR_INVALID_CONTEXT` if none). A call on a handle of another
//!   context than the calling thread's current one also returns
//!   `CUDA_ERROR_INVALID_CONTEXT` and is a violation: stricter than the
//!   driver, so that a layer passing these tests binds a resource's context
//!   on every call.
//! - Per context one worker thread runs ops one at a time: host
//!   functions (called with the real pointers, on that thread), async
//!   copies (bytes really copied), event records, graph launches (their
//!   nodes with the parameters the executable had at launch), stream memory
//!   waits. Streams are independent: an op runs once its stream's earlier
//!   ops and the event records its stream was made to wait for
//!   (`cuStreamWaitEvent`) have run, the first such op in submission order
//!   first; so without memory waits every op runs in submission order.
//! - `cuStreamWaitValue32_v2` (`CU_STREAM_WAIT_VALUE_GEQ`, cyclic) on a u32
//!   in pinned memory (`cuMemHostGetDevicePointer_v2` gives a pinned
//!   address back as its device address): the wait holds its stream alone
//!   until a CPU store reaches the value; the worker, which no store
//!   wakes, looks again every half millisecond. An address outside live
//!   pinned memory is a violation, a capturing stream refuses the wait.
//! - Synchronous copies and context synchronize wait for every op before
//!   them; event synchronize for the event's record; a stream's
//!   synchronize for its ops and the record of every event it waited for;
//!   a synchronous upload from pageable memory (`cuMemcpyHtoD_v2`), as in
//!   the driver, returns once its source is staged, before the bytes reach
//!   the device.
//!   A driver call from a host function or destructor returns
//!   `CUDA_ERROR_NOT_PERMITTED` and is a violation.
//! - The batch copy `cuMemcpyBatchAsync_v2` (an optional entry point:
//!   CUDA 12.8 on), as a device may lack it ([`refuse_batch_copies`]):
//!   every entry is checked before anything is queued (one side in a live
//!   device allocation of the current context, the other host memory; the
//!   attributes; the stream, which may not be the legacy default one),
//!   then one copy op per entry is queued in order, or one copy node each
//!   if the stream is capturing. [`DeviceState`] counts batch calls and
//!   single async copy calls apart.
//! - Sticky errors ([`fail_context`]) and injected failures ([`fail_call`]).
//! - A queue of bounded room ([`limit_queue`]): a call that queues work
//!   waits while its context holds that many ops not started.
//! - Modules and kernel launches: `cuModuleLoadData` of hostcopy's one
//!   kernel, `hostcopy_gather`, which the worker runs as one copy per
//!   entry (see `kernel.rs`); a module unloaded under a queued launch is a
//!   violation.
//! - Stream capture into a graph (host and copy nodes), joining through an
//!   event wait, `CUDA_ERROR_STREAM_CAPTURE_UNJOINED` and invalidation;
//!   graphs, executables, node parameter updates; user objects whose
//!   destructors run late on a destructor thread once no graph,
//!   executable or queued launch holds them; two threads inside calls on one
//!   graph at once is a violation.
//!
//! # What it does not model
//!
//! Kernels other than `hostcopy_gather`, and kernel nodes in captures;
//! device-side execution and timing (an event's time is when the
//! worker reached it); ops of different streams running at the same time
//! (one worker runs one op at a time, as the driver's single host-function
//! thread does for host functions); the legacy default stream's implicit
//! synchronization with blocking streams (it is ordered like any stream;
//! its synchronous copies wait for all work before them); capture modes (all act as relaxed); cross-context
//! event waits (a violation here); pageable memory in asynchronous copies
//! (the driver stages it within the call; here the copy reads it when it
//! runs); memory limits;
//! any entry point this crate does not call.

// Entry points keep the driver's names.
#![allow(non_snake_case)]

mod codes;
mod context;
mod control;
mod execution;
mod fault;
mod graph;
mod kernel;
mod memory;
mod objects;
mod registry;
mod stream;
#[cfg(test)]
mod tests;

pub use context::thread_capture_mode;
pub use control::{
    DeviceState, DriverCalls, c_entry_points, count_calls, device_state, drain, hold, install,
    limit_queue, new_device, refuse_batch_copies, refuse_stream_memory_waits, release,
    take_violations, violations,
};
pub use fault::{fail_call, fail_context};

/// The simulator's entry points, by the driver's names and signatures:
/// what `ffi` calls once the simulator is installed (`control::install`
/// hands them over as one table).
pub(super) mod entry {
    pub(crate) use super::codes::cuGetErrorName;
    pub(crate) use super::context::{
        cuCtxGetCurrent, cuCtxGetDevice, cuCtxSetCurrent, cuCtxSynchronize, cuDeviceGet,
        cuDeviceGetCount, cuDeviceGetName, cuDevicePrimaryCtxRelease_v2, cuDevicePrimaryCtxRetain,
        cuDriverGetVersion, cuInit, cuThreadExchangeStreamCaptureMode,
    };
    pub(crate) use super::graph::{
        cuGraphAddHostNode, cuGraphCreate, cuGraphDestroy, cuGraphExecDestroy,
        cuGraphExecHostNodeSetParams, cuGraphInstantiateWithFlags, cuGraphLaunch,
        cuGraphRetainUserObject, cuStreamBeginCapture_v2, cuStreamEndCapture,
        cuStreamGetCaptureInfo_v2,
    };
    pub(crate) use super::kernel::{
        cuLaunchKernel, cuModuleGetFunction, cuModuleLoadData, cuModuleUnload,
    };
    pub(crate) use super::memory::{
        cuMemAlloc_v2, cuMemFree_v2, cuMemFreeHost, cuMemHostAlloc, cuMemHostGetDevicePointer_v2,
        cuMemHostRegister_v2, cuMemHostUnregister, cuMemcpyBatchAsync_v2, cuMemcpyDtoH_v2,
        cuMemcpyDtoHAsync_v2, cuMemcpyHtoD_v2, cuMemcpyHtoDAsync_v2, cuPointerGetAttribute,
    };
    pub(crate) use super::objects::{cuUserObjectCreate, cuUserObjectRelease};
    pub(crate) use super::stream::{
        cuEventCreate, cuEventDestroy_v2, cuEventElapsedTime, cuEventQuery, cuEventRecord,
        cuEventSynchronize, cuLaunchHostFunc, cuStreamCreate, cuStreamDestroy_v2, cuStreamGetCtx,
        cuStreamQuery, cuStreamSynchronize, cuStreamWaitEvent, cuStreamWaitValue32_v2,
    };
}
