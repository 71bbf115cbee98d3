//! hostcopy's own host memory registered with the (simulated) driver: a
//! transfer copies its registered bytes directly and stages the rest,
//! byte-exact both ways however far registration got; a refused range
//! ends registration there, readable, never an error; a dropped buffer
//! unregisters every range, unless a transfer's copies of it could not be
//! waited for, when it stays mapped and registered, counted.

#![cfg(all(feature = "cuda", feature = "simulator"))]

mod sim_support;

use core::sync::atomic::{AtomicBool, Ordering};
use hostcopy_driver::HostBuffer;
use hostcopy_driver::cuda::registration::Register;
use hostcopy_driver::cuda::sim;
use hostcopy_driver::cuda::staging::{self, DeviceCopies, Stager, to_device, to_host};
use hostcopy_driver::cuda::{Context, DeviceBuffer, DeviceView};
use sim_support::{device, pattern, scaled};
use std::sync::Arc;

/// Chunk size of the tests.
const CHUNK: usize = scaled(1 << 20, staging::MIN_CHUNK);
/// Bytes each registration takes: two chunks' worth (whole pages), so
/// that direct copies (one a range) and staged ones (one a chunk) differ
/// in number.
const RANGE: usize = 2 * CHUNK;
/// The buffer: three ranges and a ragged tail of a page and a bit.
const LEN: usize = 3 * RANGE + 4096 + 17;
/// Driver copies each way of the buffer staged whole: one a chunk.
const STAGED: u32 = LEN.div_ceil(CHUNK) as u32;
/// Driver copies each way of the buffer registered whole: one a range.
const DIRECT: u32 = LEN.div_ceil(RANGE) as u32;

/// `CUDA_ERROR_OUT_OF_MEMORY`, as a locked-memory limit is reported.
const OUT_OF_MEMORY: u32 = 2;
/// A sticky error (`CUDA_ERROR_LAUNCH_FAILED`).
const LAUNCH_FAILED: u32 = 719;

/// A stager that copies one piece per driver call, so that copies count.
fn stager(device: &sim_support::Device) -> Stager {
    device.stager(
        sim_support::options(CHUNK, 3, 2)
            .driver_path_below(0)
            .device_copies(DeviceCopies::Loop),
    )
}

/// A buffer of `LEN` bytes holding `pattern(LEN, seed)`.
fn filled(seed: u8) -> HostBuffer {
    let mut buffer = HostBuffer::new(LEN).unwrap();
    buffer.copy_from_slice(&pattern(LEN, seed));
    buffer
}

/// Moves `buffer` to the device and back into it (zeroed between), checks
/// the bytes, and returns the driver copies each way queued.
fn round_trip(
    stager: &mut Stager,
    device: &sim_support::Device,
    buffer: &mut HostBuffer,
    seed: u8,
) -> (u32, u32) {
    let expected = pattern(LEN, seed);
    let mut target = DeviceBuffer::new(&device.context, LEN).unwrap();
    let (up, calls) = sim::count_calls(|| stager.run(to_device(&mut target, &buffer[..])));
    up.unwrap();
    let uploads = calls.of("cuMemcpyHtoDAsync_v2");
    buffer.fill(0);
    let (down, calls) = sim::count_calls(|| stager.run(to_host(&mut buffer[..], &target)));
    down.unwrap();
    let downloads = calls.of("cuMemcpyDtoHAsync_v2");
    assert!(buffer[..] == expected[..], "the bytes differ");
    (uploads, downloads)
}

#[test]
fn a_registered_buffer_is_copied_directly_one_copy_a_range_both_ways() {
    let device = device();
    let mut stager = stager(&device);
    let mut buffer = filled(3);
    // Staged: a copy per chunk each way.
    assert_eq!(
        round_trip(&mut stager, &device, &mut buffer, 3),
        (STAGED, STAGED)
    );
    let registered = buffer.register_in_ranges(&device.context, Register::Now, RANGE);
    assert!(
        registered.is_complete() && registered.finished,
        "{registered:?}"
    );
    assert_eq!(registered.refused, None);
    assert_eq!(device.state().registrations, 4);
    buffer.copy_from_slice(&pattern(LEN, 5));
    // Direct: a copy per registered range, none across two; to the host
    // whole pages only, the tail's last 17 bytes staged (one more copy).
    assert_eq!(
        round_trip(&mut stager, &device, &mut buffer, 5),
        (DIRECT, DIRECT + 1)
    );
    const { assert!(DIRECT < STAGED) };
    // A transfer of part of it, from the middle of a range.
    let mut target = DeviceBuffer::new(&device.context, RANGE).unwrap();
    let part = RANGE / 2..RANGE / 2 + RANGE;
    let (up, calls) =
        sim::count_calls(|| stager.run(to_device(&mut target, &buffer[part.clone()])));
    up.unwrap();
    assert_eq!(
        calls.of("cuMemcpyHtoDAsync_v2"),
        2,
        "split at the range's end"
    );
    let mut back = vec![0u8; RANGE];
    stager.run(to_host(&mut back, &target)).unwrap();
    assert!(back[..] == buffer[part], "the part differs");
    drop(buffer);
    assert_eq!(device.state().registrations, 0, "a range left registered");
    drop(stager);
    device.assert_no_violations();
}

