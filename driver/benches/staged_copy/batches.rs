//! Batched transfers of scattered blocks, the caller's share of a scope
//! transfer, and one transfer against the link, each beside the driver's
//! own ways of doing the same.
//!
//! - Scattered blocks: 1 GiB (64 MiB with `--quick`) in blocks of 4 KiB,
//!   16 KiB, 64 KiB, 256 KiB and 2 MiB, at random distinct slots of a device buffer twice
//!   that size, packed one after the other in pre-faulted pageable memory.
//!   D2H: a loop of `cuMemcpyDtoH` into pageable memory (the driver's
//!   loop, what `x driver` compares with), `cuMemcpyBatchAsync` into
//!   pageable and into pinned memory (`x pinned` compares with the
//!   latter), a loop of `cuMemcpyDtoHAsync` into pinned memory, and the
//!   stager's batch with `DeviceCopies::Batch`, `DeviceCopies::Loop` and
//!   `DeviceCopies::Kernel` (the gather kernel). H2D: a loop of
//!   `cuMemcpyHtoD` from pageable memory, `cuMemcpyBatchAsync` from pinned
//!   memory and the stager's three. The
//!   layer does not expose the batch copy, so it is called here from
//!   libcuda opened as the layer opens it; where the driver lacks it, or
//!   with `--simulated`, its rows say "not run" and why.
//! - Caller share: the call that starts a scope transfer
//!   (`scope.start`) against the whole scope, 64 MiB to 16 GiB D2H
//!   and 1 GiB and 16 GiB H2D (64 MiB only with `--quick`; sizes above
//!   `--max-gib`, or that do not fit, are skipped). Target: under 2%.
//! - One transfer: 64 MiB, 256 MiB and 1 GiB (64 MiB with `--quick`), both
//!   ways, through the blocking call and through a scope, beside pinned
//!   memory of the same size (targets: 92% / 85% of pinned D2H / H2D at
//!   64 MiB, 95% / 90% at 256 MiB, 97% / 94% at 1 GiB).
//!
//! Every row's bytes are checked after its runs (the program stops at the
//! first wrong byte), so no wrong fast path is reported.

use std::time::{Duration, Instant};

use hostcopy_driver::cuda::staging::{
    Block, DeviceCopies, Stager, StagingOptions, to_device, to_host,
};
use hostcopy_driver::cuda::{CUdeviceptr, Context, DeviceBuffer, Error, PinnedBuffer, Stream};

use crate::machine::host_available;
use crate::paths::{self, Direction, Timed, timed};
use crate::report::{Reference, Report, gbps, not_run, row};
use crate::table::{median, size};
use crate::{Bench, Options};

/// Runs the three groups.
pub(crate) fn run(bench: &Bench<'_>, report: &mut Report) -> Result<(), Error> {
    let (context, options, reference) = (bench.context, bench.options, bench.reference);
    let batch_copy = BatchCopy::open(options);
    if options.runs_group("batches") {
        scattered(context, options, batch_copy.as_ref(), report)?;
        caller_share(context, options, reference, report)?;
    }
    if options.runs_group("one-transfer") {
        one_transfer(context, options, report)?;
        interleaved(context, options, report)?;
    }
    Ok(())
}

// ---------------------------------------------------------------------
// Test data and checks.

/// Fills `buffer` with a pattern of `seed` on every core (a fresh buffer's
/// pages are first touched there too): each 8-byte word a distinct hash of
/// its index, so a block copied to the wrong place never matches.
fn fill(buffer: &mut [u8], seed: u64) {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let piece = buffer.len().div_ceil(threads).next_multiple_of(8).max(8);
    std::thread::scope(|scope| {
        for (index, part) in buffer.chunks_mut(piece).enumerate() {
            scope.spawn(move || {
                let first = (index * piece / 8) as u64;
                for (word, bytes) in part.chunks_mut(8).enumerate() {
                    let value = ((first + word as u64) ^ seed).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                    let value = value ^ (value >> 29);
                    bytes.copy_from_slice(&value.to_le_bytes()[..bytes.len()]);
                }
            });
        }
    });
}

/// A pageable buffer of `len` bytes, filled (so pre-faulted) with `seed`'s
/// pattern.
fn filled(len: usize, seed: u64) -> Vec<u8> {
    let mut buffer = vec![0u8; len];
    fill(&mut buffer, seed);
    buffer
}

