//! GPU tests of staged transfers (`cuda::staging`) against the real driver:
//! byte-exact in both directions for sizes that are not multiples of the
//! chunk, unaligned host buffers, zero bytes, a never-touched destination,
//! default options and several transfers in flight, batches of scattered
//! blocks with the driver's batch copy and with a loop of copies, a scope
//! with single transfers and a batch in flight together, and the driver
//! behaviour the stager's error path rests on (its streams drain while
//! another stream captures; the context does not); and that another
//! library's host function, blocked on the context's one host-function
//! thread, holds up no staged transfer. Elsewhere each reports itself
//! ignored and why.

mod gpu_support;

use gpu_support::{check, pattern};
use hostcopy_driver::HostBuffer;
use hostcopy_driver::cuda::registration::Register;
use hostcopy_driver::cuda::staging::{
    Block, DEFAULT_CHUNK, DeviceCopies, Stager, StagingOptions, Stores, to_device, to_host,
};
use hostcopy_driver::cuda::{CaptureMode, Context, DeviceBuffer, Stream, driver_version};
use libtest_mimic::Failed;

fn main() {
    gpu_support::run(
        "gpu_staging",
        &[
            (
                "default_options_round_trip_a_size_not_a_multiple_of_the_chunk",
                default_round_trip,
            ),
            (
                "every_awkward_size_is_byte_exact_both_ways_and_with_both_store_kinds",
                awkward_sizes,
            ),
            (
                "unaligned_host_buffers_and_device_offsets_copy_exactly",
                unaligned,
            ),
            ("zero_bytes_touch_nothing", zero_bytes),
            (
                "a_never_touched_destination_receives_every_byte",
                never_touched,
            ),
            (
                "scoped_transfers_in_flight_together_all_arrive",
                scoped_in_flight,
            ),
            (
                "staging_and_its_drain_leave_another_streams_global_capture_alone",
                beside_a_capture,
            ),
            (
                "small_transfers_on_the_drivers_path_leave_another_streams_global_capture_alone",
                small_beside_a_capture,
            ),
            (
                "scattered_blocks_are_byte_exact_both_ways_with_the_batch_copy_and_the_loop",
                scattered_blocks,
            ),
            (
                "scope_transfers_and_batches_in_flight_together_all_arrive",
                scope_with_batches,
            ),
            (
                "a_host_function_blocked_on_another_stream_holds_up_no_transfer",
                beside_a_blocked_host_function,
            ),
            (
                "host_buffers_registered_whole_half_and_not_are_byte_exact_both_ways",
                registered_host_buffers,
            ),
        ],
    )
}

/// Device memory holding `bytes`.
fn device_with(context: &Context, bytes: &[u8]) -> Result<DeviceBuffer, Failed> {
    let mut device = DeviceBuffer::new(context, bytes.len())?;
    device.copy_from_host(0, bytes)?;
    Ok(device)
}

/// Device to host and back through a stager with `options`, both checked
/// against the driver's own copies.
fn round_trip(
    context: &Context,
    options: StagingOptions,
    len: usize,
    seed: u32,
) -> Result<(), Failed> {
    let mut stager = Stager::with_options(context, options)?;
    let expected = pattern(len, seed);
    let device = device_with(context, &expected)?;
    let mut host = vec![0u8; len];
    stager.run(to_host(&mut host, &device))?;
    check(host == expected, || {
        format!("{len} bytes device to host differ ({options:?})")
    })?;

    let upload = pattern(len, seed + 1);
    let mut target = DeviceBuffer::new(context, len)?;
    stager.run(to_device(&mut target, &upload))?;
    let mut back = vec![0u8; len];
    target.copy_to_host(0, &mut back)?;
    check(back == upload, || {
        format!("{len} bytes host to device differ ({options:?})")
    })
}

fn default_round_trip(context: &Context) -> Result<(), Failed> {
    round_trip(context, StagingOptions::default(), (256 << 20) + 12_345, 1)
}

