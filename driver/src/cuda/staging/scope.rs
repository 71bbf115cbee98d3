//! Non-blocking staged transfers: a scope, modelled on
//! [`std::thread::scope`], whose transfers borrow their buffers and return
//! handles the caller waits on later while it keeps enqueuing.
//!
//! The scope, not the handle, owns every transfer's chunks: a handle that
//! is dropped or forgotten (`mem::forget`) leaves its transfer to the
//! scope, which waits for it before it returns (also on unwind). A handle
//! that waited only in `Drop` would be unsound: forgetting it would end the
//! borrow of a buffer the stager's copier is still copying into.

use core::cell::RefCell;
use core::fmt;
use core::marker::PhantomData;
use std::vec::Vec;

use super::engine::{Engine, Queuing};
use super::in_flight::InFlight;
use super::spec::TransferSpec;
use crate::cuda::error::Error;

/// Transfers whose buffers are borrowed for `'scope`; see [`Stager::scope`](super::Stager::scope).
pub struct StagingScope<'scope, 'env: 'scope> {
    stager: RefCell<&'env mut Engine>,
    /// Enqueued transfers not waited for yet, by handle index.
    in_flight: RefCell<Slots>,
    /// Invariant in both lifetimes, as `std::thread::Scope` is.
    _lifetimes: PhantomData<(&'scope mut &'scope (), &'env mut &'env ())>,
}

/// The transfers of a scope, each in the slot its handle names. A slot is
/// reused once its handle has waited, so a long-lived scope holds as many
/// slots as transfers were ever in flight at once, not one per transfer.
#[derive(Default)]
struct Slots {
    slots: Vec<Option<InFlight>>,
    /// Slots whose transfer was waited for, to be reused.
    free: Vec<usize>,
}

impl Slots {
    fn insert(&mut self, in_flight: InFlight) -> usize {
        match self.free.pop() {
            Some(index) => {
                self.slots[index] = Some(in_flight);
                index
            }
            None => {
                self.slots.push(Some(in_flight));
                self.slots.len() - 1
            }
        }
    }

    /// The transfer in slot `index`, whose slot is then free. Each handle
    /// takes its own slot once (`Transfer::wait` consumes it), so no
    /// handle can take a transfer started after its own.
    fn take(&mut self, index: usize) -> Option<InFlight> {
        let taken = self.slots[index].take();
        if taken.is_some() {
            self.free.push(index);
        }
        taken
    }

    fn drain(&mut self) -> Vec<InFlight> {
        self.free.clear();
        self.slots.drain(..).flatten().collect()
    }

    fn in_flight(&self) -> usize {
        self.slots.iter().flatten().count()
    }
}

/// A transfer started in a [`StagingScope`]: wait for it with
/// [`wait`](Self::wait), or let the scope wait for it when it returns.
#[must_use = "a transfer is waited for by `wait` or, at the latest, when its scope returns"]
pub struct Transfer<'scope, 'env: 'scope> {
    scope: &'scope StagingScope<'scope, 'env>,
    /// `None`: finished when started (empty, or on the driver's path).
    index: Option<usize>,
}

/// [`Stager::scope`](super::Stager::scope): runs `f` with a scope on `stager`, then waits for
/// every transfer not yet waited for.
pub(super) fn run<'env, F, T>(stager: &'env mut Engine, f: F) -> Result<T, Error>
where
    F: for<'scope> FnOnce(&'scope StagingScope<'scope, 'env>) -> T,
{
    let scope = StagingScope {
        stager: RefCell::new(stager),
        in_flight: RefCell::new(Slots::default()),
        _lifetimes: PhantomData,
    };
    // Waits on unwind too: a panic in `f` must not end the borrows while
    // the copier copies.
    let finish_on_unwind = FinishOnDrop(&scope);
    let value = f(&scope);
    core::mem::forget(finish_on_unwind);
    scope.finish_all()?;
    Ok(value)
}

impl<'scope, 'env> StagingScope<'scope, 'env> {
    /// Starts the copy `spec` describes and returns its handle at once:
    /// the caller's thread checks and plans it and queues the driver's side
    /// of its chunks, and the stager's copier thread makes their host side.
    /// A single transfer below the
    /// crossover takes the driver's path (complete when this returns) only
    /// when that cannot block: see the [module documentation](super).
    ///
    /// Checked whole before anything is queued, as
    /// [`Stager::run`](super::Stager::run) checks it. Memory whose owner orders its use
    /// (cudarc's) is refused ([`Error::OrderNotKept`]): its order is kept
    /// by `run` alone.
    pub fn start(
        &'scope self,
        spec: TransferSpec<'scope>,
    ) -> Result<Transfer<'scope, 'env>, Error> {
        let mut stager = self.stager.borrow_mut();
        let Some(in_flight) = stager.start(spec, Queuing::AtOnce)? else {
            return Ok(Transfer {
                scope: self,
                index: None,
            });
        };
        let index = self.in_flight.borrow_mut().insert(in_flight);
        Ok(Transfer {
            scope: self,
            index: Some(index),
        })
    }

    /// Waits for every transfer not waited for yet; the first error.
    fn finish_all(&self) -> Result<(), Error> {
        let pending = self.in_flight.borrow_mut().drain();
        let mut stager = self.stager.borrow_mut();
        let mut result = Ok(());
        for in_flight in pending {
            result = result.and(stager.finish(in_flight));
        }
        result
    }
}

impl Transfer<'_, '_> {
    /// Waits until the transfer's bytes have arrived; its error, if any.
    pub fn wait(self) -> Result<(), Error> {
        let Some(index) = self.index else {
            return Ok(());
        };
        let taken = self.scope.in_flight.borrow_mut().take(index);
        match taken {
            Some(in_flight) => self.scope.stager.borrow_mut().finish(in_flight),
            None => Ok(()),
        }
    }
}

struct FinishOnDrop<'a, 'scope, 'env>(&'a StagingScope<'scope, 'env>);

impl Drop for FinishOnDrop<'_, '_, '_> {
    fn drop(&mut self) {
        let _ = self.0.finish_all();
    }
}

impl fmt::Debug for StagingScope<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let in_flight = self.in_flight.borrow().in_flight();
        f.debug_struct("StagingScope")
            .field("in_flight", &in_flight)
            .finish()
    }
}

impl fmt::Debug for Transfer<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transfer")
            .field("index", &self.index)
            .finish()
    }
}