/// Stops the program if `got` differs from `expected` (compared on every
/// core).
fn check_same(what: &str, got: &[u8], expected: &[u8]) {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let piece = got.len().div_ceil(threads).max(1);
    let same = got.len() == expected.len()
        && std::thread::scope(|scope| {
            let parts: Vec<_> = got
                .chunks(piece)
                .zip(expected.chunks(piece))
                .map(|(a, b)| scope.spawn(move || a == b))
                .collect();
            parts
                .into_iter()
                .all(|part| part.join().expect("a comparing thread"))
        });
    if !same {
        eprintln!("staged_copy: {what}: wrong bytes");
        std::process::exit(1);
    }
}

/// Stops the program unless every block's bytes at its host offset of
/// `host` equal those at its device offset of `device` (device memory read
/// back, or its source).
fn check_blocks(what: &str, blocks: &[Block], host: &[u8], device: &[u8]) {
    for (index, block) in blocks.iter().enumerate() {
        if host[block.host_offset..][..block.len] != device[block.device_offset..][..block.len] {
            eprintln!("staged_copy: {what}: block {index} has wrong bytes");
            std::process::exit(1);
        }
    }
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
}

/// `total / len` blocks of `len` bytes at distinct random slots of a device
/// buffer of `device_len` bytes (cut into slots of `len`), packed one after
/// the other in host memory.
fn random_blocks(rng: &mut XorShift, total: usize, len: usize, device_len: usize) -> Vec<Block> {
    let count = total / len;
    let slots = device_len / len;
    let mut all: Vec<usize> = (0..slots).collect();
    for i in 0..count.min(slots) {
        let j = i + (rng.next() % (slots - i) as u64) as usize;
        all.swap(i, j);
    }
    all.truncate(count);
    all.into_iter()
        .enumerate()
        .map(|(index, slot)| Block::new(slot * len, index * len, len))
        .collect()
}

// ---------------------------------------------------------------------
// The driver's batch copy, through the layer.

/// The driver's batch copy (`cuMemcpyBatchAsync`), through the layer's
/// [`StreamRef::copy_batch`](hostcopy_driver::cuda::StreamRef::copy_batch).
#[derive(Clone, Copy)]
struct BatchCopy;

impl BatchCopy {
    /// The batch copy, where the rows can use it; `Err` says why not.
    fn open(options: &Options) -> Result<BatchCopy, String> {
        if options.simulated {
            return Err("--simulated: the simulator's batch copy takes pinned memory only".into());
        }
        Ok(BatchCopy)
    }

    /// Copies `sizes[i]` bytes from `srcs[i]` to `dsts[i]`, every `i`, in
    /// one driver call on `stream` (sources read in stream order), then
    /// waits for the stream, also after an error.
    ///
    /// # Safety
    ///
    /// As for [`StreamRef::copy_batch`](hostcopy_driver::cuda::StreamRef::copy_batch),
    /// until this returns.
    unsafe fn copy(
        self,
        stream: &Stream,
        dsts: &mut [CUdeviceptr],
        srcs: &mut [CUdeviceptr],
        sizes: &mut [usize],
    ) -> Result<(), String> {
        // SAFETY: our caller's ranges, untouched until the stream is
        // synchronized below.
        let queued = unsafe { stream.as_stream().copy_batch(dsts, srcs, sizes) };
        let synchronized = stream.as_stream().synchronize();
        match queued {
            Ok(true) => synchronized.map_err(|error| error.to_string()),
            Ok(false) => Err("the driver has no cuMemcpyBatchAsync (CUDA 12.8 on)".into()),
            Err(error) => Err(format!("cuMemcpyBatchAsync refused: {error}")),
        }
    }
}

/// Host addresses as the batch copy takes them (`CUdeviceptr` values).
fn host_address(base: *const u8, offset: usize) -> CUdeviceptr {
    base.wrapping_add(offset).expose_provenance() as CUdeviceptr
}

// ---------------------------------------------------------------------
// Scattered blocks.

/// A measured row, or why it was not run.
type Outcome = Result<Timed, String>;

/// Times a row of raw batch copies: `Err` with the reason where there is
/// no batch copy or the driver refused it.
fn raw_rows(
    batch_copy: Result<&BatchCopy, &String>,
    runs: usize,
    mut once: impl FnMut(BatchCopy) -> Result<(), String>,
) -> Outcome {
    let batch_copy = *batch_copy.map_err(Clone::clone)?;
    let mut failure = None;
    let times = timed(runs, || {
        if failure.is_some() {
            return Ok(Duration::ZERO);
        }
        let start = Instant::now();
        if let Err(reason) = once(batch_copy) {
            failure = Some(reason);
        }
        Ok(start.elapsed())
    })
    .map_err(|error: Error| error.to_string())?;
    match failure {
        Some(reason) => Err(reason),
        None => Ok(Timed::plain(times)),
    }
}

