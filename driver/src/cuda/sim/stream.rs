//! Streams and events. A stream is an order among its context's queued
//! ops (an op waits for the stream's earlier ones, and for the events the
//! stream was made to wait for); an event is the op of its last record.
//! Streams wait for each other only through events, or when a stream
//! memory wait holds one of them (see `execution.rs`).

use core::ffi::{c_uint, c_void};
use std::format;
use std::vec::Vec;

use super::super::ffi::{
    CU_EVENT_DISABLE_TIMING, CU_STREAM_WAIT_VALUE_GEQ, CUcontext, CUdeviceptr, CUevent, CUhostFn,
    CUstream, CuResult,
};
use super::codes::{self, result};
use super::execution::wait_for_room;
use super::registry::{
    Event, HostCall, Kind, OpKind, SendPtr, State, Stream, Work, handle, id_of, lock,
};

impl State {
    /// A new stream in `ctx`.
    pub(super) fn new_stream(&mut self, ctx: u64) -> u64 {
        let id = self.new_id();
        let device = self.contexts[&ctx].device;
        self.streams.insert(
            id,
            Stream {
                ctx,
                device,
                last_seq: 0,
                waits: Vec::new(),
                capture: None,
                tail: Vec::new(),
                handed_out: Default::default(),
            },
        );
        id
    }

    /// Looks up a live event and passes the gate for a call on it.
    fn event_call(&mut self, entry: &'static str, raw: CUevent) -> Result<u64, u32> {
        let event = self.event(entry, id_of(raw))?;
        let ctx = self.events[&event].ctx;
        self.enter(ctx, entry, true)?;
        Ok(event)
    }

    /// An event used with a stream of another context.
    fn same_context(&mut self, entry: &str, stream: u64, event: u64) -> Result<(), u32> {
        let (ctx, device) = (self.streams[&stream].ctx, self.streams[&stream].device);
        if self.events[&event].ctx == ctx {
            return Ok(());
        }
        self.violation(
            Some(device),
            format!("{entry}: event {event:#x} and stream {stream:#x} are of different contexts"),
        );
        Err(codes::INVALID_CONTEXT)
    }

    /// Where a wait for `event` ends: `None` if there is nothing to wait for.
    fn event_point(&self, event: u64) -> Result<Option<(u64, u64)>, u32> {
        let entry = &self.events[&event];
        if entry.captured.is_some() {
            return Err(codes::CAPTURED_EVENT);
        }
        Ok(entry.record_seq.map(|seq| (entry.ctx, seq)))
    }
}

/// `cuStreamCreate`, in the current context.
///
/// # Safety
///
/// `stream` is writable.
pub(crate) unsafe fn cuStreamCreate(stream: *mut CUstream, _flags: c_uint) -> CuResult {
    const ENTRY: &str = "cuStreamCreate";
    let mut state = lock();
    result((|| {
        let ctx = state.current_context(ENTRY)?;
        state.enter(ctx, ENTRY, false)?;
        if stream.is_null() {
            return Err(codes::INVALID_VALUE);
        }
        let id = state.new_stream(ctx);
        // SAFETY: non-null and writable (our caller).
        unsafe { stream.write(handle(id)) };
        Ok(())
    })())
}

/// `cuStreamDestroy_v2`: queued work still runs (the queue is the context's).
/// A capture the stream is in is invalidated.
///
/// # Safety
///
/// Nothing: it takes handles only, each checked (`unsafe` as the entry
/// point it stands in for).
pub(crate) unsafe fn cuStreamDestroy_v2(stream: CUstream) -> CuResult {
    const ENTRY: &str = "cuStreamDestroy_v2";
    let mut state = lock();
    result((|| {
        let stream = state.stream_call(ENTRY, stream)?;
        let ctx = state.streams[&stream].ctx;
        if state.contexts[&ctx].default_stream == stream {
            return Err(codes::INVALID_HANDLE);
        }
        if let Some(capture) = state.streams[&stream].capture {
            state.invalidate_capture(capture);
            if let Some(c) = state.captures.get_mut(&capture) {
                c.streams.retain(|s| *s != stream);
            }
        }
        let entry = state.streams.remove(&stream).expect("checked");
        state.bury(stream, Kind::Stream, entry.device);
        Ok(())
    })())
}

