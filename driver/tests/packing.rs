//! Packing: each error with the numbers it carries, and packed records that
//! copy exactly what they say.

use hostcopy_driver::{
    HostCopyArgs, HostMemory, MemorySpace, PackError, RawRegion, Record, Side, hostcopy_fn,
};

fn run(record: &Record<'_>) {
    // SAFETY: a packed record's buffers are borrowed and alive.
    unsafe { hostcopy_fn(record.user_data()) }
}

#[test]
fn pack_copies_the_whole_source_into_the_start_of_the_destination() {
    let src = [1u8, 2, 3, 4];
    let mut dst = [9u8; 6];
    run(&Record::pack(&mut dst, &src).unwrap());
    assert_eq!(dst, [1, 2, 3, 4, 9, 9]);
}

#[test]
fn pack_range_copies_between_byte_offsets() {
    let src: Vec<u8> = (0..100).collect();
    let mut dst = [0u8; 100];
    run(&Record::pack_range(&mut dst[..], 10, &src[..], 50, 20).unwrap());
    assert_eq!(dst[10..30], src[50..70]);
    assert!(dst[..10].iter().chain(&dst[30..]).all(|&b| b == 0));
}

#[test]
fn offsets_are_bytes_for_every_element_type() {
    let src = [0x0403_0201u32, 0x0807_0605];
    let mut dst = [0u16; 4];
    run(&Record::pack_range(&mut dst, 2, &src, 1, 4).unwrap());
    let src_bytes: Vec<u8> = src.iter().flat_map(|w| w.to_ne_bytes()).collect();
    let dst_bytes: Vec<u8> = dst.iter().flat_map(|w| w.to_ne_bytes()).collect();
    assert_eq!(dst_bytes[2..6], src_bytes[1..5]);
    assert_eq!(
        [dst_bytes[0], dst_bytes[1], dst_bytes[6], dst_bytes[7]],
        [0; 4]
    );
}

#[test]
fn heapless_vec_is_host_memory() {
    let mut src: heapless::Vec<u8, 16> = heapless::Vec::new();
    src.extend_from_slice(&[5; 10]).unwrap();
    let mut dst = vec![0u8; 10];
    run(&Record::pack(&mut dst[..], &src).unwrap());
    assert_eq!(dst, [5; 10]);
    // Only the initialized elements count.
    assert_eq!(src.host_range().len, 10);

    let mut dst: heapless::Vec<u8, 16> = heapless::Vec::from_slice(&[0; 4]).unwrap();
    let err = Record::pack(&mut dst, &src).unwrap_err();
    assert_eq!(
        err,
        PackError::OutOfBounds {
            side: Side::Dst,
            offset: 0,
            nbytes: 10,
            len: 4
        }
    );
}

#[cfg(feature = "alloc")]
#[test]
fn std_vec_is_host_memory() {
    let src = vec![3u64; 4];
    let mut dst = vec![0u64; 4];
    run(&Record::pack(&mut dst, &src).unwrap());
    assert_eq!(dst, src);
}

#[test]
fn out_of_bounds_carries_side_offset_length_and_buffer_size() {
    let src = [0u8; 32];
    let mut dst = [0u8; 64];
    assert_eq!(
        Record::pack_range(&mut dst, 60, &src, 0, 8).unwrap_err(),
        PackError::OutOfBounds {
            side: Side::Dst,
            offset: 60,
            nbytes: 8,
            len: 64
        }
    );
    assert_eq!(
        Record::pack_range(&mut dst, 0, &src, 30, 3).unwrap_err(),
        PackError::OutOfBounds {
            side: Side::Src,
            offset: 30,
            nbytes: 3,
            len: 32
        }
    );
    // An offset plus length that wraps is out of bounds, not a panic.
    assert_eq!(
        Record::pack_range(&mut dst, usize::MAX, &src, 0, 2).unwrap_err(),
        PackError::OutOfBounds {
            side: Side::Dst,
            offset: usize::MAX,
            nbytes: 2,
            len: 64
        }
    );
    // The end of the buffer is in bounds; one past is not.
    assert!(Record::pack_range(&mut dst, 64, &src, 32, 0).is_ok());
    assert!(Record::pack_range(&mut dst, 65, &src, 0, 0).is_err());
}

#[test]
fn overlap_is_refused_where_both_ranges_are_visible() {
    let mut buffer = [0u8; 64];
    buffer[..16].fill(3);
    // Taken after the last direct write: a later `&mut buffer` would
    // invalidate the exposed address under Rust's aliasing rules.
    let base = buffer.as_mut_ptr().expose_provenance();
    let region = RawRegion::host(base, 64);
    // SAFETY: refused, never run.
    let err = unsafe { Record::from_raw_regions(region, 8, region, 0, 16) }.unwrap_err();
    assert_eq!(
        err,
        PackError::Overlap {
            dst: base + 8,
            src: base,
            nbytes: 16
        }
    );
    // SAFETY: refused, never run.
    let err = unsafe { Record::from_raw_parts(base, base + 15, 16) }.unwrap_err();
    assert_eq!(
        err,
        PackError::Overlap {
            dst: base,
            src: base + 15,
            nbytes: 16
        }
    );
    // Adjacent ranges do not overlap.
    // SAFETY: both ranges are inside `buffer`, which outlives the run.
    let record = unsafe { Record::from_raw_regions(region, 16, region, 0, 16) }.unwrap();
    run(&record);
    assert_eq!(buffer[16..32], [3; 16]);
}