/// One scattered-block table row.
fn push(
    report: &mut Report,
    group: &str,
    path: &str,
    bytes: usize,
    outcome: &Outcome,
    pinned: f64,
    driver: f64,
) {
    report.rows.push(match outcome {
        Ok(timed) => row(group, path, bytes, timed, pinned, driver),
        Err(reason) => not_run(group, path, bytes, reason),
    });
}

/// A group's rows: the driver's paths called directly, then the stager's,
/// each beside the batch copy with pinned memory and the driver's loop.
fn push_group(
    report: &mut Report,
    group: &str,
    bytes: usize,
    direct: &[(&str, &Outcome)],
    staged: &[(String, Outcome)],
    pinned: &Outcome,
    driver: &Outcome,
) {
    let (pinned, driver) = (figure(bytes, pinned), figure(bytes, driver));
    let staged = staged
        .iter()
        .map(|(path, outcome)| (path.as_str(), outcome));
    for (path, outcome) in direct.iter().copied().chain(staged) {
        push(report, group, path, bytes, outcome, pinned, driver);
    }
}

fn figure(bytes: usize, outcome: &Outcome) -> f64 {
    outcome
        .as_ref()
        .map_or(f64::NAN, |timed| gbps(bytes, timed))
}

fn scattered(
    context: &Context,
    options: &Options,
    batch_copy: Result<&BatchCopy, &String>,
    report: &mut Report,
) -> Result<(), Error> {
    let total: usize = if options.quick { 64 << 20 } else { 1 << 30 };
    let device_len = 2 * total;
    let runs = options.runs;
    // What the device holds: a pattern uploaded by the driver.
    let mut image = filled(device_len, 1);
    let mut device = DeviceBuffer::new(context, device_len)?;
    device.copy_from_host(0, &image)?;
    let mut host = filled(total, 2);
    let mut pinned = PinnedBuffer::new(context, total)?;
    let stream = Stream::new(context)?;
    let with_copies = |copies| -> Result<Stager, Error> {
        let options = StagingOptions::builder().device_copies(copies).build()?;
        Stager::with_options(context, options)
    };
    let mut batch_stager = with_copies(DeviceCopies::Batch)?;
    let mut loop_stager = with_copies(DeviceCopies::Loop)?;
    let mut kernel_stager = with_copies(DeviceCopies::Kernel)?;
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let block_sizes = [4usize << 10, 16 << 10, 64 << 10, 256 << 10, 2 << 20];
    let placements: Vec<Vec<Block>> = block_sizes
        .iter()
        .map(|&len| random_blocks(&mut rng, total, len, device_len))
        .collect();

    for (&len, blocks) in block_sizes.iter().zip(&placements) {
        let group = format!(
            "scattered {} blocks, D2H (x pinned: of cuMemcpyBatchAsync into pinned; x driver: of the loop of cuMemcpyDtoH)",
            size(len)
        );
        let what = |path: &str| format!("scattered {} D2H, {path}", size(len));

        fill(&mut host, 3);
        let driver_loop = timed(runs, || {
            let start = Instant::now();
            for block in blocks {
                device.copy_to_host(
                    block.device_offset,
                    &mut host[block.host_offset..][..block.len],
                )?;
            }
            Ok(start.elapsed())
        })?;
        check_blocks(&what("driver loop"), blocks, &host, &image);
        let driver_loop: Outcome = Ok(Timed::plain(driver_loop));

        fill(&mut host, 4);
        let host_base = host.as_mut_ptr();
        let (mut dsts, mut srcs, mut sizes) = arrays(blocks, |block| {
            (
                host_address(host_base, block.host_offset),
                device.raw() + block.device_offset as CUdeviceptr,
            )
        });
        let batch_pageable = raw_rows(batch_copy, runs, |batch| {
            // SAFETY: `random_blocks` puts each block in its own slot inside
            // `device_len` bytes (the device buffer, of this context, alive)
            // and packs the host ranges, disjoint, inside `total` bytes
            // (`host`'s length); nothing touches `host` until `copy` has
            // waited for the stream.
            unsafe { batch.copy(&stream, &mut dsts, &mut srcs, &mut sizes) }
        });
        if batch_pageable.is_ok() {
            check_blocks(&what("batch, pageable"), blocks, &host, &image);
        }

        fill(&mut pinned, 5);
        let pinned_base = pinned.raw_ptr();
        let (mut dsts, mut srcs, mut sizes) = arrays(blocks, |block| {
            (
                host_address(pinned_base, block.host_offset),
                device.raw() + block.device_offset as CUdeviceptr,
            )
        });
        let batch_pinned = raw_rows(batch_copy, runs, |batch| {
            // SAFETY: as above, with the host ranges inside the pinned
            // buffer of `total` bytes, untouched until `copy` has waited.
            unsafe { batch.copy(&stream, &mut dsts, &mut srcs, &mut sizes) }
        });
        if batch_pinned.is_ok() {
            check_blocks(&what("batch, pinned"), blocks, &pinned, &image);
        }

        fill(&mut pinned, 6);
        let async_loop = timed(runs, || {
            let start = Instant::now();
            let queued = blocks.iter().try_for_each(|block| {
                // SAFETY: `random_blocks` packs the host ranges, disjoint,
                // inside `total` bytes (the pinned buffer's length; the
                // device side is checked by the call), and nothing touches
                // the pinned buffer until the stream is synchronized below,
                // also after an error.
                unsafe {
                    stream.as_stream().copy_device_to_host(
                        pinned_base.wrapping_add(block.host_offset),
                        &device,
                        block.device_offset,
                        block.len,
                    )
                }
            });
            let synchronized = stream.as_stream().synchronize();
            queued?;
            synchronized?;
            Ok(start.elapsed())
        })?;
        check_blocks(&what("async loop, pinned"), blocks, &pinned, &image);
        let async_loop: Outcome = Ok(Timed::plain(async_loop));

        let mut staged: Vec<(String, Outcome)> = Vec::new();
        let stagers = [
            (&mut batch_stager, 7),
            (&mut loop_stager, 8),
            (&mut kernel_stager, 9),
        ];
        for (stager, seed) in stagers {
            fill(&mut host, seed);
            let outcome = timed(runs, || {
                let start = Instant::now();
                stager.run(to_host(&mut host, &device).blocks(blocks))?;
                Ok(start.elapsed())
            })?;
            let path = format!(
                "staged, DeviceCopies::{:?}",
                stager.options().device_copies()
            );
            check_blocks(&what(&path), blocks, &host, &image);
            staged.push((path, Ok(Timed::plain(outcome))));
        }

        let direct = [
            ("loop of cuMemcpyDtoH, pageable", &driver_loop),
            ("cuMemcpyBatchAsync, pageable", &batch_pageable),
            ("cuMemcpyBatchAsync, pinned", &batch_pinned),
            ("loop of cuMemcpyDtoHAsync, pinned", &async_loop),
        ];
        push_group(
            report,
            &group,
            total,
            &direct,
            &staged,
            &batch_pinned,
            &driver_loop,
        );
    }

    // Host to device: the device's bytes read back into `image` after each
    // row, whose source has a pattern of its own (a row that wrote nothing
    // would leave the previous row's bytes).
    for (&len, blocks) in block_sizes.iter().zip(&placements) {
        let group = format!(
            "scattered {} blocks, H2D (x pinned: of cuMemcpyBatchAsync from pinned; x driver: of the loop of cuMemcpyHtoD)",
            size(len)
        );
        let what = |path: &str| format!("scattered {} H2D, {path}", size(len));

        fill(&mut host, 11);
        let driver_loop = timed(runs, || {
            let start = Instant::now();
            for block in blocks {
                device
                    .copy_from_host(block.device_offset, &host[block.host_offset..][..block.len])?;
            }
            Ok(start.elapsed())
        })?;
        device.copy_to_host(0, &mut image)?;
        check_blocks(&what("driver loop"), blocks, &host, &image);
        let driver_loop: Outcome = Ok(Timed::plain(driver_loop));

        fill(&mut pinned, 12);
        let pinned_base = pinned.raw_ptr();
        let (mut dsts, mut srcs, mut sizes) = arrays(blocks, |block| {
            (
                device.raw() + block.device_offset as CUdeviceptr,
                host_address(pinned_base, block.host_offset),
            )
        });
        let batch_pinned = raw_rows(batch_copy, runs, |batch| {
            // SAFETY: `random_blocks` puts each block in its own slot inside
            // `device_len` bytes (the device buffer, of this context, alive;
            // destinations disjoint) and its host range inside `total`
            // bytes (the pinned buffer's length), which nothing writes
            // until `copy` has waited for the stream.
            unsafe { batch.copy(&stream, &mut dsts, &mut srcs, &mut sizes) }
        });
        if batch_pinned.is_ok() {
            device.copy_to_host(0, &mut image)?;
            check_blocks(&what("batch, pinned"), blocks, &pinned, &image);
        }

        let mut staged: Vec<(String, Outcome)> = Vec::new();
        let stagers = [
            (&mut batch_stager, 13),
            (&mut loop_stager, 14),
            (&mut kernel_stager, 15),
        ];
        for (stager, seed) in stagers {
            fill(&mut host, seed);
            let outcome = timed(runs, || {
                let start = Instant::now();
                stager.run(to_device(&mut device, &host).blocks(blocks))?;
                Ok(start.elapsed())
            })?;
            let path = format!(
                "staged, DeviceCopies::{:?}",
                stager.options().device_copies()
            );
            device.copy_to_host(0, &mut image)?;
            check_blocks(&what(&path), blocks, &host, &image);
            staged.push((path, Ok(Timed::plain(outcome))));
        }

        let direct = [
            ("loop of cuMemcpyHtoD, pageable", &driver_loop),
            ("cuMemcpyBatchAsync, pinned", &batch_pinned),
        ];
        push_group(
            report,
            &group,
            total,
            &direct,
            &staged,
            &batch_pinned,
            &driver_loop,
        );
    }
    Ok(())
}

