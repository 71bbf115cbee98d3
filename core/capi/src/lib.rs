//! The C library of hostcopy-core: `hostcopy_fn`, `hostcopy_rejected` and
//! `hostcopy_abi_version` as declared by `core/include/hostcopy.h`, in a
//! static and a shared library without std.
//!
//! The functions are hostcopy-core's own `#[no_mangle]` items; naming them
//! here keeps the core linked in, and rustc exports them from the shared
//! library. No code path in them can panic, so the panic handler below is
//! never reached: it exists because a final artifact needs one.

#![no_std]

#[cfg(target_has_atomic = "ptr")]
pub use hostcopy_core::hostcopy_rejected;
pub use hostcopy_core::{hostcopy_abi_version, hostcopy_fn};

// `core::ptr::copy` becomes a call to `memmove`, which the C library provides
// where there is one: the shared library then names libc as a dependency
// instead of leaving `memmove` to whatever the process loaded, and the static
// library lists `-lc` among its native libraries. On bare-metal targets
// compiler_builtins defines `memmove` (as a weak symbol) in the library itself.
#[cfg(target_os = "linux")]
#[link(name = "c")]
unsafe extern "C" {}

/// Halts: nothing in the library panics, and `panic = "abort"` leaves no
/// unwinding to do. Spinning keeps the library free of any platform call.
#[panic_handler]
fn halt(_: &core::panic::PanicInfo<'_>) -> ! {
    loop {
        core::hint::spin_loop();
    }
}
