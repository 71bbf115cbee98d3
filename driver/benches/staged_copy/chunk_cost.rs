//! Where a staged chunk's fixed cost goes, and what the host side costs
//! the rest of the program.
//!
//! - Per chunk: 256 MiB (64 MiB with `--quick`) device to warm pageable
//!   host memory, cut into chunks of 1, 4 and 16 MiB that go round four
//!   pinned buffers on four streams, with the host side run five ways side
//!   by side: none (the driver's copies alone: the link, chunked); an empty
//!   host function after each chunk's copy (what the driver charges for a
//!   host function); a host function that copies the chunk out with a
//!   worker pool (the stager's design, without its bookkeeping); the
//!   stager itself with that chunk size; and no host function at all, the
//!   calling thread waiting for an event after each chunk's copy, copying
//!   the chunk out with the same pool and queuing the buffer's next chunk
//!   (the host side off the context's one host-function thread).
//! - The host side alone: a pool of the stager's default size copies 1,
//!   4, 16 and 64 MiB from a pinned buffer into warm pageable memory and
//!   back, again and again: the host copy's own rate, which a staged
//!   transfer's first (H2D) or last (D2H) chunk waits for, beside the link.
//! - Another library's host functions: while a thread launches, every
//!   4 ms on a stream of its own, a host function that is busy for 2 ms,
//!   1 GiB D2H through the stager, through the event-driven pipeline above
//!   and through the driver's pageable path, each beside itself alone; and
//!   how late those host functions started (their delay), alone and during
//!   each transfer.
//! - CPU time: the CPU seconds every thread of the process spent per GiB
//!   moved (the driver's threads included), on the driver's pageable path
//!   and staged with the default worker count and with 8, 6 and 4 workers,
//!   both ways, each beside its GB/s: the host copy is bound by memory
//!   bandwidth, so workers beyond what the link needs add CPU seconds, not
//!   speed.

use core::ffi::c_void;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hostcopy_core::HostCopyArgs;
use hostcopy_driver::cuda::staging::{Stager, StagingOptions, Stores, default_workers};
use hostcopy_driver::cuda::{Context, DeviceBuffer, Error, Event, PinnedBuffer, Stream};
use hostcopy_driver::parallel::CopyPool;

use crate::paths::{self, Direction, Timed, timed};
use crate::report::{Reference, Report, gbps, row};
use crate::table::size;
use crate::{Bench, Options};

/// Staging buffers (and streams) of every pipeline here: the default.
const BUFFERS: usize = 4;

/// Chunk sizes tried, MiB.
const CHUNKS_MIB: [usize; 3] = [1, 4, 16];

/// Runs the three groups.
pub(crate) fn run(bench: &Bench<'_>, report: &mut Report) -> Result<(), Error> {
    let (context, options, reference) = (bench.context, bench.options, bench.reference);
    per_chunk(context, options, reference, report)?;
    host_side(context, options, reference, report)?;
    foreign_host_functions(context, options, reference, report)?;
    cpu_time(context, options, reference, report)?;
    Ok(())
}

/// How the host side of a chunked D2H pipeline runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum HostSide {
    /// No host side: the driver's copies alone.
    None,
    /// An empty host function after each chunk's copy.
    EmptyHostFn,
    /// A host function that copies the chunk out with the pool.
    HostFnCopy,
    /// No host function: wait for an event, copy with the pool, queue the
    /// buffer's next chunk.
    Events,
}

impl HostSide {
    fn label(self) -> &'static str {
        match self {
            HostSide::None => "driver copies only (no host side)",
            HostSide::EmptyHostFn => "+ an empty host function per chunk",
            HostSide::HostFnCopy => "+ a host function copying with the pool",
            HostSide::Events => "event per chunk, calling thread copies with the pool",
        }
    }
}

/// Device memory with a known pattern, and the host memory it goes to.
struct Memory {
    device: DeviceBuffer,
    expected: Vec<u8>,
    host: Vec<u8>,
}

impl Memory {
    fn new(context: &Context, bytes: usize) -> Result<Memory, Error> {
        let expected: Vec<u8> = (0..bytes)
            .map(|index| (index.wrapping_mul(31) >> 3) as u8)
            .collect();
        let mut device = DeviceBuffer::new(context, bytes)?;
        device.copy_from_host(0, &expected)?;
        Ok(Memory {
            device,
            expected,
            host: vec![1u8; bytes],
        })
    }

