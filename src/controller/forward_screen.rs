//! The producer ids a forward listener passed to the source, screened before the listener
//! moves to the destination when another tool mirrors (`mirroring: external`). Such a tool
//! writes under its own producer ids, so the destination knows nothing of the forwarded ones:
//! a forwarded producer that went on there with its old id and sequence would share an id the
//! destination may hand out to another producer. Screened, its batches at its epoch are refused
//! with UNKNOWN_PRODUCER_ID (it bumps its epoch and starts its sequence again), and the gateway
//! never hands its id to a local producer (docs/forward-mode.md#other-mirroring-tools).
//!
//! Owns: turning the forwarded ids into screening entries. Must not touch: the route (the
//! caller decides when), the screening rules themselves (`crate::mirror::screening`).

use super::{now_ms, MirrorController, ScreenEntry};
use crate::mirror::screening::NO_COORDINATOR_EPOCH;

impl MirrorController {
    /// Screen the forwarded producer ids `ids` (each with the highest epoch its batches used)
    /// of mirror `mirror`, in memory and on disk. A failed write is logged: the set in memory
    /// protects until a restart, and the next switch of the route screens the ids again.
    pub fn screen_forwarded(&self, mirror: &str, ids: &[(i64, i16)]) {
        let now = now_ms();
        let entries: Vec<(i64, ScreenEntry)> = ids
            .iter()
            .map(|(id, epoch)| {
                let entry = ScreenEntry {
                    max_epoch: *epoch,
                    last_timestamp: now,
                    added_ms: now,
                    coordinator_epoch: NO_COORDINATOR_EPOCH,
                };
                (*id, entry)
            })
            .collect();
        let n = entries.len();
        match self.screening.merge_and_persist(entries) {
            Ok(()) => {
                tracing::info!(mirror, producers = n, "forwarded producer ids screened: another tool mirrors, so their producers bump their epoch on the destination")
            }
            Err(e) => {
                tracing::warn!(mirror, producers = n, error = %e, "forwarded producer ids screened in memory, not persisted")
            }
        }
    }
}
