//! The process's life around the stagers: interpreter exit and `fork()`.
//!
//! - **Exit.** At exit the NVIDIA driver tears its contexts down (a C
//!   `atexit` handler, after the interpreter has finalised), unmapping the
//!   pinned staging buffers; a daemon thread still inside a copy then
//!   faults (measured on the H200 host: a daemon thread copying in a loop
//!   killed the process with SIGSEGV at exit, 10 runs of 10). So an
//!   `atexit` handler of the interpreter, which runs before that, closes
//!   every stager: new transfers are refused (`ValueError`, the stager is
//!   closed), and closing waits for every transfer in flight, the
//!   non-blocking ones included (up to [`EXIT_GRACE`] in all). Once the
//!   interpreter finalises, Python before 3.14 ends a thread that asks for
//!   the GIL with `pthread_exit`, a forced unwind that crashes the process
//!   where it crosses this extension's frames (measured on the H200 host:
//!   SIGSEGV in 4 runs of 8 of a script whose daemon threads copy in a
//!   loop, the unwind jumping to a stack address). So no thread of ours
//!   asks for it then ([`detach`]): one that comes back from a call made
//!   without the GIL after the handler ran parks for good instead, one
//!   that came back just before takes the GIL back while the handler waits
//!   for it without holding it, and from the handler on a call keeps the
//!   GIL throughout.
//! - **Fork.** CUDA cannot be used in a child forked after CUDA was
//!   initialised, and the child has none of the parent's threads: a
//!   stager's lock may be held by a thread that no longer exists, and its
//!   copier and workers are gone. So in such a child every stager refuses
//!   (`CudaUnavailable`, naming the `spawn` start method), and dropping a
//!   stager or a transfer there leaves their memory alone (it belongs to
//!   the parent's context) instead of waiting for threads that will never
//!   answer.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, Weak, mpsc};
use std::time::{Duration, Instant};

use hostcopy_driver::cuda::staging::Stager;
use pyo3::prelude::*;

/// A stager's state as the Python `Stager` holds it: `None` once closed.
pub(crate) type Slot = Mutex<Option<Stager>>;

/// Every stager made in this process, for the exit handler.
static STAGERS: Mutex<Vec<Weak<Slot>>> = Mutex::new(Vec::new());

/// Set once a stager was made: a child forked later cannot use CUDA.
static MADE: AtomicBool = AtomicBool::new(false);

/// Set by the exit handler: every stager is closed and new ones refused,
/// and no thread lets the GIL go any more ([`detach`]). Sequentially
/// consistent with [`RETURNING`].
static EXITING: AtomicBool = AtomicBool::new(false);

/// Threads that came back from a call made without the GIL before they
/// saw [`EXITING`], and have not yet taken the GIL back: the exit handler
/// waits, without the GIL, until there are none.
static RETURNING: AtomicUsize = AtomicUsize::new(0);

/// Threads running Python code called from this extension's frames (an
/// option's `__index__`, an error class's `__init__`) that began before
/// they saw [`EXITING`]: the exit handler waits, without the GIL, until
/// there are none ([`python_code`]).
static IN_PYTHON: AtomicUsize = AtomicUsize::new(0);

/// Set in a child forked after a stager was made.
static FORKED: AtomicBool = AtomicBool::new(false);

/// Set when the exit handler stopped waiting for the stagers' transfers
/// (after [`EXIT_GRACE`]): those still in flight are left as they are.
static GAVE_UP: AtomicBool = AtomicBool::new(false);

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Records a new stager for the exit handler, which the first one
/// registers (after the array libraries' own handlers, which the
/// interpreter then runs after it: they run last registered, first run).
/// `false` once the exit handler has run: the stager is to be closed at
/// once. Checked under the same lock as the handler takes, so that no
/// stager made while it runs escapes it.
pub(crate) fn register(py: Python<'_>, slot: Weak<Slot>) -> PyResult<bool> {
    if !MADE.swap(true, Ordering::Relaxed) {
        let at_exit = wrap_pyfunction!(close_stagers_at_exit, py)?;
        py.import("atexit")?.call_method1("register", (at_exit,))?;
    }
    let mut stagers = lock(&STAGERS);
    if exiting() {
        return Ok(false);
    }
    stagers.retain(|stager| stager.strong_count() > 0);
    stagers.push(slot);
    Ok(true)
}

/// Whether this process is a child forked after a stager was made.
pub(crate) fn forked() -> bool {
    FORKED.load(Ordering::Relaxed)
}

/// Whether the exit handler has run.
pub(crate) fn exiting() -> bool {
    EXITING.load(Ordering::SeqCst)
}

/// Whether the stagers' memory and threads are to be left alone, never
/// waited for: in a forked child (they are the parent's), and once the
/// exit handler gave up waiting for them (a device that never finishes
/// would hold the interpreter's finalisation for good).
pub(crate) fn abandoned() -> bool {
    forked() || GAVE_UP.load(Ordering::Relaxed)
}

