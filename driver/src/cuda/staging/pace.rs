//! When a blocking transfer of direct copies alone wakes to poll for them.
//!
//! A wait asleep in the driver (a blocking-sync event) wakes late, after an
//! interrupt: one H100 host took a 16 MiB copy of registered memory at
//! 73-75% of a pinned copy's speed that way, and at 99-100% polled. Polling
//! throughout costs a core for the whole copy. So the wait sleeps (a plain
//! sleep) until shortly before the copies are due, polls their completion
//! event, and sleeps in the driver on it only past a polling budget or
//! once the copies are seen not to have begun (copies queued behind other
//! work). Polling a blocking-sync event sees the copies done as soon as
//! a plain one does (2 us later at the median, an H100 host, run 110).
//!
//! When they are due comes from how long earlier copies of about the same
//! size ran on the GPU: from a timing event recorded just before them to
//! their completion event (which times too), read once they have run,
//! whether the wait polled or slept in the driver. That time leaves out
//! work queued before them and every host wake-up, so it neither grows behind a
//! kernel nor depends on whether the wait polled. One rate per direction
//! and size class (a power of two from 1 MiB), the latest timed: within a
//! class the estimate is off by at most the copies' fixed latency (tens of
//! microseconds), less than the wait wakes early by; across classes it is
//! not (16 MiB copies timed with 20 us of latency make 1 GiB copies look
//! longer than they are), so a class with no rate of its own borrows a
//! larger class's (which wakes it early) before a smaller one's (which it
//! wakes by at three quarters of the time). With no rate at all in its
//! direction a wait sleeps in the driver: one late wake, and its copies
//! are timed.
//!
//! A plain sleep wakes late by the host's timer slack and more on a busy
//! host; how late the waits' sleeps woke (smoothed) is taken off the next
//! sleep, up to half of it, so that a wait still sleeps (and so keeps
//! measuring how late it wakes) however late one sleep woke.
//!
//! Copies below 1 MiB are neither timed nor slept for: their latency is
//! their time, and they are polled at once.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::Direction;

/// How long before its direct copies are due a wait wakes to poll for
/// them, besides how late its sleep is expected to wake: the copies'
/// latency from queuing to running and back (tens of microseconds),
/// with room to spare.
const WAKE_EARLY: Duration = Duration::from_micros(100);

/// How long after their queuing copies queued behind nothing have begun
/// on the GPU, with room to spare (the driver submits them in
/// microseconds): copies not begun past it wait for other work first, and
/// their wait sleeps in the driver.
pub(super) const BEGUN_BY: Duration = Duration::from_micros(100);

/// How long a wait polls at least before it sleeps in the driver instead
/// (copies queued behind other work, which come later than due).
const DIRECT_POLLS: Duration = Duration::from_millis(1);

/// The longest a wait sleeps before it polls, whatever the rate.
const LONGEST_SLEEP: Duration = Duration::from_millis(50);

/// The most a sleep is taken to wake late by: a sleep that woke later
/// (the thread preempted) counts as this late.
const LATEST_WAKE: Duration = Duration::from_millis(1);

/// The smallest copies timed, and the first size class: below it the
/// copies' latency is their time, and they are polled at once.
const SMALLEST: usize = 1 << 20;

/// Size classes, powers of two from [`SMALLEST`]; the last takes every
/// larger size.
const CLASSES: usize = 16;

/// Whether `bytes` of copies are timed (and their wait paced).
pub(super) fn timed(bytes: usize) -> bool {
    class(bytes).is_some()
}

/// The class of `bytes` of copies, `None` below [`SMALLEST`].
fn class(bytes: usize) -> Option<usize> {
    if bytes < SMALLEST {
        return None;
    }
    let above = (bytes / SMALLEST).ilog2() as usize;
    Some(above.min(CLASSES - 1))
}

