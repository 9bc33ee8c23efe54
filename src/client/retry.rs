//! Retriable answers, and the rule for logging them (a healthy start logs no WARN): a retriable
//! answer is retried quietly (debug); only a failure that lasts is a WARN.
//!
//! - [`is_retriable`]: the Kafka error codes whose exceptions are retriable in the Java client
//!   (a coordinator or a leader that is loading, moving or not elected yet, a timeout, too few
//!   replicas for now). A fresh cluster answers them for its first seconds: InitProducerId with
//!   COORDINATOR_LOAD_IN_PROGRESS until the broker has its first block of producer ids, a new
//!   partition's ListOffsets with NOT_LEADER_OR_FOLLOWER until its leader has taken over,
//!   FindCoordinator with COORDINATOR_NOT_AVAILABLE until `__consumer_offsets` exists.
//! - [`Lasting`]: one failing operation's retries, which says when they stop being passing.
//!
//! Owns: that list and that rule. Must not touch: the retries themselves (their callers').

use std::time::{Duration, Instant};

/// Kafka error codes the brokers answer while they are busy or moving (retriable).
const RETRIABLE: [i16; 17] = [
    3,  // UNKNOWN_TOPIC_OR_PARTITION (a topic just created)
    5,  // LEADER_NOT_AVAILABLE
    6,  // NOT_LEADER_OR_FOLLOWER
    7,  // REQUEST_TIMED_OUT
    9,  // REPLICA_NOT_AVAILABLE
    13, // NETWORK_EXCEPTION
    14, // COORDINATOR_LOAD_IN_PROGRESS
    15, // COORDINATOR_NOT_AVAILABLE
    16, // NOT_COORDINATOR
    19, // NOT_ENOUGH_REPLICAS
    20, // NOT_ENOUGH_REPLICAS_AFTER_APPEND
    51, // CONCURRENT_TRANSACTIONS
    56, // KAFKA_STORAGE_ERROR
    74, // FENCED_LEADER_EPOCH
    75, // UNKNOWN_LEADER_EPOCH
    78, // OFFSET_NOT_AVAILABLE
    89, // THROTTLING_QUOTA_EXCEEDED
];

/// Whether Kafka error `code` is a passing answer (asked again, it may succeed).
pub fn is_retriable(code: i16) -> bool {
    RETRIABLE.contains(&code)
}

/// How long retries of one operation stay quiet (debug) before they are a WARN.
pub const LASTING_AFTER: Duration = Duration::from_secs(30);

/// How a failure of a retried operation is logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Passing (a retriable answer, not for long yet): debug.
    Quiet,
    /// Lasting, or not retriable: a WARN.
    Warn,
}

/// The failures of one retried operation since its last success: quiet while they are
/// retriable and younger than [`LASTING_AFTER`]; once lasting, one WARN, then one every
/// [`LASTING_AFTER`] while they go on.
#[derive(Debug, Default, Clone)]
pub struct Lasting {
    /// When the current run of failures began, and when it was last a WARN.
    failing: Option<(Instant, Option<Instant>)>,
}

impl Lasting {
    /// A failure at `now`; `retriable`: the answer was a passing one (see [`is_retriable`], or a
    /// connection that failed). Says how to log it.
    pub fn failed(&mut self, retriable: bool, now: Instant) -> Level {
        let (since, warned) = self.failing.get_or_insert((now, None));
        let lasting = now.saturating_duration_since(*since) >= LASTING_AFTER;
        let due = warned.is_none_or(|w| now.saturating_duration_since(w) >= LASTING_AFTER);
        if (!retriable || lasting) && due {
            *warned = Some(now);
            Level::Warn
        } else {
            Level::Quiet
        }
    }

    /// The operation succeeded: the next failure starts a new run.
    pub fn succeeded(&mut self) {
        self.failing = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retriable_failure_is_quiet_until_it_lasts_then_warns_once_per_period() {
        let t0 = Instant::now();
        let mut l = Lasting::default();
        assert_eq!(l.failed(true, t0), Level::Quiet);
        assert_eq!(l.failed(true, t0 + Duration::from_secs(29)), Level::Quiet);
        assert_eq!(l.failed(true, t0 + LASTING_AFTER), Level::Warn);
        assert_eq!(l.failed(true, t0 + Duration::from_secs(31)), Level::Quiet);
        assert_eq!(l.failed(true, t0 + 2 * LASTING_AFTER), Level::Warn);
    }

    #[test]
    fn a_success_ends_the_run_of_failures() {
        let t0 = Instant::now();
        let mut l = Lasting::default();
        l.failed(true, t0);
        l.succeeded();
        assert_eq!(l.failed(true, t0 + LASTING_AFTER), Level::Quiet);
    }

    #[test]
    fn a_failure_that_is_not_retriable_warns_at_once() {
        let mut l = Lasting::default();
        assert_eq!(l.failed(false, Instant::now()), Level::Warn);
    }

    #[test]
    fn a_fresh_clusters_first_answers_are_retriable() {
        // InitProducerId before the first id block, a new partition's ListOffsets,
        // FindCoordinator before __consumer_offsets exists.
        for code in [14, 6, 15] {
            assert!(is_retriable(code), "{code}");
        }
        for code in [0, 1, 29, 45, 87] {
            assert!(!is_retriable(code), "{code}");
        }
    }
}
