//! A lean staging ring written here, in the benchmark, beside the link and
//! the engine: the least a staging ring can do, so that the engine's
//! overhead (its bookkeeping, planning, copier thread and wake-ups) reads
//! as a ratio.
//!
//! At 16 MiB, 64 MiB, 256 MiB and 1 GiB (16 MiB with `--quick`), both
//! ways, three kinds of transfer take turns within each run (the order
//! rotated run by run, so that a machine whose speed drifts drifts under
//! all three alike), one warm-up run then `--runs` timed ones, medians:
//! - pinned (the link): one driver copy between a [`PinnedBuffer`] of the
//!   size and a [`DeviceBuffer`], through the stager's pinned API;
//! - the lean ring: pre-faulted pageable memory (a `Vec<u8>` written once)
//!   through [`SLOTS`] pinned slots of [`CHUNK`] bytes, slot `k` on stream
//!   `k`, the host side of each chunk split between worker threads started
//!   once before any timing, an event recorded after each chunk's device
//!   copy and polled (`Event::query` in a loop) by the calling thread
//!   before the slot's host side (D2H) or before the slot is reused (H2D);
//! - a finer lean ring ([`RINGS`]: slots of 2 MiB, streaming stores into
//!   them for an upload), the most a ring makes of a 16 or 64 MiB
//!   transfer by overlapping its host copies with its driver copies;
//! - the engine: one blocking [`Stager::run`] with default options;
//! - the engine with other options ([`VARIANTS`]: smaller chunks,
//!   streaming stores into the staging buffers, one stream with small
//!   edge chunks), each through a stager of its own: what each buys or
//!   costs at each size, beside the default.
//!
//! The ring does what the engine does per chunk and nothing more: the same
//! chunk, slots and streams as the engine's defaults, as many workers
//! ([`default_workers`]), and the same stores (to the host, each worker's
//! part through `hostcopy_fn`, non-temporal for parts of 256 KiB and up,
//! as the engine's D2H copies; to a slot, cached stores, the engine's for
//! an upload that returns at once or stages more than 256 MiB). So what
//! the ratios measure from 1 GiB is the engine's overhead, not a different
//! copy; up to 256 MiB the engine's blocking upload streams
//! ([`STREAMING_UPLOAD_MAX`](hostcopy_driver::cuda::staging::STREAMING_UPLOAD_MAX)),
//! and the variant of cached stores for every upload is the like-for-like
//! row. The rows give GB/s and `x pinned`; the notes give
//! lean and engine as a share of pinned and engine / lean, whose target is
//! at least 0.97 at every size, both ways.
//!
//! Every kind has its own destination (host memory or a device buffer),
//! checked byte for byte after its runs (the program stops at the first
//! wrong byte), so no wrong fast path is reported. With `--simulated` the
//! group runs against the simulated driver: the byte checks hold, the
//! figures mean nothing.

use std::hint::spin_loop;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use hostcopy_core::{HostCopyArgs, hostcopy_fn};
use hostcopy_driver::cuda::staging::{
    Stager, StagingOptions, StagingOptionsBuilder, Stores, default_workers, to_device, to_host,
};
use hostcopy_driver::cuda::{Context, DeviceBuffer, Error, Event, PinnedBuffer, Stream};

use crate::Bench;
use crate::machine::host_available;
use crate::paths::{Direction, Timed};
use crate::report::{Report, check, gbps, row};
use crate::table::size;

/// The sizes, both ways (the first alone with `--quick`).
const SIZES: [usize; 4] = [16 << 20, 64 << 20, 256 << 20, 1 << 30];

/// Pinned slots of the ring, each on a stream of its own: the engine's
/// default (`DEFAULT_BUFFERS`, a stream per buffer), measured there as
/// what keeps the link busy while one host copy runs late.
const SLOTS: usize = 4;

