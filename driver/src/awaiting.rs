//! A stager shared by the threads of a host runtime (the Python binding),
//! the transfers it starts there, and the thread that finishes transfers
//! and tells an event loop through a pipe.
//!
//! - **A transfer** ([`SharedTransfer`]): the engine's
//!   [`PendingTransfer`], which ends itself without the stager, once
//!   ([`PendingTransfer::finish`]), and how it ended, kept for every later
//!   caller. [`SharedTransfer::finish`] takes `&self` and is idempotent:
//!   the first caller waits for the copies and ends the transfer, a caller
//!   meanwhile waits for that one, and none takes the stager's lock.
//!   Whoever ends it wakes the event loops that await it and lets go of
//!   what was kept for it ([`SharedTransfer::hand_over`],
//!   [`SharedTransfer::release_when_ended`]); what was kept for a transfer
//!   dropped before it ended goes once its copier is done with the host
//!   memory (after an error too), and is kept for good only in a process
//!   that gave up on its copies.
//! - **Every start is made on the caller's thread**, every chunk queued
//!   before [`SharedStager::transfer`] returns, on an event loop's thread
//!   too: so a wait queued on the caller's stream depends only on work
//!   already queued. A wait on work queued later by another thread (a
//!   start thread, tried and measured on the H200) deadlocks whenever any
//!   thread makes a synchronous call on that stream first: while a
//!   synchronous copy waits on the legacy stream, the driver holds back
//!   other threads' `cuEventRecord`, copies, stream and event creation,
//!   which that start needs.
//! - **The finish thread** takes transfers in the order they come and
//!   finishes each; one stager's transfers complete in about the order
//!   they started (its copier is one thread). It never takes the stager's
//!   lock, which a blocking transfer may hold for long. It makes no call
//!   into the host runtime: what was kept for a transfer is dropped there,
//!   and the host runtime's own types decide what that means (pyo3 queues
//!   a Python reference dropped without the GIL).
//! - **A [`Wakeup`]** is one pipe per event loop: the thread that ends a
//!   transfer adds the awaiting loop's token to a list and writes one byte
//!   if none is unread; the loop's reader takes the list and the byte
//!   together. Both ends belong to the wakeup's shared state, which every
//!   registration holds, so a write never meets a closed reader, and at
//!   most one byte is unread, so neither side blocks on the pipe.
//!
//! The finish thread starts on first use and ends once every handle of
//! the stager and every transfer handed to it are gone. After a fork, or
//! once the process gave up at exit ([`crate::process`]), what it holds
//! is left as it is.

use std::boxed::Box;
use std::io::{PipeReader, PipeWriter, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::string::String;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::vec::Vec;

/// For a host runtime's drops (the Python binding's stager and transfer).
pub use crate::cuda::retire::keep_if_abandoned;
use crate::cuda::retire::{self, Kept};
use crate::cuda::staging::{PendingTransfer, Stager};
use crate::cuda::{Context, Error, StreamRef};

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing panics while one of these is held; the values stay whole.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A stager as its shared handle holds it: `None` once closed (by
/// [`SharedStager::close`], or by the exit handler, to which it is
/// registered as a [`crate::process::AtExit`]).
pub type StagerSlot = Mutex<Option<Stager>>;

/// How a transfer of a [`SharedStager`] ended, or why it was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The layer's error.
    Layer(Error),
    /// The stager was closed before the transfer could start.
    Closed,
    /// The thread that finishes transfers could not be started.
    NoThread,
}

impl From<Error> for Failure {
    fn from(error: Error) -> Failure {
        Failure::Layer(error)
    }
}

impl From<crate::cuda::DriverError> for Failure {
    fn from(error: crate::cuda::DriverError) -> Failure {
        Failure::Layer(error.into())
    }
}

/// The stager's last work, run by the host runtime's `on_drop`: drops the
/// stager, which waits for the work queued on its streams and binds its
/// context.
pub type Closing = Box<dyn FnOnce() + Send>;

/// A transfer on the locked stager: with `true` it runs whole
/// ([`Stager::run`]: `Ok(None)`), with `false` it starts
/// ([`Stager::start_unchecked`]: `Ok(Some)`, or `Ok(None)` if it ended
/// at once).
pub type Start =
    Box<dyn FnOnce(&mut Stager, bool) -> Result<Option<PendingTransfer>, Error> + Send>;

/// When a call of [`SharedStager::transfer`] returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Begin {
    /// Once the bytes have arrived.
    Blocking,
    /// Once every chunk is queued.
    Queued,
}

/// A stager shared by a runtime's threads, with its finish thread (see the
/// module's documentation).
pub struct SharedStager {
    context: Context,
    stager: Arc<StagerSlot>,
    /// Set by [`close`](Self::close): later calls are refused at once.
    closed: AtomicBool,
    finisher: Mutex<Option<Sender<Arc<SharedTransfer>>>>,
    /// Runs the closing of the stager when the last handle goes: the host runtime decides with which lock a drop
    /// may wait, and keeps the thread's current context.
    on_drop: fn(Closing),
}

