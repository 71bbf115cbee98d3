#![doc = include_str!("../README.md")]
#![no_std]
#![deny(missing_docs, unsafe_op_in_unsafe_fn)]

mod copy;
mod host_fn;
mod record;

pub use copy::NON_TEMPORAL_THRESHOLD;
#[cfg(target_has_atomic = "ptr")]
pub use host_fn::hostcopy_rejected;
pub use host_fn::{HOST_COPY_FN, HostFn, hostcopy_abi_version, hostcopy_fn};
pub use record::{ABI_VERSION, HostCopyArgs};
