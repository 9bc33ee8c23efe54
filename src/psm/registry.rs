//! The runtime side of the PSM: which partitions are tracked, each one's [`PartitionSlot`]
//! behind a lock, and what is done across them: applying broker outcomes, clearing at a barrier,
//! expiry, snapshots, settling transactions, and the views readers get.
//!
//! Owns: the map of tracked partitions (created on first use, dropped with their topic), the
//! locking of slots, the expiration settings in force, writing and reading snapshots through the
//! state store, counting and logging what slots return.
//! Must not touch: a slot's lifecycle (its phase and fields are private to `slot.rs`; the
//! registry calls its methods), sockets and the log (rebuilds read it in `rebuild.rs`).
//!
//! Tracked partitions are the partitions of the topics that belong to a configured mirror. Every
//! produce to a tracked partition that goes through the gateway (either listener, or later the
//! built-in agent) is classified by the PSM and compared with the broker's answer; the PSM then
//! follows the broker. A disagreement is counted (`result="diverged"`), logged, and the partition
//! is rebuilt from the log, which is the source of truth.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use crate::config::{Config, TopicRouter};
use crate::metrics::Metrics;
use crate::protocol::batch::BatchHeader;
use crate::state::StateStore;

pub use super::metrics::{BatchResult, ProducerCounts, ProducerGauge, PsmCounters};
pub use super::slot::{
    AppendedMarker, BrokerOutcome, ClearedProducer, OpenTxn, PartitionSlot, SlotView, StaleReason,
    MIN_REBUILD_INTERVAL,
};
use super::{PartitionPsm, ProducerEntry};

/// Default `producer.id.expiration.ms` of the broker.
pub const DEFAULT_EXPIRATION_MS: i64 = 86_400_000;
/// Default `producer.id.expiration.check.interval.ms` of the broker.
pub const DEFAULT_CHECK_INTERVAL_MS: i64 = 600_000;
/// The state-store area of PSM snapshots.
pub const SNAPSHOT_AREA: &str = "psm";

type Key = (String, i32);

/// What `GET /v1/partitions/{topic}/{partition}/producers` shows: a copy, taken under the
/// partition's lock.
#[derive(Debug, Clone)]
pub struct ProducersView {
    pub slot: SlotView,
    pub producers: Vec<ProducerEntry>,
}

/// Every tracked partition of the gateway.
pub struct PsmRegistry {
    router: TopicRouter,
    slots: RwLock<HashMap<Key, Arc<Mutex<PartitionSlot>>>>,
    /// Counters.
    pub counters: PsmCounters,
    store: Option<StateStore>,
    expiration_ms: AtomicI64,
    check_interval_ms: AtomicI64,
    per_partition: bool,
    /// Set once the first discovery of tracked partitions (and their rebuild) has run.
    initialized: std::sync::atomic::AtomicBool,
}

fn lock(slot: &Mutex<PartitionSlot>) -> std::sync::MutexGuard<'_, PartitionSlot> {
    slot.lock().unwrap_or_else(|e| e.into_inner())
}

/// The slot key for snapshot files: `topic-partition` (topic names cannot contain `/`).
pub fn snapshot_name(topic: &str, partition: i32) -> String {
    format!("{topic}-{partition}.psm")
}

