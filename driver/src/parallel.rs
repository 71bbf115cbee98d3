//! A second host function, [`hostcopy_parallel_fn`], that reads the same
//! record as `hostcopy_fn` and splits its copy across a persistent pool of
//! worker threads (feature `std`).
//!
//! Why: one host thread copies pinned memory into pageable memory at a few
//! GB/s, slower than the driver's own pageable path; a staged copy beats that
//! path only when the host side keeps up with the link. And every host
//! function of a context runs on one driver thread, so a faster copy also
//! shortens the wait of every other host function of the context.
//!
//! The pool is started once ([`CopyWorkers::start`]) before any launch: the
//! host function never spawns threads, allocates, or calls CUDA. The driver's
//! thread takes part in the copy and returns only when every part is copied
//! and visible to other threads (each part ends in `hostcopy_fn`'s fence; the
//! parts are counted with release and acquire).
//!
//! A record is split into parts claimed with one atomic word holding the job
//! number and the next part, so a worker that wakes late can never claim a
//! part of a later job with an earlier job's addresses. Records below
//! [`PARALLEL_THRESHOLD`], overlapping records and records `hostcopy_fn`
//! rejects go to `hostcopy_fn` whole, unchanged: the contract is the same.

use core::ffi::c_void;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::format;
use std::sync::{Condvar, Mutex, OnceLock};
use std::thread;
use std::time::Duration;

use hostcopy_core::{HostCopyArgs, hostcopy_fn};

/// Records smaller than this are copied by the calling thread alone: waking
/// workers costs more than they would save.
pub const PARALLEL_THRESHOLD: usize = 1 << 20;

/// Smallest part a record is split into.
const MIN_PART: usize = 256 << 10;

/// Most worker threads a pool starts: [`CopyWorkers::start`] clamps to it.
/// Far above any useful count (one per core), and low enough that part
/// arithmetic never comes near overflow.
pub const MAX_WORKERS: usize = 1024;

/// How long a worker spins for the next job before it sleeps.
const SPIN: Duration = Duration::from_micros(50);

static WORKERS: OnceLock<CopyWorkers> = OnceLock::new();

/// The worker pool behind [`hostcopy_parallel_fn`]: one per process.
#[derive(Debug)]
pub struct CopyWorkers {
    /// Worker threads running (fewer than asked if spawning one failed).
    workers: AtomicUsize,
    /// Workers that take part in copies (the rest sleep): `set_active`.
    active: AtomicUsize,
    job: Job,
    /// Serializes callers: the host-function threads of several contexts.
    caller: Mutex<()>,
    /// Sleeping workers wait here for the next job number.
    sleep: Mutex<u32>,
    wake: Condvar,
}

/// The copy being split, published by bumping the job number in `claim`.
#[derive(Debug)]
struct Job {
    /// High 32 bits: job number. Low 32 bits: next part to claim.
    claim: AtomicU64,
    dst: AtomicUsize,
    src: AtomicUsize,
    nbytes: AtomicUsize,
    part: AtomicUsize,
    parts: AtomicUsize,
    /// Parts copied so far.
    done: AtomicUsize,
}

