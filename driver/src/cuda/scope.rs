//! Scoped launches: records that borrow their buffers, with a scope that
//! returns only when no host function it launched can touch them anymore.
//!
//! Each launch copies its record into a slot and launches `run_scoped` on
//! it. When the closure returns (or unwinds), the scope synchronizes the
//! stream and then settles every slot: DONE slots are freed; a RUNNING slot
//! is a host function copying right now, which the scope waits for (one
//! bounded copy, never an unbounded wait); a PENDING slot after a failed
//! synchronize is one the driver skipped, which the scope abandons to the
//! host function, should it ever run. Synchronizing alone would not do:
//! after a context error the driver returns from it while a host function
//! may still be running.

use core::cell::{Cell, RefCell};
use core::fmt;
use core::marker::PhantomData;
use core::ptr::NonNull;
use core::sync::atomic::Ordering;

use super::error::{DriverError, Error};
use super::ffi;
use super::host_fns;
use super::list::List;
use super::stream::StreamRef;
use crate::Record;
use crate::owned::{self, Slot, SlotSource};

/// Launches a scope without a heap tracks at once.
const SCOPE_CAPACITY: usize = 256;
/// Finished launches are freed once this many are tracked, so the list is
/// as long as the launches in flight, not as all launches.
const REAP_AT: usize = 64;

type Launched = List<NonNull<Slot>, SCOPE_CAPACITY>;

/// Launches whose records borrow buffers for `'scope`; see
/// [`StreamRef::scope`].
pub struct LaunchScope<'scope, 'env: 'scope> {
    stream: StreamRef<'scope>,
    source: SlotSource,
    launched: RefCell<Launched>,
    finished: Cell<bool>,
    /// Invariant in both lifetimes, as `std::thread::Scope` is.
    _lifetimes: PhantomData<(&'scope mut &'scope (), &'env mut &'env ())>,
}

/// Runs `f` with a new scope on `stream`, then finishes the scope.
pub(crate) fn run<'env, F, T>(stream: StreamRef<'_>, source: SlotSource, f: F) -> Result<T, Error>
where
    F: for<'scope> FnOnce(&'scope LaunchScope<'scope, 'env>) -> T,
{
    if stream.capture_graph()?.is_some() {
        return Err(Error::Capturing);
    }
    let scope = LaunchScope {
        // SAFETY: the scope lives inside this call, within the stream's borrow.
        stream: unsafe { StreamRef::from_raw(stream.raw()) },
        source,
        launched: RefCell::new(Launched::new()),
        finished: Cell::new(false),
        _lifetimes: PhantomData,
    };
    // Settles on unwind too: a panic in `f` must not free borrowed buffers
    // under a running host function.
    let settle_on_unwind = SettleOnDrop(&scope);
    let value = f(&scope);
    core::mem::forget(settle_on_unwind);
    scope.finish()?;
    Ok(value)
}

impl<'scope, 'env> LaunchScope<'scope, 'env> {
    /// Launches `hostcopy_fn` on a copy of `record`, in stream order.
    pub fn launch(&self, record: Record<'scope>) -> Result<(), Error> {
        if self.stream.capture_graph()?.is_some() {
            return Err(Error::Capturing);
        }
        self.make_room()?;
        let slot = self.source.take(record.args())?;
        // SAFETY: the slot is held by us and not shared yet.
        let (state, user_data) = unsafe { (&slot.as_ref().state, slot.as_ref().user_data()) };
        state.store(owned::PENDING, Ordering::Relaxed);
        // SAFETY: `run_scoped` reads the slot until it stores DONE or finds
        // it abandoned; the record's buffers outlive the scope, which waits
        // for a running host function before it returns.
        let launched = unsafe {
            ffi::cuLaunchHostFunc(self.stream.raw(), Some(host_fns::run_scoped), user_data)
        }
        .ok();
        if let Err(error) = launched {
            // Not queued: still ours.
            // SAFETY: no host function has the slot.
            unsafe { Slot::release(slot) };
            return Err(error.into());
        }
        // `make_room` left a free place.
        let tracked = self.launched.borrow_mut().push(slot);
        debug_assert!(tracked.is_ok());
        Ok(())
    }

    /// The scope's stream.
    pub fn stream(&self) -> StreamRef<'scope> {
        self.stream
    }

    /// Frees the slots of host functions that have finished, oldest first.
    /// Slots finish in stream order, so this stops at the first that has not.
    fn reap(&self) {
        let mut launched = self.launched.borrow_mut();
        let done = launched
            .iter()
            .take_while(|slot| {
                // SAFETY: tracked slots stay allocated until freed here or settled.
                let slot = unsafe { slot.as_ref() };
                slot.state.load(Ordering::Acquire) == owned::DONE
            })
            .count();
        for slot in launched.drain_front(done) {
            // SAFETY: DONE: the host function is finished with the slot.
            unsafe { Slot::release(slot) };
        }
    }

    fn make_room(&self) -> Result<(), Error> {
        let tracked = self.launched.borrow().len();
        if tracked >= REAP_AT || self.launched.borrow().is_full() {
            self.reap();
        }
        if self.launched.borrow().is_full() {
            return Err(Error::ScopeFull {
                capacity: SCOPE_CAPACITY,
            });
        }
        Ok(())
    }

    /// Synchronizes, then settles every slot. Runs once.
    fn finish(&self) -> Result<(), DriverError> {
        if self.finished.replace(true) {
            return Ok(());
        }
        let synchronized = self.stream.synchronize();
        for slot in self.launched.borrow_mut().drain_all() {
            // SAFETY: every tracked slot was launched by this scope.
            unsafe { settle(slot) };
        }
        synchronized
    }
}

/// Ends the scope's claim on one launched slot.
///
/// # Safety
///
/// `slot` was launched with `run_scoped` and is tracked by the caller, who
/// drops it from its list.
unsafe fn settle(slot: NonNull<Slot>) {
    // SAFETY: the slot stays allocated until freed here or, once abandoned,
    // by the host function.
    let state = unsafe { &slot.as_ref().state };
    loop {
        match state.load(Ordering::Acquire) {
            owned::DONE => {
                // SAFETY: the host function is finished with it.
                unsafe { Slot::release(slot) };
                return;
            }
            owned::PENDING => {
                let abandoned = state.compare_exchange(
                    owned::PENDING,
                    owned::ABANDONED,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                );
                if abandoned.is_ok() {
                    // Skipped by the driver after a context error, or never
                    // to run: the host function frees it if it ever runs.
                    Slot::count_abandoned();
                    return;
                }
            }
            // A host function is copying into the borrowed buffers right
            // now: wait for that one copy.
            _ => wait_a_moment(),
        }
    }
}

fn wait_a_moment() {
    #[cfg(feature = "std")]
    std::thread::yield_now();
    #[cfg(not(feature = "std"))]
    core::hint::spin_loop();
}

struct SettleOnDrop<'a, 'scope, 'env>(&'a LaunchScope<'scope, 'env>);

impl Drop for SettleOnDrop<'_, '_, '_> {
    fn drop(&mut self) {
        let _ = self.0.finish();
    }
}

impl fmt::Debug for LaunchScope<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LaunchScope")
            .field("stream", &self.stream)
            .field("in_flight", &self.launched.borrow().len())
            .finish()
    }
}
