//! The staging module (`cuda::staging`) against the simulated driver:
//! byte-exact transfers both ways for every awkward size, ordering, every
//! staging buffer and stream returned, and errors in the middle of a
//! transfer (reported, never a hang, nothing freed under a host function).
//! Runs under Miri with small sizes.

#![cfg(all(feature = "cuda", feature = "simulator"))]

mod sim_support;

use hostcopy_driver::cuda::sim;
use hostcopy_driver::cuda::staging::{self, Stager, StagingOptions, Stores, to_device, to_host};
use std::sync::Arc;

use hostcopy_driver::cuda::{
    CaptureMode, Context, DeviceBuffer, DeviceView, Error, PinnedBuffer, Stream,
};
use sim_support::{device, pattern, scaled};

/// Chunk size of the tests: large enough for the workers to split each
/// chunk outside Miri (parts are at least 256 KiB).
const CHUNK: usize = scaled(1 << 20, staging::MIN_CHUNK);

/// An arbitrary error code for injected faults (CUDA_ERROR_LAUNCH_FAILED).
const LAUNCH_FAILED: u32 = 719;
/// A non-sticky error for injected faults (CUDA_ERROR_OUT_OF_MEMORY).
const OUT_OF_MEMORY: u32 = 2;

fn options(stores: Stores) -> StagingOptions {
    sim_support::options(CHUNK, 3, 2)
        .driver_path_below(0)
        .h2d_stores(stores)
        .build()
        .unwrap()
}

/// A stager whose single transfers below a chunk take the driver's path.
fn on_the_drivers_path_below_a_chunk(device: &sim_support::Device) -> Stager {
    device.stager(sim_support::options(CHUNK, 2, 1).driver_path_below(CHUNK))
}

/// Sizes around the chunk: none, one byte, one short, exact, one over, and
/// several chunks with a ragged tail.
fn sizes() -> Vec<usize> {
    vec![
        0,
        1,
        CHUNK - 1,
        CHUNK,
        CHUNK + 1,
        3 * CHUNK + 17,
        scaled(7, 4) * CHUNK + 5,
    ]
}

#[test]
fn device_to_host_is_byte_exact_for_sizes_not_multiples_of_the_chunk() {
    let device = device();
    let mut stager = Stager::with_options(&device.context, options(Stores::Streaming)).unwrap();
    for len in sizes() {
        let expected = pattern(len, 3);
        let mut source = DeviceBuffer::new(&device.context, len).unwrap();
        source.copy_from_host(0, &expected).unwrap();
        let mut host = vec![0u8; len];
        stager.run(to_host(&mut host, &source)).unwrap();
        assert!(host == expected, "{len} bytes differ");
    }
    drop(stager);
    device.assert_no_violations();
}

#[test]
fn host_to_device_is_byte_exact_with_either_store_kind() {
    let device = device();
    for stores in [Stores::Streaming, Stores::Cached] {
        let mut stager = Stager::with_options(&device.context, options(stores)).unwrap();
        for len in sizes() {
            let source = pattern(len, 7);
            let mut target = DeviceBuffer::new(&device.context, len).unwrap();
            stager.run(to_device(&mut target, &source)).unwrap();
            let mut back = vec![0u8; len];
            target.copy_to_host(0, &mut back).unwrap();
            assert!(back == source, "{len} bytes differ with {stores:?}");
        }
    }
    device.assert_no_violations();
}

#[test]
fn unaligned_host_buffers_and_device_offsets_copy_exactly() {
    let device = device();
    let mut stager = Stager::with_options(&device.context, options(Stores::Streaming)).unwrap();
    let len = 2 * CHUNK + 13;
    let expected = pattern(len + 5, 9);
    let mut source = DeviceBuffer::new(&device.context, len + 5).unwrap();
    source.copy_from_host(0, &expected).unwrap();
    let mut host = vec![0u8; len + 3];
    stager.run(to_host(&mut host[3..], &source).at(5)).unwrap();
    assert!(host[3..] == expected[5..], "device to host at odd offsets");
    assert_eq!(
        host[..3],
        [0, 0, 0],
        "bytes before the destination untouched"
    );

    let upload = pattern(len + 1, 11);
    let mut target = DeviceBuffer::new(&device.context, len + 7).unwrap();
    stager
        .run(to_device(&mut target, &upload[1..]).at(7))
        .unwrap();
    let mut back = vec![0u8; len];
    target.copy_to_host(7, &mut back).unwrap();
    assert!(back == upload[1..], "host to device at odd offsets");
    drop(stager);
    device.assert_no_violations();
}

#[test]
fn a_range_past_the_device_buffer_is_refused_before_anything_runs() {
    let device = device();
    let mut stager = Stager::with_options(&device.context, options(Stores::Streaming)).unwrap();
    let source = DeviceBuffer::new(&device.context, CHUNK).unwrap();
    let mut host = vec![0u8; CHUNK + 1];
    let refused = stager.run(to_host(&mut host, &source));
    assert!(
        matches!(refused, Err(Error::DeviceOutOfBounds { .. })),
        "{refused:?}"
    );
    let state = sim::device_state(device.ordinal);
    assert_eq!(
        (state.event_records, state.async_copy_calls),
        (0, 0),
        "queued"
    );
}

#[test]
fn every_staging_buffer_stream_and_event_is_returned() {
    let device = device();
    let before = sim::device_state(device.ordinal);
    {
        let mut stager = Stager::with_options(&device.context, options(Stores::Streaming)).unwrap();
        let state = sim::device_state(device.ordinal);
        assert_eq!(
            state.host_allocations,
            before.host_allocations + 4,
            "3 staging buffers and their flags"
        );
        assert_eq!(state.streams, before.streams + 3, "one stream per buffer");
        let source = DeviceBuffer::new(&device.context, 5 * CHUNK).unwrap();
        let mut host = vec![0u8; 5 * CHUNK];
        // At most one event per chunk in flight and one completion event
        // per stream, reused from one transfer to the next.
        let bound = before.events + 5 + 3;
        let rounds = scaled(10, 3);
        for _ in 0..rounds {
            stager.run(to_host(&mut host, &source)).unwrap();
            let state = sim::device_state(device.ordinal);
            assert!(state.events <= bound, "{} events live", state.events);
        }
        let state = device.state();
        assert_eq!(state.host_fns_run, before.host_fns_run, "no host function");
        assert_eq!(
            state.event_records,
            before.event_records + (rounds * (5 + 3)) as u64,
            "an event per chunk, and per stream used"
        );
    }
    let after = sim::device_state(device.ordinal);
    assert_eq!(after.host_allocations, before.host_allocations);
    assert_eq!(after.streams, before.streams);
    assert_eq!(after.events, before.events);
    device.assert_no_violations();
}

#[test]
fn transfers_below_the_crossover_take_the_drivers_path() {
    let device = device();
    let mut stager = on_the_drivers_path_below_a_chunk(&device);
    let expected = pattern(CHUNK - 1, 1);
    let mut source = DeviceBuffer::new(&device.context, CHUNK - 1).unwrap();
    source.copy_from_host(0, &expected).unwrap();
    let mut host = vec![0u8; CHUNK - 1];
    stager.run(to_host(&mut host, &source)).unwrap();
    assert!(host == expected);
    assert_eq!(
        sim::device_state(device.ordinal).event_records,
        0,
        "no staging"
    );
}

/// From pageable memory the driver's synchronous upload returns before its
/// bytes reach the device (the simulator models that): a small transfer on
/// the driver's path returns only once they have, so that work on a
/// non-blocking stream, or a stream-ordered free, finds them there. The
/// simulated device is held: the call must not return until it runs.
#[test]
fn a_small_upload_on_the_drivers_path_returns_once_its_bytes_have_landed() {
    let device = device();
    let mut stager = on_the_drivers_path_below_a_chunk(&device);
    let mut target = DeviceBuffer::new(&device.context, 64).unwrap();
    let bytes = pattern(64, 2);
    sim::hold(device.ordinal);
    std::thread::scope(|scope| {
        let upload = scope.spawn(|| stager.run(to_device(&mut target, &bytes)));
        while sim::device_state(device.ordinal).queued == 0 {
            std::thread::yield_now();
        }
        // Time enough for a call that does not wait to return.
        std::thread::sleep(std::time::Duration::from_millis(50));
        let returned_early = upload.is_finished();
        sim::release(device.ordinal);
        upload.join().unwrap().unwrap();
        assert!(
            !returned_early,
            "the upload returned while its copy to the device was still queued"
        );
    });
    let mut back = vec![0u8; 64];
    target.copy_to_host(0, &mut back).unwrap();
    assert_eq!(back, bytes);
    device.assert_no_violations();
}

