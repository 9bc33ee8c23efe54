//! The controller's side of several instances (`instances.rs`): the peers installed in the
//! admission and the failover's I/O, and the fence this instance applies when another one
//! fails a mirror over (its agent stopped, its mirror writes answered and settled).
//!
//! Owns: that wiring and the fence's order. Must not touch: the state topic (the peers'), the
//! failover's steps.

use std::sync::Arc;
use std::time::Duration;

use super::super::failover::FailoverIo;
use super::MirrorController;
use crate::instances::agent_owner::AgentTurn;
use crate::instances::{FenceHook, PeerLink};
use crate::mirror::report::FailoverReport;

/// How long one fence attempt waits for the mirror writes to end before it answers "not yet"
/// (the peers retry on their next read).
const FENCE_ATTEMPT: Duration = Duration::from_secs(5);

impl MirrorController {
    /// Several instances run: mirror writes ask `peers`, failovers announce themselves to them
    /// and wait for their fences. Set once, at start.
    pub fn set_peers(&self, peers: Arc<PeerLink>) {
        self.admission.set_peers(peers.clone());
        self.executor.io().set_peers(peers.clone());
        let _ = self.peers.set(peers);
    }

    /// The link to the other instances (`None`: this is the only one).
    pub fn peer_link(&self) -> Option<&Arc<PeerLink>> {
        self.peers.get()
    }

    /// The fence of a mirror another instance fails over: the admission already refuses its
    /// mirror writes (the peers' view says so); here the built-in agent is stopped and the
    /// writes admitted before are waited for, and those of unknown outcome settled for
    /// `settle`.
    pub fn peer_fence_hook(self: &Arc<Self>, settle: Duration) -> FenceHook {
        let this = self.clone();
        Arc::new(move |mirror: String| {
            let this = this.clone();
            Box::pin(async move {
                if !this.names.contains(&mirror) {
                    // Not a mirror of this instance: nothing to fence.
                    return Ok(());
                }
                this.executor.io().stop_agent(&mirror).await;
                let settle_ms = i64::try_from(settle.as_millis()).unwrap_or(i64::MAX);
                let deadline = tokio::time::Instant::now() + FENCE_ATTEMPT;
                loop {
                    match this.admission.mirror_writes_quiet(&mirror, settle_ms) {
                        Ok(()) => return Ok(()),
                        Err(e) if tokio::time::Instant::now() >= deadline => return Err(e),
                        Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                    }
                }
            })
        })
    }

    /// What this instance does with `mirror`'s built-in agent now: always run it when this is
    /// the only instance (epoch 0).
    pub fn agent_turn(&self, mirror: &str) -> AgentTurn {
        match self.peers.get() {
            Some(p) => p.agent_turn(mirror),
            None => AgentTurn::Run { epoch: 0 },
        }
    }

    /// Why this instance may not write `mirror`'s group offsets now (`None`: it may, as far as
    /// the peers go; always `None` for the only instance). `final_round`: the failover's final
    /// round, which runs while the failover is announced.
    pub fn group_sync_refusal(&self, mirror: &str, final_round: bool) -> Option<String> {
        self.peers
            .get()
            .and_then(|p| p.group_sync_refusal(mirror, final_round))
    }

    /// The agent's offset maps of `mirror` as its last owner published them on the state topic.
    pub fn published_agent_offsets(&self, mirror: &str) -> Option<serde_json::Value> {
        self.peers.get().and_then(|p| p.agent_offsets(mirror))
    }

    /// Publish the agent's offset maps of `mirror` (owned here at `epoch`) for the next owner;
    /// nothing to do when this is the only instance.
    pub async fn publish_agent_offsets(
        &self,
        mirror: &str,
        epoch: u32,
        offsets: serde_json::Value,
    ) -> Result<(), String> {
        match self.peers.get() {
            Some(p) => p.publish_agent_offsets(mirror, epoch, offsets).await,
            None => Ok(()),
        }
    }

    /// Publish failover report `r` for every instance (nothing to do when this is the only
    /// one).
    pub async fn publish_report(&self, r: &FailoverReport) -> Result<(), String> {
        match self.peers.get() {
            Some(p) => p.publish_report(r).await,
            None => Ok(()),
        }
    }

    /// The failover reports of `mirror` published on the state topic (none when this is the
    /// only instance).
    pub fn published_reports(&self, mirror: &str) -> Vec<FailoverReport> {
        self.peers
            .get()
            .map(|p| p.reports(mirror))
            .unwrap_or_default()
    }

    /// What the instances' forward listeners of `mirror` passed that the destination lacks
    /// after failover `fid`, as each published it (none when this is the only instance).
    pub fn published_forwarded_losses(
        &self,
        mirror: &str,
        fid: &str,
    ) -> Vec<crate::mirror::forwarded_acks::ForwardedLoss> {
        self.peers
            .get()
            .map(|p| p.forwarded_losses(mirror, fid))
            .unwrap_or_default()
    }

    /// Several instances: each completed failover in this instance's state directory that the
    /// state topic (read to its end) never named: the other instances do not know it, so an
    /// instance without it would take the mirror for one still mirroring. Not ready until
    /// `mirrorgate state migrate` has moved it.
    pub(super) fn unmigrated(&self) -> Vec<String> {
        let Some(p) = self.peers.get().filter(|p| p.problem().is_none()) else {
            return Vec::new();
        };
        self.records
            .lock()
            .iter()
            .filter_map(|s| {
                let r = &s.record;
                let fid = r.failover_id.as_deref()?;
                (!r.partitions.is_empty() && r.all_stopped() && !p.knows_failover(&r.name, fid))
                    .then(|| {
                        format!(
                            "mirror {}: failover {fid} is in this instance's state directory but not on the state topic, so the other instances do not know it: run `mirrorgate state migrate`",
                            r.name
                        )
                    })
            })
            .collect()
    }

    /// The peers' status (`GET /v1/instances`); `None` when this is the only instance.
    pub fn peers_status(&self) -> Option<serde_json::Value> {
        self.peers.get().map(|p| p.status())
    }

    /// Other instances alive now (instance, ms since seen); empty when this is the only one.
    pub fn others_alive(&self) -> Vec<(String, u64)> {
        self.peers
            .get()
            .map(|p| p.others_alive())
            .unwrap_or_default()
    }
}
