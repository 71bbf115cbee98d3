//! The hand-off between a stager and its feeder thread, apart from what
//! queuing a job involves: jobs handed over in order, the feeder taking
//! each in turn, a job's outcome settled once and waited for, a blocking
//! call that waits until the feeder has nothing left, and one stop.
//!
//! Nothing here calls the driver, and every primitive comes from
//! [`super::sync`]: `tests/feeder_loom.rs` includes this very file and
//! model-checks it with loom, every interleaving of the caller and the
//! feeder up to a bound.

use std::collections::VecDeque;
use std::io;
use std::string::String;

use super::sync::{Arc, Condvar, Mutex, MutexGuard, lock, thread, wait};

/// The feeder's locked state, and the signal that it changed.
#[derive(Debug)]
pub(super) struct Handoff<J> {
    shared: Mutex<Shared<J>>,
    /// Signals a job handed over or the stop to the feeder, and a job
    /// fully queued to a caller waiting to queue its own.
    wake: Condvar,
}

#[derive(Debug)]
struct Shared<J> {
    /// Jobs not fully queued yet, in order; the feeder is queuing the first.
    jobs: VecDeque<J>,
    /// Set once: the feeder returns before it begins another job.
    stop: bool,
}

impl<J> Handoff<J> {
    pub(super) fn new() -> Handoff<J> {
        Handoff {
            shared: Mutex::new(Shared {
                jobs: VecDeque::new(),
                stop: false,
            }),
            wake: Condvar::new(),
        }
    }

    /// Hands `job` to the feeder, after every job handed over before.
    pub(super) fn hand_over(&self, job: J) {
        lock(&self.shared).jobs.push_back(job);
        self.wake.notify_all();
    }

    /// Tells the feeder to return once the job it is queuing is queued;
    /// jobs it has not begun stay unqueued. Stopping again changes nothing.
    pub(super) fn stop(&self) {
        lock(&self.shared).stop = true;
        self.wake.notify_all();
    }

    /// Whether the feeder has nothing in hand (every job handed over is
    /// queued).
    pub(super) fn is_idle(&self) -> bool {
        lock(&self.shared).jobs.is_empty()
    }

    /// Runs `queue` on the calling thread once the feeder has queued every
    /// job handed over before. The lock is held meanwhile: nothing can be
    /// handed over until `queue` returns (a blocking call's caller holds
    /// the stager anyway; this keeps the order plain).
    pub(super) fn when_idle<R>(&self, queue: impl FnOnce() -> R) -> R {
        let mut shared = lock(&self.shared);
        while !shared.jobs.is_empty() {
            shared = wait(&self.wake, shared);
        }
        let result = queue();
        drop(shared);
        result
    }
}

impl<J: Clone> Handoff<J> {
    /// The feeder's life: `queue` each job handed over, in order, until
    /// stopped. A job stays first in line until `queue` returns, so that a
    /// blocking call ([`Handoff::when_idle`]) waits for it.
    pub(super) fn feed(&self, mut queue: impl FnMut(&J)) {
        loop {
            let job = {
                let mut shared = lock(&self.shared);
                loop {
                    if shared.stop {
                        return;
                    }
                    if let Some(job) = shared.jobs.front() {
                        break job.clone();
                    }
                    shared = wait(&self.wake, shared);
                }
            };
            queue(&job);
            lock(&self.shared).jobs.pop_front();
            self.wake.notify_all();
        }
    }
}

/// What became of one job: settled once by whoever queued it, waited for
/// by the caller that made it.
#[derive(Debug)]
pub(super) struct Outcome<T> {
    state: Mutex<T>,
    settled: Condvar,
}

impl<T> Outcome<T> {
    /// An outcome not settled yet: `unsettled` until [`Outcome::settle`].
    pub(super) fn new(unsettled: T) -> Outcome<T> {
        Outcome {
            state: Mutex::new(unsettled),
            settled: Condvar::new(),
        }
    }

    /// The outcome so far, without waiting.
    pub(super) fn now(&self) -> MutexGuard<'_, T> {
        lock(&self.state)
    }

    /// Waits until `settled` holds for the outcome.
    pub(super) fn wait(&self, settled: impl Fn(&T) -> bool) -> MutexGuard<'_, T> {
        let mut state = lock(&self.state);
        while !settled(&state) {
            state = wait(&self.settled, state);
        }
        state
    }

    /// Changes the outcome with `change` and wakes every waiter.
    pub(super) fn update(&self, change: impl FnOnce(&mut T)) {
        let mut state = lock(&self.state);
        change(&mut state);
        self.settled.notify_all();
    }

    /// Replaces the outcome with `outcome` and wakes every waiter.
    pub(super) fn settle(&self, outcome: T) {
        let mut state = lock(&self.state);
        *state = outcome;
        self.settled.notify_all();
    }
}

/// A feeder thread: stopped and joined when dropped.
#[derive(Debug)]
pub(super) struct FeederThread<J> {
    handoff: Arc<Handoff<J>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl<J: Send + 'static> FeederThread<J> {
    /// Starts a thread named `name` that runs `body`, which feeds from the
    /// hand-off ([`Handoff::feed`]) until stopped.
    pub(super) fn spawn(
        name: &str,
        handoff: &Arc<Handoff<J>>,
        body: impl FnOnce(&Handoff<J>) + Send + 'static,
    ) -> io::Result<FeederThread<J>> {
        let theirs = Arc::clone(handoff);
        let thread = thread::Builder::new()
            .name(String::from(name))
            .spawn(move || body(&theirs))?;
        Ok(FeederThread {
            handoff: Arc::clone(handoff),
            thread: Some(thread),
        })
    }
}

impl<J> FeederThread<J> {
    /// Stops the feeder once the job it is queuing is queued, and waits
    /// for its thread to end. Once stopped, does nothing.
    pub(super) fn shutdown(&mut self) {
        self.handoff.stop();
        if let Some(thread) = self.thread.take() {
            // A panic while queuing aborts the process (`AbortOnUnwind`):
            // there is nothing to report here.
            let _ = thread.join();
        }
    }
}

impl<J> Drop for FeederThread<J> {
    fn drop(&mut self) {
        self.shutdown();
    }
}
