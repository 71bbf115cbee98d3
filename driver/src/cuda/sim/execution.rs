//! Execution: one queue of ops per context, run one at a time by the
//! context's worker thread (the "host-function thread"), and the waits of
//! the synchronizing calls.
//!
//! The worker runs the first op, in submission order, that may run: no
//! earlier op of its stream is queued or running, every event record it
//! was made to wait for has run, and, for a stream memory wait, the flag
//! has reached its value. Every op but a memory wait may run once the ops
//! before it have, so without memory waits the front op always may, and
//! ops run in submission order exactly. An op has run once it was submitted
//! and is neither queued nor running: every "has it run" question asks
//! that, never a watermark.

use core::sync::atomic::{AtomicU32, Ordering};
use core::time::Duration;
use std::collections::BTreeSet;
use std::format;
use std::time::Instant;

use super::super::ffi::CUstream;
use super::codes;
use super::registry::{
    Context, DeviceSide, Guard, MemCopy, Op, OpKind, State, Work, current, id_of, lock,
    mark_driver_thread, notify, wait, wait_timeout,
};

/// How often a worker whose queued ops all wait looks at their flags again:
/// the flags are written by plain CPU stores, which notify nobody. Short
/// against a chunk's copy, long enough that a blocked worker costs little
/// (and that Miri, which runs each look slowly, gets on).
const FLAG_POLL: Duration = Duration::from_micros(500);

impl Context {
    /// Whether op `seq` is queued or running.
    pub(super) fn pending(&self, seq: u64) -> bool {
        self.running.is_some_and(|(running, _)| running == seq)
            || self.queue.binary_search_by_key(&seq, |op| op.seq).is_ok()
    }
}

impl State {
    /// Queues `kind` on stream `stream` (not capturing) as part of `exec`'s
    /// launch, if any; returns its sequence number. The op waits for the
    /// event records the stream was made to wait for since its last op.
    pub(super) fn enqueue(&mut self, stream: u64, kind: OpKind, exec: Option<u64>) -> u64 {
        let entry = self.streams.get_mut(&stream).expect("checked");
        let ctx = entry.ctx;
        let deps = core::mem::take(&mut entry.waits);
        let context = self
            .contexts
            .get_mut(&ctx)
            .expect("a stream's context lives");
        context.submitted += 1;
        let seq = context.submitted;
        let deps = deps.into_iter().filter(|&d| context.pending(d)).collect();
        context.queue.push_back(Op {
            seq,
            stream,
            kind,
            exec,
            deps,
        });
        self.streams.get_mut(&stream).expect("checked").last_seq = seq;
        if let Some(exec) = exec {
            self.execs.get_mut(&exec).expect("checked").in_flight += 1;
        }
        notify();
        seq
    }

    /// An op that will never run (sticky error, context destroyed): counted
    /// as skipped, and its launch no longer keeps its executable.
    pub(super) fn discard(&mut self, device: usize, op: Op) {
        if let OpKind::Work(Work::Host(_)) = op.kind {
            self.devices[device].host_fns_skipped += 1;
        }
        if let Some(exec) = op.exec {
            self.launch_op_done(exec);
        }
    }

    /// Drops every queued op of `ctx`.
    pub(super) fn discard_queue(&mut self, ctx: u64) {
        let context = self.contexts.get_mut(&ctx).expect("a live context");
        let device = context.device;
        let queue = core::mem::take(&mut context.queue);
        for op in queue {
            self.staged.remove(&(ctx, op.seq));
            self.discard(device, op);
        }
        notify();
    }

    /// One op of `exec`'s launches has run or been dropped: a destroyed
    /// executable is freed with its last one.
    pub(super) fn launch_op_done(&mut self, exec: u64) {
        let entry = self.execs.get_mut(&exec).expect("kept while in flight");
        entry.in_flight -= 1;
        if entry.destroyed && entry.in_flight == 0 {
            self.free_exec(exec);
        }
    }

    /// Frees an executable nothing can use anymore: its user object
    /// references go.
    pub(super) fn free_exec(&mut self, exec: u64) {
        let entry = self.execs.remove(&exec).expect("a live executable");
        self.release_objects(entry.objects);
    }

