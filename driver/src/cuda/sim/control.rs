//! The test-side controls: install the simulator, make devices, read their
//! state, hold and release their workers, wait for them, read violations.

use core::cell::RefCell;
use std::collections::BTreeMap;
use std::string::String;
use std::vec::Vec;

use core::ffi::{c_char, c_int, c_uint, c_void};

use super::super::ffi::{
    self, CUdevice, CuResult, Simulated, SimulatedOptional, route_to_simulator,
    simulated_entry_points,
};
use super::entry;
use super::registry::{Device, lock, notify, wait};

/// Every entry point of the simulator, by the driver's names.
static ENTRY_POINTS: Simulated = simulated_entry_points!(entry);

/// The entry points only newer drivers export, all present here.
static OPTIONAL_ENTRY_POINTS: SimulatedOptional = SimulatedOptional {
    cuMemcpyBatchAsync_v2: entry::cuMemcpyBatchAsync_v2,
};

/// Routes this process's driver calls to the simulator from now on.
/// Idempotent. Install before the first driver call: handles from a real
/// driver mean nothing to the simulator.
pub fn install() {
    route_to_simulator(&ENTRY_POINTS, &OPTIONAL_ENTRY_POINTS, count_call);
}

std::thread_local! {
    /// The driver calls of this thread by entry point, while
    /// [`count_calls`] runs here.
    static CALLS: RefCell<Option<DriverCalls>> = const { RefCell::new(None) };
}

/// The driver calls one thread made, by entry point: what
/// [`count_calls`] returns.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DriverCalls {
    /// Each entry point called, by the driver's name, and how often.
    pub by_entry: BTreeMap<&'static str, u32>,
}

impl DriverCalls {
    /// Every call, whatever its entry point.
    pub fn total(&self) -> u32 {
        self.by_entry.values().sum()
    }

    /// The calls of entry point `entry`.
    pub fn of(&self, entry: &str) -> u32 {
        self.by_entry.get(entry).copied().unwrap_or(0)
    }
}

fn count_call(entry: &'static str) {
    // Not while the thread's locals are torn down: nothing counts then.
    let _ = CALLS.try_with(|calls| {
        if let Some(calls) = calls.borrow_mut().as_mut() {
            *calls.by_entry.entry(entry).or_default() += 1;
        }
    });
}

/// Runs `f` and counts the driver calls this thread makes meanwhile
/// (another thread's, a copier's or the simulator's own, are not
/// counted): what a call of the layer costs its caller in driver calls.
///
/// # Panics
///
/// If called inside `f` of another `count_calls` on this thread.
pub fn count_calls<R>(f: impl FnOnce() -> R) -> (R, DriverCalls) {
    CALLS.with(|calls| {
        let mut calls = calls.borrow_mut();
        assert!(calls.is_none(), "count_calls: already counting here");
        *calls = Some(DriverCalls::default());
    });
    let result = f();
    let calls = CALLS.with(|calls| calls.borrow_mut().take().unwrap_or_default());
    (result, calls)
}

/// The simulator as a C library, for a program that loads libcuda itself
/// (cudarc does): by name, each entry point this crate's layer calls,
/// `cuDeviceGetAttribute` and `cuGetErrorString` (which answers with the
/// error's name), as an `extern "C"` function with the driver's
/// prototype of that name. A library that exports these names and jumps to
/// these functions (the crate's `tests/sim_support/libcuda.rs` builds one)
/// points such a program at this process's simulator. They reach it once
/// [`install`]ed.
pub fn c_entry_points() -> Vec<(&'static str, *const c_void)> {
    /// `cuDeviceGetAttribute`, called from C.
    ///
    /// # Safety
    ///
    /// `value` is writable.
    unsafe extern "C" fn device_get_attribute(
        value: *mut c_int,
        attribute: c_uint,
        device: CUdevice,
    ) -> CuResult {
        // SAFETY: our C caller's contract is the simulator's.
        unsafe { super::context::cuDeviceGetAttribute(value, attribute, device) }
    }
    /// `cuGetErrorString`, called from C: the error's name.
    ///
    /// # Safety
    ///
    /// `text` is null or writable.
    unsafe extern "C" fn get_error_string(error: c_uint, text: *mut *const c_char) -> CuResult {
        // SAFETY: our C caller's contract is `cuGetErrorName`'s.
        unsafe { super::codes::cuGetErrorName(error, text) }
    }
    let mut entries = ffi::c_entry_points();
    entries.push((
        "cuDeviceGetAttribute",
        device_get_attribute as *const c_void,
    ));
    entries.push(("cuGetErrorString", get_error_string as *const c_void));
    entries
}

