//! The sticky-error test: a kernel traps, and the context fails for good.
//!
//! What must hold afterwards: every wait returns the error and nothing
//! hangs; a scope does not return while one of its host functions is still
//! copying into its borrowed buffers; owned records whose host functions the
//! driver skipped stay allocated and are counted, and that count is exactly
//! the number of host functions that did not run (the bound on what a
//! context error leaks). A failed context cannot be recovered in-process
//! (driver 580), so this is a binary of its own.

mod gpu_support;

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use gpu_support::kernel::Kernels;
use gpu_support::{check, eventually, owned_alive, pattern};
use hostcopy_driver::cuda::{Context, Event, Graph, HostCopy, Stream};
use hostcopy_driver::{RawRegion, Record, RecordPool, abandoned_records};
use libtest_mimic::Failed;

fn main() {
    gpu_support::run(
        "gpu_fault",
        &[(
            "sticky_error_never_hangs_and_loses_track_of_no_record",
            sticky_error,
        )],
    )
}

static COPY_STARTED: AtomicBool = AtomicBool::new(false);

/// A host function that marks the start of the next one on the same thread.
unsafe extern "C" fn mark_started(_: *mut c_void) {
    COPY_STARTED.store(true, Ordering::Release);
}

/// Aborts the process if the test has not finished in time: a hang must
/// fail, not stall CI or the GPU run.
fn watchdog(limit: Duration) {
    std::thread::spawn(move || {
        std::thread::sleep(limit);
        eprintln!("gpu_fault: no progress for {limit:?}: a wait hung");
        std::process::abort();
    });
}

