//! One description of a staged copy: its direction, its host memory, its
//! device memory, and which bytes move (one range or a batch of blocks).
//! Built by [`to_host`] and [`to_device`], refined by
//! [`TransferSpec::at`] and [`TransferSpec::blocks`], and handed to a
//! front that decides when the caller waits: [`Stager::run`] (blocking),
//! [`StagingScope::start`] (returns a handle) or
//! [`Stager::start_unchecked`] (returns a transfer that borrows nothing).
//!
//! [`Stager::run`]: super::Stager::run
//! [`StagingScope::start`]: super::StagingScope::start
//! [`Stager::start_unchecked`]: super::Stager::start_unchecked

use core::marker::PhantomData;

use super::plan::{self, Block};
use crate::cuda::device::DeviceMemory;
use crate::cuda::error::Error;
use crate::{HostMemory, HostMemoryMut, HostRange};

/// Which way a transfer goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Direction {
    DeviceToHost,
    HostToDevice,
}

/// The device side of a transfer: read from, or written to.
///
/// A destination is taken as `&mut` by [`to_device`]; here both are shared
/// references.
#[derive(Clone, Copy)]
pub(super) enum DeviceSide<'a> {
    Source(&'a dyn DeviceMemory),
    Destination(&'a dyn DeviceMemory),
}

impl<'a> DeviceSide<'a> {
    pub(super) fn memory(&self) -> &'a dyn DeviceMemory {
        match self {
            DeviceSide::Source(memory) | DeviceSide::Destination(memory) => *memory,
        }
    }

    pub(super) fn direction(&self) -> Direction {
        match self {
            DeviceSide::Source(_) => Direction::DeviceToHost,
            DeviceSide::Destination(_) => Direction::HostToDevice,
        }
    }

    /// `memory` on the same side.
    #[cfg(feature = "cudarc")]
    pub(super) fn with_memory<'b>(&self, memory: &'b dyn DeviceMemory) -> DeviceSide<'b> {
        match self {
            DeviceSide::Source(_) => DeviceSide::Source(memory),
            DeviceSide::Destination(_) => DeviceSide::Destination(memory),
        }
    }
}

/// The bytes a transfer moves: one range, or a batch.
#[derive(Clone, Copy, Debug)]
pub(super) enum Blocks<'a> {
    /// The whole host memory, and as many bytes at `offset` of the device
    /// memory.
    One { offset: usize },
    /// Each block's bytes, checked before anything is queued.
    Many(&'a [Block]),
}

/// A staged copy between host memory and device memory, borrowing both for
/// `'a`: made by [`to_host`] or [`to_device`], run by a front
/// ([`Stager::run`](super::Stager::run),
/// [`StagingScope::start`](super::StagingScope::start),
/// [`Stager::start_unchecked`](super::Stager::start_unchecked)).
///
/// By default the whole host memory moves, from or to the start of the
/// device memory. [`at`](Self::at) moves the device range; [`blocks`](Self::blocks)
/// makes it a batch. Both say which device bytes move, so the later call
/// replaces what the earlier one said: `.at(n).blocks(&b)` is `.blocks(&b)`
/// (a block names its own device offset), `.blocks(&b).at(n)` is `.at(n)`.
///
/// ```no_run
/// use hostcopy_driver::cuda::{Context, DeviceBuffer};
/// use hostcopy_driver::cuda::staging::{Block, Stager, to_device, to_host};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let context = Context::primary(0)?;
/// let mut device = DeviceBuffer::new(&context, 64 << 20)?;
/// let mut host = vec![0u8; 16 << 20];
/// let mut stager = Stager::new(&context)?;
/// // 16 MiB from the start of `device`, then from its byte 32 MiB.
/// stager.run(to_host(&mut host, &device))?;
/// stager.run(to_host(&mut host, &device).at(32 << 20))?;
/// // Back to the device, as two blocks of 8 MiB swapped round.
/// let blocks = [Block::new(8 << 20, 0, 8 << 20), Block::new(0, 8 << 20, 8 << 20)];
/// stager.run(to_device(&mut device, &host).blocks(&blocks))?;
/// # Ok(())
/// # }
/// ```
///
/// Not `Clone`: it holds the host memory's borrow (a mutable one for a
/// copy to the host), which one transfer at a time may use.
#[must_use = "a transfer spec copies nothing until a stager runs or starts it"]
pub struct TransferSpec<'a> {
    /// Writable if `device` is the source (from `HostMemoryMut`).
    pub(super) host: HostRange,
    pub(super) device: DeviceSide<'a>,
    pub(super) blocks: Blocks<'a>,
    /// The borrow `host` came from.
    _host: PhantomData<&'a mut [u8]>,
}

