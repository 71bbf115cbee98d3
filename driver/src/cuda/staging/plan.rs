//! How a transfer goes: its route ([`route`]: nothing to do, the driver's
//! path, or staged), and where it is staged, how it is cut into chunks:
//! which bytes of which blocks each chunk carries, where they sit in its
//! staging buffer, and the copier's list of copies.
//!
//! A single transfer is one block. A batch is many, packed one after the
//! other into the staging buffers: many small blocks share one chunk (one
//! gathering driver call, one host copy list), and a block larger than a
//! chunk's room is split across chunks.

use std::vec::Vec;

use hostcopy_core::HostCopyArgs;

use super::Direction;
use super::options::{DeviceCopies, STREAMING_UPLOAD_MAX, StagingOptions, Stores};
use crate::cuda::error::{BlockSide, Error};
use crate::cuda::ffi::CUdeviceptr;

/// One block of a batched transfer: `len` bytes at byte `device_offset` of
/// the device memory and at byte `host_offset` of the host memory.
///
/// ```
/// use hostcopy_driver::cuda::staging::Block;
///
/// // Block 7 of a cache of 256 KiB blocks, to slot 2 of a host pool.
/// let block = Block::new(7 * (256 << 10), 2 * (256 << 10), 256 << 10);
/// assert_eq!(block.len, 256 << 10);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Block {
    /// Byte offset in the device memory.
    pub device_offset: usize,
    /// Byte offset in the host memory.
    pub host_offset: usize,
    /// Length in bytes (0: nothing to copy).
    pub len: usize,
}

impl Block {
    /// A block of `len` bytes at `device_offset` and `host_offset`.
    pub const fn new(device_offset: usize, host_offset: usize, len: usize) -> Block {
        Block {
            device_offset,
            host_offset,
            len,
        }
    }
}

/// Host copies of a many-block chunk are cut to at most this many bytes,
/// so that the workers share a chunk of a few large blocks evenly.
const HOST_PIECE: usize = 512 << 10;

/// Host copies of blocks next to each other are joined up to a chunk's
/// size over this many (and [`HOST_PIECE`]), so that a chunk of a pool's
/// small slots still leaves every worker of the pool its share: the pool
/// hands out whole copies.
const HOST_PARTS: usize = 64;

/// Chunks split the byte stream at multiples of this (where the chunk size
/// is one): blocks whose offsets and lengths are multiples of 16 then keep
/// 16-byte aligned staging offsets in every chunk, and the gather kernel
/// moves them 16 bytes at a time instead of one.
const SPLIT_ALIGN: usize = 16;

/// The sizes of the chunks a transfer of `len` bytes is cut into: chunks
/// of at most `chunk` bytes, the first and last ones growing from `edge`
/// (`edge`, twice that, ... below `chunk`: as many steps as fit at both
/// ends), the rest of equal size (within [`SPLIT_ALIGN`] bytes). Every
/// chunk but the last is a multiple of [`SPLIT_ALIGN`] where `chunk` is
/// (`edge` is rounded down to one). The small first chunk
/// starts the second stage early (the host copy of a D2H transfer, the
/// driver's copy of an H2D one); the small last chunk leaves little for it
/// after the first stage ends. `edge >= chunk`: equal chunks throughout.
pub(super) fn chunk_sizes(len: usize, chunk: usize, edge: usize) -> Vec<usize> {
    let chunk = chunk.max(1);
    let unit = split_unit(chunk);
    let mut ramp = Vec::new();
    // A multiple of the unit, as every split point should be.
    let mut size = (edge / unit * unit).max(unit);
    while size < chunk {
        ramp.push(size);
        size = size.saturating_mul(2);
    }
    while ramp
        .iter()
        .sum::<usize>()
        .checked_mul(2)
        .is_none_or(|ends| ends > len)
    {
        ramp.pop();
    }
    let ends = 2 * ramp.iter().sum::<usize>();
    // The bytes past the last whole unit go on the very last chunk, so
    // that every split point falls on a unit.
    let rest = (len - ends) % unit;
    let mut sizes = ramp.clone();
    sizes.extend(equal_chunks(len - ends - rest, chunk));
    sizes.extend(ramp.iter().rev());
    match sizes.last_mut() {
        Some(last) if *last + rest <= chunk => *last += rest,
        _ if rest > 0 => sizes.push(rest),
        _ => {}
    }
    sizes
}

/// What chunks split at: [`SPLIT_ALIGN`] where `chunk` is a multiple of
/// it, else any byte.
fn split_unit(chunk: usize) -> usize {
    if chunk.is_multiple_of(SPLIT_ALIGN) {
        SPLIT_ALIGN
    } else {
        1
    }
}

/// As few chunks of at most `chunk` bytes as hold `len` (whole units of
/// `split_unit(chunk)`), of equal size within a unit, so that no short
/// chunk trails the others; each a whole number of units.
fn equal_chunks(len: usize, chunk: usize) -> impl Iterator<Item = usize> {
    let unit = split_unit(chunk);
    debug_assert!(len.is_multiple_of(unit));
    let count = len.div_ceil(chunk);
    let units = len / unit;
    let (each, extra) = match units.checked_div(count) {
        Some(each) => (each, units % count),
        None => (0, 0),
    };
    (0..count).map(move |index| (each + usize::from(index < extra)) * unit)
}

/// A range of a chunk's driver copy: `len` bytes between `device` and
/// staging address `staging` (for a direct copy, the registered host
/// address).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct DevicePiece {
    pub(super) device: CUdeviceptr,
    pub(super) staging: usize,
    pub(super) len: usize,
}

/// One chunk of a planned transfer.
#[derive(Debug)]
pub(super) struct PlannedChunk {
    /// Its number among the stager's chunks, in the order they are queued.
    pub(super) seq: u64,
    /// The staging buffer it goes through: `seq % buffers`.
    pub(super) buffer: usize,
    /// Bytes it carries.
    pub(super) len: usize,
    /// The driver's side: one copy, or a gathering batch.
    pub(super) device: Vec<DevicePiece>,
    /// How the driver's side moves ([`choose_moves`]).
    pub(super) device_move: DeviceMove,
    /// The copier's side, in the direction's order (D2H: staging to
    /// host; H2D: host to staging).
    pub(super) host: Vec<HostCopyArgs>,
}

