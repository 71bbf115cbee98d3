//! Properties of packing: a record that packs copies exactly the bytes it
//! names and nothing else; a request that would touch anything outside its
//! buffers does not pack.

use hostcopy_driver::{PackError, RawRegion, Record, Side, hostcopy_fn};
use proptest::prelude::*;
use proptest::test_runner::Config;

const GUARD: usize = 16;

fn config() -> Config {
    Config {
        cases: if cfg!(miri) { 12 } else { 2048 },
        failure_persistence: None,
        ..Config::default()
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

proptest! {
    #![proptest_config(config())]

    /// Two separate buffers, each inside guard bytes.
    #[test]
    fn packed_slices_copy_exactly_the_named_bytes(
        dst_len in 0usize..300,
        src_len in 0usize..300,
        dst_offset in 0usize..320,
        src_offset in 0usize..320,
        nbytes in 0usize..320,
    ) {
        let src = pattern(src_len, 1);
        let mut dst_buffer = pattern(GUARD + dst_len + GUARD, 2);
        let before = dst_buffer.clone();
        let dst = &mut dst_buffer[GUARD..GUARD + dst_len];

        let dst_fits = dst_offset + nbytes <= dst_len;
        let src_fits = src_offset + nbytes <= src_len;
        match Record::pack_range(dst, dst_offset, &src[..], src_offset, nbytes) {
            Ok(record) => {
                prop_assert!(dst_fits && src_fits);
                // SAFETY: the record's buffers are borrowed and alive.
                unsafe { hostcopy_fn(record.user_data()) };
                let mut expected = before;
                let at = GUARD + dst_offset;
                expected[at..at + nbytes].copy_from_slice(&src[src_offset..src_offset + nbytes]);
                prop_assert_eq!(dst_buffer, expected);
            }
            Err(PackError::OutOfBounds { side: Side::Dst, offset, nbytes: n, len }) => {
                prop_assert!(!dst_fits);
                prop_assert_eq!((offset, n, len), (dst_offset, nbytes, dst_len));
            }
            Err(PackError::OutOfBounds { side: Side::Src, offset, nbytes: n, len }) => {
                prop_assert!(dst_fits && !src_fits);
                prop_assert_eq!((offset, n, len), (src_offset, nbytes, src_len));
            }
            Err(other) => prop_assert!(false, "unexpected {other:?}"),
        }
    }

    /// Two raw regions inside one buffer, so they may overlap.
    #[test]
    fn packed_regions_of_one_buffer_copy_exactly_or_are_refused(
        len in 1usize..256,
        dst_start in 0usize..256, dst_len in 0usize..256, dst_offset in 0usize..256,
        src_start in 0usize..256, src_len in 0usize..256, src_offset in 0usize..256,
        nbytes in 0usize..128,
    ) {
        let dst_start = dst_start % len;
        let src_start = src_start % len;
        let dst_len = dst_len % (len - dst_start + 1);
        let src_len = src_len % (len - src_start + 1);
        let mut buffer = pattern(len, 3);
        let before = buffer.clone();
        let base = buffer.as_mut_ptr().expose_provenance();

        let dst = RawRegion::host(base + dst_start, dst_len);
        let src = RawRegion::host(base + src_start, src_len);
        let in_bounds = dst_offset + nbytes <= dst_len && src_offset + nbytes <= src_len;
        let (d, s) = (dst_start + dst_offset, src_start + src_offset);
        let overlaps = nbytes > 0 && d.abs_diff(s) < nbytes;

        // SAFETY: both regions lie inside `buffer`, which outlives the run.
        match unsafe { Record::from_raw_regions(dst, dst_offset, src, src_offset, nbytes) } {
            Ok(record) => {
                prop_assert!(in_bounds && !overlaps);
                // SAFETY: as above.
                unsafe { hostcopy_fn(record.user_data()) };
                let mut expected = before;
                expected.copy_within(s..s + nbytes, d);
                prop_assert_eq!(buffer, expected);
            }
            Err(PackError::OutOfBounds { .. }) => prop_assert!(!in_bounds),
            Err(PackError::Overlap { dst, src, nbytes: n }) => {
                prop_assert!(in_bounds && overlaps);
                prop_assert_eq!((dst, src, n), (base + d, base + s, nbytes));
            }
            Err(other) => prop_assert!(false, "unexpected {other:?}"),
        }
    }

    /// Raw integers anywhere: a record packs only if neither range is null
    /// (with a length), wraps, or overlaps the other.
    #[test]
    fn raw_parts_pack_exactly_when_the_host_function_would_copy(
        dst in prop_oneof![Just(0usize), any::<usize>(), usize::MAX - 64..=usize::MAX],
        src in prop_oneof![Just(0usize), any::<usize>(), usize::MAX - 64..=usize::MAX],
        nbytes in prop_oneof![Just(0usize), 1usize..128, any::<usize>()],
    ) {
        // SAFETY: the record is inspected, never run.
        let packed = unsafe { Record::from_raw_parts(dst, src, nbytes) };
        let valid = nbytes == 0
            || (dst != 0
                && src != 0
                && nbytes <= isize::MAX as usize
                && dst.checked_add(nbytes).is_some()
                && src.checked_add(nbytes).is_some()
                && dst.abs_diff(src) >= nbytes);
        prop_assert_eq!(packed.is_ok(), valid, "{:?}", packed);
    }
}
