//! Host pages made present before a copy writes them (feature `std`; Linux,
//! elsewhere every function here does nothing).
//!
//! Why: a destination that was never touched (`vec![0; n]`, `np.empty`)
//! has no pages yet, and the first write to each 4 KiB page faults. On the
//! H200 host a staged device-to-host copy into such memory ran at 11 to 12
//! GB/s, a fifth of the link, against 97% into memory already present; 12
//! threads faulted 1 GiB in at 18.9 GB/s by touching it, 40.8 GB/s with
//! `MADV_POPULATE_WRITE`, 76.5 GB/s with `MADV_POPULATE_WRITE` after
//! `MADV_HUGEPAGE` (transparent huge pages in `madvise` mode).
//!
//! What is done to memory, and to which:
//! - [`populate`]: `madvise(MADV_POPULATE_WRITE)` on the pages that hold
//!   the range (Linux 5.14 and later). It faults the pages in as a write
//!   would, without writing: contents are unchanged, on any mapping. Where
//!   the kernel refuses it (`EINVAL`: an older kernel, or a mapping it does
//!   not populate), one byte of each page inside the range is read and
//!   written back with the same value (volatile), so only bytes of the range
//!   itself are accessed. Other errors (a hole, a poisoned page) are left to
//!   the copy, which meets them as it would have.
//! - [`advise_huge_pages`]: `madvise(MADV_HUGEPAGE)` on the part of the
//!   range that covers whole huge pages (2 MiB on x86_64), only where the
//!   kernel's transparent huge pages are in `madvise` mode (in `always` mode
//!   it would change nothing, in `never` nothing either), and only where
//!   `/proc/self/maps` says that part lies in private anonymous writable
//!   mappings (no file, no shared memory). This changes the mapping's policy
//!   for that range, for good: later faults there may take huge pages, and
//!   the kernel may merge small pages there into huge ones. Only whole huge
//!   pages inside the range are advised, and the range is written in full
//!   by the transfer, so no page is made present that the copy would not
//!   have made present.
//! - The stagers' prefault and [`HostBuffer`](crate::HostBuffer) fault
//!   whole huge pages they advised in by a write at the start of each 4 KiB
//!   page of the range that keeps its byte (crate-internal; an atomic
//!   compare-exchange of 0 for 0, which faults as a write): no byte
//!   changes, so a chunk
//!   prefaulted and then never copied (its transfer failed first) leaves
//!   the destination as it was. A stager's chunk that this has not reached
//!   by its turn is faulted in by its copy's own stores instead
//!   ([`PrefaultCounts::faulted_by_copy_bytes`]). Reading first would map
//!   the kernel's shared huge zero page, whose write fault splits it into
//!   small pages; and `MADV_POPULATE_WRITE` took huge pages at 6 to 9.5
//!   GB/s over 16 threads on the H200 host, the writes at 32 to 56 GB/s
//!   (BENCHMARKS.md, "Fresh destinations and host pools").
//! - [`is_resident`]: `mincore` on a sample of the range's pages (at most
//!   [`SAMPLES`] one-page calls): whether it looks present already, so that
//!   memory that is pays only those calls.
//!
//! Under Miri none of these run (they are system calls): they report the
//! memory as present and do nothing.

use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Pages of a range [`is_resident`] asks about: its first, its last, and
/// evenly spaced ones between.
pub const SAMPLES: usize = 8;

/// How [`populate_with`] makes pages present.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Populate {
    /// `MADV_POPULATE_WRITE`, and the touch where the kernel refuses it.
    Advise,
    /// Always the touch: one byte per page read and written back.
    Touch,
}

/// How a call to [`populate_with`] went.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Populated {
    /// The kernel populated the range (`MADV_POPULATE_WRITE`).
    Advised,
    /// One byte per page was touched.
    Touched,
    /// Nothing was done: an empty range, a platform without the calls,
    /// Miri, or a kernel error other than `EINVAL` (left to the copy).
    Nothing,
}