/// Bytes a slot carries per chunk (a chunk is `min(CHUNK, size)`): the
/// engine's default chunk, measured there as the best (smaller chunks fill
/// the driver's queue, larger ones fall out of the host's cache).
const CHUNK: usize = 16 << 20;

/// The rings measured: the engine's defaults' ring ([`CHUNK`], cached
/// stores into the slots for an upload), the baseline of the ratios; and
/// a finer one (2 MiB slots, streaming stores), whose small first chunk
/// and overlapped host copies are the most a ring can make of one 16 or
/// 64 MiB transfer. Bytes a slot and whether an upload streams.
const RINGS: [(usize, bool); 2] = [(CHUNK, false), (2 << 20, true)];

/// The engine's variant rows: a name and the options beside the
/// defaults.
type Variant = (
    &'static str,
    fn(StagingOptionsBuilder) -> StagingOptionsBuilder,
);
const VARIANTS: [Variant; 7] = [
    ("cached stores for every upload", |b| {
        b.h2d_stores(Stores::Cached)
    }),
    ("chunks of 4 MiB", |b| b.chunk(4 << 20)),
    ("chunks of 8 MiB", |b| b.chunk(8 << 20)),
    ("streaming stores", |b| b.h2d_stores(Stores::Streaming)),
    ("chunks of 4 MiB, streaming stores", |b| {
        b.chunk(4 << 20).h2d_stores(Stores::Streaming)
    }),
    ("one stream, edges from 2 MiB", |b| {
        b.streams(1).edge_chunk(2 << 20)
    }),
    ("one stream, edges from 2 MiB, streaming stores", |b| {
        b.streams(1)
            .edge_chunk(2 << 20)
            .h2d_stores(Stores::Streaming)
    }),
];

/// The target for engine / lean, at every size and both ways.
const TARGET: f64 = 0.97;