fn awkward_sizes(context: &Context) -> Result<(), Failed> {
    let chunk = 1 << 20;
    for stores in [Stores::Streaming, Stores::Cached] {
        let options = StagingOptions::builder()
            .chunk(chunk)
            .buffers(3)
            .h2d_stores(stores)
            .driver_path_below(0)
            .build()
            .unwrap();
        for len in [
            1,
            4095,
            chunk - 1,
            chunk,
            chunk + 1,
            3 * chunk + 777,
            10 * chunk + 5,
        ] {
            round_trip(context, options, len, len as u32)?;
        }
    }
    // Around the default chunk and the default crossover.
    for len in [
        DEFAULT_CHUNK - 1,
        DEFAULT_CHUNK + 1,
        4096,
        (1 << 20) - 1,
        1 << 20,
    ] {
        round_trip(context, StagingOptions::default(), len, 3)?;
    }
    Ok(())
}

fn unaligned(context: &Context) -> Result<(), Failed> {
    let mut stager = Stager::new(context)?;
    let len = 2 * DEFAULT_CHUNK + 13;
    let expected = pattern(len + 5, 9);
    let device = device_with(context, &expected)?;
    let mut host = vec![0u8; len + 3];
    stager.run(to_host(&mut host[3..], &device).at(5))?;
    check(host[3..] == expected[5..], || {
        "device to host at odd offsets".into()
    })?;
    check(host[..3] == [0, 0, 0], || {
        "bytes before the destination were written".into()
    })?;

    let upload = pattern(len + 1, 11);
    let mut target = DeviceBuffer::new(context, len + 7)?;
    stager.run(to_device(&mut target, &upload[1..]).at(7))?;
    let mut back = vec![0u8; len];
    target.copy_to_host(7, &mut back)?;
    check(back == upload[1..], || {
        "host to device at odd offsets".into()
    })
}

fn zero_bytes(context: &Context) -> Result<(), Failed> {
    let mut stager = Stager::new(context)?;
    let mut device = DeviceBuffer::new(context, 16)?;
    let mut empty: [u8; 0] = [];
    stager.run(to_host(&mut empty, &device))?;
    stager.run(to_device(&mut device, &empty))?;
    let mut none = DeviceBuffer::new(context, 0)?;
    stager.run(to_device(&mut none, &empty))?;
    Ok(())
}

fn never_touched(context: &Context) -> Result<(), Failed> {
    let len = (256 << 20) + 3;
    let expected = pattern(len, 21);
    let device = device_with(context, &expected)?;
    let mut stager = Stager::new(context)?;
    // Zero pages mapped lazily: the workers take the faults.
    let mut host = vec![0u8; len];
    stager.run(to_host(&mut host, &device))?;
    check(host == expected, || {
        "never-touched destination differs".into()
    })
}

fn scoped_in_flight(context: &Context) -> Result<(), Failed> {
    let piece = 64 << 20;
    let expected = pattern(4 * piece, 31);
    let device = device_with(context, &expected)?;
    let mut host = vec![0u8; 4 * piece];
    let mut stager = Stager::new(context)?;
    stager.scope(|scope| -> Result<(), Failed> {
        let mut transfers = Vec::new();
        for (index, part) in host.chunks_mut(piece).enumerate() {
            transfers.push(scope.start(to_host(part, &device).at(index * piece))?);
        }
        // Waited in reverse; the last one left to the scope.
        let _left_to_the_scope = transfers.remove(0);
        for transfer in transfers.into_iter().rev() {
            transfer.wait()?;
        }
        Ok(())
    })??;
    check(host == expected, || "scoped transfers differ".into())
}

