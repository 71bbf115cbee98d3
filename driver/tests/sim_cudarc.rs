//! cudarc's device memory and streams in staged transfers, against the
//! simulated driver: cudarc itself runs here, loading a libcuda that
//! forwards to the simulator (`sim_support/libcuda.rs`), so both libraries
//! share one simulated driver. One primary context for both; slices, views
//! and batches byte-exact both ways, on cudarc's streams and on its default
//! one; bad input refused before anything is queued; the stager's streams
//! wait for cudarc's stream (and the memory's own); nothing to copy orders
//! nothing; a capturing stream is refused; after a transfer that cannot be
//! drained, cudarc's stream waits for everything the stager queued; after a
//! sticky error mid-transfer, cudarc's release of the slice is refused; the
//! fronts that cannot keep cudarc's order refuse its memory. cudarc's own copies
//! here go through its pinned memory: from and to pageable memory they rely
//! on the driver staging it within the call, which the simulator does not
//! model.

#![cfg(not(miri))]

#[path = "sim_support/libcuda.rs"]
mod libcuda;
mod sim_support;

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DeviceRepr, ValidAsZeroBits};
use hostcopy_driver::cuda::sim;
use hostcopy_driver::cuda::staging::{Block, Stager, cudarc::CudarcMemory, to_device, to_host};
use hostcopy_driver::cuda::{Context, Error};
use sim_support::pattern;

const CHUNK: usize = 1 << 20;
const BUFFERS: usize = 3;
/// The stager's streams: one per buffer (the default).
const STREAMS: usize = BUFFERS;
/// Three and a half chunks: the last one partial.
const LEN: usize = 3 * CHUNK + CHUNK / 2 + 13;

/// A simulated device, cudarc's context on it, a stream of cudarc's and a
/// stager on the same context.
struct Setup {
    ordinal: usize,
    cuda: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    stager: Stager,
}

fn setup() -> Setup {
    setup_with(0)
}

/// As [`setup`], with single transfers below `driver_path_below` bytes
/// taking the small paths.
fn setup_with(driver_path_below: usize) -> Setup {
    if let Err(why) = libcuda::load() {
        panic!("cudarc cannot be pointed at the simulator here: {why}");
    }
    let ordinal = sim::new_device();
    let cuda = CudaContext::new(ordinal).expect("cudarc's context on the simulated device");
    let stream = cuda.new_stream().expect("a cudarc stream");
    let context = Context::from_cudarc(&cuda).expect("the same primary context");
    let options = sim_support::options(CHUNK, BUFFERS, 2)
        .driver_path_below(driver_path_below)
        .build()
        .unwrap();
    let stager = Stager::with_options(&context, options).expect("a stager");
    Setup {
        ordinal,
        cuda,
        stream,
        stager,
    }
}

impl Setup {
    /// Drops everything, waits for late work, and fails on any misuse the
    /// simulator saw, cudarc's included.
    fn finish(self) {
        let ordinal = self.ordinal;
        drop(self);
        sim::drain(ordinal);
        let violations = sim::take_violations(ordinal);
        assert!(violations.is_empty(), "driver misuse: {violations:#?}");
        assert!(!sim::device_state(ordinal).context_alive);
    }

    fn upload<T: DeviceRepr + ValidAsZeroBits + Copy>(&self, values: &[T]) -> CudaSlice<T> {
        upload(&self.cuda, &self.stream, values)
    }

    fn download(&self, slice: &CudaSlice<u8>) -> Vec<u8> {
        download(&self.cuda, &self.stream, slice)
    }
}

/// `values` in new device memory, through cudarc's pinned memory (cudarc's
/// copies from pageable memory rely on the driver staging it before the
/// call returns, which the simulator does not model).
fn upload<T: DeviceRepr + ValidAsZeroBits + Copy>(
    cuda: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    values: &[T],
) -> CudaSlice<T> {
    // SAFETY: every element is written before it is read.
    let mut pinned = unsafe { cuda.alloc_pinned::<T>(values.len()) }.unwrap();
    pinned.as_mut_slice().unwrap().copy_from_slice(values);
    let slice = stream.clone_htod(&pinned).unwrap();
    stream.synchronize().unwrap();
    slice
}