/// Runs the group.
pub(crate) fn run(bench: &Bench<'_>, report: &mut Report) -> Result<(), Error> {
    let (context, options) = (bench.context, bench.options);
    let sizes = if options.quick {
        &SIZES[..1]
    } else {
        &SIZES[..]
    };
    let rings = RINGS
        .iter()
        .map(|&(chunk, streaming)| Ring::new(context, default_workers(1), chunk, streaming))
        .collect::<Result<Vec<Ring>, Error>>()?;
    let mut stager = Stager::new(context)?;
    let mut variants = Vec::new();
    for (_, with) in VARIANTS {
        let options = with(StagingOptions::builder()).build()?;
        variants.push(Stager::with_options(context, options)?);
    }
    let kinds = kinds();
    let mut missed = Vec::new();
    for &bytes in sizes {
        // Source, upload, two host destinations and a pinned buffer.
        if host_available() < (4 + kinds.len()) * bytes {
            report.notes.push(format!(
                "lean, {}: not run, too little host memory",
                size(bytes)
            ));
            continue;
        }
        let mut memory = Memory::new(context, bytes, kinds.len())?;
        for direction in [Direction::D2H, Direction::H2D] {
            let name = match direction {
                Direction::D2H => "D2H",
                Direction::H2D => "H2D",
            };
            let label = format!("lean, {name} {}", size(bytes));
            if let Direction::H2D = direction {
                memory.stage_upload();
            }
            // Times per kind, in the order of `kinds`.
            let mut times = vec![Vec::new(); kinds.len()];
            for round in 0..=options.runs {
                for turn in 0..kinds.len() {
                    let which = (turn + round) % kinds.len();
                    let stager = match kinds[which] {
                        Kind::Variant(variant) => &mut variants[variant],
                        _ => &mut stager,
                    };
                    let elapsed = memory.once(&rings, stager, which, kinds[which], direction)?;
                    // The first round warms every kind up.
                    if round > 0 {
                        times[which].push(elapsed);
                    }
                }
            }
            memory.check(&kinds, direction, &label)?;
            // Where the smallest size's time goes: one traced transfer of
            // each engine kind.
            if bytes == SIZES[0] {
                for (index, kind) in kinds.iter().enumerate() {
                    let stager = match kind {
                        Kind::Variant(variant) => &mut variants[*variant],
                        Kind::Engine => &mut stager,
                        _ => continue,
                    };
                    let traced =
                        crate::batches::traced(&format!("{label}, {}", kind.name()), || {
                            memory
                                .once(&rings, stager, index, *kind, direction)
                                .map(drop)
                        })?;
                    report.notes.push(traced);
                }
            }

            let group = format!(
                "lean, {} {name} (x pinned: pinned {name} in the same rotation)",
                size(bytes)
            );
            let timed: Vec<Timed> = times.into_iter().map(Timed::plain).collect();
            let (pinned, lean, engine) = (&timed[0], &timed[1], &timed[2]);
            let link = gbps(bytes, pinned);
            let lean_path = |ring: &Ring| {
                let workers = match ring.workers.count() {
                    1 => "1 worker".to_owned(),
                    count => format!("{count} workers"),
                };
                let stores = match ring.h2d_streaming {
                    true => ", streaming stores",
                    false => "",
                };
                format!(
                    "lean ring: {SLOTS} pinned slots of {} on a stream each, {workers}{stores}, events polled",
                    size(ring.chunk.min(bytes)),
                )
            };
            for (kind, timed) in kinds.iter().zip(&timed) {
                let path = match kind {
                    Kind::Lean(ring) => lean_path(&rings[*ring]),
                    kind => kind.name(),
                };
                report
                    .rows
                    .push(row(&group, &path, bytes, timed, link, f64::NAN));
            }
            let chunked: Vec<String> = kinds
                .iter()
                .zip(&timed)
                .filter(|(kind, _)| matches!(kind, Kind::Variant(_) | Kind::Lean(1..)))
                .map(|(kind, timed)| {
                    format!("{} {:.1}%", kind.name(), 100.0 * gbps(bytes, timed) / link)
                })
                .collect();
            let (lean, engine) = (gbps(bytes, lean), gbps(bytes, engine));
            let ratio = engine / lean;
            if ratio < TARGET {
                missed.push(format!("{name} {} ({ratio:.3}x)", size(bytes)));
            }
            let note = format!(
                "{label}: lean {:.1}% of pinned, engine {:.1}% of pinned, engine / lean {ratio:.3}x (target >= {TARGET}x: {}); {}",
                100.0 * lean / link,
                100.0 * engine / link,
                if ratio >= TARGET { "met" } else { "missed" },
                chunked.join(", "),
            );
            println!("  {note}");
            report.notes.push(note);
        }
    }
    let outcome = if missed.is_empty() {
        "met".to_owned()
    } else {
        format!("missed at {}", missed.join(", "))
    };
    let simulated = if options.simulated {
        " (simulated driver: the figures mean nothing)"
    } else {
        ""
    };
    report.notes.push(format!(
        "lean: engine >= {TARGET}x lean at every size run, both ways: {outcome}{simulated}"
    ));
    Ok(())
}

// ---------------------------------------------------------------------
// What is compared, and the memory each kind copies to and from.

/// The kinds of transfer, in the order of their times.
#[derive(Clone, Copy)]
enum Kind {
    Pinned,
    /// The ring of `RINGS[_]`.
    Lean(usize),
    Engine,
    /// The engine with the options of `VARIANTS[_]`.
    Variant(usize),
}

impl Kind {
    fn name(self) -> String {
        match self {
            Kind::Pinned => "pinned (link)".to_owned(),
            Kind::Lean(0) => "lean ring".to_owned(),
            Kind::Lean(ring) => {
                let (chunk, _) = RINGS[ring];
                format!("lean ring of {} slots, streaming stores", size(chunk))
            }
            Kind::Engine => "staged (engine), blocking call, default options".to_owned(),
            Kind::Variant(variant) => format!("staged (engine), {}", VARIANTS[variant].0),
        }
    }
}

