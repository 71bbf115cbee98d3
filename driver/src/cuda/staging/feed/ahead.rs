//! The copier's prefault of a transfer's destination: pages made present
//! ahead of the chunks' host copies, on the stager's workers, while the
//! driver's copies of earlier chunks are in flight.
//!
//! When a job to the host starts, its host ranges are joined where they
//! touch (a range transfer's chunks are one run) and a sample of the pages
//! of each run of [`MIN_RANGE`] or more is asked about with `mincore`
//! ([`prefault::SAMPLES`] one-page calls per run, for at most
//! [`MAX_RUNS`] runs). If every sampled page is present, the job is warm
//! and nothing else is done: that sample is all a warm destination pays.
//! Otherwise runs that hold whole huge pages and sampled cold are advised
//! `MADV_HUGEPAGE` where [`prefault::advise_huge_pages`] allows it (private
//! anonymous memory, `madvise` mode; `/proc/self/maps` read once for the
//! job), and then, chunk by chunk, the ranges of [`MIN_RANGE`] or more
//! that still sample cold ([`RANGE_SAMPLES`] pages each) are populated in
//! parts of [`PART`] split over the workers, for later chunks (up to as
//! many as there are staging buffers ahead) while the copier would
//! otherwise wait for a chunk's event. Parts inside the advised huge pages
//! are faulted in by a write at each 4 KiB page that keeps its byte
//! ([`prefault::write_pages`]: a chunk prefaulted but never copied, after
//! its transfer failed, is left as it was),
//! the others with `MADV_POPULATE_WRITE`.
//!
//! A chunk the prefault has not reached by its own turn (the copier never
//! waits where its host side is slower than the link, as it is into fresh
//! memory), some of whose cold ranges lie in advised huge pages of
//! [`PART`] bytes, is not populated first: its cold ranges outside them
//! are, and its copies are cut at [`PART`] multiples of the destination
//! ([`FaultInCopy`]); the parts inside advised huge pages are copied with
//! cached stores, so that each worker's first store into a huge page
//! faults it in and the kernel's zeroing leaves it in that worker's cache
//! for the copy's stores: one pass over the memory instead of two (a
//! populate, then a streaming copy). Any other chunk is populated, then
//! copied as planned.
//!
//! Smaller ranges (the blocks of a scattered batch) are left to the copy:
//! a system call per block costs about what its faults do.
//!
//! Measured on the 2-core development VM (`prefault`'s ignored
//! `measure_populate_rates_and_the_cost_on_present_memory` test; a VM
//! whose first faults are slow, so only the ratios mean much): populating
//! 1 GiB cold took 1.9 to 2.6 GB/s on 4 KiB pages and 7 to 8.7 GB/s after
//! `MADV_HUGEPAGE` (so the advice is given), the same with 1, 2 or 4
//! threads there; populating it again once present cost 9 to 13 GB/s a
//! thread on 4 KiB pages (hence the second sample per range) and nothing
//! measurable on huge pages. On the H200 host (`populate-probe.c` in
//! xtask/gpu-runs/2026-12-03-h200-run55/, 16 threads, pages the kernel
//! had just freed),
//! `MADV_POPULATE_WRITE` after `MADV_HUGEPAGE` made 1 to 64 GiB present at
//! 6 to 9.5 GB/s, a zero written to each of their 4 KiB pages at 31.8
//! GB/s (1 GiB), 43.8 (4 GiB) and 55.7 (16 GiB), every fault a huge page
//! both ways; `MADV_POPULATE_WRITE` on 4 KiB pages 3.4 to 3.9 GB/s (the
//! touch of small pages: 0.8 GB/s against 2.5 on the development VM).
//! Hence the write where huge pages were advised, the advice elsewhere.
//!
//! Either way the kernel's zeroing of each huge page is the workers' work
//! (an estimate from the pool rows, not a measurement of the transfer):
//! on the H200 host `HostBuffer::new` faults huge pages in at 53 GB/s over
//! 16 threads (BENCHMARKS.md, "Fresh destinations and host pools"), about
//! 3.3 GB/s a thread, so 1 GiB of fresh
//! destination is some 300 ms of one core's time before a byte is copied,
//! 23 ms over the stager's 12 workers and the copier where the link takes
//! 20 ms for the whole transfer.