impl core::fmt::Debug for SharedStager {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SharedStager")
            .field("device", &self.context.ordinal())
            .field("closed", &self.closed.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl SharedStager {
    /// Shares `stager` of `context`; `on_drop` runs its closing once the
    /// last handle is gone, unless the process abandoned it.
    pub fn new(context: Context, stager: Stager, on_drop: fn(Closing)) -> Arc<SharedStager> {
        Arc::new(SharedStager {
            context,
            stager: Arc::new(Mutex::new(Some(stager))),
            closed: AtomicBool::new(false),
            finisher: Mutex::new(None),
            on_drop,
        })
    }

    /// The stager's context.
    pub fn context(&self) -> &Context {
        &self.context
    }

    /// The stager itself, for the exit handler's registry.
    pub fn slot(&self) -> &Arc<StagerSlot> {
        &self.stager
    }

    /// A transfer: after the work queued on each stream of `after` by
    /// now; when not blocking, work queued on `before` from now on waits
    /// for it (when that cannot be queued, the transfer is finished before
    /// the error is returned, so that nothing stays queued). Returns as
    /// `begin` says, with the transfer unless it ran whole.
    pub fn transfer(
        self: &Arc<Self>,
        begin: Begin,
        after: &[StreamRef<'_>],
        before: Option<StreamRef<'_>>,
        start: Start,
    ) -> Result<Option<Arc<SharedTransfer>>, Failure> {
        let pending = self.with_stager(
            |stager, _| after.iter().try_for_each(|&stream| stager.wait_for(stream)),
            |stager, _| {
                let Some(pending) = start(stager, begin == Begin::Blocking)? else {
                    return Ok(None);
                };
                match before.map_or(Ok(()), |stream| pending.order_before(stream)) {
                    Ok(()) => Ok(Some(pending)),
                    Err(failure) => {
                        let _ = stager.finish_pending(pending);
                        Err(failure)
                    }
                }
            },
        )?;
        Ok(pending.map(|pending| SharedTransfer::started(self, pending)))
    }

    /// Runs `order` (the stager's `wait_for` of this call's streams), then
    /// `body`, on the open stager (`Failure::Closed` once closed), holding
    /// its lock.
    pub fn with_stager<T>(
        &self,
        order: impl FnOnce(&mut Stager, &Context) -> Result<(), Error>,
        body: impl FnOnce(&mut Stager, &Context) -> Result<T, Error>,
    ) -> Result<T, Failure> {
        let mut slot = lock(&self.stager);
        let stager = slot.as_mut().ok_or(Failure::Closed)?;
        order(stager, &self.context)?;
        Ok(body(stager, &self.context)?)
    }

    /// Closes the stager: its drop waits for all the work queued on its
    /// streams. Later calls are refused (`Failure::Closed`); transfers
    /// already started finish.
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        let stager = lock(&self.stager).take();
        drop(stager);
    }

    /// Whether [`close`](Self::close) was called.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Queues `transfer` for the finish thread, starting it if need be.
    fn finish_later(&self, transfer: &Arc<SharedTransfer>) -> Result<(), Failure> {
        let mut finisher = lock(&self.finisher);
        let sender = match &mut *finisher {
            Some(sender) => sender,
            empty => {
                let (sender, transfers) = channel::<Arc<SharedTransfer>>();
                std::thread::Builder::new()
                    .name(String::from("hostcopy-await"))
                    .spawn(move || finish_thread(&transfers))
                    .map_err(|_| Failure::NoThread)?;
                empty.insert(sender)
            }
        };
        sender
            .send(Arc::clone(transfer))
            .map_err(|_| Failure::NoThread)
    }
}

/// The finish thread (one per stager): takes transfers in the order they
/// come and finishes each, holding no lock of the stager's. A transfer
/// another caller is finishing is waited for, then told (its `end` tells
/// the loops once).
fn finish_thread(transfers: &std::sync::mpsc::Receiver<Arc<SharedTransfer>>) {
    // Ends once no stager can send it more.
    while let Ok(transfer) = transfers.recv() {
        // Forked, or given up on at exit: left as it is.
        let mut next = Some(transfer);
        if retire::keep_if_abandoned(|| next.take()) {
            continue;
        }
        if let Some(transfer) = next {
            // How it ended goes to whoever awaits it (`end`).
            let _ = transfer.finish();
        }
    }
}

impl Drop for SharedStager {
    fn drop(&mut self) {
        // Forked, or given up on at exit: left as it is.
        if retire::keep_if_abandoned(|| Arc::clone(&self.stager)) {
            return;
        }
        // Dropped under the lock, which the exit handler takes to close
        // it: so that the handler waits for this drop (the engine's, which
        // waits for the work on its streams) instead of finding the slot
        // empty while the drop still runs.
        let slot = Arc::clone(&self.stager);
        if lock(&slot).is_some() {
            (self.on_drop)(Box::new(move || drop(lock(&slot).take())));
        }
    }
}

/// A transfer of a [`SharedStager`] (see the module's documentation).
pub struct SharedTransfer {
    stager: Arc<SharedStager>,
    /// Let go of once it has ended (by `end`, or by its drop before),
    /// so that an ended transfer kept alive holds none of the stager's
    /// streams or events. Cloned out for each call, never held locked
    /// while it waits.
    pending: Mutex<Option<Arc<PendingTransfer>>>,
    tracked: Mutex<Tracked>,
}

impl core::fmt::Debug for SharedTransfer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let ended = lock(&self.tracked).ended.is_some();
        f.debug_struct("SharedTransfer")
            .field("ended", &ended)
            .finish_non_exhaustive()
    }
}

/// Under the transfer's own lock: never held while waiting for the
/// stager's lock, nor for the copies.
struct Tracked {
    /// How it ended, once it has.
    ended: Option<Result<(), Failure>>,
    /// The loops to tell once it has ended.
    wakeups: Vec<(Arc<Signal>, u64)>,
    /// The finish thread has it, or will: it ends without any caller.
    finisher: bool,
    /// Let go of once it has ended, or once its copier is done if it is
    /// dropped before (kept for good in a process that gave up on it).
    kept: Vec<Box<dyn Send>>,
}

impl SharedTransfer {
    /// A transfer started on `stager` (through
    /// [`SharedStager::with_stager`]).
    pub fn started(stager: &Arc<SharedStager>, pending: PendingTransfer) -> Arc<SharedTransfer> {
        Arc::new(SharedTransfer {
            stager: Arc::clone(stager),
            pending: Mutex::new(Some(Arc::new(pending))),
            tracked: Mutex::new(Tracked {
                ended: None,
                wakeups: Vec::new(),
                finisher: false,
                kept: Vec::new(),
            }),
        })
    }

    /// The stager that started it.
    pub fn stager(&self) -> &Arc<SharedStager> {
        &self.stager
    }

