//! The simulator's state: a registry per kind of handle, behind one lock.
//!
//! Handles are ids (never pointers to state), unique across kinds for the
//! life of the process, so a destroyed or mistyped handle is recognized and
//! reported instead of being undefined behaviour. The call gate
//! ([`State::enter`]) is what every entry point passes before it acts.

use core::alloc::Layout;
use core::cell::Cell;
use core::ffi::c_void;
use std::collections::{BTreeMap, VecDeque};
use std::format;
use std::string::String;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Instant;
use std::vec::Vec;

use super::codes;

/// The state, and the condition variable every waiter of the simulator
/// (workers, synchronizing calls, `drain`) waits on for any change.
static STATE: Mutex<State> = Mutex::new(State::new());
static CHANGED: Condvar = Condvar::new();

pub(super) type Guard = MutexGuard<'static, State>;

pub(super) fn lock() -> Guard {
    STATE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Waits for the next change; the lock is released meanwhile.
pub(super) fn wait(guard: Guard) -> Guard {
    CHANGED.wait(guard).unwrap_or_else(PoisonError::into_inner)
}

/// Waits for the next change or for `timeout`, whichever comes first: for
/// a worker whose ops wait for memory that plain CPU stores change, which
/// notify nobody.
pub(super) fn wait_timeout(guard: Guard, timeout: core::time::Duration) -> Guard {
    CHANGED
        .wait_timeout(guard, timeout)
        .unwrap_or_else(PoisonError::into_inner)
        .0
}

/// Wakes every waiter: call after any change a waiter may be waiting for.
pub(super) fn notify() {
    CHANGED.notify_all();
}

/// A raw pointer kept in the state or handed to another thread. The
/// simulator only stores and forwards it; the driver's contract (the
/// caller's) says when it may be used.
#[repr(transparent)]
#[derive(Debug, PartialEq, Eq)]
pub(super) struct SendPtr<T>(pub(super) *mut T);

impl<T> Clone for SendPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for SendPtr<T> {}

// SAFETY: a plain address; every use is justified where it is dereferenced.
unsafe impl<T> Send for SendPtr<T> {}

/// A host function with its argument, as a node or an op runs it.
#[derive(Clone, Copy, Debug)]
pub(super) struct HostCall {
    pub(super) f: unsafe extern "C" fn(*mut c_void),
    pub(super) user_data: SendPtr<c_void>,
}

/// Which side of a copy is device memory (checked when the copy runs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum DeviceSide {
    Dst,
    Src,
    /// Both: a kernel's copy within device memory.
    Both,
}

/// A copy of `bytes` bytes; one side is device memory, or both.
#[derive(Clone, Copy, Debug)]
pub(super) struct MemCopy {
    pub(super) dst: SendPtr<u8>,
    pub(super) src: SendPtr<u8>,
    pub(super) bytes: usize,
    pub(super) device_side: DeviceSide,
}

impl MemCopy {
    /// Whether the copy touches `[start, start + len)`.
    pub(super) fn touches(&self, start: usize, len: usize) -> bool {
        let overlaps = |p: *mut u8| {
            let a = p.addr();
            a < start.saturating_add(len) && start < a.saturating_add(self.bytes)
        };
        overlaps(self.dst.0) || overlaps(self.src.0)
    }
}

/// What a graph node does.
#[derive(Clone, Copy, Debug)]
pub(super) enum Work {
    Host(HostCall),
    Copy(MemCopy),
}

/// What a queued op does when the context's worker runs it.
#[derive(Clone, Copy, Debug)]
pub(super) enum OpKind {
    Work(Work),
    /// Marks an event complete (and stamps its time).
    Record {
        event: u64,
    },
    /// `cuStreamWaitValue32_v2` with `CU_STREAM_WAIT_VALUE_GEQ`: runs (doing
    /// nothing) once the u32 at host address `addr`, in a pinned
    /// allocation, is at or past `value`, cyclically: `(int32_t)(*addr -
    /// value) >= 0`.
    WaitValue {
        addr: usize,
        value: u32,
    },
}