/// `cuStreamSynchronize`: waits for the stream's queued ops and the events
/// it was made to wait for; returns the sticky error at once, even while
/// one of them runs.
///
/// # Safety
///
/// Nothing: it takes handles only, each checked (`unsafe` as the entry
/// point it stands in for).
pub(crate) unsafe fn cuStreamSynchronize(stream: CUstream) -> CuResult {
    const ENTRY: &str = "cuStreamSynchronize";
    let mut state = lock();
    let stream = match state.stream_call(ENTRY, stream) {
        Ok(stream) => stream,
        Err(code) => return CuResult(code),
    };
    if let Err(code) = state.refuse_if_capturing(stream) {
        return CuResult(code);
    }
    let ctx = state.streams[&stream].ctx;
    // A stream destroyed meanwhile (by another thread: a misuse) counts as
    // done: its handle was valid when the call began.
    let (_state, outcome) = State::wait_until(state, ctx, |state| {
        !state.streams.contains_key(&stream) || state.stream_ran(stream)
    });
    result(outcome)
}

/// `cuStreamQuery`: `CUDA_ERROR_NOT_READY` while queued ops remain.
///
/// # Safety
///
/// Nothing: it takes handles only, each checked (`unsafe` as the entry
/// point it stands in for).
pub(crate) unsafe fn cuStreamQuery(stream: CUstream) -> CuResult {
    const ENTRY: &str = "cuStreamQuery";
    let mut state = lock();
    result((|| {
        let stream = state.stream_call(ENTRY, stream)?;
        state.refuse_if_capturing(stream)?;
        if state.stream_ran(stream) {
            Ok(())
        } else {
            Err(codes::NOT_READY)
        }
    })())
}

/// `cuStreamGetCtx`: needs no current context.
///
/// # Safety
///
/// `context` is writable.
pub(crate) unsafe fn cuStreamGetCtx(stream: CUstream, context: *mut CUcontext) -> CuResult {
    const ENTRY: &str = "cuStreamGetCtx";
    let mut state = lock();
    result((|| {
        let stream = state.stream(ENTRY, id_of(stream))?;
        let ctx = state.streams[&stream].ctx;
        state.enter(ctx, ENTRY, false)?;
        if context.is_null() {
            return Err(codes::INVALID_VALUE);
        }
        // SAFETY: non-null and writable (our caller).
        unsafe { context.write(handle(ctx)) };
        Ok(())
    })())
}

/// `cuStreamWaitEvent`: the stream's next op, and a synchronize of it, wait
/// for the event's last record (as it was at this call); on a captured
/// event it joins the stream to that capture.
///
/// # Safety
///
/// Nothing: it takes handles only, each checked (`unsafe` as the entry
/// point it stands in for).
pub(crate) unsafe fn cuStreamWaitEvent(
    stream: CUstream,
    event: CUevent,
    _flags: c_uint,
) -> CuResult {
    const ENTRY: &str = "cuStreamWaitEvent";
    let mut state = lock();
    result((|| {
        let stream = state.stream_call(ENTRY, stream)?;
        let event = state.event(ENTRY, id_of(event))?;
        state.same_context(ENTRY, stream, event)?;
        let own = state.streams[&stream].capture;
        match (state.events[&event].captured.clone(), own) {
            (Some((capture, _)), _) if !state.captures.contains_key(&capture) => {
                Err(codes::STREAM_CAPTURE_ISOLATION)
            }
            (Some((capture, _)), Some(own)) if own != capture => {
                state.invalidate_capture(own);
                Err(codes::STREAM_CAPTURE_ISOLATION)
            }
            (Some((capture, nodes)), own) => {
                if state.captures[&capture].invalidated {
                    return Err(codes::STREAM_CAPTURE_INVALIDATED);
                }
                let s = state.streams.get_mut(&stream).expect("checked");
                if own.is_none() {
                    s.capture = Some(capture);
                    s.tail.clear();
                    let c = state.captures.get_mut(&capture).expect("checked");
                    c.streams.push(stream);
                }
                let s = state.streams.get_mut(&stream).expect("checked");
                for node in nodes {
                    if !s.tail.contains(&node) {
                        s.tail.push(node);
                    }
                }
                Ok(())
            }
            (None, Some(own)) => {
                // An event from outside the capture: not allowed without
                // `CU_EVENT_WAIT_EXTERNAL`, which nothing here uses.
                state.invalidate_capture(own);
                Err(codes::STREAM_CAPTURE_ISOLATION)
            }
            (None, None) => {
                // The stream's next op waits for the record; until then a
                // synchronize of the stream does. A record that has run
                // needs no waiting, which keeps the list short.
                let recorded = state.events[&event]
                    .record_seq
                    .filter(|&seq| !state.ran(state.events[&event].ctx, seq));
                let state = &mut *state;
                let context = &state.contexts[&state.streams[&stream].ctx];
                let s = state.streams.get_mut(&stream).expect("checked");
                s.waits.retain(|&w| context.pending(w));
                s.waits.extend(recorded);
                let device = s.device;
                state.devices[device].stream_waits += 1;
                Ok(())
            }
        }
    })())
}

