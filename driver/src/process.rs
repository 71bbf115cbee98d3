//! The process's life around a host runtime that embeds this crate behind
//! a global lock (the Python binding, whose interpreter lock is the GIL):
//! interpreter exit and `fork()`, decided here for every entry point.
//!
//! - **Exit.** At exit the NVIDIA driver tears its contexts down (a C
//!   `atexit` handler, after the interpreter has finalised), unmapping the
//!   pinned staging buffers; a thread still inside a copy then faults
//!   (measured on the H200 host: a daemon thread copying in a loop killed
//!   the process with SIGSEGV at exit, 10 runs of 10). So the runtime's
//!   own exit handler, which runs before that, calls [`Process::begin_exit`]
//!   and [`Exit::finish`]: new work is refused from then on, and every
//!   resource registered with [`Process::register`] (a stager) is closed,
//!   which waits for its work in flight (up to a grace period in all).
//!   Once the interpreter finalises, Python before 3.14 ends a thread that
//!   asks for the GIL with `pthread_exit`, a forced unwind that crashes the
//!   process where it crosses native frames (measured on the H200 host:
//!   SIGSEGV in 4 runs of 8 of a script whose daemon threads copy in a
//!   loop). So no thread asks for it then: one that comes back from a call
//!   made without the lock after the handler began is told to park for
//!   good ([`Process::come_back`] returns `None`); one that came back just
//!   before is counted, and the handler waits for it to take the lock back
//!   while it does not hold it; from the handler on, a call keeps the lock
//!   throughout. Code of the runtime run from native frames (Python code:
//!   an `__index__`, an exception's `__init__`) is counted the same way
//!   ([`Process::enter_runtime`]) and refused from the handler on.
//! - **Fork.** CUDA cannot be used in a child forked after CUDA was
//!   initialised, and the child has none of the parent's threads: a lock
//!   may be held by a thread that no longer exists, and a stager's copier
//!   and workers are gone. So a child forked after [`Process::note_cuda_used`]
//!   is [`forked`](Process::forked): every entry point refuses, and what the
//!   parent's threads would have to answer is left alone
//!   ([`abandoned`](Process::abandoned)).
//!
//! The counters are sequentially consistent with the exit flag: a thread
//! counts itself first and reads the flag second, the handler sets the
//! flag first and reads the counts second, so either the thread sees the
//! flag or the handler sees the thread.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak, mpsc};
use std::time::{Duration, Instant};
use std::vec::Vec;

/// A resource closed at exit: its close waits for its work in flight.
pub trait AtExit: Send + Sync {
    /// Closes the resource, waiting for its work in flight.
    fn close(&self);
}

