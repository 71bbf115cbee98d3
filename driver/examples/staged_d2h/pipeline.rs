//! The staged pipeline: device to pageable host memory through a ring of
//! pinned slots (and the way back), with a host function per chunk.
//!
//! Slot `k` belongs to stream `k`, so stream order alone keeps a slot from
//! being overwritten before its host copy has run, while the copy of chunk
//! `i` on one stream overlaps the transfer of chunk `i + 1` on the next.
//! The slot policy lives here, not in the library: the library gives the
//! host function, the records and the launch.
//!
//! After a context error the driver may still be running a host function
//! on a slot and a destination when it reports the error: records and slots
//! are then leaked, never freed, and callers keep their buffers too (the
//! example and the benchmark exit without freeing them).

// Shared by the example and the benchmark, which each use part of it.
#![allow(dead_code, unreachable_pub)]

use std::mem::ManuallyDrop;
use std::time::{Duration, Instant};

use hostcopy_driver::cuda::{
    CaptureMode, Context, DeviceBuffer, Error, Event, Graph, GraphExec, PinnedBuffer, Stream,
};
use hostcopy_driver::{HostFn, RawRegion, Record};

/// Pinned slots, each with its own stream. Dropping the ring waits for its
/// streams; if one has failed, the slots are leaked rather than freed.
pub struct Ring {
    slots: Vec<(ManuallyDrop<PinnedBuffer>, Stream)>,
    chunk: usize,
}

impl Drop for Ring {
    fn drop(&mut self) {
        let finished = self
            .slots
            .iter()
            .all(|(_, stream)| stream.as_stream().synchronize().is_ok());
        if finished {
            for (slot, _) in &mut self.slots {
                // SAFETY: every host function that read or wrote the slot has finished.
                unsafe { ManuallyDrop::drop(slot) };
            }
        }
    }
}

/// Where the time went.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// From the first enqueue until every stream has finished.
    pub total: Duration,
    /// Time the calling thread spent inside enqueue calls.
    pub blocked: Duration,
}

impl Ring {
    /// `slots` pinned slots of `chunk` bytes, each with a new stream.
    pub fn new(context: &Context, slots: usize, chunk: usize) -> Result<Ring, Error> {
        let slots = (0..slots)
            .map(|_| {
                Ok((
                    ManuallyDrop::new(PinnedBuffer::new(context, chunk)?),
                    Stream::new(context)?,
                ))
            })
            .collect::<Result<Vec<_>, Error>>()?;
        Ok(Ring { slots, chunk })
    }

    /// Copies `device` into `dst` chunk by chunk: a device-to-host copy into
    /// a pinned slot, then `host_fn` copying the slot into `dst`.
    /// `progress(done, chunks)` is called after each chunk is queued.
    pub fn device_to_host(
        &self,
        device: &DeviceBuffer,
        dst: &mut [u8],
        host_fn: HostFn,
        mut progress: impl FnMut(usize, usize),
    ) -> Result<Timing, Error> {
        assert_eq!(
            device.len(),
            dst.len(),
            "device and destination sizes differ"
        );
        let dst = RawRegion::host(dst.as_mut_ptr().expose_provenance(), dst.len());
        let chunks = dst.len.div_ceil(self.chunk);
        let mut records = Vec::with_capacity(chunks);
        let mut blocked = Duration::ZERO;
        let start = Instant::now();
        let queued = (0..chunks).try_for_each(|chunk| {
            // SAFETY: `dst` outlives this call, which waits for every stream
            // (or leaks the records on error).
            blocked +=
                unsafe { self.queue_device_to_host(chunk, device, dst, host_fn, &mut records) }?;
            progress(chunk + 1, chunks);
            Ok(())
        });
        self.finish(queued, records, start, blocked)
    }

