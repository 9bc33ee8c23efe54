//! What the failover report (and the groups API) records of a mirror's group offset sync: the
//! final round's outcome and the groups a round did not sync, with why. The sync derives them
//! from its rounds (`groups/outcome.rs`); the report only keeps them, so it never depends on the
//! sync.
//!
//! Owns: those shapes and their JSON. Must not touch: the rounds.

use serde::{Deserialize, Serialize};

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
