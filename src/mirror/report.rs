//! Failover reports: what each failover cost, kept in the state store (area `failovers`, one
//! file per failover) so that they survive restarts. A report is opened when a failover is
//! called (who, when, the guards, the lag the agent knew then) and completed once every
//! partition is STOPPED: per partition the last mirrored source offset and the destination
//! offset it maps to, the barrier offset, the records and seconds the destination lacks
//! (`rpo_records`, `rpo_seconds`, from the source's own log end read at completion; unknown when
//! the source cannot be reached, with the last figure the agent knew and its age), the producers
//! the barrier expired and the transactions it aborted; `rto_seconds` (call → last partition
//! STOPPED) and totals; what the group offset sync's final round did (the groups it did not sync,
//! and why); for a mirror with a forward listener, the acknowledged records the destination
//! lacks per forwarded producer ([`super::forwarded_acks`]).
//!
//! Owns: the report's shape, its assembly ([`complete`], a pure function) and its files.
//! Must not touch: the failover, the agent, the source (the caller reads them).

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::state::StateStore;

pub mod group_sync;

use super::forwarded_acks::ForwardedLoss;
use super::state::{AbortedTransaction, MirrorRecord, PartitionState};
use group_sync::FinalGroupSync;

/// The state store area of the reports.
pub const REPORTS_AREA: &str = "failovers";

/// One failover's report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FailoverReport {
    pub mirror: String,
    pub failover_id: String,
    /// Who called it: `token` (an admin token was given) or the caller's address.
    pub called_by: String,
    pub called_ms: i64,
    /// Guards given with the call, and whether they were overridden.
    pub max_lag_records: Option<i64>,
    pub max_lag_seconds: Option<f64>,
    pub forced: bool,
    /// At the call: per partition (records, seconds) behind the source as the agent knew.
    pub lag_at_call: Vec<PartitionLag>,
    /// Whether the source was reachable at the call (`None`: no built-in agent).
    pub source_reachable_at_call: Option<bool>,
    /// Partitions that were FAILED when the failover was called, with their error: a
    /// failover clears it, the report keeps it.
    #[serde(default)]
    pub failed_at_call: Vec<FailedAtCall>,
    /// `in_progress` or `complete`.
    pub status: String,
    pub completed_ms: Option<i64>,
    /// Call → last partition STOPPED.
    pub rto_seconds: Option<f64>,
    pub partitions: Vec<PartitionReport>,
    pub totals: Option<ReportTotals>,
    /// The step timeline: when the first and the last partition reached each step, in step
    /// order (absent in reports of older versions).
    #[serde(default)]
    pub steps: Vec<StepTiming>,
    /// What the group offset sync's final round did at this failover on the instance that
    /// completed the report: complete, incomplete (the groups it did not sync, and why) or
    /// skipped (why). Absent when the mirror has no group sync, when that instance ran no final
    /// round for this failover, and in reports of older versions.
    #[serde(default)]
    pub final_group_sync: Option<FinalGroupSync>,
    /// The recovery of the un-mirrored tail and the realignment of the old source, on the
    /// instance that ran them (`recovery`); absent before either ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery: Option<RecoveryRecord>,
    /// A mirror with a forward listener: per forwarded producer, the records the source
    /// acknowledged through the listener that the destination lacks
    /// ([`super::forwarded_acks`]); absent without a forward listener.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forwarded: Option<ForwardedLoss>,
}

/// What was done with a failover's un-mirrored tail.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RecoveryRecord {
    /// The last recovery call: records in the quarantine topics, of how many recoverable, and
    /// whether both sides' count and checksum agreed.
    pub recovered_records: i64,
    pub recoverable_records: i64,
    pub verified: bool,
    pub recovered_ms: Option<i64>,
    /// The realignment of the old source: when it started (the shapes of its topics recorded
    /// first, so that a realignment cut short resumes with them) and when every topic was
    /// created again empty.
    pub realign_started_ms: Option<i64>,
    #[serde(default)]
    pub source_topics: Vec<SourceTopicShape>,
    pub source_realigned_ms: Option<i64>,
}

/// A topic of the old source as it was before the realignment deleted it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceTopicShape {
    pub topic: String,
    pub partitions: i32,
    pub replication_factor: i16,
    /// The configs set on the topic itself.
    pub configs: Vec<(String, String)>,
    pub topic_id: Option<String>,
}

