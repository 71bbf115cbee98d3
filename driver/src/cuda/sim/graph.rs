//! Stream capture, graphs, executables, and the references graphs hold on
//! user objects.
//!
//! A capture records ops of its streams as nodes of a new graph. A stream
//! joins a capture by waiting on an event recorded in it, and must be joined
//! back (the origin stream waits on an event recorded after its last node)
//! before the capture ends. Graph and executable objects are not thread-safe
//! in CUDA: two threads inside calls on one of them is recorded as misuse.

use core::ffi::{c_uint, c_ulonglong};
use std::collections::BTreeSet;
use std::format;
use std::vec::Vec;

use super::super::ffi::{
    CU_GRAPH_USER_OBJECT_MOVE, CUDA_HOST_NODE_PARAMS, CUgraph, CUgraphExec, CUgraphNode, CUstream,
    CUstreamCaptureMode, CUuserObject, CuResult,
};
use super::codes::{self, result};
use super::registry::{
    Capture, Exec, Graph, HostCall, Kind, Node, OpKind, SendPtr, State, Work, handle, id_of, lock,
};

/// `CU_STREAM_CAPTURE_MODE_GLOBAL` and `_RELAXED`, as the modes are kept.
const GLOBAL: u32 = 0;
const RELAXED: u32 = 2;

/// A short pause inside calls that are not thread-safe, so that overlapping
/// calls from two threads overlap long enough to be seen.
fn pause() {
    #[cfg(not(miri))]
    std::thread::sleep(core::time::Duration::from_micros(20));
    #[cfg(miri)]
    std::thread::yield_now();
}

impl State {
    /// A new graph in `ctx`.
    pub(super) fn new_graph(&mut self, ctx: u64) -> u64 {
        let id = self.new_id();
        let device = self.contexts[&ctx].device;
        self.graphs.insert(
            id,
            Graph {
                ctx,
                device,
                nodes: Vec::new(),
                objects: Default::default(),
                busy: 0,
            },
        );
        id
    }

    /// Adds a node to `graph` (dependencies already checked).
    pub(super) fn add_node(&mut self, graph: u64, deps: Vec<u64>, work: Work) -> u64 {
        let id = self.new_id();
        self.nodes.insert(id, Node { graph, deps, work });
        self.graphs
            .get_mut(&graph)
            .expect("a live graph")
            .nodes
            .push(id);
        id
    }

    /// Destroys `graph`: its nodes become invalid, its user object
    /// references go. Executables made from it keep their own.
    pub(super) fn destroy_graph(&mut self, graph: u64) {
        let entry = self.graphs.remove(&graph).expect("a live graph");
        for node in entry.nodes {
            self.nodes.remove(&node);
            self.bury(node, Kind::Node, entry.device);
        }
        self.bury(graph, Kind::Graph, entry.device);
        self.release_objects(entry.objects);
    }

    /// If `stream` is capturing, adds `work` as a node after the stream's
    /// last one and returns `true`; `false` if it is not capturing.
    pub(super) fn capture_work(&mut self, stream: u64, work: Work) -> Result<bool, u32> {
        let Some(capture) = self.streams[&stream].capture else {
            return Ok(false);
        };
        let Capture {
            graph, invalidated, ..
        } = self.captures[&capture];
        if invalidated {
            return Err(codes::STREAM_CAPTURE_INVALIDATED);
        }
        if self.graphs[&graph].busy > 0 {
            let device = self.graphs[&graph].device;
            self.violation(
                Some(device),
                format!(
                    "stream capture adds a node to graph {graph:#x} while another thread is \
                     inside a call on that graph"
                ),
            );
        }
        let deps = core::mem::take(&mut self.streams.get_mut(&stream).expect("live").tail);
        let node = self.add_node(graph, deps, work);
        self.streams.get_mut(&stream).expect("live").tail = std::vec![node];
        Ok(true)
    }

    /// Invalidates `capture`: its streams stay in it until it ends, and every
    /// capture call on them fails.
    pub(super) fn invalidate_capture(&mut self, capture: u64) {
        if let Some(entry) = self.captures.get_mut(&capture) {
            entry.invalidated = true;
        }
    }