/// A small upload whose wait fails is drained before the call returns:
/// the error comes back once the queued copy has run, and the device
/// memory, which no copy uses any more, is not kept.
#[test]
fn a_small_upload_whose_wait_fails_is_drained_before_it_returns() {
    let device = device();
    let mut stager = on_the_drivers_path_below_a_chunk(&device);
    let mut target = DeviceBuffer::new(&device.context, 64).unwrap();
    let before = staging::leaked().device_buffers;
    sim::hold(device.ordinal);
    sim::fail_call(device.ordinal, "cuStreamSynchronize", 1, OUT_OF_MEMORY);
    std::thread::scope(|scope| {
        let upload = scope.spawn(|| stager.run(to_device(&mut target, &pattern(64, 3))));
        while sim::device_state(device.ordinal).queued == 0 {
            std::thread::yield_now();
        }
        // Time enough for a call that does not drain to return.
        std::thread::sleep(std::time::Duration::from_millis(50));
        let returned_early = upload.is_finished();
        sim::release(device.ordinal);
        assert!(
            upload.join().unwrap().is_err(),
            "the failed wait is returned"
        );
        assert!(!returned_early, "returned before its copy had run");
    });
    assert_eq!(staging::leaked().device_buffers, before, "nothing kept");
    drop(target);
    device.assert_no_violations();
}

/// A small upload whose context fails while it is queued cannot be drained:
/// its device memory is kept for good, counted, and never freed.
#[test]
fn a_small_upload_on_a_failed_context_keeps_its_device_memory() {
    let device = device();
    let mut stager = on_the_drivers_path_below_a_chunk(&device);
    let mut target = DeviceBuffer::new(&device.context, 64).unwrap();
    let before = staging::leaked().device_buffers;
    sim::hold(device.ordinal);
    let ordinal = device.ordinal;
    std::thread::scope(|scope| {
        let upload = scope.spawn(|| stager.run(to_device(&mut target, &pattern(64, 3))));
        while sim::device_state(ordinal).queued == 0 {
            std::thread::yield_now();
        }
        sim::fail_context(ordinal, LAUNCH_FAILED);
        sim::release(ordinal);
        assert!(
            upload.join().unwrap().is_err(),
            "the context error is returned"
        );
    });
    assert!(staging::leaked().device_buffers > before, "counted");
    // Frees nothing: the stager cannot know that the copy will never run.
    drop(target);
    drop(stager);
    let _ = sim::take_violations(device.ordinal);
}

#[test]
fn scoped_transfers_run_in_the_background_and_the_scope_waits_for_forgotten_handles() {
    let device = device();
    let mut stager = Stager::with_options(&device.context, options(Stores::Streaming)).unwrap();
    let len = 2 * CHUNK + 1;
    let expected = pattern(2 * len, 5);
    let mut source = DeviceBuffer::new(&device.context, 2 * len).unwrap();
    source.copy_from_host(0, &expected).unwrap();
    let (mut first, mut second) = (vec![0u8; len], vec![0u8; len]);
    sim::hold(device.ordinal);
    let ordinal = device.ordinal;
    stager
        .scope(|scope| {
            let a = scope.start(to_host(&mut first, &source).at(0)).unwrap();
            let b = scope.start(to_host(&mut second, &source).at(len)).unwrap();
            // Both queued whole while nothing runs: the caller was not
            // blocked. Per chunk a copy and an event (the fourth to sixth
            // chunks reuse buffers: a flag wait each), per stream used a
            // completion event.
            assert_eq!(sim::device_state(ordinal).queued, 6 * 2 + 3 + 2 * 3);
            sim::release(ordinal);
            b.wait().unwrap();
            // Forgotten: the scope still waits for it before returning
            // (the handle has no `Drop` to skip; the scope owns the transfer).
            #[allow(clippy::forget_non_drop)]
            std::mem::forget(a);
        })
        .unwrap();
    assert!(first == expected[..len] && second == expected[len..]);
    drop(stager);
    device.assert_no_violations();
}

/// Transfers each way that share the staging buffers, all queued before
/// any runs: a buffer a download's chunk uses is filled for an upload's
/// chunk only after the download's host side has read it out, and read
/// out for a download only after the upload's copy has read it (the flags
/// and the copier's order); every byte arrives.
#[test]
fn transfers_each_way_sharing_the_buffers_all_arrive() {
    // On one stream (the default) and on a stream per buffer.
    for streams in [1, 3] {
        each_way_sharing_the_buffers(streams);
    }
}

fn each_way_sharing_the_buffers(streams: usize) {
    let device = device();
    let built = sim_support::options(CHUNK, 3, 2)
        .driver_path_below(0)
        .h2d_stores(Stores::Streaming)
        .streams(streams)
        .build()
        .unwrap();
    let mut stager = Stager::with_options(&device.context, built).unwrap();
    assert_eq!(stager.options().streams(), streams);
    let len = 2 * CHUNK + CHUNK / 2;
    let down_expected = pattern(len, 41);
    let up_expected = pattern(len, 42);
    let mut source = DeviceBuffer::new(&device.context, len).unwrap();
    source.copy_from_host(0, &down_expected).unwrap();
    let mut target = DeviceBuffer::new(&device.context, len).unwrap();
    let mut other_target = DeviceBuffer::new(&device.context, len).unwrap();
    let (mut first, mut second) = (vec![0u8; len], vec![0u8; len]);
    let (up_first, up_second) = (up_expected.clone(), pattern(len, 43));
    sim::hold(device.ordinal);
    let ordinal = device.ordinal;
    stager
        .scope(|scope| {
            let a = scope.start(to_host(&mut first, &source)).unwrap();
            let b = scope.start(to_device(&mut target, &up_first)).unwrap();
            let c = scope.start(to_host(&mut second, &source)).unwrap();
            let d = scope.start(to_device(&mut other_target, &up_second));
            sim::release(ordinal);
            let d = d.unwrap();
            for transfer in [a, b, c, d] {
                transfer.wait().unwrap();
            }
        })
        .unwrap();
    assert!(first == down_expected && second == down_expected);
    let mut back = vec![0u8; len];
    target.copy_to_host(0, &mut back).unwrap();
    assert!(back == up_first);
    other_target.copy_to_host(0, &mut back).unwrap();
    assert!(back == up_second);

    // An upload longer than the buffers: the copier fills a buffer again
    // only once the copy that read it last has run, however long the
    // device waits meanwhile.
    let long = 7 * CHUNK;
    let up_long = pattern(long, 44);
    let mut long_target = DeviceBuffer::new(&device.context, long).unwrap();
    sim::hold(ordinal);
    stager
        .scope(|scope| {
            let upload = scope.start(to_device(&mut long_target, &up_long)).unwrap();
            // Time for a copier that did not wait to refill every buffer.
            std::thread::sleep(std::time::Duration::from_millis(scaled(50, 5) as u64));
            sim::release(ordinal);
            upload.wait().unwrap();
        })
        .unwrap();
    let mut back = vec![0u8; long];
    long_target.copy_to_host(0, &mut back).unwrap();
    let bad = back.iter().zip(&up_long).position(|(a, b)| a != b);
    assert!(
        bad.is_none(),
        "a buffer was refilled before its copy ran: byte {bad:?}"
    );
    drop(stager);
    device.assert_no_violations();
}

#[test]
fn a_failed_launch_mid_transfer_is_reported_and_the_stager_stays_usable() {
    let device = device();
    let mut stager = Stager::with_options(&device.context, options(Stores::Streaming)).unwrap();
    let len = 5 * CHUNK;
    let expected = pattern(len, 2);
    let mut source = DeviceBuffer::new(&device.context, len).unwrap();
    source.copy_from_host(0, &expected).unwrap();
    let mut host = vec![0u8; len];
    // The third chunk's event: its copy is queued, but the copier is never
    // told when it is done; the stager drains its streams instead.
    sim::fail_call(device.ordinal, "cuEventRecord", 3, LAUNCH_FAILED);
    let failed = stager.run(to_host(&mut host, &source));
    match failed {
        Err(Error::Driver(error)) => assert_eq!(error.code(), LAUNCH_FAILED),
        other => panic!("expected the injected error, got {other:?}"),
    }
    // The two chunks queued before the failure finished before it returned.
    assert!(host[..2 * CHUNK] == expected[..2 * CHUNK]);
    stager.run(to_host(&mut host, &source)).unwrap();
    assert!(host == expected);
    drop(stager);
    device.assert_no_violations();
}

/// An upload whose queuing fails after a chunk's copy is queued, before
/// its event: that copy runs once its buffer's flag advances, so the
/// copier fills the buffer with the chunk's own bytes first; before, it
/// advanced the flag without filling it, and the device range received
/// what the buffer last carried for another transfer.
#[test]
fn an_upload_whose_queuing_fails_mid_chunk_never_sends_another_transfers_bytes() {
    let device = device();
    let mut stager = Stager::with_options(&device.context, options(Stores::Streaming)).unwrap();
    let len = 3 * CHUNK;
    let earlier = pattern(len, 51);
    let later = pattern(len, 52);
    let mut elsewhere = DeviceBuffer::new(&device.context, len).unwrap();
    // The staging buffers now hold `earlier`'s chunks.
    stager.run(to_device(&mut elsewhere, &earlier)).unwrap();
    let mut target = DeviceBuffer::new(&device.context, len).unwrap();
    // The third chunk's copy is queued, its event refused.
    sim::fail_call(device.ordinal, "cuEventRecord", 3, LAUNCH_FAILED);
    let failed = stager.run(to_device(&mut target, &later));
    assert!(
        matches!(failed, Err(Error::Driver(e)) if e.code() == LAUNCH_FAILED),
        "{failed:?}"
    );
    let mut back = vec![0u8; len];
    target.copy_to_host(0, &mut back).unwrap();
    assert!(
        back[2 * CHUNK..] != earlier[2 * CHUNK..],
        "the chunk's device range received another transfer's bytes"
    );
    assert!(
        back[..2 * CHUNK] == later[..2 * CHUNK],
        "the chunks queued whole arrived"
    );
    assert!(
        back[2 * CHUNK..] == later[2 * CHUNK..],
        "the chunk queued in part sent its own bytes"
    );
    // The stager works on.
    stager.run(to_device(&mut target, &earlier)).unwrap();
    target.copy_to_host(0, &mut back).unwrap();
    assert!(back == earlier);
    drop(stager);
    device.assert_no_violations();
}