impl PsmRegistry {
    /// A registry for the mirrors of `config`, snapshots in `store`.
    pub fn new(config: &Config, store: Option<StateStore>, metrics: &Metrics) -> Arc<Self> {
        Arc::new(PsmRegistry {
            router: config.topic_router(),
            slots: RwLock::new(HashMap::new()),
            counters: PsmCounters::new(metrics),
            store,
            expiration_ms: AtomicI64::new(
                config
                    .psm
                    .expiration_ms
                    .map(|v| v as i64)
                    .unwrap_or(DEFAULT_EXPIRATION_MS),
            ),
            check_interval_ms: AtomicI64::new(
                config
                    .psm
                    .expiration_check_interval_ms
                    .map(|v| v as i64)
                    .unwrap_or(DEFAULT_CHECK_INTERVAL_MS),
            ),
            per_partition: config.metrics.per_partition,
            initialized: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Whether produce to `topic` is tracked.
    pub fn tracks(&self, topic: &str) -> bool {
        self.router.mirror_index(topic).is_some()
    }

    /// Record the partition's own barrier offset (the rebuild clears the state there).
    pub fn set_barrier(&self, topic: &str, partition: i32, offset: i64) {
        if let Some(slot) = self.slot(topic, partition) {
            lock(&slot).set_barrier(offset);
        }
    }

    /// Mark the first discovery pass done.
    pub fn set_initialized(&self) {
        self.initialized.store(true, Ordering::SeqCst);
    }

    /// Whether the first discovery pass is done (before it, the gateway is not ready).
    pub fn is_initialized(&self) -> bool {
        self.initialized.load(Ordering::SeqCst)
    }

    /// Whether any mirror is configured at all (fast path for the tap).
    pub fn is_empty(&self) -> bool {
        self.router.is_empty()
    }

    /// The slot of a tracked partition, created (not ready) on first use.
    pub fn slot(&self, topic: &str, partition: i32) -> Option<Arc<Mutex<PartitionSlot>>> {
        if !self.tracks(topic) || partition < 0 {
            return None;
        }
        if let Some(s) = self
            .slots
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(topic.to_string(), partition))
        {
            return Some(s.clone());
        }
        let mut w = self.slots.write().unwrap_or_else(|e| e.into_inner());
        Some(
            w.entry((topic.to_string(), partition))
                .or_insert_with(|| Arc::new(Mutex::new(PartitionSlot::new())))
                .clone(),
        )
    }

    /// The slot if it exists (never creates).
    pub fn existing(&self, topic: &str, partition: i32) -> Option<Arc<Mutex<PartitionSlot>>> {
        self.slots
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(topic.to_string(), partition))
            .cloned()
    }

    /// Every tracked partition, sorted.
    pub fn partitions(&self) -> Vec<(String, i32)> {
        let mut v: Vec<Key> = self
            .slots
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect();
        v.sort();
        v
    }

    /// Tracked partitions that are not rebuilt yet.
    pub fn not_ready(&self) -> Vec<(String, i32)> {
        let slots = self.slots.read().unwrap_or_else(|e| e.into_inner());
        let mut v: Vec<Key> = slots
            .iter()
            .filter(|(_, s)| !lock(s).is_ready())
            .map(|(k, _)| k.clone())
            .collect();
        v.sort();
        v
    }

    /// Tracked partitions that want a rebuild.
    pub fn wanting_rebuild(&self) -> Vec<(String, i32)> {
        let now = Instant::now();
        let slots = self.slots.read().unwrap_or_else(|e| e.into_inner());
        let mut v: Vec<Key> = slots
            .iter()
            .filter(|(_, s)| lock(s).wants_rebuild_at(now))
            .map(|(k, _)| k.clone())
            .collect();
        v.sort();
        v
    }

    /// Producers with a transaction open in a ready partition's state: per partition,
    /// (producer id, transaction first offset, last data offset) — what
    /// [`PsmRegistry::settle_transactions`] checks is unchanged (review F11f).
    pub fn open_transactions(&self) -> Vec<(Key, Vec<OpenTxn>)> {
        let slots = self.slots.read().unwrap_or_else(|e| e.into_inner());
        let mut v: Vec<(Key, Vec<OpenTxn>)> = slots
            .iter()
            .filter_map(|(k, s)| {
                let open = lock(s).open_transactions();
                (!open.is_empty()).then(|| (k.clone(), open))
            })
            .collect();
        v.sort();
        v
    }

    /// Apply the broker's description of the producers in `seen` (from
    /// [`PsmRegistry::open_transactions`]); returns how many entries changed.
    pub fn settle_transactions(
        &self,
        topic: &str,
        partition: i32,
        seen: &[OpenTxn],
        broker: &HashMap<i64, crate::psm::partition::BrokerTxnState>,
    ) -> usize {
        let Some(slot) = self.existing(topic, partition) else {
            return 0;
        };
        let n = lock(&slot).settle_transactions(seen, broker);
        n
    }

    /// Drop slots of partitions that no longer exist (deleted topics); their series disappear.
    pub fn retain(&self, keep: impl Fn(&str, i32) -> bool) {
        self.slots
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(t, p), _| keep(t, *p));
    }

