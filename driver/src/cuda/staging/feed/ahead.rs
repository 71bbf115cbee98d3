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
//! are faulted in by a zero byte written at each 4 KiB page
//! ([`prefault::write_pages`]: bytes the chunk's copy overwrites next),
//! the others with `MADV_POPULATE_WRITE`.
//!
//! A chunk the prefault has not reached by its own turn (the copier never
//! waits where its host side is slower than the link, as it is into fresh
//! memory) is not populated first: its ranges outside advised huge pages
//! are, and its copy list, cut at [`PART`] multiples of the destination,
//! is copied with cached stores, so that each worker's first store into a
//! huge page faults it in and the kernel's zeroing leaves it in that
//! worker's cache for the copy's stores: one pass over the memory instead
//! of two (a populate, then a streaming copy).
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
//! measurable on huge pages. On the H200 host (run 55's
//! `populate-probe.c`, 16 threads, pages the kernel had just freed),
//! `MADV_POPULATE_WRITE` after `MADV_HUGEPAGE` made 1 to 64 GiB present at
//! 6 to 9.5 GB/s, a zero written to each of their 4 KiB pages at 31.8
//! GB/s (1 GiB), 43.8 (4 GiB) and 55.7 (16 GiB), every fault a huge page
//! both ways; `MADV_POPULATE_WRITE` on 4 KiB pages 3.4 to 3.9 GB/s (the
//! touch of small pages: 0.8 GB/s against 2.5 on the development VM).
//! Hence the write where huge pages were advised, the advice elsewhere.
//!
//! Either way the kernel's zeroing of each huge page is the workers' work:
//! on the H200 host `HostBuffer::new` faults huge pages in at 53 GB/s over
//! 16 threads (run 57), about 3.3 GB/s a thread, so 1 GiB of fresh
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
    /// faulted in by a zero written to each page.
    advised: Vec<(usize, usize)>,
    /// Parts to populate with `MADV_POPULATE_WRITE`.
    parts: Vec<HostCopyArgs>,
    /// Parts inside `advised`, to fault in by writing.
    touched: Vec<HostCopyArgs>,
    /// The copy list of a chunk faulted in by its own copy.
    fused: Vec<HostCopyArgs>,
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
            fused: Vec::new(),
        }
    }

    /// Whether the job's destination sampled cold (prefault work to do).
    pub(super) fn cold(&self) -> bool {
        self.cold
    }

    /// Before chunk `index`'s host copy: populates later chunks while
    /// `event` (its driver copy) has not completed. If the chunk itself was
    /// not populated ahead, its ranges outside the advised huge pages are
    /// populated now, and the copy list returned (its host copies cut at
    /// [`PART`] multiples of the destination) is to be copied with cached
    /// stores in place of the chunk's own: each worker's first store into
    /// a part faults its huge page in, the kernel's zeroing leaves the page
    /// in that worker's cache, and the copy's stores then meet it there
    /// (one pass over memory instead of a populate's and the copy's).
    /// `None`: copy the chunk as planned.
    pub(super) fn before_copy(
        &mut self,
        workers: &CopyPool,
        plan: &[PlannedChunk],
        index: usize,
        event: &Event,
    ) -> Option<&[HostCopyArgs]> {
        if !self.cold {
            return None;
        }
        let mut fused = false;
        if self.next <= index {
            self.next = index + 1;
            self.parts.clear();
            self.fused.clear();
            for range in &plan[index].host {
                split_into_parts(range, &mut self.fused);
                if range.nbytes >= MIN_RANGE
                    && !prefault::is_resident_sampled(range.dst, range.nbytes, RANGE_SAMPLES)
                {
                    split_into_parts(range, &mut self.parts);
                }
            }
            let advised = &self.advised;
            let inside = |part: &HostCopyArgs| inside(advised, part);
            let by_copy: usize = self
                .parts
                .iter()
                .filter(|part| inside(part))
                .map(|part| part.nbytes)
                .sum();
            fused = by_copy > 0;
            prefault::count_faulted_by_copy(by_copy);
            self.parts.retain(|part| !inside(part));
            // SAFETY: each part lies in the chunk's host destination, which
            // the transfer's owner keeps valid and writable until the job is
            // done (its contract, checked when planned); only the copier
            // writes it, after this call returns. Contents are kept.
            unsafe { workers.prefault_list(&self.parts, FaultIn::Advise) };
        }
        let limit = (index + 1 + self.lookahead).min(plan.len());
        while self.next < limit && matches!(event.query(), Ok(false)) {
            self.populate(workers, plan, limit);
        }
        fused.then_some(&self.fused[..])
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
        // chunk after another, after this call returns (a chunk's copy
        // comes after its populate, and overwrites every byte of its
        // ranges, the zeros written here among them).
        unsafe { workers.prefault_list(&self.touched, FaultIn::WriteZero) };
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
    use super::{PART, split_into_parts};
    use hostcopy_core::HostCopyArgs;
    use std::vec::Vec;

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
