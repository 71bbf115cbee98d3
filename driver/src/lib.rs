//! The layer above [`hostcopy_core`]: it packs the records that
//! [`hostcopy_fn`] runs, checking every bound the host function cannot check,
//! and keeps records in a fixed-capacity pool when there is no heap.
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
#[cfg_attr(docsrs, doc(cfg(feature = "cuda")))]
pub mod cuda;
mod error;
mod memory;
mod owned;
mod packing;
// The parallel host function has the C calling convention, which is
// CUDA_CB's everywhere but 32-bit x86 Windows.
#[cfg(all(feature = "std", not(all(windows, target_arch = "x86"))))]
#[cfg_attr(docsrs, doc(cfg(feature = "std")))]
pub mod parallel;
mod pool;

pub use error::{PackError, PoolError, Side};
pub use memory::{HostMemory, HostMemoryMut, HostRange, MemorySpace, Plain, RawRegion};
#[cfg(feature = "cuda")]
#[cfg_attr(docsrs, doc(cfg(feature = "cuda")))]
pub use owned::{OwnedRecordCounts, abandoned_records, owned_record_counts};
pub use packing::Record;
pub use pool::{PoolRecord, RecordPool};

#[cfg(target_has_atomic = "ptr")]
pub use hostcopy_core::hostcopy_rejected;
pub use hostcopy_core::{ABI_VERSION, HOST_COPY_FN, HostCopyArgs, HostFn, hostcopy_fn};