use std::vec::Vec;

use hostcopy_core::HostCopyArgs;

use super::super::plan::PlannedChunk;
use crate::cuda::event::Event;
use crate::parallel::CopyPool;
use crate::prefault::{self, AnonymousMappings, FaultIn};

/// Host ranges below this are left to the copy to fault in.
pub(super) const MIN_RANGE: usize = 64 << 10;

/// Bytes one worker populates per part, at most; parts end on multiples of
/// it in the address space, so that no two workers fault one huge page.
pub(super) const PART: usize = 2 << 20;

/// Pages of each range sampled again before it is populated (its first,
/// middle and last).
pub(super) const RANGE_SAMPLES: usize = 3;

/// Runs of a job whose residency is sampled, at most (evenly spaced).
pub(super) const MAX_RUNS: usize = 16;

/// One job's prefault: whether it needs one, and how far it has come.
#[derive(Debug)]
pub(super) struct Ahead {
    /// Some sampled page of the destination was not present.
    cold: bool,
    /// The next chunk whose ranges are still to be populated.
    next: usize,
    /// Chunks populated ahead of the one being copied, at most.
    lookahead: usize,
    /// The spans advised `MADV_HUGEPAGE`, `(start, end)`: their parts are
    /// faulted in by a write to each page that keeps its byte.
    advised: Vec<(usize, usize)>,
    /// Parts to populate with `MADV_POPULATE_WRITE`.
    parts: Vec<HostCopyArgs>,
    /// Parts inside `advised`, to fault in by writing.
    touched: Vec<HostCopyArgs>,
    /// Whether a chunk not populated ahead may be faulted in by its copy:
    /// the huge page is [`PART`], so one part is one worker's fault.
    fuse: bool,
    /// A chunk faulted in by its copy: its parts inside advised huge
    /// pages, and the others ([`FaultInCopy`]).
    fused_cached: Vec<HostCopyArgs>,
    fused_rest: Vec<HostCopyArgs>,
}

/// The host copies of a chunk whose pages its copy faults in, in place of
/// its planned ones (the same bytes, cut at [`PART`] multiples of the
/// destination): `cached`, the parts inside advised huge pages, to copy
/// with cached stores, so that each worker's first store into a huge page
/// faults it in and the kernel's zeroing leaves it in that worker's cache
/// for the copy's stores (one pass over the memory instead of a populate
/// and a streaming copy); `rest`, the others, copied as the job copies.
#[derive(Debug)]
pub(super) struct FaultInCopy<'a> {
    pub(super) cached: &'a [HostCopyArgs],
    pub(super) rest: &'a [HostCopyArgs],
}

impl Ahead {
    /// Samples the destination of `plan` and, if it is cold, advises huge
    /// pages where allowed. `lookahead`: chunks ahead of the one being
    /// copied that may be populated while it is in flight.
    pub(super) fn start(plan: &[PlannedChunk], lookahead: usize) -> Ahead {
        let runs = runs(plan);
        let eligible: Vec<&(usize, usize)> =
            runs.iter().filter(|&&(_, len)| len >= MIN_RANGE).collect();
        let sampled = eligible.len().min(MAX_RUNS);
        let mut cold_runs = Vec::new();
        for index in 0..sampled {
            let &(addr, len) = eligible[index * eligible.len() / sampled];
            if !prefault::is_resident_raw(addr, len) {
                cold_runs.push((addr, len));
            }
        }
        let huge: Vec<_> = cold_runs
            .iter()
            .filter(|&&(_, len)| prefault::may_hold_huge_page(len))
            .collect();
        let mut advised = Vec::new();
        if !huge.is_empty() {
            let mappings = AnonymousMappings::read();
            for &&(addr, len) in &huge {
                let bytes = prefault::advise_huge_pages(addr, len, &mappings);
                if let Some(huge) = prefault::huge_page_advice()
                    && bytes > 0
                {
                    // The advice covers the whole huge pages inside.
                    let start = addr.next_multiple_of(huge);
                    advised.push((start, start + bytes));
                }
            }
        }
        Ahead {
            cold: !cold_runs.is_empty(),
            next: 0,
            lookahead,
            advised,
            parts: Vec::new(),
            touched: Vec::new(),
            fuse: prefault::huge_page_advice() == Some(PART),
            fused_cached: Vec::new(),
            fused_rest: Vec::new(),
        }
    }

