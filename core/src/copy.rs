//! The byte copy behind the host function, chosen per architecture.
//!
//! Everywhere: `core::ptr::copy`, which is memmove (overlap allowed). On
//! x86_64, large copies of disjoint ranges use non-temporal stores instead:
//! a staged device-to-host copy writes its destination once and does not read
//! it back soon, so filling the caches with it only evicts the pinned slot the
//! next chunk lands in. SSE2 is part of the x86_64 baseline, so this path
//! needs no run-time feature detection. It ends with `sfence`, which makes the
//! streamed bytes visible to every other thread before the host function
//! returns and the driver signals completion.

use core::ptr;

/// Copies of at least this many bytes between disjoint ranges take the
/// non-temporal path on x86_64. Below it, cached stores win: the data is
/// likely still in cache for whoever reads it next.
pub const NON_TEMPORAL_THRESHOLD: usize = 256 * 1024;

/// Copies `n` bytes from `src` to `dst` as memmove would.
///
/// # Safety
///
/// `src` is valid for reads and `dst` for writes of `n` bytes. The ranges may
/// overlap.
#[inline]
pub(crate) unsafe fn copy(dst: *mut u8, src: *const u8, n: usize) {
    cfg_if::cfg_if! {
        if #[cfg(all(target_arch = "x86_64", not(miri)))] {
            if n >= NON_TEMPORAL_THRESHOLD && disjoint(dst, src, n) {
                // SAFETY: valid ranges (our caller), and disjoint (just checked).
                unsafe { non_temporal::copy(dst, src, n) };
                return;
            }
        }
    }
    // SAFETY: valid ranges (our caller); `ptr::copy` allows overlap.
    unsafe { ptr::copy(src, dst, n) }
}

/// Whether `[dst, dst + n)` and `[src, src + n)` share no byte.
#[cfg_attr(not(all(target_arch = "x86_64", not(miri))), allow(dead_code))]
fn disjoint(dst: *mut u8, src: *const u8, n: usize) -> bool {
    dst.addr().abs_diff(src.addr()) >= n
}

#[cfg(all(target_arch = "x86_64", not(miri)))]
pub(crate) mod non_temporal {
    use core::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
    use core::ptr;

    /// One cache line per step: the unit the write-combining buffers flush.
    /// On the GPU host two lines per step copied at the same speed, and
    /// adding a non-temporal prefetch of the source made it 5 to 20% slower:
    /// the hardware prefetcher does better alone (docs/design-record.md,
    /// "Non-temporal stores in `hostcopy_fn`").
    const LINE: usize = 64;

    /// Copies `n` bytes with streaming stores, then fences.
    ///
    /// Any `n` and any alignment work: the bytes before the first cache-line
    /// boundary of `dst` and after the last whole line go through ordinary
    /// stores.
    ///
    /// # Safety
    ///
    /// `src` is valid for reads and `dst` for writes of `n` bytes, and the two
    /// ranges do not overlap.
    pub(crate) unsafe fn copy(dst: *mut u8, src: *const u8, n: usize) {
        let head = ((LINE - dst.addr() % LINE) % LINE).min(n);
        let lines = (n - head) / LINE;
        let tail = n - head - lines * LINE;
        // SAFETY: `head <= n`, inside both ranges, which do not overlap.
        unsafe { ptr::copy_nonoverlapping(src, dst, head) };
        // SAFETY: `head <= n`: still inside (or one past the end of) both ranges.
        let (mut d, mut s) = unsafe { (dst.add(head), src.add(head)) };
        for _ in 0..lines {
            // SAFETY: the loop runs while whole lines remain in both ranges.
            // `d` is 64-byte aligned, as `_mm_stream_si128` needs 16; loads
            // are unaligned on purpose. SSE2 is x86_64's baseline.
            unsafe {
                let a = _mm_loadu_si128(s.cast::<__m128i>());
                let b = _mm_loadu_si128(s.add(16).cast::<__m128i>());
                let c = _mm_loadu_si128(s.add(32).cast::<__m128i>());
                let e = _mm_loadu_si128(s.add(48).cast::<__m128i>());
                _mm_stream_si128(d.cast::<__m128i>(), a);
                _mm_stream_si128(d.add(16).cast::<__m128i>(), b);
                _mm_stream_si128(d.add(32).cast::<__m128i>(), c);
                _mm_stream_si128(d.add(48).cast::<__m128i>(), e);
                d = d.add(LINE);
                s = s.add(LINE);
            }
        }
        // SAFETY: the last `tail` bytes of both ranges; then the fence that
        // orders the streaming stores before anything this thread does next.
        unsafe {
            ptr::copy_nonoverlapping(s, d, tail);
            _mm_sfence();
        }
    }
}

#[cfg(test)]
mod tests {
    //! Byte-exact checks of every copy path against a reference, with guard
    //! bytes on both sides of the destination.

    use super::*;

    extern crate std;
    use std::vec;
    use std::vec::Vec;

    const GUARD: usize = 64;
    const GUARD_BYTE: u8 = 0xA5;

    type CopyFn = unsafe fn(*mut u8, *const u8, usize);