/// A fresh device; its ordinal works with `cuDeviceGet` (and so
/// `Context::primary`). Tests in one process run in parallel: each takes
/// devices of its own, whose state and controls no other test touches.
pub fn new_device() -> usize {
    let mut state = lock();
    state.devices.push(Device::default());
    state.devices.len() - 1
}

/// What a device holds and has done, for assertions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceState {
    /// References to the primary context.
    pub primary_retains: u32,
    /// Whether the primary context exists.
    pub context_alive: bool,
    /// Live `cuMemHostAlloc` allocations.
    pub host_allocations: usize,
    /// Live `cuMemAlloc` allocations.
    pub device_allocations: usize,
    /// Live `cuMemHostRegister` registrations.
    pub registrations: usize,
    /// Live streams (the default stream not counted).
    pub streams: usize,
    /// Live events.
    pub events: usize,
    /// Live graphs (capture graphs included).
    pub graphs: usize,
    /// Executables not destroyed by their owner.
    pub graph_execs: usize,
    /// User objects whose destructor has not run yet.
    pub user_objects: usize,
    /// Ops queued and not yet started.
    pub queued: usize,
    /// Host functions (and host nodes) run.
    pub host_fns_run: u64,
    /// Host functions dropped unrun (sticky error, context destroyed).
    pub host_fns_skipped: u64,
    /// User object destructors run.
    pub destructors_run: u64,
    /// Successful calls of the batch copy (`cuMemcpyBatchAsync_v2`), each
    /// however many copies it queued or captured.
    pub batch_copy_calls: u64,
    /// Successful `cuMemcpyDtoHAsync_v2` and `cuMemcpyHtoDAsync_v2` calls.
    pub async_copy_calls: u64,
    /// Successful `cuStreamWaitEvent` calls on streams that are not
    /// capturing (each makes a stream wait for an event's work).
    pub stream_waits: u64,
    /// Successful `cuStreamWaitValue32_v2` calls (each queued a wait for a
    /// flag in pinned memory).
    pub wait_value_ops: u64,
    /// `cuEventRecord` calls queued on streams that are not capturing: a
    /// staged chunk records one, the driver's path none.
    pub event_records: u64,
    /// Successful `cuLaunchKernel` calls (the gather kernel's launches).
    pub kernel_launches: u64,
    /// Modules loaded and not unloaded.
    pub modules: usize,
}

/// The state of device `ordinal`.
///
/// # Panics
///
/// If there is no such device.
pub fn device_state(ordinal: usize) -> DeviceState {
    let state = lock();
    let device = &state.devices[ordinal];
    let context = device.context.map(|ctx| &state.contexts[&ctx]);
    let default_stream = context.map(|c| c.default_stream);
    DeviceState {
        primary_retains: device.retains,
        context_alive: context.is_some(),
        host_allocations: count(state.host_allocations.values().map(|a| a.device), ordinal),
        device_allocations: count(state.device_allocations.values().map(|a| a.device), ordinal),
        registrations: count(state.registrations.values().map(|r| r.device), ordinal),
        streams: state
            .streams
            .iter()
            .filter(|(id, s)| s.device == ordinal && Some(**id) != default_stream)
            .count(),
        events: count(state.events.values().map(|e| e.device), ordinal),
        graphs: count(state.graphs.values().map(|g| g.device), ordinal),
        graph_execs: count(
            state
                .execs
                .values()
                .filter(|e| !e.destroyed)
                .map(|e| e.device),
            ordinal,
        ),
        user_objects: count(state.objects.values().map(|o| o.device), ordinal)
            + device.destructors_pending,
        queued: context.map_or(0, |c| c.queue.len()),
        host_fns_run: device.host_fns_run,
        host_fns_skipped: device.host_fns_skipped,
        destructors_run: device.destructors_run,
        batch_copy_calls: device.batch_copy_calls,
        async_copy_calls: device.async_copy_calls,
        stream_waits: device.stream_waits,
        wait_value_ops: device.wait_value_ops,
        event_records: device.event_records,
        kernel_launches: device.kernel_launches,
        modules: count(state.modules.values().map(|m| m.device), ordinal),
    }
}

