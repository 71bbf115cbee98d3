//! The CUDA layer against the simulated driver (`cuda::sim`): the ownership
//! logic of every launch form, in CI and under Miri, without a GPU.
//!
//! Each test takes a simulated device of its own, so tests run in parallel
//! threads without seeing each other's contexts, queues or violations.
//! Counts that are process-wide (boxed records, abandoned records) are only
//! compared where no other test can move them; per-test counts come from a
//! `static` record pool of the test's own.
//!
//! The findings of the soundness review (issue 9), and the tests that prove
//! each is now impossible or safe (each fails on the layer before it):
//! 1. a resource outlives its context: `a_pinned_buffer_keeps_its_context_alive`,
//!    `every_resource_keeps_its_context_alive`,
//!    `resources_work_from_a_thread_that_never_made_their_context_current`;
//! 2. an executable freed a record its untracked launch still used:
//!    `an_untracked_launch_keeps_every_record_it_may_run`;
//! 3. capture state checked, then acted on: `a_stream_with_an_open_scope_cannot_begin_capturing`,
//!    `owned_launches_racing_capture_transitions_stay_sound`,
//!    `a_stream_with_an_open_scope_cannot_join_a_capture_through_an_event_wait`;
//! 4. a node outlives its graph: `an_executable_keeps_its_graph_and_nodes_valid`,
//!    `a_node_of_another_graph_is_an_error`;
//! 5. replaced records grow without bound: `replaced_records_stay_bounded_over_many_updates`;
//! 6. two threads giving records to one capture graph:
//!    `two_threads_launching_into_one_capture_are_serialized`;
//! 7. `user_data` derived from the record field, then used to free the
//!    slot: every owned, scoped and graph launch here under Miri (Stacked
//!    and Tree Borrows), `an_owned_launch_frees_its_record_through_the_whole_slot`;
//! 8. the parallel host function's worker count: `tests/parallel_start.rs`.

#![cfg(all(feature = "cuda", feature = "simulator"))]

mod layer_support;
mod sim_support;

use std::sync::atomic::{AtomicBool, Ordering};

use hostcopy_driver::cuda::sim;
use hostcopy_driver::cuda::{
    CaptureMode, Context, DeviceBuffer, Error, Event, Graph, HostCopy, HostRegistration,
    PinnedBuffer, Stream,
};
use hostcopy_driver::{PoolError, Record, RecordPool};
use layer_support::{
    RawBuffer, across_streams, launch_owned_in_retrying, raw_record, through_one_staging_buffer,
};
use sim_support::{Device, device, scaled};

/// A byte pattern with no short period.
fn pattern(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_add(seed).wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect()
}

// ---------------------------------------------------------------------------
// Finding 1: every resource keeps its context alive and binds it.

/// Finding 1. Before: `PinnedBuffer` did not hold its context; dropping the
/// `Context` released the primary context, the driver freed its pinned
/// memory, and `buf[0]` read freed memory (the simulator really frees it).
#[test]
fn a_pinned_buffer_keeps_its_context_alive() {
    sim::install();
    let ordinal = sim::new_device();
    let mut buffer = {
        let context = Context::primary(ordinal).unwrap();
        PinnedBuffer::new(&context, 4096).unwrap()
    };
    let state = sim::device_state(ordinal);
    assert!(
        state.context_alive,
        "the context went with its last Context"
    );
    assert_eq!(state.primary_retains, 1);
    assert_eq!(state.host_allocations, 1);
    buffer[0] = 7;
    buffer[4095] = 9;
    assert_eq!((buffer[0], buffer[4095]), (7, 9));
    drop(buffer);
    let state = sim::device_state(ordinal);
    assert_eq!(state.host_allocations, 0);
    assert_eq!(
        state.primary_retains, 0,
        "the last resource releases the context"
    );
    assert!(!state.context_alive);
    assert!(sim::take_violations(ordinal).is_empty());
}

/// Finding 1, for every other resource: each is used after the `Context` it
/// was made from was dropped, and the context goes only with the last one.
#[test]
fn every_resource_keeps_its_context_alive() {
    sim::install();
    let ordinal = sim::new_device();
    let mut pageable = vec![0u8; 256];
    let src = RawBuffer::new(pattern(256, 1));
    let dst = RawBuffer::zeroed(256);
    let (stream, event, mut device_buffer, graph, mut exec, registration) = {
        let context = Context::primary(ordinal).unwrap();
        let stream = Stream::new(&context).unwrap();
        let event = Event::ordering(&context).unwrap();
        let device_buffer = DeviceBuffer::new(&context, 256).unwrap();
        let mut graph = Graph::new(&context).unwrap();
        graph
            .add_host_copy(HostCopy::Single, raw_record(&dst, 0, &src, 0, 256), &[])
            .unwrap();
        let exec = graph.instantiate().unwrap();
        let registration = HostRegistration::new(&context, &mut pageable).unwrap();
        (stream, event, device_buffer, graph, exec, registration)
    };
    assert!(sim::device_state(ordinal).context_alive);
    let owned_stream = stream;
    let stream = owned_stream.as_stream();
    device_buffer.copy_from_host(0, &[3u8; 256]).unwrap();
    let mut back = [0u8; 256];
    device_buffer.copy_to_host(0, &mut back).unwrap();
    assert_eq!(back, [3u8; 256]);
    exec.launch(stream).unwrap();
    event.record(stream).unwrap();
    event.synchronize().unwrap();
    assert_eq!(dst.read(), src.read());
    stream.synchronize().unwrap();
    assert_eq!(registration.len(), 256);
    drop((registration, exec, graph, event, device_buffer));
    assert!(
        sim::device_state(ordinal).context_alive,
        "the stream still holds it"
    );
    drop(owned_stream);
    sim::drain(ordinal);
    let state = sim::device_state(ordinal);
    assert_eq!(state.primary_retains, 0);
    assert!(!state.context_alive);
    assert_eq!(
        (
            state.device_allocations,
            state.registrations,
            state.graphs,
            state.graph_execs
        ),
        (0, 0, 0, 0)
    );
    assert!(sim::take_violations(ordinal).is_empty());
}

