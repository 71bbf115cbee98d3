//! The machine the figures come from: the line at the head of the report,
//! the host memory that bounds which sizes the groups try, and the CPU
//! time the process has used.

use hostcopy_driver::cuda::Context;
use hostcopy_driver::cuda::staging::StagingOptions;

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
        "{name}, driver {driver}, {cores} host cores; default options: {} MiB chunks, {} staging buffers, {} workers, H2D {:?} stores, driver path below {} KiB\n",
        defaults.chunk() >> 20,
        defaults.buffers(),
        defaults.workers(),
        defaults.h2d_stores(),
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

/// CPU time every thread of the process has used so far (the first field
/// of each thread's `schedstat`, in nanoseconds); `None` where the kernel
/// does not say.
pub(crate) fn process_cpu() -> Option<std::time::Duration> {
    let mut total = 0u64;
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let path = task.ok()?.path().join("schedstat");
        let Ok(text) = std::fs::read_to_string(path) else {
            continue; // a thread that ended meanwhile
        };
        total += text.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(std::time::Duration::from_nanos(total))
}