/// What this process's prefaulting has done so far, for all callers (the
/// stagers' and [`HostBuffer`](crate::HostBuffer)'s): [`counts`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PrefaultCounts {
    /// Ranges asked about with [`is_resident`].
    pub residency_checks: u64,
    /// Ranges given to [`populate_with`].
    pub populated_ranges: u64,
    /// Their bytes.
    pub populated_bytes: u64,
    /// Ranges populated by the touch (the kernel refused the advice, or it
    /// was asked for).
    pub touched_ranges: u64,
    /// Bytes advised `MADV_HUGEPAGE`.
    pub huge_advised_bytes: u64,
    /// Bytes a stager's copy wrote into advised huge pages of a chunk its
    /// prefault had not reached, with cached stores: the copy's own first
    /// store into each huge page faulted it in (where another had not).
    pub faulted_by_copy_bytes: u64,
}

static RESIDENCY_CHECKS: AtomicU64 = AtomicU64::new(0);
static POPULATED_RANGES: AtomicU64 = AtomicU64::new(0);
static POPULATED_BYTES: AtomicU64 = AtomicU64::new(0);
static TOUCHED_RANGES: AtomicU64 = AtomicU64::new(0);
static HUGE_ADVISED_BYTES: AtomicU64 = AtomicU64::new(0);
static FAULTED_BY_COPY_BYTES: AtomicU64 = AtomicU64::new(0);

/// The process's prefault counts so far.
pub fn counts() -> PrefaultCounts {
    PrefaultCounts {
        residency_checks: RESIDENCY_CHECKS.load(Ordering::Relaxed),
        populated_ranges: POPULATED_RANGES.load(Ordering::Relaxed),
        populated_bytes: POPULATED_BYTES.load(Ordering::Relaxed),
        touched_ranges: TOUCHED_RANGES.load(Ordering::Relaxed),
        huge_advised_bytes: HUGE_ADVISED_BYTES.load(Ordering::Relaxed),
        faulted_by_copy_bytes: FAULTED_BY_COPY_BYTES.load(Ordering::Relaxed),
    }
}

/// Counts `bytes` of advised huge pages left to a copy to fault in.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) fn count_faulted_by_copy(bytes: usize) {
    FAULTED_BY_COPY_BYTES.fetch_add(bytes as u64, Ordering::Relaxed);
}

/// The page size (4 KiB where it cannot be asked).
pub fn page_size() -> usize {
    static PAGE: AtomicUsize = AtomicUsize::new(0);
    match PAGE.load(Ordering::Relaxed) {
        0 => {
            let page = sys::page_size().filter(|page| page.is_power_of_two());
            let page = page.unwrap_or(4096);
            PAGE.store(page, Ordering::Relaxed);
            page
        }
        page => page,
    }
}

/// Whether the pages of `memory` look present: a sample of at most
/// [`SAMPLES`] pages, asked with `mincore`. `true` where it cannot be
/// asked (another platform, Miri, an address the kernel does not know), so
/// that such memory is left alone. Costs one system call per sampled page.
pub fn is_resident(memory: &[u8]) -> bool {
    is_resident_raw(memory.as_ptr().expose_provenance(), memory.len())
}

/// [`is_resident`] for a raw range: it only asks the kernel about the
/// pages, so any address is fine.
pub(crate) fn is_resident_raw(addr: usize, len: usize) -> bool {
    is_resident_sampled(addr, len, SAMPLES)
}

