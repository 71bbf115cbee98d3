//! When a blocking transfer of direct copies alone wakes to poll for them.
//!
//! A wait asleep in the driver (a blocking-sync event) wakes late, after an
//! interrupt: one H100 host took a 16 MiB copy of registered memory at
//! 73-75% of a pinned copy's speed that way, and at 99-100% polled. Polling
//! throughout costs a core for the whole copy. So the wait sleeps (a plain
//! sleep) until shortly before the copies are due, polls, and sleeps in the
//! driver only past a polling budget (copies queued behind other work).
//!
//! When they are due comes from how long earlier copies of about the same
//! size took the same way: one rate per direction and size class (a power
//! of two from 1 MiB). Within a class the estimate is off by at most the
//! copies' fixed latency (tens of microseconds), less than the wait wakes
//! early by; across classes it is not (16 MiB copies timed at 50 GB/s, with
//! 20 us of latency, make 1 GiB copies look 1.3 ms longer than they are),
//! so a class with no rate of its own borrows a larger class's (which wakes
//! it early) before a smaller one's (which it wakes by at three quarters of
//! the time).
//!
//! A copy's time runs from just before it was queued, so a rate is never
//! faster than the copies ran; the wait that timed it keeps it for the
//! class (the latest, not the fastest, so that a rate raised after an
//! oversleep comes down again). A wait that slept and finds its copies done
//! at its first poll may have slept past them: the class's rate is raised
//! by an eighth.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::Direction;

/// How long before its direct copies are due a wait wakes to poll for
/// them: more than a plain sleep overshoots (Linux's default timer slack,
/// 50 us).
const WAKE_EARLY: Duration = Duration::from_micros(100);

/// How long a wait polls at least before it sleeps in the driver instead
/// (copies queued behind other work, which come later than due).
const DIRECT_POLLS: Duration = Duration::from_millis(1);

/// The longest a wait sleeps before it polls, whatever the rate, and the
/// longest it polls where no rate is known: what a wrong rate, or copies
/// queued behind other work, can cost one transfer.
const LONGEST_SLEEP: Duration = Duration::from_millis(50);

/// The smallest copies timed, and the first size class: below it the
/// copies' latency is their time, and they are polled at once.
const SMALLEST: usize = 1 << 20;

/// Size classes, powers of two from [`SMALLEST`]; the last takes every
/// larger size.
const CLASSES: usize = 16;

/// The class of `bytes` of copies, `None` below [`SMALLEST`].
fn class(bytes: usize) -> Option<usize> {
    if bytes < SMALLEST {
        return None;
    }
    let above = (bytes / SMALLEST).ilog2() as usize;
    Some(above.min(CLASSES - 1))
}

/// The rates of blocking transfers' direct copies alone, in bytes a second,
/// per direction and size class (0: not known): one per stager.
#[derive(Debug, Default)]
pub(super) struct Rates {
    rates: [[AtomicU64; CLASSES]; 2],
}

/// How a wait for direct copies goes, from just before they were queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Pace {
    /// Until when after their queuing it sleeps before it polls.
    pub(super) wake: Duration,
    /// How long it polls at most before it sleeps in the driver.
    pub(super) polls: Duration,
    /// Its copies' class, and the rate it woke by (0: it did not sleep);
    /// `None`: copies too small to be timed.
    learns: Option<(usize, u64)>,
}

/// Where a class's rate came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Known {
    /// Its own, or the nearest larger class's: its copies are due then, or
    /// a little sooner.
    Near(u64),
    /// The nearest smaller class's: its copies may come sooner by more than
    /// the wait wakes early by.
    Smaller(u64),
    /// None.
    Unknown,
}

/// The rate a wait for copies of `class` goes by.
fn known(rates: &[u64; CLASSES], class: usize) -> Known {
    if let Some(&rate) = rates[class..].iter().find(|&&rate| rate != 0) {
        return Known::Near(rate);
    }
    match rates[..class].iter().rev().find(|&&rate| rate != 0) {
        Some(&rate) => Known::Smaller(rate),
        None => Known::Unknown,
    }
}

/// The pace of a wait for `bytes` of copies of `class` (`None`: too few to
/// time), the rates of their direction being `rates`.
fn pace(rates: &[u64; CLASSES], class: Option<usize>, bytes: usize) -> Pace {
    let Some(class) = class else {
        return Pace {
            wake: Duration::ZERO,
            polls: DIRECT_POLLS,
            learns: None,
        };
    };
    let due = |rate: u64| Duration::from_secs_f64(bytes as f64 / rate as f64);
    let (wake, rate) = match known(rates, class) {
        Known::Near(rate) => (due(rate).saturating_sub(WAKE_EARLY), rate),
        Known::Smaller(rate) => (due(rate) * 3 / 4, rate),
        Known::Unknown => {
            return Pace {
                wake: Duration::ZERO,
                polls: LONGEST_SLEEP,
                learns: Some((class, 0)),
            };
        }
    };
    let wake = wake.min(LONGEST_SLEEP);
    Pace {
        wake,
        polls: DIRECT_POLLS.max(wake / 2),
        learns: Some((class, if wake.is_zero() { 0 } else { rate })),
    }
}

