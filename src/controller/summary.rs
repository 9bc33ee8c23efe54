//! A mirror's record in numbers ([`MirrorController::summaries`]): partition counts per state,
//! counted under the records' lock without copying the partitions, for what reads them often
//! (the admin API's mirror summaries, the metrics collector) while a failover of thousands of
//! partitions updates them.
//!
//! Also the recorded states of a mirror's partitions alone ([`MirrorController::recorded_states`]),
//! read as often by a forward listener's route.
//!
//! And which of a cluster's topics a mirror covers and which of their partitions it has no
//! record of yet ([`MirrorController::unrecorded_partitions`]): a switchover waits for them.
//!
//! Owns: that count and those reads. Must not touch: the records themselves.

use super::MirrorController;
use crate::mirror::state::PartitionState;

/// A mirror's record in numbers ([`MirrorController::summaries`]).
#[derive(Debug, Clone)]
pub struct MirrorSummary {
    pub name: String,
    pub partitions: usize,
    /// Partitions per state, in [`PartitionState::ALL`] order.
    pub counts: Vec<(PartitionState, usize)>,
    pub failover_id: Option<String>,
    pub started_ms: Option<i64>,
    pub completed_ms: Option<i64>,
    /// Why its state cannot be read, when it cannot.
    pub unreadable: Option<String>,
}

impl MirrorController {
    /// The recorded state of each partition of mirror `name`: what a failover changes, without
    /// the agent's own errors that [`MirrorController::records`] shows as FAILED. Read from
    /// admission's snapshot, not the records: a failover step changes the records, persists them
    /// and then refreshes the snapshot, and a forward listener's route that switched on a state
    /// admission did not have yet sent its clients' writes to partitions still refused as
    /// read-only.
    pub fn recorded_states(&self, name: &str) -> Vec<PartitionState> {
        self.admission.recorded_states(name)
    }

    /// Every mirror's partition counts per state (as [`Self::records`] reports the states),
    /// counted under the lock without copying the partitions: what the admin API's mirror
    /// summaries and the metrics collector read, often, while a failover of thousands of
    /// partitions updates the records.
    pub fn summaries(&self) -> Vec<MirrorSummary> {
        self.records
            .lock()
            .iter()
            .map(|s| {
                let r = &s.record;
                let mut counts = [0usize; PartitionState::ALL.len()];
                for p in &r.partitions {
                    let st = match p.state {
                        PartitionState::Mirroring
                            if self.admission.agent_error(&p.topic, p.partition).is_some() =>
                        {
                            PartitionState::Failed
                        }
                        st => st,
                    };
                    if let Some(i) = PartitionState::ALL.iter().position(|a| *a == st) {
                        counts[i] += 1;
                    }
                }
                MirrorSummary {
                    name: r.name.clone(),
                    partitions: r.partitions.len(),
                    counts: PartitionState::ALL.into_iter().zip(counts).collect(),
                    failover_id: r.failover_id.clone(),
                    started_ms: r.started_ms,
                    completed_ms: r.completed_ms,
                    unreadable: s.unreadable.clone(),
                }
            })
            .collect()
    }
}

impl MirrorController {
    /// The partitions of `topics` (name, partition count) that mirror `mirror` covers but has no
    /// record of yet (sorted): the agent has not discovered them, or the destination does not
    /// show them yet.
    pub fn unrecorded_partitions(
        &self,
        mirror: &str,
        topics: &[(String, usize)],
    ) -> Vec<(String, i32)> {
        let recorded: std::collections::HashSet<(String, i32)> = self
            .records()
            .into_iter()
            .filter(|(r, _)| r.name == mirror)
            .flat_map(|(r, _)| r.partitions.into_iter().map(|p| (p.topic, p.partition)))
            .collect();
        let mut missing: Vec<(String, i32)> = topics
            .iter()
            .filter(|(t, _)| {
                self.router
                    .mirror_index(t)
                    .is_some_and(|i| self.admission.mirror_name(i) == mirror)
            })
            .flat_map(|(t, n)| (0..*n as i32).map(move |p| (t.clone(), p)))
            .filter(|k| !recorded.contains(k))
            .collect();
        missing.sort();
        missing
    }
}
