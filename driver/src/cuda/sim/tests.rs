//! The model, through the driver entry points themselves (`ffi`), for what
//! the CUDA layer's public API cannot (or, by design, no longer can) reach.

use core::ffi::{c_uint, c_void};
use core::ptr::{null, null_mut};
use core::sync::atomic::{AtomicUsize, Ordering};
use std::boxed::Box;
use std::format;
use std::sync::{Condvar, Mutex};
use std::thread::{self, ThreadId};
use std::vec::Vec;

use super::super::ffi::{self, CUcontext, CUgraph, CUgraphExec, CUgraphNode, CUstream, CuResult};
use super::*;

mod kernel;
mod wait_value;

fn ok(result: CuResult) {
    assert_eq!(result.0, 0, "driver call failed with {}", result.0);
}

/// A fresh device with its primary context retained and current here.
fn setup() -> (usize, CUcontext) {
    install();
    let device = new_device();
    let mut ctx: CUcontext = null_mut();
    // SAFETY: writes one handle.
    ok(unsafe { ffi::cuDevicePrimaryCtxRetain(&mut ctx, device as i32) });
    bind(ctx);
    (device, ctx)
}

/// Releases every retain of `device`'s primary context: its worker ends.
fn finish(device: usize) {
    while device_state(device).primary_retains > 0 {
        // SAFETY: releases a retain this test made.
        ok(unsafe { ffi::cuDevicePrimaryCtxRelease_v2(device as i32) });
    }
    assert!(!device_state(device).context_alive);
}

fn bind(ctx: CUcontext) {
    // SAFETY: a handle; checked by the simulator.
    ok(unsafe { ffi::cuCtxSetCurrent(ctx) });
}

fn new_stream() -> CUstream {
    let mut stream: CUstream = null_mut();
    // SAFETY: writes one handle.
    ok(unsafe { ffi::cuStreamCreate(&mut stream, ffi::CU_STREAM_NON_BLOCKING) });
    stream
}

fn new_event() -> ffi::CUevent {
    let mut event: ffi::CUevent = null_mut();
    // SAFETY: writes one handle.
    ok(unsafe { ffi::cuEventCreate(&mut event, ffi::CU_EVENT_DEFAULT) });
    event
}

/// What host functions append to: a tag and the thread it ran on.
type Log = Mutex<Vec<(usize, ThreadId)>>;

/// A host function's argument: where to log, and what.
struct Entry {
    log: &'static Log,
    tag: usize,
}

unsafe extern "C" fn log_entry(data: *mut c_void) {
    // SAFETY: tests pass a leaked `Entry`.
    let entry = unsafe { &*data.cast::<Entry>() };
    entry
        .log
        .lock()
        .unwrap()
        .push((entry.tag, thread::current().id()));
}

/// What host functions use, leaked, and listed in a static so that Miri
/// does not count it as a leak.
static KEPT: Mutex<Vec<&'static (dyn core::any::Any + Send + Sync)>> = Mutex::new(Vec::new());

fn leak<T: Send + Sync + 'static>(value: T) -> &'static T {
    let kept: &'static T = Box::leak(Box::new(value));
    KEPT.lock().unwrap().push(kept);
    kept
}

/// Queues `log_entry` for `tag` on `stream`.
fn launch_logged(stream: CUstream, log: &'static Log, tag: usize) -> CuResult {
    let entry: *const Entry = leak(Entry { log, tag });
    // SAFETY: the entry is leaked: valid whenever the function runs.
    unsafe { ffi::cuLaunchHostFunc(stream, Some(log_entry), entry.cast_mut().cast()) }
}

unsafe extern "C" fn count(data: *mut c_void) {
    // SAFETY: tests pass a leaked or outliving `AtomicUsize`.
    unsafe { &*data.cast::<AtomicUsize>() }.fetch_add(1, Ordering::SeqCst);
}

fn counter_ptr(counter: &'static AtomicUsize) -> *mut c_void {
    (counter as *const AtomicUsize).cast_mut().cast()
}

/// A host function that blocks until the test opens it.
#[derive(Default)]
struct Gate {
    state: Mutex<(bool, bool)>, // (entered, open)
    changed: Condvar,
}

impl Gate {
    fn wait_entered(&self) {
        let mut s = self.state.lock().unwrap();
        while !s.0 {
            s = self.changed.wait(s).unwrap();
        }
    }

    fn open(&self) {
        self.state.lock().unwrap().1 = true;
        self.changed.notify_all();
    }
}

unsafe extern "C" fn block_on_gate(data: *mut c_void) {
    // SAFETY: tests pass a leaked `Gate`.
    let gate = unsafe { &*data.cast::<Gate>() };
    let mut s = gate.state.lock().unwrap();
    s.0 = true;
    gate.changed.notify_all();
    while !s.1 {
        s = gate.changed.wait(s).unwrap();
    }
}

fn launch_gate(stream: CUstream, gate: &'static Gate) {
    let data: *const Gate = gate;
    // SAFETY: the gate is leaked.
    ok(unsafe { ffi::cuLaunchHostFunc(stream, Some(block_on_gate), data.cast_mut().cast()) });
}

fn sync(stream: CUstream) -> u32 {
    // SAFETY: a handle; checked by the simulator.
    unsafe { ffi::cuStreamSynchronize(stream) }.0
}

#[test]
fn host_functions_run_in_fifo_order_on_one_worker_per_context() {
    let (device, ctx) = setup();
    let (a, b) = (new_stream(), new_stream());
    let log: &'static Log = leak(Mutex::new(Vec::new()));
    for tag in 0..6 {
        ok(launch_logged(if tag % 2 == 0 { a } else { b }, log, tag));
    }
    // SAFETY: no arguments.
    ok(unsafe { ffi::cuCtxSynchronize() });
    let other = new_device();
    let mut other_ctx: CUcontext = null_mut();
    // SAFETY: writes one handle.
    ok(unsafe { ffi::cuDevicePrimaryCtxRetain(&mut other_ctx, other as i32) });
    bind(other_ctx);
    let c = new_stream();
    ok(launch_logged(c, log, 6));
    assert_eq!(sync(c), 0);

    let log = log.lock().unwrap();
    let tags: Vec<usize> = log.iter().map(|(t, _)| *t).collect();
    assert_eq!(tags, [0, 1, 2, 3, 4, 5, 6]);
    let worker = log[0].1;
    assert!(log[..6].iter().all(|(_, t)| *t == worker));
    assert_ne!(worker, thread::current().id());
    assert_ne!(log[6].1, worker, "another context has a worker of its own");
    assert_eq!(device_state(device).host_fns_run, 6);
    bind(ctx);
    assert!(take_violations(device).is_empty());
    assert!(take_violations(other).is_empty());
    finish(device);
    finish(other);
}

