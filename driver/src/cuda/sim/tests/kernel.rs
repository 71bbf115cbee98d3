//! The gather kernel as the simulator runs it: modules, functions, a
//! launch checked whole before anything is queued, and a module unloaded
//! under a queued launch reported.

use super::super::super::kernels::{
    GATHER_ENTRIES, GATHER_NAME, GATHER_PTX, GATHER_THREADS, GatherEntry, GatherTable,
};
use super::*;

fn load() -> (ffi::CUmodule, ffi::CUfunction) {
    let mut module: ffi::CUmodule = null_mut();
    // SAFETY: writes one handle; the image is NUL-terminated text.
    ok(unsafe { ffi::cuModuleLoadData(&mut module, GATHER_PTX.as_ptr().cast()) });
    let mut function: ffi::CUfunction = null_mut();
    // SAFETY: writes one handle; the name is NUL-terminated.
    ok(unsafe { ffi::cuModuleGetFunction(&mut function, module, GATHER_NAME.as_ptr()) });
    (module, function)
}

/// Launches the kernel over `entries` with `staging` as the staging range.
fn launch(
    function: ffi::CUfunction,
    stream: CUstream,
    staging: ffi::CUdeviceptr,
    entries: &[GatherEntry],
    scatter: bool,
) -> u32 {
    let mut table = GatherTable([GatherEntry::default(); GATHER_ENTRIES]);
    table.0[..entries.len()].copy_from_slice(entries);
    let mut staging: u64 = staging;
    let mut count = entries.len() as u32;
    let mut scatter = u32::from(scatter);
    let mut params: [*mut c_void; 4] = [
        (&raw mut staging).cast(),
        (&raw mut count).cast(),
        (&raw mut scatter).cast(),
        (&raw mut table).cast(),
    ];
    // SAFETY: four pointers to the kernel's parameters; the simulator
    // checks every entry's ranges.
    unsafe {
        ffi::cuLaunchKernel(
            function,
            count.max(1),
            1,
            1,
            GATHER_THREADS,
            1,
            1,
            0,
            stream,
            params.as_mut_ptr(),
            null_mut(),
        )
    }
    .0
}

fn entry(device: ffi::CUdeviceptr, offset: u32, len: u32) -> GatherEntry {
    GatherEntry {
        device,
        offset,
        len,
    }
}

#[test]
fn the_kernel_gathers_and_scatters_byte_exact_in_stream_order() {
    let (device, _ctx) = setup();
    let stream = new_stream();
    let (staging, dev) = (pinned(64), device_memory(64));
    let (module, function) = load();
    let pattern: Vec<u8> = (0..64u8).map(|i| i.wrapping_mul(37) ^ 5).collect();
    // SAFETY: 64 bytes from 64 pinned bytes.
    ok(unsafe { ffi::cuMemcpyHtoD_v2(dev, pattern.as_ptr().cast(), 64) });
    // Device bytes 40..47 to staging 0, 3..8 to staging 10.
    let gathered = [entry(dev + 40, 0, 7), entry(dev + 3, 10, 5)];
    assert_eq!(launch(function, stream, host(staging), &gathered, false), 0);
    assert_eq!(sync(stream), 0);
    let got = read(staging, 16);
    assert_eq!(&got[..7], &pattern[40..47]);
    assert_eq!(&got[7..10], &[0, 0, 0], "no entry writes these");
    assert_eq!(&got[10..15], &pattern[3..8]);
    // And back, to other device offsets.
    let scattered = [entry(dev + 50, 0, 7), entry(dev + 20, 10, 5)];
    assert_eq!(launch(function, stream, host(staging), &scattered, true), 0);
    let mut back = [0u8; 64];
    // SAFETY: 64 bytes into 64 host bytes (waits for the launch before).
    ok(unsafe { ffi::cuMemcpyDtoH_v2(back.as_mut_ptr().cast(), dev, 64) });
    assert_eq!(&back[50..57], &pattern[40..47]);
    assert_eq!(&back[20..25], &pattern[3..8]);
    assert_eq!(&back[..20], &pattern[..20], "untouched");
    assert_eq!(device_state(device).kernel_launches, 2);
    // SAFETY: loaded above, nothing queued.
    ok(unsafe { ffi::cuModuleUnload(module) });
    assert_eq!(device_state(device).modules, 0);
    assert!(take_violations(device).is_empty());
    finish(device);
}

