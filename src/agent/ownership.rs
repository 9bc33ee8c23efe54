//! Which instance runs the agent, as the agent sees it: it asks the controller for its turn
//! ([`crate::instances::agent_owner`]) on every pass, takes the offset maps the previous
//! owner published when it becomes the owner (and has the PSM rebuild the mirror's
//! partitions, whose logs hold the previous owner's writes), and publishes its own while it is.
//!
//! Owns: the agent's side of the ownership (its epoch, what it published). Must not touch:
//! the ownership rules (the peers'), the tasks (`agent.rs` starts and stops them).

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::instances::agent_owner::AgentTurn;

use super::{lock, MirrorAgent};
use crate::mirror::offset_map::MirrorOffsets;

/// How often the owner publishes its offset maps on the state topic when they changed: what
/// the next owner reconciles batch by batch against the source is at most this much mirroring.
const PUBLISH_EVERY: Duration = Duration::from_secs(2);

/// How long a failover waits for unmatched offset maps to be matched to the destination's tail.
const MATCH_TAILS: Duration = Duration::from_secs(10);

impl MirrorAgent {
    /// Whether the agent runs on this instance now ([`crate::instances::agent_owner`]).
    /// On becoming the owner it first takes the offset maps the previous owner published.
    pub(super) fn take_turn(&self) -> bool {
        match self.controller.agent_turn(&self.name) {
            AgentTurn::Run { epoch } => {
                let newly = lock(&self.owner_epoch).replace(epoch) != Some(epoch);
                if newly && epoch > 0 {
                    self.adopt_published_offsets();
                    // The PSM here saw none of the previous owner's mirror writes (defect P1).
                    let rebuilt = self.controller.psm_written_elsewhere(&self.name);
                    tracing::info!(mirror = %self.name, epoch, psm_partitions_to_rebuild = rebuilt, "the built-in agent runs on this instance (ownership claimed on the state topic)");
                }
                true
            }
            AgentTurn::Claim { .. } | AgentTurn::Standby(_) => {
                if lock(&self.owner_epoch).take().is_some() {
                    tracing::warn!(mirror = %self.name, "the built-in agent no longer runs on this instance: it stops its tasks");
                }
                false
            }
        }
    }

    /// Whether this instance owns the agent now at the epoch its tasks run with: asked right
    /// before every append (review G2; [`Self::take_turn`] runs once a second).
    pub(super) fn owns_the_agent(&self) -> bool {
        let running = *lock(&self.owner_epoch);
        matches!(self.controller.agent_turn(&self.name), AgentTurn::Run { epoch } if Some(epoch) == running)
    }

    /// Take the offset maps the previous owner published where they reach further than this
    /// instance's own (partitions with a task still running here excepted).
    pub(super) fn adopt_published_offsets(&self) {
        let Some(v) = self.controller.published_agent_offsets(&self.name) else {
            return;
        };
        let published: MirrorOffsets = match serde_json::from_value(v) {
            Ok(o) => o,
            Err(e) => {
                tracing::error!(mirror = %self.name, error = %e, "the offset maps published on the state topic cannot be read; the agent goes on from its own and reconciles the destination against the source");
                return;
            }
        };
        if published.mirror != self.name {
            return;
        }
        let busy: HashSet<(String, i32)> = lock(&self.tasks)
            .iter()
            .filter(|(_, s)| s.handle.as_ref().is_some_and(|h| !h.is_finished()))
            .map(|(k, _)| k.clone())
            .collect();
        let taken = lock(&self.offsets)
            .adopt_published(published, |t, p| busy.contains(&(t.to_string(), p)));
        if !taken.is_empty() {
            self.offsets_dirty.store(true, Ordering::SeqCst);
            tracing::info!(mirror = %self.name, partitions = taken.len(), "the agent resumes from the offset maps the previous owner published");
            lock(&self.unmatched).extend(taken);
        }
    }

    /// A failover stopped the agent: match the destination's tail beyond each map not known
    /// to reach it (taken from the previous owner, which appended after its last publication;
    /// a task stopped while matching its start or with an append's outcome unknown), so that
    /// the maps reach the barrier and the report and the final group sync translate with them.
    /// Bounded by [`MATCH_TAILS`]; a partition whose source cannot be read keeps its map as it
    /// is (its report figures fall short; the group sync may re-read, never skip).
    pub(super) async fn match_unmatched_tails(self: &Arc<Self>) {
        let todo: Vec<(String, i32)> = lock(&self.unmatched).iter().cloned().collect();
        self.match_tails(todo).await;
    }

    /// [`Self::match_unmatched_tails`] for the partitions `todo`.
    pub(super) async fn match_tails(self: &Arc<Self>, todo: Vec<(String, i32)>) {
        if todo.is_empty() {
            return;
        }
        let (_stop, stop_rx) = tokio::sync::watch::channel(false);
        let matched = tokio::time::timeout(MATCH_TAILS, async {
            let mut matched = 0;
            for (topic, p) in todo {
                let stats = Arc::new(super::PartStats::default());
                let task = super::partition::Task::new(
                    self.clone(),
                    topic.clone(),
                    p,
                    stats,
                    stop_rx.clone(),
                );
                match task.match_tail().await {
                    Ok(()) => {
                        lock(&self.unmatched).remove(&(topic, p));
                        matched += 1;
                    }
                    Err(e) => {
                        tracing::warn!(mirror = %self.name, topic = %topic, partition = p, error = %e,
                            "the destination's tail beyond the offset map could not be matched to the source; the map stays where it is (report figures fall short, the final group sync may re-read, never skip)")
                    }
                }
            }
            matched
        })
        .await;
        self.flush();
        match matched {
            Ok(n) => {
                tracing::info!(mirror = %self.name, partitions = n, "offset maps matched to the destination's tail")
            }
            Err(_) => {
                tracing::warn!(mirror = %self.name, "matching the destination's tail to the source took longer than {MATCH_TAILS:?}; the rest keep their maps as they are")
            }
        }
    }

    /// Publish the offset maps on the state topic (several instances, owner here, changed):
    /// at once when a partition was added (the next owner can resume only a partition it has
    /// a map of), else at most every [`PUBLISH_EVERY`].
    pub(super) fn publish_offsets(self: &Arc<Self>) {
        let Some(epoch) = *lock(&self.owner_epoch) else {
            return;
        };
        if epoch == 0 {
            return;
        }
        let value = match serde_json::to_value(&*lock(&self.offsets)) {
            Ok(v) => v,
            Err(e) => {
                tracing::error!(mirror = %self.name, error = %e, "cannot encode the agent's offset maps");
                return;
            }
        };
        {
            let mut last = lock(&self.published);
            let partitions = |v: &serde_json::Value| -> usize {
                v["partitions"].as_object().map_or(0, |t| {
                    t.values()
                        .filter_map(|p| p.as_object())
                        .map(|p| p.len())
                        .sum()
                })
            };
            match last.as_ref() {
                Some((_, v)) if *v == value => return,
                Some((at, v))
                    if at.elapsed() < PUBLISH_EVERY && partitions(v) >= partitions(&value) =>
                {
                    return
                }
                _ => *last = Some((Instant::now(), value.clone())),
            }
        }
        let this = self.clone();
        tokio::spawn(async move {
            if let Err(e) = this
                .controller
                .publish_agent_offsets(&this.name, epoch, value)
                .await
            {
                *lock(&this.published) = None;
                tracing::warn!(mirror = %this.name, error = %e, "cannot publish the agent's offset maps on the state topic; the next owner would reconcile more of the destination");
            }
        });
    }
}