fn sticky_error(context: &Context) -> Result<(), Failed> {
    watchdog(Duration::from_secs(120));
    let kernels = Kernels::load()?;
    let busy = Stream::new(context)?; // a slow scoped copy runs here when the trap hits
    let queued = Stream::new(context)?; // host functions wait here behind a spinning kernel
    let faulty = Stream::new(context)?; // the trap
    static POOL: RecordPool<16> = RecordPool::new();

    // Records queued behind a 2 s kernel: the trap comes first, so the
    // driver skips them.
    const QUEUED: usize = 100;
    const POOLED: usize = 10;
    const LEN: usize = 256;
    const GRAPH_RECORD: usize = QUEUED + POOLED;
    let src: &'static [u8] = Box::leak(pattern((GRAPH_RECORD + 1) * LEN, 1).into_boxed_slice());
    let dst: &'static mut [u8] = Box::leak(vec![0u8; (GRAPH_RECORD + 1) * LEN].into_boxed_slice());
    let dst_region = RawRegion::host(dst.as_mut_ptr().expose_provenance(), dst.len());
    let src_region = RawRegion::host(src.as_ptr().expose_provenance(), src.len());
    let record = |i: usize| {
        // SAFETY: both buffers are leaked: valid for as long as any host function may run.
        unsafe { Record::from_raw_regions(dst_region, i * LEN, src_region, i * LEN, LEN) }
    };
    // A 1 GiB scoped copy that is running when the trap hits.
    const BIG: usize = 1 << 30;
    let big_src = pattern(BIG, 2);
    let mut big_dst = vec![0u8; BIG];
    big_dst.fill(0); // fault in every page before timing anything
    let event = Event::ordering(context)?;
    let alive_before = owned_alive();
    kernels.spin(queued.as_stream(), 2_000_000_000)?;
    for i in 0..QUEUED {
        queued
            .as_stream()
            .launch_owned(HostCopy::Single, record(i)?)?;
    }
    for i in QUEUED..QUEUED + POOLED {
        queued
            .as_stream()
            .launch_owned_in(&POOL, HostCopy::Single, record(i)?)?;
    }
    // A graph holding an owned record, launched behind the same kernel.
    let mut graph = Graph::new(context)?;
    graph.add_host_copy(HostCopy::Single, record(GRAPH_RECORD)?, &[])?;
    let mut exec = graph.instantiate()?;
    exec.launch(queued.as_stream())?;
    // An event behind all of it: pending when the trap hits, waited on after.
    event.record(queued.as_stream())?;

    let abandoned_before = abandoned_records();
    let started = Instant::now();
    let scope_result = busy.as_stream().scope(|scope| -> Result<(), Failed> {
        // SAFETY: `mark_started` touches only a static.
        unsafe {
            scope
                .stream()
                .launch_host_fn(mark_started, core::ptr::null_mut())
        }?;
        scope.launch(
            HostCopy::Single,
            Record::pack(&mut big_dst[..], &big_src[..])?,
        )?;
        // Wait until the host-function thread is on the copy, then trap.
        let marked = eventually(Duration::from_secs(10), || {
            COPY_STARTED.load(Ordering::Acquire)
        });
        check(marked, || {
            "the host function before the copy never ran".into()
        })?;
        kernels.trap(faulty.as_stream())?;
        Ok(())
    });
    let scope_returned_after = started.elapsed();
    eprintln!("    scope returned after {scope_returned_after:?}: {scope_result:?}");
    let scope_error = match scope_result {
        Err(error) => error,
        Ok(inner) => {
            inner?;
            return Err("the scope returned Ok after the context failed".into());
        }
    };
    eprintln!("    scope error: {scope_error}");
    check(big_dst == big_src, || {
        "the scope returned before its running copy finished".into()
    })?;
    check(abandoned_records() == abandoned_before, || {
        "the running copy's record was abandoned, not waited for".into()
    })?;

    // Every wait returns the error; none hangs.
    let waits: [(&str, Result<(), hostcopy_driver::cuda::DriverError>); 4] = [
        ("queued stream", queued.as_stream().synchronize()),
        ("faulty stream", faulty.as_stream().synchronize()),
        ("context", context.synchronize()),
        ("event recorded before the trap", event.synchronize()),
    ];
    for (what, result) in &waits {
        eprintln!("    wait on {what}: {result:?}");
        check(result.is_err(), || {
            format!("waiting on the {what} after a trap returned Ok")
        })?;
    }

    // New launches fail at once and keep nothing.
    let alive_now = owned_alive();
    let late = queued
        .as_stream()
        .launch_owned(HostCopy::Single, record(0)?);
    check(late.is_err(), || {
        "an owned launch after the error succeeded".into()
    })?;
    check(owned_alive() == alive_now, || {
        "a refused owned launch kept its record".into()
    })?;
    let free_slots = POOL.available();
    let late = queued
        .as_stream()
        .launch_owned_in(&POOL, HostCopy::Single, record(0)?);
    check(late.is_err() && POOL.available() == free_slots, || {
        "a refused pool launch kept its slot".into()
    })?;

    // The skipped host functions: their records stay allocated, counted,
    // exactly as many as did not run.
    let ran = (0..QUEUED)
        .filter(|&i| dst[i * LEN..(i + 1) * LEN] == src[i * LEN..(i + 1) * LEN])
        .count();
    let pooled_ran = (QUEUED..QUEUED + POOLED)
        .filter(|&i| dst[i * LEN..(i + 1) * LEN] == src[i * LEN..(i + 1) * LEN])
        .count();
    eprintln!(
        "    {ran} of {QUEUED} boxed and {pooled_ran} of {POOLED} pooled queued host functions ran"
    );
    drop(exec);
    drop(graph);
    let graph_freed = eventually(Duration::from_secs(2), || {
        owned_alive() - alive_before == QUEUED - ran
    });
    let leaked = owned_alive() - alive_before;
    eprintln!(
        "    boxed records alive after the error: {leaked} (graph record freed: {graph_freed})"
    );
    check(leaked == QUEUED - ran || leaked == QUEUED - ran + 1, || {
        format!(
            "{leaked} boxed records alive, expected the {} skipped (+1 if the graph's stays)",
            QUEUED - ran
        )
    })?;
    let held = 16 - POOL.available();
    check(held == POOLED - pooled_ran, || {
        format!(
            "{held} pool slots held, expected the {} skipped",
            POOLED - pooled_ran
        )
    })?;
    Ok(())
}