/// An upload whose copier fails to wait for a buffer's previous copy
/// without a context error: the later chunks' copies are queued already
/// and run once their flags advance, so the copier fills each buffer with
/// its own chunk's bytes once it sees the previous copy complete. Before,
/// it skipped them, and the device received what the buffers last
/// carried (an earlier chunk's bytes).
#[test]
fn an_upload_whose_copier_wait_fails_never_sends_stale_staging_bytes() {
    let device = device();
    let mut stager = Stager::with_options(&device.context, options(Stores::Streaming)).unwrap();
    // Two uses of each of the 3 staging buffers.
    let len = 6 * CHUNK;
    let earlier = pattern(len, 61);
    let later = pattern(len, 62);
    let mut target = DeviceBuffer::new(&device.context, len).unwrap();
    target.copy_from_host(0, &earlier).unwrap();
    // The copier's first wait: chunk 3's, for buffer 0's copy of chunk 0.
    sim::fail_call(device.ordinal, "cuEventSynchronize", 1, 999);
    let failed = stager.run(to_device(&mut target, &later));
    assert!(
        matches!(failed, Err(Error::Driver(e)) if e.code() == 999),
        "{failed:?}"
    );
    let mut back = vec![0u8; len];
    target.copy_to_host(0, &mut back).unwrap();
    for chunk in 0..6 {
        let range = chunk * CHUNK..(chunk + 1) * CHUNK;
        assert!(
            back[range.clone()] == later[range.clone()]
                || back[range.clone()] == earlier[range.clone()],
            "chunk {chunk}'s device range received bytes of neither the transfer nor what it held"
        );
    }
    // The stager works on.
    stager.run(to_device(&mut target, &earlier)).unwrap();
    target.copy_to_host(0, &mut back).unwrap();
    assert!(back == earlier);
    drop(stager);
    device.assert_no_violations();
}

/// A device or driver without stream memory waits, which every staged
/// transfer queues, is refused when the stager is made, with an error
/// that says so: before, the stager was made and its first transfer
/// failed after queuing part of itself.
#[test]
fn a_device_without_stream_memory_waits_is_refused_when_the_stager_is_made() {
    let device = device();
    sim::refuse_stream_memory_waits(device.ordinal);
    let made = Stager::with_options(&device.context, options(Stores::Streaming));
    assert!(
        matches!(made, Err(Error::StreamMemoryWaitsUnsupported { device: d }) if d == device.ordinal),
        "{made:?}"
    );
    let message = made.unwrap_err().to_string();
    assert!(message.contains("stream memory waits"), "{message}");
    device.assert_no_violations();
}

/// The wait a stager queues when it is made, to learn whether the device
/// has stream memory waits: if the stream cannot be synchronized after
/// it, the wait may still be queued, so its flag is kept, not freed.
/// Before, the flags were freed under the queued wait.
#[test]
fn a_stager_whose_probe_cannot_be_synchronized_keeps_the_flag_its_wait_reads() {
    let device = device();
    let kept_before = staging::leaked().buffers;
    sim::hold(device.ordinal);
    sim::fail_call(device.ordinal, "cuStreamSynchronize", 1, OUT_OF_MEMORY);
    let made = Stager::with_options(&device.context, options(Stores::Streaming));
    assert!(
        matches!(made, Err(Error::Driver(e)) if e.code() == OUT_OF_MEMORY),
        "{:?}",
        made.err()
    );
    assert!(
        staging::leaked().buffers > kept_before,
        "the flag is not kept"
    );
    sim::release(device.ordinal);
    device.assert_no_violations();
}

#[test]
fn a_context_error_mid_transfer_is_returned_and_staging_buffers_are_leaked_not_freed() {
    let device = device();
    let mut stager = Stager::with_options(&device.context, options(Stores::Streaming)).unwrap();
    let len = 4 * CHUNK;
    let source = DeviceBuffer::new(&device.context, len).unwrap();
    let mut host = vec![0xabu8; len];
    let leaked_before = staging::leaked();
    sim::hold(device.ordinal);
    let ordinal = device.ordinal;
    let result = stager.scope(|scope| {
        // Queued whole when it returns: the context fails before any of
        // its copies runs.
        let transfer = scope.start(to_host(&mut host, &source)).unwrap();
        sim::fail_context(ordinal, LAUNCH_FAILED);
        sim::release(ordinal);
        transfer.wait()
    });
    match result {
        Ok(Err(Error::Driver(error))) => assert_eq!(error.code(), LAUNCH_FAILED),
        other => panic!("expected the context's error, got {other:?}"),
    }
    assert!(
        host.iter().all(|&byte| byte == 0xab),
        "the copier wrote the destination after the error"
    );
    // The stager refuses further work with the same error...
    match stager.run(to_host(&mut host, &source)) {
        Err(Error::Driver(error)) => assert_eq!(error.code(), LAUNCH_FAILED),
        other => panic!("expected the stored error, got {other:?}"),
    }
    drop(stager);
    // ... and never frees what a queued copy might still touch: the three
    // staging buffers and their flags.
    let leaked = staging::leaked();
    assert!(
        leaked.buffers >= leaked_before.buffers + 4,
        "3 staging buffers and the flags leaked"
    );
    assert_eq!(sim::device_state(device.ordinal).host_allocations, 4);
    device.assert_no_violations();
}

#[test]
fn the_default_options_come_from_the_machine() {
    let options = StagingOptions::default();
    assert_eq!(options.chunk(), staging::DEFAULT_CHUNK);
    assert_eq!(options.buffers(), staging::DEFAULT_BUFFERS);
    assert_eq!(options.workers(), staging::default_workers(1));
    assert!(staging::default_workers(2) <= staging::default_workers(1));
    assert!(staging::default_workers(1_000) >= 1);
    let cores = std::thread::available_parallelism().unwrap().get();
    assert!(staging::default_workers(1) < cores.max(2));
}

#[test]
fn pinned_memory_takes_one_driver_copy_each_way() {
    let device = device();
    let mut stager = Stager::with_options(&device.context, options(Stores::Streaming)).unwrap();
    let len = 2 * CHUNK + 3;
    let expected = pattern(len, 4);
    let mut source = DeviceBuffer::new(&device.context, len + 1).unwrap();
    source.copy_from_host(1, &expected).unwrap();
    let pinned = PinnedBuffer::new(&device.context, len).unwrap();
    let pinned = stager.device_to_pinned(pinned, &source, 1).unwrap();
    assert!(pinned[..] == expected[..]);
    let mut target = DeviceBuffer::new(&device.context, len).unwrap();
    let pinned = stager.pinned_to_device(&mut target, pinned, 0).unwrap();
    assert_eq!(pinned.len(), len, "the buffer given back is the one given");
    let mut back = vec![0u8; len];
    target.copy_to_host(0, &mut back).unwrap();
    assert!(back == expected);
    assert_eq!(
        sim::device_state(device.ordinal).event_records,
        0,
        "no staging"
    );
    drop(stager);
    device.assert_no_violations();
}

#[test]
fn the_drivers_thread_copies_alone_with_no_workers() {
    let device = device();
    let mut stager = device.stager(sim_support::options(CHUNK, 2, 0).driver_path_below(0));
    assert_eq!(stager.workers(), 0);
    let len = 3 * CHUNK + 1;
    let expected = pattern(len, 6);
    let mut source = DeviceBuffer::new(&device.context, len).unwrap();
    source.copy_from_host(0, &expected).unwrap();
    let mut host = vec![0u8; len];
    stager.run(to_host(&mut host, &source)).unwrap();
    assert!(host == expected);
}

#[test]
fn two_devices_stage_at_once_each_with_its_own_workers() {
    let devices = [device(), device()];
    std::thread::scope(|scope| {
        for (index, device) in devices.iter().enumerate() {
            scope.spawn(move || {
                let options = StagingOptions::builder()
                    .chunk(CHUNK)
                    .buffers(2)
                    .stagers(2)
                    .driver_path_below(0)
                    .build()
                    .unwrap();
                assert_eq!(options.workers(), staging::default_workers(2));
                let mut stager = Stager::with_options(&device.context, options).unwrap();
                let len = scaled(5, 3) * CHUNK + index;
                let expected = pattern(len, index as u8);
                let mut source = DeviceBuffer::new(&device.context, len).unwrap();
                source.copy_from_host(0, &expected).unwrap();
                let mut host = vec![0u8; len];
                for _ in 0..scaled(4, 1) {
                    host.fill(0);
                    stager.run(to_host(&mut host, &source)).unwrap();
                    assert!(host == expected, "device {index}");
                }
            });
        }
    });
    for device in &devices {
        device.assert_no_violations();
    }
}

