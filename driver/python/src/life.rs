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
//!   non-blocking ones included (up to [`EXIT_GRACE`] in all). Then, from the moment the interpreter
//!   finalises, a thread that comes back from a call made without the GIL
//!   and is ended by the interpreter (with `pthread_exit`, an unwind that
//!   aborts the process where it meets this extension's frames: measured
//!   here, 5 runs of 5 with four daemon threads copying) sleeps until the
//!   process ends instead ([`detach`]).
//! - **Fork.** CUDA cannot be used in a child forked after CUDA was
//!   initialised, and the child has none of the parent's threads: a
//!   stager's lock may be held by a thread that no longer exists, and its
//!   copier and workers are gone. So in such a child every stager refuses
//!   (`CudaUnavailable`, naming the `spawn` start method), and dropping a
//!   stager or a transfer there leaves their memory alone (it belongs to
//!   the parent's context) instead of waiting for threads that will never
//!   answer.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, Weak, mpsc};
use std::time::Duration;

use hostcopy_driver::cuda::staging::Stager;
use pyo3::prelude::*;

use crate::packing::error;

/// A stager's state as the Python `Stager` holds it: `None` once closed.
pub(crate) type Slot = Mutex<Option<Stager>>;

/// Every stager made in this process, for the exit handler.
static STAGERS: Mutex<Vec<Weak<Slot>>> = Mutex::new(Vec::new());

/// Set once a stager was made: a child forked later cannot use CUDA.
static MADE: AtomicBool = AtomicBool::new(false);

/// Set by the exit handler: every stager is closed and new ones refused.
static EXITING: AtomicBool = AtomicBool::new(false);

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
    EXITING.load(Ordering::Relaxed)
}

/// Whether the stagers' memory and threads are to be left alone, never
/// waited for: in a forked child (they are the parent's), and once the
/// exit handler gave up waiting for them (a device that never finishes
/// would hold the interpreter's finalisation for good).
pub(crate) fn abandoned() -> bool {
    forked() || GAVE_UP.load(Ordering::Relaxed)
}

/// The error of every stager call in a forked child.
pub(crate) fn forked_error(py: Python<'_>) -> PyErr {
    error(
        py,
        "CudaUnavailable",
        String::from(
            "this process was forked after hostcopy used CUDA, and CUDA cannot be used in such \
             a child (nor can the parent's stagers, whose threads it lacks): start worker \
             processes with multiprocessing's 'spawn' or 'forkserver' method, or fork before \
             the first transfer",
        ),
        [],
    )
}

/// Runs `f` without the GIL, like `py.detach`, in a thread that the
/// interpreter may end when it asks for the GIL back: from the moment the
/// interpreter finalises, Python before 3.14 ends such a thread with
/// `pthread_exit`, a forced unwind that aborts the process where a Rust
/// frame catches it (pyo3's trampoline does). The guard here runs first, as
/// the unwind's cleanup, and parks the thread for good instead, as Python
/// 3.14 itself does (pyo3 does the same around `PyGILState_Ensure`).
#[inline(never)]
pub(crate) fn detach<T: Send>(py: Python<'_>, f: impl FnOnce() -> T + Send) -> T {
    let hang = HangIfUnwound;
    let result = py.detach(f);
    core::mem::forget(hang);
    result
}

/// Dropped only by an unwind through [`detach`]: the interpreter ending
/// the thread. Parks it until the process ends.
struct HangIfUnwound;

impl Drop for HangIfUnwound {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // A Rust panic, not the interpreter: it goes on to pyo3, which
            // raises it as `PanicException`.
            return;
        }
        loop {
            std::thread::park();
        }
    }
}

/// How long the exit handler waits, in all, for the stagers to finish
/// their transfers in flight: far longer than any transfer takes, short
/// enough that a device that never finishes its work (a kernel that never
/// ends) does not hold the process at exit for good.
const EXIT_GRACE: Duration = Duration::from_secs(5);

/// The interpreter's exit handler (registered by [`register`]): refuses new
/// stagers and transfers, then closes every stager, waiting for their
/// transfers in flight (up to [`EXIT_GRACE`]; a stager still closing then
/// is left as it is).
#[pyfunction]
fn close_stagers_at_exit(py: Python<'_>) {
    if forked() {
        // The list's lock may be held by a thread of the parent's.
        EXITING.store(true, Ordering::Relaxed);
        return;
    }
    let stagers: Vec<_> = {
        let mut stagers = lock(&STAGERS);
        EXITING.store(true, Ordering::Relaxed);
        stagers
            .drain(..)
            .filter_map(|stager| stager.upgrade())
            .collect()
    };
    if stagers.is_empty() {
        return;
    }
    detach(py, || {
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