#[test]
fn a_refused_range_ends_registration_and_the_rest_is_staged_byte_exact() {
    let device = device();
    let mut stager = stager(&device);
    let mut buffer = filled(7);
    sim::fail_call(device.ordinal, "cuMemHostRegister_v2", 2, OUT_OF_MEMORY);
    let registered = buffer.register_in_ranges(&device.context, Register::Now, RANGE);
    assert_eq!(registered.registered, RANGE);
    assert_eq!(registered.len, LEN);
    assert!(registered.finished && !registered.is_complete());
    let refused = registered.refused.expect("the refusal is told");
    assert_eq!(refused.code(), OUT_OF_MEMORY);
    assert_eq!(buffer.registration(), registered, "read back as it ended");
    // One direct copy for the registered range; the rest staged, a copy
    // a chunk.
    let half = 1 + (LEN - RANGE).div_ceil(CHUNK) as u32;
    assert_eq!(
        round_trip(&mut stager, &device, &mut buffer, 7),
        (half, half)
    );
    // A transfer wholly past the registered prefix is staged; one that
    // starts in it is direct up to its end.
    let mut target = DeviceBuffer::new(&device.context, 2 * RANGE).unwrap();
    let straddling = RANGE / 2..RANGE / 2 + 2 * RANGE;
    stager
        .run(to_device(&mut target, &buffer[straddling.clone()]))
        .unwrap();
    let mut back = vec![0u8; 2 * RANGE];
    stager.run(to_host(&mut back, &target)).unwrap();
    assert!(
        back[..] == buffer[straddling],
        "the straddling part differs"
    );
    drop(buffer);
    assert_eq!(device.state().registrations, 0);
    drop(stager);
    device.assert_no_violations();
}

#[test]
fn a_registration_on_a_failed_context_registers_nothing_and_the_buffer_frees() {
    let device = device();
    let mut buffer = filled(9);
    sim::fail_context(device.ordinal, LAUNCH_FAILED);
    let registered = buffer.register_in_ranges(&device.context, Register::Now, RANGE);
    assert_eq!(registered.registered, 0);
    assert_eq!(
        registered.refused.map(|error| error.code()),
        Some(LAUNCH_FAILED)
    );
    let before = staging::leaked().host_buffers;
    drop(buffer);
    assert_eq!(staging::leaked().host_buffers, before);
    device.assert_no_violations();
}

#[test]
fn a_background_registration_ends_complete_and_transfers_meanwhile_are_byte_exact() {
    let device = device();
    let mut stager = stager(&device);
    let mut buffer = filled(11);
    // A page a range: many ranges, so that transfers meet it half done.
    let page = 4096;
    let started = buffer.register_in_ranges(&device.context, Register::Background, page);
    assert_eq!(started.len, LEN);
    for seed in 12..scaled(16, 13) as u8 {
        buffer.copy_from_slice(&pattern(LEN, seed));
        round_trip(&mut stager, &device, &mut buffer, seed);
    }
    let ended = buffer.wait_registered();
    assert!(ended.is_complete() && ended.finished && ended.refused.is_none());
    assert_eq!(device.state().registrations, LEN.div_ceil(page));
    // A second request changes nothing.
    let again = buffer.register(&device.context, Register::Now);
    assert_eq!(again, ended);
    drop(buffer);
    assert_eq!(device.state().registrations, 0);
    drop(stager);
    device.assert_no_violations();
}

#[test]
fn never_registers_nothing() {
    let device = device();
    let mut buffer = filled(13);
    let registration = buffer.register(&device.context, Register::Never);
    assert_eq!(registration.registered, 0);
    assert!(registration.finished && registration.refused.is_none());
    assert_eq!(device.state().registrations, 0);
    // Asked for after `Never`: registered now.
    let later = buffer.register_in_ranges(&device.context, Register::Now, RANGE);
    assert!(later.is_complete());
}