/// What `slice` holds, through cudarc's pinned memory.
fn download(cuda: &Arc<CudaContext>, stream: &Arc<CudaStream>, slice: &CudaSlice<u8>) -> Vec<u8> {
    // SAFETY: read only after the copy has filled it.
    let mut pinned = unsafe { cuda.alloc_pinned::<u8>(slice.len()) }.unwrap();
    stream.memcpy_dtoh(slice, &mut pinned).unwrap();
    stream.synchronize().unwrap();
    pinned.as_slice().unwrap().to_vec()
}

#[test]
fn cudarc_and_the_stager_share_one_primary_context() {
    let setup = setup();
    let state = sim::device_state(setup.ordinal);
    // cudarc's retain and the stager's context's.
    assert_eq!(state.primary_retains, 2);
    assert_eq!(
        setup.stager.context().raw().addr(),
        setup.cuda.cu_ctx().addr()
    );
    setup.finish();
}

#[test]
fn slices_and_views_round_trip_byte_exact() {
    let mut setup = setup();
    let first = pattern(LEN, 1);
    let mut slice = setup.upload(&first);
    let mut host = vec![0u8; LEN];
    setup
        .stager
        .run(to_host(
            &mut host,
            &CudarcMemory::read(&slice, &setup.stream).unwrap(),
        ))
        .unwrap();
    assert!(host == first, "device to host");

    let second = pattern(LEN, 2);
    setup
        .stager
        .run(to_device(
            &mut CudarcMemory::write(&mut slice, &setup.stream).unwrap(),
            &second,
        ))
        .unwrap();
    assert!(setup.download(&slice) == second, "host to device");

    // Views: a range out of the middle, read and written.
    let (start, end) = (CHUNK / 3, LEN - 5);
    let mut part = vec![0u8; end - start];
    setup
        .stager
        .run(to_host(
            &mut part,
            &CudarcMemory::read(&slice.slice(start..end), &setup.stream).unwrap(),
        ))
        .unwrap();
    assert!(part[..] == second[start..end], "from a view");
    let third = pattern(end - start, 3);
    setup
        .stager
        .run(to_device(
            &mut CudarcMemory::write(&mut slice.slice_mut(start..end), &setup.stream).unwrap(),
            &third,
        ))
        .unwrap();
    let back = setup.download(&slice);
    assert!(back[..start] == second[..start], "before the view");
    assert!(back[start..end] == third[..], "into a view");
    assert!(back[end..] == second[end..], "after the view");

    // Typed memory: the host side counts elements of its own type.
    let floats: Vec<f32> = (0..LEN / 4).map(|i| i as f32 * 0.5).collect();
    let device_floats = setup.upload(&floats);
    let mut host_floats = vec![0f32; floats.len()];
    setup
        .stager
        .run(to_host(
            &mut host_floats,
            &CudarcMemory::read(&device_floats, &setup.stream).unwrap(),
        ))
        .unwrap();
    assert_eq!(host_floats, floats);
    drop((slice, device_floats));
    setup.finish();
}

#[test]
fn on_cudarc_default_stream_too() {
    if let Err(why) = libcuda::load() {
        panic!("cudarc cannot be pointed at the simulator here: {why}");
    }
    let ordinal = sim::new_device();
    // No stream of its own: cudarc works on the legacy default stream and
    // tracks no events.
    let cuda = CudaContext::new(ordinal).unwrap();
    let stream = cuda.default_stream();
    let mut stager = Stager::new(&Context::from_cudarc(&cuda).unwrap()).unwrap();
    let bytes = pattern(LEN, 4);
    let mut slice = upload(&cuda, &stream, &bytes);
    let mut host = vec![0u8; LEN];
    stager
        .run(to_host(
            &mut host,
            &CudarcMemory::read(&slice, &stream).unwrap(),
        ))
        .unwrap();
    assert!(host == bytes);
    let other = pattern(LEN, 5);
    stager
        .run(to_device(
            &mut CudarcMemory::write(&mut slice, &stream).unwrap(),
            &other,
        ))
        .unwrap();
    assert!(download(&cuda, &stream, &slice) == other);
    drop((slice, stager, stream, cuda));
    sim::drain(ordinal);
    assert!(sim::take_violations(ordinal).is_empty());
}