    /// Panics unless the host memory holds the device's bytes (a row that
    /// copied nothing, or to the wrong place, is never reported).
    fn check(&mut self, what: &str) {
        if let Some(at) = self
            .host
            .iter()
            .zip(&self.expected)
            .position(|(a, b)| a != b)
        {
            panic!("{what}: wrong byte at {at}");
        }
        self.host.fill(1);
    }
}

/// Staging buffers, their streams and events, and a pool of workers: the
/// pieces of a chunked pipeline built by hand.
struct Pipeline {
    buffers: Vec<PinnedBuffer>,
    streams: Vec<Stream>,
    events: Vec<Event>,
    pool: CopyPool,
    chunk: usize,
}

/// A host function's record: copy `args` with `pool`.
struct HostFnChunk {
    pool: *const CopyPool,
    args: HostCopyArgs,
}

/// Copies one chunk out with the pool.
///
/// # Safety
///
/// `user_data` points at a live [`HostFnChunk`] whose pool and ranges stay
/// valid until the host function has run.
unsafe extern "C" fn copy_chunk(user_data: *mut c_void) {
    // SAFETY: our caller's contract.
    let chunk = unsafe { &*user_data.cast::<HostFnChunk>() };
    // SAFETY: the pool outlives the pipeline's streams (synchronized before
    // it is dropped); the ranges are a pinned buffer and the host memory,
    // disjoint, alive until the streams are synchronized.
    unsafe { (*chunk.pool).copy(&chunk.args, Stores::Streaming) };
}

/// Does nothing: what the driver charges for a host function.
unsafe extern "C" fn nothing(_: *mut c_void) {}

impl Pipeline {
    fn new(context: &Context, chunk: usize) -> Result<Pipeline, Error> {
        let mut pipeline = Pipeline {
            buffers: Vec::new(),
            streams: Vec::new(),
            events: Vec::new(),
            pool: CopyPool::new(default_workers(1)),
            chunk,
        };
        for _ in 0..BUFFERS {
            pipeline.buffers.push(PinnedBuffer::new(context, chunk)?);
            pipeline.streams.push(Stream::new(context)?);
            pipeline.events.push(Event::ordering(context)?);
        }
        Ok(pipeline)
    }

    /// Queues chunk `index` of `device` into its buffer on its stream.
    fn queue_copy(&self, device: &DeviceBuffer, index: usize) -> Result<(), Error> {
        let lane = index % BUFFERS;
        // SAFETY: the pinned buffer holds `chunk` bytes and is touched by
        // nothing else until the stream has run the copy (each caller
        // waits for that before reusing the buffer or dropping it).
        unsafe {
            self.streams[lane].as_stream().copy_device_to_host(
                self.buffers[lane].raw_ptr(),
                device,
                index * self.chunk,
                self.chunk,
            )
        }
    }

    /// The copy of chunk `index` from its buffer into `host`.
    fn host_copy(&self, host: &mut [u8], index: usize) -> HostCopyArgs {
        let lane = index % BUFFERS;
        HostCopyArgs::new(
            host[index * self.chunk..].as_mut_ptr().expose_provenance(),
            self.buffers[lane].raw_ptr().expose_provenance(),
            self.chunk,
        )
    }

