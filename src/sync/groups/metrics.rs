//! The group offset sync's metrics (docs/monitoring.md): counters updated by the rounds, and a
//! scrape-time collector of `mirrorgate_group_sync_age_seconds`,
//! `mirrorgate_group_sync_lag_records` and `mirrorgate_group_sync_groups_not_synced` read from
//! each sync's last reports.
//!
//! Owns: those series. Must not touch: the rounds themselves.

use std::sync::{Arc, Mutex, Weak};

use prometheus::{GaugeVec, IntCounterVec, IntGaugeVec, Opts};

use super::io::GroupIo;
use super::GroupSync;

/// The counters every mirror's sync shares (labelled by mirror).
#[derive(Clone)]
pub struct GroupMetrics {
    commits: IntCounterVec,
    skipped_active: IntCounterVec,
    errors: IntCounterVec,
}

impl GroupMetrics {
    /// New, unregistered counters.
    pub fn new() -> Result<Self, prometheus::Error> {
        let vec = |name: &str, help: &str| IntCounterVec::new(Opts::new(name, help), &["mirror"]);
        Ok(GroupMetrics {
            commits: vec(
                "mirrorgate_group_sync_commits_total",
                "Partition offsets the group offset sync committed on the destination.",
            )?,
            skipped_active: vec(
                "mirrorgate_group_sync_skipped_active_total",
                "Groups a sync round left alone because they have members on the destination \
                 (counted per round).",
            )?,
            errors: vec(
                "mirrorgate_group_sync_errors_total",
                "Group offset sync failures: a group whose requests failed, an incomplete round, \
                 a final sync out of time.",
            )?,
        })
    }

    /// Register the counters (a second gateway in the same process keeps the first one's).
    pub fn register(&self, registry: &crate::metrics::MetricsRegistry) {
        for c in [&self.commits, &self.skipped_active, &self.errors] {
            let _ = registry.register(Box::new(c.clone()));
        }
    }

    pub(super) fn commits(&self, mirror: &str, n: u64) {
        if n > 0 {
            self.commits.with_label_values(&[mirror]).inc_by(n);
        }
    }
    pub(super) fn skipped_active(&self, mirror: &str) {
        self.skipped_active.with_label_values(&[mirror]).inc();
    }
    pub(super) fn error(&self, mirror: &str) {
        self.errors.with_label_values(&[mirror]).inc();
    }
}

/// What the collector reads of a sync.
pub trait SyncGauges: Send + Sync {
    fn mirror_name(&self) -> &str;
    fn age(&self) -> Option<f64>;
    fn group_lags(&self) -> Vec<(String, i64)>;
    /// Per reason, the groups the last round did not sync.
    fn not_synced(&self) -> Vec<(&'static str, usize)>;
}

impl<I: GroupIo + 'static> SyncGauges for GroupSync<I> {
    fn mirror_name(&self) -> &str {
        self.mirror()
    }
    fn age(&self) -> Option<f64> {
        self.age_seconds()
    }
    fn group_lags(&self) -> Vec<(String, i64)> {
        self.lags()
    }
    fn not_synced(&self) -> Vec<(&'static str, usize)> {
        self.not_synced_counts()
    }
}

/// Scrape-time `mirrorgate_group_sync_age_seconds{mirror}`,
/// `mirrorgate_group_sync_lag_records{mirror,group}` and
/// `mirrorgate_group_sync_groups_not_synced{mirror,reason}`.
pub struct GaugeCollector {
    syncs: Mutex<Vec<Weak<dyn SyncGauges>>>,
    age: GaugeVec,
    lag: IntGaugeVec,
    not_synced: IntGaugeVec,
}

impl GaugeCollector {
    pub fn new() -> Result<Self, prometheus::Error> {
        Ok(GaugeCollector {
            syncs: Mutex::new(Vec::new()),
            age: GaugeVec::new(
                Opts::new(
                    "mirrorgate_group_sync_age_seconds",
                    "Seconds since the group offset sync's last complete round.",
                ),
                &["mirror"],
            )?,
            lag: IntGaugeVec::new(
                Opts::new(
                    "mirrorgate_group_sync_lag_records",
                    "Per group, the sum over its partitions of the source's committed offset \
                     (translated into destination offsets; records not mirrored yet count) minus \
                     the destination's committed offset, negative terms as 0: what a failover \
                     now would make the group re-read.",
                ),
                &["mirror", "group"],
            )?,
            not_synced: IntGaugeVec::new(
                Opts::new(
                    "mirrorgate_group_sync_groups_not_synced",
                    "Groups the last round of the group offset sync did not sync, by reason: \
                     error (a request failed), waiting_for_mirror (the consistent cut did not \
                     hold), round_incomplete (the round could not look at them: a cluster could \
                     not be listed, out of time, stopped). After a failover: its final round.",
                ),
                &["mirror", "reason"],
            )?,
        })
    }

    /// Show `sync` from now on.
    pub fn add(&self, sync: &Arc<dyn SyncGauges>) {
        self.syncs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::downgrade(sync));
    }
}

impl prometheus::core::Collector for GaugeCollector {
    fn desc(&self) -> Vec<&prometheus::core::Desc> {
        let mut d = self.age.desc();
        d.extend(self.lag.desc());
        d.extend(self.not_synced.desc());
        d
    }

    fn collect(&self) -> Vec<prometheus::proto::MetricFamily> {
        self.age.reset();
        self.lag.reset();
        self.not_synced.reset();
        let syncs = self.syncs.lock().unwrap_or_else(|e| e.into_inner()).clone();
        for s in syncs.iter().filter_map(Weak::upgrade) {
            if let Some(a) = s.age() {
                self.age.with_label_values(&[s.mirror_name()]).set(a);
            }
            for (g, l) in s.group_lags() {
                self.lag.with_label_values(&[s.mirror_name(), &g]).set(l);
            }
            for (reason, n) in s.not_synced() {
                self.not_synced
                    .with_label_values(&[s.mirror_name(), reason])
                    .set(n as i64);
            }
        }
        let mut out = prometheus::core::Collector::collect(&self.age);
        out.extend(prometheus::core::Collector::collect(&self.lag));
        out.extend(prometheus::core::Collector::collect(&self.not_synced));
        out
    }
}