/// What a wait tells of the rate, having `polled` unfinished before a poll
/// saw its `bytes` done, `took` after they were queued: the class's new
/// rate, if any.
fn learned(pace: &Pace, bytes: usize, polled: u32, took: Duration) -> Option<(usize, u64)> {
    let (class, slept_by) = pace.learns?;
    if polled > 0 {
        // Seen unfinished, then done: timed.
        let rate = bytes as f64 / took.as_secs_f64().max(1e-9);
        // `as` saturates a rate beyond `u64::MAX`; at least 1.
        return Some((class, (rate as u64).max(1)));
    }
    // Done at its first poll after a sleep: perhaps slept past them.
    (slept_by != 0).then(|| (class, slept_by.saturating_add(slept_by / 8)))
}

impl Rates {
    /// How a wait for `bytes` of direct copies `direction` goes.
    pub(super) fn pace(&self, direction: Direction, bytes: usize) -> Pace {
        let rates = self.rates[index(direction)]
            .each_ref()
            .map(|rate| rate.load(Ordering::Relaxed));
        pace(&rates, class(bytes), bytes)
    }

    /// A wait paced by `pace` saw its `bytes` of copies `direction` done
    /// after `polled` polls saw them unfinished, `took` after they were
    /// queued.
    pub(super) fn note(
        &self,
        direction: Direction,
        pace: &Pace,
        bytes: usize,
        polled: u32,
        took: Duration,
    ) {
        if let Some((class, rate)) = learned(pace, bytes, polled, took) {
            self.rates[index(direction)][class].store(rate, Ordering::Relaxed);
        }
    }
}

/// A direction's index in [`Rates`].
fn index(direction: Direction) -> usize {
    match direction {
        Direction::DeviceToHost => 0,
        Direction::HostToDevice => 1,
    }
}

/// How long from `now` until `pace` wakes, for copies queued at `queued`.
pub(super) fn asleep(pace: &Pace, queued: Instant, now: Instant) -> Duration {
    (queued + pace.wake).saturating_duration_since(now)
}

#[cfg(test)]
mod tests {
    use super::super::Direction;
    use super::{
        CLASSES, DIRECT_POLLS, Duration, Instant, LONGEST_SLEEP, Pace, Rates, WAKE_EARLY, asleep,
        class, learned, pace,
    };

    const GB: u64 = 1_000_000_000;

    fn rates(known: &[(usize, u64)]) -> [u64; CLASSES] {
        let mut rates = [0; CLASSES];
        for &(class, rate) in known {
            rates[class] = rate;
        }
        rates
    }

    /// Classes are powers of two from 1 MiB, the last open-ended; smaller
    /// copies are not classed.
    #[test]
    fn classes_are_powers_of_two_from_one_mib() {
        assert_eq!(class((1 << 20) - 1), None);
        assert_eq!(class(1 << 20), Some(0));
        assert_eq!(class((2 << 20) - 1), Some(0));
        assert_eq!(class(16 << 20), Some(4));
        assert_eq!(class((32 << 20) - 1), Some(4));
        assert_eq!(class(1 << 30), Some(10));
        assert_eq!(class(usize::MAX), Some(CLASSES - 1));
    }

    /// With its class's rate a wait sleeps until `WAKE_EARLY` before the
    /// copies are due and polls at least `DIRECT_POLLS`; with none known
    /// it polls from the start, for up to `LONGEST_SLEEP`; small copies
    /// are polled at once and never timed.
    #[test]
    fn a_wait_wakes_shortly_before_its_copies_are_due() {
        // 16 MiB at 50 GB/s: due after 335.5 us.
        let own = pace(&rates(&[(4, 50 * GB)]), Some(4), 16 << 20);
        let due = Duration::from_nanos(335_544);
        assert!(own.wake <= due - WAKE_EARLY);
        assert!(own.wake + Duration::from_micros(1) >= due - WAKE_EARLY);
        assert_eq!(own.polls, DIRECT_POLLS);
        // 1 GiB at 50 GB/s: 21.5 ms, polled for up to half the sleep.
        let large = pace(&rates(&[(10, 50 * GB)]), Some(10), 1 << 30);
        assert!(large.polls > Duration::from_millis(10));
        // Nothing known: polled from the start, long enough to be timed.
        let unknown = pace(&rates(&[]), Some(10), 1 << 30);
        assert_eq!(
            (unknown.wake, unknown.polls),
            (Duration::ZERO, LONGEST_SLEEP)
        );
        // Below 1 MiB: polled at once, for `DIRECT_POLLS`.
        let small = pace(&rates(&[(0, 50 * GB)]), class(4096), 4096);
        assert_eq!((small.wake, small.polls), (Duration::ZERO, DIRECT_POLLS));
        assert_eq!(learned(&small, 4096, 3, Duration::from_micros(9)), None);
        // 1 MiB at 1 byte a second would be 12 days: `LONGEST_SLEEP`.
        let slow = pace(&rates(&[(0, 1)]), Some(0), 1 << 20);
        assert_eq!(slow.wake, LONGEST_SLEEP);
    }