/// [`is_resident_raw`] with at most `samples` (at least 1) pages asked about.
pub(crate) fn is_resident_sampled(addr: usize, len: usize, samples: usize) -> bool {
    if len == 0 || cfg!(miri) {
        return true;
    }
    RESIDENCY_CHECKS.fetch_add(1, Ordering::Relaxed);
    let page = page_size();
    let first = addr & !(page - 1);
    let last = (addr + (len - 1)) & !(page - 1);
    let pages = (last - first) / page + 1;
    let samples = pages.min(samples.max(1));
    (0..samples).all(|sample| {
        // The first and the last page, and evenly spaced ones between.
        let index = if samples == 1 {
            0
        } else {
            sample * (pages - 1) / (samples - 1)
        };
        sys::page_resident(first + index * page).unwrap_or(true)
    })
}

/// Makes the pages of `memory` present, keeping its contents
/// ([`Populate::Advise`]).
///
/// ```
/// let mut memory = vec![0u8; 1 << 20];
/// hostcopy_driver::prefault::populate(&mut memory);
/// assert!(memory.iter().all(|&byte| byte == 0));
/// ```
pub fn populate(memory: &mut [u8]) -> Populated {
    populate_with(memory, Populate::Advise)
}

/// Makes the pages of `memory` present, keeping its contents, as `how`
/// says.
pub fn populate_with(memory: &mut [u8], how: Populate) -> Populated {
    // SAFETY: `memory` is borrowed exclusively for the call.
    unsafe { populate_raw(memory.as_mut_ptr().expose_provenance(), memory.len(), how) }
}

/// [`populate_with`] for a raw range.
///
/// # Safety
///
/// `addr..addr + len` is writable through exposed provenance, and no other
/// thread reads or writes it during the call (the touch reads one byte per
/// page and writes it back). `MADV_POPULATE_WRITE` on the pages around the
/// range accesses no byte of them.
pub(crate) unsafe fn populate_raw(addr: usize, len: usize, how: Populate) -> Populated {
    if len == 0 || cfg!(miri) {
        return Populated::Nothing;
    }
    POPULATED_RANGES.fetch_add(1, Ordering::Relaxed);
    POPULATED_BYTES.fetch_add(len as u64, Ordering::Relaxed);
    let page = page_size();
    if how == Populate::Advise {
        let start = addr & !(page - 1);
        let end = (addr + len).next_multiple_of(page);
        match sys::advise_populate_write(start, end - start) {
            Ok(()) => return Populated::Advised,
            // An older kernel, or a mapping it does not populate: touch.
            Err(sys::Refused::Unsupported) => {}
            Err(sys::Refused::Other) => return Populated::Nothing,
        }
    }
    if !sys::AVAILABLE {
        return Populated::Nothing;
    }
    TOUCHED_RANGES.fetch_add(1, Ordering::Relaxed);
    let mut at = addr;
    while at < addr + len {
        let byte = core::ptr::with_exposed_provenance_mut::<u8>(at);
        // SAFETY: `at` lies in the range, which is writable and which no
        // other thread accesses during the call (our caller): the byte read
        // is the byte written back, so the contents are unchanged. Volatile,
        // so the compiler keeps the write that makes the fault a write fault.
        unsafe { byte.write_volatile(byte.read_volatile()) };
        at = (at & !(page - 1)) + page;
    }
    Populated::Touched
}

/// How the crate's own callers fault a range in: [`populate_raw`] with
/// [`Populate::Advise`], or [`write_pages`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FaultIn {
    /// `MADV_POPULATE_WRITE` (the touch where the kernel refuses it);
    /// contents kept.
    Advise,
    /// A write at the start of each page that keeps its byte
    /// ([`write_pages`]); contents kept.
    Write,
}

/// Faults `addr..addr + len` in as `how` says.
///
/// # Safety
///
/// As for [`populate_raw`] and [`write_pages`].
pub(crate) unsafe fn fault_in(addr: usize, len: usize, how: FaultIn) {
    match how {
        // SAFETY: our caller's contract.
        FaultIn::Advise => unsafe { populate_raw(addr, len, Populate::Advise) },
        // SAFETY: our caller's contract.
        FaultIn::Write => unsafe { write_pages(addr, len) },
    };
}