#[test]
fn batches_are_byte_exact_both_ways() {
    let mut setup = setup();
    let device_bytes = pattern(LEN, 6);
    let mut slice = setup.upload(&device_bytes);
    // Out of order, one across chunks, one empty.
    let blocks = [
        Block::new(2 * CHUNK + 100, 0, 70_000),
        Block::new(5, 70_000, CHUNK + 3),
        Block::new(LEN - 9, 70_000 + CHUNK + 3, 9),
        Block::new(0, 0, 0),
    ];
    let pool_len = 70_000 + CHUNK + 12;
    let mut pool = vec![0u8; pool_len];
    setup
        .stager
        .run(
            to_host(
                &mut pool,
                &CudarcMemory::read(&slice, &setup.stream).unwrap(),
            )
            .blocks(&blocks),
        )
        .unwrap();
    for block in &blocks {
        let (d, h, n) = (block.device_offset, block.host_offset, block.len);
        assert!(
            pool[h..h + n] == device_bytes[d..d + n],
            "{block:?} to host"
        );
    }

    let source = pattern(pool_len, 7);
    setup
        .stager
        .run(
            to_device(
                &mut CudarcMemory::write(&mut slice, &setup.stream).unwrap(),
                &source,
            )
            .blocks(&blocks),
        )
        .unwrap();
    let mut expected = device_bytes.clone();
    for block in &blocks {
        let (d, h, n) = (block.device_offset, block.host_offset, block.len);
        expected[d..d + n].copy_from_slice(&source[h..h + n]);
    }
    assert!(setup.download(&slice) == expected, "blocks to the device");
    drop(slice);
    setup.finish();
}

#[test]
fn bad_input_is_refused_before_anything_is_queued() {
    let mut setup = setup();
    let other = setup_other_device();
    let slice = setup.upload(&pattern(LEN, 8));
    let foreign_slice = upload(&other.0, &other.1, &pattern(LEN, 9));
    let before = sim::device_state(setup.ordinal);
    let mut host = vec![0u8; LEN];

    let refused = setup.stager.run(to_host(
        &mut host,
        &CudarcMemory::read(&slice, &other.1).unwrap(),
    ));
    assert!(
        matches!(refused, Err(Error::ContextMismatch { .. })),
        "{refused:?}"
    );
    let refused = setup.stager.run(to_host(
        &mut host,
        &CudarcMemory::read(&foreign_slice, &setup.stream).unwrap(),
    ));
    assert!(
        matches!(refused, Err(Error::ContextMismatch { .. })),
        "{refused:?}"
    );
    let mut longer = vec![0u8; LEN + 1];
    let refused = setup.stager.run(to_host(
        &mut longer,
        &CudarcMemory::read(&slice, &setup.stream).unwrap(),
    ));
    assert!(
        matches!(refused, Err(Error::DeviceOutOfBounds { .. })),
        "{refused:?}"
    );
    let overlapping = [Block::new(0, 0, 64), Block::new(64, 32, 64)];
    let refused = setup.stager.run(
        to_host(
            &mut host,
            &CudarcMemory::read(&slice, &setup.stream).unwrap(),
        )
        .blocks(&overlapping),
    );
    assert!(
        matches!(refused, Err(Error::BlocksOverlap { .. })),
        "{refused:?}"
    );
    let outside = [Block::new(LEN - 8, 0, 16)];
    let refused = setup.stager.run(
        to_host(
            &mut host,
            &CudarcMemory::read(&slice, &setup.stream).unwrap(),
        )
        .blocks(&outside),
    );
    assert!(
        matches!(refused, Err(Error::BlockOutOfBounds { .. })),
        "{refused:?}"
    );
    let after = sim::device_state(setup.ordinal);
    assert_eq!(
        (after.async_copy_calls, after.batch_copy_calls),
        (before.async_copy_calls, before.batch_copy_calls),
        "a refused transfer queued copies"
    );
    assert_eq!(after.event_records, before.event_records);
    drop((slice, foreign_slice, other));
    setup.finish();
}

/// cudarc's context and a stream on a second simulated device.
fn setup_other_device() -> (Arc<CudaContext>, Arc<CudaStream>) {
    let cuda = CudaContext::new(sim::new_device()).unwrap();
    let stream = cuda.new_stream().unwrap();
    (cuda, stream)
}

