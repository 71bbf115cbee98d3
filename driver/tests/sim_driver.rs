//! The simulated driver's model, through the CUDA layer's public API: what
//! the layer's own tests rely on the simulator to do. (Behaviours the API
//! does not reach are tested against the entry points inside
//! `cuda::sim`.)
//!
//! Every test takes devices of its own and releases its context at the end,
//! so that the simulator's threads end with the test (Miri requires it).

use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::thread::{self, ThreadId};

use hostcopy_driver::Record;
use hostcopy_driver::cuda::{
    CaptureMode, Context, DeviceBuffer, Event, Graph, HostCopy, PinnedBuffer, Stream,
    driver_version, sim,
};

/// A fresh device of this test, with its primary context current here.
fn context() -> (usize, Context) {
    sim::install();
    let device = sim::new_device();
    let context = Context::primary(device).expect("the simulator has every device it made");
    (device, context)
}

/// Ends a test: no misuse recorded on `device`, then its context goes.
fn finish(device: usize, context: Context) {
    let found = sim::take_violations(device);
    assert!(found.is_empty(), "{found:#?}");
    drop(context);
    assert!(!sim::device_state(device).context_alive);
}

/// Leaked, and listed in a static so that Miri does not count it as leaked.
static KEPT: Mutex<Vec<&'static (dyn std::any::Any + Send + Sync)>> = Mutex::new(Vec::new());

fn leak<T: Send + Sync + 'static>(value: T) -> &'static T {
    let kept: &'static T = Box::leak(Box::new(value));
    KEPT.lock().unwrap().push(kept);
    kept
}

/// Host memory that only raw addresses reach once records point into it.
fn leak_bytes(bytes: Vec<u8>) -> (usize, usize) {
    let bytes: &'static mut [u8] = Box::leak(bytes.into_boxed_slice());
    let len = bytes.len();
    let addr = bytes.as_mut_ptr().expose_provenance();
    let whole: &'static [u8] = bytes;
    leak(whole);
    (addr, len)
}

/// Reads `len` bytes at `addr` after the host functions writing them ended.
fn read(addr: usize, len: usize) -> Vec<u8> {
    // SAFETY: leaked bytes; the caller synchronized first.
    unsafe { std::slice::from_raw_parts(std::ptr::with_exposed_provenance::<u8>(addr), len) }
        .to_vec()
}

/// An owned record copying `len` bytes from `src` to `dst` (leaked bytes).
fn record(dst: usize, src: usize, len: usize) -> Record<'static> {
    // SAFETY: both ranges are leaked, so valid for as long as any host
    // function may run the record.
    unsafe { Record::from_raw_parts(dst, src, len) }.expect("valid ranges")
}

type Log = Mutex<Vec<(usize, ThreadId)>>;

struct Entry {
    log: &'static Log,
    tag: usize,
}

unsafe extern "C" fn log_entry(data: *mut c_void) {
    // SAFETY: tests pass a leaked `Entry`.
    let entry = unsafe { &*data.cast::<Entry>() };
    let mut log = entry.log.lock().unwrap();
    log.push((entry.tag, thread::current().id()));
}

fn entry(log: &'static Log, tag: usize) -> *mut c_void {
    let entry: *const Entry = leak(Entry { log, tag });
    entry.cast_mut().cast()
}

unsafe extern "C" fn count(data: *mut c_void) {
    // SAFETY: tests pass a leaked `AtomicUsize`.
    unsafe { &*data.cast::<AtomicUsize>() }.fetch_add(1, Ordering::SeqCst);
}

fn counter() -> (&'static AtomicUsize, *mut c_void) {
    let counter: &'static AtomicUsize = leak(AtomicUsize::new(0));
    let ptr: *const AtomicUsize = counter;
    (counter, ptr.cast_mut().cast())
}

/// A host function that blocks until the test opens the gate.
#[derive(Default)]
struct Gate {
    state: Mutex<(bool, bool)>, // (entered, open)
    changed: Condvar,
}

unsafe extern "C" fn block_on_gate(data: *mut c_void) {
    // SAFETY: tests pass a leaked `Gate`.
    let gate = unsafe { &*data.cast::<Gate>() };
    let mut state = gate.state.lock().unwrap();
    state.0 = true;
    gate.changed.notify_all();
    while !state.1 {
        state = gate.changed.wait(state).unwrap();
    }
}

