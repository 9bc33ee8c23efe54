//! The mirror controller's metrics: counters and histograms of admission, barriers, screening
//! and failovers, and the scrape-time gauges of partition states and protection.
//!
//! Owns: the metric names and help texts of `mirrorgate_barrier*`, `mirrorgate_pid_screened_total`,
//! `mirrorgate_duplicate_ack_guard_total`, `mirrorgate_produce_rejected_total`,
//! `mirrorgate_failover_*`, `mirrorgate_mirror_*` and `mirrorgate_protection_*`. Must not touch:
//! what is counted (the callers decide); the controller itself (the gauges read it through the
//! [`MirrorStates`] seam it implements: this file never names it).

use std::sync::Arc;

use prometheus::{Histogram, HistogramOpts, IntCounter, IntCounterVec, Opts};

use crate::metrics::Metrics;

use super::state::{MirrorRecord, PartitionState};

/// Metrics of mirrors and failovers.
pub struct MirrorMetrics {
    pub barriers_written: IntCounterVec,
    pub barrier_writes: IntCounterVec,
    pub barriers_seen: IntCounterVec,
    pub pid_screened: IntCounter,
    pub duplicate_ack_guard: IntCounter,
    pub rejected: IntCounterVec,
    pub failover_duration: Histogram,
    pub topic_overlaps: IntCounter,
    pub unknown_writes: IntCounter,
    pub late_writes: IntCounterVec,
    pub illegal_transitions: IntCounter,
    /// Mirrored transactions aborted by failovers before their barrier.
    pub txns_aborted: IntCounterVec,
    /// The last completed failover's report, per mirror: `rto_seconds`, `rpo_records`,
    /// `rpo_seconds` (label `figure`).
    pub last_failover: prometheus::GaugeVec,
}