/// A resource held as `Some` until closed: closing takes it and drops it
/// (a stager's drop waits for every copy queued on its streams).
impl<T: Send> AtExit for Mutex<Option<T>> {
    fn close(&self) {
        drop(lock(self).take());
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing panics while one of these is held; the values stay whole.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The exit and fork state of one process (see the module's documentation).
#[derive(Debug)]
pub struct Process {
    /// Set by [`Process::begin_exit`].
    exiting: AtomicBool,
    /// Threads that came back from a call made without the runtime's lock
    /// before they saw `exiting`, and have not yet taken the lock back.
    returning: AtomicUsize,
    /// Threads running the runtime's code from native frames that began
    /// before they saw `exiting`.
    in_runtime: AtomicUsize,
    /// CUDA was used: a child forked later cannot use it.
    cuda_used: AtomicBool,
    /// This process is a child forked after CUDA was used.
    forked: AtomicBool,
    /// The exit handler stopped waiting for the registered resources.
    gave_up: AtomicBool,
    /// The resources the exit handler closes.
    registered: Mutex<Vec<Weak<dyn AtExit>>>,
}

impl Default for Process {
    fn default() -> Self {
        Process::new()
    }
}

static PROCESS: Process = Process::new();

impl Process {
    /// A process state of its own (for tests; the binding uses
    /// [`Process::global`]).
    pub const fn new() -> Process {
        Process {
            exiting: AtomicBool::new(false),
            returning: AtomicUsize::new(0),
            in_runtime: AtomicUsize::new(0),
            cuda_used: AtomicBool::new(false),
            forked: AtomicBool::new(false),
            gave_up: AtomicBool::new(false),
            registered: Mutex::new(Vec::new()),
        }
    }

    /// This process's state.
    pub fn global() -> &'static Process {
        &PROCESS
    }

    /// Notes that CUDA is about to be used (a driver call, a stager): a
    /// child forked from now on cannot use it.
    pub fn note_cuda_used(&self) {
        self.cuda_used.store(true, Ordering::SeqCst);
    }

    /// The child's half of a fork handler: the child is [`forked`](Self::forked)
    /// if CUDA was used before.
    pub fn after_fork_in_child(&self) {
        if self.cuda_used.load(Ordering::SeqCst) {
            self.forked.store(true, Ordering::SeqCst);
        }
    }

    /// Whether this process is a child forked after CUDA was used: CUDA,
    /// and the parent's resources, are unusable here.
    pub fn forked(&self) -> bool {
        self.forked.load(Ordering::SeqCst)
    }

    /// Whether the exit handler has begun.
    pub fn exiting(&self) -> bool {
        self.exiting.load(Ordering::SeqCst)
    }

    /// Whether the registered resources' memory and threads are to be left
    /// alone, never waited for: in a forked child (they are the parent's),
    /// and once the exit handler gave up waiting for them (a device that
    /// never finishes would hold the process at exit for good).
    pub fn abandoned(&self) -> bool {
        self.forked() || self.gave_up.load(Ordering::SeqCst)
    }

    /// Registers a resource for the exit handler to close. `false` once the
    /// exit handler has begun: the caller closes it at once. Checked under
    /// the lock the handler takes, so that none registered while it runs
    /// escapes it.
    pub fn register(&self, resource: Weak<dyn AtExit>) -> bool {
        let mut registered = lock(&self.registered);
        if self.exiting() {
            return false;
        }
        registered.retain(|held| held.strong_count() > 0);
        registered.push(resource);
        true
    }

    /// Called by a thread coming back from a call made without the
    /// runtime's lock, before it asks for the lock again: `Some` while the
    /// exit handler has not begun (held until the lock is taken back, so
    /// that the handler waits for it), `None` once it has: the thread must
    /// not ask for the lock, and parks for good instead.
    pub fn come_back(&self) -> Option<Counted<'_>> {
        let counted = Counted::new(&self.returning);
        if self.exiting() {
            return None;
        }
        Some(counted)
    }

    /// Called before running the runtime's code from native frames: `Some`
    /// while the exit handler has not begun (held while the code runs, so
    /// that the handler waits for it), `None` once it has: the code must
    /// not run.
    pub fn enter_runtime(&self) -> Option<Counted<'_>> {
        let counted = Counted::new(&self.in_runtime);
        if self.exiting() {
            return None;
        }
        Some(counted)
    }

    /// The first half of the exit handler, run holding the runtime's lock:
    /// refuses new work and registrations from now on, and takes the
    /// registered resources to close. In a forked child the registry is
    /// left alone (its lock may be held by a thread of the parent's) and
    /// nothing is closed.
    pub fn begin_exit(&self) -> Exit<'_> {
        if self.forked() {
            self.exiting.store(true, Ordering::SeqCst);
            return Exit {
                process: self,
                resources: Vec::new(),
            };
        }
        let mut registered = lock(&self.registered);
        self.exiting.store(true, Ordering::SeqCst);
        let resources = registered
            .drain(..)
            .filter_map(|held| held.upgrade())
            .collect();
        Exit {
            process: self,
            resources,
        }
    }

    /// Whether a thread counted by [`come_back`](Self::come_back) or
    /// [`enter_runtime`](Self::enter_runtime) is still inside.
    pub fn busy(&self) -> bool {
        self.returning.load(Ordering::SeqCst) + self.in_runtime.load(Ordering::SeqCst) > 0
    }
}

/// A thread counted by [`Process::come_back`] or [`Process::enter_runtime`]
/// until this is dropped.
#[derive(Debug)]
pub struct Counted<'a> {
    count: &'a AtomicUsize,
}

impl<'a> Counted<'a> {
    fn new(count: &'a AtomicUsize) -> Counted<'a> {
        // Counted before the flag is read (both sequentially consistent).
        count.fetch_add(1, Ordering::SeqCst);
        Counted { count }
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The second half of the exit handler: what [`Process::begin_exit`] took.
pub struct Exit<'a> {
    process: &'a Process,
    resources: Vec<Arc<dyn AtExit>>,
}

impl core::fmt::Debug for Exit<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Exit")
            .field("resources", &self.resources.len())
            .finish()
    }
}

