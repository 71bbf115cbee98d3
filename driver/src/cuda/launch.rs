//! Owned launches: the layer copies the record into a slot it owns, and the
//! host function frees the slot after running it, or, on a capturing
//! stream, the captured graph owns the slot until it and its executables
//! are gone.

use core::ptr::NonNull;

use super::capture::{self, capture_graph};
use super::error::Error;
use super::ffi;
use super::graph::give_slot_to_graph;
use super::stream::StreamRef;
use crate::owned::{self, HostCopy, Slot, SlotSource};
use crate::{Record, RecordPool};

/// Where an owned launch went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Launched {
    /// Queued on the stream: runs once, then the record is freed.
    Queued,
    /// Captured into the graph the stream is capturing, which owns the
    /// record: runs on every launch of an executable made from it.
    Captured,
}

impl StreamRef<'_> {
    /// Launches `copy` on a copy of `record`, which this layer owns until
    /// the host function has run and then frees. If the stream is capturing,
    /// the copy belongs to the captured graph instead, and is freed with it.
    ///
    /// If the context fails before the host function runs, the driver skips
    /// it and the copy stays allocated (see
    /// [`owned_record_counts`](crate::owned_record_counts)).
    pub fn launch_owned(&self, copy: HostCopy, record: Record<'static>) -> Result<Launched, Error> {
        self.launch_owned_from(SlotSource::Heap, copy, record)
    }

    /// [`launch_owned`](Self::launch_owned) with the copy in a slot of
    /// `pool`: no allocation. [`Error::Pool`] when every slot is held.
    pub fn launch_owned_in<const N: usize>(
        &self,
        pool: &'static RecordPool<N>,
        copy: HostCopy,
        record: Record<'static>,
    ) -> Result<Launched, Error> {
        self.launch_owned_from(SlotSource::Pool(pool), copy, record)
    }

    fn launch_owned_from(
        &self,
        source: SlotSource,
        copy: HostCopy,
        record: Record<'static>,
    ) -> Result<Launched, Error> {
        let slot = source.take(record.args(), copy)?;
        // SAFETY: `slot` is held and ours; the `'static` record's ranges
        // stay valid for as long as any host function may run it.
        unsafe { self.launch_slot(slot, copy) }
    }

    /// Launches an owned slot: to run once and be freed, or, while
    /// capturing, to become a node of the graph that then owns it. The
    /// capture check and the launch happen under the capture lock, so the
    /// stream cannot begin or end capturing in between.
    ///
    /// # Safety
    ///
    /// `slot` is held by the caller, who hands it over, and its record's
    /// ranges stay valid for as long as any host function may run it.
    unsafe fn launch_slot(&self, slot: NonNull<Slot>, copy: HostCopy) -> Result<Launched, Error> {
        let user_data = Slot::user_data(slot);
        let locked = capture::lock();
        let capture = match capture_graph(&locked, self.context(), self.raw()) {
            Ok(capture) => capture,
            Err(error) => {
                // SAFETY: nothing has the slot but us.
                unsafe { Slot::release(slot) };
                return Err(error.into());
            }
        };
        match capture {
            Some(graph) if graph.is_null() => {
                // An invalidated capture: nothing can be launched on it.
                // SAFETY: nothing has the slot but us.
                unsafe { Slot::release(slot) };
                Err(Error::Capturing)
            }
            Some(graph) => {
                // SAFETY: the slot is ours to give; the capture lock keeps
                // every other thread's calls off the capture graph.
                unsafe { give_slot_to_graph(graph, slot) }?;
                // Replays run the record as it is: no host function may free it.
                // SAFETY: the graph keeps the slot until it and its
                // executables are gone.
                unsafe { ffi::cuLaunchHostFunc(self.raw(), Some(copy.host_fn()), user_data) }
                    .ok()?;
                Ok(Launched::Captured)
            }
            None => {
                // SAFETY: `run_owned` runs the record and frees the slot.
                let launched =
                    unsafe { ffi::cuLaunchHostFunc(self.raw(), Some(owned::run_owned), user_data) }
                        .ok();
                if let Err(error) = launched {
                    // Not queued: still ours.
                    // SAFETY: no host function has the slot.
                    unsafe { Slot::release(slot) };
                    return Err(error.into());
                }
                Ok(Launched::Queued)
            }
        }
    }
}
