//! How a [`Stager`](super::Stager) stages: chunk size, staging buffers,
//! worker threads, the store kind of host-to-device copies, and the size
//! below which the driver's own path is used. Every default is chosen from
//! the machine or from a measurement named in its documentation.

pub use crate::parallel::Stores;

use crate::cuda::error::Error;

/// Default chunk: the bytes one staging buffer carries per copy.
///
/// Measured on an H200 host (PCIe Gen5, 16-core VM), 1 GiB device to
/// pageable memory: 16 MiB chunks reached 52 to 54 GB/s (95 to 98% of
/// pinned D2H). Smaller chunks fill the driver's queue (at 1 MiB the
/// enqueuing thread waited 84 to 99% of the time, at 4 MiB 11 to 64%, at
/// 16 MiB under 2%); larger chunks fall out of the host's cache between the
/// GPU's write and the host copy (64 MiB: 37 to 40 GB/s). Short transfers
/// keep the full chunk too: cutting a 64 MiB transfer into sixteen 4 MiB
/// chunks ran at 23.7 GB/s against 45.4 GB/s in four 16 MiB chunks.
/// (docs/design-record.md, "16 MiB chunks through 4 staging buffers,
/// equal in size").
pub const DEFAULT_CHUNK: usize = 16 << 20;

/// Default chunk of a transfer to the device
/// ([`StagingOptionsBuilder::h2d_chunk`]): `usize::MAX`, which
/// [`StagingOptions::h2d_chunk`] reads as the chunk.
///
/// Half a staging buffer (8 MiB) beat 16 MiB to the device in four of
/// four runs on one stream with 2 MiB edges ([`DEFAULT_STREAMS`]): 64 MiB
/// 66 to 74% of pinned against 62 to 73%, 256 MiB 80 to 83% against 71
/// to 78%, 1 GiB 89 to 93% against 84 to 90%. It doubles the driver
/// calls a transfer queues, and with them how soon a large non-blocking
/// call waits for room in the driver's queue, so it stays an option
/// (docs/design-record.md, "One stream, edge chunks, half-buffer chunks
/// to the device: options, measured").
pub const DEFAULT_H2D_CHUNK: usize = usize::MAX;

/// Default size of a transfer's first and last chunks
/// ([`StagingOptionsBuilder::edge_chunk`]): they grow from it by doubling
/// up to the chunk, so that a transfer's second stage starts early and
/// ends soon after the first.
///
/// `usize::MAX`, which [`StagingOptions::edge_chunk`] reads as the chunk,
/// whatever its size: no ramp. On a stream per buffer (the default) edges
/// from 1 to 4 MiB beat equal chunks in no run: the driver runs several
/// chunks' copies at once there. On one stream
/// ([`StagingOptionsBuilder::streams`]) edges from 2 MiB did: 64 MiB to
/// the host 83 to 87% of pinned against 72 to 79% in three runs
/// (docs/design-record.md, "One stream, edge chunks, half-buffer chunks
/// to the device: options, measured").
pub const DEFAULT_EDGE_CHUNK: usize = usize::MAX;

/// Default number of streams a stager queues its chunks on
/// ([`StagingOptionsBuilder::streams`]): `usize::MAX`, which
/// [`StagingOptions::streams`] reads as one per staging buffer.
///
/// On one stream the driver runs the chunks' copies one after another, in
/// the order the copier makes their host sides: with 2 MiB edge chunks,
/// one transfer of 64 MiB to the host reached 83 to 87% of pinned against
/// 69 to 80% as before, compared transfer by transfer. But every chunk's
/// wait, copy and event then sit in one stream's queue, which the driver
/// bounds: a `blocking=False` transfer of 16 GiB returned after 50% (to
/// the host) and 75% (to the device) of its time instead of 2%, and eight
/// 405 MB uploads queued back to back fell to 74 to 79% of pinned. So one
/// stream is an option, for transfers of a few GiB at most
/// (docs/design-record.md, "One stream, edge chunks, half-buffer chunks
/// to the device: options, measured").
pub const DEFAULT_STREAMS: usize = usize::MAX;