/// The batch copy's three arrays for `blocks`, with `ends` giving each
/// block's destination and source.
fn arrays(
    blocks: &[Block],
    ends: impl Fn(&Block) -> (CUdeviceptr, CUdeviceptr),
) -> (Vec<CUdeviceptr>, Vec<CUdeviceptr>, Vec<usize>) {
    let (dsts, srcs) = blocks.iter().map(ends).unzip();
    (dsts, srcs, blocks.iter().map(|block| block.len).collect())
}

// ---------------------------------------------------------------------
// The caller's share of a scope transfer.

/// The call that starts a scope transfer against the whole scope.
fn caller_share(
    context: &Context,
    options: &Options,
    reference: &Reference,
    report: &mut Report,
) -> Result<(), Error> {
    let candidates: Vec<usize> = [64usize << 20, 256 << 20, 1 << 30, 4 << 30, 16 << 30]
        .into_iter()
        .filter(|&bytes| bytes <= options.max_bytes)
        .collect();
    // The largest size that fits: every smaller one uses the start of its
    // buffers.
    let mut fitted = None;
    for &bytes in candidates.iter().rev() {
        if bytes > host_available() / 2 {
            println!(
                "  caller share: {} skipped: more than half the host's available memory",
                size(bytes)
            );
            continue;
        }
        match DeviceBuffer::new(context, bytes) {
            Ok(device) => {
                fitted = Some((bytes, device));
                break;
            }
            Err(error) => println!(
                "  caller share: {} skipped: no device memory ({error})",
                size(bytes)
            ),
        }
    }
    let Some((largest, mut device)) = fitted else {
        return Ok(());
    };
    let mut source = filled(largest, 21);
    device.copy_from_host(0, &source)?;
    let mut host = filled(largest, 22);
    let mut stager = Stager::new(context)?;
    let runs = options.runs;

    let group = "caller share of a scope transfer, D2H (last column: the call that starts it / the whole scope; target < 2%)";
    for &bytes in candidates.iter().filter(|&&bytes| bytes <= largest) {
        let staged = paths::staged_d2h(&mut stager, &device, &mut host[..bytes], runs)?;
        check_same(
            &format!("caller share D2H {}", size(bytes)),
            &host[..bytes],
            &source[..bytes],
        );
        share_note(report, "D2H", bytes, &staged);
        report.rows.push(row(
            group,
            "staged, scope",
            bytes,
            &staged,
            reference.pinned_d2h,
            f64::NAN,
        ));
    }

    // From a pattern of its own, read back into `source`.
    let h2d_sizes: &[usize] = if options.quick {
        &[64 << 20]
    } else {
        &[1 << 30, 16 << 30]
    };
    let group = "caller share of a scope transfer, H2D (last column: the call that starts it / the whole scope; target < 2%)";
    let mut upload = host;
    fill(&mut upload, 23);
    for &bytes in h2d_sizes.iter().filter(|&&bytes| bytes <= largest) {
        let staged = paths::staged_h2d(&mut stager, &mut device, &upload[..bytes], runs)?;
        device.copy_to_host(0, &mut source[..bytes])?;
        check_same(
            &format!("caller share H2D {}", size(bytes)),
            &source[..bytes],
            &upload[..bytes],
        );
        share_note(report, "H2D", bytes, &staged);
        report.rows.push(row(
            group,
            "staged, scope",
            bytes,
            &staged,
            reference.pinned_h2d,
            f64::NAN,
        ));
    }
    Ok(())
}

