//! Graphs with host-copy nodes, their executables, the records they own, and
//! stream capture into a graph (`impl StreamRef { begin_capture, end_capture }`).
//!
//! A record given to a graph (a node added here, or an owned launch on a
//! capturing stream) is attached to the graph as a CUDA user object whose
//! destructor frees it. The driver runs that destructor once the graph and
//! every executable instantiated from it are destroyed and their launches
//! have finished, so every replay finds the record where it was.
//!
//! A node belongs to its graph: [`GraphNode`] carries its graph's identity,
//! and a node of another graph is [`Error::ForeignNode`]. An executable
//! keeps its graph alive, so its nodes stay valid handles for it.
//!
//! A record set on a node of an executable after instantiation is not known
//! to the graph: the [`GraphExec`] owns it. Each launch that may run such a
//! record records an event; a replaced record is freed once every launch
//! that may run it has completed, so a pipeline that re-points a node on
//! every launch keeps as many records as it has launches in flight. A launch
//! whose completion cannot be tracked (its event failed to record after the
//! graph was launched) keeps every record it may run allocated for good,
//! counted by [`abandoned_records`](crate::abandoned_records), as do records
//! whose launches had not finished when the context failed.

use core::ffi::c_void;
use core::fmt;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use alloc::collections::VecDeque;
use alloc::sync::Arc;
use alloc::vec::Vec;

use hostcopy_core::HostFn;

use super::capture::{self, CaptureState, capture_graph};
use super::context::Context;
use super::error::{DriverError, Error};
use super::event::Event;
use super::ffi::{
    self, CUDA_HOST_NODE_PARAMS, CUgraph, CUgraphExec, CUgraphNode, CUstreamCaptureMode,
};
use super::stream::StreamRef;
use crate::owned::{self, HostCopy, Slot, SlotSource};
use crate::{Record, RecordPool};

/// Identities of graphs, unique in the process.
static NEXT_GRAPH_ID: AtomicU64 = AtomicU64::new(1);

/// A graph handle, shared by the [`Graph`] and its executables.
struct GraphInner {
    context: Context,
    raw: CUgraph,
    id: u64,
    /// CUDA graph objects are not thread-safe: every call on the graph (or
    /// on an executable's node, which reads the graph's node) holds this.
    calls: Mutex<()>,
    /// Whether dropping the last reference destroys the graph (not for a
    /// graph another runtime owns: [`Graph::borrow_raw`]).
    owned: bool,
}

// SAFETY: the handle may be used from any thread, one call at a time
// (`calls`), with the context bound first.
unsafe impl Send for GraphInner {}
// SAFETY: as above.
unsafe impl Sync for GraphInner {}

impl GraphInner {
    fn new(context: &Context, raw: CUgraph) -> GraphInner {
        GraphInner {
            context: context.clone(),
            raw,
            id: NEXT_GRAPH_ID.fetch_add(1, Ordering::Relaxed),
            calls: Mutex::new(()),
            owned: true,
        }
    }

    /// Holds the graph's call lock and binds its context. A borrowed
    /// graph may be wrapped many times over (once per call, by a binding):
    /// its wrappers share one process-wide lock instead.
    fn enter(&self) -> Result<std::sync::MutexGuard<'_, ()>, DriverError> {
        static BORROWED_CALLS: Mutex<()> = Mutex::new(());
        let calls = if self.owned {
            &self.calls
        } else {
            &BORROWED_CALLS
        };
        let held = calls
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        self.context.bind()?;
        Ok(held)
    }
}

impl Drop for GraphInner {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        let _ = self.context.bind();
        // SAFETY: destroys the graph once the `Graph` and every executable
        // made from it are gone; user objects it holds are released by the
        // driver once the executables' launches have finished.
        let _ = unsafe { ffi::cuGraphDestroy(self.raw) };
    }
}

/// A CUDA graph in a context it keeps alive, destroyed once it and every
/// executable made from it are dropped (records it owns are freed then).
pub struct Graph {
    inner: Arc<GraphInner>,
}

/// A node of a [`Graph`]: its handle and which graph it belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GraphNode {
    raw: CUgraphNode,
    graph: u64,
}

// SAFETY: a node handle is an identifier; it is used only with its graph
// (checked by identity), which keeps it valid.
unsafe impl Send for GraphNode {}
// SAFETY: as above.
unsafe impl Sync for GraphNode {}

