//! Consumer group offset sync (docs/moving-applications.md): for a mirror the built-in agent
//! mirrors, the committed offsets of the source's consumer groups are committed on the
//! destination for the same group ids, translated through the agent's exact offset map, every
//! `groups.sync_interval_ms`, and one last time when a failover stops the agent. After that the
//! destination's offsets belong to the applications: the sync of that mirror never writes again.
//!
//! - [`io`]: the seam ([`io::GroupIo`]) the rules and the cut read the clusters through;
//! - [`policy`]: the rules of a round over that seam (unit-tested with a fake);
//! - [`cut`]: the consistent cut a round waits for before it commits.
//! - [`kafka_io`]: that seam over the clusters' brokers (not through the gateway's listeners).
//! - [`metrics`]: the `mirrorgate_group_sync_*` series.
//! - [`outcome`]: what a round did not sync, and what the final round did.
//! - [`GroupSync`]: the rounds of one mirror, its [`Phase`] and the last report of every group
//!   (in memory: each round recomputes everything, so a restarted gateway loses nothing).
//!
//! Phases (an enum; an illegal transition is a [`PhaseError`], never ignored):
//!
//! | from      | to        | when                                                        |
//! |-----------|-----------|-------------------------------------------------------------|
//! | `Syncing` | `Final`   | the failover's stop hook asks for the final round           |
//! | `Final`   | `Stopped` | the final round ended (done, failed or out of time)         |
//!
//! Periodic rounds write only in `Syncing`, the final round only in `Final`; `Stopped` writes
//! nothing. The phase is checked before every commit, and the final sync waits (bounded) for a
//! periodic round still running; the one exception is a commit already sent when the final
//! round's time runs out (answered within the request timeout).
//!
//! Several instances (review G14): rounds run where the mirror's agent runs, and the [`Gate`]
//! is asked when a round starts *and* right before every commit: this instance owns the agent,
//! holds its lease on the state topic and — for a periodic round — no failover of the mirror is
//! announced. A round that read the source before a pause writes nothing after it. A final
//! round that does not run here is reported `skipped`, with why.
//!
//! What a round did not sync is never taken for done (review H1): the groups API shows the last
//! round's groups not synced and the final round's outcome ([`outcome`]), the metric
//! `mirrorgate_group_sync_groups_not_synced` counts them, the failover report keeps the final
//! round, and its log line says what it did (INFO when complete or skipped, WARN naming the
//! groups it did not sync).
//!
//! Partitions: a periodic round syncs MIRRORING partitions (and PAUSED ones: no failover has
//! begun, the clamp keeps the offsets within what was mirrored); the final round also the
//! partitions the failover has not fenced yet (STOPPING without a step), so a gateway restarted
//! in the middle of a failover never syncs a fenced, STOPPED or FAILED partition.
//!
//! Owns: the sync's rounds, phase, reports and metrics.
//! Must not touch: partition states (it reads them), the offset map (it reads it), the agent's
//! tasks, topic configs and ACLs.

pub mod cut;
pub mod io;
pub mod kafka_io;
pub mod metrics;
pub mod outcome;
pub mod policy;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tokio::sync::watch;

use crate::config::{GroupFilter, GroupSyncConfig};

use io::{GroupIo, RoundKind};
use metrics::GroupMetrics;
use outcome::{FinalGroupSync, FinalOutcome, GroupNotSynced, RoundSummary};
use policy::{run_round, GroupOutcome, GroupReport, RoundLimits};

/// How long the final round may take: an unreachable source never holds a failover longer.
pub const FINAL_SYNC_BUDGET: Duration = Duration::from_secs(5);

/// How long the final sync waits for a periodic round still running (its commits go to the
/// destination, which answers quickly; a round stuck on the source has decided nothing yet).
const ROUND_DRAIN: Duration = Duration::from_secs(2);
/// The longest a periodic round waits for the consistent cut (`cut::wait_for_cuts`).
const CUT_WAIT_PERIODIC: Duration = Duration::from_secs(10);
/// The longest the final round waits for it.
const CUT_WAIT_FINAL: Duration = Duration::from_secs(2);
/// How long a periodic round asks retriable failures again: its interval, within these bounds.
const RETRY_PERIODIC_MIN: Duration = Duration::from_secs(2);
const RETRY_PERIODIC_MAX: Duration = Duration::from_secs(10);
/// How long the final round asks them again (a lost source answers nothing in that time: the
/// failover is not held longer).
const RETRY_FINAL: Duration = Duration::from_secs(2);

