//! The stager's hand-off to its feeder thread, model-checked with loom:
//! every interleaving (up to loom's preemption bound) of a caller handing
//! jobs over, waiting until they are queued, queuing one itself and
//! dropping the feeder, against the feeder taking and queuing them.
//!
//! The code checked is the stager's own: `src/cuda/staging/feed/handoff.rs`
//! with its primitives from `feed/sync.rs`, included below as modules, so
//! that under `--cfg loom` they are loom's. Queuing a job is modelled as
//! settling its outcome: the hand-off does not depend on what queuing does.
//!
//! ```text
//! RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 CARGO_TARGET_DIR=target/loom \
//!     cargo test -p hostcopy-driver --test feeder_loom
//! ```
//!
//! A model that fails reports its deadlock or assertion, then the process
//! aborts (loom's objects are dropped while unwinding): the failing model
//! is the one named in the first `panicked` line.

#![cfg(loom)]

#[path = "../src/cuda/staging/feed/sync.rs"]
mod sync;

#[path = "../src/cuda/staging/feed/handoff.rs"]
mod handoff;

use handoff::{FeederThread, Handoff, Outcome};
use sync::Arc;

/// A job of the model: what became of it.
#[derive(Debug)]
struct Job {
    queued: Outcome<Queued>,
}

#[derive(Debug, Default)]
struct Queued {
    finished: bool,
    /// How many jobs the feeder had queued before this one, or `None`
    /// when a blocking call queued it.
    turn: Option<usize>,
}

impl Job {
    fn new() -> Arc<Job> {
        Arc::new(Job {
            queued: Outcome::new(Queued::default()),
        })
    }

    fn wait_queued(&self) -> sync::MutexGuard<'_, Queued> {
        self.queued.wait(|queued| queued.finished)
    }

    /// Queues the job in `turn`; refuses to queue it twice.
    fn queue(&self, turn: Option<usize>) {
        assert!(!self.queued.now().finished, "a job queued twice");
        self.queued.settle(Queued {
            finished: true,
            turn,
        });
    }
}

/// A feeder that queues each job handed over, numbering its turns.
fn feeder(handoff: &Arc<Handoff<Arc<Job>>>) -> FeederThread<Arc<Job>> {
    FeederThread::spawn("hostcopy-feeder", handoff, |handoff| {
        let mut turn = 0;
        handoff.feed(|job| {
            job.queue(Some(turn));
            turn += 1;
        });
    })
    .expect("loom spawns its threads")
}

#[test]
fn jobs_handed_over_are_queued_once_in_order_and_their_waiters_wake() {
    loom::model(|| {
        let handoff = Arc::new(Handoff::new());
        let feeder = feeder(&handoff);
        let (first, second) = (Job::new(), Job::new());
        handoff.hand_over(Arc::clone(&first));
        handoff.hand_over(Arc::clone(&second));
        assert_eq!(second.wait_queued().turn, Some(1));
        assert_eq!(first.wait_queued().turn, Some(0));
        drop(feeder);
    });
}

#[test]
fn a_blocking_call_queues_only_after_the_feeder_has_queued_what_it_was_handed() {
    loom::model(|| {
        let handoff = Arc::new(Handoff::new());
        let feeder = feeder(&handoff);
        let (first, second, blocking) = (Job::new(), Job::new(), Job::new());
        handoff.hand_over(Arc::clone(&first));
        handoff.hand_over(Arc::clone(&second));
        handoff.when_idle(|| {
            for (job, turn) in [(&first, 0), (&second, 1)] {
                assert_eq!(
                    job.queued.now().turn,
                    Some(turn),
                    "queued before the feeder's"
                );
            }
            blocking.queue(None);
        });
        drop(feeder);
        assert_eq!(blocking.wait_queued().turn, None);
    });
}

#[test]
fn dropping_the_feeder_with_jobs_in_hand_ends_it_with_the_jobs_it_began_queued_in_order() {
    loom::model(|| {
        let handoff = Arc::new(Handoff::new());
        let mut feeder = feeder(&handoff);
        let (first, second) = (Job::new(), Job::new());
        handoff.hand_over(Arc::clone(&first));
        handoff.hand_over(Arc::clone(&second));
        feeder.shutdown();
        // Stopping twice (here, then the drop) changes nothing.
        drop(feeder);
        // The feeder has ended: whatever it began is queued whole, in order.
        let first = first.queued.now();
        let second = second.queued.now();
        if second.finished {
            assert!(first.finished, "the second job queued before the first");
            assert_eq!((first.turn, second.turn), (Some(0), Some(1)));
        }
    });
}

#[test]
fn a_stopped_feeder_begins_no_job() {
    loom::model(|| {
        let handoff = Arc::new(Handoff::new());
        let feeder = feeder(&handoff);
        handoff.stop();
        let job = Job::new();
        handoff.hand_over(Arc::clone(&job));
        drop(feeder);
        assert!(!job.queued.now().finished, "queued after the stop");
    });
}

#[test]
fn a_feeder_dropped_before_it_waits_for_work_still_ends() {
    loom::model(|| {
        let handoff = Arc::new(Handoff::new());
        drop(feeder(&handoff));
    });
}