/// Makes the pages of `addr..addr + len` present by a write that keeps
/// the byte at the first address of each page (an atomic compare-exchange
/// of 0 for 0): one write fault per page, which for memory advised
/// `MADV_HUGEPAGE` is one per huge page. A plain read-then-write would
/// read first, and a read of a never-touched huge page maps the kernel's
/// shared zero page, whose write fault then splits it into small pages;
/// an atomic read-modify-write faults as a write. (Not `fetch_or(0)`: the
/// optimiser turns a read-modify-write that changes nothing into a load,
/// and drops the load, so an optimised build made no page present.) `MADV_POPULATE_WRITE` takes huge
/// pages but walks them slowly (BENCHMARKS.md, "Fresh destinations and
/// host pools": 6 to 9.5 GB/s over 16 threads, this write 32 to 56).
///
/// No byte changes: a transfer whose chunk is prefaulted and then never
/// copied (it failed before) leaves the destination as it was.
///
/// # Safety
///
/// `addr..addr + len` is writable through exposed provenance, and no
/// other thread reads or writes it during the call.
pub(crate) unsafe fn write_pages(addr: usize, len: usize) -> Populated {
    if len == 0 || cfg!(miri) {
        return Populated::Nothing;
    }
    POPULATED_RANGES.fetch_add(1, Ordering::Relaxed);
    POPULATED_BYTES.fetch_add(len as u64, Ordering::Relaxed);
    TOUCHED_RANGES.fetch_add(1, Ordering::Relaxed);
    let page = page_size();
    let mut at = addr;
    while at < addr + len {
        let byte = core::ptr::with_exposed_provenance_mut::<u8>(at);
        // SAFETY: `at` lies in the range, writable and accessed by no other
        // thread during the call (our caller), so an atomic view of the
        // byte aliases no other access; a `u8` has no alignment to keep.
        // A compare-exchange of 0 for 0 changes no byte.
        let _ = unsafe { core::sync::atomic::AtomicU8::from_ptr(byte) }.compare_exchange(
            0,
            0,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
        at = (at & !(page - 1)) + page;
    }
    Populated::Touched
}

/// The transparent huge page size, where the kernel's transparent huge
/// pages are in `madvise` mode (so that `MADV_HUGEPAGE` changes what a
/// fault takes); `None` elsewhere.
pub fn huge_page_advice() -> Option<usize> {
    static ADVICE: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *ADVICE.get_or_init(|| if cfg!(miri) { None } else { sys::thp_madvise() })
}

/// The private anonymous writable mappings of the process, as
/// `/proc/self/maps` listed them when read: where [`advise_huge_pages`] may
/// give advice that changes the mapping's policy.
#[derive(Clone, Debug, Default)]
pub struct AnonymousMappings {
    /// `(start, end)`, sorted, adjacent ones merged.
    ranges: std::vec::Vec<(usize, usize)>,
}

impl AnonymousMappings {
    /// Reads `/proc/self/maps` (empty where it cannot be read). It costs
    /// about as much as the process has mappings: read it once for a
    /// transfer, and only when some of its memory was found not present.
    pub fn read() -> AnonymousMappings {
        if cfg!(miri) {
            return AnonymousMappings::default();
        }
        std::fs::read_to_string("/proc/self/maps")
            .map(|maps| AnonymousMappings::parse(&maps))
            .unwrap_or_default()
    }

    /// The private anonymous writable mappings of a `/proc/<pid>/maps` text.
    fn parse(maps: &str) -> AnonymousMappings {
        let mut ranges: std::vec::Vec<(usize, usize)> = std::vec::Vec::new();
        for line in maps.lines() {
            let mut fields = line.split_ascii_whitespace();
            let (Some(span), Some(perms), Some(_offset), Some(_dev), Some(inode)) = (
                fields.next(),
                fields.next(),
                fields.next(),
                fields.next(),
                fields.next(),
            ) else {
                continue;
            };
            let path = fields.next().unwrap_or("");
            let perms = perms.as_bytes();
            // Writable and private, no file (inode 0), and no special
            // mapping except the heap (no stack, vdso, vvar).
            let anonymous = inode == "0" && (path.is_empty() || path == "[heap]");
            if perms.len() < 4 || perms[1] != b'w' || perms[3] != b'p' || !anonymous {
                continue;
            }
            let Some((start, end)) = span.split_once('-') else {
                continue;
            };
            let (Ok(start), Ok(end)) = (
                usize::from_str_radix(start, 16),
                usize::from_str_radix(end, 16),
            ) else {
                continue;
            };
            match ranges.last_mut() {
                Some(last) if last.1 == start => last.1 = end,
                _ => ranges.push((start, end)),
            }
        }
        ranges.sort_unstable();
        AnonymousMappings { ranges }
    }

    /// Whether `start..end` lies wholly in these mappings.
    pub fn contains(&self, start: usize, end: usize) -> bool {
        let index = self.ranges.partition_point(|range| range.1 <= start);
        self.ranges
            .get(index)
            .is_some_and(|&(first, last)| first <= start && end <= last)
    }
}

/// Advises `MADV_HUGEPAGE` for the whole huge pages inside
/// `addr..addr + len`, where [`huge_page_advice`] says it changes anything
/// and `mappings` says they are private anonymous memory. Returns the
/// bytes advised (0: none). Accesses no memory; it changes the mapping's
/// policy for that part, for good (see the [module documentation](self)).
pub fn advise_huge_pages(addr: usize, len: usize, mappings: &AnonymousMappings) -> usize {
    let Some(huge) = huge_page_advice() else {
        return 0;
    };
    let start = addr.next_multiple_of(huge);
    let end = (addr.saturating_add(len)) & !(huge - 1);
    if start >= end || !mappings.contains(start, end) {
        return 0;
    }
    if sys::advise_huge(start, end - start) {
        HUGE_ADVISED_BYTES.fetch_add((end - start) as u64, Ordering::Relaxed);
        end - start
    } else {
        0
    }
}

/// Whether a range of `len` bytes can hold a whole huge page at all (a
/// cheap test before [`AnonymousMappings::read`]).
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) fn may_hold_huge_page(len: usize) -> bool {
    huge_page_advice().is_some_and(|huge| len >= huge)
}