    /// The pending transfer, until it has ended.
    fn pending(&self) -> Option<Arc<PendingTransfer>> {
        lock(&self.pending).clone()
    }

    /// How it ended, once it has.
    fn ended(&self) -> Option<Result<(), Failure>> {
        lock(&self.tracked).ended
    }

    /// Finishes the transfer unless it has ended already, or waits for the
    /// caller that finishes it; how it ended, the same for every caller.
    /// Takes no lock of the stager's ([`PendingTransfer::finish`]).
    pub fn finish(&self) -> Result<(), Failure> {
        if let Some(outcome) = self.ended() {
            return outcome;
        }
        let Some(pending) = self.pending() else {
            // Ended meanwhile: `end` records the outcome before it lets go
            // of the transfer.
            return self.ended().expect("let go of once it has ended");
        };
        let outcome = pending.finish().map_err(Failure::Layer);
        self.end(outcome);
        outcome
    }

    /// Records how it ended, lets go of the pending transfer (its streams
    /// and events go back to the stager), then tells whoever is owed: the
    /// loops, and drops what was kept. Once: a later call finds nothing
    /// to tell. Called only once the transfer's finish has returned, so
    /// the copier is done with the host memory that was kept.
    fn end(&self, outcome: Result<(), Failure>) {
        let (wakeups, kept) = {
            let mut tracked = lock(&self.tracked);
            tracked.ended.get_or_insert(outcome);
            (
                core::mem::take(&mut tracked.wakeups),
                core::mem::take(&mut tracked.kept),
            )
        };
        let pending = lock(&self.pending).take();
        drop(pending);
        for (signal, token) in wakeups {
            signal.finished(token);
        }
        drop(kept);
    }

    /// Whether it has ended, or its bytes have arrived, without waiting.
    pub fn is_done(&self) -> Result<bool, Error> {
        if self.ended().is_some() {
            return Ok(true);
        }
        match self.pending() {
            Some(pending) => pending.is_finished(),
            None => Ok(true),
        }
    }

    /// Whether it has ended.
    pub fn has_ended(&self) -> bool {
        lock(&self.tracked).ended.is_some()
    }

    /// Tells `wakeup` with `token` once the transfer has ended, handing it
    /// to the finish thread if no one else will end it: `true` (nothing
    /// registered) when it has ended already.
    pub fn notify_when_finished(
        self: &Arc<Self>,
        wakeup: &Wakeup,
        token: u64,
    ) -> Result<bool, Failure> {
        let mut tracked = lock(&self.tracked);
        if tracked.ended.is_some() {
            return Ok(true);
        }
        if !tracked.finisher {
            // Handed over under the transfer's lock, so that no
            // `hand_over` meanwhile finds a finisher that then fails to
            // start. The finish thread takes that lock only once it has
            // the transfer, never while it holds the channel's.
            self.stager.finish_later(self)?;
            tracked.finisher = true;
        }
        tracked.wakeups.push((Arc::clone(&wakeup.signal), token));
        Ok(false)
    }

    /// Hands the transfer to the finish thread, which ends it, and keeps
    /// `value` until then (a transfer dropped unwaited where waiting for
    /// its copies would hold an event loop): `Ok`. `value` comes back if
    /// it has ended, keeps a value already, or the thread could not be
    /// started.
    pub fn end_elsewhere(self: &Arc<Self>, value: Box<dyn Send>) -> Result<(), Box<dyn Send>> {
        let mut tracked = lock(&self.tracked);
        if tracked.ended.is_some() || !tracked.kept.is_empty() {
            return Err(value);
        }
        if !tracked.finisher {
            // Under the transfer's lock, as in `notify_when_finished`: the
            // thread's `end` waits for it, so `value` is kept first.
            if self.stager.finish_later(self).is_err() {
                return Err(value);
            }
            tracked.finisher = true;
        }
        tracked.kept.push(value);
        Ok(())
    }

    /// Keeps `value` until the transfer has ended, when the finish thread
    /// will end it without any other caller (it is awaited): `Ok`.
    /// Otherwise `value` comes back: the caller ends it, it has ended, or
    /// it keeps a value already.
    pub fn hand_over(&self, value: Box<dyn Send>) -> Result<(), Box<dyn Send>> {
        let mut tracked = lock(&self.tracked);
        if tracked.ended.is_some() || !tracked.finisher || !tracked.kept.is_empty() {
            return Err(value);
        }
        tracked.kept.push(value);
        Ok(())
    }

    /// Lets go of `value` (what a copy of the transfer may read or write:
    /// a host runtime's arrays) only once no copy can touch it: back
    /// (`Some`, for the caller to drop) if the transfer has ended;
    /// otherwise kept, dropped when it ends or, if it is dropped before it
    /// ends, once its copier is done (see `Drop`), and kept for good
    /// (counted in [`leaked`](crate::cuda::staging::leaked)) in a process
    /// that gave up on its copies.
    pub fn release_when_ended(&self, value: Box<dyn Send>) -> Option<Box<dyn Send>> {
        let mut tracked = lock(&self.tracked);
        if tracked.ended.is_some() {
            return Some(value);
        }
        tracked.kept.push(value);
        None
    }