/// Finding 1, second half: before, every call ran in whatever context was
/// current on the calling thread; from a fresh thread that is none, and the
/// simulator refuses (and records) calls on handles of another context.
#[test]
fn resources_work_from_a_thread_that_never_made_their_context_current() {
    let device = device();
    let stream = Stream::new(&device.context).unwrap();
    let staging = PinnedBuffer::new(&device.context, 512).unwrap();
    let src = RawBuffer::new(pattern(512, 2));
    let dst = RawBuffer::zeroed(512);
    let mut graph = Graph::new(&device.context).unwrap();
    let node = graph
        .add_host_copy(HostCopy::Single, raw_record(&dst, 0, &src, 0, 256), &[])
        .unwrap();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let stream = stream.as_stream();
            stream
                .launch_owned(HostCopy::Single, raw_record(&dst, 256, &src, 256, 256))
                .unwrap();
            let event = Event::ordering(stream.context()).unwrap();
            event.record(stream).unwrap();
            let mut exec = graph.instantiate().unwrap();
            exec.set_host_copy(node, HostCopy::Parallel, raw_record(&dst, 0, &src, 0, 256))
                .unwrap();
            exec.launch(stream).unwrap();
            stream.synchronize().unwrap();
            event.synchronize().unwrap();
            assert_eq!(staging.len(), 512);
            drop(exec);
        });
    });
    assert_eq!(dst.read(), src.read());
    drop((graph, staging, stream));
    device.assert_no_violations();
}

// ---------------------------------------------------------------------------
// Finding 2: an untracked launch poisons the records it may run.

/// Finding 2. Before: when recording the completion event failed after
/// `cuGraphLaunch` had succeeded, `Drop` freed the replaced record anyway
/// while the queued host node still pointed at it (here: the pool slot came
/// back free while the launch was still queued).
#[test]
fn an_untracked_launch_keeps_every_record_it_may_run() {
    static POOL: RecordPool<4> = RecordPool::new();
    let device = device();
    let stream = Stream::new(&device.context).unwrap();
    let src = RawBuffer::new(pattern(128, 3));
    let first = RawBuffer::zeroed(128);
    let second = RawBuffer::zeroed(128);
    let mut graph = Graph::new(&device.context).unwrap();
    let node = graph
        .add_host_copy_in(
            &POOL,
            HostCopy::Single,
            raw_record(&first, 0, &src, 0, 128),
            &[],
        )
        .unwrap();
    let mut exec = graph.instantiate().unwrap();
    exec.set_host_copy_in(
        &POOL,
        node,
        HostCopy::Single,
        raw_record(&second, 0, &src, 0, 128),
    )
    .unwrap();
    assert_eq!(POOL.available(), 2);

    sim::hold(device.ordinal);
    sim::fail_call(device.ordinal, "cuEventRecord", 1, 999);
    let abandoned_before = hostcopy_driver::abandoned_records();
    let launched = exec.launch(stream.as_stream());
    assert!(
        launched.is_err(),
        "the launch's event was refused: {launched:?}"
    );
    assert_eq!(
        device.state().queued,
        1,
        "the graph launch itself is queued"
    );
    drop(exec);
    assert_eq!(
        POOL.available(),
        2,
        "the replaced record was freed while a launch that runs it is queued"
    );
    assert!(hostcopy_driver::abandoned_records() > abandoned_before);
    sim::release(device.ordinal);
    sim::drain(device.ordinal);
    assert_eq!(
        second.read(),
        src.read(),
        "the queued launch ran the record"
    );
    drop(graph);
    sim::drain(device.ordinal);
    // The graph's own record is freed with the graph; the poisoned one never.
    assert_eq!(POOL.available(), 3);
    drop(stream);
    device.assert_no_violations();
}

// ---------------------------------------------------------------------------
// Finding 3: capture transitions and check-and-launch are serialized.