/// How a chunk's driver side moves its pieces between the device memory
/// and its staging buffer. The lanes carry it out and decide nothing,
/// but for one fallback: a batch copy the driver turns out not to have,
/// under [`DeviceCopies::Auto`], becomes a loop (and later plans know it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum DeviceMove {
    /// One piece, one copy.
    Copy,
    /// Several pieces, one batch call (`cuMemcpyBatchAsync`).
    Batch,
    /// Several pieces, one copy each.
    Loop,
    /// Several pieces, through the gather kernel and the buffer's device
    /// scratch, which one copy moves to or from the staging buffer.
    Gather,
}

/// What the planner takes into account for the driver's side: the
/// stager's choice, and what it knows of the driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Capabilities {
    pub(super) device_copies: DeviceCopies,
    /// Under [`DeviceCopies::Auto`], chunks whose pieces average below it
    /// gather.
    pub(super) kernel_below: usize,
    /// The driver has the batch copy, as far as known (it refused it once:
    /// `false`).
    pub(super) batch: bool,
    /// The gather kernel and its scratch: loaded (`Some(true)`), could not
    /// be (`Some(false)`), not tried yet (`None`: the planner asks for it
    /// only where a chunk would gather).
    pub(super) kernel: Option<bool>,
}

/// Sets each chunk's [`DeviceMove`] from `capabilities`. Returns whether
/// some chunk would gather while the kernel is not tried yet: the caller
/// then loads it and chooses again.
pub(super) fn choose_moves(chunks: &mut [PlannedChunk], capabilities: &Capabilities) -> bool {
    let mut needs_kernel = false;
    for chunk in chunks {
        chunk.device_move = if chunk.device.len() <= 1 {
            DeviceMove::Copy
        } else {
            let gathers = match capabilities.device_copies {
                DeviceCopies::Kernel => true,
                DeviceCopies::Auto => {
                    chunk.len < capabilities.kernel_below.saturating_mul(chunk.device.len())
                        && capabilities.kernel != Some(false)
                }
                DeviceCopies::Batch | DeviceCopies::Loop => false,
            };
            let copies = match capabilities.device_copies {
                DeviceCopies::Batch => DeviceMove::Batch,
                DeviceCopies::Loop => DeviceMove::Loop,
                DeviceCopies::Auto | DeviceCopies::Kernel if capabilities.batch => {
                    DeviceMove::Batch
                }
                DeviceCopies::Auto | DeviceCopies::Kernel => DeviceMove::Loop,
            };
            needs_kernel |= gathers && capabilities.kernel.is_none();
            if gathers { DeviceMove::Gather } else { copies }
        };
    }
    needs_kernel
}

/// Checks a batch against its memories: every block inside both, and no
/// two blocks writing the same bytes (destinations disjoint; sources may
/// overlap). Nothing is queued before this passes.
pub(super) fn check_blocks(
    blocks: &[Block],
    direction: Direction,
    host_len: usize,
    device_len: usize,
) -> Result<(), Error> {
    for (index, block) in blocks.iter().enumerate() {
        for (side, offset, len) in [
            (BlockSide::Host, block.host_offset, host_len),
            (BlockSide::Device, block.device_offset, device_len),
        ] {
            if offset.checked_add(block.len).is_none_or(|end| end > len) {
                return Err(Error::BlockOutOfBounds {
                    index,
                    side,
                    offset,
                    nbytes: block.len,
                    len,
                });
            }
        }
    }
    let destination = |block: &Block| match direction {
        Direction::DeviceToHost => block.host_offset,
        Direction::HostToDevice => block.device_offset,
    };
    if disjoint_by_units(blocks, destination) == Some(true) {
        return Ok(());
    }
    match overlap_by_sorting(blocks, destination) {
        Some((first, second)) => Err(Error::BlocksOverlap { first, second }),
        None => Ok(()),
    }
}

/// Units a batch's destinations may span per block, at most, for
/// [`disjoint_by_units`] to map them (a bit each).
const UNITS_PER_BLOCK: usize = 1024;

/// Units a batch's blocks may cover per block on average, at most, for
/// [`disjoint_by_units`] to mark them one by one.
const MARKS_PER_BLOCK: usize = 64;

/// Whether no two destinations overlap, found in one pass over a bitmap:
/// the destinations' offsets and lengths are multiples of a power of two
/// (a pool's slots: 4 KiB, the block size), so a bit per unit of that size
/// over the span they cover tells where two meet. `None` where that unit
/// is too small for the span or the bytes (odd lengths, blocks far
/// apart): then only sorting answers. For 1 GiB of 4 KiB blocks to
/// shuffled device slots, on the 2-core development VM, sorting took 17
/// ms (27 ms sorting indices by their block's destination), about what
/// the link takes to move the bytes; this took 1.3 ms.
fn disjoint_by_units(blocks: &[Block], destination: impl Fn(&Block) -> usize) -> Option<bool> {
    let (mut low, mut high, mut bits, mut bytes, mut count) = (usize::MAX, 0, 0, 0usize, 0usize);
    for block in blocks.iter().filter(|block| block.len > 0) {
        let start = destination(block);
        low = low.min(start);
        // In bounds (checked first), so no sum overflows.
        high = high.max(start + block.len);
        bits |= start | block.len;
        bytes += block.len;
        count += 1;
    }
    if count < 2 {
        return Some(true);
    }
    let shift = bits.trailing_zeros();
    let units = (high - low) >> shift;
    if units > count.saturating_mul(UNITS_PER_BLOCK)
        || bytes >> shift > count.saturating_mul(MARKS_PER_BLOCK)
    {
        return None;
    }
    let mut map = std::vec![0u64; units.div_ceil(64)];
    for block in blocks.iter().filter(|block| block.len > 0) {
        let first = (destination(block) - low) >> shift;
        for unit in first..first + (block.len >> shift) {
            let (word, bit) = (unit / 64, 1u64 << (unit % 64));
            if map[word] & bit != 0 {
                return Some(false);
            }
            map[word] |= bit;
        }
    }
    Some(true)
}

/// The lower and higher index of two blocks whose destinations overlap,
/// found by sorting the destinations; `None` if there are none.
fn overlap_by_sorting(
    blocks: &[Block],
    destination: impl Fn(&Block) -> usize,
) -> Option<(usize, usize)> {
    // Sorted with the ends beside the starts, not by index into `blocks`:
    // the sort then reads memory in order.
    let mut order: Vec<(usize, usize, usize)> = blocks
        .iter()
        .enumerate()
        .filter(|(_, block)| block.len > 0)
        .map(|(index, block)| (destination(block), destination(block) + block.len, index))
        .collect();
    order.sort_unstable();
    order
        .windows(2)
        .find(|pair| pair[0].1 > pair[1].0)
        .map(|pair| (pair[0].2.min(pair[1].2), pair[0].2.max(pair[1].2)))
}