    /// Waits until `done` holds (asked only while `ctx` lives). Returns at
    /// once with the sticky error if the context has one or gets one
    /// meanwhile, even while an op still runs;
    /// `CUDA_ERROR_CONTEXT_IS_DESTROYED` if it goes.
    pub(super) fn wait_until(
        mut state: Guard,
        ctx: u64,
        done: impl Fn(&State) -> bool,
    ) -> (Guard, Result<(), u32>) {
        loop {
            let outcome = match state.contexts.get(&ctx) {
                None => Some(Err(codes::CONTEXT_IS_DESTROYED)),
                Some(context) => match context.sticky {
                    Some(code) => Some(Err(code)),
                    None => done(&state).then_some(Ok(())),
                },
            };
            if let Some(outcome) = outcome {
                return (state, outcome);
            }
            state = wait(state);
        }
    }

    /// Whether op `seq` of `ctx` has run (0, no op, always has).
    pub(super) fn ran(&self, ctx: u64, seq: u64) -> bool {
        let context = &self.contexts[&ctx];
        seq <= context.submitted && !context.pending(seq)
    }

    /// Whether every op of `ctx` up to `seq` has run.
    pub(super) fn ran_through(&self, ctx: u64, seq: u64) -> bool {
        let context = &self.contexts[&ctx];
        let first_queued = context.queue.front().map(|op| op.seq);
        let running = context.running.map(|(running, _)| running);
        first_queued.into_iter().chain(running).all(|s| s > seq)
    }

    /// Whether all of `stream`'s work has run: its last op (so every op
    /// before it, and every event it waited for before that) and the event
    /// records it was made to wait for since.
    pub(super) fn stream_ran(&self, stream: u64) -> bool {
        let entry = &self.streams[&stream];
        self.ran(entry.ctx, entry.last_seq) && entry.waits.iter().all(|&w| self.ran(entry.ctx, w))
    }

    /// The index in `ctx`'s queue of the first op that may run now (see the
    /// module docs), if any. Asked by the worker, so while no op runs.
    fn next_runnable(&self, ctx: u64) -> Option<usize> {
        let context = &self.contexts[&ctx];
        debug_assert!(context.running.is_none());
        // Streams with an op queued before the one looked at.
        let mut busy: BTreeSet<u64> = BTreeSet::new();
        for (index, op) in context.queue.iter().enumerate() {
            let may_run = !busy.contains(&op.stream)
                && op.deps.iter().all(|&dep| !context.pending(dep))
                && match op.kind {
                    OpKind::WaitValue { addr, value } => self.flag_reached(addr, value),
                    _ => true,
                };
            if may_run {
                return Some(index);
            }
            busy.insert(op.stream);
        }
        None
    }

    /// Whether the u32 at host address `addr` is at or past `value`, in the
    /// cyclic order of `CU_STREAM_WAIT_VALUE_GEQ`. Memory freed since the
    /// wait was queued (a misuse `cuMemFreeHost` records) counts as
    /// reached, so that the stream does not wait forever.
    fn flag_reached(&self, addr: usize, value: u32) -> bool {
        let Some(flag) = self.pinned_flag(addr) else {
            return true;
        };
        // SAFETY: `pinned_flag` found 4 aligned bytes inside a live pinned
        // allocation, which cannot be freed while we hold the lock; the
        // caller of `cuStreamWaitValue32_v2` writes the flag only with
        // atomic stores (as the driver reads it: concurrently).
        let now = unsafe { AtomicU32::from_ptr(flag) }.load(Ordering::Acquire);
        now.wrapping_sub(value) as i32 >= 0
    }

    /// The u32 at host address `addr`, with the provenance of the live
    /// pinned allocation that holds it, if one does and `addr` is aligned.
    pub(super) fn pinned_flag(&self, addr: usize) -> Option<*mut u32> {
        if !addr.is_multiple_of(4) {
            return None;
        }
        let (&start, allocation) = self.host_allocations.range(..=addr).next_back()?;
        let end = start + allocation.layout.size();
        (addr.checked_add(4)? <= end)
            .then(|| allocation.ptr.0.wrapping_add(addr - start).cast::<u32>())
    }

    /// A device-side range of a copy about to run that is not in a live
    /// device allocation: recorded; the copy is skipped.
    fn check_device_side(&mut self, device: usize, copy: &MemCopy) -> bool {
        let sides: &[*mut u8] = match copy.device_side {
            DeviceSide::Dst => &[copy.dst.0],
            DeviceSide::Src => &[copy.src.0],
            DeviceSide::Both => &[copy.dst.0, copy.src.0],
        };
        let freed = sides
            .iter()
            .find(|ptr| !self.device_range_live(ptr.addr(), copy.bytes));
        let Some(ptr) = freed else {
            return true;
        };
        self.violation(
            Some(device),
            format!(
                "a queued copy of {} bytes reached device memory {:#x} that was freed",
                copy.bytes,
                ptr.addr()
            ),
        );
        false
    }