    /// Whether the job's destination sampled cold (prefault work to do).
    pub(super) fn cold(&self) -> bool {
        self.cold
    }

    /// Before chunk `index`'s host copy: populates later chunks while
    /// `event` (its driver copy) has not completed. If the chunk itself was
    /// not populated ahead and some of its cold ranges lie in advised huge
    /// pages, its cold ranges outside them are populated now and the copy
    /// lists returned replace the chunk's own ([`FaultInCopy`]); otherwise
    /// it is populated now and copied as planned (`None`).
    pub(super) fn before_copy(
        &mut self,
        workers: &CopyPool,
        plan: &[PlannedChunk],
        index: usize,
        event: &Event,
    ) -> Option<FaultInCopy<'_>> {
        if !self.cold {
            return None;
        }
        let mut fused = false;
        if self.next <= index && self.fuse {
            self.parts.clear();
            for range in &plan[index].host {
                if range.nbytes >= MIN_RANGE
                    && !prefault::is_resident_sampled(range.dst, range.nbytes, RANGE_SAMPLES)
                {
                    split_into_parts(range, &mut self.parts);
                }
            }
            let advised = &self.advised;
            let left: usize = self
                .parts
                .iter()
                .filter(|part| inside(advised, part))
                .map(|part| part.nbytes)
                .sum();
            if left > 0 {
                fused = true;
                self.next = index + 1;
                self.parts.retain(|part| !inside(advised, part));
                cut_for_fault_in(
                    &plan[index].host,
                    advised,
                    &mut self.fused_cached,
                    &mut self.fused_rest,
                );
                // SAFETY: each part lies in the chunk's host destination,
                // which the transfer's owner keeps valid and writable until
                // the job is done (its contract, checked when planned); the
                // destinations are disjoint, so no two parts overlap; only
                // the copier writes them, after this call returns.
                // Contents are kept.
                unsafe { workers.prefault_list(&self.parts, FaultIn::Advise) };
            }
        }
        while self.next <= index {
            self.populate(workers, plan, index + 1);
        }
        let limit = (index + 1 + self.lookahead).min(plan.len());
        while self.next < limit && matches!(event.query(), Ok(false)) {
            self.populate(workers, plan, limit);
        }
        fused.then_some(FaultInCopy {
            cached: &self.fused_cached,
            rest: &self.fused_rest,
        })
    }

    /// Populates the ranges of chunks from `next` on, as many chunks
    /// (before `limit`) as give each worker a part, at least one.
    fn populate(&mut self, workers: &CopyPool, plan: &[PlannedChunk], limit: usize) {
        self.parts.clear();
        self.touched.clear();
        let participants = workers.active() + 1;
        while self.next < limit && self.parts.len() < participants {
            for range in &plan[self.next].host {
                // Present already (a destination written in part): populating
                // present small pages again costs more than checking (on the
                // 2-core development VM, 10 GB/s a thread against 2 us).
                if range.nbytes >= MIN_RANGE
                    && !prefault::is_resident_sampled(range.dst, range.nbytes, RANGE_SAMPLES)
                {
                    split_into_parts(range, &mut self.parts);
                }
            }
            self.next += 1;
        }
        let advised = &self.advised;
        let inside = |part: &HostCopyArgs| inside(advised, part);
        self.touched
            .extend(self.parts.iter().filter(|part| inside(part)));
        self.parts.retain(|part| !inside(part));
        // SAFETY: (both calls) each part lies in a chunk's host
        // destination, which the transfer's owner keeps valid and writable
        // until the job is done (its contract, checked when planned);
        // destinations are disjoint, and only the copier writes them, one
        // chunk after another, after this call returns. Contents are kept.
        unsafe { workers.prefault_list(&self.touched, FaultIn::Write) };
        // SAFETY: as above.
        unsafe { workers.prefault_list(&self.parts, FaultIn::Advise) };
    }
}

