//! The groups of whole-buffer transfers (1 GiB with default options, the
//! options around the defaults, sizes,
//! small sizes, two GPUs), each beside the pinned (link) figure and the
//! driver's pageable path of the same run.

use std::sync::Barrier;
use std::time::{Duration, Instant};

use hostcopy_driver::cuda::staging::{Stager, StagingOptions, Stores, to_device, to_host};
use hostcopy_driver::cuda::{Context, DeviceBuffer, Error};

use crate::Options;
use crate::machine::host_available;
use crate::paths::{self, Direction, Timed};
use crate::report::{Reference, Report, check, gbps, row};

/// The groups of this file, in order; the first measures the reference
/// that they and the later groups (`batches.rs`, `cudarc.rs`) compare with.
pub(crate) fn run(
    context: &Context,
    options: &Options,
    report: &mut Report,
) -> Result<Reference, Error> {
    let headline_bytes = if options.quick { 64 << 20 } else { 1 << 30 };
    let reference = headline(context, options, headline_bytes, report)?;
    if options.runs_group("sweep") {
        option_sweep(context, options, headline_bytes, &reference, report)?;
    }
    if options.runs_group("sizes") {
        sizes(context, options, &reference, report)?;
        back_to_back(context, options, &reference, report)?;
    }
    if options.runs_group("small") {
        small(context, options, report)?;
    }
    if options.runs_group("two-gpus") {
        two_gpus(options, headline_bytes, &reference, report)?;
    }
    Ok(reference)
}

/// A host buffer with a known pattern (every page touched).
fn pattern(bytes: usize, seed: u8) -> Vec<u8> {
    (0..bytes).map(|i| (i % 251) as u8 ^ seed).collect()
}

/// 1 GiB, default options, both directions; H2D with both store kinds.
fn headline(
    context: &Context,
    options: &Options,
    bytes: usize,
    report: &mut Report,
) -> Result<Reference, Error> {
    let runs = options.runs;
    let source = pattern(bytes, 7);
    let mut device = DeviceBuffer::new(context, bytes)?;
    device.copy_from_host(0, &source)?;
    let mut host = vec![1u8; bytes];
    let mut stager = Stager::new(context)?;

    let group = "D2H, default options";
    let pinned = paths::pinned(
        context,
        &mut stager,
        &mut device,
        Direction::D2H,
        bytes,
        runs,
    )?;
    let pinned_d2h = gbps(bytes, &pinned);
    let driver = paths::driver_d2h(&device, &mut host, runs)?;
    let driver_d2h = gbps(bytes, &driver);
    let staged = paths::staged_d2h(&mut stager, &device, &mut host, runs)?;
    check("staged D2H", &host, &source)?;
    let staged_d2h = gbps(bytes, &staged);
    for (path, timed) in [
        ("pinned (link)", &pinned),
        ("driver pageable", &driver),
        ("staged, defaults", &staged),
    ] {
        report
            .rows
            .push(row(group, path, bytes, timed, pinned_d2h, driver_d2h));
    }

    let group = "H2D, default options, streaming vs cached stores";
    let pinned = paths::pinned(
        context,
        &mut stager,
        &mut device,
        Direction::H2D,
        bytes,
        runs,
    )?;
    let pinned_h2d = gbps(bytes, &pinned);
    let driver = paths::driver_h2d(&mut device, &source, runs)?;
    let driver_h2d = gbps(bytes, &driver);
    for (path, timed) in [("pinned (link)", &pinned), ("driver pageable", &driver)] {
        report
            .rows
            .push(row(group, path, bytes, timed, pinned_h2d, driver_h2d));
    }
    drop(stager);
    for (stores, path) in [
        (Stores::Streaming, "staged, streaming stores"),
        (Stores::Cached, "staged, cached stores"),
    ] {
        let mut stager = Stager::with_options(
            context,
            StagingOptions::builder().h2d_stores(stores).build()?,
        )?;
        let staged = paths::staged_h2d(&mut stager, &mut device, &source, runs)?;
        device.copy_to_host(0, &mut host)?;
        check(path, &host, &source)?;
        report
            .rows
            .push(row(group, path, bytes, &staged, pinned_h2d, driver_h2d));
    }
    Ok(Reference {
        pinned_d2h,
        pinned_h2d,
        staged_d2h,
    })
}