/// The smallest chunk [`StagingOptionsBuilder::build`] accepts: one page.
///
/// Every chunk costs up to three driver calls and a wake-up of the
/// stager's copier (about 15 us on the H200 host), so a chunk of a few
/// bytes turns a copy into millions of them: a 4 MiB transfer in 1-byte
/// chunks ran for more than 25 seconds there. At 4 KiB the same transfer
/// is 1,024 chunks.
pub const MIN_CHUNK: usize = 4 << 10;

/// The largest chunk accepted: each staging buffer is one pinned
/// allocation of this size, and chunks beyond 16 MiB were measured slower
/// (64 MiB: 37 to 40 GB/s against 52 to 54).
pub const MAX_CHUNK: usize = 1 << 30;

/// The most staging buffers accepted: each is a pinned allocation, and
/// more than 4 to 6 were never measured faster.
pub const MAX_BUFFERS: usize = 64;

/// Default number of pinned staging buffers.
///
/// The buffers are what overlaps the host copy of chunk `i` with the
/// transfer of chunk `i + 1`; on the H200 host 3 and 4 buffers of 16 MiB
/// both reached 95 to 98% of pinned D2H. Four keep the link busy while one
/// host copy runs late.
pub const DEFAULT_BUFFERS: usize = 4;

/// Cores left to the rest of the process (the enqueuing thread, the
/// driver's own threads) by the default worker count.
pub const RESERVED_CORES: usize = 4;

/// Default number of workers that copy a transfer to the host
/// ([`StagingOptionsBuilder::d2h_workers`]): `usize::MAX`, which
/// [`StagingOptions::d2h_workers`] reads as the whole pool.
///
/// Fewer save CPU where a stager moves one transfer after another: on the
/// 16-core H200 host, 1 GiB to the host, 6 workers moved 53.7 and 54.2
/// GB/s on two leases (97 to 98% of pinned), as fast as 12, at 0.98 to
/// 1.27x the driver's own path's CPU seconds per GiB against 1.16 to
/// 1.46x. But where transfers come apart, the workers asleep between
/// them, 6 workers reached 72, 73 and 89% of pinned at 64 MiB, 256 MiB
/// and 1 GiB against 84, 95 and 97% for 12 (docs/design-record.md, "A
/// pool of copy workers for each chunk's host copy").
pub const DEFAULT_D2H_WORKERS: usize = usize::MAX;

/// Single transfers smaller than this take the driver's path (one driver
/// copy through a pinned buffer of the stager's own, of this size at most
/// a chunk, on a stream of its own, waited for), not the staging pipeline
/// (see the [module documentation](super) for when a transfer that returns
/// at once is staged all the same).
///
/// Measured with the benchmark's small-size table (staged vs the driver's
/// path, D2H into pre-faulted pageable memory; docs/design-record.md,
/// "Small transfers on the driver's path, through a pinned buffer of the
/// stager's own"): below 1 MiB a staged transfer's fixed cost (two
/// enqueues and the copier's hand-off, about 15 us) made it 0.40 to 0.86x
/// of the driver's path on both H200 hosts. At 1 MiB staging was 1.22 to
/// 1.24x on the 16-core host but 0.95x on the 32-core two-GPU host; from 2 MiB
/// it was faster on both (1.60x and 1.09x; 4 MiB: 1.77x and 1.36x). So
/// 2 MiB is the smallest size from which staging was never slower.
pub const DRIVER_PATH_BELOW: usize = 2 << 20;

/// Under the default stores ([`StagingOptionsBuilder::h2d_stores`] not
/// set), a blocking upload (its caller waits for it) that stages at most
/// this many bytes writes its staging buffers with streaming stores; every
/// other upload with cached ones.
///
/// Measured on H100 hosts (BENCHMARKS.md, "One transfer against a lean
/// staging ring"): a staging buffer filled with cached stores and read by
/// the DMA engine at once took 513 to 770 us for 16 MiB where pinned
/// memory's copy takes 305 (runs 95, 96); filled with streaming stores,
/// 311. One blocking upload reached, with streaming stores against cached
/// ones, 60.9 against 39.2% of pinned at 16 MiB, 71.4 against 58.4% at
/// 64 MiB and 68.9 against 64.1% at 256 MiB, but 68.3 against 83.3% at
/// 1 GiB (run 111; runs 96 to 98 alike). Uploads that return at once and
/// follow each other lost with streaming stores: 16 MiB uploads back to
/// back moved 35.5 GB/s against 48.9 (run 111, a decode-like loop), and
/// `HostOffloadedCache` on a link-bound model took 29.2 ms a token against
/// 20.3 (run 111; 29.5 against 20.9 to 21.8 in run 98).
pub const STREAMING_UPLOAD_MAX: usize = 256 << 20;