#[test]
fn held_device_queues_and_release_runs() {
    let (device, _ctx) = setup();
    let stream = new_stream();
    let counter: &'static AtomicUsize = leak(AtomicUsize::new(0));
    hold(device);
    for _ in 0..3 {
        // SAFETY: the counter is leaked.
        ok(unsafe { ffi::cuLaunchHostFunc(stream, Some(count), counter_ptr(counter)) });
    }
    // SAFETY: a handle.
    assert_eq!(unsafe { ffi::cuStreamQuery(stream) }.0, codes::NOT_READY);
    let state = device_state(device);
    assert_eq!((state.queued, state.host_fns_run), (3, 0));
    assert_eq!(counter.load(Ordering::SeqCst), 0);
    release(device);
    drain(device);
    assert_eq!(counter.load(Ordering::SeqCst), 3);
    // SAFETY: a handle.
    ok(unsafe { ffi::cuStreamQuery(stream) });
    assert_eq!(device_state(device).queued, 0);
    finish(device);
}

#[test]
fn last_release_frees_memory_and_invalidates_handles() {
    let (device, _ctx) = setup();
    let stream = new_stream();
    let event = new_event();
    let mut host: *mut c_void = null_mut();
    let mut dev: ffi::CUdeviceptr = 0;
    // SAFETY: each writes one pointer.
    ok(unsafe { ffi::cuMemHostAlloc(&mut host, 64, 0) });
    // SAFETY: as above.
    ok(unsafe { ffi::cuMemAlloc_v2(&mut dev, 64) });
    let state = device_state(device);
    assert_eq!((state.host_allocations, state.device_allocations), (1, 1));
    assert_eq!((state.streams, state.events), (1, 1));

    // SAFETY: releases the retain of `setup`.
    ok(unsafe { ffi::cuDevicePrimaryCtxRelease_v2(device as i32) });
    let state = device_state(device);
    assert!(!state.context_alive);
    assert_eq!(state.host_allocations + state.device_allocations, 0);
    assert_eq!(state.streams + state.events, 0);

    // SAFETY: a (destroyed) handle: the simulator reports it.
    assert_eq!(unsafe { ffi::cuEventQuery(event) }.0, codes::INVALID_HANDLE);
    // SAFETY: as above.
    assert_eq!(sync(stream), codes::INVALID_HANDLE);
    // SAFETY: a freed pointer: the simulator reports it and frees nothing.
    assert_eq!(unsafe { ffi::cuMemFreeHost(host) }.0, codes::INVALID_VALUE);
    let found = take_violations(device);
    assert_eq!(found.len(), 3, "{found:?}");
    assert!(found[0].contains("destroyed event"), "{found:?}");
    assert!(found[1].contains("destroyed stream"), "{found:?}");
    assert!(
        found
            .iter()
            .all(|v| v.starts_with(&format!("device {device}:")))
    );

    // The thread's current context is the destroyed one.
    let mut fresh: CUstream = null_mut();
    // SAFETY: writes one handle.
    let created = unsafe { ffi::cuStreamCreate(&mut fresh, 0) };
    assert_eq!(created.0, codes::INVALID_CONTEXT);
    assert_eq!(take_violations(device).len(), 1);

    // A new retain makes a new context with a new handle.
    let mut again: CUcontext = null_mut();
    // SAFETY: writes one handle.
    ok(unsafe { ffi::cuDevicePrimaryCtxRetain(&mut again, device as i32) });
    assert_ne!(again, _ctx);
    finish(device);
}

/// What `use_memory_after_release` is given.
struct LateUse {
    device: usize,
    /// A pinned allocation of the context, 64 bytes.
    host: usize,
    entered: core::sync::atomic::AtomicBool,
    /// Live pinned allocations the host function saw once the last
    /// release had begun.
    seen: AtomicUsize,
}

/// Waits for the context's last release to begin, then uses its memory.
unsafe extern "C" fn use_memory_after_release(data: *mut c_void) {
    // SAFETY: the test passes a leaked `LateUse`.
    let late = unsafe { &*data.cast::<LateUse>() };
    late.entered.store(true, Ordering::SeqCst);
    while device_state(late.device).primary_retains > 0 {
        thread::yield_now();
    }
    let seen = device_state(late.device).host_allocations;
    late.seen.store(seen, Ordering::SeqCst);
    if seen == 1 {
        let host = core::ptr::with_exposed_provenance_mut::<u8>(late.host);
        // SAFETY: the allocation is still there, and the context frees it
        // only after this host function has returned.
        unsafe { host.write_bytes(0x5A, 64) };
    }
}

/// Before: the last release freed the context's memory while the worker
/// still ran a host function using it (it joined the worker afterwards).
#[test]
fn a_host_function_running_at_the_last_release_keeps_the_context_memory() {
    let (device, _ctx) = setup();
    let stream = new_stream();
    let mut host: *mut c_void = null_mut();
    // SAFETY: writes one pointer.
    ok(unsafe { ffi::cuMemHostAlloc(&mut host, 64, 0) });
    let late = leak(LateUse {
        device,
        host: host.expose_provenance(),
        entered: core::sync::atomic::AtomicBool::new(false),
        seen: AtomicUsize::new(usize::MAX),
    });
    let data: *const LateUse = late;
    // SAFETY: `late` is leaked; the memory stays until the function ran.
    ok(unsafe {
        ffi::cuLaunchHostFunc(
            stream,
            Some(use_memory_after_release),
            data.cast_mut().cast(),
        )
    });
    while !late.entered.load(Ordering::SeqCst) {
        thread::yield_now();
    }
    // SAFETY: releases the retain of `setup`; nothing made in the context
    // is used by this thread afterwards.
    ok(unsafe { ffi::cuDevicePrimaryCtxRelease_v2(device as i32) });
    assert_eq!(
        late.seen.load(Ordering::SeqCst),
        1,
        "the context's memory was freed under a running host function"
    );
    let state = device_state(device);
    assert!(!state.context_alive);
    assert_eq!(state.host_allocations, 0, "freed once the worker ended");
    assert!(take_violations(device).is_empty());
}