fn count(devices: impl Iterator<Item = usize>, ordinal: usize) -> usize {
    devices.filter(|&d| d == ordinal).count()
}

/// From now on the batch copy (`cuMemcpyBatchAsync_v2`) returns
/// `CUDA_ERROR_NOT_SUPPORTED` (801) with no effect for device `ordinal`'s
/// contexts, as a driver or platform without batch copies does.
///
/// # Panics
///
/// If there is no such device.
pub fn refuse_batch_copies(ordinal: usize) {
    lock().devices[ordinal].refuses_batch_copies = true;
}

/// From now on the stream memory wait (`cuStreamWaitValue32_v2`) returns
/// `CUDA_ERROR_NOT_SUPPORTED` (801) with no effect for device `ordinal`'s
/// contexts, as a device or platform without stream memory operations
/// does.
///
/// # Panics
///
/// If there is no such device.
pub fn refuse_stream_memory_waits(ordinal: usize) {
    lock().devices[ordinal].refuses_stream_memory_waits = true;
}

/// From now on, a driver call that queues work on device `ordinal` (a
/// copy, a batch, a kernel launch, a host function, a memory wait, an
/// event record) first waits while the context holds `ops` ops not
/// started, as the driver's calls wait for room in its queue: a layer that
/// queues a stream's work behind a wait only it can end deadlocks here as
/// it would there. (The driver's room is counted in bytes of its own
/// commands, not in ops.)
///
/// # Panics
///
/// If there is no such device, or `ops` is 0.
pub fn limit_queue(ordinal: usize, ops: usize) {
    assert!(ops > 0, "limit_queue: a queue of 0 ops holds nothing");
    lock().devices[ordinal].queue_limit = Some(ops);
}

/// Device `ordinal`'s worker starts no new op until [`release`] (an op
/// running now finishes). Ops keep queueing meanwhile.
pub fn hold(ordinal: usize) {
    lock().devices[ordinal].held = true;
}

/// Lets device `ordinal`'s worker run again after [`hold`].
pub fn release(ordinal: usize) {
    lock().devices[ordinal].held = false;
    notify();
}

/// Waits until device `ordinal`'s queue is empty, no op runs, and every
/// destructor due has run (so, with a stream memory wait queued, until its
/// flag is set). Not a driver call. Returns at once if the context has a
/// sticky error.
///
/// # Panics
///
/// If the device is held with ops queued (it would wait forever).
pub fn drain(ordinal: usize) {
    let mut state = lock();
    loop {
        let device = &state.devices[ordinal];
        let context = device.context.map(|ctx| &state.contexts[&ctx]);
        if context.is_some_and(|c| c.sticky.is_some()) {
            return;
        }
        let queued = context.is_some_and(|c| !c.queue.is_empty());
        let running = context.is_some_and(|c| c.running.is_some());
        assert!(
            !(device.held && queued),
            "drain: device {ordinal} is held with ops queued"
        );
        if !queued && !running && device.destructors_pending == 0 {
            return;
        }
        state = wait(state);
    }
}

/// Every misuse recorded so far in the process, each naming its device
/// (`device N: ...`; `device ?` where no device could be told).
pub fn violations() -> Vec<String> {
    lock().violations.iter().map(|(_, v)| v.clone()).collect()
}

/// Removes and returns the misuse recorded on device `ordinal`.
pub fn take_violations(ordinal: usize) -> Vec<String> {
    let mut state = lock();
    let (taken, kept) = core::mem::take(&mut state.violations)
        .into_iter()
        .partition(|(device, _)| *device == Some(ordinal));
    state.violations = kept;
    taken.into_iter().map(|(_, v)| v).collect()
}