/// Finding 3. Before: `begin_capture` on a stream with an open scope
/// succeeded, after which a scoped record launched in the gap could become
/// a graph node that outlives the scope.
#[test]
fn a_stream_with_an_open_scope_cannot_begin_capturing() {
    let device = device();
    let stream = Stream::new(&device.context).unwrap();
    let src = [5u8; 64];
    let mut dst = [0u8; 64];
    let inner = stream
        .as_stream()
        .scope(|scope| {
            let refused = scope.stream().begin_capture(CaptureMode::Relaxed);
            scope.launch(HostCopy::Single, Record::pack(&mut dst, &src)?)?;
            Ok::<_, Error>(refused)
        })
        .unwrap()
        .unwrap();
    assert!(matches!(inner, Err(Error::ScopeOpen)), "{inner:?}");
    assert_eq!(dst, src);
    // Once the scope returned, capturing works again.
    stream
        .as_stream()
        .begin_capture(CaptureMode::Relaxed)
        .unwrap();
    let graph = stream.as_stream().end_capture().unwrap();
    drop(graph);
    device.assert_no_violations();
}

/// Finding 3, through an event wait. Before: a stream with an open scope
/// could wait for an event recorded in another stream's capture, which
/// joined it to that capture while its scope was open (only the scope's
/// next launch was refused). Now the wait itself is refused; a wait for an
/// event recorded outside a capture still works, and the capture ends
/// cleanly without the scope's stream.
#[test]
fn a_stream_with_an_open_scope_cannot_join_a_capture_through_an_event_wait() {
    let device = device();
    let scoped = Stream::new(&device.context).unwrap();
    let capturing = Stream::new(&device.context).unwrap();
    let src = [6u8; 64];
    let mut dst = [0u8; 64];
    let (refused, graph) = scoped
        .as_stream()
        .scope(|scope| {
            let plain = Event::ordering(&device.context)?;
            plain.record(capturing.as_stream())?;
            scope.stream().wait_event(&plain)?;
            let capturing = capturing.as_stream();
            capturing.begin_capture(CaptureMode::Relaxed)?;
            let fork = Event::ordering(&device.context)?;
            fork.record(capturing)?;
            let refused = scope.stream().wait_event(&fork);
            scope.launch(HostCopy::Single, Record::pack(&mut dst, &src)?)?;
            let graph = capturing.end_capture()?;
            Ok::<_, Error>((refused, graph))
        })
        .unwrap()
        .unwrap();
    assert_eq!(refused, Err(Error::ScopeOpen));
    assert_eq!(dst, [6u8; 64], "the scope's launch ran live");
    drop(graph);
    device.assert_no_violations();
}

/// Finding 3, the race itself. Before: between the capture check and
/// `cuLaunchHostFunc` another thread could begin or end a capture, so an
/// owned record launched to run once (and free itself) became a graph node
/// (freed by the first replay, used after free by the second), or a record
/// given to a graph ran on the live stream. One thread launches owned
/// records while another begins and ends captures on the same stream and
/// replays each captured graph twice; every record is run and freed
/// exactly once, which the simulator and Miri check.
#[test]
fn owned_launches_racing_capture_transitions_stay_sound() {
    let device = device();
    let stream = Stream::new(&device.context).unwrap();
    const LEN: usize = 64;
    let launches = scaled(2000, 12);
    let captures = scaled(300, 4);
    let src = RawBuffer::new(pattern(LEN * launches, 4));
    let dst = RawBuffer::zeroed(LEN * launches);
    let done = AtomicBool::new(false);
    let (launched, captured) = std::thread::scope(|scope| {
        let launcher = scope.spawn(|| {
            let launched = (0..launches).try_for_each(|i| {
                let at = i * LEN;
                stream
                    .as_stream()
                    .launch_owned(HostCopy::Single, raw_record(&dst, at, &src, at, LEN))
                    .map(drop)
            });
            // Set on failure too, so the other thread stops.
            done.store(true, Ordering::Release);
            launched
        });
        let capturer = scope.spawn(|| {
            let stream = stream.as_stream();
            let mut captured = 0;
            while captured < captures || !done.load(Ordering::Acquire) {
                let replayed = (|| -> Result<(), Error> {
                    stream.begin_capture(CaptureMode::Relaxed)?;
                    std::thread::yield_now();
                    let graph = stream.end_capture()?;
                    let mut exec = graph.instantiate()?;
                    exec.launch(stream)?;
                    exec.launch(stream)?;
                    stream.synchronize()?;
                    Ok(())
                })();
                replayed?;
                captured += 1;
            }
            Ok::<(), Error>(())
        });
        (launcher.join().unwrap(), capturer.join().unwrap())
    });
    launched.unwrap();
    captured.unwrap();
    stream.as_stream().synchronize().unwrap();
    assert_eq!(dst.read(), src.read(), "a record was lost or ran elsewhere");
    drop(stream);
    device.assert_no_violations();
}

// ---------------------------------------------------------------------------
// Finding 4: nodes belong to their graph; executables keep it alive.