/// When the partitions of a failover reached one step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepTiming {
    /// `STOPPING` (the call), `FENCED`, `DRAINED`, `BARRIER_WRITTEN`, `BARRIER_PERSISTED`,
    /// `PSM_CLEARED`, `STOPPED`.
    pub step: String,
    pub first_ms: i64,
    pub last_ms: i64,
    /// Partitions that reached it.
    pub partitions: usize,
}

/// The steps of a failover in their order, as the partition records name them.
pub const STEP_ORDER: [&str; 7] = [
    "STOPPING",
    "FENCED",
    "DRAINED",
    "BARRIER_WRITTEN",
    "BARRIER_PERSISTED",
    "PSM_CLEARED",
    "STOPPED",
];

/// The step timeline of `record`'s partitions.
pub fn step_timeline(record: &MirrorRecord) -> Vec<StepTiming> {
    STEP_ORDER
        .iter()
        .filter_map(|step| {
            let times: Vec<i64> = record
                .partitions
                .iter()
                .filter_map(|p| p.step_ms.get(*step).copied())
                .collect();
            Some(StepTiming {
                step: step.to_string(),
                first_ms: *times.iter().min()?,
                last_ms: *times.iter().max()?,
                partitions: times.len(),
            })
        })
        .collect()
}

/// Lag of a partition at the call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartitionLag {
    pub topic: String,
    pub partition: i32,
    pub lag_records: Option<i64>,
    pub lag_seconds: Option<f64>,
}

/// A partition FAILED when its failover was called.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FailedAtCall {
    pub topic: String,
    pub partition: i32,
    pub error: Option<String>,
}

/// One partition of a completed failover.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartitionReport {
    pub topic: String,
    pub partition: i32,
    /// The partition was FAILED at some point of this failover, or before it (its last error).
    pub last_error: Option<String>,
    /// The last source offset mirrored, and the destination offset holding it (built-in agent;
    /// `None` when nothing was mirrored or without an agent).
    pub last_mirrored_source_offset: Option<i64>,
    pub last_mirrored_destination_offset: Option<i64>,
    /// The next source offset the agent would have mirrored: everything acknowledged below it
    /// is on the destination (built-in agent; `None` when not known, and in reports of older
    /// versions). Other instances prune their forward listeners' ledgers to it.
    #[serde(default)]
    pub next_source_offset: Option<i64>,
    pub barrier_offset: Option<i64>,
    /// The last mirrored destination offset, read from the log at the barrier step: the last
    /// data batch before the (final) barrier, whoever mirrored it (review G15). `None` when it
    /// could not be read, and in reports of older versions.
    #[serde(default)]
    pub last_mirrored_offset: Option<i64>,
    /// Records of the source the destination does not have (source log end − next source offset
    /// to mirror); `None` when the source could not be read.
    pub rpo_records: Option<i64>,
    /// How far behind the source the destination was: completion time − timestamp of the
    /// first source record not mirrored (0 when none is missing).
    pub rpo_seconds: Option<f64>,
    /// Of the records the destination lacks, those the old source still holds that a recovery
    /// would copy (non-transactional and committed): set by the listing of the un-mirrored
    /// tail (`recovery`) once the old source could be read; `None` before.
    #[serde(default)]
    pub recoverable_records: Option<i64>,
    /// When the source could not be read: the last lag the agent knew, and how old it is.
    pub last_known_lag_records: Option<i64>,
    pub last_known_age_seconds: Option<f64>,
    pub producers_expired: u32,
    pub transactions_aborted: Vec<AbortedTransaction>,
}

/// Sums over the partitions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ReportTotals {
    pub partitions: usize,
    /// `None` when some partition's figure is unknown.
    pub rpo_records: Option<i64>,
    /// The sum of the partitions' `recoverable_records`; `None` until every one is known.
    #[serde(default)]
    pub recoverable_records: Option<i64>,
    pub max_rpo_seconds: Option<f64>,
    pub producers_expired: u64,
    pub transactions_aborted: usize,
    pub partitions_with_errors: usize,
}

/// What the caller read at completion for one partition.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SourceAtCompletion {
    /// The agent's next (source, destination) offsets of the map.
    pub next: Option<(i64, i64)>,
    /// The source's log end and the timestamp of its first record not mirrored (-1: none);
    /// `None` when the source could not be read.
    pub source: Option<(i64, i64)>,
    /// The agent's last known lag (records) and when it last saw the source move (ms).
    pub last_known: Option<(i64, Option<i64>)>,
}

