//! GPU tests of staged transfers (`cuda::staging`) against the real driver:
//! byte-exact in both directions for sizes that are not multiples of the
//! chunk, unaligned host buffers, zero bytes, a never-touched destination,
//! default options and several transfers in flight, and the driver
//! behaviour the stager's error path rests on (its streams drain while
//! another stream captures; the context does not). Elsewhere each reports
//! itself ignored and why.

mod gpu_support;

use gpu_support::{check, pattern};
use hostcopy_driver::cuda::staging::{DEFAULT_CHUNK, Stager, StagingOptions, Stores};
use hostcopy_driver::cuda::{CaptureMode, Context, DeviceBuffer, Stream};
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
    stager.device_to_host(&mut host, &device)?;
    check(host == expected, || {
        format!("{len} bytes device to host differ ({options:?})")
    })?;

    let upload = pattern(len, seed + 1);
    let mut target = DeviceBuffer::new(context, len)?;
    stager.host_to_device(&mut target, &upload)?;
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
            .build();
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
    stager.device_to_host_at(&mut host[3..], &device, 5)?;
    check(host[3..] == expected[5..], || {
        "device to host at odd offsets".into()
    })?;
    check(host[..3] == [0, 0, 0], || {
        "bytes before the destination were written".into()
    })?;

    let upload = pattern(len + 1, 11);
    let mut target = DeviceBuffer::new(context, len + 7)?;
    stager.host_to_device_at(&mut target, 7, &upload[1..])?;
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
    stager.device_to_host(&mut empty, &device)?;
    stager.host_to_device(&mut device, &empty)?;
    let mut none = DeviceBuffer::new(context, 0)?;
    stager.host_to_device(&mut none, &empty)?;
    Ok(())
}

fn never_touched(context: &Context) -> Result<(), Failed> {
    let len = (256 << 20) + 3;
    let expected = pattern(len, 21);
    let device = device_with(context, &expected)?;
    let mut stager = Stager::new(context)?;
    // Zero pages mapped lazily: the workers take the faults.
    let mut host = vec![0u8; len];
    stager.device_to_host(&mut host, &device)?;
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
            transfers.push(scope.device_to_host_at(part, &device, index * piece)?);
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
    let made = Stager::new(context).map_err(hostcopy_driver::cuda::Error::from);
    let mut host = vec![0u8; len];
    let during = made.and_then(|mut stager| {
        stager.device_to_host(&mut host, &source)?;
        stager.host_to_device(&mut target, &expected)?;
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
    stager.device_to_host(&mut host, &source)?;
    check(host == expected, || {
        "a transfer after the refused capture differs".into()
    })
}