#[test]
fn address_overflow_carries_the_range() {
    // SAFETY: refused, never run.
    let err = unsafe { Record::from_raw_parts(usize::MAX - 3, 0x1000, 8) }.unwrap_err();
    assert_eq!(
        err,
        PackError::AddressOverflow {
            side: Side::Dst,
            addr: usize::MAX - 3,
            nbytes: 8
        }
    );
    // SAFETY: refused, never run.
    let err = unsafe { Record::from_raw_parts(0x1000, usize::MAX, 2) }.unwrap_err();
    assert_eq!(
        err,
        PackError::AddressOverflow {
            side: Side::Src,
            addr: usize::MAX,
            nbytes: 2
        }
    );
    let huge = isize::MAX as usize + 1;
    // SAFETY: refused, never run.
    let err = unsafe { Record::from_raw_parts(0x1000, 0x2000, huge) }.unwrap_err();
    assert_eq!(
        err,
        PackError::AddressOverflow {
            side: Side::Dst,
            addr: 0x1000,
            nbytes: huge
        }
    );
    // The region's base plus the offset wrapping is an overflow too.
    let region = RawRegion::host(usize::MAX - 1, usize::MAX);
    // SAFETY: refused, never run.
    let err = unsafe { Record::from_raw_regions(region, 4, RawRegion::host(0x1000, 8), 0, 1) };
    assert_eq!(
        err,
        Err(PackError::AddressOverflow {
            side: Side::Dst,
            addr: usize::MAX - 1,
            nbytes: 5
        })
    );
}

#[test]
fn null_with_a_length_is_refused_and_null_without_one_is_not() {
    // SAFETY: refused, never run.
    let err = unsafe { Record::from_raw_parts(0, 0x1000, 4) }.unwrap_err();
    assert_eq!(
        err,
        PackError::NullWithLength {
            side: Side::Dst,
            nbytes: 4
        }
    );
    // SAFETY: refused, never run.
    let err = unsafe { Record::from_raw_parts(0x1000, 0, 4) }.unwrap_err();
    assert_eq!(
        err,
        PackError::NullWithLength {
            side: Side::Src,
            nbytes: 4
        }
    );
    // SAFETY: an empty record is never dereferenced.
    let empty = unsafe { Record::from_raw_parts(0, 0, 0) }.unwrap();
    assert_eq!(empty.args(), HostCopyArgs::new(0, 0, 0));
    run(&empty);
}

#[test]
fn device_memory_is_not_host_accessible() {
    let host = RawRegion::host(0x1000, 64);
    let device = RawRegion::device(0x7000_0000, 64);
    assert_eq!(device.space, MemorySpace::Device);
    // SAFETY: refused, never run.
    let err = unsafe { Record::from_raw_regions(device, 0, host, 0, 8) }.unwrap_err();
    assert_eq!(
        err,
        PackError::NotHostAccessible {
            side: Side::Dst,
            addr: 0x7000_0000
        }
    );
    // Refused even for an empty copy: a device region is never a host range.
    // SAFETY: refused, never run.
    let err = unsafe { Record::from_raw_regions(host, 0, device, 0, 0) }.unwrap_err();
    assert_eq!(
        err,
        PackError::NotHostAccessible {
            side: Side::Src,
            addr: 0x7000_0000
        }
    );
}

#[test]
fn errors_display_their_numbers() {
    let cases = [
        (
            PackError::OutOfBounds {
                side: Side::Src,
                offset: 7,
                nbytes: 9,
                len: 10,
            },
            "source range of 9 bytes at offset 7 is out of bounds of a 10-byte buffer",
        ),
        (
            PackError::Overlap {
                dst: 0x10,
                src: 0x18,
                nbytes: 16,
            },
            "destination 0x10 and source 0x18 overlap over 16 bytes",
        ),
        (
            PackError::NullWithLength {
                side: Side::Dst,
                nbytes: 3,
            },
            "destination address is null but the length is 3 bytes",
        ),
        (
            PackError::AddressOverflow {
                side: Side::Dst,
                addr: 0xff,
                nbytes: 2,
            },
            "destination range of 2 bytes at 0xff runs past the end of the address space",
        ),
        (
            PackError::NotHostAccessible {
                side: Side::Src,
                addr: 0x20,
            },
            "source memory at 0x20 is not accessible from the host",
        ),
    ];
    for (error, text) in cases {
        assert_eq!(error.to_string(), text);
        let _: &dyn core::error::Error = &error;
    }
}

#[test]
fn a_record_can_be_read_back_from_its_user_data_and_its_bytes() {
    let src = [1u8; 8];
    let mut dst = [0u8; 8];
    let record = Record::pack(&mut dst, &src).unwrap();
    // SAFETY: `user_data` points to the record.
    let read = unsafe { HostCopyArgs::read(record.user_data()) };
    assert_eq!(read, Some(record.args()));
    assert_eq!(
        HostCopyArgs::from_bytes(&record.args().to_bytes()),
        record.args()
    );
}