/// Runs `f` without the GIL, like `py.detach`, in a thread that must never
/// ask for the GIL once the interpreter finalises (Python before 3.14 ends
/// it then with `pthread_exit`, a forced unwind that crashes the process in
/// this extension's frames). From the exit handler on (it runs before the
/// interpreter finalises), `f` runs with the GIL held; a thread that comes
/// back from `f` after the handler began parks until the process ends;
/// one that came back before counts itself in [`RETURNING`] first, so the
/// handler sees it and waits for it to take the GIL back. A panic in `f`
/// is raised (`PanicException`) after the same check.
pub(crate) fn detach<T: Send>(py: Python<'_>, f: impl FnOnce() -> T + Send) -> T {
    if exiting() {
        // Read under the GIL, which the handler held while it set the
        // flag: the thread holds the GIL from here to the end.
        return f();
    }
    let outcome = py.detach(move || {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        // Counted before the flag is read (both sequentially consistent):
        // either this thread sees the handler's flag, or the handler sees
        // this thread and waits for it.
        RETURNING.fetch_add(1, Ordering::SeqCst);
        if EXITING.load(Ordering::SeqCst) {
            RETURNING.fetch_sub(1, Ordering::SeqCst);
            park_for_good();
        }
        outcome
    });
    RETURNING.fetch_sub(1, Ordering::SeqCst);
    outcome.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// Runs `f`, which runs Python code from inside this extension's frames,
/// unless the exit handler has run (`None`). A thread running Python code
/// may be ended by the interpreter as it finalises, with the same forced
/// unwind as [`detach`] avoids, so none starts from the handler on, and
/// the handler waits for those that began before (counted first, then the
/// flag read, as in [`detach`]).
pub(crate) fn python_code<T>(f: impl FnOnce() -> T) -> Option<T> {
    struct Leave;
    impl Drop for Leave {
        fn drop(&mut self) {
            IN_PYTHON.fetch_sub(1, Ordering::SeqCst);
        }
    }
    IN_PYTHON.fetch_add(1, Ordering::SeqCst);
    let _leave = Leave;
    if EXITING.load(Ordering::SeqCst) {
        return None;
    }
    Some(f())
}

/// Parks the calling thread until the process ends: what Python 3.14 does
/// with a thread that asks for the GIL while the interpreter finalises.
fn park_for_good() -> ! {
    loop {
        std::thread::park();
    }
}

/// How long the exit handler waits, in all, for the stagers to finish
/// their transfers in flight: far longer than any transfer takes, short
/// enough that a device that never finishes its work (a kernel that never
/// ends) does not hold the process at exit for good.
const EXIT_GRACE: Duration = Duration::from_secs(5);

/// How long the exit handler waits at least for the threads that came
/// back from a call without the GIL to take it back.
const RETURN_GRACE: Duration = Duration::from_secs(1);

/// The interpreter's exit handler (registered by [`register`]): refuses new
/// stagers and transfers, then closes every stager, waiting for their
/// transfers in flight (up to [`EXIT_GRACE`]; a stager still closing then
/// is left as it is).
#[pyfunction]
fn close_stagers_at_exit(py: Python<'_>) {
    if forked() {
        // The list's lock may be held by a thread of the parent's.
        EXITING.store(true, Ordering::SeqCst);
        return;
    }
    let stagers: Vec<_> = {
        let mut stagers = lock(&STAGERS);
        EXITING.store(true, Ordering::SeqCst);
        stagers
            .drain(..)
            .filter_map(|stager| stager.upgrade())
            .collect()
    };
    // pyo3's own detach: this thread (the one that finalises) takes the
    // GIL back safely, and must let it go for the threads it waits for.
    py.detach(|| {
        let deadline = Instant::now() + EXIT_GRACE;
        if !stagers.is_empty() {
            let (closed, all_closed) = mpsc::channel();
            let closing = std::thread::Builder::new()
                .name(String::from("hostcopy-exit"))
                .spawn(move || {
                    for slot in stagers {
                        // Waits for a blocking transfer holding the lock, then
                        // for every copy queued on the stager's streams.
                        drop(lock(&slot).take());
                    }
                    let _ = closed.send(());
                });
            let closed = closing.is_ok() && all_closed.recv_timeout(EXIT_GRACE).is_ok();
            if !closed {
                GAVE_UP.store(true, Ordering::Relaxed);
            }
        }
        // Threads that came back before they saw the flag take the GIL
        // back now, while this thread does not hold it: microseconds to
        // milliseconds each (at least RETURN_GRACE, even after the stagers
        // took the whole grace).
        // So do threads running Python code called from this extension.
        let deadline = deadline.max(Instant::now() + RETURN_GRACE);
        let busy = || RETURNING.load(Ordering::SeqCst) + IN_PYTHON.load(Ordering::SeqCst) > 0;
        while busy() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_micros(100));
        }
    });
}

/// The child's half of `os.register_at_fork`.
#[pyfunction]
fn after_fork_in_child() {
    if MADE.load(Ordering::Relaxed) {
        FORKED.store(true, Ordering::Relaxed);
    }
}

/// Registers the fork handler (the exit handler comes with the first
/// stager, [`register`]).
pub(crate) fn install(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let os = py.import("os")?;
    if os.hasattr("register_at_fork")? {
        let kwargs = pyo3::types::PyDict::new(py);
        kwargs.set_item("after_in_child", wrap_pyfunction!(after_fork_in_child, m)?)?;
        os.call_method("register_at_fork", (), Some(&kwargs))?;
    }
    Ok(())
}