impl GraphNode {
    /// The raw node handle (valid while its graph or an executable of it lives).
    pub fn raw(&self) -> CUgraphNode {
        self.raw
    }
}

impl Graph {
    /// An empty graph in `context`.
    pub fn new(context: &Context) -> Result<Graph, DriverError> {
        context.bind()?;
        let mut raw: CUgraph = core::ptr::null_mut();
        // SAFETY: writes one handle, destroyed with `GraphInner`.
        unsafe { ffi::cuGraphCreate(&mut raw, 0) }.ok()?;
        Ok(Graph {
            inner: Arc::new(GraphInner::new(context, raw)),
        })
    }

    /// Takes ownership of a graph handle (one another runtime captured, say).
    /// To add nodes to a graph another runtime owns and destroys, use
    /// [`borrow_raw`](Self::borrow_raw).
    ///
    /// # Safety
    ///
    /// `raw` is a valid graph of `context`; nothing else destroys it while
    /// the wrapper or an executable made from it may, and nothing else calls
    /// on it while the wrapper does.
    pub unsafe fn from_raw(context: &Context, raw: CUgraph) -> Graph {
        Graph {
            inner: Arc::new(GraphInner::new(context, raw)),
        }
    }

    /// Wraps a graph another runtime owns and destroys: dropping the
    /// wrapper (and executables made through it) never destroys it. Calls
    /// through every borrowed wrapper, of any graph, take one process-wide
    /// lock, so two wrappers of one graph never call on it at once.
    ///
    /// # Safety
    ///
    /// `raw` is a valid graph of `context` until the wrapper and every
    /// executable made through it are gone; nothing else calls on it while
    /// the wrapper does.
    pub unsafe fn borrow_raw(context: &Context, raw: CUgraph) -> Graph {
        let mut inner = GraphInner::new(context, raw);
        inner.owned = false;
        Graph {
            inner: Arc::new(inner),
        }
    }

    /// The raw handle.
    pub fn raw(&self) -> CUgraph {
        self.inner.raw
    }

    /// A node of this graph that another runtime added, to name as a
    /// dependency.
    ///
    /// # Safety
    ///
    /// `raw` is a node of this graph.
    pub unsafe fn node_from_raw(&self, raw: CUgraphNode) -> GraphNode {
        GraphNode {
            raw,
            graph: self.inner.id,
        }
    }

    /// Adds a node that runs `copy` on a copy of `record` after
    /// `dependencies`. The graph owns the copy (on the heap).
    pub fn add_host_copy(
        &mut self,
        copy: HostCopy,
        record: Record<'static>,
        dependencies: &[GraphNode],
    ) -> Result<GraphNode, Error> {
        self.add_host_copy_from(SlotSource::Heap, copy, record, dependencies)
    }

    /// [`add_host_copy`](Self::add_host_copy) with the copy in a slot of `pool`.
    pub fn add_host_copy_in<const N: usize>(
        &mut self,
        pool: &'static RecordPool<N>,
        copy: HostCopy,
        record: Record<'static>,
        dependencies: &[GraphNode],
    ) -> Result<GraphNode, Error> {
        self.add_host_copy_from(SlotSource::Pool(pool), copy, record, dependencies)
    }

    fn add_host_copy_from(
        &mut self,
        source: SlotSource,
        copy: HostCopy,
        record: Record<'static>,
        dependencies: &[GraphNode],
    ) -> Result<GraphNode, Error> {
        let dependencies = self.own_nodes(dependencies)?;
        let slot = source.take(record.args(), copy)?;
        let _held = self.inner.enter()?;
        // SAFETY: the slot is ours to give; the graph's calls are ours.
        unsafe { give_slot_to_graph(self.inner.raw, slot) }?;
        // SAFETY: the graph keeps the slot until it and its executables are
        // gone; the `'static` record's ranges stay valid that long.
        let node = unsafe { self.add_node(copy.host_fn(), Slot::user_data(slot), &dependencies) }?;
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
    ) -> Result<GraphNode, Error> {
        let dependencies = self.own_nodes(dependencies)?;
        let _held = self.inner.enter()?;
        // SAFETY: forwarded to our caller.
        unsafe { self.add_node(f, user_data, &dependencies) }
    }