    /// The rule for a host runtime's handle of the transfer dropped
    /// before anyone waited for it, `kept` being what its copies may
    /// touch (the runtime's arrays). In a process that gave up on its
    /// copies (forked, or at exit), the transfer and `kept` are kept for
    /// good: ending it would wait for threads that never answer, and a
    /// copier given up on may still write that memory. An ended transfer
    /// gives `kept` back at once. The finish thread keeps `kept` while it
    /// ends the transfer, if it has it already (awaited, or the await
    /// cancelled), or takes it here where `on_event_loop()` says that
    /// waiting would hold an event loop for the copy. Otherwise
    /// `finish_here()` ends it on this thread (through
    /// [`finish`](Self::finish), its error reported by the caller, which
    /// cannot raise from a drop), and `kept` comes back once the transfer
    /// has ended, else once its copier is done
    /// ([`release_when_ended`](Self::release_when_ended)); a panic in
    /// `finish_here` keeps it for good, as a copy may still write it.
    /// What comes back is the caller's to drop, as its runtime allows.
    pub fn drop_unwaited(
        self: &Arc<Self>,
        kept: Box<dyn Send>,
        on_event_loop: impl FnOnce() -> bool,
        finish_here: impl FnOnce(),
    ) -> Option<Box<dyn Send>> {
        let mut kept = Some(kept);
        if retire::keep_if_abandoned(|| (Arc::clone(self), kept.take())) {
            return None;
        }
        let kept = kept?;
        if self.has_ended() {
            return Some(kept);
        }
        let Err(kept) = self.hand_over(kept) else {
            return None;
        };
        let kept = if on_event_loop() {
            match self.end_elsewhere(kept) {
                Ok(()) => return None,
                Err(kept) => kept,
            }
        } else {
            kept
        };
        let kept = core::mem::ManuallyDrop::new(kept);
        finish_here();
        self.release_when_ended(core::mem::ManuallyDrop::into_inner(kept))
    }
}

impl Drop for SharedTransfer {
    /// What was kept for a transfer dropped before it ended (its last
    /// handle gone with no caller finishing it) goes once the pending
    /// transfer's own drop has returned: that waits until the copier is
    /// done with the host memory, after an error too (the device memory
    /// a queued copy may still use keeps itself). In a process that gave
    /// up on its copies (forked, or at exit) nothing may wait for them:
    /// the pending transfer and the values are kept for good.
    fn drop(&mut self) {
        let tracked = self
            .tracked
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        if tracked.kept.is_empty() {
            return;
        }
        let kept = core::mem::take(&mut tracked.kept);
        let mut pending = self
            .pending
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if retire::keep_if_abandoned(|| pending.take()) {
            for value in kept {
                retire::keep(value, Kept::HostValue);
            }
            return;
        }
        drop(pending);
        drop(kept);
    }
}

/// A pipe whose one unread byte says that `tokens` holds finished ones.
struct Signal {
    reader: PipeReader,
    writer: PipeWriter,
    finished: Mutex<Finished>,
}

struct Finished {
    tokens: Vec<u64>,
    /// A byte is in the pipe, unread: set and cleared with it, under the
    /// lock.
    signalled: bool,
}

impl Signal {
    fn finished(&self, token: u64) {
        let mut finished = lock(&self.finished);
        finished.tokens.push(token);
        // One byte into an empty pipe never blocks. A write that fails
        // (it cannot with both ends open) is retried by the next token.
        if !finished.signalled && (&self.writer).write_all(&[1]).is_ok() {
            finished.signalled = true;
        }
    }
}

/// One event loop's wakeup: [`fileno`](Self::fileno) to watch for
/// reading, [`take`](Self::take) for the tokens of the transfers ended
/// since.
pub struct Wakeup {
    signal: Arc<Signal>,
}

impl core::fmt::Debug for Wakeup {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Wakeup")
            .field("fileno", &self.fileno())
            .finish_non_exhaustive()
    }
}

impl Wakeup {
    /// A fresh pipe, both ends close-on-exec.
    pub fn new() -> std::io::Result<Wakeup> {
        let (reader, writer) = std::io::pipe()?;
        Ok(Wakeup {
            signal: Arc::new(Signal {
                reader,
                writer,
                finished: Mutex::new(Finished {
                    tokens: Vec::new(),
                    signalled: false,
                }),
            }),
        })
    }

    /// The pipe's read end, readable while ended tokens wait.
    pub fn fileno(&self) -> RawFd {
        self.signal.reader.as_raw_fd()
    }

    /// The tokens ended since the last call, in the order they ended;
    /// reads the pipe's byte with them.
    pub fn take(&self) -> std::io::Result<Vec<u64>> {
        let mut finished = lock(&self.signal.finished);
        if finished.signalled {
            // The byte is there (written before `signalled` was set, under
            // this lock): the read returns at once.
            let mut byte = [0u8; 1];
            (&self.signal.reader).read_exact(&mut byte)?;
            finished.signalled = false;
        }
        Ok(core::mem::take(&mut finished.tokens))
    }
}

#[cfg(all(test, feature = "simulator"))]
mod tests {
    use super::*;
    use crate::cuda::staging::{StagingOptions, to_device, to_host};
    use crate::cuda::{DeviceBuffer, DeviceView, PinnedBuffer, Stream, sim};
    use crate::{HostRange, RawHostMemory};
    use std::time::{Duration, Instant};

    const LEN: usize = 256 << 10;

    fn pattern(seed: usize) -> Vec<u8> {
        (0..LEN).map(|i| (i * 7 + seed + i / 251) as u8).collect()
    }

    /// A shared stager of small chunks on a fresh simulated device.
    fn shared() -> (usize, Arc<SharedStager>) {
        sim::install();
        let ordinal = sim::new_device();
        let context = Context::primary(ordinal).unwrap();
        let options = StagingOptions::builder()
            .chunk(64 << 10)
            .buffers(2)
            .workers(1)
            .driver_path_below(0)
            .build()
            .unwrap();
        let stager = Stager::with_options(&context, options).unwrap();
        (
            ordinal,
            SharedStager::new(context, stager, |closing| closing()),
        )
    }

    fn device_with(stager: &SharedStager, bytes: &[u8]) -> Arc<DeviceBuffer> {
        let mut device = DeviceBuffer::new(stager.context(), bytes.len()).unwrap();
        device.copy_from_host(0, bytes).unwrap();
        Arc::new(device)
    }

    /// Host memory for a transfer that outlives it: leaked, its range kept.
    fn host(bytes: Vec<u8>) -> HostRange {
        let bytes = Box::leak(bytes.into_boxed_slice());
        HostRange {
            addr: bytes.as_mut_ptr().expose_provenance(),
            len: bytes.len(),
        }
    }