impl FailoverReport {
    /// The report of a failover just called.
    pub fn open(
        mirror: &str,
        failover_id: &str,
        called_by: String,
        called_ms: i64,
        guards: (Option<i64>, Option<f64>, bool),
        lag_at_call: Vec<PartitionLag>,
        source_reachable_at_call: Option<bool>,
    ) -> Self {
        FailoverReport {
            mirror: mirror.to_string(),
            failover_id: failover_id.to_string(),
            called_by,
            called_ms,
            max_lag_records: guards.0,
            max_lag_seconds: guards.1,
            forced: guards.2,
            lag_at_call,
            source_reachable_at_call,
            failed_at_call: Vec::new(),
            status: "in_progress".into(),
            completed_ms: None,
            rto_seconds: None,
            partitions: Vec::new(),
            totals: None,
            steps: Vec::new(),
            final_group_sync: None,
            recovery: None,
            forwarded: None,
        }
    }

    pub fn is_complete(&self) -> bool {
        self.status == "complete"
    }
}

/// Whether `record` shows failover `failover_id` complete (every partition STOPPED by it).
pub fn completed(record: &MirrorRecord, failover_id: &str) -> bool {
    record.failover_id.as_deref() == Some(failover_id)
        && record.completed_ms.is_some()
        && record
            .partitions
            .iter()
            .all(|p| p.state == PartitionState::Stopped)
}

/// Complete `report` from the mirror's record and what was read at completion (`now_ms`).
pub fn complete(
    mut report: FailoverReport,
    record: &MirrorRecord,
    read: &HashMap<(String, i32), SourceAtCompletion>,
    now_ms: i64,
) -> FailoverReport {
    let completed_ms = record.completed_ms.unwrap_or(now_ms);
    let mut totals = ReportTotals {
        partitions: record.partitions.len(),
        rpo_records: Some(0),
        max_rpo_seconds: Some(0.0),
        ..ReportTotals::default()
    };
    report.partitions = record
        .partitions
        .iter()
        .map(|p| {
            let r = read
                .get(&(p.topic.clone(), p.partition))
                .copied()
                .unwrap_or_default();
            let (last_src, last_dst) = match r.next {
                Some((s, d)) if d > 0 => (Some(s - 1), Some(d - 1)),
                _ => (None, None),
            };
            let (rpo_records, rpo_seconds) = match (r.source, r.next) {
                (Some((end, first_ts)), Some((next, _))) => {
                    let missing = (end - next).max(0);
                    let secs = if missing == 0 || first_ts < 0 {
                        0.0
                    } else {
                        (completed_ms - first_ts).max(0) as f64 / 1000.0
                    };
                    (Some(missing), Some(secs))
                }
                _ => (None, None),
            };
            let (last_known_lag_records, last_known_age_seconds) = match (rpo_records, r.last_known)
            {
                (None, Some((lag, seen))) => {
                    (Some(lag), seen.map(|t| (now_ms - t).max(0) as f64 / 1000.0))
                }
                _ => (None, None),
            };
            totals.rpo_records = totals.rpo_records.zip(rpo_records).map(|(a, b)| a + b);
            totals.max_rpo_seconds = totals
                .max_rpo_seconds
                .zip(rpo_seconds)
                .map(|(a, b)| a.max(b));
            totals.producers_expired += u64::from(p.producers_expired);
            totals.transactions_aborted += p.transactions_aborted.len();
            let last_error = p.last_error.clone().or_else(|| {
                report
                    .failed_at_call
                    .iter()
                    .find(|f| f.topic == p.topic && f.partition == p.partition)
                    .map(|f| f.error.clone().unwrap_or_else(|| "FAILED".into()))
            });
            totals.partitions_with_errors += usize::from(last_error.is_some());
            PartitionReport {
                topic: p.topic.clone(),
                partition: p.partition,
                last_error,
                last_mirrored_source_offset: last_src,
                last_mirrored_destination_offset: last_dst,
                next_source_offset: r.next.map(|(src, _)| src),
                barrier_offset: p.barrier_offset,
                last_mirrored_offset: p.last_mirrored_offset,
                rpo_records,
                rpo_seconds,
                recoverable_records: None,
                last_known_lag_records,
                last_known_age_seconds,
                producers_expired: p.producers_expired,
                transactions_aborted: p.transactions_aborted.clone(),
            }
        })
        .collect();
    report.status = "complete".into();
    report.completed_ms = Some(completed_ms);
    report.rto_seconds = Some((completed_ms - report.called_ms).max(0) as f64 / 1000.0);
    report.totals = Some(totals);
    report.steps = step_timeline(record);
    report
}