/// Before: each staging buffer was wrapped to be freed only by the stager's
/// `Drop` as soon as it was made, so a later allocation (a buffer or a
/// stream) that failed left the earlier buffers allocated for good.
#[test]
fn a_stager_that_fails_to_start_frees_what_it_allocated() {
    let device = device();
    // (entry, its call that fails, streams)
    for (entry, nth, streams) in [
        ("cuMemHostAlloc", 2, 1),
        ("cuMemHostAlloc", 3, 1),
        ("cuStreamCreate", 1, 1),
        ("cuStreamCreate", 2, 3),
        ("cuStreamCreate", 3, 3),
        ("cuMemHostAlloc", 2, 3),
    ] {
        sim::fail_call(device.ordinal, entry, nth, LAUNCH_FAILED);
        let built = sim_support::options(CHUNK, 3, 2)
            .driver_path_below(0)
            .streams(streams)
            .build()
            .unwrap();
        let made = Stager::with_options(&device.context, built);
        assert!(
            made.is_err(),
            "{entry} #{nth} failed, yet the stager was made"
        );
        let state = sim::device_state(device.ordinal);
        assert_eq!(
            (state.host_allocations, state.streams),
            (0, 0),
            "{entry} #{nth} failed: staging buffers or streams left allocated"
        );
    }
    device.assert_no_violations();
}

/// Before: `device_to_pinned` and `pinned_to_device` borrowed the pinned
/// buffer and returned after a sticky error, while the driver's copy could
/// still be writing or reading it: the caller had it back (to read, write or
/// free) under a running copy. Now the buffer is given back only when no
/// copy can touch it; otherwise it is leaked and counted.
#[test]
fn a_pinned_buffer_a_copy_may_still_use_is_never_given_back() {
    for to_device in [false, true] {
        let device = device();
        let mut stager = Stager::with_options(&device.context, options(Stores::Streaming)).unwrap();
        let mut on_device = DeviceBuffer::new(&device.context, CHUNK).unwrap();
        let pinned = PinnedBuffer::new(&device.context, CHUNK).unwrap();
        let leaked_before = staging::leaked().buffers;
        sim::hold(device.ordinal);
        let ordinal = device.ordinal;
        let failer = std::thread::spawn(move || {
            // The copy is queued: the stager is waiting for it.
            while sim::device_state(ordinal).queued == 0 {
                std::thread::yield_now();
            }
            sim::fail_context(ordinal, LAUNCH_FAILED);
            sim::release(ordinal);
        });
        let result = if to_device {
            stager.pinned_to_device(&mut on_device, pinned, 0)
        } else {
            stager.device_to_pinned(pinned, &on_device, 0)
        };
        failer.join().unwrap();
        let failed = result.expect_err("the context failed under the copy");
        assert!(
            matches!(failed.error(), Error::Driver(e) if e.code() == LAUNCH_FAILED),
            "{failed}"
        );
        assert!(
            failed.into_buffer().is_none(),
            "a pinned buffer the copy may still use was given back"
        );
        assert!(
            staging::leaked().buffers > leaked_before,
            "the leak is not counted"
        );
        drop(stager);
        device.assert_no_violations();
    }
}

/// An error before the copy is queued, or one after which the context
/// drains, gives the pinned buffer back.
#[test]
fn a_pinned_buffer_no_copy_uses_is_given_back_with_the_error() {
    let device = device();
    let mut stager = Stager::with_options(&device.context, options(Stores::Streaming)).unwrap();
    let source = DeviceBuffer::new(&device.context, 16).unwrap();
    let pinned = PinnedBuffer::new(&device.context, 32).unwrap();
    let failed = stager.device_to_pinned(pinned, &source, 0).unwrap_err();
    assert!(matches!(failed.error(), Error::DeviceOutOfBounds { .. }));
    let pinned = failed.into_buffer().expect("nothing was queued");
    sim::fail_call(device.ordinal, "cuStreamSynchronize", 1, LAUNCH_FAILED);
    let mut target = DeviceBuffer::new(&device.context, 32).unwrap();
    let failed = stager.pinned_to_device(&mut target, pinned, 0).unwrap_err();
    let pinned = failed.into_buffer().expect("the context drained");
    let pinned = stager.pinned_to_device(&mut target, pinned, 0).unwrap();
    drop((pinned, target, source, stager));
    device.assert_no_violations();
}

/// Before: after an error the stager drained with `cuCtxSynchronize`,
/// which the driver refuses while another stream of the context captures
/// a graph (and which breaks that capture). The stager then gave up on the
/// copies still queued, returned, and refused every later transfer. Now it
/// drains its own streams: the other capture goes on, and the stager works
/// on after a non-sticky error.
#[test]
fn an_error_during_another_streams_capture_leaves_that_capture_alone() {
    let device = device();
    let mut stager = Stager::with_options(&device.context, options(Stores::Streaming)).unwrap();
    let capturing = Stream::new(&device.context).unwrap();
    capturing
        .as_stream()
        .begin_capture(CaptureMode::Global)
        .unwrap();
    let len = 3 * CHUNK;
    let expected = pattern(len, 8);
    let mut source = DeviceBuffer::new(&device.context, len).unwrap();
    source.copy_from_host(0, &expected).unwrap();
    let mut host = vec![0u8; len];
    // The transfer records an event after each chunk, then its completion
    // event, whose record fails, with every chunk queued. (Records, not
    // creations: a chunk's event the copier has given back is reused.)
    sim::fail_call(device.ordinal, "cuEventRecord", 4, OUT_OF_MEMORY);
    match stager.run(to_host(&mut host, &source)) {
        Err(Error::Driver(error)) => assert_eq!(error.code(), OUT_OF_MEMORY),
        other => panic!("expected the injected error, got {other:?}"),
    }
    assert!(
        host == expected,
        "every chunk queued before the error finished before it returned"
    );
    capturing
        .as_stream()
        .end_capture()
        .expect("the other stream's capture survives the stager's error");
    assert_eq!(
        sim::thread_capture_mode(),
        0,
        "the stager's calls run in the relaxed capture mode, then restore the thread's"
    );
    host.fill(0);
    stager
        .run(to_host(&mut host, &source))
        .expect("a non-sticky error does not disable the stager");
    assert!(host == expected);
    drop((stager, source));
    device.assert_no_violations();
}

/// Before: when the drain after an error failed, the transfer returned,
/// ending the borrow of the device buffer, while its copies were still
/// queued; dropping the buffer freed device memory a queued copy then read
/// or wrote (a use after free, which Miri sees in the simulator). Now the
/// allocation is kept for good and counted; the streams drain later and
/// the stager works again.
#[test]
fn a_device_buffer_a_queued_copy_may_still_use_is_kept_not_freed() {
    for upload in [false, true] {
        let device = device();
        let mut stager = Stager::with_options(&device.context, options(Stores::Streaming)).unwrap();
        // One chunk, one completion event.
        let len = CHUNK;
        let expected = pattern(len, 12);
        let mut on_device = DeviceBuffer::new(&device.context, len).unwrap();
        on_device.copy_from_host(0, &expected).unwrap();
        let mut host = expected.clone();
        let kept_before = staging::leaked().device_buffers;
        // The copies stay queued; the wait, the transfer's wait for its
        // own copies after it, and the drain fail without waiting
        // (whichever call the drain makes).
        sim::hold(device.ordinal);
        sim::fail_call(device.ordinal, "cuEventSynchronize", 1, LAUNCH_FAILED);
        sim::fail_call(device.ordinal, "cuEventSynchronize", 2, LAUNCH_FAILED);
        for drain in ["cuStreamSynchronize", "cuCtxSynchronize"] {
            sim::fail_call(device.ordinal, drain, 1, LAUNCH_FAILED);
        }
        let failed = if upload {
            stager.run(to_device(&mut on_device, &host))
        } else {
            stager.run(to_host(&mut host, &on_device))
        };
        assert!(
            matches!(failed, Err(Error::Driver(e)) if e.code() == LAUNCH_FAILED),
            "{failed:?}"
        );
        assert!(device.state().queued > 0, "the copies are still queued");
        drop(on_device);
        assert_eq!(
            device.state().device_allocations,
            1,
            "device memory a queued copy uses was freed"
        );
        assert!(
            staging::leaked().device_buffers > kept_before,
            "the kept allocation is not counted"
        );
        // The queued copies run on memory that is still allocated.
        sim::release(device.ordinal);
        sim::drain(device.ordinal);
        let mut source = DeviceBuffer::new(&device.context, len).unwrap();
        source.copy_from_host(0, &expected).unwrap();
        let mut back = vec![0u8; len];
        stager
            .run(to_host(&mut back, &source))
            .expect("the streams drained: the stager works again");
        assert!(back == expected);
        drop(stager);
        assert_eq!(device.state().host_allocations, 0, "staging buffers freed");
        device.assert_no_violations();
    }
}

