//! GPU tests against the real driver: stream order, load, scopes, graphs and
//! captured graphs, pinned memory. They run on a GPU host from the GPU bundle
//! (`cargo xtask gpu-bundle`); elsewhere each reports itself ignored and why.

mod gpu_support;
mod layer_support;

use std::time::Duration;

use gpu_support::{check, eventually, owned_alive, pattern};
use hostcopy_driver::cuda::{
    CaptureMode, Context, DeviceBuffer, Error, Event, Graph, GraphExec, HostCopy, HostRegistration,
    PinnedBuffer, Stream,
};
use hostcopy_driver::{Record, RecordPool, owned_record_counts};
use layer_support::{
    RawBuffer, across_streams, launch_owned_in_retrying, raw_record, through_one_staging_buffer,
};
use libtest_mimic::Failed;

fn main() {
    gpu_support::run(
        "gpu",
        &[
            (
                "stream_order_d2h_then_host_copy_then_next_d2h_into_the_same_slot",
                stream_order,
            ),
            (
                "load_16_streams_10000_owned_copies_each_every_record_freed_once",
                load_owned_boxed,
            ),
            (
                "load_16_streams_pool_owned_copies_every_slot_returned",
                load_owned_pool,
            ),
            (
                "scope_waits_for_its_host_functions_and_frees_its_records",
                scope_with_borrowed_buffers,
            ),
            ("scope_refuses_a_capturing_stream", scope_refuses_capture),
            (
                "graph_replays_copy_every_time_and_node_updates_take_effect",
                graph_replays,
            ),
            (
                "captured_graph_owns_its_records_across_replays",
                captured_graph,
            ),
            (
                "captured_graph_returns_pool_slots_when_destroyed",
                captured_graph_pool,
            ),
            ("pinned_and_registered_memory_round_trip", pinned_round_trip),
            (
                "pool_backed_scope_graph_node_and_update_return_every_slot",
                pool_backed_launches,
            ),
            (
                "every_launch_form_runs_the_parallel_copy",
                parallel_launch_forms,
            ),
        ],
    )
}

/// Writes a fresh pattern into `src`, launches `exec` once and waits for it:
/// the bytes every copy out of `src` must now hold.
fn replay_once(
    exec: &mut GraphExec,
    stream: &Stream,
    src: &RawBuffer,
    seed: u32,
) -> Result<Vec<u8>, Failed> {
    let data = pattern(src.len(), seed);
    src.write(&data);
    exec.launch(stream.as_stream())?;
    stream.as_stream().synchronize()?;
    Ok(data)
}

/// Waits up to 5 s for the boxed records alive to fall back to `baseline`
/// once a graph and its executable are destroyed: graph-owned records are
/// freed by user-object destructors, which the driver runs on its own
/// thread shortly after.
fn records_freed(baseline: usize) -> Result<(), Failed> {
    let freed = eventually(Duration::from_secs(5), || owned_alive() == baseline);
    check(freed, || {
        format!(
            "{} records still alive 5 s after the graph and executable were destroyed",
            owned_alive() - baseline
        )
    })
}

/// [`records_freed`] for records in a pool: every slot of `pool` back.
fn slots_return<const N: usize>(pool: &RecordPool<N>) -> Result<(), Failed> {
    let returned = eventually(Duration::from_secs(5), || pool.available() == N);
    check(returned, || {
        format!(
            "{} of {N} slots free 5 s after destruction",
            pool.available()
        )
    })
}

fn stream_order(context: &Context) -> Result<(), Failed> {
    const CHUNK: usize = 1 << 20;
    const CHUNKS: usize = 64;
    let data = pattern(CHUNK * CHUNKS, 1);
    // One pinned staging buffer, one stream: D2H into it, host copy out of
    // it, then the next D2H overwrites it.
    let dst = through_one_staging_buffer(context, &data, CHUNK)?;
    let wrong = (0..CHUNKS)
        .filter(|&c| dst.read()[c * CHUNK..(c + 1) * CHUNK] != data[c * CHUNK..(c + 1) * CHUNK])
        .count();
    check(wrong == 0, || format!("{wrong} of {CHUNKS} chunks wrong"))
}

