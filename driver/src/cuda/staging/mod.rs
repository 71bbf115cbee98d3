//! Staged transfers between device memory and any host memory, at the
//! link's speed, in safe code: a [`Stager`] owns pinned staging buffers
//! (buffer `k` on stream `k`), a worker pool and a copier thread of its
//! own.
//!
//! Device to host, per chunk: the driver copies the chunk into a staging
//! buffer, then the copier, woken by the chunk's event, copies the staging
//! buffer into the destination with the stager's workers. Host to device
//! is the mirror: the copier fills the staging buffer, then the driver
//! copies it to the device. The chunks go round the buffers, so the host
//! copy of chunk `i` overlaps the transfer of chunk `i + 1`, and the
//! workers split each host copy, so a destination never touched before
//! (`vec![0; n]`, mapped lazily) takes its page faults on many cores at
//! once. The calling thread queues every chunk's driver side when the
//! transfer starts (each behind a wait on a counter of its buffer's, which
//! the copier advances); no host function runs on the context's one
//! host-function thread, so other libraries' host functions neither slow
//! a transfer down nor wait for it.
//!
//! ```no_run
//! use hostcopy_driver::cuda::{Context, DeviceBuffer};
//! use hostcopy_driver::cuda::staging::{Stager, to_host};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let context = Context::primary(0)?;
//! let device = DeviceBuffer::new(&context, 1 << 30)?;
//! let mut host = vec![0u8; 1 << 30];
//! let mut stager = Stager::new(&context)?;
//! stager.run(to_host(&mut host, &device))?;
//! # Ok(())
//! # }
//! ```
//!
//! # One description, three fronts
//!
//! A copy is described once, as a [`TransferSpec`]: [`to_host`] or
//! [`to_device`] names the two memories (destination first), [`at`](TransferSpec::at)
//! a device offset, [`blocks`](TransferSpec::blocks) a batch. What differs
//! between the fronts that take it is only when the caller waits:
//!
//! | front | returns | waits |
//! | --- | --- | --- |
//! | [`Stager::run`] | when the bytes have arrived | in the call |
//! | [`StagingScope::start`] | a [`Transfer`] handle, at once | [`Transfer::wait`], or when the scope returns |
//! | `unsafe` [`Stager::start_unchecked`] | a [`PendingTransfer`], borrowing nothing | [`Stager::finish_pending`], or its drop |
//!
//! [`Stager::scope`] gives the handles of a scope that the caller waits on
//! later while it keeps enqueuing;
//! like [`std::thread::scope`], the scope waits for every transfer it
//! started before it returns, so forgetting a handle cannot free a borrowed
//! buffer the copier is still copying. A scope's transfers, and pending
//! ones, return once their driver side is queued (a few microseconds per
//! chunk: 16 GiB in 1,024 chunks, a few milliseconds), so a stream can be
//! ordered after them at once ([`PendingTransfer::order_before`]).
//!
//! A single transfer below [`StagingOptions::driver_path_below`] takes the
//! driver's path instead, faster there than staging: one driver copy
//! between the device and a pinned buffer of the stager's own, on a stream
//! of its own (not the legacy stream), and a copy between that buffer and
//! the host memory on the calling thread, which returns when the bytes
//! have arrived (what the driver's pageable copy does within its call; the
//! driver never touches the caller's memory). A transfer that returns at
//! once (a scope's, a pending one) takes it only when that cannot block
//! the caller: with no stream given to [`Stager::wait_for`] still running
//! and nothing of the stager's queued; otherwise it is staged.
//!
//! # Batches
//!
//! A transfer of many scattered ranges, such as a KV cache's blocks, is one
//! call: each [`Block`] names a device offset, a host offset and a length.
//! The blocks are packed one after the other into the staging buffers, so
//! many small blocks share a chunk: hostcopy's gather kernel moves them
//! between device memory and the staging buffer where they average under
//! [`KERNEL_BELOW`] (one launch per 255 blocks), else one driver call
//! gathers or scatters them (`cuMemcpyBatchAsync` where the driver has
//! it, CUDA 12.8 and later; else one asynchronous copy per block:
//! [`DeviceCopies`]), and the copier copies them on.
//!
//! ```no_run
//! use hostcopy_driver::cuda::{Context, DeviceBuffer};
//! use hostcopy_driver::cuda::staging::{Block, Stager, to_device, to_host};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! const BLOCK: usize = 256 << 10;
//! let context = Context::primary(0)?;
//! let mut cache = DeviceBuffer::new(&context, 4096 * BLOCK)?;
//! let mut pool = vec![0u8; 1024 * BLOCK];
//! let mut stager = Stager::new(&context)?;
//! // Offload device blocks 5, 900 and 17 to pool slots 0, 1 and 2 ...
//! let offload: Vec<Block> = [5, 900, 17]
//!     .iter()
//!     .enumerate()
//!     .map(|(slot, &block)| Block::new(block * BLOCK, slot * BLOCK, BLOCK))
//!     .collect();
//! stager.run(to_host(&mut pool, &cache).blocks(&offload))?;
//! // ... and restore them later to device blocks 40, 41 and 42.
//! let restore: Vec<Block> = (0..3)
//!     .map(|slot| Block::new((40 + slot) * BLOCK, slot * BLOCK, BLOCK))
//!     .collect();
//! stager.run(to_device(&mut cache, &pool).blocks(&restore))?;
//! // Or without blocking: the offload runs while the caller works on.
//! stager.scope(|scope| -> Result<(), hostcopy_driver::cuda::Error> {
//!     let transfer = scope.start(to_host(&mut pool, &cache).blocks(&offload))?;
//!     // ... other work ...
//!     transfer.wait()
//! })??;
//! # Ok(())
//! # }
//! ```
//!
//! Every block is checked before anything is queued: each must lie inside
//! both memories ([`Error::BlockOutOfBounds`](super::Error::BlockOutOfBounds), with the block's index and
//! the memory it is outside of), and no two may write the same bytes
//! ([`Error::BlocksOverlap`](super::Error::BlocksOverlap), with both indices): destinations are
//! disjoint, sources may overlap.
//!
//! # Errors
//!
//! A stager's driver calls touch only its own streams, events and pinned
//! buffers, which no graph capture can reach, so it makes them in the
//! relaxed capture mode: a stager works while another part of the program
//! captures a graph, even in global mode, and leaves that capture alone;
//! transfers below the crossover too (they never use the legacy stream).
//!
//! A failed wait returns the driver's error; it never hangs. Before it
//! returns, the stager drains its own streams (never the whole context,
//! which the driver refuses while another part of the program captures a
//! graph, breaking that capture). The host memory is touched only by the
//! copier, which finishes its part of every transfer before the transfer
//! returns, after an error too (skipping the host sides after it), so an
//! error never leaves anything writing or reading the caller's host
//! memory. After a non-sticky error the streams drain and the stager works
//! on as before.
//!
//! If the streams cannot be drained (a sticky error), queued copies may
//! still read or write the staging buffers, and, where the transfer's own
//! copies cannot be waited for either, the device buffer: the device
//! allocation is then kept for good (dropping the [`DeviceBuffer`](super::DeviceBuffer) then
//! frees nothing), and the stager refuses further transfers with that
//! error until its streams drain, leaking its staging buffers if it is
//! dropped before. Each leak is counted in [`leaked`].
//!
//! # The fastest transfer on a new machine
//!
//! 1. Start from [`StagingOptions::default`]: 16 MiB chunks, 4 staging
//!    buffers each on its own stream, cores - 4 workers (measured on a
//!    16-core H200 host: 98% of pinned D2H; 4 workers reached only 59%).
//!    Each default's documentation in [`options`](StagingOptions) says
//!    where it comes from.
//! 2. Run the benchmark there: `cargo xtask bench` (or the bundle's
//!    `staged_copy`). It prints, side by side, pinned D2H/H2D (the link),
//!    the driver's pageable path and the stager, with ratios.
//! 3. If the stager trails the pinned figure, try more workers (up to the
//!    cores less one), 3 to 6 buffers, 8 to 32 MiB chunks; for transfers of
//!    64 MiB to a few GiB, one stream with edge chunks from 2 MiB and 8 MiB
//!    chunks to the device (faster there, but see [`DEFAULT_STREAMS`]); for host to
//!    device compare [`Stores::Streaming`] and [`Stores::Cached`] (the
//!    benchmark prints both).
//! 4. Several GPUs at once: one stager per GPU, each on its own thread,
//!    built with [`StagingOptionsBuilder::stagers`] set to the number of
//!    GPUs, so each pool gets its share of the cores.
//! 5. Small transfers take the driver's path below
//!    [`StagingOptions::driver_path_below`] (see [`DRIVER_PATH_BELOW`] for
//!    how that crossover is measured). Pinned memory needs no staging at
//!    all: [`Stager::device_to_pinned`] and [`Stager::pinned_to_device`]
//!    make one asynchronous driver copy at the link's speed.