/// A pending upload's direct copies that cannot be waited for (a context
/// error while they are queued): the buffer they read stays mapped and
/// registered when it is dropped, counted, since the driver may still run
/// them. (An upload: its copies only read the buffer, so no page is moved,
/// which Miri could not run.)
#[test]
fn a_buffer_whose_direct_copies_could_not_be_waited_for_stays_mapped_and_registered() {
    let device = device();
    let mut stager = stager(&device);
    let mut buffer = filled(17);
    buffer.register_in_ranges(&device.context, Register::Now, RANGE);
    let target = DeviceBuffer::new(&device.context, LEN).unwrap();
    let (ptr, context) = (target.raw(), target.context().clone());
    // SAFETY: the owner is the buffer itself; nothing else frees it.
    let mut view = unsafe { DeviceView::new(&context, ptr, LEN, Arc::new(target)) }.unwrap();
    // SAFETY: a second view of the buffer's bytes for the transfer alone;
    // the buffer is not written until the transfer has ended, and its
    // memory outlives the transfer (kept, as this test checks).
    let host = unsafe { core::slice::from_raw_parts(buffer.as_ptr(), LEN) };
    sim::hold(device.ordinal);
    // SAFETY: `host` is valid until the buffer is dropped, after the
    // transfer; `view` is dropped only with the transfer.
    let pending = unsafe { stager.start_unchecked(to_device(&mut view, host)) }.unwrap();
    sim::fail_context(device.ordinal, LAUNCH_FAILED);
    let before = staging::leaked();
    drop((pending, view));
    drop(buffer);
    let kept = staging::leaked();
    let registrations = device.state().registrations;
    sim::release(device.ordinal);
    assert_eq!(registrations, 4, "unregistered under a queued copy");
    assert_eq!(kept.host_buffers, before.host_buffers + 1, "kept uncounted");
    drop(stager);
}

/// A blocking transfer's direct copies to the host that cannot be waited
/// for (a context error while they are queued): the transfer fails, and
/// the caller gets its buffer back with its bytes as they were, on fresh
/// pages (the driver keeps the old ones, registered for good), so that no
/// copy the driver may still run writes what safe code now reads; the
/// buffer is kept, counted, when it is dropped. (The simulated driver
/// copies through addresses, not the pages it pinned, so it cannot show
/// a late write missing the new pages; the real driver writes the pinned
/// pages.)
#[test]
#[cfg_attr(miri, ignore = "Miri cannot move pages (mremap)")]
fn a_buffer_handed_back_after_a_context_error_is_on_pages_the_driver_never_writes() {
    let device = device();
    let mut stager = stager(&device);
    let mut buffer = filled(19);
    let expected = pattern(LEN, 19);
    assert!(
        buffer
            .register_in_ranges(&device.context, Register::Now, RANGE)
            .is_complete()
    );
    let target = DeviceBuffer::new(&device.context, LEN).unwrap();
    let before = staging::leaked().host_buffers;
    sim::hold(device.ordinal);
    let ordinal = device.ordinal;
    let result = stager.scope(|scope| {
        let transfer = scope.start(to_host(&mut buffer[..], &target))?;
        sim::fail_context(ordinal, LAUNCH_FAILED);
        transfer.wait()
    });
    assert!(matches!(result, Ok(Err(_))), "{result:?}");
    // Readable and writable, its bytes as they were.
    let unchanged = buffer[..] == expected[..];
    buffer[0] ^= 1;
    drop(buffer);
    let kept = staging::leaked().host_buffers - before;
    sim::release(device.ordinal);
    drop(stager);
    assert!(unchanged, "the bytes changed");
    assert_eq!(kept, 1, "kept uncounted");
}

