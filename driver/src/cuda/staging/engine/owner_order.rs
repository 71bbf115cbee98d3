//! Blocking transfers on memory whose owner orders its uses (cudarc's
//! allocations: see the `cudarc` module): the stager's streams wait for
//! the owner's around the transfer, inside the owner's own ordering.

use super::Engine;
use crate::cuda::capture::RelaxedCapture;
use crate::cuda::device::sealed::OwnerOrder;
use crate::cuda::error::Error;
use crate::cuda::event::Event;
use crate::cuda::staging::Direction;
use crate::cuda::staging::spec::TransferSpec;
use crate::cuda::stream::StreamRef;

impl Engine {
    /// A blocking transfer on memory whose owner orders its use (cudarc's:
    /// see the `cudarc` module): checked before the owner or the stager
    /// orders anything; then, between the owner's wait for the memory's
    /// earlier uses and its record of this one, the stager's streams wait
    /// for the owner's, and after a transfer that could not be drained the
    /// owner's streams wait for the stager's.
    pub(super) fn run_in_owner_order(
        &mut self,
        spec: TransferSpec<'_>,
        order: &dyn OwnerOrder,
    ) -> Result<(), Error> {
        let writes = spec.device.direction() == Direction::HostToDevice;
        order.check(&self.context, writes)?;
        if spec.device_bytes(spec.device.memory().memory_len())? == 0 {
            return Ok(());
        }
        order.check_not_capturing(&self.context)?;
        let context = self.context.clone();
        let (stream, own) = order.streams();
        // SAFETY: the owner's streams live as long as `order`, which our
        // caller borrows for this call, and belong to the stager's context
        // (`check`).
        let (stream, own) = unsafe {
            (
                StreamRef::from_raw(&context, stream),
                own.map(|own| StreamRef::from_raw(&context, own)),
            )
        };
        order.in_order(writes, &mut |memory| {
            self.wait_for(stream)?;
            if let Some(own) = own {
                self.wait_for(own)?;
            }
            let spec = spec.with_device(memory);
            // A small transfer too: it goes on a stream of the stager's,
            // which `order_after_queued` covers.
            let result = self.run_now(spec);
            if !self.drained() {
                self.order_after_queued(stream);
                if let Some(own) = own {
                    self.order_after_queued(own);
                }
            }
            result
        })
    }

    /// Makes `stream` wait for everything queued on the stager's streams:
    /// after a transfer that could not be drained, so that the owner's next
    /// use of the memory (its release too) comes after the copies the
    /// driver may still run. Failures are not reported: the transfer's own
    /// error is, and a context that refuses these calls refuses that next
    /// use too (a sticky error).
    fn order_after_queued(&self, stream: StreamRef<'_>) {
        let _relaxed = RelaxedCapture::new();
        for own in self.lanes.streams.iter().chain(self.driver_path.stream()) {
            if let Ok(event) = Event::ordering(&self.context)
                && event.record(own.as_stream()).is_ok()
            {
                let _ = stream.wait_event(&event);
            }
        }
    }
}