    /// Queues chunk `chunk` of a transfer of `device` into `dst`: the copy
    /// into the chunk's slot, then `host_fn` on a record kept in `records`.
    /// Returns the time spent in the two driver calls.
    ///
    /// # Safety
    ///
    /// `dst` and the records stay valid until the queued work (or the graph
    /// capturing it) has finished; on an error the caller leaks `records`.
    /// `records` has room for every chunk, so it never moves a record that
    /// a host function points at.
    unsafe fn queue_device_to_host(
        &self,
        chunk: usize,
        device: &DeviceBuffer,
        dst: RawRegion,
        host_fn: HostFn,
        records: &mut Vec<Record<'static>>,
    ) -> Result<Duration, Error> {
        assert!(records.len() < records.capacity(), "records would move");
        let (slot, stream) = &self.slots[chunk % self.slots.len()];
        let offset = chunk * self.chunk;
        let len = self.chunk.min(dst.len - offset);
        // SAFETY: `dst` is valid while the work runs (our caller); the slot
        // is pinned and lives as long as the ring.
        records.push(unsafe { Record::from_raw_regions(dst, offset, slot.raw_region(), 0, len) }?);
        let record = records.last().expect("just pushed");
        let enqueue = Instant::now();
        // SAFETY: in this slot's stream order (or the graph's), the copy into
        // the slot follows the host copy that last read it.
        unsafe {
            stream
                .as_stream()
                .copy_device_to_host(slot.raw_ptr(), device, offset, len)
        }?;
        // SAFETY: the record and both its ranges outlive the work (our caller).
        unsafe {
            stream
                .as_stream()
                .launch_host_fn(host_fn, record.user_data())
        }?;
        Ok(enqueue.elapsed())
    }

    /// Copies `src` into `device` chunk by chunk: `host_fn` copying a chunk
    /// into a pinned slot, then a host-to-device copy out of it.
    pub fn host_to_device(
        &self,
        src: &[u8],
        device: &DeviceBuffer,
        host_fn: HostFn,
    ) -> Result<Timing, Error> {
        assert_eq!(device.len(), src.len(), "device and source sizes differ");
        let src = RawRegion::host(src.as_ptr().expose_provenance(), src.len());
        let chunks = src.len.div_ceil(self.chunk);
        // Room for every chunk: pushing never moves a record a host function
        // points at.
        let mut records = Vec::with_capacity(chunks);
        let mut blocked = Duration::ZERO;
        let start = Instant::now();
        let queued = (0..chunks).try_for_each(|chunk| {
            let (slot, stream) = &self.slots[chunk % self.slots.len()];
            let offset = chunk * self.chunk;
            let len = self.chunk.min(src.len - offset);
            // SAFETY: `src` outlives this call, which waits for every stream
            // (or leaks the records on error).
            records
                .push(unsafe { Record::from_raw_regions(slot.raw_region(), 0, src, offset, len) }?);
            let record = records.last().expect("just pushed");
            let enqueue = Instant::now();
            // SAFETY: the record and both its ranges outlive the stream's
            // work; the host copy into the slot follows the previous transfer
            // out of it in this stream's order.
            unsafe {
                stream
                    .as_stream()
                    .launch_host_fn(host_fn, record.user_data())
            }?;
            // SAFETY: the slot is pinned; in stream order this transfer
            // follows the host copy that filled it.
            unsafe {
                stream
                    .as_stream()
                    .copy_host_to_device(device, offset, slot.raw_ptr(), len)
            }?;
            blocked += enqueue.elapsed();
            Ok(())
        });
        self.finish(queued, records, start, blocked)
    }

    /// Waits for every stream. On any error, queued host functions may
    /// still run: the records are leaked rather than freed under them.
    fn finish(
        &self,
        queued: Result<(), Error>,
        records: Vec<Record<'static>>,
        start: Instant,
        blocked: Duration,
    ) -> Result<Timing, Error> {
        let synchronized = self
            .slots
            .iter()
            .try_for_each(|(_, stream)| stream.as_stream().synchronize());
        match (queued, synchronized) {
            (Ok(()), Ok(())) => Ok(Timing {
                total: start.elapsed(),
                blocked,
            }),
            (Err(error), _) => {
                std::mem::forget(records);
                Err(error)
            }
            (Ok(()), Err(error)) => {
                std::mem::forget(records);
                Err(error.into())
            }
        }
    }
}

/// A staged device-to-host transfer captured once into a graph: each
/// transfer is then a single launch, however many chunks it has, so the
/// calling thread spends one call per transfer instead of two per chunk.
pub struct CapturedTransfer<'ring> {
    exec: GraphExec,
    _graph: Graph,
    /// The records the graph's host nodes point at: freed after the graph,
    /// or leaked if a launch failed.
    records: ManuallyDrop<Vec<Record<'static>>>,
    ring: &'ring Ring,
}