    /// One D2H transfer of `host.len()` bytes with the host side `side`.
    fn transfer(
        &self,
        device: &DeviceBuffer,
        host: &mut [u8],
        side: HostSide,
    ) -> Result<(), Error> {
        let chunks = host.len() / self.chunk;
        match side {
            HostSide::None | HostSide::EmptyHostFn | HostSide::HostFnCopy => {
                let records: Vec<HostFnChunk> = (0..chunks)
                    .map(|index| HostFnChunk {
                        pool: &self.pool,
                        args: self.host_copy(host, index),
                    })
                    .collect();
                for (index, record) in records.iter().enumerate() {
                    self.queue_copy(device, index)?;
                    let stream = self.streams[index % BUFFERS].as_stream();
                    let launched = match side {
                        // SAFETY: `nothing` touches nothing.
                        HostSide::EmptyHostFn => unsafe {
                            stream.launch_host_fn(nothing, core::ptr::null_mut())
                        },
                        // SAFETY: the record, the pool, the buffer and
                        // `host` outlive the streams' synchronization below.
                        HostSide::HostFnCopy => unsafe {
                            stream.launch_host_fn(
                                copy_chunk,
                                core::ptr::from_ref(record).cast_mut().cast(),
                            )
                        },
                        _ => Ok(()),
                    };
                    launched?;
                }
                for stream in &self.streams {
                    stream.as_stream().synchronize()?;
                }
                // With no host side (or an empty one) the bytes stay in
                // the staging buffers: `per_chunk` checks only the rows
                // that copy them out.
                drop(records);
            }
            HostSide::Events => {
                for index in 0..chunks.min(BUFFERS) {
                    self.queue_copy(device, index)?;
                    self.events[index].record(self.streams[index].as_stream())?;
                }
                for index in 0..chunks {
                    let lane = index % BUFFERS;
                    self.events[lane].synchronize()?;
                    let args = self.host_copy(host, index);
                    // SAFETY: the event says the buffer holds the chunk and
                    // no queued copy writes it until the next one is queued
                    // just below; `host` and the buffer are disjoint.
                    unsafe { self.pool.copy(&args, Stores::Streaming) };
                    if index + BUFFERS < chunks {
                        self.queue_copy(device, index + BUFFERS)?;
                        self.events[lane].record(self.streams[lane].as_stream())?;
                    }
                }
            }
        }
        Ok(())
    }

    fn timed(
        &self,
        device: &DeviceBuffer,
        host: &mut [u8],
        side: HostSide,
        runs: usize,
    ) -> Result<Timed, Error> {
        let times = timed(runs, || {
            let start = Instant::now();
            self.transfer(device, host, side)?;
            Ok(start.elapsed())
        })?;
        Ok(Timed::plain(times))
    }
}

/// The per-chunk group: see the module documentation.
fn per_chunk(
    context: &Context,
    options: &Options,
    reference: &Reference,
    report: &mut Report,
) -> Result<(), Error> {
    let bytes = if options.quick { 64 << 20 } else { 256 << 20 };
    let mut memory = Memory::new(context, bytes)?;
    let group = format!(
        "per chunk, {} D2H through {BUFFERS} buffers: where the fixed cost goes (x pinned: one pinned copy)",
        size(bytes)
    );
    let chunks: &[usize] = if options.quick {
        &CHUNKS_MIB[1..2]
    } else {
        &CHUNKS_MIB
    };
    for &mib in chunks {
        let chunk = mib << 20;
        let pipeline = Pipeline::new(context, chunk)?;
        let mut line = Vec::new();
        for side in [
            HostSide::None,
            HostSide::EmptyHostFn,
            HostSide::HostFnCopy,
            HostSide::Events,
        ] {
            let timed = pipeline.timed(&memory.device, &mut memory.host, side, options.runs)?;
            if side == HostSide::None || side == HostSide::EmptyHostFn {
                memory.host.fill(1);
            } else {
                memory.check(side.label());
            }
            let path = format!("{mib} MiB chunks, {}", side.label());
            line.push(per_chunk_note(side, bytes, chunk, &timed));
            report.rows.push(row(
                &group,
                &path,
                bytes,
                &timed,
                reference.pinned_d2h,
                f64::NAN,
            ));
        }
        let built = StagingOptions::builder()
            .chunk(chunk)
            .buffers(BUFFERS)
            .build()?;
        let mut stager = Stager::with_options(context, built)?;
        let staged = paths::staged_d2h_blocking(
            &mut stager,
            &memory.device,
            &mut memory.host,
            options.runs,
        )?;
        memory.check("stager");
        line.push(format!(
            "stager {:.1} us",
            per_chunk_us(bytes, chunk, &staged)
        ));
        report.rows.push(row(
            &group,
            &format!("{mib} MiB chunks, the stager"),
            bytes,
            &staged,
            reference.pinned_d2h,
            f64::NAN,
        ));
        report.notes.push(format!(
            "per chunk of {mib} MiB, time per chunk: {}",
            line.join(", ")
        ));
    }
    Ok(())
}

fn per_chunk_us(bytes: usize, chunk: usize, timed: &Timed) -> f64 {
    let seconds = crate::table::median(&timed.times);
    1e6 * seconds / (bytes / chunk) as f64
}

