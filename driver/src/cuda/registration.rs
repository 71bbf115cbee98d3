//! hostcopy's own host memory ([`HostBuffer`](crate::HostBuffer)) registered
//! with the driver range by range, in the background or at once, and the
//! process-wide table that staged transfers consult: a chunk whose host
//! bytes are registered is copied by the driver straight between them and
//! the device (no staging buffer, no host copy); the rest is staged.
//!
//! Registration goes from the buffer's first byte on, one range at a time
//! (`cuMemHostRegister`, portable to every context), so what is registered
//! is always a prefix: a transfer planned while it goes on sees a prefix
//! that only grows. A range the driver refuses (a locked-memory limit, a
//! size limit, a platform that registers nothing, any error) ends the
//! registration there: the rest stays staged, never an error, and the
//! refusal is readable ([`Registration::refused`]).
//!
//! The buffer's drop stops the registering thread, takes the buffer out of
//! the table, and unregisters its ranges. A transfer borrows the memory it
//! copies, so no copy of it is queued then, unless a transfer's copies
//! could not be waited for after an error: such a transfer marks the
//! buffer kept, and its memory stays mapped and registered for the rest of
//! the process (counted in [`leaked`](super::staging::leaked)).

use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex, PoisonError, RwLock, RwLockReadGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::context::Context;
use super::error::DriverError;
use super::ffi;

/// When [`HostBuffer::register`](crate::HostBuffer::register) registers a
/// buffer's memory with the driver.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Register {
    /// Never: every transfer of the buffer is staged.
    #[default]
    Never,
    /// On a thread of its own, range by range ([`REGISTER_RANGE`]), from
    /// the first byte on: the call returns at once, transfers are staged
    /// until their bytes are registered and direct from then on.
    Background,
    /// In the call, in one piece (up to [`MAX_REGISTRATION`]): it returns
    /// once it is registered or the driver refused it.
    Now,
}

/// How far a buffer's registration has got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Registration {
    /// Bytes registered, from the buffer's first byte on.
    pub registered: usize,
    /// The buffer's bytes.
    pub len: usize,
    /// Why the driver refused the range after `registered`: the rest stays
    /// staged.
    pub refused: Option<DriverError>,
    /// Whether registering has ended: every byte registered, a range
    /// refused, or never asked for.
    pub finished: bool,
}

impl Registration {
    /// Not registered, nor to be.
    pub(crate) fn none(len: usize) -> Registration {
        Registration {
            registered: 0,
            len,
            refused: None,
            finished: true,
        }
    }

    /// Whether every byte is registered.
    pub fn is_complete(&self) -> bool {
        self.registered == self.len
    }
}

/// The range a registration in the background takes at a time, unless
/// told otherwise: a few milliseconds of `cuMemHostRegister`, so that the
/// first bytes are direct soon, a driver call waiting behind a range
/// waits little (0.8 to 1.4 ms at the median, 4.6 to 11 ms at most, on
/// H100 hosts), and so does a drop. 64 GiB whose pages are present took
/// 1.5 to 2.2 s in such ranges on four hosts, 0.95x to 1.23x one
/// registration of the whole buffer alone; 256 MiB ranges took 0.86x to
/// 1.09x, 1 GiB ranges 0.80x to 1.17x while holding other calls for 21 to
/// 140 ms; registering threads beside each other are no faster (the
/// driver registers one range at a time). `BENCHMARKS.md` has the runs.
///
/// A driver copy may not span two registrations (the driver refuses it:
/// `CUDA_ERROR_INVALID_VALUE`, measured on the H100 host). hostcopy's own
/// copies never do (one copy a range); another library's copies of memory
/// registered in ranges (torch's `.to("cuda")` of a tensor over it, which
/// torch takes for pinned) may: memory such a library copies itself is
/// registered [`Register::Now`], in one piece.
pub const REGISTER_RANGE: usize = 64 << 20;

/// The most a registration takes at once: [`Register::Now`] registers a
/// buffer in one piece up to this, in pieces of it above (one
/// registration of more than 512 GiB fails on current drivers).
pub const MAX_REGISTRATION: usize = 256 << 30;

