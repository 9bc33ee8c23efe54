//! The calls of the admin API on a failover's un-mirrored tail: the listing (read-only), the
//! recovery and its dry run; their guards (a complete failover of a mirror with a source, one
//! recovery of a failover at a time on this instance); the report's `recoverable_records`; the
//! metrics `mirrorgate_unmirrored_records` and `mirrorgate_recovered_records_total`.
//!
//! Owns: which partitions a call covers (every partition of the failover's report) and where
//! each one's tail starts (the report's last mirrored source offset + 1; the source's log start
//! when nothing was mirrored). Must not touch: the copy's rules (`copy`), mirror topics.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus::{IntCounterVec, IntGaugeVec, Opts};
use serde::Serialize;

use super::copy::{self, CopyJob, CopyOutcome};
use super::kafka_io::KafkaRecoveryIo;
use super::tail::{Tail, TailSummary};
use super::{RecoveryError, RecoveryIo};
use crate::client::Connector;
use crate::config::{MirrorConfig, TopicMatcher};
use crate::metrics::Metrics;
use crate::mirror::report::{
    set_recoverable, FailoverReport, PartitionReport, RecoveryRecord, ReportStore,
};
use crate::mirror::screening::now_ms;

mod realign;
use realign::not_realigned;
pub use realign::RealignOutcome;

/// One partition of a listing.
#[derive(Debug, Clone, Serialize)]
pub struct PartitionListing {
    #[serde(flatten)]
    pub tail: TailSummary,
    /// The failover report's figure, for comparison: source log end at completion − the first
    /// offset not mirrored.
    pub rpo_records: Option<i64>,
    pub quarantine_topic: String,
    /// Records of this tail already in the quarantine topic, and those still to copy.
    pub recovered_records: i64,
    pub remaining_records: i64,
}

/// Sums over the partitions of a listing.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct ListingTotals {
    pub records: i64,
    pub bytes: i64,
    pub recoverable_records: i64,
    pub recovered_records: i64,
    pub remaining_records: i64,
    pub committed: i64,
    pub aborted: i64,
    pub open: i64,
    pub offsets_removed: i64,
    pub rpo_records: Option<i64>,
}

/// The answer of `GET …/failovers/{id}/unmirrored`.
#[derive(Debug, Clone, Serialize)]
pub struct Listing {
    pub mirror: String,
    pub failover_id: String,
    pub read_ms: i64,
    pub partitions: Vec<PartitionListing>,
    pub totals: ListingTotals,
    /// What an operator should know (records removed by retention, more records than the
    /// report counted).
    pub warnings: Vec<String>,
}

/// One partition of a recovery.
#[derive(Debug, Clone, Serialize)]
pub struct PartitionRecovery {
    pub topic: String,
    pub partition: i32,
    pub quarantine_topic: String,
    pub recoverable_records: i64,
    #[serde(flatten)]
    pub copy: CopyOutcome,
}

/// The answer of `POST …/failovers/{id}/unmirrored/recover`.
#[derive(Debug, Clone, Serialize)]
pub struct RecoveryOutcome {
    pub mirror: String,
    pub failover_id: String,
    pub dry_run: bool,
    /// Dry run: what the call would copy (the listing).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan: Option<Listing>,
    pub partitions: Vec<PartitionRecovery>,
    pub copied: i64,
    pub recovered_records: i64,
    pub recoverable_records: i64,
    /// Every partition's quarantine holds each recoverable record once, in order.
    pub verified: bool,
}

/// The recovery's metrics.
#[derive(Clone)]
struct RecoveryMetrics {
    unmirrored: IntGaugeVec,
    recovered: IntCounterVec,
}

impl RecoveryMetrics {
    fn register(metrics: &Metrics) -> Result<Self, String> {
        let unmirrored = IntGaugeVec::new(
            Opts::new(
                "mirrorgate_unmirrored_records",
                "Records of a failover's un-mirrored tail on the old source that a recovery would \
                 copy and that are not in the quarantine topic yet, per mirror topic, as of the \
                 last listing or recovery on this instance.",
            ),
            &["mirror", "topic"],
        )
        .map_err(|e| e.to_string())?;
        let recovered = IntCounterVec::new(
            Opts::new(
                "mirrorgate_recovered_records_total",
                "Records of un-mirrored tails this instance copied into quarantine topics.",
            ),
            &["mirror", "topic"],
        )
        .map_err(|e| e.to_string())?;
        // Registration fails only for a second gateway in the same process (tests).
        let _ = metrics.registry().register(Box::new(unmirrored.clone()));
        let _ = metrics.registry().register(Box::new(recovered.clone()));
        Ok(RecoveryMetrics {
            unmirrored,
            recovered,
        })
    }
}

