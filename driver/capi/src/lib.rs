//! The C API of hostcopy's staging engine, declared by
//! `include/hostcopy_stager.h`: stagers, device and host buffers (with
//! registration), and staged transfers each way, blocking or started, of
//! one range or a batch of blocks. The header is the reference for C
//! callers; the repository's `docs/c-api.md` shows a whole program.
//!
//! Every exported function runs its body inside
//! [`catch_unwind`](std::panic::catch_unwind) (`status::entry`): errors and
//! panics become a `hostcopy_status` and the thread's last error message,
//! and nothing unwinds into C.
//!
//! Ownership follows the Rust rules: a started transfer holds shares of
//! the device and host buffers it copies (and the engine holds the
//! stager's lanes), so C may free any handle while a transfer is in
//! flight; only raw host memory is the caller's to keep, as
//! `Stager::start_unchecked`'s contract says. A transfer's hold on a host
//! buffer also claims the bytes it reads or writes (another transfer of
//! them is refused, as Rust's borrows would refuse it) and goes once the
//! transfer has ended (its first wait), not only at its free.

#[cfg(feature = "bench")]
mod bench;
#[cfg(test)]
mod header_check;
mod memory;
#[cfg(feature = "simulator")]
mod sim;
mod stager;
mod status;
mod transfer;

#[cfg(feature = "bench")]
pub use bench::hostcopy_bench_rust_run;
pub use memory::{
    hostcopy_device_buffer, hostcopy_device_buffer_free, hostcopy_device_buffer_get,
    hostcopy_device_buffer_new, hostcopy_device_buffer_wrap, hostcopy_host_buffer,
    hostcopy_host_buffer_data, hostcopy_host_buffer_free, hostcopy_host_buffer_len,
    hostcopy_host_buffer_new, hostcopy_host_buffer_register, hostcopy_host_buffer_registration,
    hostcopy_host_buffer_wait_registered, hostcopy_registration,
};
#[cfg(feature = "simulator")]
pub use sim::{
    hostcopy_sim_fail_call, hostcopy_sim_fail_context, hostcopy_sim_hold, hostcopy_sim_install,
    hostcopy_sim_new_device, hostcopy_sim_panic, hostcopy_sim_release, hostcopy_sim_violations,
};
pub use stager::{
    hostcopy_stager, hostcopy_stager_device, hostcopy_stager_free, hostcopy_stager_get_options,
    hostcopy_stager_new, hostcopy_stager_options, hostcopy_stager_options_default,
};
pub use status::{
    hostcopy_last_error_driver_code, hostcopy_last_error_message, hostcopy_status,
    hostcopy_status_name,
};
pub use transfer::{
    hostcopy_block, hostcopy_copy, hostcopy_stager_run, hostcopy_stager_start, hostcopy_transfer,
    hostcopy_transfer_free, hostcopy_transfer_query, hostcopy_transfer_wait,
};

use status::Failure;

/// `ptr` as a shared reference, or the null-argument failure naming it.
///
/// # Safety
///
/// `ptr` is null or points to a live, aligned `T` that nothing mutates
/// while the reference is used.
unsafe fn reference<'a, T>(ptr: *const T, name: &str) -> Result<&'a T, Failure> {
    // SAFETY: the caller's contract.
    unsafe { ptr.as_ref() }.ok_or_else(|| Failure::null(name))
}

/// Where a function writes a result for C: a pointer checked to be
/// non-null, written once and never read (the caller's memory may be
/// uninitialized, so no reference to it is made).
#[derive(Debug)]
struct Out<T>(*mut T);

impl<T> Out<T> {
    /// Writes the result.
    fn write(self, value: T) {
        // SAFETY: `out`'s caller promised the pointer aligned and writable
        // for a `T`; it is non-null (checked by `out`).
        unsafe { self.0.write(value) }
    }
}

/// `ptr` as the place for a result, or the null-argument failure naming
/// it.
///
/// # Safety
///
/// `ptr` is null or aligned and writable for a `T` (initialized or not)
/// that nothing else uses until the result is written.
unsafe fn out<T>(ptr: *mut T, name: &str) -> Result<Out<T>, Failure> {
    if ptr.is_null() {
        return Err(Failure::null(name));
    }
    Ok(Out(ptr))
}

// C may call any function on an object from several threads at once (the
// header says which); every handle type is therefore shared across threads
// as Rust would share it, which these bounds prove.
const _: () = {
    const fn shared_across_threads<T: Send + Sync>() {}
    shared_across_threads::<hostcopy_stager>();
    shared_across_threads::<hostcopy_transfer>();
    shared_across_threads::<hostcopy_device_buffer>();
    shared_across_threads::<hostcopy_host_buffer>();
};