#[test]
fn host_functions_run_in_submission_order_on_one_worker_thread_per_context() {
    let (device, context) = context();
    let streams = [
        Stream::new(&context).unwrap(),
        Stream::new(&context).unwrap(),
    ];
    let log: &'static Log = leak(Mutex::new(Vec::new()));
    for tag in 0..6 {
        let stream = streams[tag % 2].as_stream();
        // SAFETY: the entry and its log are leaked.
        unsafe { stream.launch_host_fn(log_entry, entry(log, tag)) }.unwrap();
    }
    context.synchronize().unwrap();

    let (other, other_context) = self::context();
    let stream = Stream::new(&other_context).unwrap();
    // SAFETY: as above.
    unsafe { stream.as_stream().launch_host_fn(log_entry, entry(log, 6)) }.unwrap();
    stream.as_stream().synchronize().unwrap();
    drop(stream);
    finish(other, other_context);

    let log = log.lock().unwrap();
    let tags: Vec<usize> = log.iter().map(|(tag, _)| *tag).collect();
    assert_eq!(tags, [0, 1, 2, 3, 4, 5, 6]);
    let worker = log[0].1;
    assert!(log[..6].iter().all(|(_, on)| *on == worker));
    assert_ne!(worker, thread::current().id());
    assert_ne!(log[6].1, worker);
    assert_eq!(sim::device_state(device).host_fns_run, 6);
    context.make_current().unwrap();
    drop(streams);
    finish(device, context);
}

#[test]
fn a_held_device_queues_work_until_released() {
    let (device, context) = context();
    let stream = Stream::new(&context).unwrap();
    let (counter, data) = counter();
    sim::hold(device);
    for _ in 0..3 {
        // SAFETY: the counter is leaked.
        unsafe { stream.as_stream().launch_host_fn(count, data) }.unwrap();
    }
    let state = sim::device_state(device);
    assert_eq!((state.queued, state.host_fns_run), (3, 0));
    assert_eq!(counter.load(Ordering::SeqCst), 0);
    sim::release(device);
    stream.as_stream().synchronize().unwrap();
    assert_eq!(counter.load(Ordering::SeqCst), 3);
    assert_eq!(sim::device_state(device).queued, 0);
    drop(stream);
    finish(device, context);
}

#[test]
fn a_sticky_error_skips_queued_host_functions_and_synchronize_does_not_wait() {
    let (device, context) = context();
    let stream = Stream::new(&context).unwrap();
    let gate: &'static Gate = leak(Gate::default());
    let gate_data: *const Gate = gate;
    let (counter, data) = counter();
    // SAFETY: the gate and the counter are leaked.
    unsafe {
        stream
            .as_stream()
            .launch_host_fn(block_on_gate, gate_data.cast_mut().cast())
    }
    .unwrap();
    for _ in 0..2 {
        // SAFETY: as above.
        unsafe { stream.as_stream().launch_host_fn(count, data) }.unwrap();
    }
    {
        let mut state = gate.state.lock().unwrap();
        while !state.0 {
            state = gate.changed.wait(state).unwrap();
        }
    }
    sim::fail_context(device, 719);
    // The gate's host function is still running.
    let error = stream.as_stream().synchronize().unwrap_err();
    assert_eq!(error.code(), 719);
    assert_eq!(error.name(), "CUDA_ERROR_LAUNCH_FAILED");
    assert_eq!(context.synchronize().unwrap_err().code(), 719);
    let state = sim::device_state(device);
    assert_eq!((state.queued, state.host_fns_skipped), (0, 2));
    gate.state.lock().unwrap().1 = true;
    gate.changed.notify_all();
    drop(stream);
    drop(context);
    // Releasing the context waited for its worker, which finished the
    // gate's host function; the skipped ones never ran.
    assert_eq!(sim::device_state(device).host_fns_run, 1);
    assert_eq!(counter.load(Ordering::SeqCst), 0);
    // Destroying the stream after the error failed with it; nothing else.
    assert!(sim::take_violations(device).is_empty());
}

#[test]
fn an_injected_failure_reaches_the_caller_once() {
    let (device, context) = context();
    sim::fail_call(device, "cuStreamCreate", 2, 2);
    let first = Stream::new(&context).unwrap();
    let error = Stream::new(&context).unwrap_err();
    assert_eq!(
        (error.code(), error.name()),
        (2, "CUDA_ERROR_OUT_OF_MEMORY")
    );
    let third = Stream::new(&context).unwrap();
    assert_eq!(sim::device_state(device).streams, 2);
    drop((first, third));
    finish(device, context);
}

#[test]
fn a_captured_graph_replays_its_owned_records_and_frees_them_with_it() {
    let (device, context) = context();
    let stream = Stream::new(&context).unwrap();
    let (src, len) = leak_bytes((0..64).collect());
    let (dst, _) = leak_bytes(vec![0; 64]);
    stream
        .as_stream()
        .begin_capture(CaptureMode::Relaxed)
        .unwrap();
    assert!(stream.as_stream().is_capturing().unwrap());
    for half in [0, 32] {
        stream
            .as_stream()
            .launch_owned(HostCopy::Single, record(dst + half, src + half, 32))
            .unwrap();
    }
    assert_eq!(sim::device_state(device).queued, 0, "captured, not queued");
    let graph = stream.as_stream().end_capture().unwrap();
    assert!(!stream.as_stream().is_capturing().unwrap());
    let mut exec = graph.instantiate().unwrap();
    let replays = if cfg!(miri) { 3 } else { 100 };
    for _ in 0..replays {
        exec.launch(stream.as_stream()).unwrap();
    }
    stream.as_stream().synchronize().unwrap();
    assert_eq!(read(dst, len), read(src, len));
    assert_eq!(sim::device_state(device).host_fns_run, 2 * replays as u64);
    let state = sim::device_state(device);
    assert_eq!((state.user_objects, state.destructors_run), (2, 0));
    drop(graph);
    assert_eq!(
        sim::device_state(device).user_objects,
        2,
        "the executable holds them"
    );
    drop(exec);
    sim::drain(device);
    let state = sim::device_state(device);
    assert_eq!((state.user_objects, state.destructors_run), (0, 2));
    drop(stream);
    finish(device, context);
}

