//! Completing a failover report: a task per open report waits until its failover completed
//! (every partition STOPPED by it), reads the source and the agent's offset map at that moment
//! (`Agent::at_completion`) and stores the completed report. Started when a failover is called,
//! and at gateway start for every report a restart left open.
//!
//! Owns: that wait. Must not touch: the report's figures (`report::complete`), the failover.

use std::sync::Arc;
use std::time::Duration;

use super::agent::Agent;
use super::controller::MirrorController;
use super::report::{complete, completed, FailoverReport, ReportStore};
use super::screening::now_ms;

/// How often an open report looks at its failover.
const POLL: Duration = Duration::from_millis(250);
/// The bound of each source read at completion.
const SOURCE_READ: Duration = Duration::from_secs(3);

/// Save `report` (just opened) and complete it in the background once its failover completes.
pub fn open(
    store: &ReportStore,
    ctl: Arc<MirrorController>,
    agent: Option<Arc<Agent>>,
    report: FailoverReport,
) {
    if let Err(e) = store.save(&report) {
        tracing::error!(mirror = %report.mirror, failover_id = %report.failover_id, error = %e, "the failover report cannot be stored");
    }
    tokio::spawn(follow(store.clone(), ctl, agent, report));
}

/// At start: follow every report of `mirrors` a restart left open.
pub fn resume(
    store: &ReportStore,
    ctl: &Arc<MirrorController>,
    agent: Option<&Arc<Agent>>,
    mirrors: &[String],
) {
    for m in mirrors {
        let Ok(reports) = store.list(m) else { continue };
        if let Some(last) = reports.iter().rev().find(|r| r.is_complete()) {
            ctl.note_failover_report(last);
        }
        for r in reports.into_iter().filter(|r| !r.is_complete()) {
            tokio::spawn(follow(store.clone(), ctl.clone(), agent.cloned(), r));
        }
    }
}

async fn follow(
    store: ReportStore,
    ctl: Arc<MirrorController>,
    agent: Option<Arc<Agent>>,
    report: FailoverReport,
) {
    loop {
        let record = ctl
            .records()
            .into_iter()
            .find(|(r, _)| r.name == report.mirror)
            .map(|(r, _)| r);
        let Some(record) = record else { return };
        if record.failover_id.as_deref() != Some(report.failover_id.as_str()) {
            // A later failover replaced it before it completed: nothing more to learn.
            return;
        }
        if completed(&record, &report.failover_id) {
            let parts: Vec<(String, i32)> = record
                .partitions
                .iter()
                .map(|p| (p.topic.clone(), p.partition))
                .collect();
            let read = match &agent {
                Some(a) => a.at_completion(&report.mirror, &parts, SOURCE_READ).await,
                None => Default::default(),
            };
            let done = complete(report, &record, &read, now_ms());
            tracing::info!(
                mirror = %done.mirror, failover_id = %done.failover_id, rto_seconds = ?done.rto_seconds,
                rpo_records = ?done.totals.and_then(|t| t.rpo_records),
                "failover report complete"
            );
            ctl.note_failover_report(&done);
            if let Err(e) = store.save(&done) {
                tracing::error!(mirror = %done.mirror, error = %e, "the failover report cannot be stored");
            }
            return;
        }
        tokio::time::sleep(POLL).await;
    }
}
