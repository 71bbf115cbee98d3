//! Stream memory waits (`cuStreamWaitValue32_v2`) on flags in pinned
//! memory, and streams that run independently around them.

use core::sync::atomic::{AtomicBool, AtomicU32};
use std::time::{Duration, Instant};

use super::*;

/// Queues a cyclic GEQ wait for `value` at `addr` on `stream`.
fn wait_value(stream: CUstream, addr: ffi::CUdeviceptr, value: u32) -> u32 {
    // SAFETY: the simulator checks `addr`; the tests' flags live until the
    // context goes.
    unsafe { ffi::cuStreamWaitValue32_v2(stream, addr, value, ffi::CU_STREAM_WAIT_VALUE_GEQ) }.0
}

/// The u32 at `ptr` (in a pinned allocation that outlives the test's use),
/// written and read atomically as the driver reads a flag.
fn flag<'a>(ptr: *mut u8) -> &'a AtomicU32 {
    // SAFETY: 4 aligned bytes of a live pinned allocation, accessed only
    // atomically from here on.
    unsafe { AtomicU32::from_ptr(ptr.cast()) }
}

fn query_event(event: ffi::CUevent) -> u32 {
    // SAFETY: a handle; checked by the simulator.
    unsafe { ffi::cuEventQuery(event) }.0
}

fn query_stream(stream: CUstream) -> u32 {
    // SAFETY: a handle; checked by the simulator.
    unsafe { ffi::cuStreamQuery(stream) }.0
}

/// Waits (up to ten seconds) for `done`, so that a wait that blocks too
/// much fails the test instead of hanging it.
fn eventually(what: &str, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "never happened: {what}"
        );
        thread::sleep(Duration::from_micros(100));
    }
}

fn count_on(stream: CUstream, counter: &'static AtomicUsize) {
    // SAFETY: the counter is leaked.
    ok(unsafe { ffi::cuLaunchHostFunc(stream, Some(count), counter_ptr(counter)) });
}

#[test]
fn a_flag_wait_holds_only_its_stream() {
    let (device, _ctx) = setup();
    let (a, b) = (new_stream(), new_stream());
    let (ea, eb) = (new_event(), new_event());
    let flags = pinned(4);
    let dev = device_memory(8);
    let (dst_a, dst_b) = (pinned(8), pinned(8));
    // SAFETY: 8 bytes of live device memory, from 8 readable bytes.
    ok(unsafe { ffi::cuMemcpyHtoD_v2(dev, [0xffu8; 8].as_ptr().cast(), 8) });
    assert_eq!(wait_value(a, host(flags), 1), 0);
    // SAFETY: 8 bytes of pinned memory each, kept until the context goes.
    ok(unsafe { ffi::cuMemcpyDtoHAsync_v2(dst_a.cast(), dev, 8, a) });
    record(ea, a);
    // SAFETY: as above.
    ok(unsafe { ffi::cuMemcpyDtoHAsync_v2(dst_b.cast(), dev, 8, b) });
    record(eb, b);
    eventually("b's copy and event, queued after a's wait", || {
        query_event(eb) == 0
    });
    assert_eq!(read(dst_b, 8), [0xff; 8]);
    assert_eq!(query_event(ea), codes::NOT_READY);
    assert_eq!(query_stream(a), codes::NOT_READY);
    assert_eq!(read(dst_a, 8), [0; 8], "a's copy waits behind the flag");
    let state = device_state(device);
    assert_eq!((state.wait_value_ops, state.queued), (1, 3));
    flag(flags).store(1, Ordering::Release);
    assert_eq!(sync(a), 0);
    assert_eq!(read(dst_a, 8), [0xff; 8]);
    assert_eq!(query_event(ea), 0);
    assert!(take_violations(device).is_empty());
    finish(device);
}

#[test]
fn a_stream_waiting_for_an_event_behind_a_flag_waits_too_until_another_thread_sets_it() {
    let (device, _ctx) = setup();
    let (a, b, c, d) = (new_stream(), new_stream(), new_stream(), new_stream());
    let ea = new_event();
    let flags = pinned(4);
    let (behind, beside): (&'static AtomicUsize, &'static AtomicUsize) =
        (leak(AtomicUsize::new(0)), leak(AtomicUsize::new(0)));
    assert_eq!(wait_value(a, host(flags), 7), 0);
    record(ea, a);
    // b's host function comes after a's record; d waits and queues nothing.
    assert_eq!(wait_event(b, ea), 0);
    count_on(b, behind);
    assert_eq!(wait_event(d, ea), 0);
    count_on(c, beside);
    eventually(
        "c's host function, on a stream that waits for nothing",
        || beside.load(Ordering::SeqCst) == 1,
    );
    assert_eq!(behind.load(Ordering::SeqCst), 0);
    assert_eq!(query_stream(b), codes::NOT_READY);
    assert_eq!(query_stream(d), codes::NOT_READY, "d waited for ea");
    let (set, flag) = (AtomicBool::new(false), flag(flags));
    thread::scope(|s| {
        s.spawn(|| {
            thread::sleep(Duration::from_millis(2));
            set.store(true, Ordering::SeqCst);
            flag.store(7, Ordering::Release);
        });
        assert_eq!(sync(d), 0);
        assert!(set.load(Ordering::SeqCst), "d's synchronize covers ea");
        assert_eq!(query_event(ea), 0);
        assert_eq!(sync(b), 0);
    });
    assert_eq!(behind.load(Ordering::SeqCst), 1);
    assert!(take_violations(device).is_empty());
    finish(device);
}