    /// A sync or query on a capturing stream: the capture is invalidated and
    /// the call refused, as the driver does.
    pub(super) fn refuse_if_capturing(&mut self, stream: u64) -> Result<(), u32> {
        match self.streams[&stream].capture {
            Some(capture) => {
                self.invalidate_capture(capture);
                Err(codes::STREAM_CAPTURE_UNSUPPORTED)
            }
            None => Ok(()),
        }
    }

    /// A potentially unsafe call (a free, a module unload) from the calling
    /// thread, in its capture mode (`cuThreadExchangeStreamCaptureMode`):
    /// global prohibits it while this thread captures in any mode but
    /// relaxed or any thread captures in global mode; thread-local only
    /// while this thread captures in a mode but relaxed; relaxed never. A
    /// prohibited call is refused and invalidates the captures it
    /// concerns, as the driver does. Other threads' captures count on the
    /// device of the thread's current context only, where the driver
    /// counts every one in the process: the simulator's tests run side by
    /// side, each on its own device. Only frees and unloads are modelled;
    /// allocations and loads, as prohibited, are not.
    pub(super) fn refuse_unsafe_call(&mut self) -> Result<(), u32> {
        let mode = super::context::thread_capture_mode();
        let here = std::thread::current().id();
        let device = self
            .contexts
            .get(&super::registry::current())
            .map(|c| c.device);
        let broken: Vec<u64> = self
            .captures
            .iter()
            .filter(|(_, c)| {
                let own = c.thread == here && c.mode != RELAXED;
                let global = mode == GLOBAL
                    && c.mode == GLOBAL
                    && Some(self.contexts[&c.ctx].device) == device;
                mode != RELAXED && (own || global)
            })
            .map(|(&id, _)| id)
            .collect();
        if broken.is_empty() {
            return Ok(());
        }
        for capture in broken {
            self.invalidate_capture(capture);
        }
        Err(codes::STREAM_CAPTURE_UNSUPPORTED)
    }

    /// Ends `capture`: its streams leave it.
    fn finish_capture(&mut self, capture: u64) -> Capture {
        let entry = self.captures.remove(&capture).expect("a live capture");
        for stream in &entry.streams {
            if let Some(s) = self.streams.get_mut(stream) {
                s.capture = None;
                s.tail.clear();
            }
        }
        entry
    }

    /// `nodes` and every node they depend on, transitively.
    fn ancestors(&self, nodes: &[u64]) -> BTreeSet<u64> {
        let mut seen = BTreeSet::new();
        let mut todo: Vec<u64> = nodes.to_vec();
        while let Some(node) = todo.pop() {
            if seen.insert(node)
                && let Some(entry) = self.nodes.get(&node)
            {
                todo.extend_from_slice(&entry.deps);
            }
        }
        seen
    }

    /// Looks up a live stream and passes the gate for a call on it.
    pub(super) fn stream_call(&mut self, entry: &'static str, raw: CUstream) -> Result<u64, u32> {
        let stream = self.stream(entry, id_of(raw))?;
        let ctx = self.streams[&stream].ctx;
        self.enter(ctx, entry, true)?;
        Ok(stream)
    }

    /// Looks up a live executable and passes the gate for a call on it.
    fn exec_call(&mut self, entry: &'static str, raw: CUgraphExec) -> Result<u64, u32> {
        let exec = self.exec(entry, id_of(raw))?;
        let ctx = self.execs[&exec].ctx;
        self.enter(ctx, entry, true)?;
        Ok(exec)
    }
}

