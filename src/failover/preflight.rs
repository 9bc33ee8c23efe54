//! The failover preflight: from what the gateway knows of a mirror now (its partitions' states
//! and errors, the agent's lag and source reachability, the PSM, the destination leaders), the
//! verdict `go` / `no-go` with its reasons, and the guards a failover call may set
//! (`max_lag_records`, `max_lag_seconds`). Changes nothing.
//!
//! No-go: a partition FAILED (named, with its error: a failover from it would hide that the
//! destination lacks what the source has), a partition without a destination leader (its
//! barrier cannot be written), a PSM not rebuilt (the failover would wait for it), a mirror
//! whose state cannot be read, a guard exceeded. An unreachable source is reported, never a
//! reason by itself: that is the disaster case a failover is for.
//!
//! Owns: those rules ([`assess`], a pure function of [`MirrorFacts`]). Must not touch: how the
//! facts are gathered (the admin API asks the controller, the agent, the PSM and the cluster
//! view), the failover itself.

use serde::Serialize;

/// What the gateway knows of one partition now.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PartitionFacts {
    pub topic: String,
    pub partition: i32,
    /// MIRRORING, PAUSED, STOPPING, FAILED, STOPPED.
    pub state: String,
    pub last_error: Option<String>,
    /// Records and seconds behind the source (built-in agent), when known.
    pub lag_records: Option<i64>,
    pub lag_seconds: Option<f64>,
    /// Bytes behind the source, estimated from the average bytes per offset the agent
    /// mirrored for the partition.
    pub lag_bytes_estimate: Option<i64>,
    /// When the source's log end last moved (ms since the epoch; built-in agent).
    pub source_end_moved_ms: Option<i64>,
    /// The destination leader's node id (`None`: leaderless or unknown).
    pub leader: Option<i32>,
    /// The PSM of the partition is rebuilt.
    pub psm_ready: bool,
    /// Producers the PSM holds for the partition.
    pub psm_producers: usize,
    /// Transactions open in the partition (as the PSM holds them).
    pub open_transactions: usize,
}

/// What the gateway knows of one mirror now.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MirrorFacts {
    pub mirror: String,
    /// Why the mirror's state cannot be read, if it cannot.
    pub state_unreadable: Option<String>,
    /// The built-in agent's view of the source: `None` without an agent.
    pub source: Option<SourceFacts>,
    pub partitions: Vec<PartitionFacts>,
    /// Why a control barrier cannot be written (the gateway's principal lacks a permission),
    /// when known; the failover then writes the data barrier (`failover.barrier: auto`).
    pub barrier_permission: Option<String>,
    /// Producer ids in the screening set (the failover advances the brokers' allocators past
    /// them).
    pub screened_ids: usize,
    /// The failover ends with a final round of the consumer group offset sync.
    pub final_group_sync: bool,
    /// The last completed failover of this mirror: (seconds, partitions).
    pub last_failover: Option<(f64, usize)>,
    /// Now (ms since the epoch).
    pub now_ms: i64,
}

/// What a failover is expected to take, and from what.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExpectedDuration {
    pub seconds: f64,
    /// The terms of the estimate, readable.
    pub basis: Vec<String>,
}

/// Fencing, draining a quiet mirror listener and one barrier round per leader, whatever the
/// partition count (the failover benchmark measures 0.13-0.22 s for 1,000 partitions).
pub const EXPECTED_BASE_SECONDS: f64 = 0.5;
/// Per partition: its steps persisted and its barrier written.
pub const EXPECTED_SECONDS_PER_PARTITION: f64 = 0.001;
/// Producer ids the allocator step skips per second (measured: about 15,000 with 4
/// connections x 64 in flight per broker).
pub const EXPECTED_IDS_PER_SECOND: f64 = 15_000.0;
/// The final group sync's bound.
pub const EXPECTED_FINAL_GROUP_SYNC_SECONDS: f64 = 2.0;

/// The estimate of a failover's duration (call to every partition STOPPED) from `facts`.
pub fn expected_duration(facts: &MirrorFacts) -> ExpectedDuration {
    let active = facts
        .partitions
        .iter()
        .filter(|p| p.state != "STOPPED")
        .count();
    let mut seconds = EXPECTED_BASE_SECONDS;
    let mut basis = vec![format!(
        "{EXPECTED_BASE_SECONDS} s to fence, drain and write one barrier round"
    )];
    let per_partition = active as f64 * EXPECTED_SECONDS_PER_PARTITION;
    seconds += per_partition;
    basis.push(format!("{per_partition:.3} s for {active} partitions"));
    if facts.screened_ids > 0 {
        let s = facts.screened_ids as f64 / EXPECTED_IDS_PER_SECOND;
        seconds += s;
        basis.push(format!(
            "{s:.3} s to advance the producer-id allocators past {} screened ids (at most)",
            facts.screened_ids
        ));
    }
    if facts.final_group_sync {
        seconds += EXPECTED_FINAL_GROUP_SYNC_SECONDS;
        basis.push(format!(
            "{EXPECTED_FINAL_GROUP_SYNC_SECONDS} s for the final consumer group offset sync (at most)"
        ));
    }
    if let Some((rto, n)) = facts.last_failover {
        basis.push(format!(
            "for comparison: the last failover of this mirror took {rto:.3} s for {n} partitions"
        ));
    }
    ExpectedDuration { seconds, basis }
}

/// The source cluster as the built-in agent sees it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SourceFacts {
    pub reachable: bool,
    /// Since when it is (un)reachable (ms since the epoch; 0: since the gateway started).
    pub since_ms: i64,
}

