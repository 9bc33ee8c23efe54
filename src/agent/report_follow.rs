//! Completing a failover report: a task per open report waits until its failover completed
//! (every partition STOPPED by it), reads the source and the agent's offset map at that moment
//! (`Agent::at_completion`) and what the group sync's final round did, and stores the completed
//! report. Started when a failover is called,
//! at gateway start for every report a restart left open, and — several instances — for a
//! report published open on the state topic whose failover this instance drives now (it took
//! the failover over). With several instances each report is also published on the state
//! topic when opened and when completed, so that every instance shows it.
//!
//! Owns: that wait and the publication. Must not touch: the report's figures
//! (`report::complete`), the failover.

use std::sync::Arc;
use std::time::Duration;

use crate::agent::Agent;
use crate::controller::MirrorController;
use crate::mirror::report::{complete, completed, FailoverReport, ReportStore};
use crate::mirror::screening::now_ms;

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
    let store = store.clone();
    tokio::spawn(async move {
        publish(&ctl, &report).await;
        follow(store, ctl, agent, report).await
    });
}

/// How often a report is offered to the state topic before the publication is given up.
const PUBLISH_ATTEMPTS: u32 = 30;
const PUBLISH_RETRY: Duration = Duration::from_secs(2);

/// How long a failover driven here may go without a report before this instance opens one.
const REPORT_GRACE_MS: i64 = 10_000;

/// The report to open for the failover of `mirror` this instance drives, when there is none
/// here nor published (`published`) for it `REPORT_GRACE_MS` after this instance took it up:
/// its first driver ended before it published the report it opened at the call.
fn unreported(
    ctl: &MirrorController,
    store: &ReportStore,
    mirror: &str,
    published: &[FailoverReport],
) -> Option<FailoverReport> {
    let (record, _) = ctl.records().into_iter().find(|(r, _)| r.name == mirror)?;
    let fid = record.failover_id.as_deref()?;
    let started = record.started_ms?;
    if !ctl.drives_here(mirror, fid)
        || now_ms() - started < REPORT_GRACE_MS
        || published.iter().any(|r| r.failover_id == fid)
        || !matches!(store.load(mirror, fid), Ok(None))
    {
        return None;
    }
    Some(FailoverReport::open(
        mirror,
        fid,
        "taken over (the report opened at the call was not published)".into(),
        started,
        (None, None, false),
        Vec::new(),
        None,
    ))
}

/// Publish `report` on the state topic (several instances), retried for about a minute.
async fn publish(ctl: &MirrorController, report: &FailoverReport) {
    for attempt in 1..=PUBLISH_ATTEMPTS {
        match ctl.publish_report(report).await {
            Ok(()) => return,
            Err(e) if attempt == PUBLISH_ATTEMPTS => {
                tracing::error!(mirror = %report.mirror, failover_id = %report.failover_id, error = %e,
                    "the failover report is not on the state topic: the other instances do not show it (it stays in this instance's state directory)");
            }
            Err(e) => {
                if attempt == 1 {
                    tracing::warn!(mirror = %report.mirror, failover_id = %report.failover_id, error = %e,
                        "the failover report is not published on the state topic yet; retried");
                }
                tokio::time::sleep(PUBLISH_RETRY).await;
            }
        }
    }
}

/// Several instances: every second, take up each report published open on the state topic
/// whose failover this instance drives now and has no report of (it took the failover over):
/// stored here and completed by this instance. Until `shutdown`.
pub async fn take_over_open_reports(
    store: ReportStore,
    ctl: Arc<MirrorController>,
    agent: Option<Arc<Agent>>,
    mirrors: Vec<String>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        for m in &mirrors {
            let published = ctl.published_reports(m);
            if let Some(r) = unreported(&ctl, &store, m, &published) {
                tracing::warn!(mirror = %m, failover_id = %r.failover_id,
                    "this instance drives a failover of which no report was published (the instance it was called on ended first): it opens the report");
                open(&store, ctl.clone(), agent.clone(), r);
            }
            for r in published {
                if r.is_complete()
                    || !ctl.drives_here(m, &r.failover_id)
                    || !matches!(store.load(m, &r.failover_id), Ok(None))
                {
                    continue;
                }
                tracing::info!(mirror = %m, failover_id = %r.failover_id,
                    "this instance drives the failover now: it completes its report");
                if let Err(e) = store.save(&r) {
                    tracing::error!(mirror = %m, error = %e, "the failover report cannot be stored");
                    continue;
                }
                tokio::spawn(follow(store.clone(), ctl.clone(), agent.clone(), r));
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = shutdown.changed() => return,
        }
    }
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
            let mut done = complete(report, &record, &read, now_ms());
            // Several instances: named as this instance's, the others' are added when read.
            let me = ctl.peer_link().map(|l| l.me());
            done.forwarded = agent
                .as_ref()
                .and_then(|a| a.forwarded_loss(&done.mirror, &read))
                .map(|f| match &me {
                    Some(me) => f.of_instance(me),
                    None => f,
                });
            // The final round this instance ran for this failover (not one of an earlier one).
            done.final_group_sync = agent
                .as_ref()
                .and_then(|a| a.group_sync(&done.mirror))
                .and_then(|g| g.status().final_round)
                .filter(|f| f.ended_ms >= done.called_ms);
            tracing::info!(
                mirror = %done.mirror, failover_id = %done.failover_id, rto_seconds = ?done.rto_seconds,
                rpo_records = ?done.totals.and_then(|t| t.rpo_records),
                "failover report complete"
            );
            ctl.note_failover_report(&done);
            if let Err(e) = store.save(&done) {
                tracing::error!(mirror = %done.mirror, error = %e, "the failover report cannot be stored");
            }
            publish(&ctl, &done).await;
            return;
        }
        tokio::time::sleep(POLL).await;
    }
}