/// An explicit call on a graph: looked up, gated, marked busy while `body`
/// runs (with a pause first if `pause_inside`), overlap recorded as misuse.
fn explicit_call(
    entry: &'static str,
    raw: CUgraph,
    pause_inside: bool,
    body: impl FnOnce(&mut State, u64) -> Result<(), u32>,
) -> CuResult {
    let mut state = lock();
    let graph = match state.graph(entry, id_of(raw)) {
        Ok(graph) => graph,
        Err(code) => return CuResult(code),
    };
    let ctx = state.graphs[&graph].ctx;
    if let Err(code) = state.enter(ctx, entry, true) {
        return CuResult(code);
    }
    let entered = state.graphs.get_mut(&graph).expect("checked");
    entered.busy += 1;
    if entered.busy > 1 {
        let device = entered.device;
        state.violation(
            Some(device),
            format!("{entry}: two threads inside calls on graph {graph:#x} at once"),
        );
    }
    if pause_inside {
        drop(state);
        pause();
        state = lock();
    }
    let outcome = if state.graphs.contains_key(&graph) {
        body(&mut state, graph)
    } else {
        Err(state.bad_handle(entry, Kind::Graph, graph))
    };
    if let Some(entered) = state.graphs.get_mut(&graph) {
        entered.busy -= 1;
    }
    result(outcome)
}

/// `cuStreamBeginCapture_v2`: the stream captures into a new graph. The
/// mode decides which unsafe calls break it ([`State::refuse_unsafe_call`]).
///
/// # Safety
///
/// Nothing: it takes handles only, each checked (`unsafe` as the entry
/// point it stands in for).
pub(crate) unsafe fn cuStreamBeginCapture_v2(
    stream: CUstream,
    mode: CUstreamCaptureMode,
) -> CuResult {
    const ENTRY: &str = "cuStreamBeginCapture_v2";
    let mut state = lock();
    result((|| {
        let stream = state.stream_call(ENTRY, stream)?;
        let ctx = state.streams[&stream].ctx;
        if state.contexts[&ctx].default_stream == stream {
            return Err(codes::STREAM_CAPTURE_UNSUPPORTED);
        }
        if state.streams[&stream].capture.is_some() {
            return Err(codes::ILLEGAL_STATE);
        }
        let graph = state.new_graph(ctx);
        let capture = state.new_id();
        state.captures.insert(
            capture,
            Capture {
                ctx,
                graph,
                origin: stream,
                streams: std::vec![stream],
                invalidated: false,
                mode: mode as u32,
                thread: std::thread::current().id(),
            },
        );
        let s = state.streams.get_mut(&stream).expect("checked");
        s.capture = Some(capture);
        s.tail.clear();
        Ok(())
    })())
}

/// `cuStreamEndCapture`: the captured graph, or `CUDA_ERROR_STREAM_CAPTURE_UNJOINED`
/// if a stream that joined was not joined back, or
/// `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`; on failure the graph is destroyed
/// and `*graph` is null.
///
/// # Safety
///
/// `graph` is writable.
pub(crate) unsafe fn cuStreamEndCapture(stream: CUstream, graph: *mut CUgraph) -> CuResult {
    const ENTRY: &str = "cuStreamEndCapture";
    let mut state = lock();
    result((|| {
        if graph.is_null() {
            return Err(codes::INVALID_VALUE);
        }
        let stream = state.stream_call(ENTRY, stream)?;
        let Some(capture) = state.streams[&stream].capture else {
            return Err(codes::ILLEGAL_STATE);
        };
        if state.captures[&capture].origin != stream {
            return Err(codes::STREAM_CAPTURE_UNMATCHED);
        }
        let joined_back = state.ancestors(&state.streams[&stream].tail);
        let unjoined = state.captures[&capture].streams[1..].iter().any(|s| {
            state
                .streams
                .get(s)
                .is_some_and(|s| !s.tail.iter().all(|n| joined_back.contains(n)))
        });
        let entry = state.finish_capture(capture);
        let failure = if entry.invalidated {
            Some(codes::STREAM_CAPTURE_INVALIDATED)
        } else if unjoined {
            Some(codes::STREAM_CAPTURE_UNJOINED)
        } else {
            None
        };
        let out = match failure {
            Some(_) => {
                state.destroy_graph(entry.graph);
                core::ptr::null_mut()
            }
            None => handle(entry.graph),
        };
        // SAFETY: non-null and writable (our caller).
        unsafe { graph.write(out) };
        failure.map_or(Ok(()), Err)
    })())
}

