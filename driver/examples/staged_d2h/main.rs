//! The classic use of hostcopy: 1 GiB from the GPU into a plain `Vec<u8>`
//! at the speed of the link, in safe code.
//!
//! ```text
//! cargo run --release --example staged_d2h --features cuda
//! ```
//!
//! A [`Stager`] owns pinned staging buffers (one stream each) and a pool of
//! copy workers; the driver copies each chunk into a staging buffer and a
//! host function copies it on into the destination, split over the
//! workers, while the next chunk crosses the link. The defaults (chunk
//! size, buffers, workers) come from the machine and from measurements
//! (see `hostcopy_driver::cuda::staging`).

use std::error::Error;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use hostcopy_driver::cuda::staging::{Stager, to_device, to_host};
use hostcopy_driver::cuda::{Context, DeviceBuffer};

const TOTAL: usize = 1 << 30;
/// The non-blocking transfer goes in this many pieces, to show progress.
const PIECES: usize = 8;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("staged_d2h: {error}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn Error>> {
    let context = Context::primary(0).map_err(|e| format!("no GPU: {e}"))?;
    let mut stager = Stager::new(&context)?;
    let options = stager.options();
    println!(
        "{}: chunks of {} MiB, {} staging buffers, {} workers",
        context.device_name()?,
        options.chunk() >> 20,
        options.buffers(),
        stager.workers(),
    );

    // A known pattern on the device, uploaded through the same stager.
    let pattern: Vec<u8> = (0..TOTAL).map(|i| (i % 251) as u8).collect();
    let mut device = DeviceBuffer::new(&context, TOTAL)?;
    let start = Instant::now();
    stager.run(to_device(&mut device, &pattern))?;
    report("host -> device", start.elapsed());

    // The classic use: one call, into memory never touched before (the
    // workers take its page faults in parallel).
    let mut host = vec![0u8; TOTAL];
    let start = Instant::now();
    stager.run(to_host(&mut host, &device))?;
    report("device -> host", start.elapsed());
    verify(&host, &pattern)?;

    // Non-blocking: start every piece, then wait for each in turn while
    // this thread is free for other work. The scope waits for anything
    // still in flight before it returns, so the borrows stay sound.
    host.fill(0);
    let piece = TOTAL / PIECES;
    let start = Instant::now();
    stager.scope(|scope| -> Result<(), hostcopy_driver::cuda::Error> {
        let mut transfers = Vec::new();
        for (index, part) in host.chunks_mut(piece).enumerate() {
            transfers.push(scope.start(to_host(part, &device).at(index * piece))?);
        }
        for (done, transfer) in transfers.into_iter().enumerate() {
            transfer.wait()?;
            println!(
                "  {} of {} MiB arrived",
                (done + 1) * (piece >> 20),
                TOTAL >> 20
            );
        }
        Ok(())
    })??;
    report("device -> host, in pieces", start.elapsed());
    verify(&host, &pattern)?;
    Ok(())
}

fn report(what: &str, took: Duration) {
    let gb_per_s = TOTAL as f64 / took.as_secs_f64() / 1e9;
    println!(
        "{what}: {} MiB in {took:.2?}, {gb_per_s:.1} GB/s",
        TOTAL >> 20
    );
}

fn verify(host: &[u8], expected: &[u8]) -> Result<(), String> {
    match host.iter().zip(expected).position(|(a, b)| a != b) {
        None => {
            println!("  verified: every byte as expected");
            Ok(())
        }
        Some(at) => Err(format!(
            "byte {at} is {}, expected {}",
            host[at], expected[at]
        )),
    }
}
