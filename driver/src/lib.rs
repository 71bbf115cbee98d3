//! The layer above `hostcopy-core`: packing records, launching them on
//! streams and graphs. Being built; today it only re-exports the core.

#![no_std]
#![deny(missing_docs, unsafe_op_in_unsafe_fn)]

pub use hostcopy_core as core_fn;