/// `cuStreamGetCaptureInfo_v2`: status (0 none, 1 active, 2 invalidated),
/// the capture's id and, while active, its graph and the stream's current
/// dependencies (valid until the next call on the stream).
///
/// # Safety
///
/// `status` is writable; the other outputs are null or writable.
pub(crate) unsafe fn cuStreamGetCaptureInfo_v2(
    stream: CUstream,
    status: *mut c_uint,
    id: *mut u64,
    graph: *mut CUgraph,
    dependencies: *mut *const CUgraphNode,
    dependency_count: *mut usize,
) -> CuResult {
    const ENTRY: &str = "cuStreamGetCaptureInfo_v2";
    let mut state = lock();
    result((|| {
        if status.is_null() {
            return Err(codes::INVALID_VALUE);
        }
        let stream = state.stream_call(ENTRY, stream)?;
        let capture = state.streams[&stream].capture;
        let (code, capture_graph) = match capture.map(|c| (c, &state.captures[&c])) {
            None => (0, None),
            Some((_, c)) if c.invalidated => (2, None),
            Some((_, c)) => (1, Some(c.graph)),
        };
        let handed: std::boxed::Box<[SendPtr<core::ffi::c_void>]> = state.streams[&stream]
            .tail
            .iter()
            .map(|&n| SendPtr(handle(n)))
            .collect();
        // SAFETY: each output is null or writable (our caller).
        unsafe {
            status.write(code);
            if let (Some(c), false) = (capture, id.is_null()) {
                id.write(c);
            }
            if !graph.is_null() {
                graph.write(capture_graph.map_or(core::ptr::null_mut(), handle));
            }
            if !dependency_count.is_null() {
                dependency_count.write(if code == 1 { handed.len() } else { 0 });
            }
            if !dependencies.is_null() {
                // `SendPtr<c_void>` is a transparent `*mut c_void`, as a
                // node handle is a pointer.
                dependencies.write(handed.as_ptr().cast::<CUgraphNode>());
            }
        }
        state.streams.get_mut(&stream).expect("checked").handed_out = handed;
        Ok(())
    })())
}

/// `cuGraphCreate`, in the current context.
///
/// # Safety
///
/// `graph` is writable.
pub(crate) unsafe fn cuGraphCreate(graph: *mut CUgraph, flags: c_uint) -> CuResult {
    const ENTRY: &str = "cuGraphCreate";
    let mut state = lock();
    result((|| {
        let ctx = state.current_context(ENTRY)?;
        state.enter(ctx, ENTRY, false)?;
        if graph.is_null() || flags != 0 {
            return Err(codes::INVALID_VALUE);
        }
        let id = state.new_graph(ctx);
        // SAFETY: non-null and writable (our caller).
        unsafe { graph.write(handle(id)) };
        Ok(())
    })())
}

/// `cuGraphDestroy`.
///
/// # Safety
///
/// Nothing: it takes handles only, each checked (`unsafe` as the entry
/// point it stands in for).
pub(crate) unsafe fn cuGraphDestroy(graph: CUgraph) -> CuResult {
    explicit_call("cuGraphDestroy", graph, false, |state, graph| {
        if state.captures.values().any(|c| c.graph == graph) {
            let device = state.graphs[&graph].device;
            state.violation(
                Some(device),
                format!("cuGraphDestroy: graph {graph:#x} is being captured into"),
            );
            return Err(codes::ILLEGAL_STATE);
        }
        state.destroy_graph(graph);
        Ok(())
    })
}

