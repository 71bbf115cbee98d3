//! What the fronts ask of the engine: who queues a transfer's chunks
//! ([`Queuing`]), and the two calls every front is made of ([`Engine`]):
//! start a checked, planned transfer ([`InFlight`]), and finish it.
//! The [`Stager`](super::Stager) is the engine; the scope and the pending
//! transfer hold what it started and give it back to be finished.

use super::in_flight::InFlight;
use super::spec::TransferSpec;
use crate::cuda::error::Error;

/// When the caller of a transfer waits: that decides only whether a
/// single transfer below the crossover may take the driver's path, which
/// returns when the bytes have arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Queuing {
    /// In the call: below the crossover, always the driver's path.
    Blocking,
    /// Later (a scope's transfer, a pending one): the driver's path only
    /// when it would not wait for other work.
    AtOnce,
}

/// The engine's calls, which every front is made of.
pub(super) trait Engine {
    /// Checks a transfer and either completes it on the driver's path
    /// (`None`) or plans it and has its chunks queued (`Some`, to be
    /// finished).
    ///
    /// The caller holds the borrows in `spec`, or answers for the memory
    /// they came from, until the transfer is finished.
    fn start(
        &mut self,
        spec: TransferSpec<'_>,
        queuing: Queuing,
    ) -> Result<Option<InFlight>, Error>;

    /// Waits until a transfer's host side is made and its driver copies
    /// have run; returns the first error. After an error the streams
    /// are drained; if they cannot be, the device allocation is kept for
    /// good.
    fn finish(&mut self, in_flight: InFlight) -> Result<(), Error>;
}