fn share_note(report: &mut Report, direction: &str, bytes: usize, staged: &Timed) {
    let share = 100.0 * staged.caller_share;
    report.notes.push(format!(
        "caller share, {direction} {}: {share:.2}% of the scope in the call that starts the transfer ({}; target < 2%)",
        size(bytes),
        if share < 2.0 { "met" } else { "missed" }
    ));
}

// ---------------------------------------------------------------------
// One transfer against the link.

/// The targets of one transfer, in percent of pinned memory of the same
/// size: (bytes, D2H, H2D).
const ONE_TRANSFER_TARGETS: [(usize, u32, u32); 3] =
    [(64 << 20, 92, 85), (256 << 20, 95, 90), (1 << 30, 97, 94)];

/// One transfer of 64 MiB, 256 MiB and 1 GiB (64 MiB only with `--quick`),
/// both ways, through the blocking call and through a scope, beside pinned
/// memory of the same size: where a transfer's fixed costs (filling the
/// first staging buffer, draining the last) show.
fn one_transfer(context: &Context, options: &Options, report: &mut Report) -> Result<(), Error> {
    let sizes = if options.quick {
        &ONE_TRANSFER_TARGETS[..1]
    } else {
        &ONE_TRANSFER_TARGETS[..]
    };
    let mut stager = Stager::new(context)?;
    for &(bytes, d2h_target, h2d_target) in sizes {
        if host_available() < 3 * bytes {
            report.notes.push(format!(
                "one transfer of {}: not run, too little host memory",
                size(bytes)
            ));
            continue;
        }
        let mut memory = TransferMemory::new(context, bytes, 31)?;
        for (direction, target) in [(Direction::D2H, d2h_target), (Direction::H2D, h2d_target)] {
            let name = direction_name(direction);
            let group = format!(
                "one transfer, {} {name} (x pinned: pinned {name} of the same size)",
                size(bytes)
            );
            let link = link_row(
                context,
                &mut stager,
                &mut memory,
                direction,
                &group,
                options,
                report,
            )?;
            let mut ratios = Vec::new();
            for (scope, seed) in [(false, 34), (true, 35)] {
                let path = one_transfer_path(scope);
                let label = format!("one transfer {name} {}, {path}", size(bytes));
                let staged =
                    memory.staged(&mut stager, direction, scope, seed, options.runs, &label)?;
                ratios.push(format!(
                    "{path} {:.1}%",
                    100.0 * gbps(bytes, &staged) / link
                ));
                report
                    .rows
                    .push(row(&group, path, bytes, &staged, link, f64::NAN));
            }
            report.notes.push(format!(
                "one transfer, {name} {} of pinned (target >= {target}%): {}",
                size(bytes),
                ratios.join(", ")
            ));
        }
    }
    Ok(())
}