/// One unit of work in a context's queue.
#[derive(Debug)]
pub(super) struct Op {
    pub(super) seq: u64,
    /// The stream it was queued on (which may be destroyed since).
    pub(super) stream: u64,
    pub(super) kind: OpKind,
    /// The executable whose launch this op belongs to.
    pub(super) exec: Option<u64>,
    /// Ops (event records) it was made to wait for through
    /// `cuStreamWaitEvent`, still queued or running when it was queued.
    pub(super) deps: Vec<u64>,
}

/// One simulated device; its ordinal is its index.
#[derive(Debug, Default)]
pub(super) struct Device {
    pub(super) retains: u32,
    /// The live primary context.
    pub(super) context: Option<u64>,
    pub(super) held: bool,
    pub(super) host_fns_run: u64,
    pub(super) host_fns_skipped: u64,
    pub(super) destructors_run: u64,
    pub(super) destructors_pending: usize,
    pub(super) faults: Vec<Fault>,
    pub(super) batch_copy_calls: u64,
    pub(super) async_copy_calls: u64,
    pub(super) stream_waits: u64,
    pub(super) wait_value_ops: u64,
    pub(super) event_records: u64,
    pub(super) kernel_launches: u64,
    /// `limit_queue`: calls that queue work wait while the context holds
    /// this many ops not started.
    pub(super) queue_limit: Option<usize>,
    /// `refuse_batch_copies`: the batch copy answers
    /// `CUDA_ERROR_NOT_SUPPORTED`.
    pub(super) refuses_batch_copies: bool,
    /// `refuse_stream_memory_waits`: `cuStreamWaitValue32_v2` answers
    /// `CUDA_ERROR_NOT_SUPPORTED`.
    pub(super) refuses_stream_memory_waits: bool,
}

/// An injected failure: the `remaining`-th next call of `entry` fails.
#[derive(Debug)]
pub(super) struct Fault {
    pub(super) entry: &'static str,
    pub(super) remaining: u32,
    pub(super) code: u32,
}

/// A primary context and its queue of ops.
#[derive(Debug)]
pub(super) struct Context {
    pub(super) device: usize,
    pub(super) sticky: Option<u32>,
    /// Ops not yet started, in submission order (so sorted by `seq`); the
    /// worker takes the first one that may run, not always the front.
    pub(super) queue: VecDeque<Op>,
    /// The op the worker runs now: its sequence number and what it does.
    pub(super) running: Option<(u64, OpKind)>,
    /// Sequence number of the last op queued. An op has run once it was
    /// submitted and is neither queued nor running.
    pub(super) submitted: u64,
    /// The legacy default stream (`NULL`).
    pub(super) default_stream: u64,
    /// The last retain went: the worker ends after the op it runs now, and
    /// the context is destroyed once it has.
    pub(super) closing: bool,
}

#[derive(Debug)]
pub(super) struct Stream {
    pub(super) ctx: u64,
    pub(super) device: usize,
    /// Sequence number of the stream's last queued op (0: none).
    pub(super) last_seq: u64,
    /// Event records it was made to wait for since its last op: its next
    /// op waits for them too, and so does a synchronize of it.
    pub(super) waits: Vec<u64>,
    pub(super) capture: Option<u64>,
    /// While capturing: the nodes the stream's next node depends on.
    pub(super) tail: Vec<u64>,
    /// What the last `cuStreamGetCaptureInfo_v2` handed out as dependencies;
    /// valid until the next call on the stream, as in the driver.
    pub(super) handed_out: std::boxed::Box<[SendPtr<c_void>]>,
}

#[derive(Debug)]
pub(super) struct Event {
    pub(super) ctx: u64,
    pub(super) device: usize,
    pub(super) timing: bool,
    /// Sequence number of the last record's op.
    pub(super) record_seq: Option<u64>,
    /// When the last record's op ran.
    pub(super) stamp: Option<Instant>,
    /// Recorded in a capture: the capture, and the nodes it stands for.
    pub(super) captured: Option<(u64, Vec<u64>)>,
}

#[derive(Debug)]
pub(super) struct Capture {
    pub(super) ctx: u64,
    pub(super) graph: u64,
    pub(super) origin: u64,
    /// Every stream in the capture, the origin first.
    pub(super) streams: Vec<u64>,
    pub(super) invalidated: bool,
    /// The mode it began in (`CUstreamCaptureMode`) and the thread that
    /// began it: which threads' unsafe calls break it.
    pub(super) mode: u32,
    pub(super) thread: std::thread::ThreadId,
}

