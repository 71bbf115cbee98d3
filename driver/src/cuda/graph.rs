//! Graphs with host-copy nodes, their executables, and the records they own.
//!
//! A record given to a graph (a node added here, or an owned launch on a
//! capturing stream) is attached to the graph as a CUDA user object whose
//! destructor frees it. The driver runs that destructor once the graph and
//! every executable instantiated from it are destroyed and their launches
//! have finished, so every replay finds the record where it was.
//!
//! A record set on a node of an executable after instantiation is not known
//! to the graph: the [`GraphExec`] keeps it, records an event after each
//! launch, and frees it when dropped, once those events have completed. If
//! the context has failed by then, the records stay allocated (counted by
//! [`abandoned_records`](crate::abandoned_records)): a host node may still be
//! running, and the driver returns errors instead of waiting for it.

use core::ffi::c_void;
use core::fmt;
use core::ptr::NonNull;

use hostcopy_core::{HostFn, hostcopy_fn};

use super::error::{DriverError, Error};
use super::event::Event;
use super::ffi::{self, CUDA_HOST_NODE_PARAMS, CUgraph, CUgraphExec, CUgraphNode, CUstream};
use super::host_fns;
use super::list::List;
use super::stream::StreamRef;
use crate::owned::{Slot, SlotSource};
use crate::{Record, RecordPool};

/// A CUDA graph, destroyed on drop (records it owns are freed once its
/// executables are gone too).
pub struct Graph {
    raw: CUgraph,
}

// SAFETY: graph handles may be used from any thread, one call at a time,
// which `&mut`-free use through the driver serializes.
unsafe impl Send for Graph {}

/// A node of a [`Graph`].
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GraphNode {
    raw: CUgraphNode,
}

// SAFETY: a node handle is an identifier; using it needs its graph.
unsafe impl Send for GraphNode {}
// SAFETY: as above.
unsafe impl Sync for GraphNode {}

impl Graph {
    /// An empty graph.
    pub fn new() -> Result<Graph, DriverError> {
        let mut raw: CUgraph = core::ptr::null_mut();
        // SAFETY: writes one handle, destroyed in `Drop`.
        unsafe { ffi::cuGraphCreate(&mut raw, 0) }.ok()?;
        Ok(Graph { raw })
    }

    /// Takes ownership of a graph handle (one another runtime captured, say).
    ///
    /// To borrow a graph another runtime owns and destroys, keep the wrapper
    /// from destroying it: `ManuallyDrop::new(unsafe { Graph::from_raw(raw) })`.
    /// Host-copy nodes added through it still own their records: they are
    /// freed when that runtime destroys the graph and its executables.
    ///
    /// # Safety
    ///
    /// `raw` is a valid graph; nothing else destroys it while the wrapper
    /// may (or, borrowed as above, it outlives every use of the wrapper).
    pub unsafe fn from_raw(raw: CUgraph) -> Graph {
        Graph { raw }
    }

    /// Gives the handle up without destroying the graph.
    pub fn into_raw(self) -> CUgraph {
        let raw = self.raw;
        core::mem::forget(self);
        raw
    }

    /// The raw handle.
    pub fn raw(&self) -> CUgraph {
        self.raw
    }

    /// Adds a node that runs `hostcopy_fn` on a copy of `record` after
    /// `dependencies`. The graph owns the copy (on the heap).
    #[cfg(feature = "alloc")]
    pub fn add_host_copy(
        &mut self,
        record: Record<'static>,
        dependencies: &[GraphNode],
    ) -> Result<GraphNode, Error> {
        self.add_host_copy_from(SlotSource::Heap, record, dependencies)
    }

    /// [`add_host_copy`](Self::add_host_copy) with the copy in a slot of `pool`.
    pub fn add_host_copy_in<const N: usize>(
        &mut self,
        pool: &'static RecordPool<N>,
        record: Record<'static>,
        dependencies: &[GraphNode],
    ) -> Result<GraphNode, Error> {
        self.add_host_copy_from(SlotSource::Pool(pool), record, dependencies)
    }