impl Exit<'_> {
    /// Run without the runtime's lock (the threads it waits for need it):
    /// closes every resource taken, on a thread of its own, waiting up to
    /// `grace` in all (past it, the process gives up on them: they are
    /// [`abandoned`](Process::abandoned)); then waits for the threads that
    /// came back before they saw the flag, and for those running the
    /// runtime's code, to be done, at least `return_grace` even after the
    /// resources took the whole grace. Returns whether every resource was
    /// closed.
    pub fn finish(self, grace: Duration, return_grace: Duration) -> bool {
        let deadline = Instant::now() + grace;
        let mut closed = true;
        if !self.resources.is_empty() {
            let resources = self.resources;
            let (done, all_done) = mpsc::channel();
            let closing = std::thread::Builder::new()
                .name(std::string::String::from("hostcopy-exit"))
                .spawn(move || {
                    for resource in resources {
                        resource.close();
                    }
                    let _ = done.send(());
                });
            closed = closing.is_ok() && all_done.recv_timeout(grace).is_ok();
            if !closed {
                self.process.gave_up.store(true, Ordering::SeqCst);
            }
        }
        let deadline = deadline.max(Instant::now() + return_grace);
        while self.process.busy() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_micros(100));
        }
        closed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    struct Slow {
        closed: AtomicBool,
        takes: Duration,
    }

    impl AtExit for Slow {
        fn close(&self) {
            std::thread::sleep(self.takes);
            self.closed.store(true, Ordering::SeqCst);
        }
    }

    fn slow(takes: Duration) -> Arc<Slow> {
        Arc::new(Slow {
            closed: AtomicBool::new(false),
            takes,
        })
    }

    #[test]
    fn exit_closes_what_is_registered_and_refuses_later_registrations() {
        let process = Process::new();
        let held = Arc::new(Mutex::new(Some([1u8; 16])));
        let quick = slow(Duration::from_millis(1));
        let dropped = slow(Duration::ZERO);
        assert!(process.register(Arc::downgrade(&held) as Weak<dyn AtExit>));
        assert!(process.register(Arc::downgrade(&quick) as Weak<dyn AtExit>));
        assert!(process.register(Arc::downgrade(&dropped) as Weak<dyn AtExit>));
        drop(dropped);
        assert!(!process.exiting());
        let exit = process.begin_exit();
        assert!(process.exiting());
        assert_eq!(
            exit.resources.len(),
            2,
            "a resource dropped before is not closed"
        );
        assert!(exit.finish(Duration::from_secs(5), Duration::ZERO));
        assert!(lock(&held).is_none() && quick.closed.load(Ordering::SeqCst));
        assert!(!process.abandoned());
        let late = slow(Duration::ZERO);
        assert!(!process.register(Arc::downgrade(&late) as Weak<dyn AtExit>));
    }

    #[test]
    fn exit_gives_up_after_the_grace_and_the_resources_are_abandoned() {
        let process = Process::new();
        let stuck = slow(Duration::from_millis(500));
        assert!(process.register(Arc::downgrade(&stuck) as Weak<dyn AtExit>));
        let started = Instant::now();
        assert!(
            !process
                .begin_exit()
                .finish(Duration::from_millis(20), Duration::ZERO)
        );
        assert!(started.elapsed() < Duration::from_millis(400));
        assert!(process.abandoned() && !process.forked());
    }

    #[test]
    fn a_thread_coming_back_after_the_flag_is_told_to_park_and_one_before_is_waited_for() {
        let process = Arc::new(Process::new());
        let counted = process.come_back().expect("not exiting yet");
        let inside = process.enter_runtime().expect("not exiting yet");
        assert!(process.busy());
        let exit = process.begin_exit();
        assert!(process.come_back().is_none() && process.enter_runtime().is_none());
        let waiter = {
            let process = Arc::clone(&process);
            std::thread::spawn(move || {
                let started = Instant::now();
                process
                    .begin_exit()
                    .finish(Duration::ZERO, Duration::from_secs(5));
                started.elapsed()
            })
        };
        std::thread::sleep(Duration::from_millis(30));
        drop(counted);
        drop(inside);
        let waited = waiter.join().expect("the exit thread");
        assert!(waited >= Duration::from_millis(25), "{waited:?}");
        assert!(waited < Duration::from_secs(4), "{waited:?}");
        assert!(!process.busy());
        drop(exit);
    }

    #[test]
    fn only_a_child_forked_after_cuda_was_used_is_forked() {
        let process = Process::new();
        process.after_fork_in_child();
        assert!(!process.forked());
        process.note_cuda_used();
        process.after_fork_in_child();
        assert!(process.forked() && process.abandoned());
        let held = Arc::new(Mutex::new(Some(1u8)));
        assert!(process.register(Arc::downgrade(&held) as Weak<dyn AtExit>));
        // The registry is the parent's: nothing is closed in the child.
        assert!(process.begin_exit().finish(Duration::ZERO, Duration::ZERO));
        assert!(process.exiting() && lock(&held).is_some());
    }
}