/// Every kind, in the order of their times: pinned, lean, engine first.
fn kinds() -> Vec<Kind> {
    let mut kinds = vec![Kind::Pinned, Kind::Lean(0), Kind::Engine];
    kinds.extend((1..RINGS.len()).map(Kind::Lean));
    kinds.extend((0..VARIANTS.len()).map(Kind::Variant));
    kinds
}

/// A device buffer per kind, all holding `source` at first, and the host
/// memory the kinds copy to and from: each kind writes its own destination,
/// so one that writes nothing cannot pass on another's bytes.
struct Memory {
    /// What the device buffers hold at first: what D2H must bring back.
    source: Vec<u8>,
    /// What H2D sends (the lean ring and the engine from here, pinned
    /// from its buffer, filled with the same bytes).
    upload: Vec<u8>,
    /// Pinned memory of the transfer's size, taken and given back by each
    /// pinned copy.
    pinned: Option<PinnedBuffer>,
    /// D2H destinations of every kind but pinned (pre-faulted), by the
    /// kind's index (index 0, pinned's, is unused and empty).
    hosts: Vec<Vec<u8>>,
    /// A device buffer per kind, by the kind's index.
    devices: Vec<DeviceBuffer>,
}

impl Memory {
    fn new(context: &Context, bytes: usize, kinds: usize) -> Result<Memory, Error> {
        let source = pattern(bytes, 1);
        let devices = (0..kinds)
            .map(|_| {
                let mut device = DeviceBuffer::new(context, bytes)?;
                device.copy_from_host(0, &source)?;
                Ok(device)
            })
            .collect::<Result<_, Error>>()?;
        let hosts = (0..kinds)
            .map(|index| match index {
                0 => Vec::new(),
                index => pattern(bytes, 2 + index as u64),
            })
            .collect();
        Ok(Memory {
            upload: pattern(bytes, 2),
            pinned: Some(PinnedBuffer::new(context, bytes)?),
            hosts,
            source,
            devices,
        })
    }

    /// Fills the pinned buffer with `upload`, for the pinned H2D copies.
    fn stage_upload(&mut self) {
        self.pinned
            .as_mut()
            .expect("every pinned copy gives the buffer back")
            .copy_from_slice(&self.upload);
    }

    /// One transfer of `kind` (the kind at `index`) in `direction`,
    /// timed.
    fn once(
        &mut self,
        rings: &[Ring],
        stager: &mut Stager,
        index: usize,
        kind: Kind,
        direction: Direction,
    ) -> Result<Duration, Error> {
        let (device, host) = (&mut self.devices[index], &mut self.hosts[index]);
        let start = Instant::now();
        match (kind, direction) {
            (Kind::Pinned, _) => {
                let buffer = self
                    .pinned
                    .take()
                    .expect("every pinned copy gives the buffer back");
                self.pinned = Some(match direction {
                    Direction::D2H => stager.device_to_pinned(buffer, &*device, 0)?,
                    Direction::H2D => stager.pinned_to_device(device, buffer, 0)?,
                });
            }
            (Kind::Lean(ring), Direction::D2H) => rings[ring].d2h(device, host)?,
            (Kind::Lean(ring), Direction::H2D) => rings[ring].h2d(device, &self.upload)?,
            (Kind::Engine | Kind::Variant(_), Direction::D2H) => {
                stager.run(to_host(&mut host[..], &*device))?;
            }
            (Kind::Engine | Kind::Variant(_), Direction::H2D) => {
                stager.run(to_device(device, &self.upload[..]))?;
            }
        }
        Ok(start.elapsed())
    }