/// Where a transfer's memories are and how it is cut.
#[derive(Clone, Copy)]
pub(super) struct Layout<'a> {
    pub(super) direction: Direction,
    pub(super) host: usize,
    pub(super) device: CUdeviceptr,
    pub(super) blocks: &'a [Block],
    /// Staging buffer addresses.
    pub(super) staging: &'a [usize],
    /// The number of the transfer's first chunk; chunk `s` uses buffer
    /// `s % staging.len()`.
    pub(super) first: u64,
}

/// How the engine carries out a transfer: the plan's decision.
#[derive(Debug)]
pub(super) enum Route {
    /// Nothing to copy.
    Empty,
    /// One range below the stager's crossover: one driver copy through the
    /// stager's own pinned buffer, the calling thread copying the host
    /// side.
    DriverPath,
    /// Queued on the stager's streams: the bytes over registered host
    /// memory as `direct` driver copies between it and the device (each
    /// within one registered range; `staging` is the host address), the
    /// rest through the staging buffers in `staged` chunks (their device
    /// moves are chosen against the driver's capabilities,
    /// [`choose_moves`]), their host copies written with `stores`.
    Queued {
        direct: Vec<DevicePiece>,
        staged: Vec<PlannedChunk>,
        stores: Stores,
    },
}

/// How many bytes from a host address on are registered, at most a
/// given length, within one registered range: 0 where none are.
pub(super) type Registered<'a> = &'a mut dyn FnMut(usize, usize) -> usize;

/// Decides the route of a checked transfer of `total` bytes laid out as
/// `layout` says (`one_range`: a single range, `layout.blocks` its one
/// block), with the stager's `options`:
/// - the bytes of each block that lie in registered host memory
///   (`registered`, where any is) are copied directly, the rest staged as
///   below;
/// - a single range of fewer than `driver_path_below` bytes (not empty,
///   nothing registered) takes the driver's path, where
///   `driver_path_free` says that the path would wait for no other work
///   (asked only then: a blocking call's path always is);
/// - nothing to copy is [`Route::Empty`];
/// - anything else is staged in chunks of the direction's size (`chunk`
///   to the host, `h2d_chunk` to the device, growing from `edge_chunk` at
///   both ends: [`chunk_sizes`]), with streaming stores into the caller's
///   memory (to the host) and the stager's `h2d_stores` into its buffers,
///   or where it set none, those of [`upload_stores`] (`blocking`: the
///   caller waits for the transfer).
pub(super) fn route(
    layout: &Layout<'_>,
    total: usize,
    one_range: bool,
    options: &StagingOptions,
    driver_path_free: impl FnOnce() -> Result<bool, Error>,
    blocking: bool,
    registered: Option<Registered<'_>>,
) -> Result<Route, Error> {
    let (direct, rest) = match registered {
        Some(registered) => split_registered(layout, registered),
        None => (Vec::new(), None),
    };
    let direct_bytes: usize = direct.iter().map(|piece| piece.len).sum();
    if direct.is_empty()
        && one_range
        && total > 0
        && total < options.driver_path_below
        && driver_path_free()?
    {
        return Ok(Route::DriverPath);
    }
    if total == 0 {
        return Ok(Route::Empty);
    }
    let staged_bytes = total - direct_bytes;
    let (chunk, stores) = match layout.direction {
        Direction::DeviceToHost => (options.chunk, Stores::Streaming),
        Direction::HostToDevice => (
            options.h2d_chunk(),
            options
                .h2d_stores
                .unwrap_or_else(|| upload_stores(staged_bytes, blocking)),
        ),
    };
    let staged = match (&rest, staged_bytes) {
        (_, 0) => Vec::new(),
        (Some(rest), _) => {
            let layout = Layout {
                blocks: rest,
                ..*layout
            };
            plan(
                &layout,
                &chunk_sizes(staged_bytes, chunk, options.edge_chunk()),
            )
        }
        (None, _) => plan(
            layout,
            &chunk_sizes(staged_bytes, chunk, options.edge_chunk()),
        ),
    };
    Ok(Route::Queued {
        direct,
        staged,
        stores,
    })
}

/// The stores that fill the staging buffers of an upload staging
/// `staged` bytes under the default options: streaming where it is
/// `blocking` (its caller waits, and the DMA engine reads each buffer as
/// soon as it is filled) and at most [`STREAMING_UPLOAD_MAX`] bytes;
/// cached otherwise.
pub(super) fn upload_stores(staged: usize, blocking: bool) -> Stores {
    if blocking && staged <= STREAMING_UPLOAD_MAX {
        Stores::Streaming
    } else {
        Stores::Cached
    }
}

/// The direct copies of the blocks' registered bytes (in `registered`'s
/// ranges), and, where there are any, the blocks that are left to stage
/// (`None`: all of `layout.blocks`).
///
/// To the host, direct copies cover whole pages of host memory only: the
/// bytes of a block before its first page boundary and after its last are
/// staged. Where a transfer's direct copies cannot be waited for, the pages
/// they write are moved away from the driver (`InUse::keep`); whole pages
/// of the transfer's own bytes hold no byte that another borrower (the
/// rest of a split buffer) may be using meanwhile.
fn split_registered(
    layout: &Layout<'_>,
    registered: Registered<'_>,
) -> (Vec<DevicePiece>, Option<Vec<Block>>) {
    let page = match layout.direction {
        Direction::DeviceToHost => crate::prefault::page_size(),
        Direction::HostToDevice => 1,
    };
    let mut direct = Vec::new();
    let mut rest = Vec::new();
    // Whether `rest` holds every block before the current one.
    let mut started = false;
    for (index, block) in layout.blocks.iter().enumerate() {
        let mut block = *block;
        while block.len > 0 {
            let host = layout.host + block.host_offset;
            let len = registered(host, block.len).min(block.len);
            // The edge before the first page boundary is staged, and so is
            // what is left of whole pages.
            let head = (host.next_multiple_of(page) - host).min(len);
            let whole = (len - head) / page * page;
            if whole == 0 {
                break;
            }
            if !started {
                // The first registered bytes: every block before is
                // staged whole.
                rest.extend_from_slice(&layout.blocks[..index]);
                started = true;
            }
            if head > 0 {
                rest.push(Block { len: head, ..block });
                block = past(block, head);
            }
            direct.push(DevicePiece {
                device: layout.device + block.device_offset as CUdeviceptr,
                staging: host + head,
                len: whole,
            });
            block = past(block, whole);
        }
        if started && block.len > 0 {
            rest.push(block);
        }
    }
    if direct.is_empty() {
        (direct, None)
    } else {
        (direct, Some(rest))
    }
}

