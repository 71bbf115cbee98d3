//! What include/hostcopy_stager.h promises about structures and host
//! buffers held by transfers, against the simulated driver (feature
//! `simulator`): a structure whose `struct_size` is not this header's is
//! refused before a byte past its `struct_size` is read; a host buffer is
//! let go of by a transfer once `hostcopy_transfer_wait` has returned (it
//! may be registered then, before the transfer is freed); two transfers
//! in flight never write (or write and read) the same bytes of a host
//! buffer: the second is refused with BUSY.

#![cfg(feature = "simulator")]
#![allow(unsafe_code, missing_docs)]

use std::ffi::c_void;
use std::ptr;

use ::hostcopy_stager::*;

const MIB: usize = 1 << 20;
const HOSTCOPY_OK: i32 = 0;
const HOSTCOPY_ERROR_INVALID_ARGUMENT: i32 = 2;
const HOSTCOPY_ERROR_BUSY: i32 = 8;
const HOSTCOPY_REGISTER_NOW: i32 = 2;
const HOSTCOPY_TO_HOST: i32 = 0;
const HOSTCOPY_TO_DEVICE: i32 = 1;

fn setup() -> (i32, *mut hostcopy_stager) {
    hostcopy_sim_install();
    let device = hostcopy_sim_new_device();
    assert!(device >= 0);
    let mut options = std::mem::MaybeUninit::<hostcopy_stager_options>::uninit();
    // SAFETY: a writable options structure.
    let status = unsafe { hostcopy_stager_options_default(options.as_mut_ptr()) };
    assert_eq!(status, HOSTCOPY_OK);
    // SAFETY: written just above.
    let mut options = unsafe { options.assume_init() };
    options.chunk = MIB;
    options.h2d_chunk = MIB;
    options.edge_chunk = MIB;
    options.buffers = 3;
    options.workers = 1;
    options.driver_path_below = 0;
    let mut stager = ptr::null_mut();
    // SAFETY: valid pointers.
    let status = unsafe { hostcopy_stager_new(device, &options, &mut stager) };
    assert_eq!(status, HOSTCOPY_OK);
    (device, stager)
}

/// A copy between `device` and `len` bytes at `offset` of `host`.
fn copy(
    direction: i32,
    device: *mut hostcopy_device_buffer,
    host: *mut hostcopy_host_buffer,
    offset: usize,
    len: usize,
) -> hostcopy_copy {
    hostcopy_copy {
        struct_size: size_of::<hostcopy_copy>(),
        direction,
        reserved: 0,
        device,
        device_offset: 0,
        host: ptr::null_mut(),
        host_buffer: host,
        host_offset: offset,
        host_len: len,
        blocks: ptr::null(),
        block_count: 0,
    }
}

/// The header: "BUSY while a started transfer holds the buffer (register
/// before, or once it has been waited for)": the wait lets go of the
/// buffer, the handle may stay unfreed.
#[test]
fn registering_a_host_buffer_after_waiting_for_its_transfer_is_not_busy() {
    let (_device, stager) = setup();
    let len = 4 * MIB;
    let mut device_buffer = ptr::null_mut();
    let mut host = ptr::null_mut();
    // SAFETY: valid pointers; every handle is freed once below.
    unsafe {
        assert_eq!(
            hostcopy_device_buffer_new(stager, len, &mut device_buffer),
            HOSTCOPY_OK
        );
        assert_eq!(hostcopy_host_buffer_new(len, &mut host), HOSTCOPY_OK);
        let copy = copy(HOSTCOPY_TO_HOST, device_buffer, host, 0, len);
        let mut transfer = ptr::null_mut();
        assert_eq!(
            hostcopy_stager_start(stager, &copy, &mut transfer),
            HOSTCOPY_OK
        );
        // In flight: the buffer is held.
        let busy =
            hostcopy_host_buffer_register(host, stager, HOSTCOPY_REGISTER_NOW, ptr::null_mut());
        assert_eq!(hostcopy_transfer_wait(transfer), HOSTCOPY_OK);
        // Waited for: registering is allowed now, the transfer unfreed.
        let status =
            hostcopy_host_buffer_register(host, stager, HOSTCOPY_REGISTER_NOW, ptr::null_mut());
        // A second wait gets the same result.
        assert_eq!(hostcopy_transfer_wait(transfer), HOSTCOPY_OK);
        hostcopy_transfer_free(transfer);
        hostcopy_host_buffer_free(host);
        hostcopy_device_buffer_free(device_buffer);
        hostcopy_stager_free(stager);
        assert_eq!(busy, HOSTCOPY_ERROR_BUSY, "register while in flight");
        assert_eq!(
            status, HOSTCOPY_OK,
            "register after waiting returned {status} (8 = BUSY)"
        );
    }
}

