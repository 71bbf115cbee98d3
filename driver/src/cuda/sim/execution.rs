//! Execution: one FIFO of ops per context, run in order by the context's
//! worker thread (the "host-function thread"), and the waits of the
//! synchronizing calls.

use std::format;
use std::time::Instant;

use super::codes;
use super::registry::{
    DeviceSide, Guard, MemCopy, Op, OpKind, State, Work, lock, mark_driver_thread, notify, wait,
};

impl State {
    /// Queues `kind` on stream `stream` (not capturing) as part of `exec`'s
    /// launch, if any; returns its sequence number.
    pub(super) fn enqueue(&mut self, stream: u64, kind: OpKind, exec: Option<u64>) -> u64 {
        let ctx = self.streams[&stream].ctx;
        let context = self
            .contexts
            .get_mut(&ctx)
            .expect("a stream's context lives");
        context.submitted += 1;
        let seq = context.submitted;
        context.queue.push_back(Op { seq, kind, exec });
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

    /// Waits until op `seq` of `ctx` has run. Returns at once with the sticky
    /// error if the context has one or gets one meanwhile, even while an op
    /// still runs; `CUDA_ERROR_CONTEXT_IS_DESTROYED` if it goes.
    pub(super) fn wait_for(mut state: Guard, ctx: u64, seq: u64) -> (Guard, Result<(), u32>) {
        loop {
            let outcome = match state.contexts.get(&ctx) {
                None => Some(Err(codes::CONTEXT_IS_DESTROYED)),
                Some(context) => match context.sticky {
                    Some(code) => Some(Err(code)),
                    None => (context.completed >= seq).then_some(Ok(())),
                },
            };
            if let Some(outcome) = outcome {
                return (state, outcome);
            }
            state = wait(state);
        }
    }

    /// Whether op `seq` of `ctx` has run.
    pub(super) fn done(&self, ctx: u64, seq: u64) -> bool {
        self.contexts[&ctx].completed >= seq
    }

    /// A device-side range of a copy about to run that is not in a live
    /// device allocation: recorded; the copy is skipped.
    fn check_device_side(&mut self, device: usize, copy: &MemCopy) -> bool {
        let ptr = match copy.device_side {
            DeviceSide::Dst => copy.dst.0,
            DeviceSide::Src => copy.src.0,
        };
        if self.device_range_live(ptr.addr(), copy.bytes) {
            return true;
        }
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

/// Starts the worker thread of a new context.
pub(super) fn spawn_worker(ctx: u64, device: usize) -> std::thread::JoinHandle<()> {
    std::thread::Builder::new()
        .name(format!("hostcopy-sim-device{device}"))
        .spawn(move || worker(ctx))
        .expect("spawn a context's worker thread")
}

/// A context's worker: runs its ops one at a time, in queue order, while the
/// device is not held; ends when the context is destroyed.
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
        let context = state.contexts.get_mut(&ctx).expect("checked");
        let op = context.queue.pop_front().expect("checked");
        context.running = Some(op.kind);
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
            context.completed = op.seq;
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
            OpKind::Work(Work::Copy(_)) => {}
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
        OpKind::Record { .. } => {}
    }
}