impl CopyWorkers {
    /// Starts the pool with `workers` threads besides the driver's own,
    /// clamped to [`MAX_WORKERS`] (once per process). With 0 workers the
    /// driver's thread copies alone.
    ///
    /// A pool that is already running is not changed: the call says so with
    /// [`StartError::AlreadyStarted`] and how many workers it has
    /// ([`CopyWorkers::get`] returns it). If spawning a thread fails, the
    /// pool keeps the workers already started and says how many.
    pub fn start(workers: usize) -> Result<&'static CopyWorkers, StartError> {
        let workers = workers.min(MAX_WORKERS);
        let mut first = false;
        let pool = WORKERS.get_or_init(|| {
            first = true;
            CopyWorkers {
                workers: AtomicUsize::new(0),
                active: AtomicUsize::new(0),
                job: Job {
                    claim: AtomicU64::new(0),
                    dst: AtomicUsize::new(0),
                    src: AtomicUsize::new(0),
                    nbytes: AtomicUsize::new(0),
                    part: AtomicUsize::new(0),
                    parts: AtomicUsize::new(0),
                    done: AtomicUsize::new(0),
                },
                caller: Mutex::new(()),
                sleep: Mutex::new(0),
                wake: Condvar::new(),
            }
        });
        if !first {
            return Err(StartError::AlreadyStarted {
                workers: pool.workers(),
            });
        }
        for index in 0..workers {
            let spawned = thread::Builder::new()
                .name(format!("hostcopy-worker-{index}"))
                .spawn(move || pool.work(index));
            if let Err(error) = spawned {
                return Err(StartError::Spawn {
                    started: index,
                    error,
                });
            }
            // Counted once running: a worker index below `workers` exists.
            pool.workers.store(index + 1, Ordering::Release);
            pool.active.store(index + 1, Ordering::Relaxed);
        }
        Ok(pool)
    }

    /// The running pool, if started.
    pub fn get() -> Option<&'static CopyWorkers> {
        WORKERS.get()
    }

    /// Number of worker threads started (the driver's thread copies too).
    pub fn workers(&self) -> usize {
        self.workers.load(Ordering::Acquire)
    }

    /// Number of workers that take part in copies.
    pub fn active(&self) -> usize {
        self.active.load(Ordering::Relaxed)
    }

    /// Lets only the first `active` workers take part in later copies (at
    /// most the number started): for measuring, or for sharing the machine.
    pub fn set_active(&self, active: usize) {
        self.active
            .store(active.min(self.workers()), Ordering::Relaxed);
    }

    /// Copies what `args` says, split over the workers and the calling thread.
    ///
    /// # Safety
    ///
    /// As for `hostcopy_fn` with the record's address as `user_data`.
    unsafe fn copy(&self, args: &HostCopyArgs) {
        // At most MAX_WORKERS + 1: no overflow below.
        let participants = self.active().min(MAX_WORKERS) + 1;
        let part = (args.nbytes / (2 * participants))
            .next_multiple_of(64 << 10)
            .max(MIN_PART);
        let parts = args.nbytes.div_ceil(part);
        let _one_caller = self
            .caller
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let job = &self.job;
        job.dst.store(args.dst, Ordering::Relaxed);
        job.src.store(args.src, Ordering::Relaxed);
        job.nbytes.store(args.nbytes, Ordering::Relaxed);
        job.part.store(part, Ordering::Relaxed);
        job.parts.store(parts, Ordering::Relaxed);
        job.done.store(0, Ordering::Relaxed);
        let number = (job.claim.load(Ordering::Relaxed) >> 32).wrapping_add(1) as u32;
        // Publishes the fields above to every worker that sees this number.
        job.claim.store(u64::from(number) << 32, Ordering::Release);
        {
            let mut latest = self
                .sleep
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            *latest = number;
        }
        self.wake.notify_all();

        // The driver's thread copies parts too, then waits for the rest.
        // SAFETY: the caller's contract covers every part of the record.
        while unsafe { self.copy_one_part(number) } {}
        while job.done.load(Ordering::Acquire) < parts {
            core::hint::spin_loop();
        }
    }

    /// Claims and copies one part of job `number`. Whether there was one.
    ///
    /// # Safety
    ///
    /// Job `number`'s record is valid for `hostcopy_fn` until all its parts are done.
    unsafe fn copy_one_part(&self, number: u32) -> bool {
        let job = &self.job;
        let mut claim = job.claim.load(Ordering::Acquire);
        loop {
            if (claim >> 32) as u32 != number {
                return false;
            }
            // Read before the claim; used only if the claim succeeds, which
            // proves the job was still `number` and these fields its own.
            let parts = job.parts.load(Ordering::Relaxed);
            let index = (claim & u64::from(u32::MAX)) as usize;
            if index >= parts {
                return false;
            }
            let (dst, src, nbytes, part) = (
                job.dst.load(Ordering::Relaxed),
                job.src.load(Ordering::Relaxed),
                job.nbytes.load(Ordering::Relaxed),
                job.part.load(Ordering::Relaxed),
            );
            match job.claim.compare_exchange_weak(
                claim,
                claim + 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    let offset = index * part;
                    let piece =
                        HostCopyArgs::new(dst + offset, src + offset, part.min(nbytes - offset));
                    // SAFETY: a part of a record valid for `hostcopy_fn`
                    // (our caller); it ends with the stores' fence.
                    unsafe { hostcopy_fn(piece.user_data()) };
                    job.done.fetch_add(1, Ordering::Release);
                    return true;
                }
                Err(now) => claim = now,
            }
        }
    }

    /// A worker's life: wait for a job, copy parts of it, repeat.
    fn work(&self, index: usize) {
        let mut seen = 0u32;
        loop {
            let number = self.next_job(seen);
            seen = number;
            if index >= self.active() {
                continue;
            }
            // SAFETY: parts of job `number` are valid until all are done,
            // and the caller waits for that.
            while unsafe { self.copy_one_part(number) } {}
        }
    }

    /// Waits for a job numbered other than `seen`: spins a little, then sleeps.
    fn next_job(&self, seen: u32) -> u32 {
        let start = std::time::Instant::now();
        while start.elapsed() < SPIN {
            let number = (self.job.claim.load(Ordering::Acquire) >> 32) as u32;
            if number != seen {
                return number;
            }
            core::hint::spin_loop();
        }
        let mut latest = self
            .sleep
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        while *latest == seen {
            latest = self
                .wake
                .wait(latest)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        *latest
    }
}