    /// The raw handles of `nodes`, all of which must be this graph's.
    fn own_nodes(&self, nodes: &[GraphNode]) -> Result<Vec<CUgraphNode>, Error> {
        nodes
            .iter()
            .map(|node| {
                if node.graph == self.inner.id {
                    Ok(node.raw)
                } else {
                    Err(Error::ForeignNode)
                }
            })
            .collect()
    }

    /// # Safety
    ///
    /// The caller holds the graph's call lock with the context bound, the
    /// dependencies are this graph's nodes, and `user_data` is valid for `f`
    /// as for [`add_host_fn`](Self::add_host_fn).
    unsafe fn add_node(
        &self,
        f: HostFn,
        user_data: *mut c_void,
        dependencies: &[CUgraphNode],
    ) -> Result<GraphNode, Error> {
        let params = CUDA_HOST_NODE_PARAMS {
            fn_: Some(f),
            userData: user_data,
        };
        let mut node: CUgraphNode = core::ptr::null_mut();
        // SAFETY: the dependencies are nodes of this graph (our caller); the
        // driver copies the parameters.
        unsafe {
            ffi::cuGraphAddHostNode(
                &mut node,
                self.inner.raw,
                dependencies.as_ptr(),
                dependencies.len(),
                &params,
            )
        }
        .ok()?;
        Ok(GraphNode {
            raw: node,
            graph: self.inner.id,
        })
    }

    /// An executable of the graph as it is now. It keeps the graph alive.
    pub fn instantiate(&self) -> Result<GraphExec, DriverError> {
        let mut raw: CUgraphExec = core::ptr::null_mut();
        {
            let _held = self.inner.enter()?;
            // SAFETY: writes one handle, destroyed in `GraphExec`'s `Drop`.
            unsafe { ffi::cuGraphInstantiateWithFlags(&mut raw, self.inner.raw, 0) }.ok()?;
        }
        Ok(GraphExec {
            graph: Arc::clone(&self.inner),
            raw,
            launches: 0,
            in_flight: VecDeque::new(),
            spare_events: Vec::new(),
            current: Vec::new(),
            retired: Vec::new(),
        })
    }
}

impl fmt::Debug for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Graph")
            .field("raw", &self.inner.raw)
            .field("id", &self.inner.id)
            .finish()
    }
}

