//! The controller's side of following the state topic, the state of record of several
//! instances (`mirror/failover/adopt.rs`): the hook the peers call with each record to follow
//! ([`Follow`]) — another instance's failover, a failover this instance drives but whose
//! records it lost, a failback, a pause — and the move of a mirror's STOPPED partitions back to
//! MIRRORING, shared by a failback called here and one followed from the state topic.
//!
//! Owns: when a record is followed (this instance's writes quiet first; nothing to do when this
//! instance's records already know it) and the STOPPED → MIRRORING move. Must not touch: the
//! state topic, the failover's steps.

use std::sync::Arc;
use std::time::Duration;

use super::super::peers::view::{Follow, Stopped};
use super::super::peers::FollowHook;
use super::super::records::{usable_slot, MirrorSlot};
use super::super::screening::now_ms;
use super::super::state::PartitionState;
use super::{MirrorController, StartError};

impl MirrorController {
    /// Follow the state topic's records here: a handover of STOPPED partitions is adopted once
    /// this instance's mirror writes are answered and settled (for `settle`); a failover this
    /// instance is named to drive is driven; a failback or a pause is applied here too.
    pub fn peer_follow_hook(self: &Arc<Self>, settle: Duration) -> FollowHook {
        let this = self.clone();
        let settle_ms = i64::try_from(settle.as_millis()).unwrap_or(i64::MAX);
        Arc::new(move |f: Follow| {
            let this = this.clone();
            Box::pin(async move {
                if !this.names.iter().any(|n| n == f.mirror()) {
                    return Ok(true);
                }
                match f {
                    Follow::Stopped(s) if this.drives_here(&s.mirror, &s.failover_id) => Ok(true),
                    Follow::Stopped(s) => this.adopt(&s, settle_ms),
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
                    } => this.drive(&mirror, &failover_id, settle_ms),
                    Follow::Mirroring { mirror, by, .. } => {
                        match this.stopped_to_mirroring(&mirror) {
                            Ok(n) => {
                                tracing::warn!(mirror = %mirror, by = %by, partitions = n,
                                    "the mirror was started again (state topic): its partitions are MIRRORING (read-only) here too");
                                Ok(true)
                            }
                            Err(StartError::NothingStopped(_)) => Ok(true),
                            Err(e) => Err(e.to_string()),
                        }
                    }
                    Follow::Paused { mirror, .. } if !this.partitions_known(&mirror) => Ok(false),
                    Follow::Paused {
                        mirror, paused, by, ..
                    } => match this.set_paused(&mirror, paused) {
                        Ok(0) => Ok(true),
                        Ok(n) => {
                            tracing::warn!(mirror = %mirror, by = %by, partitions = n, paused,
                                "the mirror was paused or resumed (state topic): its partitions here follow");
                            Ok(true)
                        }
                        Err(e) => Err(e.to_string()),
                    },
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

    /// Whether `mirror`'s partitions are known here yet (from the destination's metadata).
    fn partitions_known(&self, mirror: &str) -> bool {
        self.records
            .record(mirror)
            .is_some_and(|r| !r.partitions.is_empty())
    }

    /// Adopt handover `s` once this instance's mirror writes are answered and settled: whether
    /// every partition of the mirror is STOPPED here now.
    fn adopt(&self, s: &Stopped, settle_ms: i64) -> Result<bool, String> {
        self.admission.mirror_writes_quiet(&s.mirror, settle_ms)?;
        self.executor.adopt(s).map_err(|e| e.to_string())
    }

    /// Whether this instance's own records drive failover `fid` of `mirror` (running,
    /// resumed at start, or done): then the state topic's records of it hold nothing new here.
    pub fn drives_here(&self, mirror: &str, fid: &str) -> bool {
        self.records
            .record(mirror)
            .is_some_and(|r| r.failover_id.as_deref() == Some(fid) && r.adopted_from.is_none())
    }

    /// The state topic names this instance as the driver of failover `fid` of `mirror`: its
    /// claim came first (the previous driver is gone), or it announced the failover itself and
    /// its records no longer know it (its state directory was lost or re-initialised). Drive it
    /// from the steps recorded here, with the barrier producer announced for it: barriers
    /// already written are found in the partitions' logs, not written again.
    ///
    /// The partitions the state topic already holds as STOPPED for it (the previous driver's
    /// handover, or this instance's own) are adopted first, at their barriers and with the
    /// producer ids screened there. `Ok(false)` (tried again) until the mirror's partitions
    /// are known here.
    fn drive(self: &Arc<Self>, mirror: &str, fid: &str, settle_ms: i64) -> Result<bool, String> {
        if self.drives_here(mirror, fid) {
            return Ok(true);
        }
        let Some(peers) = self.peers.get() else {
            return Ok(true);
        };
        if !self.partitions_known(mirror) {
            return Ok(false);
        }
        if let Some(s) = peers.handover(mirror, fid) {
            self.adopt(&s, settle_ms)?;
        }
        let producer = peers.barrier_producer(mirror, fid);
        self.executor
            .take_over(mirror, fid, producer)
            .map_err(|e| e.to_string())?;
        self.executor.spawn(mirror.to_string(), true);
        Ok(true)
    }

    /// Whether the STOPPED partitions of `name` could go back to MIRRORING now (what
    /// [`Self::stopped_to_mirroring`] checks first).
    pub(super) fn startable(&self, name: &str) -> Result<(), StartError> {
        let mut slots = self.records.lock();
        let slot = usable_slot(&mut slots, name).map_err(StartError::Failover)?;
        startable(slot, name)
    }

    /// STOPPED partitions of `name` → MIRRORING, the failover forgotten (persisted, or nothing
    /// changes). Refused while a failover runs or has partitions STOPPING or FAILED.
    pub(super) fn stopped_to_mirroring(&self, name: &str) -> Result<usize, StartError> {
        let mut slots = self.records.lock();
        let slot = usable_slot(&mut slots, name).map_err(StartError::Failover)?;
        startable(slot, name)?;
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

/// Refused while a failover runs or has partitions STOPPING or FAILED, or nothing is STOPPED.
fn startable(slot: &MirrorSlot, name: &str) -> Result<(), StartError> {
    let parts = &slot.record.partitions;
    if slot.running
        || parts
            .iter()
            .any(|p| matches!(p.state, PartitionState::Stopping | PartitionState::Failed))
    {
        return Err(StartError::FailoverInProgress(name.to_string()));
    }
    if !parts.iter().any(|p| p.state == PartitionState::Stopped) {
        return Err(StartError::NothingStopped(name.to_string()));
    }
    Ok(())
}

#[cfg(test)]
#[path = "peer_adopt_tests.rs"]
mod tests;
