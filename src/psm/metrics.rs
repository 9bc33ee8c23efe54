//! The PSM's metrics: the result labels of `mirrorgate_psm_batches_total`, the counters with
//! their per-label handles, and the scrape-time producer gauge.
//!
//! Owns: the PSM's metric names, help texts and labels, and building the producer gauge from
//! the registry at each scrape.
//! Must not touch: producer state or slots (it reads counts through the [`ProducerCounts`] seam,
//! which the registry implements: this file never names the registry), sockets, disk.

use std::collections::HashMap;
use std::sync::Arc;

use prometheus::{IntCounter, IntCounterVec, Opts};

use crate::metrics::Metrics;

use super::Verdict;

/// Result label of `mirrorgate_psm_batches_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchResult {
    Accepted,
    NotIdempotent,
    Duplicate,
    OutOfOrder,
    InvalidEpoch,
    InvalidTxnState,
    InvalidRecord,
    CoordinatorFenced,
    /// Refused by the broker for a reason the PSM does not judge (not leader, …).
    OtherError,
    /// The PSM's classification disagreed with the broker.
    Diverged,
    /// The broker's outcome is unknown; the partition is rebuilt from the log.
    UnknownOutcome,
    /// Arrived while the partition was being rebuilt.
    Buffered,
    /// The batch could not be read (bad CRC, malformed); the broker decides.
    Unreadable,
}

impl BatchResult {
    const ALL: [BatchResult; 13] = [
        BatchResult::Accepted,
        BatchResult::NotIdempotent,
        BatchResult::Duplicate,
        BatchResult::OutOfOrder,
        BatchResult::InvalidEpoch,
        BatchResult::InvalidTxnState,
        BatchResult::InvalidRecord,
        BatchResult::CoordinatorFenced,
        BatchResult::OtherError,
        BatchResult::Diverged,
        BatchResult::UnknownOutcome,
        BatchResult::Buffered,
        BatchResult::Unreadable,
    ];

    /// Label value.
    pub fn as_str(self) -> &'static str {
        match self {
            BatchResult::Accepted => "accepted",
            BatchResult::NotIdempotent => "not_idempotent",
            BatchResult::Duplicate => "duplicate",
            BatchResult::OutOfOrder => "out_of_order_sequence",
            BatchResult::InvalidEpoch => "invalid_producer_epoch",
            BatchResult::InvalidTxnState => "invalid_txn_state",
            BatchResult::InvalidRecord => "invalid_record",
            BatchResult::CoordinatorFenced => "coordinator_fenced",
            BatchResult::OtherError => "other_error",
            BatchResult::Diverged => "diverged",
            BatchResult::UnknownOutcome => "unknown_outcome",
            BatchResult::Buffered => "buffered",
            BatchResult::Unreadable => "unreadable",
        }
    }

    pub(super) fn of(v: &Verdict) -> BatchResult {
        match v {
            Verdict::Accept { .. } => BatchResult::Accepted,
            Verdict::NotIdempotent => BatchResult::NotIdempotent,
            Verdict::Duplicate { .. } => BatchResult::Duplicate,
            Verdict::OutOfOrderSequence { .. } => BatchResult::OutOfOrder,
            Verdict::InvalidProducerEpoch { .. } => BatchResult::InvalidEpoch,
            Verdict::InvalidTxnState(_) => BatchResult::InvalidTxnState,
            Verdict::InvalidRecord(_) => BatchResult::InvalidRecord,
            Verdict::CoordinatorFenced { .. } => BatchResult::CoordinatorFenced,
        }
    }
}

/// Counters of the PSM, with per-label handles precomputed.
pub struct PsmCounters {
    batches: Vec<IntCounter>,
    /// `mirrorgate_psm_expired_total{reason="expiration"}`.
    pub expired_by_time: IntCounter,
    /// `mirrorgate_psm_expired_total{reason="barrier"}`.
    pub expired_by_barrier: IntCounter,
    /// `mirrorgate_psm_rebuilds_total`.
    pub rebuilds: IntCounter,
    /// `mirrorgate_psm_rebuild_batches_total`: batches read from the log by rebuilds.
    pub rebuild_batches: IntCounter,
}

impl PsmCounters {
    pub(super) fn new(metrics: &Metrics) -> Self {
        let batches = IntCounterVec::new(
            Opts::new(
                "mirrorgate_psm_batches_total",
                "Batches to tracked partitions by PSM classification and broker outcome.",
            ),
            &["result"],
        )
        .expect("valid metric");
        let expired = IntCounterVec::new(
            Opts::new(
                "mirrorgate_psm_expired_total",
                "Producer entries removed from the PSM, by reason.",
            ),
            &["reason"],
        )
        .expect("valid metric");
        let rebuilds = IntCounter::new(
            "mirrorgate_psm_rebuilds_total",
            "Partitions rebuilt from snapshot and log.",
        )
        .expect("valid metric");
        let _ = metrics.registry().register(Box::new(batches.clone()));
        let _ = metrics.registry().register(Box::new(expired.clone()));
        let rebuild_batches = IntCounter::new(
            "mirrorgate_psm_rebuild_batches_total",
            "Batches read from the destination log by PSM rebuilds (the cost of rebuilding).",
        )
        .expect("valid metric");
        let _ = metrics.registry().register(Box::new(rebuilds.clone()));
        let _ = metrics
            .registry()
            .register(Box::new(rebuild_batches.clone()));
        PsmCounters {
            batches: BatchResult::ALL
                .iter()
                .map(|r| batches.with_label_values(&[r.as_str()]))
                .collect(),
            expired_by_time: expired.with_label_values(&["expiration"]),
            expired_by_barrier: expired.with_label_values(&["barrier"]),
            rebuilds,
            rebuild_batches,
        }
    }

