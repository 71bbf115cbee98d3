//! cudarc's device memory beside this layer's (feature `cudarc`): the same
//! blocking staged transfers of a `CudaSlice` that a cudarc kernel wrote
//! and of a `DeviceBuffer`, runs interleaved in one process, with the
//! ratio. The slice's copy is checked against what the kernel wrote.

use std::time::{Duration, Instant};

use cudarc::driver::{CudaContext, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;
use hostcopy_driver::cuda::staging::{Stager, cudarc::CudarcMemory, to_device, to_host};
use hostcopy_driver::cuda::{Context, DeviceBuffer, Error};

use crate::Bench;
use crate::paths::Timed;
use crate::report::{Report, not_run, row};
use crate::table::size;

const GROUP: &str = "cudarc";
const PATHS: [&str; 4] = [
    "DeviceBuffer D2H",
    "CudaSlice D2H (cudarc)",
    "DeviceBuffer H2D",
    "CudaSlice H2D (cudarc)",
];

/// A cudarc call's result, or the benchmark stops saying what failed.
fn or_exit<T>(what: &str, result: Result<T, cudarc::driver::DriverError>) -> T {
    result.unwrap_or_else(|error| {
        eprintln!("staged_copy: cudarc: {what}: {error}");
        std::process::exit(1);
    })
}

pub(crate) fn run(bench: &Bench<'_>, report: &mut Report) -> Result<(), Error> {
    let (context, options, reference) = (bench.context, bench.options, bench.reference);
    let bytes: usize = if options.quick { 64 << 20 } else { 1 << 30 };
    println!("{GROUP}: CudaSlice written by a cudarc kernel vs DeviceBuffer");
    if options.simulated {
        for path in PATHS {
            let reason = "cudarc loads libcuda itself";
            report.rows.push(not_run(GROUP, path, bytes, reason));
        }
        return Ok(());
    }
    let cuda = or_exit("context", CudaContext::new(context.ordinal()));
    let stream = or_exit("stream", cuda.new_stream());
    let ptx = Ptx::from_src(include_str!("../../tests/gpu_support/cudarc_kernels.ptx"));
    let module = or_exit("module", cuda.load_module(ptx));
    let kernel = or_exit("kernel", module.load_function("hostcopy_fill"));
    let words = bytes / 4;
    let mut slice = or_exit("alloc", stream.alloc_zeros::<u32>(words));
    let (count, spin, seed) = (words as u64, 0u64, 11u32);
    let mut launch = stream.launch_builder(&kernel);
    launch.arg(&mut slice).arg(&count).arg(&spin).arg(&seed);
    let grid = LaunchConfig {
        grid_dim: (528, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: parameters (u32 *dst, u64 words, u64 ns, u32 seed); it
    // writes `words` words of `slice`.
    or_exit("launch", unsafe { launch.launch(grid) });

    let mut stager = Stager::new(&Context::from_cudarc(&cuda)?)?;
    let mut host = vec![0u32; words];
    // The copy queued right behind the kernel (which does not spin here;
    // the GPU tests check the ordering): checked word by word.
    stager.run(to_host(
        &mut host,
        &CudarcMemory::read(&slice, &stream).unwrap(),
    ))?;
    let wrong = host
        .iter()
        .enumerate()
        .find(|&(i, &word)| word != (i as u32).wrapping_mul(0x9E37_79B1).wrapping_add(seed));
    if let Some((i, word)) = wrong {
        eprintln!("staged_copy: cudarc: word {i} is {word:#x}, not the kernel's");
        std::process::exit(1);
    }
    let mut buffer = DeviceBuffer::new(context, bytes)?;
    stager.run(to_device(&mut buffer, &host))?;

    let mut times: [Vec<Duration>; 4] = Default::default();
    // One warm-up round, then the runs, each path in turn.
    for round in 0..=options.runs {
        for (path, times) in times.iter_mut().enumerate() {
            let start = Instant::now();
            match path {
                0 => stager.run(to_host(&mut host, &buffer))?,
                1 => stager.run(to_host(
                    &mut host,
                    &CudarcMemory::read(&slice, &stream).unwrap(),
                ))?,
                2 => stager.run(to_device(&mut buffer, &host))?,
                _ => stager.run(to_device(
                    &mut CudarcMemory::write(&mut slice, &stream).unwrap(),
                    &host,
                ))?,
            }
            if round > 0 {
                times.push(start.elapsed());
            }
        }
    }
    let mut gbps = [0.0; 4];
    for (path, times) in times.into_iter().enumerate() {
        let pinned = if path < 2 {
            reference.pinned_d2h
        } else {
            reference.pinned_h2d
        };
        let timed = Timed::plain(times);
        gbps[path] = crate::report::gbps(bytes, &timed);
        report
            .rows
            .push(row(GROUP, PATHS[path], bytes, &timed, pinned, f64::NAN));
    }
    report.notes.push(format!(
        "cudarc, {}: CudaSlice / DeviceBuffer, D2H {:.3}x, H2D {:.3}x (runs interleaved)",
        size(bytes),
        gbps[1] / gbps[0],
        gbps[3] / gbps[2],
    ));
    Ok(())
}