/// The options around the defaults, D2H: chunk size, staging buffers,
/// workers; which configuration the defaults should be (and the caller's
/// share in driver calls, which falls with fewer, larger chunks).
fn option_sweep(
    context: &Context,
    options: &Options,
    bytes: usize,
    reference: &Reference,
    report: &mut Report,
) -> Result<(), Error> {
    let source = pattern(bytes, 13);
    let mut device = DeviceBuffer::new(context, bytes)?;
    device.copy_from_host(0, &source)?;
    let mut host = vec![1u8; bytes];
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let defaults = StagingOptions::default();
    let mut configs: Vec<(usize, usize, usize)> = Vec::new();
    for chunk_mib in [8, 16, 32] {
        for buffers in [3, 4, 6] {
            configs.push((chunk_mib, buffers, defaults.workers()));
        }
    }
    for workers in [cores / 2, cores.saturating_sub(2), cores.saturating_sub(1)] {
        if workers != defaults.workers() {
            configs.push((defaults.chunk() >> 20, defaults.buffers(), workers));
        }
    }
    let group = "D2H, options around the defaults";
    for (chunk_mib, buffers, workers) in configs {
        let built = StagingOptions::builder()
            .chunk(chunk_mib << 20)
            .buffers(buffers)
            .workers(workers)
            .build()?;
        let mut stager = Stager::with_options(context, built)?;
        let staged = paths::staged_d2h(&mut stager, &device, &mut host, options.runs)?;
        check("option sweep", &host, &source)?;
        let path = format!("{chunk_mib} MiB x {buffers} buffers, {workers} workers");
        report.rows.push(row(
            group,
            &path,
            bytes,
            &staged,
            reference.pinned_d2h,
            reference.staged_d2h,
        ));
    }
    report
        .notes
        .push("options around the defaults: x driver there means x the staged default".into());
    Ok(())
}

/// 64 MiB to `--max-gib`, both directions, staged vs the driver's path.
fn sizes(
    context: &Context,
    options: &Options,
    reference: &Reference,
    report: &mut Report,
) -> Result<(), Error> {
    let mut stager = Stager::new(context)?;
    let mut h2d_rows = Vec::new();
    let mut bytes = 64usize << 20;
    while bytes <= options.max_bytes {
        let size = bytes;
        bytes *= 4;
        if size > host_available() / 2 {
            println!(
                "  sizes: {} MiB skipped: more than half the host's available memory",
                size >> 20
            );
            continue;
        }
        let mut device = match DeviceBuffer::new(context, size) {
            Ok(device) => device,
            Err(error) => {
                println!(
                    "  sizes: {} MiB skipped: no device memory ({error})",
                    size >> 20
                );
                continue;
            }
        };
        let runs = if size > 1 << 30 { 2 } else { options.runs };
        let source = pattern(size, 3);
        device.copy_from_host(0, &source)?;
        let mut host = vec![1u8; size];
        let driver = paths::driver_d2h(&device, &mut host, runs)?;
        let staged = paths::staged_d2h(&mut stager, &device, &mut host, runs)?;
        check("sizes D2H", &host, &source)?;
        let d = gbps(size, &driver);
        report.rows.push(row(
            "sizes, D2H",
            "driver pageable",
            size,
            &driver,
            reference.pinned_d2h,
            d,
        ));
        report.rows.push(row(
            "sizes, D2H",
            "staged, defaults",
            size,
            &staged,
            reference.pinned_d2h,
            d,
        ));
        let driver = paths::driver_h2d(&mut device, &source, runs)?;
        let staged = paths::staged_h2d(&mut stager, &mut device, &source, runs)?;
        let d = gbps(size, &driver);
        h2d_rows.push(row(
            "sizes, H2D",
            "driver pageable",
            size,
            &driver,
            reference.pinned_h2d,
            d,
        ));
        h2d_rows.push(row(
            "sizes, H2D",
            "staged, defaults",
            size,
            &staged,
            reference.pinned_h2d,
            d,
        ));
    }
    report.rows.extend(h2d_rows);
    Ok(())
}