/// What the stager's error path assumes of the driver, and the simulator
/// models: while another stream of the context captures a graph in global
/// mode (on this very thread, the strictest case), a staged transfer runs,
/// its calls made in the relaxed capture mode, and the capture survives;
/// but `cuCtxSynchronize` is refused and breaks that capture (why the
/// stager drains its own streams instead).
fn beside_a_capture(context: &Context) -> Result<(), Failed> {
    let len = (64 << 20) + 4_097;
    let expected = pattern(len, 37);
    let source = device_with(context, &expected)?;
    let mut target = DeviceBuffer::new(context, len)?;
    let capturing = Stream::new(context)?;

    capturing.as_stream().begin_capture(CaptureMode::Global)?;
    // Made during the capture: allocation, streams, events, then transfers.
    let made = Stager::new(context);
    let mut host = vec![0u8; len];
    let during = made.and_then(|mut stager| {
        stager.run(to_host(&mut host, &source))?;
        stager.run(to_device(&mut target, &expected))?;
        Ok(stager)
    });
    let ended = capturing.as_stream().end_capture();
    let mut stager = during?;
    check(ended.is_ok(), || {
        format!("the capture did not survive a staged transfer beside it: {ended:?}")
    })?;
    check(host == expected, || {
        "device to host beside a capture differs".into()
    })?;
    let mut back = vec![0u8; len];
    target.copy_to_host(0, &mut back)?;
    check(back == expected, || {
        "host to device beside a capture differs".into()
    })?;

    capturing.as_stream().begin_capture(CaptureMode::Global)?;
    let whole_context = context.synchronize();
    let ended = capturing.as_stream().end_capture();
    check(whole_context.is_err(), || {
        "cuCtxSynchronize was allowed during a global capture".into()
    })?;
    check(ended.is_err(), || {
        "the capture survived cuCtxSynchronize".into()
    })?;
    // The refusal is not sticky: the context works on.
    context.synchronize()?;
    stager.run(to_host(&mut host, &source))?;
    check(host == expected, || {
        "a transfer after the refused capture differs".into()
    })
}

/// Below the crossover, transfers of pageable memory take the driver's
/// path on a stream of the stager's own, in the relaxed capture mode, not
/// the legacy stream: during another stream's capture in global mode (on
/// this very thread) a blocking call each way and a scope's transfer run,
/// byte-exact, and the capture survives.
fn small_beside_a_capture(context: &Context) -> Result<(), Failed> {
    let len = 64 << 10;
    let expected = pattern(len, 41);
    let source = device_with(context, &expected)?;
    let mut target = DeviceBuffer::new(context, len)?;
    let mut stager = Stager::new(context)?;
    let capturing = Stream::new(context)?;
    let (mut host, mut scoped) = (vec![0u8; len], vec![0u8; len]);
    capturing.as_stream().begin_capture(CaptureMode::Global)?;
    let during = stager
        .run(to_host(&mut host, &source))
        .and_then(|()| stager.run(to_device(&mut target, &expected)))
        .and_then(|()| stager.scope(|scope| scope.start(to_host(&mut scoped, &source))?.wait())?);
    let ended = capturing.as_stream().end_capture();
    check(during.is_ok(), || {
        format!("a small transfer beside a global capture failed: {during:?}")
    })?;
    check(ended.is_ok(), || {
        format!("the capture did not survive small transfers beside it: {ended:?}")
    })?;
    check(host == expected && scoped == expected, || {
        "small device to host beside a capture differs".into()
    })?;
    let mut back = vec![0u8; len];
    target.copy_to_host(0, &mut back)?;
    check(back == expected, || {
        "small host to device beside a capture differs".into()
    })
}

/// A small deterministic generator (xorshift64) for block placements.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// `count` distinct numbers below `slots`, in random order (the first
    /// `count` places of a Fisher-Yates shuffle).
    fn distinct(&mut self, count: usize, slots: usize) -> Vec<usize> {
        let mut all: Vec<usize> = (0..slots).collect();
        for i in 0..count.min(slots) {
            let j = i + (self.next() % (slots - i) as u64) as usize;
            all.swap(i, j);
        }
        all.truncate(count);
        all
    }
}

/// `count` blocks of `len` bytes at distinct random slots of `len` bytes
/// in the device memory, packed one after the other in the host memory
/// from byte `host_start`.
fn random_blocks(
    rng: &mut XorShift,
    count: usize,
    len: usize,
    device_len: usize,
    host_start: usize,
) -> Vec<Block> {
    rng.distinct(count, device_len / len)
        .into_iter()
        .enumerate()
        .map(|(index, slot)| Block::new(slot * len, host_start + index * len, len))
        .collect()
}