/// Finding 4. Before: `GraphNode` was a bare handle; after the graph was
/// dropped, `set_host_copy` handed the driver a node of a destroyed graph.
#[test]
fn an_executable_keeps_its_graph_and_nodes_valid() {
    let device = device();
    let stream = Stream::new(&device.context).unwrap();
    let src = RawBuffer::new(pattern(256, 5));
    let first = RawBuffer::zeroed(256);
    let second = RawBuffer::zeroed(256);
    let mut graph = Graph::new(&device.context).unwrap();
    let node = graph
        .add_host_copy(HostCopy::Single, raw_record(&first, 0, &src, 0, 256), &[])
        .unwrap();
    let mut exec = graph.instantiate().unwrap();
    drop(graph);
    assert_eq!(device.state().graphs, 1, "the executable keeps its graph");
    exec.set_host_copy(node, HostCopy::Single, raw_record(&second, 0, &src, 0, 256))
        .unwrap();
    exec.launch(stream.as_stream()).unwrap();
    stream.as_stream().synchronize().unwrap();
    assert_eq!(second.read(), src.read());
    assert_eq!(first.read(), &[0u8; 256][..]);
    drop(exec);
    sim::drain(device.ordinal);
    assert_eq!(device.state().graphs, 0);
    drop(stream);
    device.assert_no_violations();
}

/// Finding 4, the other half: a node of another graph is an error, as a
/// dependency and as the node of an update, never a handle the driver sees.
#[test]
fn a_node_of_another_graph_is_an_error() {
    let device = device();
    let src = RawBuffer::new(pattern(64, 6));
    let dst = RawBuffer::zeroed(64);
    let mut one = Graph::new(&device.context).unwrap();
    let mut other = Graph::new(&device.context).unwrap();
    let foreign = other
        .add_host_copy(HostCopy::Single, raw_record(&dst, 0, &src, 0, 64), &[])
        .unwrap();
    let own = one
        .add_host_copy(HostCopy::Single, raw_record(&dst, 0, &src, 0, 64), &[])
        .unwrap();
    let as_dependency = one.add_host_copy(
        HostCopy::Single,
        raw_record(&dst, 0, &src, 0, 64),
        &[own, foreign],
    );
    assert!(
        matches!(as_dependency, Err(Error::ForeignNode)),
        "{as_dependency:?}"
    );
    let mut exec = one.instantiate().unwrap();
    let as_update = exec.set_host_copy(foreign, HostCopy::Single, raw_record(&dst, 0, &src, 0, 64));
    assert!(
        matches!(as_update, Err(Error::ForeignNode)),
        "{as_update:?}"
    );
    assert_eq!(exec.owned_records(), 0);
    drop((exec, one, other));
    device.assert_no_violations();
}

// ---------------------------------------------------------------------------
// Finding 5: replaced records are freed once no launch may run them.

/// Finding 5. Before: every record replaced on a node stayed allocated until
/// the executable was dropped; with a pool of 64 slots the 65th update
/// failed (`PoolError::Exhausted`), with the heap memory grew without bound.
#[test]
fn replaced_records_stay_bounded_over_many_updates() {
    static POOL: RecordPool<64> = RecordPool::new();
    let device = device();
    let stream = Stream::new(&device.context).unwrap();
    let stream = stream.as_stream();
    const LEN: usize = 64;
    let updates = scaled(1_000_000, 60);
    let launch_every = scaled(100, 6);
    let src = RawBuffer::new(pattern(LEN, 7));
    let dst = RawBuffer::zeroed(LEN * 2);
    let mut graph = Graph::new(&device.context).unwrap();
    let node = graph
        .add_host_copy_in(
            &POOL,
            HostCopy::Single,
            raw_record(&dst, 0, &src, 0, LEN),
            &[],
        )
        .unwrap();
    let mut exec = graph.instantiate().unwrap();
    let mut most = 0;
    for update in 0..updates {
        let at = (update % 2) * LEN;
        match exec.set_host_copy_in(
            &POOL,
            node,
            HostCopy::Single,
            raw_record(&dst, at, &src, 0, LEN),
        ) {
            Ok(()) => {}
            Err(Error::Pool(PoolError::Exhausted { .. })) => {
                panic!("pool exhausted after {update} updates: replaced records are kept")
            }
            Err(other) => panic!("update {update}: {other}"),
        }
        if update % launch_every == 0 {
            exec.launch(stream).unwrap();
        }
        if update % (launch_every * 16) == 0 {
            stream.synchronize().unwrap();
        }
        most = most.max(exec.owned_records());
    }
    stream.synchronize().unwrap();
    // One current record, plus at most one per launch in flight (16).
    assert!(most <= 18, "an executable held {most} records at once");
    drop(exec);
    drop(graph);
    sim::drain(device.ordinal);
    assert_eq!(POOL.available(), 64, "every slot returned");
    device.assert_no_violations();
}

// ---------------------------------------------------------------------------
// Finding 6: one capture graph, two launching threads.

