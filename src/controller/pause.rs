//! Pausing and resuming a mirror: the admin API's call, recorded on the state topic first
//! when several instances run (every instance follows it, `peer_adopt.rs`), and the move of the
//! partitions here.
//!
//! Owns: MIRRORING ⇄ PAUSED of a mirror's partitions. Must not touch: the state topic (through
//! the peers), failovers.

use super::MirrorController;
use crate::mirror::records::{usable_slot, FailoverError};
use crate::mirror::screening::now_ms;
use crate::mirror::state::PartitionState;

/// Why a pause or resume was not made.
#[derive(Debug, thiserror::Error)]
pub enum PauseError {
    #[error(transparent)]
    Mirror(#[from] FailoverError),
    /// Several instances: it could not be recorded on the state topic (nothing changed).
    #[error("{0}")]
    StateTopic(String),
}

impl MirrorController {
    /// Pause (or resume) mirror `name` (the admin API's call). With several instances it is
    /// recorded on the state topic first, and every instance follows it; this one at once.
    /// Returns how many partitions moved here.
    pub async fn pause(&self, name: &str, paused: bool) -> Result<usize, PauseError> {
        {
            let mut slots = self.records.lock();
            usable_slot(&mut slots, name)?;
        }
        if let Some(p) = self.peers.get() {
            p.announce_paused(name, paused)
                .await
                .map_err(PauseError::StateTopic)?;
        }
        Ok(self.set_paused(name, paused)?)
    }

    /// MIRRORING → PAUSED (`pause`) or PAUSED → MIRRORING for every partition of a mirror that
    /// can make the move. Returns how many partitions moved.
    pub fn set_paused(&self, name: &str, paused: bool) -> Result<usize, FailoverError> {
        let mut slots = self.records.lock();
        let slot = usable_slot(&mut slots, name)?;
        let now = now_ms();
        let before = slot.record.clone();
        let from = if paused {
            PartitionState::Mirroring
        } else {
            PartitionState::Paused
        };
        let moved = self.records.transition(
            slot,
            |p| p.state == from,
            |p| Ok(if paused { p.pause(now) } else { p.resume(now) }?),
        );
        // Partitions added later follow the pause too (`sync_partitions`); a failover, once
        // started, ends it.
        slot.record.paused = paused && slot.record.failover_id.is_none();
        let moved = match moved {
            Ok(n) => n,
            Err(e) => {
                slot.record = before;
                return Err(e);
            }
        };
        self.records.persist_or_revert(slot, before)?;
        drop(slots);
        self.records.refresh();
        Ok(moved)
    }
}