/// Below this mean block length a chunk's blocks are moved by hostcopy's
/// gather kernel under [`DeviceCopies::Auto`]; from it on, by the copy
/// engine (the default of [`StagingOptionsBuilder::kernel_below`]).
/// Measured on the H200 host (docs/design-record.md, "A gather kernel
/// through device scratch for blocks below 32 KiB"; 1 GiB of scattered blocks, staged,
/// the kernel beside `cuMemcpyBatchAsync`, GB/s D2H / H2D): 4 KiB blocks
/// 36.7 / 35.6 against 4.9 / 4.9; 16 KiB 47.0 / 44.9 against 27.8 / 26.1;
/// 64 KiB 49.4 / 47.7 against 50.1 / 51.8. So the kernel below 32 KiB,
/// the copy engine from 64 KiB.
pub const KERNEL_BELOW: usize = 32 << 10;

/// How the blocks of a batch are moved between device memory and a
/// staging buffer: many blocks share a chunk, gathered (device to host)
/// or scattered (host to device) by the driver's copies or by a kernel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum DeviceCopies {
    /// The gather kernel for a chunk whose blocks average under
    /// [`KERNEL_BELOW`] (where the kernel loads and its scratch can be
    /// allocated: see [`Kernel`](Self::Kernel)); otherwise
    /// `cuMemcpyBatchAsync` (CUDA 12.8 and later, looked up when the
    /// driver is loaded) where the driver has it, else a loop of
    /// asynchronous copies, one per block. The first chunk for the kernel
    /// decides for the stager's life: if the kernel or its scratch cannot
    /// be had then (device memory short, say), every later chunk takes
    /// the copy engine, and a new stager tries again.
    #[default]
    Auto,
    /// Always `cuMemcpyBatchAsync`: a transfer fails with
    /// `CUDA_ERROR_NOT_SUPPORTED` where the driver has none.
    Batch,
    /// Always one asynchronous copy per block.
    Loop,
    /// Always the gather kernel, `hostcopy_gather`, for a chunk of several
    /// blocks: one launch per 255 blocks packs them into device scratch
    /// (or unpacks them from it), and one copy moves the scratch to (or
    /// from) the staging buffer. The first such chunk loads the kernel and
    /// allocates the scratch, a device buffer of the chunk size per
    /// staging buffer (64 MiB with the defaults), kept as long as the
    /// stager. A transfer fails where either cannot be had.
    Kernel,
}

/// The options of a [`Stager`](super::Stager); build with
/// [`StagingOptions::builder`], or take [`StagingOptions::default`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StagingOptions {
    pub(super) chunk: usize,
    pub(super) h2d_chunk: usize,
    pub(super) edge_chunk: usize,
    pub(super) buffers: usize,
    pub(super) streams: usize,
    pub(super) workers: usize,
    pub(super) d2h_workers: usize,
    /// `None`: the plan chooses per upload
    /// ([`upload_stores`](super::plan::upload_stores)).
    pub(super) h2d_stores: Option<Stores>,
    pub(super) driver_path_below: usize,
    pub(super) device_copies: DeviceCopies,
    pub(super) kernel_below: usize,
    pub(super) prefault: bool,
}

impl Default for StagingOptions {
    /// [`DEFAULT_CHUNK`], [`DEFAULT_BUFFERS`], [`default_workers`]`(1)`,
    /// the stores of each upload chosen by its plan, [`DRIVER_PATH_BELOW`],
    /// [`DeviceCopies::Auto`] with [`KERNEL_BELOW`], prefault on.
    fn default() -> Self {
        StagingOptions {
            chunk: DEFAULT_CHUNK,
            h2d_chunk: DEFAULT_H2D_CHUNK,
            edge_chunk: DEFAULT_EDGE_CHUNK,
            buffers: DEFAULT_BUFFERS,
            streams: DEFAULT_STREAMS,
            workers: default_workers(1),
            d2h_workers: DEFAULT_D2H_WORKERS,
            h2d_stores: None,
            driver_path_below: DRIVER_PATH_BELOW,
            device_copies: DeviceCopies::Auto,
            kernel_below: KERNEL_BELOW,
            prefault: true,
        }
    }
}