/// What is left of `block` past its first `bytes`.
fn past(block: Block, bytes: usize) -> Block {
    Block::new(
        block.device_offset + bytes,
        block.host_offset + bytes,
        block.len - bytes,
    )
}

/// Cuts checked blocks into chunks of `sizes` (bytes per chunk, summing to
/// the blocks' total), packing blocks one after the other.
pub(super) fn plan(layout: &Layout<'_>, sizes: &[usize]) -> Vec<PlannedChunk> {
    let many = layout.blocks.len() > 1;
    let mut chunks = Vec::with_capacity(sizes.len());
    let mut blocks = layout.blocks.iter().filter(|block| block.len > 0);
    let mut current = blocks.next().copied();
    // Pieces a chunk has, about: its bytes over the blocks' mean length.
    let (bytes, count) = layout.blocks.iter().fold((0, 0), |(bytes, count), block| {
        (bytes + block.len, count + usize::from(block.len > 0))
    });
    let mean = (bytes / count.max(1)).max(1);
    for (index, &size) in sizes.iter().enumerate() {
        let seq = layout.first + index as u64;
        let buffer = (seq % layout.staging.len() as u64) as usize;
        let base = layout.staging[buffer];
        let mut planned = PlannedChunk {
            seq,
            buffer,
            len: 0,
            device: Vec::with_capacity(size / mean + 1),
            device_move: DeviceMove::Copy,
            host: Vec::new(),
        };
        let join = HOST_PIECE.min(size.div_ceil(HOST_PARTS));
        while planned.len < size {
            let Some(block) = current.as_mut() else {
                break;
            };
            let take = block.len.min(size - planned.len);
            let staging = base + planned.len;
            planned.device.push(DevicePiece {
                device: layout.device + block.device_offset as CUdeviceptr,
                staging,
                len: take,
            });
            let host = layout.host + block.host_offset;
            let piece = if many { HOST_PIECE } else { take };
            for at in (0..take).step_by(piece.max(1)) {
                let len = piece.min(take - at);
                push_host(
                    &mut planned.host,
                    match layout.direction {
                        Direction::DeviceToHost => HostCopyArgs::new(host + at, staging + at, len),
                        Direction::HostToDevice => HostCopyArgs::new(staging + at, host + at, len),
                    },
                    join,
                );
            }
            planned.len += take;
            block.device_offset += take;
            block.host_offset += take;
            block.len -= take;
            if block.len == 0 {
                current = blocks.next().copied();
            }
        }
        chunks.push(planned);
    }
    chunks
}

