//! A second host function, [`hostcopy_parallel_fn`], that reads the same
//! record as `hostcopy_fn` and splits its copy across a persistent pool of
//! worker threads (feature `std`), and the pool type itself, [`CopyPool`].
//!
//! Why: one host thread copies pinned memory into pageable memory at a few
//! GB/s, slower than the driver's own pageable path; a staged copy beats that
//! path only when the host side keeps up with the link. And every host
//! function of a context runs on one driver thread, so a faster copy also
//! shortens the wait of every other host function of the context.
//!
//! The process-wide pool is started once ([`CopyWorkers::start`]) before any
//! launch: the host function never spawns threads, allocates, or calls CUDA.
//! A [`CopyPool`] of one's own (the CUDA layer's stager has one) is the same
//! pool, with threads that end when it is dropped. The calling thread takes
//! part in the copy and returns only when every part is copied and visible
//! to other threads (each part ends in `hostcopy_fn`'s fence or, for cached
//! stores, needs none; the parts are counted with release and acquire).
//!
//! A record is split into parts claimed with one atomic word holding the job
//! number and the next part, so a worker that wakes late can never claim a
//! part of a later job with an earlier job's addresses. Records below
//! [`PARALLEL_THRESHOLD`], overlapping records and records `hostcopy_fn`
//! rejects go to `hostcopy_fn` whole, unchanged: the contract is the same.

use core::ffi::c_void;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::format;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};
use std::vec::Vec;

use crate::prefault::FaultIn;
use hostcopy_core::{HostCopyArgs, hostcopy_fn};

/// Records smaller than this are copied by the calling thread alone: waking
/// workers costs more than they would save.
pub const PARALLEL_THRESHOLD: usize = 1 << 20;

/// Smallest part a record is split into. Measured on the H200 host: with
/// 64 KiB parts a 4 MiB staged chunk is copied out in 121 us, with 256 KiB
/// parts in 231 us, against 78 us on the link (docs/design-record.md, "A
/// pool of copy workers for each chunk's host copy").
const MIN_PART: usize = 64 << 10;

/// Most worker threads a pool starts: [`CopyWorkers::start`] and
/// [`CopyPool::new`] clamp to it. Far above any useful count (one per core),
/// and low enough that part arithmetic never comes near overflow.
pub const MAX_WORKERS: usize = 1024;

/// How long a worker spins for the next job before it sleeps.
const SPIN: Duration = Duration::from_micros(50);

/// Worker threads of every pool in the process that have not ended.
static RUNNING: AtomicUsize = AtomicUsize::new(0);

static WORKERS: OnceLock<CopyWorkers> = OnceLock::new();

/// How a copy's bytes are written.
///
/// Which is faster into a staging buffer depends on the host and on when
/// the DMA engine reads it (docs/design-record.md, "Non-temporal stores in
/// `hostcopy_fn`; an upload's staging stores chosen by whether its caller
/// waits"): on the H200 host, 1 GiB host to device, cached stores 53.2 GB/s
/// (96% of pinned), streaming 41.5 (75%); on H100 hosts one blocking
/// upload of 16 MiB 60% of pinned with streaming stores against 39% with
/// cached, and uploads back to back faster with cached ones. The CUDA
/// layer's stager chooses per upload unless told
/// (`StagingOptionsBuilder::h2d_stores`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Stores {
    /// Non-temporal stores (`hostcopy_fn`'s path for large copies on
    /// x86_64): the destination's lines go to memory, not to the cache.
    Streaming,
    /// Plain cached stores (`copy_nonoverlapping`): the lines may still be
    /// in the host's cache when the DMA engine reads them.
    Cached,
}