    fn read(range: HostRange) -> Vec<u8> {
        // SAFETY: `host` leaked the memory; the transfer has ended.
        unsafe {
            core::slice::from_raw_parts(core::ptr::with_exposed_provenance(range.addr), range.len)
        }
        .to_vec()
    }

    /// A view of all of `device`, which it keeps allocated.
    fn view(device: &Arc<DeviceBuffer>) -> DeviceView {
        let owner: Arc<dyn Send + Sync> = device.clone();
        // SAFETY: the owner keeps the buffer allocated; the tests order
        // every other use of it with the transfers.
        unsafe { DeviceView::new(device.context(), device.raw(), device.len(), owner) }.unwrap()
    }

    /// Host memory the transfers of these tests use, as the binding's
    /// callers hold it: leaked, so that it outlives them.
    ///
    /// # Safety
    ///
    /// `range` came from [`host`] and nothing else touches it until the
    /// transfer using the result has ended.
    unsafe fn memory(range: HostRange) -> RawHostMemory {
        // SAFETY: our caller's promise.
        unsafe { RawHostMemory::new(range) }
    }

    /// A start that downloads `device` into `range`.
    fn download(device: &Arc<DeviceBuffer>, range: HostRange) -> Start {
        let device = Arc::clone(device);
        Box::new(move |stager, _| {
            // SAFETY: each test gives a range of its own to one transfer.
            let mut memory = unsafe { memory(range) };
            // SAFETY: leaked host memory nothing else touches; the view
            // keeps the device buffer allocated.
            unsafe { stager.start_unchecked(to_host(&mut memory, &view(&device))) }.map(Some)
        })
    }

    /// A start that uploads `range` into `target`.
    fn upload(target: &Arc<DeviceBuffer>, range: HostRange) -> Start {
        let target = Arc::clone(target);
        Box::new(move |stager, _| {
            // SAFETY: as in `download`.
            let memory = unsafe { memory(range) };
            // SAFETY: as in `download`; the tests read the target only in
            // stream order after the upload.
            unsafe { stager.start_unchecked(to_device(&mut view(&target), &memory)) }.map(Some)
        })
    }

    /// A transfer started with `Begin::Queued` (a `blocking=False` call).
    fn start(
        shared: &Arc<SharedStager>,
        before: Option<StreamRef<'_>>,
        start: Start,
    ) -> Arc<SharedTransfer> {
        shared
            .transfer(Begin::Queued, &[], before, start)
            .unwrap()
            .expect("started, not run whole")
    }

    #[test]
    fn finishing_is_idempotent_and_every_caller_sees_the_one_outcome() {
        let (ordinal, shared) = shared();
        let expected = pattern(1);
        let device = device_with(&shared, &expected);
        let range = host(std::vec![0; LEN]);
        sim::hold(ordinal);
        let transfer = SharedTransfer::started(&shared, download_now(&shared, &device, range));
        assert!(!transfer.is_done().unwrap());
        let finishers: Vec<_> = (0..3)
            .map(|_| {
                let transfer = Arc::clone(&transfer);
                std::thread::spawn(move || transfer.finish())
            })
            .collect();
        std::thread::sleep(Duration::from_millis(20));
        assert!(!transfer.has_ended(), "ended while the device was held");
        sim::release(ordinal);
        for finisher in finishers {
            assert_eq!(finisher.join().unwrap(), Ok(()));
        }
        assert_eq!(transfer.finish(), Ok(()));
        assert!(read(range) == expected);
    }

    #[test]
    fn a_transfer_finishes_while_another_thread_holds_the_stager() {
        // A blocking transfer may hold the stager's lock for long: a
        // transfer's finish, on any thread, takes no lock of the stager's.
        use std::sync::mpsc::channel;
        let (_, shared) = shared();
        let expected = pattern(12);
        let device = device_with(&shared, &expected);
        let range = host(std::vec![0; LEN]);
        let transfer = start(&shared, None, download(&device, range));
        let (held, holding) = channel();
        let (release, released) = channel::<()>();
        let holder = {
            let shared = Arc::clone(&shared);
            std::thread::spawn(move || {
                shared.with_stager(
                    |_, _| Ok(()),
                    |_, _| {
                        held.send(()).unwrap();
                        let _ = released.recv();
                        Ok(())
                    },
                )
            })
        };
        holding.recv().unwrap();
        let (finished, outcome) = channel();
        let finisher = {
            let transfer = Arc::clone(&transfer);
            std::thread::spawn(move || finished.send(transfer.finish()).unwrap())
        };
        let ended = outcome.recv_timeout(Duration::from_secs(10));
        release.send(()).unwrap();
        assert_eq!(ended, Ok(Ok(())), "the finish waited for the stager's lock");
        finisher.join().unwrap();
        assert_eq!(holder.join().unwrap(), Ok(()));
        assert!(read(range) == expected);
    }

    #[test]
    fn an_ended_transfer_holds_none_of_the_stagers_streams() {
        // A transfer the program keeps after it ended (a Python `Transfer`
        // object) let go of the stager's streams and flags when it ended:
        // closing the stager frees them then, in the relaxed capture mode,
        // and the transfer's later drop touches no capture.
        let (ordinal, shared) = shared();
        let expected = pattern(13);
        let device = device_with(&shared, &expected);
        let range = host(std::vec![0; LEN]);
        let transfer = start(&shared, None, download(&device, range));
        assert_eq!(transfer.finish(), Ok(()));
        shared.close();
        let state = sim::device_state(ordinal);
        assert_eq!(state.host_allocations, 0, "the flags outlived the close");
        assert_eq!(state.streams, 0, "the streams outlived the close");
        let capturing = Stream::new(shared.context()).unwrap();
        capturing
            .as_stream()
            .begin_capture(crate::cuda::CaptureMode::Global)
            .unwrap();
        drop(transfer);
        let ended = capturing.as_stream().end_capture();
        assert!(ended.is_ok(), "the global capture was broken: {ended:?}");
        assert!(read(range) == expected);
    }

