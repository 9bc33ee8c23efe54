//! The agent's lag: the live figures of each partition task and the scrape-time collector of
//! `mirrorgate_mirror_lag_records` and `mirrorgate_mirror_lag_seconds`; the source's log end of
//! PAUSED partitions, whose task is stopped, read at each discovery round so that their lag
//! (and a failover's guards, dry run and report, which read it) follows the source.
//!
//! Owns: what a task reports of its progress and how it becomes metrics.
//! Must not touch: the tasks themselves (they update [`PartStats`]), the offset map.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Weak;

use prometheus::Opts;

use super::{lock, Agent, MirrorAgent};
use crate::client::mirror_ops::ClusterMeta;
use crate::client::{KafkaClient, LATEST};
use crate::mirror::PartitionState;

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl MirrorAgent {
    /// Read the source's log end of every PAUSED partition that has a task slot (its task is
    /// stopped, so nothing else reads it): one connection per leader, errors left for the next
    /// round (the lag keeps its last figure, whose age `source_end_moved_ms` tells).
    pub(super) async fn measure_paused(&self, meta: &ClusterMeta) {
        let paused: Vec<((String, i32), std::sync::Arc<PartStats>)> = lock(&self.tasks)
            .iter()
            .filter(|((t, p), _)| self.controller.state_of(t, *p) == Some(PartitionState::Paused))
            .map(|(k, slot)| (k.clone(), slot.stats.clone()))
            .collect();
        let mut by_leader: std::collections::BTreeMap<String, Vec<_>> = Default::default();
        for ((t, p), stats) in paused {
            if let Some(addr) = meta.leader_addr(&t, p) {
                by_leader.entry(addr).or_default().push((t, p, stats));
            }
        }
        let timeout = std::time::Duration::from_millis(self.source.connect_timeout_ms);
        for (addr, parts) in by_leader {
            let Ok(mut c) = KafkaClient::connect_with(&self.source_connector, &addr, timeout).await
            else {
                continue;
            };
            for (t, p, stats) in parts {
                match c.list_offset(&t, p, LATEST).await {
                    Ok(end) => stats.set_high_watermark(end),
                    Err(e) => {
                        tracing::debug!(mirror = %self.name, topic = %t, partition = p, error = %e, "log end of a paused partition not read");
                        break;
                    }
                }
            }
        }
    }
}

/// A partition's lag in records and when the source's end last moved (ms since the epoch).
pub type LastKnownLag = (i64, Option<i64>);

/// Live figures of one partition task (lag).
#[derive(Debug)]
pub struct PartStats {
    /// Next source offset to mirror (-1: not known yet).
    pub(super) next_source: AtomicI64,
    /// Source high watermark from the last fetch (-1: not known yet).
    pub(super) high_watermark: AtomicI64,
    /// Max timestamp of the last mirrored batch (-1: none yet).
    pub(super) last_ts: AtomicI64,
    /// Max timestamp of the first batch not mirrored yet (used before anything was mirrored).
    pub(super) pending_ts: AtomicI64,
    /// When the source high watermark last changed (ms since the epoch; -1: never seen).
    pub(super) hw_moved_ms: AtomicI64,
    /// Bytes and source offsets mirrored by this task: their ratio estimates the bytes of the
    /// lag.
    pub(super) appended_bytes: AtomicI64,
    pub(super) appended_offsets: AtomicI64,
}

impl Default for PartStats {
    fn default() -> Self {
        PartStats {
            next_source: AtomicI64::new(-1),
            high_watermark: AtomicI64::new(-1),
            last_ts: AtomicI64::new(-1),
            pending_ts: AtomicI64::new(-1),
            hw_moved_ms: AtomicI64::new(-1),
            appended_bytes: AtomicI64::new(0),
            appended_offsets: AtomicI64::new(0),
        }
    }
}

impl PartStats {
    /// The source high watermark just read; notes when it moved.
    pub(super) fn set_high_watermark(&self, hw: i64) {
        if self.high_watermark.swap(hw, Ordering::Relaxed) != hw {
            self.hw_moved_ms.store(now_ms(), Ordering::Relaxed);
        }
    }

    /// A batch of `bytes` covering `offsets` source offsets was appended.
    pub(super) fn note_append(&self, bytes: usize, offsets: i64) {
        self.appended_bytes
            .fetch_add(bytes as i64, Ordering::Relaxed);
        self.appended_offsets
            .fetch_add(offsets.max(0), Ordering::Relaxed);
    }

