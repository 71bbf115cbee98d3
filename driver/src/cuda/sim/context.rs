//! Devices, primary contexts and the calling thread's current context.
//!
//! A device's primary context exists while it is retained. When its last
//! retain goes it is destroyed: queued ops are dropped, the op running then
//! (if any) finishes, and only then are its allocations really freed and
//! every handle made in it invalid. A later retain
//! makes a new context with a new handle, so a stale handle is recognized.

use core::ffi::{c_char, c_int, c_uint};
use std::collections::VecDeque;
use std::format;
use std::vec::Vec;

use super::super::ffi::{CUcontext, CUdevice, CuResult};
use super::codes::{self, result};
use super::execution::spawn_worker;
use super::objects::settle_destructors;
use super::registry::{
    Context, Guard, Kind, State, current, handle, id_of, lock, notify, set_current,
};
use std::thread::JoinHandle;

/// The CUDA version the simulator reports (12.8).
const DRIVER_VERSION: c_int = 12080;

impl State {
    /// A device ordinal: `CUDA_ERROR_INVALID_DEVICE` if no such device.
    fn device(&self, ordinal: CUdevice) -> Result<usize, u32> {
        usize::try_from(ordinal)
            .ok()
            .filter(|&d| d < self.devices.len())
            .ok_or(codes::INVALID_DEVICE)
    }

    /// Creates `device`'s primary context, with its default stream and worker.
    fn create_context(&mut self, device: usize) -> u64 {
        let ctx = self.new_id();
        let default_stream = self.new_id();
        self.contexts.insert(
            ctx,
            Context {
                device,
                sticky: None,
                queue: VecDeque::new(),
                running: None,
                submitted: 0,
                default_stream,
                closing: false,
            },
        );
        self.streams.insert(
            default_stream,
            super::registry::Stream {
                ctx,
                device,
                last_seq: 0,
                waits: Vec::new(),
                capture: None,
                tail: Vec::new(),
                handed_out: Default::default(),
            },
        );
        self.devices[device].context = Some(ctx);
        let worker = spawn_worker(ctx, device);
        self.workers.insert(ctx, worker);
        ctx
    }

    /// Starts destroying a context after its last release: queued ops are
    /// dropped and the device has no context any more (a new retain makes
    /// a new one), but an op running now finishes on its own, with the
    /// context's memory still there. Returns the worker, which ends after
    /// that op: join it with the lock released, then call
    /// [`destroy_context`](Self::destroy_context).
    pub(super) fn close_context(&mut self, ctx: u64) -> Option<JoinHandle<()>> {
        let context = self.contexts.get_mut(&ctx).expect("a live context");
        context.closing = true;
        let device = context.device;
        self.discard_queue(ctx);
        self.devices[device].context = None;
        notify();
        self.workers.remove(&ctx)
    }

    /// Destroys a closed context whose worker has ended: see the module
    /// docs. Ops queued after the last release (a misuse) are dropped.
    pub(super) fn destroy_context(&mut self, ctx: u64) {
        let device = self.contexts[&ctx].device;
        self.discard_queue(ctx);
        let captures: Vec<u64> = self
            .captures
            .iter()
            .filter(|(_, c)| c.ctx == ctx)
            .map(|(id, _)| *id)
            .collect();
        for capture in captures {
            self.captures.remove(&capture);
        }
        let streams: Vec<u64> = owned_by(&self.streams, ctx, |s| s.ctx);
        for stream in streams {
            self.streams.remove(&stream);
            self.bury(stream, Kind::Stream, device);
        }
        for event in owned_by(&self.events, ctx, |e| e.ctx) {
            self.events.remove(&event);
            self.bury(event, Kind::Event, device);
        }
        for graph in owned_by(&self.graphs, ctx, |g| g.ctx) {
            self.destroy_graph(graph);
        }
        for exec in owned_by(&self.execs, ctx, |e| e.ctx) {
            let entry = self.execs.get_mut(&exec).expect("listed");
            if !entry.destroyed {
                entry.destroyed = true;
                self.bury(exec, Kind::Exec, device);
            }
            if self.execs[&exec].in_flight == 0 {
                self.free_exec(exec);
            }
        }
        for module in owned_by(&self.modules, ctx, |m| m.ctx) {
            self.unload_module(module);
        }
        self.free_context_memory(ctx);
        self.contexts.remove(&ctx);
        self.bury(ctx, Kind::Context, device);
        notify();
    }
}