#[test]
fn a_handle_used_from_a_thread_bound_elsewhere_is_refused() {
    let (device, ctx) = setup();
    let stream = new_stream() as usize;
    let ctx = ctx as usize;
    let other = new_device();
    let found = thread::spawn(move || {
        let stream = stream as CUstream;
        // No current context on this thread.
        let mut created: CUstream = null_mut();
        // SAFETY: writes one handle.
        let code = unsafe { ffi::cuStreamCreate(&mut created, 0) }.0;
        assert_eq!(code, codes::INVALID_CONTEXT);
        assert_eq!(sync(stream), codes::INVALID_CONTEXT);
        let mut other_ctx: CUcontext = null_mut();
        // SAFETY: writes one handle.
        ok(unsafe { ffi::cuDevicePrimaryCtxRetain(&mut other_ctx, other as i32) });
        bind(other_ctx);
        assert_eq!(sync(stream), codes::INVALID_CONTEXT);
        // Bound to the stream's context, the call works.
        bind(ctx as CUcontext);
        assert_eq!(sync(stream), 0);
    });
    found.join().unwrap();
    let found = take_violations(device);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found.iter().all(|v| v.contains("current context")));
    // Creating without a context is an error, not a violation.
    assert!(take_violations(other).is_empty());
    finish(device);
    finish(other);
}

#[test]
fn sticky_error_skips_queued_work_and_synchronize_returns_while_a_host_function_runs() {
    let (device, _ctx) = setup();
    let stream = new_stream();
    let gate: &'static Gate = leak(Gate::default());
    let counter: &'static AtomicUsize = leak(AtomicUsize::new(0));
    launch_gate(stream, gate);
    for _ in 0..2 {
        // SAFETY: the counter is leaked.
        ok(unsafe { ffi::cuLaunchHostFunc(stream, Some(count), counter_ptr(counter)) });
    }
    gate.wait_entered();
    fail_context(device, 719);
    // The gate's host function still runs: synchronize returns regardless.
    assert_eq!(sync(stream), 719);
    // SAFETY: no arguments.
    assert_eq!(unsafe { ffi::cuCtxSynchronize() }.0, 719);
    // SAFETY: the counter is leaked.
    let late = unsafe { ffi::cuLaunchHostFunc(stream, Some(count), counter_ptr(counter)) };
    assert_eq!(late.0, 719);
    let state = device_state(device);
    assert_eq!(
        (state.queued, state.host_fns_skipped, state.host_fns_run),
        (0, 2, 0)
    );
    gate.open();
    drain(device);
    // The running host function finished; nothing queued ever runs.
    let mut waited = 0;
    while device_state(device).host_fns_run == 0 {
        waited += 1;
        thread::yield_now();
        assert!(
            waited < 1_000_000,
            "the running host function never finished"
        );
    }
    assert_eq!(counter.load(Ordering::SeqCst), 0);
    // Release still works and destroys the context.
    // SAFETY: releases the retain of `setup`.
    ok(unsafe { ffi::cuDevicePrimaryCtxRelease_v2(device as i32) });
    assert!(!device_state(device).context_alive);
    assert!(take_violations(device).is_empty());
}

#[test]
fn an_injected_failure_hits_the_nth_call_only_and_has_no_effect() {
    let (device, _ctx) = setup();
    let stream = new_stream();
    let counter: &'static AtomicUsize = leak(AtomicUsize::new(0));
    fail_call(device, "cuLaunchHostFunc", 2, 999);
    let codes: Vec<u32> = (0..3)
        // SAFETY: the counter is leaked.
        .map(|_| unsafe { ffi::cuLaunchHostFunc(stream, Some(count), counter_ptr(counter)) }.0)
        .collect();
    assert_eq!(codes, [0, 999, 0]);
    assert_eq!(sync(stream), 0);
    assert_eq!(counter.load(Ordering::SeqCst), 2);
    // Counted per device: another device's calls do not advance it.
    let (other, _) = setup();
    fail_call(other, "cuStreamSynchronize", 1, 2);
    bind(_ctx);
    assert_eq!(sync(stream), 0);
    assert!(take_violations(device).is_empty());
    finish(device);
    finish(other);
}

/// Capture status, id and graph of `stream`.
fn capture_info(stream: CUstream) -> (c_uint, u64, CUgraph) {
    let (mut status, mut id, mut graph) = (0, 0u64, null_mut());
    // SAFETY: writes status, id and graph.
    ok(unsafe {
        ffi::cuStreamGetCaptureInfo_v2(
            stream,
            &mut status,
            &mut id,
            &mut graph,
            null_mut(),
            null_mut(),
        )
    });
    (status, id, graph)
}

fn begin(stream: CUstream) -> CuResult {
    // SAFETY: a handle.
    unsafe {
        ffi::cuStreamBeginCapture_v2(
            stream,
            ffi::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
        )
    }
}

fn end(stream: CUstream) -> (u32, CUgraph) {
    let mut graph: CUgraph = null_mut();
    // SAFETY: writes one handle.
    let code = unsafe { ffi::cuStreamEndCapture(stream, &mut graph) }.0;
    (code, graph)
}

fn record(event: ffi::CUevent, stream: CUstream) {
    // SAFETY: handles.
    ok(unsafe { ffi::cuEventRecord(event, stream) });
}

fn wait_event(stream: CUstream, event: ffi::CUevent) -> u32 {
    // SAFETY: handles.
    unsafe { ffi::cuStreamWaitEvent(stream, event, 0) }.0
}

fn instantiate(graph: CUgraph) -> CUgraphExec {
    let mut exec: CUgraphExec = null_mut();
    // SAFETY: writes one handle.
    ok(unsafe { ffi::cuGraphInstantiateWithFlags(&mut exec, graph, 0) });
    exec
}

fn launch(exec: CUgraphExec, stream: CUstream) {
    // SAFETY: handles; the graphs' data are leaked.
    ok(unsafe { ffi::cuGraphLaunch(exec, stream) });
}