#[cfg(all(any(target_os = "linux", target_os = "android"), not(miri)))]
mod sys {
    //! The system calls, one thin wrapper each.

    pub(super) const AVAILABLE: bool = true;

    /// Why the kernel refused `MADV_POPULATE_WRITE`.
    pub(super) enum Refused {
        /// `EINVAL`: not known to this kernel, or not for this mapping.
        Unsupported,
        /// Anything else (a hole, a poisoned page, out of memory).
        Other,
    }

    pub(super) fn page_size() -> Option<usize> {
        // SAFETY: no memory is involved.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(page).ok()
    }

    /// Whether the page at `page` (aligned) is resident; `None` if the
    /// kernel would not say (not mapped).
    pub(super) fn page_resident(page: usize) -> Option<bool> {
        let mut status = 0u8;
        // SAFETY: `mincore` only reads the page tables for one page at an
        // aligned address and writes one byte into `status`; an unmapped
        // address is an error (`ENOMEM`), not an access.
        let result = unsafe {
            libc::mincore(
                core::ptr::without_provenance_mut(page),
                super::page_size(),
                &mut status,
            )
        };
        (result == 0).then_some(status & 1 == 1)
    }

    pub(super) fn advise_populate_write(start: usize, len: usize) -> Result<(), Refused> {
        // SAFETY: `MADV_POPULATE_WRITE` faults pages in as a write would,
        // without writing: no byte's value changes, on any mapping, so
        // no Rust object's contents change under it.
        let result = unsafe {
            libc::madvise(
                core::ptr::without_provenance_mut(start),
                len,
                libc::MADV_POPULATE_WRITE,
            )
        };
        if result == 0 {
            return Ok(());
        }
        match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::EINVAL) => Err(Refused::Unsupported),
            _ => Err(Refused::Other),
        }
    }

    pub(super) fn advise_huge(start: usize, len: usize) -> bool {
        // SAFETY: `MADV_HUGEPAGE` changes only which pages later faults
        // take; no byte's value changes.
        let result = unsafe {
            libc::madvise(
                core::ptr::without_provenance_mut(start),
                len,
                libc::MADV_HUGEPAGE,
            )
        };
        result == 0
    }

    /// The huge page size, if transparent huge pages are in `madvise` mode.
    pub(super) fn thp_madvise() -> Option<usize> {
        let mode = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").ok()?;
        if !mode.contains("[madvise]") {
            return None;
        }
        let size = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size")
            .ok()
            .and_then(|size| size.trim().parse::<usize>().ok())
            .unwrap_or(2 << 20);
        size.is_power_of_two().then_some(size)
    }
}