    /// Count one batch.
    pub fn batch(&self, r: BatchResult) {
        if let Some(i) = BatchResult::ALL.iter().position(|x| *x == r) {
            self.batches[i].inc();
        }
    }
}

/// What the producer gauge reads at each scrape: the owner of the producer state (the registry)
/// implements it, so the metrics depend on this seam and not on the registry.
pub trait ProducerCounts: Send + Sync {
    /// Whether the counts are per partition (else per topic).
    fn per_partition(&self) -> bool;
    /// Producer entries per (topic, partition), the partition `None` when aggregated per topic.
    fn producer_counts(&self) -> Vec<(String, Option<i32>, usize)>;
}

/// Scrape-time collector of `mirrorgate_psm_producers{topic,partition}` (or `{topic}` when
/// aggregated): built from the registry at each scrape, so series of deleted topics disappear.
pub struct ProducerGauge {
    registry: Arc<dyn ProducerCounts>,
    desc: Vec<prometheus::core::Desc>,
}

impl ProducerGauge {
    pub fn new(registry: Arc<dyn ProducerCounts>) -> Self {
        let labels: Vec<String> = if registry.per_partition() {
            vec!["topic".into(), "partition".into()]
        } else {
            vec!["topic".into()]
        };
        let desc = prometheus::core::Desc::new(
            "mirrorgate_psm_producers".into(),
            "Producer entries the PSM tracks, per partition (or per topic when aggregated).".into(),
            labels,
            HashMap::new(),
        )
        .expect("valid metric");
        ProducerGauge {
            registry,
            desc: vec![desc],
        }
    }
}

impl prometheus::core::Collector for ProducerGauge {
    fn desc(&self) -> Vec<&prometheus::core::Desc> {
        self.desc.iter().collect()
    }

    fn collect(&self) -> Vec<prometheus::proto::MetricFamily> {
        let per_partition = self.registry.per_partition();
        let labels: &[&str] = if per_partition {
            &["topic", "partition"]
        } else {
            &["topic"]
        };
        let Ok(g) = prometheus::IntGaugeVec::new(
            Opts::new(
                "mirrorgate_psm_producers",
                "Producer entries the PSM tracks, per partition (or per topic when aggregated).",
            ),
            labels,
        ) else {
            return Vec::new();
        };
        for (topic, partition, n) in self.registry.producer_counts() {
            let p = partition.map(|p| p.to_string()).unwrap_or_default();
            let values: Vec<&str> = if per_partition {
                vec![&topic, &p]
            } else {
                vec![&topic]
            };
            g.with_label_values(&values).set(n as i64);
        }
        prometheus::core::Collector::collect(&g)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::core::Collector;

    /// Counts handed to the gauge as the registry would.
    struct FakeCounts {
        per_partition: bool,
        counts: Vec<(String, Option<i32>, usize)>,
    }

    impl ProducerCounts for FakeCounts {
        fn per_partition(&self) -> bool {
            self.per_partition
        }
        fn producer_counts(&self) -> Vec<(String, Option<i32>, usize)> {
            self.counts.clone()
        }
    }

    /// The gauge's samples as the text exposition format prints them.
    fn samples(gauge: &ProducerGauge) -> Vec<String> {
        let text = prometheus::TextEncoder::new()
            .encode_to_string(&gauge.collect())
            .expect("encodes");
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn the_producer_gauge_reports_each_partitions_count_from_its_owner() {
        let gauge = ProducerGauge::new(Arc::new(FakeCounts {
            per_partition: true,
            counts: vec![("orders".into(), Some(0), 3), ("orders".into(), Some(1), 0)],
        }));
        assert_eq!(
            samples(&gauge),
            [
                r#"mirrorgate_psm_producers{partition="0",topic="orders"} 3"#,
                r#"mirrorgate_psm_producers{partition="1",topic="orders"} 0"#,
            ]
        );
    }

    #[test]
    fn the_producer_gauge_has_only_a_topic_label_when_counts_are_per_topic() {
        let gauge = ProducerGauge::new(Arc::new(FakeCounts {
            per_partition: false,
            counts: vec![("orders".into(), None, 5)],
        }));
        assert_eq!(
            samples(&gauge),
            [r#"mirrorgate_psm_producers{topic="orders"} 5"#]
        );
    }
}
