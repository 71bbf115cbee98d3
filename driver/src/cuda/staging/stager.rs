//! The [`Stager`]: the fronts, which decide only when the caller waits
//! ([`run`](Stager::run) blocks, [`scope`](Stager::scope) gives handles,
//! [`start_unchecked`](Stager::start_unchecked) gives a transfer that
//! borrows nothing), and the pinned copies, over the [`Engine`] that every
//! front goes through.

use super::driver_path::PinnedTransferError;
use super::engine::{Engine, Queuing};
use super::options::StagingOptions;
use super::pending::{self, PendingTransfer};
use super::scope::{self, StagingScope};
use super::spec::TransferSpec;
use crate::cuda::context::Context;
use crate::cuda::device::DeviceMemory;
use crate::cuda::error::Error;
use crate::cuda::pinned::PinnedBuffer;
use crate::cuda::stream::StreamRef;

/// Pinned staging buffers, one stream per buffer and a worker pool: see
/// the [module documentation](super).
#[derive(Debug)]
pub struct Stager {
    engine: Engine,
    /// Tells this stager's pending transfers from others'.
    id: u64,
}

impl Stager {
    /// A stager on `context` with the default options.
    ///
    /// Refused with [`Error::StreamMemoryWaitsUnsupported`] where the
    /// device or its driver refuses stream memory waits, which every
    /// staged transfer queues.
    pub fn new(context: &Context) -> Result<Stager, Error> {
        Self::with_options(context, StagingOptions::default())
    }

    /// A stager on `context` with `options`: allocates the staging buffers
    /// and their flags, creates their streams, and starts the workers and
    /// the copier thread.
    ///
    /// Refused as [`new`](Self::new) is.
    pub fn with_options(context: &Context, options: StagingOptions) -> Result<Stager, Error> {
        Ok(Stager {
            engine: Engine::new(context, options)?,
            id: pending::next_stager_id(),
        })
    }

    /// The context the stager transfers in.
    pub fn context(&self) -> &Context {
        self.engine.context()
    }

    /// The options it was made with.
    pub fn options(&self) -> &StagingOptions {
        self.engine.options()
    }

    /// Worker threads running (fewer than asked if the system refused some).
    pub fn workers(&self) -> usize {
        self.engine.workers()
    }