/// The waits a transfer makes: cudarc's stream for the slice's last
/// writer, then each staging stream for cudarc's stream, and for the
/// slice's own stream where that is another.
#[test]
fn every_staging_stream_waits_for_the_cudarc_stream() {
    let mut setup = setup();
    let slice = setup.upload(&pattern(LEN, 10));
    let mut host = vec![0u8; LEN];
    let before = sim::device_state(setup.ordinal).stream_waits;
    setup
        .stager
        .run(to_host(
            &mut host,
            &CudarcMemory::read(&slice, &setup.stream).unwrap(),
        ))
        .unwrap();
    let waits = sim::device_state(setup.ordinal).stream_waits - before;
    assert_eq!(
        waits,
        1 + STREAMS as u64,
        "cudarc's wait for the writer and one per staging stream"
    );
    // Memory allocated on another stream: the stager waits for that
    // stream as well.
    let other = setup.cuda.new_stream().unwrap();
    let elsewhere = upload(&setup.cuda, &other, &pattern(LEN, 15));
    let before = sim::device_state(setup.ordinal).stream_waits;
    setup
        .stager
        .run(to_host(
            &mut host,
            &CudarcMemory::read(&elsewhere, &setup.stream).unwrap(),
        ))
        .unwrap();
    let waits = sim::device_state(setup.ordinal).stream_waits - before;
    // Each staging stream waits for each of the two streams' work, but
    // for work the driver already reports done when the second is ordered
    // after (the stager lets go of what is complete).
    let staging = STREAMS as u64;
    assert!(
        (1 + staging..=1 + 2 * staging).contains(&waits),
        "one per staging stream for each of the two streams still running: {waits}"
    );
    drop((slice, elsewhere, other));
    setup.finish();
}

/// A transfer that fails and whose streams then fail to drain (injected,
/// not sticky) leaves cudarc's stream waiting for every staging stream, so
/// that the slice's read event, and its release, come after the copies
/// the driver may still run. The stager drains and works again later.
#[test]
fn an_undrained_transfer_leaves_the_cudarc_stream_behind_the_staging_streams() {
    let mut setup = setup();
    let bytes = pattern(LEN, 11);
    let slice = setup.upload(&bytes);
    let mut host = vec![0u8; LEN];
    let before = sim::device_state(setup.ordinal).stream_waits;
    // The wait for the first chunk fails, then the drain.
    sim::fail_call(setup.ordinal, "cuEventSynchronize", 1, 999);
    sim::fail_call(setup.ordinal, "cuStreamSynchronize", 1, 999);
    let failed = setup.stager.run(to_host(
        &mut host,
        &CudarcMemory::read(&slice, &setup.stream).unwrap(),
    ));
    assert!(failed.is_err(), "the injected failure is returned");
    let waits = sim::device_state(setup.ordinal).stream_waits - before;
    assert_eq!(
        waits,
        1 + 2 * STREAMS as u64,
        "cudarc's stream did not wait for each staging stream"
    );
    // The next transfer drains the streams first, then runs.
    host.fill(0);
    setup
        .stager
        .run(to_host(
            &mut host,
            &CudarcMemory::read(&slice, &setup.stream).unwrap(),
        ))
        .unwrap();
    assert!(host == bytes);
    drop(slice);
    setup.finish();
}

/// A sticky error in the middle of a transfer (chunks queued, the device
/// held) is returned, and cudarc's release of the slice afterwards is
/// refused by the driver: the memory stays allocated. The bridge's safety
/// after a sticky error rests on that refusal (the stager cannot keep
/// memory it only borrows).
#[test]
fn a_sticky_error_mid_transfer_is_returned_and_the_slice_is_never_freed() {
    let mut setup = setup();
    let slice = setup.upload(&pattern(LEN, 12));
    let allocations = sim::device_state(setup.ordinal).device_allocations;
    let ordinal = setup.ordinal;
    sim::hold(ordinal);
    let mut host = vec![0u8; LEN];
    let failed = std::thread::scope(|scope| {
        let transfer = scope.spawn(|| {
            setup.stager.run(to_host(
                &mut host,
                &CudarcMemory::read(&slice, &setup.stream).unwrap(),
            ))
        });
        while sim::device_state(ordinal).queued < BUFFERS {
            std::thread::yield_now();
        }
        sim::fail_context(ordinal, 700);
        sim::release(ordinal);
        transfer.join().unwrap()
    });
    assert!(failed.is_err(), "the sticky error is returned");
    drop(slice);
    assert_eq!(
        sim::device_state(ordinal).device_allocations,
        allocations,
        "the slice's memory was freed in a context with a sticky error"
    );
    let _ = setup.cuda.check_err();
    drop(setup);
}