/// A pool of copy worker threads that splits one record's copy across its
/// threads and the calling thread. Its threads end when it is dropped.
///
/// [`hostcopy_parallel_fn`]'s process-wide pool ([`CopyWorkers`]) is one of
/// these that is never dropped; the CUDA layer's stager owns another, so two
/// GPUs staging at once never wait for each other's copies.
///
/// ```
/// use hostcopy_driver::HostCopyArgs;
/// use hostcopy_driver::parallel::{CopyPool, Stores};
///
/// let pool = CopyPool::new(2);
/// let src = vec![7u8; 3 << 20];
/// let mut dst = vec![0u8; 3 << 20];
/// let record = HostCopyArgs::new(
///     dst.as_mut_ptr().expose_provenance(),
///     src.as_ptr().expose_provenance(),
///     src.len(),
/// );
/// // SAFETY: two live, disjoint vectors of `src.len()` bytes.
/// unsafe { pool.copy(&record, Stores::Cached) };
/// assert!(dst == src);
/// ```
#[derive(Debug)]
pub struct CopyPool {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

/// What the workers and the caller share: the copy being split, published
/// by bumping the job number in `claim`.
#[derive(Debug)]
struct Shared {
    /// High 32 bits: job number. Low 32 bits: next part to claim.
    claim: AtomicU64,
    dst: AtomicUsize,
    src: AtomicUsize,
    nbytes: AtomicUsize,
    /// Address of a list of records, one per part; 0: parts of one record.
    list: AtomicUsize,
    part: AtomicUsize,
    parts: AtomicUsize,
    /// A [`Work`] as `usize`.
    work: AtomicUsize,
    /// Parts copied so far.
    done: AtomicUsize,
    /// Workers that take part in copies (the rest sleep): `set_active`.
    active: AtomicUsize,
    /// Serializes callers: for the process-wide pool, the host-function
    /// threads of several contexts.
    caller: Mutex<()>,
    /// Sleeping workers wait here for the next job number.
    sleep: Mutex<u32>,
    wake: Condvar,
    /// Set when the pool is dropped: workers return.
    stop: AtomicBool,
}

impl CopyPool {
    /// Starts a pool with `workers` threads besides the calling thread,
    /// clamped to [`MAX_WORKERS`]; fewer if spawning one fails
    /// ([`workers`](Self::workers) says how many). With 0 workers the
    /// calling thread copies alone.
    pub fn new(workers: usize) -> CopyPool {
        CopyPool::spawn(workers, "hostcopy-pool").0
    }