    /// Runs the copy `spec` describes and waits for its bytes to arrive.
    ///
    /// Checked whole before anything is queued (bounds, and for a batch
    /// every block: see [`TransferSpec::blocks`]). A single transfer below
    /// [`StagingOptions::driver_path_below`] takes the driver's own
    /// synchronous path; everything else is staged.
    ///
    /// ```no_run
    /// use hostcopy_driver::cuda::{Context, DeviceBuffer};
    /// use hostcopy_driver::cuda::staging::{Stager, to_device, to_host};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let context = Context::primary(0)?;
    /// let mut device = DeviceBuffer::new(&context, 1 << 30)?;
    /// let mut host = vec![0u8; 1 << 30];
    /// let mut stager = Stager::new(&context)?;
    /// stager.run(to_host(&mut host, &device))?;
    /// stager.run(to_device(&mut device, &host[..1 << 20]).at(4096))?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn run(&mut self, spec: TransferSpec<'_>) -> Result<(), Error> {
        self.engine.run(spec)
    }

    /// Runs `f` with a scope whose transfers may borrow buffers that
    /// outlive the scope, then waits for every transfer not yet waited for.
    ///
    /// Returns `f`'s value, or the first error of a transfer the scope
    /// waited for (errors of transfers waited for through their handles
    /// are returned by [`Transfer::wait`](super::Transfer::wait)).
    ///
    /// ```no_run
    /// use hostcopy_driver::cuda::{Context, DeviceBuffer};
    /// use hostcopy_driver::cuda::staging::{Stager, to_host};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let context = Context::primary(0)?;
    /// let device = DeviceBuffer::new(&context, 256 << 20)?;
    /// let (mut first, mut second) = (vec![0u8; 128 << 20], vec![0u8; 128 << 20]);
    /// let mut stager = Stager::new(&context)?;
    /// stager.scope(|scope| -> Result<(), hostcopy_driver::cuda::Error> {
    ///     let a = scope.start(to_host(&mut first, &device))?;
    ///     let b = scope.start(to_host(&mut second, &device).at(128 << 20))?;
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
        scope::run(&mut self.engine, f)
    }

    /// Starts the copy `spec` describes and returns at once with a
    /// transfer that borrows nothing: for a binding (the Python package)
    /// whose transfers live inside another language's objects. Finish it
    /// with [`PendingTransfer::finish`], on any thread, or
    /// [`finish_pending`](Self::finish_pending); Rust code has
    /// [`scope`](Self::scope), which proves the same with borrows.
    ///
    /// The driver's side of its chunks is queued by this call, all at once
    /// (a few microseconds a chunk), so that
    /// [`PendingTransfer::order_before`] can order a stream after it at
    /// once; beyond about 2,000 chunks queued (32 GiB in the default
    /// chunks) this call waits for room in the driver's queue. Small single
    /// transfers take the driver's path when that does not wait for other
    /// work, and have finished when it returns.
    ///
    /// Memory whose owner orders its use (cudarc's) is refused
    /// ([`Error::OrderNotKept`]).
    ///
    /// # Safety
    ///
    /// The borrows in `spec` end when this call returns, but the transfer
    /// goes on: the caller keeps both memories allocated and untouched
    /// until the transfer's `finish` (or `finish_pending`) returns, or
    /// until it is dropped (for good if it is dropped after a context
    /// error: then its copies may still run). Untouched: nothing else
    /// reads or writes the destination's bytes, nor writes the source's.
    ///
    /// ```no_run
    /// use hostcopy_driver::cuda::{Context, DeviceBuffer};
    /// use hostcopy_driver::cuda::staging::{Stager, to_host};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let context = Context::primary(0)?;
    /// let device = DeviceBuffer::new(&context, 64 << 20)?;
    /// let mut host = vec![0u8; 64 << 20];
    /// let mut stager = Stager::new(&context)?;
    /// // SAFETY: `host` and `device` outlive the transfer, finished below,
    /// // and nothing touches `host` before.
    /// let pending = unsafe { stager.start_unchecked(to_host(&mut host, &device))? };
    /// stager.finish_pending(pending)?;
    /// # Ok(())
    /// # }
    /// ```
    pub unsafe fn start_unchecked(
        &mut self,
        spec: TransferSpec<'_>,
    ) -> Result<PendingTransfer, Error> {
        // Its driver side is queued whole when this returns, so that
        // `order_before` can order a stream after it at once, as a
        // binding's non-blocking call does right after starting it.
        let in_flight = self.engine.start(spec, Queuing::AtOnce)?;
        Ok(PendingTransfer::new(in_flight, self.id))
    }

    /// Waits for a transfer this stager started, then ends it
    /// ([`PendingTransfer::finish`], which needs no stager); its error, if
    /// any (see the [module documentation](super) for what an error leaves
    /// behind).
    ///
    /// # Panics
    ///
    /// If another stager started `transfer`.
    pub fn finish_pending(&mut self, transfer: PendingTransfer) -> Result<(), Error> {
        match transfer.into_in_flight(self.id) {
            Some(in_flight) => self.engine.finish(in_flight),
            None => Ok(()),
        }
    }

    /// Makes every later transfer of this stager wait for the work queued
    /// on `stream` so far: the kernel that wrote the data a device-to-host
    /// transfer reads, say. Transfers already started are not affected.
    ///
    /// Refused with [`Error::Capturing`] when `stream` is capturing a graph
    /// (the stager's streams would join the capture), and with
    /// [`Error::ContextMismatch`] for a stream of another context.
    ///
    /// The stager holds one event per call until it knows the work
    /// complete; at most [`MAX_ORDER_EVENTS`](super::MAX_ORDER_EVENTS) of them, so that a program
    /// calling this before every transfer keeps a bounded number of events
    /// alive: each call first lets go of those the driver reports
    /// complete, and at the bound folds the rest into one. It never waits
    /// on the host.
    pub fn wait_for(&mut self, stream: StreamRef<'_>) -> Result<(), Error> {
        self.engine.wait_for(stream)
    }

    /// `pinned_to_device(dst, src, device_offset)`'s mirror: copies
    /// `dst.len()` bytes from byte `device_offset` of `src` into the pinned
    /// buffer `dst` with one asynchronous driver copy (the link's speed, no
    /// staging), waits for it, and gives `dst` back.
    ///
    /// `dst` is taken by value because after a sticky context error the
    /// wait returns at once while the driver's copy may still be writing
    /// it: it is then leaked ([`PinnedTransferError`]), never handed back
    /// to safe code, and the device allocation is kept for good. If the
    /// stager's streams cannot be drained after an error, it also refuses
    /// further work, as after a failed staged transfer.
    ///
    /// ```no_run
    /// use hostcopy_driver::cuda::{Context, DeviceBuffer, PinnedBuffer, staging::Stager};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let context = Context::primary(0)?;
    /// let mut device = DeviceBuffer::new(&context, 2 << 20)?;
    /// let mut stager = Stager::new(&context)?;
    /// let pinned = PinnedBuffer::new(&context, 1 << 20)?;
    /// // Up to byte 1 MiB of `device`, then back from its first MiB.
    /// let pinned = stager.pinned_to_device(&mut device, pinned, 1 << 20)?;
    /// let pinned = stager.device_to_pinned(pinned, &device, 0)?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn device_to_pinned<S: DeviceMemory>(
        &mut self,
        dst: PinnedBuffer,
        src: &S,
        device_offset: usize,
    ) -> Result<PinnedBuffer, PinnedTransferError> {
        self.engine.device_to_pinned(dst, src, device_offset)
    }

    /// Copies all of the pinned buffer `src` to byte `device_offset` of
    /// `dst` with one asynchronous driver copy, waits for it, and gives
    /// `src` back. The arguments are in the order of
    /// [`device_to_pinned`](Self::device_to_pinned)'s: destination, source,
    /// then the offset in the device memory.
    ///
    /// `src` is taken by value for the reason given in `device_to_pinned`:
    /// after a sticky error the copy may still be reading it, and it is
    /// leaked.
    pub fn pinned_to_device<D: DeviceMemory>(
        &mut self,
        dst: &mut D,
        src: PinnedBuffer,
        device_offset: usize,
    ) -> Result<PinnedBuffer, PinnedTransferError> {
        self.engine.pinned_to_device(dst, src, device_offset)
    }
}
