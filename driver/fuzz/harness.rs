//! The fuzz harness: decodes an input into one of three cases and asserts
//! that packing agrees with an independent model, and that every record that
//! packs copies exactly what the model says when `hostcopy_fn` runs it.
//!
//! 1. Record bytes: the first bytes are a `hostcopy_args` record. Packing it
//!    from raw parts must succeed exactly when the model says the host
//!    function would copy; records the host function rejects are run (they
//!    touch nothing) and must raise the rejection count. Then the record is
//!    moved into a real arena (addresses taken modulo its size) and packed
//!    as regions of it, so that accepted records can run.
//! 2. Two buffers: lengths, offsets and a byte count for separate buffers.
//! 3. One buffer: two regions of the same buffer, which may overlap.

use hostcopy_driver::{HostCopyArgs, PackError, RawRegion, Record, Side, hostcopy_fn};

const ARENA: usize = 1024;
const GUARD: usize = 16;

pub(crate) fn run(data: &[u8]) {
    let mut input = Input(data);
    match input.byte() % 3 {
        0 => record_bytes(&mut input),
        1 => two_buffers(&mut input),
        _ => one_buffer(&mut input),
    }
}

/// Reads fixed-width values from the input, with zeros once it runs out.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        let (first, rest) = self.0.split_first().unwrap_or((&0, &[]));
        self.0 = rest;
        *first
    }

    fn u16(&mut self) -> usize {
        usize::from(u16::from_le_bytes([self.byte(), self.byte()]))
    }

    fn record(&mut self) -> HostCopyArgs {
        let mut bytes = [0u8; HostCopyArgs::SIZE];
        bytes.iter_mut().for_each(|b| *b = self.byte());
        HostCopyArgs::from_bytes(&bytes)
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(37).wrapping_add(seed))
        .collect()
}

fn host_function_copies(args: &HostCopyArgs) -> bool {
    args.dst != 0
        && args.src != 0
        && args.nbytes <= isize::MAX as usize
        && args.dst.checked_add(args.nbytes).is_some()
        && args.src.checked_add(args.nbytes).is_some()
}

fn record_bytes(input: &mut Input<'_>) {
    let args = input.record();
    let disjoint = args.dst.abs_diff(args.src) >= args.nbytes;
    // SAFETY: the record is only inspected here.
    let packed = unsafe { Record::from_raw_parts(args.dst, args.src, args.nbytes) };
    let expected = args.nbytes == 0 || (host_function_copies(&args) && disjoint);
    assert_eq!(packed.is_ok(), expected, "{args:?}: {packed:?}");
    if let Ok(record) = &packed {
        assert_eq!(record.args(), args);
    }

    if args.nbytes > 0 && !host_function_copies(&args) {
        let before = hostcopy_driver::hostcopy_rejected();
        // SAFETY: the host function rejects this record before touching memory.
        unsafe { hostcopy_fn(args.user_data()) };
        assert_eq!(
            hostcopy_driver::hostcopy_rejected().wrapping_sub(before),
            1,
            "{args:?}"
        );
    }

    // The same numbers as offsets into a real arena.
    let mut arena = pattern(ARENA, 5);
    let whole = Span {
        start: 0,
        len: ARENA,
    };
    let (d, s, n) = (
        args.dst % (ARENA + 1),
        args.src % (ARENA + 1),
        args.nbytes % (ARENA + 1),
    );
    regions_of_one_arena(&mut arena, whole, whole, d, s, n);
}

