//! A timeline of the stagers' transfers, for the benchmark's rows on where
//! a transfer's time goes: off until [`start`], then each step of the
//! calling thread and the copier is stamped with the time since `start`,
//! until [`stop`] returns them. Off, a step costs one relaxed load.
//!
//! Not part of the stable interface (hidden from the docs): its steps
//! follow the engine's.

use core::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Instant;
use std::vec::Vec;

use crate::cuda::context::Context;
use crate::cuda::event::Event;
use crate::cuda::stream::StreamRef;

/// One step of a transfer, and whose it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// The caller begins queuing a transfer of `chunk` chunks.
    QueueBegin,
    /// The caller has queued chunk `chunk`'s driver side.
    Queued,
    /// The copier has seen chunk `chunk`'s copy complete (to the host), or
    /// the buffer's previous copy (to the device): its host side begins.
    Ready,
    /// The copier has made chunk `chunk`'s host side and advanced its flag.
    HostDone,
    /// The caller has seen the transfer complete.
    Finished,
    /// On the device: chunk `chunk`'s wait for its buffer was met (its
    /// stream reached the point after the wait).
    DeviceWaitMet,
    /// On the device: chunk `chunk`'s driver copy completed.
    DeviceCopied,
}

/// A step, when (nanoseconds since [`start`]), and its chunk's index in
/// its transfer (the chunk count for [`Step::QueueBegin`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mark {
    pub nanos: u64,
    pub step: Step,
    pub chunk: u32,
}

static ON: AtomicBool = AtomicBool::new(false);
static BASE: OnceLock<Mutex<Option<Instant>>> = OnceLock::new();
static MARKS: Mutex<Vec<Mark>> = Mutex::new(Vec::new());

/// Device stamps not yet read: timing events, each after the latest
/// `(base host nanos, base event)` when recorded.
#[allow(clippy::type_complexity)]
static DEVICE: Mutex<Vec<(Step, u32, usize, Event)>> = Mutex::new(Vec::new());
static BASES: Mutex<Vec<(u64, Event)>> = Mutex::new(Vec::new());

fn base() -> &'static Mutex<Option<Instant>> {
    BASE.get_or_init(|| Mutex::new(None))
}

/// Starts stamping, from now, with no marks kept from before.
pub fn start() {
    MARKS.lock().unwrap_or_else(PoisonError::into_inner).clear();
    *base().lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
    ON.store(true, Ordering::SeqCst);
}

/// Stops stamping; the marks since [`start`], the device's (read from
/// their events, once those completed) after the host's.
pub fn stop() -> Vec<Mark> {
    ON.store(false, Ordering::SeqCst);
    let mut marks = core::mem::take(&mut *MARKS.lock().unwrap_or_else(PoisonError::into_inner));
    let device = core::mem::take(&mut *DEVICE.lock().unwrap_or_else(PoisonError::into_inner));
    let bases = core::mem::take(&mut *BASES.lock().unwrap_or_else(PoisonError::into_inner));
    for (step, chunk, base, event) in device {
        let (nanos, start) = &bases[base];
        let at = event
            .synchronize()
            .ok()
            .and_then(|()| event.elapsed_ms_since(start).ok());
        if let Some(ms) = at {
            let nanos = nanos.saturating_add((f64::from(ms) * 1e6) as u64);
            marks.push(Mark { nanos, step, chunk });
        }
    }
    marks
}

/// While on: records a timing event on `stream` as the start of a
/// transfer's device stamps, at the host's time now.
pub(super) fn device_begin(context: &Context, stream: StreamRef<'_>) {
    if !ON.load(Ordering::Relaxed) {
        return;
    }
    let Some(base) = *base().lock().unwrap_or_else(PoisonError::into_inner) else {
        return;
    };
    if let Ok(event) = Event::timing(context)
        && event.record(stream).is_ok()
    {
        let nanos = u64::try_from(base.elapsed().as_nanos()).unwrap_or(u64::MAX);
        BASES
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((nanos, event));
    }
}

/// While on: records a timing event for `step` of chunk `chunk` on
/// `stream`, read at [`stop`].
pub(super) fn device(step: Step, chunk: usize, context: &Context, stream: StreamRef<'_>) {
    if !ON.load(Ordering::Relaxed) {
        return;
    }
    let bases = BASES.lock().unwrap_or_else(PoisonError::into_inner).len();
    let Some(base) = bases.checked_sub(1) else {
        return;
    };
    if let Ok(event) = Event::timing(context)
        && event.record(stream).is_ok()
    {
        let chunk = u32::try_from(chunk).unwrap_or(u32::MAX);
        DEVICE
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((step, chunk, base, event));
    }
}

/// Stamps `step` of chunk `chunk`, while on.
pub(super) fn mark(step: Step, chunk: usize) {
    if !ON.load(Ordering::Relaxed) {
        return;
    }
    let Some(base) = *base().lock().unwrap_or_else(PoisonError::into_inner) else {
        return;
    };
    let nanos = u64::try_from(base.elapsed().as_nanos()).unwrap_or(u64::MAX);
    let chunk = u32::try_from(chunk).unwrap_or(u32::MAX);
    MARKS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(Mark { nanos, step, chunk });
}