    /// A class with no rate of its own takes the nearest larger class's
    /// (waking early by about the copies' latency) before the nearest
    /// smaller one's, which it wakes by at three quarters of the time: a
    /// rate timed on 16 MiB copies, latency included, applied to 1 GiB
    /// would wake it after the copies are done.
    #[test]
    fn a_class_without_a_rate_borrows_a_larger_before_a_smaller() {
        // The nearest larger class (8, 50 GB/s), not a farther one (12) nor
        // a smaller one (4).
        let known = [(4, 40 * GB), (8, 50 * GB), (12, 60 * GB)];
        let larger = pace(&rates(&known), Some(6), 64 << 20);
        let at_50 = Duration::from_secs_f64((64u64 << 20) as f64 / (50 * GB) as f64);
        assert!(larger.wake <= at_50 - WAKE_EARLY);
        assert!(larger.wake + Duration::from_micros(1) >= at_50 - WAKE_EARLY);
        // Its own class before any other.
        let own = pace(&rates(&[(6, 40 * GB), (8, 50 * GB)]), Some(6), 64 << 20);
        let at_40 = Duration::from_secs_f64((64u64 << 20) as f64 / (40 * GB) as f64);
        assert!(own.wake + Duration::from_micros(1) >= at_40 - WAKE_EARLY);
        // None larger: the nearest smaller class (4, 50 GB/s), not class 2.
        let smaller = pace(&rates(&[(2, 25 * GB), (4, 50 * GB)]), Some(10), 1 << 30);
        let at_50 = Duration::from_secs_f64((1u64 << 30) as f64 / (50 * GB) as f64);
        assert!(smaller.wake <= at_50 * 3 / 4);
        assert!(smaller.wake + Duration::from_micros(1) >= at_50 * 3 / 4);
        assert!(smaller.polls >= at_50 * 3 / 8);
    }

    /// A wait that saw its copies unfinished, then done, keeps their rate
    /// for the class (the latest, lower too); one that slept and found them
    /// done at its first poll raises the rate it slept by an eighth; one
    /// that polled from the start and found them done at once learns
    /// nothing.
    #[test]
    fn a_wait_keeps_the_rate_it_timed_and_raises_one_it_overslept() {
        let table = Rates::default();
        let to_host = Direction::DeviceToHost;
        let first = table.pace(to_host, 64 << 20);
        assert_eq!(first.wake, Duration::ZERO);
        // 64 MiB seen unfinished, done 1.342 ms after queuing: 50 GB/s.
        table.note(
            to_host,
            &first,
            64 << 20,
            5,
            Duration::from_nanos(1_342_177),
        );
        let timed = table.pace(to_host, 64 << 20);
        let rate = |pace: &Pace| pace.learns.unwrap().1;
        assert!((rate(&timed) as i64 - (50 * GB) as i64).abs() < 100_000);
        // The other direction, and other classes' own rates, are apart.
        assert_eq!(
            table.pace(Direction::HostToDevice, 64 << 20).wake,
            Duration::ZERO
        );
        // Slept, then done at the first poll: an eighth faster.
        table.note(to_host, &timed, 64 << 20, 0, Duration::from_millis(2));
        let raised = table.pace(to_host, 64 << 20);
        assert_eq!(rate(&raised), rate(&timed) + rate(&timed) / 8);
        // Timed again, slower: kept, lower.
        table.note(
            to_host,
            &raised,
            64 << 20,
            2,
            Duration::from_nanos(1_491_308),
        );
        let lower = table.pace(to_host, 64 << 20);
        assert!((rate(&lower) as i64 - (45 * GB) as i64).abs() < 100_000);
        // Polled from the start and done at once: nothing learned.
        let other = Rates::default();
        let unknown = other.pace(to_host, 64 << 20);
        other.note(to_host, &unknown, 64 << 20, 0, Duration::from_millis(2));
        assert_eq!(other.pace(to_host, 64 << 20).wake, Duration::ZERO);
    }

    /// The sleep left is counted from the queuing.
    #[test]
    fn the_sleep_left_counts_from_the_queuing() {
        let queued = Instant::now();
        let paced = pace(&rates(&[(4, 50 * GB)]), Some(4), 16 << 20);
        let later = queued + Duration::from_micros(200);
        assert_eq!(
            asleep(&paced, queued, later),
            paced.wake - Duration::from_micros(200)
        );
        assert_eq!(
            asleep(&paced, queued, queued + Duration::from_secs(1)),
            Duration::ZERO
        );
    }
}