/// The range [`HostBuffer::register`](crate::HostBuffer::register) takes:
/// [`REGISTER_RANGE`] in the background, the whole buffer (up to
/// [`MAX_REGISTRATION`]) now.
pub fn default_range(when: Register) -> usize {
    match when {
        Register::Background => REGISTER_RANGE,
        Register::Never | Register::Now => MAX_REGISTRATION,
    }
}

/// One buffer's registration, shared by its registering thread, the table
/// and the transfers that copy straight from or into it.
#[derive(Debug)]
pub(crate) struct Region {
    start: usize,
    len: usize,
    /// Bytes each registration takes; copies never span two.
    range: usize,
    context: Context,
    /// Bytes registered from `start` on: stored (release) once the driver
    /// has registered them.
    registered: AtomicUsize,
    /// Asks the registering thread to stop after its range.
    stop: AtomicBool,
    /// Set (under `refused`'s lock) once registering has ended; `ended`
    /// is notified then.
    finished: AtomicBool,
    refused: Mutex<Option<DriverError>>,
    ended: Condvar,
    /// A transfer's copies of this memory could not be waited for: it
    /// stays mapped and registered for good.
    kept: AtomicBool,
}

impl Region {
    /// A copy the driver may still run reads or writes this memory: it is
    /// never unregistered nor unmapped, and no transfer copies it directly
    /// again (pages of it may have moved away from the registration).
    pub(crate) fn keep(&self) {
        self.kept.store(true, Ordering::Release);
    }

    /// Registers the next range; `false` once none is left, the driver
    /// refused one, or a stop was asked for.
    fn register_next(&self) -> bool {
        let at = self.registered.load(Ordering::Relaxed);
        if at == self.len || self.stop.load(Ordering::Acquire) {
            return false;
        }
        let len = self.range.min(self.len - at);
        let registered = self.context.bind().and_then(|()| {
            // SAFETY: `[start + at, start + at + len)` lies in the buffer's
            // mapping, which outlives the registration: the buffer's drop
            // unmaps it only once the driver unregistered every range
            // (`Registrar::end`), and keeps it mapped otherwise. Ranges
            // never overlap: each starts where the last ended.
            unsafe {
                ffi::cuMemHostRegister_v2(
                    core::ptr::with_exposed_provenance_mut(self.start + at),
                    len,
                    ffi::CU_MEMHOSTREGISTER_PORTABLE,
                )
            }
            .ok()
        });
        match registered {
            Ok(()) => {
                self.registered.store(at + len, Ordering::Release);
                true
            }
            Err(error) => {
                *self.refused.lock().unwrap_or_else(PoisonError::into_inner) = Some(error);
                false
            }
        }
    }

    /// Registers range after range; in the background
    /// (`step_aside`), stepping aside between ranges for the process's
    /// other driver calls.
    fn register_all(&self, step_aside: bool) {
        loop {
            let started = Instant::now();
            if !self.register_next() {
                break;
            }
            if step_aside && self.registered.load(Ordering::Relaxed) < self.len {
                self.step_aside(started.elapsed());
            }
        }
        let _refused = self.refused.lock().unwrap_or_else(PoisonError::into_inner);
        self.finished.store(true, Ordering::Release);
        self.ended.notify_all();
    }

    /// Between two ranges of a registration in the background. The driver
    /// holds its other calls while it registers, and a thread that
    /// registers range after range takes it again before a waiting call
    /// gets in: on the H100 host a staged upload started beside a 64 GiB
    /// buffer registering in 64 or 256 MiB ranges back to back returned
    /// only once the last range was registered, 9 to 12 s later. So the
    /// registering thread sleeps [`GAP`] after every range (a call
    /// waiting on the driver gets in then), and while a transfer of the
    /// process is under way ([`Transferring`]) it lets the transfer have
    /// the driver: it waits until none is, for up to [`ASIDE`] times the
    /// time its last range took (so that a transfer never waited for
    /// slows registration down, never stops it).
    fn step_aside(&self, took: Duration) {
        let until = Instant::now() + took.saturating_mul(ASIDE);
        loop {
            std::thread::sleep(GAP);
            if !aside(
                TRANSFERS.load(Ordering::Acquire),
                self.stop.load(Ordering::Acquire),
                Instant::now() >= until,
            ) {
                return;
            }
        }
    }