impl StagingOptions {
    /// A builder that starts from the defaults.
    ///
    /// ```
    /// use hostcopy_driver::cuda::staging::{Stores, StagingOptions};
    ///
    /// let options = StagingOptions::builder()
    ///     .chunk(8 << 20)
    ///     .buffers(3)
    ///     .stagers(2) // two GPUs at once: each stager gets half the cores
    ///     .h2d_stores(Stores::Cached)
    ///     .build()?;
    /// assert_eq!(options.chunk(), 8 << 20);
    /// # Ok::<(), hostcopy_driver::cuda::Error>(())
    /// ```
    pub fn builder() -> StagingOptionsBuilder {
        StagingOptionsBuilder {
            options: StagingOptions::default(),
            workers: None,
            stagers: 1,
        }
    }

    /// Bytes per chunk (one staging buffer's size).
    pub fn chunk(&self) -> usize {
        self.chunk
    }

    /// Bytes per chunk of a transfer to the device, at most
    /// [`chunk`](Self::chunk).
    pub fn h2d_chunk(&self) -> usize {
        self.h2d_chunk.min(self.chunk)
    }

    /// Bytes of a transfer's first and last chunks: they grow from this by
    /// doubling up to [`chunk`](Self::chunk) (equal to it: no ramp).
    pub fn edge_chunk(&self) -> usize {
        self.edge_chunk.min(self.chunk)
    }

    /// Pinned staging buffers.
    pub fn buffers(&self) -> usize {
        self.buffers
    }

    /// Streams the chunks are queued on, 1 to [`buffers`](Self::buffers):
    /// buffer `k`'s chunks on stream `k % streams`.
    pub fn streams(&self) -> usize {
        self.streams.min(self.buffers)
    }

    /// Worker threads of the stager's own pool.
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// Workers of the pool that copy a transfer to the host, at most
    /// [`workers`](Self::workers).
    pub fn d2h_workers(&self) -> usize {
        self.d2h_workers.min(self.workers)
    }

    /// How host-to-device chunks are written into staging buffers: the
    /// stores set with [`StagingOptionsBuilder::h2d_stores`], or `None`
    /// where each upload's plan chooses (the default: see there).
    pub fn h2d_stores(&self) -> Option<Stores> {
        self.h2d_stores
    }

    /// Transfers below this many bytes take the driver's own path.
    pub fn driver_path_below(&self) -> usize {
        self.driver_path_below
    }

    /// How the driver copies the blocks of a batch.
    pub fn device_copies(&self) -> DeviceCopies {
        self.device_copies
    }

    /// The mean block length under which [`DeviceCopies::Auto`] takes the
    /// gather kernel.
    pub fn kernel_below(&self) -> usize {
        self.kernel_below
    }

    /// Whether staged transfers to the host make the destination's pages
    /// present ahead of their copies ([`StagingOptionsBuilder::prefault`]).
    pub fn prefault(&self) -> bool {
        self.prefault
    }
}

/// Builds [`StagingOptions`]; every setter overrides one default, and
/// [`build`](Self::build) checks them all before any driver call.
#[derive(Clone, Copy, Debug)]
pub struct StagingOptionsBuilder {
    options: StagingOptions,
    workers: Option<usize>,
    stagers: usize,
}

impl StagingOptionsBuilder {
    /// Bytes per chunk, [`MIN_CHUNK`] to [`MAX_CHUNK`] (default
    /// [`DEFAULT_CHUNK`]).
    pub fn chunk(mut self, bytes: usize) -> Self {
        self.options.chunk = bytes;
        self
    }