    /// `producer.id.expiration.ms` in force.
    pub fn expiration_ms(&self) -> i64 {
        self.expiration_ms.load(Ordering::Relaxed)
    }

    /// `producer.id.expiration.check.interval.ms` in force.
    pub fn check_interval_ms(&self) -> i64 {
        self.check_interval_ms.load(Ordering::Relaxed)
    }

    /// Set the broker's expiration settings (when not overridden in the config).
    pub fn set_expiration(&self, expiration_ms: i64, check_interval_ms: i64) {
        self.expiration_ms.store(expiration_ms, Ordering::Relaxed);
        self.check_interval_ms
            .store(check_interval_ms, Ordering::Relaxed);
    }

    /// Apply what the broker did with one batch of a tracked partition. The caller holds no lock.
    /// One producer's outcomes must be applied in the order the broker appended them (a producer
    /// writes a partition through one connection, whose responses arrive in request order);
    /// outcomes of different connections may come in any order.
    pub fn apply(
        &self,
        topic: &str,
        partition: i32,
        header: &BatchHeader,
        outcome: BrokerOutcome,
    ) -> BatchResult {
        let Some(slot) = self.slot(topic, partition) else {
            return BatchResult::OtherError;
        };
        let mut s = lock(&slot);
        let result = s.apply(header, outcome);
        if result == BatchResult::Diverged {
            tracing::warn!(
                topic, partition, producer_id = header.producer_id, epoch = header.producer_epoch,
                base_sequence = header.base_sequence, ?outcome,
                "PSM classification disagreed with the broker; the partition will be rebuilt from the log"
            );
        }
        drop(s);
        self.counters.batch(result);
        result
    }

    /// A transaction marker appended at `offset` of a tracked partition (the mirror agent's
    /// copy of a source marker; the produce tap never sees WriteTxnMarkers).
    pub fn apply_marker(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
        marker: AppendedMarker,
    ) -> BatchResult {
        let Some(slot) = self.slot(topic, partition) else {
            return BatchResult::OtherError;
        };
        let result = lock(&slot).apply_marker(offset, marker);
        if result == BatchResult::Diverged {
            tracing::warn!(
                topic, partition, producer_id = marker.producer_id, epoch = marker.epoch, offset,
                "PSM refused a transaction marker the broker appended; the partition will be rebuilt from the log"
            );
        }
        self.counters.batch(result);
        result
    }

    /// The outcome of a batch of a tracked partition will never be known (an `acks=0` produce):
    /// the partition wants a rebuild from the log.
    pub fn mark_outcome_unknown(&self, topic: &str, partition: i32) {
        if let Some(slot) = self.slot(topic, partition) {
            lock(&slot).mark_outcome_unknown();
        }
    }

    /// This instance took the agent over: the tracked partitions of `topics` hold batches the
    /// previous owner appended, which this PSM never saw. Each wants a rebuild from the log
    /// (defect P1); returns how many were marked.
    pub fn mark_written_elsewhere(&self, topics: impl Fn(&str) -> bool) -> usize {
        let slots = self.slots.read().unwrap_or_else(|e| e.into_inner());
        let mut n = 0;
        for ((topic, _), slot) in slots.iter() {
            if topics(topic) {
                lock(slot).mark_written_elsewhere();
                n += 1;
            }
        }
        n
    }

    /// Clear the PSM of a partition at its barrier (the failover's PSM_CLEARED step); returns how
    /// many producers were cleared. `screen` receives those producers (without the control
    /// barrier's own producer id `own`) while the partition is still locked, so no reader finds
    /// them in neither the PSM nor the caller's screening set.
    pub fn clear_at_barrier(
        &self,
        topic: &str,
        partition: i32,
        barrier: i64,
        own: Option<i64>,
        screen: impl FnOnce(Vec<ClearedProducer>),
    ) -> usize {
        let Some(slot) = self.slot(topic, partition) else {
            return 0;
        };
        let mut s = lock(&slot);
        let cleared = s.clear_at_barrier(barrier, own);
        let n = cleared.len();
        screen(cleared);
        drop(s);
        self.counters.expired_by_barrier.inc_by(n as u64);
        n
    }