    fn add_host_copy_from(
        &mut self,
        source: SlotSource,
        record: Record<'static>,
        dependencies: &[GraphNode],
    ) -> Result<GraphNode, Error> {
        let slot = source.take(record.args())?;
        // SAFETY: the slot is ours to give.
        unsafe { give_slot_to_graph(self.raw, slot) }?;
        // SAFETY: the graph keeps the slot until it and its executables are
        // gone; the `'static` record's ranges stay valid that long.
        let node =
            unsafe { self.add_host_fn(hostcopy_fn, slot.as_ref().user_data(), dependencies) }?;
        Ok(node)
    }

    /// Adds a node running any host function on any `user_data`.
    ///
    /// # Safety
    ///
    /// Whatever `f` does with `user_data` stays valid until the graph and
    /// every executable made from it are destroyed and their launches have
    /// finished.
    pub unsafe fn add_host_fn(
        &mut self,
        f: HostFn,
        user_data: *mut c_void,
        dependencies: &[GraphNode],
    ) -> Result<GraphNode, DriverError> {
        let params = CUDA_HOST_NODE_PARAMS {
            fn_: Some(f),
            userData: user_data,
        };
        let mut node: CUgraphNode = core::ptr::null_mut();
        // SAFETY: `GraphNode` is a transparent `CUgraphNode`, so the slice is
        // an array of handles; the driver copies the parameters.
        unsafe {
            ffi::cuGraphAddHostNode(
                &mut node,
                self.raw,
                dependencies.as_ptr().cast::<CUgraphNode>(),
                dependencies.len(),
                &params,
            )
        }
        .ok()?;
        Ok(GraphNode { raw: node })
    }

    /// An executable of the graph as it is now.
    pub fn instantiate(&self) -> Result<GraphExec, DriverError> {
        let mut raw: CUgraphExec = core::ptr::null_mut();
        // SAFETY: writes one handle, destroyed in `GraphExec`'s `Drop`.
        unsafe { ffi::cuGraphInstantiateWithFlags(&mut raw, self.raw, 0) }.ok()?;
        Ok(GraphExec {
            raw,
            replaced: List::new(),
            launches: List::new(),
            untracked: false,
        })
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        // SAFETY: destroys the graph; user objects it holds are released by
        // the driver once its executables are gone too.
        let _ = unsafe { ffi::cuGraphDestroy(self.raw) };
    }
}

impl fmt::Debug for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Graph").field("raw", &self.raw).finish()
    }
}

/// Attaches an owned slot to a graph: a user object whose destructor frees
/// it, with the only reference moved into the graph.
///
/// # Safety
///
/// The caller owns `slot` and hands it over: on success the graph owns it,
/// on failure it is freed (now, or by the destructor of the released object).
pub(crate) unsafe fn give_slot_to_graph(
    graph: CUgraph,
    slot: NonNull<Slot>,
) -> Result<(), DriverError> {
    let mut object: ffi::CUuserObject = core::ptr::null_mut();
    // SAFETY: the destructor frees the slot, which stays allocated until then.
    let created = unsafe {
        ffi::cuUserObjectCreate(
            &mut object,
            slot.as_ptr().cast(),
            Some(host_fns::free_graph_owned),
            1,
            ffi::CU_USER_OBJECT_NO_DESTRUCTOR_SYNC,
        )
    }
    .ok();
    if let Err(error) = created {
        // SAFETY: no object owns the slot: still ours.
        unsafe { Slot::release(slot) };
        return Err(error);
    }
    // SAFETY: moves our one reference into the graph.
    let moved =
        unsafe { ffi::cuGraphRetainUserObject(graph, object, 1, ffi::CU_GRAPH_USER_OBJECT_MOVE) }
            .ok();
    if let Err(error) = moved {
        // Releasing our reference runs the destructor, which frees the slot.
        // SAFETY: the reference is ours.
        let _ = unsafe { ffi::cuUserObjectRelease(object, 1) };
        return Err(error);
    }
    Ok(())
}

/// Launch streams an executable remembers without a heap.
const LAUNCH_STREAMS: usize = 16;
/// Records set on nodes after instantiation, without a heap.
const REPLACED_RECORDS: usize = 64;

/// An executable graph, destroyed on drop.
pub struct GraphExec {
    raw: CUgraphExec,
    /// Records set on nodes after instantiation: ours to free.
    replaced: List<NonNull<Slot>, REPLACED_RECORDS>,
    /// The last launch on each stream, once there are records to free.
    launches: List<(CUstream, Event), LAUNCH_STREAMS>,
    /// A launch that may use `replaced` went untracked (an event failed):
    /// those records can never be known to be free.
    untracked: bool,
}