#[test]
fn capture_records_nodes_joins_through_events_and_replays() {
    let (device, _ctx) = setup();
    let (origin, side) = (new_stream(), new_stream());
    let (fork, join) = (new_event(), new_event());
    let log: &'static Log = leak(Mutex::new(Vec::new()));
    ok(begin(origin));
    let (status, id, graph) = capture_info(origin);
    assert_eq!(status, 1);
    assert_ne!(id, 0);
    assert!(!graph.is_null());
    ok(launch_logged(origin, log, 0));
    record(fork, origin);
    assert_eq!(wait_event(side, fork), 0);
    assert_eq!(
        capture_info(side),
        (1, id, graph),
        "joined through the event"
    );
    ok(launch_logged(side, log, 1));
    record(join, side);
    assert_eq!(wait_event(origin, join), 0);
    ok(launch_logged(origin, log, 2));
    assert_eq!(device_state(device).queued, 0, "captured, not queued");
    let (code, captured) = end(origin);
    assert_eq!(code, 0);
    assert_eq!(captured, graph);
    assert_eq!(
        capture_info(side).0,
        0,
        "the joined stream left the capture"
    );
    assert!(log.lock().unwrap().is_empty());

    let exec = instantiate(graph);
    for _ in 0..3 {
        launch(exec, origin);
    }
    assert_eq!(sync(origin), 0);
    let tags: Vec<usize> = log.lock().unwrap().iter().map(|(t, _)| *t).collect();
    assert_eq!(tags, [0, 1, 2, 0, 1, 2, 0, 1, 2]);
    // SAFETY: handles.
    ok(unsafe { ffi::cuGraphExecDestroy(exec) });
    // SAFETY: as above.
    ok(unsafe { ffi::cuGraphDestroy(graph) });
    assert!(take_violations(device).is_empty());
    finish(device);
}

#[test]
fn a_stream_not_joined_back_fails_the_capture() {
    let (device, _ctx) = setup();
    let (origin, side) = (new_stream(), new_stream());
    let fork = new_event();
    let log: &'static Log = leak(Mutex::new(Vec::new()));
    ok(begin(origin));
    record(fork, origin);
    assert_eq!(wait_event(side, fork), 0);
    ok(launch_logged(side, log, 0));
    assert_eq!(end(origin), (codes::STREAM_CAPTURE_UNJOINED, null_mut()));
    assert_eq!(capture_info(side).0, 0);
    assert_eq!(capture_info(origin).0, 0);
    assert_eq!(
        device_state(device).graphs,
        0,
        "the failed capture's graph is gone"
    );
    // Both streams work normally again.
    ok(launch_logged(side, log, 1));
    assert_eq!(sync(side), 0);
    assert_eq!(log.lock().unwrap().len(), 1);
    finish(device);
}

#[test]
fn synchronizing_a_capturing_stream_invalidates_the_capture() {
    let (device, _ctx) = setup();
    let stream = new_stream();
    ok(begin(stream));
    assert_eq!(begin(stream).0, codes::ILLEGAL_STATE);
    assert_eq!(sync(stream), codes::STREAM_CAPTURE_UNSUPPORTED);
    assert_eq!(capture_info(stream).0, 2);
    let log: &'static Log = leak(Mutex::new(Vec::new()));
    assert_eq!(
        launch_logged(stream, log, 0).0,
        codes::STREAM_CAPTURE_INVALIDATED
    );
    assert_eq!(end(stream), (codes::STREAM_CAPTURE_INVALIDATED, null_mut()));
    assert_eq!(capture_info(stream).0, 0);
    assert_eq!(device_state(device).graphs, 0);
    // The default stream cannot capture.
    assert_eq!(begin(null_mut()).0, codes::STREAM_CAPTURE_UNSUPPORTED);
    finish(device);
}

fn add_host_node(
    graph: CUgraph,
    f: unsafe extern "C" fn(*mut c_void),
    data: *mut c_void,
    deps: &[CUgraphNode],
) -> (u32, CUgraphNode) {
    let params = ffi::CUDA_HOST_NODE_PARAMS {
        fn_: Some(f),
        userData: data,
    };
    let mut node: CUgraphNode = null_mut();
    // SAFETY: writes one handle; reads `deps` and `params`.
    let code =
        unsafe { ffi::cuGraphAddHostNode(&mut node, graph, deps.as_ptr(), deps.len(), &params) }.0;
    (code, node)
}

fn new_graph() -> CUgraph {
    let mut graph: CUgraph = null_mut();
    // SAFETY: writes one handle.
    ok(unsafe { ffi::cuGraphCreate(&mut graph, 0) });
    graph
}

fn set_node(exec: CUgraphExec, node: CUgraphNode, data: *mut c_void) -> u32 {
    let params = ffi::CUDA_HOST_NODE_PARAMS {
        fn_: Some(count),
        userData: data,
    };
    // SAFETY: reads `params`; the counters are leaked.
    unsafe { ffi::cuGraphExecHostNodeSetParams(exec, node, &params) }.0
}

#[test]
fn launches_run_node_parameters_as_they_were_at_launch() {
    let (device, _ctx) = setup();
    let stream = new_stream();
    let (first, second): (&'static AtomicUsize, &'static AtomicUsize) =
        (leak(AtomicUsize::new(0)), leak(AtomicUsize::new(0)));
    let graph = new_graph();
    let (code, node) = add_host_node(graph, count, counter_ptr(first), &[]);
    assert_eq!(code, 0);
    let (code, _) = add_host_node(graph, count, counter_ptr(first), &[node]);
    assert_eq!(code, 0);
    let exec = instantiate(graph);
    hold(device);
    for _ in 0..4 {
        launch(exec, stream);
    }
    assert_eq!(set_node(exec, node, counter_ptr(second)), 0);
    launch(exec, stream);
    assert_eq!(device_state(device).queued, 10);
    release(device);
    assert_eq!(sync(stream), 0);
    assert_eq!(first.load(Ordering::SeqCst), 4 * 2 + 1);
    assert_eq!(second.load(Ordering::SeqCst), 1);
    assert!(take_violations(device).is_empty());
    finish(device);
}