/// A zero-length transfer and a refused one order nothing: no stream waits
/// for another, no event is left behind.
#[test]
fn nothing_to_copy_and_refused_calls_order_nothing() {
    let mut setup = setup();
    let mut slice = setup.upload(&pattern(LEN, 13));
    let before = sim::device_state(setup.ordinal);
    let mut empty: [u8; 0] = [];
    setup
        .stager
        .run(to_host(
            &mut empty,
            &CudarcMemory::read(&slice, &setup.stream).unwrap(),
        ))
        .unwrap();
    setup
        .stager
        .run(to_device(
            &mut CudarcMemory::write(&mut slice, &setup.stream).unwrap(),
            &empty[..],
        ))
        .unwrap();
    let mut longer = vec![0u8; LEN + 1];
    let refused = setup.stager.run(to_host(
        &mut longer,
        &CudarcMemory::read(&slice, &setup.stream).unwrap(),
    ));
    assert!(refused.is_err());
    let after = sim::device_state(setup.ordinal);
    assert_eq!(after.stream_waits, before.stream_waits, "waits were made");
    assert_eq!(after.events, before.events, "events were left behind");
    drop(slice);
    setup.finish();
}

/// A stream capturing a graph is refused before cudarc or the stager
/// touches it, and the capture ends with nothing of the transfer in it.
#[test]
fn a_capturing_stream_is_refused_before_anything_is_queued() {
    use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
    let mut setup = setup();
    let slice = setup.upload(&pattern(LEN, 14));
    let before = sim::device_state(setup.ordinal);
    setup
        .stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
        .unwrap();
    let mut host = vec![0u8; LEN];
    let refused = setup.stager.run(to_host(
        &mut host,
        &CudarcMemory::read(&slice, &setup.stream).unwrap(),
    ));
    assert!(matches!(refused, Err(Error::Capturing)), "{refused:?}");
    let graph = setup
        .stream
        .end_capture(CUgraphInstantiate_flags(0))
        .expect("the capture was left intact");
    drop(graph);
    let after = sim::device_state(setup.ordinal);
    assert_eq!(after.stream_waits, before.stream_waits);
    assert_eq!(after.async_copy_calls, before.async_copy_calls);
    drop(slice);
    setup.finish();
}

/// Below the crossover each way is one asynchronous driver copy of the
/// pageable memory (a download on the stager's stream for the driver's
/// path, an upload on its first stream): byte-exact both ways, no host
/// function run.
#[test]
fn small_transfers_are_byte_exact_both_ways() {
    let mut setup = setup_with(CHUNK);
    let bytes = pattern(4096 + 13, 16);
    let mut slice = setup.upload(&bytes);
    let before = sim::device_state(setup.ordinal);
    let mut host = vec![0u8; bytes.len()];
    setup
        .stager
        .run(to_host(
            &mut host,
            &CudarcMemory::read(&slice, &setup.stream).unwrap(),
        ))
        .unwrap();
    assert!(host == bytes, "small download");
    let other = pattern(bytes.len(), 17);
    setup
        .stager
        .run(to_device(
            &mut CudarcMemory::write(&mut slice, &setup.stream).unwrap(),
            &other,
        ))
        .unwrap();
    let after = sim::device_state(setup.ordinal);
    // Staged, the upload would have waited on its buffer's flag; the
    // driver's path made its pinned buffer for the first small transfer.
    assert_eq!(
        after.wait_value_ops, before.wait_value_ops,
        "nothing staged"
    );
    assert_eq!(
        after.host_allocations,
        before.host_allocations + 1,
        "the driver's path made its buffer"
    );
    assert_eq!(
        after.async_copy_calls,
        before.async_copy_calls + 2,
        "each way is one asynchronous copy"
    );
    assert!(setup.download(&slice) == other, "small upload");
    drop(slice);
    setup.finish();
}

