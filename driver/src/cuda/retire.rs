//! What the layer keeps for good because queued driver work may still
//! touch it, counted in one place.
//!
//! The rule: memory that a queued copy or host function may still read or
//! write is never freed, never reused and never handed back to safe code.
//! Where the layer cannot prove that work finished (a sticky error left
//! the streams undrained, a pending transfer was dropped unfinished), it
//! keeps the memory for the rest of the process and counts it here, so
//! the cost of an error is bounded by what was in flight and visible
//! through [`leaked`].

use core::sync::atomic::{AtomicUsize, Ordering};

static BUFFERS: AtomicUsize = AtomicUsize::new(0);
static DEVICE_BUFFERS: AtomicUsize = AtomicUsize::new(0);
static HOST_VALUES: AtomicUsize = AtomicUsize::new(0);
static ABANDONED: AtomicUsize = AtomicUsize::new(0);
static HOST_BUFFERS: AtomicUsize = AtomicUsize::new(0);

/// What the layer has kept for good, process-wide.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leaked {
    /// Pinned buffers never freed because a queued copy could still have
    /// touched them: staging buffers and their flags, and buffers given to
    /// [`Stager::device_to_pinned`](super::staging::Stager::device_to_pinned) or
    /// [`Stager::pinned_to_device`](super::staging::Stager::pinned_to_device).
    pub buffers: usize,
    /// Device allocations kept because a queued driver copy could still
    /// have read or written them when their transfer returned (the
    /// [`DeviceBuffer`](super::DeviceBuffer) was free to drop; its memory
    /// was not freed): by a staged transfer whose copies could be waited
    /// for neither by a drain nor by their own events after an error (a
    /// pending transfer dropped unfinished among them), or a small upload
    /// whose wait failed after the driver took its bytes.
    pub device_buffers: usize,
    /// What a host runtime kept for a transfer (the Python binding: the
    /// arrays a transfer reads or writes) when the transfer was dropped
    /// before it ended in a process that gave up on its copies (forked,
    /// or at exit), where nothing may wait for its copier
    /// (`SharedTransfer::release_when_ended`, the binding's support).
    pub host_values: usize,
    /// What was left as it was in a process that gave up on its copies
    /// (forked after CUDA was used, or at exit once the exit handler
    /// stopped waiting): stagers, transfers and their state, whose drop
    /// would wait for threads, copies or a device the process no longer
    /// has ([`keep_if_abandoned`]).
    pub abandoned: usize,
    /// Registered [`HostBuffer`](crate::HostBuffer)s left mapped and
    /// registered when dropped, because a transfer's direct copies of them
    /// could not be waited for after an error (or the process gave up on
    /// its copies).
    pub host_buffers: usize,
}

/// What the layer has kept for good in this process.
pub fn leaked() -> Leaked {
    Leaked {
        buffers: BUFFERS.load(Ordering::Relaxed),
        device_buffers: DEVICE_BUFFERS.load(Ordering::Relaxed),
        host_values: HOST_VALUES.load(Ordering::Relaxed),
        abandoned: ABANDONED.load(Ordering::Relaxed),
        host_buffers: HOST_BUFFERS.load(Ordering::Relaxed),
    }
}

/// What a value given to [`keep`] is counted as in [`Leaked`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kept {
    /// A pinned buffer (a staging buffer, the flags, a buffer of a pinned
    /// copy): [`Leaked::buffers`].
    PinnedBuffer,
    /// A device allocation: [`Leaked::device_buffers`].
    DeviceAllocation,
    /// A value a host runtime kept for a transfer: [`Leaked::host_values`].
    HostValue,
    /// A value left as it was in a process that gave up on its copies:
    /// [`Leaked::abandoned`].
    Abandoned,
    /// A registered host buffer's mapping: [`Leaked::host_buffers`].
    HostBuffer,
    /// Counted through what it holds, or not at all (a kernel's module
    /// and scratch beside the flags that are counted).
    Uncounted,
}

/// Keeps `value` for the rest of the process, counted as `what`: never
/// dropped, so nothing it owns is freed, reused or handed back. The one
/// place the layer leaks on purpose.
pub(crate) fn keep<T>(value: T, what: Kept) {
    match what {
        Kept::PinnedBuffer => BUFFERS.fetch_add(1, Ordering::Relaxed),
        Kept::DeviceAllocation => DEVICE_BUFFERS.fetch_add(1, Ordering::Relaxed),
        Kept::HostValue => HOST_VALUES.fetch_add(1, Ordering::Relaxed),
        Kept::Abandoned => ABANDONED.fetch_add(1, Ordering::Relaxed),
        Kept::HostBuffer => HOST_BUFFERS.fetch_add(1, Ordering::Relaxed),
        Kept::Uncounted => 0,
    };
    core::mem::forget(value);
}

/// Whether this process gave up on its copies (forked after CUDA was used,
/// or at exit once the exit handler stopped waiting for a device:
/// [`Process::abandoned`](crate::process::Process::abandoned)); if it
/// did, keeps what `value` makes for good, counted in
/// [`Leaked::abandoned`]. For a drop that would wait for threads, copies or
/// a device the process no longer has: the one place such a process's
/// values are decided on and kept.
pub fn keep_if_abandoned<T>(value: impl FnOnce() -> T) -> bool {
    let abandoned = crate::process::Process::global().abandoned();
    if abandoned {
        keep(value(), Kept::Abandoned);
    }
    abandoned
}

#[cfg(all(test, unix, not(miri)))]
mod tests {
    use super::*;

    /// In a child forked after CUDA was used, a value is kept and counted;
    /// in this process, which did not give up on its copies, it is given
    /// back. (The child is a real fork: the process-wide state it sets is
    /// its own.)
    #[test]
    fn a_forked_child_keeps_and_counts_what_it_abandons() {
        let before = leaked().abandoned;
        assert!(!keep_if_abandoned(|| std::vec![1u8]));
        assert_eq!(leaked().abandoned, before);
        // SAFETY: the child touches only atomics and a heap value made
        // before the fork, then leaves with `_exit` (no destructors, no
        // atexit handlers of the parent's).
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork failed");
        if child == 0 {
            let process = crate::process::Process::global();
            process.note_cuda_used();
            process.after_fork_in_child();
            let kept = keep_if_abandoned(|| 7u64) && leaked().abandoned == before + 1;
            // SAFETY: ends the child at once, as after any fork.
            unsafe { libc::_exit(if kept { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waits for the child forked above.
        assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the child did not keep and count it (status {status})"
        );
    }
}