    /// Starts up to `workers` threads named `name-{index}`, and why the next
    /// one did not start if spawning failed.
    pub(crate) fn spawn(workers: usize, name: &str) -> (CopyPool, Option<std::io::Error>) {
        let workers = workers.min(MAX_WORKERS);
        let shared = Arc::new(Shared {
            claim: AtomicU64::new(0),
            dst: AtomicUsize::new(0),
            src: AtomicUsize::new(0),
            nbytes: AtomicUsize::new(0),
            list: AtomicUsize::new(0),
            part: AtomicUsize::new(0),
            parts: AtomicUsize::new(0),
            work: AtomicUsize::new(Work::Streaming as usize),
            done: AtomicUsize::new(0),
            active: AtomicUsize::new(0),
            caller: Mutex::new(()),
            sleep: Mutex::new(0),
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        let mut threads = Vec::with_capacity(workers);
        let mut failed = None;
        for index in 0..workers {
            let worker = Arc::clone(&shared);
            // Counted before the thread runs, so its end is never counted first.
            RUNNING.fetch_add(1, Ordering::Relaxed);
            let spawned = thread::Builder::new()
                .name(format!("{name}-{index}"))
                .spawn(move || {
                    worker.work(index);
                    // Release: whoever joined this thread, or sees the count
                    // drop, sees that it has left the pool's state alone.
                    RUNNING.fetch_sub(1, Ordering::Release);
                });
            match spawned {
                Ok(handle) => threads.push(handle),
                Err(error) => {
                    RUNNING.fetch_sub(1, Ordering::Relaxed);
                    failed = Some(error);
                    break;
                }
            }
        }
        shared.active.store(threads.len(), Ordering::Relaxed);
        (CopyPool { shared, threads }, failed)
    }

    /// Number of worker threads started (the calling thread copies too).
    pub fn workers(&self) -> usize {
        self.threads.len()
    }

    /// Number of workers that take part in copies.
    pub fn active(&self) -> usize {
        self.shared.active.load(Ordering::Relaxed)
    }

    /// Lets only the first `active` workers take part in later copies (at
    /// most the number started): for measuring, or for sharing the machine.
    pub fn set_active(&self, active: usize) {
        self.shared
            .active
            .store(active.min(self.workers()), Ordering::Relaxed);
    }

    /// Copies what `args` says with `stores`, split over the active workers
    /// and the calling thread, and returns once every byte is copied and
    /// visible to the calling thread. Callers take turns. Never panics,
    /// allocates or calls CUDA, so it may run inside a host function.
    ///
    /// # Safety
    ///
    /// `args` is valid for `hostcopy_fn` and not rejected by it
    /// ([`HostCopyArgs::is_rejected`]): its source is readable and its
    /// destination writable for `nbytes` bytes until this returns, through
    /// exposed provenance. The two ranges do not overlap.
    pub unsafe fn copy(&self, args: &HostCopyArgs, stores: Stores) {
        // At most MAX_WORKERS + 1: no overflow below.
        let participants = self.active().min(MAX_WORKERS) + 1;
        let part = (args.nbytes / (2 * participants))
            .next_multiple_of(64 << 10)
            .max(MIN_PART);
        let parts = args.nbytes.div_ceil(part);
        // Below the threshold, waking sleeping workers costs more than they
        // would save.
        let small = args.nbytes < PARALLEL_THRESHOLD;
        if participants == 1 || small || parts < 2 || parts >= u32::MAX as usize {
            // SAFETY: our caller's contract.
            unsafe { copy_part(args, stores) };
            return;
        }
        // SAFETY: our caller's contract covers every part of the record.
        unsafe { self.split(args, None, part, parts, stores) };
    }

    /// Copies every record of `list`, each as one part, over the active
    /// workers and the calling thread; returns once every byte is copied
    /// and visible to the calling thread. For many small copies (the
    /// blocks of a batch): cut large ones before, so the parts balance.
    ///
    /// # Safety
    ///
    /// Every record is as [`copy`](Self::copy) asks, and no two records'
    /// ranges overlap where one of them is a destination.
    // Used by the staging layer's host function (feature `cuda`).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) unsafe fn copy_list(&self, list: &[HostCopyArgs], stores: Stores) {
        match list {
            [] => {}
            // SAFETY: our caller's contract.
            [one] => unsafe { self.copy(one, stores) },
            _ if self.active() == 0 || list.len() >= u32::MAX as usize => {
                for args in list {
                    // SAFETY: our caller's contract, record by record.
                    unsafe { copy_part(args, stores) };
                }
            }
            // SAFETY: our caller's contract, record by record; `list`
            // outlives the call, which waits for every part.
            _ => unsafe { self.split(&list[0], Some(list), 0, list.len(), stores) },
        }
    }

    /// Makes the pages of every range of `list` (`dst`, `nbytes`; `src`
    /// unused) present, each range as one part, over the active workers
    /// and the calling thread ([`prefault`](crate::prefault)'s
    /// `MADV_POPULATE_WRITE`, or a write that keeps the byte at each page, as `how`
    /// says).
    /// Returns once every part is done.
    ///
    /// # Safety
    ///
    /// Every range is writable through exposed provenance, and no thread
    /// but the pool's reads or writes it until this returns; no two ranges
    /// overlap.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) unsafe fn prefault_list(&self, list: &[HostCopyArgs], how: FaultIn) {
        match list {
            [] => {}
            // SAFETY: our caller's contract.
            [one] => unsafe { prefault_part(one, how) },
            _ if self.active() == 0 || list.len() >= u32::MAX as usize => {
                for args in list {
                    // SAFETY: our caller's contract, range by range.
                    unsafe { prefault_part(args, how) };
                }
            }
            // SAFETY: our caller's contract, range by range; `list`
            // outlives the call, which waits for every part.
            _ => unsafe { self.split(&list[0], Some(list), 0, list.len(), Work::from(how)) },
        }
    }

