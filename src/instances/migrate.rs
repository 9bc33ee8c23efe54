//! `mirrorgate state migrate`: what a state directory holds that the state topic does not, as
//! the records to append so that every instance learns it. For a gateway that ran alone (or
//! whose state topic was recreated empty) and is joined by other instances: a failover it
//! completed, a pause, its failover reports and the agent's offset maps. Pure: the caller reads
//! the state directory and the state topic, and appends what [`plan`] returns.
//!
//! The rules:
//! - A completed failover the state topic never named is moved as its announcement (this
//!   instance drove it, epoch 1), its barrier producer and its handover (every partition at its
//!   barrier, with the producer ids this instance screens). Every other instance then adopts it.
//! - A failover the state topic knows is left as it is. One not complete here, or a mirror for
//!   which the state topic shows another failover now, is not moved: it is a problem to resolve
//!   first (finish the failover; or this directory is older than the state topic).
//! - A paused mirror is moved as a pause, unless the state topic shows it failed over.
//! - Reports and offset maps the state topic lacks are published as they are.
//!
//! Running it again appends nothing: everything moved is known to the state topic then.
//!
//! Owns: those rules. Must not touch: the state directory's or the state topic's I/O.

use super::records::{PeerRecord, ScreenedProducer, Stopped, StoppedPartition};
use super::view::PeerView;
use crate::mirror::report::FailoverReport;
use crate::mirror::state::{BarrierKind, MirrorRecord, PartitionState};

/// What a state directory holds (the caller read it).
#[derive(Debug, Default)]
pub struct Local {
    /// The mirror records of the configured mirrors.
    pub records: Vec<MirrorRecord>,
    /// The screening set.
    pub screened: Vec<ScreenedProducer>,
    /// The failover reports, every mirror's.
    pub reports: Vec<FailoverReport>,
    /// (mirror, the agent's offset maps in their file format).
    pub agent_offsets: Vec<(String, serde_json::Value)>,
}

/// The records to append, what each does, and what cannot be moved.
#[derive(Debug, Default)]
pub struct Plan {
    pub records: Vec<PeerRecord>,
    /// One line per record kind moved or left, readable.
    pub notes: Vec<String>,
    /// What was not moved, with what to do; a migration with problems is not complete.
    pub problems: Vec<String>,
}

/// The plan of instance `me` for moving `local` into the state topic read into `view`.
pub fn plan(me: &str, view: &PeerView, local: &Local, now_ms: i64) -> Plan {
    let mut out = Plan::default();
    for r in &local.records {
        let m = r.name.as_str();
        if let Some(fid) = r.failover_id.as_deref() {
            failover(me, view, local, r, fid, now_ms, &mut out);
        }
        let paused = r
            .partitions
            .iter()
            .any(|p| p.state == PartitionState::Paused);
        if paused && !view.paused(m) && view.driver(m).is_none() {
            out.records.push(PeerRecord::Paused {
                mirror: m.to_string(),
                paused: true,
                by: me.to_string(),
                at_ms: now_ms,
            });
            out.notes.push(format!("mirror {m}: paused"));
        }
        let published = view.reports(m);
        for rep in local.reports.iter().filter(|rep| rep.mirror == m) {
            if !published.iter().any(|p| p.failover_id == rep.failover_id) {
                out.records.push(PeerRecord::Report(Box::new(rep.clone())));
                out.notes.push(format!(
                    "mirror {m}: the report of failover {}",
                    rep.failover_id
                ));
            }
        }
        if view.agent_offsets(m).is_none() {
            if let Some((_, maps)) = local.agent_offsets.iter().find(|(n, _)| n == m) {
                out.records.push(PeerRecord::AgentOffsets {
                    mirror: m.to_string(),
                    by: me.to_string(),
                    epoch: 0,
                    offsets: maps.clone(),
                });
                out.notes
                    .push(format!("mirror {m}: the built-in agent's offset maps"));
            }
        }
    }
    out
}

/// The records moving failover `fid` of mirror record `r`, or the problem that keeps it here.
fn failover(
    me: &str,
    view: &PeerView,
    local: &Local,
    r: &MirrorRecord,
    fid: &str,
    now_ms: i64,
    out: &mut Plan,
) {
    let m = r.name.as_str();
    if view.knows_failover(m, fid) {
        out.notes.push(format!(
            "mirror {m}: failover {fid} is on the state topic already"
        ));
        return;
    }
    if let Some(a) = view.driver(m) {
        out.problems.push(format!(
            "mirror {m}: the state topic shows failover {} (through instance {}) and this state directory failover {fid}: not moved. This directory is older than the state topic; the state topic is kept",
            a.failover_id, a.by
        ));
        return;
    }
    if r.partitions.is_empty() || !r.all_stopped() {
        out.problems.push(format!(
            "mirror {m}: failover {fid} is not complete in this state directory: complete it (start the gateway with this configuration) and migrate again"
        ));
        return;
    }
    out.records.push(PeerRecord::Failover {
        mirror: m.to_string(),
        failover_id: Some(fid.to_string()),
        by: me.to_string(),
        at_ms: r.started_ms.unwrap_or(now_ms),
        epoch: 1,
    });
    if let Some(producer) = r
        .partitions
        .iter()
        .filter(|p| p.barrier_kind == Some(BarrierKind::Control))
        .find_map(|p| p.barrier_producer)
    {
        out.records.push(PeerRecord::BarrierProducer {
            mirror: m.to_string(),
            failover_id: fid.to_string(),
            producer,
            by: me.to_string(),
        });
    }
    let partitions: Vec<StoppedPartition> = r
        .partitions
        .iter()
        .filter_map(StoppedPartition::of)
        .collect();
    out.notes.push(format!(
        "mirror {m}: failover {fid}, {} partitions STOPPED at their barriers, {} producer ids screened",
        partitions.len(),
        local.screened.len()
    ));
    out.records.push(PeerRecord::Stopped(Stopped {
        mirror: m.to_string(),
        failover_id: fid.to_string(),
        by: me.to_string(),
        at_ms: now_ms,
        partitions,
        screened: local.screened.clone(),
    }));
}

#[cfg(test)]
#[path = "migrate_tests.rs"]
mod tests;
