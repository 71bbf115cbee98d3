//! The worker threads of one stager: a private pool that splits each
//! chunk's host copy into parts, so that page faults and memory bandwidth
//! are spread over many cores.
//!
//! Unlike [`crate::parallel`]'s process-wide pool, which serializes the
//! host-function threads of every context behind one mutex, each stager has
//! its own pool: two GPUs staging at once never wait for each other's
//! copies. The pool is only ever driven by one host-function thread at a
//! time (one context, one driver thread), and its threads end when the
//! stager is dropped.
//!
//! A part is claimed through one atomic word holding the job number and the
//! next part, so a worker that wakes late cannot claim a part of a later
//! job with an earlier job's addresses. The calling thread copies parts too
//! and returns once every part is copied and visible to other threads.

use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};
use std::vec::Vec;

use hostcopy_core::{HostCopyArgs, hostcopy_fn};

use super::options::Stores;

/// Smallest part a copy is split into: below this, waking a worker costs
/// more than it saves.
const MIN_PART: usize = 256 << 10;

/// How long an idle worker spins for the next job before it sleeps.
const SPIN: Duration = Duration::from_micros(50);

/// The pool: shared state plus the thread handles, joined on drop.
#[derive(Debug)]
pub(super) struct Workers {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

#[derive(Debug)]
struct Shared {
    /// High 32 bits: job number. Low 32 bits: next part to claim.
    claim: AtomicU64,
    dst: AtomicUsize,
    src: AtomicUsize,
    nbytes: AtomicUsize,
    part: AtomicUsize,
    parts: AtomicUsize,
    /// 0: streaming stores (`hostcopy_fn`); 1: cached stores.
    stores: AtomicUsize,
    /// Parts copied so far.
    done: AtomicUsize,
    /// Serializes callers (one host-function thread; kept for safety if a
    /// stager's streams ever span contexts).
    caller: Mutex<()>,
    /// Sleeping workers wait here for the next job number.
    sleep: Mutex<u32>,
    wake: Condvar,
    stop: AtomicBool,
}

impl Workers {
    /// Starts `count` threads; fewer if spawning fails (the count says how many).
    pub(super) fn start(count: usize) -> Workers {
        let shared = Arc::new(Shared {
            claim: AtomicU64::new(0),
            dst: AtomicUsize::new(0),
            src: AtomicUsize::new(0),
            nbytes: AtomicUsize::new(0),
            part: AtomicUsize::new(0),
            parts: AtomicUsize::new(0),
            stores: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            caller: Mutex::new(()),
            sleep: Mutex::new(0),
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        let mut threads = Vec::with_capacity(count);
        for index in 0..count {
            let worker = Arc::clone(&shared);
            match thread::Builder::new()
                .name(std::format!("hostcopy-stager-{index}"))
                .spawn(move || worker.work())
            {
                Ok(handle) => threads.push(handle),
                Err(_) => break,
            }
        }
        Workers { shared, threads }
    }

    /// Worker threads running (the caller of [`copy`](Self::copy) copies too).
    pub(super) fn count(&self) -> usize {
        self.threads.len()
    }

    /// Copies what `args` says with `stores`, split over the workers and
    /// the calling thread. Never panics, allocates or calls CUDA.
    ///
    /// # Safety
    ///
    /// `args` is valid for `hostcopy_fn`, and its ranges do not overlap.
    pub(super) unsafe fn copy(&self, args: &HostCopyArgs, stores: Stores) {
        let shared = &*self.shared;
        let participants = self.threads.len() + 1;
        let part = (args.nbytes / (2 * participants))
            .next_multiple_of(64 << 10)
            .max(MIN_PART);
        let parts = args.nbytes.div_ceil(part);
        if self.threads.is_empty() || parts < 2 || parts >= u32::MAX as usize {
            // SAFETY: our caller's contract.
            unsafe { copy_part(args, stores) };
            return;
        }
        let _one_caller = shared
            .caller
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        shared.dst.store(args.dst, Ordering::Relaxed);
        shared.src.store(args.src, Ordering::Relaxed);
        shared.nbytes.store(args.nbytes, Ordering::Relaxed);
        shared.part.store(part, Ordering::Relaxed);
        shared.parts.store(parts, Ordering::Relaxed);
        shared.stores.store(stores as usize, Ordering::Relaxed);
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
        // SAFETY: the caller's contract covers every part of the record.
        while unsafe { shared.copy_one_part(number) } {}
        while shared.done.load(Ordering::Acquire) < parts {
            core::hint::spin_loop();
        }
    }
}

impl Drop for Workers {
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

/// Copies one range with the chosen stores.
///
/// # Safety
///
/// `args` is valid for `hostcopy_fn`, its ranges do not overlap.
unsafe fn copy_part(args: &HostCopyArgs, stores: Stores) {
    match stores {
        // SAFETY: valid for `hostcopy_fn` (our caller); it ends with the
        // fence its streaming stores need.
        Stores::Streaming => unsafe { hostcopy_fn(args.user_data()) },
        Stores::Cached => {
            if args.nbytes > 0 {
                // SAFETY: valid, non-overlapping ranges (our caller).
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
    /// Job `number`'s record is valid until all its parts are done.
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
            let (dst, src, nbytes, part, stores) = (
                self.dst.load(Ordering::Relaxed),
                self.src.load(Ordering::Relaxed),
                self.nbytes.load(Ordering::Relaxed),
                self.part.load(Ordering::Relaxed),
                self.stores.load(Ordering::Relaxed),
            );
            match self.claim.compare_exchange_weak(
                claim,
                claim + 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    let offset = index * part;
                    let piece =
                        HostCopyArgs::new(dst + offset, src + offset, part.min(nbytes - offset));
                    let stores = if stores == Stores::Cached as usize {
                        Stores::Cached
                    } else {
                        Stores::Streaming
                    };
                    // SAFETY: a part of a valid, non-overlapping record.
                    unsafe { copy_part(&piece, stores) };
                    self.done.fetch_add(1, Ordering::Release);
                    return true;
                }
                Err(now) => claim = now,
            }
        }
    }

    /// A worker's life: wait for a job, copy parts of it, repeat until stopped.
    fn work(&self) {
        let mut seen = 0u32;
        while let Some(number) = self.next_job(seen) {
            seen = number;
            // SAFETY: parts of job `number` are valid until all are done,
            // and the caller waits for that.
            while unsafe { self.copy_one_part(number) } {}
        }
    }

    /// Waits for a job numbered other than `seen` (spins a little, then
    /// sleeps); `None` once the pool is stopping.
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