/// The job's host destinations, joined where one ends where the next
/// begins: `(address, bytes)`.
fn runs(plan: &[PlannedChunk]) -> Vec<(usize, usize)> {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for range in plan.iter().flat_map(|chunk| &chunk.host) {
        match runs.last_mut() {
            Some((addr, len)) if *addr + *len == range.dst => *len += range.nbytes,
            _ => runs.push((range.dst, range.nbytes)),
        }
    }
    runs
}

/// Whether `part`'s destination lies inside one of the `advised` spans.
fn inside(advised: &[(usize, usize)], part: &HostCopyArgs) -> bool {
    advised
        .iter()
        .any(|&(start, end)| start <= part.dst && part.dst + part.nbytes <= end)
}

/// Cuts a chunk's host copies for [`FaultInCopy`]: copies that continue
/// each other on both sides are joined first (a batch's pieces of a pool's
/// slots: otherwise several workers would meet in one huge page), then cut
/// where the destination crosses a multiple of [`PART`]; parts inside an
/// `advised` span go to `cached`, the others to `rest` (both cleared
/// first). Together they hold every byte of `host` once.
fn cut_for_fault_in(
    host: &[HostCopyArgs],
    advised: &[(usize, usize)],
    cached: &mut Vec<HostCopyArgs>,
    rest: &mut Vec<HostCopyArgs>,
) {
    cached.clear();
    rest.clear();
    let mut parts = Vec::new();
    let mut run: Option<HostCopyArgs> = None;
    for copy in host.iter().filter(|copy| copy.nbytes > 0) {
        match run.as_mut() {
            Some(last)
                if last.dst + last.nbytes == copy.dst && last.src + last.nbytes == copy.src =>
            {
                last.nbytes += copy.nbytes;
            }
            _ => {
                if let Some(last) = run.replace(*copy) {
                    split_into_parts(&last, &mut parts);
                }
            }
        }
    }
    if let Some(last) = run {
        split_into_parts(&last, &mut parts);
    }
    for part in parts {
        if inside(advised, &part) {
            cached.push(part);
        } else {
            rest.push(part);
        }
    }
}

/// Cuts `copy` where its destination crosses a multiple of [`PART`] (the
/// source moving with it).
fn split_into_parts(copy: &HostCopyArgs, parts: &mut Vec<HostCopyArgs>) {
    let end = copy.dst + copy.nbytes;
    let mut at = copy.dst;
    while at < end {
        let next = ((at / PART) + 1).saturating_mul(PART).min(end);
        parts.push(HostCopyArgs::new(at, copy.src + (at - copy.dst), next - at));
        at = next;
    }
}

#[cfg(test)]
mod tests {
    use super::{PART, cut_for_fault_in, split_into_parts};
    use crate::parallel::{CopyPool, Stores};
    use hostcopy_core::HostCopyArgs;
    use std::vec;
    use std::vec::Vec;

    /// Ragged copies of a chunk: pieces continuing each other on both
    /// sides (a batch's 512 KiB pieces of one block), an empty one, one
    /// whose source is not congruent to its destination modulo the part,
    /// one ending on a part boundary, one crossing three.
    fn ragged(dst: usize, src: usize) -> Vec<HostCopyArgs> {
        let half = PART / 4;
        vec![
            HostCopyArgs::new(dst + PART - 3 * half, src, half),
            HostCopyArgs::new(dst + PART - 2 * half, src + half, half),
            HostCopyArgs::new(dst + PART - half, src + 2 * half, half),
            HostCopyArgs::new(dst + 5 * PART, src + 3 * half, 0),
            HostCopyArgs::new(dst + 2 * PART + 4096, src + 3 * half + 100, PART - 4096),
            HostCopyArgs::new(dst + 4 * PART - 12_345, src + 7 * PART, 2 * PART + 20_000),
        ]
    }

