//! Per-partition producer state (PSM), as an Apache Kafka 4.1.1 partition leader keeps it
//! (`ProducerStateManager`, `ProducerStateEntry`, `ProducerAppendInfo`, `BatchMetadata`, and the
//! producer-state part of `UnifiedLog.analyzeAndValidateProducerState`). Rules are cited by the
//! rule and row IDs of docs/psm.md (the broker's rules, by ID; the scenario table).
//!
//! Owns: for one partition, each producer id's epoch, last five batches, last timestamp,
//! coordinator epoch and open transaction; the broker's verdict for a client batch (duplicate /
//! fenced / out of order / transaction state / accepted); the updates on append, marker, log
//! replay, expiry and clear; and (de)serializing that state to snapshot bytes.
//!
//! Must not touch: sockets, tokio, metrics, configuration, clocks (callers pass `now_ms`), or any
//! disk I/O — snapshot bytes are written and read by the state store.
//!
//! The runtime around that pure core lives in submodules that may do some of those things:
//! [`slot`] (one tracked partition's lifecycle — unbuilt, rebuilding, ready, stale — and applying
//! a broker outcome to it), [`registry`] (the tracked partitions, each slot behind a lock,
//! expiry, snapshots), [`metrics`] (the PSM's counters and producer gauge), [`tap`] (Produce
//! requests and responses meet the PSM) and [`rebuild`] (snapshot plus log tail, and background
//! maintenance).
//!
//! Version notes: rules tagged [4.1+] in the spec (KAFKA-18042, KAFKA-18202) are implemented;
//! [4.2+] marker rules (KIP-1228 strict TV2 marker epoch, KAFKA-19999) and the [4.5]
//! never-written-partition rule (KAFKA-15591) are not, because the pinned broker is 4.1.1.

pub mod entry;
pub mod metrics;
pub mod partition;
pub mod rebuild;
pub mod registry;
pub mod slot;
pub mod snapshot;
pub mod tap;
pub mod verdict;

#[cfg(test)]
mod model_tests;
#[cfg(test)]
mod tests;

pub use entry::{BatchMetadata, ProducerEntry, NUM_BATCHES_TO_RETAIN};
pub use partition::{PartitionPsm, PidHasher};
pub use snapshot::{SnapshotError, SNAPSHOT_MAGIC, SNAPSHOT_VERSION};
pub use verdict::{
    codes, AppendContext, Appended, CompletedTxn, InvalidRecordReason, Marker, TxnStateReason,
    Verdict, VerificationState,
};

/// The broker default of `producer.id.expiration.ms` (1 day; X1).
pub const DEFAULT_PRODUCER_ID_EXPIRATION_MS: i64 = 86_400_000;
/// The broker default of the internal `producer.id.expiration.check.interval.ms` (10 min; X1).
pub const DEFAULT_PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS: i64 = 600_000;
