//! Never-touched destinations: device to host into a fresh `vec![0; n]`
//! at 64 MiB, 1 GiB and 4 GiB through the driver's pageable path, a
//! stager with prefault off (the copy faults every page in) and with
//! prefault on (the default), beside a staged transfer into a
//! [`HostBuffer`] (its pages present since it was made); and the time to
//! make a 16 GiB host buffer usable, a `HostBuffer` against pinned memory
//! (`cuMemHostAlloc`) of the same size.

use std::time::Instant;

use hostcopy_driver::HostBuffer;
use hostcopy_driver::cuda::staging::{Stager, StagingOptions, to_host};
use hostcopy_driver::cuda::{Context, DeviceBuffer, Error, PinnedBuffer};
use hostcopy_driver::prefault;

use crate::machine::host_available;
use crate::paths::{self, Destination, Timed};
use crate::report::{Reference, Report, check, gbps, not_run, row};
use crate::table::size;
use crate::{Bench, Options};

const GROUP: &str = "D2H into a never-touched vec![0; n] (x driver: its path into the same)";
const MAKING: &str = "making a host buffer usable (x driver: x pinned cuMemHostAlloc)";

/// A pattern with every page touched.
fn pattern(bytes: usize) -> Vec<u8> {
    (0..bytes).map(|i| (i % 251) as u8).collect()
}

pub(crate) fn run(bench: &Bench<'_>, report: &mut Report) -> Result<(), Error> {
    let (context, options, reference) = (bench.context, bench.options, bench.reference);
    let mut on = Stager::new(context)?;
    let mut off =
        Stager::with_options(context, StagingOptions::builder().prefault(false).build()?)?;
    for bytes in [64usize << 20, 1 << 30, 4 << 30] {
        if bytes > options.max_bytes.max(64 << 20) {
            continue;
        }
        // The destination, a HostBuffer and the previous run's vector.
        if 3 * bytes > host_available() {
            report
                .rows
                .push(not_run(GROUP, "all", bytes, "host memory"));
            continue;
        }
        let mut device = match DeviceBuffer::new(context, bytes) {
            Ok(device) => device,
            Err(error) => {
                println!(
                    "  {GROUP}: {} skipped: no device memory ({error})",
                    size(bytes)
                );
                continue;
            }
        };
        // The driver's path takes every fault on one thread (1.7 GB/s at
        // 1 GiB on the H200 host): fewer runs at the largest size.
        let runs = if bytes > 1 << 30 {
            1
        } else {
            options.runs.min(3)
        };
        // A pattern on the device, to check the prefaulted copies by.
        let expected = pattern(bytes);
        device.copy_from_host(0, &expected)?;
        let (driver, _) =
            paths::never_touched_d2h(&mut on, &device, bytes, runs, Destination::Driver)?;
        let (staged_off, got) =
            paths::never_touched_d2h(&mut off, &device, bytes, runs, Destination::Staged)?;
        check("never-touched D2H, prefault off", &got, &expected)?;
        drop(got);
        let before = prefault::counts();
        let (staged_on, got) =
            paths::never_touched_d2h(&mut on, &device, bytes, runs, Destination::Staged)?;
        let after = prefault::counts();
        check("never-touched D2H, prefault on", &got, &expected)?;
        drop((got, expected));
        let driver_gbps = gbps(bytes, &driver);
        for (path, timed) in [
            ("driver pageable", &driver),
            ("staged, prefault off", &staged_off),
            ("staged, prefault on (default)", &staged_on),
        ] {
            report.rows.push(row(
                GROUP,
                path,
                bytes,
                timed,
                reference.pinned_d2h,
                driver_gbps,
            ));
        }
        report.notes.push(format!(
            "never-touched {}: prefault populated {} MiB in {} ranges ({} touched), advised {} MiB MADV_HUGEPAGE, {} MiB faulted in by the copy",
            size(bytes),
            (after.populated_bytes - before.populated_bytes) >> 20,
            after.populated_ranges - before.populated_ranges,
            after.touched_ranges - before.touched_ranges,
            (after.huge_advised_bytes - before.huge_advised_bytes) >> 20,
            (after.faulted_by_copy_bytes - before.faulted_by_copy_bytes) >> 20,
        ));
        match HostBuffer::new(bytes) {
            Ok(mut host) => {
                let times = paths::timed(runs, || {
                    let start = Instant::now();
                    on.run(to_host(&mut *host, &device))?;
                    Ok(start.elapsed())
                })?;
                check("D2H into a HostBuffer", &host, &pattern(bytes))?;
                report.rows.push(row(
                    GROUP,
                    "staged into a HostBuffer (made before)",
                    bytes,
                    &Timed::plain(times),
                    reference.pinned_d2h,
                    driver_gbps,
                ));
            }
            Err(error) => report.rows.push(not_run(
                GROUP,
                "staged into a HostBuffer (made before)",
                bytes,
                &error.to_string(),
            )),
        }
    }
    making(context, options, reference, report)
}

/// The time until a host buffer of 16 GiB (64 MiB with `--quick`) can be
/// copied into at full speed: `HostBuffer::new` against `PinnedBuffer::new`
/// (`cuMemHostAlloc`), once each; freeing is not timed. The GB/s column is
/// bytes over that time.
fn making(
    context: &Context,
    options: &Options,
    reference: &Reference,
    report: &mut Report,
) -> Result<(), Error> {
    let bytes = if options.quick {
        64 << 20
    } else {
        16usize << 30
    };
    if 2 * bytes > host_available() {
        report
            .rows
            .push(not_run(MAKING, "all", bytes, "host memory"));
        return Ok(());
    }
    let start = Instant::now();
    let pinned = PinnedBuffer::new(context, bytes);
    let pinned_time = start.elapsed();
    drop(pinned?);
    let pinned_timed = Timed::plain(vec![pinned_time]);
    let pinned_gbps = gbps(bytes, &pinned_timed);
    report.rows.push(row(
        MAKING,
        "PinnedBuffer::new (cuMemHostAlloc)",
        bytes,
        &pinned_timed,
        reference.pinned_d2h,
        pinned_gbps,
    ));
    let start = Instant::now();
    let host = HostBuffer::new(bytes);
    let host_time = start.elapsed();
    match host {
        Ok(host) => {
            drop(host);
            report.rows.push(row(
                MAKING,
                &format!(
                    "HostBuffer::new ({} threads)",
                    HostBuffer::populate_threads(bytes)
                ),
                bytes,
                &Timed::plain(vec![host_time]),
                reference.pinned_d2h,
                pinned_gbps,
            ));
        }
        Err(error) => report.rows.push(not_run(
            MAKING,
            "HostBuffer::new",
            bytes,
            &error.to_string(),
        )),
    }
    Ok(())
}
