//! The interpreter's side of the process's life (`hostcopy_driver::process`
//! decides it, and says why): the exit handler and the fork handler,
//! registered when the extension module is imported, so that every entry
//! point is covered (stagers, `hostcopy.empty`, launches, `load_driver`),
//! and the one guard for "the GIL may not be asked for, nor Python code
//! run, now" ([`detach`], [`python_code`]).
//!
//! - **Exit.** An `atexit` handler of the interpreter, which runs before
//!   the NVIDIA driver tears its contexts down, closes every stager (new
//!   transfers are refused: `StagerClosed`, a `ValueError`), waiting for
//!   every transfer in flight, the non-blocking ones included (up to
//!   [`EXIT_GRACE`] in all). From the handler on no thread of ours asks
//!   for the GIL (Python before 3.14 ends such a thread with a forced
//!   unwind that crashes the process in this extension's frames): one that
//!   comes back from a call made without the GIL parks for good instead,
//!   one that came back just before takes the GIL back while the handler
//!   waits for it without holding it, and a call keeps the GIL throughout.
//! - **Fork.** In a child forked after hostcopy used CUDA every call that
//!   would use it refuses (`CudaUnavailable`, naming the `spawn` start
//!   method), and dropping a stager or a transfer there leaves their
//!   memory alone (it belongs to the parent's context) instead of waiting
//!   for threads that will never answer.

use std::sync::Weak;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use hostcopy_driver::awaiting::StagerSlot;
use hostcopy_driver::process::{AtExit, Process};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

/// How long the exit handler waits, in all, for the stagers to finish
/// their transfers in flight: far longer than any transfer takes, short
/// enough that a device that never finishes its work (a kernel that never
/// ends) does not hold the process at exit for good.
const EXIT_GRACE: Duration = Duration::from_secs(5);

/// How long the exit handler waits at least for the threads that came
/// back from a call without the GIL to take it back.
const RETURN_GRACE: Duration = Duration::from_secs(1);

fn process() -> &'static Process {
    Process::global()
}

/// The exit handler, as registered with `atexit`.
static AT_EXIT: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// Set once a stager was made.
static STAGER_MADE: AtomicBool = AtomicBool::new(false);

/// Records a new stager for the exit handler. `false` once the exit
/// handler has run: the stager is to be closed at once. The first stager
/// moves the exit handler to the end of `atexit`'s list, after the
/// handlers of array libraries imported since hostcopy, so that it runs
/// before them (last registered, first run): the stagers' transfers are
/// waited for before a library frees memory they copy.
pub(crate) fn register(py: Python<'_>, slot: Weak<StagerSlot>) -> PyResult<bool> {
    if !STAGER_MADE.swap(true, Ordering::Relaxed)
        && let Some(at_exit) = AT_EXIT.get(py)
    {
        let atexit = py.import("atexit")?;
        atexit.call_method1("unregister", (at_exit,))?;
        atexit.call_method1("register", (at_exit,))?;
    }
    Ok(process().register(slot as Weak<dyn AtExit>))
}

/// A call refused because this process is a child forked after hostcopy
/// used CUDA (`CudaUnavailable`, made by `crate::errors`).
#[derive(Debug)]
pub(crate) struct Forked;

/// Refuses a call that would use CUDA in a child forked after hostcopy
/// used it, and otherwise notes that CUDA is used: every entry point that
/// makes a driver call asks this first.
pub(crate) fn use_cuda() -> Result<(), Forked> {
    if forked() {
        return Err(Forked);
    }
    process().note_cuda_used();
    Ok(())
}

/// Whether this process is a child forked after hostcopy used CUDA.
pub(crate) fn forked() -> bool {
    process().forked()
}

/// Whether the exit handler has run.
pub(crate) fn exiting() -> bool {
    process().exiting()
}

/// Runs `f` without the GIL, like `py.detach`, in a thread that must never
/// ask for the GIL once the interpreter finalises. From the exit handler on
/// (it runs before the interpreter finalises), `f` runs with the GIL held;
/// a thread that comes back from `f` after the handler began parks until
/// the process ends; one that came back before is counted
/// (`Process::come_back`), so the handler waits for it to take the GIL
/// back. A panic in `f` is raised (`PanicException`) after the same check.
pub(crate) fn detach<T: Send>(py: Python<'_>, f: impl FnOnce() -> T + Send) -> T {
    if exiting() {
        // Read under the GIL, which the handler held while it set the
        // flag: the thread holds the GIL from here to the end.
        return f();
    }
    let (outcome, counted) = py.detach(move || {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        match process().come_back() {
            Some(counted) => (outcome, counted),
            None => park_for_good(),
        }
    });
    // The GIL is held again: the handler need not wait for this thread.
    drop(counted);
    outcome.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// Runs `f`, which runs Python code from inside this extension's frames,
/// unless the exit handler has run (`None`). A thread running Python code
/// may be ended by the interpreter as it finalises, with the same forced
/// unwind as [`detach`] avoids, so none starts from the handler on, and
/// the handler waits for those that began before.
pub(crate) fn python_code<T>(f: impl FnOnce() -> T) -> Option<T> {
    let _inside = process().enter_runtime()?;
    Some(f())
}

/// Parks the calling thread until the process ends: what Python 3.14 does
/// with a thread that asks for the GIL while the interpreter finalises.
fn park_for_good() -> ! {
    loop {
        std::thread::park();
    }
}

/// The interpreter's exit handler (registered at import, [`install`]):
/// refuses new stagers and transfers, then closes every stager, waiting for
/// their transfers in flight (up to [`EXIT_GRACE`]; a stager still closing
/// then is left as it is), and for the threads the process counts.
#[pyfunction]
fn close_stagers_at_exit(py: Python<'_>) {
    // The flag is set holding the GIL; the waits let it go, for the
    // threads waited for (pyo3's own detach: this thread, the one that
    // finalises, takes the GIL back safely).
    let exit = process().begin_exit();
    py.detach(move || {
        exit.finish(EXIT_GRACE, RETURN_GRACE);
    });
}

/// The child's half of `os.register_at_fork`.
#[pyfunction]
fn after_fork_in_child() {
    process().after_fork_in_child();
}

/// Registers the exit handler and the fork handler, when the extension
/// module is imported: after the array libraries imported before hostcopy,
/// so that the interpreter runs this exit handler before theirs (last
/// registered, first run).
pub(crate) fn install(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let at_exit = wrap_pyfunction!(close_stagers_at_exit, m)?
        .into_any()
        .unbind();
    py.import("atexit")?.call_method1("register", (&at_exit,))?;
    // A second import (a second interpreter) keeps the first's.
    let _ = AT_EXIT.set(py, at_exit);
    let os = py.import("os")?;
    if os.hasattr("register_at_fork")? {
        let kwargs = pyo3::types::PyDict::new(py);
        kwargs.set_item("after_in_child", wrap_pyfunction!(after_fork_in_child, m)?)?;
        os.call_method("register_at_fork", (), Some(&kwargs))?;
    }
    Ok(())
}
