//! The runtime side of the PSM: which partitions are tracked, their producer state behind a
//! lock each, whether each is rebuilt (ready), applying broker outcomes in order, expiry,
//! snapshots and metrics.
//!
//! Tracked partitions are the partitions of the topics that belong to a configured mirror. Every
//! produce to a tracked partition that goes through the gateway (either listener, or later the
//! built-in agent) is classified by the PSM and compared with the broker's answer; the PSM then
//! follows the broker. A disagreement is counted (`result="diverged"`), logged, and the partition
//! is rebuilt from the log, which is the source of truth.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use prometheus::{IntCounter, IntCounterVec, Opts};

use crate::config::{Config, TopicRouter};
use crate::metrics::Metrics;
use crate::protocol::batch::BatchHeader;
use crate::state::StateStore;

use super::{PartitionPsm, Verdict};

/// Default `producer.id.expiration.ms` of the broker.
pub const DEFAULT_EXPIRATION_MS: i64 = 86_400_000;
/// Default `producer.id.expiration.check.interval.ms` of the broker.
pub const DEFAULT_CHECK_INTERVAL_MS: i64 = 600_000;
/// Batches applied while a partition is being rebuilt are buffered up to this many; beyond it the
/// partition is rebuilt again.
const MAX_BUFFERED_WHILE_REBUILDING: usize = 10_000;

/// The state-store area of PSM snapshots.
pub const SNAPSHOT_AREA: &str = "psm";

/// One tracked partition.
pub struct PartitionSlot {
    /// The producer state.
    pub psm: PartitionPsm,
    /// Rebuilt from snapshot and log; classifications are meaningful.
    pub ready: bool,
    /// A rebuild is wanted (never rebuilt, diverged, or an outcome is unknown).
    pub needs_rebuild: bool,
    /// Highest log offset reflected in `psm` (-1: none). Outcomes of different connections
    /// arrive in any order, so batches below it may still be on their way: it is not a mark
    /// below which everything is known (see `log_read_through`).
    pub applied_through: i64,
    /// Last offset of the log the last rebuild read (-1: none): every batch at or below it is in
    /// `psm` already, so an outcome at or below it (answered after the rebuild read it) is not
    /// applied again.
    pub log_read_through: i64,
    /// Changed since the last snapshot.
    pub dirty: bool,
    /// Outcomes that arrived while the partition was being rebuilt: (first offset, header).
    pub buffered: Vec<(i64, BatchHeader)>,
    /// The partition's own barrier: nothing before it counts (a rebuild clears the state there).
    pub barrier_offset: Option<i64>,
    /// When the last rebuild was installed: the next one waits [`MIN_REBUILD_INTERVAL`].
    pub last_rebuilt: Option<std::time::Instant>,
}

impl PartitionSlot {
    /// Outcomes at or below this offset are already reflected in `psm`: the log the last rebuild
    /// read, and everything before the partition's own barrier.
    pub fn reflected_through(&self) -> i64 {
        self.log_read_through.max(self.barrier_offset.unwrap_or(-1))
    }

    fn new() -> Self {
        PartitionSlot {
            psm: PartitionPsm::new(),
            ready: false,
            needs_rebuild: true,
            applied_through: -1,
            log_read_through: -1,
            dirty: false,
            buffered: Vec::new(),
            barrier_offset: None,
            last_rebuilt: None,
        }
    }
}

