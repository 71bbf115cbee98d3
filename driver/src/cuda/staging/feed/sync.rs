//! The feeder's synchronisation primitives, imported from this one place:
//! std's, or loom's when `tests/feeder_loom.rs` model-checks the hand-off
//! (`--cfg loom`). So the code loom explores is the code the feeder runs.

#[cfg(loom)]
pub(super) use loom::sync::{Arc, Condvar, Mutex, MutexGuard};
#[cfg(loom)]
pub(super) use loom::thread;
#[cfg(not(loom))]
pub(super) use std::sync::{Arc, Condvar, Mutex, MutexGuard};
#[cfg(not(loom))]
pub(super) use std::thread;

// loom's threads exist only inside a model: the CUDA layer built on them
// could not start a stager.
#[cfg(all(loom, not(test)))]
compile_error!(
    "`--cfg loom` is for the feeder's model alone: `RUSTFLAGS=\"--cfg loom\" cargo test \
     -p hostcopy-driver --test feeder_loom`, without the `cuda` feature"
);

/// Locks `mutex`, poisoned or not: each of the feeder's locks guards state
/// that a panic cannot leave half-changed (a queue pushed or popped, a
/// flag set, an outcome replaced whole), and a stager's teardown must not
/// panic because some other thread did.
pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Waits on `condvar`, poisoned or not (see [`lock`]).
pub(super) fn wait<'a, T>(condvar: &Condvar, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    condvar
        .wait(guard)
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
