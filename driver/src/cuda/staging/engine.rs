//! What the fronts ask of the engine: a transfer in flight ([`InFlight`]),
//! who queues its chunks ([`Queuing`]), and the two calls every front is
//! made of ([`Engine`]): start a checked, planned transfer, and finish it.
//! The [`Stager`](super::Stager) is the engine; the scope and the pending
//! transfer hold what it started and give it back to be finished.

use std::sync::Arc;

use super::chunk::Chunks;
use super::feed::Job;
use super::spec::TransferSpec;
use crate::cuda::device::DeviceInUse;
use crate::cuda::error::Error;

/// Who queues a transfer's chunks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Queuing {
    /// The caller, all at once, for a blocking call. Single transfers below
    /// the crossover take the driver's path.
    Blocking,
    /// The caller, all at once, for a pending transfer (which
    /// `order_before` needs queued). Single transfers below the crossover
    /// of pageable memory take the driver's path unless it would wait for
    /// a stream given to `wait_for`.
    Pending,
    /// The feeder thread, for a scope's transfer, which returns at once;
    /// below the crossover as for a pending transfer.
    Feeder,
}

/// The chunks of one planned transfer and how queuing them goes.
#[derive(Debug)]
pub(super) struct InFlight {
    pub(super) chunks: Chunks,
    pub(super) job: Arc<Job>,
    /// The number of the next `wait_for` event when it started.
    pub(super) order_upto: u64,
    /// The device allocation the queued copies use.
    pub(super) device: DeviceInUse,
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

    /// Waits until a transfer's chunks are queued and have run, then
    /// settles them; returns the first error. After an error the streams
    /// are drained; if they cannot be, the device allocation is kept for
    /// good.
    fn finish(&mut self, in_flight: InFlight) -> Result<(), Error>;
}