/// The recovery of every mirror of this gateway.
pub struct Recoverer {
    mirrors: BTreeMap<String, MirrorConfig>,
    matchers: Vec<(String, TopicMatcher)>,
    destination: (Connector, Vec<String>),
    timeout: Duration,
    reports: Option<ReportStore>,
    metrics: RecoveryMetrics,
    running: Mutex<HashSet<String>>,
}

/// Releases a failover's slot in [`Recoverer::running`].
struct RunningGuard<'a>(&'a Mutex<HashSet<String>>, String);

impl Drop for RunningGuard<'_> {
    fn drop(&mut self) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.1);
    }
}

impl Recoverer {
    /// `destination`: the gateway's connector to the destination and its bootstrap addresses.
    pub fn new(
        mirrors: &[MirrorConfig],
        destination: (Connector, Vec<String>),
        timeout: Duration,
        reports: Option<ReportStore>,
        metrics: &Metrics,
    ) -> Result<Arc<Self>, String> {
        Ok(Arc::new(Recoverer {
            mirrors: mirrors
                .iter()
                .map(|m| (m.name.clone(), m.clone()))
                .collect(),
            matchers: mirrors
                .iter()
                .filter_map(|m| Some((m.name.clone(), TopicMatcher::for_mirror(m).ok()?)))
                .collect(),
            destination,
            timeout,
            reports,
            metrics: RecoveryMetrics::register(metrics)?,
            running: Mutex::new(HashSet::new()),
        }))
    }