/// A device buffer holding a known pattern and the host memory a transfer
/// of it goes to and comes from.
struct TransferMemory {
    source: Vec<u8>,
    device: DeviceBuffer,
    host: Vec<u8>,
    back: Vec<u8>,
}

impl TransferMemory {
    fn new(context: &Context, bytes: usize, seed: u64) -> Result<TransferMemory, Error> {
        let source = filled(bytes, seed);
        let mut device = DeviceBuffer::new(context, bytes)?;
        device.copy_from_host(0, &source)?;
        Ok(TransferMemory {
            source,
            device,
            host: filled(bytes, seed + 1),
            back: filled(bytes, seed + 2),
        })
    }

    /// One staged path, timed, then checked byte for byte: D2H into the
    /// host memory, or H2D of the host memory filled with `seed` (a
    /// pattern per row: one that wrote nothing would leave the previous
    /// row's bytes), read back.
    fn staged(
        &mut self,
        stager: &mut Stager,
        direction: Direction,
        scope: bool,
        seed: u64,
        runs: usize,
        label: &str,
    ) -> Result<Timed, Error> {
        fill(&mut self.host, seed);
        Ok(match direction {
            Direction::D2H => {
                let staged = if scope {
                    paths::staged_d2h(stager, &self.device, &mut self.host, runs)?
                } else {
                    paths::staged_d2h_blocking(stager, &self.device, &mut self.host, runs)?
                };
                check_same(label, &self.host, &self.source);
                staged
            }
            Direction::H2D => {
                let staged = if scope {
                    paths::staged_h2d(stager, &mut self.device, &self.host, runs)?
                } else {
                    paths::staged_h2d_blocking(stager, &mut self.device, &self.host, runs)?
                };
                self.device.copy_to_host(0, &mut self.back)?;
                check_same(label, &self.back, &self.host);
                staged
            }
        })
    }
}

