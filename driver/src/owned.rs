//! Records the layer owns: one slot type for the pool and for the heap, the
//! states a launched record goes through, and the host functions that move
//! it between them. This is the record-ownership layer of the CUDA layer;
//! the launch forms (owned, scoped, graph) only use it.
//!
//! A slot's first field is its record, so a slot's address is a valid
//! `user_data` for `hostcopy_fn`. The address handed to the driver is the
//! whole slot's ([`Slot::user_data`]), never the record field's: the host
//! functions read the slot's state and free the slot through it. A slot
//! lives either in a [`RecordPool`](crate::RecordPool) (freeing it marks it
//! free) or in its own heap allocation (freeing it drops the box).
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
use core::ffi::c_void;
#[cfg(feature = "cuda")]
use core::ptr::NonNull;
#[cfg(feature = "cuda")]
use core::sync::atomic::AtomicUsize;
use core::sync::atomic::{AtomicU8, Ordering};

use hostcopy_core::{HostCopyArgs, HostFn, hostcopy_fn};

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

/// One owned record, the host copy function that runs it, and where it is
/// in its life.
#[repr(C)]
pub(crate) struct Slot {
    record: UnsafeCell<HostCopyArgs>,
    copy: UnsafeCell<HostFn>,
    pub(crate) state: AtomicU8,
    /// Set at creation: whether freeing drops a box or marks a pool slot free.
    boxed: bool,
}

// SAFETY: the record and the copy function are written only by the thread
// that moved the slot out of FREE (or created the box), before the slot's
// address is shared; after that they are only read. Every hand-over goes
// through `state` (acquire and release) or through the driver's launch,
// which orders the host function after the launching call.
unsafe impl Sync for Slot {}

#[cfg(feature = "cuda")]
static BOXED_CREATED: AtomicUsize = AtomicUsize::new(0);
#[cfg(feature = "cuda")]
static BOXED_FREED: AtomicUsize = AtomicUsize::new(0);
#[cfg(feature = "cuda")]
static ABANDONED_COUNT: AtomicUsize = AtomicUsize::new(0);

/// Which host copy function runs a record the layer launches: every safe
/// launch form (scoped, owned, pooled, graph node, node update) takes one.
#[cfg(feature = "cuda")]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HostCopy {
    /// `hostcopy_fn`: the driver's host-function thread copies alone.
    Single,
    /// [`hostcopy_parallel_fn`](crate::parallel::hostcopy_parallel_fn): the
    /// copy is split across the [`CopyWorkers`](crate::parallel::CopyWorkers)
    /// pool (the single-thread copy while no pool is started).
    Parallel,
}

#[cfg(feature = "cuda")]
impl HostCopy {
    /// The host function.
    pub fn host_fn(self) -> HostFn {
        match self {
            HostCopy::Single => hostcopy_fn,
            HostCopy::Parallel => crate::parallel::hostcopy_parallel_fn,
        }
    }
}

/// Counts of boxed owned records in this process (records the layer copied
/// to the heap for a launch or a graph node).
#[cfg(feature = "cuda")]
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

/// How many owned records were abandoned: launched on a stream that then
/// failed and whose host function had not started, or replaced in a graph
/// executable whose launches can no longer be known to have finished. Each
/// stays allocated (a heap record, or a pool slot that stays held) unless a
/// host function still frees it; this is the bound on what a context error
/// leaks.
#[cfg(feature = "cuda")]
pub fn abandoned_records() -> usize {
    ABANDONED_COUNT.load(Ordering::Relaxed)
}

impl Slot {
    /// A free pool slot.
    pub(crate) const fn free() -> Slot {
        Slot {
            record: UnsafeCell::new(HostCopyArgs::new(0, 0, 0)),
            copy: UnsafeCell::new(hostcopy_fn),
            state: AtomicU8::new(FREE),
            boxed: false,
        }
    }

