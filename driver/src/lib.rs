//! hostcopy's layer above [`hostcopy_core`]: staged transfers between GPU
//! memory and any host memory at the link's speed (feature `cuda`), the
//! launches of host copy functions on streams and graphs under them, and
//! packing the records those functions run, with every bound checked.
//!
//! # The one-call staged copy (feature `cuda`)
//!
//! 1 GiB from the GPU into a plain `Vec<u8>`, in safe code, at the speed of
//! the link (98% of a pinned copy on an H200 host, 3.5 to 4x the driver's
//! own pageable path):
//!
//! ```no_run
//! # #[cfg(feature = "cuda")]
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use hostcopy_driver::cuda::{Context, DeviceBuffer};
//! use hostcopy_driver::cuda::staging::{Stager, to_device, to_host};
//!
//! let context = Context::primary(0)?;
//! let device = DeviceBuffer::new(&context, 1 << 30)?;
//! let mut host = vec![0u8; 1 << 30];
//! let mut stager = Stager::new(&context)?; // pinned staging buffers, streams, workers
//! stager.run(to_host(&mut host, &device))?;
//! stager.run(to_device(&mut DeviceBuffer::new(&context, 1 << 30)?, &host))?;
//! # Ok(())
//! # }
//! # #[cfg(not(feature = "cuda"))]
//! # fn main() {}
//! ```
//!
//! A copy is one description (`to_host`, `to_device`, with `.at` or
//! `.blocks`); `cuda::staging` has the rest: non-blocking transfers in a scope, batches
//! of scattered blocks, memory another runtime owns (`cuda::DeviceView`;
//! cudarc's `CudaSlice` and views with feature `cudarc`), stream order
//! (`Stager::wait_for`), the options and how to tune them.
//! The layer opens libcuda at run time: a binary starts on a machine
//! without a driver, and its first call says what is missing.
//!
//! # The layers, and the feature each needs
//!
//! | layer | feature | what |
//! | --- | --- | --- |
//! | `cuda::staging` | `cuda` | staged transfers, blocking or in a scope; single ranges or batches |
//! | `cuda::staging::cudarc` | `cudarc` | the same from and to cudarc's device memory, in cudarc's stream order |
//! | `cuda` | `cuda` | contexts, streams, events, pinned and device buffers, owned and scoped launches, graphs; `cuda::sim` with `simulator` |
//! | `parallel` | `std` | `hostcopy_parallel_fn`: one record's copy split across worker threads |
//! | [`Record`], [`RecordPool`] | none (`no_std`, no heap) | packing with bounds checks; a fixed-capacity record pool |
//!
//! Packing needs no CUDA and works anywhere, on a host-function thread too:
//!
//! ```
//! use hostcopy_driver::{PackError, Record, Side};
//!
//! let pinned_slot = [1u32; 16]; // any plain-data element type
//! let mut pageable = [0u32; 8];
//! let err = Record::pack(&mut pageable, &pinned_slot).unwrap_err();
//! assert_eq!(err, PackError::OutOfBounds { side: Side::Dst, offset: 0, nbytes: 64, len: 32 });
//! ```
//!
//! # Features
//!
//! None is on by default; all are additive.
//! - `alloc`: `Vec<T>` as host memory.
//! - `std`: implies `alloc`; adds the `parallel` module, a host function
//!   that splits one record's copy across a pool of worker threads.
//! - `cuda`: implies `std`; the CUDA layer (the `cuda` module): contexts,
//!   streams, graphs, pinned and device buffers, launches with borrowed,
//!   owned and raw records, each running `hostcopy_fn` or the parallel host
//!   function, and staged transfers (`cuda::staging`): device to host into
//!   any host memory, and back, at the link's speed in safe code.
//! - `cudarc`: implies `cuda`; staged transfers from and to cudarc's
//!   `CudaSlice`, `CudaView` and `CudaViewMut` in stream order with a
//!   cudarc stream (`cuda::staging::cudarc`), and `Context::from_cudarc`.
//!   cudarc's CUDA version stays the application's choice.
//! - `simulator`: implies `cuda`; `cuda::sim`, an in-process simulated
//!   driver that the CUDA layer's tests run against, in CI and under Miri.
//! - `defmt`: `defmt::Format` on the error and region types.

#![no_std]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs, unsafe_op_in_unsafe_fn)]

#[cfg(feature = "alloc")]
extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

#[cfg(feature = "cuda")]
#[doc(hidden)]
pub mod awaiting;
#[cfg(feature = "cuda")]
#[cfg_attr(docsrs, doc(cfg(feature = "cuda")))]
pub mod cuda;
mod error;
#[cfg(feature = "std")]
mod host_buffer;
mod memory;
mod owned;
mod packing;
// The parallel host function has the C calling convention, which is
// CUDA_CB's everywhere but 32-bit x86 Windows.
#[cfg(all(feature = "std", not(all(windows, target_arch = "x86"))))]
#[cfg_attr(docsrs, doc(cfg(feature = "std")))]
pub mod parallel;
mod pool;
#[cfg(feature = "std")]
#[cfg_attr(docsrs, doc(cfg(feature = "std")))]
pub mod prefault;
#[cfg(feature = "std")]
#[doc(hidden)]
pub mod process;

pub use error::{PackError, PoolError, Side};
#[doc(hidden)]
pub use error::{PackErrorKind, PoolErrorKind};
#[cfg(feature = "std")]
#[doc(hidden)]
pub use host_buffer::HostBufferErrorKind;
#[cfg(feature = "std")]
#[cfg_attr(docsrs, doc(cfg(feature = "std")))]
pub use host_buffer::{HostBuffer, HostBufferError};
pub use memory::{
    HostMemory, HostMemoryMut, HostRange, MemorySpace, Plain, RawHostMemory, RawRegion,
};
#[cfg(feature = "cuda")]
#[cfg_attr(docsrs, doc(cfg(feature = "cuda")))]
pub use owned::{OwnedRecordCounts, abandoned_records, owned_record_counts};
pub use packing::Record;
pub use pool::{PoolRecord, RecordPool};

#[cfg(target_has_atomic = "ptr")]
pub use hostcopy_core::hostcopy_rejected;
pub use hostcopy_core::{ABI_VERSION, HOST_COPY_FN, HostCopyArgs, HostFn, hostcopy_fn};

/// The README's Rust blocks, compiled (and where they need no GPU, run) as
/// doctests.
#[cfg(all(doctest, feature = "cuda"))]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

/// The Rust guide's blocks, compiled (and where they need no GPU, run) as
/// doctests.
#[cfg(all(doctest, feature = "cudarc"))]
#[doc = include_str!("../../docs/rust.md")]
pub struct RustGuideDoctests;

/// The tuning guide's Rust blocks, compiled and run as doctests.
#[cfg(all(doctest, feature = "cuda"))]
#[doc = include_str!("../../docs/tuning.md")]
pub struct TuningGuideDoctests;

/// The compatibility page's Rust block, compiled as a doctest.
#[cfg(all(doctest, feature = "cuda"))]
#[doc = include_str!("../../docs/compatibility.md")]
pub struct CompatibilityDoctests;