/// Two transfers in flight writing the same bytes of a host buffer (or
/// one writing what the other reads) would race: the second is refused
/// with BUSY; disjoint ranges, and two reads of the same bytes, are not;
/// once the first has been waited for, the bytes are free again.
#[test]
fn overlapping_transfers_of_a_host_buffer_are_busy() {
    let (device, stager) = setup();
    let len = 4 * MIB;
    let half = len / 2;
    let mut device_buffer = ptr::null_mut();
    let mut host = ptr::null_mut();
    // SAFETY: valid pointers; every handle is freed once below.
    unsafe {
        assert_eq!(
            hostcopy_device_buffer_new(stager, len, &mut device_buffer),
            HOSTCOPY_OK
        );
        assert_eq!(hostcopy_host_buffer_new(len, &mut host), HOSTCOPY_OK);
        // Held, so that the first transfer stays in flight.
        assert_eq!(hostcopy_sim_hold(device), HOSTCOPY_OK);
        let mut first = ptr::null_mut();
        let down_first_half = copy(HOSTCOPY_TO_HOST, device_buffer, host, 0, half);
        assert_eq!(
            hostcopy_stager_start(stager, &down_first_half, &mut first),
            HOSTCOPY_OK
        );
        // Where one is wrongly started, it is freed below.
        let (mut other, mut another) = (ptr::null_mut(), ptr::null_mut());
        let overlapping = copy(HOSTCOPY_TO_HOST, device_buffer, host, half - 4096, 8192);
        let write_write = hostcopy_stager_start(stager, &overlapping, &mut other);
        let reading = copy(HOSTCOPY_TO_DEVICE, device_buffer, host, 0, 4096);
        let read_write = hostcopy_stager_start(stager, &reading, &mut another);
        // Blocks: only the blocks' bytes count.
        let blocks = [hostcopy_block {
            device_offset: 0,
            host_offset: 100,
            len: 200,
        }];
        let mut in_blocks = copy(HOSTCOPY_TO_HOST, device_buffer, host, 0, len);
        in_blocks.blocks = blocks.as_ptr();
        in_blocks.block_count = 1;
        let mut third = ptr::null_mut();
        let blocks_busy = hostcopy_stager_start(stager, &in_blocks, &mut third);

        let mut second = ptr::null_mut();
        let down_second_half = copy(HOSTCOPY_TO_HOST, device_buffer, host, half, half);
        let disjoint = hostcopy_stager_start(stager, &down_second_half, &mut second);
        assert_eq!(hostcopy_sim_release(device), HOSTCOPY_OK);
        assert_eq!(hostcopy_transfer_wait(first), HOSTCOPY_OK);
        hostcopy_transfer_free(other);
        hostcopy_transfer_free(another);
        // The second writes the bytes past the half: once it has been
        // waited for too, they are free again.
        if disjoint == HOSTCOPY_OK {
            assert_eq!(hostcopy_transfer_wait(second), HOSTCOPY_OK);
        }
        let after_wait = hostcopy_stager_run(stager, &overlapping);
        hostcopy_transfer_free(first);
        hostcopy_transfer_free(second);
        hostcopy_transfer_free(third);
        // Two reads of the same bytes.
        let mut up1 = ptr::null_mut();
        let mut up2 = ptr::null_mut();
        let up = copy(HOSTCOPY_TO_DEVICE, device_buffer, host, 0, len);
        assert_eq!(hostcopy_sim_hold(device), HOSTCOPY_OK);
        let read1 = hostcopy_stager_start(stager, &up, &mut up1);
        let read2 = hostcopy_stager_start(stager, &up, &mut up2);
        assert_eq!(hostcopy_sim_release(device), HOSTCOPY_OK);
        for transfer in [up1, up2] {
            if !transfer.is_null() {
                assert_eq!(hostcopy_transfer_wait(transfer), HOSTCOPY_OK);
                hostcopy_transfer_free(transfer);
            }
        }
        hostcopy_host_buffer_free(host);
        hostcopy_device_buffer_free(device_buffer);
        hostcopy_stager_free(stager);
        assert_eq!(
            write_write, HOSTCOPY_ERROR_BUSY,
            "two writers of the same bytes"
        );
        assert_eq!(
            read_write, HOSTCOPY_ERROR_BUSY,
            "a reader of bytes being written"
        );
        assert_eq!(
            blocks_busy, HOSTCOPY_ERROR_BUSY,
            "a block of bytes being written"
        );
        assert_eq!(disjoint, HOSTCOPY_OK, "a writer of other bytes");
        assert_eq!(after_wait, HOSTCOPY_OK, "a writer after the waits");
        assert_eq!((read1, read2), (HOSTCOPY_OK, HOSTCOPY_OK), "two readers");
    }
}