    /// Publishes a job of `parts` parts (of `args`, `part` bytes each, or
    /// the records of `list`), copies parts until none is left, and waits
    /// for the workers' parts.
    ///
    /// # Safety
    ///
    /// As for [`copy`](Self::copy) and [`copy_list`](Self::copy_list).
    unsafe fn split(
        &self,
        args: &HostCopyArgs,
        list: Option<&[HostCopyArgs]>,
        part: usize,
        parts: usize,
        work: impl Into<Work>,
    ) {
        let shared = &*self.shared;
        let _one_caller = shared
            .caller
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        shared.dst.store(args.dst, Ordering::Relaxed);
        shared.src.store(args.src, Ordering::Relaxed);
        shared.nbytes.store(args.nbytes, Ordering::Relaxed);
        shared.list.store(
            list.map_or(0, |list| list.as_ptr().expose_provenance()),
            Ordering::Relaxed,
        );
        shared.part.store(part, Ordering::Relaxed);
        shared.parts.store(parts, Ordering::Relaxed);
        shared.work.store(work.into() as usize, Ordering::Relaxed);
        shared.done.store(0, Ordering::Relaxed);
        let number = (shared.claim.load(Ordering::Relaxed) >> 32).wrapping_add(1) as u32;
        // Publishes the fields above to every worker that sees this number.
        shared
            .claim
            .store(u64::from(number) << 32, Ordering::Release);
        {
            let mut latest = shared
                .sleep
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            *latest = number;
        }
        shared.wake.notify_all();

        // The calling thread copies parts too, then waits for the rest.
        // SAFETY: the caller's contract covers every part of the job.
        while unsafe { shared.copy_one_part(number) } {}
        // Acquire: pairs with each part's Release count, so every part's
        // bytes happen before the return.
        while shared.done.load(Ordering::Acquire) < parts {
            core::hint::spin_loop();
        }
    }
}

impl Drop for CopyPool {
    /// Stops the workers and joins them: no copy is running (`copy` borrows
    /// the pool), so each is waiting for a job.
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        {
            // Under the lock: a worker between its check and its wait
            // cannot miss the notification.
            let _latest = self
                .shared
                .sleep
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            self.shared.wake.notify_all();
        }
        for handle in self.threads.drain(..) {
            let _ = handle.join();
        }
    }
}

/// Worker threads of every [`CopyPool`] in the process (the process-wide
/// pool's included) that have not ended: a dropped pool's are gone.
pub fn running_workers() -> usize {
    RUNNING.load(Ordering::Acquire)
}

/// What the parts of a job do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Work {
    /// Copy with [`Stores::Streaming`].
    Streaming,
    /// Copy with [`Stores::Cached`].
    Cached,
    /// Make the destination's pages present with [`FaultIn::Advise`]; no
    /// copy.
    Prefault,
    /// The same with [`FaultIn::Write`].
    PrefaultWrite,
}

impl From<FaultIn> for Work {
    fn from(how: FaultIn) -> Work {
        match how {
            FaultIn::Advise => Work::Prefault,
            FaultIn::Write => Work::PrefaultWrite,
        }
    }
}

impl From<Stores> for Work {
    fn from(stores: Stores) -> Work {
        match stores {
            Stores::Streaming => Work::Streaming,
            Stores::Cached => Work::Cached,
        }
    }
}

/// Makes the pages of `args`' destination present.
///
/// # Safety
///
/// As for [`CopyPool::prefault_list`].
unsafe fn prefault_part(args: &HostCopyArgs, how: FaultIn) {
    // SAFETY: writable and accessed by no other thread (our caller).
    unsafe { crate::prefault::fault_in(args.dst, args.nbytes, how) };
}

/// Copies one range with the chosen stores.
///
/// # Safety
///
/// As for [`CopyPool::copy`].
unsafe fn copy_part(args: &HostCopyArgs, stores: Stores) {
    match stores {
        // SAFETY: valid for `hostcopy_fn` (our caller); it ends with the
        // fence its streaming stores need.
        Stores::Streaming => unsafe { hostcopy_fn(args.user_data()) },
        // Plain stores need no fence: the Release count after the part (or
        // the calling thread's own program order) publishes them.
        Stores::Cached => {
            if args.nbytes > 0 {
                // SAFETY: readable and writable, non-overlapping, non-null
                // ranges of `nbytes` bytes (our caller: not rejected).
                unsafe {
                    core::ptr::copy_nonoverlapping(
                        core::ptr::with_exposed_provenance::<u8>(args.src),
                        core::ptr::with_exposed_provenance_mut::<u8>(args.dst),
                        args.nbytes,
                    )
                }
            }
        }
    }
}

