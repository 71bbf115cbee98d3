//! GPU tests of cudarc's device memory in staged transfers (feature
//! `cudarc`) against the real driver: cudarc and the stager share the
//! primary context; a slice that a cudarc kernel is still writing (it spins
//! first) arrives whole, whether the copy is ordered on the kernel's stream
//! or on another cudarc stream (through cudarc's write event); an upload
//! into a slice that a kernel is still reading waits for that kernel; a
//! batch out of a slice being written is byte-exact. Each would read or
//! overwrite the slice too early without the ordering: a control copies
//! through a view that nothing orders after the kernel and finds the slice
//! unwritten. Elsewhere each
//! reports itself ignored and why.

mod gpu_support;

use std::sync::Arc;

use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::Ptx;
use gpu_support::check;
use hostcopy_driver::cuda::staging::{Block, Stager, cudarc::CudarcMemory, to_device, to_host};
use hostcopy_driver::cuda::{Context, DeviceView};
use libtest_mimic::Failed;

fn main() {
    gpu_support::run(
        "gpu_cudarc",
        &[
            (
                "cudarc_shares_the_primary_context_and_a_non_primary_one_is_refused",
                shared_context,
            ),
            (
                "a_slice_a_kernel_is_still_writing_arrives_whole_on_the_kernels_stream",
                read_on_the_kernels_stream,
            ),
            (
                "a_slice_a_kernel_is_still_writing_arrives_whole_on_another_cudarc_stream",
                read_on_another_stream,
            ),
            (
                "control_a_copy_not_ordered_after_the_kernel_finds_the_slice_unwritten",
                unordered_control,
            ),
            (
                "an_upload_waits_for_a_kernel_still_reading_the_slice",
                upload_after_a_reader,
            ),
            (
                "control_an_upload_not_ordered_after_the_kernel_overwrites_what_it_reads",
                unordered_upload_control,
            ),
            (
                "a_batch_out_of_a_slice_a_kernel_is_still_writing_is_byte_exact",
                batch_after_a_writer,
            ),
        ],
    )
}

/// 256 MiB: 16 chunks.
const WORDS: usize = 64 << 20;
/// Long enough that a copy queued right after the launch would find the
/// slice unwritten.
const SPIN_NS: u64 = 200_000_000;

/// cudarc's context on device 0, its two kernels, and a stager on the
/// same context.
struct Setup {
    cuda: Arc<CudaContext>,
    fill: CudaFunction,
    copy: CudaFunction,
    stager: Stager,
}

fn setup(context: &Context) -> Result<Setup, Failed> {
    let cuda = CudaContext::new(context.ordinal())?;
    let module = cuda.load_module(Ptx::from_src(include_str!(
        "gpu_support/cudarc_kernels.ptx"
    )))?;
    let fill = module.load_function("hostcopy_fill")?;
    let copy = module.load_function("hostcopy_copy")?;
    let stager = Stager::new(&Context::from_cudarc(&cuda)?)?;
    Ok(Setup {
        cuda,
        fill,
        copy,
        stager,
    })
}

const GRID: LaunchConfig = LaunchConfig {
    grid_dim: (528, 1, 1),
    block_dim: (256, 1, 1),
    shared_mem_bytes: 0,
};

/// What `hostcopy_fill` writes at word `i`.
fn filled(i: usize, seed: u32) -> u32 {
    (i as u32).wrapping_mul(0x9E37_79B1).wrapping_add(seed)
}

/// Launches `hostcopy_fill` on `stream`: after `spin` ns, word `i` of
/// `slice` becomes `filled(i, seed)`.
fn fill(
    setup: &Setup,
    stream: &Arc<CudaStream>,
    slice: &mut CudaSlice<u32>,
    spin: u64,
    seed: u32,
) -> Result<(), Failed> {
    let words = slice.len() as u64;
    let mut launch = stream.launch_builder(&setup.fill);
    launch.arg(slice).arg(&words).arg(&spin).arg(&seed);
    // SAFETY: the kernel's parameters are (u32 *dst, u64 words, u64 ns,
    // u32 seed), and it writes `words` words of `slice` only.
    unsafe { launch.launch(GRID) }?;
    Ok(())
}

/// Launches `hostcopy_copy` on `stream`: after `SPIN_NS` ns, `dst`
/// becomes a copy of `src`.
fn copy(
    setup: &Setup,
    stream: &Arc<CudaStream>,
    dst: &mut CudaSlice<u32>,
    src: &CudaSlice<u32>,
) -> Result<(), Failed> {
    assert_eq!(dst.len(), src.len(), "the kernel copies `src`'s length");
    let words = src.len() as u64;
    let mut launch = stream.launch_builder(&setup.copy);
    launch.arg(dst).arg(src).arg(&words).arg(&SPIN_NS);
    // SAFETY: parameters (u32 *dst, const u32 *src, u64 words, u64 ns); it
    // reads and writes `words` words of each, and both are that long.
    unsafe { launch.launch(GRID) }?;
    Ok(())
}