    /// Stops the program unless every kind's destination holds what it
    /// was sent: `source` in host memory after D2H, `upload` in each
    /// device buffer after H2D (read back).
    fn check(&mut self, kinds: &[Kind], direction: Direction, label: &str) -> Result<(), Error> {
        match direction {
            Direction::D2H => {
                let pinned = self
                    .pinned
                    .as_deref()
                    .expect("every pinned copy gives the buffer back");
                for (index, kind) in kinds.iter().enumerate() {
                    let got = match kind {
                        Kind::Pinned => pinned,
                        _ => &self.hosts[index][..],
                    };
                    check(&format!("{label}, {}", kind.name()), got, &self.source)?;
                }
            }
            Direction::H2D => {
                // The D2H destinations are checked already: read back into
                // the lean ring's.
                for (kind, device) in kinds.iter().zip(&self.devices) {
                    device.copy_to_host(0, &mut self.hosts[1])?;
                    check(
                        &format!("{label}, {}", kind.name()),
                        &self.hosts[1],
                        &self.upload,
                    )?;
                }
            }
        }
        Ok(())
    }
}

/// `len` bytes of `seed`'s pattern, written once (so pre-faulted): each
/// 8-byte word a distinct value of its index, so a chunk copied to the
/// wrong place never matches.
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut bytes = vec![0u8; len];
    for (index, word) in bytes.chunks_mut(8).enumerate() {
        let value = (index as u64 ^ (seed << 48)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        word.copy_from_slice(&value.to_le_bytes()[..word.len()]);
    }
    bytes
}

// ---------------------------------------------------------------------
// The ring.

/// Pinned slots, a stream and an event per slot, and the workers.
struct Ring {
    /// Bytes a slot.
    chunk: usize,
    /// Whether an upload fills the slots with streaming stores.
    h2d_streaming: bool,
    slots: Vec<PinnedBuffer>,
    streams: Vec<Stream>,
    events: Vec<Event>,
    workers: Workers,
}

impl Ring {
    fn new(
        context: &Context,
        workers: usize,
        chunk: usize,
        h2d_streaming: bool,
    ) -> Result<Ring, Error> {
        let mut ring = Ring {
            chunk,
            h2d_streaming,
            slots: Vec::new(),
            streams: Vec::new(),
            events: Vec::new(),
            workers: Workers::start(workers),
        };
        for _ in 0..SLOTS {
            ring.slots.push(PinnedBuffer::new(context, chunk)?);
            ring.streams.push(Stream::new(context)?);
            ring.events.push(Event::ordering(context)?);
        }
        Ok(ring)
    }

    /// Device to host: the first chunks' copies queued into every slot,
    /// then per chunk, in order: poll its slot's event, copy the slot out
    /// with the workers, queue the slot's next chunk.
    fn d2h(&self, device: &DeviceBuffer, host: &mut [u8]) -> Result<(), Error> {
        let chunk = self.chunk.min(host.len());
        let chunks = host.len().div_ceil(chunk);
        let _awake = self.workers.wake();
        let result = (|| {
            for index in 0..chunks.min(SLOTS) {
                self.queue_d2h(device, chunk, host.len(), index)?;
            }
            for index in 0..chunks {
                let slot = index % SLOTS;
                self.poll(slot)?;
                let (offset, len) = span(index, chunk, host.len());
                // SAFETY: the slot's event has passed, so its copy of this
                // chunk is done and none is queued into it until just
                // below; `len` bytes fit in the slot (`self.chunk`) and in
                // `host` from `offset`; pageable and pinned memory are
                // disjoint.
                unsafe {
                    self.workers.copy(
                        host[offset..].as_mut_ptr(),
                        self.slots[slot].raw_ptr(),
                        len,
                        true,
                    );
                }
                if index + SLOTS < chunks {
                    self.queue_d2h(device, chunk, host.len(), index + SLOTS)?;
                }
            }
            Ok(())
        })();
        self.settle(result)
    }

