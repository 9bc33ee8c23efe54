//! What a round of the group sync left unsynced, and what the final round did at a failover:
//! shown by the groups API (`last round`, `final_round`), counted by
//! `mirrorgate_group_sync_groups_not_synced` and kept in the failover report, so that a round
//! that synced nothing (or not every group) is never taken for done (review H1, G14).
//!
//! Owns: how those shapes are derived from a round's report (the shapes themselves are the
//! failover report's: `report/group_sync.rs`). Must not touch: the rounds (`policy`), the log
//! lines and the phase (`mod.rs`).

use std::collections::BTreeSet;

pub use crate::mirror::report::group_sync::{
    FinalGroupSync, FinalOutcome, GroupNotSynced, NotSynced,
};

use super::policy::{GroupOutcome, RoundReport};

/// What a round synced and did not.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoundSummary {
    /// Groups synced or left alone for their members.
    pub groups_synced: usize,
    pub not_synced: Vec<GroupNotSynced>,
    /// Why the round could not look at every group.
    pub error: Option<String>,
}

impl RoundSummary {
    /// The summary of `report`. `known`: the groups earlier rounds saw with offsets for this
    /// mirror; when the round is incomplete, those it did not look at count as not synced.
    pub fn of(report: &RoundReport, known: impl IntoIterator<Item = String>) -> RoundSummary {
        let mut out = RoundSummary {
            error: report.error.clone(),
            ..RoundSummary::default()
        };
        for g in &report.groups {
            let (why, reason) = match &g.outcome {
                GroupOutcome::Synced | GroupOutcome::SkippedActive => {
                    out.groups_synced += 1;
                    continue;
                }
                GroupOutcome::Error(e) => (NotSynced::Error, e.clone()),
                GroupOutcome::WaitingForMirror(w) => (NotSynced::WaitingForMirror, w.clone()),
            };
            out.not_synced.push(GroupNotSynced {
                group: g.group.clone(),
                why,
                reason,
            });
        }
        if let Some(e) = &report.error {
            let seen: BTreeSet<&str> = report.groups.iter().map(|g| g.group.as_str()).collect();
            let unseen: BTreeSet<String> = known
                .into_iter()
                .filter(|g| !seen.contains(g.as_str()))
                .collect();
            out.not_synced
                .extend(unseen.into_iter().map(|group| GroupNotSynced {
                    group,
                    why: NotSynced::RoundIncomplete,
                    reason: e.clone(),
                }));
        }
        out
    }

    /// Every group was looked at and synced (or left alone for its members).
    pub fn complete(&self) -> bool {
        self.error.is_none() && self.not_synced.is_empty()
    }

    /// How many groups were not synced for `why`.
    pub fn count(&self, why: NotSynced) -> usize {
        self.not_synced.iter().filter(|g| g.why == why).count()
    }

    /// The final round that ran and left this summary, ended at `ended_ms`.
    pub fn into_final(self, ended_ms: i64) -> FinalGroupSync {
        FinalGroupSync {
            outcome: if self.complete() {
                FinalOutcome::Complete
            } else {
                FinalOutcome::Incomplete
            },
            error: self.error,
            groups_synced: self.groups_synced,
            groups_not_synced: self.not_synced,
            ended_ms,
        }
    }
}