#[cfg(not(all(any(target_os = "linux", target_os = "android"), not(miri))))]
mod sys {
    //! No such calls here: memory counts as present, nothing is done.

    pub(super) const AVAILABLE: bool = false;

    pub(super) enum Refused {
        #[allow(dead_code)]
        Unsupported,
        Other,
    }

    pub(super) fn page_size() -> Option<usize> {
        None
    }

    pub(super) fn page_resident(_page: usize) -> Option<bool> {
        None
    }

    pub(super) fn advise_populate_write(_start: usize, _len: usize) -> Result<(), Refused> {
        Err(Refused::Other)
    }

    pub(super) fn advise_huge(_start: usize, _len: usize) -> bool {
        false
    }

    pub(super) fn thp_madvise() -> Option<usize> {
        None
    }
}

#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
mod tests {
    use super::*;
    use crate::HostBuffer;
    use std::{println, vec};

    #[test]
    #[cfg_attr(miri, ignore = "mincore and madvise are system calls")]
    fn a_fresh_mapping_is_not_resident_until_populated() {
        let mut fresh = HostBuffer::unpopulated(4 << 20).unwrap();
        assert!(!is_resident(&fresh));
        assert_eq!(populate(&mut fresh), Populated::Advised);
        assert!(is_resident(&fresh));
        assert!(fresh.iter().all(|&byte| byte == 0));
    }