    /// Bytes per chunk of a transfer to the device, from [`MIN_CHUNK`] up
    /// (default [`DEFAULT_H2D_CHUNK`]); at or above the chunk, the chunk.
    pub fn h2d_chunk(mut self, bytes: usize) -> Self {
        self.options.h2d_chunk = bytes;
        self
    }

    /// Bytes of a transfer's first and last chunks, from [`MIN_CHUNK`] up
    /// (default [`DEFAULT_EDGE_CHUNK`]): they grow by doubling up to the
    /// chunk, as many steps as the transfer holds at both ends. At or above
    /// the chunk, every chunk of a transfer has the same size.
    pub fn edge_chunk(mut self, bytes: usize) -> Self {
        self.options.edge_chunk = bytes;
        self
    }

    /// Staging buffers, 1 to [`MAX_BUFFERS`] (default [`DEFAULT_BUFFERS`]).
    pub fn buffers(mut self, buffers: usize) -> Self {
        self.options.buffers = buffers;
        self
    }

    /// Streams the chunks are queued on, from 1 up (default
    /// [`DEFAULT_STREAMS`]); at or above the buffer count, one stream per
    /// staging buffer. On one stream the driver runs the chunks' copies in
    /// the order they were queued, one after another; on several it may
    /// run them at once, sharing the link, so that they complete together.
    pub fn streams(mut self, streams: usize) -> Self {
        self.options.streams = streams;
        self
    }

    /// Worker threads, exactly, 0 to
    /// [`MAX_WORKERS`](crate::parallel::MAX_WORKERS) (0: the driver's
    /// thread copies alone). Overrides [`stagers`](Self::stagers).
    pub fn workers(mut self, workers: usize) -> Self {
        self.workers = Some(workers);
        self
    }

    /// Workers of the pool that copy a transfer to the host, 0 up (default
    /// [`DEFAULT_D2H_WORKERS`]: all of them).
    pub fn d2h_workers(mut self, workers: usize) -> Self {
        self.options.d2h_workers = workers;
        self
    }

    /// How many stagers will transfer at once (one per GPU), at least 1,
    /// so that the default worker count is this stager's share of the
    /// cores: [`default_workers`]`(stagers)`. Default 1.
    pub fn stagers(mut self, stagers: usize) -> Self {
        self.stagers = stagers;
        self
    }

    /// Stores for every host-to-device copy into staging buffers. By
    /// default each upload's plan chooses: streaming stores for a blocking
    /// one of at most [`STREAMING_UPLOAD_MAX`] bytes staged (its staging
    /// buffers are read by the DMA engine as soon as they are filled, and
    /// lines still in the host's caches are read at about half the link's
    /// speed), cached stores for the rest (uploads that return at once,
    /// which follow each other with their host copies the longer part, and
    /// large ones). Measured in BENCHMARKS.md, "One transfer against a lean
    /// staging ring".
    pub fn h2d_stores(mut self, stores: Stores) -> Self {
        self.options.h2d_stores = Some(stores);
        self
    }

    /// Transfers below `bytes` take the driver's own path (default
    /// [`DRIVER_PATH_BELOW`]); 0 stages every transfer.
    pub fn driver_path_below(mut self, bytes: usize) -> Self {
        self.options.driver_path_below = bytes;
        self
    }

    /// How the driver copies the blocks of a batch (default
    /// [`DeviceCopies::Auto`]).
    pub fn device_copies(mut self, device_copies: DeviceCopies) -> Self {
        self.options.device_copies = device_copies;
        self
    }

    /// Under [`DeviceCopies::Auto`], the gather kernel moves a chunk's
    /// blocks where they average under `bytes` (default
    /// [`KERNEL_BELOW`]); 0 never.
    pub fn kernel_below(mut self, bytes: usize) -> Self {
        self.options.kernel_below = bytes;
        self
    }