/// Record in `report` the records of its un-mirrored tail a recovery would copy, per partition
/// (`recoverable`, from a listing of the old source); the total once every partition's figure
/// is known.
pub fn set_recoverable(report: &mut FailoverReport, recoverable: &HashMap<(String, i32), i64>) {
    for p in &mut report.partitions {
        if let Some(n) = recoverable.get(&(p.topic.clone(), p.partition)) {
            p.recoverable_records = Some(*n);
        }
    }
    if let Some(t) = report.totals.as_mut() {
        t.recoverable_records = report
            .partitions
            .iter()
            .map(|p| p.recoverable_records)
            .sum::<Option<i64>>();
    }
}

/// The reports of one mirror this instance stored and those published on the state topic
/// (several instances), one per failover: a completed one wins over one in progress, this
/// instance's own over an equal published one. Oldest call first.
pub fn merged(local: Vec<FailoverReport>, published: Vec<FailoverReport>) -> Vec<FailoverReport> {
    let mut by_id: HashMap<String, FailoverReport> = HashMap::new();
    for r in local.into_iter().chain(published) {
        match by_id.get(&r.failover_id) {
            Some(kept) if kept.is_complete() || !r.is_complete() => {}
            _ => {
                by_id.insert(r.failover_id.clone(), r);
            }
        }
    }
    let mut v: Vec<FailoverReport> = by_id.into_values().collect();
    v.sort_by(|a, b| (a.called_ms, &a.failover_id).cmp(&(b.called_ms, &b.failover_id)));
    v
}

/// Add to a completed report what other instances' forward listeners passed of the source's
/// acknowledgements that the destination lacks (`losses`, each instance's figures as it
/// published them; several instances). An instance the report counts already is skipped.
pub fn add_forwarded_losses(report: &mut FailoverReport, losses: Vec<ForwardedLoss>) {
    for loss in losses {
        let f = report.forwarded.get_or_insert_with(ForwardedLoss::default);
        if loss.instances.is_empty() || loss.instances.iter().any(|i| f.instances.contains(i)) {
            continue;
        }
        f.records += loss.records;
        f.producers.extend(loss.producers);
        f.unknown_partitions.extend(loss.unknown_partitions);
        f.unknown_partitions.sort();
        f.unknown_partitions.dedup();
        f.uncovered_topics.extend(loss.uncovered_topics);
        f.uncovered_topics.sort();
        f.uncovered_topics.dedup();
        if let Some(why) = loss.inexact {
            let why = format!("{}: {why}", loss.instances.join(", "));
            f.inexact = Some(match f.inexact.take() {
                Some(kept) => format!("{kept}; {why}"),
                None => why,
            });
        }
        f.instances.extend(loss.instances);
    }
}

/// The reports' files.
#[derive(Clone)]
pub struct ReportStore {
    store: StateStore,
}

impl ReportStore {
    pub fn new(store: StateStore) -> Self {
        ReportStore { store }
    }

    fn file(mirror: &str, failover_id: &str) -> String {
        format!("{mirror}--{failover_id}.json")
    }

    pub fn save(&self, r: &FailoverReport) -> Result<(), String> {
        let bytes = serde_json::to_vec_pretty(r).map_err(|e| e.to_string())?;
        self.store
            .write(REPORTS_AREA, &Self::file(&r.mirror, &r.failover_id), &bytes)
            .map_err(|e| e.to_string())
    }

    pub fn load(&self, mirror: &str, failover_id: &str) -> Result<Option<FailoverReport>, String> {
        match self
            .store
            .read(REPORTS_AREA, &Self::file(mirror, failover_id))
            .map_err(|e| e.to_string())?
        {
            None => Ok(None),
            Some(b) => serde_json::from_slice(&b)
                .map(Some)
                .map_err(|e| format!("failover report {mirror}/{failover_id}: {e}")),
        }
    }

    /// Every report of `mirror`, oldest call first (unreadable files are skipped, logged).
    pub fn list(&self, mirror: &str) -> Result<Vec<FailoverReport>, String> {
        let prefix = format!("{mirror}--");
        let mut v = Vec::new();
        for name in self.store.list(REPORTS_AREA).map_err(|e| e.to_string())? {
            let Some(id) = name
                .strip_prefix(&prefix)
                .and_then(|n| n.strip_suffix(".json"))
            else {
                continue;
            };
            match self.load(mirror, id) {
                Ok(Some(r)) if r.mirror == mirror => v.push(r),
                Ok(Some(_)) => {}
                Ok(None) => {}
                Err(e) => tracing::warn!(mirror, error = %e, "a failover report cannot be read"),
            }
        }
        v.sort_by_key(|r| r.called_ms);
        Ok(v)
    }
}

#[cfg(test)]
#[path = "report_tests.rs"]
mod tests;