/// A sticky error: the device allocation of the failed transfer is kept
/// for good, as the staging buffers are.
#[test]
fn a_context_error_keeps_the_device_buffer_of_the_failed_transfer() {
    let device = device();
    let mut stager = Stager::with_options(&device.context, options(Stores::Streaming)).unwrap();
    let mut target = DeviceBuffer::new(&device.context, 2 * CHUNK).unwrap();
    let source = vec![1u8; 2 * CHUNK];
    let kept_before = staging::leaked().device_buffers;
    sim::hold(device.ordinal);
    let ordinal = device.ordinal;
    let result = stager.scope(|scope| {
        let transfer = scope.start(to_device(&mut target, &source)).unwrap();
        sim::fail_context(ordinal, LAUNCH_FAILED);
        sim::release(ordinal);
        transfer.wait()
    });
    assert!(matches!(result, Ok(Err(Error::Driver(_)))), "{result:?}");
    drop(target);
    assert_eq!(device.state().device_allocations, 1);
    assert!(staging::leaked().device_buffers > kept_before);
    drop(stager);
    device.assert_no_violations();
}

/// The simulator's memory is defined, as the driver's is: a fresh device
/// buffer read back is no read of uninitialized memory (which Miri would
/// report in the test double, not in the layer).
#[test]
fn a_fresh_device_buffer_reads_back_defined_bytes() {
    let device = device();
    let mut stager = Stager::with_options(&device.context, options(Stores::Streaming)).unwrap();
    let fresh = DeviceBuffer::new(&device.context, CHUNK + 3).unwrap();
    let mut host = vec![7u8; CHUNK + 3];
    fresh.copy_to_host(0, &mut host).unwrap();
    assert!(host.iter().all(|&b| b == 0), "the simulator zeroes memory");
    host.fill(7);
    stager.run(to_host(&mut host, &fresh)).unwrap();
    assert!(host.iter().all(|&b| b == 0));
    let pinned = PinnedBuffer::new(&device.context, 64).unwrap();
    let pinned = stager.device_to_pinned(pinned, &fresh, 1).unwrap();
    assert!(pinned.iter().all(|&b| b == 0));
    drop((pinned, stager, fresh));
    device.assert_no_violations();
}

/// Before: a device buffer of another device's context went to the
/// driver, which refused it with CUDA_ERROR_INVALID_CONTEXT. Now the
/// stager refuses it first, naming both devices.
#[test]
fn a_device_buffer_of_another_context_is_refused_before_any_driver_call() {
    let (first, second) = (device(), device());
    let mut stager = Stager::with_options(&first.context, options(Stores::Streaming)).unwrap();
    let mut foreign = DeviceBuffer::new(&second.context, 2 * CHUNK).unwrap();
    let mut host = vec![0u8; 2 * CHUNK];
    let mismatch = Error::ContextMismatch {
        expected: first.ordinal,
        found: second.ordinal,
    };
    assert_eq!(stager.run(to_host(&mut host, &foreign)), Err(mismatch));
    assert_eq!(stager.run(to_device(&mut foreign, &host)), Err(mismatch));
    let pinned = PinnedBuffer::new(&first.context, 16).unwrap();
    let refused = stager.device_to_pinned(pinned, &foreign, 0).unwrap_err();
    assert_eq!(refused.error(), mismatch);
    let pinned = refused.into_buffer().expect("nothing was queued");
    let refused = stager
        .pinned_to_device(&mut foreign, pinned, 0)
        .unwrap_err();
    assert_eq!(refused.error(), mismatch);
    let text = mismatch.to_string();
    assert!(
        text.contains(&format!("device {}", first.ordinal))
            && text.contains(&format!("device {}", second.ordinal)),
        "{text}"
    );
    assert_eq!(
        first.state().event_records + second.state().event_records,
        0
    );
    drop((stager, foreign));
    first.assert_no_violations();
    second.assert_no_violations();
}

/// Memory another runtime owns, as a binding wraps it: an owner value
/// whose drop frees it (here, a `DeviceBuffer`).
fn view_of(buffer: DeviceBuffer, offset: usize, len: usize) -> DeviceView {
    let ptr = buffer.raw() + offset as u64;
    let context = buffer.context().clone();
    // SAFETY: the owner is the buffer itself; nothing else frees it.
    unsafe { DeviceView::new(&context, ptr, len, Arc::new(buffer)) }.unwrap()
}

#[test]
fn a_view_of_foreign_device_memory_stages_both_ways() {
    let device = device();
    let mut stager = Stager::with_options(&device.context, options(Stores::Cached)).unwrap();
    let len = 2 * CHUNK + 9;
    let expected = pattern(len, 21);
    let mut view = view_of(
        DeviceBuffer::new(&device.context, len + 64).unwrap(),
        64,
        len,
    );
    stager.run(to_device(&mut view, &expected)).unwrap();
    let mut host = vec![0u8; len];
    stager.run(to_host(&mut host, &view)).unwrap();
    assert!(host == expected);
    drop((view, stager));
    assert_eq!(device.state().device_allocations, 0, "the owner freed it");
    device.assert_no_violations();
}

#[test]
fn a_view_is_checked_with_the_driver_before_any_transfer() {
    let (device, other) = (sim_support::device(), sim_support::device());
    let owner = || Arc::new(()) as Arc<dyn Send + Sync>;
    let buffer = DeviceBuffer::new(&device.context, 4096).unwrap();
    // SAFETY: refused before anything uses the memory (asserted).
    let view = |ptr, len| unsafe { DeviceView::new(&device.context, ptr, len, owner()) };
    assert!(view(buffer.raw() + 4000, 96).is_ok());
    assert_eq!(
        view(buffer.raw() + 4000, 97).unwrap_err(),
        Error::DeviceOutOfBounds {
            offset: 4000,
            nbytes: 97,
            len: 4096
        }
    );
    let pinned = PinnedBuffer::new(&device.context, 64).unwrap();
    let pinned_addr = pinned.raw_ptr().addr() as u64;
    assert_eq!(
        view(pinned_addr, 64).unwrap_err(),
        Error::NotDeviceMemory {
            addr: pinned_addr as usize
        }
    );
    let pageable = [0u8; 64];
    let pageable_addr = pageable.as_ptr().addr() as u64;
    assert!(matches!(
        view(pageable_addr, 64),
        Err(Error::NotDeviceMemory { .. })
    ));
    let foreign = DeviceBuffer::new(&other.context, 64).unwrap();
    assert_eq!(
        view(foreign.raw(), 64).unwrap_err(),
        Error::ContextMismatch {
            expected: device.ordinal,
            found: other.ordinal
        }
    );
    assert_eq!(DeviceView::device_holding(foreign.raw()), Ok(other.ordinal));
    drop((buffer, pinned, foreign));
    device.assert_no_violations();
    other.assert_no_violations();
}

#[test]
fn a_pending_transfer_finishes_later_and_reports_when_it_is_done() {
    let device = device();
    let mut stager = Stager::with_options(&device.context, options(Stores::Streaming)).unwrap();
    let len = 3 * CHUNK + 1;
    let expected = pattern(len, 23);
    let mut source = DeviceBuffer::new(&device.context, len).unwrap();
    source.copy_from_host(0, &expected).unwrap();
    let mut host = vec![0u8; len];
    sim::hold(device.ordinal);
    // SAFETY: `host` and `source` are not touched until the transfer is
    // finished below.
    let pending = unsafe { stager.start_unchecked(to_host(&mut host, &source)) }.unwrap();
    assert!(!pending.is_finished().unwrap(), "nothing has run yet");
    sim::release(device.ordinal);
    // The feeder queues the chunks on its own thread: it may not have
    // queued all of them yet.
    while !pending.is_finished().unwrap() {
        sim::drain(device.ordinal);
        std::thread::yield_now();
    }
    stager.finish_pending(pending).unwrap();
    assert!(host == expected);
    drop(stager);
    device.assert_no_violations();
}

/// `wait_arrived` waits on another thread, without the stager, until the
/// bytes are in, both ways (while the device is held it cannot return);
/// `finish_pending` afterwards only settles them.
#[test]
fn a_pending_transfer_is_waited_for_on_another_thread_without_its_stager() {
    let device = device();
    let mut stager = Stager::with_options(&device.context, options(Stores::Streaming)).unwrap();
    let len = 3 * CHUNK + 5;
    let expected = pattern(len, 29);
    let mut source = DeviceBuffer::new(&device.context, len).unwrap();
    source.copy_from_host(0, &expected).unwrap();
    let mut target = DeviceBuffer::new(&device.context, len).unwrap();
    let mut host = vec![0u8; len];
    sim::hold(device.ordinal);
    // SAFETY: `host`, `source` and `target` are not touched until the
    // transfers are finished below.
    let download = unsafe { stager.start_unchecked(to_host(&mut host, &source)) }.unwrap();
    // SAFETY: as above.
    let upload = unsafe { stager.start_unchecked(to_device(&mut target, &expected)) }.unwrap();
    let (arrived, waited) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        download.wait_arrived().unwrap();
        upload.wait_arrived().unwrap();
        arrived.send(()).unwrap();
        (download, upload)
    });
    assert!(
        waited
            .recv_timeout(std::time::Duration::from_millis(100))
            .is_err(),
        "wait_arrived returned while the device was held"
    );
    sim::release(device.ordinal);
    let (download, upload) = waiter.join().unwrap();
    assert!(download.is_finished().unwrap() && upload.is_finished().unwrap());
    stager.finish_pending(download).unwrap();
    stager.finish_pending(upload).unwrap();
    assert!(host == expected);
    let mut uploaded = vec![0u8; len];
    target.copy_to_host(0, &mut uploaded).unwrap();
    assert!(uploaded == expected);
    drop(stager);
    device.assert_no_violations();
}