#[test]
fn stream_event_and_context_synchronize_return_once_the_flag_is_set() {
    let (device, _ctx) = setup();
    let stream = new_stream();
    let event = new_event();
    let flags = pinned(4);
    // One round per synchronizing call, each waiting for the next value.
    let calls: [(&str, &dyn Fn() -> u32); 3] = [
        ("cuEventSynchronize", &|| {
            // SAFETY: a handle.
            unsafe { ffi::cuEventSynchronize(event) }.0
        }),
        ("cuStreamSynchronize", &|| sync(stream)),
        ("cuCtxSynchronize", &|| {
            // SAFETY: no arguments.
            unsafe { ffi::cuCtxSynchronize() }.0
        }),
    ];
    for (value, (name, call)) in (1..).zip(calls) {
        assert_eq!(wait_value(stream, host(flags), value), 0);
        record(event, stream);
        let (set, flag) = (AtomicBool::new(false), flag(flags));
        thread::scope(|s| {
            s.spawn(|| {
                thread::sleep(Duration::from_millis(2));
                set.store(true, Ordering::SeqCst);
                flag.store(value, Ordering::Release);
            });
            assert_eq!(call(), 0, "{name}");
            assert!(
                set.load(Ordering::SeqCst),
                "{name} returned before the flag"
            );
        });
    }
    assert_eq!(device_state(device).wait_value_ops, 3);
    finish(device);
}

#[test]
fn the_wait_compares_cyclically_across_the_wraparound() {
    let (device, _ctx) = setup();
    // (flag, value waited for, passes): `(int32_t)(flag - value) >= 0`.
    let cases = [
        (u32::MAX - 1, u32::MAX, false),
        (u32::MAX, u32::MAX, true),
        (0, u32::MAX, true),
        (5, u32::MAX - 1, true),
        (u32::MAX, 2, false),
        (0x8000_0003, 3, false),
        (0x7fff_ffff + 3, 3, true),
    ];
    let flags = pinned(4 * cases.len());
    let events: Vec<ffi::CUevent> = cases
        .iter()
        .enumerate()
        .map(|(i, &(now, value, _))| {
            let at = flags.wrapping_add(4 * i);
            flag(at).store(now, Ordering::Release);
            let (stream, event) = (new_stream(), new_event());
            assert_eq!(wait_value(stream, host(at), value), 0);
            record(event, stream);
            event
        })
        .collect();
    // The worker runs the first op that may run first: once a later
    // stream's host function has run, so has every wait that passes.
    let last = new_stream();
    let counter: &'static AtomicUsize = leak(AtomicUsize::new(0));
    count_on(last, counter);
    eventually("a host function on a stream of its own", || {
        query_stream(last) == 0
    });
    for (&(now, value, passes), &event) in cases.iter().zip(&events) {
        let expected = if passes { 0 } else { codes::NOT_READY };
        assert_eq!(
            query_event(event),
            expected,
            "flag {now:#x}, wait {value:#x}"
        );
    }
    // The first case passes once its flag wraps to the value.
    flag(flags).store(u32::MAX, Ordering::Release);
    eventually("the wait for u32::MAX once the flag is there", || {
        query_event(events[0]) == 0
    });
    assert!(take_violations(device).is_empty());
    finish(device);
}

#[test]
fn a_wait_outside_pinned_memory_is_refused_and_reported() {
    let (device, _ctx) = setup();
    let stream = new_stream();
    let flags = pinned(8);
    let dev = device_memory(8);
    let heap = Box::new(0u32);
    let outside = [
        dev,
        host((&*heap as *const u32).cast_mut().cast()),
        host_at(flags, 2),
        host_at(flags, 8),
        0,
    ];
    for addr in outside {
        assert_eq!(
            wait_value(stream, addr, 1),
            codes::INVALID_VALUE,
            "{addr:#x}"
        );
    }
    let violations = take_violations(device);
    assert_eq!(violations.len(), outside.len(), "{violations:?}");
    assert!(violations[0].contains("cuStreamWaitValue32_v2"));
    // Only GEQ is modelled.
    // SAFETY: a live pinned flag.
    let eq = unsafe { ffi::cuStreamWaitValue32_v2(stream, host(flags), 1, 1) };
    assert_eq!(eq.0, codes::NOT_SUPPORTED);
    let state = device_state(device);
    assert_eq!((state.wait_value_ops, state.queued), (0, 0));
    assert_eq!(sync(stream), 0, "nothing was queued");
    finish(device);
}