    #[test]
    fn a_copy_that_faults_in_covers_every_byte_once_in_parts_within_huge_pages() {
        let (dst, src) = (64 * PART, 1 << 40);
        let host = ragged(dst, src);
        // Advised: the second, third and fourth huge pages from `dst`.
        let advised = [(dst + PART, dst + 4 * PART)];
        let (mut cached, mut rest) = (Vec::new(), Vec::new());
        cut_for_fault_in(&host, &advised, &mut cached, &mut rest);
        for part in &cached {
            assert!(advised[0].0 <= part.dst && part.dst + part.nbytes <= advised[0].1);
        }
        let mut parts: Vec<_> = cached.iter().chain(&rest).copied().collect();
        for part in &parts {
            assert!(part.nbytes > 0);
            assert_eq!(
                part.dst / PART,
                (part.dst + part.nbytes - 1) / PART,
                "{part:?}"
            );
            // Each part moves its bytes as every copy it overlaps does.
            let delta = part.src.wrapping_sub(part.dst);
            let overlapped: Vec<_> = host
                .iter()
                .filter(|c| c.dst < part.dst + part.nbytes && part.dst < c.dst + c.nbytes)
                .collect();
            assert!(!overlapped.is_empty(), "{part:?}");
            assert!(
                overlapped
                    .iter()
                    .all(|c| c.src.wrapping_sub(c.dst) == delta),
                "{part:?}"
            );
        }
        // The parts tile the copies: the same bytes, none twice.
        parts.sort_by_key(|part| part.dst);
        assert!(parts.windows(2).all(|w| w[0].dst + w[0].nbytes <= w[1].dst));
        let total = |list: &[HostCopyArgs]| list.iter().map(|c| c.nbytes).sum::<usize>();
        assert_eq!(total(&parts), total(&host));
        // The three pieces continuing each other became one part.
        assert_eq!(
            parts[0],
            HostCopyArgs::new(dst + PART - 3 * (PART / 4), src, 3 * (PART / 4))
        );
    }

    #[test]
    fn the_cut_lists_copy_what_the_planned_ones_copy() {
        // Small enough for Miri: parts of at most PART, copies a few KiB.
        let len = 64 << 10;
        let source: Vec<u8> = (0..len).map(|i| (i * 7 + i / 251) as u8).collect();
        let (mut planned, mut cut) = (vec![0u8; len], vec![0u8; len]);
        let copies = |dst: &mut Vec<u8>| {
            let (d, s) = (
                dst.as_mut_ptr().expose_provenance(),
                source.as_ptr().expose_provenance(),
            );
            vec![
                HostCopyArgs::new(d, s + 4096, 8192),
                HostCopyArgs::new(d + 8192, s + 12_288, 8192),
                HostCopyArgs::new(d + 20_000, s, 30_000),
                HostCopyArgs::new(d + 50_000, s + 50_000, 0),
            ]
        };
        let pool = CopyPool::new(2);
        let host = copies(&mut planned);
        // SAFETY: the records lie in `source` and `planned`, alive and
        // unaliased for the call; destinations disjoint.
        unsafe { pool.copy_list(&host, Stores::Streaming) };
        let host = copies(&mut cut);
        let start = host[0].dst;
        let (mut cached, mut rest) = (Vec::new(), Vec::new());
        cut_for_fault_in(&host, &[(start, start + 16_384)], &mut cached, &mut rest);
        assert!(!cached.is_empty() && !rest.is_empty());
        // SAFETY: as above: the same bytes, cut.
        unsafe {
            pool.copy_list(&cached, Stores::Cached);
            pool.copy_list(&rest, Stores::Streaming);
        }
        assert!(cut == planned);
    }

    #[test]
    fn parts_end_on_multiples_of_the_part_size_and_cover_the_range() {
        let mut parts = Vec::new();
        let (addr, src) = (3 * PART - 4096, 1 << 40);
        split_into_parts(&HostCopyArgs::new(addr, src, 2 * PART + 8192), &mut parts);
        let spans: Vec<(usize, usize, usize)> =
            parts.iter().map(|p| (p.dst, p.src, p.nbytes)).collect();
        assert_eq!(
            spans,
            [
                (addr, src, 4096),
                (3 * PART, src + 4096, PART),
                (4 * PART, src + 4096 + PART, PART),
                (5 * PART, src + 4096 + 2 * PART, 4096)
            ]
        );
    }
}
