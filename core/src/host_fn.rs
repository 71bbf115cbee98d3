//! `hostcopy_fn`: the `CUhostFn` that runs one record, and the count of records it rejected.

use core::ffi::c_void;

use crate::HostCopyArgs;
use crate::copy;

/// Declares [`HostFn`] and [`hostcopy_fn`] with the calling convention of `CUDA_CB`.
macro_rules! host_fn_with_abi {
    ($abi:literal) => {
        /// A CUDA host function, `void CUDA_CB fn(void *user_data)`: what
        /// `cuLaunchHostFunc` and graph host nodes call (`CUhostFn` without
        /// its `Option`).
        pub type HostFn = unsafe extern $abi fn(user_data: *mut c_void);

        /// Copies the bytes that the record at `user_data` describes.
        ///
        /// This is a `CUhostFn`: hand it to `cuLaunchHostFunc` or to a graph
        /// host node with the address of a [`HostCopyArgs`] as `user_data`,
        /// and the driver runs the copy on its host-function thread, in
        /// stream order. It never panics or unwinds, never allocates, never
        /// blocks and never calls CUDA.
        ///
        /// What it does with a record:
        /// - `user_data` null: returns; counted as rejected.
        /// - The record is read unaligned: a record packed at any address in
        ///   a byte buffer works.
        /// - `nbytes == 0`: returns without touching `dst` or `src`.
        /// - `dst` or `src` null with `nbytes > 0`, `dst + nbytes` or
        ///   `src + nbytes` past the end of the address space, or `nbytes`
        ///   larger than `isize::MAX` (no object is that large): returns
        ///   without touching memory; counted as rejected (see
        #[cfg_attr(target_has_atomic = "ptr", doc = "  [`hostcopy_rejected`]).")]
        #[cfg_attr(not(target_has_atomic = "ptr"), doc = "  `hostcopy_rejected` where the target has pointer-width atomics).")]
        /// - Overlapping ranges: the result is as if copied through a
        ///   temporary buffer (memmove).
        /// - Otherwise copies `nbytes` bytes. Large copies may use
        ///   non-temporal stores (see [`NON_TEMPORAL_THRESHOLD`](crate::NON_TEMPORAL_THRESHOLD));
        ///   that path ends with the fence that makes the bytes visible to
        ///   other threads before the function returns.
        ///
        /// The calling convention is `CUDA_CB`'s: `stdcall` on 32-bit x86
        /// Windows, the C convention everywhere else.
        ///
        /// # Safety
        ///
        /// `user_data` is null or points to [`HostCopyArgs::SIZE`] readable
        /// bytes. If the record is not rejected, `src` is readable and `dst`
        /// writable for `nbytes` bytes for the whole call, and nothing else
        /// writes to either range meanwhile.
        ///
        /// # Example
        ///
        /// The driver calls it exactly like this, on its own thread:
        ///
        /// ```
        /// use hostcopy_core::{HostCopyArgs, HostFn, hostcopy_fn};
        ///
        /// let src = *b"pinned slot";
        /// let mut dst = [0u8; 11];
        /// let record = HostCopyArgs::new(
        ///     dst.as_mut_ptr().expose_provenance(),
        ///     src.as_ptr().expose_provenance(),
        ///     src.len(),
        /// );
        /// let host_fn: HostFn = hostcopy_fn;
        /// // SAFETY: the record describes two live, disjoint arrays.
        /// unsafe { host_fn(record.user_data()) };
        /// assert_eq!(&dst, b"pinned slot");
        /// ```
        #[unsafe(no_mangle)]
        pub unsafe extern $abi fn hostcopy_fn(user_data: *mut c_void) {
            // SAFETY: the caller upholds `run`'s contract, which is ours.
            unsafe { run(user_data) }
        }
    };
}

cfg_if::cfg_if! {
    if #[cfg(all(windows, target_arch = "x86"))] {
        // `CUDA_CB` is `__stdcall` here; on 64-bit Windows stdcall is the C convention.
        host_fn_with_abi!("stdcall");
    } else {
        host_fn_with_abi!("C");
    }
}

/// [`hostcopy_fn`] as a value of the host-function type, for APIs that take a
/// function pointer.
pub const HOST_COPY_FN: HostFn = hostcopy_fn;

/// The [`ABI_VERSION`](crate::ABI_VERSION) of the code that is running: a C
/// program compares it with the `HOSTCOPY_ABI_VERSION` it was compiled
/// against, to learn which library the loader gave it.
///
/// The C convention on every target, 32-bit Windows included: the header
/// declares it without `HOSTCOPY_CB`, since only the driver's callback type
/// asks for `CUDA_CB`.
///
/// ```
/// assert_eq!(hostcopy_core::hostcopy_abi_version(), hostcopy_core::ABI_VERSION);
/// ```
#[unsafe(no_mangle)]
pub extern "C" fn hostcopy_abi_version() -> u32 {
    crate::ABI_VERSION
}

/// Runs one record as the contract on [`hostcopy_fn`] says.
///
/// # Safety
///
/// As for [`hostcopy_fn`].
#[inline(always)]
unsafe fn run(user_data: *mut c_void) {
    // SAFETY: `user_data` is null or points to a record (our caller).
    let Some(record) = (unsafe { HostCopyArgs::read(user_data) }) else {
        count_rejected();
        return;
    };
    if record.nbytes == 0 {
        return;
    }
    if record.is_rejected() {
        count_rejected();
        return;
    }
    let dst = core::ptr::with_exposed_provenance_mut::<u8>(record.dst);
    let src = core::ptr::with_exposed_provenance::<u8>(record.src);
    // SAFETY: the record was not rejected, so the caller promises that both
    // ranges are valid for `nbytes` bytes; `copy` allows them to overlap.
    unsafe { copy::copy(dst, src, record.nbytes) }
}

cfg_if::cfg_if! {
    if #[cfg(target_has_atomic = "ptr")] {
        use core::sync::atomic::{AtomicUsize, Ordering};

        static REJECTED: AtomicUsize = AtomicUsize::new(0);

        fn count_rejected() {
            // Wraps after usize::MAX rejections rather than panicking.
            REJECTED.fetch_add(1, Ordering::Relaxed);
        }

        /// How many records [`hostcopy_fn`] has rejected in this process
        /// (null `user_data`, null addresses with a nonzero length, ranges
        /// that wrap). A contract violation is never silent: read this after
        /// a run, or poll it. It counts up and wraps at `usize::MAX`.
        ///
        /// Exists on targets with pointer-width atomics (every target CUDA
        /// runs on).
        ///
        /// ```
        /// let before = hostcopy_core::hostcopy_rejected();
        /// // SAFETY: null user_data is part of the contract: rejected and counted.
        /// unsafe { hostcopy_core::hostcopy_fn(core::ptr::null_mut()) };
        /// assert!(hostcopy_core::hostcopy_rejected() > before);
        /// ```
        #[unsafe(no_mangle)]
        pub extern "C" fn hostcopy_rejected() -> usize {
            REJECTED.load(Ordering::Relaxed)
        }
    } else {
        fn count_rejected() {}
    }
}