/// Why [`CopyWorkers::start`] did not start a pool as asked.
#[derive(Debug)]
#[non_exhaustive]
pub enum StartError {
    /// A pool is running already; it was left as it is.
    AlreadyStarted {
        /// Its worker threads.
        workers: usize,
    },
    /// Spawning a worker thread failed; the pool runs with the workers
    /// started before it.
    Spawn {
        /// Workers running.
        started: usize,
        /// Why the next one did not start.
        error: std::io::Error,
    },
}

impl core::fmt::Display for StartError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            StartError::AlreadyStarted { workers } => write!(
                f,
                "the copy worker pool is already running with {workers} workers"
            ),
            StartError::Spawn { started, error } => write!(
                f,
                "spawning copy worker {started} failed ({error}); the pool runs with {started}"
            ),
        }
    }
}

impl std::error::Error for StartError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StartError::Spawn { error, .. } => Some(error),
            StartError::AlreadyStarted { .. } => None,
        }
    }
}

/// A `CUhostFn` with `hostcopy_fn`'s record and contract, whose copy is split
/// across the [`CopyWorkers`] pool.
///
/// Without a started pool, or for records below [`PARALLEL_THRESHOLD`],
/// overlapping records, and records `hostcopy_fn` rejects, it is
/// `hostcopy_fn`. The driver's thread waits for the workers, so unlike
/// `hostcopy_fn` it blocks (for the length of the copy) and shares the pool
/// with other contexts' host functions one at a time.
///
/// # Safety
///
/// As for `hostcopy_fn`.
pub unsafe extern "C" fn hostcopy_parallel_fn(user_data: *mut c_void) {
    // SAFETY: `user_data` is null or a record (our caller).
    let args = unsafe { HostCopyArgs::read(user_data) };
    match (args, WORKERS.get()) {
        (Some(args), Some(pool)) if pool.active() > 0 && splittable(&args) => {
            // SAFETY: the record is valid for `hostcopy_fn` (our caller).
            unsafe { pool.copy(&args) }
        }
        // SAFETY: forwarded unchanged.
        _ => unsafe { hostcopy_fn(user_data) },
    }
}

/// Whether the copy is large, valid and free of overlap, so parts can run at once.
fn splittable(args: &HostCopyArgs) -> bool {
    args.nbytes >= PARALLEL_THRESHOLD
        && !args.is_rejected()
        && args.dst.abs_diff(args.src) >= args.nbytes
        && args.nbytes / MIN_PART < u32::MAX as usize
}