/// A small upload whose wait fails, and whose stream then fails to drain
/// (injected, not sticky), leaves cudarc's stream waiting for every
/// staging stream and the small transfers' stream, as a staged transfer
/// does.
#[test]
fn a_small_upload_that_cannot_be_drained_leaves_the_cudarc_stream_behind() {
    let mut setup = setup_with(CHUNK);
    let mut slice = setup.upload(&pattern(4096, 18));
    let bytes = pattern(4096, 19);
    let before = sim::device_state(setup.ordinal).stream_waits;
    setup
        .stager
        .run(to_device(
            &mut CudarcMemory::write(&mut slice, &setup.stream).unwrap(),
            &bytes,
        ))
        .unwrap();
    let ok_waits = sim::device_state(setup.ordinal).stream_waits - before;
    // The wait for the copy fails, then the drain.
    sim::fail_call(setup.ordinal, "cuStreamSynchronize", 1, 999);
    sim::fail_call(setup.ordinal, "cuStreamSynchronize", 2, 999);
    let before = sim::device_state(setup.ordinal).stream_waits;
    let failed = setup.stager.run(to_device(
        &mut CudarcMemory::write(&mut slice, &setup.stream).unwrap(),
        &bytes,
    ));
    assert!(failed.is_err());
    let waits = sim::device_state(setup.ordinal).stream_waits - before;
    assert_eq!(
        waits,
        ok_waits + STREAMS as u64 + 1,
        "cudarc's stream did not wait for each of the stager's streams"
    );
    // Drained by the next call, which works.
    setup
        .stager
        .run(to_device(
            &mut CudarcMemory::write(&mut slice, &setup.stream).unwrap(),
            &bytes,
        ))
        .unwrap();
    assert!(setup.download(&slice) == bytes);
    drop(slice);
    setup.finish();
}

/// An error cudarc kept from a call that could not return it is returned
/// before anything is queued or ordered, as cudarc's own copies return it.
#[test]
fn an_error_cudarc_kept_is_returned_before_anything_is_queued() {
    use cudarc::driver::{DriverError, sys::cudaError_enum};
    let mut setup = setup();
    let slice = setup.upload(&pattern(LEN, 20));
    let before = sim::device_state(setup.ordinal);
    setup
        .cuda
        .record_err::<()>(Err(DriverError(cudaError_enum::CUDA_ERROR_LAUNCH_FAILED)));
    let mut host = vec![0u8; LEN];
    let failed = setup.stager.run(to_host(
        &mut host,
        &CudarcMemory::read(&slice, &setup.stream).unwrap(),
    ));
    assert!(
        matches!(failed, Err(Error::Driver(error)) if error.code() == 719),
        "{failed:?}"
    );
    let after = sim::device_state(setup.ordinal);
    assert_eq!(after.stream_waits, before.stream_waits);
    assert_eq!(after.async_copy_calls, before.async_copy_calls);
    assert_eq!(after.event_records, before.event_records);
    drop(slice);
    setup.finish();
}

/// With the memory on another stream than the one given, a capture on the
/// memory's stream is refused too, and an undrained failure leaves both
/// streams behind the staging streams.
#[test]
fn the_memorys_own_stream_is_checked_and_ordered_too() {
    use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
    let mut setup = setup();
    let own = setup.cuda.new_stream().unwrap();
    let slice = upload(&setup.cuda, &own, &pattern(LEN, 21));
    let mut host = vec![0u8; LEN];
    own.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
        .unwrap();
    let before = sim::device_state(setup.ordinal).stream_waits;
    let refused = setup.stager.run(to_host(
        &mut host,
        &CudarcMemory::read(&slice, &setup.stream).unwrap(),
    ));
    assert!(matches!(refused, Err(Error::Capturing)), "{refused:?}");
    assert_eq!(
        sim::device_state(setup.ordinal).stream_waits,
        before,
        "refused only after ordering on the other stream"
    );
    drop(
        own.end_capture(CUgraphInstantiate_flags(0))
            .expect("intact"),
    );

    let before = sim::device_state(setup.ordinal).stream_waits;
    sim::fail_call(setup.ordinal, "cuEventSynchronize", 1, 999);
    sim::fail_call(setup.ordinal, "cuStreamSynchronize", 1, 999);
    let failed = setup.stager.run(to_host(
        &mut host,
        &CudarcMemory::read(&slice, &setup.stream).unwrap(),
    ));
    assert!(failed.is_err());
    let waits = sim::device_state(setup.ordinal).stream_waits - before;
    // As above, a stream's work the driver reports done before the
    // transfer starts is not waited for.
    let staging = STREAMS as u64;
    assert!(
        (1 + 3 * staging..=1 + 4 * staging).contains(&waits),
        "cudarc's wait, the staging streams' waits for both streams (still running), both streams' waits for the staging streams: {waits}"
    );
    drop((slice, own));
    setup.finish();
}

