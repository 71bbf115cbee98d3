//! Records the layer owns: one slot type for the pool and for the heap, and
//! the states a launched record goes through.
//!
//! A slot's first field is its record, so a slot's address is a valid
//! `user_data` for `hostcopy_fn`. A slot lives either in a
//! [`RecordPool`](crate::RecordPool) (freeing it marks it free) or in its own
//! heap allocation (freeing it drops the box).
//!
//! The states, and who moves a slot between them:
//!
//! ```text
//! FREE ──take──▶ HELD ──launch, scoped──▶ PENDING ──host fn──▶ RUNNING ──host fn──▶ DONE ──owner──▶ freed
//!                  │                          │
//!                  │                          └──owner gives up──▶ ABANDONED ──host fn, if it ever runs──▶ freed
//!                  └──launch, owned: the host function runs the record and frees the slot
//! ```
//!
//! An owner gives up on a scoped launch only after the stream reported an
//! error: a host function the driver skipped never runs, so its slot stays
//! allocated (counted by [`abandoned_records`]); one that runs late frees it
//! without touching the record's buffers.

use core::cell::UnsafeCell;
#[cfg(feature = "cuda")]
use core::ptr::NonNull;
#[cfg(feature = "cuda")]
use core::sync::atomic::AtomicUsize;
use core::sync::atomic::{AtomicU8, Ordering};

use hostcopy_core::HostCopyArgs;

#[cfg(feature = "cuda")]
use crate::error::PoolError;

pub(crate) const FREE: u8 = 0;
pub(crate) const HELD: u8 = 1;
// The launch states: only the CUDA layer launches slots.
#[cfg(feature = "cuda")]
pub(crate) const PENDING: u8 = 2;
#[cfg(feature = "cuda")]
pub(crate) const RUNNING: u8 = 3;
#[cfg(feature = "cuda")]
pub(crate) const DONE: u8 = 4;
#[cfg(feature = "cuda")]
pub(crate) const ABANDONED: u8 = 5;

/// One owned record and where it is in its life.
#[repr(C)]
pub(crate) struct Slot {
    record: UnsafeCell<HostCopyArgs>,
    pub(crate) state: AtomicU8,
    /// Set at creation: whether freeing drops a box or marks a pool slot free.
    boxed: bool,
}

// SAFETY: the record is written only by the thread that moved the slot out
// of FREE (or created the box), before the slot's address is shared; after
// that it is only read. Every hand-over goes through `state` (acquire and
// release) or through the driver's launch, which orders the host function
// after the launching call.
unsafe impl Sync for Slot {}

#[cfg(feature = "cuda")]
static BOXED_CREATED: AtomicUsize = AtomicUsize::new(0);
#[cfg(feature = "cuda")]
static BOXED_FREED: AtomicUsize = AtomicUsize::new(0);
#[cfg(feature = "cuda")]
static ABANDONED_COUNT: AtomicUsize = AtomicUsize::new(0);

#[cfg(feature = "cuda")]
/// Counts of boxed owned records in this process (records the layer copied
/// to the heap for a launch or a graph node).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OwnedRecordCounts {
    /// Boxed records created so far.
    pub created: usize,
    /// Boxed records freed so far.
    pub freed: usize,
}

#[cfg(feature = "cuda")]
impl OwnedRecordCounts {
    /// Records created and not yet freed: in flight, held by a graph, or
    /// abandoned after a context error.
    pub const fn alive(&self) -> usize {
        self.created - self.freed
    }
}

/// How many boxed owned records this process has created and freed.
#[cfg(feature = "cuda")]
pub fn owned_record_counts() -> OwnedRecordCounts {
    // Freed first: a record created and freed between the two loads then
    // counts as created, never as freed before it was created.
    let freed = BOXED_FREED.load(Ordering::Acquire);
    OwnedRecordCounts {
        created: BOXED_CREATED.load(Ordering::Acquire),
        freed,
    }
}

#[cfg(feature = "cuda")]
/// How many owned records were abandoned: launched on a stream that then
/// failed, whose host function had not started. Each stays allocated (a
/// heap record, or a pool slot that stays held) unless the host function
/// still runs; this is the bound on what a context error leaks.
pub fn abandoned_records() -> usize {
    ABANDONED_COUNT.load(Ordering::Relaxed)
}

