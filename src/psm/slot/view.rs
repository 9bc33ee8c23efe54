//! What readers get of one tracked partition: a copy of its standing ([`SlotView`]), the
//! producers cleared at its barrier ([`ClearedProducer`]) and its open transactions
//! ([`OpenTxn`]).
//!
//! Owns: those plain value types. Must not touch: the slot's phases and state (`slot.rs`).

use super::StaleReason;

/// A producer cleared at a barrier, as the screening set takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClearedProducer {
    pub producer_id: i64,
    pub epoch: i16,
    pub last_timestamp: i64,
    /// The coordinator epoch of its last transaction marker (−1: none).
    pub coordinator_epoch: i32,
}

/// What a reader sees of a slot (a copy; no lock is held).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotView {
    /// Rebuilt (READY or STALE): classifications are meaningful.
    pub ready: bool,
    /// A rebuild is wanted (UNBUILT, REBUILDING, STALE).
    pub wants_rebuild: bool,
    /// Why a rebuilt partition wants a rebuild (STALE).
    pub stale: Option<StaleReason>,
    /// Highest log offset reflected in the state (-1: none).
    pub applied_through: i64,
}

/// A producer with an open transaction: (producer id, transaction first offset, last data
/// offset).
pub type OpenTxn = (i64, i64, i64);