const STREAMS: usize = 16;
const PER_STREAM: usize = 10_000;
const RECORD_BYTES: usize = 64;

fn load_owned_boxed(context: &Context) -> Result<(), Failed> {
    let total = STREAMS * PER_STREAM;
    let src = RawBuffer::new(pattern(total * RECORD_BYTES, 2));
    let dst = RawBuffer::zeroed(total * RECORD_BYTES);
    let streams = (0..STREAMS)
        .map(|_| Stream::new(context))
        .collect::<Result<Vec<_>, _>>()?;
    let before = owned_record_counts();
    across_streams(&streams, PER_STREAM, RECORD_BYTES, |_, stream, at| {
        stream
            .launch_owned(
                HostCopy::Single,
                raw_record(&dst, at, &src, at, RECORD_BYTES),
            )
            .map(drop)
    })?;
    let after = owned_record_counts();
    let (created, freed) = (after.created - before.created, after.freed - before.freed);
    check(created == total, || {
        format!("{created} records created, expected {total}")
    })?;
    check(freed == total, || {
        format!("{freed} records freed, expected {total}")
    })?;
    check(dst.read() == src.read(), || {
        "destination differs from source".into()
    })
}

fn load_owned_pool(context: &Context) -> Result<(), Failed> {
    static POOL: RecordPool<1024> = RecordPool::new();
    let total = STREAMS * PER_STREAM;
    let src = RawBuffer::new(pattern(total * RECORD_BYTES, 3));
    let dst = RawBuffer::zeroed(total * RECORD_BYTES);
    let streams = (0..STREAMS)
        .map(|_| Stream::new(context))
        .collect::<Result<Vec<_>, _>>()?;
    let mut exhausted = 0usize;
    across_streams(&streams, PER_STREAM, RECORD_BYTES, |_, stream, at| {
        exhausted += launch_owned_in_retrying(stream, &POOL, HostCopy::Single, || {
            raw_record(&dst, at, &src, at, RECORD_BYTES)
        })?;
        Ok(())
    })?;
    eprintln!("    pool exhausted {exhausted} times over {total} launches");
    check(POOL.available() == 1024, || {
        format!(
            "{} of 1024 slots free after all host functions ran",
            POOL.available()
        )
    })?;
    check(dst.read() == src.read(), || {
        "destination differs from source".into()
    })
}

fn scope_with_borrowed_buffers(context: &Context) -> Result<(), Failed> {
    const LEN: usize = 4 << 20;
    let stream = Stream::new(context)?;
    let mut pinned = PinnedBuffer::new(context, LEN)?;
    pinned.copy_from_slice(&pattern(LEN, 4));
    let mut pageable = vec![0u8; LEN];
    let before = owned_record_counts();
    let abandoned_before = hostcopy_driver::abandoned_records();
    let launched = stream.as_stream().scope(|scope| -> Result<(), Failed> {
        for (i, chunk) in pageable.chunks_mut(64 << 10).enumerate() {
            let len = chunk.len();
            scope.launch(
                HostCopy::Single,
                Record::pack_range(chunk, 0, &*pinned, i * (64 << 10), len)?,
            )?;
        }
        Ok(())
    })?;
    launched?;
    let after = owned_record_counts();
    check(pageable[..] == pinned[..], || {
        "pageable copy differs from the pinned source".into()
    })?;
    check(after.created - before.created == 64, || {
        format!(
            "{} records created, expected 64",
            after.created - before.created
        )
    })?;
    check(after.alive() == before.alive(), || {
        "the scope returned with records alive".into()
    })?;
    check(
        hostcopy_driver::abandoned_records() == abandoned_before,
        || "records abandoned without an error".into(),
    )
}