// SAFETY: handles and owned slots may be used from any thread; every method
// that changes the executable takes `&mut self`.
unsafe impl Send for GraphExec {}

impl GraphExec {
    /// Launches the executable on `stream`.
    ///
    /// Refused on a capturing stream once a node's record was set here
    /// ([`Error::Capturing`]): the captured graph would point at records this
    /// executable frees when dropped.
    pub fn launch(&mut self, stream: StreamRef<'_>) -> Result<(), Error> {
        if !self.replaced.is_empty() && stream.capture_graph()?.is_some() {
            return Err(Error::Capturing);
        }
        // SAFETY: both handles are alive.
        unsafe { ffi::cuGraphLaunch(self.raw, stream.raw()) }.ok()?;
        if !self.replaced.is_empty()
            && let Err(error) = self.remember_launch(stream)
        {
            self.untracked = true;
            return Err(error);
        }
        Ok(())
    }

    /// Records an event after the launch just queued on `stream`.
    fn remember_launch(&mut self, stream: StreamRef<'_>) -> Result<(), Error> {
        if let Some((_, event)) = self
            .launches
            .iter_mut()
            .find(|(raw, _)| *raw == stream.raw())
        {
            event.record(stream)?;
            return Ok(());
        }
        let event = Event::ordering()?;
        event.record(stream)?;
        if self.launches.push((stream.raw(), event)).is_err() {
            // Without a heap: too many streams to track; wait for this launch
            // so that nothing untracked is in flight.
            stream.synchronize()?;
        }
        Ok(())
    }

    /// Makes `node` run `hostcopy_fn` on a copy of `record` from the next
    /// launch on. Launches already queued keep the record they had.
    #[cfg(feature = "alloc")]
    pub fn set_host_copy(&mut self, node: GraphNode, record: Record<'static>) -> Result<(), Error> {
        self.set_host_copy_from(SlotSource::Heap, node, record)
    }

    /// [`set_host_copy`](Self::set_host_copy) with the copy in a slot of `pool`.
    pub fn set_host_copy_in<const N: usize>(
        &mut self,
        pool: &'static RecordPool<N>,
        node: GraphNode,
        record: Record<'static>,
    ) -> Result<(), Error> {
        self.set_host_copy_from(SlotSource::Pool(pool), node, record)
    }

    fn set_host_copy_from(
        &mut self,
        source: SlotSource,
        node: GraphNode,
        record: Record<'static>,
    ) -> Result<(), Error> {
        if self.replaced.is_full() {
            return Err(Error::ScopeFull {
                capacity: REPLACED_RECORDS,
            });
        }
        let slot = source.take(record.args())?;
        // SAFETY: the slot is alive and ours.
        let user_data = unsafe { slot.as_ref() }.user_data();
        let params = CUDA_HOST_NODE_PARAMS {
            fn_: Some(hostcopy_fn),
            userData: user_data,
        };
        // SAFETY: the executable and node are alive; the slot stays
        // allocated until this executable's launches are finished.
        let set = unsafe { ffi::cuGraphExecHostNodeSetParams(self.raw, node.raw, &params) }.ok();
        if let Err(error) = set {
            // SAFETY: the executable does not use the slot.
            unsafe { Slot::release(slot) };
            return Err(error.into());
        }
        // Checked above: there is room.
        let _ = self.replaced.push(slot);
        Ok(())
    }
}

impl Drop for GraphExec {
    fn drop(&mut self) {
        // SAFETY: destroys the executable; launches in flight finish first
        // (the driver defers the release).
        let _ = unsafe { ffi::cuGraphExecDestroy(self.raw) };
        if self.replaced.is_empty() {
            return;
        }
        let finished = self
            .launches
            .iter()
            .all(|(_, event)| event.synchronize().is_ok());
        for slot in self.replaced.drain_all() {
            if finished {
                // SAFETY: every launch that could run this record has finished.
                unsafe { Slot::release(slot) };
            } else {
                // The context failed: a host node may still be running it.
                Slot::count_abandoned();
            }
        }
    }
}

impl fmt::Debug for GraphExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GraphExec")
            .field("raw", &self.raw)
            .field("replaced_records", &self.replaced.len())
            .finish()
    }
}
