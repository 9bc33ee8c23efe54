//! What a round of the group sync left unsynced, and what the final round did at a failover:
//! shown by the groups API (`last round`, `final_round`), counted by
//! `mirrorgate_group_sync_groups_not_synced` and kept in the failover report, so that a round
//! that synced nothing (or not every group) is never taken for done (review H1, G14).
//!
//! Owns: those shapes and how they are derived from a round's report. Must not touch: the
//! rounds (`policy`), the log lines and the phase (`mod.rs`).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::policy::{GroupOutcome, RoundReport};

/// Why a group was not synced in a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NotSynced {
    /// A request for the group failed (after its retries).
    Error,
    /// The consistent cut did not hold: the mirror lacks what transactions wrote.
    WaitingForMirror,
    /// The round could not look at the group: a cluster could not be listed, the round ran
    /// out of time, or it was stopped before the group's commit.
    RoundIncomplete,
}

impl NotSynced {
    /// Every reason, in the order the metric lists them.
    pub const ALL: [NotSynced; 3] = [
        NotSynced::Error,
        NotSynced::WaitingForMirror,
        NotSynced::RoundIncomplete,
    ];

    /// The metric's `reason` label (as serialised).
    pub fn label(self) -> &'static str {
        match self {
            NotSynced::Error => "error",
            NotSynced::WaitingForMirror => "waiting_for_mirror",
            NotSynced::RoundIncomplete => "round_incomplete",
        }
    }
}

/// A group a round did not sync, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupNotSynced {
    pub group: String,
    pub why: NotSynced,
    /// What failed or what the mirror lacks.
    pub reason: String,
}

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
}

/// What the final round did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinalOutcome {
    /// Every group the source lists was synced (or left alone for its members).
    Complete,
    /// It ran, and some groups were not synced (`groups_not_synced`, `error`).
    Incomplete,
    /// It did not run on this instance (`error` says why: not the agent's owner, no lease).
    Skipped,
}

/// The final round of a mirror's group sync, as the groups API and the failover report show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FinalGroupSync {
    pub outcome: FinalOutcome,
    /// Why it was incomplete or skipped beyond single groups (a cluster could not be listed,
    /// out of time, not the agent's owner).
    pub error: Option<String>,
    pub groups_synced: usize,
    /// The groups it did not sync: they resume on the destination from the offsets of an
    /// earlier round (or their reset policy), re-reading what they consumed since.
    pub groups_not_synced: Vec<GroupNotSynced>,
    /// When it ended (ms since the epoch).
    pub ended_ms: i64,
}

impl FinalGroupSync {
    /// The final round that ran and left `summary`.
    pub fn ran(summary: RoundSummary, ended_ms: i64) -> FinalGroupSync {
        FinalGroupSync {
            outcome: if summary.complete() {
                FinalOutcome::Complete
            } else {
                FinalOutcome::Incomplete
            },
            error: summary.error,
            groups_synced: summary.groups_synced,
            groups_not_synced: summary.not_synced,
            ended_ms,
        }
    }

    /// The final round that did not run here, for `why`.
    pub fn skipped(why: String, ended_ms: i64) -> FinalGroupSync {
        FinalGroupSync {
            outcome: FinalOutcome::Skipped,
            error: Some(why),
            groups_synced: 0,
            groups_not_synced: Vec::new(),
            ended_ms,
        }
    }

    /// The groups not synced as one line: `g1 (reason); g2 (reason)`.
    pub fn not_synced_line(&self) -> String {
        self.groups_not_synced
            .iter()
            .map(|g| format!("{} ({})", g.group, g.reason))
            .collect::<Vec<_>>()
            .join("; ")
    }
}