/// `cuGraphAddHostNode`: every dependency must be a node of this graph.
///
/// # Safety
///
/// `node` and `params` valid; `dependencies` valid for `dependency_count`
/// handles; the host function may run on its data whenever an executable
/// made from the graph is launched.
pub(crate) unsafe fn cuGraphAddHostNode(
    node: *mut CUgraphNode,
    graph: CUgraph,
    dependencies: *const CUgraphNode,
    dependency_count: usize,
    params: *const CUDA_HOST_NODE_PARAMS,
) -> CuResult {
    const ENTRY: &str = "cuGraphAddHostNode";
    explicit_call(ENTRY, graph, true, |state, graph| {
        if node.is_null() || params.is_null() || (dependency_count > 0 && dependencies.is_null()) {
            return Err(codes::INVALID_VALUE);
        }
        // SAFETY: valid for reads (our caller).
        let params = unsafe { params.read() };
        let Some(f) = params.fn_ else {
            return Err(codes::INVALID_VALUE);
        };
        let deps: &[CUgraphNode] = if dependency_count == 0 {
            &[]
        } else {
            // SAFETY: `dependency_count` readable handles (our caller).
            unsafe { core::slice::from_raw_parts(dependencies, dependency_count) }
        };
        let mut ids = Vec::with_capacity(deps.len());
        for &dep in deps {
            let dep = id_of(dep);
            match state.nodes.get(&dep) {
                Some(entry) if entry.graph == graph => ids.push(dep),
                Some(entry) => {
                    let other = entry.graph;
                    let device = state.graphs[&graph].device;
                    state.violation(
                        Some(device),
                        format!(
                            "{ENTRY}: dependency {dep:#x} is a node of graph {other:#x}, not of \
                             {graph:#x}"
                        ),
                    );
                    return Err(codes::INVALID_VALUE);
                }
                None => return Err(state.bad_handle(ENTRY, Kind::Node, dep)),
            }
        }
        let work = Work::Host(HostCall {
            f,
            user_data: SendPtr(params.userData),
        });
        let id = state.add_node(graph, ids, work);
        // SAFETY: non-null and writable (our caller).
        unsafe { node.write(handle(id)) };
        Ok(())
    })
}

/// `cuGraphRetainUserObject`: the graph takes `count` references, moved
/// from the caller's with `CU_GRAPH_USER_OBJECT_MOVE`.
///
/// # Safety
///
/// With the move flag, the caller owns `count` references.
pub(crate) unsafe fn cuGraphRetainUserObject(
    graph: CUgraph,
    object: CUuserObject,
    count: c_uint,
    flags: c_uint,
) -> CuResult {
    const ENTRY: &str = "cuGraphRetainUserObject";
    explicit_call(ENTRY, graph, true, |state, graph| {
        let object = state.object(ENTRY, id_of(object))?;
        if count == 0 || flags & !CU_GRAPH_USER_OBJECT_MOVE != 0 {
            return Err(codes::INVALID_VALUE);
        }
        if flags & CU_GRAPH_USER_OBJECT_MOVE == 0 {
            state.objects.get_mut(&object).expect("checked").refs += count;
        }
        let held = state.graphs.get_mut(&graph).expect("checked");
        *held.objects.entry(object).or_insert(0) += count;
        Ok(())
    })
}

/// `cuGraphInstantiateWithFlags`: an executable with a snapshot of the
/// graph's nodes and their parameters, holding the graph's user objects.
///
/// # Safety
///
/// `exec` is writable.
pub(crate) unsafe fn cuGraphInstantiateWithFlags(
    exec: *mut CUgraphExec,
    graph: CUgraph,
    _flags: c_ulonglong,
) -> CuResult {
    explicit_call(
        "cuGraphInstantiateWithFlags",
        graph,
        false,
        |state, graph| {
            if exec.is_null() {
                return Err(codes::INVALID_VALUE);
            }
            let source = &state.graphs[&graph];
            let nodes = source
                .nodes
                .iter()
                .map(|n| (*n, state.nodes[n].work))
                .collect();
            let objects = source.objects.clone();
            let (ctx, device) = (source.ctx, source.device);
            state.retain_objects(&objects);
            let id = state.new_id();
            state.execs.insert(
                id,
                Exec {
                    ctx,
                    device,
                    graph,
                    nodes,
                    objects,
                    in_flight: 0,
                    destroyed: false,
                },
            );
            // SAFETY: non-null and writable (our caller).
            unsafe { exec.write(handle(id)) };
            Ok(())
        },
    )
}