/// Finding 6. Before: two threads launching owned records into one capture
/// called `cuGraphRetainUserObject` on the same graph at once (CUDA graph
/// objects are not thread-safe; the simulator records the overlap).
#[test]
fn two_threads_launching_into_one_capture_are_serialized() {
    let device = device();
    let origin = Stream::new(&device.context).unwrap();
    let joined = Stream::new(&device.context).unwrap();
    const LEN: usize = 32;
    let per_thread = scaled(200, 4);
    let src = RawBuffer::new(pattern(2 * per_thread * LEN, 8));
    let dst = RawBuffer::zeroed(2 * per_thread * LEN);
    origin
        .as_stream()
        .begin_capture(CaptureMode::Relaxed)
        .unwrap();
    let fork = Event::ordering(&device.context).unwrap();
    fork.record(origin.as_stream()).unwrap();
    joined.as_stream().wait_event(&fork).unwrap();
    std::thread::scope(|scope| {
        for (t, stream) in [&origin, &joined].into_iter().enumerate() {
            let (src, dst) = (&src, &dst);
            scope.spawn(move || {
                for i in 0..per_thread {
                    let at = (t * per_thread + i) * LEN;
                    stream
                        .as_stream()
                        .launch_owned(HostCopy::Single, raw_record(dst, at, src, at, LEN))
                        .unwrap();
                }
            });
        }
    });
    let join = Event::ordering(&device.context).unwrap();
    join.record(joined.as_stream()).unwrap();
    origin.as_stream().wait_event(&join).unwrap();
    let graph = origin.as_stream().end_capture().unwrap();
    assert_eq!(
        dst.read(),
        &vec![0u8; dst.len()][..],
        "captured work ran live"
    );
    let mut exec = graph.instantiate().unwrap();
    exec.launch(origin.as_stream()).unwrap();
    origin.as_stream().synchronize().unwrap();
    assert_eq!(dst.read(), src.read());
    drop((exec, graph, origin, joined));
    device.assert_no_violations();
}

// ---------------------------------------------------------------------------
// Finding 7: user_data carries the whole slot.

/// Finding 7. Before: `user_data` was derived from a reference to the
/// record field, and the host function read the slot's other fields and
/// freed the box through it: undefined behaviour that Miri reports under
/// Stacked and Tree Borrows for every owned launch. Outside Miri this test
/// checks the copy and that the simulator saw no misuse.
#[test]
fn an_owned_launch_frees_its_record_through_the_whole_slot() {
    static POOL: RecordPool<2> = RecordPool::new();
    let device = device();
    let stream = Stream::new(&device.context).unwrap();
    let src = RawBuffer::new(pattern(96, 9));
    let dst = RawBuffer::zeroed(96);
    let stream_ref = stream.as_stream();
    stream_ref
        .launch_owned(HostCopy::Single, raw_record(&dst, 0, &src, 0, 32))
        .unwrap();
    stream_ref
        .launch_owned_in(
            &POOL,
            HostCopy::Parallel,
            raw_record(&dst, 32, &src, 32, 32),
        )
        .unwrap();
    let src_tail = &src.read()[64..];
    let mut tail = [0u8; 32];
    stream_ref
        .scope(|scope| scope.launch(HostCopy::Single, Record::pack(&mut tail[..], src_tail)?))
        .unwrap()
        .unwrap();
    stream_ref.synchronize().unwrap();
    assert_eq!(&dst.read()[..64], &src.read()[..64]);
    assert_eq!(&tail[..], src_tail);
    assert_eq!(POOL.available(), 2);
    drop(stream);
    device.assert_no_violations();
}

// ---------------------------------------------------------------------------
// The GPU tests' scenarios (driver/tests/gpu.rs, gpu_fault.rs).

/// D2H into one staging buffer, host copy out of it, next D2H into the same
/// buffer: only stream order keeps the chunks apart.
#[test]
fn stream_order_through_one_staging_buffer() {
    let device = device();
    let chunk = scaled(64 << 10, 256);
    let chunks = scaled(64, 4);
    let data = pattern(chunk * chunks, 10);
    let dst = through_one_staging_buffer(&device.context, &data, chunk).unwrap();
    assert!(
        dst.read() == &data[..],
        "a chunk was overwritten before its host copy"
    );
    device.assert_no_violations();
}

/// 16 streams, many owned copies each, from a pool: every slot comes back,
/// every byte arrives.
#[test]
fn sixteen_streams_of_owned_copies_return_every_slot() {
    static POOL: RecordPool<256> = RecordPool::new();
    let device = device();
    const STREAMS: usize = 16;
    const LEN: usize = 16;
    let per_stream = scaled(1000, 3);
    let total = STREAMS * per_stream;
    let src = RawBuffer::new(pattern(total * LEN, 11));
    let dst = RawBuffer::zeroed(total * LEN);
    let streams = (0..STREAMS)
        .map(|_| Stream::new(&device.context))
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    across_streams(&streams, per_stream, LEN, |s, stream, at| {
        let copy = if s % 2 == 0 {
            HostCopy::Single
        } else {
            HostCopy::Parallel
        };
        launch_owned_in_retrying(stream, &POOL, copy, || raw_record(&dst, at, &src, at, LEN))
            .map(drop)
    })
    .unwrap();
    assert_eq!(POOL.available(), 256);
    assert!(dst.read() == src.read(), "destination differs from source");
    drop(streams);
    device.assert_no_violations();
}

