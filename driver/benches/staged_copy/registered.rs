//! hostcopy's own memory registered with the driver
//! ([`HostBuffer::register`]) beside pinned memory and the same memory
//! staged, and what registration costs a large buffer.
//!
//! One transfer, at 16 MiB, 64 MiB, 256 MiB and 1 GiB (16 MiB with
//! `--quick`), both ways, three kinds taking turns within each run (the
//! order rotated run by run), one warm-up then `--runs` timed, medians:
//! - pinned (the link): one driver copy between a [`PinnedBuffer`] and a
//!   [`DeviceBuffer`], through the stager's pinned API;
//! - registered: one blocking [`Stager::run`] of a [`HostBuffer`]
//!   registered whole ([`Register::Now`]): direct driver copies;
//! - staged: the same through an unregistered [`HostBuffer`];
//! - the registered buffer started at once
//!   ([`Stager::start_unchecked`]) and polled until done, rather than a
//!   blocking call's sleeping wait;
//! - the registered buffer and the pinned one through the driver's own
//!   synchronous copy (`cuMemcpyDtoH` / `cuMemcpyHtoD`, no stager): what
//!   the memory itself allows, apart from how a transfer is queued and
//!   waited for.
//!
//! Each kind's CPU seconds per GiB (every thread of the process, summed
//! over its timed runs) are noted beside the times, registered against
//! staged (the target: at most 0.05x), and each kind's bytes are checked.
//!
//! Then a large buffer (64 GiB, or two thirds of the host memory available),
//! made and registered in the background in the default ranges, its first
//! 1 GiB uploaded at once while another thread makes a small driver call
//! every millisecond until registration ends: the time from the call that
//! made it to that first upload's end (the target: at most 2.5 s at
//! 64 GiB), whether its pages were present, the other thread's call times,
//! and the time until every range is registered, beside one
//! `cuMemHostRegister` of a buffer of the same size alone.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hostcopy_driver::cuda::registration::{REGISTER_RANGE, Register};
use hostcopy_driver::cuda::staging::{Stager, to_device, to_host};
use hostcopy_driver::cuda::{Context, DeviceBuffer, Error, HostRegistration, PinnedBuffer};
use hostcopy_driver::{HostBuffer, prefault};

use crate::Bench;
use crate::machine::{host_available, process_cpu};
use crate::paths::{Direction, Timed};
use crate::report::{Report, check, gbps, row};
use crate::table::size;

/// The sizes, both ways (the first alone with `--quick`).
const SIZES: [usize; 4] = [16 << 20, 64 << 20, 256 << 20, 1 << 30];

/// The large buffer, where the host has three times it available.
const LARGE: usize = 64 << 30;

/// The kinds of transfer.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Pinned,
    Registered,
    Staged,
    /// The registered buffer through the driver's synchronous copy.
    RegisteredDriver,
    /// The pinned buffer through the driver's synchronous copy.
    PinnedDriver,
    /// The registered buffer, started at once and polled until done.
    RegisteredPolled,
}

const KINDS: [Kind; 6] = [
    Kind::Pinned,
    Kind::Registered,
    Kind::Staged,
    Kind::RegisteredDriver,
    Kind::PinnedDriver,
    Kind::RegisteredPolled,
];

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Pinned => "pinned",
            Kind::Registered => "registered HostBuffer",
            Kind::Staged => "staged HostBuffer",
            Kind::RegisteredDriver => "registered HostBuffer, cuMemcpy",
            Kind::PinnedDriver => "pinned, cuMemcpy",
            Kind::RegisteredPolled => "registered HostBuffer, polled",
        }
    }
}

/// Runs the group.
pub(crate) fn run(bench: &Bench<'_>, report: &mut Report) -> Result<(), Error> {
    let (context, options) = (bench.context, bench.options);
    let sizes = if options.quick {
        &SIZES[..1]
    } else {
        &SIZES[..]
    };
    let mut stager = Stager::new(context)?;
    for &bytes in sizes {
        if host_available() < 8 * bytes {
            report.notes.push(format!(
                "registered, {}: not run, too little host memory",
                size(bytes)
            ));
            continue;
        }
        one_size(context, &mut stager, bytes, options.runs, report)?;
    }
    if !options.quick && !options.simulated {
        large(context, &mut stager, report)?;
    }
    Ok(())
}