    #[test]
    fn a_start_returns_with_every_copy_queued_and_work_after_it_on_the_stream_waits() {
        // What work queued on the stream after the call waits for is
        // already queued when the call returns: no wait there depends on a
        // driver call still to be made, which a synchronous call on that
        // stream would hold back (a deadlock on the real driver). The
        // binding's side of the rule (every start goes through here, on
        // an event loop's thread too) is test_async_sim.py's.
        let (ordinal, shared) = shared();
        let context = shared.context().clone();
        let expected = pattern(3);
        let target = device_with(&shared, &std::vec![0; LEN]);
        let stream = Stream::new(&context).unwrap();
        let copies = |state: sim::DeviceState| state.async_copy_calls + state.batch_copy_calls;
        let before = copies(sim::device_state(ordinal));
        sim::hold(ordinal);
        let transfer = start(
            &shared,
            Some(stream.as_stream()),
            upload(&target, host(expected.clone())),
        );
        let queued = copies(sim::device_state(ordinal)) - before;
        let chunks = (LEN / (64 << 10)) as u64;
        assert!(
            queued >= chunks,
            "{queued} copies queued by the call, for {chunks} chunks"
        );
        let back = PinnedBuffer::new(&context, LEN).unwrap();
        // SAFETY: pinned memory read only after the stream is synchronized.
        unsafe {
            stream
                .as_stream()
                .copy_device_to_host(back.raw_ptr(), &*target, 0, LEN)
        }
        .unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert!(
            !stream.as_stream().query().unwrap(),
            "the stream ran ahead of the upload"
        );
        sim::release(ordinal);
        stream.as_stream().synchronize().unwrap();
        // SAFETY: the copy has finished; nothing else writes the buffer.
        let copied = unsafe { core::slice::from_raw_parts(back.raw_ptr(), LEN) };
        assert!(
            copied == expected.as_slice(),
            "the stream's copy read the bytes before the upload"
        );
        assert_eq!(transfer.finish(), Ok(()));
        assert_eq!(sim::take_violations(ordinal), Vec::<String>::new());
    }

    #[test]
    fn closing_lets_started_transfers_finish_and_refuses_later_ones() {
        let (ordinal, shared) = shared();
        let expected = pattern(5);
        let device = device_with(&shared, &expected);
        let range = host(std::vec![0; LEN]);
        sim::hold(ordinal);
        let started = start(&shared, None, download(&device, range));
        let closing = {
            let shared = Arc::clone(&shared);
            std::thread::spawn(move || shared.close())
        };
        std::thread::sleep(Duration::from_millis(20));
        assert!(
            !closing.is_finished(),
            "closed before the transfer's copies ran"
        );
        sim::release(ordinal);
        closing.join().unwrap();
        assert_eq!(started.finish(), Ok(()));
        assert!(read(range) == expected);
        let refused = shared.transfer(Begin::Queued, &[], None, download(&device, range));
        assert_eq!(refused.err(), Some(Failure::Closed));
        assert_eq!(
            shared.with_stager(|_, _| Ok(()), |_, _| Ok(())),
            Err(Failure::Closed)
        );
    }

    /// A download of `device` into `range` started on `shared`.
    fn download_now(
        shared: &Arc<SharedStager>,
        device: &Arc<DeviceBuffer>,
        range: HostRange,
    ) -> PendingTransfer {
        shared
            .with_stager(
                |_, _| Ok(()),
                |stager, _| {
                    // SAFETY: the range is the calling test's own.
                    let mut memory = unsafe { memory(range) };
                    // SAFETY: leaked host memory; the view keeps the
                    // device buffer allocated.
                    unsafe { stager.start_unchecked(to_host(&mut memory, &view(device))) }
                },
            )
            .unwrap()
    }

    #[test]
    fn a_transfer_ended_elsewhere_keeps_its_value_until_its_copies_ran() {
        let (ordinal, shared) = shared();
        let expected = pattern(13);
        let device = device_with(&shared, &expected);
        let range = host(std::vec![0; LEN]);
        sim::hold(ordinal);
        let transfer = start(&shared, None, download(&device, range));
        let kept = Arc::new(());
        assert!(transfer.end_elsewhere(Box::new(Arc::clone(&kept))).is_ok());
        // A second value does not replace the one kept.
        let second = Arc::new(());
        assert!(
            transfer
                .end_elsewhere(Box::new(Arc::clone(&second)))
                .is_err()
        );
        assert!(transfer.hand_over(Box::new(second)).is_err());
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(
            Arc::strong_count(&kept),
            2,
            "let go of before the copies ran"
        );
        sim::release(ordinal);
        let deadline = Instant::now() + Duration::from_secs(20);
        while Arc::strong_count(&kept) > 1 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(Arc::strong_count(&kept), 1, "never let go of");
        assert!(transfer.has_ended());
        assert_eq!(transfer.finish(), Ok(()));
        assert!(read(range) == expected);
        let Err(back) = transfer.end_elsewhere(Box::new(())) else {
            panic!("an ended transfer took a value to keep");
        };
        drop(back);
    }

    /// A value whose drop is seen through the count of `Arc`s.
    fn counted() -> (Arc<()>, Box<dyn Send>) {
        let kept = Arc::new(());
        let value = Box::new(Arc::clone(&kept));
        (kept, value)
    }