/// Limits a failover call sets; exceeding one makes it no-go (refused unless forced).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Guards {
    #[serde(default)]
    pub max_lag_records: Option<i64>,
    #[serde(default)]
    pub max_lag_seconds: Option<f64>,
}

/// The answer of a preflight.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Assessment {
    pub mirror: String,
    /// `go` or `no-go`.
    pub verdict: &'static str,
    /// Why no-go (empty for go).
    pub reasons: Vec<String>,
    /// Whether a guard is among the reasons (a failover call refuses only for those).
    pub guard_exceeded: bool,
    /// Worth knowing, not a reason (e.g. the source is unreachable).
    pub warnings: Vec<String>,
    pub guards: Guards,
    pub source: Option<SourceFacts>,
    pub totals: Totals,
    pub expected_duration: ExpectedDuration,
    pub partitions: Vec<PartitionFacts>,
}

/// Sums over the partitions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Totals {
    pub partitions: usize,
    pub failed: usize,
    pub lag_records: i64,
    /// Sum of the partitions' estimates (those without one count 0).
    pub lag_bytes_estimate: i64,
    pub max_lag_seconds: f64,
    pub open_transactions: usize,
    pub psm_producers: usize,
    /// Partitions whose source log end moved in the last [`SOURCE_WRITTEN_WITHIN_MS`]:
    /// producers still write to the source.
    pub source_still_written: usize,
}

/// A source log end that moved this recently means producers still write to the source.
pub const SOURCE_WRITTEN_WITHIN_MS: i64 = 30_000;

/// The verdict on `facts` under `guards` (module doc).
pub fn assess(facts: MirrorFacts, guards: Guards) -> Assessment {
    let mut reasons = Vec::new();
    let mut warnings = Vec::new();
    let mut guard_exceeded = false;
    if let Some(e) = &facts.state_unreadable {
        reasons.push(format!("the mirror's state cannot be read: {e}"));
    }
    let active: Vec<&PartitionFacts> = facts
        .partitions
        .iter()
        .filter(|p| p.state != "STOPPED")
        .collect();
    if active.is_empty() && facts.state_unreadable.is_none() {
        reasons.push("every partition is STOPPED already: nothing to fail over".into());
    }
    let mut totals = Totals {
        partitions: facts.partitions.len(),
        ..Totals::default()
    };
    for p in &facts.partitions {
        let name = format!("{}-{}", p.topic, p.partition);
        totals.lag_records += p.lag_records.unwrap_or(0).max(0);
        totals.lag_bytes_estimate += p.lag_bytes_estimate.unwrap_or(0).max(0);
        totals.max_lag_seconds = totals.max_lag_seconds.max(p.lag_seconds.unwrap_or(0.0));
        totals.open_transactions += p.open_transactions;
        totals.psm_producers += p.psm_producers;
        if p.source_end_moved_ms
            .is_some_and(|t| facts.now_ms - t < SOURCE_WRITTEN_WITHIN_MS)
        {
            totals.source_still_written += 1;
        }
        if p.state == "STOPPED" {
            continue;
        }
        if p.state == "FAILED" {
            totals.failed += 1;
            reasons.push(format!(
                "{name} is FAILED: {}{}",
                p.last_error.as_deref().unwrap_or("no error recorded"),
                match p.lag_records {
                    Some(n) if n > 0 => format!(" ({n} source records not on the destination)"),
                    _ => String::new(),
                }
            ));
        }
        if p.leader.is_none() {
            reasons.push(format!(
                "{name} has no destination leader: its barrier cannot be written"
            ));
        }
        if !p.psm_ready {
            reasons.push(format!(
                "{name}: the producer state is not rebuilt yet (the failover would wait for it)"
            ));
        }
        if let (Some(max), Some(lag)) = (guards.max_lag_records, p.lag_records) {
            if lag > max {
                guard_exceeded = true;
                reasons.push(format!(
                    "{name} is {lag} records behind the source, above max_lag_records {max}"
                ));
            }
        }
        if let (Some(max), Some(lag)) = (guards.max_lag_seconds, p.lag_seconds) {
            if lag > max {
                guard_exceeded = true;
                reasons.push(format!(
                    "{name} is {lag:.1} s behind the source, above max_lag_seconds {max}"
                ));
            }
        }
    }
    if let Some(s) = &facts.source {
        if !s.reachable {
            let age = (facts.now_ms - s.since_ms).max(0) / 1000;
            warnings.push(format!(
                "the source cluster is unreachable (for {age} s): the lag shown is the last known"
            ));
        }
    }
    if totals.source_still_written > 0 {
        warnings.push(format!(
            "producers still write to the source ({} partitions' log ends moved in the last {} s): what they write after the failover is not on the destination",
            totals.source_still_written,
            SOURCE_WRITTEN_WITHIN_MS / 1000
        ));
    }
    if totals.open_transactions > 0 {
        warnings.push(format!(
            "{} mirrored transactions are open: the failover aborts them",
            totals.open_transactions
        ));
    }
    if let Some(why) = &facts.barrier_permission {
        warnings.push(format!(
            "the barrier cannot be a control batch ({why}): the data barrier is written instead"
        ));
    }
    let expected = expected_duration(&facts);
    Assessment {
        expected_duration: expected,
        mirror: facts.mirror,
        verdict: if reasons.is_empty() { "go" } else { "no-go" },
        reasons,
        guard_exceeded,
        warnings,
        guards,
        source: facts.source,
        totals,
        partitions: facts.partitions,
    }
}

#[cfg(test)]
#[path = "preflight_tests.rs"]
mod tests;
