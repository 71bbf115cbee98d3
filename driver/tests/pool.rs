//! The record pool: stable slot addresses, exhaustion as an error, release
//! from any thread, and no slot lost or handed out twice under contention.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread;

use hostcopy_driver::{HostCopyArgs, PoolError, RecordPool, hostcopy_fn};

#[test]
fn a_held_slot_is_a_user_data_that_hostcopy_fn_runs() {
    static POOL: RecordPool<2> = RecordPool::new();
    let src = [4u8; 32];
    let mut dst = [0u8; 32];
    let args = HostCopyArgs::new(
        dst.as_mut_ptr().expose_provenance(),
        src.as_ptr().expose_provenance(),
        32,
    );
    let slot = POOL.acquire(args).unwrap();
    assert_eq!(slot.args(), args);
    // SAFETY: the slot holds a record of two live arrays.
    unsafe { hostcopy_fn(slot.user_data()) };
    assert_eq!(dst, src);
}

#[test]
fn exhaustion_is_an_error_and_dropping_a_slot_frees_it() {
    let pool: RecordPool<3> = RecordPool::new();
    let held: Vec<_> = (0..3)
        .map(|i| pool.acquire(HostCopyArgs::new(i, i, 0)).unwrap())
        .collect();
    assert_eq!(pool.available(), 0);
    assert_eq!(
        pool.acquire(HostCopyArgs::default()).unwrap_err(),
        PoolError::Exhausted { capacity: 3 }
    );
    let mut indices: Vec<_> = held.iter().map(|slot| slot.index()).collect();
    indices.sort();
    assert_eq!(indices, [0, 1, 2], "each slot handed out once");
    drop(held);
    assert_eq!(pool.available(), 3);
}

#[test]
fn slot_addresses_are_stable_and_distinct() {
    static POOL: RecordPool<8> = RecordPool::new();
    let mut seen = Vec::new();
    for round in 0..3 {
        let slots: Vec<_> = (0..8)
            .map(|_| POOL.acquire(HostCopyArgs::default()).unwrap())
            .collect();
        let mut addresses: Vec<_> = slots
            .iter()
            .map(|s| (s.index(), s.user_data().addr()))
            .collect();
        addresses.sort();
        addresses.dedup_by_key(|(_, addr)| *addr);
        assert_eq!(addresses.len(), 8, "round {round}: distinct addresses");
        if round == 0 {
            seen = addresses;
        } else {
            assert_eq!(addresses, seen, "slot i has the same address every time");
        }
    }
}

#[test]
fn release_refuses_foreign_addresses_and_double_release() {
    static POOL: RecordPool<4> = RecordPool::new();
    static OTHER: RecordPool<4> = RecordPool::new();
    let user_data = POOL
        .acquire(HostCopyArgs::default())
        .unwrap()
        .into_user_data();
    let foreign = OTHER
        .acquire(HostCopyArgs::default())
        .unwrap()
        .into_user_data();

    // SAFETY: addresses of another pool, inside a slot, and past the end are
    // all refused before anything is touched.
    unsafe {
        assert_eq!(
            POOL.release_user_data(foreign),
            Err(PoolError::NotFromThisPool {
                user_data: foreign.addr()
            })
        );
        let inside = user_data.cast::<u8>().add(1).cast();
        assert_eq!(
            POOL.release_user_data(inside),
            Err(PoolError::NotFromThisPool {
                user_data: inside.addr()
            })
        );
        let past_end = user_data.cast::<u8>().wrapping_add(1 << 20).cast();
        assert!(matches!(
            POOL.release_user_data(past_end),
            Err(PoolError::NotFromThisPool { .. })
        ));
    }
    // SAFETY: `user_data` came from `into_user_data` of POOL.
    unsafe { POOL.release_user_data(user_data).unwrap() };
    // SAFETY: the second release is refused without touching the slot.
    let again = unsafe { POOL.release_user_data(user_data) };
    assert!(matches!(again, Err(PoolError::NotHeld { .. })));
    // SAFETY: `foreign` came from `into_user_data` of OTHER.
    unsafe { OTHER.release_user_data(foreign).unwrap() };
}

/// 8 threads take slots and pass their `user_data` to the next thread, which
/// gives them back: every release happens on a thread other than the taker.
/// A flag per slot proves no slot is held twice at once; at the end every
/// slot is free again.
#[test]
fn contention_loses_no_slot_and_never_hands_one_out_twice() {
    const SLOTS: usize = 64;
    const THREADS: usize = 8;
    let cycles: usize = if cfg!(miri) { 400 } else { 1_000_000 };
    static POOL: RecordPool<SLOTS> = RecordPool::new();
    static IN_USE: [AtomicBool; SLOTS] = [const { AtomicBool::new(false) }; SLOTS];
    let released = AtomicUsize::new(0);
    let exhausted = AtomicUsize::new(0);

    let (senders, receivers): (Vec<_>, Vec<_>) = (0..THREADS)
        .map(|_| mpsc::channel::<(usize, usize)>())
        .unzip();
    thread::scope(|scope| {
        for (me, inbox) in receivers.into_iter().enumerate() {
            let next = senders[(me + 1) % THREADS].clone();
            let (released, exhausted) = (&released, &exhausted);
            scope.spawn(move || {
                let release = |(slot, user_data): (usize, usize)| {
                    assert!(
                        IN_USE[slot].swap(false, Ordering::AcqRel),
                        "slot {slot} released while free"
                    );
                    let user_data = std::ptr::with_exposed_provenance_mut(user_data);
                    // SAFETY: taken with `into_user_data` by another thread, released once.
                    unsafe { POOL.release_user_data(user_data) }.unwrap();
                    released.fetch_add(1, Ordering::Relaxed);
                };
                let mut taken = 0;
                while taken < cycles / THREADS {
                    match POOL.acquire(HostCopyArgs::new(me, taken, 0)) {
                        Ok(slot) => {
                            let index = slot.index();
                            assert!(
                                !IN_USE[index].swap(true, Ordering::AcqRel),
                                "slot {index} handed out twice"
                            );
                            next.send((index, slot.into_user_data().expose_provenance()))
                                .unwrap();
                            taken += 1;
                        }
                        Err(PoolError::Exhausted { .. }) => {
                            exhausted.fetch_add(1, Ordering::Relaxed);
                            thread::yield_now();
                        }
                        Err(other) => panic!("{other}"),
                    }
                    while let Ok(taken_slot) = inbox.try_recv() {
                        release(taken_slot);
                    }
                }
                drop(next);
                // Keep releasing until every other thread is done sending.
                while released.load(Ordering::Relaxed) < cycles {
                    match inbox.recv_timeout(std::time::Duration::from_millis(1)) {
                        Ok(taken_slot) => release(taken_slot),
                        Err(mpsc::RecvTimeoutError::Timeout) => {}
                        Err(mpsc::RecvTimeoutError::Disconnected) => break,
                    }
                }
            });
        }
        drop(senders);
    });

    assert_eq!(released.load(Ordering::Relaxed), cycles);
    assert_eq!(POOL.available(), SLOTS, "no slot lost");
    let all: Vec<_> = (0..SLOTS)
        .map(|_| POOL.acquire(HostCopyArgs::default()).unwrap())
        .collect();
    assert_eq!(all.len(), SLOTS);
    println!(
        "{cycles} cycles, {} exhausted attempts",
        exhausted.load(Ordering::Relaxed)
    );
}