#[cfg(feature = "cudarc")]
#[cfg_attr(docsrs, doc(cfg(feature = "cudarc")))]
pub mod cudarc;
mod driver_path;
mod engine;
mod feed;
mod in_flight;
mod options;
mod order;
mod pace;
mod pending;
mod plan;
mod scope;
mod spec;
mod stager;
#[doc(hidden)]
pub mod trace;

// The engine's words, for the modules below that use them.
use spec::Direction;

pub use super::retire::{Leaked, leaked};
pub use driver_path::PinnedTransferError;
pub use options::{
    DEFAULT_BUFFERS, DEFAULT_CHUNK, DEFAULT_D2H_WORKERS, DEFAULT_EDGE_CHUNK, DEFAULT_H2D_CHUNK,
    DEFAULT_STREAMS, DRIVER_PATH_BELOW, DeviceCopies, KERNEL_BELOW, MAX_BUFFERS, MAX_CHUNK,
    MIN_CHUNK, RESERVED_CORES, STREAMING_UPLOAD_MAX, StagingOptions, StagingOptionsBuilder, Stores,
    default_workers,
};
pub use order::MAX_ORDER_EVENTS;
pub use pending::PendingTransfer;
pub use plan::Block;
pub use scope::{StagingScope, Transfer};
pub use spec::{TransferSpec, to_device, to_host};
pub use stager::Stager;