#[test]
fn node_updates_with_foreign_or_destroyed_nodes_are_violations() {
    let (device, _ctx) = setup();
    let counter: &'static AtomicUsize = leak(AtomicUsize::new(0));
    let (graph, other) = (new_graph(), new_graph());
    let (_, node) = add_host_node(graph, count, counter_ptr(counter), &[]);
    let (_, foreign) = add_host_node(other, count, counter_ptr(counter), &[]);
    // A dependency from another graph.
    assert_eq!(
        add_host_node(graph, count, counter_ptr(counter), &[foreign]).0,
        codes::INVALID_VALUE
    );
    let exec = instantiate(graph);
    assert_eq!(
        set_node(exec, foreign, counter_ptr(counter)),
        codes::INVALID_VALUE
    );
    // SAFETY: a handle.
    ok(unsafe { ffi::cuGraphDestroy(graph) });
    assert_eq!(
        set_node(exec, node, counter_ptr(counter)),
        codes::INVALID_HANDLE
    );
    let found = take_violations(device);
    assert_eq!(found.len(), 3, "{found:?}");
    assert!(found[2].contains("destroyed graph node"), "{found:?}");
    // The executable itself still works.
    let stream = new_stream();
    launch(exec, stream);
    assert_eq!(sync(stream), 0);
    assert_eq!(counter.load(Ordering::SeqCst), 1);
    finish(device);
}

/// What a user object's destructor records.
struct Destroyed {
    count: AtomicUsize,
    thread: Mutex<Option<ThreadId>>,
}

unsafe extern "C" fn destroyed(data: *mut c_void) {
    // SAFETY: tests pass a leaked `Destroyed`.
    let d = unsafe { &*data.cast::<Destroyed>() };
    *d.thread.lock().unwrap() = Some(thread::current().id());
    d.count.fetch_add(1, Ordering::SeqCst);
}

#[test]
fn a_user_object_is_destroyed_late_once_graph_executables_and_launches_are_gone() {
    let (device, _ctx) = setup();
    let stream = new_stream();
    let log: &'static Log = leak(Mutex::new(Vec::new()));
    let record: &'static Destroyed = leak(Destroyed {
        count: AtomicUsize::new(0),
        thread: Mutex::new(None),
    });
    let mut object: ffi::CUuserObject = null_mut();
    let data: *const Destroyed = record;
    // SAFETY: writes one handle; the record is leaked.
    ok(unsafe {
        ffi::cuUserObjectCreate(
            &mut object,
            data.cast_mut().cast(),
            Some(destroyed),
            1,
            ffi::CU_USER_OBJECT_NO_DESTRUCTOR_SYNC,
        )
    });
    let graph = new_graph();
    // SAFETY: moves our one reference into the graph.
    ok(unsafe { ffi::cuGraphRetainUserObject(graph, object, 1, ffi::CU_GRAPH_USER_OBJECT_MOVE) });
    let entry: *const Entry = leak(Entry { log, tag: 7 });
    let (code, _) = add_host_node(graph, log_entry, entry.cast_mut().cast(), &[]);
    assert_eq!(code, 0);
    let (first, second) = (instantiate(graph), instantiate(graph));
    hold(device);
    launch(first, stream);
    // SAFETY: handles.
    ok(unsafe { ffi::cuGraphDestroy(graph) });
    // SAFETY: as above.
    ok(unsafe { ffi::cuGraphExecDestroy(second) });
    // SAFETY: as above; the queued launch keeps it until it has run.
    ok(unsafe { ffi::cuGraphExecDestroy(first) });
    let state = device_state(device);
    assert_eq!(
        (state.graphs, state.graph_execs, state.user_objects),
        (0, 0, 1)
    );
    assert_eq!(
        record.count.load(Ordering::SeqCst),
        0,
        "a launch still needs it"
    );
    release(device);
    drain(device);
    assert_eq!(record.count.load(Ordering::SeqCst), 1);
    assert_eq!(log.lock().unwrap().len(), 1);
    let on = record.thread.lock().unwrap().expect("ran");
    assert_ne!(on, thread::current().id());
    assert_ne!(on, log.lock().unwrap()[0].1, "not the worker either");
    let state = device_state(device);
    assert_eq!((state.user_objects, state.destructors_run), (0, 1));
    assert!(take_violations(device).is_empty());
    finish(device);
}