    /// What a reader sees of a tracked partition, if it is known.
    pub fn view(&self, topic: &str, partition: i32) -> Option<SlotView> {
        let slot = self.existing(topic, partition)?;
        let view = lock(&slot).view();
        Some(view)
    }

    /// A tracked partition's producers and where its state stands, if it is known.
    pub fn producers(&self, topic: &str, partition: i32) -> Option<ProducersView> {
        let slot = self.existing(topic, partition)?;
        let s = lock(&slot);
        Some(ProducersView {
            slot: s.view(),
            producers: s.producers(),
        })
    }

    /// Whether producer counts are per partition (else per topic).
    /// Write snapshots of changed, ready partitions. Returns how many were written.
    pub fn write_snapshots(&self) -> usize {
        let Some(store) = &self.store else { return 0 };
        let mut written = 0;
        for (topic, partition) in self.partitions() {
            let Some(slot) = self.existing(&topic, partition) else {
                continue;
            };
            let Some(bytes) = lock(&slot).take_snapshot() else {
                continue;
            };
            match store.write(SNAPSHOT_AREA, &snapshot_name(&topic, partition), &bytes) {
                Ok(()) => written += 1,
                Err(e) => {
                    tracing::warn!(topic, partition, error = %e, "cannot write PSM snapshot");
                    lock(&slot).snapshot_not_written();
                }
            }
        }
        written
    }

    /// Read the snapshot of a partition, if one exists and is valid.
    pub fn read_snapshot(&self, topic: &str, partition: i32) -> Option<(PartitionPsm, i64)> {
        let store = self.store.as_ref()?;
        match store.read(SNAPSHOT_AREA, &snapshot_name(topic, partition)) {
            Ok(Some(bytes)) => match PartitionPsm::decode_snapshot(&bytes) {
                Ok(v) => Some(v),
                Err(e) => {
                    tracing::warn!(topic, partition, error = %e, "ignoring unreadable PSM snapshot; rebuilding from the log start");
                    None
                }
            },
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(topic, partition, error = %e, "cannot read PSM snapshot; rebuilding from the log start");
                None
            }
        }
    }

    /// Remove producers the broker has certainly expired: last timestamp older than
    /// `expiration + check interval` (the broker removes them at its next check, so the gateway
    /// never forgets a producer the broker may still hold). Returns how many were removed.
    pub fn expire(&self, now_ms: i64) -> usize {
        let horizon = self
            .expiration_ms()
            .saturating_add(self.check_interval_ms());
        let mut total = 0;
        for (topic, partition) in self.partitions() {
            if let Some(slot) = self.existing(&topic, partition) {
                total += lock(&slot).expire(now_ms, horizon);
            }
        }
        self.counters.expired_by_time.inc_by(total as u64);
        total
    }
}

impl ProducerCounts for PsmRegistry {
    fn per_partition(&self) -> bool {
        self.per_partition
    }

    /// Producer counts per partition (or per topic when aggregated), for the metrics collector.
    fn producer_counts(&self) -> Vec<(String, Option<i32>, usize)> {
        let slots = self.slots.read().unwrap_or_else(|e| e.into_inner());
        let mut per: HashMap<(String, Option<i32>), usize> = HashMap::new();
        for ((t, p), s) in slots.iter() {
            let key = if self.per_partition {
                (t.clone(), Some(*p))
            } else {
                (t.clone(), None)
            };
            *per.entry(key).or_default() += lock(s).psm().len();
        }
        let mut v: Vec<_> = per.into_iter().map(|((t, p), n)| (t, p, n)).collect();
        v.sort();
        v
    }
}

#[cfg(test)]
#[path = "registry_tests.rs"]
mod tests;