/// A small upload from pinned memory, which the driver would read after
/// an asynchronous copy's call returns, goes through the stager's own
/// pinned buffer like any small transfer: the calling thread copies the
/// caller's memory into it, and one asynchronous copy reads the buffer.
#[test]
fn a_small_upload_from_pinned_memory_goes_through_the_stagers_own_buffer() {
    use hostcopy_driver::cuda::PinnedBuffer;
    let mut setup = setup_with(CHUNK);
    let mut slice = setup.upload(&pattern(4096, 22));
    let mut pinned = PinnedBuffer::new(setup.stager.context(), 4096).unwrap();
    pinned.copy_from_slice(&pattern(4096, 23));
    let before = sim::device_state(setup.ordinal).async_copy_calls;
    setup
        .stager
        .run(to_device(
            &mut CudarcMemory::write(&mut slice, &setup.stream).unwrap(),
            &pinned,
        ))
        .unwrap();
    assert_eq!(
        sim::device_state(setup.ordinal).async_copy_calls,
        before + 1,
        "one asynchronous copy, of the stager's buffer"
    );
    assert!(setup.download(&slice) == pattern(4096, 23));
    drop((slice, pinned));
    setup.finish();
}

/// cudarc's memory is ordered only by a blocking transfer: the fronts that
/// return at once and the pinned copies refuse it, and memory lent for
/// reading is refused as a destination, each before cudarc or the stager
/// orders or queues anything.
#[test]
fn fronts_that_cannot_keep_cudarcs_order_refuse_its_memory() {
    use hostcopy_driver::cuda::PinnedBuffer;
    let mut setup = setup();
    let bytes = pattern(LEN, 24);
    let mut slice = setup.upload(&bytes);
    let mut host = vec![0u8; LEN];
    let before = sim::device_state(setup.ordinal);

    let read = CudarcMemory::read(&slice, &setup.stream).unwrap();
    let in_scope = setup
        .stager
        .scope(|scope| scope.start(to_host(&mut host, &read)).map(drop))
        .unwrap();
    assert!(matches!(in_scope, Err(Error::OrderNotKept)), "{in_scope:?}");
    // SAFETY: refused before anything is queued; nothing outlives the call.
    let pending = unsafe { setup.stager.start_unchecked(to_host(&mut host, &read)) };
    assert!(matches!(pending, Err(Error::OrderNotKept)), "{pending:?}");
    let pinned = PinnedBuffer::new(setup.stager.context(), 4096).unwrap();
    let refused = setup.stager.device_to_pinned(pinned, &read, 0).unwrap_err();
    assert_eq!(refused.error(), Error::OrderNotKept);
    assert!(refused.into_buffer().is_some(), "nothing was queued");
    let mut read_only = CudarcMemory::read(&slice, &setup.stream).unwrap();
    let written = setup.stager.run(to_device(&mut read_only, &host));
    assert!(matches!(written, Err(Error::ReadOnlyDevice)), "{written:?}");
    drop((read, read_only));
    let after = sim::device_state(setup.ordinal);
    assert_eq!(after.stream_waits, before.stream_waits, "waits were made");
    assert_eq!(after.async_copy_calls, before.async_copy_calls);
    assert_eq!(after.event_records, before.event_records);

    // Lent for writing, the memory is read by a download as `read` would.
    let mut written = CudarcMemory::write(&mut slice, &setup.stream).unwrap();
    setup.stager.run(to_host(&mut host, &written)).unwrap();
    assert!(host == bytes, "a download through memory lent for writing");
    // And a range at an offset, both ways.
    let part = pattern(LEN - CHUNK, 25);
    setup
        .stager
        .run(to_device(&mut written, &part).at(CHUNK))
        .unwrap();
    let mut back = vec![0u8; LEN - CHUNK];
    setup
        .stager
        .run(to_host(&mut back, &written).at(CHUNK))
        .unwrap();
    assert!(back == part, "a range at an offset");
    drop(written);
    let all = setup.download(&slice);
    assert!(all[..CHUNK] == bytes[..CHUNK] && all[CHUNK..] == part[..]);
    drop(slice);
    setup.finish();
}