/// `cuGraphLaunch`: queues the nodes' work with the executable's parameters
/// as they are now. On a capturing stream, the nodes are captured instead
/// (as copies; the captured graph takes no user object references).
///
/// # Safety
///
/// Handles only, each checked; the host functions' data must be valid when they run.
pub(crate) unsafe fn cuGraphLaunch(exec: CUgraphExec, stream: CUstream) -> CuResult {
    const ENTRY: &str = "cuGraphLaunch";
    let mut state = lock();
    result((|| {
        let exec = state.exec_call(ENTRY, exec)?;
        let stream = state.stream(ENTRY, id_of(stream))?;
        let (ctx, device) = (state.execs[&exec].ctx, state.execs[&exec].device);
        if state.streams[&stream].ctx != ctx {
            state.violation(
                Some(device),
                format!("{ENTRY}: executable {exec:#x} launched on a stream of another context"),
            );
            return Err(codes::INVALID_CONTEXT);
        }
        let works: Vec<Work> = state.execs[&exec].nodes.iter().map(|(_, w)| *w).collect();
        for work in works {
            if !state.capture_work(stream, work)? {
                state.enqueue(stream, OpKind::Work(work), Some(exec));
            }
        }
        Ok(())
    })())
}

/// `cuGraphExecDestroy`: the handle is invalid at once; the executable (and
/// its user object references) goes once its queued launches have run.
///
/// # Safety
///
/// Nothing: it takes handles only, each checked (`unsafe` as the entry
/// point it stands in for).
pub(crate) unsafe fn cuGraphExecDestroy(exec: CUgraphExec) -> CuResult {
    const ENTRY: &str = "cuGraphExecDestroy";
    let mut state = lock();
    result((|| {
        let exec = state.exec_call(ENTRY, exec)?;
        let entry = state.execs.get_mut(&exec).expect("checked");
        entry.destroyed = true;
        let (device, idle) = (entry.device, entry.in_flight == 0);
        state.bury(exec, Kind::Exec, device);
        if idle {
            state.free_exec(exec);
        }
        Ok(())
    })())
}

/// `cuGraphExecHostNodeSetParams`: `node` must be a live host node of the
/// graph the executable came from. Launches already queued keep the
/// parameters they had.
///
/// # Safety
///
/// `params` is readable; the new host function may run on its data at every
/// later launch.
pub(crate) unsafe fn cuGraphExecHostNodeSetParams(
    exec: CUgraphExec,
    node: CUgraphNode,
    params: *const CUDA_HOST_NODE_PARAMS,
) -> CuResult {
    const ENTRY: &str = "cuGraphExecHostNodeSetParams";
    let mut state = lock();
    result((|| {
        let exec = state.exec_call(ENTRY, exec)?;
        if params.is_null() {
            return Err(codes::INVALID_VALUE);
        }
        // SAFETY: readable (our caller).
        let params = unsafe { params.read() };
        let node = id_of(node);
        let Some(entry) = state.nodes.get(&node) else {
            return Err(state.bad_handle(ENTRY, Kind::Node, node));
        };
        let (graph, device) = (state.execs[&exec].graph, state.execs[&exec].device);
        if entry.graph != graph {
            let other = entry.graph;
            state.violation(
                Some(device),
                format!(
                    "{ENTRY}: node {node:#x} belongs to graph {other:#x}, the executable to \
                     {graph:#x}"
                ),
            );
            return Err(codes::INVALID_VALUE);
        }
        let (Some(f), Work::Host(_)) = (params.fn_, entry.work) else {
            return Err(codes::INVALID_VALUE);
        };
        let entry = state.execs.get_mut(&exec).expect("checked");
        if let Some((_, work)) = entry.nodes.iter_mut().find(|(n, _)| *n == node) {
            *work = Work::Host(HostCall {
                f,
                user_data: SendPtr(params.userData),
            });
        }
        Ok(())
    })())
}