fn scope_refuses_capture(context: &Context) -> Result<(), Failed> {
    let stream = Stream::new(context)?;
    stream.as_stream().begin_capture(CaptureMode::ThreadLocal)?;
    let refused = stream.as_stream().scope(|_| ());
    let graph = stream.as_stream().end_capture()?;
    drop(graph);
    check(matches!(refused, Err(Error::Capturing)), || {
        format!("scope on a capturing stream: {refused:?}")
    })?;

    // While the scope is open its stream cannot begin capturing, so every
    // scoped launch runs on the live stream and the scope waits for it.
    let src = [1u8; 8];
    let mut dst = [0u8; 8];
    let began = stream.as_stream().scope(|scope| {
        let began = scope.stream().begin_capture(CaptureMode::ThreadLocal);
        scope.launch(HostCopy::Single, Record::pack(&mut dst, &src)?)?;
        Ok::<_, Failed>(began)
    })??;
    check(matches!(began, Err(Error::ScopeOpen)), || {
        format!("capture begun inside a scope: {began:?}")
    })?;
    check(dst == src, || {
        format!("scoped copy after the refused capture: {dst:?}")
    })
}

fn graph_replays(context: &Context) -> Result<(), Failed> {
    const LEN: usize = 1 << 20;
    let baseline = owned_alive();
    let src = RawBuffer::zeroed(LEN);
    let mid = RawBuffer::zeroed(LEN);
    let dst = RawBuffer::zeroed(LEN);
    let other = RawBuffer::zeroed(LEN);
    let stream = Stream::new(context)?;

    let mut graph = Graph::new(context)?;
    let first = graph.add_host_copy(HostCopy::Single, raw_record(&mid, 0, &src, 0, LEN), &[])?;
    let second = graph.add_host_copy(
        HostCopy::Single,
        raw_record(&dst, 0, &mid, 0, LEN),
        &[first],
    )?;
    let mut exec = graph.instantiate()?;
    for replay in 0..100u32 {
        let data = replay_once(&mut exec, &stream, &src, 100 + replay)?;
        check(dst.read() == &data[..], || {
            format!("replay {replay}: destination is not this replay's source")
        })?;
    }
    check(owned_alive() == baseline + 2, || {
        format!(
            "{} records alive while the graph lives, expected 2",
            owned_alive() - baseline
        )
    })?;

    // Point the second node somewhere else, from the next launch on.
    exec.set_host_copy(
        second,
        HostCopy::Single,
        raw_record(&other, 0, &mid, 0, LEN),
    )?;
    let data = replay_once(&mut exec, &stream, &src, 999)?;
    check(other.read() == &data[..], || {
        "updated node did not copy to its new destination".into()
    })?;
    check(dst.read() == &pattern(LEN, 199)[..], || {
        "updated node still wrote its old destination".into()
    })?;

    drop(exec);
    drop(graph);
    records_freed(baseline)
}

fn captured_graph(context: &Context) -> Result<(), Failed> {
    const LEN: usize = 1 << 20;
    let baseline = owned_alive();
    let src = RawBuffer::zeroed(LEN);
    let mid = RawBuffer::zeroed(LEN);
    let dst = RawBuffer::zeroed(LEN);
    let stream = Stream::new(context)?;

    stream.as_stream().begin_capture(CaptureMode::ThreadLocal)?;
    stream
        .as_stream()
        .launch_owned(HostCopy::Single, raw_record(&mid, 0, &src, 0, LEN))?;
    stream
        .as_stream()
        .launch_owned(HostCopy::Single, raw_record(&dst, 0, &mid, 0, LEN))?;
    let graph = stream.as_stream().end_capture()?;
    check(owned_alive() == baseline + 2, || {
        "the captured graph does not hold its two records".into()
    })?;
    let mut exec = graph.instantiate()?;
    for replay in 0..100u32 {
        let data = replay_once(&mut exec, &stream, &src, 300 + replay)?;
        check(dst.read() == &data[..], || {
            format!("replay {replay}: destination is not this replay's source")
        })?;
        check(owned_alive() == baseline + 2, || {
            format!("replay {replay}: records freed while the graph lives")
        })?;
    }
    drop(graph);
    // The executable still owns references: the records must survive.
    let data = replay_once(&mut exec, &stream, &src, 7)?;
    check(dst.read() == &data[..], || {
        "executable failed after its graph was destroyed".into()
    })?;
    drop(exec);
    records_freed(baseline)
}

