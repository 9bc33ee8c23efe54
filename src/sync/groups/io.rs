//! The group offset sync's seam: what a round needs from the clusters, the agent and the
//! controller ([`GroupIo`]), the types it speaks in, and how a retriable failure is asked again
//! ([`retried`]). The rules of a round (`policy.rs`) and the consistent cut (`cut.rs`) both use
//! it; the requests themselves are `kafka_io.rs`'s.
//!
//! Owns: that interface. Must not touch: the rules, sockets.

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::client::retry::is_retriable;
use crate::mirror::offset_map::PartitionMap;

/// A topic partition.
pub type Tp = (String, i32);

/// A request of the sync failed: its text says which and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct IoError {
    pub message: String,
    /// Asking again may succeed: an answer Kafka calls retriable, or a connection that failed.
    pub retriable: bool,
}

impl IoError {
    /// A failure that asking again does not mend.
    pub fn fatal(message: impl Into<String>) -> Self {
        IoError {
            message: message.into(),
            retriable: false,
        }
    }

    /// A passing failure (a connection, a leader or a coordinator not known yet).
    pub fn retriable(message: impl Into<String>) -> Self {
        IoError {
            message: message.into(),
            retriable: true,
        }
    }

    /// An answer with Kafka error `code`: retriable as Kafka says.
    pub fn answer(code: i16, message: impl Into<String>) -> Self {
        IoError {
            message: message.into(),
            retriable: is_retriable(code),
        }
    }
}

/// Whether a failure may be asked again.
pub trait Retriable {
    fn is_retriable(&self) -> bool;
}

impl Retriable for IoError {
    fn is_retriable(&self) -> bool {
        self.retriable
    }
}

/// The first wait before a retriable failure is asked again; doubled up to [`RETRY_MAX_WAIT`].
const RETRY_FIRST_WAIT: Duration = Duration::from_millis(100);
const RETRY_MAX_WAIT: Duration = Duration::from_secs(1);

/// `op` until it succeeds, fails for good, or its next attempt would start after `until`.
/// Retriable failures are logged at debug (a healthy start logs no WARN).
pub async fn retried<T, E, F, Fut>(until: Instant, what: &str, mut op: F) -> Result<T, E>
where
    E: Retriable + std::fmt::Display,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let mut wait = RETRY_FIRST_WAIT;
    loop {
        match op().await {
            Err(e) if e.is_retriable() && Instant::now() + wait < until => {
                tracing::debug!(error = %e, ?wait, "group sync: {what}: a passing failure; asked again");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(RETRY_MAX_WAIT);
            }
            r => return r,
        }
    }
}

/// Whether a transactional batch or marker lies in a range of source records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scan {
    /// None: the range was read to its end.
    Clean,
    /// One at least.
    Transactional,
    /// Not read to its end (too much to read in one round, records deleted, an error).
    Unknown,
}

/// Which round runs: the periodic one, or the last one at fencing time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoundKind {
    Periodic,
    Final,
}

/// What a commit on the destination did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitOutcome {
    Committed,
    /// The destination refused it because the group has members (it became active since it
    /// was listed).
    GroupActive,
}

/// What the sync needs from the clusters, the agent and the controller.
pub trait GroupIo: Send + Sync {
    /// Whether `topic` belongs to this mirror.
    fn owns(&self, topic: &str) -> bool;
    /// The agent's offset map of a partition (none before anything was mirrored).
    fn partition_map(&self, topic: &str, partition: i32) -> Option<PartitionMap>;
    /// Whether a partition may be synced in a round of `kind`.
    fn may_sync(&self, topic: &str, partition: i32, kind: RoundKind) -> bool;
    /// The consumer groups of the source (classic and consumer protocol).
    fn source_groups(&self) -> impl Future<Output = Result<Vec<String>, IoError>> + Send;
    /// A group's committed offsets on the source (partitions without a commit left out).
    fn source_offsets(
        &self,
        group: &str,
    ) -> impl Future<Output = Result<BTreeMap<Tp, i64>, IoError>> + Send;
    /// The destination's groups that have members.
    fn destination_active_groups(
        &self,
    ) -> impl Future<Output = Result<HashSet<String>, IoError>> + Send;
    /// A group's committed offsets on the destination.
    fn destination_offsets(
        &self,
        group: &str,
    ) -> impl Future<Output = Result<BTreeMap<Tp, i64>, IoError>> + Send;
    /// The log start offsets of destination partitions (one request per leader).
    fn destination_log_starts(
        &self,
        partitions: &[Tp],
    ) -> impl Future<Output = Result<BTreeMap<Tp, i64>, IoError>> + Send;
    /// Every partition of this mirror's topics as the source has them now (topics the agent
    /// or the controller have not learned yet included).
    fn mirror_partitions(&self) -> impl Future<Output = Result<Vec<Tp>, IoError>> + Send;
    /// For each `(partition, from, to)`: whether source records `[from, to)` hold a
    /// transactional batch or a marker, read from their batch headers (within a budget).
    fn scan_transactions(
        &self,
        ranges: &[(Tp, i64, i64)],
    ) -> impl Future<Output = Result<BTreeMap<Tp, Scan>, IoError>> + Send;
    /// Whether the agent has mirrored transactional batches or markers into a partition.
    fn carries_transactions(&self, topic: &str, partition: i32) -> bool;
    /// The next source offset the agent will mirror for a partition (`None`: not known).
    fn mirrored_next(&self, topic: &str, partition: i32) -> Option<i64> {
        self.partition_map(topic, partition)
            .and_then(|m| m.next())
            .map(|(s, _)| s)
    }
    /// (log end, last stable offset) of source partitions.
    fn source_ends(
        &self,
        partitions: &[Tp],
    ) -> impl Future<Output = Result<BTreeMap<Tp, (i64, i64)>, IoError>> + Send;
    /// Commit `offsets` for `group` on the destination as an admin (no member, generation -1).
    fn commit(
        &self,
        group: &str,
        offsets: &[(Tp, i64)],
    ) -> impl Future<Output = Result<CommitOutcome, IoError>> + Send;
}
