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
//!
//! A scoped record must never become a graph node (a replay would run it
//! after the scope returned): the scope is opened, and each launch made,
//! under the capture lock with the stream seen not capturing, and while the
//! scope is open the stream can neither begin capturing nor be joined to
//! a capture through an event wait (both refused with `Error::ScopeOpen`).

use core::cell::{Cell, RefCell};
use core::fmt;
use core::marker::PhantomData;
use core::ptr::NonNull;
use core::sync::atomic::Ordering;

use alloc::collections::VecDeque;

use super::capture::{self, capture_graph};
use super::error::{DriverError, Error};
use super::ffi;
use super::stream::StreamRef;
use crate::owned::{self, HostCopy, Settled, Slot, SlotSource};
use crate::{Record, RecordPool};

/// Finished launches are freed once this many are tracked, so the list is
/// as long as the launches in flight, not as all launches.
const REAP_AT: usize = 64;

/// Launches whose records borrow buffers for `'scope`; see
/// [`StreamRef::scope`].
pub struct LaunchScope<'scope, 'env: 'scope> {
    stream: StreamRef<'scope>,
    source: SlotSource,
    launched: RefCell<VecDeque<NonNull<Slot>>>,
    finished: Cell<bool>,
    /// Invariant in both lifetimes, as `std::thread::Scope` is.
    _lifetimes: PhantomData<(&'scope mut &'scope (), &'env mut &'env ())>,
}

impl<'a> StreamRef<'a> {
    /// Runs `f` with a scope whose launches may borrow buffers that outlive
    /// the scope, then waits for every host function the scope launched.
    ///
    /// Each launch copies its record to the heap; the scope frees the copies
    /// when it returns. After a context error it returns the error without
    /// waiting for host functions the driver skipped, but not before a host
    /// function of the scope that is running has finished: the borrowed
    /// buffers are never touched after the scope returns. Refused on a
    /// capturing stream ([`Error::Capturing`]); while the scope is open, the
    /// stream can neither begin capturing nor wait for an event recorded in
    /// a capture, which would join it to that capture ([`Error::ScopeOpen`]).
    ///
    /// ```no_run
    /// use hostcopy_driver::Record;
    /// use hostcopy_driver::cuda::{Context, HostCopy, PinnedBuffer, Stream};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let context = Context::primary(0)?;
    /// let stream = Stream::new(&context)?;
    /// let staging = PinnedBuffer::new(&context, 1 << 20)?;
    /// let mut pageable = vec![0u8; 1 << 20];
    /// stream.as_stream().scope(|scope| {
    ///     scope.launch(HostCopy::Parallel, Record::pack(&mut pageable[..], &*staging)?)
    /// })??;
    /// # Ok(())
    /// # }
    /// ```
    pub fn scope<'env, F, T>(&self, f: F) -> Result<T, Error>
    where
        F: for<'scope> FnOnce(&'scope LaunchScope<'scope, 'env>) -> T,
    {
        run(*self, SlotSource::Heap, f)
    }

    /// [`scope`](Self::scope) with the record copies in slots of `pool`.
    pub fn scope_in<'env, const N: usize, F, T>(
        &self,
        pool: &'static RecordPool<N>,
        f: F,
    ) -> Result<T, Error>
    where
        F: for<'scope> FnOnce(&'scope LaunchScope<'scope, 'env>) -> T,
    {
        run(*self, SlotSource::Pool(pool), f)
    }
}

/// Runs `f` with a new scope on `stream`, then finishes the scope.
fn run<'env, F, T>(stream: StreamRef<'_>, source: SlotSource, f: F) -> Result<T, Error>
where
    F: for<'scope> FnOnce(&'scope LaunchScope<'scope, 'env>) -> T,
{
    {
        let mut locked = capture::lock();
        if capture_graph(&locked, stream.context(), stream.raw())?.is_some() {
            return Err(Error::Capturing);
        }
        locked.open_scope(stream.raw());
    }
    let scope = LaunchScope {
        stream,
        source,
        launched: RefCell::new(VecDeque::new()),
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
    /// Launches `copy` on a copy of `record`, in stream order.
    ///
    /// Refused with [`Error::Capturing`] if the stream is capturing. This
    /// layer never lets a scope's stream begin or join a capture; the
    /// check guards a stream from [`StreamRef::from_raw`] whose capture
    /// state changed outside it, against that promise.
    pub fn launch(&self, copy: HostCopy, record: Record<'scope>) -> Result<(), Error> {
        if self.launched.borrow().len() >= REAP_AT {
            self.reap();
        }
        let slot = self.source.take(record.args(), copy)?;
        // SAFETY: the slot is held by us and not shared yet.
        unsafe {
            (*slot.as_ptr())
                .state
                .store(owned::PENDING, Ordering::Relaxed)
        };
        let launched = {
            let locked = capture::lock();
            match capture_graph(&locked, self.stream.context(), self.stream.raw()) {
                Ok(Some(_)) => Err(Error::Capturing),
                Ok(None) => {
                    // SAFETY: `run_scoped` reads the slot until it stores
                    // DONE or finds it abandoned; the record's buffers
                    // outlive the scope, which waits for a running host
                    // function before it returns; the stream is not
                    // capturing and cannot start to under the lock.
                    unsafe {
                        ffi::cuLaunchHostFunc(
                            self.stream.raw(),
                            Some(owned::run_scoped),
                            Slot::user_data(slot),
                        )
                    }
                    .ok()
                    .map_err(Error::from)
                }
                Err(error) => Err(error.into()),
            }
        };
        if let Err(error) = launched {
            // Not queued: still ours.
            // SAFETY: no host function has the slot.
            unsafe { Slot::release(slot) };
            return Err(error);
        }
        self.launched.borrow_mut().push_back(slot);
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
        while let Some(&slot) = launched.front() {
            // SAFETY: tracked slots stay allocated until freed here or settled.
            let state = unsafe { &(*slot.as_ptr()).state };
            if state.load(Ordering::Acquire) != owned::DONE {
                break;
            }
            launched.pop_front();
            // SAFETY: DONE: the host function is finished with the slot.
            unsafe { Slot::release(slot) };
        }
    }

    /// Synchronizes, then settles every slot, then closes the scope. Runs once.
    fn finish(&self) -> Result<(), DriverError> {
        if self.finished.replace(true) {
            return Ok(());
        }
        let synchronized = self.stream.synchronize();
        for slot in self.launched.borrow_mut().drain(..) {
            // SAFETY: every tracked slot was launched by this scope.
            unsafe { settle(slot) };
        }
        capture::lock().close_scope(self.stream.raw());
        synchronized
    }
}

/// Ends the scope's claim on one launched slot: frees it once no host
/// function touches it, or leaves an abandoned one to its host function.
///
/// # Safety
///
/// `slot` was launched with `run_scoped` and is tracked by the caller, who
/// drops it from its list.
unsafe fn settle(slot: NonNull<Slot>) {
    // SAFETY: the slot stays allocated until freed here or, once abandoned,
    // by the host function.
    let state = unsafe { &(*slot.as_ptr()).state };
    match owned::settle(state) {
        // SAFETY: the host function is finished with it.
        Settled::Finished => unsafe { Slot::release(slot) },
        // Skipped by the driver after a context error, or never to run:
        // the host function frees it if it ever runs.
        Settled::Abandoned => Slot::count_abandoned(),
    }
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