/// What one kind holds: its host memory and device buffer.
struct Memory {
    kind: Kind,
    pinned: Option<PinnedBuffer>,
    host: Option<HostBuffer>,
    device: DeviceBuffer,
}

fn one_size(
    context: &Context,
    stager: &mut Stager,
    bytes: usize,
    runs: usize,
    report: &mut Report,
) -> Result<(), Error> {
    let expected: Vec<u8> = (0..bytes).map(|i| (i * 131 + i / 4099) as u8).collect();
    let mut memory = Vec::new();
    for kind in KINDS {
        let mut device = DeviceBuffer::new(context, bytes)?;
        device.copy_from_host(0, &expected)?;
        let (pinned, host) = match kind {
            Kind::Pinned | Kind::PinnedDriver => (Some(PinnedBuffer::new(context, bytes)?), None),
            Kind::Registered | Kind::Staged | Kind::RegisteredDriver | Kind::RegisteredPolled => {
                let Ok(mut host) = HostBuffer::new(bytes) else {
                    report.notes.push(format!(
                        "registered, {}: no host buffer could be made: not run",
                        size(bytes)
                    ));
                    return Ok(());
                };
                if kind != Kind::Staged {
                    let registered = host.register(context, Register::Now);
                    if !registered.is_complete() {
                        report.notes.push(format!(
                            "registered, {}: registration refused ({:?}): not run",
                            size(bytes),
                            registered.refused
                        ));
                        return Ok(());
                    }
                }
                (None, Some(host))
            }
        };
        memory.push(Memory {
            kind,
            pinned,
            host,
            device,
        });
    }
    let mut notes = Vec::new();
    for direction in [Direction::D2H, Direction::H2D] {
        let mut times = vec![Vec::new(); KINDS.len()];
        let mut cpu = vec![Duration::ZERO; KINDS.len()];
        for run in 0..=runs {
            for turn in 0..KINDS.len() {
                let index = (turn + run) % KINDS.len();
                let before = process_cpu().unwrap_or_default();
                let elapsed = once(stager, &mut memory[index], direction)?;
                let used = process_cpu().unwrap_or_default().saturating_sub(before);
                if run > 0 {
                    times[index].push(elapsed);
                    cpu[index] += used;
                }
            }
        }
        for (index, kind) in KINDS.into_iter().enumerate() {
            let what = format!("registered, {} {}", direction_name(direction), kind.name());
            let got = match (&memory[index].pinned, &memory[index].host, direction) {
                (Some(pinned), _, Direction::D2H) => pinned[..].to_vec(),
                (_, Some(host), Direction::D2H) => host.to_vec(),
                (_, _, _) => {
                    let mut back = vec![0u8; bytes];
                    memory[index].device.copy_to_host(0, &mut back)?;
                    back
                }
            };
            check(&what, &got, &expected)?;
        }
        let pinned = Timed::plain(times[0].clone());
        let link = gbps(bytes, &pinned);
        let gib = (bytes * runs) as f64 / f64::from(1u32 << 30);
        let mut shares = Vec::new();
        for (index, kind) in KINDS.into_iter().enumerate() {
            let timed = Timed::plain(times[index].clone());
            let per_gib = cpu[index].as_secs_f64() / gib;
            report.rows.push(row(
                &format!("registered memory, {}", direction_name(direction)),
                &format!("{}, {per_gib:.4} CPU s/GiB", kind.name()),
                bytes,
                &timed,
                link,
                f64::NAN,
            ));
            shares.push((gbps(bytes, &timed) / link, per_gib));
        }
        notes.push(format!(
            "{} {}: registered {:.1}% of pinned, staged {:.1}%, registered through cuMemcpy {:.1}%, pinned through cuMemcpy {:.1}%, registered polled {:.1}%; CPU s/GiB registered {:.4} = {:.3}x staged's {:.4} (targets >= 98%, <= 0.05x)",
            direction_name(direction),
            size(bytes),
            100.0 * shares[1].0,
            100.0 * shares[2].0,
            100.0 * shares[3].0,
            100.0 * shares[4].0,
            100.0 * shares[5].0,
            shares[1].1,
            shares[1].1 / shares[2].1,
            shares[2].1,
        ));
    }
    report
        .notes
        .push(format!("registered memory: {}", notes.join("; ")));
    Ok(())
}