    /// The one recovery or realignment of `report`'s failover running on this instance, until
    /// the guard is dropped.
    fn claim(&self, report: &FailoverReport) -> Result<RunningGuard<'_>, RecoveryError> {
        let key = format!("{}/{}", report.mirror, report.failover_id);
        if !self
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.clone())
        {
            return Err(RecoveryError::Running(report.failover_id.clone()));
        }
        Ok(RunningGuard(&self.running, key))
    }

    /// The mirror of `report`, checked: complete, with a source; and its I/O.
    fn prepare(
        &self,
        report: &FailoverReport,
    ) -> Result<(&MirrorConfig, KafkaRecoveryIo), RecoveryError> {
        let m = self
            .mirrors
            .get(&report.mirror)
            .ok_or_else(|| RecoveryError::UnknownMirror(report.mirror.clone()))?;
        if !report.is_complete() {
            return Err(RecoveryError::NotComplete(report.failover_id.clone()));
        }
        let source = m
            .source
            .as_ref()
            .ok_or_else(|| RecoveryError::NoSource(m.name.clone()))?;
        for p in &report.partitions {
            let q = m.recovery.quarantine_for(&p.topic);
            if let Some((other, _)) = self.matchers.iter().find(|(_, mt)| mt.matches(&q)) {
                return Err(RecoveryError::QuarantineMirrored {
                    mirror: other.clone(),
                    topic: p.topic.clone(),
                    quarantine: q,
                });
            }
        }
        let connector = Connector::for_cluster(source)
            .map_err(|e| RecoveryError::Io(format!("source cluster: {e}")))?;
        let io = KafkaRecoveryIo::new(
            (connector, source.bootstrap.clone()),
            self.destination.clone(),
            self.timeout,
        );
        Ok((m, io))
    }

    /// List the un-mirrored tail of a completed failover (read-only on both clusters); the
    /// report keeps each partition's `recoverable_records`.
    pub async fn unmirrored(&self, report: &FailoverReport) -> Result<Listing, RecoveryError> {
        let (m, io) = self.prepare(report)?;
        not_realigned(report)?;
        let (listing, _) = self.list(m, &io, report).await?;
        Ok(listing)
    }

    async fn list<I: RecoveryIo>(
        &self,
        m: &MirrorConfig,
        io: &I,
        report: &FailoverReport,
    ) -> Result<(Listing, Vec<Tail>), RecoveryError> {
        let mut listing = Listing {
            mirror: m.name.clone(),
            failover_id: report.failover_id.clone(),
            read_ms: now_ms(),
            partitions: Vec::new(),
            totals: ListingTotals {
                rpo_records: Some(0),
                ..ListingTotals::default()
            },
            warnings: Vec::new(),
        };
        let mut tails = Vec::new();
        for p in &report.partitions {
            let (last, warning) = super::start::last_mirrored(io, p).await?;
            listing.warnings.extend(warning);
            let from = match last {
                Some(o) => o + 1,
                None => io.source_bounds(&p.topic, p.partition).await?.0,
            };
            let tail = copy::scan(io, &p.topic, p.partition, from, &aborted_at_source(p)).await?;
            let q = m.recovery.quarantine_for(&p.topic);
            let done = copy::recovered(
                io,
                &q,
                p.partition,
                &report.failover_id,
                (&p.topic, p.partition),
            )
            .await?;
            let s = &tail.summary;
            if s.offsets_removed > 0 {
                listing.warnings.push(format!(
                    "{}-{}: {} offsets of the tail ({}..{}) were removed from the source before they could be read",
                    p.topic, p.partition, s.offsets_removed, s.from_offset, s.log_start_offset
                ));
            }
            if let Some(rpo) = p.rpo_records {
                if s.log_end_offset - s.from_offset > rpo {
                    listing.warnings.push(format!(
                        "{}-{}: the source holds {} offsets after the failover point, the report counted {rpo}: records written to the old source after the failover are listed too",
                        p.topic, p.partition, s.log_end_offset - s.from_offset
                    ));
                }
            }
            let recovered = done.digest.records;
            let part = PartitionListing {
                tail: s.clone(),
                rpo_records: p.rpo_records,
                quarantine_topic: q,
                recovered_records: recovered,
                remaining_records: (s.recoverable_records - recovered).max(0),
            };
            let t = &mut listing.totals;
            t.records += s.records;
            t.bytes += s.bytes;
            t.recoverable_records += s.recoverable_records;
            t.recovered_records += recovered;
            t.remaining_records += part.remaining_records;
            t.committed += s.committed;
            t.aborted += s.aborted;
            t.open += s.open;
            t.offsets_removed += s.offsets_removed;
            t.rpo_records = t.rpo_records.zip(p.rpo_records).map(|(a, b)| a + b);
            listing.partitions.push(part);
            tails.push(tail);
        }
        self.note(report, &listing);
        Ok((listing, tails))
    }

    /// The report's `recoverable_records` and the gauge, from a listing.
    fn note(&self, report: &FailoverReport, listing: &Listing) {
        let mut by_topic: BTreeMap<&str, i64> = BTreeMap::new();
        for p in &listing.partitions {
            *by_topic.entry(&p.tail.topic).or_default() += p.remaining_records;
        }
        for (topic, n) in by_topic {
            self.metrics
                .unmirrored
                .with_label_values(&[listing.mirror.as_str(), topic])
                .set(n);
        }
        let figures: HashMap<(String, i32), i64> = listing
            .partitions
            .iter()
            .map(|p| {
                (
                    (p.tail.topic.clone(), p.tail.partition),
                    p.tail.recoverable_records,
                )
            })
            .collect();
        self.save(report, |r| set_recoverable(r, &figures));
    }

    /// Store `report` changed by `change` (when it changes), as the report this instance keeps.
    fn save(&self, report: &FailoverReport, change: impl FnOnce(&mut FailoverReport)) {
        let Some(store) = &self.reports else {
            return;
        };
        let mut updated = report.clone();
        change(&mut updated);
        if updated != *report {
            if let Err(e) = store.save(&updated) {
                tracing::warn!(mirror = %report.mirror, failover_id = %report.failover_id, error = %e, "the failover report cannot be stored");
            }
        }
    }

    /// Copy the recoverable records of a completed failover's un-mirrored tail into the
    /// quarantine topics (see `copy`); with `dry_run`, only say what would be copied.
    pub async fn recover(
        &self,
        report: &FailoverReport,
        dry_run: bool,
    ) -> Result<RecoveryOutcome, RecoveryError> {
        let (m, io) = self.prepare(report)?;
        let _running = self.claim(report)?;
        self.recover_with(m, &io, report, dry_run).await
    }

    async fn recover_with<I: RecoveryIo>(
        &self,
        m: &MirrorConfig,
        io: &I,
        report: &FailoverReport,
        dry_run: bool,
    ) -> Result<RecoveryOutcome, RecoveryError> {
        not_realigned(report)?;
        let (listing, tails) = self.list(m, io, report).await?;
        let mut out = RecoveryOutcome {
            mirror: m.name.clone(),
            failover_id: report.failover_id.clone(),
            dry_run,
            plan: None,
            partitions: Vec::new(),
            copied: 0,
            recovered_records: listing.totals.recovered_records,
            recoverable_records: listing.totals.recoverable_records,
            verified: listing.totals.remaining_records == 0,
        };
        if dry_run {
            out.plan = Some(listing);
            return Ok(out);
        }
        let mut partitions: BTreeMap<String, i32> = BTreeMap::new();
        for p in &report.partitions {
            let n = partitions.entry(p.topic.clone()).or_default();
            *n = (*n).max(p.partition + 1);
        }
        for (topic, n) in &partitions {
            io.ensure_quarantine(&m.recovery.quarantine_for(topic), *n)
                .await?;
        }
        let producer = io
            .copier_producer(&format!(
                "mirrorgate-recovery-{}-{}",
                m.name, report.failover_id
            ))
            .await?;
        out.recovered_records = 0;
        out.verified = true;
        for (tail, listed) in tails.iter().zip(&listing.partitions) {
            let s = &tail.summary;
            let q = &listed.quarantine_topic;
            let span = tracing::info_span!("recovery", mirror = %m.name, topic = %s.topic, partition = s.partition);
            let _e = span.enter();
            let c = copy::copy(
                io,
                CopyJob {
                    failover_id: &report.failover_id,
                    source_topic: &s.topic,
                    source_partition: s.partition,
                    quarantine_topic: q,
                    producer,
                    tail,
                },
            )
            .await?;
            self.metrics
                .recovered
                .with_label_values(&[m.name.as_str(), s.topic.as_str()])
                .inc_by(c.copied as u64);
            tracing::info!(copied = c.copied, already = c.already_recovered, verified = c.verified, quarantine = %q, "un-mirrored tail recovered");
            out.copied += c.copied;
            out.recovered_records += c.quarantine.records;
            out.verified &= c.verified;
            out.partitions.push(PartitionRecovery {
                topic: s.topic.clone(),
                partition: s.partition,
                quarantine_topic: q.clone(),
                recoverable_records: s.recoverable_records,
                copy: c,
            });
        }
        self.save(report, |r| {
            let rec = r.recovery.get_or_insert_with(RecoveryRecord::default);
            rec.recovered_records = out.recovered_records;
            rec.recoverable_records = out.recoverable_records;
            rec.verified = out.verified;
            rec.recovered_ms = Some(now_ms());
        });
        let mut by_topic: BTreeMap<&str, i64> = BTreeMap::new();
        for p in &out.partitions {
            *by_topic.entry(&p.topic).or_default() +=
                (p.recoverable_records - p.copy.quarantine.records).max(0);
        }
        for (topic, n) in by_topic {
            self.metrics
                .unmirrored
                .with_label_values(&[m.name.as_str(), topic])
                .set(n);
        }
        Ok(out)
    }
}

