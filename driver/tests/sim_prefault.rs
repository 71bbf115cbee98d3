//! The prefault of destinations to the host (`StagingOptions::prefault`)
//! against the simulated driver: transfers into never-touched memory are
//! byte-exact with it on and off, it leaves bytes around the destination
//! as they were, it populates a cold destination, a present one costs
//! only the residency sample, and off it makes no system call at all.
//! Under Miri the system calls are skipped (the memory counts as present)
//! and only the byte checks run.

#![cfg(all(feature = "cuda", feature = "simulator"))]

mod sim_support;

use std::sync::Mutex;

use hostcopy_driver::HostBuffer;
use hostcopy_driver::cuda::staging::{self, Block, Stager, StagingOptions, to_host};
use hostcopy_driver::cuda::{DeviceBuffer, sim};
use hostcopy_driver::prefault;
use sim_support::{device, pattern, scaled};

/// Chunks large enough to hold whole huge pages outside Miri.
const CHUNK: usize = scaled(4 << 20, staging::MIN_CHUNK);

/// The prefault counts are the process's: tests that read them run one
/// at a time.
static COUNTS: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    COUNTS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn stager(device: &sim_support::Device, prefault: bool) -> Stager {
    device.stager(
        sim_support::options(CHUNK, 3, 2)
            .driver_path_below(0)
            .prefault(prefault),
    )
}

#[test]
fn a_transfer_into_a_fresh_mapping_is_byte_exact_with_prefault_on_and_off() {
    let _one = one_at_a_time();
    let device = device();
    // Several chunks with a ragged tail, at an offset inside a page, so
    // that the destination's first and last pages are shared with bytes
    // the transfer must leave alone.
    let len = 3 * CHUNK + 4099;
    let source_bytes = pattern(len, 11);
    let mut source = DeviceBuffer::new(&device.context, len).unwrap();
    source.copy_from_host(0, &source_bytes).unwrap();
    for prefault in [true, false] {
        let mut stager = stager(&device, prefault);
        let mut host = HostBuffer::unpopulated(len + 8192).unwrap();
        host[..100].fill(0xee);
        let before = prefault::counts();
        stager
            .run(to_host(&mut host[100..100 + len], &source))
            .unwrap();
        let after = prefault::counts();
        assert!(
            host[100..100 + len] == source_bytes[..],
            "prefault {prefault}"
        );
        assert!(host[..100].iter().all(|&byte| byte == 0xee));
        assert!(host[100 + len..].iter().all(|&byte| byte == 0));
        if cfg!(miri) {
            continue;
        }
        if prefault {
            assert!(after.residency_checks > before.residency_checks);
            let made_present = (after.populated_bytes - before.populated_bytes)
                + (after.faulted_by_copy_bytes - before.faulted_by_copy_bytes);
            assert!(made_present >= len as u64);
            // The first chunk is reached by no prefault ahead of it (none
            // runs before it): where huge pages were advised, its copy
            // faults them in.
            if prefault::huge_page_advice() == Some(2 << 20)
                && after.huge_advised_bytes > before.huge_advised_bytes
            {
                assert!(
                    after.faulted_by_copy_bytes > before.faulted_by_copy_bytes,
                    "{after:?}"
                );
            }
        } else {
            // Off: no mincore, no madvise, no touch.
            assert_eq!(after, before);
        }
        drop(stager);
    }
    device.assert_no_violations();
}

#[test]
#[cfg_attr(miri, ignore = "mincore and madvise are system calls")]
fn a_present_destination_costs_only_the_residency_sample() {
    let _one = one_at_a_time();
    let device = device();
    let len = 2 * CHUNK + 1;
    let mut source = DeviceBuffer::new(&device.context, len).unwrap();
    source.copy_from_host(0, &pattern(len, 5)).unwrap();
    let mut stager = stager(&device, true);
    let mut host = HostBuffer::new(len).unwrap();
    let before = prefault::counts();
    stager.run(to_host(&mut *host, &source)).unwrap();
    let after = prefault::counts();
    assert!(host[..] == pattern(len, 5)[..]);
    // One run, sampled: no populate, no advice.
    assert_eq!(after.residency_checks - before.residency_checks, 1);
    assert_eq!(after.populated_ranges, before.populated_ranges);
    assert_eq!(after.huge_advised_bytes, before.huge_advised_bytes);
    drop(stager);
    device.assert_no_violations();
}