/// `cuLaunchHostFunc`: queued to run on the context's worker thread, or a
/// host node if the stream is capturing.
///
/// # Safety
///
/// `f(user_data)` is valid to run on another thread in stream order (for a
/// capture: at every launch of the graph's executables).
pub(crate) unsafe fn cuLaunchHostFunc(
    stream: CUstream,
    f: CUhostFn,
    user_data: *mut c_void,
) -> CuResult {
    const ENTRY: &str = "cuLaunchHostFunc";
    let mut state = wait_for_room(lock(), stream);
    result((|| {
        let stream = state.stream_call(ENTRY, stream)?;
        let Some(f) = f else {
            return Err(codes::INVALID_VALUE);
        };
        let work = Work::Host(HostCall {
            f,
            user_data: SendPtr(user_data),
        });
        if !state.capture_work(stream, work)? {
            state.enqueue(stream, OpKind::Work(work), None);
        }
        Ok(())
    })())
}

/// `cuStreamWaitValue32_v2`: the stream's later ops wait until the u32 at
/// `addr` is at or past `value` (`CU_STREAM_WAIT_VALUE_GEQ`, cyclic; the
/// only condition modelled: other flags are `CUDA_ERROR_NOT_SUPPORTED`);
/// other streams go on meanwhile. `addr` must be 4 aligned bytes inside a
/// live pinned allocation (`cuMemHostAlloc`, whose device address is its
/// host address), or the call is a violation and
/// `CUDA_ERROR_INVALID_VALUE`. Refused on a capturing stream, whose capture
/// is invalidated.
///
/// # Safety
///
/// Nothing the simulator could check more: the address is checked now, and
/// freeing it while the wait is queued is recorded.
pub(crate) unsafe fn cuStreamWaitValue32_v2(
    stream: CUstream,
    addr: CUdeviceptr,
    value: u32,
    flags: c_uint,
) -> CuResult {
    const ENTRY: &str = "cuStreamWaitValue32_v2";
    let mut state = wait_for_room(lock(), stream);
    result((|| {
        let stream = state.stream_call(ENTRY, stream)?;
        state.refuse_if_capturing(stream)?;
        let device = state.streams[&stream].device;
        if flags != CU_STREAM_WAIT_VALUE_GEQ || state.devices[device].refuses_stream_memory_waits {
            return Err(codes::NOT_SUPPORTED);
        }
        let addr = usize::try_from(addr).unwrap_or(usize::MAX);
        if state.pinned_flag(addr).is_none() {
            state.violation(
                Some(device),
                format!(
                    "{ENTRY}: {addr:#x} is not 4 aligned bytes of a live pinned allocation \
                     (cuMemHostAlloc)"
                ),
            );
            return Err(codes::INVALID_VALUE);
        }
        state.enqueue(stream, OpKind::WaitValue { addr, value }, None);
        state.devices[device].wait_value_ops += 1;
        Ok(())
    })())
}

/// `cuEventCreate`, in the current context.
///
/// # Safety
///
/// `event` is writable.
pub(crate) unsafe fn cuEventCreate(event: *mut CUevent, flags: c_uint) -> CuResult {
    const ENTRY: &str = "cuEventCreate";
    let mut state = lock();
    result((|| {
        let ctx = state.current_context(ENTRY)?;
        state.enter(ctx, ENTRY, false)?;
        if event.is_null() {
            return Err(codes::INVALID_VALUE);
        }
        let id = state.new_id();
        let device = state.contexts[&ctx].device;
        state.events.insert(
            id,
            Event {
                ctx,
                device,
                timing: flags & CU_EVENT_DISABLE_TIMING == 0,
                record_seq: None,
                stamp: None,
                captured: None,
            },
        );
        // SAFETY: non-null and writable (our caller).
        unsafe { event.write(handle(id)) };
        Ok(())
    })())
}