    /// The bytes of the lag, estimated as its records times the average bytes per source
    /// offset this task mirrored (`None` before the first append or when the lag is unknown).
    pub fn lag_bytes_estimate(&self) -> Option<i64> {
        let (records, _) = self.lag()?;
        let offsets = self.appended_offsets.load(Ordering::Relaxed);
        if offsets <= 0 {
            return None;
        }
        let bytes = self.appended_bytes.load(Ordering::Relaxed) as f64;
        Some((records as f64 * bytes / offsets as f64).round() as i64)
    }

    /// The lag in records and when the source's end last moved (what a failover report shows
    /// when the source cannot be read); `None` before the lag is known.
    pub fn last_known(&self) -> Option<LastKnownLag> {
        self.lag()
            .map(|(records, _)| (records, self.source_end_moved_ms()))
    }

    /// When the source's log end last moved, as far as the agent saw.
    pub fn source_end_moved_ms(&self) -> Option<i64> {
        Some(self.hw_moved_ms.load(Ordering::Relaxed)).filter(|t| *t >= 0)
    }

    /// (records, seconds) behind the source, when known.
    pub fn lag(&self) -> Option<(i64, f64)> {
        let next = self.next_source.load(Ordering::Relaxed);
        let hw = self.high_watermark.load(Ordering::Relaxed);
        if next < 0 || hw < 0 {
            return None;
        }
        let records = (hw - next).max(0);
        if records == 0 {
            return Some((0, 0.0));
        }
        let ts = match self.last_ts.load(Ordering::Relaxed) {
            t if t >= 0 => t,
            _ => self.pending_ts.load(Ordering::Relaxed),
        };
        let secs = if ts >= 0 {
            (now_ms() - ts).max(0) as f64 / 1000.0
        } else {
            0.0
        };
        Some((records, secs))
    }
}

/// Scrape-time collector of `mirrorgate_mirror_lag_records` and `mirrorgate_mirror_lag_seconds`:
/// per partition, or (with `metrics.per_partition: false`) the largest lag of each topic. Built
/// from the partition tasks at each scrape — FAILED ones included, with what they last knew (a
/// failed partition is the one whose lag matters) — so series of stopped or deleted partitions
/// disappear.
pub(super) struct LagCollector {
    agent: Weak<Agent>,
    per_partition: bool,
    records: prometheus::IntGaugeVec,
    seconds: prometheus::GaugeVec,
}

impl LagCollector {
    pub(super) fn new(agent: Weak<Agent>, per_partition: bool) -> Result<Self, prometheus::Error> {
        let labels: &[&str] = if per_partition {
            &["mirror", "topic", "partition"]
        } else {
            &["mirror", "topic"]
        };
        Ok(LagCollector {
            agent,
            per_partition,
            records: prometheus::IntGaugeVec::new(
                Opts::new(
                    "mirrorgate_mirror_lag_records",
                    "Records the built-in agent is behind the source (high watermark - next offset).",
                ),
                labels,
            )?,
            seconds: prometheus::GaugeVec::new(
                Opts::new(
                    "mirrorgate_mirror_lag_seconds",
                    "Seconds the built-in agent is behind the source (0 when caught up).",
                ),
                labels,
            )?,
        })
    }
}

impl prometheus::core::Collector for LagCollector {
    fn desc(&self) -> Vec<&prometheus::core::Desc> {
        let mut d = self.records.desc();
        d.extend(self.seconds.desc());
        d
    }
    fn collect(&self) -> Vec<prometheus::proto::MetricFamily> {
        self.records.reset();
        self.seconds.reset();
        if let Some(agent) = self.agent.upgrade() {
            for m in &agent.mirrors {
                let tasks = lock(&m.tasks);
                for ((t, p), slot) in tasks.iter() {
                    if let Some((r, s)) = slot.stats.lag() {
                        if self.per_partition {
                            let ps = p.to_string();
                            self.records.with_label_values(&[&m.name, t, &ps]).set(r);
                            self.seconds.with_label_values(&[&m.name, t, &ps]).set(s);
                        } else {
                            let rg = self.records.with_label_values(&[&m.name, t]);
                            rg.set(rg.get().max(r));
                            let sg = self.seconds.with_label_values(&[&m.name, t]);
                            sg.set(sg.get().max(s));
                        }
                    }
                }
            }
        }
        let mut out = prometheus::core::Collector::collect(&self.records);
        out.extend(prometheus::core::Collector::collect(&self.seconds));
        out
    }
}