#[test]
#[cfg_attr(miri, ignore = "mincore and madvise are system calls")]
fn a_cold_destination_is_present_after_the_transfer_and_ranges_below_the_minimum_are_left_to_the_copy()
 {
    let _one = one_at_a_time();
    let device = device();
    let len = 2 * CHUNK;
    let mut source = DeviceBuffer::new(&device.context, len).unwrap();
    source.copy_from_host(0, &pattern(len, 9)).unwrap();
    let mut stager = stager(&device, true);
    let mut host = HostBuffer::unpopulated(len).unwrap();
    let before = prefault::counts();
    stager.run(to_host(&mut *host, &source)).unwrap();
    let after = prefault::counts();
    assert!(host[..] == pattern(len, 9)[..]);
    assert!(prefault::is_resident(&host));
    let populated = after.populated_bytes - before.populated_bytes;
    let by_copy = after.faulted_by_copy_bytes - before.faulted_by_copy_bytes;
    assert_eq!(populated + by_copy, len as u64);
    // Where huge pages can be advised, the first chunk is not populated
    // ahead (nothing runs before it): its copy faults its pages in.
    if prefault::huge_page_advice() == Some(2 << 20)
        && after.huge_advised_bytes > before.huge_advised_bytes
    {
        assert!(by_copy > 0, "{after:?}");
    }
    // A transfer of 16 KiB (below the 64 KiB minimum range) into fresh
    // memory: sampled never, populated never.
    let small = 16 << 10;
    let mut host = HostBuffer::unpopulated(small).unwrap();
    let before = prefault::counts();
    stager.run(to_host(&mut *host, &source)).unwrap();
    assert!(host[..] == pattern(len, 9)[..small]);
    assert_eq!(prefault::counts(), before);
    drop(stager);
    device.assert_no_violations();
}

#[test]
fn scattered_blocks_into_a_fresh_mapping_are_byte_exact_with_prefault_on() {
    let _one = one_at_a_time();
    let device = device();
    // Blocks above and below the 64 KiB minimum range, some touching (one
    // run) and some apart, in reverse order on the host.
    let sizes = [scaled(192 << 10, 5000), 4096, scaled(300 << 10, 7000), 9000];
    let device_len: usize = sizes.iter().sum();
    let host_len = 2 * device_len + 3 * 4096;
    let source_bytes = pattern(device_len, 21);
    let mut source = DeviceBuffer::new(&device.context, device_len).unwrap();
    source.copy_from_host(0, &source_bytes).unwrap();
    let mut blocks = Vec::new();
    let (mut device_at, mut host_end) = (0, host_len);
    for (index, &len) in sizes.iter().enumerate() {
        // Every other block leaves a gap after it on the host.
        host_end -= len + if index % 2 == 0 { 4096 } else { 0 };
        blocks.push(Block::new(device_at, host_end, len));
        device_at += len;
    }
    let mut stager = stager(&device, true);
    let mut host = HostBuffer::unpopulated(host_len).unwrap();
    stager
        .run(to_host(&mut *host, &source).blocks(&blocks))
        .unwrap();
    let mut expected = vec![0u8; host_len];
    for block in &blocks {
        let from = &source_bytes[block.device_offset..block.device_offset + block.len];
        expected[block.host_offset..block.host_offset + block.len].copy_from_slice(from);
    }
    assert!(host[..] == expected[..]);
    drop(stager);
    device.assert_no_violations();
}

#[test]
fn the_option_defaults_to_on_and_can_be_turned_off() {
    assert!(StagingOptions::default().prefault());
    let off = StagingOptions::builder().prefault(false).build().unwrap();
    assert!(!off.prefault());
}

/// A transfer to the host that fails after the prefault reached later
/// chunks: those chunks are never copied, and every byte of theirs is as
/// it was. Before, the prefault wrote a zero at the start of each page
/// inside the huge pages it advised, and bytes no copy wrote changed.
#[test]
#[cfg_attr(miri, ignore = "mincore and madvise are system calls")]
fn a_failed_transfer_leaves_every_byte_it_did_not_copy_as_it_was() {
    let _one = one_at_a_time();
    let device = device();
    let len = 3 * CHUNK;
    let source_bytes = pattern(len, 7);
    let mut source = DeviceBuffer::new(&device.context, len).unwrap();
    source.copy_from_host(0, &source_bytes).unwrap();
    let mut stager = stager(&device, true);
    let mut host = HostBuffer::unpopulated(len).unwrap();
    // Bytes at the start of a few pages of each chunk, away from the pages
    // a residency sample asks about (a range's first, middle and last), so
    // that every chunk still samples cold; each differs from the source's.
    // Nothing else of it is read before the transfer: a read would map the
    // kernel's zero page, and the destination would sample present.
    let page = prefault::page_size();
    let marks: Vec<usize> = (3 * page..len).step_by(256 << 10).collect();
    for &at in &marks {
        host[at] = !source_bytes[at];
    }
    let before = |at: usize| match marks.binary_search(&at) {
        Ok(_) => !source_bytes[at],
        Err(_) => 0,
    };
    // The device runs nothing until released, so the copier prefaults the
    // later chunks while the first chunk's copy is not done; then its wait
    // for that copy fails: the chunk is skipped, and so are the later ones.
    sim::hold(device.ordinal);
    sim::fail_call(device.ordinal, "cuEventSynchronize", 1, 999);
    // SAFETY: `host` and `source` outlive the transfer, finished below,
    // and nothing touches them before.
    let pending = unsafe { stager.start_unchecked(to_host(&mut host[..], &source)) }.unwrap();
    let arrived = pending.wait_arrived();
    sim::release(device.ordinal);
    let finished = stager.finish_pending(pending);
    assert!(arrived.is_err() && finished.is_err(), "{finished:?}");
    let changed: Vec<usize> = (0..len)
        .filter(|&at| host[at] != before(at) && host[at] != source_bytes[at])
        .collect();
    assert!(
        changed.is_empty(),
        "{} bytes no copy wrote changed, the first at {:?}",
        changed.len(),
        changed.first()
    );
    drop(stager);
    device.assert_no_violations();
}