    /// A source pattern with no short period, so a shifted copy never matches by accident.
    fn pattern(len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u32).wrapping_mul(2_654_435_761).rotate_right(13) as u8)
            .collect()
    }

    /// Runs `copy_fn` for `len` bytes at every one of the 64 (dst, src)
    /// alignments modulo 8 and checks the copy and both guards.
    fn check_all_alignments(copy_fn: CopyFn, len: usize, src_pattern: &[u8], dst: &mut [u8]) {
        for dst_align in 0..8 {
            for src_align in 0..8 {
                let src = &src_pattern[src_align..src_align + len];
                let window = GUARD + dst_align;
                dst.fill(GUARD_BYTE);
                // SAFETY: `dst` holds GUARD + 8 + len + GUARD bytes and `src`
                // is `len` bytes of a separate vector.
                unsafe { copy_fn(dst.as_mut_ptr().add(window), src.as_ptr(), len) };
                assert!(
                    dst[window..window + len] == *src,
                    "len {len} dst+{dst_align} src+{src_align}: wrong bytes"
                );
                assert!(
                    dst[..window].iter().all(|&b| b == GUARD_BYTE),
                    "len {len} dst+{dst_align} src+{src_align}: wrote before dst"
                );
                assert!(
                    dst[window + len..].iter().all(|&b| b == GUARD_BYTE),
                    "len {len} dst+{dst_align} src+{src_align}: wrote after dst"
                );
            }
        }
    }

    fn check_lengths(copy_fn: CopyFn, lengths: impl Iterator<Item = usize> + Clone) {
        let max = lengths.clone().max().unwrap_or(0);
        let src = pattern(max + 8);
        let mut dst = vec![0u8; GUARD + 8 + max + GUARD];
        for len in lengths {
            let dst = &mut dst[..GUARD + 8 + len + GUARD];
            check_all_alignments(copy_fn, len, &src, dst);
        }
    }

    /// Every length up to 4096 natively; under Miri a sample that still
    /// covers the empty copy, sub-word and sub-line lengths and several lines.
    fn small_lengths() -> impl Iterator<Item = usize> + Clone {
        #[cfg(not(miri))]
        let lengths = 0..=4096;
        #[cfg(miri)]
        let lengths = (0..=17).chain([31, 32, 33, 63, 64, 65, 127, 128, 129]);
        lengths
    }

    /// Lengths on both sides of the non-temporal threshold.
    fn threshold_lengths() -> impl Iterator<Item = usize> + Clone {
        let t = NON_TEMPORAL_THRESHOLD;
        [
            t - 65,
            t - 64,
            t - 1,
            t,
            t + 1,
            t + 7,
            t + 63,
            t + 64,
            t + 65,
            2 * t + 13,
        ]
        .into_iter()
    }

    #[test]
    fn dispatching_copy_is_exact_for_every_small_length_and_alignment() {
        check_lengths(copy, small_lengths());
    }

    #[test]
    #[cfg_attr(miri, ignore = "megabytes of byte-exact checks: too slow under Miri")]
    fn dispatching_copy_is_exact_around_the_non_temporal_threshold() {
        check_lengths(copy, threshold_lengths());
    }

    #[test]
    #[cfg_attr(miri, ignore = "under Miri the dispatching copy is this same path")]
    fn portable_copy_is_exact_for_every_small_length_and_alignment() {
        unsafe fn portable(dst: *mut u8, src: *const u8, n: usize) {
            // SAFETY: forwarded from the caller.
            unsafe { ptr::copy(src, dst, n) }
        }
        check_lengths(portable, small_lengths());
    }

    #[cfg(all(target_arch = "x86_64", not(miri)))]
    #[test]
    fn non_temporal_copy_is_exact_for_every_small_length_and_alignment() {
        check_lengths(non_temporal::copy, small_lengths());
    }

    #[cfg(all(target_arch = "x86_64", not(miri)))]
    #[test]
    fn non_temporal_copy_is_exact_around_the_threshold() {
        check_lengths(non_temporal::copy, threshold_lengths());
    }

    #[test]
    fn overlapping_copies_behave_as_memmove_in_both_directions() {
        let len = if cfg!(miri) {
            150
        } else {
            2 * NON_TEMPORAL_THRESHOLD
        };
        for shift in [1usize, 7, 64, len / 3] {
            let original = pattern(len + shift);
            // Forward: destination after the source.
            let mut buffer = original.clone();
            // SAFETY: both ranges lie inside `buffer`.
            unsafe { copy(buffer.as_mut_ptr().add(shift), buffer.as_ptr(), len) };
            assert!(
                buffer[shift..] == original[..len],
                "forward overlap by {shift}"
            );
            // Backward: destination before the source.
            let mut buffer = original.clone();
            // SAFETY: both ranges lie inside `buffer`.
            unsafe { copy(buffer.as_mut_ptr(), buffer.as_ptr().add(shift), len) };
            assert!(
                buffer[..len] == original[shift..],
                "backward overlap by {shift}"
            );
        }
    }

    #[test]
    fn disjoint_is_exact_at_the_boundary() {
        let base = ptr::without_provenance_mut::<u8>(0x1000);
        assert!(disjoint(base, base.wrapping_add(16).cast_const(), 16));
        assert!(!disjoint(base, base.wrapping_add(15).cast_const(), 16));
        assert!(disjoint(base.wrapping_add(16), base.cast_const(), 16));
        assert!(!disjoint(base.wrapping_add(15), base.cast_const(), 16));
        assert!(!disjoint(base, base.cast_const(), 1));
    }
}