/// The first index at which `got` and `expected` differ.
fn first_difference(got: &[u8], expected: &[u8]) -> Option<usize> {
    got.iter()
        .zip(expected)
        .position(|(a, b)| a != b)
        .or((got.len() != expected.len()).then(|| got.len().min(expected.len())))
}

/// Fails with where `got` first differs from `expected`.
fn same(got: &[u8], expected: &[u8], what: impl FnOnce() -> String) -> Result<(), Failed> {
    match first_difference(got, expected) {
        None => Ok(()),
        Some(at) => Err(format!(
            "{}: first wrong byte at {at} (got {:?}, expected {:?})",
            what(),
            got.get(at),
            expected.get(at)
        )
        .into()),
    }
}

/// What the host and device memories of a batch test hold: the source's
/// bytes as the driver's own copy reads them, and a zeroed target.
struct BatchMemories<'a> {
    source: &'a DeviceBuffer,
    /// `source` read by `DeviceBuffer::copy_to_host` (the driver's path).
    source_bytes: &'a [u8],
    target: &'a mut DeviceBuffer,
    zeros: &'a [u8],
}

/// The host's bytes before a device-to-host batch: bytes outside every
/// block must keep them.
const UNTOUCHED: u8 = 0xA5;

/// `blocks` from `source` into a pageable buffer of `host_len` bytes, then
/// back from it into the zeroed target; each checked byte by byte against
/// the driver's own copies.
fn batch_both_ways(
    stager: &mut Stager,
    memories: &mut BatchMemories<'_>,
    blocks: &[Block],
    host_len: usize,
    what: &str,
) -> Result<(), Failed> {
    let mut host = vec![UNTOUCHED; host_len];
    stager.run(to_host(&mut host, memories.source).blocks(blocks))?;
    let mut expected = vec![UNTOUCHED; host_len];
    for block in blocks {
        expected[block.host_offset..][..block.len]
            .copy_from_slice(&memories.source_bytes[block.device_offset..][..block.len]);
    }
    same(&host, &expected, || format!("{what}: device to host"))?;

    memories.target.copy_from_host(0, memories.zeros)?;
    stager.run(to_device(memories.target, &host).blocks(blocks))?;
    let device_len = memories.target.len();
    let mut back = vec![0u8; device_len];
    memories.target.copy_to_host(0, &mut back)?;
    let mut expected = vec![0u8; device_len];
    for block in blocks {
        expected[block.device_offset..][..block.len]
            .copy_from_slice(&host[block.host_offset..][..block.len]);
    }
    same(&back, &expected, || format!("{what}: host to device"))
}

/// The driver's batch copy came with CUDA 12.8.
const BATCH_COPY_SINCE: i32 = 12080;

/// `CUDA_ERROR_NOT_SUPPORTED`: what a forced batch copy returns where the
/// driver has none.
const CUDA_ERROR_NOT_SUPPORTED: u32 = 801;