fn captured_graph_pool(context: &Context) -> Result<(), Failed> {
    static POOL: RecordPool<8> = RecordPool::new();
    let src = RawBuffer::new(pattern(4096, 5));
    let dst = RawBuffer::zeroed(4096);
    let stream = Stream::new(context)?;
    stream.as_stream().begin_capture(CaptureMode::Global)?;
    stream.as_stream().launch_owned_in(
        &POOL,
        HostCopy::Single,
        raw_record(&dst, 0, &src, 0, 4096),
    )?;
    let graph = stream.as_stream().end_capture()?;
    let mut exec = graph.instantiate()?;
    for _ in 0..3 {
        exec.launch(stream.as_stream())?;
    }
    stream.as_stream().synchronize()?;
    check(dst.read() == src.read(), || {
        "captured pool record did not copy".into()
    })?;
    check(POOL.available() == 7, || {
        format!(
            "{} pool slots free while the graph lives, expected 7",
            POOL.available()
        )
    })?;
    drop(exec);
    drop(graph);
    slots_return(&POOL)
}

fn pinned_round_trip(context: &Context) -> Result<(), Failed> {
    const LEN: usize = 8 << 20;
    let stream = Stream::new(context)?;
    let data = pattern(LEN, 6);
    let mut pinned = PinnedBuffer::new(context, LEN)?;
    pinned.copy_from_slice(&data);
    let device = DeviceBuffer::new(context, LEN)?;
    let mut pageable = vec![0u8; LEN];
    {
        let mut registered = HostRegistration::new(context, &mut pageable)?;
        // SAFETY: both host buffers outlive the synchronize below.
        unsafe {
            stream
                .as_stream()
                .copy_host_to_device(&device, 0, pinned.as_ptr(), LEN)?;
            stream
                .as_stream()
                .copy_device_to_host(registered.as_mut_ptr(), &device, 0, LEN)?;
        }
        stream.as_stream().synchronize()?;
    }
    check(pageable == data, || {
        "pinned -> device -> registered pageable differs".into()
    })?;
    // Pinned memory is host memory: records pack from it.
    let mut copy = vec![0u8; LEN];
    let record = Record::pack(&mut copy[..], &pinned)?;
    // SAFETY: the record's buffers are borrowed and alive.
    unsafe { hostcopy_driver::hostcopy_fn(record.user_data()) };
    check(copy == data, || {
        "host copy from pinned memory differs".into()
    })
}

