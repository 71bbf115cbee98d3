//! The record of one staged chunk and the host function that copies it.
//!
//! A chunk's `user_data` points at a [`Chunk`]: the copies to make, the
//! stager's worker pool, and a state that tells the enqueuing side whether
//! the host function may still touch the borrowed buffers. The states are
//! those of every launched record (`crate::owned`): HELD (never launched)
//! -> PENDING (launched) -> RUNNING -> DONE, or PENDING -> ABANDONED when
//! the stager gave up on it after a failed wait (the host function, should
//! the driver still run it, then touches nothing but the state). The host function makes no CUDA call, allocates
//! nothing and cannot panic.

use core::ffi::c_void;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU8, Ordering};
use std::boxed::Box;
use std::vec::Vec;

use hostcopy_core::HostCopyArgs;

use crate::owned::{self, HELD, PENDING, Settled};
use crate::parallel::{CopyPool, Stores};

/// One chunk's record; `user_data` is the address of the whole chunk.
#[derive(Debug)]
pub(super) struct Chunk {
    state: AtomicU8,
    /// One copy (a single transfer's chunk), or one per block piece.
    copies: Box<[HostCopyArgs]>,
    stores: Stores,
    workers: *const CopyPool,
}

impl Chunk {
    /// `workers` stays allocated (behind an `Arc`) while the chunk may run.
    pub(super) fn new(
        copies: Vec<HostCopyArgs>,
        stores: Stores,
        workers: *const CopyPool,
    ) -> Chunk {
        Chunk {
            state: AtomicU8::new(HELD),
            copies: copies.into_boxed_slice(),
            stores,
            workers,
        }
    }

    /// Undoes [`arm`](Self::arm) when the launch failed.
    pub(super) fn disarm(&self) {
        self.state.store(HELD, Ordering::Release);
    }

    /// Ends the enqueuing side's claim ([`owned::settle`]): returns once no
    /// host function will touch the chunk's buffers. `true` if the chunk was
    /// abandoned (then its memory must never be freed).
    pub(super) fn settle(&self) -> bool {
        matches!(owned::settle(&self.state), Settled::Abandoned)
    }
}

/// The chunks of one transfer: one allocation whose address never changes
/// (host functions hold pointers into it), reached only through raw
/// pointers so that no move or unique borrow of the owner invalidates them.
/// The owner frees it ([`settle_and_free`](Self::settle_and_free)).
#[derive(Debug)]
pub(super) struct Chunks {
    array: ChunkArray,
}

/// Shared access to a [`Chunks`] allocation, for whoever launches its
/// chunks (the stager's feeder thread): valid while the owner has not
/// settled it.
#[derive(Clone, Copy, Debug)]
pub(super) struct ChunkArray {
    ptr: NonNull<[Chunk]>,
}

// SAFETY: the records are shared with host functions on the driver's
// thread by design: every field a host function changes is atomic, the
// rest is read-only, and the `CopyPool` they point at is `Sync`. Which
// thread holds the owner changes nothing of that.
unsafe impl Send for Chunks {}
// SAFETY: as for `Chunks`; the array is only read through shared
// references and atomics.
unsafe impl Send for ChunkArray {}
// SAFETY: as above.
unsafe impl Sync for ChunkArray {}

impl Chunks {
    pub(super) fn new(chunks: Vec<Chunk>) -> Chunks {
        Chunks {
            array: ChunkArray {
                ptr: NonNull::from(Box::leak(chunks.into_boxed_slice())),
            },
        }
    }

    /// The chunks, for launching them elsewhere: the caller keeps this
    /// owner unsettled while they are used.
    pub(super) fn array(&self) -> ChunkArray {
        self.array
    }

    /// Settles every chunk (see [`Chunk::settle`]), then frees them, or
    /// leaks them if any was abandoned (its host function may still run
    /// and read its state).
    pub(super) fn settle_and_free(self) {
        let mut abandoned = false;
        for index in 0..self.array.len() {
            abandoned |= self.array.get(index).settle();
        }
        if abandoned {
            // One allocation: every chunk of it is kept, not only the
            // abandoned ones.
            self.keep();
        } else {
            // SAFETY: from `Box::leak` in `new`; every chunk is HELD or
            // DONE: no host function touches them anymore, and whoever
            // launched them has finished (our caller). Freed once.
            drop(unsafe { Box::from_raw(self.array.ptr.as_ptr()) });
        }
    }
}

impl Chunks {
    /// Keeps the chunks for good, counted: their host functions may still
    /// run, and no one will settle them.
    pub(super) fn keep(self) {
        crate::cuda::retire::kept_chunks(self.array.len());
    }
}

impl ChunkArray {
    pub(super) fn len(&self) -> usize {
        self.ptr.len()
    }

    /// Chunk `index` (shared: every field a host function changes is atomic).
    pub(super) fn get(&self, index: usize) -> &Chunk {
        assert!(index < self.len());
        // SAFETY: in bounds; the allocation lives until its owner's
        // `settle_and_free`, which runs after every user of the array is
        // done with it, or forever.
        unsafe { &*self.ptr.as_ptr().cast::<Chunk>().add(index) }
    }

    /// Marks chunk `index` launched, just before its launch; its `user_data`.
    pub(super) fn arm(&self, index: usize) -> *mut c_void {
        self.get(index).state.store(PENDING, Ordering::Release);
        // Derived from the allocation's raw pointer, not from a reference.
        self.ptr.as_ptr().cast::<Chunk>().wrapping_add(index).cast()
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
    if !owned::start_running(&chunk.state) {
        // Abandoned: the buffers may be gone; touch nothing else.
        return;
    }
    // SAFETY: RUNNING keeps the stager (workers, staging buffer) and the
    // borrowed host memory waiting for us; the ranges, checked when
    // planned, are non-null and live, and no destination overlaps another
    // range, as `CopyPool::copy_list` asks.
    unsafe { (*chunk.workers).copy_list(&chunk.copies, chunk.stores) };
    // Last touch: after this the chunk may be freed.
    owned::finish_running(&chunk.state);
}
