//! How a failover recognises its own barriers in a log: a data barrier carries the failover id;
//! a control barrier is an ABORT marker of the recorded producer id. Used where barriers are
//! written or looked for (`barrier_io`) and where a recorded barrier is checked (`records`).
//!
//! Owns: that test. Must not touch: I/O, the records.

use crate::protocol::barrier::parse_barrier;
use crate::protocol::batch::BatchHeader;

use super::state::BarrierKind;

/// What identifies the failover's own barriers in a log: a data barrier carries the failover
/// id; a control barrier is an ABORT marker of the recorded producer id.
pub(crate) struct OwnBarrier<'a> {
    pub failover_id: &'a str,
    pub producer_id: Option<i64>,
}

impl OwnBarrier<'_> {
    /// The form of the barrier `batch` (header `h`) is, if it is one of this failover's.
    pub fn kind_of(&self, h: &BatchHeader, batch: &[u8]) -> Option<BarrierKind> {
        if let Some(pid) = self.producer_id {
            if crate::protocol::txn_marker::is_control_barrier(h, batch, pid) {
                return Some(BarrierKind::Control);
            }
        }
        if h.is_control() || self.failover_id.is_empty() {
            return None;
        }
        matches!(parse_barrier(batch), Ok(Some(v)) if v.failover_id == self.failover_id)
            .then_some(BarrierKind::Data)
    }
}