    /// Waits until registering has ended.
    fn wait(&self) {
        let mut refused = self.refused.lock().unwrap_or_else(PoisonError::into_inner);
        while !self.finished.load(Ordering::Acquire) {
            refused = self
                .ended
                .wait(refused)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    fn status(&self) -> Registration {
        // `finished` first: once it is seen, `registered` and `refused`
        // are final.
        let finished = self.finished.load(Ordering::Acquire);
        Registration {
            registered: self.registered.load(Ordering::Acquire),
            len: self.len,
            refused: *self.refused.lock().unwrap_or_else(PoisonError::into_inner),
            finished,
        }
    }
}

/// How long a registering thread sleeps after every range, so that a
/// driver call of another thread waiting behind the range gets in.
pub(crate) const GAP: Duration = Duration::from_micros(100);

/// A registering thread steps aside for transfers under way for at most
/// this many times the time its last range took.
const ASIDE: u32 = 4;

/// Whether a registering thread, having slept its gap after a range, goes
/// on waiting: while `transfers` are under way, unless it was asked to
/// stop or has waited its longest (`waited_enough`).
fn aside(transfers: usize, stopping: bool, waited_enough: bool) -> bool {
    transfers > 0 && !stopping && !waited_enough
}

/// Transfers of the process under way: started, and not yet seen to have
/// run. Registering threads step aside for them between ranges.
static TRANSFERS: AtomicUsize = AtomicUsize::new(0);

/// A transfer under way, counted in the transfers that registering
/// threads step aside for, from the start of its start call until
/// [`end`](Self::end) or its drop.
#[derive(Debug)]
pub(crate) struct Transferring {
    counted: AtomicBool,
}

impl Transferring {
    /// Counts a transfer under way.
    pub(crate) fn begin() -> Transferring {
        TRANSFERS.fetch_add(1, Ordering::AcqRel);
        Transferring {
            counted: AtomicBool::new(true),
        }
    }

    /// No longer counted; idempotent.
    pub(crate) fn end(&self) {
        if self.counted.swap(false, Ordering::AcqRel) {
            TRANSFERS.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl Drop for Transferring {
    fn drop(&mut self) {
        self.end();
    }
}

/// The process's transfers under way, as registering threads see them.
pub fn transfers_under_way() -> usize {
    TRANSFERS.load(Ordering::Acquire)
}

/// Every registered (or registering) buffer by its first byte's address.
static TABLE: RwLock<BTreeMap<usize, Arc<Region>>> = RwLock::new(BTreeMap::new());
/// Whether `TABLE` has any entry: a transfer asks nothing otherwise.
static ANY: AtomicUsize = AtomicUsize::new(0);

/// The registered bytes from `addr` on, at most `len`, within one
/// registered range, and the buffer they belong to; `None` where `addr` is
/// not registered memory of hostcopy's. A copy of them reads (or writes)
/// page-locked memory of one registration, as the driver needs for a
/// copy to run at the link.
pub(crate) fn registered_at(
    table: &BTreeMap<usize, Arc<Region>>,
    addr: usize,
    len: usize,
) -> Option<(&Arc<Region>, usize)> {
    let (&start, region) = table.range(..=addr).next_back()?;
    if region.kept.load(Ordering::Acquire) {
        // Its pages may have moved away from the registration
        // (`InUse::keep`): copied staged from now on.
        return None;
    }
    let offset = addr - start;
    let registered = region.registered.load(Ordering::Acquire);
    if offset >= registered {
        return None;
    }
    let range_end = (offset / region.range + 1) * region.range;
    Some((region, len.min(registered.min(range_end) - offset)))
}

/// The table, read-locked, or `None` without a lock when no buffer is
/// registered.
pub(crate) fn table() -> Option<RwLockReadGuard<'static, BTreeMap<usize, Arc<Region>>>> {
    if ANY.load(Ordering::Acquire) == 0 {
        return None;
    }
    Some(TABLE.read().unwrap_or_else(PoisonError::into_inner))
}

/// A buffer's registration: its entry in the table and its registering
/// thread, if any.
#[derive(Debug)]
pub(crate) struct Registrar {
    region: Arc<Region>,
    thread: Option<JoinHandle<()>>,
}

impl Registrar {
    /// Registers `len` bytes at `start` in `context`, in ranges of `range`
    /// bytes (at least one page), as `when` says; `None` for
    /// [`Register::Never`] and for no bytes.
    ///
    /// # Safety
    ///
    /// `[start, start + len)` is a mapping the caller owns, not registered,
    /// and unmapped only after [`end`](Self::end) returned `true` (never
    /// after `false`).
    pub(crate) unsafe fn start(
        context: &Context,
        start: usize,
        len: usize,
        when: Register,
        range: usize,
    ) -> Option<Registrar> {
        if when == Register::Never || len == 0 {
            return None;
        }
        let page = crate::prefault::page_size();
        let region = Arc::new(Region {
            start,
            len,
            // At most the buffer (so no overflow), whole pages.
            range: range.clamp(1, len).next_multiple_of(page),
            context: context.clone(),
            registered: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            finished: AtomicBool::new(false),
            refused: Mutex::new(None),
            ended: Condvar::new(),
            kept: AtomicBool::new(false),
        });
        {
            let mut table = TABLE.write().unwrap_or_else(PoisonError::into_inner);
            let earlier = table.insert(start, Arc::clone(&region));
            debug_assert!(earlier.is_none(), "a mapping registered twice");
            ANY.store(table.len(), Ordering::Release);
        }
        let thread = match when {
            Register::Now => {
                region.register_all(false);
                None
            }
            _ => {
                let shared = Arc::clone(&region);
                let spawned = std::thread::Builder::new()
                    .name("hostcopy-register".into())
                    .spawn(move || shared.register_all(true));
                match spawned {
                    Ok(thread) => Some(thread),
                    // No thread to be had: registered in the call instead.
                    Err(_) => {
                        region.register_all(false);
                        None
                    }
                }
            }
        };
        Some(Registrar { region, thread })
    }

    pub(crate) fn status(&self) -> Registration {
        self.region.status()
    }

    /// Waits until registering has ended (every range, or a refusal).
    pub(crate) fn wait(&self) -> Registration {
        self.region.wait();
        self.status()
    }

    /// Stops registering (after the range under way), takes the buffer out
    /// of the table and unregisters it: `true` if its memory may be
    /// unmapped now; `false` if a transfer's copies of it could not be
    /// waited for, the driver did not unregister every range, or this
    /// process gave up on its copies: it stays mapped (and registered, its
    /// context kept alive with it) for good.
    pub(crate) fn end(mut self) -> bool {
        if crate::process::Process::global().abandoned() {
            // Its thread is not in this process (forked) or may be stuck
            // in the driver (at exit): nothing is joined or asked.
            super::retire::keep(self, super::retire::Kept::Uncounted);
            return false;
        }
        self.region.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        {
            let mut table = TABLE.write().unwrap_or_else(PoisonError::into_inner);
            table.remove(&self.region.start);
            ANY.store(table.len(), Ordering::Release);
        }
        if self.region.kept.load(Ordering::Acquire) || !self.unregister() {
            // Its context too: the context's end would unregister it.
            super::retire::keep(self, super::retire::Kept::Uncounted);
            return false;
        }
        true
    }

    /// Unregisters every registered range: whether the driver did.
    fn unregister(&self) -> bool {
        let region = &self.region;
        let registered = region.registered.load(Ordering::Acquire);
        if registered == 0 {
            return true;
        }
        if region.context.bind().is_err() {
            return false;
        }
        let mut all = true;
        for at in (0..registered).step_by(region.range) {
            // SAFETY: a range `register_next` registered; no transfer
            // borrows the buffer any more and none kept it, so no queued
            // copy reads or writes it.
            let unregistered = unsafe {
                ffi::cuMemHostUnregister(core::ptr::with_exposed_provenance_mut(region.start + at))
            };
            all &= unregistered.ok().is_ok();
        }
        all
    }
}

#[cfg(test)]
mod tests {
    use super::aside;

    #[test]
    fn a_registering_thread_waits_while_transfers_are_under_way_until_stopped_or_waited_enough() {
        assert!(aside(1, false, false));
        assert!(aside(3, false, false));
        assert!(!aside(0, false, false), "nothing under way: on at once");
        assert!(!aside(1, true, false), "asked to stop: no wait");
        assert!(!aside(1, false, true), "waited its longest: on");
    }
}