/// Attaches an owned slot to a graph: a user object whose destructor frees
/// it, with the only reference moved into the graph.
///
/// # Safety
///
/// The caller owns `slot` and hands it over: on success the graph owns it,
/// on failure it is freed (now, or by the destructor of the released
/// object). No other thread calls on `graph` meanwhile (the graph's call
/// lock, or the capture lock for a graph being captured), and its context
/// is current.
pub(crate) unsafe fn give_slot_to_graph(
    graph: CUgraph,
    slot: NonNull<Slot>,
) -> Result<(), DriverError> {
    let mut object: ffi::CUuserObject = core::ptr::null_mut();
    // SAFETY: the destructor frees the slot, which stays allocated until then.
    let created = unsafe {
        ffi::cuUserObjectCreate(
            &mut object,
            Slot::user_data(slot),
            Some(owned::free_graph_owned),
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

/// How a stream capture treats potentially unsafe calls from other threads
/// (`CUstreamCaptureMode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaptureMode {
    /// Unsafe calls are refused on every thread while any global capture runs.
    Global,
    /// Unsafe calls are refused on the capturing thread only.
    ThreadLocal,
    /// Nothing is refused.
    Relaxed,
}

impl StreamRef<'_> {
    /// Starts capturing the stream's work into a graph.
    ///
    /// Refused with [`Error::ScopeOpen`] while a launch scope is open on the
    /// stream.
    pub fn begin_capture(&self, mode: CaptureMode) -> Result<(), Error> {
        let mode = match mode {
            CaptureMode::Global => CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
            CaptureMode::ThreadLocal => CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            CaptureMode::Relaxed => CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
        };
        let locked = capture::lock();
        if locked.has_scope(self.raw()) {
            return Err(Error::ScopeOpen);
        }
        self.context().bind()?;
        // SAFETY: the stream is alive.
        unsafe { ffi::cuStreamBeginCapture_v2(self.raw(), mode) }.ok()?;
        Ok(())
    }

    /// Ends the capture: the graph of everything launched since it began,
    /// owned records included.
    pub fn end_capture(&self) -> Result<Graph, DriverError> {
        let _locked = capture::lock();
        self.context().bind()?;
        let mut raw: CUgraph = core::ptr::null_mut();
        // SAFETY: writes one graph handle, which the returned `Graph` owns.
        unsafe { ffi::cuStreamEndCapture(self.raw(), &mut raw) }.ok()?;
        Ok(Graph {
            inner: Arc::new(GraphInner::new(self.context(), raw)),
        })
    }
}

/// A record this executable set on a node and still owns.
struct OwnedNodeRecord {
    node: CUgraphNode,
    slot: NonNull<Slot>,
    /// Launches queued before the record was set: it runs in later ones.
    set_after: u64,
}

/// A record replaced on its node: runs in launches `set_after + 1 ..= replaced_at`.
struct Retired {
    slot: NonNull<Slot>,
    set_after: u64,
    replaced_at: u64,
}

/// An executable graph, destroyed on drop. It keeps its graph alive.
pub struct GraphExec {
    graph: Arc<GraphInner>,
    raw: CUgraphExec,
    /// Launches queued so far; launch `k` is the `k`-th.
    launches: u64,
    /// Launches that may run records of ours and are not known to have
    /// finished: with an event, or `None` when the event failed (never
    /// known to finish: the records it may run are never freed).
    in_flight: VecDeque<(u64, Option<Event>)>,
    /// Events of finished launches, for reuse.
    spare_events: Vec<Event>,
    /// Records set on nodes here, one per node.
    current: Vec<OwnedNodeRecord>,
    /// Replaced records that a launch in flight may still run.
    retired: Vec<Retired>,
}

// SAFETY: handles and owned slots may be used from any thread; every method
// that changes the executable takes `&mut self`, and node calls hold the
// graph's call lock.
unsafe impl Send for GraphExec {}

impl GraphExec {
    /// Launches the executable on `stream`.
    ///
    /// Refused on a capturing stream ([`Error::Capturing`]), checked under
    /// the capture lock together with the launch: the captured copy of the
    /// executable's host nodes would point at records owned by this
    /// executable or by its graph's user objects, which the captured graph
    /// holds no reference to, so they could be freed while it still runs.
    ///
    /// Refused with [`Error::ContextMismatch`] on a stream of another
    /// context than the graph's.
    pub fn launch(&mut self, stream: StreamRef<'_>) -> Result<(), Error> {
        self.graph.context.expect_same(stream.context())?;
        let tracked = !self.current.is_empty();
        {
            let locked = capture::lock();
            if capture_graph(&locked, stream.context(), stream.raw())?.is_some() {
                return Err(Error::Capturing);
            }
            stream.context().bind()?;
            // SAFETY: both handles are alive.
            unsafe { ffi::cuGraphLaunch(self.raw, stream.raw()) }.ok()?;
            self.launches += 1;
            if tracked {
                // Under the lock: the stream cannot start capturing between
                // the launch and its event.
                self.track_launch(&locked, stream)?;
            }
        }
        self.free_finished();
        Ok(())
    }

    /// Records an event after the launch just queued on `stream`. If that
    /// fails, the launch stays in flight for good.
    fn track_launch(&mut self, locked: &CaptureState, stream: StreamRef<'_>) -> Result<(), Error> {
        let event = match self.spare_events.pop() {
            Some(event) => Ok(event),
            None => Event::ordering(&self.graph.context),
        };
        // The stream was seen not capturing under this hold of the lock.
        let recorded = event
            .map_err(Error::from)
            .and_then(|event| event.record_known(locked, stream, false).map(|()| event));
        match recorded {
            Ok(event) => {
                self.in_flight.push_back((self.launches, Some(event)));
                Ok(())
            }
            Err(error) => {
                self.in_flight.push_back((self.launches, None));
                Err(error)
            }
        }
    }

    /// Forgets launches whose events have completed, then frees every
    /// replaced record that no launch in flight may run.
    fn free_finished(&mut self) {
        let mut index = 0;
        while index < self.in_flight.len() {
            let finished = match &self.in_flight[index].1 {
                Some(event) => event.query().unwrap_or(false),
                None => false,
            };
            if finished {
                if let Some((_, Some(event))) = self.in_flight.remove(index) {
                    self.spare_events.push(event);
                }
            } else {
                index += 1;
            }
        }
        let in_flight = &self.in_flight;
        self.retired.retain(|retired| {
            if may_run(in_flight, retired.set_after, retired.replaced_at) {
                return true;
            }
            // SAFETY: every launch that may run the record has finished, and
            // the executable no longer points at it.
            unsafe { Slot::release(retired.slot) };
            false
        });
    }

    /// Makes `node` run `copy` on a copy of `record` from the next launch
    /// on. Launches already queued keep the record they had.
    /// [`Error::ForeignNode`] if `node` is not a node of this executable's graph.
    pub fn set_host_copy(
        &mut self,
        node: GraphNode,
        copy: HostCopy,
        record: Record<'static>,
    ) -> Result<(), Error> {
        self.set_host_copy_from(SlotSource::Heap, node, copy, record)
    }

    /// [`set_host_copy`](Self::set_host_copy) with the copy in a slot of `pool`.
    pub fn set_host_copy_in<const N: usize>(
        &mut self,
        pool: &'static RecordPool<N>,
        node: GraphNode,
        copy: HostCopy,
        record: Record<'static>,
    ) -> Result<(), Error> {
        self.set_host_copy_from(SlotSource::Pool(pool), node, copy, record)
    }

    fn set_host_copy_from(
        &mut self,
        source: SlotSource,
        node: GraphNode,
        copy: HostCopy,
        record: Record<'static>,
    ) -> Result<(), Error> {
        if node.graph != self.graph.id {
            return Err(Error::ForeignNode);
        }
        self.free_finished();
        let slot = source.take(record.args(), copy)?;
        let params = CUDA_HOST_NODE_PARAMS {
            fn_: Some(copy.host_fn()),
            userData: Slot::user_data(slot),
        };
        let set = self.graph.enter().and_then(|_held| {
            // SAFETY: the executable is alive, and the node is a node of its
            // graph, which it keeps alive; the slot stays allocated until no
            // launch of this executable may run it.
            unsafe { ffi::cuGraphExecHostNodeSetParams(self.raw, node.raw, &params) }.ok()
        });
        if let Err(error) = set {
            // SAFETY: the executable does not use the slot.
            unsafe { Slot::release(slot) };
            return Err(error.into());
        }
        let launches = self.launches;
        let replaced = self.current.iter_mut().find(|owned| owned.node == node.raw);
        match replaced {
            Some(owned) => {
                self.retired.push(Retired {
                    slot: owned.slot,
                    set_after: owned.set_after,
                    replaced_at: launches,
                });
                owned.slot = slot;
                owned.set_after = launches;
            }
            None => self.current.push(OwnedNodeRecord {
                node: node.raw,
                slot,
                set_after: launches,
            }),
        }
        self.free_finished();
        Ok(())
    }

    /// Records this executable owns now: set on nodes, or replaced and
    /// waiting for launches in flight.
    pub fn owned_records(&self) -> usize {
        self.current.len() + self.retired.len()
    }
}

/// Whether a launch in flight is one of launches `set_after + 1 ..= replaced_at`.
fn may_run(in_flight: &VecDeque<(u64, Option<Event>)>, set_after: u64, replaced_at: u64) -> bool {
    in_flight
        .iter()
        .any(|&(launch, _)| set_after < launch && launch <= replaced_at)
}

impl Drop for GraphExec {
    fn drop(&mut self) {
        let _ = self.graph.context.bind();
        // SAFETY: destroys the executable; launches in flight finish first
        // (the driver defers the release).
        let _ = unsafe { ffi::cuGraphExecDestroy(self.raw) };
        if self.current.is_empty() && self.retired.is_empty() {
            return;
        }
        // Wait for the launches that may run our records. One that fails
        // (the context failed) or was never tracked stays in flight.
        self.in_flight.retain(|(_, event)| match event {
            Some(event) => event.synchronize().is_err(),
            None => true,
        });
        let launches = self.launches;
        let current = self.current.drain(..).map(|owned| Retired {
            slot: owned.slot,
            set_after: owned.set_after,
            replaced_at: launches,
        });
        let mut records: Vec<Retired> = self.retired.drain(..).collect();
        records.extend(current);
        for record in records {
            if may_run(&self.in_flight, record.set_after, record.replaced_at) {
                // A host node may still be running it, or run it later.
                Slot::count_abandoned();
            } else {
                // SAFETY: every launch that may run the record has finished.
                unsafe { Slot::release(record.slot) };
            }
        }
    }
}

impl fmt::Debug for GraphExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GraphExec")
            .field("raw", &self.raw)
            .field("graph", &self.graph.id)
            .field("launches", &self.launches)
            .field("owned_records", &self.owned_records())
            .finish()
    }
}