    /// Queues chunk `index`'s copy into its slot and records the slot's
    /// event after it.
    fn queue_d2h(
        &self,
        device: &DeviceBuffer,
        chunk: usize,
        total: usize,
        index: usize,
    ) -> Result<(), Error> {
        let slot = index % SLOTS;
        let (offset, len) = span(index, chunk, total);
        let stream = self.streams[slot].as_stream();
        // SAFETY: the slot holds `self.chunk >= len` pinned bytes, which nothing
        // touches until the event recorded below has been seen passed
        // (`poll`); after an error `settle` waits for every stream before
        // the ring can be dropped. The device range is checked by the call.
        unsafe { stream.copy_device_to_host(self.slots[slot].raw_ptr(), device, offset, len)? };
        self.events[slot].record(stream)
    }

    /// Host to device: per chunk, in order: poll its slot's event (the
    /// slot's previous chunk has reached the device), copy the chunk into
    /// the slot with the workers, queue its copy to the device and record
    /// the slot's event; then poll every slot's last event.
    fn h2d(&self, device: &mut DeviceBuffer, host: &[u8]) -> Result<(), Error> {
        let chunk = self.chunk.min(host.len());
        let chunks = host.len().div_ceil(chunk);
        let _awake = self.workers.wake();
        let result = (|| {
            for index in 0..chunks {
                let slot = index % SLOTS;
                if index >= SLOTS {
                    self.poll(slot)?;
                }
                let (offset, len) = span(index, chunk, host.len());
                let staged = self.slots[slot].raw_ptr();
                // SAFETY: the slot is free (its event has passed, or no
                // copy was ever queued from it); `len` bytes fit in the
                // slot (`self.chunk`) and in `host` from `offset`; pageable and
                // pinned memory are disjoint.
                unsafe {
                    self.workers
                        .copy(staged, host[offset..].as_ptr(), len, self.h2d_streaming)
                };
                let stream = self.streams[slot].as_stream();
                // SAFETY: the slot holds the chunk, and nothing writes it
                // until the event recorded below has been seen passed
                // (`poll`, here or at the end); after an error `settle`
                // waits for every stream first. `device` is borrowed
                // uniquely until then; its range is checked by the call.
                unsafe { stream.copy_host_to_device(&*device, offset, staged, len)? };
                self.events[slot].record(stream)?;
            }
            (0..chunks.min(SLOTS)).try_for_each(|slot| self.poll(slot))
        })();
        self.settle(result)
    }

    /// Waits for `slot`'s last recorded event, polling.
    fn poll(&self, slot: usize) -> Result<(), Error> {
        while !self.events[slot].query()? {
            spin_loop();
        }
        Ok(())
    }

    /// After an error, waits for every stream (whatever it answers), so
    /// that no queued copy still reads or writes a slot or a buffer the
    /// caller may free.
    fn settle(&self, result: Result<(), Error>) -> Result<(), Error> {
        if result.is_err() {
            for stream in &self.streams {
                let _ = stream.as_stream().synchronize();
            }
        }
        result
    }
}

/// Chunk `index`'s offset and length in a transfer of `total` bytes.
fn span(index: usize, chunk: usize, total: usize) -> (usize, usize) {
    let offset = index * chunk;
    (offset, chunk.min(total - offset))
}

// ---------------------------------------------------------------------
// The workers.

/// The chunk being copied, which the workers split into equal parts, one
/// each. The calling thread posts a chunk only once every worker has
/// copied its part of the last, so the fields never change under a worker.
struct Job {
    /// Bumped once per chunk, after the fields below are set.
    generation: AtomicU64,
    dst: AtomicPtr<u8>,
    src: AtomicPtr<u8>,
    len: AtomicUsize,
    /// Through `hostcopy_fn` (non-temporal stores for large parts), or
    /// cached stores.
    streaming: AtomicBool,
    /// Workers done with the current chunk.
    done: AtomicUsize,
    /// During a transfer the workers spin for the next chunk; between
    /// transfers they sleep, leaving the cores to the other kinds.
    active: AtomicBool,
    stop: AtomicBool,
}

/// Worker threads started once, before any timing, ended on drop.
struct Workers {
    job: Arc<Job>,
    threads: Vec<JoinHandle<()>>,
}

