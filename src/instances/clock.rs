//! The clock a lease is counted with, and the check that the brokers' clock agrees with it
//! (review G13).
//!
//! A lease is "a session since the last heartbeat acknowledged and the last read to the end",
//! counted by this process alone. Which pauses of the process that counting sees:
//!
//! | pause                                            | `CLOCK_MONOTONIC` | [`now`] (adds suspend) | [`BrokerClock`] |
//! |--------------------------------------------------|-------------------|------------------------|-----------------|
//! | SIGSTOP, cgroup freeze, GC-like stalls, swapping | runs              | runs                   | —               |
//! | the machine suspended (laptop lid, `systemctl suspend`) | stands still | runs (`CLOCK_BOOTTIME`) | —            |
//! | a VM stopped with its clock (`virsh suspend`, live migration) | stands still | stands still | at the next heartbeat ack |
//!
//! [`now`] is `Instant::now()` plus the time the machine spent suspended (`CLOCK_BOOTTIME −
//! CLOCK_MONOTONIC` on Linux), so a lease counted with it ends during a suspend exactly as it
//! would while running. A VM stopped with its clock leaves no trace in any local clock; the
//! state topic's broker appends each heartbeat with its own time (`LogAppendTime`), and a
//! broker time that advanced between two heartbeats by more than the local time between the
//! first one's send and the second one's acknowledgement shows a pause this machine did not
//! count: [`BrokerClock::check`] says so and the view voids the lease.
//!
//! Owns: reading local time for leases; comparing broker time with it. Must not touch: the
//! lease's rules (the view's `lease` module decides what a pause voids).

use std::time::{Duration, Instant};

/// How much faster the broker's clock may seem to run than this machine's between two
/// heartbeats (a few seconds apart) before it counts as a pause not seen here: clock rate
/// differences are parts per million, an NTP step of the broker's clock is rarely above this.
pub const BROKER_TOLERANCE: Duration = Duration::from_secs(1);

/// The lease clock's now: monotonic, and counting the time the machine was suspended.
pub fn now() -> Instant {
    #[cfg(test)]
    if let Some(t) = sim::now() {
        return t;
    }
    Instant::now() + suspended()
}

/// The lease clock of a simulation (unit tests only): while set on this thread, [`now`] answers
/// it, so simulated instances run on virtual time (`instances::sim_tests`).
#[cfg(test)]
pub(crate) mod sim {
    use std::cell::Cell;
    use std::time::Instant;

    thread_local! {
        static NOW: Cell<Option<Instant>> = const { Cell::new(None) };
    }

    pub(crate) fn now() -> Option<Instant> {
        NOW.with(Cell::get)
    }

    /// Set (or, with `None`, clear) this thread's simulated lease clock.
    pub(crate) fn set(t: Option<Instant>) {
        NOW.with(|c| c.set(t));
    }
}

/// How long the machine has been suspended since it booted (zero where the OS does not say).
#[cfg(target_os = "linux")]
fn suspended() -> Duration {
    fn read(clock: libc::clockid_t) -> Option<Duration> {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec; clock_gettime only writes into it.
        let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
        (rc == 0).then(|| Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
    }
    match (read(libc::CLOCK_BOOTTIME), read(libc::CLOCK_MONOTONIC)) {
        (Some(boot), Some(mono)) => boot.saturating_sub(mono),
        _ => Duration::ZERO,
    }
}

#[cfg(not(target_os = "linux"))]
fn suspended() -> Duration {
    Duration::ZERO
}

/// The broker time of the last heartbeat's append, against when it was sent here.
#[derive(Debug, Default)]
pub struct BrokerClock {
    last: Option<(i64, Instant)>,
}

impl BrokerClock {
    /// A heartbeat sent at `sent` was acknowledged at `acked` (lease clock), appended by the
    /// broker at `broker_ms` (its `LogAppendTime`; `None` when the state topic keeps the
    /// producer's time). Returns how much longer the broker saw pass since the previous
    /// heartbeat than this machine could have — a pause no local clock counted — when that
    /// exceeds [`BROKER_TOLERANCE`].
    pub fn check(
        &mut self,
        sent: Instant,
        acked: Instant,
        broker_ms: Option<i64>,
    ) -> Option<Duration> {
        let Some(broker_ms) = broker_ms.filter(|t| *t >= 0) else {
            self.last = None;
            return None;
        };
        let previous = self.last.replace((broker_ms, sent));
        let (before_ms, before_sent) = previous?;
        // Both appends happened between their send and their acknowledgement here.
        let local_bound = acked.saturating_duration_since(before_sent);
        let broker = Duration::from_millis(broker_ms.saturating_sub(before_ms).max(0) as u64);
        let unseen = broker.saturating_sub(local_bound);
        (unseen > BROKER_TOLERANCE).then_some(unseen)
    }

    /// Forget the previous heartbeat (the lease was voided: the next one starts the count).
    pub fn forget(&mut self) {
        self.last = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn the_lease_clock_never_runs_behind_the_monotonic_clock() {
        let (mono, lease) = (Instant::now(), now());
        assert!(lease >= mono);
    }

    #[test]
    fn heartbeats_whose_broker_time_advances_with_the_local_time_show_no_pause() {
        let mut c = BrokerClock::default();
        let t0 = Instant::now();
        assert_eq!(c.check(t0, t0 + S / 100, Some(1_000_000)), None);
        assert_eq!(
            c.check(t0 + 3 * S, t0 + 3 * S + S / 50, Some(1_003_010)),
            None
        );
    }

    #[test]
    fn a_broker_time_sixty_seconds_ahead_of_a_standing_local_clock_is_a_pause_not_seen_here() {
        let mut c = BrokerClock::default();
        let t0 = Instant::now();
        c.check(t0, t0 + S / 100, Some(1_000_000));
        // The VM stood still for 60 s with its clock: locally 2.5 s passed, the broker saw 62.5.
        let unseen = c.check(t0 + 2 * S, t0 + 2 * S + S / 2, Some(1_062_500));
        assert!(unseen.is_some_and(|u| u >= 59 * S), "{unseen:?}");
    }

    #[test]
    fn a_state_topic_that_keeps_the_producers_time_gives_no_broker_time_and_no_verdict() {
        let mut c = BrokerClock::default();
        let t0 = Instant::now();
        assert_eq!(c.check(t0, t0, None), None);
        assert_eq!(c.check(t0 + S, t0 + S, Some(-1)), None);
        assert_eq!(c.check(t0 + 2 * S, t0 + 2 * S, Some(5_000_000)), None);
    }
}