fn direction_name(direction: Direction) -> &'static str {
    match direction {
        Direction::D2H => "D2H",
        Direction::H2D => "H2D",
    }
}

/// One blocking transfer of the kind's memory, timed.
fn once(stager: &mut Stager, memory: &mut Memory, direction: Direction) -> Result<Duration, Error> {
    let start = Instant::now();
    let Memory {
        kind,
        pinned,
        host,
        device,
    } = memory;
    match (*kind, direction) {
        (Kind::RegisteredDriver | Kind::PinnedDriver, Direction::D2H) => {
            device.copy_to_host(0, host_bytes(pinned, host))?;
        }
        (Kind::RegisteredDriver | Kind::PinnedDriver, Direction::H2D) => {
            device.copy_from_host(0, host_bytes(pinned, host))?;
        }
        (Kind::RegisteredPolled, _) => {
            let host = host_bytes(pinned, host);
            let spec = match direction {
                Direction::D2H => to_host(host, &*device),
                Direction::H2D => to_device(device, &*host),
            };
            // SAFETY: both memories live in `memory`, untouched until the
            // transfer is finished below.
            let pending = unsafe { stager.start_unchecked(spec) }?;
            while !pending.is_finished()? {
                core::hint::spin_loop();
            }
            stager.finish_pending(pending)?;
        }
        (Kind::Pinned, Direction::D2H) => {
            let buffer = pinned.take().expect("a pinned kind has a pinned buffer");
            *pinned = Some(stager.device_to_pinned(buffer, &*device, 0)?);
        }
        (Kind::Pinned, Direction::H2D) => {
            let buffer = pinned.take().expect("a pinned kind has a pinned buffer");
            *pinned = Some(stager.pinned_to_device(device, buffer, 0)?);
        }
        (Kind::Registered | Kind::Staged, Direction::D2H) => {
            stager.run(to_host(host_bytes(pinned, host), &*device))?;
        }
        (Kind::Registered | Kind::Staged, Direction::H2D) => {
            stager.run(to_device(device, &*host_bytes(pinned, host)))?;
        }
    }
    Ok(start.elapsed())
}

/// A kind's host memory: its pinned buffer or its `HostBuffer`.
fn host_bytes<'a>(
    pinned: &'a mut Option<PinnedBuffer>,
    host: &'a mut Option<HostBuffer>,
) -> &'a mut [u8] {
    match (pinned, host) {
        (Some(pinned), _) => &mut pinned[..],
        (None, Some(host)) => &mut host[..],
        (None, None) => unreachable!("every kind has host memory"),
    }
}

/// How a large buffer is registered while its first GiB uploads: in the
/// background in ranges of this many bytes, with or without another
/// thread's driver calls beside (the default range's with and without;
/// larger ranges without).
const LARGE_RANGES: [(usize, bool); 4] = [
    (REGISTER_RANGE, true),
    (REGISTER_RANGE, false),
    (256 << 20, false),
    (1 << 30, false),
];

