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
    /// was not freed): by a staged transfer that could not be drained, a
    /// pending transfer dropped unfinished, or a small upload whose wait
    /// failed after the driver took its bytes.
    pub device_buffers: usize,
    /// What a host runtime kept for a transfer (the Python binding: the
    /// arrays a transfer reads or writes) when the transfer was dropped
    /// before it ended in a process that gave up on its copies (forked,
    /// or at exit), where nothing may wait for its copier
    /// (`SharedTransfer::release_when_ended`, the binding's support).
    pub host_values: usize,
}

/// What the layer has kept for good in this process.
pub fn leaked() -> Leaked {
    Leaked {
        buffers: BUFFERS.load(Ordering::Relaxed),
        device_buffers: DEVICE_BUFFERS.load(Ordering::Relaxed),
        host_values: HOST_VALUES.load(Ordering::Relaxed),
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
        Kept::Uncounted => 0,
    };
    core::mem::forget(value);
}