/// Whether this instance may write the group offsets of the mirror in a round of that kind now;
/// `Err` says why not (not the agent's owner, no lease on the state topic, the mirror failed
/// over through another instance). Asked when a round starts and before every commit.
pub type Gate = Arc<dyn Fn(RoundKind) -> Result<(), String> + Send + Sync>;

/// The sync's phase (transition table in the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Syncing,
    Final,
    Stopped,
}

/// An illegal phase transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("group sync: illegal phase transition {from:?} -> {to:?}")]
pub struct PhaseError {
    pub from: Phase,
    pub to: Phase,
}

impl Phase {
    /// The phase after `to`, if allowed from `self`.
    pub fn transition(self, to: Phase) -> Result<Phase, PhaseError> {
        match (self, to) {
            (Phase::Syncing, Phase::Final) | (Phase::Final, Phase::Stopped) => Ok(to),
            _ => Err(PhaseError { from: self, to }),
        }
    }
}

/// A group as the last round that saw it left it.
#[derive(Debug, Clone, Serialize)]
pub struct GroupStatus {
    #[serde(flatten)]
    pub report: GroupReport,
    /// When that round ended (ms since the epoch).
    pub last_sync_ms: i64,
}

/// What the admin API shows of a mirror's sync.
#[derive(Debug, Clone, Serialize)]
pub struct SyncStatus {
    pub mirror: String,
    pub phase: Phase,
    pub sync_interval_ms: u64,
    /// End of the last round that looked at every group without error (ms since the epoch).
    pub last_complete_round_ms: Option<i64>,
    /// Why the last round was incomplete.
    pub last_round_error: Option<String>,
    /// The groups the last round did not sync, and why (those it could not look at included).
    pub groups_not_synced: Vec<GroupNotSynced>,
    /// What the final round did (once it ended).
    pub final_round: Option<FinalGroupSync>,
    pub groups: Vec<GroupStatus>,
}

#[derive(Default)]
struct Status {
    last_complete: Option<(Instant, i64)>,
    last_error: Option<String>,
    /// What the last round synced and did not.
    last_round: RoundSummary,
    final_round: Option<FinalGroupSync>,
    groups: BTreeMap<String, GroupStatus>,
}

/// The group offset sync of one mirror.
pub struct GroupSync<I: GroupIo> {
    mirror: String,
    io: I,
    filter: GroupFilter,
    interval: Duration,
    phase: Mutex<Phase>,
    /// One round at a time (the final round waits for a periodic one to end), with the cuts
    /// the offsets read so far need.
    round: tokio::sync::Mutex<cut::CutMemory>,
    status: Mutex<Status>,
    metrics: GroupMetrics,
    /// Whether rounds may write on this instance (several instances: where the built-in agent
    /// runs, whose offset maps the rounds translate with); `None`: always.
    gate: Option<Gate>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl<I: GroupIo + 'static> GroupSync<I> {
    /// The sync of `mirror` over `io`; fails when a pattern does not compile (impossible after
    /// validation).
    pub fn new(
        mirror: &str,
        cfg: &GroupSyncConfig,
        io: I,
        metrics: GroupMetrics,
    ) -> Result<Self, regex::Error> {
        Ok(GroupSync {
            mirror: mirror.to_string(),
            io,
            filter: GroupFilter::new(cfg)?,
            interval: Duration::from_millis(cfg.sync_interval_ms),
            phase: Mutex::new(Phase::Syncing),
            round: tokio::sync::Mutex::new(cut::CutMemory::default()),
            status: Mutex::new(Status::default()),
            metrics,
            gate: None,
        })
    }

    /// Rounds run, and commit, only while `gate` says so.
    pub fn with_gate(mut self, gate: Gate) -> Self {
        self.gate = Some(gate);
        self
    }

    /// The mirror's name.
    pub fn mirror(&self) -> &str {
        &self.mirror
    }

    /// The current phase.
    pub fn phase(&self) -> Phase {
        *lock(&self.phase)
    }

