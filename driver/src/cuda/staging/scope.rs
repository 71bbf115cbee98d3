//! Non-blocking staged transfers: a scope, modelled on
//! [`std::thread::scope`], whose transfers borrow their buffers and return
//! handles the caller waits on later while it keeps enqueuing.
//!
//! The scope, not the handle, owns every transfer's chunks: a handle that
//! is dropped or forgotten (`mem::forget`) leaves its transfer to the
//! scope, which waits for it before it returns (also on unwind). A handle
//! that waited only in `Drop` would be unsound: forgetting it would end the
//! borrow of a buffer a host function is still copying into.

use core::cell::RefCell;
use core::fmt;
use core::marker::PhantomData;
use std::vec::Vec;

use super::{Block, Blocks, DeviceSide, InFlight, Queuing, Stager};
use crate::cuda::device::DeviceMemory;
use crate::cuda::error::Error;
use crate::{HostMemory, HostMemoryMut};

/// Transfers whose buffers are borrowed for `'scope`; see [`Stager::scope`].
pub struct StagingScope<'scope, 'env: 'scope> {
    stager: RefCell<&'env mut Stager>,
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

impl Stager {
    /// Runs `f` with a scope whose transfers may borrow buffers that
    /// outlive the scope, then waits for every transfer not yet waited for.
    ///
    /// Returns `f`'s value, or the first error of a transfer the scope
    /// waited for (errors of transfers waited for through their handles
    /// are returned by [`Transfer::wait`]).
    ///
    /// ```no_run
    /// use hostcopy_driver::cuda::{Context, DeviceBuffer, staging::Stager};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let context = Context::primary(0)?;
    /// let device = DeviceBuffer::new(&context, 256 << 20)?;
    /// let (mut first, mut second) = (vec![0u8; 128 << 20], vec![0u8; 128 << 20]);
    /// let mut stager = Stager::new(&context)?;
    /// stager.scope(|scope| -> Result<(), hostcopy_driver::cuda::Error> {
    ///     let a = scope.device_to_host_at(&mut first, &device, 0)?;
    ///     let b = scope.device_to_host_at(&mut second, &device, 128 << 20)?;
    ///     // ... the caller keeps working while both are copied ...
    ///     a.wait()?;
    ///     b.wait()
    /// })??;
    /// # Ok(())
    /// # }
    /// ```
    pub fn scope<'env, F, T>(&'env mut self, f: F) -> Result<T, Error>
    where
        F: for<'scope> FnOnce(&'scope StagingScope<'scope, 'env>) -> T,
    {
        let scope = StagingScope {
            stager: RefCell::new(self),
            in_flight: RefCell::new(Slots::default()),
            _lifetimes: PhantomData,
        };
        // Waits on unwind too: a panic in `f` must not end the borrows
        // while host functions copy.
        let finish_on_unwind = FinishOnDrop(&scope);
        let value = f(&scope);
        core::mem::forget(finish_on_unwind);
        scope.finish_all()?;
        Ok(value)
    }
}

impl<'scope, 'env> StagingScope<'scope, 'env> {
    /// Starts copying `dst.len()` bytes from byte `offset` of `src` into `dst`.
    pub fn device_to_host_at<D, S>(
        &'scope self,
        dst: &'scope mut D,
        src: &'scope S,
        offset: usize,
    ) -> Result<Transfer<'scope, 'env>, Error>
    where
        D: HostMemoryMut + ?Sized,
        S: DeviceMemory,
    {
        let host = dst.host_range_mut();
        self.start(host, DeviceSide::Source(src), Blocks::One { offset })
    }

    /// Starts copying `dst.len()` bytes from the start of `src` into `dst`.
    pub fn device_to_host<D, S>(
        &'scope self,
        dst: &'scope mut D,
        src: &'scope S,
    ) -> Result<Transfer<'scope, 'env>, Error>
    where
        D: HostMemoryMut + ?Sized,
        S: DeviceMemory,
    {
        self.device_to_host_at(dst, src, 0)
    }

    /// Starts copying `src` to byte `offset` of `dst`.
    pub fn host_to_device_at<D, S>(
        &'scope self,
        dst: &'scope mut D,
        offset: usize,
        src: &'scope S,
    ) -> Result<Transfer<'scope, 'env>, Error>
    where
        D: DeviceMemory,
        S: HostMemory + ?Sized,
    {
        let host = src.host_range();
        self.start(host, DeviceSide::Destination(dst), Blocks::One { offset })
    }

    /// Starts copying `src` to the start of `dst`.
    pub fn host_to_device<D, S>(
        &'scope self,
        dst: &'scope mut D,
        src: &'scope S,
    ) -> Result<Transfer<'scope, 'env>, Error>
    where
        D: DeviceMemory,
        S: HostMemory + ?Sized,
    {
        self.host_to_device_at(dst, 0, src)
    }

    /// Starts copying each block from `src` into `dst`: a batch, checked
    /// before anything is queued as
    /// [`Stager::device_to_host_blocks`] checks it.
    pub fn device_to_host_blocks<D, S>(
        &'scope self,
        dst: &'scope mut D,
        src: &'scope S,
        blocks: &[Block],
    ) -> Result<Transfer<'scope, 'env>, Error>
    where
        D: HostMemoryMut + ?Sized,
        S: DeviceMemory,
    {
        let host = dst.host_range_mut();
        self.start(host, DeviceSide::Source(src), Blocks::Many(blocks))
    }

    /// Starts copying each block from `src` into `dst`: a batch, checked
    /// before anything is queued as
    /// [`Stager::host_to_device_blocks`] checks it.
    pub fn host_to_device_blocks<D, S>(
        &'scope self,
        dst: &'scope mut D,
        src: &'scope S,
        blocks: &[Block],
    ) -> Result<Transfer<'scope, 'env>, Error>
    where
        D: DeviceMemory,
        S: HostMemory + ?Sized,
    {
        let host = src.host_range();
        self.start(host, DeviceSide::Destination(dst), Blocks::Many(blocks))
    }

    /// Plans a transfer and hands it to the stager's feeder thread: no
    /// driver call on the caller's thread.
    fn start(
        &'scope self,
        host: crate::HostRange,
        device: DeviceSide<'scope>,
        blocks: Blocks<'_>,
    ) -> Result<Transfer<'scope, 'env>, Error> {
        let mut stager = self.stager.borrow_mut();
        let Some(in_flight) = stager.start(host, device, blocks, Queuing::Feeder)? else {
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