fn pool_backed_launches(context: &Context) -> Result<(), Failed> {
    static POOL: RecordPool<8> = RecordPool::new();
    const LEN: usize = 64 << 10;
    let stream = Stream::new(context)?;

    // A scope whose record copies live in the pool, not on the heap.
    let src = pattern(LEN, 8);
    let mut dst = vec![0u8; LEN];
    let before = owned_record_counts();
    stream.as_stream().scope_in(&POOL, |scope| {
        scope.launch(HostCopy::Single, Record::pack(&mut dst[..], &src[..])?)
    })??;
    check(dst == src, || "pool-backed scope did not copy".into())?;
    check(POOL.available() == 8, || {
        format!("{} of 8 slots free after the scope", POOL.available())
    })?;
    check(owned_record_counts() == before, || {
        "a pool-backed scope used the heap".into()
    })?;

    // A graph node and a node update, both from the pool.
    let a = RawBuffer::new(pattern(LEN, 9));
    let b = RawBuffer::zeroed(LEN);
    let c = RawBuffer::zeroed(LEN);
    let mut graph = Graph::new(context)?;
    let node =
        graph.add_host_copy_in(&POOL, HostCopy::Single, raw_record(&b, 0, &a, 0, LEN), &[])?;
    let mut exec = graph.instantiate()?;
    exec.launch(stream.as_stream())?;
    stream.as_stream().synchronize()?;
    check(b.read() == a.read(), || {
        "pool-owned graph node did not copy".into()
    })?;
    exec.set_host_copy_in(&POOL, node, HostCopy::Single, raw_record(&c, 0, &a, 0, LEN))?;
    exec.launch(stream.as_stream())?;
    stream.as_stream().synchronize()?;
    check(c.read() == a.read(), || {
        "pool-owned node update did not copy".into()
    })?;
    check(POOL.available() == 6, || {
        format!(
            "{} of 8 slots free, expected 6 (node and update)",
            POOL.available()
        )
    })?;
    drop(exec);
    drop(graph);
    slots_return(&POOL)?;

    // Timing events around a transfer.
    let device = DeviceBuffer::new(context, 64 << 20)?;
    let mut host = vec![0u8; 64 << 20];
    let (start, end) = (Event::timing(context)?, Event::timing(context)?);
    start.record(stream.as_stream())?;
    let mut registered = HostRegistration::new(context, &mut host)?;
    // SAFETY: the registered buffer outlives the synchronize below.
    unsafe {
        stream
            .as_stream()
            .copy_device_to_host(registered.as_mut_ptr(), &device, 0, 64 << 20)
    }?;
    end.record(stream.as_stream())?;
    end.synchronize()?;
    drop(registered);
    let ms = end.elapsed_ms_since(&start)?;
    check(ms > 0.0 && ms < 1000.0, || {
        format!("a 64 MiB transfer timed at {ms} ms")
    })
}

/// Scoped, owned, graph node and node update, each running
/// `hostcopy_parallel_fn` on records large enough to split across workers.
fn parallel_launch_forms(context: &Context) -> Result<(), Failed> {
    const LEN: usize = 8 << 20;
    if let Err(error) = hostcopy_driver::parallel::CopyWorkers::start(4) {
        eprintln!("    {error}");
    }
    let stream = Stream::new(context)?;
    let src = RawBuffer::new(pattern(LEN, 21));
    let scoped = RawBuffer::zeroed(LEN);
    let owned = RawBuffer::zeroed(LEN);
    let node_dst = RawBuffer::zeroed(LEN);
    let update_dst = RawBuffer::zeroed(LEN);
    let s = stream.as_stream();
    let record = raw_record(&scoped, 0, &src, 0, LEN);
    s.scope(|scope| scope.launch(HostCopy::Parallel, record))??;
    s.launch_owned(HostCopy::Parallel, raw_record(&owned, 0, &src, 0, LEN))?;
    let mut graph = Graph::new(context)?;
    let node = graph.add_host_copy(
        HostCopy::Parallel,
        raw_record(&node_dst, 0, &src, 0, LEN),
        &[],
    )?;
    let mut exec = graph.instantiate()?;
    exec.launch(s)?;
    exec.set_host_copy(
        node,
        HostCopy::Parallel,
        raw_record(&update_dst, 0, &src, 0, LEN),
    )?;
    exec.launch(s)?;
    s.synchronize()?;
    for (what, dst) in [
        ("scoped", &scoped),
        ("owned", &owned),
        ("graph node", &node_dst),
        ("node update", &update_dst),
    ] {
        check(dst.read() == src.read(), || {
            format!("{what} parallel copy differs")
        })?;
    }
    Ok(())
}