#[test]
fn freeing_a_flag_a_queued_wait_reads_is_a_violation() {
    let (device, _ctx) = setup();
    let stream = new_stream();
    let flags = pinned(4);
    hold(device);
    assert_eq!(wait_value(stream, host(flags), 1), 0);
    // SAFETY: the wait is the only user, and the simulator checks it.
    ok(unsafe { ffi::cuMemFreeHost(flags.cast()) });
    let violations = take_violations(device);
    assert_eq!(violations.len(), 1, "{violations:?}");
    assert!(
        violations[0].contains("stream memory wait"),
        "{violations:?}"
    );
    release(device);
    // The freed flag no longer holds the stream.
    assert_eq!(sync(stream), 0);
    finish(device);
}

#[test]
fn a_sticky_error_while_a_wait_holds_discards_the_held_ops_and_synchronize_returns_it() {
    let (device, ctx) = setup();
    let stream = new_stream();
    let flags = pinned(4);
    let counter: &'static AtomicUsize = leak(AtomicUsize::new(0));
    assert_eq!(wait_value(stream, host(flags), 1), 0);
    count_on(stream, counter);
    let handles = Handles(ctx, stream);
    let waiter = thread::spawn(move || {
        // The whole value, not its fields (closures capture fields apart).
        let handles = handles;
        let Handles(ctx, stream) = handles;
        bind(ctx);
        sync(stream)
    });
    // The waiter may be inside its synchronize or not yet: either way it
    // gets the sticky error.
    assert_eq!(device_state(device).queued, 2, "the flag holds both ops");
    fail_context(device, 719);
    assert_eq!(waiter.join().unwrap(), 719);
    let state = device_state(device);
    assert_eq!((state.queued, state.host_fns_skipped), (0, 1));
    flag(flags).store(1, Ordering::Release);
    // SAFETY: no arguments.
    assert_eq!(unsafe { ffi::cuCtxSynchronize() }.0, 719);
    assert_eq!(
        counter.load(Ordering::SeqCst),
        0,
        "the held host function never runs"
    );
    bind(ctx);
    assert!(take_violations(device).is_empty());
    finish(device);
}

/// A context and a stream of it, sent to another thread.
struct Handles(CUcontext, CUstream);

// SAFETY: driver handles may be used from any thread (here they are ids).
unsafe impl Send for Handles {}

#[test]
fn a_capturing_stream_refuses_the_wait_and_its_capture_is_invalidated() {
    let (device, _ctx) = setup();
    let stream = new_stream();
    let flags = pinned(4);
    ok(begin(stream));
    assert_eq!(
        wait_value(stream, host(flags), 1),
        codes::STREAM_CAPTURE_UNSUPPORTED
    );
    assert_eq!(capture_info(stream).0, 2, "invalidated");
    assert_eq!(end(stream), (codes::STREAM_CAPTURE_INVALIDATED, null_mut()));
    let state = device_state(device);
    assert_eq!((state.wait_value_ops, state.queued), (0, 0));
    assert!(take_violations(device).is_empty());
    finish(device);
}

#[test]
fn pinned_memory_is_mapped_at_its_host_address() {
    let (device, _ctx) = setup();
    let flags = pinned(8);
    let mut dptr: ffi::CUdeviceptr = 0;
    // SAFETY: writes one address.
    ok(unsafe { ffi::cuMemHostGetDevicePointer_v2(&mut dptr, flags.wrapping_add(4).cast(), 0) });
    assert_eq!(dptr, host_at(flags, 4));
    // SAFETY: as above.
    let flagged = unsafe { ffi::cuMemHostGetDevicePointer_v2(&mut dptr, flags.cast(), 1) };
    assert_eq!(flagged.0, codes::INVALID_VALUE);
    let mut heap = Box::new(0u64);
    let heap_ptr: *mut u64 = &mut *heap;
    // SAFETY: as above.
    let pageable = unsafe { ffi::cuMemHostGetDevicePointer_v2(&mut dptr, heap_ptr.cast(), 0) };
    assert_eq!(pageable.0, codes::INVALID_VALUE);
    finish(device);
}

#[test]
fn the_layer_waits_on_a_pinned_buffers_flag() {
    use crate::cuda::{Context, PinnedBuffer, Stream};

    install();
    let device = new_device();
    let context = Context::primary(device).unwrap();
    let buffer = PinnedBuffer::new(&context, 4).unwrap();
    let addr = buffer.device_ptr().unwrap();
    assert_eq!(addr, buffer.raw_ptr().addr() as ffi::CUdeviceptr);
    let stream = Stream::new(&context).unwrap();
    // SAFETY: the flag is the buffer's, alive until the stream is
    // synchronized below.
    unsafe { stream.as_stream().wait_value32_geq(addr, 1) }.unwrap();
    assert_eq!(device_state(device).wait_value_ops, 1);
    thread::sleep(Duration::from_millis(2));
    assert!(!stream.as_stream().query().unwrap(), "the wait holds");
    flag(buffer.raw_ptr()).store(1, Ordering::Release);
    stream.as_stream().synchronize().unwrap();
    drop(stream);
    drop(buffer);
    drop(context);
    assert!(take_violations(device).is_empty());
}