impl Ring {
    /// Captures a device-to-host transfer of `device` into `dst` through the
    /// ring: the same chunks, slots and streams as
    /// [`device_to_host`](Self::device_to_host), forked from the first
    /// stream and joined back to it. `dst` must outlive the result.
    pub fn capture_device_to_host(
        &self,
        device: &DeviceBuffer,
        dst: &mut [u8],
        host_fn: HostFn,
    ) -> Result<CapturedTransfer<'_>, Error> {
        assert_eq!(
            device.len(),
            dst.len(),
            "device and destination sizes differ"
        );
        let dst = RawRegion::host(dst.as_mut_ptr().expose_provenance(), dst.len());
        let chunks = dst.len.div_ceil(self.chunk);
        let main = self.slots[0].1.as_stream();
        let mut records = Vec::with_capacity(chunks);
        main.begin_capture(CaptureMode::ThreadLocal)?;
        let mut events = Vec::new();
        let captured = (|| -> Result<(), Error> {
            let fork = Event::ordering(main.context())?;
            fork.record(main)?;
            for (_, stream) in &self.slots[1..] {
                stream.as_stream().wait_event(&fork)?;
            }
            events.push(fork);
            for chunk in 0..chunks {
                // SAFETY: `dst` outlives the graph (our caller); the records
                // live in the returned value, which owns the graph.
                unsafe { self.queue_device_to_host(chunk, device, dst, host_fn, &mut records) }?;
            }
            for (_, stream) in &self.slots[1..] {
                let join = Event::ordering(main.context())?;
                join.record(stream.as_stream())?;
                main.wait_event(&join)?;
                events.push(join);
            }
            Ok(())
        })();
        let graph = main.end_capture();
        let (graph, exec) = match captured.and_then(|()| {
            let graph = graph?;
            let exec = graph.instantiate()?;
            Ok((graph, exec))
        }) {
            Ok(done) => done,
            Err(error) => {
                std::mem::forget(records);
                return Err(error);
            }
        };
        Ok(CapturedTransfer {
            exec,
            _graph: graph,
            records: ManuallyDrop::new(records),
            ring: self,
        })
    }
}

impl CapturedTransfer<'_> {
    /// Runs the captured transfer once and waits for it.
    pub fn run(&mut self) -> Result<Timing, Error> {
        let main = self.ring.slots[0].1.as_stream();
        let start = Instant::now();
        let launched = self.exec.launch(main);
        let blocked = start.elapsed();
        match launched.and_then(|()| Ok(main.synchronize()?)) {
            Ok(()) => Ok(Timing {
                total: start.elapsed(),
                blocked,
            }),
            Err(error) => {
                // Host nodes may still be running: never free their records.
                self.records = ManuallyDrop::new(Vec::new());
                Err(error)
            }
        }
    }
}

impl Drop for CapturedTransfer<'_> {
    fn drop(&mut self) {
        // Each run waited for its launch, so no host node runs any more
        // (a failed run emptied the list, leaking the records).
        // SAFETY: dropped once, here.
        unsafe { ManuallyDrop::drop(&mut self.records) };
    }
}

/// A byte pattern with no short period.
pub fn pattern(len: usize, seed: u32) -> Vec<u8> {
    let mut bytes = vec![0u8; len];
    fill_pattern(&mut bytes, seed);
    bytes
}

/// Fills `bytes` with the pattern of [`pattern`].
pub fn fill_pattern(bytes: &mut [u8], seed: u32) {
    for (i, byte) in bytes.iter_mut().enumerate() {
        *byte = ((i as u32).wrapping_add(seed).wrapping_mul(2_654_435_761) >> 13) as u8;
    }
}

/// A device buffer holding `pattern(len, seed)`.
pub fn device_with_pattern(
    context: &Context,
    len: usize,
    seed: u32,
) -> Result<DeviceBuffer, Error> {
    let mut device = DeviceBuffer::new(context, len)?;
    let piece = 64 << 20;
    let mut host = vec![0u8; piece.min(len)];
    let mut offset = 0;
    while offset < len {
        let n = piece.min(len - offset);
        // The pattern continues across pieces: index `offset + i`.
        for (i, byte) in host[..n].iter_mut().enumerate() {
            *byte = (((offset + i) as u32)
                .wrapping_add(seed)
                .wrapping_mul(2_654_435_761)
                >> 13) as u8;
        }
        device.copy_from_host(offset, &host[..n])?;
        offset += n;
    }
    Ok(device)
}

/// GB/s (10^9 bytes per second) for `bytes` moved in `time`.
pub fn gb_per_s(bytes: usize, time: Duration) -> f64 {
    bytes as f64 / time.as_secs_f64() / 1e9
}