/// The first word that differs from `filled(_, seed)`, if any.
fn first_wrong(words: &[u32], seed: u32) -> Option<(usize, u32)> {
    words
        .iter()
        .enumerate()
        .find(|&(i, &word)| word != filled(i, seed))
        .map(|(i, &word)| (i, word))
}

fn shared_context(context: &Context) -> Result<(), Failed> {
    let cuda = CudaContext::new(context.ordinal())?;
    let from = Context::from_cudarc(&cuda)?;
    check(
        from.raw().addr() == cuda.cu_ctx().addr() && context.raw() == from.raw(),
        || "cudarc's context is not the primary context".into(),
    )?;
    // A context of its own (cuCtxCreate) is not the primary one: refused,
    // and so is its memory and its stream in a stager's calls.
    let other = CudaContext::new_non_primary(context.ordinal(), 0)?;
    not_primary(Context::from_cudarc(&other), "a non-primary context")?;
    let stream = other.new_stream()?;
    // Its stream, resolved against this device's primary context, is
    // refused as `of_stream` refuses it, never taken for the known one.
    // SAFETY: the stream is alive for the call.
    let resolved = unsafe { Context::of_stream_in(stream.cu_stream().cast(), context) };
    not_primary(resolved, "a non-primary context's stream")?;
    let slice = stream.alloc_zeros::<u32>(1024)?;
    let mut stager = Stager::new(context)?;
    let mut host = vec![0u32; 1024];
    // Refused when lent: the adapter takes this layer's handle on the
    // memory's context, and a non-primary one has none.
    let refused = CudarcMemory::read(&slice, &stream)
        .and_then(|memory| stager.run(to_host(&mut host, &memory)));
    not_primary(refused, "memory of a non-primary context")
}

/// `result` is the refusal of a non-primary context (`what` names it).
fn not_primary<T: std::fmt::Debug>(
    result: Result<T, hostcopy_driver::cuda::Error>,
    what: &str,
) -> Result<(), Failed> {
    check(
        matches!(
            result,
            Err(hostcopy_driver::cuda::Error::NotPrimaryContext { .. })
        ),
        || format!("{what}: {result:?}"),
    )
}

fn read_after_fill(context: &Context, copy_on_another_stream: bool) -> Result<(), Failed> {
    let mut setup = setup(context)?;
    let writer = setup.cuda.new_stream()?;
    let reader = if copy_on_another_stream {
        setup.cuda.new_stream()?
    } else {
        Arc::clone(&writer)
    };
    // Allocated on a third stream, so that with a reader of its own only
    // cudarc's write event orders the copy after the kernel.
    let allocator = setup.cuda.new_stream()?;
    let mut slice = allocator.alloc_zeros::<u32>(WORDS)?;
    allocator.synchronize()?;
    let mut host = vec![0u32; WORDS];
    fill(&setup, &writer, &mut slice, SPIN_NS, 7)?;
    setup.stager.run(to_host(
        &mut host,
        &CudarcMemory::read(&slice, &reader).unwrap(),
    ))?;
    check(first_wrong(&host, 7).is_none(), || {
        format!(
            "word {:?} arrived before the kernel wrote it",
            first_wrong(&host, 7)
        )
    })
}

fn read_on_the_kernels_stream(context: &Context) -> Result<(), Failed> {
    read_after_fill(context, false)
}

fn read_on_another_stream(context: &Context) -> Result<(), Failed> {
    read_after_fill(context, true)
}

/// The control for the two tests above: the same copy through a view that
/// nothing orders after the kernel runs while the kernel still spins, and
/// finds the slice unwritten. (So the ordering is what those tests see.)
fn unordered_control(context: &Context) -> Result<(), Failed> {
    let mut setup = setup(context)?;
    let writer = setup.cuda.new_stream()?;
    let mut slice = writer.alloc_zeros::<u32>(WORDS)?;
    writer.synchronize()?;
    let mut host = vec![0u32; WORDS];
    fill(&setup, &writer, &mut slice, SPIN_NS, 7)?;
    let (ptr, read) = slice.device_ptr(&writer);
    // SAFETY: `slice` outlives the blocking copy below, and nothing frees
    // it meanwhile; the copy is not ordered with the kernel, on purpose.
    let view = unsafe { DeviceView::new(context, ptr, WORDS * 4, Arc::new(())) }?;
    setup.stager.run(to_host(&mut host, &view))?;
    drop(read);
    writer.synchronize()?;
    check(first_wrong(&host, 7).is_some(), || {
        "the kernel had finished before an unordered copy: the tests above prove nothing".into()
    })
}