/// What blocking transfers' direct copies alone have shown, one per
/// stager: their rates on the GPU, in bytes a second, per direction and
/// size class (0: not known), and how late the waits' sleeps woke.
#[derive(Debug, Default)]
pub(super) struct Rates {
    rates: [[AtomicU64; CLASSES]; 2],
    /// Nanoseconds, smoothed over the waits' sleeps.
    late: AtomicU64,
}

/// How a wait for direct copies goes, from just before they were queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Pace {
    /// Until when after their queuing it sleeps before it polls.
    pub(super) wake: Duration,
    /// How long it polls at most before it sleeps in the driver (zero: it
    /// queries once, then sleeps there).
    pub(super) polls: Duration,
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
/// time), the rates of their direction being `rates` and a sleep expected
/// to wake `late` (taken off the sleep, up to half of it).
fn pace(rates: &[u64; CLASSES], class: Option<usize>, bytes: usize, late: Duration) -> Pace {
    let Some(class) = class else {
        return Pace {
            wake: Duration::ZERO,
            polls: DIRECT_POLLS,
        };
    };
    let due = |rate: u64| Duration::from_secs_f64(bytes as f64 / rate as f64);
    let wake = match known(rates, class) {
        Known::Near(rate) => due(rate).saturating_sub(WAKE_EARLY),
        Known::Smaller(rate) => due(rate) * 3 / 4,
        Known::Unknown => {
            return Pace {
                wake: Duration::ZERO,
                polls: Duration::ZERO,
            };
        }
    };
    let wake = (wake - late.min(wake / 2)).min(LONGEST_SLEEP);
    Pace {
        wake,
        polls: DIRECT_POLLS.max(wake / 2),
    }
}

/// The rate of `bytes` of copies that ran `ms` on the GPU, at least 1.
fn rate(bytes: usize, ms: f32) -> u64 {
    let rate = bytes as f64 / (f64::from(ms) / 1e3).max(1e-9);
    // `as` saturates a rate beyond `u64::MAX`.
    (rate as u64).max(1)
}

/// How late sleeps are taken to wake once a sleep woke `sample` late,
/// having been taken to wake `late`: a quarter of the way to it.
fn smoothed(late: Duration, sample: Duration) -> Duration {
    let sample = sample.min(LATEST_WAKE);
    if sample >= late {
        late + (sample - late) / 4
    } else {
        late - (late - sample) / 4
    }
}

impl Rates {
    /// How a wait for `bytes` of direct copies `direction` goes.
    pub(super) fn pace(&self, direction: Direction, bytes: usize) -> Pace {
        let rates = self.rates[index(direction)]
            .each_ref()
            .map(|rate| rate.load(Ordering::Relaxed));
        let late = Duration::from_nanos(self.late.load(Ordering::Relaxed));
        pace(&rates, class(bytes), bytes, late)
    }

    /// `bytes` of direct copies `direction` ran `ms` on the GPU.
    pub(super) fn note_copies(&self, direction: Direction, bytes: usize, ms: f32) {
        if let Some(class) = class(bytes)
            && ms.is_finite()
            && ms >= 0.0
        {
            self.rates[index(direction)][class].store(rate(bytes, ms), Ordering::Relaxed);
        }
    }

    /// A wait's sleep, asked to end at `until`, ended at `woke`.
    pub(super) fn note_sleep(&self, until: Instant, woke: Instant) {
        let late = Duration::from_nanos(self.late.load(Ordering::Relaxed));
        let next = smoothed(late, woke.saturating_duration_since(until));
        // At most `LATEST_WAKE`: far below `u64::MAX` nanoseconds.
        self.late.store(next.as_nanos() as u64, Ordering::Relaxed);
    }
}