impl MirrorMetrics {
    pub fn new(m: &Metrics) -> Self {
        let r = m.registry();
        let barriers_written = IntCounterVec::new(
            Opts::new(
                "mirrorgate_barriers_written_total",
                "Barrier batches written by failovers.",
            ),
            &["mirror"],
        )
        .expect("valid metric");
        let barrier_writes = IntCounterVec::new(
            Opts::new(
                "mirrorgate_barrier_writes_total",
                "Barriers appended by failovers, by form: `control` (an ABORT transaction marker, WriteTxnMarkers) or `data` (the fallback: a single-record batch hidden by the gateway).",
            ),
            &["mirror", "kind"],
        )
        .expect("valid metric");
        let barriers_seen = IntCounterVec::new(
            Opts::new(
                "mirrorgate_barriers_seen_total",
                "Barriers seen: `mirrored` inside mirror produce (inert), `hidden` from consumers' fetches.",
            ),
            &["mirror", "kind"],
        )
        .expect("valid metric");
        let pid_screened = IntCounter::new(
            "mirrorgate_pid_screened_total",
            "InitProducerId answers that handed out a producer id mirrored traffic left in the brokers.",
        )
        .expect("valid metric");
        let duplicate_ack_guard = IntCounter::new(
            "mirrorgate_duplicate_ack_guard_total",
            "Local produce acknowledged below the barrier (not appended), turned into an error.",
        )
        .expect("valid metric");
        let rejected = IntCounterVec::new(
            Opts::new(
                "mirrorgate_produce_rejected_total",
                "Produce partitions and admin-request entries refused by the gateway, by reason.",
            ),
            &["reason"],
        )
        .expect("valid metric");
        let failover_duration = Histogram::with_opts(
            HistogramOpts::new(
                "mirrorgate_failover_duration_seconds",
                "Time from failover call to every partition STOPPED.",
            )
            .buckets(vec![0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0]),
        )
        .expect("valid metric");
        let topic_overlaps = IntCounter::new(
            "mirrorgate_mirror_topic_overlaps_total",
            "Topics matched by the regexes of more than one mirror (each counted once); the first mirror in config order owns them.",
        )
        .expect("valid metric");
        let unknown_writes = IntCounter::new(
            "mirrorgate_protection_unknown_outcome_writes_total",
            "Mirror writes whose answer never came (connection lost or timed out): the broker may still append them, so a failover re-reads the log after its barrier.",
        )
        .expect("valid metric");
        let late_writes = IntCounterVec::new(
            Opts::new(
                "mirrorgate_protection_late_writes_total",
                "Batches found in a partition's log after its failover barrier (mirror writes of unknown outcome that landed late); each is followed by a new barrier and its producer id screened.",
            ),
            &["mirror"],
        )
        .expect("valid metric");
        let illegal_transitions = IntCounter::new(
            "mirrorgate_failover_illegal_transitions_total",
            "Partition transitions or failover steps the state machine refused where the gateway expected them to pass (a bug: the change is not applied, and the failover is retried).",
        )
        .expect("valid metric");
        let txns_aborted = IntCounterVec::new(
            Opts::new(
                "mirrorgate_failover_transactions_aborted_total",
                "Mirrored transactions still open in a partition at failover (the source never finished them), aborted with an ABORT marker before the partition's barrier.",
            ),
            &["mirror"],
        )
        .expect("valid metric");
        let last_failover = prometheus::GaugeVec::new(
            Opts::new(
                "mirrorgate_failover_last_report",
                "The last completed failover of each mirror, from its report: figure=rto_seconds (call to the last partition STOPPED), rpo_records (source records the destination lacks; absent when unknown), rpo_seconds, and the step timeline step_<step>_seconds (call to the last partition at that step: stopping, fenced, drained, barrier_written, barrier_persisted, psm_cleared, stopped).",
            ),
            &["mirror", "figure"],
        )
        .expect("valid metric");
        for c in [
            Box::new(illegal_transitions.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(txns_aborted.clone()),
            Box::new(last_failover.clone()),
            Box::new(unknown_writes.clone()),
            Box::new(late_writes.clone()),
            Box::new(topic_overlaps.clone()),
            Box::new(barriers_written.clone()),
            Box::new(barrier_writes.clone()),
            Box::new(barriers_seen.clone()),
            Box::new(pid_screened.clone()),
            Box::new(duplicate_ack_guard.clone()),
            Box::new(rejected.clone()),
            Box::new(failover_duration.clone()),
        ] {
            // Registering twice (a second controller in one process, as in tests) keeps the
            // first registration; not a transition result.
            let _ = r.register(c);
        }
        MirrorMetrics {
            barriers_written,
            barrier_writes,
            barriers_seen,
            pid_screened,
            duplicate_ack_guard,
            rejected,
            failover_duration,
            topic_overlaps,
            unknown_writes,
            late_writes,
            illegal_transitions,
            txns_aborted,
            last_failover,
        }
    }
}

/// What the scrape-time gauges read of the mirrors (the mirror controller implements it).
pub trait MirrorStates: Send + Sync {
    /// Partition counts per (mirror, state).
    fn state_counts(&self) -> Vec<(String, &'static str, usize)>;
    /// Every mirror's record (and why it is unreadable, if it is).
    fn records(&self) -> Vec<(MirrorRecord, Option<String>)>;
    /// Per mirror, the transactions open in its partitions.
    fn open_transactions(&self) -> Vec<(String, usize)>;
    /// Until when producers of failed-over topics must stay behind the gateway (ms since the
    /// epoch; `i64::MAX`: the screening set is unreadable; `None`: nothing screened).
    fn protection_needed_until_ms(&self) -> Option<i64>;
}

/// Scrape-time collector of `mirrorgate_mirror_partitions{mirror,state}` and the other
/// per-mirror gauges.
pub struct PartitionStateGauge(pub Arc<dyn MirrorStates>);

impl prometheus::core::Collector for PartitionStateGauge {
    fn desc(&self) -> Vec<&prometheus::core::Desc> {
        Vec::new()
    }
    fn collect(&self) -> Vec<prometheus::proto::MetricFamily> {
        let Ok(g) = prometheus::IntGaugeVec::new(
            Opts::new(
                "mirrorgate_mirror_partitions",
                "Partitions of each mirror by state.",
            ),
            &["mirror", "state"],
        ) else {
            return Vec::new();
        };
        for (m, s, n) in self.0.state_counts() {
            g.with_label_values(&[&m, s]).set(n as i64);
        }
        let mut out = prometheus::core::Collector::collect(&g);
        if let Ok(stopping) = prometheus::GaugeVec::new(
            Opts::new(
                "mirrorgate_mirror_stopping_seconds",
                "How long the oldest partition of each mirror has been in failover here (STOPPING or FAILED), in seconds; 0: none. A failover that does not complete on this instance (its own, or one adopted from another instance) keeps growing it.",
            ),
            &["mirror"],
        ) {
            let now = super::screening::now_ms();
            for (r, _) in self.0.records() {
                let since = r
                    .partitions
                    .iter()
                    .filter(|p| p.failover_id.is_some())
                    .filter(|p| matches!(p.state, PartitionState::Stopping | PartitionState::Failed))
                    .map(|p| p.step_ms.get("STOPPING").copied().unwrap_or(p.updated_ms))
                    .min();
                let secs = since.map_or(0.0, |t| (now - t).max(0) as f64 / 1000.0);
                stopping.with_label_values(&[&r.name]).set(secs);
            }
            out.extend(prometheus::core::Collector::collect(&stopping));
        }
        if let Ok(open) = prometheus::IntGaugeVec::new(
            Opts::new(
                "mirrorgate_mirror_open_transactions",
                "Transactions open in each mirror's partitions, as the PSM holds them (mirrored transactions whose marker is not mirrored yet; a failover aborts those still open).",
            ),
            &["mirror"],
        ) {
            for (m, n) in self.0.open_transactions() {
                open.with_label_values(&[&m]).set(n as i64);
            }
            out.extend(prometheus::core::Collector::collect(&open));
        }
        if let Ok(until) = prometheus::Gauge::new(
            "mirrorgate_protection_needed_until_seconds",
            "Until when (Unix time) producers of failed-over topics must stay behind the gateway: the latest time a mirrored producer id can still be live in the brokers (0: none screened; +Inf: the screening set is unreadable).",
        ) {
            until.set(match self.0.protection_needed_until_ms() {
                None => 0.0,
                Some(i64::MAX) => f64::INFINITY,
                Some(ms) => ms as f64 / 1000.0,
            });
            out.extend(prometheus::core::Collector::collect(&until));
        }
        out
    }
}
