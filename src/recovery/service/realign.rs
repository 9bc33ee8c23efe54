//! The realignment of the old source after its un-mirrored tail is recovered: its topics of the
//! failover deleted and created again empty, so that a failback mirror can copy the destination
//! back; checked first (every recoverable record in the quarantine topic once, by count and
//! checksum), recorded in the report before anything is deleted, resumed when cut short.
//!
//! Owns: those checks and the order of the steps. Must not touch: the copy (`copy`), the
//! destination's topics.

use std::collections::BTreeMap;

use serde::Serialize;

use super::super::copy::{self, CopyJob};
use super::super::{RecoveryError, RecoveryIo, SourceTopicShape};
use super::Recoverer;
use crate::config::MirrorConfig;
use crate::mirror::report::FailoverReport;
use crate::mirror::screening::now_ms;

/// Refuses a listing or a recovery once the old source's topics were realigned (their tail is
/// gone) or are being realigned.
pub(super) fn not_realigned(report: &FailoverReport) -> Result<(), RecoveryError> {
    match report.recovery.as_ref().and_then(|r| r.realign_started_ms) {
        Some(at) => Err(RecoveryError::Realigned(at)),
        None => Ok(()),
    }
}

/// The answer of `POST …/failovers/{id}/unmirrored/realign`.
#[derive(Debug, Clone, Serialize)]
pub struct RealignOutcome {
    pub mirror: String,
    pub failover_id: String,
    pub dry_run: bool,
    /// The old source's topics as they were: each is deleted and created again empty, with the
    /// same partitions, replication factor and topic-level configs.
    pub topics: Vec<SourceTopicShape>,
    /// Per topic: `recreated`, `already_recreated` (a call cut short did it), or, in a dry run,
    /// `would_recreate`.
    pub actions: BTreeMap<String, String>,
    pub realigned_ms: Option<i64>,
}

impl Recoverer {
    /// Delete the old source's topics of a failover whose un-mirrored tail is recovered and
    /// verified, and create them again empty, so that a failback mirror can copy the
    /// destination back (see docs/failover.md). Refused while the quarantine topics do not hold
    /// every recoverable record once, and when the old source was written to since the listing.
    pub async fn realign(
        &self,
        report: &FailoverReport,
        dry_run: bool,
    ) -> Result<RealignOutcome, RecoveryError> {
        let (m, io) = self.prepare(report)?;
        let _running = self.claim(report)?;
        self.realign_with(m, &io, report, dry_run).await
    }

    pub(super) async fn realign_with<I: RecoveryIo>(
        &self,
        m: &MirrorConfig,
        io: &I,
        report: &FailoverReport,
        dry_run: bool,
    ) -> Result<RealignOutcome, RecoveryError> {
        let mut rec = report.recovery.clone().unwrap_or_default();
        if let Some(at) = rec.source_realigned_ms {
            return Err(RecoveryError::Realigned(at));
        }
        if rec.realign_started_ms.is_none() {
            rec.source_topics = self.checked_shapes(m, io, report).await?;
        }
        let mut out = RealignOutcome {
            mirror: m.name.clone(),
            failover_id: report.failover_id.clone(),
            dry_run,
            topics: rec.source_topics.clone(),
            actions: BTreeMap::new(),
            realigned_ms: None,
        };
        if dry_run {
            for t in &rec.source_topics {
                out.actions.insert(t.topic.clone(), "would_recreate".into());
            }
            return Ok(out);
        }
        if rec.realign_started_ms.is_none() {
            rec.realign_started_ms = Some(now_ms());
            let started = rec.clone();
            self.save(report, |r| r.recovery = Some(started));
        }
        for shape in &rec.source_topics {
            let current = io.source_topic(&shape.topic).await?;
            let action = match current {
                Some(c) if c.topic_id != shape.topic_id => "already_recreated",
                _ => {
                    io.source_recreate(&shape.topic, shape).await?;
                    "recreated"
                }
            };
            tracing::warn!(mirror = %m.name, topic = %shape.topic, action, "old source topic realigned (deleted and created again empty)");
            out.actions.insert(shape.topic.clone(), action.into());
        }
        let done = now_ms();
        rec.source_realigned_ms = Some(done);
        out.realigned_ms = Some(done);
        self.save(report, |r| r.recovery = Some(rec));
        Ok(out)
    }

    /// The old source's topics of `report`, once every partition's recoverable records are in
    /// the quarantine topic once (count and checksum) and the source has not moved since.
    async fn checked_shapes<I: RecoveryIo>(
        &self,
        m: &MirrorConfig,
        io: &I,
        report: &FailoverReport,
    ) -> Result<Vec<SourceTopicShape>, RecoveryError> {
        let (listing, tails) = self.list(m, io, report).await?;
        for (tail, listed) in tails.iter().zip(&listing.partitions) {
            let s = &tail.summary;
            let v = copy::verify(
                io,
                CopyJob {
                    failover_id: &report.failover_id,
                    source_topic: &s.topic,
                    source_partition: s.partition,
                    quarantine_topic: &listed.quarantine_topic,
                    producer: (-1, -1),
                    tail,
                },
            )
            .await?;
            if !v.verified {
                return Err(RecoveryError::NotRecovered(format!(
                    "{}-{}: {} of {} recoverable records are in {} (checksums {:08x} / {:08x}); recover first",
                    s.topic,
                    s.partition,
                    v.quarantine.records,
                    v.source.records,
                    listed.quarantine_topic,
                    v.quarantine.checksum,
                    v.source.checksum
                )));
            }
            let (_, end) = io.source_bounds(&s.topic, s.partition).await?;
            if end != s.log_end_offset {
                return Err(RecoveryError::NotRecovered(format!(
                    "{}-{} was written to during the check (log end {} then {end}): stop what writes to the old source, recover again, then realign",
                    s.topic, s.partition, s.log_end_offset
                )));
            }
        }
        let topics: std::collections::BTreeSet<&str> =
            report.partitions.iter().map(|p| p.topic.as_str()).collect();
        let mut shapes = Vec::new();
        for t in topics {
            let shape = io.source_topic(t).await?.ok_or_else(|| {
                RecoveryError::NotRecovered(format!("{t} does not exist on the old source"))
            })?;
            shapes.push(shape);
        }
        Ok(shapes)
    }
}