#[test]
fn bad_launches_are_refused_before_anything_is_queued() {
    let (device, _ctx) = setup();
    let stream = new_stream();
    let (staging, dev) = (pinned(64), device_memory(64));
    let pageable = [0u8; 64];
    let (_module, function) = load();
    hold(device);
    let cases: [(&str, ffi::CUdeviceptr, [GatherEntry; 2]); 3] = [
        (
            "device range out of its allocation",
            host(staging),
            [entry(dev, 0, 8), entry(dev + 60, 8, 8)],
        ),
        (
            "staging in pageable memory",
            pageable.as_ptr().expose_provenance() as ffi::CUdeviceptr,
            [entry(dev, 0, 8), entry(dev + 8, 8, 8)],
        ),
        (
            "two entries writing the same staging bytes",
            host(staging),
            [entry(dev, 0, 8), entry(dev + 8, 4, 8)],
        ),
    ];
    for (what, at, entries) in cases {
        assert_eq!(
            launch(function, stream, at, &entries, false),
            codes::INVALID_VALUE,
            "{what}"
        );
        assert_eq!(take_violations(device).len(), 1, "{what}");
    }
    let state = device_state(device);
    assert_eq!((state.queued, state.kernel_launches), (0, 0));
    // An image without the kernel, a name it lacks.
    let mut module: ffi::CUmodule = null_mut();
    // SAFETY: writes one handle; NUL-terminated text.
    let code = unsafe { ffi::cuModuleLoadData(&mut module, c".version 7.0".as_ptr().cast()) };
    assert_eq!(code.0, codes::INVALID_IMAGE);
    let (other, _) = load();
    let mut function: ffi::CUfunction = null_mut();
    // SAFETY: writes one handle; NUL-terminated name.
    let code = unsafe { ffi::cuModuleGetFunction(&mut function, other, c"memcpy".as_ptr()) };
    assert_eq!(code.0, codes::NOT_FOUND);
    release(device);
    finish(device);
}

#[test]
fn a_module_unloaded_under_a_queued_launch_is_a_violation() {
    let (device, _ctx) = setup();
    let stream = new_stream();
    let (staging, dev) = (pinned(16), device_memory(16));
    let (module, function) = load();
    hold(device);
    assert_eq!(
        launch(function, stream, host(staging), &[entry(dev, 0, 16)], false),
        0
    );
    // SAFETY: the handle is live; its launch is still queued.
    ok(unsafe { ffi::cuModuleUnload(module) });
    let violations = take_violations(device);
    assert_eq!(violations.len(), 1);
    assert!(
        violations[0].contains("unloaded with 1 launch"),
        "{violations:?}"
    );
    // Its function went with it.
    assert_eq!(
        launch(function, stream, host(staging), &[entry(dev, 0, 16)], false),
        codes::INVALID_HANDLE
    );
    assert_eq!(take_violations(device).len(), 1, "a destroyed function");
    release(device);
    assert_eq!(sync(stream), 0);
    // Once a launch has run, unloading is fine.
    let (module, function) = load();
    assert_eq!(
        launch(function, stream, host(staging), &[entry(dev, 0, 16)], false),
        0
    );
    assert_eq!(sync(stream), 0);
    // SAFETY: the handle is live; its launch ran.
    ok(unsafe { ffi::cuModuleUnload(module) });
    assert!(take_violations(device).is_empty());
    finish(device);
}