/// A direction's index in [`Rates`].
fn index(direction: Direction) -> usize {
    match direction {
        Direction::DeviceToHost => 0,
        Direction::HostToDevice => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::super::Direction;
    use super::{
        CLASSES, DIRECT_POLLS, Duration, Instant, LATEST_WAKE, LONGEST_SLEEP, Rates, WAKE_EARLY,
        class, pace, smoothed,
    };

    const GB: u64 = 1_000_000_000;

    fn rates(known: &[(usize, u64)]) -> [u64; CLASSES] {
        let mut rates = [0; CLASSES];
        for &(class, rate) in known {
            rates[class] = rate;
        }
        rates
    }

    /// Within a microsecond of `expected`, and not after it.
    fn near(wake: Duration, expected: Duration) -> bool {
        wake <= expected && wake + Duration::from_micros(1) >= expected
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
    /// in its direction it sleeps in the driver at once; small copies are
    /// polled at once.
    #[test]
    fn a_wait_wakes_shortly_before_its_copies_are_due() {
        // 16 MiB at 50 GB/s: due after 335.5 us.
        let own = pace(&rates(&[(4, 50 * GB)]), Some(4), 16 << 20, Duration::ZERO);
        assert!(near(own.wake, Duration::from_nanos(335_544) - WAKE_EARLY));
        assert_eq!(own.polls, DIRECT_POLLS);
        // 1 GiB at 50 GB/s: 21.5 ms, polled for up to half the sleep.
        let large = pace(&rates(&[(10, 50 * GB)]), Some(10), 1 << 30, Duration::ZERO);
        assert!(large.polls > Duration::from_millis(10));
        // Nothing known: in the driver at once.
        let unknown = pace(&rates(&[]), Some(10), 1 << 30, Duration::ZERO);
        assert_eq!(
            (unknown.wake, unknown.polls),
            (Duration::ZERO, Duration::ZERO)
        );
        // Below 1 MiB: polled at once, for `DIRECT_POLLS`.
        let small = pace(&rates(&[(0, 50 * GB)]), class(4096), 4096, Duration::ZERO);
        assert_eq!((small.wake, small.polls), (Duration::ZERO, DIRECT_POLLS));
        // 1 MiB at 1 byte a second would be 12 days: `LONGEST_SLEEP`.
        let slow = pace(&rates(&[(0, 1)]), Some(0), 1 << 20, Duration::ZERO);
        assert_eq!(slow.wake, LONGEST_SLEEP);
    }

    /// A sleep expected to wake late is shortened by as much, up to half:
    /// a wait still sleeps, and so goes on measuring how late it wakes.
    #[test]
    fn a_wait_sleeps_less_by_how_late_sleeps_wake_up_to_half() {
        let known = rates(&[(4, 50 * GB)]);
        let on_time = pace(&known, Some(4), 16 << 20, Duration::ZERO);
        let late = Duration::from_micros(70);
        assert_eq!(
            pace(&known, Some(4), 16 << 20, late).wake,
            on_time.wake - late
        );
        let later = pace(&known, Some(4), 16 << 20, Duration::from_millis(1));
        assert_eq!(later.wake, on_time.wake - on_time.wake / 2);
        assert!(!later.wake.is_zero());
    }

    /// A class with no rate of its own takes the nearest larger class's
    /// (waking early by about the copies' latency) before the nearest
    /// smaller one's, which it wakes by at three quarters of the time: a
    /// rate timed on 16 MiB copies, latency included, applied to 1 GiB
    /// would wake it after the copies are done.
    #[test]
    fn a_class_without_a_rate_borrows_a_larger_before_a_smaller() {
        let at = |bytes: u64, rate: u64| Duration::from_secs_f64(bytes as f64 / rate as f64);
        // The nearest larger class (8, 50 GB/s), not a farther one (12) nor
        // a smaller one (4).
        let known = [(4, 40 * GB), (8, 50 * GB), (12, 60 * GB)];
        let larger = pace(&rates(&known), Some(6), 64 << 20, Duration::ZERO);
        assert!(near(larger.wake, at(64 << 20, 50 * GB) - WAKE_EARLY));
        // Its own class before any other.
        let own = pace(
            &rates(&[(6, 40 * GB), (8, 50 * GB)]),
            Some(6),
            64 << 20,
            Duration::ZERO,
        );
        assert!(near(own.wake, at(64 << 20, 40 * GB) - WAKE_EARLY));
        // None larger: the nearest smaller class (4, 50 GB/s), not class 2.
        let smaller = pace(
            &rates(&[(2, 25 * GB), (4, 50 * GB)]),
            Some(10),
            1 << 30,
            Duration::ZERO,
        );
        assert!(near(smaller.wake, at(1 << 30, 50 * GB) * 3 / 4));
        assert!(smaller.polls >= at(1 << 30, 50 * GB) * 3 / 8);
    }

    /// The copies' time on the GPU sets their class's rate, the latest
    /// kept (lower and higher alike), each direction apart; copies below
    /// 1 MiB and times that are no times set nothing.
    #[test]
    fn the_latest_time_on_the_gpu_sets_the_rate() {
        let table = Rates::default();
        let to_host = Direction::DeviceToHost;
        let first = table.pace(to_host, 64 << 20);
        assert_eq!(first.polls, Duration::ZERO);
        // 64 MiB in 1.342 ms: 50 GB/s.
        let at_50 = Duration::from_secs_f64((64u64 << 20) as f64 / (50 * GB) as f64);
        let wake_after = |ms| {
            table.note_copies(to_host, 64 << 20, ms);
            table.pace(to_host, 64 << 20).wake
        };
        assert!(near(wake_after(1.342_177), at_50 - WAKE_EARLY));
        // The other direction is apart.
        let other = table.pace(Direction::HostToDevice, 64 << 20);
        assert_eq!(other.polls, Duration::ZERO);
        // Slower, then faster: each kept.
        assert!(near(wake_after(2.684_354), at_50 * 2 - WAKE_EARLY));
        assert!(near(wake_after(1.342_177), at_50 - WAKE_EARLY));
        // Nothing from copies too small, nor from a time that is none.
        let untimed = Rates::default();
        untimed.note_copies(to_host, 4096, 0.001);
        untimed.note_copies(to_host, 64 << 20, f32::NAN);
        untimed.note_copies(to_host, 64 << 20, -1.0);
        assert_eq!(untimed.pace(to_host, 1 << 20).polls, Duration::ZERO);
        // A time of zero is the fastest rate, not a division by zero.
        untimed.note_copies(to_host, 64 << 20, 0.0);
        assert_eq!(untimed.pace(to_host, 64 << 20).wake, Duration::ZERO);
        assert_eq!(untimed.pace(to_host, 64 << 20).polls, DIRECT_POLLS);
    }

    /// How late sleeps wake moves a quarter of the way to each sleep's
    /// lateness, a sleep later than `LATEST_WAKE` counting as that late;
    /// a sleep that woke early counts as on time.
    #[test]
    fn how_late_sleeps_wake_is_smoothed_and_bounded() {
        let us = Duration::from_micros;
        assert_eq!(smoothed(Duration::ZERO, us(200)), us(50));
        assert_eq!(smoothed(us(100), Duration::ZERO), us(75));
        assert_eq!(
            smoothed(Duration::ZERO, Duration::from_secs(1)),
            LATEST_WAKE / 4
        );
        let table = Rates::default();
        let until = Instant::now();
        table.note_sleep(until, until + us(400));
        table.note_copies(Direction::DeviceToHost, 16 << 20, 0.335_544);
        let paced = table.pace(Direction::DeviceToHost, 16 << 20);
        assert!(near(
            paced.wake,
            us(335) + Duration::from_nanos(544) - WAKE_EARLY - us(100)
        ));
        // Woke before it was asked to: on time.
        table.note_sleep(until + us(10), until);
        let later = table.pace(Direction::DeviceToHost, 16 << 20);
        assert!(near(
            later.wake,
            us(335) + Duration::from_nanos(544) - WAKE_EARLY - us(75)
        ));
    }
}