/// The workers spinning for chunks until dropped.
struct Awake<'a>(&'a Workers);

impl Drop for Awake<'_> {
    fn drop(&mut self) {
        self.0.job.active.store(false, Ordering::Release);
    }
}

impl Workers {
    fn start(count: usize) -> Workers {
        let job = Arc::new(Job {
            generation: AtomicU64::new(0),
            dst: AtomicPtr::new(std::ptr::null_mut()),
            src: AtomicPtr::new(std::ptr::null_mut()),
            len: AtomicUsize::new(0),
            streaming: AtomicBool::new(false),
            done: AtomicUsize::new(0),
            active: AtomicBool::new(false),
            stop: AtomicBool::new(false),
        });
        let threads = (0..count)
            .map(|index| {
                let job = Arc::clone(&job);
                thread::Builder::new()
                    .name(format!("lean-copy-{index}"))
                    .spawn(move || work(&job, index, count))
                    .expect("a lean ring worker thread")
            })
            .collect();
        Workers { job, threads }
    }

    fn count(&self) -> usize {
        self.threads.len()
    }

    /// Wakes the workers to spin for chunks until the guard is dropped.
    fn wake(&self) -> Awake<'_> {
        self.job.active.store(true, Ordering::Release);
        for thread in &self.threads {
            thread.thread().unpark();
        }
        Awake(self)
    }

    /// Copies `len` bytes from `src` to `dst`, split between the workers
    /// (awake: see [`wake`](Self::wake)), and returns once every part is
    /// copied and visible to this thread.
    ///
    /// # Safety
    ///
    /// `src` is readable and `dst` writable for `len` bytes, the ranges
    /// are disjoint, and nothing else touches them until this returns.
    unsafe fn copy(&self, dst: *mut u8, src: *const u8, len: usize, streaming: bool) {
        let job = &*self.job;
        job.done.store(0, Ordering::Relaxed);
        job.dst.store(dst, Ordering::Relaxed);
        job.src.store(src.cast_mut(), Ordering::Relaxed);
        job.len.store(len, Ordering::Relaxed);
        job.streaming.store(streaming, Ordering::Relaxed);
        job.generation.fetch_add(1, Ordering::Release);
        while job.done.load(Ordering::Acquire) < self.threads.len() {
            spin_loop();
        }
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        self.job.stop.store(true, Ordering::Release);
        for thread in self.threads.drain(..) {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}

/// Worker `index` of `count`: copies its part of every chunk posted.
fn work(job: &Job, index: usize, count: usize) {
    let mut seen = 0;
    loop {
        let generation = job.generation.load(Ordering::Acquire);
        if generation != seen {
            seen = generation;
            let len = job.len.load(Ordering::Relaxed);
            // Equal parts, whole cache lines.
            let per = len.div_ceil(count).next_multiple_of(64);
            let start = (index * per).min(len);
            let part = per.min(len - start);
            let dst = job.dst.load(Ordering::Relaxed).wrapping_add(start);
            let src = job.src.load(Ordering::Relaxed).wrapping_add(start);
            if job.streaming.load(Ordering::Relaxed) {
                let record =
                    HostCopyArgs::new(dst.expose_provenance(), src.expose_provenance(), part);
                // SAFETY: `Workers::copy`'s caller gave ranges of `len`
                // bytes, disjoint and untouched by anyone else until every
                // worker has counted itself done below; this part lies
                // within them. `hostcopy_fn` fences its non-temporal
                // stores before it returns.
                unsafe { hostcopy_fn(record.user_data()) };
            } else {
                // SAFETY: as above.
                unsafe { std::ptr::copy_nonoverlapping(src, dst, part) };
            }
            job.done.fetch_add(1, Ordering::Release);
        } else if job.stop.load(Ordering::Acquire) {
            return;
        } else if job.active.load(Ordering::Acquire) {
            spin_loop();
        } else {
            // Woken by `wake` or by drop; a spurious return loops again.
            thread::park();
        }
    }
}