/// A two-node graph replayed many times copies every time; a node update
/// takes effect from the next launch; the graph's records live until the
/// graph and its executable are gone.
#[test]
fn graph_replays_copy_every_time_and_node_updates_take_effect() {
    static POOL: RecordPool<8> = RecordPool::new();
    let device = device();
    const LEN: usize = 512;
    let replays = scaled(100, 3);
    let src = RawBuffer::zeroed(LEN);
    let mid = RawBuffer::zeroed(LEN);
    let dst = RawBuffer::zeroed(LEN);
    let other = RawBuffer::zeroed(LEN);
    let stream = Stream::new(&device.context).unwrap();
    let stream_ref = stream.as_stream();
    let mut graph = Graph::new(&device.context).unwrap();
    let first = graph
        .add_host_copy_in(
            &POOL,
            HostCopy::Single,
            raw_record(&mid, 0, &src, 0, LEN),
            &[],
        )
        .unwrap();
    let second = graph
        .add_host_copy_in(
            &POOL,
            HostCopy::Parallel,
            raw_record(&dst, 0, &mid, 0, LEN),
            &[first],
        )
        .unwrap();
    let mut exec = graph.instantiate().unwrap();
    let mut last = Vec::new();
    for replay in 0..replays as u32 {
        last = pattern(LEN, 100 + replay);
        src.write(&last);
        exec.launch(stream_ref).unwrap();
        stream_ref.synchronize().unwrap();
        assert!(
            dst.read() == &last[..],
            "replay {replay}: not this replay's source"
        );
    }
    assert_eq!(POOL.available(), 6, "the graph holds its two records");
    exec.set_host_copy_in(
        &POOL,
        second,
        HostCopy::Single,
        raw_record(&other, 0, &mid, 0, LEN),
    )
    .unwrap();
    let data = pattern(LEN, 999);
    src.write(&data);
    exec.launch(stream_ref).unwrap();
    stream_ref.synchronize().unwrap();
    assert!(
        other.read() == &data[..],
        "the updated node did not copy to its new destination"
    );
    assert!(
        dst.read() == &last[..],
        "the updated node still wrote its old destination"
    );
    drop(exec);
    drop(graph);
    sim::drain(device.ordinal);
    assert_eq!(POOL.available(), 8);
    drop(stream);
    device.assert_no_violations();
}

/// Owned launches on a capturing stream belong to the captured graph: they
/// do not run live, survive replays and the graph's drop (the executable
/// holds them), and are freed with the last of the two.
#[test]
fn captured_graph_owns_its_records_across_replays() {
    static POOL: RecordPool<4> = RecordPool::new();
    let device = device();
    const LEN: usize = 256;
    let replays = scaled(100, 3);
    let src = RawBuffer::zeroed(LEN);
    let mid = RawBuffer::zeroed(LEN);
    let dst = RawBuffer::zeroed(LEN);
    let stream = Stream::new(&device.context).unwrap();
    let stream_ref = stream.as_stream();
    stream_ref.begin_capture(CaptureMode::ThreadLocal).unwrap();
    stream_ref
        .launch_owned_in(&POOL, HostCopy::Single, raw_record(&mid, 0, &src, 0, LEN))
        .unwrap();
    stream_ref
        .launch_owned(HostCopy::Parallel, raw_record(&dst, 0, &mid, 0, LEN))
        .unwrap();
    let graph = stream_ref.end_capture().unwrap();
    assert_eq!(POOL.available(), 3);
    let mut exec = graph.instantiate().unwrap();
    for replay in 0..replays as u32 {
        let data = pattern(LEN, 300 + replay);
        src.write(&data);
        exec.launch(stream_ref).unwrap();
        stream_ref.synchronize().unwrap();
        assert!(dst.read() == &data[..], "replay {replay}");
        assert_eq!(POOL.available(), 3, "replay {replay}: a record was freed");
    }
    drop(graph);
    let data = pattern(LEN, 7);
    src.write(&data);
    exec.launch(stream_ref).unwrap();
    stream_ref.synchronize().unwrap();
    assert!(
        dst.read() == &data[..],
        "the executable failed after its graph was dropped"
    );
    drop(exec);
    sim::drain(device.ordinal);
    assert_eq!(POOL.available(), 4);
    assert_eq!(device.state().user_objects, 0);
    drop(stream);
    device.assert_no_violations();
}

/// A scope on a capturing stream is refused, and so is a scoped launch once
/// the stream captures (here through a wait in the scope).
#[test]
fn scope_refuses_a_capturing_stream() {
    let device = device();
    let stream = Stream::new(&device.context).unwrap();
    stream
        .as_stream()
        .begin_capture(CaptureMode::ThreadLocal)
        .unwrap();
    let refused = stream.as_stream().scope(|_| ());
    drop(stream.as_stream().end_capture().unwrap());
    assert!(matches!(refused, Err(Error::Capturing)), "{refused:?}");
    drop(stream);
    device.assert_no_violations();
}

