//! Transfers that borrow nothing: started by an `unsafe` call whose caller
//! keeps the host memory valid, held as a [`PendingTransfer`] for as long
//! as the caller likes (across threads, inside another language's object),
//! and finished by [`Stager::finish_pending`]. What a binding (the Python
//! package) builds its non-blocking transfers on; Rust code has
//! [`Stager::scope`], which proves the same with borrows.
//!
//! A pending transfer's chunks are queued by the call that starts it, all
//! at once (a scope's go to the stager's feeder thread instead), so that
//! [`PendingTransfer::order_before`] can order a stream after it at once;
//! for a transfer of many GiB that call may wait for room in the driver's
//! queue. Small single transfers take the driver's path, as blocking
//! calls do.

use core::sync::atomic::{AtomicU64, Ordering};

use super::{Block, Blocks, DeviceSide, InFlight, Queuing, Stager};
use crate::HostRange;
use crate::cuda::capture::{self, RelaxedCapture, capture_graph};
use crate::cuda::device::DeviceMemory;
use crate::cuda::error::Error;
use crate::cuda::stream::StreamRef;

/// A staged transfer in flight, not tied to a borrow: see
/// [`Stager::start_device_to_host_unchecked`]. Finish it with
/// [`Stager::finish_pending`] on the stager that started it.
///
/// Dropped unfinished, it waits for its copies (as a Python `Transfer`
/// does), then frees its chunk records and lets go of the device memory.
/// If that wait fails (a context error), its queued work may still run: it
/// keeps the chunk records and the device memory for good, counted in
/// [`leaked`](super::leaked). Only [`Stager::finish_pending`] also drains
/// the stager's streams after an error and reports it.
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
    /// Whether the transfer's bytes have arrived, without waiting.
    pub fn is_finished(&self) -> Result<bool, Error> {
        let Some(in_flight) = &self.in_flight else {
            return Ok(true);
        };
        let queued = in_flight.job.queued();
        if !queued.finished {
            return Ok(false);
        }
        if let Some(error) = queued.error {
            return Err(error);
        }
        let _relaxed = RelaxedCapture::new();
        for event in &queued.events {
            if !event.query()? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Makes work queued on `stream` from now on wait for this transfer:
    /// a kernel that reads what a host-to-device transfer writes, say.
    /// Refused on a capturing stream ([`Error::Capturing`]): the wait would
    /// make the capture depend on work outside it.
    pub fn order_before(&self, stream: StreamRef<'_>) -> Result<(), Error> {
        let Some(in_flight) = &self.in_flight else {
            return Ok(());
        };
        let queued = in_flight.job.wait_queued();
        if let Some(error) = queued.error {
            return Err(error);
        }
        for event in &queued.events {
            event.context().expect_same(stream.context())?;
        }
        // The check and the waits in one hold of the lock: the stream
        // cannot begin capturing in between.
        let locked = capture::lock();
        if capture_graph(&locked, stream.context(), stream.raw())?.is_some() {
            return Err(Error::Capturing);
        }
        for event in &queued.events {
            stream.wait_event_locked(&locked, event)?;
        }
        Ok(())
    }
}

impl Drop for PendingTransfer {
    fn drop(&mut self) {
        let Some(in_flight) = self.in_flight.take() else {
            return;
        };
        let _relaxed = RelaxedCapture::new();
        let finished = {
            let queued = in_flight.job.wait_queued();
            queued.error.is_none()
                && queued
                    .events
                    .iter()
                    .all(|event| event.synchronize().is_ok())
        };
        if finished {
            // Every chunk queued has run: nothing touches them any more.
            in_flight.chunks.settle_and_free();
        } else {
            // Its copies may still run: keep their device memory and the
            // chunk records for good, counted.
            in_flight.device.keep();
            in_flight.chunks.keep();
        }
    }
}

impl Stager {
    /// Starts copying `dst.len` bytes from byte `offset` of `src` into the
    /// host memory `dst`, and returns at once.
    ///
    /// # Safety
    ///
    /// `dst` is writable host memory that nothing else reads or writes,
    /// and that stays allocated, until the transfer is given to
    /// [`finish_pending`](Self::finish_pending) and that returns, or until
    /// the transfer is dropped (for good if it is dropped after a context
    /// error: then its copies may still run).
    pub unsafe fn start_device_to_host_unchecked<S: DeviceMemory>(
        &mut self,
        dst: HostRange,
        src: &S,
        offset: usize,
    ) -> Result<PendingTransfer, Error> {
        self.start_pending(dst, DeviceSide::Source(src), Blocks::One { offset })
    }

    /// Starts copying each block from `src` into the host memory `dst` (a
    /// batch, checked before anything is queued as
    /// [`device_to_host_blocks`](Self::device_to_host_blocks) checks it),
    /// and returns at once.
    ///
    /// # Safety
    ///
    /// As for [`start_device_to_host_unchecked`](Self::start_device_to_host_unchecked).
    pub unsafe fn start_device_to_host_blocks_unchecked<S: DeviceMemory>(
        &mut self,
        dst: HostRange,
        src: &S,
        blocks: &[Block],
    ) -> Result<PendingTransfer, Error> {
        self.start_pending(dst, DeviceSide::Source(src), Blocks::Many(blocks))
    }

    /// Starts copying each block from the host memory `src` into `dst` (a
    /// batch, checked before anything is queued as
    /// [`host_to_device_blocks`](Self::host_to_device_blocks) checks it),
    /// and returns at once.
    ///
    /// # Safety
    ///
    /// As for [`start_host_to_device_unchecked`](Self::start_host_to_device_unchecked).
    pub unsafe fn start_host_to_device_blocks_unchecked<D: DeviceMemory>(
        &mut self,
        dst: &D,
        src: HostRange,
        blocks: &[Block],
    ) -> Result<PendingTransfer, Error> {
        self.start_pending(src, DeviceSide::Destination(dst), Blocks::Many(blocks))
    }

    /// Starts copying the host memory `src` to byte `offset` of `dst`, and
    /// returns at once.
    ///
    /// # Safety
    ///
    /// `src` is readable host memory that nothing writes, and that stays
    /// allocated, until the transfer is given to
    /// [`finish_pending`](Self::finish_pending) and that returns, or until
    /// the transfer is dropped (for good if it is dropped after a context
    /// error); nothing else reads or writes `dst`'s range meanwhile.
    pub unsafe fn start_host_to_device_unchecked<D: DeviceMemory>(
        &mut self,
        dst: &D,
        offset: usize,
        src: HostRange,
    ) -> Result<PendingTransfer, Error> {
        self.start_pending(src, DeviceSide::Destination(dst), Blocks::One { offset })
    }

    fn start_pending(
        &mut self,
        host: HostRange,
        device: DeviceSide<'_>,
        blocks: Blocks<'_>,
    ) -> Result<PendingTransfer, Error> {
        // Queued by the caller, all at once, not by the feeder: so that
        // `order_before` can order a stream after the transfer at once
        // (its last chunks are queued), as a binding's non-blocking call
        // does right after starting it.
        let in_flight = self.start(host, device, blocks, Queuing::Now)?;
        Ok(PendingTransfer {
            in_flight,
            stager: self.id,
        })
    }

    /// Waits for a transfer this stager started, then settles it; its
    /// error, if any (see the [module documentation](super) for what an
    /// error leaves behind).
    ///
    /// # Panics
    ///
    /// If another stager started `transfer`.
    pub fn finish_pending(&mut self, mut transfer: PendingTransfer) -> Result<(), Error> {
        assert_eq!(
            transfer.stager, self.id,
            "a pending transfer is finished by the stager that started it"
        );
        match transfer.in_flight.take() {
            Some(in_flight) => self.finish(in_flight),
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
    /// complete; at most [`MAX_ORDER_EVENTS`](super::MAX_ORDER_EVENTS) of
    /// them, so that a program calling this before every transfer keeps a
    /// bounded number of events alive: each call first lets go of those
    /// the driver reports complete, and at the bound folds the rest into
    /// one. It never waits on the host.
    pub fn wait_for(&mut self, stream: StreamRef<'_>) -> Result<(), Error> {
        let _relaxed = RelaxedCapture::new();
        self.check_usable()?;
        self.context.expect_same(stream.context())?;
        self.retire_order_events()?;
        let event = match self.spare_order_events.pop() {
            Some(event) => event,
            None => crate::cuda::Event::blocking(&self.context)?,
        };
        let recorded = {
            let locked = capture::lock();
            match capture_graph(&locked, stream.context(), stream.raw()) {
                Ok(None) => event.record_known(&locked, stream, false),
                Ok(Some(_)) => Err(Error::Capturing),
                Err(error) => Err(error.into()),
            }
        };
        if let Err(error) = recorded {
            self.spare_order_events.push(event);
            return Err(error);
        }
        // Every transfer started before is queued whole (the feeder has
        // nothing left: a scope, the only user of it, has ended), so these
        // waits come after them and before every later one.
        let ordered = self
            .lanes
            .streams
            .iter()
            .try_for_each(|own| own.as_stream().wait_event(&event));
        // Kept even if a wait failed: a transfer on the driver's path still
        // waits for it on the host.
        self.order_events
            .push((self.next_order, ordered.is_ok(), event));
        self.next_order += 1;
        ordered
    }
}
