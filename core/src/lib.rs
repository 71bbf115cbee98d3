#![doc = include_str!("../README.md")]
#![no_std]
#![deny(missing_docs, unsafe_op_in_unsafe_fn)]

mod copy;
mod host_fn;
mod record;

pub use copy::NON_TEMPORAL_THRESHOLD;
#[cfg(target_has_atomic = "ptr")]
pub use host_fn::hostcopy_rejected;
pub use host_fn::{HOST_COPY_FN, HostFn, hostcopy_fn};
pub use record::{ABI_VERSION, HostCopyArgs};

// The staticlib and cdylib crate types are final artifacts: they need a panic
// handler even though no code path here can panic. On hosted targets std
// provides it (and C programs linking a Rust archive get std's runtime either
// way); nothing in this crate uses std. On bare-metal targets the crate brings
// its own, which only halts. A Rust firmware that defines its own handler
// cannot also link this crate: Cargo builds every listed crate type, also for
// dependencies.
cfg_if::cfg_if! {
    if #[cfg(target_os = "none")] {
        #[panic_handler]
        fn halt(_: &core::panic::PanicInfo<'_>) -> ! {
            loop {
                core::hint::spin_loop();
            }
        }
    } else {
        extern crate std;
    }
}