    #[test]
    #[cfg_attr(miri, ignore = "mincore and madvise are system calls")]
    fn writing_pages_faults_in_the_range_and_changes_no_byte() {
        let page = page_size();
        let mut memory = HostBuffer::unpopulated(512 * page).unwrap();
        let pattern = |index: usize| (index as u8 ^ (index / 4096) as u8) | 1;
        for (index, byte) in memory.iter_mut().enumerate() {
            *byte = pattern(index);
        }
        let mut fresh = HostBuffer::unpopulated(512 * page).unwrap();
        // From inside a page to inside another: the first byte of the
        // range, then the first of each later page, are written back.
        let (start, end) = (page + 17, 200 * page + 33);
        for buffer in [&mut memory, &mut fresh] {
            let addr = buffer.as_mut_ptr().expose_provenance();
            // SAFETY: inside a buffer borrowed exclusively here.
            let done = unsafe { write_pages(addr + start, end - start) };
            assert_eq!(done, Populated::Touched);
            assert!(is_resident(&buffer[start..end]));
        }
        assert!(!is_resident(&fresh[300 * page..]));
        assert!(fresh.iter().all(|&byte| byte == 0));
        for (index, &byte) in memory.iter().enumerate() {
            assert_eq!(byte, pattern(index), "byte {index}");
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "mincore and madvise are system calls")]
    fn populating_keeps_what_was_written_before_by_either_method() {
        for how in [Populate::Advise, Populate::Touch] {
            let mut memory = HostBuffer::unpopulated(1 << 20).unwrap();
            // Some pages written (present), the rest never touched; one
            // range starting and ending inside a page.
            for (index, byte) in memory[..300 << 10].iter_mut().enumerate() {
                *byte = index as u8 ^ 0x5a;
            }
            let range = &mut memory[(100 << 10) + 17..(900 << 10) + 33];
            let populated = populate_with(range, how);
            let expected = match how {
                Populate::Advise => Populated::Advised,
                _ => Populated::Touched,
            };
            assert_eq!(populated, expected);
            assert!(is_resident(&memory[(100 << 10) + 17..(900 << 10) + 33]));
            for (index, &byte) in memory.iter().enumerate() {
                let want = if index < 300 << 10 {
                    index as u8 ^ 0x5a
                } else {
                    0
                };
                assert_eq!(byte, want, "byte {index} after {how:?}");
            }
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "mincore and madvise are system calls")]
    fn the_touch_makes_every_page_of_the_range_present() {
        let mut fresh = HostBuffer::unpopulated(2 << 20).unwrap();
        assert_eq!(
            populate_with(&mut fresh, Populate::Touch),
            Populated::Touched
        );
        for page in fresh.chunks(page_size()) {
            assert!(is_resident(page));
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "mincore is a system call")]
    fn a_partly_written_range_samples_cold_and_an_unmapped_one_counts_as_present() {
        let mut memory = HostBuffer::unpopulated(1 << 20).unwrap();
        memory[..512 << 10].fill(1);
        assert!(is_resident(&memory[..512 << 10]));
        assert!(!is_resident(&memory));
        // Not mapped (the kernel says ENOMEM): left alone.
        assert!(is_resident_raw(page_size(), page_size()));
        assert!(is_resident(&[]));
    }

    #[test]
    fn anonymous_private_writable_mappings_are_read_from_the_maps_text() {
        let maps = "\
00400000-00452000 r-xp 00000000 08:02 173521      /usr/bin/dbus-daemon
00651000-00652000 rw-p 00051000 08:02 173521      /usr/bin/dbus-daemon
00e03000-00e24000 rw-p 00000000 00:00 0           [heap]
00e24000-011f7000 rw-p 00000000 00:00 0
7f0000000000-7f0000200000 rw-s 00000000 00:01 42  /dev/zero (deleted)
7f0000200000-7f0000400000 rw-p 00000000 00:00 0
7f0000400000-7f0000600000 rw-p 00000000 00:00 0
7f0000600000-7f0000800000 r--p 00000000 00:00 0
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0   [stack]
";
        let mappings = AnonymousMappings::parse(maps);
        // The heap and the mapping after it, joined.
        assert!(mappings.contains(0xe03000, 0x11f7000));
        // Two adjacent anonymous mappings, joined.
        assert!(mappings.contains(0x7f0000200000, 0x7f0000600000));
        // File-backed, shared, read-only, the stack: never.
        assert!(!mappings.contains(0x651000, 0x652000));
        assert!(!mappings.contains(0x7f0000000000, 0x7f0000200000));
        assert!(!mappings.contains(0x7f0000600000, 0x7f0000800000));
        assert!(!mappings.contains(0x7ffd00000000, 0x7ffd00001000));
        // Across a hole or past an end: no.
        assert!(!mappings.contains(0x7f0000200000, 0x7f0000600001));
    }