fn per_chunk_note(side: HostSide, bytes: usize, chunk: usize, timed: &Timed) -> String {
    let name = match side {
        HostSide::None => "copies only",
        HostSide::EmptyHostFn => "empty host fn",
        HostSide::HostFnCopy => "host fn copy",
        HostSide::Events => "events",
    };
    format!("{name} {:.1} us", per_chunk_us(bytes, chunk, timed))
}

/// The host-side group: see the module documentation.
fn host_side(
    context: &Context,
    options: &Options,
    reference: &Reference,
    report: &mut Report,
) -> Result<(), Error> {
    let sizes_mib: &[usize] = if options.quick { &[4] } else { &[1, 4, 16, 64] };
    let largest = sizes_mib.iter().max().copied().unwrap_or(1) << 20;
    let pinned = PinnedBuffer::new(context, largest)?;
    let mut pageable = vec![1u8; largest];
    let pool = CopyPool::new(default_workers(1));
    let group = format!(
        "the host side alone: a pool of {} workers and the caller, pinned <-> warm pageable (x pinned: the link)",
        pool.workers()
    );
    let mut line = Vec::new();
    for &mib in sizes_mib {
        let bytes = mib << 20;
        // Enough copies that each run takes a few milliseconds.
        let copies = (64usize >> mib.trailing_zeros().min(6)).max(4);
        for (name, to_pageable) in [
            ("pinned -> pageable (D2H)", true),
            ("pageable -> pinned (H2D)", false),
        ] {
            let (dst, src) = if to_pageable {
                (pageable.as_mut_ptr(), pinned.raw_ptr().cast_const())
            } else {
                (pinned.raw_ptr(), pageable.as_ptr())
            };
            let args = HostCopyArgs::new(dst.expose_provenance(), src.expose_provenance(), bytes);
            let stores = if to_pageable {
                Stores::Streaming
            } else {
                Stores::Cached
            };
            let times = timed(options.runs, || {
                let start = Instant::now();
                for _ in 0..copies {
                    // SAFETY: the pinned buffer and the vector are live,
                    // disjoint and at least `bytes` long.
                    unsafe { pool.copy(&args, stores) };
                }
                Ok(start.elapsed() / copies as u32)
            })?;
            let timed = Timed::plain(times);
            line.push(format!(
                "{mib} MiB {} {:.1} us",
                if to_pageable { "D2H" } else { "H2D" },
                1e6 * crate::table::median(&timed.times)
            ));
            report.rows.push(row(
                &group,
                &format!("{mib} MiB, {name}"),
                bytes,
                &timed,
                if to_pageable {
                    reference.pinned_d2h
                } else {
                    reference.pinned_h2d
                },
                f64::NAN,
            ));
        }
    }
    // The pool's copy of the pattern must have arrived whole: the last
    // copy was pageable -> pinned, so both now hold the same bytes.
    // SAFETY: the pinned buffer holds `largest` bytes and no copy is queued.
    let staged = unsafe { core::slice::from_raw_parts(pinned.raw_ptr(), largest) };
    let last = sizes_mib.last().copied().unwrap_or(1) << 20;
    assert!(
        staged[..last] == pageable[..last],
        "the pool's copy differs"
    );
    report.notes.push(format!(
        "the host side alone, per copy: {}",
        line.join(", ")
    ));
    Ok(())
}

// ---------------------------------------------------------------------
// Another library's host functions on the same context.

/// A foreign host function's record: when it was launched, and where the
/// latest start delay goes.
struct Stamp {
    launched: Instant,
    most: Arc<AtomicU64>,
}

/// Busy for 2 ms, after noting how late it started.
///
/// # Safety
///
/// `user_data` is a `Box<Stamp>` turned into a raw pointer, freed here.
unsafe extern "C" fn busy(user_data: *mut c_void) {
    // SAFETY: our caller's contract: ours to free.
    let stamp = unsafe { Box::from_raw(user_data.cast::<Stamp>()) };
    let delay = stamp.launched.elapsed().as_nanos() as u64;
    stamp.most.fetch_max(delay, Ordering::Relaxed);
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(2) {
        core::hint::spin_loop();
    }
}

/// A thread launching a [`busy`] host function every 4 ms on a stream of
/// its own, until stopped.
struct ForeignLoad {
    stop: Arc<AtomicBool>,
    most: Arc<AtomicU64>,
    thread: std::thread::JoinHandle<Result<(), Error>>,
}