/// The transactions the failover aborted on the destination, as producer id and first source
/// offset. The agent copies batches as they are, so a destination offset of the mirrored part
/// is the source's shifted by the same amount as the last mirrored record's (none without the
/// agent's offset map: then nothing reaches back).
fn aborted_at_source(p: &PartitionReport) -> Vec<(i64, i64)> {
    let (Some(src), Some(dst)) = (
        p.last_mirrored_source_offset,
        p.last_mirrored_destination_offset,
    ) else {
        return Vec::new();
    };
    p.transactions_aborted
        .iter()
        .map(|t| (t.producer_id, t.first_offset - (dst - src)))
        .collect()
}

#[cfg(test)]
impl Recoverer {
    /// [`Recoverer::recover`] over another I/O (unit tests).
    pub(super) async fn recover_over<I: RecoveryIo>(
        &self,
        io: &I,
        report: &FailoverReport,
        dry_run: bool,
    ) -> Result<RecoveryOutcome, RecoveryError> {
        let m = &self.mirrors[&report.mirror];
        self.recover_with(m, io, report, dry_run).await
    }

    /// [`Recoverer::realign`] over another I/O (unit tests).
    pub(super) async fn realign_over<I: RecoveryIo>(
        &self,
        io: &I,
        report: &FailoverReport,
        dry_run: bool,
    ) -> Result<RealignOutcome, RecoveryError> {
        let m = &self.mirrors[&report.mirror];
        self.realign_with(m, io, report, dry_run).await
    }
}