    /// Whether staged transfers to the host make the pages of a destination
    /// that is not present (never touched: `vec![0; n]`, `np.empty`)
    /// present ahead of the copies, on the stager's workers, while earlier
    /// chunks are in flight (default on; Linux). Faulting in a page at the
    /// copy's first write was the limit there: on the H200 host such a
    /// transfer ran at a fifth of the link.
    ///
    /// What it does to the destination, and costs:
    /// - always, for a staged transfer to the host: `mincore` on a sample
    ///   of its pages (at most 8 per contiguous run of 64 KiB or more, 16
    ///   runs) when the transfer starts. A destination that is present
    ///   pays only this.
    /// - where a sampled page is not present: `MADV_HUGEPAGE` on the whole
    ///   huge pages inside the destination where it is private anonymous
    ///   memory (checked in `/proc/self/maps`) and transparent huge pages
    ///   are in `madvise` mode (that advice stays on that part of the
    ///   caller's mapping); then every host range of 64 KiB or more that
    ///   still samples cold (3 pages each) is faulted in just before its
    ///   chunk's copy (or ahead of it): inside those huge pages by writing a
    ///   zero at the start of each 4 KiB page, bytes the copy then
    ///   overwrites (on the H200 host 5 to 7 times faster than the kernel's
    ///   populate; a transfer that fails leaves those zeros in the chunks
    ///   it did not copy), elsewhere with `MADV_POPULATE_WRITE` (contents
    ///   unchanged; on kernels before 5.14, one byte per page read and
    ///   written back instead). See [`prefault`](crate::prefault) for
    ///   exactly what is done.
    ///
    /// The sample runs on the stager's copier thread while the first
    /// chunk's driver copy is in flight. Measured on the 2-core
    /// development VM: 8.6 us for 8 `mincore` calls (2 us for one);
    /// `/proc/self/maps` read in 150 us (a small process: it grows with the
    /// mappings), only for a cold destination holding a whole huge page.
    ///
    /// Off: no system call, the copy faults the pages in as it writes.
    pub fn prefault(mut self, prefault: bool) -> Self {
        self.options.prefault = prefault;
        self
    }

    /// The options, or [`Error::InvalidOption`] naming the first one
    /// outside its range (checked here, so that a bad option is refused
    /// before any driver call).
    ///
    /// ```
    /// use hostcopy_driver::cuda::Error;
    /// use hostcopy_driver::cuda::staging::StagingOptions;
    ///
    /// let refused = StagingOptions::builder().chunk(0).build();
    /// assert!(matches!(refused, Err(Error::InvalidOption { option: "chunk", value: 0, .. })));
    /// ```
    pub fn build(self) -> Result<StagingOptions, Error> {
        let check = |option, value, min, max| {
            if (min..=max).contains(&value) {
                Ok(value)
            } else {
                Err(Error::InvalidOption {
                    option,
                    value,
                    min,
                    max,
                })
            }
        };
        let max_workers = crate::parallel::MAX_WORKERS;
        let workers = match self.workers {
            Some(workers) => check("workers", workers, 0, max_workers)?,
            None => default_workers(check("stagers", self.stagers, 1, max_workers)?),
        };
        Ok(StagingOptions {
            chunk: check("chunk", self.options.chunk, MIN_CHUNK, MAX_CHUNK)?,
            h2d_chunk: check("h2d_chunk", self.options.h2d_chunk, MIN_CHUNK, usize::MAX)?,
            edge_chunk: check("edge_chunk", self.options.edge_chunk, MIN_CHUNK, usize::MAX)?,
            buffers: check("buffers", self.options.buffers, 1, MAX_BUFFERS)?,
            streams: check("streams", self.options.streams, 1, usize::MAX)?,
            workers,
            ..self.options
        })
    }
}