    #[test]
    #[cfg_attr(miri, ignore = "reads /proc and calls madvise")]
    fn huge_page_advice_goes_only_to_whole_huge_pages_of_anonymous_memory() {
        let Some(huge) = huge_page_advice() else {
            return; // transparent huge pages not in madvise mode here
        };
        let memory = HostBuffer::unpopulated(4 * huge).unwrap();
        let addr = memory.as_ptr().expose_provenance();
        let mappings = AnonymousMappings::read();
        // Less than one whole huge page inside: nothing.
        assert_eq!(advise_huge_pages(addr + 4096, huge, &mappings), 0);
        let advised = advise_huge_pages(addr, 4 * huge, &mappings);
        assert!(advised >= 3 * huge && advised <= 4 * huge, "{advised}");
        // Memory the mappings do not list: nothing.
        let empty = AnonymousMappings::default();
        assert_eq!(advise_huge_pages(addr, 4 * huge, &empty), 0);
    }

    /// Measures what the engine's choices rest on; run with
    /// `cargo test --release -p hostcopy-driver --features std --lib
    /// prefault::tests::measure -- --ignored --nocapture`.
    #[test]
    #[ignore = "a measurement, not a check"]
    fn measure_populate_rates_and_the_cost_on_present_memory() {
        use std::time::Instant;
        let len = 1usize << 30;
        let gbs = |seconds: f64| len as f64 / seconds / 1e9;
        let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
        for threads in [1, 2, cores.max(2) * 2] {
            for (name, huge) in [("4 KiB pages", false), ("MADV_HUGEPAGE", true)] {
                for how in [Populate::Advise, Populate::Touch] {
                    // Best of 3: the first faults of a VM's memory are slow.
                    let (mut cold, mut warm) = (f64::MAX, f64::MAX);
                    for _ in 0..3 {
                        let mut memory = HostBuffer::unpopulated(len).unwrap();
                        let start = Instant::now();
                        if huge {
                            let addr = memory.as_ptr().expose_provenance();
                            advise_huge_pages(addr, len, &AnonymousMappings::read());
                        }
                        let part = len / threads;
                        std::thread::scope(|scope| {
                            for piece in memory.chunks_mut(part) {
                                scope.spawn(move || populate_with(piece, how));
                            }
                        });
                        cold = cold.min(start.elapsed().as_secs_f64());
                        let start = Instant::now();
                        populate_with(&mut memory, how);
                        warm = warm.min(start.elapsed().as_secs_f64());
                    }
                    println!(
                        "{threads} threads, {name}, {how:?}: cold {:.1} GB/s; again on present pages {:.1} GB/s",
                        gbs(cold),
                        gbs(warm)
                    );
                }
            }
        }
        let memory = vec![1u8; 64 << 20];
        let rounds = 1000u32;
        let start = Instant::now();
        for _ in 0..rounds {
            assert!(is_resident(&memory));
        }
        let per_check_8 = start.elapsed().as_secs_f64() / f64::from(rounds);
        let start = Instant::now();
        for _ in 0..rounds {
            assert!(is_resident(&memory[..4096]));
        }
        println!(
            "is_resident on one page (1 mincore call): {:.2} us",
            start.elapsed().as_secs_f64() / f64::from(rounds) * 1e6
        );
        let start = Instant::now();
        for _ in 0..rounds {
            assert!(is_resident(&memory));
        }
        let per_check = start
            .elapsed()
            .as_secs_f64()
            .min(per_check_8 * f64::from(rounds))
            / f64::from(rounds);
        println!(
            "is_resident on 64 MiB present ({SAMPLES} mincore calls): {:.2} us",
            per_check * 1e6
        );
        let start = Instant::now();
        let maps = AnonymousMappings::read();
        println!(
            "/proc/self/maps read: {:.1} us ({} anonymous runs)",
            start.elapsed().as_secs_f64() * 1e6,
            maps.ranges.len()
        );
        let start = Instant::now();
        for _ in 0..20 {
            drop(HostBuffer::new(len).unwrap());
        }
        println!(
            "HostBuffer::new(1 GiB), {} threads: {:.1} GB/s",
            HostBuffer::populate_threads(len),
            gbs(start.elapsed().as_secs_f64() / 20.0)
        );
    }
}
