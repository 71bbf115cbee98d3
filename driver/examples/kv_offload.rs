//! KV-cache offload: an evicted sequence's scattered cache blocks go to a
//! pageable host pool in one batched call, and come back later to other
//! device blocks, as a cache does after reallocating them.
//! `cargo run --release --example kv_offload --features cuda`; without a
//! GPU it says why and exits 0 (1 with `HOSTCOPY_REQUIRE_GPU=1`).

use std::error::Error;
use std::time::{Duration, Instant};

use hostcopy_driver::cuda::staging::{Block, Stager, to_device, to_host};
use hostcopy_driver::cuda::{CUDA_ERROR_NO_DEVICE, Context, DeviceBuffer, driver_version};

/// One cache block, and the blocks of the device cache (1 GiB).
const BLOCK: usize = 256 << 10;
const CACHE_BLOCKS: usize = 4096;
/// Blocks of one evicted sequence (128 MiB). The host pool here holds two
/// sequences; a real one is far larger than could be pinned.
const EVICT: usize = 512;

fn main() -> Result<(), Box<dyn Error>> {
    let context = match Context::primary(0) {
        Ok(context) => context,
        Err(error) => {
            let reason = match error.code() {
                _ if error.is_driver_missing() => error.to_string(),
                CUDA_ERROR_NO_DEVICE => format!("no CUDA device ({error})"),
                _ => format!("CUDA unavailable: {error}"),
            };
            if std::env::var_os("HOSTCOPY_REQUIRE_GPU").is_some_and(|v| v == "1") {
                return Err(format!("HOSTCOPY_REQUIRE_GPU=1 but {reason}").into());
            }
            println!("kv_offload: skipped: {reason}");
            return Ok(());
        }
    };
    let mut stager = Stager::new(&context)?;
    // From CUDA 12.8 a batch's blocks take one driver call per chunk.
    let (cuda, name) = (driver_version()?, context.device_name()?);
    println!("{name}, driver CUDA {}.{}", cuda / 1000, cuda % 1000 / 10);

    // The cache, every 8 bytes holding their own index: a block copied to
    // the wrong place never matches.
    let words = 0..CACHE_BLOCKS * BLOCK / 8;
    let image: Vec<u8> = words.flat_map(|w| (w as u64).to_le_bytes()).collect();
    let mut cache = DeviceBuffer::new(&context, CACHE_BLOCKS * BLOCK)?;
    stager.run(to_device(&mut cache, &image))?;
    println!("cache: {CACHE_BLOCKS} blocks of {} KiB", BLOCK >> 10);

    // Block ids: an odd multiplier modulo a power of two permutes them, so
    // these are distinct and scattered: the evicted sequence's block table,
    // a second sequence's, and the blocks newly allocated for the restore.
    let id = |k: usize| (k * 2_654_435_761 + 977) % CACHE_BLOCKS;
    let ids: Vec<usize> = (0..3 * EVICT).map(id).collect();
    let (evicted, rest) = ids.split_at(EVICT);
    let (second, moved) = rest.split_at(EVICT);
    let mut pool = vec![0u8; 2 * EVICT * BLOCK];

    // Offload: the sequence's blocks to pool slots 0..EVICT, one call.
    let start = Instant::now();
    stager.run(to_host(&mut pool, &cache).blocks(&table(evicted, Some(0))))?;
    report("offload (device -> pool)", start.elapsed());
    verify(&pool, &image, evicted)?;

    // Another sequence takes those device blocks: every block written from
    // the same host bytes (sources of a host-to-device batch may overlap).
    let junk = vec![0xEE; BLOCK];
    let overwrite = table(evicted, None);
    let start = Instant::now();
    stager.run(to_device(&mut cache, &junk).blocks(&overwrite))?;
    report("overwrite (junk -> device)", start.elapsed());

    // Restore from pool slots 0..EVICT into newly allocated device blocks.
    let restore = table(moved, Some(0));
    let start = Instant::now();
    stager.run(to_device(&mut cache, &pool).blocks(&restore))?;
    report("restore (pool -> device)", start.elapsed());
    // Read the restored blocks back through the same table to check them.
    let mut check = vec![0u8; EVICT * BLOCK];
    stager.run(to_host(&mut check, &cache).blocks(&restore))?;

    // Non-blocking: a second sequence's offload (to slots EVICT..) starts
    // at once; this thread checks the restore while it runs, then waits.
    // A scope's transfer borrows its blocks, as its memories, for the scope.
    let second_offload = table(second, Some(EVICT));
    let start = Instant::now();
    stager.scope(|s| -> Result<(), Box<dyn Error>> {
        let offload = s.start(to_host(&mut pool, &cache).blocks(&second_offload))?;
        let started = start.elapsed();
        println!("  started in {started:.2?}; checking the restore meanwhile");
        verify(&check, &image, evicted)?;
        offload.wait()?;
        Ok(())
    })??;
    report("offload in a scope, with the check", start.elapsed());
    verify(&pool[EVICT * BLOCK..], &image, second)?;
    Ok(())
}

/// Block `ids[k]` of the cache with host slot `first + k`, or with host
/// offset 0 for every block (`None`).
fn table(ids: &[usize], first: Option<usize>) -> Vec<Block> {
    let slot = |k: usize| first.map_or(0, |first| first + k);
    let block = |(k, &id)| Block::new(id * BLOCK, slot(k) * BLOCK, BLOCK);
    ids.iter().enumerate().map(block).collect()
}

fn report(what: &str, took: Duration) {
    let gb_per_s = (EVICT * BLOCK) as f64 / took.as_secs_f64() / 1e9;
    println!("{what}: {EVICT} blocks in {took:.2?}, {gb_per_s:.1} GB/s");
}

/// Checks that slot `k` of `host` holds cache block `ids[k]` of `image`.
fn verify(host: &[u8], image: &[u8], ids: &[usize]) -> Result<(), String> {
    for (slot, &id) in ids.iter().enumerate() {
        if host[slot * BLOCK..][..BLOCK] != image[id * BLOCK..][..BLOCK] {
            return Err(format!("slot {slot} does not hold block {id}"));
        }
    }
    println!("  verified: {} blocks, every byte as expected", ids.len());
    Ok(())
}
