//! The controller's side of following the state topic, the state of record of several
//! instances (`failover/adopt.rs`): the hook the peers call with each record to follow
//! ([`Follow`]) — another instance's failover, a failover this instance drives but whose
//! records it lost, a failback, a pause — and the move of a mirror's STOPPED partitions back to
//! MIRRORING, shared by a failback called here and one followed from the state topic.
//!
//! Owns: when a record is followed (this instance's writes quiet first; nothing to do when this
//! instance's records already know it) and the STOPPED → MIRRORING move. Must not touch: the
//! state topic, the failover's steps.

use std::sync::Arc;
use std::time::Duration;

use super::{MirrorController, StartError};
use crate::instances::view::{Follow, Stopped};
use crate::instances::FollowHook;
use crate::mirror::records::{usable_slot, MirrorSlot};
use crate::mirror::screening::now_ms;
use crate::mirror::state::PartitionState;

/// How long a failback waits for the other instances' adoption acknowledgements.
const ADOPTED_WAIT: Duration = Duration::from_secs(5);

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
                let configured = this.names.iter().any(|n| n == f.mirror());
                match f {
                    Follow::Stopped(s) => this.follow_handover(&s, configured, settle_ms).await,
                    _ if !configured => Ok(true),
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
                        match this.stopped_to_mirroring(&mirror, Failback::Followed) {
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

    /// Follow handover `s`: adopted here (or, when this instance drives the failover, every
    /// partition STOPPED here), then said so on the state topic, so that a failback waits for
    /// no instance still adopting (review G4). An instance without the mirror has nothing to
    /// adopt and says so at once. `Ok(false)` (tried again) until then.
    async fn follow_handover(
        &self,
        s: &Stopped,
        configured: bool,
        settle_ms: i64,
    ) -> Result<bool, String> {
        let done = if !configured {
            true
        } else if self.drives_here(&s.mirror, &s.failover_id) {
            self.records
                .record(&s.mirror)
                .is_some_and(|r| r.all_stopped() && !r.partitions.is_empty())
        } else {
            self.adopt(s, settle_ms)?
        };
        if !done {
            return Ok(false);
        }
        if let Some(p) = self.peers.get() {
            p.acknowledge_adopted(&s.mirror, &s.failover_id).await?;
        }
        Ok(true)
    }

    /// Readiness (review G4): each mirror whose partitions are still STOPPING or FAILED here
    /// for a failover adopted from another instance that the state topic no longer announces
    /// (failed back, or replaced by a newer failover): every write to them is refused here
    /// until this instance has followed the state topic (which it retries every 500 ms).
    pub(super) fn stale_adoptions(&self) -> Vec<String> {
        let Some(peers) = self.peers.get().filter(|p| p.problem().is_none()) else {
            return Vec::new();
        };
        let adopting: Vec<(String, String, String, usize)> = self
            .records
            .lock()
            .iter()
            .filter_map(|s| {
                let r = &s.record;
                let n = r
                    .partitions
                    .iter()
                    .filter(|p| {
                        matches!(p.state, PartitionState::Stopping | PartitionState::Failed)
                    })
                    .count();
                let (fid, from) = (r.failover_id.clone()?, r.adopted_from.clone()?);
                (n > 0).then(|| (r.name.clone(), fid, from, n))
            })
            .collect();
        adopting
            .into_iter()
            .filter(|(m, fid, _, _)| peers.announced(m).as_deref() != Some(fid.as_str()))
            .map(|(m, fid, from, n)| format!(
                "mirror {m}: {n} partitions still STOPPING for failover {fid} adopted from instance {from}, which the state topic no longer announces (failed back or replaced): writes to them are refused here until this instance follows the state topic (see its log)"
            ))
            .collect()
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

    /// Several instances: a failback of `name` waits (up to [`ADOPTED_WAIT`], as an instance's
    /// acknowledgement follows its last STOPPED partition by a read of the state topic or two)
    /// until every other instance alive has said on the state topic that it has every
    /// partition STOPPED for the failover, and is refused naming them after that (review G4).
    pub(super) async fn wait_every_instance_adopted(&self, name: &str) -> Result<(), StartError> {
        let deadline = tokio::time::Instant::now() + ADOPTED_WAIT;
        loop {
            match self.every_instance_adopted(name) {
                Err(_) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await
                }
                r => return r,
            }
        }
    }

    /// [`Self::wait_every_instance_adopted`], asked once.
    fn every_instance_adopted(&self, name: &str) -> Result<(), StartError> {
        let (Some(peers), Some(fid)) = (self.peers.get(), self.records.failover_id(name)) else {
            return Ok(());
        };
        let instances = peers.not_adopted(name, &fid);
        if instances.is_empty() {
            return Ok(());
        }
        Err(StartError::NotAdopted {
            mirror: name.to_string(),
            failover_id: fid,
            instances,
        })
    }

    /// Whether the STOPPED partitions of `name` could go back to MIRRORING now (what
    /// [`Self::stopped_to_mirroring`] checks first for a failback called here).
    pub(super) fn startable(&self, name: &str) -> Result<(), StartError> {
        let mut slots = self.records.lock();
        let slot = usable_slot(&mut slots, name).map_err(StartError::Failover)?;
        startable(slot, name, Failback::Called).map(|_| ())
    }

    /// STOPPED partitions of `name` → MIRRORING, the failover forgotten (persisted, or nothing
    /// changes). Refused while a failover runs or has partitions STOPPING or FAILED, except, for
    /// a failback `Followed` from the state topic, a failover adopted from another instance and
    /// not completed here: its partitions abandon it and go back to MIRRORING too (review G4).
    pub(super) fn stopped_to_mirroring(
        &self,
        name: &str,
        how: Failback,
    ) -> Result<usize, StartError> {
        let mut slots = self.records.lock();
        let slot = usable_slot(&mut slots, name).map_err(StartError::Failover)?;
        let abandon = startable(slot, name, how)?;
        let now = now_ms();
        let before = slot.record.clone();
        let moved = self.records.transition(
            slot,
            |p| match p.state {
                PartitionState::Stopped => true,
                PartitionState::Stopping | PartitionState::Failed => abandon,
                PartitionState::Mirroring | PartitionState::Paused => false,
            },
            |p| match p.state {
                PartitionState::Stopped => Ok(p.start_mirroring(true, now)?),
                _ => Ok(p.abandon_adopted(now)?),
            },
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
        slot.record.paused = false;
        let (fid, from) = (before.failover_id.clone(), before.adopted_from.clone());
        self.records
            .persist_or_revert(slot, before)
            .map_err(StartError::Failover)?;
        drop(slots);
        if abandon {
            tracing::warn!(mirror = name, failover_id = ?fid, from = ?from,
                "the failover adopted from another instance was failed back before it completed here: its partitions abandoned it and are MIRRORING (read-only) again");
        }
        self.records.refresh();
        Ok(moved)
    }
}

/// Where a failback comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Failback {
    /// Called on this instance (its admin API).
    Called,
    /// Read on the state topic: another instance (or this one) recorded it.
    Followed,
}

/// Refused while a failover runs or has partitions STOPPING or FAILED, or nothing is STOPPED.
/// A failback `Followed` from the state topic abandons a failover adopted from another instance
/// that has not completed here (not one this instance drives, nor one whose passes still run
/// here): `Ok(true)` when partitions abandon it.
fn startable(slot: &MirrorSlot, name: &str, how: Failback) -> Result<bool, StartError> {
    let parts = &slot.record.partitions;
    let unfinished = parts
        .iter()
        .any(|p| matches!(p.state, PartitionState::Stopping | PartitionState::Failed));
    let abandon = unfinished
        && how == Failback::Followed
        && slot.record.adopted_from.is_some()
        && !slot.running;
    if slot.running || (unfinished && !abandon) {
        return Err(StartError::FailoverInProgress(name.to_string()));
    }
    if !abandon && !parts.iter().any(|p| p.state == PartitionState::Stopped) {
        return Err(StartError::NothingStopped(name.to_string()));
    }
    Ok(abandon)
}

#[cfg(test)]
#[path = "peer_adopt_tests.rs"]
mod tests;