/// A kept buffer registered through another device's context keeps that
/// context alive: its end would unregister the memory under copies that
/// may still run.
#[test]
fn a_kept_buffer_stays_registered_when_its_context_had_no_other_holder() {
    let b = device();
    let a = sim::new_device();
    let mut buffer = filled(21);
    {
        let context = Context::primary(a).unwrap();
        let registered = buffer.register_in_ranges(&context, Register::Now, RANGE);
        assert!(registered.is_complete());
    }
    let mut stager = stager(&b);
    let mut target = DeviceBuffer::new(&b.context, LEN).unwrap();
    let before = staging::leaked().host_buffers;
    sim::hold(b.ordinal);
    let ordinal = b.ordinal;
    let result = stager.scope(|scope| {
        let transfer = scope.start(to_device(&mut target, &buffer[..]))?;
        sim::fail_context(ordinal, LAUNCH_FAILED);
        transfer.wait()
    });
    assert!(matches!(result, Ok(Err(_))), "{result:?}");
    drop(buffer);
    let kept = staging::leaked().host_buffers - before;
    let state = sim::device_state(a);
    sim::release(b.ordinal);
    drop(stager);
    assert_eq!(kept, 1);
    assert!(state.context_alive, "the registering context was destroyed");
    assert_eq!(state.registrations, LEN.div_ceil(RANGE));
}

/// A range the driver did not unregister: the buffer stays mapped, kept
/// and counted, rather than handing the driver's registered pages back to
/// the system.
#[test]
fn a_failed_unregister_keeps_the_buffer_mapped() {
    let device = device();
    let mut buffer = filled(23);
    assert!(
        buffer
            .register_in_ranges(&device.context, Register::Now, RANGE)
            .is_complete()
    );
    let before = staging::leaked().host_buffers;
    sim::fail_call(device.ordinal, "cuMemHostUnregister", 1, 1);
    drop(buffer);
    assert_eq!(staging::leaked().host_buffers - before, 1);
}

/// A range of any size is taken: at most the buffer, whole pages.
#[test]
fn a_huge_range_registers_the_buffer_in_one() {
    let device = device();
    let mut buffer = filled(25);
    let registered = buffer.register_in_ranges(&device.context, Register::Now, usize::MAX);
    assert!(registered.is_complete());
    assert_eq!(device.state().registrations, 1);
    drop(buffer);
    assert_eq!(device.state().registrations, 0);
}

/// A download into the right part of a split registered buffer fails for
/// good while another thread keeps writing a counter into the last 8
/// bytes of the left part, on the page of the download's first byte: the
/// pages moved away from the driver are the download's whole pages only,
/// so no write of the other thread is undone. (Before, the edge pages
/// were copied and replaced too, and a write made meanwhile was lost.)
#[test]
#[cfg_attr(miri, ignore = "mremap")]
fn keep_after_a_failed_download_loses_no_write_to_bytes_outside_the_transfer() {
    let page = hostcopy_driver::prefault::page_size();
    // 8 bytes before the transfer's first byte, on the same page.
    const SPLIT: usize = 4096 + 2048;
    let mut lost_any = 0usize;
    for _round in 0..32 {
        // The context fails for good each round: a device of its own.
        let device = device();
        let mut stager = stager(&device);
        let mut buffer = HostBuffer::new(LEN).unwrap();
        assert!(
            buffer
                .register_in_ranges(&device.context, Register::Now, RANGE)
                .is_complete()
        );
        let target = DeviceBuffer::new(&device.context, LEN).unwrap();
        assert_eq!(SPLIT / page, (SPLIT - 8) / page);
        let (left, right) = buffer.split_at_mut(SPLIT);
        let stop = AtomicBool::new(false);
        let started = AtomicBool::new(false);
        let ordinal = device.ordinal;
        let lost = std::thread::scope(|threads| {
            let writer = threads.spawn(|| {
                // Safe code, on bytes this thread borrows exclusively.
                let cell = &mut left[SPLIT - 8..];
                let mut last = 0u64;
                let mut lost = 0usize;
                started.store(true, Ordering::Release);
                while !stop.load(Ordering::Acquire) {
                    let seen = u64::from_ne_bytes(cell.try_into().unwrap());
                    if seen != last {
                        lost += 1;
                    }
                    last += 1;
                    cell.copy_from_slice(&last.to_ne_bytes());
                    std::hint::black_box(&mut *cell);
                }
                lost
            });
            while !started.load(Ordering::Acquire) {
                std::hint::spin_loop();
            }
            sim::hold(ordinal);
            let result = stager.scope(|scope| {
                let transfer = scope.start(to_host(&mut right[..], &target))?;
                sim::fail_context(ordinal, LAUNCH_FAILED);
                transfer.wait()
            });
            assert!(matches!(result, Ok(Err(_))), "{result:?}");
            // Give the writer time to read its counter once more.
            std::thread::sleep(std::time::Duration::from_millis(5));
            stop.store(true, Ordering::Release);
            writer.join().unwrap()
        });
        lost_any += lost;
        drop(buffer);
        sim::release(device.ordinal);
        drop(stager);
        if lost_any > 0 {
            break;
        }
    }
    assert_eq!(
        lost_any, 0,
        "another thread's writes to bytes outside the failed transfer's range \
         (same page) were undone by replace_pages"
    );
}

