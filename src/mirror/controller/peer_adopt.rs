//! The controller's side of following another instance's failover (`mirror/failover/adopt.rs`):
//! the hook the peers call with each record to follow ([`Follow`]), and the move of a mirror's
//! STOPPED partitions back to MIRRORING, shared by a failback called here and one followed from
//! another instance.
//!
//! Owns: when a record is followed (this instance's writes quiet first) and the STOPPED →
//! MIRRORING move. Must not touch: the state topic, the failover's steps.

use std::sync::Arc;
use std::time::Duration;

use super::super::peers::view::Follow;
use super::super::peers::FollowHook;
use super::super::records::usable_slot;
use super::super::screening::now_ms;
use super::super::state::PartitionState;
use super::{MirrorController, StartError};

impl MirrorController {
    /// Follow the others' records here: a handover of STOPPED partitions is adopted once this
    /// instance's mirror writes are answered and settled (for `settle`); a mirror another
    /// instance started again turns MIRRORING here too.
    pub fn peer_follow_hook(self: &Arc<Self>, settle: Duration) -> FollowHook {
        let this = self.clone();
        Arc::new(move |f: Follow| {
            let this = this.clone();
            Box::pin(async move {
                if !this.names.iter().any(|n| n == f.mirror()) {
                    return Ok(true);
                }
                match f {
                    Follow::Stopped(s) => {
                        let settle_ms = i64::try_from(settle.as_millis()).unwrap_or(i64::MAX);
                        this.admission.mirror_writes_quiet(&s.mirror, settle_ms)?;
                        this.executor.adopt(&s).map_err(|e| e.to_string())
                    }
                    Follow::TakeOver {
                        mirror,
                        failover_id,
                        from,
                        epoch,
                    } => this.claim(&mirror, &failover_id, &from, epoch).await,
                    Follow::Drive {
                        mirror,
                        failover_id,
                        ..
                    } => this.drive(&mirror, &failover_id),
                    Follow::Mirroring { mirror, by, .. } => {
                        match this.stopped_to_mirroring(&mirror) {
                            Ok(n) => {
                                tracing::warn!(mirror = %mirror, by = %by, partitions = n,
                                    "another instance started this mirror again: its partitions are MIRRORING (read-only) here too");
                                Ok(true)
                            }
                            Err(StartError::NothingStopped(_)) => Ok(true),
                            Err(e) => Err(e.to_string()),
                        }
                    }
                }
            })
        })
    }

    /// The instance `from` driving failover `fid` of `mirror` is gone: claim it at `epoch`
    /// on the state topic (the first claim of that epoch in the log drives it: [`Self::drive`]).
    /// Nothing to claim when every partition is STOPPED here already (the handover was whole).
    async fn claim(&self, mirror: &str, fid: &str, from: &str, epoch: u32) -> Result<bool, String> {
        let done = self.records.record(mirror).is_some_and(|r| {
            r.failover_id.as_deref() == Some(fid) && r.all_stopped() && !r.partitions.is_empty()
        });
        let Some(peers) = self.peers.get() else {
            return Ok(true);
        };
        if done {
            return Ok(true);
        }
        tracing::warn!(
            mirror,
            failover_id = fid,
            from,
            epoch,
            "the instance driving this failover is gone: claiming it on the state topic"
        );
        peers.claim(mirror, fid, epoch).await?;
        Ok(true)
    }

    /// This instance's claim of failover `fid` of `mirror` came first: drive it from the
    /// steps recorded here, with the barrier producer the previous driver announced (its
    /// markers are found, not written again).
    fn drive(self: &Arc<Self>, mirror: &str, fid: &str) -> Result<bool, String> {
        let Some(peers) = self.peers.get() else {
            return Ok(true);
        };
        let producer = peers.barrier_producer(mirror, fid);
        self.executor
            .take_over(mirror, fid, producer)
            .map_err(|e| e.to_string())?;
        self.executor.spawn(mirror.to_string(), true);
        Ok(true)
    }

    /// STOPPED partitions of `name` → MIRRORING, the failover forgotten (persisted, or nothing
    /// changes). Refused while a failover runs or has partitions STOPPING or FAILED.
    pub(super) fn stopped_to_mirroring(&self, name: &str) -> Result<usize, StartError> {
        let mut slots = self.records.lock();
        let slot = usable_slot(&mut slots, name).map_err(StartError::Failover)?;
        if slot.running
            || slot
                .record
                .partitions
                .iter()
                .any(|p| matches!(p.state, PartitionState::Stopping | PartitionState::Failed))
        {
            return Err(StartError::FailoverInProgress(name.to_string()));
        }
        let now = now_ms();
        let before = slot.record.clone();
        let moved = self.records.transition(
            slot,
            |p| p.state == PartitionState::Stopped,
            |p| Ok(p.start_mirroring(true, now)?),
        );
        let moved = match moved {
            Ok(0) => return Err(StartError::NothingStopped(name.to_string())),
            Ok(n) => n,
            Err(e) => {
                slot.record = before;
                return Err(StartError::Failover(e));
            }
        };
        slot.record.failover_id = None;
        slot.record.started_ms = None;
        slot.record.completed_ms = None;
        slot.record.adopted_from = None;
        self.records
            .persist_or_revert(slot, before)
            .map_err(StartError::Failover)?;
        drop(slots);
        self.records.refresh();
        Ok(moved)
    }
}