/// What the broker did with one tracked batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrokerOutcome {
    /// Error code 0 with this base offset.
    Appended { base_offset: i64 },
    /// A partition error code; nothing appended.
    Refused { error_code: i16 },
    /// The broker may or may not have appended it (e.g. REQUEST_TIMED_OUT with acks=all).
    Unknown { error_code: i16 },
}

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

    fn of(v: &Verdict) -> BatchResult {
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
    fn new(metrics: &Metrics) -> Self {
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

type Key = (String, i32);

/// A producer with an open transaction: (producer id, transaction first offset, last data
/// offset).
pub type OpenTxn = (i64, i64, i64);

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
            lock(&slot).barrier_offset = Some(offset);
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
            .filter(|(_, s)| !lock(s).ready)
            .map(|(k, _)| k.clone())
            .collect();
        v.sort();
        v
    }

    /// Tracked partitions that want a rebuild.
    pub fn wanting_rebuild(&self) -> Vec<(String, i32)> {
        let slots = self.slots.read().unwrap_or_else(|e| e.into_inner());
        let mut v: Vec<Key> = slots
            .iter()
            .filter(|(_, s)| {
                let s = lock(s);
                s.needs_rebuild
                    && s.last_rebuilt
                        .is_none_or(|t| t.elapsed() >= MIN_REBUILD_INTERVAL)
            })
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
                let s = lock(s);
                if !s.ready {
                    return None;
                }
                let open: Vec<OpenTxn> = s
                    .psm
                    .iter()
                    .filter_map(|e| {
                        Some((
                            e.producer_id(),
                            e.current_txn_first_offset()?,
                            e.last_data_offset(),
                        ))
                    })
                    .collect();
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
        let mut s = lock(&slot);
        if !s.ready {
            return 0;
        }
        let mut n = 0;
        for (pid, first, last) in seen {
            if let Some(b) = broker.get(pid) {
                if s.psm.settle_transaction(*pid, *first, *last, *b) {
                    n += 1;
                }
            }
        }
        if n > 0 {
            s.dirty = true;
        }
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
        let result = apply_locked(&mut s, header, outcome);
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

    /// Write snapshots of changed, ready partitions. Returns how many were written.
    pub fn write_snapshots(&self) -> usize {
        let Some(store) = &self.store else { return 0 };
        let mut written = 0;
        for (topic, partition) in self.partitions() {
            let Some(slot) = self.existing(&topic, partition) else {
                continue;
            };
            let bytes = {
                let mut s = lock(&slot);
                if !s.ready || !s.dirty {
                    continue;
                }
                s.dirty = false;
                s.psm.encode_snapshot(s.applied_through)
            };
            match store.write(SNAPSHOT_AREA, &snapshot_name(&topic, partition), &bytes) {
                Ok(()) => written += 1,
                Err(e) => {
                    tracing::warn!(topic, partition, error = %e, "cannot write PSM snapshot");
                    lock(&slot).dirty = true;
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
                let mut s = lock(&slot);
                let n = s.psm.expire(now_ms, horizon);
                if n > 0 {
                    s.dirty = true;
                    total += n;
                }
            }
        }
        self.counters.expired_by_time.inc_by(total as u64);
        total
    }

    /// Producer counts per partition (or per topic when aggregated), for the metrics collector.
    pub fn producer_counts(&self) -> Vec<(String, Option<i32>, usize)> {
        let slots = self.slots.read().unwrap_or_else(|e| e.into_inner());
        let mut per: HashMap<(String, Option<i32>), usize> = HashMap::new();
        for ((t, p), s) in slots.iter() {
            let key = if self.per_partition {
                (t.clone(), Some(*p))
            } else {
                (t.clone(), None)
            };
            *per.entry(key).or_default() += lock(s).psm.len();
        }
        let mut v: Vec<_> = per.into_iter().map(|((t, p), n)| (t, p, n)).collect();
        v.sort();
        v
    }
}

/// Rebuilds of one partition are at least this far apart (review F14): a stream of
/// disagreements (e.g. local producers colliding with mirrored ids after a failover) costs one
/// rebuild per interval, not one per batch. Until then the partition goes on following the
/// broker's answers.
pub const MIN_REBUILD_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

/// The broker's error codes the PSM can judge, and those that leave the outcome unknown.
const REQUEST_TIMED_OUT: i16 = 7;
const NOT_ENOUGH_REPLICAS_AFTER_APPEND: i16 = 20;

/// Classify `header` against the state, compare with the broker, follow the broker.
pub fn apply_locked(
    s: &mut PartitionSlot,
    header: &BatchHeader,
    outcome: BrokerOutcome,
) -> BatchResult {
    let outcome = match outcome {
        BrokerOutcome::Refused { error_code }
            if error_code == REQUEST_TIMED_OUT
                || error_code == NOT_ENOUGH_REPLICAS_AFTER_APPEND =>
        {
            BrokerOutcome::Unknown { error_code }
        }
        o => o,
    };
    if !s.ready {
        match outcome {
            BrokerOutcome::Appended { base_offset } => {
                if s.buffered.len() >= MAX_BUFFERED_WHILE_REBUILDING {
                    s.buffered.clear();
                    s.needs_rebuild = true;
                } else {
                    s.buffered.push((base_offset, *header));
                }
            }
            BrokerOutcome::Unknown { .. } => s.needs_rebuild = true,
            BrokerOutcome::Refused { .. } => {}
        }
        return BatchResult::Buffered;
    }
    if let BrokerOutcome::Unknown { .. } = outcome {
        s.needs_rebuild = true;
        return BatchResult::UnknownOutcome;
    }
    if let BrokerOutcome::Appended { base_offset } = outcome {
        if base_offset <= s.reflected_through() {
            // Already in the state: the rebuild read it from the log (or it lies before the
            // partition's barrier, where nothing counts). Judging it against a state that
            // already holds it (and maybe later batches of its producer) would be wrong.
            return BatchResult::Accepted;
        }
    }
    let verdict = s.psm.classify(header);
    match (verdict, outcome) {
        (Verdict::Duplicate { first_offset, .. }, BrokerOutcome::Appended { base_offset }) => {
            if first_offset == base_offset {
                BatchResult::Duplicate
            } else {
                // The broker appended it, or acknowledged another cached copy.
                s.needs_rebuild = true;
                BatchResult::Diverged
            }
        }
        (v, BrokerOutcome::Appended { base_offset }) if v.appends() => {
            // Outcomes of other connections may already have moved `applied_through` past this
            // batch: the broker appended them later, but their answers were read first.
            match s.psm.append(header, base_offset) {
                Ok(_) => {
                    s.applied_through = s
                        .applied_through
                        .max(header.last_offset_delta as i64 + base_offset);
                    s.dirty = true;
                    BatchResult::of(&v)
                }
                Err(_) => {
                    let _ = s.psm.replay(header, base_offset);
                    s.needs_rebuild = true;
                    BatchResult::Diverged
                }
            }
        }
        (_, BrokerOutcome::Appended { base_offset }) => {
            // The PSM predicted a refusal; the broker appended. Follow the broker.
            let _ = s.psm.replay(header, base_offset);
            s.applied_through = s
                .applied_through
                .max(header.last_offset_delta as i64 + base_offset);
            s.dirty = true;
            s.needs_rebuild = true;
            BatchResult::Diverged
        }
        (v, BrokerOutcome::Refused { error_code }) => {
            if v.error_code() == error_code {
                BatchResult::of(&v)
            } else if v.error_code() == 0 {
                // Refused for a reason outside producer state (not leader, topic authorization,
                // record too large, …): nothing appended, nothing to learn.
                if matches!(error_code, 45 | 46 | 47 | 48 | 87 | 90) {
                    s.needs_rebuild = true;
                    BatchResult::Diverged
                } else {
                    BatchResult::OtherError
                }
            } else {
                s.needs_rebuild = true;
                BatchResult::Diverged
            }
        }
        (_, BrokerOutcome::Unknown { .. }) => BatchResult::UnknownOutcome,
    }
}

/// Scrape-time collector of `mirrorgate_psm_producers{topic,partition}` (or `{topic}` when
/// aggregated): built from the registry at each scrape, so series of deleted topics disappear.
pub struct ProducerGauge {
    registry: Arc<PsmRegistry>,
    desc: Vec<prometheus::core::Desc>,
}

impl ProducerGauge {
    pub fn new(registry: Arc<PsmRegistry>) -> Self {
        let labels: Vec<String> = if registry.per_partition {
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
        let per_partition = self.registry.per_partition;
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
#[path = "registry_tests.rs"]
mod tests;
