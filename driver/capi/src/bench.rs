//! Feature `bench`: the same staged transfer through the Rust API, in the
//! process of a C program, so that `examples/stager_copy.c` times the C
//! API and the Rust API side by side on one stager. Never in a shipped
//! library.

use std::ffi::c_void;
use std::time::Instant;

use hostcopy_driver::cuda::Context;
use hostcopy_driver::cuda::staging::{to_device, to_host};

use crate::memory::hostcopy_device_buffer;
use crate::stager::hostcopy_stager;
use crate::status::{Failure, entry, hostcopy_status};
use crate::{out, reference};

/// Runs `len` bytes between `host` and the start of `device` (an
/// allocated buffer no transfer holds) as a Rust program does,
/// `stager.run(to_host(host, &buffer))` or `to_device(&mut buffer, host)`,
/// and writes the seconds `run` took.
///
/// # Safety
///
/// `stager` is null or live; `device` is null or a buffer from
/// `hostcopy_device_buffer_new` that no other call uses during this one;
/// `host` is null or `len` bytes that nothing else uses during the call;
/// `seconds` is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hostcopy_bench_rust_run(
    stager: *mut hostcopy_stager,
    device: *mut hostcopy_device_buffer,
    host: *mut c_void,
    len: usize,
    direction: i32,
    seconds: *mut f64,
) -> hostcopy_status {
    entry("hostcopy_bench_rust_run", || {
        // SAFETY: the caller's contract.
        let (stager, seconds) = unsafe {
            (
                reference(stager.cast_const(), "stager")?,
                out(seconds, "seconds")?,
            )
        };
        // SAFETY: the caller's contract: no other call uses the handle.
        let device = unsafe { device.as_mut() }.ok_or_else(|| Failure::null("device"))?;
        if host.is_null() {
            return Err(Failure::null("host"));
        }
        // SAFETY: the caller's contract: `len` bytes nothing else uses.
        let host = unsafe { core::slice::from_raw_parts_mut(host.cast::<u8>(), len) };
        let buffer = device
            .allocated_mut()
            .ok_or_else(|| Failure::invalid("an allocated device buffer that no transfer holds"))?;
        let _saved = Context::save_current()?;
        let mut stager = stager.lock()?;
        let start = Instant::now();
        match direction {
            0 => stager.run(to_host(host, &*buffer))?,
            1 => stager.run(to_device(buffer, &*host))?,
            other => return Err(Failure::invalid(format!("direction {other}"))),
        }
        seconds.write(start.elapsed().as_secs_f64());
        Ok(())
    })
}