/// A buffer kept after a failed download (its written pages moved to
/// fresh ones the driver never registered) is staged from then on: a
/// later download through another device (registration is portable to
/// every context) is not copied directly into the old pages.
#[test]
#[cfg_attr(miri, ignore = "mremap")]
fn a_kept_buffer_on_fresh_pages_is_no_longer_copied_directly() {
    let failing = device();
    let mut stager_a = stager(&failing);
    let mut buffer = HostBuffer::new(LEN).unwrap();
    {
        let context = Context::primary(failing.ordinal).unwrap();
        assert!(
            buffer
                .register_in_ranges(&context, Register::Now, RANGE)
                .is_complete()
        );
    }
    let target = DeviceBuffer::new(&failing.context, LEN).unwrap();
    sim::hold(failing.ordinal);
    let ordinal = failing.ordinal;
    let result = stager_a.scope(|scope| {
        let transfer = scope.start(to_host(&mut buffer[..], &target))?;
        sim::fail_context(ordinal, LAUNCH_FAILED);
        transfer.wait()
    });
    assert!(matches!(result, Ok(Err(_))), "{result:?}");

    // Another device, healthy: a download into the same buffer.
    let other = sim_support::device();
    let mut stager_b = stager(&other);
    let source = DeviceBuffer::new(&other.context, LEN).unwrap();
    let (done, calls) = sim::count_calls(|| stager_b.run(to_host(&mut buffer[..], &source)));
    done.unwrap();
    let copies = calls.of("cuMemcpyDtoHAsync_v2");
    sim::release(failing.ordinal);
    drop(stager_b);
    drop(buffer);
    drop(stager_a);
    assert_eq!(copies, STAGED, "the kept buffer was copied directly");
}

/// A blocking transfer of registered memory alone is timed on the GPU:
/// from a timing event recorded before its copies to their completion
/// event (two records, no more), read once it is done; the next such
/// transfer reuses both (no event made).
#[test]
fn a_blocking_direct_transfer_is_timed_on_the_gpu_and_reuses_its_events() {
    let device = device();
    let mut stager = stager(&device);
    let mut buffer = filled(7);
    let registered = buffer.register_in_ranges(&device.context, Register::Now, RANGE);
    assert!(registered.is_complete(), "{registered:?}");
    // Whole ranges: every byte direct, both ways.
    let whole = 3 * RANGE;
    let expected = pattern(whole, 7);
    // Copies from 1 MiB on are timed: the test's under Miri are smaller.
    let timed = u32::from(whole >= 1 << 20);
    let mut target = DeviceBuffer::new(&device.context, whole).unwrap();
    for round in 0..3 {
        let (up, calls) = sim::count_calls(|| stager.run(to_device(&mut target, &buffer[..whole])));
        up.unwrap();
        assert_eq!(calls.of("cuMemcpyHtoDAsync_v2"), 3, "one copy a range");
        assert_eq!(calls.of("cuEventElapsedTime"), timed, "timed once");
        assert_eq!(
            calls.of("cuEventRecord"),
            1 + timed,
            "one timing event before the copies, then the completion event"
        );
        if round > 0 {
            assert_eq!(calls.of("cuEventCreate"), 0, "events reused");
        }
        buffer[..whole].fill(0);
        let (down, calls) = sim::count_calls(|| stager.run(to_host(&mut buffer[..whole], &target)));
        down.unwrap();
        assert_eq!(calls.of("cuMemcpyDtoHAsync_v2"), 3, "one copy a range");
        assert_eq!(calls.of("cuEventElapsedTime"), timed, "timed once");
        assert_eq!(calls.of("cuEventRecord"), 1 + timed, "two records");
        assert_eq!(calls.of("cuEventCreate"), 0, "events reused");
        assert!(buffer[..whole] == expected[..], "the bytes differ");
    }
    // Copies below 1 MiB are not timed.
    let small = (64 << 10).min(RANGE / 2);
    let (up, calls) = sim::count_calls(|| stager.run(to_device(&mut target, &buffer[..small])));
    up.unwrap();
    assert_eq!(calls.of("cuEventElapsedTime"), 0, "not timed");
    assert_eq!(calls.of("cuEventRecord"), 1, "the completion event alone");
    drop(buffer);
    drop(stager);
    device.assert_no_violations();
}