/// The default worker count for one of `stagers` stagers transferring at
/// once: the available cores less [`RESERVED_CORES`] (on machines of more
/// than 8 cores; less one core on smaller ones), split evenly between the
/// stagers, at least 1.
///
/// Each stager has a pool of its own, so stagers never wait for each
/// other's copies; splitting the cores keeps them from oversubscribing the
/// machine (on a 32-core host with two GPUs, 14 workers each).
pub fn default_workers(stagers: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |cores| cores.get());
    let usable = if cores > 8 {
        cores - RESERVED_CORES
    } else {
        cores.saturating_sub(1)
    };
    (usable / stagers.max(1)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(builder: StagingOptionsBuilder) -> (&'static str, usize) {
        match builder.build() {
            Err(Error::InvalidOption { option, value, .. }) => (option, value),
            other => panic!("accepted: {other:?}"),
        }
    }

    #[test]
    fn zero_and_absurd_counts_are_refused_by_name_before_any_driver_call() {
        let b = StagingOptions::builder;
        assert_eq!(refused(b().chunk(0)), ("chunk", 0));
        assert_eq!(refused(b().chunk(MIN_CHUNK - 1)), ("chunk", MIN_CHUNK - 1));
        assert_eq!(refused(b().chunk(MAX_CHUNK + 1)), ("chunk", MAX_CHUNK + 1));
        assert_eq!(
            refused(b().edge_chunk(MIN_CHUNK - 1)),
            ("edge_chunk", MIN_CHUNK - 1)
        );
        assert_eq!(refused(b().buffers(0)), ("buffers", 0));
        assert_eq!(
            refused(b().buffers(MAX_BUFFERS + 1)),
            ("buffers", MAX_BUFFERS + 1)
        );
        let too_many = crate::parallel::MAX_WORKERS + 1;
        assert_eq!(refused(b().workers(too_many)), ("workers", too_many));
        assert_eq!(refused(b().stagers(0)), ("stagers", 0));
        assert_eq!(refused(b().workers(usize::MAX)), ("workers", usize::MAX));
    }

    #[test]
    fn the_edges_of_each_range_are_accepted() {
        let options = StagingOptions::builder()
            .chunk(MIN_CHUNK)
            .buffers(MAX_BUFFERS)
            .workers(0)
            .build()
            .unwrap();
        assert_eq!(
            (options.chunk(), options.buffers(), options.workers()),
            (MIN_CHUNK, MAX_BUFFERS, 0)
        );
        let options = StagingOptions::builder()
            .chunk(MAX_CHUNK)
            .buffers(1)
            .build()
            .unwrap();
        assert_eq!(options.chunk(), MAX_CHUNK);
        // An explicit worker count overrides `stagers`, even a bad one.
        let options = StagingOptions::builder()
            .stagers(0)
            .workers(3)
            .build()
            .unwrap();
        assert_eq!(options.workers(), 3);
        assert_eq!(
            StagingOptions::builder().build().unwrap(),
            StagingOptions::default()
        );
    }

    #[test]
    fn chunks_do_not_ramp_unless_asked_whatever_their_size() {
        for chunk in [MIN_CHUNK, DEFAULT_CHUNK, 128 << 20, MAX_CHUNK] {
            let options = StagingOptions::builder().chunk(chunk).build().unwrap();
            assert_eq!(options.edge_chunk(), chunk);
        }
        let ramped = StagingOptions::builder()
            .chunk(128 << 20)
            .edge_chunk(2 << 20)
            .build()
            .unwrap();
        assert_eq!(ramped.edge_chunk(), 2 << 20);
        let defaults = StagingOptions::default();
        assert_eq!(defaults.streams(), DEFAULT_BUFFERS);
        // To the device, the chunk by default, never more than it.
        assert_eq!(defaults.h2d_chunk(), DEFAULT_CHUNK);
        let half = StagingOptions::builder()
            .h2d_chunk(8 << 20)
            .build()
            .unwrap();
        assert_eq!(half.h2d_chunk(), 8 << 20);
        let small = StagingOptions::builder()
            .chunk(4 << 20)
            .h2d_chunk(8 << 20)
            .build()
            .unwrap();
        assert_eq!(small.h2d_chunk(), 4 << 20);
        assert!(matches!(
            StagingOptions::builder().h2d_chunk(MIN_CHUNK - 1).build(),
            Err(Error::InvalidOption {
                option: "h2d_chunk",
                ..
            })
        ));
        // Every worker copies to the host unless told otherwise.
        let workers = StagingOptions::builder().workers(5).build().unwrap();
        assert_eq!(workers.d2h_workers(), 5);
        let fewer = StagingOptions::builder()
            .workers(5)
            .d2h_workers(2)
            .build()
            .unwrap();
        assert_eq!(fewer.d2h_workers(), 2);
        let one = StagingOptions::builder().streams(1).build().unwrap();
        assert_eq!(one.streams(), 1);
        assert!(matches!(
            StagingOptions::builder().streams(0).build(),
            Err(Error::InvalidOption {
                option: "streams",
                ..
            })
        ));
    }
}