    /// A held slot in its own heap allocation.
    #[cfg(feature = "cuda")]
    pub(crate) fn boxed(args: HostCopyArgs, copy: HostFn) -> NonNull<Slot> {
        let slot = alloc::boxed::Box::new(Slot {
            record: UnsafeCell::new(args),
            copy: UnsafeCell::new(copy),
            state: AtomicU8::new(HELD),
            boxed: true,
        });
        BOXED_CREATED.fetch_add(1, Ordering::Relaxed);
        // The pointer from `leak` carries the whole allocation: every later
        // `user_data` and the final free derive from it.
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

    /// Stores the record and its copy function in a slot this thread holds.
    ///
    /// # Safety
    ///
    /// This thread holds the slot and has not shared its address yet.
    pub(crate) unsafe fn write(&self, args: HostCopyArgs, copy: HostFn) {
        // SAFETY: nobody else reads or writes the slot (our caller).
        unsafe {
            *self.record.get() = args;
            *self.copy.get() = copy;
        }
    }

    /// The record.
    pub(crate) fn args(&self) -> HostCopyArgs {
        // SAFETY: after the holder's write, the record is only read.
        unsafe { *self.record.get() }
    }

    /// The slot's address as `user_data`: derived from the pointer to the
    /// whole slot, so that a host function may read the state and free the
    /// slot through it (a pointer derived from the record field alone would
    /// not carry the rest of the slot).
    #[cfg(feature = "cuda")]
    pub(crate) fn user_data(slot: NonNull<Slot>) -> *mut c_void {
        slot.as_ptr().cast()
    }

    /// Frees a slot: drops a boxed one, marks a pool slot free.
    ///
    /// # Safety
    ///
    /// The caller owns the slot (holds it, or took it over from its owner
    /// through `state`), and no one uses it after this call.
    #[cfg(feature = "cuda")]
    pub(crate) unsafe fn release(slot: NonNull<Slot>) {
        // SAFETY: the slot is alive until this call (our caller).
        let boxed = unsafe { (*slot.as_ptr()).boxed };
        if boxed {
            // SAFETY: boxed slots come from `Box::leak` in `Slot::boxed`,
            // and the caller owns this one.
            drop(unsafe { alloc::boxed::Box::from_raw(slot.as_ptr()) });
            BOXED_FREED.fetch_add(1, Ordering::Release);
        } else {
            // SAFETY: pool slots live as long as their pool, which outlives
            // every use of its slots.
            unsafe { (*slot.as_ptr()).state.store(FREE, Ordering::Release) };
        }
    }

    /// Counts a slot whose owner gave up on it.
    #[cfg(feature = "cuda")]
    pub(crate) fn count_abandoned() {
        ABANDONED_COUNT.fetch_add(1, Ordering::Relaxed);
    }
}

/// Runs the slot's copy function on its record.
///
/// # Safety
///
/// `slot` is alive, and its record is valid for the copy function.
#[cfg(feature = "cuda")]
unsafe fn run_copy(slot: NonNull<Slot>) {
    // SAFETY: written before the slot was shared, only read since.
    let copy = unsafe { *(*slot.as_ptr()).copy.get() };
    // SAFETY: a slot's address is its record's (`repr(C)`, record first).
    unsafe { copy(Slot::user_data(slot)) };
}

/// Owned launch on a plain stream: runs the record, then frees its slot.
///
/// # Safety
///
/// `user_data` is a held slot whose ownership the launch handed over.
#[cfg(feature = "cuda")]
pub(crate) unsafe extern "C" fn run_owned(user_data: *mut c_void) {
    // SAFETY: non-null: owned launches launch slot addresses only.
    let slot = unsafe { NonNull::new_unchecked(user_data.cast::<Slot>()) };
    // SAFETY: the launch handed the slot and its valid record to us.
    unsafe { run_copy(slot) };
    // SAFETY: the launch gave this host function the slot; nothing uses it after.
    unsafe { Slot::release(slot) };
}

/// Scoped launch: runs the record unless the scope gave up on it.
///
/// # Safety
///
/// `user_data` is a slot in PENDING or ABANDONED state, launched by a scope.
#[cfg(feature = "cuda")]
pub(crate) unsafe extern "C" fn run_scoped(user_data: *mut c_void) {
    // SAFETY: non-null: scopes launch slot addresses only.
    let slot = unsafe { NonNull::new_unchecked(user_data.cast::<Slot>()) };
    // SAFETY: the slot stays allocated until DONE is stored (then its scope
    // frees it) or, once abandoned, until this function frees it.
    let state = unsafe { &(*slot.as_ptr()).state };
    if !start_running(state) {
        // Abandoned: the scope has returned and its buffers may be gone.
        // The slot is ours now; free it and touch nothing else.
        // SAFETY: the scope gave the slot up for this function to free.
        unsafe { Slot::release(slot) };
        return;
    }
    // SAFETY: RUNNING keeps the scope (and so the borrowed buffers) waiting.
    unsafe { run_copy(slot) };
    // Last touch: after this the scope may free the slot.
    finish_running(state);
}

/// How the launching side's claim on a launched record ended ([`settle`]).
#[cfg(feature = "cuda")]
pub(crate) enum Settled {
    /// Never run, or run to the end: no host function touches it anymore.
    Finished,
    /// Given up on while PENDING: a host function that still runs must
    /// touch nothing but the record's own memory, which is never freed by
    /// the launching side.
    Abandoned,
}

/// The host function's side of a launched record: PENDING -> RUNNING.
/// `false` if the launching side abandoned it (its buffers may be gone).
#[cfg(feature = "cuda")]
pub(crate) fn start_running(state: &AtomicU8) -> bool {
    state
        .compare_exchange(PENDING, RUNNING, Ordering::Acquire, Ordering::Acquire)
        .is_ok()
}

/// The host function's last touch of a launched record: RUNNING -> DONE.
/// After it the launching side may free the record.
#[cfg(feature = "cuda")]
pub(crate) fn finish_running(state: &AtomicU8) {
    state.store(DONE, Ordering::Release);
}

/// The launching side gives up its claim, after synchronizing (or failing
/// to): a RUNNING record is a copy in progress, waited for (one bounded
/// copy, never an unbounded wait); a PENDING one, which the driver skipped
/// or may still run late, is abandoned.
#[cfg(feature = "cuda")]
pub(crate) fn settle(state: &AtomicU8) -> Settled {
    loop {
        match state.load(Ordering::Acquire) {
            PENDING => {
                let abandoned =
                    state.compare_exchange(PENDING, ABANDONED, Ordering::AcqRel, Ordering::Acquire);
                if abandoned.is_ok() {
                    return Settled::Abandoned;
                }
            }
            RUNNING => std::thread::yield_now(),
            _ => return Settled::Finished,
        }
    }
}

/// Destructor of the user object that gives a graph its record.
///
/// # Safety
///
/// `slot` is the slot the user object was created for; the driver calls
/// this once, after the graph and its executables are gone.
#[cfg(feature = "cuda")]
pub(crate) unsafe extern "C" fn free_graph_owned(slot: *mut c_void) {
    // SAFETY: the user object owned the slot, and no host node runs it anymore.
    unsafe { Slot::release(NonNull::new_unchecked(slot.cast::<Slot>())) };
}

/// A pool that hands out slots for owned records.
#[cfg(feature = "cuda")]
pub(crate) trait PoolSlots: Sync {
    /// A held slot holding `args` and `copy`.
    fn take_slot(&self, args: HostCopyArgs, copy: HostFn) -> Result<NonNull<Slot>, PoolError>;
}

/// Where the slots of owned records come from. A pool must be `'static`: a
/// host function or a graph destructor may free a slot into it at any time.
#[cfg(feature = "cuda")]
#[derive(Clone, Copy)]
pub(crate) enum SlotSource {
    /// A heap allocation per record.
    Heap,
    /// A slot of a record pool.
    Pool(&'static dyn PoolSlots),
}

#[cfg(feature = "cuda")]
impl SlotSource {
    /// A held slot holding `args`, run by `copy`, which the caller now owns.
    pub(crate) fn take(
        self,
        args: HostCopyArgs,
        copy: HostCopy,
    ) -> Result<NonNull<Slot>, PoolError> {
        match self {
            SlotSource::Heap => Ok(Slot::boxed(args, copy.host_fn())),
            SlotSource::Pool(pool) => pool.take_slot(args, copy.host_fn()),
        }
    }
}