/// The ids of the entries of `map` that belong to `ctx`.
fn owned_by<T>(
    map: &std::collections::BTreeMap<u64, T>,
    ctx: u64,
    of: impl Fn(&T) -> u64,
) -> Vec<u64> {
    map.iter()
        .filter(|(_, v)| of(v) == ctx)
        .map(|(id, _)| *id)
        .collect()
}

/// Looks up a live context for `entry` (`CUDA_ERROR_INVALID_CONTEXT` and a
/// violation if it is not one).
fn context(state: &mut Guard, entry: &str, raw: CUcontext) -> Result<u64, u32> {
    let ctx = id_of(raw);
    if state.contexts.contains_key(&ctx) {
        return Ok(ctx);
    }
    let device = state.dead.get(&ctx).map(|&(_, d)| d);
    let what = match state.dead.get(&ctx) {
        Some((Kind::Context, _)) => "destroyed",
        _ => "unknown",
    };
    state.violation(device, format!("{entry}: {what} context {ctx:#x}"));
    Err(codes::INVALID_CONTEXT)
}

/// Whether `cuInit` succeeded in this process: before it, the driver
/// answers `cuCtxGetCurrent` with `CUDA_ERROR_NOT_INITIALIZED`, as
/// libcuda does (the other entry points are not refused here).
static INITIALIZED: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

/// `cuInit`: always succeeds (flags must be 0).
///
/// # Safety
///
/// Nothing to uphold (`unsafe` as the entry point it stands in for).
pub(crate) unsafe fn cuInit(flags: c_uint) -> CuResult {
    if flags != 0 {
        return CuResult(codes::INVALID_VALUE);
    }
    INITIALIZED.store(true, core::sync::atomic::Ordering::Relaxed);
    CuResult(codes::SUCCESS)
}

/// `cuDriverGetVersion`: 12080.
///
/// # Safety
///
/// `version` is writable.
pub(crate) unsafe fn cuDriverGetVersion(version: *mut c_int) -> CuResult {
    if version.is_null() {
        return CuResult(codes::INVALID_VALUE);
    }
    // SAFETY: non-null and writable (our caller).
    unsafe { version.write(DRIVER_VERSION) };
    CuResult(codes::SUCCESS)
}

/// `cuDeviceGetCount`: the devices made so far by `new_device`.
///
/// # Safety
///
/// `count` is writable.
pub(crate) unsafe fn cuDeviceGetCount(count: *mut c_int) -> CuResult {
    if count.is_null() {
        return CuResult(codes::INVALID_VALUE);
    }
    let devices = lock().devices.len();
    // SAFETY: non-null and writable (our caller).
    unsafe { count.write(c_int::try_from(devices).unwrap_or(c_int::MAX)) };
    CuResult(codes::SUCCESS)
}

/// `cuDeviceGet`: the device handle is the ordinal.
///
/// # Safety
///
/// `device` is writable.
pub(crate) unsafe fn cuDeviceGet(device: *mut CUdevice, ordinal: c_int) -> CuResult {
    let mut state = lock();
    result((|| {
        let found = state.device(ordinal)?;
        state.fault(found, "cuDeviceGet")?;
        if device.is_null() {
            return Err(codes::INVALID_VALUE);
        }
        // SAFETY: non-null and writable (our caller).
        unsafe { device.write(ordinal) };
        Ok(())
    })())
}

/// `CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED`.
const ATTRIBUTE_MEMORY_POOLS_SUPPORTED: c_uint = 115;