#[test]
fn graph_nodes_replay_and_updates_apply_to_later_launches_only() {
    let (device, context) = context();
    let stream = Stream::new(&context).unwrap();
    let (src, len) = leak_bytes(vec![1; 16]);
    let (other, _) = leak_bytes(vec![2; 16]);
    let (dst, _) = leak_bytes(vec![0; 16]);
    let mut graph = Graph::new(&context).unwrap();
    let node = graph
        .add_host_copy(HostCopy::Single, record(dst, src, len), &[])
        .unwrap();
    let mut exec = graph.instantiate().unwrap();
    sim::hold(device);
    exec.launch(stream.as_stream()).unwrap();
    exec.set_host_copy(node, HostCopy::Single, record(dst, other, len))
        .unwrap();
    sim::release(device);
    stream.as_stream().synchronize().unwrap();
    assert_eq!(
        read(dst, len),
        vec![1; 16],
        "the queued launch kept its record"
    );
    exec.launch(stream.as_stream()).unwrap();
    stream.as_stream().synchronize().unwrap();
    assert_eq!(read(dst, len), vec![2; 16]);
    drop(exec);
    drop(graph);
    sim::drain(device);
    assert_eq!(sim::device_state(device).user_objects, 0);
    drop(stream);
    finish(device, context);
}

#[test]
fn a_scope_waits_for_its_host_copies() {
    let (device, context) = context();
    let stream = Stream::new(&context).unwrap();
    let src: Vec<u8> = (0..=255).collect();
    let mut dst = vec![0u8; 256];
    sim::hold(device);
    let releaser = thread::spawn(move || sim::release(device));
    stream
        .as_stream()
        .scope(|scope| scope.launch(HostCopy::Single, Record::pack(&mut dst[..], &src[..])?))
        .unwrap()
        .unwrap();
    releaser.join().unwrap();
    assert_eq!(dst, src);
    drop(stream);
    finish(device, context);
}

#[test]
fn pinned_and_device_memory_round_trip_through_streams() {
    let (device, context) = context();
    let stream = Stream::new(&context).unwrap();
    let mut pinned = PinnedBuffer::new(&context, 64).unwrap();
    let mut back = PinnedBuffer::new(&context, 64).unwrap();
    let mut on_device = DeviceBuffer::new(&context, 64).unwrap();
    let state = sim::device_state(device);
    assert_eq!((state.host_allocations, state.device_allocations), (2, 1));
    pinned
        .iter_mut()
        .enumerate()
        .for_each(|(i, b)| *b = i as u8);
    on_device.copy_from_host(0, &pinned).unwrap();
    let mut host = vec![0u8; 64];
    on_device.copy_to_host(0, &mut host).unwrap();
    assert_eq!(host, &pinned[..]);
    // SAFETY: `back` is pinned, untouched until the stream is synchronized.
    unsafe {
        stream
            .as_stream()
            .copy_device_to_host(back.raw_ptr(), &on_device, 0, 64)
    }
    .unwrap();
    stream.as_stream().synchronize().unwrap();
    assert_eq!(&back[..], &pinned[..]);
    back[0] = 9;
    drop((pinned, back, on_device));
    let state = sim::device_state(device);
    assert_eq!((state.host_allocations, state.device_allocations), (0, 0));
    drop(stream);
    finish(device, context);
}

#[test]
fn events_order_and_time_work_on_a_stream() {
    let (device, context) = context();
    let stream = Stream::new(&context).unwrap();
    let (start, end) = (
        Event::timing(&context).unwrap(),
        Event::timing(&context).unwrap(),
    );
    let (counter, data) = counter();
    start.record(stream.as_stream()).unwrap();
    // SAFETY: the counter is leaked.
    unsafe { stream.as_stream().launch_host_fn(count, data) }.unwrap();
    end.record(stream.as_stream()).unwrap();
    end.synchronize().unwrap();
    assert_eq!(counter.load(Ordering::SeqCst), 1);
    assert!(end.elapsed_ms_since(&start).unwrap() >= 0.0);
    drop((start, end, stream));
    finish(device, context);
}

#[test]
fn the_simulator_reports_a_driver_and_names_its_devices() {
    let (device, context) = context();
    assert_eq!(driver_version().unwrap(), 12080);
    assert!(Context::device_count().unwrap() > device);
    let name = context.device_name().unwrap();
    assert_eq!(name.as_str(), format!("hostcopy simulated device {device}"));
    finish(device, context);
}
