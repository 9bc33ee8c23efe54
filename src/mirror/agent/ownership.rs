//! Which instance runs the agent, as the agent sees it: it asks the controller for its turn
//! ([`crate::mirror::peers::agent_owner`]) on every pass, takes the offset maps the previous
//! owner published when it becomes the owner, and publishes its own while it is.
//!
//! Owns: the agent's side of the ownership (its epoch, what it published). Must not touch:
//! the ownership rules (the peers'), the tasks (`agent.rs` starts and stops them).

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::mirror::peers::agent_owner::AgentTurn;

use super::offsets::MirrorOffsets;
use super::{lock, MirrorAgent};

/// How often the owner publishes its offset maps on the state topic when they changed: what
/// the next owner reconciles batch by batch against the source is at most this much mirroring.
const PUBLISH_EVERY: Duration = Duration::from_secs(2);

impl MirrorAgent {
    /// Whether the agent runs on this instance now ([`crate::mirror::peers::agent_owner`]).
    /// On becoming the owner it first takes the offset maps the previous owner published.
    pub(super) fn take_turn(&self) -> bool {
        match self.controller.agent_turn(&self.name) {
            AgentTurn::Run { epoch } => {
                let newly = lock(&self.owner_epoch).replace(epoch) != Some(epoch);
                if newly && epoch > 0 {
                    self.adopt_published_offsets();
                    tracing::info!(mirror = %self.name, epoch, "the built-in agent runs on this instance (ownership claimed on the state topic)");
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

    /// Take the offset maps the previous owner published where they reach further than this
    /// instance's own (partitions with a task still running here excepted).
    fn adopt_published_offsets(&self) {
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
        if taken > 0 {
            self.offsets_dirty.store(true, Ordering::SeqCst);
            tracing::info!(mirror = %self.name, partitions = taken, "the agent resumes from the offset maps the previous owner published");
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