impl Shared {
    /// Claims and copies one part of job `number`. Whether there was one.
    ///
    /// # Safety
    ///
    /// Job `number`'s record is valid for [`CopyPool::copy`] until all its
    /// parts are done.
    unsafe fn copy_one_part(&self, number: u32) -> bool {
        let mut claim = self.claim.load(Ordering::Acquire);
        loop {
            if (claim >> 32) as u32 != number {
                return false;
            }
            // Read before the claim; used only if the claim succeeds, which
            // proves the job was still `number` and these fields its own.
            let parts = self.parts.load(Ordering::Relaxed);
            let index = (claim & u64::from(u32::MAX)) as usize;
            if index >= parts {
                return false;
            }
            let (dst, src, nbytes, list, part, work) = (
                self.dst.load(Ordering::Relaxed),
                self.src.load(Ordering::Relaxed),
                self.nbytes.load(Ordering::Relaxed),
                self.list.load(Ordering::Relaxed),
                self.part.load(Ordering::Relaxed),
                self.work.load(Ordering::Relaxed),
            );
            match self.claim.compare_exchange_weak(
                claim,
                claim + 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    let piece = if list == 0 {
                        let offset = index * part;
                        HostCopyArgs::new(dst + offset, src + offset, part.min(nbytes - offset))
                    } else {
                        // SAFETY: `index < parts`, the list's length; the
                        // list outlives the job (`copy_list`'s caller).
                        unsafe {
                            core::ptr::with_exposed_provenance::<HostCopyArgs>(list)
                                .add(index)
                                .read()
                        }
                    };
                    // SAFETY: a part of a record valid for `CopyPool::copy`,
                    // or of a range valid for `CopyPool::prefault_list`
                    // (our caller).
                    unsafe {
                        match work {
                            w if w == Work::Cached as usize => copy_part(&piece, Stores::Cached),
                            w if w == Work::Prefault as usize => {
                                prefault_part(&piece, FaultIn::Advise)
                            }
                            w if w == Work::PrefaultWrite as usize => {
                                prefault_part(&piece, FaultIn::Write)
                            }
                            _ => copy_part(&piece, Stores::Streaming),
                        }
                    };
                    // Release: the part's bytes happen before the caller's
                    // Acquire load that counts it.
                    self.done.fetch_add(1, Ordering::Release);
                    return true;
                }
                Err(now) => claim = now,
            }
        }
    }

    /// A worker's life: wait for a job, copy parts of it, repeat until the
    /// pool is dropped.
    fn work(&self, index: usize) {
        let mut seen = 0u32;
        while let Some(number) = self.next_job(seen) {
            seen = number;
            if index >= self.active.load(Ordering::Relaxed) {
                continue;
            }
            // SAFETY: parts of job `number` are valid until all are done,
            // and the caller waits for that.
            while unsafe { self.copy_one_part(number) } {}
        }
    }

    /// Waits for a job numbered other than `seen` (spins a little, then
    /// sleeps); `None` once the pool is dropped.
    fn next_job(&self, seen: u32) -> Option<u32> {
        let start = Instant::now();
        while start.elapsed() < SPIN {
            if self.stop.load(Ordering::Acquire) {
                return None;
            }
            let number = (self.claim.load(Ordering::Acquire) >> 32) as u32;
            if number != seen {
                return Some(number);
            }
            core::hint::spin_loop();
        }
        let mut latest = self
            .sleep
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        loop {
            if self.stop.load(Ordering::Acquire) {
                return None;
            }
            if *latest != seen {
                return Some(*latest);
            }
            latest = self
                .wake
                .wait(latest)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
    }
}

/// The worker pool behind [`hostcopy_parallel_fn`]: one per process, a
/// [`CopyPool`] that is never dropped.
#[derive(Debug)]
pub struct CopyWorkers {
    pool: CopyPool,
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
        let mut first = false;
        let mut failed = None;
        let started = WORKERS.get_or_init(|| {
            first = true;
            let (pool, error) = CopyPool::spawn(workers, "hostcopy-worker");
            failed = error;
            CopyWorkers { pool }
        });
        if !first {
            return Err(StartError::AlreadyStarted {
                workers: started.workers(),
            });
        }
        match failed {
            Some(error) => Err(StartError::Spawn {
                started: started.workers(),
                error,
            }),
            None => Ok(started),
        }
    }

    /// The running pool, if started.
    pub fn get() -> Option<&'static CopyWorkers> {
        WORKERS.get()
    }

    /// Number of worker threads started (the driver's thread copies too).
    pub fn workers(&self) -> usize {
        self.pool.workers()
    }

    /// Number of workers that take part in copies.
    pub fn active(&self) -> usize {
        self.pool.active()
    }

    /// Lets only the first `active` workers take part in later copies (at
    /// most the number started): for measuring, or for sharing the machine.
    pub fn set_active(&self, active: usize) {
        self.pool.set_active(active)
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
        (Some(args), Some(workers)) if workers.active() > 0 && splittable(&args) => {
            // SAFETY: the record is valid for `hostcopy_fn` (our caller), not
            // rejected and free of overlap (`splittable`).
            unsafe { workers.pool.copy(&args, Stores::Streaming) }
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