unsafe extern "C" {
    fn mmap(addr: *mut c_void, len: usize, prot: i32, flags: i32, fd: i32, off: i64)
    -> *mut c_void;
    fn mprotect(addr: *mut c_void, len: usize, prot: i32) -> i32;
}

const CHILD: &str = "HOSTCOPY_STRUCT_SIZE_CHILD";

/// `size` zeroed bytes ending right before an unreadable page, starting
/// with `size` as their `size_t`: a structure of a smaller `struct_size`
/// (a caller built against another version of the header).
fn smaller_structure_at_a_page_end(size: usize) -> *mut u8 {
    let page = 4096;
    // SAFETY: a fresh anonymous mapping of two pages; the second made
    // unreadable.
    unsafe {
        let base = mmap(ptr::null_mut(), 2 * page, 3, 0x22, -1, 0);
        assert!(!base.is_null() && base as isize != -1);
        assert_eq!(mprotect(base.cast::<u8>().add(page).cast(), page, 0), 0);
        let at = base.cast::<u8>().add(page - size);
        ptr::write_bytes(at, 0, size);
        at.cast::<usize>().write(size);
        at
    }
}

/// The child of `smaller_structures_are_refused_not_read_past`: a
/// `hostcopy_stager_options` and a `hostcopy_copy` of smaller sizes, each
/// ending right before an unreadable page, are refused with
/// INVALID_ARGUMENT (a read past their `struct_size` would fault).
#[test]
fn child_smaller_structures_at_a_page_end() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let (_device, stager) = setup();
    // SAFETY: valid pointers; the structures are readable for their
    // struct_size.
    unsafe {
        let options = smaller_structure_at_a_page_end(64);
        let mut other = ptr::null_mut();
        let status = hostcopy_stager_new(0, options.cast::<hostcopy_stager_options>(), &mut other);
        assert_eq!(status, HOSTCOPY_ERROR_INVALID_ARGUMENT);
        let copy = smaller_structure_at_a_page_end(48);
        let status = hostcopy_stager_run(stager, copy.cast::<hostcopy_copy>());
        assert_eq!(status, HOSTCOPY_ERROR_INVALID_ARGUMENT);
        let mut transfer = ptr::null_mut();
        let status = hostcopy_stager_start(stager, copy.cast::<hostcopy_copy>(), &mut transfer);
        assert_eq!(status, HOSTCOPY_ERROR_INVALID_ARGUMENT);
        hostcopy_stager_free(stager);
    }
}

#[test]
fn smaller_structures_are_refused_not_read_past() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_smaller_structures_at_a_page_end",
            "--nocapture",
        ])
        .env(CHILD, "1")
        .status()
        .unwrap();
    assert!(
        status.success(),
        "smaller structures at the end of a readable page: {status} (a read past struct_size \
         faults)"
    );
}