/// An offload loop's prefetch: eight uploads of a decoder layer's weights
/// (405 MB each, a Llama-shaped 8B layer in bf16) queued back to back in
/// one scope, the caller waiting only after the last is queued, so the
/// link need not drain between them; against the pinned link and eight
/// pageable driver copies one after another (target: >= 97% of pinned).
fn back_to_back(
    context: &Context,
    options: &Options,
    reference: &Reference,
    report: &mut Report,
) -> Result<(), Error> {
    const LAYERS: usize = 8;
    let layer = if options.quick { 16 << 20 } else { 405_000_000 };
    let total = LAYERS * layer;
    let group = "back to back, H2D";
    let path = "8 uploads queued, staged";
    if total > host_available() / 2 {
        report.rows.push(crate::report::not_run(
            group,
            path,
            total,
            "more than half the host's available memory",
        ));
        return Ok(());
    }
    let mut devices = Vec::with_capacity(LAYERS);
    for _ in 0..LAYERS {
        devices.push(DeviceBuffer::new(context, layer)?);
    }
    let source = pattern(total, 9);
    let mut stager = Stager::new(context)?;
    let queued = paths::timed(options.runs, || {
        let start = Instant::now();
        stager.scope(|scope| -> Result<(), Error> {
            let started = devices
                .iter_mut()
                .zip(source.chunks(layer))
                .map(|(device, weights)| scope.start(to_device(device, weights)))
                .collect::<Result<Vec<_>, _>>()?;
            for transfer in started {
                transfer.wait()?;
            }
            Ok(())
        })??;
        Ok(start.elapsed())
    })?;
    let driver = paths::timed(options.runs, || {
        let start = Instant::now();
        for (device, weights) in devices.iter_mut().zip(source.chunks(layer)) {
            device.copy_from_host(0, weights)?;
        }
        Ok(start.elapsed())
    })?;
    let mut back = vec![0u8; layer];
    devices[LAYERS - 1].copy_to_host(0, &mut back)?;
    check("back to back H2D", &back, &source[(LAYERS - 1) * layer..])?;
    let driver = Timed::plain(driver);
    let d = gbps(total, &driver);
    report.rows.push(row(
        group,
        "8 driver copies, pageable",
        total,
        &driver,
        reference.pinned_h2d,
        d,
    ));
    report.rows.push(row(
        group,
        path,
        total,
        &Timed::plain(queued),
        reference.pinned_h2d,
        d,
    ));
    Ok(())
}

/// 4 KiB to 4 MiB, staged (no crossover) vs the driver's path, per call;
/// and a scope's transfer with the default options (below the crossover
/// on the stager's own driver path when the stager is idle), each way,
/// against the driver's path (target: >= 1.0x from 4 KiB to 2 MiB).
fn small(context: &Context, options: &Options, report: &mut Report) -> Result<(), Error> {
    let all_staged = StagingOptions::builder().driver_path_below(0).build()?;
    let mut stager = Stager::with_options(context, all_staged)?;
    let mut by_default = Stager::new(context)?;
    let mut device = DeviceBuffer::new(context, 4 << 20)?;
    let mut host = vec![1u8; 4 << 20];
    let mut never_slower_from = None;
    let mut scope_worst: Option<(f64, usize, &str)> = None;
    // Printed after the D2H table, as a table of their own.
    let mut h2d_rows = Vec::new();
    let mut size = 4usize << 10;
    while size <= 4 << 20 {
        let dst = &mut host[..size];
        let driver = paths::driver_d2h(&device, dst, options.small_reps)?;
        let staged = paths::staged_d2h(&mut stager, &device, dst, options.small_reps)?;
        let scoped = paths::staged_d2h(&mut by_default, &device, dst, options.small_reps)?;
        let driver_up = paths::driver_h2d(&mut device, dst, options.small_reps)?;
        let scoped_up = paths::staged_h2d(&mut by_default, &mut device, dst, options.small_reps)?;
        let (d, s) = (gbps(size, &driver), gbps(size, &staged));
        let du = gbps(size, &driver_up);
        for (name, timed, against, direction) in [
            ("scope, default options", &scoped, d, "D2H"),
            ("scope, default options", &scoped_up, du, "H2D"),
        ] {
            let ratio = gbps(size, timed) / against;
            let rows = if direction == "D2H" {
                &mut report.rows
            } else {
                &mut h2d_rows
            };
            let group = if direction == "D2H" {
                "small, D2H (crossover)"
            } else {
                "small, H2D (scope)"
            };
            rows.push(row(group, name, size, timed, f64::NAN, against));
            if size <= 2 << 20 && scope_worst.is_none_or(|(worst, _, _)| ratio < worst) {
                scope_worst = Some((ratio, size, direction));
            }
        }
        h2d_rows.push(row(
            "small, H2D (scope)",
            "driver pageable",
            size,
            &driver_up,
            f64::NAN,
            du,
        ));
        report.rows.push(row(
            "small, D2H (crossover)",
            "driver pageable",
            size,
            &driver,
            f64::NAN,
            d,
        ));
        report.rows.push(row(
            "small, D2H (crossover)",
            "staged, all sizes",
            size,
            &staged,
            f64::NAN,
            d,
        ));
        match (s >= d, never_slower_from) {
            (true, None) => never_slower_from = Some(size),
            (false, _) => never_slower_from = None,
            _ => {}
        }
        size *= 2;
    }
    report.notes.push(match never_slower_from {
        Some(size) => format!(
            "crossover: staging is never slower than the driver's path from {} KiB up (DRIVER_PATH_BELOW is {} KiB)",
            size >> 10,
            hostcopy_driver::cuda::staging::DRIVER_PATH_BELOW >> 10
        ),
        None => "crossover: staging is slower than the driver's path at 4 MiB: above this table".into(),
    });
    report.rows.extend(h2d_rows);
    if let Some((ratio, size, direction)) = scope_worst {
        report.notes.push(format!(
            "a scope's small transfer, default options: at worst {ratio:.2}x the driver's path ({direction}, {} KiB; target >= 1.0x from 4 KiB to 2 MiB)",
            size >> 10
        ));
    }
    Ok(())
}