/// `cuDeviceGetAttribute`, for programs that load the simulator as their
/// libcuda ([`c_entry_points`](super::c_entry_points)); this crate's layer
/// does not call it. It answers whether the device has memory pools, no:
/// nothing here models `cuMemAllocAsync`. Any other attribute is
/// `CUDA_ERROR_INVALID_VALUE`.
///
/// # Safety
///
/// `value` is writable.
pub(crate) unsafe fn cuDeviceGetAttribute(
    value: *mut c_int,
    attribute: c_uint,
    device: CUdevice,
) -> CuResult {
    let mut state = lock();
    result((|| {
        let found = state.device(device)?;
        state.fault(found, "cuDeviceGetAttribute")?;
        if value.is_null() || attribute != ATTRIBUTE_MEMORY_POOLS_SUPPORTED {
            return Err(codes::INVALID_VALUE);
        }
        // SAFETY: non-null and writable (our caller).
        unsafe { value.write(0) };
        Ok(())
    })())
}

/// `cuDeviceGetName`: `hostcopy simulated device N`.
///
/// # Safety
///
/// `name` is writable for `len` bytes.
pub(crate) unsafe fn cuDeviceGetName(name: *mut c_char, len: c_int, device: CUdevice) -> CuResult {
    let mut state = lock();
    result((|| {
        let found = state.device(device)?;
        state.fault(found, "cuDeviceGetName")?;
        let len = usize::try_from(len).map_err(|_| codes::INVALID_VALUE)?;
        if name.is_null() || len == 0 {
            return Err(codes::INVALID_VALUE);
        }
        let text = format!("hostcopy simulated device {found}");
        let n = text.len().min(len - 1);
        // SAFETY: `len` writable bytes (our caller); `n + 1 <= len`.
        unsafe {
            core::ptr::copy_nonoverlapping(text.as_ptr(), name.cast::<u8>(), n);
            name.add(n).write(0);
        }
        Ok(())
    })())
}

/// `cuDevicePrimaryCtxRetain`: creates the context on the first retain.
///
/// # Safety
///
/// `context` is writable.
pub(crate) unsafe fn cuDevicePrimaryCtxRetain(
    context: *mut CUcontext,
    device: CUdevice,
) -> CuResult {
    let mut state = lock();
    result((|| {
        let device = state.device(device)?;
        state.off_driver_threads(device, "cuDevicePrimaryCtxRetain")?;
        state.fault(device, "cuDevicePrimaryCtxRetain")?;
        if context.is_null() {
            return Err(codes::INVALID_VALUE);
        }
        let ctx = match state.devices[device].context {
            Some(ctx) => ctx,
            None => state.create_context(device),
        };
        state.devices[device].retains += 1;
        // SAFETY: non-null and writable (our caller).
        unsafe { context.write(handle(ctx)) };
        Ok(())
    })())
}

/// `cuDevicePrimaryCtxRelease_v2`: the last release destroys the context.
/// Works after a sticky error, as in the driver. It returns once the
/// context's worker has ended (after the host function it runs, if any:
/// one that never returns blocks the release) and the destructors due have
/// run, so that no simulator thread outlives a test.
///
/// # Safety
///
/// Nothing made in the context is used after its last release.
pub(crate) unsafe fn cuDevicePrimaryCtxRelease_v2(device: CUdevice) -> CuResult {
    let mut state = lock();
    result((move || {
        let device = state.device(device)?;
        state.off_driver_threads(device, "cuDevicePrimaryCtxRelease_v2")?;
        state.fault(device, "cuDevicePrimaryCtxRelease_v2")?;
        let Some(ctx) = state.devices[device].context else {
            state.violation(
                Some(device),
                "cuDevicePrimaryCtxRelease_v2: released more often than retained".into(),
            );
            return Err(codes::INVALID_CONTEXT);
        };
        state.devices[device].retains -= 1;
        if state.devices[device].retains > 0 {
            return Ok(());
        }
        // The memory goes only once the worker has ended: a host function
        // running now may still use it.
        let worker = state.close_context(ctx);
        drop(state);
        if let Some(worker) = worker {
            let _ = worker.join();
        }
        lock().destroy_context(ctx);
        settle_destructors();
        Ok(())
    })())
}

/// `cuCtxSetCurrent`: binds the context to the calling thread (null unbinds).
///
/// # Safety
///
/// Nothing to uphold: the handle is checked.
pub(crate) unsafe fn cuCtxSetCurrent(context: CUcontext) -> CuResult {
    const ENTRY: &str = "cuCtxSetCurrent";
    let mut state = lock();
    result((|| {
        if context.is_null() {
            set_current(0);
            return Ok(());
        }
        let ctx = self::context(&mut state, ENTRY, context)?;
        let device = state.contexts[&ctx].device;
        state.fault(device, ENTRY)?;
        set_current(ctx);
        Ok(())
    })())
}

