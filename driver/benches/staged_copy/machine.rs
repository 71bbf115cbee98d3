//! The machine the figures come from: the line at the head of the report,
//! the host memory that bounds which sizes the groups try, and the CPU
//! time the process has used.

use hostcopy_driver::cuda::Context;
use hostcopy_driver::cuda::staging::{STREAMING_UPLOAD_MAX, StagingOptions};

/// The machine and the default options, for the report's head.
pub(crate) fn summary(context: &Context) -> String {
    let name = context
        .device_name()
        .map(|n| n.to_string())
        .unwrap_or_default();
    let driver = hostcopy_driver::cuda::driver_version().unwrap_or(0);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let defaults = StagingOptions::default();
    format!(
        "{name}, driver {driver}, {cores} host cores; default options: {} MiB chunks, {} staging buffers, {} workers, H2D stores {}, driver path below {} KiB\n",
        defaults.chunk() >> 20,
        defaults.buffers(),
        defaults.workers(),
        match defaults.h2d_stores() {
            Some(stores) => format!("{stores:?}"),
            None => format!(
                "streaming for a blocking upload of up to {} MiB, else cached",
                STREAMING_UPLOAD_MAX >> 20
            ),
        },
        defaults.driver_path_below() >> 10,
    )
}

/// Bytes of host memory available, from /proc/meminfo (unbounded if unknown).
pub(crate) fn host_available() -> usize {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
            line.split_whitespace().nth(1)?.parse::<usize>().ok()
        })
        .map_or(usize::MAX, |kib| kib << 10)
}

/// CPU time the process has used so far, every thread's, those that ended
/// included (`CLOCK_PROCESS_CPUTIME_ID`, which brings the running threads'
/// time up to date as it reads: a thread's `schedstat` lags by up to a
/// scheduler tick while it runs, so a thread polling for a few hundred
/// microseconds read as none); `None` where the clock is refused.
pub(crate) fn process_cpu() -> Option<std::time::Duration> {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable timespec for the call.
    if unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut now) } != 0 {
        return None;
    }
    let secs = u64::try_from(now.tv_sec).ok()?;
    let nanos = u32::try_from(now.tv_nsec).ok()?;
    Some(std::time::Duration::new(secs, nanos))
}
