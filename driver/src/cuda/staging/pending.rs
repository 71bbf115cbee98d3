//! Transfers that borrow nothing: started by
//! [`Stager::start_unchecked`](super::Stager::start_unchecked), whose caller keeps the memories valid, held
//! as a [`PendingTransfer`] for as long as the caller likes (across
//! threads, inside another language's object), and finished on any
//! thread, without the stager ([`PendingTransfer::finish`]), or by
//! [`Stager::finish_pending`](super::Stager::finish_pending). What a binding (the Python package) builds
//! its non-blocking transfers on; Rust code has [`Stager::scope`](super::Stager::scope), which
//! proves the same with borrows.

use core::sync::atomic::{AtomicU64, Ordering};

use super::in_flight::InFlight;
use crate::cuda::capture::{self, capture_graph};
use crate::cuda::error::Error;
use crate::cuda::stream::StreamRef;

/// A staged transfer in flight, not tied to a borrow: see
/// [`Stager::start_unchecked`](super::Stager::start_unchecked). Finish it
/// with [`finish`](Self::finish), on any thread, once or many times, or
/// with [`Stager::finish_pending`](super::Stager::finish_pending) on the
/// stager that started it.
///
/// Dropped unfinished, it waits for its copies (as a Python `Transfer`
/// does), then lets go of the device memory: the rule of every transfer
/// in flight, written once. The host memory is touched only by the
/// stager's copier thread, which finishes its part of every transfer,
/// after an error too, so nothing touches it once the drop returns. After
/// an error it waits for the copies the transfer queued before it lets go
/// of the device memory; if that wait fails too (a context error), they
/// may still run: the drop keeps the device memory for good, counted in
/// [`leaked`](super::leaked). Only a finish also drains the stager's
/// streams after an error and reports it.
#[must_use = "a pending transfer is finished by `Stager::finish_pending`"]
#[derive(Debug)]
pub struct PendingTransfer {
    /// `None`: finished when started (empty, or on the driver's path).
    in_flight: Option<InFlight>,
    /// The stager that started it.
    stager: u64,
}

/// Distinguishes stagers, so that a transfer is finished by its own.
static NEXT_STAGER: AtomicU64 = AtomicU64::new(1);

pub(super) fn next_stager_id() -> u64 {
    NEXT_STAGER.fetch_add(1, Ordering::Relaxed)
}

impl PendingTransfer {
    /// A transfer `stager` started (`None`: finished when started).
    pub(super) fn new(in_flight: Option<InFlight>, stager: u64) -> PendingTransfer {
        PendingTransfer { in_flight, stager }
    }

    /// Its chunks, for the stager `stager` to finish.
    ///
    /// # Panics
    ///
    /// If another stager started it.
    pub(super) fn into_in_flight(mut self, stager: u64) -> Option<InFlight> {
        assert_eq!(
            self.stager, stager,
            "a pending transfer is finished by the stager that started it"
        );
        self.in_flight.take()
    }

    /// Waits until the transfer's bytes have arrived and ends it: lets go
    /// of the device memory as the drop does (see the type), and after an
    /// error drains the stager's streams, so that the stager refuses
    /// transfers until they have drained. Takes no stager: any thread may
    /// finish it, the stager's owner meanwhile starting others, and the
    /// stager may have been dropped. Idempotent: a second caller, on any
    /// thread, waits for the first and gets the same result.
    pub fn finish(&self) -> Result<(), Error> {
        self.in_flight.as_ref().map_or(Ok(()), InFlight::finish)
    }

    /// Whether the transfer's bytes have arrived, without waiting.
    pub fn is_finished(&self) -> Result<bool, Error> {
        self.in_flight.as_ref().map_or(Ok(true), InFlight::poll)
    }

    /// Waits until the transfer's bytes have arrived, or it failed, and
    /// ends nothing: [`finish`](Self::finish) after it reports the same
    /// error (and drains the stager's streams after one) without waiting
    /// again.
    pub fn wait_arrived(&self) -> Result<(), Error> {
        self.in_flight.as_ref().map_or(Ok(()), InFlight::wait)
    }

    /// Makes work queued on `stream` from now on wait for this transfer:
    /// a kernel that reads what a host-to-device transfer writes, say.
    /// Refused on a capturing stream ([`Error::Capturing`]): the wait would
    /// make the capture depend on work outside it.
    pub fn order_before(&self, stream: StreamRef<'_>) -> Result<(), Error> {
        let Some(in_flight) = &self.in_flight else {
            return Ok(());
        };
        for event in in_flight.events() {
            event.context().expect_same(stream.context())?;
        }
        let _bound = stream.context().bound()?;
        // The check and the waits in one hold of the lock: the stream
        // cannot begin capturing in between.
        let locked = capture::lock();
        if capture_graph(&locked, stream.context(), stream.raw())?.is_some() {
            return Err(Error::Capturing);
        }
        for event in in_flight.events() {
            stream.wait_event_locked(&locked, event)?;
        }
        Ok(())
    }
}