/// The sticky error: the context fails with host functions queued. Every
/// wait returns the error at once; new launches fail and keep nothing; the
/// skipped owned records stay allocated, exactly as many as did not run; a
/// scope returns the error without freeing a record a host function could
/// still use.
#[test]
fn sticky_error_never_hangs_and_loses_track_of_no_record() {
    static POOL: RecordPool<16> = RecordPool::new();
    static SCOPED: RecordPool<4> = RecordPool::new();
    const QUEUED: usize = 10;
    const LEN: usize = 64;
    let device = device();
    let queued = Stream::new(&device.context).unwrap();
    let busy = Stream::new(&device.context).unwrap();
    let src = RawBuffer::new(pattern((QUEUED + 1) * LEN, 12));
    let dst = RawBuffer::zeroed((QUEUED + 1) * LEN);
    let mut graph = Graph::new(&device.context).unwrap();
    graph
        .add_host_copy_in(
            &POOL,
            HostCopy::Single,
            raw_record(&dst, QUEUED * LEN, &src, QUEUED * LEN, LEN),
            &[],
        )
        .unwrap();
    let mut exec = graph.instantiate().unwrap();
    let event = Event::ordering(&device.context).unwrap();

    sim::hold(device.ordinal);
    for i in 0..QUEUED {
        queued
            .as_stream()
            .launch_owned_in(
                &POOL,
                HostCopy::Single,
                raw_record(&dst, i * LEN, &src, i * LEN, LEN),
            )
            .unwrap();
    }
    exec.launch(queued.as_stream()).unwrap();
    event.record(queued.as_stream()).unwrap();
    assert_eq!(POOL.available(), 16 - QUEUED - 1);

    // A scope whose launch is queued when the context fails: it returns the
    // error and abandons the slot to a host function that never runs.
    let scoped_src = [1u8; LEN];
    let mut scoped_dst = [0u8; LEN];
    let scope_result = busy.as_stream().scope_in(&SCOPED, |scope| {
        scope.launch(
            HostCopy::Single,
            Record::pack(&mut scoped_dst, &scoped_src)?,
        )?;
        sim::fail_context(device.ordinal, 719);
        Ok::<_, Error>(())
    });
    assert!(
        scope_result.is_err(),
        "the scope returned Ok after the context failed"
    );
    assert_eq!(scoped_dst, [0u8; LEN], "a skipped scoped record ran");
    assert_eq!(SCOPED.available(), 3, "the abandoned slot stays held");

    for (what, result) in [
        ("queued stream", queued.as_stream().synchronize()),
        ("context", device.context.synchronize()),
        ("event", event.synchronize()),
    ] {
        assert!(
            result.is_err(),
            "waiting on the {what} after the error returned Ok"
        );
    }
    let free = POOL.available();
    let late = queued.as_stream().launch_owned_in(
        &POOL,
        HostCopy::Single,
        raw_record(&dst, 0, &src, 0, LEN),
    );
    assert!(late.is_err(), "a launch after the error succeeded");
    assert_eq!(POOL.available(), free, "a refused launch kept its slot");

    sim::release(device.ordinal);
    sim::drain(device.ordinal);
    let state = device.state();
    assert!(
        state.host_fns_skipped > QUEUED as u64,
        "the queued host functions ran"
    );
    let ran = (0..QUEUED)
        .filter(|&i| dst.read()[i * LEN..(i + 1) * LEN] == src.read()[i * LEN..(i + 1) * LEN])
        .count();
    assert_eq!(ran, 0, "host functions ran after the context failed");
    drop(exec);
    drop(graph);
    sim::drain(device.ordinal);
    let held = 16 - POOL.available();
    assert!(
        held == QUEUED || held == QUEUED + 1,
        "{held} slots held, expected the {QUEUED} skipped (+1 if the graph's stays)"
    );
    drop((event, queued, busy));
    device.assert_no_violations();
}

// ---------------------------------------------------------------------------
// Review of the rebuilt layer.

/// Before: an executable with no record set on it was launched into a
/// capture; the captured host nodes pointed at records owned by the
/// original graph's user objects, which the captured graph held no
/// reference to, so dropping the executable and its graph freed records the
/// captured graph still ran (a use after free under Miri). Now every
/// capturing stream refuses a graph launch.
#[test]
fn an_executable_without_set_records_is_refused_on_a_capturing_stream() {
    static POOL: RecordPool<2> = RecordPool::new();
    let device = device();
    let stream = Stream::new(&device.context).unwrap();
    let src = RawBuffer::new(pattern(64, 10));
    let dst = RawBuffer::zeroed(64);
    let mut graph = Graph::new(&device.context).unwrap();
    graph
        .add_host_copy_in(
            &POOL,
            HostCopy::Single,
            raw_record(&dst, 0, &src, 0, 64),
            &[],
        )
        .unwrap();
    let mut exec = graph.instantiate().unwrap();
    let s = stream.as_stream();
    s.begin_capture(CaptureMode::Global).unwrap();
    let launched = exec.launch(s);
    let captured = s.end_capture().unwrap();
    assert_eq!(
        launched,
        Err(Error::Capturing),
        "a graph launch into a capture was accepted"
    );
    drop((exec, graph));
    sim::drain(device.ordinal);
    assert_eq!(
        POOL.available(),
        2,
        "the graph's record was not freed with it"
    );
    // The captured graph holds nothing of the dropped one.
    let mut replay = captured.instantiate().unwrap();
    replay.launch(s).unwrap();
    s.synchronize().unwrap();
    assert_eq!(dst.read(), &[0u8; 64][..], "the dropped graph's record ran");
    drop((replay, captured, stream));
    device.assert_no_violations();
}