#[cfg(all(test, feature = "simulator"))]
mod sim_tests {
    use super::*;
    use crate::cuda::staging::{Stager, StagingOptions, to_host};
    use crate::cuda::{Context, DeviceBuffer, sim};

    const LEN: usize = 1 << 20;

    /// A stager of a fresh simulated device, as the binding holds it, and
    /// device memory of `LEN` known bytes.
    fn stager() -> (usize, Arc<Mutex<Option<Stager>>>, DeviceBuffer, Vec<u8>) {
        sim::install();
        let ordinal = sim::new_device();
        let context = Context::primary(ordinal).unwrap();
        let options = StagingOptions::builder()
            .chunk(64 << 10)
            .buffers(2)
            .workers(1)
            .driver_path_below(0)
            .build()
            .unwrap();
        let stager = Stager::with_options(&context, options).unwrap();
        let expected: Vec<u8> = (0..LEN).map(|i| (i * 7 + i / 251) as u8).collect();
        let mut source = DeviceBuffer::new(&context, LEN).unwrap();
        source.copy_from_host(0, &expected).unwrap();
        (
            ordinal,
            Arc::new(Mutex::new(Some(stager))),
            source,
            expected,
        )
    }

    /// A thread copying `source` to the host through `slot`, blocking,
    /// under the slot's lock (as the binding's blocking copy does).
    fn copying(
        slot: &Arc<Mutex<Option<Stager>>>,
        source: DeviceBuffer,
    ) -> std::thread::JoinHandle<Vec<u8>> {
        let slot = Arc::clone(slot);
        std::thread::spawn(move || {
            let mut host = std::vec![0u8; LEN];
            let mut stager = lock(&slot);
            stager
                .as_mut()
                .expect("open")
                .run(to_host(&mut host, &source))
                .unwrap();
            host
        })
    }

    #[test]
    fn exit_waits_for_a_stagers_copy_in_flight_then_closes_it() {
        let process = Process::new();
        let (ordinal, slot, source, expected) = stager();
        assert!(process.register(Arc::downgrade(&slot) as Weak<dyn AtExit>));
        sim::hold(ordinal);
        let copy = copying(&slot, source);
        std::thread::sleep(Duration::from_millis(30));
        let releasing = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            sim::release(ordinal);
        });
        let started = Instant::now();
        let exit = process.begin_exit();
        assert!(exit.finish(Duration::from_secs(10), Duration::ZERO));
        assert!(
            started.elapsed() >= Duration::from_millis(30),
            "waited for the device: {:?}",
            started.elapsed()
        );
        assert!(lock(&slot).is_none(), "closed");
        assert!(!process.abandoned());
        assert!(
            copy.join().unwrap() == expected,
            "the copy in flight completed"
        );
        releasing.join().unwrap();
    }

    #[test]
    fn exit_gives_up_on_a_device_that_does_not_finish_within_the_grace() {
        let process = Process::new();
        let (ordinal, slot, source, expected) = stager();
        assert!(process.register(Arc::downgrade(&slot) as Weak<dyn AtExit>));
        sim::hold(ordinal);
        let copy = copying(&slot, source);
        std::thread::sleep(Duration::from_millis(30));
        let started = Instant::now();
        assert!(
            !process
                .begin_exit()
                .finish(Duration::from_millis(50), Duration::ZERO)
        );
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(process.abandoned() && !process.forked());
        // The device finishes later: the copy, then the close, complete.
        sim::release(ordinal);
        assert!(copy.join().unwrap() == expected);
        let deadline = Instant::now() + Duration::from_secs(10);
        while lock(&slot).is_some() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(
            lock(&slot).is_none(),
            "the exit thread closed it once it could"
        );
    }
}
