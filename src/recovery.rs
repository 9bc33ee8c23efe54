//! Recovering what a failover left behind (docs/failover.md#after-an-unplanned-failover-recovering-the-tail):
//! the old source's records after the last source offset a failover mirrored — its un-mirrored
//! tail —, listed exactly once the old source is reachable again, and copied onto the
//! destination into a quarantine topic per mirror topic (`mirrors[].recovery.quarantine_topic`,
//! `<topic>.unmirrored` by default), partition for partition, each record with headers naming
//! where it came from, exactly once whoever copies and however often a copy is cut short.
//!
//! - [`start`]: where a tail starts: after the last source offset the destination holds, the
//!   report's offset map matched further to the destination's log when it fell short (R2);
//! - [`tail`]: what a tail holds, record statuses (committed, aborted, open), provenance
//!   headers and the checksum both sides are compared by (pure);
//! - [`copy`]: reading a tail and copying it exactly once, over [`RecoveryIo`];
//! - [`kafka_io`]: [`RecoveryIo`] on the mirror's source and the destination;
//! - [`service`]: the calls the admin API makes (listing, recovery, the realignment of the old
//!   source once its tail is recovered, their dry runs), their guards, what the report keeps,
//!   the metrics.
//!
//! Owns: the un-mirrored tail of completed failovers, the quarantine topics, and the deletion
//! of the old source's topics by a realignment. Must not touch: mirror topics on the
//! destination (nothing here writes to them), partition states, the agent.

use std::future::Future;

use bytes::Bytes;
use thiserror::Error;

pub use crate::mirror::report::SourceTopicShape;

pub mod copy;
pub mod kafka_io;
pub mod service;
pub mod start;
pub mod tail;

/// The answer to one produce of a copier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProduceAnswer {
    /// The partition's error code (0: appended).
    Code(i16),
}

/// What the recovery reads and writes, on the old source and on the destination.
pub trait RecoveryIo: Send + Sync {
    /// The source partition's log start and end (high watermark).
    fn source_bounds(
        &self,
        topic: &str,
        partition: i32,
    ) -> impl Future<Output = Result<(i64, i64), RecoveryError>> + Send;
    /// Whole batches of the source partition from `offset` (the first may start before it).
    fn source_batches(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> impl Future<Output = Result<Bytes, RecoveryError>> + Send;
    /// Whole batches of the mirror partition `topic`-`partition` of the destination from
    /// `offset` (the first may start before it).
    fn destination_batches(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> impl Future<Output = Result<Bytes, RecoveryError>> + Send;
    /// The quarantine partition's log start and high watermark; `None` when the topic does
    /// not exist.
    fn quarantine_bounds(
        &self,
        topic: &str,
        partition: i32,
    ) -> impl Future<Output = Result<Option<(i64, i64)>, RecoveryError>> + Send;
    /// Whole batches of the quarantine partition from `offset`.
    fn quarantine_batches(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> impl Future<Output = Result<Bytes, RecoveryError>> + Send;
    /// Create the quarantine topic with `partitions` partitions (an existing one is kept; one
    /// with fewer partitions is an error).
    fn ensure_quarantine(
        &self,
        topic: &str,
        partitions: i32,
    ) -> impl Future<Output = Result<(), RecoveryError>> + Send;
    /// The copier's producer: the same id for every copier of `transactional_id`, an epoch
    /// above every earlier copier's.
    fn copier_producer(
        &self,
        transactional_id: &str,
    ) -> impl Future<Output = Result<(i64, i16), RecoveryError>> + Send;
    /// An ABORT marker of `producer` in the quarantine partition: writes of earlier epochs are
    /// refused from then on.
    fn fence(
        &self,
        topic: &str,
        partition: i32,
        producer: (i64, i16),
    ) -> impl Future<Output = Result<(), RecoveryError>> + Send;
    /// The source topic's shape; `None` when it does not exist.
    fn source_topic(
        &self,
        topic: &str,
    ) -> impl Future<Output = Result<Option<SourceTopicShape>, RecoveryError>> + Send;
    /// Delete the source topic and create it again empty with `shape` (another topic id); ends
    /// once every partition of the new topic has a leader.
    fn source_recreate(
        &self,
        topic: &str,
        shape: &SourceTopicShape,
    ) -> impl Future<Output = Result<(), RecoveryError>> + Send;
    /// Produce one batch (acks=all). `Err`: the outcome is unknown.
    fn produce(
        &self,
        topic: &str,
        partition: i32,
        batch: Bytes,
    ) -> impl Future<Output = Result<ProduceAnswer, RecoveryError>> + Send;
}

/// Why a listing or a recovery could not be done. Nothing was lost: a recovery cut short
/// continues where the quarantine topic ends when it is called again.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum RecoveryError {
    #[error("no mirror named {0:?}")]
    UnknownMirror(String),
    #[error("no failover {failover_id:?} of mirror {mirror:?}")]
    UnknownFailover { mirror: String, failover_id: String },
    #[error("failover {0} is not complete yet: its report says what was mirrored only once every partition is STOPPED")]
    NotComplete(String),
    #[error("mirror {0:?} has no source: the un-mirrored tail is known only for mirrors the built-in agent mirrors (its exact offset map says what was mirrored)")]
    NoSource(String),
    #[error("the quarantine topic {quarantine:?} of {topic:?} is itself a topic of mirror {mirror:?}; set mirrors[].recovery.quarantine_topic to a name no mirror selects")]
    QuarantineMirrored {
        mirror: String,
        topic: String,
        quarantine: String,
    },
    #[error("a recovery of failover {0} is running on this instance; wait for its answer")]
    Running(String),
    #[error("another copier took over the recovery of {topic}-{partition} (this one was fenced); its answer says what it copied")]
    Fenced { topic: String, partition: i32 },
    #[error("{topic}-{partition} refused a batch with error code {code}")]
    Refused {
        topic: String,
        partition: i32,
        code: i16,
    },
    #[error("{topic}-{partition}: {why}")]
    Malformed {
        topic: String,
        partition: i32,
        why: String,
    },
    #[error("the quarantine topic {topic} has {has} partitions, the source topic {need}")]
    QuarantineTooSmall { topic: String, has: i32, need: i32 },
    #[error("the old source cannot be realigned yet: {0}")]
    NotRecovered(String),
    #[error("the old source's topics were realigned (started at {0} ms): their un-mirrored tail is gone from it")]
    Realigned(i64),
    #[error("{0}")]
    Io(String),
}

impl RecoveryError {
    /// An answer of a cluster that asking again may change (unreachable, no leader, …).
    pub fn is_unavailable(&self) -> bool {
        matches!(self, RecoveryError::Io(_))
    }
}

#[cfg(test)]
#[path = "recovery/fake_tests.rs"]
mod fake_tests;