/// `cuEventRecord`: an op in the queue, or, on a capturing stream, a mark of
/// the stream's current nodes that another stream can wait on to join.
///
/// # Safety
///
/// Nothing: it takes handles only, each checked (`unsafe` as the entry
/// point it stands in for).
pub(crate) unsafe fn cuEventRecord(event: CUevent, stream: CUstream) -> CuResult {
    const ENTRY: &str = "cuEventRecord";
    let mut state = wait_for_room(lock(), stream);
    result((|| {
        let stream = state.stream_call(ENTRY, stream)?;
        let event = state.event(ENTRY, id_of(event))?;
        state.same_context(ENTRY, stream, event)?;
        if let Some(capture) = state.streams[&stream].capture {
            if state.captures[&capture].invalidated {
                return Err(codes::STREAM_CAPTURE_INVALIDATED);
            }
            let nodes = state.streams[&stream].tail.clone();
            state.events.get_mut(&event).expect("checked").captured = Some((capture, nodes));
            return Ok(());
        }
        let seq = state.enqueue(stream, OpKind::Record { event }, None);
        let device = state.streams[&stream].device;
        state.devices[device].event_records += 1;
        let entry = state.events.get_mut(&event).expect("checked");
        entry.record_seq = Some(seq);
        entry.stamp = None;
        entry.captured = None;
        Ok(())
    })())
}

/// `cuEventSynchronize`: waits for the ops before the last record; the
/// sticky error at once.
///
/// # Safety
///
/// Nothing: it takes handles only, each checked (`unsafe` as the entry
/// point it stands in for).
pub(crate) unsafe fn cuEventSynchronize(event: CUevent) -> CuResult {
    const ENTRY: &str = "cuEventSynchronize";
    let mut state = lock();
    let point = state
        .event_call(ENTRY, event)
        .and_then(|event| state.event_point(event));
    match point {
        Err(code) => CuResult(code),
        Ok(None) => CuResult(codes::SUCCESS),
        Ok(Some((ctx, seq))) => {
            result(State::wait_until(state, ctx, |state| state.ran(ctx, seq)).1)
        }
    }
}

/// `cuEventQuery`: `CUDA_ERROR_NOT_READY` until the last record has run.
///
/// # Safety
///
/// Nothing: it takes handles only, each checked (`unsafe` as the entry
/// point it stands in for).
pub(crate) unsafe fn cuEventQuery(event: CUevent) -> CuResult {
    const ENTRY: &str = "cuEventQuery";
    let mut state = lock();
    result((|| {
        let event = state.event_call(ENTRY, event)?;
        match state.event_point(event)? {
            Some((ctx, seq)) if !state.ran(ctx, seq) => Err(codes::NOT_READY),
            _ => Ok(()),
        }
    })())
}

/// `cuEventElapsedTime`: milliseconds between the times the two records ran.
///
/// # Safety
///
/// `milliseconds` is writable.
pub(crate) unsafe fn cuEventElapsedTime(
    milliseconds: *mut f32,
    start: CUevent,
    end: CUevent,
) -> CuResult {
    const ENTRY: &str = "cuEventElapsedTime";
    let mut state = lock();
    result((|| {
        let end = state.event_call(ENTRY, end)?;
        let start = state.event(ENTRY, id_of(start))?;
        if milliseconds.is_null() {
            return Err(codes::INVALID_VALUE);
        }
        let (a, b) = (&state.events[&start], &state.events[&end]);
        if !a.timing || !b.timing || a.record_seq.is_none() || b.record_seq.is_none() {
            return Err(codes::INVALID_HANDLE);
        }
        let (Some(t0), Some(t1)) = (a.stamp, b.stamp) else {
            return Err(codes::NOT_READY);
        };
        let ms = if t1 >= t0 {
            t1.duration_since(t0).as_secs_f32() * 1e3
        } else {
            -(t0.duration_since(t1).as_secs_f32() * 1e3)
        };
        // SAFETY: non-null and writable (our caller).
        unsafe { milliseconds.write(ms) };
        Ok(())
    })())
}

/// `cuEventDestroy_v2`.
///
/// # Safety
///
/// Nothing: it takes handles only, each checked (`unsafe` as the entry
/// point it stands in for).
pub(crate) unsafe fn cuEventDestroy_v2(event: CUevent) -> CuResult {
    const ENTRY: &str = "cuEventDestroy_v2";
    let mut state = lock();
    result((|| {
        let event = state.event_call(ENTRY, event)?;
        let entry = state.events.remove(&event).expect("checked");
        state.bury(event, Kind::Event, entry.device);
        Ok(())
    })())
}
