//! What a long-lived stager holds does not grow with the transfers it
//! made: the live heap of this process (a counting allocator, so this is a
//! binary of its own) is measured after a warm-up and after thousands more
//! transfers, against the simulated driver.

#![cfg(all(feature = "cuda", feature = "simulator"))]

mod sim_support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use hostcopy_driver::cuda::DeviceBuffer;
use hostcopy_driver::cuda::staging::{MIN_CHUNK, to_host};
use sim_support::{device, scaled};

/// The system allocator, counting the bytes allocated and not yet freed.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards every call to `System` unchanged; the counter is only
// arithmetic beside it.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's obligations are `System`'s.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's obligations are `System`'s.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

/// Before, a scope kept one slot (about 80 bytes) for every transfer it
/// had waited for, until the scope returned.
#[test]
fn a_long_lived_scope_holds_no_more_after_thousands_of_transfers_it_waited_for() {
    let device = device();
    // Every transfer staged (none on the driver's path), so that each
    // takes a slot of the scope.
    let mut stager = device.stager(sim_support::options(MIN_CHUNK, 2, 1).driver_path_below(0));
    let source = DeviceBuffer::new(&device.context, 64).unwrap();
    let (warm_up, rounds) = (scaled(200, 10), scaled(3000, 60));
    // A scope's transfer borrows its buffer for the whole scope: one piece
    // of one allocation each.
    let mut host = vec![0u8; 64 * (warm_up + rounds)];
    let mut after_warm_up = 0;
    let mut grown = 0;
    stager
        .scope(|scope| {
            for (round, piece) in host.chunks_mut(64).enumerate() {
                let transfer = scope.start(to_host(piece, &source)).unwrap();
                transfer.wait().unwrap();
                if round + 1 == warm_up {
                    after_warm_up = live();
                }
            }
            grown = live() - after_warm_up;
        })
        .unwrap();
    // A few hundred bytes of slack for the simulator's own bookkeeping;
    // one slot per transfer would be tens of KiB.
    assert!(
        grown < 2048,
        "the heap grew {grown} bytes over {rounds} transfers in one scope"
    );
    drop(stager);
    device.assert_no_violations();
}