/// Copies `dst.len()` bytes from the start of `src` into `dst` (see
/// [`TransferSpec`] for other ranges and batches).
///
/// ```no_run
/// # use hostcopy_driver::cuda::{Context, DeviceBuffer};
/// # use hostcopy_driver::cuda::staging::{Stager, to_host};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let context = Context::primary(0)?;
/// let device = DeviceBuffer::new(&context, 1 << 30)?;
/// let mut host = vec![0u8; 1 << 30];
/// Stager::new(&context)?.run(to_host(&mut host, &device))?;
/// # Ok(())
/// # }
/// ```
pub fn to_host<'a, D, S>(dst: &'a mut D, src: &'a S) -> TransferSpec<'a>
where
    D: HostMemoryMut + ?Sized,
    S: DeviceMemory,
{
    TransferSpec {
        host: dst.host_range_mut(),
        device: DeviceSide::Source(src),
        blocks: Blocks::One { offset: 0 },
        _host: PhantomData,
    }
}

/// Copies all of `src` to the start of `dst` (see [`TransferSpec`] for
/// other ranges and batches).
///
/// ```no_run
/// # use hostcopy_driver::cuda::{Context, DeviceBuffer};
/// # use hostcopy_driver::cuda::staging::{Stager, to_device};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let context = Context::primary(0)?;
/// let mut device = DeviceBuffer::new(&context, 1 << 30)?;
/// let host = vec![7u8; 1 << 30];
/// Stager::new(&context)?.run(to_device(&mut device, &host))?;
/// # Ok(())
/// # }
/// ```
pub fn to_device<'a, D, S>(dst: &'a mut D, src: &'a S) -> TransferSpec<'a>
where
    D: DeviceMemory,
    S: HostMemory + ?Sized,
{
    TransferSpec {
        host: src.host_range(),
        device: DeviceSide::Destination(dst),
        blocks: Blocks::One { offset: 0 },
        _host: PhantomData,
    }
}

impl<'a> TransferSpec<'a> {
    /// The device range starts at byte `device_offset` of the device
    /// memory (and is as long as the host memory). Replaces
    /// [`blocks`](Self::blocks) if that was called before.
    pub fn at(self, device_offset: usize) -> TransferSpec<'a> {
        TransferSpec {
            blocks: Blocks::One {
                offset: device_offset,
            },
            ..self
        }
    }

    /// A batch: each block's bytes, between its device offset and its host
    /// offset, at the speed of one large transfer. Replaces
    /// [`at`](Self::at) if that was called before.
    ///
    /// Every block is checked before anything is queued: each must lie in
    /// both memories ([`Error::BlockOutOfBounds`](crate::cuda::Error::BlockOutOfBounds)),
    /// and no two may write the same bytes of the destination
    /// ([`Error::BlocksOverlap`](crate::cuda::Error::BlocksOverlap)); both
    /// name the offending blocks. Sources may overlap.
    ///
    /// The blocks are borrowed for as long as the memories: for a scope's
    /// transfer, the scope (so a table made inside the scope's closure is
    /// made before it instead).
    pub fn blocks(self, blocks: &'a [Block]) -> TransferSpec<'a> {
        TransferSpec {
            blocks: Blocks::Many(blocks),
            ..self
        }
    }

    /// The bytes the copy moves, once checked against the `device_len`
    /// bytes of its device memory: the range inside it
    /// ([`Error::DeviceOutOfBounds`]), or every block inside both memories
    /// with no two writing the same bytes.
    pub(super) fn device_bytes(&self, device_len: usize) -> Result<usize, Error> {
        match self.blocks {
            Blocks::One { offset } => {
                let nbytes = self.host.len;
                if offset
                    .checked_add(nbytes)
                    .is_none_or(|end| end > device_len)
                {
                    return Err(Error::DeviceOutOfBounds {
                        offset,
                        nbytes,
                        len: device_len,
                    });
                }
                Ok(nbytes)
            }
            Blocks::Many(blocks) => {
                let direction = self.device.direction();
                plan::check_blocks(blocks, direction, self.host.len, device_len)?;
                Ok(blocks.iter().map(|block| block.len).sum())
            }
        }
    }

    /// The same copy with `memory` as its device side.
    #[cfg(feature = "cudarc")]
    pub(super) fn with_device<'b>(&self, memory: &'b dyn DeviceMemory) -> TransferSpec<'b>
    where
        'a: 'b,
    {
        TransferSpec {
            host: self.host,
            device: self.device.with_memory(memory),
            blocks: self.blocks,
            _host: PhantomData,
        }
    }
}

impl core::fmt::Debug for TransferSpec<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("TransferSpec")
            .field("direction", &self.device.direction())
            .field("host", &self.host)
            .field("blocks", &self.blocks)
            .finish()
    }
}