fn scattered_blocks(context: &Context) -> Result<(), Failed> {
    const TOTAL: usize = 256 << 20;
    /// Host bytes before and after the packed blocks, which no block
    /// writes.
    const MARGIN: usize = 4096 + 3;
    let device_len = 2 * TOTAL;
    let source = device_with(context, &pattern(device_len, 41))?;
    let mut source_bytes = vec![0u8; device_len];
    source.copy_to_host(0, &mut source_bytes)?;
    let mut target = DeviceBuffer::new(context, device_len)?;
    let zeros = vec![0u8; device_len];
    let mut memories = BatchMemories {
        source: &source,
        source_bytes: &source_bytes,
        target: &mut target,
        zeros: &zeros,
    };

    // Awkward sizes: none a multiple of another, one larger than a chunk;
    // device offsets odd and out of order, host offsets packed with gaps.
    let lens = [(4 << 10) + 3, 37 << 10, (2 << 20) + 5, DEFAULT_CHUNK + 4097];
    let device_at = [300 << 20, 7, (100 << 20) + 4099, (50 << 20) + 1];
    let mut host_at = 3;
    let awkward: Vec<Block> = lens
        .iter()
        .zip(device_at)
        .map(|(&len, device_offset)| {
            let block = Block::new(device_offset, host_at, len);
            host_at += len + 5;
            block
        })
        .collect();
    let awkward_host_len = host_at + 11;

    let batch_copy = driver_version().unwrap_or(0) >= BATCH_COPY_SINCE;
    let every = [
        DeviceCopies::Auto,
        DeviceCopies::Batch,
        DeviceCopies::Loop,
        DeviceCopies::Kernel,
    ];
    for copies in every {
        let options = StagingOptions::builder()
            .device_copies(copies)
            .build()
            .unwrap();
        let mut stager = Stager::with_options(context, options)?;
        if copies == DeviceCopies::Batch && !batch_copy {
            // A driver older than CUDA 12.8: a forced batch copy is refused.
            let mut host = vec![0u8; awkward_host_len];
            let refused = stager.run(to_host(&mut host, &source).blocks(&awkward));
            check(
                matches!(&refused, Err(hostcopy_driver::cuda::Error::Driver(e)) if e.code() == CUDA_ERROR_NOT_SUPPORTED),
                || format!("DeviceCopies::Batch without the driver's batch copy: {refused:?}"),
            )?;
            eprintln!(
                "gpu_staging: driver older than CUDA 12.8: DeviceCopies::Batch checked refused"
            );
            continue;
        }
        let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
        // 4 KiB and 16 KiB take the gather kernel under `Auto`; 4097
        // bytes its unaligned path.
        for block in [4 << 10, 4097, 16 << 10, 64 << 10, 256 << 10, 2 << 20] {
            let blocks = random_blocks(&mut rng, TOTAL / block, block, device_len, MARGIN);
            let start = std::time::Instant::now();
            batch_both_ways(
                &mut stager,
                &mut memories,
                &blocks,
                MARGIN + TOTAL + MARGIN,
                &format!("{copies:?}, blocks of {block} bytes"),
            )?;
            eprintln!(
                "gpu_staging: {copies:?}, blocks of {block} bytes: both ways in {:.0?}",
                start.elapsed()
            );
        }
        batch_both_ways(
            &mut stager,
            &mut memories,
            &awkward,
            awkward_host_len,
            &format!("{copies:?}, awkward sizes"),
        )?;
    }
    Ok(())
}

fn scope_with_batches(context: &Context) -> Result<(), Failed> {
    const LARGE: usize = 1 << 30;
    const SMALL: usize = 100 << 10;
    const SMALL_AT: usize = 12_345;
    const BLOCK: usize = 256 << 10;
    const BLOCKS: usize = 256;
    let source = device_with(context, &pattern(LARGE, 53))?;
    let mut source_bytes = vec![0u8; LARGE];
    source.copy_to_host(0, &mut source_bytes)?;
    let blocks = random_blocks(
        &mut XorShift(0x2545_F491_4F6C_DD1D),
        BLOCKS,
        BLOCK,
        LARGE,
        0,
    );

    let mut large = vec![0u8; LARGE];
    let mut small = vec![0u8; SMALL];
    let mut pool = vec![UNTOUCHED; BLOCKS * BLOCK];
    let mut stager = Stager::new(context)?;
    stager.scope(|scope| -> Result<(), Failed> {
        let _left_to_the_scope = scope.start(to_host(&mut large, &source))?;
        let small = scope.start(to_host(&mut small, &source).at(SMALL_AT))?;
        let batch = scope.start(to_host(&mut pool, &source).blocks(&blocks))?;
        // Out of order; the large one left to the scope.
        batch.wait()?;
        small.wait()?;
        Ok(())
    })??;
    same(&large, &source_bytes, || "the 1 GiB transfer".into())?;
    same(&small, &source_bytes[SMALL_AT..][..SMALL], || {
        "the 100 KiB transfer".into()
    })?;
    let mut expected = vec![0u8; BLOCKS * BLOCK];
    for block in &blocks {
        expected[block.host_offset..][..block.len]
            .copy_from_slice(&source_bytes[block.device_offset..][..block.len]);
    }
    same(&pool, &expected, || "the batch".into())
}

