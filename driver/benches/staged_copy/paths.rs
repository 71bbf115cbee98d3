//! The transfer paths being compared, each timed the same way: one warm-up,
//! then `runs` timed transfers of `bytes`, all through the library's API.
//!
//! - pinned: one `cuMemcpy*Async` to or from a pinned buffer and a wait,
//!   through the stager's pinned API (the link's limit);
//! - driver: the driver's own pageable path (`cuMemcpyDtoH`/`HtoD`), which
//!   stages internally and blocks the caller for the whole copy;
//! - staged: a [`Stager`], started in a scope so the time the caller spends
//!   enqueuing (in driver calls) is measured apart from the wait.

use std::time::{Duration, Instant};

use hostcopy_driver::cuda::staging::{Stager, to_device, to_host};
use hostcopy_driver::cuda::{Context, DeviceBuffer, Error, PinnedBuffer};

/// Times of the runs, and for staged paths the caller's share in driver calls.
pub(crate) struct Timed {
    pub(crate) times: Vec<Duration>,
    pub(crate) caller_share: f64,
}

impl Timed {
    pub(crate) fn plain(times: Vec<Duration>) -> Timed {
        Timed {
            times,
            caller_share: f64::NAN,
        }
    }
}

/// Runs `once` `runs + 1` times, dropping the first (warm-up) time.
pub(crate) fn timed(
    runs: usize,
    mut once: impl FnMut() -> Result<Duration, Error>,
) -> Result<Vec<Duration>, Error> {
    once()?;
    (0..runs).map(|_| once()).collect()
}

/// Which way a pinned copy goes.
#[derive(Clone, Copy)]
pub(crate) enum Direction {
    D2H,
    H2D,
}

/// Device to or from pinned host memory with one asynchronous driver copy
/// and a wait, through the stager's safe pinned API: the link.
pub(crate) fn pinned(
    context: &Context,
    stager: &mut Stager,
    device: &mut DeviceBuffer,
    direction: Direction,
    bytes: usize,
    runs: usize,
) -> Result<Timed, Error> {
    let mut buffer = Some(PinnedBuffer::new(context, bytes)?);
    let times = timed(runs, || {
        let pinned = buffer
            .take()
            .expect("a successful copy gives the buffer back");
        let start = Instant::now();
        let pinned = match direction {
            Direction::D2H => stager.device_to_pinned(pinned, device, 0)?,
            Direction::H2D => stager.pinned_to_device(device, pinned, 0)?,
        };
        let elapsed = start.elapsed();
        buffer = Some(pinned);
        Ok(elapsed)
    })?;
    Ok(Timed::plain(times))
}

/// The driver's pageable device-to-host path into `host`.
pub(crate) fn driver_d2h(
    device: &DeviceBuffer,
    host: &mut [u8],
    runs: usize,
) -> Result<Timed, Error> {
    let times = timed(runs, || {
        let start = Instant::now();
        device.copy_to_host(0, host)?;
        Ok(start.elapsed())
    })?;
    Ok(Timed::plain(times))
}

/// The driver's pageable host-to-device path from `host`.
pub(crate) fn driver_h2d(
    device: &mut DeviceBuffer,
    host: &[u8],
    runs: usize,
) -> Result<Timed, Error> {
    let times = timed(runs, || {
        let start = Instant::now();
        device.copy_from_host(0, host)?;
        Ok(start.elapsed())
    })?;
    Ok(Timed::plain(times))
}

/// Staged device to host into `host`.
pub(crate) fn staged_d2h(
    stager: &mut Stager,
    device: &DeviceBuffer,
    host: &mut [u8],
    runs: usize,
) -> Result<Timed, Error> {
    let mut enqueue = Vec::new();
    let times = timed(runs, || {
        let start = Instant::now();
        let mut enqueued = Duration::ZERO;
        stager.scope(|scope| {
            let transfer = scope.start(to_host(&mut *host, device))?;
            enqueued = start.elapsed();
            transfer.wait()
        })??;
        enqueue.push(enqueued);
        Ok(start.elapsed())
    })?;
    Ok(with_share(times, &enqueue[1..]))
}

/// Staged host to device from `host`.
pub(crate) fn staged_h2d(
    stager: &mut Stager,
    device: &mut DeviceBuffer,
    host: &[u8],
    runs: usize,
) -> Result<Timed, Error> {
    let mut enqueue = Vec::new();
    let times = timed(runs, || {
        let start = Instant::now();
        let mut enqueued = Duration::ZERO;
        stager.scope(|scope| {
            let transfer = scope.start(to_device(&mut *device, host))?;
            enqueued = start.elapsed();
            transfer.wait()
        })??;
        enqueue.push(enqueued);
        Ok(start.elapsed())
    })?;
    Ok(with_share(times, &enqueue[1..]))
}

/// Staged device to host into `host` with the blocking call (the stager
/// queues every chunk itself, then waits).
pub(crate) fn staged_d2h_blocking(
    stager: &mut Stager,
    device: &DeviceBuffer,
    host: &mut [u8],
    runs: usize,
) -> Result<Timed, Error> {
    let times = timed(runs, || {
        let start = Instant::now();
        stager.run(to_host(&mut *host, device))?;
        Ok(start.elapsed())
    })?;
    Ok(Timed::plain(times))
}

/// Staged host to device from `host` with the blocking call.
pub(crate) fn staged_h2d_blocking(
    stager: &mut Stager,
    device: &mut DeviceBuffer,
    host: &[u8],
    runs: usize,
) -> Result<Timed, Error> {
    let times = timed(runs, || {
        let start = Instant::now();
        stager.run(to_device(&mut *device, host))?;
        Ok(start.elapsed())
    })?;
    Ok(Timed::plain(times))
}

fn with_share(times: Vec<Duration>, enqueue: &[Duration]) -> Timed {
    let spent: f64 = enqueue.iter().map(Duration::as_secs_f64).sum();
    let total: f64 = times.iter().map(Duration::as_secs_f64).sum();
    Timed {
        caller_share: spent / total,
        times,
    }
}

/// Which path copies into a never-touched destination.
#[derive(Clone, Copy)]
pub(crate) enum Destination {
    /// The driver's pageable path.
    Driver,
    /// A stager's (made with prefault on or off: the caller's choice).
    Staged,
}

/// Device to host into a fresh `vec![0; bytes]` per run: zero pages mapped
/// lazily, so every page faults on first touch. Allocation and freeing
/// are not timed; the last run's vector comes back, for a byte check.
pub(crate) fn never_touched_d2h(
    stager: &mut Stager,
    device: &DeviceBuffer,
    bytes: usize,
    runs: usize,
    path: Destination,
) -> Result<(Timed, Vec<u8>), Error> {
    let mut last = Vec::new();
    let times = timed(runs, || {
        drop(std::mem::take(&mut last));
        let mut host = vec![0u8; bytes];
        let start = Instant::now();
        match path {
            Destination::Driver => device.copy_to_host(0, &mut host)?,
            Destination::Staged => stager.run(to_host(&mut host, device))?,
        }
        let elapsed = start.elapsed();
        last = host;
        Ok(elapsed)
    })?;
    Ok((Timed::plain(times), last))
}
