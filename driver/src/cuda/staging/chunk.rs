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
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::boxed::Box;
use std::vec::Vec;

use hostcopy_core::HostCopyArgs;

use crate::parallel::{CopyPool, Stores};

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
    /// Pinned buffers never freed because a queued copy or host function
    /// could still have touched them: staging buffers, and buffers given to
    /// [`Stager::device_to_pinned`](super::Stager::device_to_pinned) or
    /// [`Stager::pinned_to_device`](super::Stager::pinned_to_device).
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
    workers: *const CopyPool,
}

impl Chunk {
    /// `workers` stays allocated (behind an `Arc`) while the chunk may run.
    pub(super) fn new(args: HostCopyArgs, stores: Stores, workers: *const CopyPool) -> Chunk {
        Chunk {
            state: AtomicU8::new(HELD),
            args,
            stores,
            workers,
        }
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

/// The chunks of one transfer: one allocation whose address never changes
/// (host functions hold pointers into it), reached only through raw
/// pointers so that no move or unique borrow of the owner invalidates them.
#[derive(Debug)]
pub(super) struct Chunks {
    ptr: NonNull<[Chunk]>,
}

impl Chunks {
    pub(super) fn new(chunks: Vec<Chunk>) -> Chunks {
        Chunks {
            ptr: NonNull::from(Box::leak(chunks.into_boxed_slice())),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.ptr.len()
    }

    /// Chunk `index` (shared: every field a host function changes is atomic).
    pub(super) fn get(&self, index: usize) -> &Chunk {
        assert!(index < self.len());
        // SAFETY: in bounds; the allocation lives until `free` or forever.
        unsafe { &*self.ptr.as_ptr().cast::<Chunk>().add(index) }
    }

    /// Marks chunk `index` launched, just before its launch; its `user_data`.
    pub(super) fn arm(&self, index: usize) -> *mut c_void {
        self.get(index).state.store(PENDING, Ordering::Release);
        // Derived from the allocation's raw pointer, not from a reference.
        self.ptr.as_ptr().cast::<Chunk>().wrapping_add(index).cast()
    }

    /// Settles every chunk (see [`Chunk::settle`]), then frees them, or
    /// leaks them if any was abandoned (its host function may still run
    /// and read its state).
    pub(super) fn settle_and_free(self) {
        let mut abandoned = false;
        for index in 0..self.len() {
            abandoned |= self.get(index).settle();
        }
        if !abandoned {
            // SAFETY: from `Box::leak` in `new`; every chunk is HELD or
            // DONE: no host function touches them anymore. Freed once.
            drop(unsafe { Box::from_raw(self.ptr.as_ptr()) });
        }
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
    // borrowed host buffer waiting for us; its ranges, checked when packed,
    // are non-null, live and disjoint, as `CopyPool::copy` asks.
    unsafe { (*chunk.workers).copy(&chunk.args, chunk.stores) };
    // Last touch: after this store the chunk may be freed.
    chunk.state.store(DONE, Ordering::Release);
}