impl ForeignLoad {
    fn start(context: &Context) -> ForeignLoad {
        let stop = Arc::new(AtomicBool::new(false));
        let most = Arc::new(AtomicU64::new(0));
        let thread = {
            let (context, stop, most) = (context.clone(), Arc::clone(&stop), Arc::clone(&most));
            std::thread::spawn(move || {
                let stream = Stream::new(&context)?;
                let start = Instant::now();
                let mut next = Duration::ZERO;
                while !stop.load(Ordering::Relaxed) {
                    let stamp = Box::new(Stamp {
                        launched: Instant::now(),
                        most: Arc::clone(&most),
                    });
                    // SAFETY: `busy` frees the box and touches nothing else.
                    unsafe {
                        stream
                            .as_stream()
                            .launch_host_fn(busy, Box::into_raw(stamp).cast())?;
                    }
                    next += Duration::from_millis(4);
                    if let Some(wait) = next.checked_sub(start.elapsed()) {
                        std::thread::sleep(wait);
                    }
                }
                stream.as_stream().synchronize()?;
                Ok(())
            })
        };
        ForeignLoad { stop, most, thread }
    }

    /// Forgets the delays seen so far (those of the warm-up).
    fn reset(&self) {
        self.most.store(0, Ordering::Relaxed);
    }

    /// Stops the thread; the longest delay seen since the last reset.
    fn stop(self) -> Result<Duration, Error> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .join()
            .expect("the foreign load thread panicked")?;
        Ok(Duration::from_nanos(self.most.load(Ordering::Relaxed)))
    }
}

/// Which transfer runs beside the foreign host functions.
#[derive(Clone, Copy)]
enum Beside {
    Stager,
    Events,
    Driver,
}

impl Beside {
    fn label(self) -> &'static str {
        match self {
            Beside::Stager => "stager",
            Beside::Events => "event per chunk, calling thread copies (16 MiB chunks)",
            Beside::Driver => "driver's pageable path",
        }
    }
}

fn foreign_host_functions(
    context: &Context,
    options: &Options,
    reference: &Reference,
    report: &mut Report,
) -> Result<(), Error> {
    let bytes = if options.quick { 64 << 20 } else { 1 << 30 };
    let mut memory = Memory::new(context, bytes)?;
    let group = format!(
        "{} D2H beside another library's host functions (2 ms busy every 4 ms, own stream)",
        size(bytes)
    );
    let mut stager = Stager::new(context)?;
    let pipeline = Pipeline::new(context, 16 << 20)?;
    let mut once = |beside: Beside, memory: &mut Memory| -> Result<Timed, Error> {
        let timed = match beside {
            Beside::Stager => paths::staged_d2h_blocking(
                &mut stager,
                &memory.device,
                &mut memory.host,
                options.runs,
            )?,
            Beside::Events => pipeline.timed(
                &memory.device,
                &mut memory.host,
                HostSide::Events,
                options.runs,
            )?,
            Beside::Driver => paths::driver_d2h(&memory.device, &mut memory.host, options.runs)?,
        };
        memory.check(beside.label());
        Ok(timed)
    };
    // The foreign host functions' delay with nothing else running.
    let load = ForeignLoad::start(context);
    std::thread::sleep(Duration::from_millis(50));
    load.reset();
    std::thread::sleep(Duration::from_millis(200));
    let idle = load.stop()?;
    let mut notes = vec![format!("alone {:.2} ms", idle.as_secs_f64() * 1e3)];
    for beside in [Beside::Stager, Beside::Events, Beside::Driver] {
        let alone = once(beside, &mut memory)?;
        let load = ForeignLoad::start(context);
        std::thread::sleep(Duration::from_millis(20));
        load.reset();
        let loaded = once(beside, &mut memory);
        let delay = load.stop()?;
        let loaded = loaded?;
        let kept = gbps(bytes, &loaded) / gbps(bytes, &alone);
        for (timed, state) in [
            (&alone, "alone"),
            (&loaded, "with the foreign host functions"),
        ] {
            report.rows.push(row(
                &group,
                &format!("{}, {state}", beside.label()),
                bytes,
                timed,
                reference.pinned_d2h,
                f64::NAN,
            ));
        }
        notes.push(format!(
            "during the {} {:.2} ms (it kept {:.0}% of its speed alone; target >= 90%)",
            beside.label(),
            delay.as_secs_f64() * 1e3,
            100.0 * kept
        ));
    }
    report.notes.push(format!(
        "foreign host functions, longest start delay: {}",
        notes.join("; ")
    ));
    Ok(())
}