#[test]
fn two_threads_in_calls_on_one_graph_are_a_violation() {
    let (device, ctx) = setup();
    let graph = new_graph() as usize;
    let counter: &'static AtomicUsize = leak(AtomicUsize::new(0));
    let rounds = if cfg!(miri) { 20 } else { 2000 };
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let ctx = ctx as usize;
            thread::spawn(move || {
                bind(ctx as CUcontext);
                for _ in 0..rounds {
                    let (code, _) =
                        add_host_node(graph as CUgraph, count, counter_ptr(counter), &[]);
                    assert_eq!(code, 0);
                    if !violations()
                        .iter()
                        .all(|v| !v.starts_with(&format!("device {device}:")))
                    {
                        break;
                    }
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    let found = take_violations(device);
    assert!(!found.is_empty(), "overlapping calls went unseen");
    assert!(
        found
            .iter()
            .all(|v| v.contains("two threads inside calls on graph")),
        "{found:?}"
    );
    finish(device);
}

#[test]
fn copies_move_bytes_and_freeing_memory_a_queued_copy_uses_is_a_violation() {
    let (device, _ctx) = setup();
    let stream = new_stream();
    let mut dev: ffi::CUdeviceptr = 0;
    // SAFETY: writes one pointer.
    ok(unsafe { ffi::cuMemAlloc_v2(&mut dev, 16) });
    let src = [7u8; 16];
    let mut dst = [0u8; 16];
    // SAFETY: 16 readable bytes into 16 bytes of device memory.
    ok(unsafe { ffi::cuMemcpyHtoD_v2(dev, src.as_ptr().cast(), 16) });
    // SAFETY: 16 writable bytes.
    ok(unsafe { ffi::cuMemcpyDtoH_v2(dst.as_mut_ptr().cast(), dev, 16) });
    assert_eq!(dst, src);
    // Out of bounds of the allocation.
    // SAFETY: the simulator checks the device range before touching anything.
    let code = unsafe { ffi::cuMemcpyDtoH_v2(dst.as_mut_ptr().cast(), dev + 8, 16) }.0;
    assert_eq!(code, codes::INVALID_VALUE);
    assert_eq!(take_violations(device).len(), 1);

    let mut pinned: *mut c_void = null_mut();
    // SAFETY: writes one pointer.
    ok(unsafe { ffi::cuMemHostAlloc(&mut pinned, 16, 0) });
    hold(device);
    // SAFETY: 16 bytes of pinned memory, kept until the copy has run (it
    // never does: its device side is freed first).
    ok(unsafe { ffi::cuMemcpyDtoHAsync_v2(pinned, dev, 16, stream) });
    // SAFETY: frees the device allocation (the copy is reported below).
    ok(unsafe { ffi::cuMemFree_v2(dev) });
    release(device);
    assert_eq!(sync(stream), 0);
    let found = take_violations(device);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found[0].contains("queued copy still uses it"), "{found:?}");
    assert!(found[1].contains("was freed"), "{found:?}");
    // SAFETY: frees the pinned allocation.
    ok(unsafe { ffi::cuMemFreeHost(pinned) });
    assert_eq!(device_state(device).host_allocations, 0);
    finish(device);
}

/// A stream that waited for an event is not done, and its synchronize does
/// not return, until the event's work has run, though nothing is queued on
/// the stream itself.
#[test]
fn a_stream_that_waited_for_an_event_is_done_only_after_the_events_work() {
    let (device, _ctx) = setup();
    let (a, b) = (new_stream(), new_stream());
    let event = new_event();
    let mut dev: ffi::CUdeviceptr = 0;
    // SAFETY: writes one pointer.
    ok(unsafe { ffi::cuMemAlloc_v2(&mut dev, 16) });
    let mut pinned: *mut c_void = null_mut();
    // SAFETY: writes one pointer.
    ok(unsafe { ffi::cuMemHostAlloc(&mut pinned, 16, 0) });
    hold(device);
    // SAFETY: 16 bytes of pinned memory, kept until the context goes.
    ok(unsafe { ffi::cuMemcpyDtoHAsync_v2(pinned, dev, 16, a) });
    record(event, a);
    assert_eq!(wait_event(b, event), 0);
    // SAFETY: a handle.
    let query = unsafe { ffi::cuStreamQuery(b) }.0;
    assert_eq!(query, codes::NOT_READY, "b waits for a's copy");
    release(device);
    assert_eq!(sync(b), 0);
    // SAFETY: a handle.
    assert_eq!(unsafe { ffi::cuStreamQuery(a) }.0, 0, "a's copy ran first");
    finish(device);
}

unsafe extern "C" fn call_driver(data: *mut c_void) {
    // SAFETY: tests pass a leaked `AtomicUsize`.
    let out = unsafe { &*data.cast::<AtomicUsize>() };
    // SAFETY: no arguments.
    out.store(
        unsafe { ffi::cuCtxSynchronize() }.0 as usize,
        Ordering::SeqCst,
    );
}

#[test]
fn a_host_function_calling_the_driver_is_refused() {
    let (device, _ctx) = setup();
    let stream = new_stream();
    let out: &'static AtomicUsize = leak(AtomicUsize::new(0));
    // SAFETY: the output is leaked.
    ok(unsafe { ffi::cuLaunchHostFunc(stream, Some(call_driver), counter_ptr(out)) });
    assert_eq!(sync(stream), 0);
    // The host function called with no current context.
    assert_eq!(out.load(Ordering::SeqCst), codes::INVALID_CONTEXT as usize);
    assert!(take_violations(device).is_empty());
    finish(device);
}

#[test]
fn events_order_query_and_time() {
    let (device, _ctx) = setup();
    let stream = new_stream();
    let (start, stop) = (new_event(), new_event());
    let gate: &'static Gate = leak(Gate::default());
    record(start, stream);
    launch_gate(stream, gate);
    record(stop, stream);
    gate.wait_entered();
    // SAFETY: handles.
    assert_eq!(unsafe { ffi::cuEventQuery(stop) }.0, codes::NOT_READY);
    gate.open();
    // SAFETY: a handle.
    ok(unsafe { ffi::cuEventSynchronize(stop) });
    // SAFETY: a handle.
    ok(unsafe { ffi::cuEventQuery(start) });
    let mut ms = -1f32;
    // SAFETY: writes one float.
    ok(unsafe { ffi::cuEventElapsedTime(&mut ms, start, stop) });
    assert!(ms >= 0.0);
    // SAFETY: a handle.
    ok(unsafe { ffi::cuEventDestroy_v2(start) });
    assert_eq!(device_state(device).events, 1);
    assert!(take_violations(device).is_empty());
    finish(device);
}

#[test]
fn every_code_the_simulator_returns_has_a_name() {
    install();
    for code in [
        codes::SUCCESS,
        codes::INVALID_VALUE,
        codes::OUT_OF_MEMORY,
        codes::INVALID_DEVICE,
        codes::INVALID_CONTEXT,
        codes::INVALID_HANDLE,
        codes::ILLEGAL_STATE,
        codes::NOT_READY,
        codes::CONTEXT_IS_DESTROYED,
        codes::HOST_MEMORY_ALREADY_REGISTERED,
        codes::HOST_MEMORY_NOT_REGISTERED,
        codes::NOT_PERMITTED,
        codes::NOT_SUPPORTED,
        codes::STREAM_CAPTURE_UNSUPPORTED,
        codes::STREAM_CAPTURE_INVALIDATED,
        codes::STREAM_CAPTURE_UNMATCHED,
        codes::STREAM_CAPTURE_UNJOINED,
        codes::STREAM_CAPTURE_ISOLATION,
        codes::CAPTURED_EVENT,
    ] {
        let mut name = null();
        // SAFETY: writes one pointer.
        ok(unsafe { ffi::cuGetErrorName(code, &mut name) });
        // SAFETY: a static NUL-terminated name.
        let name = unsafe { core::ffi::CStr::from_ptr(name) }.to_str().unwrap();
        assert!(name.starts_with("CUDA_"), "{code}: {name}");
    }
    let mut name = null();
    // SAFETY: writes one pointer.
    let unknown = unsafe { ffi::cuGetErrorName(123_456, &mut name) };
    assert_eq!(unknown.0, codes::INVALID_VALUE);
    assert!(name.is_null());
}

/// `bytes` of zeroed pinned host memory; freed with the context.
fn pinned(bytes: usize) -> *mut u8 {
    let mut ptr: *mut c_void = null_mut();
    // SAFETY: writes one pointer.
    ok(unsafe { ffi::cuMemHostAlloc(&mut ptr, bytes, 0) });
    ptr.cast()
}

/// `bytes` of zeroed device memory; freed with the context.
fn device_memory(bytes: usize) -> ffi::CUdeviceptr {
    let mut dev: ffi::CUdeviceptr = 0;
    // SAFETY: writes one pointer.
    ok(unsafe { ffi::cuMemAlloc_v2(&mut dev, bytes) });
    dev
}

/// A host address as the batch copy takes it (provenance exposed).
fn host(ptr: *mut u8) -> ffi::CUdeviceptr {
    ptr.expose_provenance() as ffi::CUdeviceptr
}

/// `host(ptr)` of the byte `offset` bytes on (inside `ptr`'s allocation).
fn host_at(ptr: *mut u8, offset: usize) -> ffi::CUdeviceptr {
    host(ptr.wrapping_add(offset))
}

/// The `len` bytes at `ptr`, read once no copy writes them.
fn read(ptr: *mut u8, len: usize) -> Vec<u8> {
    // SAFETY: `len` bytes of a live pinned allocation, no copy in flight.
    unsafe { core::slice::from_raw_parts(ptr, len) }.to_vec()
}

/// One attributes entry for every copy, in stream order.
fn stream_order() -> ffi::CUmemcpyAttributes {
    ffi::CUmemcpyAttributes {
        srcAccessOrder: ffi::CU_MEMCPY_SRC_ACCESS_ORDER_STREAM,
        ..Default::default()
    }
}

/// `cuMemcpyBatchAsync_v2` of `copies` (destination, source, size) with
/// `attrs` and `idxs`, through `ffi::memcpy_batch_async`.
fn batch_with(
    stream: CUstream,
    copies: &[(ffi::CUdeviceptr, ffi::CUdeviceptr, usize)],
    attrs: &mut [ffi::CUmemcpyAttributes],
    idxs: &mut [usize],
) -> u32 {
    let mut dsts: Vec<_> = copies.iter().map(|c| c.0).collect();
    let mut srcs: Vec<_> = copies.iter().map(|c| c.1).collect();
    let mut sizes: Vec<_> = copies.iter().map(|c| c.2).collect();
    assert_eq!(attrs.len(), idxs.len());
    // SAFETY: the arrays hold what they say; the copies' memory is the
    // test's pinned and device allocations, alive until the test ends.
    unsafe {
        ffi::memcpy_batch_async(
            dsts.as_mut_ptr(),
            srcs.as_mut_ptr(),
            sizes.as_mut_ptr(),
            copies.len(),
            attrs.as_mut_ptr(),
            idxs.as_mut_ptr(),
            attrs.len(),
            stream,
        )
    }
    .expect("the simulator has the batch copy")
    .0
}

/// A batch copy with one attributes entry (stream order).
fn batch(stream: CUstream, copies: &[(ffi::CUdeviceptr, ffi::CUdeviceptr, usize)]) -> u32 {
    batch_with(stream, copies, &mut [stream_order()], &mut [0])
}

#[test]
fn batch_copies_move_each_entry_in_stream_order_after_the_ops_before_them() {
    let (device, _ctx) = setup();
    let stream = new_stream();
    let pattern = pinned(64);
    let fill = pinned(64);
    // SAFETY: 64 bytes of pinned memory each, no copy in flight.
    unsafe {
        for i in 0..64 {
            pattern.add(i).write(i as u8 + 1);
            fill.add(i).write(0xEE);
        }
    }
    let (dev_a, dev_b) = (device_memory(64), device_memory(64));
    let out = pinned(64);

    // Device to host: the batch reads what the copy queued before it wrote.
    hold(device);
    // SAFETY: 64 pinned bytes into 64 bytes of device memory.
    ok(unsafe { ffi::cuMemcpyHtoDAsync_v2(dev_a, pattern.cast(), 64, stream) });
    let code = batch(
        stream,
        &[
            (host(out), dev_a, 5),
            (host_at(out, 5), dev_a + 10, 17),
            (host_at(out, 22), dev_a + 40, 24),
        ],
    );
    assert_eq!(code, 0);
    assert_eq!(device_state(device).queued, 4, "one op per entry");
    release(device);
    assert_eq!(sync(stream), 0);
    let mut expected = Vec::new();
    expected.extend(1..=5u8);
    expected.extend(11..=27u8);
    expected.extend(41..=64u8);
    expected.resize(64, 0);
    assert_eq!(read(out, 64), expected);

    // Host to device: the batch overwrites what the copy before it wrote.
    hold(device);
    // SAFETY: 64 pinned bytes into 64 bytes of device memory.
    ok(unsafe { ffi::cuMemcpyHtoDAsync_v2(dev_b, fill.cast(), 64, stream) });
    let code = batch(
        stream,
        &[
            (dev_b + 60, host(pattern), 4),
            (dev_b, host_at(pattern, 8), 3),
            (dev_b + 20, host_at(pattern, 30), 31),
        ],
    );
    assert_eq!(code, 0);
    assert_eq!(device_state(device).queued, 4);
    release(device);
    assert_eq!(sync(stream), 0);
    let back = pinned(64);
    // SAFETY: 64 writable pinned bytes.
    ok(unsafe { ffi::cuMemcpyDtoH_v2(back.cast(), dev_b, 64) });
    let mut expected = std::vec![0xEE; 64];
    expected[60..64].copy_from_slice(&[1, 2, 3, 4]);
    expected[0..3].copy_from_slice(&[9, 10, 11]);
    for (i, byte) in expected[20..51].iter_mut().enumerate() {
        *byte = 31 + i as u8;
    }
    assert_eq!(read(back, 64), expected);

    let state = device_state(device);
    assert_eq!(state.batch_copy_calls, 2);
    assert_eq!(state.async_copy_calls, 2, "synchronous copies not counted");
    assert!(take_violations(device).is_empty());
    finish(device);
}

#[test]
fn an_invalid_batch_queues_nothing() {
    let (device, _ctx) = setup();
    let stream = new_stream();
    let (buf, dev) = (pinned(64), device_memory(64));
    let other = device_memory(64);
    let good = (dev, host(buf), 8);
    hold(device);
    let bad_entries = [
        ((other, dev + 8, 8), "both sides are device memory"),
        ((host(buf), host_at(buf, 8), 8), "neither side"),
        ((dev, 0, 8), "the host side is null"),
        ((dev + 60, host(buf), 8), "not in a live device allocation"),
    ];
    for (bad, message) in bad_entries {
        let code = batch(stream, &[good, bad, good]);
        assert_eq!(code, codes::INVALID_VALUE, "{message}");
        let found = take_violations(device);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains(message), "{found:?}");
    }
    assert_eq!(batch(stream, &[]), codes::INVALID_VALUE, "no copies");
    let invalid_order = ffi::CUmemcpyAttributes::default();
    let [a, b] = [stream_order(), invalid_order];
    for (attrs, idxs) in [
        (&mut [][..], &mut [][..]),
        (&mut [a][..], &mut [1][..]),
        (&mut [b][..], &mut [0][..]),
        (&mut [a, a][..], &mut [0, 0][..]),
        (&mut [a, a][..], &mut [0, 3][..]),
    ] {
        let code = batch_with(stream, &[good, good, good], attrs, idxs);
        assert_eq!(code, codes::INVALID_VALUE, "{idxs:?}");
    }
    assert_eq!(
        batch(null_mut(), &[good]),
        codes::INVALID_VALUE,
        "the legacy default stream"
    );
    let state = device_state(device);
    assert_eq!(state.queued, 0);
    assert_eq!(state.batch_copy_calls, 0);
    assert!(take_violations(device).is_empty());
    // Two attributes entries, the second from copy 1 on.
    let code = batch_with(stream, &[good, good], &mut [a, a], &mut [0, 1]);
    assert_eq!(code, 0);
    assert_eq!(device_state(device).queued, 2);
    release(device);
    assert_eq!(sync(stream), 0);
    assert_eq!(device_state(device).batch_copy_calls, 1);
    finish(device);
}

#[test]
fn refused_and_failed_batch_copies_have_no_effect() {
    let (device, _ctx) = setup();
    let stream = new_stream();
    let (buf, dev) = (pinned(16), device_memory(16));
    hold(device);
    fail_call(device, "cuMemcpyBatchAsync_v2", 2, 999);
    assert_eq!(batch(stream, &[(host(buf), dev, 16)]), 0);
    assert_eq!(batch(stream, &[(host(buf), dev, 16)]), 999);
    assert_eq!(batch(stream, &[(host(buf), dev, 16)]), 0);
    assert_eq!(device_state(device).queued, 2);
    assert_eq!(device_state(device).batch_copy_calls, 2);
    refuse_batch_copies(device);
    let code = batch(stream, &[(host(buf), dev, 16)]);
    assert_eq!(code, codes::NOT_SUPPORTED);
    let state = device_state(device);
    assert_eq!((state.queued, state.batch_copy_calls), (2, 2));
    // Single copies still work.
    // SAFETY: 16 pinned bytes from 16 bytes of device memory.
    ok(unsafe { ffi::cuMemcpyDtoHAsync_v2(buf.cast(), dev, 16, stream) });
    assert_eq!(device_state(device).async_copy_calls, 1);
    release(device);
    assert_eq!(sync(stream), 0);
    assert!(take_violations(device).is_empty());
    finish(device);
}

#[test]
fn a_capturing_stream_takes_a_batch_as_one_copy_node_per_entry() {
    let (device, _ctx) = setup();
    let stream = new_stream();
    let (src, out, dev) = (pinned(8), pinned(8), device_memory(8));
    // SAFETY: 8 bytes of pinned memory, no copy in flight.
    unsafe { src.copy_from_nonoverlapping([1, 2, 3, 4, 5, 6, 7, 8].as_ptr(), 8) };
    ok(begin(stream));
    let code = batch(
        stream,
        &[
            (dev, host(src), 8),
            (host(out), dev + 2, 4),
            (host_at(out, 4), dev, 2),
        ],
    );
    assert_eq!(code, 0);
    assert_eq!(device_state(device).queued, 0, "captured, not queued");
    let (code, graph) = end(stream);
    assert_eq!(code, 0);
    assert_eq!(graph_node_count(graph), 3);
    let exec = instantiate(graph);
    launch(exec, stream);
    assert_eq!(sync(stream), 0);
    assert_eq!(read(out, 8), [3, 4, 5, 6, 1, 2, 0, 0]);
    assert_eq!(device_state(device).batch_copy_calls, 1);
    // SAFETY: handles.
    ok(unsafe { ffi::cuGraphExecDestroy(exec) });
    // SAFETY: as above.
    ok(unsafe { ffi::cuGraphDestroy(graph) });
    assert!(take_violations(device).is_empty());
    finish(device);
}

/// The number of nodes of live graph `graph`, read from the simulator's
/// state (not a driver call).
fn graph_node_count(graph: CUgraph) -> usize {
    registry::lock().graphs[&registry::id_of(graph)].nodes.len()
}

#[test]
fn copy_batch_queues_one_call_or_reports_no_batch_copy() {
    use crate::cuda::{Context, DeviceBuffer, PinnedBuffer, Stream};

    install();
    let device = new_device();
    let context = Context::primary(device).unwrap();
    let stream = Stream::new(&context).unwrap();
    let pinned = PinnedBuffer::new(&context, 32).unwrap();
    let mut dev = DeviceBuffer::new(&context, 32).unwrap();
    dev.copy_from_host(0, &[7; 32]).unwrap();
    let out = pinned.raw_ptr();
    let (mut dsts, mut srcs, mut sizes) = (
        [host(out), host_at(out, 16)],
        [dev.raw(), dev.raw() + 8],
        [16, 8],
    );
    // SAFETY: pinned and device memory of the stream's context, both alive
    // until the stream is synchronized; the destinations are disjoint.
    let queued = unsafe {
        stream
            .as_stream()
            .copy_batch(&mut dsts, &mut srcs, &mut sizes)
    };
    assert_eq!(queued, Ok(true));
    stream.as_stream().synchronize().unwrap();
    let mut expected = [0u8; 32];
    expected[..24].fill(7);
    assert_eq!(read(out, 32), expected);

    refuse_batch_copies(device);
    hold(device);
    // SAFETY: as above.
    let queued = unsafe {
        stream
            .as_stream()
            .copy_batch(&mut dsts, &mut srcs, &mut sizes)
    };
    assert_eq!(queued, Ok(false));
    let state = device_state(device);
    assert_eq!((state.queued, state.batch_copy_calls), (0, 1));
    release(device);
    // SAFETY: an empty batch calls nothing.
    let queued = unsafe { stream.as_stream().copy_batch(&mut [], &mut [], &mut []) };
    assert_eq!(queued, Ok(true));
    assert!(take_violations(device).is_empty());
    drop((pinned, dev, stream, context));
    assert!(!device_state(device).context_alive);
}