/// A pending transfer dropped unfinished waits for its copies (one drop
/// rule with the Python `Transfer`), then lets go of the device memory:
/// while the device is held the drop cannot return, and once it has
/// returned the bytes are there and the memory is freed with its owner.
#[test]
fn a_pending_transfer_dropped_unfinished_waits_for_its_copies() {
    let device = device();
    let mut stager = Stager::with_options(&device.context, options(Stores::Streaming)).unwrap();
    let len = 2 * CHUNK + 9;
    let expected = pattern(len, 24);
    let mut source = DeviceBuffer::new(&device.context, len).unwrap();
    source.copy_from_host(0, &expected).unwrap();
    let view = view_of(source, 0, len);
    let mut host = vec![0u8; len];
    sim::hold(device.ordinal);
    // SAFETY: `host` and `view` are not touched until the drop below has
    // returned.
    let pending = unsafe { stager.start_unchecked(to_host(&mut host, &view)) }.unwrap();
    let dropped = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|threads| {
        threads.spawn(|| {
            drop(pending);
            dropped.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        std::thread::sleep(std::time::Duration::from_millis(20));
        let early = dropped.load(std::sync::atomic::Ordering::SeqCst);
        sim::release(device.ordinal);
        assert!(!early, "the drop returned while its copies were held");
    });
    assert!(
        host == expected,
        "the drop returned before the bytes arrived"
    );
    drop(view);
    assert_eq!(
        device.state().device_allocations,
        0,
        "kept after its copies ran"
    );
    drop(stager);
    device.assert_no_violations();
}

/// After a context error a pending transfer's copies may still run: the
/// drop keeps the device memory for good, counted in `leaked`, instead of
/// letting it be freed under the copies; and
/// dropping the stager then keeps its staging buffers too.
#[test]
fn a_pending_transfer_dropped_after_a_context_error_keeps_what_its_copies_use() {
    let device = device();
    let mut stager = Stager::with_options(&device.context, options(Stores::Streaming)).unwrap();
    let host: &'static mut [u8] = vec![0u8; 2 * CHUNK].leak();
    let view = view_of(
        DeviceBuffer::new(&device.context, 2 * CHUNK).unwrap(),
        0,
        2 * CHUNK,
    );
    sim::hold(device.ordinal);
    // SAFETY: `host` is leaked: valid for good; `view` is dropped only
    // with the transfer.
    let pending = unsafe { stager.start_unchecked(to_host(host, &view)) }.unwrap();
    sim::fail_context(device.ordinal, LAUNCH_FAILED);
    let before = staging::leaked();
    drop((pending, view));
    let kept = staging::leaked();
    let allocations = device.state().device_allocations;
    // Checked once the device runs again: a failed check would otherwise
    // unwind into the stager's drop, which waits for the held device.
    sim::release(device.ordinal);
    assert_eq!(allocations, 1, "freed under a queued copy");
    assert!(
        kept.device_buffers > before.device_buffers,
        "kept without being counted"
    );
    drop(stager);
}

/// After a failed wait the engine drains its streams; once they drained,
/// the transfer's device memory is freed even where its own events could
/// not be waited for (the drain waited for its copies).
#[test]
fn a_transfer_whose_streams_drained_after_an_error_frees_its_device_memory() {
    let device = device();
    let mut stager = Stager::with_options(&device.context, options(Stores::Streaming)).unwrap();
    let source = DeviceBuffer::new(&device.context, CHUNK).unwrap();
    let mut host = vec![0u8; CHUNK];
    let before = staging::leaked().device_buffers;
    // The copier's wait for the chunk's copy, then any wait for the
    // transfer's events: both fail, and no drain does.
    sim::fail_call(device.ordinal, "cuEventSynchronize", 1, 999);
    sim::fail_call(device.ordinal, "cuEventSynchronize", 2, 999);
    let failed = stager.run(to_host(&mut host, &source));
    assert!(failed.is_err(), "the injected failure was not met");
    drop(source);
    assert_eq!(
        staging::leaked().device_buffers,
        before,
        "kept after a drain"
    );
    assert_eq!(device.state().device_allocations, 0, "not freed");
    drop(stager);
    device.assert_no_violations();
}

/// A wait that fails without a context error (the copier's wait for a
/// chunk's copy, here) leaves the streams able to run what was queued: the
/// drop waits for the transfer's copies, and the device memory is freed
/// once they have run, not kept for good.
#[test]
fn a_pending_transfer_dropped_after_a_failed_wait_frees_its_device_memory() {
    let device = device();
    let mut stager = Stager::with_options(&device.context, options(Stores::Streaming)).unwrap();
    let mut host = vec![0u8; 2 * CHUNK];
    let view = view_of(
        DeviceBuffer::new(&device.context, 2 * CHUNK).unwrap(),
        0,
        2 * CHUNK,
    );
    sim::hold(device.ordinal);
    sim::fail_call(device.ordinal, "cuEventSynchronize", 1, 999);
    // SAFETY: `host` and `view` are not touched until the drop below has
    // returned.
    let pending = unsafe { stager.start_unchecked(to_host(&mut host, &view)) }.unwrap();
    let before = staging::leaked();
    let arrived = std::thread::scope(|threads| {
        let waiter = threads.spawn(|| {
            let arrived = pending.wait_arrived();
            drop(pending);
            arrived
        });
        std::thread::sleep(std::time::Duration::from_millis(20));
        sim::release(device.ordinal);
        waiter.join().unwrap()
    });
    assert!(arrived.is_err(), "the injected failure was not met");
    drop(view);
    assert_eq!(
        staging::leaked().device_buffers,
        before.device_buffers,
        "kept for good though the streams could run its copies"
    );
    assert_eq!(device.state().device_allocations, 0, "not freed");
    // The stager goes on: the failed wait was not the context's.
    assert_it_still_transfers(&device, &mut stager, 31);
    drop(stager);
    device.assert_no_violations();
}

/// `stager` still moves bytes: one blocking transfer of a little more than
/// a chunk (of `seed`'s pattern) to the host arrives whole.
fn assert_it_still_transfers(device: &sim_support::Device, stager: &mut Stager, seed: u8) {
    let len = CHUNK + 3;
    let expected = pattern(len, seed);
    let mut source = DeviceBuffer::new(&device.context, len).unwrap();
    source.copy_from_host(0, &expected).unwrap();
    let mut back = vec![0u8; len];
    stager.run(to_host(&mut back, &source)).unwrap();
    assert!(back == expected);
}

/// Runs `during` while another stream of the device captures a graph in
/// the global mode; its result, once the capture has ended unbroken (the
/// layer's teardowns must not touch it).
fn in_a_global_capture<T>(device: &sim_support::Device, during: impl FnOnce() -> T) -> T {
    let capturing = Stream::new(&device.context).unwrap();
    capturing
        .as_stream()
        .begin_capture(CaptureMode::Global)
        .unwrap();
    let result = during();
    let ended = capturing.as_stream().end_capture();
    assert!(ended.is_ok(), "the global capture was broken: {ended:?}");
    result
}

/// A transfer waited for on one thread (a binding's waiter) and finished
/// by its stager waits once: the finish asks the driver nothing more about
/// its copies.
#[test]
fn a_pending_transfer_waited_for_then_finished_waits_once() {
    let device = device();
    let mut stager = Stager::with_options(&device.context, options(Stores::Streaming)).unwrap();
    for upload in [false, true] {
        let len = 2 * CHUNK + 5;
        let expected = pattern(len, 32);
        let mut memory = DeviceBuffer::new(&device.context, len).unwrap();
        let mut host = expected.clone();
        // SAFETY: `host` and `memory` outlive the transfer, finished
        // below, and nothing else touches them meanwhile.
        let pending = unsafe {
            if upload {
                stager.start_unchecked(to_device(&mut memory, &host))
            } else {
                memory.copy_from_host(0, &expected).unwrap();
                host.fill(0);
                stager.start_unchecked(to_host(&mut host, &memory))
            }
        }
        .unwrap();
        std::thread::scope(|threads| threads.spawn(|| pending.wait_arrived()).join().unwrap())
            .unwrap();
        let (finished, calls) = sim::count_calls(|| stager.finish_pending(pending));
        finished.unwrap();
        for entry in ["cuEventSynchronize", "cuEventQuery", "cuStreamSynchronize"] {
            assert_eq!(calls.of(entry), 0, "upload {upload}: {calls:?}");
        }
        if upload {
            host.fill(0);
            memory.copy_to_host(0, &mut host).unwrap();
        }
        assert!(host == expected, "upload {upload}");
    }
    drop(stager);
    device.assert_no_violations();
}

/// A pending transfer ends without its stager: finished on two threads at
/// once while the stager's owner runs another transfer, both get the one
/// result; one finished after its stager was dropped ends too, and
/// neither keeps any memory for good.
#[test]
fn a_pending_transfer_finishes_on_any_thread_once_without_its_stager() {
    let device = device();
    let mut stager = Stager::with_options(&device.context, options(Stores::Streaming)).unwrap();
    let len = 3 * CHUNK + 5;
    let expected = pattern(len, 33);
    let mut source = DeviceBuffer::new(&device.context, len).unwrap();
    source.copy_from_host(0, &expected).unwrap();
    let mut host = vec![0u8; len];
    let mut other = vec![0u8; len];
    let before = staging::leaked();
    sim::hold(device.ordinal);
    // SAFETY: `host` and `source` are not touched until the transfer has
    // finished below.
    let pending = unsafe { stager.start_unchecked(to_host(&mut host, &source)) }.unwrap();
    let results = std::thread::scope(|threads| {
        let finishers: Vec<_> = (0..2).map(|_| threads.spawn(|| pending.finish())).collect();
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(
            finishers.iter().all(|finisher| !finisher.is_finished()),
            "a finish returned while the device was held"
        );
        sim::release(device.ordinal);
        // The stager's owner goes on meanwhile.
        stager.run(to_host(&mut other, &source)).unwrap();
        finishers
            .into_iter()
            .map(|finisher| finisher.join().unwrap())
            .collect::<Vec<_>>()
    });
    assert_eq!(results, [Ok(()), Ok(())]);
    assert!(
        pending.finish().is_ok(),
        "a third finish gets the result too"
    );
    drop(pending);
    assert!(host == expected && other == expected);
    // One started and finished after its stager is gone.
    host.fill(0);
    // SAFETY: as above.
    let pending = unsafe { stager.start_unchecked(to_host(&mut host, &source)) }.unwrap();
    drop(stager);
    pending.finish().unwrap();
    drop(pending);
    assert!(host == expected);
    assert_eq!(staging::leaked(), before, "nothing kept for good");
    drop(source);
    assert_eq!(device.state().device_allocations, 0);
    device.assert_no_violations();
}

/// A pending transfer that outlives its stager holds the last reference to
/// the stager's streams and flags: its drop lets go of them in the
/// relaxed capture mode, so another thread's global capture goes on, and
/// the flags' pinned memory is freed, not refused and left.
#[test]
fn a_pending_transfer_that_outlives_its_stager_lets_go_of_its_streams_in_the_relaxed_mode() {
    let device = device();
    let mut stager = Stager::with_options(&device.context, options(Stores::Streaming)).unwrap();
    let len = 3 * CHUNK + 5;
    let expected = pattern(len, 35);
    let mut source = DeviceBuffer::new(&device.context, len).unwrap();
    source.copy_from_host(0, &expected).unwrap();
    let mut host = vec![0u8; len];
    // SAFETY: `host` and `source` are not touched until the transfer has
    // finished below.
    let pending = unsafe { stager.start_unchecked(to_host(&mut host, &source)) }.unwrap();
    drop(stager);
    pending.finish().unwrap();
    let host_allocations = in_a_global_capture(&device, || {
        drop(pending);
        device.state().host_allocations
    });
    assert_eq!(host_allocations, 0, "the flags were not freed");
    assert!(host == expected);
    device.assert_no_violations();
}

/// After a context error, what the streams may still use is kept for good
/// and counted the same whichever goes first, the stager or a pending
/// transfer that holds its streams.
#[test]
fn what_a_context_error_keeps_is_counted_whichever_of_stager_and_transfer_goes_first() {
    let kept = |transfer_first: bool| {
        let device = device();
        let mut stager = Stager::with_options(&device.context, options(Stores::Streaming)).unwrap();
        let len = 3 * CHUNK + 5;
        let mut source = DeviceBuffer::new(&device.context, len).unwrap();
        source.copy_from_host(0, &pattern(len, 36)).unwrap();
        let mut host = vec![0u8; len];
        sim::hold(device.ordinal);
        // SAFETY: `host` outlives the transfer; `source` is kept for good
        // below (a queued copy may still read it).
        let pending = unsafe { stager.start_unchecked(to_host(&mut host, &source)) }.unwrap();
        sim::fail_context(device.ordinal, 700);
        sim::release(device.ordinal);
        let before = staging::leaked();
        if transfer_first {
            drop(pending);
            drop(stager);
        } else {
            drop(stager);
            drop(pending);
        }
        let counted = staging::leaked().buffers - before.buffers;
        let left = device.state().host_allocations;
        std::mem::forget(source);
        (counted, left)
    };
    let (transfer_first, stager_first) = (kept(true), kept(false));
    assert_eq!(transfer_first, stager_first);
    assert_eq!(transfer_first.0, transfer_first.1, "kept but not counted");
}

/// A finish that frees the transfer's device memory (its owner let go of
/// it while the copies ran) frees it in the relaxed capture mode: another
/// thread's global capture goes on, and the memory is freed, not refused
/// and left.
#[test]
fn a_finished_transfer_frees_its_device_memory_in_the_relaxed_capture_mode() {
    let device = device();
    let mut stager = Stager::with_options(&device.context, options(Stores::Streaming)).unwrap();
    let len = 2 * CHUNK;
    let mut host = vec![0u8; len];
    let view = view_of(DeviceBuffer::new(&device.context, len).unwrap(), 0, len);
    // SAFETY: `host` is not touched until the transfer has finished; the
    // view keeps the device memory until the transfer lets go of it.
    let pending = unsafe { stager.start_unchecked(to_host(&mut host, &view)) }.unwrap();
    drop(view);
    let (finished, device_allocations) = in_a_global_capture(&device, || {
        let finished = stager.finish_pending(pending);
        (finished, device.state().device_allocations)
    });
    assert_eq!(finished, Ok(()));
    assert_eq!(device_allocations, 0, "the device memory was not freed");
    drop(stager);
    device.assert_no_violations();
}

/// A pending transfer whose wait failed (not a context error) drains the
/// stager's streams when it is finished without its stager, frees its
/// device memory, and leaves the stager usable.
#[test]
fn a_pending_transfer_finished_after_a_failed_wait_drains_and_frees_without_its_stager() {
    let device = device();
    let mut stager = Stager::with_options(&device.context, options(Stores::Streaming)).unwrap();
    let mut host = vec![0u8; 2 * CHUNK];
    let view = view_of(
        DeviceBuffer::new(&device.context, 2 * CHUNK).unwrap(),
        0,
        2 * CHUNK,
    );
    sim::fail_call(device.ordinal, "cuEventSynchronize", 1, 999);
    let before = staging::leaked();
    // SAFETY: `host` and `view` are not touched until the transfer has
    // finished below.
    let pending = unsafe { stager.start_unchecked(to_host(&mut host, &view)) }.unwrap();
    let (finished, calls) = std::thread::scope(|threads| {
        threads
            .spawn(|| sim::count_calls(|| (pending.finish(), pending.finish())))
            .join()
            .unwrap()
    });
    assert!(finished.0.is_err(), "the injected failure was not met");
    assert_eq!(finished.0, finished.1, "every finish gets the one result");
    assert!(calls.of("cuStreamSynchronize") >= 1, "no drain: {calls:?}");
    drop(pending);
    drop(view);
    assert_eq!(
        staging::leaked(),
        before,
        "kept for good though the streams drained"
    );
    assert_eq!(device.state().device_allocations, 0, "not freed");
    assert_it_still_transfers(&device, &mut stager, 34);
    drop(stager);
    device.assert_no_violations();
}

/// A stream given to `wait_for` is waited for by each staging stream once,
/// when a transfer is first queued on it: three one-chunk transfers on the
/// three streams wait once each, a fourth on the first stream not again,
/// and after a second `wait_for` the next transfer waits for it alone.
/// (The device is held: no event is known complete, so none is let go.)
#[test]
fn each_staging_stream_waits_once_for_each_stream_given_to_wait_for() {
    let device = device();
    let mut stager = Stager::with_options(&device.context, options(Stores::Streaming)).unwrap();
    let producer = Stream::new(&device.context).unwrap();
    let expected = pattern(5 * CHUNK, 33);
    let mut source = DeviceBuffer::new(&device.context, 5 * CHUNK).unwrap();
    source.copy_from_host(0, &expected).unwrap();
    let mut hosts = vec![vec![0u8; CHUNK]; 5];
    sim::hold(device.ordinal);
    stager.wait_for(producer.as_stream()).unwrap();
    let mut pending = Vec::new();
    let mut waits = Vec::new();
    for (index, host) in hosts.iter_mut().enumerate() {
        if index == 4 {
            stager.wait_for(producer.as_stream()).unwrap();
        }
        let (started, calls) = sim::count_calls(|| {
            // SAFETY: `host` and `source` outlive the transfer, finished
            // below, and nothing else touches them meanwhile.
            unsafe { stager.start_unchecked(to_host(&mut host[..], &source).at(index * CHUNK)) }
        });
        pending.push(started.unwrap());
        waits.push(calls.of("cuStreamWaitEvent"));
    }
    sim::release(device.ordinal);
    for transfer in pending {
        stager.finish_pending(transfer).unwrap();
    }
    assert_eq!(waits, [1, 1, 1, 0, 1]);
    for (index, host) in hosts.iter().enumerate() {
        assert!(
            host[..] == expected[index * CHUNK..][..CHUNK],
            "transfer {index}"
        );
    }
    drop(stager);
    device.assert_no_violations();
}

#[test]
fn transfers_wait_for_a_stream_and_refuse_a_capturing_one() {
    let device = device();
    let mut stager = Stager::with_options(&device.context, options(Stores::Streaming)).unwrap();
    let producer = Stream::new(&device.context).unwrap();
    stager.wait_for(producer.as_stream()).unwrap();
    let len = CHUNK + 5;
    let expected = pattern(len, 25);
    let mut source = DeviceBuffer::new(&device.context, len).unwrap();
    source.copy_from_host(0, &expected).unwrap();
    let mut host = vec![0u8; len];
    stager.run(to_host(&mut host, &source)).unwrap();
    assert!(host == expected);

    producer
        .as_stream()
        .begin_capture(CaptureMode::Relaxed)
        .unwrap();
    assert_eq!(stager.wait_for(producer.as_stream()), Err(Error::Capturing));
    producer.as_stream().end_capture().unwrap();

    let other = sim_support::device();
    let foreign = Stream::new(&other.context).unwrap();
    assert_eq!(
        stager.wait_for(foreign.as_stream()),
        Err(Error::ContextMismatch {
            expected: device.ordinal,
            found: other.ordinal
        })
    );
    drop((stager, foreign));
    device.assert_no_violations();
    other.assert_no_violations();
}

#[test]
fn the_primary_context_of_a_raw_stream_is_found() {
    let device = device();
    let stream = Stream::new(&device.context).unwrap();
    // SAFETY: the stream is alive.
    let found = unsafe { Context::of_stream(stream.as_stream().raw()) }.unwrap();
    assert_eq!(found.raw(), device.context.raw());
    device.context.make_current().unwrap();
    assert_eq!(Context::current().unwrap().ordinal(), device.ordinal);
    std::thread::spawn(|| {
        assert_eq!(Context::current().unwrap_err(), Error::NoCurrentContext);
    })
    .join()
    .unwrap();
    drop(stream);
    device.assert_no_violations();
}

/// `of_stream_in` gives the known context itself for a stream of it,
/// without retaining the primary context again (`of_stream` retains it
/// once more to tell it is a primary context), and another device's
/// context for a stream of that one, as `of_stream` does.
#[test]
fn a_stream_of_the_known_context_gives_that_context_without_another_retain() {
    let ours = device();
    let other = device();
    let stream = Stream::new(&ours.context).unwrap();
    let foreign = Stream::new(&other.context).unwrap();
    let retains = sim::device_state(ours.ordinal).primary_retains;
    // SAFETY: the stream is alive.
    let found = unsafe { Context::of_stream_in(stream.as_stream().raw(), &ours.context) }.unwrap();
    assert_eq!(found.raw(), ours.context.raw());
    assert_eq!(sim::device_state(ours.ordinal).primary_retains, retains);
    // SAFETY: as above.
    let theirs =
        unsafe { Context::of_stream_in(foreign.as_stream().raw(), &ours.context) }.unwrap();
    assert_eq!(
        (theirs.ordinal(), theirs.raw()),
        (other.ordinal, other.context.raw())
    );
    drop((found, theirs, stream, foreign));
    ours.assert_no_violations();
    other.assert_no_violations();
}

/// `wait_for` before transfers that prove nothing complete (empty ones,
/// pinned copies) keeps a bounded number of events alive. Before, every
/// call kept one until a later staged transfer finished: 2,000 live events
/// after 2,000 empty copies.
#[test]
fn events_stay_bounded_over_thousands_of_waits_before_empty_and_pinned_copies() {
    let device = device();
    let mut stager = Stager::with_options(&device.context, options(Stores::Streaming)).unwrap();
    let producer = Stream::new(&device.context).unwrap();
    let source = DeviceBuffer::new(&device.context, 4096).unwrap();
    let mut pinned = Some(PinnedBuffer::new(&device.context, 4096).unwrap());
    let mut empty: [u8; 0] = [];
    let calls = scaled(2000, 40);
    let mut most = 0;
    for _ in 0..calls {
        stager.wait_for(producer.as_stream()).unwrap();
        stager.run(to_host(&mut empty[..], &source)).unwrap();
        stager.wait_for(producer.as_stream()).unwrap();
        let given = pinned.take().unwrap();
        pinned = Some(stager.device_to_pinned(given, &source, 0).unwrap());
        most = most.max(device.state().events);
    }
    assert!(
        most <= staging::MAX_ORDER_EVENTS,
        "{most} events alive at once over {calls} rounds"
    );
    drop((stager, pinned));
    assert_eq!(device.state().events, 0);
    device.assert_no_violations();
}

/// Past `MAX_ORDER_EVENTS` waits for work that has not run, `wait_for`
/// folds its events into one instead of waiting on the host for the
/// oldest: a call before a non-blocking transfer must not block on the
/// user's stream. The ordering still holds once the device runs: a small
/// transfer on the driver's path, which waits on the host for the folded
/// event, reads what the producer's queued copy wrote.
#[test]
fn waits_for_work_that_has_not_run_never_block_and_still_order() {
    let device = device();
    let mut stager = on_the_drivers_path_below_a_chunk(&device);
    let producer = Stream::new(&device.context).unwrap();
    let len = 64;
    let expected = pattern(len, 27);
    let pinned = {
        let mut pinned = PinnedBuffer::new(&device.context, len).unwrap();
        pinned.copy_from_slice(&expected);
        pinned
    };
    let source = DeviceBuffer::new(&device.context, len).unwrap();
    sim::hold(device.ordinal);
    // Queued on the producer, run only once the device is released.
    // SAFETY: `pinned` stays alive and unwritten until the stager's copy,
    // which is ordered after this one, has returned.
    unsafe {
        producer
            .as_stream()
            .copy_host_to_device(&source, 0, pinned.raw_ptr(), len)
    }
    .unwrap();
    let calls = staging::MAX_ORDER_EVENTS + scaled(2 * staging::MAX_ORDER_EVENTS, 4);
    let (done, finished) = std::sync::mpsc::channel();
    let most = std::thread::scope(|threads| {
        let waiter = threads.spawn(|| {
            let mut most = 0;
            for _ in 0..calls {
                stager.wait_for(producer.as_stream()).unwrap();
                most = most.max(device.state().events);
            }
            let _ = done.send(());
            most
        });
        // Generous: the calls take milliseconds; only a call that waits
        // for the held device runs into it.
        let limit = std::time::Duration::from_secs(scaled(30, 3600) as u64);
        let returned = finished.recv_timeout(limit);
        sim::release(device.ordinal);
        assert!(
            returned.is_ok(),
            "wait_for blocked on work that had not run"
        );
        waiter.join().unwrap()
    });
    assert!(
        most <= staging::MAX_ORDER_EVENTS + 1,
        "{most} events alive at once"
    );
    let mut host = vec![0u8; len];
    stager.run(to_host(&mut host, &source)).unwrap();
    assert!(
        host == expected,
        "the small transfer ran before the producer's copy"
    );
    drop((stager, pinned));
    device.assert_no_violations();
}

/// Below the crossover, a transfer that returns at once (a scope's, a
/// pending one) takes the driver's path on a stream of the stager's own
/// when that cannot block the caller: one asynchronous driver copy, no
/// staging, done when the call returns. Behind a stream given to
/// `wait_for` that has not finished, or behind a transfer of the stager's
/// still queued, it is staged instead, and the call returns at once.
#[test]
fn a_small_transfer_that_returns_at_once_takes_the_drivers_path_only_when_it_cannot_block() {
    let device = device();
    let mut stager = on_the_drivers_path_below_a_chunk(&device);
    let len = 100;
    let expected = pattern(2 * CHUNK, 41);
    let mut source = DeviceBuffer::new(&device.context, 2 * CHUNK).unwrap();
    source.copy_from_host(0, &expected).unwrap();
    let producer = Stream::new(&device.context).unwrap();
    let (mut small, mut large) = (vec![0u8; len], vec![0u8; 2 * CHUNK]);
    let ordinal = device.ordinal;
    let state = || sim::device_state(ordinal);

    // Idle: the driver's path, complete before the handle is waited for.
    let before = state();
    stager
        .scope(|scope| {
            let transfer = scope.start(to_host(&mut small, &source)).unwrap();
            let now = state();
            assert_eq!(now.async_copy_calls, before.async_copy_calls + 1);
            assert_eq!(now.event_records, before.event_records, "nothing staged");
            transfer.wait()
        })
        .unwrap()
        .unwrap();
    assert!(small[..] == expected[..len]);

    // Behind a large transfer still queued: staged, and the call returns
    // while the device is held.
    small.fill(0);
    sim::hold(ordinal);
    stager
        .scope(|scope| {
            let first = scope.start(to_host(&mut large, &source)).unwrap();
            let second = scope.start(to_host(&mut small, &source)).unwrap();
            sim::release(ordinal);
            first.wait().and(second.wait())
        })
        .unwrap()
        .unwrap();
    assert!(small[..] == expected[..len] && large == expected);

    // Behind a stream given to `wait_for` that has not run: staged, and the
    // pending transfer returns while the device is held.
    small.fill(0);
    sim::hold(ordinal);
    stager.wait_for(producer.as_stream()).unwrap();
    let staged_before = state().event_records;
    // SAFETY: `small` outlives the transfer, finished below, and nothing
    // else touches it meanwhile.
    let pending = unsafe { stager.start_unchecked(to_host(&mut small[..], &source)) }.unwrap();
    sim::release(ordinal);
    stager.finish_pending(pending).unwrap();
    assert!(state().event_records > staged_before, "staged");
    assert!(small[..] == expected[..len]);
    drop(stager);
    device.assert_no_violations();
}
