//! The process-wide capture lock, and what a stream's capture state is.
//!
//! A stream's capture state changes only through a few calls: begin and end
//! capture, and an event wait that joins the stream to another stream's
//! capture. This layer makes each of them hold one process-wide lock, and so
//! does every launch that asks "is this stream capturing?" together with the
//! launch the answer guards (an owned launch, a scoped launch, a graph launch
//! refused on a capturing stream) and the opening of a scope. Under the lock
//! the answer cannot go stale before the launch: an owned record can never
//! land in a graph as a record to run once, nor a scoped record in a graph at
//! all. The same lock serializes the calls that give records to a capture
//! graph (`cuGraphRetainUserObject`), which CUDA does not allow from two
//! threads at once on one graph.
//!
//! Why one lock for the process and not one per stream or context: a capture
//! can pull in any stream through an event wait, so only a lock over every
//! stream makes "the state of this stream" stable, whatever the driver
//! allows across contexts. It costs one uncontended mutex per launch (a
//! launch itself is a few microseconds). Host functions never take it.
//!
//! The lock also keeps the set of streams with an open launch scope: until
//! its scope returns, such a stream can neither begin capturing nor wait
//! for an event whose last record was captured (the wait would join it to
//! that capture); each event remembers, under the lock, whether its last
//! record was made on a capturing stream. And every other
//! call of this layer that can add a node to a capture graph (an event
//! record, an asynchronous copy, a raw host function) holds it too, so no
//! call on a capture graph overlaps another thread's capture into it.
//!
//! This module sits below the stream module: it speaks of raw stream
//! handles, and the stream, event and launch modules build on it.
//!
//! [`RelaxedCapture`] is the other side: work on streams and memory no
//! capture can reach (a stager's own), whose driver calls the driver
//! would otherwise refuse while any thread captures in global mode.

use std::sync::{Mutex, MutexGuard};

use alloc::vec::Vec;

use super::context::Context;
use super::error::DriverError;
use super::ffi::{self, CUgraph, CUstream};

/// What the lock guards besides the capture transitions themselves.
pub(crate) struct CaptureState {
    /// Streams (raw addresses) with an open launch scope, once per scope.
    scoped: Vec<usize>,
}

static CAPTURE: Mutex<CaptureState> = Mutex::new(CaptureState { scoped: Vec::new() });

/// Takes the capture lock. Never held across a wait for a host function.
pub(crate) fn lock() -> MutexGuard<'static, CaptureState> {
    // Nothing under the lock panics; a poisoned lock still guards a
    // consistent state.
    CAPTURE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl CaptureState {
    /// Whether `stream` has an open launch scope.
    pub(crate) fn has_scope(&self, stream: CUstream) -> bool {
        self.scoped.contains(&stream.addr())
    }

    pub(crate) fn open_scope(&mut self, stream: CUstream) {
        self.scoped.push(stream.addr());
    }

    pub(crate) fn close_scope(&mut self, stream: CUstream) {
        if let Some(at) = self.scoped.iter().position(|&s| s == stream.addr()) {
            self.scoped.swap_remove(at);
        }
    }
}

/// The graph `stream` is capturing into, if it is capturing. Binds the
/// stream's context. The answer holds while the caller holds the lock.
pub(crate) fn capture_graph(
    _locked: &CaptureState,
    context: &Context,
    stream: CUstream,
) -> Result<Option<CUgraph>, DriverError> {
    context.bind()?;
    let mut status = ffi::CU_STREAM_CAPTURE_STATUS_NONE;
    let mut id = 0u64;
    let mut graph: CUgraph = core::ptr::null_mut();
    // SAFETY: writes status, id and graph; the dependency outputs are
    // optional and left null.
    unsafe {
        ffi::cuStreamGetCaptureInfo_v2(
            stream,
            &mut status,
            &mut id,
            &mut graph,
            core::ptr::null_mut(),
            core::ptr::null_mut(),
        )
    }
    .ok()?;
    Ok(match status {
        ffi::CU_STREAM_CAPTURE_STATUS_NONE => None,
        ffi::CU_STREAM_CAPTURE_STATUS_ACTIVE => Some(graph),
        // Invalidated: still capturing (and failing at its end). Reported
        // as a capture without a graph, so nothing is launched on it as if
        // the stream were live, and nothing is given to its graph.
        _ => Some(core::ptr::null_mut()),
    })
}

/// Sets the calling thread's stream capture mode to relaxed until dropped
/// (`cuThreadExchangeStreamCaptureMode`, pushed and popped), so that calls
/// on streams, events and pinned memory that belong to no capture are not
/// refused (`CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`) while another part of
/// the program captures a graph in global mode. Only for such calls: a call
/// that would reach a capturing stream is still refused, or checked first.
///
/// Nested on one thread, only the outermost guard exchanges the mode: the
/// inner ones find it relaxed already, and a call made of several layer
/// calls pays two driver calls, not two each.
pub(crate) struct RelaxedCapture {
    /// The mode to restore; `None` if this guard exchanged nothing (an
    /// outer one did, or the exchange failed: no driver).
    previous: Option<core::ffi::c_uint>,
    /// The depth is the thread's.
    _not_send: core::marker::PhantomData<*const ()>,
}

std::thread_local! {
    /// How many [`RelaxedCapture`] guards are alive on this thread.
    static RELAXED_DEPTH: core::cell::Cell<u32> = const { core::cell::Cell::new(0) };
}

impl RelaxedCapture {
    pub(crate) fn new() -> RelaxedCapture {
        let depth = RELAXED_DEPTH.get();
        RELAXED_DEPTH.set(depth + 1);
        let previous = if depth == 0 {
            let mut mode = ffi::CU_STREAM_CAPTURE_MODE_RELAXED;
            // SAFETY: swaps one integer with the thread's mode.
            let swapped = unsafe { ffi::cuThreadExchangeStreamCaptureMode(&mut mode) }.ok();
            swapped.ok().map(|()| mode)
        } else {
            None
        };
        RelaxedCapture {
            previous,
            _not_send: core::marker::PhantomData,
        }
    }
}

impl Drop for RelaxedCapture {
    fn drop(&mut self) {
        RELAXED_DEPTH.set(RELAXED_DEPTH.get() - 1);
        if let Some(mut previous) = self.previous {
            // SAFETY: as in `new`; restores what it found.
            let _ = unsafe { ffi::cuThreadExchangeStreamCaptureMode(&mut previous) };
        }
    }
}