/// Released by `beside_a_blocked_host_function` once its transfers are
/// done, or given up on.
static RELEASE_BLOCKED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Another library's host function: holds the context's host-function
/// thread until released.
unsafe extern "C" fn blocked_host_function(_: *mut core::ffi::c_void) {
    while !RELEASE_BLOCKED.load(std::sync::atomic::Ordering::Acquire) {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// While another stream's host function holds the context's one
/// host-function thread, a staged transfer each way completes: the stager
/// queues no host function (its copier thread makes the host side). A
/// stager whose chunks were copied by host functions waits behind it until
/// it is released, and this test fails by its deadline.
fn beside_a_blocked_host_function(context: &Context) -> Result<(), Failed> {
    use std::sync::atomic::Ordering;
    use std::time::Duration;
    let len = (64 << 20) + 4_099;
    let expected = pattern(len, 43);
    let source = device_with(context, &expected)?;
    let mut target = DeviceBuffer::new(context, len)?;
    let mut host = vec![0u8; len];
    let mut stager = Stager::new(context)?;
    let other = Stream::new(context)?;
    RELEASE_BLOCKED.store(false, Ordering::Release);
    // SAFETY: the function touches only a static; it returns once
    // released, which this test always does before it returns.
    unsafe {
        other
            .as_stream()
            .launch_host_fn(blocked_host_function, core::ptr::null_mut())
    }?;
    let (done, finished) = std::sync::mpsc::channel();
    let outcome = std::thread::scope(|scope| {
        let (stager, host, source, target) = (&mut stager, &mut host, &source, &mut target);
        scope.spawn(move || {
            let result = stager
                .run(to_host(&mut host[..], source))
                .and_then(|()| stager.run(to_device(target, &host[..])));
            let _ = done.send(result);
        });
        let outcome = finished.recv_timeout(Duration::from_secs(30));
        // Released whatever happened, so that the thread can end.
        RELEASE_BLOCKED.store(true, Ordering::Release);
        outcome
    });
    other.as_stream().synchronize()?;
    match outcome {
        Ok(result) => result?,
        Err(_) => {
            return Err("the transfers waited behind another stream's host function".into());
        }
    }
    check(host == expected, || "the download differs".into())?;
    let mut back = vec![0u8; len];
    target.copy_to_host(0, &mut back)?;
    check(back == expected, || "the upload differs".into())
}

/// A `HostBuffer` never registered, registering in the background (in
/// ranges of 16 MiB, so that the first transfers meet it half done) and
/// registered whole: each uploaded and downloaded byte-exact, and the
/// registrations end complete.
fn registered_host_buffers(context: &Context) -> Result<(), Failed> {
    let len = (256 << 20) + 12_345;
    let mut stager = Stager::new(context)?;
    for (seed, when) in [Register::Never, Register::Background, Register::Now]
        .into_iter()
        .enumerate()
    {
        let expected = pattern(len, 40 + seed as u32);
        let mut host = HostBuffer::new(len)?;
        host.copy_from_slice(&expected);
        host.register_in_ranges(context, when, 16 << 20);
        let mut target = DeviceBuffer::new(context, len)?;
        stager.run(to_device(&mut target, &host[..]))?;
        let mut back = vec![0u8; len];
        target.copy_to_host(0, &mut back)?;
        check(back == expected, || {
            format!("{when:?}: host to device differs")
        })?;
        host.fill(0);
        stager.run(to_host(&mut host[..], &target))?;
        check(host[..] == expected[..], || {
            format!("{when:?}: device to host differs")
        })?;
        let registered = host.wait_registered();
        let complete = when == Register::Never || registered.is_complete();
        check(complete, || {
            format!("{when:?}: registration ended {registered:?}")
        })?;
    }
    Ok(())
}