impl Slot {
    /// A free pool slot.
    pub(crate) const fn free() -> Slot {
        Slot {
            record: UnsafeCell::new(HostCopyArgs::new(0, 0, 0)),
            state: AtomicU8::new(FREE),
            boxed: false,
        }
    }

    /// A held slot in its own heap allocation.
    #[cfg(all(feature = "cuda", feature = "alloc"))]
    pub(crate) fn boxed(args: HostCopyArgs) -> NonNull<Slot> {
        let slot = alloc::boxed::Box::new(Slot {
            record: UnsafeCell::new(args),
            state: AtomicU8::new(HELD),
            boxed: true,
        });
        BOXED_CREATED.fetch_add(1, Ordering::Relaxed);
        NonNull::from(alloc::boxed::Box::leak(slot))
    }

    /// Moves a free pool slot to HELD. Whether this thread won it.
    pub(crate) fn try_take(&self) -> bool {
        self.state
            .compare_exchange(FREE, HELD, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// Moves a held pool slot back to FREE. Whether it was held.
    pub(crate) fn give_back(&self) -> bool {
        self.state
            .compare_exchange(HELD, FREE, Ordering::Release, Ordering::Relaxed)
            .is_ok()
    }

    pub(crate) fn is_free(&self) -> bool {
        self.state.load(Ordering::Relaxed) == FREE
    }

    /// Stores the record of a slot this thread holds.
    ///
    /// # Safety
    ///
    /// This thread holds the slot and has not shared its address yet.
    pub(crate) unsafe fn write(&self, args: HostCopyArgs) {
        // SAFETY: nobody else reads or writes the record (our caller).
        unsafe { *self.record.get() = args }
    }

    /// The record.
    pub(crate) fn args(&self) -> HostCopyArgs {
        // SAFETY: after the holder's write, the record is only read.
        unsafe { *self.record.get() }
    }

    /// The slot's address as `user_data`.
    pub(crate) fn user_data(&self) -> *mut core::ffi::c_void {
        self.record.get().cast()
    }

    /// Frees a slot: drops a boxed one, marks a pool slot free.
    #[cfg(feature = "cuda")]
    ///
    /// # Safety
    ///
    /// The caller owns the slot (holds it, or took it over from its owner
    /// through `state`), and no one uses it after this call.
    pub(crate) unsafe fn release(slot: NonNull<Slot>) {
        // SAFETY: the slot is alive until this call (our caller).
        let boxed = unsafe { slot.as_ref() }.boxed;
        if boxed {
            #[cfg(feature = "alloc")]
            {
                // SAFETY: boxed slots come from `Box::leak` in `Slot::boxed`,
                // and the caller owns this one.
                drop(unsafe { alloc::boxed::Box::from_raw(slot.as_ptr()) });
                BOXED_FREED.fetch_add(1, Ordering::Release);
            }
        } else {
            // SAFETY: pool slots live as long as their pool, which outlives
            // every use of its slots.
            unsafe { slot.as_ref() }
                .state
                .store(FREE, Ordering::Release);
        }
    }

    /// Counts a slot whose owner gave up on it.
    #[cfg(feature = "cuda")]
    pub(crate) fn count_abandoned() {
        ABANDONED_COUNT.fetch_add(1, Ordering::Relaxed);
    }
}

/// A pool that hands out slots for owned records.
#[cfg(feature = "cuda")]
pub(crate) trait PoolSlots: Sync {
    /// A held slot holding `args`.
    fn take_slot(&self, args: HostCopyArgs) -> Result<NonNull<Slot>, PoolError>;
}

/// Where the slots of owned records come from. A pool must be `'static`: a
/// host function or a graph destructor may free a slot into it at any time.
#[cfg(feature = "cuda")]
#[derive(Clone, Copy)]
pub(crate) enum SlotSource {
    /// A heap allocation per record.
    #[cfg(feature = "alloc")]
    Heap,
    /// A slot of a record pool.
    Pool(&'static dyn PoolSlots),
}

#[cfg(feature = "cuda")]
impl SlotSource {
    /// A held slot holding `args`, which the caller now owns.
    pub(crate) fn take(self, args: HostCopyArgs) -> Result<NonNull<Slot>, PoolError> {
        match self {
            #[cfg(feature = "alloc")]
            SlotSource::Heap => Ok(Slot::boxed(args)),
            SlotSource::Pool(pool) => pool.take_slot(args),
        }
    }
}