/// `cuCtxGetCurrent`: the calling thread's context, null if none (a
/// destroyed one is returned as it is, as the driver does).
///
/// # Safety
///
/// `context` is writable.
pub(crate) unsafe fn cuCtxGetCurrent(context: *mut CUcontext) -> CuResult {
    let mut state = lock();
    result((|| {
        if context.is_null() {
            return Err(codes::INVALID_VALUE);
        }
        if !INITIALIZED.load(core::sync::atomic::Ordering::Relaxed) {
            return Err(codes::NOT_INITIALIZED);
        }
        let ctx = current();
        if let Some(device) = state.contexts.get(&ctx).map(|c| c.device) {
            state.fault(device, "cuCtxGetCurrent")?;
        }
        // SAFETY: non-null and writable (our caller).
        unsafe { context.write(handle(ctx)) };
        Ok(())
    })())
}

std::thread_local! {
    /// The calling thread's stream capture mode (0: global, the default).
    static CAPTURE_MODE: core::cell::Cell<c_uint> = const { core::cell::Cell::new(0) };
}

/// The calling thread's stream capture mode (`CUstreamCaptureMode`: 0
/// global, the default; 1 thread-local; 2 relaxed).
pub fn thread_capture_mode() -> u32 {
    CAPTURE_MODE.with(core::cell::Cell::get)
}

/// `cuThreadExchangeStreamCaptureMode`: swaps the calling thread's mode,
/// which decides which frees and unloads a capture prohibits
/// (`State::refuse_unsafe_call`); a test can see it restored.
///
/// # Safety
///
/// `mode` is readable and writable.
pub(crate) unsafe fn cuThreadExchangeStreamCaptureMode(mode: *mut c_uint) -> CuResult {
    if mode.is_null() {
        return CuResult(codes::INVALID_VALUE);
    }
    // SAFETY: readable and writable (our caller).
    unsafe { mode.write(CAPTURE_MODE.with(|current| current.replace(mode.read()))) };
    CuResult(codes::SUCCESS)
}

/// `cuCtxGetDevice`: the device of the current context.
///
/// # Safety
///
/// `device` is writable.
pub(crate) unsafe fn cuCtxGetDevice(device: *mut CUdevice) -> CuResult {
    const ENTRY: &str = "cuCtxGetDevice";
    let mut state = lock();
    result((|| {
        let ctx = state.current_context(ENTRY)?;
        state.enter(ctx, ENTRY, false)?;
        if device.is_null() {
            return Err(codes::INVALID_VALUE);
        }
        let ordinal = state.contexts[&ctx].device;
        // SAFETY: non-null and writable (our caller).
        unsafe { device.write(ordinal as CUdevice) };
        Ok(())
    })())
}

/// `cuCtxSynchronize`: waits for every queued op of the current context;
/// the sticky error at once. Refused while a stream of it is capturing
/// (which invalidates the capture).
///
/// # Safety
///
/// Nothing to uphold (`unsafe` as the entry point it stands in for).
pub(crate) unsafe fn cuCtxSynchronize() -> CuResult {
    const ENTRY: &str = "cuCtxSynchronize";
    let mut state = lock();
    let ctx = match state
        .current_context(ENTRY)
        .and_then(|ctx| state.enter(ctx, ENTRY, false).map(|()| ctx))
    {
        Ok(ctx) => ctx,
        Err(code) => return CuResult(code),
    };
    let capturing: Vec<u64> = state
        .captures
        .iter()
        .filter(|(_, c)| c.ctx == ctx)
        .map(|(id, _)| *id)
        .collect();
    if !capturing.is_empty() {
        for capture in capturing {
            state.invalidate_capture(capture);
        }
        return CuResult(codes::STREAM_CAPTURE_UNSUPPORTED);
    }
    let seq = state.contexts[&ctx].submitted;
    result(State::wait_until(state, ctx, |state| state.ran_through(ctx, seq)).1)
}