    #[test]
    fn a_value_released_when_ended_goes_only_once_the_transfer_ended() {
        let (ordinal, shared) = shared();
        let expected = pattern(21);
        let device = device_with(&shared, &expected);
        let range = host(std::vec![0; LEN]);
        sim::hold(ordinal);
        let transfer = start(&shared, None, download(&device, range));
        let (kept, value) = counted();
        assert!(transfer.release_when_ended(value).is_none(), "kept");
        assert_eq!(Arc::strong_count(&kept), 2, "let go of before it ended");
        sim::release(ordinal);
        assert_eq!(transfer.finish(), Ok(()));
        assert_eq!(Arc::strong_count(&kept), 1, "kept after it ended");
        assert!(read(range) == expected);
        // Once ended, a value comes straight back.
        let (again, value) = counted();
        drop(
            transfer
                .release_when_ended(value)
                .expect("ended: given back"),
        );
        assert_eq!(Arc::strong_count(&again), 1);
    }

    #[test]
    fn a_transfer_dropped_unwaited_is_ended_here_or_elsewhere_and_its_value_goes_after_its_copies()
    {
        // Ended: the value comes back; nothing else is asked.
        let (_, stager) = shared();
        let expected = pattern(31);
        let device = device_with(&stager, &expected);
        let range = host(std::vec![0; LEN]);
        let transfer = start(&stager, None, download(&device, range));
        assert_eq!(transfer.finish(), Ok(()));
        let (kept, value) = counted();
        let back = transfer.drop_unwaited(value, || panic!("asked"), || panic!("finished"));
        drop(back.expect("ended: given back"));
        assert_eq!(Arc::strong_count(&kept), 1);

        // Off an event loop: finished here, then the value comes back.
        let (_, stager) = shared();
        let device = device_with(&stager, &expected);
        let range = host(std::vec![0; LEN]);
        let transfer = start(&stager, None, download(&device, range));
        let (kept, value) = counted();
        let back =
            transfer.drop_unwaited(value, || false, || assert_eq!(transfer.finish(), Ok(())));
        assert!(transfer.has_ended() && read(range) == expected);
        drop(back.expect("ended here: given back"));
        assert_eq!(Arc::strong_count(&kept), 1);

        // On an event loop: the finish thread ends it and lets go of the
        // value once the copies ran; nothing waits here.
        let (ordinal, stager) = shared();
        let device = device_with(&stager, &expected);
        let range = host(std::vec![0; LEN]);
        sim::hold(ordinal);
        let transfer = start(&stager, None, download(&device, range));
        let (kept, value) = counted();
        let back = transfer.drop_unwaited(value, || true, || panic!("waited on the loop"));
        assert!(back.is_none(), "kept for the finish thread");
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(
            Arc::strong_count(&kept),
            2,
            "let go of before the copies ran"
        );
        sim::release(ordinal);
        let deadline = Instant::now() + Duration::from_secs(20);
        while Arc::strong_count(&kept) > 1 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(Arc::strong_count(&kept), 1, "never let go of");
        assert!(transfer.has_ended() && read(range) == expected);
    }

    /// A value that records, when dropped, whether `range` then held
    /// `expected`: what a host array handed to the state would see.
    struct Witness {
        range: HostRange,
        expected: Vec<u8>,
        seen: Arc<Mutex<Option<bool>>>,
    }

    impl Drop for Witness {
        fn drop(&mut self) {
            *lock(&self.seen) = Some(read(self.range) == self.expected);
        }
    }

    /// A download of `expected` started on a held device, a [`Witness`]
    /// of its destination handed to the state, and the transfer dropped on
    /// another thread: what the witness saw, once `before_release` ran
    /// with the device still held and the drop has returned.
    fn dropped_while_held(seed: usize, before_release: impl FnOnce(usize)) -> Option<bool> {
        let (ordinal, shared) = shared();
        let expected = pattern(seed);
        let device = device_with(&shared, &expected);
        let range = host(std::vec![0; LEN]);
        sim::hold(ordinal);
        let transfer = start(&shared, None, download(&device, range));
        let seen = Arc::new(Mutex::new(None));
        let witness = Witness {
            range,
            expected,
            seen: Arc::clone(&seen),
        };
        assert!(transfer.release_when_ended(Box::new(witness)).is_none());
        let dropping = std::thread::spawn(move || drop(transfer));
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(*lock(&seen), None, "let go of while the copy was held");
        before_release(ordinal);
        sim::release(ordinal);
        dropping.join().unwrap();
        *lock(&seen)
    }

    #[test]
    fn a_transfer_dropped_before_it_ended_lets_go_of_its_values_after_its_copies() {
        // The drop waits for the copier: the value goes with every byte in
        // place, not while the copy is held.
        assert_eq!(dropped_while_held(22, |_| {}), Some(true));
    }

    #[test]
    fn a_transfer_dropped_before_it_ended_lets_go_of_its_values_after_an_error_too() {
        // A sticky error: the copier gives up on the transfer and touches
        // its host memory no more, so the value goes (its bytes never
        // came); only the device memory a queued copy may use is kept.
        let before = crate::cuda::staging::leaked().host_values;
        assert_eq!(
            dropped_while_held(23, |ordinal| sim::fail_context(ordinal, 700)),
            Some(false)
        );
        assert_eq!(crate::cuda::staging::leaked().host_values, before);
    }

    #[test]
    fn an_await_with_no_finish_thread_is_refused_and_the_transfer_still_finishes() {
        let (_, shared) = shared();
        // The finish thread is gone: handing a transfer to it fails.
        *lock(&shared.finisher) = Some(channel().0);
        let expected = pattern(9);
        let device = device_with(&shared, &expected);
        let range = host(std::vec![0; LEN]);
        let transfer = start(&shared, None, download(&device, range));
        let wakeup = Wakeup::new().unwrap();
        assert_eq!(
            transfer.notify_when_finished(&wakeup, 1),
            Err(Failure::NoThread)
        );
        assert_eq!(transfer.hand_over(Box::new(())).map_err(drop), Err(()));
        assert_eq!(transfer.end_elsewhere(Box::new(())).map_err(drop), Err(()));
        assert_eq!(transfer.finish(), Ok(()));
        assert!(read(range) == expected);
        assert_eq!(shared.with_stager(|_, _| Ok(()), |_, _| Ok(1)), Ok(1));
    }