#[derive(Debug)]
pub(super) struct Graph {
    pub(super) ctx: u64,
    pub(super) device: usize,
    pub(super) nodes: Vec<u64>,
    /// User objects and the references the graph holds on each.
    pub(super) objects: BTreeMap<u64, u32>,
    /// Threads inside an explicit call on the graph now.
    pub(super) busy: u32,
}

#[derive(Debug)]
pub(super) struct Node {
    pub(super) graph: u64,
    pub(super) deps: Vec<u64>,
    pub(super) work: Work,
}

#[derive(Debug)]
pub(super) struct Exec {
    pub(super) ctx: u64,
    pub(super) device: usize,
    /// The graph it was instantiated from (may be destroyed since).
    pub(super) graph: u64,
    /// The graph's nodes and their parameters as this executable runs them.
    pub(super) nodes: Vec<(u64, Work)>,
    pub(super) objects: BTreeMap<u64, u32>,
    /// Ops of its launches queued or running.
    pub(super) in_flight: usize,
    /// Destroyed by the user; freed once `in_flight` is zero.
    pub(super) destroyed: bool,
}

#[derive(Debug)]
pub(super) struct UserObject {
    pub(super) device: usize,
    pub(super) refs: u32,
    pub(super) ptr: SendPtr<c_void>,
    pub(super) destroy: unsafe extern "C" fn(*mut c_void),
}

/// A loaded module (`cuModuleLoadData`): the gather kernel's image.
#[derive(Debug)]
pub(super) struct Module {
    pub(super) ctx: u64,
    pub(super) device: usize,
    /// Per launch of one of its functions not known to have run: the
    /// sequence number of the launch's last op (a launch's ops are all on
    /// one stream, so they run in order).
    pub(super) launches: Vec<u64>,
}

/// A function of a module (`cuModuleGetFunction`).
#[derive(Debug)]
pub(super) struct Function {
    pub(super) module: u64,
}

/// Memory the simulator allocated: really allocated, really freed.
#[derive(Debug)]
pub(super) struct Allocation {
    pub(super) ctx: u64,
    pub(super) device: usize,
    pub(super) ptr: SendPtr<u8>,
    pub(super) layout: Layout,
}

#[derive(Debug)]
pub(super) struct Registration {
    pub(super) ctx: u64,
    pub(super) device: usize,
    pub(super) len: usize,
}

/// A destructor waiting for the destructor thread.
#[derive(Debug)]
pub(super) struct Destructor {
    pub(super) device: usize,
    pub(super) call: HostCall,
}

/// Kinds of handles, for messages and for recognizing destroyed ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Context,
    Stream,
    Event,
    Graph,
    Node,
    Exec,
    UserObject,
    Module,
    Function,
}

impl Kind {
    pub(super) fn name(self) -> &'static str {
        match self {
            Kind::Context => "context",
            Kind::Stream => "stream",
            Kind::Event => "event",
            Kind::Graph => "graph",
            Kind::Node => "graph node",
            Kind::Exec => "graph executable",
            Kind::UserObject => "user object",
            Kind::Module => "module",
            Kind::Function => "function",
        }
    }
}

#[derive(Debug)]
pub(super) struct State {
    next_id: u64,
    pub(super) devices: Vec<Device>,
    pub(super) contexts: BTreeMap<u64, Context>,
    pub(super) streams: BTreeMap<u64, Stream>,
    pub(super) events: BTreeMap<u64, Event>,
    pub(super) captures: BTreeMap<u64, Capture>,
    pub(super) graphs: BTreeMap<u64, Graph>,
    pub(super) nodes: BTreeMap<u64, Node>,
    pub(super) execs: BTreeMap<u64, Exec>,
    pub(super) objects: BTreeMap<u64, UserObject>,
    pub(super) modules: BTreeMap<u64, Module>,
    pub(super) functions: BTreeMap<u64, Function>,
    /// By address.
    pub(super) host_allocations: BTreeMap<usize, Allocation>,
    pub(super) device_allocations: BTreeMap<usize, Allocation>,
    pub(super) registrations: BTreeMap<usize, Registration>,
    /// Staging copies of pageable sources of `cuMemcpyHtoD_v2`, by context
    /// and sequence number of the queued copy that reads them: freed when
    /// it has run or been dropped.
    pub(super) staged: BTreeMap<(u64, u64), Vec<u8>>,
    /// Destroyed handles: their kind and device.
    pub(super) dead: BTreeMap<u64, (Kind, usize)>,
    pub(super) violations: Vec<(Option<usize>, String)>,
    pub(super) destructors: VecDeque<Destructor>,
    /// Whether the destructor thread is running, and its handle.
    pub(super) destructor_thread: bool,
    pub(super) destructor_handle: Option<JoinHandle<()>>,
    /// Each live context's worker thread.
    pub(super) workers: BTreeMap<u64, JoinHandle<()>>,
}