/// Adds `copy` to a chunk's host copies, joined to the last one where it
/// continues it on both sides and the two stay within `join` bytes:
/// blocks next to each other in host memory (a pool's slots, packed in
/// the staging buffer as they are) make one copy, not one each.
fn push_host(list: &mut Vec<HostCopyArgs>, copy: HostCopyArgs, join: usize) {
    if let Some(last) = list.last_mut() {
        let continues = last.dst + last.nbytes == copy.dst && last.src + last.nbytes == copy.src;
        if continues && last.nbytes + copy.nbytes <= join {
            last.nbytes += copy.nbytes;
            return;
        }
    }
    list.push(copy);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two chunks: one of 4 pieces of 1 KiB, one of a single 16 KiB piece.
    fn two_chunks() -> Vec<PlannedChunk> {
        let blocks: Vec<Block> = (0..4)
            .map(|i| Block::new(i * 4096, i * 1024, 1024))
            .chain([Block::new(1 << 20, 8192, 16 << 10)])
            .collect();
        let layout = Layout {
            direction: Direction::DeviceToHost,
            host: 1 << 40,
            device: 1 << 44,
            blocks: &blocks,
            staging: &[1 << 41, 1 << 42],
            first: 0,
        };
        plan(&layout, &[4096, 16 << 10])
    }

    /// `blocks` between host memory at 1 TiB and device memory at 16 TiB,
    /// through two staging buffers, from chunk 0.
    fn layout_of(direction: Direction, blocks: &[Block]) -> Layout<'_> {
        Layout {
            direction,
            host: 1 << 40,
            device: 1 << 44,
            blocks,
            staging: &[1 << 41, 1 << 42],
            first: 0,
        }
    }

    /// The route of one range of `len` bytes in `direction`, with options
    /// of 1 MiB chunks and a 64 KiB crossover; `free`: whether the
    /// driver's path would wait for nothing, `None` where it must not be
    /// asked.
    fn route_of(len: usize, direction: Direction, free: Option<bool>) -> Route {
        let options = StagingOptions::builder()
            .chunk(1 << 20)
            .driver_path_below(64 << 10)
            .h2d_stores(Stores::Cached)
            .build()
            .unwrap();
        let blocks = [Block::new(0, 0, len)];
        let layout = layout_of(direction, &blocks);
        let asked = || Ok(free.expect("the driver's path was asked about"));
        route(&layout, len, true, &options, asked, false, None).unwrap()
    }

    /// Registered bytes are copied directly, one copy a registered range,
    /// and the rest staged, block by block; a single small range that is
    /// registered never takes the driver's path.
    #[test]
    fn registered_bytes_are_copied_directly_and_the_rest_staged_block_by_block() {
        const HOST: usize = 1 << 40;
        // The first 3 KiB registered, in ranges of 1 KiB.
        let mut registered = |addr: usize, len: usize| {
            let offset = addr - HOST;
            if offset >= 3072 {
                return 0;
            }
            len.min(3072.min((offset / 1024 + 1) * 1024) - offset)
        };
        let blocks = [
            Block::new(0, 0, 2048),
            Block::new(4096, 2560, 1024),
            Block::new(8192, 8192, 1024),
        ];
        let layout = Layout {
            direction: Direction::HostToDevice,
            host: HOST,
            device: 1 << 44,
            blocks: &blocks,
            staging: &[1 << 41, 1 << 42],
            first: 0,
        };
        let options = StagingOptions::builder()
            .chunk(1 << 20)
            .driver_path_below(64 << 10)
            .build()
            .unwrap();
        let asked = || panic!("the driver's path was asked about");
        let planned = route(
            &layout,
            4096,
            false,
            &options,
            asked,
            true,
            Some(&mut registered),
        )
        .unwrap();
        let Route::Queued { direct, staged, .. } = planned else {
            panic!("{planned:?}");
        };
        let piece = |device: u64, host: usize, len| DevicePiece {
            device: (1 << 44) + device,
            staging: HOST + host,
            len,
        };
        assert_eq!(
            direct,
            [
                piece(0, 0, 1024),
                piece(1024, 1024, 1024),
                piece(4096, 2560, 512)
            ]
        );
        assert_eq!(staged.len(), 1);
        let copies: Vec<(usize, usize)> = staged[0]
            .host
            .iter()
            .map(|copy| (copy.src - HOST, copy.nbytes))
            .collect();
        assert_eq!(copies, [(3072, 512), (8192, 1024)], "the rest, staged");
        let moved: Vec<u64> = staged[0]
            .device
            .iter()
            .map(|piece| piece.device - (1 << 44))
            .collect();
        assert_eq!(moved, [4608, 8192]);
        // One small registered range: direct, not the driver's path.
        let one = [Block::new(0, 0, 512)];
        let layout = Layout {
            blocks: &one,
            ..layout
        };
        let asked = || panic!("the driver's path was asked about");
        let planned = route(
            &layout,
            512,
            true,
            &options,
            asked,
            true,
            Some(&mut registered),
        )
        .unwrap();
        assert!(
            matches!(&planned, Route::Queued { direct, staged, .. } if direct.len() == 1 && staged.is_empty()),
            "{planned:?}"
        );
    }

    #[test]
    fn a_downloads_direct_copies_cover_whole_pages_and_its_edges_are_staged() {
        const HOST: usize = 1 << 40;
        let page = crate::prefault::page_size();
        // Four pages registered, in ranges of two.
        let mut registered = |addr: usize, len: usize| {
            let offset = addr - HOST;
            if offset >= 4 * page {
                return 0;
            }
            len.min((offset / (2 * page) + 1) * 2 * page - offset)
        };
        // Host bytes 100 to three pages and 100: the first and the last
        // pages it touches are shared with whoever holds the rest of them.
        let blocks = [Block::new(0, 100, 3 * page)];
        let options = StagingOptions::builder()
            .chunk(1 << 20)
            .driver_path_below(0)
            .build()
            .unwrap();
        let piece = |device: usize, host: usize, len| DevicePiece {
            device: (1 << 44) + device as u64,
            staging: HOST + host,
            len,
        };
        let routed = |direction, registered: Registered<'_>| {
            let layout = Layout {
                direction,
                host: HOST,
                device: 1 << 44,
                blocks: &blocks,
                staging: &[1 << 41, 1 << 42],
                first: 0,
            };
            let asked = || panic!("the driver's path was asked about");
            match route(
                &layout,
                3 * page,
                false,
                &options,
                asked,
                true,
                Some(registered),
            )
            .unwrap()
            {
                Route::Queued { direct, staged, .. } => (direct, staged),
                other => panic!("{other:?}"),
            }
        };
        let (direct, staged) = routed(Direction::DeviceToHost, &mut registered);
        assert_eq!(
            direct,
            [
                piece(page - 100, page, page),
                piece(2 * page - 100, 2 * page, page)
            ]
        );
        let copies: Vec<(usize, usize)> = staged
            .iter()
            .flat_map(|chunk| chunk.host.iter())
            .map(|copy| (copy.dst - HOST, copy.nbytes))
            .collect();
        assert_eq!(
            copies,
            [(100, page - 100), (3 * page, 100)],
            "the edges, staged"
        );
        // To the device nothing is written to the host: every registered
        // byte is direct.
        let (direct, staged) = routed(Direction::HostToDevice, &mut registered);
        assert_eq!(
            direct,
            [
                piece(0, 100, 2 * page - 100),
                piece(2 * page - 100, 2 * page, page + 100)
            ]
        );
        assert!(staged.is_empty());
    }

    #[test]
    fn the_route_is_the_driver_path_below_the_crossover_only_while_it_is_free() {
        let small = 4 << 10;
        assert!(matches!(
            route_of(small, Direction::DeviceToHost, Some(true)),
            Route::DriverPath
        ));
        match route_of(small, Direction::DeviceToHost, Some(false)) {
            Route::Queued {
                direct,
                staged: chunks,
                stores,
            } => {
                assert!(direct.is_empty());
                assert_eq!(chunks.len(), 1);
                assert_eq!(chunks[0].len, small);
                assert_eq!(stores, Stores::Streaming);
            }
            other => panic!("{other:?}"),
        }
        // Nothing to copy, and from the crossover on, asks nothing.
        assert!(matches!(
            route_of(0, Direction::HostToDevice, None),
            Route::Empty
        ));
        match route_of(3 << 20, Direction::HostToDevice, None) {
            Route::Queued {
                direct,
                staged: chunks,
                stores,
            } => {
                assert!(direct.is_empty());
                let sizes: Vec<usize> = chunks.iter().map(|chunk| chunk.len).collect();
                assert_eq!(sizes, [1 << 20; 3]);
                // The stager's stores to the device (streaming to the host).
                assert_eq!(stores, Stores::Cached);
                assert_eq!(chunks[1].buffer, 1, "buffers taken in turn");
            }
            other => panic!("{other:?}"),
        }
    }

    /// Under the default options a blocking upload of at most
    /// `STREAMING_UPLOAD_MAX` bytes staged writes its staging buffers with
    /// streaming stores, any other upload with cached ones; registered
    /// bytes do not count (they are not staged); stores the stager set are
    /// every upload's, and a download's host side always streams.
    #[test]
    fn a_blocking_upload_up_to_the_threshold_streams_its_staging_writes() {
        let stores_of = |options: &StagingOptions, direction, len: usize, blocking: bool| {
            let blocks = [Block::new(0, 0, len)];
            let layout = layout_of(direction, &blocks);
            let asked = || Ok(false);
            match route(&layout, len, false, options, asked, blocking, None).unwrap() {
                Route::Queued { stores, .. } => stores,
                other => panic!("{other:?}"),
            }
        };
        let default = StagingOptions::default();
        let (up, max) = (Direction::HostToDevice, STREAMING_UPLOAD_MAX);
        assert_eq!(stores_of(&default, up, 16 << 20, true), Stores::Streaming);
        assert_eq!(stores_of(&default, up, max, true), Stores::Streaming);
        assert_eq!(stores_of(&default, up, max + 1, true), Stores::Cached);
        assert_eq!(stores_of(&default, up, 16 << 20, false), Stores::Cached);
        let down = Direction::DeviceToHost;
        assert_eq!(stores_of(&default, down, 16 << 20, true), Stores::Streaming);
        assert_eq!(
            stores_of(&default, down, 16 << 20, false),
            Stores::Streaming
        );
        for set in [Stores::Cached, Stores::Streaming] {
            let options = StagingOptions::builder().h2d_stores(set).build().unwrap();
            assert_eq!(options.h2d_stores(), Some(set));
            for blocking in [true, false] {
                assert_eq!(stores_of(&options, up, 16 << 20, blocking), set);
                assert_eq!(stores_of(&options, up, max + 1, blocking), set);
            }
        }
        assert_eq!(default.h2d_stores(), None);
        // The staged bytes decide, not the transfer's: most of a large
        // upload registered leaves a small one staged.
        let mut registered = |addr: usize, len: usize| {
            let offset = addr - (1 << 40);
            len.min((STREAMING_UPLOAD_MAX + (1 << 20)).saturating_sub(offset))
        };
        let total = STREAMING_UPLOAD_MAX + (2 << 20);
        let blocks = [Block::new(0, 0, total)];
        let layout = layout_of(up, &blocks);
        let asked = || Ok(false);
        match route(
            &layout,
            total,
            false,
            &default,
            asked,
            true,
            Some(&mut registered),
        )
        .unwrap()
        {
            Route::Queued { stores, staged, .. } => {
                assert_eq!(staged.iter().map(|chunk| chunk.len).sum::<usize>(), 1 << 20);
                assert_eq!(stores, Stores::Streaming);
            }
            other => panic!("{other:?}"),
        }
    }

    fn moves(chunks: &[PlannedChunk]) -> Vec<DeviceMove> {
        chunks.iter().map(|chunk| chunk.device_move).collect()
    }

    #[test]
    fn the_plan_says_how_each_chunk_moves_from_the_capabilities() {
        let mut chunks = two_chunks();
        let auto = Capabilities {
            device_copies: DeviceCopies::Auto,
            kernel_below: 32 << 10,
            batch: true,
            kernel: None,
        };
        // Small pieces would gather: the kernel is asked for first.
        assert!(choose_moves(&mut chunks, &auto));
        assert_eq!(moves(&chunks), [DeviceMove::Gather, DeviceMove::Copy]);
        let loaded = Capabilities {
            kernel: Some(true),
            ..auto
        };
        assert!(!choose_moves(&mut chunks, &loaded));
        assert_eq!(moves(&chunks), [DeviceMove::Gather, DeviceMove::Copy]);
        // No kernel: the batch copy, or a loop where the driver refused it.
        let no_kernel = Capabilities {
            kernel: Some(false),
            ..auto
        };
        assert!(!choose_moves(&mut chunks, &no_kernel));
        assert_eq!(moves(&chunks), [DeviceMove::Batch, DeviceMove::Copy]);
        let no_batch = Capabilities {
            batch: false,
            ..no_kernel
        };
        choose_moves(&mut chunks, &no_batch);
        assert_eq!(moves(&chunks), [DeviceMove::Loop, DeviceMove::Copy]);
        // Pieces averaging above the threshold take the copy engine.
        let large = Capabilities {
            kernel_below: 1024,
            ..auto
        };
        assert!(!choose_moves(&mut chunks, &large));
        assert_eq!(moves(&chunks), [DeviceMove::Batch, DeviceMove::Copy]);
        // What the stager was told wins over what the driver has.
        for (copies, expected) in [
            (DeviceCopies::Batch, DeviceMove::Batch),
            (DeviceCopies::Loop, DeviceMove::Loop),
            (DeviceCopies::Kernel, DeviceMove::Gather),
        ] {
            let told = Capabilities {
                device_copies: copies,
                kernel_below: 1024,
                batch: false,
                kernel: Some(true),
            };
            choose_moves(&mut chunks, &told);
            assert_eq!(moves(&chunks), [expected, DeviceMove::Copy], "{copies:?}");
        }
    }

    #[test]
    fn chunks_sum_to_the_length_and_never_exceed_the_chunk() {
        for len in [1, 1 << 20, 3 << 20, 16 << 20, 64 << 20, (1 << 30) + 12345] {
            let sizes = chunk_sizes(len, 16 << 20, 16 << 20);
            assert_eq!(sizes.iter().sum::<usize>(), len, "{len}");
            assert!(sizes.iter().all(|&s| s > 0 && s <= 16 << 20), "{sizes:?}");
            let (min, max) = (sizes.iter().min(), sizes.iter().max());
            assert!(max.unwrap() - min.unwrap() < 2 * SPLIT_ALIGN, "{sizes:?}");
        }
        let mib = |sizes: Vec<usize>| sizes.iter().map(|s| s >> 20).collect::<Vec<_>>();
        assert_eq!(
            mib(chunk_sizes(64 << 20, 16 << 20, 16 << 20)),
            [16, 16, 16, 16]
        );
        assert_eq!(mib(chunk_sizes(40 << 20, 16 << 20, 32 << 20)), [13, 13, 13]);
        assert!(chunk_sizes(0, 16 << 20, 4 << 20).is_empty());
    }

    #[test]
    fn the_first_and_last_chunks_grow_from_the_edge_as_far_as_the_length_allows() {
        let mib = |sizes: Vec<usize>| sizes.iter().map(|s| s >> 20).collect::<Vec<_>>();
        let (chunk, edge) = (16 << 20, 4 << 20);
        assert_eq!(
            mib(chunk_sizes(64 << 20, chunk, edge)),
            [4, 8, 13, 13, 13, 8, 4]
        );
        assert_eq!(
            mib(chunk_sizes(64 << 20, chunk, 1 << 20)),
            [1, 2, 4, 8, 11, 11, 11, 8, 4, 2, 1]
        );
        // Only the steps that fit at both ends: 24 MiB holds 4 + 8 twice.
        assert_eq!(mib(chunk_sizes(24 << 20, chunk, edge)), [4, 8, 8, 4]);
        assert_eq!(mib(chunk_sizes(20 << 20, chunk, edge)), [4, 12, 4]);
        // Below two edges: equal chunks.
        assert_eq!(mib(chunk_sizes(7 << 20, chunk, edge)), [7]);
        // 1 TiB is 65,536 chunks a case: not under Miri.
        let largest = if cfg!(miri) { 1 << 30 } else { 1 << 40 };
        for len in [1, 4096, 5 << 20, 64 << 20, (1 << 30) + 12345, largest] {
            for edge in [1, 4096, 1 << 20, 4 << 20, 16 << 20, usize::MAX] {
                let sizes = chunk_sizes(len, chunk, edge);
                let total: usize = sizes.iter().sum();
                assert_eq!(total, len, "{len} {edge}");
                assert!(sizes.iter().all(|&s| s > 0 && s <= chunk), "{len} {edge}");
            }
        }
    }

    /// Before: equal chunks split the stream at any byte, so every block
    /// after a chunk's first sat at an odd staging offset, and the gather
    /// kernel copied whole chunks of 4 KiB blocks a byte at a time.
    #[test]
    fn chunks_split_aligned_blocks_at_aligned_offsets() {
        // Under Miri a sixteenth of the blocks, in chunks a sixteenth as large.
        let scale = if cfg!(miri) { 16 } else { 1 };
        let (block, count) = (4096, 3 * 1024 / scale + 7);
        let blocks: Vec<Block> = (0..count)
            .map(|i| Block::new(i * block, (count - 1 - i) * block, block))
            .collect();
        let staging = [1 << 20, 64 << 20];
        let layout = Layout {
            direction: Direction::DeviceToHost,
            host: 0,
            device: 1 << 32,
            blocks: &blocks,
            staging: &staging,
            first: 0,
        };
        for (chunk, edge) in [(5 << 20, 5 << 20), (4 << 20, 256 << 10), (1 << 20, 48)] {
            let (chunk, edge) = (chunk / scale, edge.max(scale * 16) / scale);
            let sizes = chunk_sizes(count * block, chunk, edge);
            assert!(
                sizes[..sizes.len() - 1].iter().all(|s| s % 16 == 0),
                "{sizes:?}"
            );
            for planned in plan(&layout, &sizes) {
                let base = staging[planned.buffer];
                for piece in &planned.device {
                    assert_eq!((piece.staging - base) % 16, 0, "{chunk} {edge}");
                    assert_eq!(piece.len % 16, 0, "{chunk} {edge}");
                }
            }
        }
        // Split points stay on 16 with an edge that is no multiple of it,
        // and with a middle that is none either.
        for (len, edge) in [((40 << 20) + 5, 5000), ((24 << 20) + 7, 4 << 20)] {
            let sizes = chunk_sizes(len, 16 << 20, edge);
            assert_eq!(sizes.iter().sum::<usize>(), len);
            assert!(sizes.iter().all(|&s| s > 0 && s <= 16 << 20), "{sizes:?}");
            assert!(
                sizes[..sizes.len() - 1].iter().all(|s| s % 16 == 0),
                "{sizes:?}"
            );
        }
        // A length that is no multiple of 16 ends in a short last chunk.
        let sizes = chunk_sizes((48 << 20) + 5, 16 << 20, 16 << 20);
        assert_eq!(sizes.iter().sum::<usize>(), (48 << 20) + 5);
        assert!(sizes[..2].iter().all(|s| s % 16 == 0), "{sizes:?}");
        assert!(sizes.iter().all(|&s| s <= 16 << 20), "{sizes:?}");
    }

    #[test]
    fn blocks_next_to_each_other_in_host_memory_share_a_host_copy() {
        // Scattered device blocks into consecutive host slots, one gap.
        let (block, count) = (4096, 300);
        let blocks: Vec<Block> = (0..count)
            .map(|i| {
                let slot = if i < 200 { i } else { i + 1 };
                Block::new((count - i) * 2 * block, slot * block, block)
            })
            .collect();
        for direction in [Direction::DeviceToHost, Direction::HostToDevice] {
            let layout = Layout {
                direction,
                host: 1 << 30,
                device: 1 << 32,
                blocks: &blocks,
                staging: &[1 << 20],
                first: 0,
            };
            let chunks = plan(&layout, &[count * block]);
            let lens: Vec<usize> = chunks[0].host.iter().map(|c| c.nbytes).collect();
            // Joined up to 1/64 of the chunk (19,200 bytes): four blocks a
            // copy, 50 before the gap and 25 after it.
            assert_eq!(lens, [4 * block; 75], "{direction:?}");
            assert_eq!(chunks[0].device.len(), count, "one driver piece a block");
            // A chunk of 64 MiB joins up to `HOST_PIECE` (16 Ki blocks:
            // not under Miri).
            if cfg!(miri) {
                continue;
            }
            let many: Vec<Block> = (0..16 << 10)
                .map(|i| Block::new(2 * i * block, i * block, block))
                .collect();
            let layout = Layout {
                blocks: &many,
                ..layout
            };
            let chunks = plan(&layout, &[many.len() * block]);
            assert!(chunks[0].host.iter().all(|c| c.nbytes == HOST_PIECE));
            assert_eq!(chunks[0].host.len(), (64 << 20) / HOST_PIECE);
        }
    }

    #[test]
    fn overlapping_destinations_are_refused_with_both_indices() {
        let blocks = [
            Block::new(0, 0, 10),
            Block::new(100, 20, 10),
            Block::new(200, 15, 10),
        ];
        assert_eq!(
            check_blocks(&blocks, Direction::DeviceToHost, 1000, 1000),
            Err(Error::BlocksOverlap {
                first: 1,
                second: 2
            })
        );
        // The same blocks read overlapping host bytes and write disjoint
        // device bytes: fine for host to device.
        assert_eq!(
            check_blocks(&blocks, Direction::HostToDevice, 1000, 1000),
            Ok(())
        );
    }

    /// `n` blocks of `len` bytes: host slots in order, device slots
    /// shuffled (a fixed xorshift, so every run checks the same batch).
    fn shuffled_slots(n: usize, len: usize) -> Vec<Block> {
        let mut slots: Vec<usize> = (0..n).collect();
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        for i in (1..n).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            slots.swap(i, (x % (i as u64 + 1)) as usize);
        }
        (0..n)
            .map(|i| Block::new(slots[i] * len, i * len, len))
            .collect()
    }

    #[test]
    fn slots_are_checked_on_a_bitmap_and_an_overlap_is_refused_with_both_indices() {
        let n = if cfg!(miri) { 64 } else { 4096 };
        let mut blocks = shuffled_slots(n, 4096);
        let len = n * 4096;
        for direction in [Direction::DeviceToHost, Direction::HostToDevice] {
            let destination = |block: &Block| match direction {
                Direction::DeviceToHost => block.host_offset,
                Direction::HostToDevice => block.device_offset,
            };
            assert_eq!(disjoint_by_units(&blocks, destination), Some(true));
            assert!(check_blocks(&blocks, direction, len, len).is_ok());
        }
        // The last block to block 3's device slot.
        blocks[n - 1].device_offset = blocks[3].device_offset;
        let device = |block: &Block| block.device_offset;
        assert_eq!(disjoint_by_units(&blocks, device), Some(false));
        let checked = check_blocks(&blocks, Direction::HostToDevice, len, len);
        assert!(
            matches!(checked, Err(Error::BlocksOverlap { first: 3, second }) if second == n - 1),
            "{checked:?}"
        );
        // A block that begins halfway through another.
        let half = [Block::new(0, 0, 8192), Block::new(4096, 8192, 4096)];
        assert_eq!(disjoint_by_units(&half, device), Some(false));
        let checked = check_blocks(&half, Direction::HostToDevice, 3 * 4096, 3 * 4096);
        assert!(
            matches!(
                checked,
                Err(Error::BlocksOverlap {
                    first: 0,
                    second: 1
                })
            ),
            "{checked:?}"
        );
    }

    #[test]
    fn batches_a_bitmap_does_not_suit_are_sorted_and_still_refused_where_they_overlap() {
        let device = |block: &Block| block.device_offset;
        // Odd lengths: the unit is a byte, the span too many bytes.
        let odd = [
            Block::new(0, 0, 4097),
            Block::new(8194, 4097, 4097),
            Block::new(4096, 8194, 4097),
        ];
        assert_eq!(disjoint_by_units(&odd, device), None);
        let checked = check_blocks(&odd, Direction::HostToDevice, 1 << 20, 1 << 20);
        assert!(
            matches!(
                checked,
                Err(Error::BlocksOverlap {
                    first: 0,
                    second: 2
                })
            ),
            "{checked:?}"
        );
        // Two blocks a terabyte apart.
        let far = [Block::new(0, 0, 4096), Block::new(1 << 40, 4096, 4096)];
        assert_eq!(disjoint_by_units(&far, device), None);
        assert!(check_blocks(&far, Direction::HostToDevice, 8192, (1 << 40) + 4096).is_ok());
        // A large block beside a small one: too many units to mark.
        let large = [Block::new(0, 0, 64 << 20), Block::new(64 << 20, 0, 4096)];
        assert_eq!(disjoint_by_units(&large, device), None);
        assert!(check_blocks(&large, Direction::HostToDevice, 64 << 20, 65 << 20).is_ok());
    }

    /// What the bitmap saves; run with `cargo test --release -p
    /// hostcopy-driver --features cuda --lib plan::tests::measure --
    /// --ignored --nocapture`.
    #[test]
    #[ignore = "a measurement, not a check"]
    fn measure_checking_and_planning_a_gib_of_4_kib_blocks() {
        use std::time::Instant;
        let n = 1 << 18;
        let blocks = shuffled_slots(n, 4096);
        let device = |block: &Block| block.device_offset;
        let best = |check: &dyn Fn()| {
            (0..5)
                .map(|_| {
                    let start = Instant::now();
                    check();
                    start.elapsed()
                })
                .min()
                .unwrap()
        };
        let bitmap = best(&|| assert_eq!(disjoint_by_units(&blocks, device), Some(true)));
        let sorting = best(&|| assert_eq!(overlap_by_sorting(&blocks, device), None));
        let sizes = chunk_sizes(n * 4096, 16 << 20, 2 << 20);
        let layout = Layout {
            direction: Direction::HostToDevice,
            host: 1 << 40,
            device: 1 << 41,
            blocks: &blocks,
            staging: &[1 << 30, 2 << 30, 3 << 30, 4 << 30],
            first: 0,
        };
        let planning = best(&|| assert_eq!(plan(&layout, &sizes).len(), sizes.len()));
        std::println!(
            "{n} blocks of 4 KiB at shuffled slots: checked on the bitmap {bitmap:?}, by sorting {sorting:?}; planned in {planning:?}"
        );
    }

    #[test]
    fn an_out_of_bounds_block_is_refused_with_its_index_and_side() {
        let blocks = [Block::new(0, 0, 8), Block::new(8, 8, 8)];
        assert_eq!(
            check_blocks(&blocks, Direction::DeviceToHost, 16, 12),
            Err(Error::BlockOutOfBounds {
                index: 1,
                side: BlockSide::Device,
                offset: 8,
                nbytes: 8,
                len: 12
            })
        );
        let overflowing = [Block::new(0, usize::MAX, 2)];
        assert!(matches!(
            check_blocks(&overflowing, Direction::HostToDevice, 16, 16),
            Err(Error::BlockOutOfBounds {
                index: 0,
                side: BlockSide::Host,
                ..
            })
        ));
    }

    #[test]
    fn blocks_are_packed_and_split_across_chunks() {
        let blocks = [
            Block::new(1000, 0, 6),
            Block::new(0, 10, 0),
            Block::new(2000, 20, 7),
        ];
        let layout = Layout {
            direction: Direction::DeviceToHost,
            host: 10_000,
            device: 50_000,
            blocks: &blocks,
            staging: &[100, 200],
            first: 1,
        };
        let chunks = plan(&layout, &[8, 5]);
        assert_eq!(chunks.len(), 2);
        assert_eq!((chunks[0].buffer, chunks[0].len), (1, 8));
        assert_eq!(
            chunks[0].device,
            [
                DevicePiece {
                    device: 51_000,
                    staging: 200,
                    len: 6
                },
                DevicePiece {
                    device: 52_000,
                    staging: 206,
                    len: 2
                },
            ]
        );
        assert_eq!(
            chunks[0].host,
            [
                HostCopyArgs::new(10_000, 200, 6),
                HostCopyArgs::new(10_020, 206, 2)
            ]
        );
        assert_eq!((chunks[1].buffer, chunks[1].len), (0, 5));
        assert_eq!(
            chunks[1].device,
            [DevicePiece {
                device: 52_002,
                staging: 100,
                len: 5
            }]
        );
        assert_eq!(chunks[1].host, [HostCopyArgs::new(10_022, 100, 5)]);
    }
}