fn direction_name(direction: Direction) -> &'static str {
    match direction {
        Direction::D2H => "D2H",
        Direction::H2D => "H2D",
    }
}

/// Times pinned memory of the transfer's size in `direction`, pushes its
/// row to `group` and returns its GB/s (the link).
fn link_row(
    context: &Context,
    stager: &mut Stager,
    memory: &mut TransferMemory,
    direction: Direction,
    group: &str,
    options: &Options,
    report: &mut Report,
) -> Result<f64, Error> {
    let bytes = memory.source.len();
    let pinned = paths::pinned(
        context,
        stager,
        &mut memory.device,
        direction,
        bytes,
        options.runs,
    )?;
    let link = gbps(bytes, &pinned);
    report
        .rows
        .push(row(group, "pinned (link)", bytes, &pinned, link, f64::NAN));
    Ok(link)
}

/// Settings compared transfer by transfer, in rotation, each with 4
/// staging buffers: chunk MiB, chunk MiB to the device, edge chunk MiB,
/// streams, workers that copy to the host (0: all of them). The default
/// first, then edge chunks on a stream per buffer (from 2 and 4 MiB),
/// half-buffer chunks to the device with and without them, and the
/// one-stream option.
const INTERLEAVED: [(usize, usize, usize, usize, usize); 6] = [
    (16, 16, 16, 4, 0),
    (16, 16, 2, 4, 0),
    (16, 16, 4, 4, 0),
    (16, 8, 2, 4, 0),
    (16, 8, 16, 4, 0),
    (16, 8, 2, 1, 0),
];

/// The settings whose 64 MiB transfers are traced ([`timeline`]).
const TRACED: usize = 2;

/// One blocking transfer of 64 MiB, 256 MiB and 1 GiB (64 MiB with
/// `--quick`) both ways with each of [`INTERLEAVED`]'s settings and
/// through pinned memory, the settings taking turns transfer by transfer
/// (the order rotated each round) so that a machine whose speed drifts
/// during the run drifts under all of them alike: each setting's median
/// as a share of pinned memory's.
fn interleaved(context: &Context, options: &Options, report: &mut Report) -> Result<(), Error> {
    let (sizes, rounds): (&[usize], usize) = if options.quick {
        (&[64 << 20], 2)
    } else {
        (&[64 << 20, 256 << 20, 1 << 30], 4 * options.runs.max(3) - 1)
    };
    let mut stagers = Vec::new();
    for &(chunk_mib, h2d_mib, edge_mib, streams, d2h_workers) in &INTERLEAVED {
        let built = StagingOptions::builder()
            .chunk(chunk_mib << 20)
            .h2d_chunk(h2d_mib << 20)
            .buffers(4)
            .edge_chunk(edge_mib << 20)
            .streams(streams)
            .d2h_workers(if d2h_workers == 0 {
                usize::MAX
            } else {
                d2h_workers
            })
            .build()?;
        stagers.push(Stager::with_options(context, built)?);
    }
    for &bytes in sizes {
        if host_available() < 3 * bytes {
            continue;
        }
        let mut memory = TransferMemory::new(context, bytes, 71)?;
        let mut pinned = Some(PinnedBuffer::new(context, bytes)?);
        for direction in [Direction::D2H, Direction::H2D] {
            let name = direction_name(direction);
            // Times per setting; the last slot is pinned memory.
            let mut times = vec![Vec::new(); stagers.len() + 1];
            for round in 0..=rounds {
                for turn in 0..times.len() {
                    let which = (turn + round) % times.len();
                    let start = Instant::now();
                    if which == stagers.len() {
                        let buffer = pinned.take().expect("given back by each copy");
                        pinned = Some(match direction {
                            Direction::D2H => {
                                stagers[0].device_to_pinned(buffer, &memory.device, 0)?
                            }
                            Direction::H2D => {
                                stagers[0].pinned_to_device(&mut memory.device, buffer, 0)?
                            }
                        });
                    } else {
                        let stager = &mut stagers[which];
                        match direction {
                            Direction::D2H => {
                                stager.run(to_host(&mut memory.host[..], &memory.device))?
                            }
                            Direction::H2D => {
                                stager.run(to_device(&mut memory.device, &memory.host[..]))?
                            }
                        }
                    }
                    // The first round warms every setting up.
                    if round > 0 {
                        times[which].push(start.elapsed());
                    }
                }
            }
            match direction {
                Direction::D2H => check_same("interleaved, D2H", &memory.host, &memory.source),
                Direction::H2D => {
                    memory.device.copy_to_host(0, &mut memory.back)?;
                    check_same("interleaved, H2D", &memory.back, &memory.host);
                }
            }
            let link = median(&times[stagers.len()]);
            let group = format!(
                "interleaved, {} {name} (x pinned: pinned {name}, in the same rotation)",
                size(bytes)
            );
            let link_gbps = bytes as f64 / link / 1e9;
            let mut ratios = Vec::new();
            for (index, (timed, &(chunk_mib, h2d_mib, edge_mib, streams, d2h_workers))) in
                times.iter().zip(&INTERLEAVED).enumerate()
            {
                let path = format!(
                    "staged, {chunk_mib} MiB chunks ({h2d_mib} MiB to the device), edges from {edge_mib} MiB, {streams} streams, {d2h_workers} workers to the host (0: all)"
                );
                let timed = Timed::plain(timed.clone());
                ratios.push(format!(
                    "{chunk_mib}/{h2d_mib}/e{edge_mib}/s{streams}/w{d2h_workers} {:.1}%",
                    100.0 * link / median(&timed.times)
                ));
                report
                    .rows
                    .push(row(&group, &path, bytes, &timed, link_gbps, f64::NAN));
                if bytes == 64 << 20 && index < TRACED {
                    report.notes.push(timeline(
                        &mut stagers[index],
                        &mut memory,
                        direction,
                        &format!("{name} {}, {path}", size(bytes)),
                    )?);
                }
            }
            report.notes.push(format!(
                "interleaved, {name} {} of pinned (median of {rounds}; chunk MiB / to the device / edges from / streams / workers to the host, 0: all): {}",
                size(bytes),
                ratios.join(", ")
            ));
        }
    }
    Ok(())
}