std::thread_local! {
    /// The calling thread's current context (0: none).
    static CURRENT: Cell<u64> = const { Cell::new(0) };
    /// Whether the calling thread is a worker or destructor thread, where
    /// driver calls are not permitted.
    static DRIVER_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// The calling thread's current context id (0: none).
pub(super) fn current() -> u64 {
    CURRENT.with(Cell::get)
}

pub(super) fn set_current(ctx: u64) {
    CURRENT.with(|c| c.set(ctx));
}

/// Marks the calling thread as one of the simulator's own.
pub(super) fn mark_driver_thread() {
    DRIVER_THREAD.with(|c| c.set(true));
}

/// Handle values: ids as addresses without provenance (never dereferenced).
pub(super) fn handle<T>(id: u64) -> *mut T {
    core::ptr::without_provenance_mut(id as usize)
}

pub(super) fn id_of<T>(handle: *mut T) -> u64 {
    handle.addr() as u64
}

impl State {
    const fn new() -> State {
        State {
            next_id: 0,
            devices: Vec::new(),
            contexts: BTreeMap::new(),
            streams: BTreeMap::new(),
            events: BTreeMap::new(),
            captures: BTreeMap::new(),
            graphs: BTreeMap::new(),
            nodes: BTreeMap::new(),
            execs: BTreeMap::new(),
            objects: BTreeMap::new(),
            modules: BTreeMap::new(),
            functions: BTreeMap::new(),
            host_allocations: BTreeMap::new(),
            device_allocations: BTreeMap::new(),
            registrations: BTreeMap::new(),
            staged: BTreeMap::new(),
            dead: BTreeMap::new(),
            violations: Vec::new(),
            destructors: VecDeque::new(),
            destructor_thread: false,
            destructor_handle: None,
            workers: BTreeMap::new(),
        }
    }

    /// A fresh handle id: nonzero, above the special stream handles (1, 2),
    /// aligned like a pointer, never reused.
    pub(super) fn new_id(&mut self) -> u64 {
        self.next_id += 1;
        0x5100_0000 + self.next_id * 16
    }

    /// Records misuse on `device` (`None`: not attributable).
    pub(super) fn violation(&mut self, device: Option<usize>, message: String) {
        let text = match device {
            Some(ordinal) => format!("device {ordinal}: {message}"),
            None => format!("device ?: {message}"),
        };
        self.violations.push((device, text));
    }

    /// The device of the calling thread's current context (live or
    /// destroyed), if it has one.
    pub(super) fn current_device(&self) -> Option<usize> {
        let ctx = current();
        self.contexts
            .get(&ctx)
            .map(|c| c.device)
            .or_else(|| self.dead.get(&ctx).map(|&(_, device)| device))
    }

    /// Marks `id` destroyed.
    pub(super) fn bury(&mut self, id: u64, kind: Kind, device: usize) {
        self.dead.insert(id, (kind, device));
    }

    /// A handle that names no live `kind`: records the violation and
    /// returns `CUDA_ERROR_INVALID_HANDLE`.
    pub(super) fn bad_handle(&mut self, entry: &str, kind: Kind, id: u64) -> u32 {
        let (device, what) = match self.dead.get(&id) {
            Some(&(dead, device)) if dead == kind => {
                (Some(device), format!("destroyed {}", kind.name()))
            }
            Some(&(dead, device)) => (
                Some(device),
                format!("{} (destroyed) passed as a {}", dead.name(), kind.name()),
            ),
            None => (
                self.current_device(),
                format!("unknown {} handle", kind.name()),
            ),
        };
        self.violation(device, format!("{entry}: {what} {id:#x}"));
        codes::INVALID_HANDLE
    }

    /// The calling thread's current context, for calls that create or act
    /// in it: `CUDA_ERROR_INVALID_CONTEXT` if none (a destroyed one is also
    /// a violation).
    pub(super) fn current_context(&mut self, entry: &str) -> Result<u64, u32> {
        let ctx = current();
        if ctx == 0 {
            return Err(codes::INVALID_CONTEXT);
        }
        if !self.contexts.contains_key(&ctx) {
            let device = self.dead.get(&ctx).map(|&(_, d)| d);
            self.violation(
                device,
                format!("{entry}: the thread's current context {ctx:#x} was destroyed"),
            );
            return Err(codes::INVALID_CONTEXT);
        }
        Ok(ctx)
    }

    /// The gate every call in context `ctx` passes before it acts, in this
    /// order: not on a driver thread; `bound`: `ctx` is the calling thread's
    /// current context (stricter than the driver, see the module docs); the
    /// context's sticky error; an injected failure of `entry`.
    pub(super) fn enter(&mut self, ctx: u64, entry: &'static str, bound: bool) -> Result<(), u32> {
        let device = self.contexts[&ctx].device;
        self.off_driver_threads(device, entry)?;
        if bound && current() != ctx {
            let now = current();
            self.violation(
                Some(device),
                format!(
                    "{entry} on a handle of context {ctx:#x} from a thread whose current \
                     context is {now:#x}"
                ),
            );
            return Err(codes::INVALID_CONTEXT);
        }
        if let Some(code) = self.contexts[&ctx].sticky {
            return Err(code);
        }
        self.fault(device, entry)
    }

    /// Driver calls from a host function or destructor are not permitted.
    pub(super) fn off_driver_threads(&mut self, device: usize, entry: &str) -> Result<(), u32> {
        if DRIVER_THREAD.with(Cell::get) {
            self.violation(
                Some(device),
                format!("{entry} called from a host function or destructor"),
            );
            return Err(codes::NOT_PERMITTED);
        }
        Ok(())
    }

    /// Counts a call of `entry` on `device` against the injected failures.
    pub(super) fn fault(&mut self, device: usize, entry: &'static str) -> Result<(), u32> {
        let faults = &mut self.devices[device].faults;
        let mut fired = None;
        for fault in faults.iter_mut().filter(|f| f.entry == entry) {
            fault.remaining -= 1;
            if fault.remaining == 0 && fired.is_none() {
                fired = Some(fault.code);
            }
        }
        faults.retain(|f| f.remaining > 0);
        fired.map_or(Ok(()), Err)
    }

    /// A live stream's id; `NULL` and the per-thread and legacy handles are
    /// the current context's default stream.
    pub(super) fn stream(&mut self, entry: &str, raw: u64) -> Result<u64, u32> {
        if raw <= 2 {
            let ctx = self.current_context(entry)?;
            return Ok(self.contexts[&ctx].default_stream);
        }
        if self.streams.contains_key(&raw) {
            Ok(raw)
        } else {
            Err(self.bad_handle(entry, Kind::Stream, raw))
        }
    }

    pub(super) fn event(&mut self, entry: &str, raw: u64) -> Result<u64, u32> {
        if self.events.contains_key(&raw) {
            Ok(raw)
        } else {
            Err(self.bad_handle(entry, Kind::Event, raw))
        }
    }

    pub(super) fn graph(&mut self, entry: &str, raw: u64) -> Result<u64, u32> {
        if self.graphs.contains_key(&raw) {
            Ok(raw)
        } else {
            Err(self.bad_handle(entry, Kind::Graph, raw))
        }
    }

    pub(super) fn exec(&mut self, entry: &str, raw: u64) -> Result<u64, u32> {
        match self.execs.get(&raw) {
            Some(exec) if !exec.destroyed => Ok(raw),
            _ => Err(self.bad_handle(entry, Kind::Exec, raw)),
        }
    }

    pub(super) fn object(&mut self, entry: &str, raw: u64) -> Result<u64, u32> {
        match self.objects.get(&raw) {
            Some(object) if object.refs > 0 => Ok(raw),
            _ => Err(self.bad_handle(entry, Kind::UserObject, raw)),
        }
    }
}