/// A large buffer made, registered in the background (in each way of
/// [`LARGE_RANGES`]) and uploaded from at once, where asked while another
/// thread makes a small driver call every millisecond (as another
/// library's would); then one registration of the same size alone.
fn large(context: &Context, stager: &mut Stager, report: &mut Report) -> Result<(), Error> {
    // One buffer at a time (the first is freed before the second is made).
    let bytes = LARGE.min(host_available() / 3 * 2) & !((1 << 30) - 1);
    if bytes < 2 << 30 {
        report
            .notes
            .push("registered, large buffer: not run, too little host memory".into());
        return Ok(());
    }
    let first = 1 << 30;
    let mut device = DeviceBuffer::new(context, first)?;
    let mut lines = Vec::new();
    for (range, beside) in LARGE_RANGES {
        let made = Instant::now();
        let Ok(mut buffer) = HostBuffer::new(bytes) else {
            report
                .notes
                .push("registered, large buffer: could not be made: not run".into());
            return Ok(());
        };
        let populated = made.elapsed();
        // Whether its pages are present (a sample of them): registering
        // pages not yet present makes them present first.
        let resident = prefault::is_resident(&buffer);
        let mut repair = String::new();
        if !resident {
            // Made present here, so that registration is timed on present
            // pages, and how the kernel answered said.
            let start = Instant::now();
            let how = prefault::populate(&mut buffer);
            repair = format!(
                " (huge page advice {:?}; populated here: {how:?} in {:.2} s, present after: {})",
                prefault::huge_page_advice(),
                start.elapsed().as_secs_f64(),
                prefault::is_resident(&buffer),
            );
        }
        buffer[..first].fill(0x5a);
        let registering = Instant::now();
        buffer.register_in_ranges(context, Register::Background, range);
        let probing = AtomicBool::new(beside);
        let (first_done, calls, registered, background) = std::thread::scope(|scope| {
            // Another thread's small driver calls (4 KiB copied to the
            // host, every millisecond) until registration ends: how long
            // each waits behind the registering thread.
            let probe = scope.spawn(|| -> Result<Vec<f64>, Error> {
                let small = DeviceBuffer::new(context, 4096)?;
                let mut into = vec![0u8; 4096];
                let mut took = Vec::new();
                while probing.load(Ordering::Acquire) {
                    let start = Instant::now();
                    small.copy_to_host(0, &mut into)?;
                    took.push(start.elapsed().as_secs_f64());
                    std::thread::sleep(Duration::from_millis(1));
                }
                Ok(took)
            });
            let uploaded = stager.run(to_device(&mut device, &buffer[..first]));
            let first_done = made.elapsed();
            let registered = buffer.wait_registered();
            let background = registering.elapsed();
            probing.store(false, Ordering::Release);
            let calls = probe.join().expect("the probing thread panicked");
            uploaded.map(|()| (first_done, calls, registered, background))
        })?;
        let mut calls = calls?;
        let mut back = vec![1u8; first];
        device.copy_to_host(0, &mut back)?;
        check(
            "registered, large buffer's first GiB",
            &back,
            &buffer[..first],
        )?;
        drop(buffer);
        calls.sort_by(f64::total_cmp);
        let (median, slowest) = match calls.len() {
            0 => (f64::NAN, f64::NAN),
            n => (calls[n / 2], calls[n - 1]),
        };
        let line = format!(
            "ranges of {}{}: made in {:.2} s (pages {}present{repair}), first GiB uploaded {:.2} s after the call that made it, registered in {:.2} s ({}); another thread's {} small driver calls meanwhile: median {:.2} ms, slowest {:.1} ms",
            size(range),
            if beside { ", calls beside" } else { "" },
            populated.as_secs_f64(),
            if resident { "" } else { "not " },
            first_done.as_secs_f64(),
            background.as_secs_f64(),
            if registered.is_complete() {
                String::from("whole")
            } else {
                format!(
                    "{} bytes, refused {:?}",
                    registered.registered, registered.refused
                )
            },
            calls.len(),
            1e3 * median,
            1e3 * slowest,
        );
        println!("  registered, {}: {line}", size(bytes));
        lines.push(line);
    }
    let Ok(mut alone) = HostBuffer::new(bytes) else {
        report
            .notes
            .push("registered, large buffer: a second could not be made: not run".into());
        return Ok(());
    };
    let started = Instant::now();
    let once = HostRegistration::new(context, &mut alone[..]);
    let alone_seconds = started.elapsed();
    let alone_note = match &once {
        Ok(_) => format!("{:.2} s", alone_seconds.as_secs_f64()),
        Err(error) => format!("refused ({error})"),
    };
    drop(once);
    println!(
        "  registered, {}: cuMemHostRegister alone {alone_note}",
        size(bytes)
    );
    report.notes.push(format!(
        "registered, a {} buffer in the background (targets: first GiB <= 2.5 s after the call that made it; registered in no more than one cuMemHostRegister alone, {alone_note}): {}",
        size(bytes),
        lines.join("; ")
    ));
    Ok(())
}