/// `mem::forget` of a registration leaks it: the range stays registered
/// and the context stays alive (the registration holds it), and the
/// buffer, whose borrow ended, can be used without any misuse the driver
/// could see. The buffer is leaked too: the range stays registered for the
/// process, so an allocation reusing its address could not be registered
/// by another test running beside this one.
#[test]
#[cfg_attr(miri, ignore = "leaks a context on purpose, which Miri reports")]
fn a_forgotten_registration_stays_registered_and_keeps_its_context() {
    let device = device();
    let mut buffer = vec![0u8; 4096];
    std::mem::forget(HostRegistration::new(&device.context, &mut buffer).unwrap());
    buffer[0] = 1;
    std::mem::forget(buffer);
    let Device { ordinal, context } = device;
    drop(context);
    sim::drain(ordinal);
    let state = sim::device_state(ordinal);
    assert_eq!(state.registrations, 1, "the range was unregistered");
    assert!(
        state.context_alive,
        "the forgotten registration's context went"
    );
    assert!(sim::take_violations(ordinal).is_empty());
}

/// Before: handles of two contexts could be mixed in safe calls (an event
/// recorded on another device's stream, a device buffer copied on another
/// device's stream, an executable launched there); the driver refused each
/// with CUDA_ERROR_INVALID_CONTEXT, which names neither device. Now each is
/// refused before any driver call with an error naming both.
#[test]
fn handles_of_another_context_are_refused_before_any_driver_call() {
    let (first, second) = (device(), device());
    let foreign_stream = Stream::new(&second.context).unwrap();
    let foreign = foreign_stream.as_stream();
    let mismatch = Error::ContextMismatch {
        expected: first.ordinal,
        found: second.ordinal,
    };
    let event = Event::ordering(&first.context).unwrap();
    assert_eq!(event.record(foreign), Err(mismatch));

    let mut graph = Graph::new(&first.context).unwrap();
    let src = RawBuffer::zeroed(64);
    let dst = RawBuffer::zeroed(64);
    graph
        .add_host_copy(HostCopy::Single, raw_record(&dst, 0, &src, 0, 64), &[])
        .unwrap();
    let mut exec = graph.instantiate().unwrap();
    assert_eq!(exec.launch(foreign), Err(mismatch));

    let buffer = DeviceBuffer::new(&first.context, 64).unwrap();
    let pinned = PinnedBuffer::new(&second.context, 64).unwrap();
    let reversed = Error::ContextMismatch {
        expected: second.ordinal,
        found: first.ordinal,
    };
    // SAFETY: refused before anything is queued (asserted).
    let copied = unsafe { foreign.copy_device_to_host(pinned.raw_ptr(), &buffer, 0, 64) };
    assert_eq!(copied, Err(reversed));
    // SAFETY: as above.
    let copied =
        unsafe { foreign.copy_host_to_device(&buffer, 0, pinned.raw_ptr().cast_const(), 64) };
    assert_eq!(copied, Err(reversed));

    let state = (first.state(), second.state());
    assert_eq!((state.0.queued, state.1.queued), (0, 0));
    assert_eq!(state.0.host_fns_run, 0, "the executable never ran");
    drop((exec, graph, event, buffer, pinned, src, dst, foreign_stream));
    first.assert_no_violations();
    second.assert_no_violations();
}

/// Before: every `Graph::borrow_raw` wrapper had a call lock of its own, so
/// two threads each wrapping one raw graph (as a binding does, once per
/// call) added nodes to it at once; the simulator records that.
#[test]
fn borrowed_wrappers_of_one_graph_never_call_on_it_at_once() {
    let device = device();
    let graph = Graph::new(&device.context).unwrap();
    let raw = graph.raw() as usize; // a handle crosses threads as an integer
    let src = RawBuffer::zeroed(64);
    let dst = RawBuffer::zeroed(64);
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| {
                for _ in 0..scaled(200, 8) {
                    // SAFETY: `graph` owns the handle and outlives the wrapper.
                    let mut borrowed = unsafe {
                        Graph::borrow_raw(&device.context, raw as hostcopy_driver::cuda::CUgraph)
                    };
                    borrowed
                        .add_host_copy(HostCopy::Single, raw_record(&dst, 0, &src, 0, 64), &[])
                        .unwrap();
                }
            });
        }
    });
    drop(graph);
    device.assert_no_violations();
}