/// Two GPUs at once, one stager each (options `stagers(2)`: half the
/// cores each), on their own threads: the aggregate over the slower time.
/// Beside the default split, fewer workers per stager, to show how much
/// of the machine two stagers need.
fn two_gpus(
    options: &Options,
    bytes: usize,
    reference: &Reference,
    report: &mut Report,
) -> Result<(), Error> {
    if Context::device_count()? < 2 {
        report
            .notes
            .push("two GPUs: one GPU here, not measured".into());
        return Ok(());
    }
    let default = hostcopy_driver::cuda::staging::default_workers(2);
    let mut splits = vec![default];
    splits.extend(
        [default * 3 / 4, default / 2]
            .into_iter()
            .filter(|&w| w > 0 && w != default),
    );
    let total = 2 * bytes;
    for (index, workers) in splits.into_iter().enumerate() {
        let aggregate = two_gpus_once(options.runs, bytes, workers)?;
        let path = format!("staged, {workers} workers each, aggregate");
        report.rows.push(row(
            "two GPUs at once, D2H (x pinned: of two links)",
            &path,
            total,
            &aggregate,
            2.0 * reference.pinned_d2h,
            f64::NAN,
        ));
        if index == 0 {
            report.notes.push(format!(
                "two GPUs: aggregate {:.1} GB/s = {:.2}x one GPU's staged default ({:.1} GB/s)",
                gbps(total, &aggregate),
                gbps(total, &aggregate) / reference.staged_d2h,
                reference.staged_d2h
            ));
        }
    }
    Ok(())
}

/// One stager per GPU with `workers` workers each, both transferring
/// `bytes` at once, `runs` times after a warm-up: the slower of each pair.
fn two_gpus_once(runs: usize, bytes: usize, workers: usize) -> Result<Timed, Error> {
    let barrier = Barrier::new(2);
    let results: Vec<Result<Vec<Duration>, Error>> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..2)
            .map(|ordinal| {
                let barrier = &barrier;
                scope.spawn(move || -> Result<Vec<Duration>, Error> {
                    let context = Context::primary(ordinal)?;
                    let source = pattern(bytes, 5);
                    let mut device = DeviceBuffer::new(&context, bytes)?;
                    device.copy_from_host(0, &source)?;
                    let mut host = vec![1u8; bytes];
                    let options = StagingOptions::builder().workers(workers).build()?;
                    let mut stager = Stager::with_options(&context, options)?;
                    let mut times = Vec::new();
                    for _ in 0..=runs {
                        barrier.wait();
                        let start = std::time::Instant::now();
                        stager.run(to_host(&mut host, &device))?;
                        times.push(start.elapsed());
                    }
                    check("two GPUs", &host, &source)?;
                    Ok(times[1..].to_vec())
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().expect("GPU thread"))
            .collect()
    });
    let mut results = results.into_iter();
    let (first, second) = (results.next().unwrap()?, results.next().unwrap()?);
    let slower: Vec<Duration> = first.iter().zip(&second).map(|(a, b)| *a.max(b)).collect();
    Ok(Timed {
        times: slower,
        caller_share: f64::NAN,
    })
}