    /// Whether `[addr, addr + len)` lies in one live device allocation.
    pub(super) fn device_range_live(&self, addr: usize, len: usize) -> bool {
        self.device_allocations
            .range(..=addr)
            .next_back()
            .is_some_and(|(&start, a)| addr + len <= start + a.layout.size())
    }
}

/// What a call that queues work on `stream` does first where its device
/// has a queue limit ([`limit_queue`](super::limit_queue)): waits while the
/// stream's context holds that many ops not started, as the driver's call
/// waits for room in its queue. An unknown stream passes (the call fails on
/// it).
pub(super) fn wait_for_room(state: Guard, stream: CUstream) -> Guard {
    let raw = id_of(stream);
    let ctx = if raw <= 2 {
        Some(current())
    } else {
        state.streams.get(&raw).map(|s| s.ctx)
    };
    let Some((ctx, limit)) = ctx.and_then(|ctx| {
        let device = state.contexts.get(&ctx)?.device;
        Some((ctx, state.devices[device].queue_limit?))
    }) else {
        return state;
    };
    State::wait_until(state, ctx, |state| state.contexts[&ctx].queue.len() < limit).0
}

/// Starts the worker thread of a new context.
pub(super) fn spawn_worker(ctx: u64, device: usize) -> std::thread::JoinHandle<()> {
    std::thread::Builder::new()
        .name(format!("hostcopy-sim-device{device}"))
        .spawn(move || worker(ctx))
        .expect("spawn a context's worker thread")
}

/// A context's worker: runs its ops one at a time, the first that may run
/// first (see the module docs), while the device is not held; ends when the
/// context is destroyed.
fn worker(ctx: u64) {
    mark_driver_thread();
    let mut state = lock();
    loop {
        let Some(context) = state.contexts.get_mut(&ctx).filter(|c| !c.closing) else {
            return;
        };
        let device = context.device;
        if state.devices[device].held || state.contexts[&ctx].queue.is_empty() {
            state = wait(state);
            continue;
        }
        let Some(index) = state.next_runnable(ctx) else {
            // Every queued op waits, at bottom on a flag: look again soon.
            state = wait_timeout(state, FLAG_POLL);
            continue;
        };
        let context = state.contexts.get_mut(&ctx).expect("checked");
        let op = context.queue.remove(index).expect("checked");
        context.running = Some((op.seq, op.kind));
        let runs = match op.kind {
            OpKind::Work(Work::Copy(copy)) => state.check_device_side(device, &copy),
            _ => true,
        };
        drop(state);
        if runs {
            run(op.kind);
        }
        state = lock();
        state.staged.remove(&(ctx, op.seq));
        if let Some(context) = state.contexts.get_mut(&ctx) {
            context.running = None;
        }
        match op.kind {
            OpKind::Work(Work::Host(_)) => state.devices[device].host_fns_run += 1,
            OpKind::Record { event } => {
                if let Some(entry) = state.events.get_mut(&event)
                    && entry.record_seq == Some(op.seq)
                {
                    entry.stamp = Some(Instant::now());
                }
            }
            OpKind::Work(Work::Copy(_)) | OpKind::WaitValue { .. } => {}
        }
        if let Some(exec) = op.exec {
            state.launch_op_done(exec);
        }
        notify();
    }
}

/// Runs one op, without the lock.
fn run(kind: OpKind) {
    match kind {
        OpKind::Work(Work::Host(call)) => {
            // SAFETY: `cuLaunchHostFunc` / `cuGraphAddHostNode`'s caller
            // promised the function may run on its data in stream order,
            // which is now.
            unsafe { (call.f)(call.user_data.0) }
        }
        OpKind::Work(Work::Copy(copy)) => {
            // SAFETY: the device side was just checked to be live; the
            // caller of the copy promised the host side stays valid and
            // untouched until the copy has run in stream order.
            unsafe { core::ptr::copy(copy.src.0, copy.dst.0, copy.bytes) }
        }
        OpKind::Record { .. } | OpKind::WaitValue { .. } => {}
    }
}