/// One blocking transfer traced (`staging::trace`): when the caller
/// queued each chunk, when the copier saw it ready and made its host
/// side, and when the caller saw the end, in microseconds from the call.
fn timeline(
    stager: &mut Stager,
    memory: &mut TransferMemory,
    direction: Direction,
    label: &str,
) -> Result<String, Error> {
    traced(label, || {
        memory
            .staged(stager, direction, false, 60, 1, label)
            .map(drop)
    })
}

/// The timeline of the last transfer `run` made with the stagers' trace
/// on (`staging::trace`): per chunk, in microseconds from the call that
/// began it, when the caller queued it, when the device met its wait and
/// made its copy, when the copier saw it ready and made its host side;
/// then when the caller saw the end.
pub(crate) fn traced(
    label: &str,
    run: impl FnOnce() -> Result<(), Error>,
) -> Result<String, Error> {
    use hostcopy_driver::cuda::staging::trace::{self, Step};
    trace::start();
    let result = run();
    let marks = trace::stop();
    result?;
    // The last transfer: from its `QueueBegin` on.
    let begins: Vec<usize> = (0..marks.len())
        .filter(|&i| marks[i].step == Step::QueueBegin)
        .collect();
    let Some(&from) = begins.last() else {
        return Ok(format!("timeline, {label}: no marks"));
    };
    let zero = marks[from].nanos;
    let mut lines = vec![format!(
        "timeline, {label} (us from the call; chunk: queued / device wait met / device copied / ready / host done):"
    )];
    let at = |step: Step, chunk: u32| {
        marks[from..]
            .iter()
            .find(|m| {
                m.nanos >= zero && m.step == step && (m.chunk == chunk || step == Step::Finished)
            })
            .map_or("-".to_owned(), |m| {
                format!("{:.0}", (m.nanos.saturating_sub(zero)) as f64 / 1e3)
            })
    };
    for chunk in 0..marks[from].chunk {
        lines.push(format!(
            "  {chunk}: {} / {} / {} / {} / {}",
            at(Step::Queued, chunk),
            at(Step::DeviceWaitMet, chunk),
            at(Step::DeviceCopied, chunk),
            at(Step::Ready, chunk),
            at(Step::HostDone, chunk)
        ));
    }
    lines.push(format!("  finished: {}", at(Step::Finished, 0)));
    Ok(lines.join("\n"))
}

fn one_transfer_path(scope: bool) -> &'static str {
    if scope {
        "staged, in a scope"
    } else {
        "staged, blocking call"
    }
}