// ---------------------------------------------------------------------
// CPU time.

/// Worker counts the CPU rows try beside the default (the default first).
const CPU_WORKERS: [usize; 4] = [12, 8, 6, 4];

fn cpu_time(
    context: &Context,
    options: &Options,
    reference: &Reference,
    report: &mut Report,
) -> Result<(), Error> {
    let bytes: usize = if options.quick { 64 << 20 } else { 1 << 30 };
    let mut memory = Memory::new(context, bytes)?;
    let gib = (bytes * (options.runs + 1)) as f64 / f64::from(1u32 << 30);
    // `None`: the defaults (`default_workers(1)`, of which
    // `d2h_workers()` copy to the host); `Some(n)`: n workers both ways.
    let mut counts = vec![None];
    counts.extend(CPU_WORKERS.iter().map(|&count| Some(count)));
    let mut stagers = Vec::new();
    for &workers in &counts {
        let built = match workers {
            None => StagingOptions::default(),
            Some(n) => StagingOptions::builder()
                .workers(n)
                .d2h_workers(n)
                .build()?,
        };
        stagers.push(Stager::with_options(context, built)?);
    }
    let default = StagingOptions::default();
    let mut line = Vec::new();
    for direction in [Direction::D2H, Direction::H2D] {
        let (name, pinned) = match direction {
            Direction::D2H => ("D2H", reference.pinned_d2h),
            Direction::H2D => ("H2D", reference.pinned_h2d),
        };
        let group = format!(
            "CPU seconds per GiB, {name} {} by workers (x pinned: pinned {name})",
            size(bytes)
        );
        // `None`: the driver's pageable path.
        let mut paths: Vec<Option<usize>> = vec![None];
        paths.extend((0..counts.len()).map(Some));
        let mut seconds = Vec::new();
        for path in paths {
            let Some(before) = crate::machine::process_cpu() else {
                report
                    .notes
                    .push("CPU time: not measured (CLOCK_PROCESS_CPUTIME_ID refused)".into());
                return Ok(());
            };
            let timed = match (direction, path) {
                (Direction::D2H, Some(index)) => {
                    let timed = paths::staged_d2h_blocking(
                        &mut stagers[index],
                        &memory.device,
                        &mut memory.host,
                        options.runs,
                    )?;
                    memory.check("stager D2H");
                    timed
                }
                (Direction::D2H, None) => {
                    let timed = paths::driver_d2h(&memory.device, &mut memory.host, options.runs)?;
                    memory.check("driver D2H");
                    timed
                }
                (Direction::H2D, Some(index)) => paths::staged_h2d_blocking(
                    &mut stagers[index],
                    &mut memory.device,
                    &memory.host,
                    options.runs,
                )?,
                (Direction::H2D, None) => {
                    paths::driver_h2d(&mut memory.device, &memory.host, options.runs)?
                }
            };
            let after = crate::machine::process_cpu().unwrap_or(before);
            let per_gib = (after - before).as_secs_f64() / gib;
            let label = match path {
                None => String::from("driver pageable"),
                Some(index) => match (counts[index], direction) {
                    (Some(n), _) => format!("staged, {n} workers"),
                    (None, Direction::D2H) => {
                        format!("staged, defaults ({} workers)", default.d2h_workers())
                    }
                    (None, Direction::H2D) => {
                        format!("staged, defaults ({} workers)", default.workers())
                    }
                },
            };
            seconds.push((label.clone(), per_gib));
            report.rows.push(row(
                &group,
                &format!("{label}, {per_gib:.3} CPU s/GiB"),
                bytes,
                &timed,
                pinned,
                f64::NAN,
            ));
        }
        let driver = seconds[0].1;
        let staged: Vec<String> = seconds[1..]
            .iter()
            .map(|(label, per_gib)| format!("{label} {per_gib:.3} s ({:.2}x)", per_gib / driver))
            .collect();
        line.push(format!(
            "{name} driver's path {driver:.3} s, {} (target <= 1.2x)",
            staged.join(", ")
        ));
    }
    report.notes.push(format!(
        "CPU seconds per GiB moved, every thread of the process, {}: {}",
        size(bytes),
        line.join("; ")
    ));
    Ok(())
}
