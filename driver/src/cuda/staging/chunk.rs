//! The record of one staged chunk and the host function that copies it.
//!
//! A chunk's `user_data` points at a [`Chunk`]: the copy to make, the
//! stager's worker pool, and a state that tells the enqueuing side whether
//! the host function may still touch the borrowed buffers:
//! HELD (never launched) -> PENDING (launched) -> RUNNING -> DONE, or
//! PENDING -> ABANDONED when the stager gave up on it after a failed wait
//! (the host function, should the driver still run it, then touches
//! nothing but the state). The host function makes no CUDA call, allocates
//! nothing and cannot panic.

use core::ffi::c_void;
use core::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use hostcopy_core::HostCopyArgs;

use super::options::Stores;
use super::workers::Workers;

/// Not launched: no host function will look at it.
pub(super) const HELD: u8 = 1;
/// Launched; its host function has not started.
pub(super) const PENDING: u8 = 2;
/// Its host function is copying now.
pub(super) const RUNNING: u8 = 3;
/// Its host function has finished with it.
pub(super) const DONE: u8 = 4;
/// Given up on while PENDING: the host function must touch nothing else.
pub(super) const ABANDONED: u8 = 5;

static ABANDONED_CHUNKS: AtomicUsize = AtomicUsize::new(0);
static LEAKED_BUFFERS: AtomicUsize = AtomicUsize::new(0);

/// What staging has leaked after context errors, process-wide.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leaked {
    /// Chunk records whose host function the driver skipped (each held by
    /// a leaked array, so a late run still finds its state).
    pub chunks: usize,
    /// Pinned staging buffers never freed because a queued copy or host
    /// function could still have touched them.
    pub buffers: usize,
}

/// What staging has leaked after context errors in this process.
pub fn leaked() -> Leaked {
    Leaked {
        chunks: ABANDONED_CHUNKS.load(Ordering::Relaxed),
        buffers: LEAKED_BUFFERS.load(Ordering::Relaxed),
    }
}

pub(super) fn count_leaked_buffers(buffers: usize) {
    LEAKED_BUFFERS.fetch_add(buffers, Ordering::Relaxed);
}

/// One chunk's record; `user_data` is the address of the whole chunk.
#[derive(Debug)]
pub(super) struct Chunk {
    state: AtomicU8,
    args: HostCopyArgs,
    stores: Stores,
    workers: *const Workers,
}

// SAFETY: the workers pointer is only dereferenced by the host function,
// on the driver's thread, while the stager waits for it; everything else is
// plain data and atomics.
unsafe impl Send for Chunk {}
// SAFETY: as above; the state is atomic, the rest read-only once shared.
unsafe impl Sync for Chunk {}

impl Chunk {
    pub(super) fn new(args: HostCopyArgs, stores: Stores, workers: &Workers) -> Chunk {
        Chunk {
            state: AtomicU8::new(HELD),
            args,
            stores,
            workers: workers as *const Workers,
        }
    }

    /// Marks the chunk launched, just before its launch; `user_data` for it.
    pub(super) fn arm(&self) -> *mut c_void {
        self.state.store(PENDING, Ordering::Release);
        (self as *const Chunk).cast_mut().cast()
    }

    /// Undoes [`arm`](Self::arm) when the launch failed.
    pub(super) fn disarm(&self) {
        self.state.store(HELD, Ordering::Release);
    }

    /// Ends the enqueuing side's claim: returns once no host function will
    /// touch the chunk's buffers. `true` if the chunk was abandoned (then
    /// its memory must never be freed).
    ///
    /// A RUNNING chunk is a copy in progress: waiting for it is one bounded
    /// copy, never an unbounded wait.
    pub(super) fn settle(&self) -> bool {
        loop {
            match self.state.load(Ordering::Acquire) {
                HELD | DONE | ABANDONED => return false,
                PENDING => {
                    if self
                        .state
                        .compare_exchange(PENDING, ABANDONED, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                    {
                        ABANDONED_CHUNKS.fetch_add(1, Ordering::Relaxed);
                        return true;
                    }
                }
                _ => std::thread::yield_now(),
            }
        }
    }

    /// The bytes the chunk carries.
    pub(super) fn len(&self) -> usize {
        self.args.nbytes
    }
}

/// The staging host function: copies one chunk with the stager's workers.
///
/// # Safety
///
/// `user_data` is an armed [`Chunk`] that stays allocated until DONE is
/// stored, or forever once abandoned; while it is PENDING or RUNNING its
/// ranges are valid and non-overlapping and its workers alive.
pub(super) unsafe extern "C" fn run_chunk(user_data: *mut c_void) {
    // SAFETY: an armed chunk, allocated (our caller).
    let chunk = unsafe { &*user_data.cast::<Chunk>() };
    if chunk
        .state
        .compare_exchange(PENDING, RUNNING, Ordering::Acquire, Ordering::Acquire)
        .is_err()
    {
        // Abandoned: the buffers may be gone; touch nothing else.
        return;
    }
    // SAFETY: RUNNING keeps the stager (workers, staging buffer) and the
    // borrowed host buffer waiting for us; ranges checked when packed.
    unsafe { (*chunk.workers).copy(&chunk.args, chunk.stores) };
    // Last touch: after this store the chunk may be freed.
    chunk.state.store(DONE, Ordering::Release);
}
