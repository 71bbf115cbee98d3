//! A fixed-capacity pool of records with stable addresses, for owned records
//! without a heap.
//!
//! A held slot's address is a valid `user_data` for `hostcopy_fn` (the record
//! is the slot's first field), and it stays put for as long as the slot is
//! held. Taking a slot is lock-free: at most one compare-and-swap per slot.
//! Giving one back is a single compare-and-swap, so a host function can do it
//! on the driver's thread. When every slot is held, taking one is an error,
//! never a wait.
//!
//! Why not `heapless::pool` or `heapless::mpmc`: the pools are process-wide
//! singletons that need 128-bit compare-and-swap on 64-bit targets, and the
//! queue's operations can fail spuriously under preemption, which here would
//! mean a slot lost or refused while free. A flag per slot has neither problem
//! and keeps the addresses in one array.

use core::ffi::c_void;
use core::fmt;
#[cfg(feature = "cuda")]
use core::ptr::NonNull;
use core::sync::atomic::{AtomicUsize, Ordering};

use hostcopy_core::HostCopyArgs;

use crate::error::PoolError;
#[cfg(feature = "cuda")]
use crate::owned::PoolSlots;
use crate::owned::Slot;

/// `N` record slots in one array, handed out and taken back without locks.
///
/// Put it in a `static` (its constructor is `const`) to hand slot addresses
/// to host functions: a slot's address is only `user_data` material while the
/// pool stays in place, which a `'static` pool guarantees.
///
/// ```
/// use hostcopy_driver::{HostCopyArgs, RecordPool};
///
/// static POOL: RecordPool<4> = RecordPool::new();
///
/// let slot = POOL.acquire(HostCopyArgs::new(0x1000, 0x2000, 64))?;
/// let user_data = slot.into_user_data(); // held until given back
/// assert_eq!(POOL.available(), 3);
///
/// // Later, possibly on the driver's host-function thread:
/// // SAFETY: `user_data` came from `into_user_data` of this pool, once.
/// unsafe { POOL.release_user_data(user_data)? };
/// assert_eq!(POOL.available(), 4);
/// # Ok::<(), hostcopy_driver::PoolError>(())
/// ```
pub struct RecordPool<const N: usize> {
    slots: [Slot; N],
    /// Where the next search starts, so that takers spread over the slots.
    next: AtomicUsize,
}

impl<const N: usize> RecordPool<N> {
    /// A pool of `N` free slots.
    pub const fn new() -> Self {
        RecordPool {
            slots: [const { Slot::free() }; N],
            next: AtomicUsize::new(0),
        }
    }

    /// Number of slots.
    pub const fn capacity(&self) -> usize {
        N
    }

    /// Number of slots free right now (a snapshot: others may take or give
    /// back slots meanwhile).
    pub fn available(&self) -> usize {
        self.slots.iter().filter(|slot| slot.is_free()).count()
    }

    /// Takes a free slot and stores `args` in it.
    ///
    /// Never waits: [`PoolError::Exhausted`] when every slot was held when
    /// looked at.
    pub fn acquire(&self, args: HostCopyArgs) -> Result<PoolRecord<'_>, PoolError> {
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        for step in 0..N {
            let index = start.wrapping_add(step) % N;
            let slot = &self.slots[index];
            if slot.try_take() {
                // SAFETY: this thread just won the slot and has not shared it.
                unsafe { slot.write(args, hostcopy_core::hostcopy_fn) };
                return Ok(PoolRecord { slot, index });
            }
        }
        Err(PoolError::Exhausted { capacity: N })
    }

    /// Gives back the slot whose `user_data` this is.
    ///
    /// Lock-free and bounded (one compare-and-swap): safe to call on the
    /// driver's host-function thread. Refuses an address that is not a slot of
    /// this pool ([`PoolError::NotFromThisPool`]) and a slot that is not held
    /// ([`PoolError::NotHeld`]).
    ///
    /// # Safety
    ///
    /// `user_data` came from [`PoolRecord::into_user_data`] of this pool, and
    /// no one uses the record through it after this call.
    pub unsafe fn release_user_data(&self, user_data: *mut c_void) -> Result<(), PoolError> {
        let index = self.index_of(user_data)?;
        if self.slots[index].give_back() {
            Ok(())
        } else {
            Err(PoolError::NotHeld { index })
        }
    }

    /// Which slot `user_data` is the address of.
    fn index_of(&self, user_data: *mut c_void) -> Result<usize, PoolError> {
        let addr = user_data.addr();
        let first = self.slots.as_ptr().addr();
        let offset = addr.wrapping_sub(first);
        let stride = size_of::<Slot>();
        if addr < first || !offset.is_multiple_of(stride) || offset / stride >= N {
            return Err(PoolError::NotFromThisPool { user_data: addr });
        }
        Ok(offset / stride)
    }
}

#[cfg(feature = "cuda")]
impl<const N: usize> PoolSlots for RecordPool<N> {
    fn take_slot(
        &self,
        args: HostCopyArgs,
        copy: hostcopy_core::HostFn,
    ) -> Result<NonNull<Slot>, PoolError> {
        let record = self.acquire(args)?;
        // SAFETY: held by this thread, address not shared yet.
        unsafe { record.slot.write(args, copy) };
        let slot = NonNull::from(record.slot);
        // Held on: whoever the caller hands the slot to frees it.
        core::mem::forget(record);
        Ok(slot)
    }
}

impl<const N: usize> Default for RecordPool<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> fmt::Debug for RecordPool<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecordPool")
            .field("capacity", &N)
            .field("available", &self.available())
            .finish()
    }
}

/// A held slot of a [`RecordPool`]. Dropping it gives the slot back.
pub struct PoolRecord<'p> {
    slot: &'p Slot,
    index: usize,
}

impl PoolRecord<'_> {
    /// The record in the slot.
    pub fn args(&self) -> HostCopyArgs {
        self.slot.args()
    }

    /// Index of the slot in its pool.
    pub fn index(&self) -> usize {
        self.index
    }

    /// The slot's address, as the `user_data` of `hostcopy_fn`. Valid while
    /// `self` lives.
    pub fn user_data(&self) -> *mut c_void {
        // The whole slot's address (the record is its first field).
        core::ptr::from_ref(self.slot).cast_mut().cast()
    }
}

impl PoolRecord<'static> {
    /// Keeps the slot held and returns its address, for a host function to
    /// read and, when done, to give back with
    /// [`RecordPool::release_user_data`].
    pub fn into_user_data(self) -> *mut c_void {
        let user_data = self.user_data();
        core::mem::forget(self);
        user_data
    }
}

impl Drop for PoolRecord<'_> {
    fn drop(&mut self) {
        // Cannot fail: the slot stays held for as long as `self` exists.
        self.slot.give_back();
    }
}

impl fmt::Debug for PoolRecord<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolRecord")
            .field("index", &self.index)
            .field("args", &self.args())
            .finish()
    }
}
