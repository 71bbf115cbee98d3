//! `await transfer`: a transfer's completion delivered to an event loop
//! through a file descriptor, without polling and without Python code on
//! any other thread.
//!
//! Who holds what:
//! - Each stager has one waiter thread ([`Waiter`]), started by its first
//!   `await`: one per stager rather than per process, so that a transfer
//!   on one device never waits behind another device's. It takes
//!   [`Registration`]s in the order they come and finishes each transfer
//!   exactly as `wait()` does (`TransferState::finish`: the copies
//!   waited for without the stager's lock, then settled under it), then
//!   tells the registration's [`Wakeup`]. One stager's transfers complete
//!   in about the order they started (its copier is one thread), which is
//!   the order they are awaited when each task awaits what it started: a
//!   transfer awaited before an earlier-started one delays that one's
//!   wakeup until it is done itself, never its copies. It never attaches to
//!   the interpreter: everything it holds is Rust state, except host
//!   memory orphaned by a `Transfer` dropped while awaited, which it lets
//!   go of without the GIL, so pyo3 queues the reference in its pool; the
//!   pool is emptied by the next call into the extension from Python, and
//!   the wakeup itself makes that call (`Wakeup.take`) on the loop's
//!   thread. At interpreter exit the thread is stopped where it is and
//!   queued references are never released: no CPython call is made from
//!   it, ever, so finalization cannot crash through it.
//! - A registration holds the transfer's shared state, and so its
//!   `PendingTransfer` and the stager's state, until the transfer is
//!   finished: cancelling the awaiting task frees nothing under the copy.
//! - A [`Wakeup`] is one pipe per event loop (`hostcopy._awaiting` keeps
//!   it while the loop has awaits outstanding): the waiter adds the
//!   finished registration's token to a list and writes one byte if none
//!   is unread; the loop's reader callback takes the list and the byte
//!   together. Both ends belong to the `Wakeup`'s shared state, which
//!   every registration holds too, so a write never meets a closed
//!   reader (no `EPIPE`, no `SIGPIPE`), and at most one byte is ever
//!   unread, so neither side blocks on the pipe.

use std::io::{PipeReader, PipeWriter, Read, Write};
use std::os::fd::AsRawFd;
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex, MutexGuard};

use pyo3::prelude::*;

use crate::staging::TransferState;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing panics while one of these is held; the values stay whole.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A transfer to finish, and whom to tell.
pub(crate) struct Registration {
    transfer: Arc<TransferState>,
    wakeup: Arc<Signal>,
    token: u64,
}

impl Registration {
    pub(crate) fn new(transfer: Arc<TransferState>, wakeup: &Wakeup, token: u64) -> Registration {
        Registration {
            transfer,
            wakeup: Arc::clone(&wakeup.signal),
            token,
        }
    }
}

/// A stager's waiter thread, started on first use; it ends once every
/// handle of the stager (the Python `Stager`, its transfers, queued
/// registrations) is gone, which drops the sender.
#[derive(Default)]
pub(crate) struct Waiter {
    queue: Mutex<Option<Sender<Registration>>>,
}

impl Waiter {
    /// Queues `registration` for the thread, starting it if need be: an
    /// `OSError` if it cannot be started.
    pub(crate) fn register(&self, registration: Registration) -> std::io::Result<()> {
        let mut queue = lock(&self.queue);
        let sender = match &mut *queue {
            Some(sender) => sender,
            empty => {
                let (sender, registrations) = channel::<Registration>();
                std::thread::Builder::new()
                    .name("hostcopy-await".into())
                    .spawn(move || {
                        for registration in registrations {
                            // Its outcome is kept in the state, for the
                            // loop's `wait()` to raise.
                            let _ = registration.transfer.finish();
                            registration.wakeup.finished(registration.token);
                        }
                    })?;
                empty.insert(sender)
            }
        };
        sender
            .send(registration)
            .map_err(|_| std::io::Error::other("the stager's waiter thread has stopped"))
    }
}

/// A pipe whose one unread byte says that `tokens` holds finished ones.
struct Signal {
    reader: PipeReader,
    writer: PipeWriter,
    finished: Mutex<Finished>,
}

struct Finished {
    tokens: Vec<u64>,
    /// A byte is in the pipe, unread: set and cleared with it, under the
    /// lock.
    signalled: bool,
}

impl Signal {
    fn finished(&self, token: u64) {
        let mut finished = lock(&self.finished);
        finished.tokens.push(token);
        // One byte into an empty pipe never blocks. A write that fails
        // (it cannot with both ends open) is retried by the next token.
        if !finished.signalled && (&self.writer).write_all(&[1]).is_ok() {
            finished.signalled = true;
        }
    }
}

/// One event loop's wakeup: `fileno()` for `loop.add_reader`, `take()`
/// in its callback for the tokens of the transfers finished since.
#[pyclass(module = "hostcopy._native", frozen)]
pub(crate) struct Wakeup {
    signal: Arc<Signal>,
}

#[pymethods]
impl Wakeup {
    #[new]
    fn new() -> PyResult<Wakeup> {
        // Both ends close-on-exec (std's pipe).
        let (reader, writer) = std::io::pipe()?;
        Ok(Wakeup {
            signal: Arc::new(Signal {
                reader,
                writer,
                finished: Mutex::new(Finished {
                    tokens: Vec::new(),
                    signalled: false,
                }),
            }),
        })
    }

    /// The pipe's read end, readable while finished tokens wait.
    fn fileno(&self) -> i32 {
        self.signal.reader.as_raw_fd()
    }

    /// The tokens finished since the last call, in the order they
    /// finished; reads the pipe's byte with them.
    fn take(&self) -> PyResult<Vec<u64>> {
        let mut finished = lock(&self.signal.finished);
        if finished.signalled {
            // The byte is there (written before `signalled` was set, under
            // this lock): the read returns at once.
            let mut byte = [0u8; 1];
            (&self.signal.reader).read_exact(&mut byte)?;
            finished.signalled = false;
        }
        Ok(core::mem::take(&mut finished.tokens))
    }
}
