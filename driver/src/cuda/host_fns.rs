//! The host functions this layer launches besides `hostcopy_fn`, and the
//! destructor of records that graphs own. Each runs on a driver thread: it
//! makes no CUDA call, never blocks, and cannot unwind (`extern "C"`: a
//! panic would abort, and nothing here can panic).

use core::ffi::c_void;
use core::ptr::NonNull;
use core::sync::atomic::Ordering;

use hostcopy_core::hostcopy_fn;

use crate::owned::{self, Slot};

/// Owned launch on a plain stream: runs the record, then frees its slot.
///
/// # Safety
///
/// `user_data` is a held slot whose ownership the launch handed over.
pub(crate) unsafe extern "C" fn run_owned(user_data: *mut c_void) {
    // SAFETY: a slot's address is its record's (our caller).
    unsafe { hostcopy_fn(user_data) };
    // SAFETY: the launch gave this host function the slot; nothing uses it after.
    unsafe { Slot::release(NonNull::new_unchecked(user_data.cast::<Slot>())) };
}

/// Scoped launch: runs the record unless the scope gave up on it.
///
/// # Safety
///
/// `user_data` is a slot in PENDING or ABANDONED state, launched by a scope.
pub(crate) unsafe extern "C" fn run_scoped(user_data: *mut c_void) {
    // SAFETY: non-null: scopes launch slot addresses only.
    let slot = unsafe { NonNull::new_unchecked(user_data.cast::<Slot>()) };
    // SAFETY: the slot stays allocated until DONE is stored (then its scope
    // frees it) or, once abandoned, until this function frees it.
    let state = unsafe { &slot.as_ref().state };
    let claimed = state.compare_exchange(
        owned::PENDING,
        owned::RUNNING,
        Ordering::Acquire,
        Ordering::Acquire,
    );
    if claimed.is_err() {
        // Abandoned: the scope has returned and its buffers may be gone.
        // The slot is ours now; free it and touch nothing else.
        // SAFETY: the scope gave the slot up for this function to free.
        unsafe { Slot::release(slot) };
        return;
    }
    // SAFETY: RUNNING keeps the scope (and so the borrowed buffers) waiting.
    unsafe { hostcopy_fn(user_data) };
    // Last touch: after this store the scope may free the slot.
    state.store(owned::DONE, Ordering::Release);
}

/// Destructor of the user object that gives a graph its record.
///
/// # Safety
///
/// `slot` is the slot the user object was created for; the driver calls
/// this once, after the graph and its executables are gone.
pub(crate) unsafe extern "C" fn free_graph_owned(slot: *mut c_void) {
    // SAFETY: the user object owned the slot, and no host node runs it anymore.
    unsafe { Slot::release(NonNull::new_unchecked(slot.cast::<Slot>())) };
}
