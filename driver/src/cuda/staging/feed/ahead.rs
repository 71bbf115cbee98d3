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
//! parts of [`PART`] split over the workers: a chunk before its own host
//! copy at the latest, and later chunks (up to as many as there are
//! staging buffers ahead) while the copier would otherwise wait for a
//! chunk's event. Parts inside the advised huge pages are faulted in by a
//! zero byte written at each 4 KiB page ([`prefault::write_pages`]: bytes
//! the chunk's copy overwrites next), the others with
//! `MADV_POPULATE_WRITE`.
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
//! A chunk's populate and its copy run one after the other on the same
//! workers: where the copier never waits (its host side slower than the
//! link), the pace is that of both in turn.

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
        }
    }

    /// Whether the job's destination sampled cold (prefault work to do).
    pub(super) fn cold(&self) -> bool {
        self.cold
    }

    /// Before chunk `index`'s host copy: populates it if not yet done,
    /// then later chunks while `event` (its driver copy) has not completed.
    pub(super) fn before_copy(
        &mut self,
        workers: &CopyPool,
        plan: &[PlannedChunk],
        index: usize,
        event: &Event,
    ) {
        if !self.cold {
            return;
        }
        while self.next <= index {
            self.populate(workers, plan, index + 1);
        }
        let limit = (index + 1 + self.lookahead).min(plan.len());
        while self.next < limit && matches!(event.query(), Ok(false)) {
            self.populate(workers, plan, limit);
        }
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
                    split_into_parts(range.dst, range.nbytes, &mut self.parts);
                }
            }
            self.next += 1;
        }
        let advised = &self.advised;
        let inside = |part: &HostCopyArgs| {
            advised
                .iter()
                .any(|&(start, end)| start <= part.dst && part.dst + part.nbytes <= end)
        };
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

/// Cuts `addr..addr + len` at multiples of [`PART`].
fn split_into_parts(addr: usize, len: usize, parts: &mut Vec<HostCopyArgs>) {
    let end = addr + len;
    let mut at = addr;
    while at < end {
        let next = ((at / PART) + 1).saturating_mul(PART).min(end);
        parts.push(HostCopyArgs::new(at, 0, next - at));
        at = next;
    }
}

#[cfg(test)]
mod tests {
    use super::{PART, split_into_parts};
    use std::vec::Vec;

    #[test]
    fn parts_end_on_multiples_of_the_part_size_and_cover_the_range() {
        let mut parts = Vec::new();
        let addr = 3 * PART - 4096;
        split_into_parts(addr, 2 * PART + 8192, &mut parts);
        let spans: Vec<(usize, usize)> = parts.iter().map(|p| (p.dst, p.nbytes)).collect();
        assert_eq!(
            spans,
            [
                (addr, 4096),
                (3 * PART, PART),
                (4 * PART, PART),
                (5 * PART, 4096)
            ]
        );
    }
}