fn two_buffers(input: &mut Input<'_>) {
    let (dst_len, src_len) = (input.u16() % ARENA, input.u16() % ARENA);
    let (dst_offset, src_offset, nbytes) = (
        input.u16() % (ARENA + 64),
        input.u16() % (ARENA + 64),
        input.u16() % (ARENA + 64),
    );
    let src = pattern(src_len, 1);
    let mut dst_buffer = pattern(GUARD + dst_len + GUARD, 2);
    let mut expected = dst_buffer.clone();
    let dst = &mut dst_buffer[GUARD..GUARD + dst_len];

    let dst_fits = dst_offset + nbytes <= dst_len;
    let src_fits = src_offset + nbytes <= src_len;
    match Record::pack_range(dst, dst_offset, &src[..], src_offset, nbytes) {
        Ok(record) => {
            assert!(dst_fits && src_fits);
            // SAFETY: the record's buffers are borrowed and alive.
            unsafe { hostcopy_fn(record.user_data()) };
            let at = GUARD + dst_offset;
            expected[at..at + nbytes].copy_from_slice(&src[src_offset..src_offset + nbytes]);
            assert!(dst_buffer == expected, "two buffers: wrong bytes");
        }
        Err(PackError::OutOfBounds {
            side: Side::Dst,
            offset,
            nbytes: n,
            len,
        }) => {
            assert!(!dst_fits);
            assert_eq!((offset, n, len), (dst_offset, nbytes, dst_len));
        }
        Err(PackError::OutOfBounds {
            side: Side::Src,
            offset,
            nbytes: n,
            len,
        }) => {
            assert!(dst_fits && !src_fits);
            assert_eq!((offset, n, len), (src_offset, nbytes, src_len));
        }
        Err(other) => panic!("two buffers: unexpected {other:?}"),
    }
}

fn one_buffer(input: &mut Input<'_>) {
    let mut arena = pattern(ARENA, 3);
    let (dst_start, src_start) = (input.u16() % ARENA, input.u16() % ARENA);
    let dst = Span {
        start: dst_start,
        len: input.u16() % (ARENA - dst_start + 1),
    };
    let src = Span {
        start: src_start,
        len: input.u16() % (ARENA - src_start + 1),
    };
    let (dst_offset, src_offset, nbytes) =
        (input.u16() % 1100, input.u16() % 1100, input.u16() % 1100);
    regions_of_one_arena(&mut arena, dst, src, dst_offset, src_offset, nbytes);
}

/// A region of the arena, by position.
#[derive(Clone, Copy)]
struct Span {
    start: usize,
    len: usize,
}

/// Packs two regions of `arena` and checks the outcome against the model.
fn regions_of_one_arena(
    arena: &mut [u8],
    dst_span: Span,
    src_span: Span,
    dst_offset: usize,
    src_offset: usize,
    nbytes: usize,
) {
    let mut expected = arena.to_vec();
    // Exposed from this borrow, which stays live until the run is checked.
    let base = arena.as_mut_ptr().expose_provenance();
    let dst = RawRegion::host(base + dst_span.start, dst_span.len);
    let src = RawRegion::host(base + src_span.start, src_span.len);
    let in_bounds = dst_offset + nbytes <= dst.len && src_offset + nbytes <= src.len;
    let (d, s) = (dst_span.start + dst_offset, src_span.start + src_offset);
    let overlaps = nbytes > 0 && d.abs_diff(s) < nbytes;
    // SAFETY: both regions lie inside `arena`, which outlives the run.
    match unsafe { Record::from_raw_regions(dst, dst_offset, src, src_offset, nbytes) } {
        Ok(record) => {
            assert!(in_bounds && !overlaps);
            // SAFETY: as above.
            unsafe { hostcopy_fn(record.user_data()) };
            expected.copy_within(s..s + nbytes, d);
            assert!(arena == &expected[..], "one buffer: wrong bytes");
        }
        Err(PackError::OutOfBounds { .. }) => assert!(!in_bounds),
        Err(PackError::Overlap {
            dst,
            src,
            nbytes: n,
        }) => {
            assert!(in_bounds && overlaps);
            assert_eq!((dst, src, n), (base + d, base + s, nbytes));
        }
        Err(other) => panic!("one buffer: unexpected {other:?}"),
    }
}