fn upload_after_a_reader(context: &Context) -> Result<(), Failed> {
    let mut setup = setup(context)?;
    let kernel_stream = setup.cuda.new_stream()?;
    let upload_stream = setup.cuda.new_stream()?;
    // Allocated on a third stream: only cudarc's read event orders the
    // upload after the kernel.
    let allocator = setup.cuda.new_stream()?;
    let mut source = allocator.alloc_zeros::<u32>(WORDS)?;
    let mut copied = allocator.alloc_zeros::<u32>(WORDS)?;
    allocator.synchronize()?;
    fill(&setup, &kernel_stream, &mut source, 0, 1)?;
    kernel_stream.synchronize()?;
    let new: Vec<u32> = (0..WORDS).map(|i| filled(i, 2)).collect();
    // The kernel reads `source` after spinning; the upload overwrites it.
    copy(&setup, &kernel_stream, &mut copied, &source)?;
    setup.stager.run(to_device(
        &mut CudarcMemory::write(&mut source, &upload_stream).unwrap(),
        &new,
    ))?;
    let mut host = vec![0u32; WORDS];
    setup.stager.run(to_host(
        &mut host,
        &CudarcMemory::read(&copied, &upload_stream).unwrap(),
    ))?;
    check(first_wrong(&host, 1).is_none(), || {
        format!(
            "the kernel read word {:?} after the upload overwrote it",
            first_wrong(&host, 1)
        )
    })?;
    setup.stager.run(to_host(
        &mut host,
        &CudarcMemory::read(&source, &upload_stream).unwrap(),
    ))?;
    check(host == new, || "the upload did not arrive".into())
}

/// The control for the upload test: the same overwrite through a view that
/// nothing orders after the reading kernel lands while the kernel still
/// spins, and the kernel copies the new words, not the old.
fn unordered_upload_control(context: &Context) -> Result<(), Failed> {
    let mut setup = setup(context)?;
    let kernel_stream = setup.cuda.new_stream()?;
    let mut source = kernel_stream.alloc_zeros::<u32>(WORDS)?;
    let mut copied = kernel_stream.alloc_zeros::<u32>(WORDS)?;
    fill(&setup, &kernel_stream, &mut source, 0, 1)?;
    kernel_stream.synchronize()?;
    let new: Vec<u32> = (0..WORDS).map(|i| filled(i, 2)).collect();
    copy(&setup, &kernel_stream, &mut copied, &source)?;
    let (ptr, read) = source.device_ptr(&kernel_stream);
    // SAFETY: `source` outlives the blocking copy below; the copy is not
    // ordered with the kernel, on purpose.
    let mut view = unsafe { DeviceView::new(context, ptr, WORDS * 4, Arc::new(())) }?;
    setup.stager.run(to_device(&mut view, &new))?;
    drop(read);
    kernel_stream.synchronize()?;
    let mut host = vec![0u32; WORDS];
    setup.stager.run(to_host(
        &mut host,
        &CudarcMemory::read(&copied, &kernel_stream).unwrap(),
    ))?;
    check(first_wrong(&host, 1).is_some(), || {
        "the kernel had read the slice before an unordered upload: the upload test proves nothing"
            .into()
    })
}

fn batch_after_a_writer(context: &Context) -> Result<(), Failed> {
    let mut setup = setup(context)?;
    let stream = setup.cuda.new_stream()?;
    let mut slice = stream.alloc_zeros::<u32>(WORDS)?;
    stream.synchronize()?;
    let mut pool = vec![0u32; 7 * (256 << 10) / 4];
    fill(&setup, &stream, &mut slice, SPIN_NS, 9)?;
    // 256 KiB blocks from scattered slots, into a packed pool.
    const BLOCK: usize = 256 << 10;
    let slots = [700usize, 3, 999, 512, 64, 1000, 1];
    let blocks: Vec<Block> = slots
        .iter()
        .enumerate()
        .map(|(i, &slot)| Block::new(slot * BLOCK, i * BLOCK, BLOCK))
        .collect();
    setup
        .stager
        .run(to_host(&mut pool, &CudarcMemory::read(&slice, &stream).unwrap()).blocks(&blocks))?;
    for (i, &slot) in slots.iter().enumerate() {
        let got = &pool[i * BLOCK / 4..(i + 1) * BLOCK / 4];
        let first = slot * BLOCK / 4;
        let wrong = got
            .iter()
            .enumerate()
            .find(|&(j, &word)| word != filled(first + j, 9));
        check(wrong.is_none(), || {
            format!("block {i} (slot {slot}): word {wrong:?} is not the kernel's")
        })?;
    }
    Ok(())
}
