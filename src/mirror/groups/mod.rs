//! Consumer group offset sync (docs/moving-applications.md): for a mirror the built-in agent
//! mirrors, the committed offsets of the source's consumer groups are committed on the
//! destination for the same group ids, translated through the agent's exact offset map, every
//! `groups.sync_interval_ms`, and one last time when a failover stops the agent. After that the
//! destination's offsets belong to the applications: the sync of that mirror never writes again.
//!
//! - [`policy`]: the rules of a round over the [`policy::GroupIo`] seam (unit-tested with a fake).
//! - [`kafka_io`]: that seam over the clusters' brokers (not through the gateway's listeners).
//! - [`metrics`]: the `mirrorgate_group_sync_*` series.
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
//! Partitions: a periodic round syncs MIRRORING partitions (and PAUSED ones: no failover has
//! begun, the clamp keeps the offsets within what was mirrored); the final round also the
//! partitions the failover has not fenced yet (STOPPING without a step), so a gateway restarted
//! in the middle of a failover never syncs a fenced, STOPPED or FAILED partition.
//!
//! Owns: the sync's rounds, phase, reports and metrics.
//! Must not touch: partition states (it reads them), the offset map (it reads it), the agent's
//! tasks, topic configs and ACLs.

pub mod kafka_io;
pub mod metrics;
pub mod policy;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tokio::sync::watch;

use crate::config::{GroupFilter, GroupSyncConfig};

use metrics::GroupMetrics;
use policy::{run_round, GroupIo, GroupOutcome, GroupReport, RoundKind};

/// How long the final round may take: an unreachable source never holds a failover longer.
pub const FINAL_SYNC_BUDGET: Duration = Duration::from_secs(5);

/// How long the final sync waits for a periodic round still running (its commits go to the
/// destination, which answers quickly; a round stuck on the source has decided nothing yet).
const ROUND_DRAIN: Duration = Duration::from_secs(2);
/// The longest a periodic round waits for the consistent cut (`policy::wait_for_cut`).
const CUT_WAIT_PERIODIC: Duration = Duration::from_secs(10);
/// The longest the final round waits for it.
const CUT_WAIT_FINAL: Duration = Duration::from_secs(2);

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
    pub groups: Vec<GroupStatus>,
}

#[derive(Default)]
struct Status {
    last_complete: Option<(Instant, i64)>,
    last_error: Option<String>,
    groups: BTreeMap<String, GroupStatus>,
}

/// The group offset sync of one mirror.
pub struct GroupSync<I: GroupIo> {
    mirror: String,
    io: I,
    filter: GroupFilter,
    interval: Duration,
    phase: Mutex<Phase>,
    /// One round at a time (the final round waits for a periodic one to end).
    round: tokio::sync::Mutex<()>,
    status: Mutex<Status>,
    metrics: GroupMetrics,
    /// Whether rounds run on this instance (several instances: where the built-in agent runs,
    /// whose offset maps the rounds translate with); `None`: always.
    gate: Option<Arc<dyn Fn() -> bool + Send + Sync>>,
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
            round: tokio::sync::Mutex::new(()),
            status: Mutex::new(Status::default()),
            metrics,
            gate: None,
        })
    }

    /// Rounds run only while `gate` says so.
    pub fn with_gate(mut self, gate: Arc<dyn Fn() -> bool + Send + Sync>) -> Self {
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
            self.round(RoundKind::Periodic).await;
        }
    }

    /// One round of `kind`; it writes only while the phase is the one of its kind.
    pub async fn round(&self, kind: RoundKind) {
        let _one = self.round.lock().await;
        let allowed = match kind {
            RoundKind::Periodic => Phase::Syncing,
            RoundKind::Final => Phase::Final,
        };
        if self.phase() != allowed || self.gate.as_ref().is_some_and(|g| !g()) {
            return;
        }
        let may_write = || self.phase() == allowed;
        // How long a round waits for the consistent cut: a periodic one at most its interval
        // (and 10 s), the final one at most CUT_WAIT_FINAL (the agent has stopped: what it
        // mirrored no longer grows).
        let cut_wait = match kind {
            RoundKind::Periodic => self.interval.min(CUT_WAIT_PERIODIC),
            RoundKind::Final => CUT_WAIT_FINAL,
        };
        let report = run_round(&self.io, &self.filter, kind, &may_write, cut_wait).await;
        self.record(report);
    }

    /// The final round at fencing time, bounded by `budget`; afterwards nothing is written.
    /// A second call (a retried failover pass) does nothing.
    pub async fn final_sync(&self, budget: Duration) {
        if let Err(e) = self.advance(Phase::Final) {
            tracing::debug!(mirror = %self.mirror, error = %e, "final group sync already done");
            return;
        }
        let done = tokio::time::timeout(budget, self.round(RoundKind::Final)).await;
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
        match done {
            Ok(()) => {
                tracing::info!(mirror = %self.mirror, "final group offset sync done; the destination's group offsets now belong to the applications")
            }
            Err(_) => {
                self.metrics.error(&self.mirror);
                tracing::warn!(mirror = %self.mirror, ?budget, "final group offset sync out of time (source unreachable?); the failover goes on with the offsets of the last round")
            }
        }
    }

    fn record(&self, report: policy::RoundReport) {
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
        st.last_error = report.error.clone();
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
            groups: st.groups.values().cloned().collect(),
        }
    }

    /// Seconds since the last complete round (`None` before the first one).
    pub fn age_seconds(&self) -> Option<f64> {
        lock(&self.status)
            .last_complete
            .map(|(at, _)| at.elapsed().as_secs_f64())
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
