//! What a partition's record says about its failover barrier beyond the offset: the barrier's
//! form, the producer a control barrier is written with, the transactions aborted before it.
//!
//! Owns: these persisted shapes (JSON). Must not touch: transitions (`state.rs`).

use serde::{Deserialize, Serialize};

/// A mirrored transaction a failover aborted (an ABORT marker before the barrier).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AbortedTransaction {
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// The transaction's first offset in the destination partition.
    pub first_offset: i64,
}

/// The form of a partition's failover barrier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BarrierKind {
    /// A genuine control batch: an ABORT transaction marker (WriteTxnMarkers) of
    /// [`PartitionRecord::barrier_producer`](super::PartitionRecord::barrier_producer); every consumer skips it natively.
    Control,
    /// A single-record data batch with the reserved key, hidden by the gateway.
    Data,
}

impl BarrierKind {
    /// The name used in JSON, metrics and logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            BarrierKind::Control => "control",
            BarrierKind::Data => "data",
        }
    }
}

/// The producer id and epoch of a control-batch barrier (from an idempotent InitProducerId).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BarrierProducer {
    pub producer_id: i64,
    pub producer_epoch: i16,
}