    fn advance(&self, to: Phase) -> Result<(), PhaseError> {
        let mut p = lock(&self.phase);
        *p = p.transition(to)?;
        Ok(())
    }

    /// Periodic rounds until shutdown or the final round.
    pub async fn run(self: std::sync::Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(self.interval) => {}
                _ = shutdown.changed() => {}
            }
            if *shutdown.borrow() || self.phase() != Phase::Syncing {
                return;
            }
            if let Err(why) = self.round(RoundKind::Periodic).await {
                tracing::debug!(mirror = %self.mirror, why = %why, "group sync round not run on this instance");
            }
        }
    }

    /// Whether the gate lets this instance write in a round of `kind`.
    fn may_run(&self, kind: RoundKind) -> Result<(), String> {
        self.gate.as_ref().map_or(Ok(()), |g| g(kind))
    }

    /// One round of `kind`; it writes only while the phase is the one of its kind and the gate
    /// says so (asked before every commit). `Err`: it did not run, and why.
    pub async fn round(&self, kind: RoundKind) -> Result<RoundSummary, String> {
        let mut memory = self.round.lock().await;
        let allowed = match kind {
            RoundKind::Periodic => Phase::Syncing,
            RoundKind::Final => Phase::Final,
        };
        let phase = self.phase();
        if phase != allowed {
            return Err(format!("the sync's phase is {phase:?}"));
        }
        self.may_run(kind)?;
        let may_write = || {
            if self.phase() != allowed {
                return Err("the sync's phase moved on (a failover began)".to_string());
            }
            self.may_run(kind)
        };
        // How long a round waits for the consistent cut and asks retriable failures again: a
        // periodic one about its interval, the final one briefly (the agent has stopped: what
        // it mirrored no longer grows).
        let limits = match kind {
            RoundKind::Periodic => RoundLimits {
                cut_wait: self.interval.min(CUT_WAIT_PERIODIC),
                retry_for: self.interval.clamp(RETRY_PERIODIC_MIN, RETRY_PERIODIC_MAX),
            },
            RoundKind::Final => RoundLimits {
                cut_wait: CUT_WAIT_FINAL,
                retry_for: RETRY_FINAL,
            },
        };
        let report = run_round(
            &self.io,
            &self.filter,
            kind,
            &may_write,
            limits,
            &mut memory,
        )
        .await;
        Ok(self.record(report))
    }

    /// The final round at fencing time, bounded by `budget`; afterwards nothing is written.
    /// A second call (a retried failover pass) does nothing. Its outcome is kept
    /// ([`SyncStatus::final_round`]) and logged as what it did.
    pub async fn final_sync(&self, budget: Duration) {
        if let Err(e) = self.advance(Phase::Final) {
            tracing::debug!(mirror = %self.mirror, error = %e, "final group sync already done");
            return;
        }
        let ran = tokio::time::timeout(budget, self.round(RoundKind::Final)).await;
        // A periodic round still running decided its commits before the phase changed: wait
        // (bounded) until its last request is answered, so none lands after the failover goes on.
        if tokio::time::timeout(ROUND_DRAIN, self.round.lock())
            .await
            .is_err()
        {
            tracing::warn!(mirror = %self.mirror, "a group sync round is still waiting for a cluster; it writes nothing more");
        }
        if let Err(e) = self.advance(Phase::Stopped) {
            tracing::error!(mirror = %self.mirror, error = %e, "group sync phase");
        }
        let outcome = match ran {
            Ok(Ok(summary)) => summary.into_final(now_ms()),
            Ok(Err(why)) => FinalGroupSync::skipped(why, now_ms()),
            Err(_) => {
                self.metrics.error(&self.mirror);
                let why = format!(
                    "out of time after {budget:?} (a cluster did not answer; the source unreachable?)"
                );
                let known: Vec<String> = lock(&self.status).groups.keys().cloned().collect();
                let cut_short = policy::RoundReport {
                    groups: Vec::new(),
                    error: Some(why),
                };
                RoundSummary::of(&cut_short, known).into_final(now_ms())
            }
        };
        self.log_final(&outcome);
        lock(&self.status).final_round = Some(outcome);
    }

    fn log_final(&self, f: &FinalGroupSync) {
        let m = &self.mirror;
        match f.outcome {
            FinalOutcome::Complete => tracing::info!(mirror = %m, groups = f.groups_synced,
                "final group offset sync done: every group synced; the destination's group offsets now belong to the applications"),
            FinalOutcome::Incomplete => {
                tracing::warn!(mirror = %m, error = ?f.error, groups_synced = f.groups_synced,
                "final group offset sync incomplete: {} group(s) not synced: {}; they resume on the destination from the offsets of an earlier round (or their reset policy) and re-read what they consumed since; the destination's group offsets now belong to the applications",
                f.groups_not_synced.len(), f.not_synced_line())
            }
            FinalOutcome::Skipped => tracing::info!(mirror = %m, why = ?f.error,
                "final group offset sync skipped on this instance: it wrote no group offsets at this failover"),
        }
    }

    /// Keep what a round did; what it synced and did not.
    fn record(&self, report: policy::RoundReport) -> RoundSummary {
        let now = now_ms();
        let complete = report.complete();
        let mut st = lock(&self.status);
        for g in &report.groups {
            match &g.outcome {
                GroupOutcome::Synced => {}
                GroupOutcome::SkippedActive => self.metrics.skipped_active(&self.mirror),
                GroupOutcome::Error(e) => {
                    self.metrics.error(&self.mirror);
                    tracing::warn!(mirror = %self.mirror, group = %g.group, error = %e, "group offset sync failed for a group");
                }
                GroupOutcome::WaitingForMirror(why) => {
                    tracing::info!(mirror = %self.mirror, group = %g.group, why = %why, "group offsets not synced in this round: the mirror does not hold yet what transactions wrote before they were read");
                }
            }
            self.metrics.commits(&self.mirror, g.commits as u64);
        }
        if let Some(e) = &report.error {
            self.metrics.error(&self.mirror);
            tracing::warn!(mirror = %self.mirror, error = %e, "group offset sync round incomplete");
        }
        let summary = RoundSummary::of(&report, st.groups.keys().cloned().collect::<Vec<_>>());
        st.last_error = report.error.clone();
        st.last_round = summary.clone();
        if complete {
            st.last_complete = Some((Instant::now(), now));
            // A complete round saw every group that still has offsets for this mirror.
            st.groups
                .retain(|g, _| report.groups.iter().any(|r| &r.group == g));
        }
        for g in report.groups {
            st.groups.insert(
                g.group.clone(),
                GroupStatus {
                    report: g,
                    last_sync_ms: now,
                },
            );
        }
        summary
    }

    /// The admin view.
    pub fn status(&self) -> SyncStatus {
        let st = lock(&self.status);
        SyncStatus {
            mirror: self.mirror.clone(),
            phase: self.phase(),
            sync_interval_ms: self.interval.as_millis() as u64,
            last_complete_round_ms: st.last_complete.map(|(_, ms)| ms),
            last_round_error: st.last_error.clone(),
            groups_not_synced: st.last_round.not_synced.clone(),
            final_round: st.final_round.clone(),
            groups: st.groups.values().cloned().collect(),
        }
    }

    /// Seconds since the last complete round (`None` before the first one).
    pub fn age_seconds(&self) -> Option<f64> {
        lock(&self.status)
            .last_complete
            .map(|(at, _)| at.elapsed().as_secs_f64())
    }

    /// Per reason, how many groups the last round did not sync (every reason, 0 included).
    pub fn not_synced_counts(&self) -> Vec<(&'static str, usize)> {
        let st = lock(&self.status);
        outcome::NotSynced::ALL
            .iter()
            .map(|w| (w.label(), st.last_round.count(*w)))
            .collect()
    }

    /// Per group, the sum of its partitions' lag (records) from the last round.
    pub fn lags(&self) -> Vec<(String, i64)> {
        lock(&self.status)
            .groups
            .values()
            .map(|g| {
                let sum = g
                    .report
                    .partitions
                    .iter()
                    .filter_map(|p| p.lag)
                    .map(|l| l.max(0))
                    .sum();
                (g.report.group.clone(), sum)
            })
            .collect()
    }
}

#[cfg(test)]
#[path = "policy_tests.rs"]
mod tests;