    #[test]
    fn the_last_handle_closes_the_stager_under_its_lock() {
        // The exit handler closes a stager by taking it under its lock: it
        // must find the lock held while the last handle's drop waits for
        // the stager's work, not an empty slot.
        use std::sync::TryLockError;
        let (ordinal, shared) = shared();
        let device = device_with(&shared, &pattern(10));
        let range = host(std::vec![0; LEN]);
        sim::hold(ordinal);
        let pending = download_now(&shared, &device, range);
        let slot = Arc::clone(shared.slot());
        let dropping = std::thread::spawn(move || drop(shared));
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut locked_since: Option<Instant> = None;
        let seen = loop {
            assert!(Instant::now() < deadline, "the stager was never closed");
            match slot.try_lock() {
                Ok(stager) if stager.is_some() => locked_since = None,
                Ok(_) => break "empty while the stager's drop still ran",
                Err(TryLockError::WouldBlock) => {
                    let since = *locked_since.get_or_insert_with(Instant::now);
                    if since.elapsed() > Duration::from_millis(50) {
                        break "locked";
                    }
                }
                Err(TryLockError::Poisoned(_)) => panic!("poisoned"),
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        sim::release(ordinal);
        dropping.join().unwrap();
        assert_eq!(seen, "locked");
        assert!(lock(&slot).is_none());
        assert_eq!(pending.is_finished(), Ok(true));
    }

    #[test]
    fn transfers_the_finish_thread_waited_for_end_while_others_keep_the_stager_locked() {
        // Two threads pass the stager's lock between them with hardly a
        // gap: the finish thread ends the transfer without taking it.
        let (ordinal, shared) = shared();
        let expected = pattern(11);
        let device = device_with(&shared, &expected);
        let range = host(std::vec![0; LEN]);
        sim::hold(ordinal);
        let transfer = start(&shared, None, download(&device, range));
        let wakeup = Wakeup::new().unwrap();
        assert!(!transfer.notify_when_finished(&wakeup, 1).unwrap());
        let stop = Arc::new(AtomicBool::new(false));
        let holders: Vec<_> = (0..2)
            .map(|_| {
                let shared = Arc::clone(&shared);
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let held = shared.with_stager(
                            |_, _| Ok(()),
                            |_, _| {
                                std::thread::sleep(Duration::from_millis(2));
                                Ok(())
                            },
                        );
                        assert_eq!(held, Ok(()));
                    }
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(10));
        sim::release(ordinal);
        let deadline = Instant::now() + Duration::from_secs(2);
        while !transfer.has_ended() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        let ended = transfer.has_ended();
        stop.store(true, Ordering::Relaxed);
        for holder in holders {
            holder.join().unwrap();
        }
        assert!(ended, "not ended while the stager's lock was passed around");
        assert_eq!(transfer.finish(), Ok(()));
        assert!(read(range) == expected);
    }

    /// The CPU time the calling thread has used.
    #[cfg(target_os = "linux")]
    fn thread_cpu() -> Duration {
        let mut now = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: writes the clock into `now`, which lives across the call.
        let read = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
        assert_eq!(read, 0);
        Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn waiting_for_a_download_whose_copies_wait_does_not_hold_a_core() {
        // A small download is polled for from its first chunk on; while
        // its copies wait (here the device is held, as a long kernel
        // queued before would), the waiter polls for a bounded time, then
        // sleeps.
        let (ordinal, shared) = shared();
        let expected = pattern(12);
        let device = device_with(&shared, &expected);
        let range = host(std::vec![0; LEN]);
        sim::hold(ordinal);
        let transfer = SharedTransfer::started(&shared, download_now(&shared, &device, range));
        let waiting = Arc::clone(&transfer);
        let waiter = std::thread::spawn(move || {
            let before = thread_cpu();
            let outcome = waiting.finish();
            (outcome, thread_cpu() - before)
        });
        let held = Duration::from_millis(300);
        std::thread::sleep(held);
        sim::release(ordinal);
        let (outcome, cpu) = waiter.join().unwrap();
        assert_eq!(outcome, Ok(()));
        assert!(read(range) == expected);
        assert!(
            cpu < held / 6,
            "the waiter used {cpu:?} of CPU in the {held:?} the device was held"
        );
    }

    #[test]
    fn an_ended_transfer_wakes_its_loop_through_the_pipe_once_per_batch() {
        let (ordinal, shared) = shared();
        let device = device_with(&shared, &pattern(6));
        let wakeup = Wakeup::new().unwrap();
        assert_eq!(wakeup.take().unwrap(), Vec::<u64>::new());
        sim::hold(ordinal);
        let transfers: Vec<_> = (0..2)
            .map(|_| start(&shared, None, download(&device, host(std::vec![0; LEN]))))
            .collect();
        assert!(!transfers[0].notify_when_finished(&wakeup, 7).unwrap());
        assert!(!transfers[1].notify_when_finished(&wakeup, 8).unwrap());
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(
            wakeup.take().unwrap(),
            Vec::<u64>::new(),
            "woken while held"
        );
        sim::release(ordinal);
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut tokens = Vec::new();
        while tokens.len() < 2 && Instant::now() < deadline {
            tokens.extend(wakeup.take().unwrap());
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(tokens, [7, 8]);
        assert!(
            transfers[0].notify_when_finished(&wakeup, 9).unwrap(),
            "ended: at once"
        );
        // One byte at most was unread, and `take` read it: none is left.
        // SAFETY: fcntl on the wakeup's own open descriptor.
        unsafe {
            let flags = libc::fcntl(wakeup.fileno(), libc::F_GETFL);
            libc::fcntl(wakeup.fileno(), libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
        let mut byte = [0u8];
        let read = (&wakeup.signal.reader).read(&mut byte);
        assert!(read.is_err(), "a byte was left in the pipe: {read:?}");
    }
}
