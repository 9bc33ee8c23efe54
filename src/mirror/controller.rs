//! The mirror controller: the partition states of every mirror (persisted), the read-only and
//! fencing checks on the produce path, the count of mirror produce in flight per partition, the
//! failover executor (fence → drain → barrier → persist → clear PSM → STOPPED) and its resumption
//! after a restart, and the set of producer ids that mirrored traffic left in the brokers (PID
//! screening).
//!
//! The screening set (`screen/pids.json`) has one writer at a time: every change is serialised
//! and written while the set's lock is held, so a file never holds an older set than a write
//! that finished after it (review F10). A failover makes the entries of its partitions durable
//! *before* it records BARRIER_PERSISTED (review F8): after that record a restart rebuilds the PSM
//! only from the barrier on, so the entries could not be found again. A screening set that cannot
//! be read is never started empty nor rewritten: the gateway is not ready and the mirror topics
//! stay read-only on the client listener until the operator recovers it
//! (docs/failover.md#recovering-the-pid-screening-set).
//!
//! The barrier is an ABORT transaction marker (WriteTxnMarkers) of an idempotent producer id no
//! producer of the partitions uses, recorded before it is written; the data barrier is the
//! fallback (`failover.barrier`, docs/failover.md).
//!
//! Owns: mirror state files in the state store (`mirrors/NAME.json`, `screen/pids.json`), barrier
//! writes. Must not touch: client sockets (the proxy asks it for decisions), the PSM's rules (it
//! asks the registry to clear a partition).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::ProduceRequest;
use kafka_protocol::protocol::StrBytes;
use prometheus::{Histogram, HistogramOpts, IntCounter, IntCounterVec, Opts};
use serde::{Deserialize, Serialize};

use crate::cluster::ClusterView;
use crate::config::{BarrierMode, Config, TopicRouter};
use crate::metrics::{ListenerKind, Metrics};
use crate::protocol::barrier::{
    encode_barrier_batch, parse_barrier, BarrierValue, BARRIER_TIMESTAMP,
};
use crate::protocol::batch::BatchWalker;
use crate::psm::registry::PsmRegistry;
use crate::state::{StateError, StateStore};

use super::state::{
    BarrierKind, BarrierProducer, FailoverStep, MirrorRecord, PartitionRecord, PartitionState,
};

/// Error code the gateway answers for a produce it refuses (POLICY_VIOLATION: not retriable, and
/// clients surface the message).
pub const REJECT_ERROR_CODE: i16 = 44;
/// State-store area of mirror records.
pub const MIRRORS_AREA: &str = "mirrors";
/// State-store area of the PID screening set.
pub const SCREEN_AREA: &str = "screen";
const SCREEN_FILE: &str = "pids.json";

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The gateway clock as barrier writes see it. Test hook (environment, read once):
/// `MIRRORGATE_TEST_BARRIER_CLOCK_SKEW_MS` shifts it, standing for a gateway whose wall clock is
/// off from the brokers'.
fn barrier_clock_ms() -> i64 {
    static SKEW: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    let skew = *SKEW.get_or_init(|| {
        std::env::var("MIRRORGATE_TEST_BARRIER_CLOCK_SKEW_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    });
    now_ms().saturating_add(skew)
}

/// A refused partition of a produce request.
#[derive(Debug, Clone)]
pub struct Refusal {
    pub error_code: i16,
    pub message: String,
    /// `mirrorgate_produce_rejected_total{reason}` (`read_only`, `mirror_fenced`,
    /// `state_unreadable`, `screen_unreadable`, `read_only_admin`).
    pub reason: &'static str,
}

/// Mirror writes of one partition that the failover drain must know the outcome of.
pub struct PartitionWrites {
    /// `mirrorgate_protection_unknown_outcome_writes_total`.
    unknown_total: IntCounter,
    /// Admitted and not yet answered.
    in_flight: AtomicI64,
    /// Ended without the broker's answer (connection lost or timed out): such a write may
    /// still be appended later, so the failover re-reads the log after its barrier.
    unknown: AtomicU64,
    /// When the last write of unknown outcome ended (ms since the epoch; 0: never).
    last_unknown_ms: AtomicI64,
}

/// One admitted mirror write of a partition. [`InFlightGuard::answered`] releases it when the
/// broker answered; dropped any other way (connection lost, timed out, gateway gave up), it
/// counts as a write of unknown outcome.
pub struct InFlightGuard {
    writes: Arc<PartitionWrites>,
    answered: bool,
}

impl InFlightGuard {
    /// The broker answered the request that carried this write: its outcome is known.
    pub fn answered(mut self) {
        self.answered = true;
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        if !self.answered {
            // Recorded before the in-flight count drops: a drain that sees zero sees this too.
            self.writes
                .last_unknown_ms
                .fetch_max(now_ms(), Ordering::SeqCst);
            self.writes.unknown.fetch_add(1, Ordering::SeqCst);
            self.writes.unknown_total.inc();
        }
        self.writes.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A producer id that mirrored traffic left in the destination brokers' state.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct ScreenEntry {
    pub max_epoch: i16,
    pub last_timestamp: i64,
    /// When the gateway last added or refreshed this entry (ms; 0 in files of older versions):
    /// a broker keeps a producer id until its first expiry check after the append, even when
    /// the record's timestamp is old (review F11b).
    #[serde(default)]
    pub added_ms: i64,
}

impl ScreenEntry {
    /// Until when the brokers may still hold this producer id (ms): the later of its last
    /// timestamp plus `expiration_ms` and the time it was added, plus one expiry check
    /// interval.
    pub fn protected_until(&self, expiration_ms: i64, check_interval_ms: i64) -> i64 {
        self.last_timestamp
            .saturating_add(expiration_ms)
            .max(self.added_ms)
            .saturating_add(check_interval_ms)
    }
}

/// Why a failover could not be started.
#[derive(Debug, thiserror::Error)]
pub enum FailoverError {
    #[error("no mirror named {0:?}")]
    UnknownMirror(String),
    #[error("mirror {name:?} is already stopped (failover {failover_id} completed)")]
    AlreadyStopped { name: String, failover_id: String },
    #[error("mirror {name:?} has no partitions on the destination yet")]
    NoPartitions { name: String },
    #[error(
        "the state of mirror {name:?} cannot be read ({reason}); recovery: \
         docs/failover.md#recovering-mirror-state"
    )]
    StateUnreadable { name: String, reason: String },
    #[error("cannot persist the state of mirror {name:?}: {reason}")]
    Persist { name: String, reason: String },
    #[error("no failover while {0}")]
    ScreenUnreadable(ScreenError),
}

/// Why the PID screening set cannot be changed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ScreenError {
    /// The file could not be read or decoded at start: it is left as it is for the operator.
    #[error(
        "the PID screening set {path} cannot be read ({reason}); mirror topics stay read-only on the \
         client listener; recovery: docs/failover.md#recovering-the-pid-screening-set"
    )]
    Unreadable { path: String, reason: String },
    #[error("cannot persist the PID screening set: {0}")]
    Persist(String),
}

impl From<StateError> for ScreenError {
    fn from(e: StateError) -> Self {
        ScreenError::Persist(e.to_string())
    }
}

/// Why a mirror cannot be started (failback).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Failover(FailoverError),
    #[error("mirror {0:?} has no source: without the built-in agent the gateway cannot verify that the destination is aligned; start the external mirroring tool against an empty topic instead")]
    NoAgent(String),
    #[error("mirror {0:?} has a failover in progress; wait until every partition is STOPPED")]
    FailoverInProgress(String),
    #[error("mirror {0:?} has no STOPPED partition to start")]
    NothingStopped(String),
}

/// The answer to a failover call.
#[derive(Debug, Clone, Serialize)]
pub struct FailoverStarted {
    pub mirror: String,
    pub failover_id: String,
    /// True when the call joined a failover already in progress.
    pub already_running: bool,
}

struct MirrorSlot {
    record: MirrorRecord,
    /// Set when the persisted state could not be read: the mirror stays read-only (fail closed).
    unreadable: Option<String>,
    running: bool,
}

/// Metrics of mirrors and failovers.
struct MirrorMetrics {
    barriers_written: IntCounterVec,
    barrier_writes: IntCounterVec,
    barriers_seen: IntCounterVec,
    pid_screened: IntCounter,
    duplicate_ack_guard: IntCounter,
    rejected: IntCounterVec,
    failover_duration: Histogram,
    topic_overlaps: IntCounter,
    unknown_writes: IntCounter,
    late_writes: IntCounterVec,
}

impl MirrorMetrics {
    fn new(m: &Metrics) -> Self {
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
        for c in [
            Box::new(unknown_writes.clone()) as Box<dyn prometheus::core::Collector>,
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
        }
    }
}

/// The controller of every configured mirror.
pub struct MirrorController {
    names: Vec<String>,
    /// Mirrors with a `source` (run by the built-in agent).
    with_source: Vec<String>,
    router: TopicRouter,
    store: StateStore,
    slots: Mutex<Vec<MirrorSlot>>,
    /// Fast path: topic → state per partition index (absent: not synced yet).
    states: RwLock<HashMap<String, Vec<Option<PartitionState>>>>,
    /// Barrier offset per partition of stopped partitions (duplicate-ack guard), with the
    /// destination topic id it was written under (absent in older state files).
    barriers: RwLock<HashMap<String, Vec<Option<Barrier>>>>,
    /// Barriers the partition's log no longer holds (checked at start, review F6): they guard
    /// nothing; the reason is shown in the API.
    barrier_missing: RwLock<HashMap<(String, i32), String>>,
    /// Whether the start-up check of the barriers against the logs has run (until then the
    /// gateway is not ready).
    barriers_checked: AtomicBool,
    in_flight: RwLock<HashMap<(String, i32), Arc<PartitionWrites>>>,
    /// After a barrier, how long a partition's log is watched for mirror writes of unknown
    /// outcome before it may become STOPPED (`limits.unknown_outcome_settle_ms`).
    unknown_outcome_settle: Duration,
    /// When this process started (ms): a resumed failover treats the writes of the process
    /// before it as of unknown outcome, ended at this time.
    started_ms: i64,
    /// The PID screening set. Its lock is held across serialising and writing the file.
    screen: Mutex<HashMap<i64, ScreenEntry>>,
    /// Set when `screen/pids.json` could not be read at start (fail closed, never rewritten).
    screen_unreadable: Option<ScreenError>,
    metrics: MirrorMetrics,
    /// The failover step that advances the brokers' producer-id allocators (review F15).
    pid_allocator: super::pid_allocator::PidAllocator,
    psm: Option<Arc<PsmRegistry>>,
    cluster: Arc<ClusterView>,
    timeout: Duration,
    drain_timeout: Duration,
    /// Test hooks (environment, read once): hold the failover after fencing for this long, and
    /// make the first N barrier writes fail.
    hold_after_fence: Duration,
    /// Test hook (environment, read once): `MIRRORGATE_TEST_HOLD_AFTER_FENCE_UNTIL=PATH` holds
    /// the failover after fencing until PATH exists (120 s at most), so a test can act inside
    /// that window without racing a timer.
    hold_after_fence_until: Option<std::path::PathBuf>,
    failing_barrier_writes: AtomicI64,
    /// `failover.barrier`: the barrier's form.
    barrier_mode: BarrierMode,
    /// Test hook (environment, read once): `MIRRORGATE_TEST_TXN_MARKERS_ERROR=CODE` answers
    /// every barrier marker with that error code instead of sending WriteTxnMarkers (e.g. 31,
    /// CLUSTER_AUTHORIZATION_FAILED, for the fallback to the data barrier).
    txn_markers_error: Option<i16>,
    /// Test hook (environment, read once): `MIRRORGATE_TEST_LOSE_BARRIER_MARKER_ANSWERS=N`
    /// drops the answers of the first N WriteTxnMarkers requests after the broker gave them,
    /// as a connection lost after the markers were appended.
    lose_marker_answers: AtomicI64,
    /// Built-in mirror agent: partitions it failed (topic → partition → reason, shown as FAILED
    /// while the record is MIRRORING) and the hook that stops it first in a failover.
    agent_failed: RwLock<HashMap<String, HashMap<i32, String>>>,
    agent_stop: std::sync::OnceLock<AgentStopHook>,
    /// Topics seen matched by more than one mirror (overlapping regexes): warned about once.
    overlaps_reported: Mutex<std::collections::HashSet<String>>,
    /// `failover.refuse_mirrored_producer_ids` (review F12).
    refuse_mirrored_ids: bool,
    /// `psm.clock_skew_margin_ms` (review F11d).
    clock_skew_margin_ms: i64,
}

/// Stops the built-in agent of a mirror; the future ends once its appends in flight are answered.
pub type AgentStopHook = Arc<
    dyn Fn(&str) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> + Send + Sync,
>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Test hook: `MIRRORGATE_CRASH_AFTER=fenced_persisted|fenced|barrier_written|screen_persisted|
/// barrier_persisted|psm_cleared` makes
/// the process abort right after that failover step (used by the restart tests).
fn crash_point(step: &str) {
    if std::env::var("MIRRORGATE_CRASH_AFTER").is_ok_and(|v| v == step) {
        eprintln!("mirrorgate: MIRRORGATE_CRASH_AFTER={step}: aborting");
        std::process::abort();
    }
}

impl MirrorController {
    /// Load (or create) the state of every mirror of `config`.
    pub fn new(
        config: &Config,
        store: StateStore,
        metrics: &Metrics,
        psm: Option<Arc<PsmRegistry>>,
        cluster: Arc<ClusterView>,
    ) -> Arc<Self> {
        let mut slots = Vec::new();
        // A state directory that is missing or not initialised: every mirror is unreadable.
        let store_problem = store.check().err().map(|e| e.to_string());
        for m in &config.mirrors {
            let (record, unreadable) = match store.read(MIRRORS_AREA, &format!("{}.json", m.name)) {
                _ if store_problem.is_some() => (
                    MirrorRecord::new(m.name.clone(), Vec::new(), now_ms()),
                    store_problem.clone(),
                ),
                Ok(Some(bytes)) => match MirrorRecord::decode(&bytes) {
                    Ok(r) => (r, None),
                    Err(e) => (
                        MirrorRecord::new(m.name.clone(), Vec::new(), now_ms()),
                        Some(e.to_string()),
                    ),
                },
                Ok(None) => (
                    MirrorRecord::new(m.name.clone(), Vec::new(), now_ms()),
                    None,
                ),
                Err(e) => (
                    MirrorRecord::new(m.name.clone(), Vec::new(), now_ms()),
                    Some(e.to_string()),
                ),
            };
            if let Some(reason) = &unreadable {
                tracing::error!(
                    mirror = %m.name, %reason,
                    "mirror state cannot be read: its topics stay read-only; recovery: docs/failover.md#recovering-mirror-state"
                );
            }
            slots.push(MirrorSlot {
                record,
                unreadable,
                running: false,
            });
        }
        // An unreadable store already makes every mirror unreadable (and read-only).
        let (screen, screen_unreadable) = if store_problem.is_some() {
            (HashMap::new(), None)
        } else {
            load_screen(&store)
        };
        if let Some(e) = &screen_unreadable {
            tracing::error!(error = %e, "PID screening set unreadable: not ready, mirror topics read-only on the client listener");
        }
        let c = Arc::new(MirrorController {
            names: config.mirrors.iter().map(|m| m.name.clone()).collect(),
            with_source: config
                .mirrors
                .iter()
                .filter(|m| m.source.is_some())
                .map(|m| m.name.clone())
                .collect(),
            router: config.topic_router(),
            store,
            slots: Mutex::new(slots),
            states: RwLock::new(HashMap::new()),
            barriers: RwLock::new(HashMap::new()),
            barrier_missing: RwLock::new(HashMap::new()),
            barriers_checked: AtomicBool::new(false),
            in_flight: RwLock::new(HashMap::new()),
            unknown_outcome_settle: Duration::from_millis(config.limits.unknown_outcome_settle_ms),
            started_ms: now_ms(),
            screen: Mutex::new(screen),
            screen_unreadable,
            metrics: MirrorMetrics::new(metrics),
            pid_allocator: super::pid_allocator::PidAllocator::new(
                config.failover.pid_allocator.clone(),
                cluster.clone(),
                Duration::from_millis(config.destination.connect_timeout_ms),
                metrics,
            ),
            psm,
            cluster,
            timeout: Duration::from_millis(config.destination.connect_timeout_ms),
            drain_timeout: Duration::from_secs(30),
            hold_after_fence: Duration::from_millis(
                std::env::var("MIRRORGATE_TEST_HOLD_AFTER_FENCE_MS")
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0),
            ),
            hold_after_fence_until: std::env::var_os("MIRRORGATE_TEST_HOLD_AFTER_FENCE_UNTIL")
                .map(std::path::PathBuf::from),
            failing_barrier_writes: AtomicI64::new(
                std::env::var("MIRRORGATE_TEST_FAIL_BARRIER_WRITES")
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0),
            ),
            barrier_mode: config.failover.barrier,
            txn_markers_error: std::env::var("MIRRORGATE_TEST_TXN_MARKERS_ERROR")
                .ok()
                .and_then(|v| v.parse().ok()),
            lose_marker_answers: AtomicI64::new(
                std::env::var("MIRRORGATE_TEST_LOSE_BARRIER_MARKER_ANSWERS")
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0),
            ),
            agent_failed: RwLock::new(HashMap::new()),
            agent_stop: std::sync::OnceLock::new(),
            overlaps_reported: Mutex::new(std::collections::HashSet::new()),
            refuse_mirrored_ids: config.failover.refuse_mirrored_producer_ids,
            clock_skew_margin_ms: i64::try_from(config.psm.clock_skew_margin_ms)
                .unwrap_or(i64::MAX / 4),
        });
        c.refresh_lookup();
        c
    }

    /// Mirror names, in config order.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    fn refresh_lookup(&self) {
        let slots = lock(&self.slots);
        let mut states: HashMap<String, Vec<Option<PartitionState>>> = HashMap::new();
        let mut barriers: HashMap<String, Vec<Option<Barrier>>> = HashMap::new();
        for s in slots.iter() {
            for p in &s.record.partitions {
                let i = p.partition.max(0) as usize;
                let v = states.entry(p.topic.clone()).or_default();
                if v.len() <= i {
                    v.resize(i + 1, None);
                }
                v[i] = Some(p.state);
                let b = barriers.entry(p.topic.clone()).or_default();
                if b.len() <= i {
                    b.resize(i + 1, None);
                }
                b[i] = if p.state == PartitionState::Stopped {
                    p.barrier_offset.map(|o| {
                        let id = p
                            .barrier_topic_id
                            .as_deref()
                            .and_then(|id| uuid::Uuid::parse_str(id).ok());
                        (o, id)
                    })
                } else {
                    None
                };
            }
        }
        *self.states.write().unwrap_or_else(|e| e.into_inner()) = states;
        *self.barriers.write().unwrap_or_else(|e| e.into_inner()) = barriers;
    }

    /// Persist `slot`; when that fails, put back `before` so that memory never runs ahead of
    /// what is recorded (the gateway acts only on recorded states).
    fn persist_or_revert(
        &self,
        slot: &mut MirrorSlot,
        before: MirrorRecord,
    ) -> Result<(), FailoverError> {
        let r = self.persist(slot);
        if r.is_err() {
            slot.record = before;
        }
        r
    }

    fn persist(&self, slot: &MirrorSlot) -> Result<(), FailoverError> {
        self.store
            .write(
                MIRRORS_AREA,
                &format!("{}.json", slot.record.name),
                &slot.record.encode(),
            )
            .map_err(|e| FailoverError::Persist {
                name: slot.record.name.clone(),
                reason: e.to_string(),
            })
    }

    /// Add the destination partitions of each mirror's topics that the records do not have yet
    /// (as MIRRORING, or — for a mirror that is failing or failed over — as read-only members of
    /// that failover, which completes them).
    pub fn sync_partitions(self: &Arc<Self>) {
        if !self.cluster.is_known() {
            return;
        }
        let topics = self.cluster.topic_names();
        for t in &topics {
            self.report_overlap(t);
        }
        let mut changed = false;
        let mut resume = Vec::new();
        {
            let mut slots = lock(&self.slots);
            for (i, slot) in slots.iter_mut().enumerate() {
                if slot.unreadable.is_some() {
                    continue;
                }
                for t in topics
                    .iter()
                    .filter(|t| self.router.mirror_index(t) == Some(i))
                {
                    let n = self.cluster.topic(t).map(|i| i.leaders.len()).unwrap_or(0);
                    for p in 0..n as i32 {
                        if slot.record.partition(t, p).is_some() {
                            continue;
                        }
                        let mut rec = PartitionRecord::new(t.clone(), p, now_ms());
                        if let Some(fid) = slot.record.failover_id.clone() {
                            // A partition added after the failover started joins it.
                            let _ = rec.begin_failover(fid, now_ms());
                            if !slot.running {
                                resume.push(slot.record.name.clone());
                            }
                        }
                        slot.record.partitions.push(rec);
                        changed = true;
                    }
                }
                if changed {
                    slot.record
                        .partitions
                        .sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
                    if let Err(e) = self.persist(slot) {
                        tracing::error!(error = %e, "cannot persist mirror partitions");
                    }
                }
            }
        }
        if changed {
            self.refresh_lookup();
        }
        for name in resume {
            self.spawn_failover(name, true);
        }
    }

    /// Warn once per topic (and count) when the regexes of two or more mirrors match it: it
    /// belongs to the first of them in config order.
    fn report_overlap(&self, topic: &str) {
        let claimants = self.router.claimants(topic);
        if claimants.len() < 2 || !lock(&self.overlaps_reported).insert(topic.to_string()) {
            return;
        }
        let names: Vec<&str> = claimants.iter().map(|i| self.mirror_name(*i)).collect();
        tracing::warn!(
            topic,
            mirrors = ?names,
            "topic matched by more than one mirror's regex: it belongs to mirror {} (the first in config order); make the patterns disjoint",
            names[0]
        );
        self.metrics.topic_overlaps.inc();
    }

    /// The state of a partition (FAILED when the built-in agent failed a MIRRORING partition).
    pub fn state_of(&self, topic: &str, partition: i32) -> Option<PartitionState> {
        let s = self
            .states
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(topic)
            .and_then(|v| v.get(partition.max(0) as usize).copied().flatten());
        if s == Some(PartitionState::Mirroring) && self.agent_error(topic, partition).is_some() {
            return Some(PartitionState::Failed);
        }
        s
    }

    /// Mark a partition FAILED by the built-in agent (`Some(reason)`) or clear that (`None`).
    pub fn set_agent_failed(&self, topic: &str, partition: i32, reason: Option<String>) {
        let mut m = self.agent_failed.write().unwrap_or_else(|e| e.into_inner());
        match reason {
            Some(r) => {
                m.entry(topic.to_string()).or_default().insert(partition, r);
            }
            None => {
                if let Some(t) = m.get_mut(topic) {
                    t.remove(&partition);
                }
            }
        }
    }

    fn agent_error(&self, topic: &str, partition: i32) -> Option<String> {
        let m = self.agent_failed.read().unwrap_or_else(|e| e.into_inner());
        m.get(topic).and_then(|t| t.get(&partition)).cloned()
    }

    /// Install the hook that stops the built-in agent at the start of a failover.
    pub fn set_agent_stop_hook(&self, hook: AgentStopHook) {
        let _ = self.agent_stop.set(hook);
    }

    fn mirror_name(&self, idx: usize) -> &str {
        self.names.get(idx).map(String::as_str).unwrap_or("?")
    }

    fn unreadable(&self, idx: usize) -> Option<String> {
        lock(&self.slots)
            .get(idx)
            .and_then(|s| s.unreadable.clone())
    }

    /// The decision for one partition of a produce on `listener`. For the mirror listener an
    /// admitted partition comes with an in-flight guard, held until the broker answered.
    pub fn admit(
        &self,
        listener: ListenerKind,
        topic: &str,
        partition: i32,
    ) -> Result<Option<InFlightGuard>, Refusal> {
        let Some(idx) = self.router.mirror_index(topic) else {
            return Ok(None);
        };
        let mirror = self.mirror_name(idx);
        if let Some(reason) = self.unreadable(idx) {
            self.metrics
                .rejected
                .with_label_values(&["state_unreadable"])
                .inc();
            return Err(Refusal {
                error_code: REJECT_ERROR_CODE,
                message: format!(
                    "mirrorgate: {topic}-{partition} belongs to mirror {mirror}, whose state cannot be read ({reason}); it stays read-only"
                ),
                reason: "state_unreadable",
            });
        }
        if let (ListenerKind::Client, Some(e)) = (listener, &self.screen_unreadable) {
            // Without the screening set a local producer could be handed a producer id that
            // mirrored traffic left in the brokers, and be falsely acknowledged.
            self.metrics
                .rejected
                .with_label_values(&["screen_unreadable"])
                .inc();
            return Err(Refusal {
                error_code: REJECT_ERROR_CODE,
                message: format!(
                    "mirrorgate: {topic}-{partition} belongs to mirror {mirror} and stays read-only: {e}"
                ),
                reason: "screen_unreadable",
            });
        }
        match listener {
            ListenerKind::Client => match self.state_of(topic, partition) {
                Some(PartitionState::Stopped) => Ok(None),
                state => {
                    let state = state.unwrap_or(PartitionState::Mirroring);
                    self.metrics
                        .rejected
                        .with_label_values(&["read_only"])
                        .inc();
                    Err(Refusal {
                        error_code: REJECT_ERROR_CODE,
                        message: format!(
                            "mirrorgate: {topic}-{partition} is read-only: it belongs to mirror {mirror}, which is {}",
                            state.as_str()
                        ),
                        reason: "read_only",
                    })
                }
            },
            ListenerKind::Mirror => {
                // Count first, then check: a failover that fences after the check waits for this.
                let writes = self.writes(topic, partition);
                writes.in_flight.fetch_add(1, Ordering::SeqCst);
                let guard = InFlightGuard {
                    writes,
                    answered: false,
                };
                let state = self.state_of(topic, partition).unwrap_or_else(|| {
                    if self.failover_started(idx) {
                        PartitionState::Stopping
                    } else {
                        PartitionState::Mirroring
                    }
                });
                if state == PartitionState::Mirroring {
                    Ok(Some(guard))
                } else {
                    self.metrics
                        .rejected
                        .with_label_values(&["mirror_fenced"])
                        .inc();
                    Err(Refusal {
                        error_code: REJECT_ERROR_CODE,
                        message: format!(
                            "mirrorgate: mirror produce to {topic}-{partition} is fenced: mirror {mirror} is {}",
                            state.as_str()
                        ),
                        reason: "mirror_fenced",
                    })
                }
            }
        }
    }

    /// The decision for an admin or transaction request `op` (e.g. `DeleteRecords`) on the
    /// client listener naming `topic` — one partition, or the whole topic when `partition` is
    /// `None`. Refused (POLICY_VIOLATION) while the partition, or any partition of the topic, is
    /// not STOPPED; counted in `mirrorgate_produce_rejected_total{reason="read_only_admin"}`.
    /// `None`: not a mirror topic, or allowed.
    pub fn refuse_admin(&self, op: &str, topic: &str, partition: Option<i32>) -> Option<Refusal> {
        let idx = self.router.mirror_index(topic)?;
        let mirror = self.mirror_name(idx);
        let what = match partition {
            Some(p) => format!("{topic}-{p}"),
            None => format!("topic {topic}"),
        };
        if let Some(reason) = self.unreadable(idx) {
            self.metrics
                .rejected
                .with_label_values(&["state_unreadable"])
                .inc();
            return Some(Refusal {
                error_code: REJECT_ERROR_CODE,
                message: format!(
                    "mirrorgate: {op} on {what} is refused: it belongs to mirror {mirror}, whose state cannot be read ({reason}); it stays read-only"
                ),
                reason: "state_unreadable",
            });
        }
        let state = match partition {
            Some(p) => self.state_of(topic, p).unwrap_or(PartitionState::Mirroring),
            None => self.topic_state(topic),
        };
        if state == PartitionState::Stopped {
            return None;
        }
        self.metrics
            .rejected
            .with_label_values(&["read_only_admin"])
            .inc();
        Some(Refusal {
            error_code: REJECT_ERROR_CODE,
            message: format!(
                "mirrorgate: {op} on {what} is refused: it belongs to mirror {mirror}, which is {}; mirror topics are read-only on the client listener until failover",
                state.as_str()
            ),
            reason: "read_only_admin",
        })
    }

    /// [`Self::refuse_admin`] for a request on every partition of the cluster: refused when any
    /// mirror topic is not STOPPED in full.
    pub fn refuse_admin_everywhere(&self, op: &str) -> Option<Refusal> {
        let mut topics = self.cluster.topic_names();
        topics.extend(
            self.states
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .keys()
                .cloned(),
        );
        topics.sort();
        topics.dedup();
        topics.iter().find_map(|t| self.refuse_admin(op, t, None))
    }

    /// The state of a whole topic for admin requests: STOPPED only when every partition known
    /// (in the cluster's metadata or in the records) is; otherwise the state of the first
    /// partition that is not (a partition without a record counts as MIRRORING, as does a topic
    /// without any known partition).
    fn topic_state(&self, topic: &str) -> PartitionState {
        let in_cluster = self
            .cluster
            .topic(topic)
            .map(|t| t.leaders.len())
            .unwrap_or(0);
        let recorded = self
            .states
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(topic)
            .map(Vec::len)
            .unwrap_or(0);
        let n = in_cluster.max(recorded);
        if n == 0 {
            return PartitionState::Mirroring;
        }
        (0..n as i32)
            .map(|p| self.state_of(topic, p).unwrap_or(PartitionState::Mirroring))
            .find(|s| *s != PartitionState::Stopped)
            .unwrap_or(PartitionState::Stopped)
    }

    fn failover_started(&self, idx: usize) -> bool {
        lock(&self.slots)
            .get(idx)
            .is_some_and(|s| s.record.failover_id.is_some())
    }

    fn writes(&self, topic: &str, partition: i32) -> Arc<PartitionWrites> {
        if let Some(c) = self
            .in_flight
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(topic.to_string(), partition))
        {
            return c.clone();
        }
        self.in_flight
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .entry((topic.to_string(), partition))
            .or_insert_with(|| {
                Arc::new(PartitionWrites {
                    unknown_total: self.metrics.unknown_writes.clone(),
                    in_flight: AtomicI64::new(0),
                    unknown: AtomicU64::new(0),
                    last_unknown_ms: AtomicI64::new(0),
                })
            })
            .clone()
    }

    /// The barrier offset of a stopped partition (duplicate-ack guard).
    ///
    /// A barrier recorded under another topic id than the topic has now (the topic was deleted
    /// and created again after the failover) guards nothing: its offset means nothing in the
    /// new log, and acknowledgements below it are genuine (review F6).
    pub fn barrier_offset(&self, topic: &str, partition: i32) -> Option<i64> {
        let (offset, id) = self
            .barriers
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(topic)
            .and_then(|v| v.get(partition.max(0) as usize).copied().flatten())?;
        match (id, self.cluster.topic_id(topic)) {
            (Some(recorded), Some(now)) if now != recorded => None,
            _ if self.barrier_missing(topic, partition).is_some() => None,
            _ => Some(offset),
        }
    }

    /// Why a STOPPED partition's recorded barrier no longer guards: the log does not hold it
    /// (see [`super::barrier_check`]).
    pub fn barrier_missing(&self, topic: &str, partition: i32) -> Option<String> {
        let m = self
            .barrier_missing
            .read()
            .unwrap_or_else(|e| e.into_inner());
        if m.is_empty() {
            return None;
        }
        m.get(&(topic.to_string(), partition)).cloned()
    }

    /// The start-up check of the barriers against the logs has run.
    pub fn set_barriers_checked(&self) {
        self.barriers_checked.store(true, Ordering::SeqCst);
    }

    /// Record that the log of `topic`-`partition` no longer holds its barrier.
    pub fn set_barrier_missing(&self, topic: &str, partition: i32, reason: String) {
        self.barrier_missing
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert((topic.to_string(), partition), reason);
    }

    /// The barriers of STOPPED partitions, as recorded (those of a topic created again since,
    /// under another id, left out: they already guard nothing).
    pub fn recorded_barriers(&self) -> Vec<RecordedBarrier> {
        let slots = lock(&self.slots);
        let mut v = Vec::new();
        for s in slots.iter() {
            for p in &s.record.partitions {
                let (PartitionState::Stopped, Some(offset)) = (p.state, p.barrier_offset) else {
                    continue;
                };
                let recorded_id = p
                    .barrier_topic_id
                    .as_deref()
                    .and_then(|id| uuid::Uuid::parse_str(id).ok());
                if matches!((recorded_id, self.cluster.topic_id(&p.topic)), (Some(r), Some(n)) if r != n)
                {
                    continue;
                }
                v.push(RecordedBarrier {
                    topic: p.topic.clone(),
                    partition: p.partition,
                    offset,
                    failover_id: p.failover_id.clone().unwrap_or_default(),
                    producer_id: match p.barrier_kind {
                        Some(BarrierKind::Control) => p.barrier_producer.map(|b| b.producer_id),
                        _ => None,
                    },
                });
            }
        }
        v
    }

    /// Whether any partition has a barrier (fast check before looking at responses).
    pub fn has_barriers(&self) -> bool {
        self.barriers
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .any(|v| v.iter().any(Option::is_some))
    }

    /// Count a local acknowledgement turned into an error.
    /// An acks=0 mirror write to a mirror partition was refused (the connection is closed).
    pub fn count_acks_zero_refused(&self) {
        self.metrics
            .rejected
            .with_label_values(&["mirror_acks_zero"])
            .inc();
    }

    pub fn count_duplicate_ack(&self) {
        self.metrics.duplicate_ack_guard.inc();
    }

    /// Count barriers seen of `kind` for the mirror owning `topic`.
    pub fn count_barriers_seen(&self, topic: &str, kind: &str, n: u64) {
        let mirror = self
            .router
            .mirror_index(topic)
            .map(|i| self.mirror_name(i).to_string())
            .unwrap_or_default();
        self.metrics
            .barriers_seen
            .with_label_values(&[&mirror, kind])
            .inc_by(n);
    }

    /// Whether `topic` belongs to a mirror.
    pub fn is_mirror_topic(&self, topic: &str) -> bool {
        self.router.mirror_index(topic).is_some()
    }

    /// The screening entry of a producer id, if mirrored traffic left it in the brokers and it
    /// has not certainly expired there.
    pub fn screened(&self, producer_id: i64) -> Option<ScreenEntry> {
        let e = lock(&self.screen).get(&producer_id).copied()?;
        let (expiration, interval) = self.expiry_settings();
        (now_ms() <= e.protected_until(expiration, interval)).then_some(e)
    }

    /// A local write of `producer_id` at `epoch` that collides with the producer state mirrored
    /// traffic left in the brokers (review F12): the id is screened and the epoch is not above
    /// the mirrored one. Counted as `rejected{reason="mirrored_producer_id"}`.
    pub fn mirrored_producer_collision(&self, producer_id: i64, epoch: i16) -> Option<ScreenEntry> {
        if !self.refuse_mirrored_ids {
            return None;
        }
        let e = self.screened(producer_id)?;
        if epoch > e.max_epoch {
            return None;
        }
        self.metrics
            .rejected
            .with_label_values(&["mirrored_producer_id"])
            .inc();
        Some(e)
    }

    /// Whether any producer id is screened.
    pub fn screening_active(&self) -> bool {
        !lock(&self.screen).is_empty()
    }

    /// Count a screened InitProducerId answer.
    pub fn count_screened(&self) {
        self.metrics.pid_screened.inc();
    }

    /// Drop screening entries the brokers have certainly expired.
    pub fn expire_screen(&self) {
        if self.screen_unreadable.is_some() {
            return;
        }
        let (expiration, interval) = self.expiry_settings();
        let now = now_ms();
        let mut s = lock(&self.screen);
        let before = s.len();
        s.retain(|_, e| now <= e.protected_until(expiration, interval));
        if s.len() != before {
            // The file keeps the expired entries until a write succeeds: screening more is safe.
            if let Err(e) = self.persist_screen(&s) {
                tracing::warn!(error = %e, "cannot persist the expired PID screening entries; retried");
            }
        }
    }

    /// The brokers' `producer.id.expiration.ms` and expiry check interval as the PSM knows them,
    /// the interval widened by `psm.clock_skew_margin_ms`: the brokers expire by their clock,
    /// the gateway compares with its own (review F11d). Without a PSM: unbounded.
    fn expiry_settings(&self) -> (i64, i64) {
        self.psm
            .as_ref()
            .map(|p| {
                (
                    p.expiration_ms(),
                    p.check_interval_ms()
                        .saturating_add(self.clock_skew_margin_ms),
                )
            })
            .unwrap_or((i64::MAX / 4, 0))
    }

    /// Until when producers of failed-over topics must stay behind the gateway (ms since the
    /// epoch): the latest time any screened (mirrored) producer id can still be live in the
    /// brokers. `None` while nothing is screened. With an unreadable screening set: unknown,
    /// reported as `Some(i64::MAX)`.
    pub fn protection_needed_until_ms(&self) -> Option<i64> {
        if self.screen_unreadable.is_some() {
            return Some(i64::MAX);
        }
        let (expiration, interval) = self.expiry_settings();
        lock(&self.screen)
            .values()
            .map(|e| e.protected_until(expiration, interval))
            .max()
    }

    /// Write the screening set `s`. The caller holds the set's lock across this call, so writes
    /// land in the order of the changes (one writer at a time). Refused when the set could not be
    /// read at start: rewriting it would drop the entries it held.
    fn persist_screen(&self, s: &HashMap<i64, ScreenEntry>) -> Result<(), ScreenError> {
        if let Some(e) = &self.screen_unreadable {
            return Err(e.clone());
        }
        let bytes = serde_json::to_vec(s).map_err(|e| ScreenError::Persist(e.to_string()))?;
        self.store.write(SCREEN_AREA, SCREEN_FILE, &bytes)?;
        Ok(())
    }

    /// Add every producer the PSM holds for `parts` to the screening set and persist it (the
    /// failover's step before BARRIER_PERSISTED). Idempotent.
    /// `own`: the producer ids of control barriers, never screened (see [`Self::clear_psm`]).
    fn screen_producers(&self, parts: &[(String, i32)], own: &[i64]) -> Result<(), ScreenError> {
        let mut found: Vec<(i64, ScreenEntry)> = Vec::new();
        if let Some(psm) = &self.psm {
            for (t, p) in parts {
                if let Some(slot) = psm.existing(t, *p) {
                    let s = slot.lock().unwrap_or_else(|e| e.into_inner());
                    found.extend(
                        s.psm()
                            .iter()
                            .filter(|e| !own.contains(&e.producer_id()))
                            .map(|e| {
                                (
                                    e.producer_id(),
                                    ScreenEntry {
                                        max_epoch: e.epoch(),
                                        last_timestamp: e.last_timestamp(),
                                        added_ms: 0,
                                    },
                                )
                            }),
                    );
                }
            }
        }
        let mut screen = lock(&self.screen);
        merge_screen(&mut screen, found);
        self.persist_screen(&screen)
    }

    /// Whether the PSM of a partition is rebuilt: a failover reads a partition's producers for
    /// the screening set only then.
    fn psm_ready(&self, topic: &str, partition: i32) -> bool {
        let Some(psm) = &self.psm else { return true };
        if !psm.tracks(topic) {
            return true;
        }
        match psm.existing(topic, partition) {
            Some(s) => s.lock().unwrap_or_else(|e| e.into_inner()).is_ready(),
            None => psm.is_initialized(),
        }
    }

    /// Keep the barriers of the partitions whose PSM is rebuilt ([`Self::psm_ready`]); the
    /// others wait at DRAINED (the next pass finds their barrier in the log).
    fn with_psm_ready<V>(
        &self,
        name: &str,
        found: HashMap<(String, i32), V>,
    ) -> HashMap<(String, i32), V> {
        let (ready, waiting): (HashMap<_, _>, HashMap<_, _>) = found
            .into_iter()
            .partition(|((t, p), _)| self.psm_ready(t, *p));
        if !waiting.is_empty() {
            tracing::info!(
                mirror = name,
                partitions = waiting.len(),
                "waiting for the producer state of partitions to be rebuilt before recording their barrier; they stay read-only"
            );
        }
        ready
    }

    /// The outcome of the last producer-id allocator advance of mirror `name` (this process).
    pub fn pid_allocator_outcome(&self, name: &str) -> Option<super::pid_allocator::Outcome> {
        self.pid_allocator.last_outcome(name)
    }

    /// Records of every mirror (for the admin API).
    pub fn records(&self) -> Vec<(MirrorRecord, Option<String>)> {
        let mut v: Vec<(MirrorRecord, Option<String>)> = lock(&self.slots)
            .iter()
            .map(|s| (s.record.clone(), s.unreadable.clone()))
            .collect();
        for p in v.iter_mut().flat_map(|(r, _)| r.partitions.iter_mut()) {
            if p.state == PartitionState::Mirroring {
                if let Some(e) = self.agent_error(&p.topic, p.partition) {
                    (p.state, p.last_error) = (PartitionState::Failed, Some(e));
                }
            }
        }
        v
    }

    /// Partition counts per (mirror, state), for the metrics collector.
    pub fn state_counts(&self) -> Vec<(String, &'static str, usize)> {
        let mut out = Vec::new();
        for (record, _) in self.records() {
            for st in PartitionState::ALL {
                let n = record.partitions.iter().filter(|p| p.state == st).count();
                out.push((record.name.clone(), st.as_str(), n));
            }
        }
        out
    }

    /// Readiness problems: unreadable mirror state, an unreadable PID screening set.
    pub fn problems(&self) -> Vec<String> {
        let mut v: Vec<String> = lock(&self.slots)
            .iter()
            .filter_map(|s| {
                s.unreadable
                    .as_ref()
                    .map(|r| format!("mirror {} state unreadable: {r}", s.record.name))
            })
            .collect();
        v.extend(self.screen_unreadable.as_ref().map(|e| e.to_string()));
        if !self.barriers_checked.load(Ordering::SeqCst) && !self.recorded_barriers().is_empty() {
            v.push("failover barriers not yet checked against the partitions' logs".to_string());
        }
        v
    }

    /// Start (or join) the failover of mirror `name`.
    pub fn failover(self: &Arc<Self>, name: &str) -> Result<FailoverStarted, FailoverError> {
        if let Some(e) = &self.screen_unreadable {
            return Err(FailoverError::ScreenUnreadable(e.clone()));
        }
        self.sync_partitions();
        let mut slots = lock(&self.slots);
        let slot = usable_slot(&mut slots, name)?;
        if let Some(fid) = slot.record.failover_id.clone() {
            if slot.record.all_stopped() && !slot.record.partitions.is_empty() {
                return Err(FailoverError::AlreadyStopped {
                    name: name.to_string(),
                    failover_id: fid,
                });
            }
            let already_running = slot.running;
            drop(slots);
            if !already_running {
                self.spawn_failover(name.to_string(), true);
            }
            return Ok(FailoverStarted {
                mirror: name.to_string(),
                failover_id: fid,
                already_running: true,
            });
        }
        if slot.record.partitions.is_empty() {
            return Err(FailoverError::NoPartitions {
                name: name.to_string(),
            });
        }
        let fid = format!("{}-{}", name, uuid::Uuid::new_v4().simple());
        let now = now_ms();
        let before = slot.record.clone();
        slot.record.failover_id = Some(fid.clone());
        slot.record.started_ms = Some(now);
        slot.record.completed_ms = None;
        for p in slot.record.partitions.iter_mut() {
            match p.state {
                PartitionState::Mirroring | PartitionState::Paused => {
                    let _ = p.begin_failover(fid.clone(), now);
                }
                PartitionState::Failed => {
                    let _ = p.retry(now);
                }
                _ => {}
            }
        }
        self.persist_or_revert(slot, before)?;
        drop(slots);
        self.refresh_lookup();
        crash_point("fenced_persisted");
        self.spawn_failover(name.to_string(), false);
        Ok(FailoverStarted {
            mirror: name.to_string(),
            failover_id: fid,
            already_running: false,
        })
    }

    /// MIRRORING → PAUSED (`pause`) or PAUSED → MIRRORING for every partition of a mirror that
    /// can make the move. Returns how many partitions moved.
    pub fn set_paused(&self, name: &str, paused: bool) -> Result<usize, FailoverError> {
        let mut slots = lock(&self.slots);
        let slot = usable_slot(&mut slots, name)?;
        let now = now_ms();
        let before = slot.record.clone();
        let mut moved = 0;
        for p in slot.record.partitions.iter_mut() {
            let r = if paused { p.pause(now) } else { p.resume(now) };
            if r.is_ok() {
                moved += 1;
            }
        }
        self.persist_or_revert(slot, before)?;
        drop(slots);
        self.refresh_lookup();
        Ok(moved)
    }

    /// Failback: STOPPED partitions of mirror `name` back to MIRRORING. Only for a mirror with a
    /// `source` (the built-in agent): before appending anything it verifies, batch for batch, that
    /// the destination partition is empty or aligned with the source, and otherwise marks the
    /// partition FAILED with what to do. Returns how many partitions moved.
    pub fn start_mirroring(&self, name: &str) -> Result<usize, StartError> {
        if !self.with_source.iter().any(|n| n == name) {
            if !self.names.iter().any(|n| n == name) {
                return Err(StartError::Failover(FailoverError::UnknownMirror(
                    name.to_string(),
                )));
            }
            return Err(StartError::NoAgent(name.to_string()));
        }
        let mut slots = lock(&self.slots);
        let slot = usable_slot(&mut slots, name).map_err(StartError::Failover)?;
        if slot.running
            || slot
                .record
                .partitions
                .iter()
                .any(|p| matches!(p.state, PartitionState::Stopping | PartitionState::Failed))
        {
            return Err(StartError::FailoverInProgress(name.to_string()));
        }
        let now = now_ms();
        let before = slot.record.clone();
        let mut moved = 0;
        for p in slot
            .record
            .partitions
            .iter_mut()
            .filter(|p| p.state == PartitionState::Stopped)
        {
            if p.start_mirroring(true, now).is_ok() {
                moved += 1;
            }
        }
        if moved == 0 {
            return Err(StartError::NothingStopped(name.to_string()));
        }
        slot.record.failover_id = None;
        slot.record.started_ms = None;
        slot.record.completed_ms = None;
        self.persist_or_revert(slot, before)
            .map_err(StartError::Failover)?;
        drop(slots);
        self.refresh_lookup();
        Ok(moved)
    }

    /// Resume failovers that were in progress when the gateway stopped.
    pub fn resume_all(self: &Arc<Self>) {
        let names: Vec<String> = lock(&self.slots)
            .iter()
            .filter(|s| {
                s.unreadable.is_none()
                    && s.record.partitions.iter().any(|p| {
                        matches!(p.state, PartitionState::Stopping | PartitionState::Failed)
                    })
            })
            .map(|s| s.record.name.clone())
            .collect();
        for n in names {
            tracing::info!(mirror = %n, "resuming the failover in progress");
            self.spawn_failover(n, true);
        }
    }

    fn spawn_failover(self: &Arc<Self>, name: String, resumed: bool) {
        {
            let mut slots = lock(&self.slots);
            let Some(slot) = slots.iter_mut().find(|s| s.record.name == name) else {
                return;
            };
            if slot.running {
                return;
            }
            slot.running = true;
        }
        let this = self.clone();
        tokio::spawn(async move {
            let span = tracing::info_span!("failover", mirror = %name);
            let _e = span.enter();
            drop(_e);
            let started = std::time::Instant::now();
            let mut backoff = Duration::from_millis(200);
            let mut attempt = 0u32;
            loop {
                // A retry looks for barriers an earlier attempt wrote before writing new ones.
                let done = this.run_failover(&name, resumed || attempt > 0).await;
                attempt += 1;
                if done {
                    break;
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(10));
                // FAILED partitions are retried from their persisted step.
                this.retry_failed(&name);
            }
            this.metrics
                .failover_duration
                .observe(started.elapsed().as_secs_f64());
            if let Some(s) = lock(&this.slots).iter_mut().find(|s| s.record.name == name) {
                s.running = false;
            }
        });
    }

    fn retry_failed(&self, name: &str) {
        let mut slots = lock(&self.slots);
        if let Some(slot) = slots.iter_mut().find(|s| s.record.name == name) {
            let now = now_ms();
            for p in slot
                .record
                .partitions
                .iter_mut()
                .filter(|p| p.state == PartitionState::Failed)
            {
                let _ = p.retry(now);
            }
            let _ = self.persist(slot);
        }
        drop(slots);
        self.refresh_lookup();
    }

    /// Apply `f` to the partitions of mirror `name` in STOPPING, then persist. When the state
    /// cannot be persisted (e.g. a full disk) nothing changes but `last_error`, so the gateway
    /// never acts on a step it has not recorded; the failover is retried.
    fn update(
        &self,
        name: &str,
        mut f: impl FnMut(&mut PartitionRecord),
    ) -> Result<(), FailoverError> {
        let mut slots = lock(&self.slots);
        let slot = slots
            .iter_mut()
            .find(|s| s.record.name == name)
            .ok_or_else(|| FailoverError::UnknownMirror(name.to_string()))?;
        let before = slot.record.clone();
        for p in slot
            .record
            .partitions
            .iter_mut()
            .filter(|p| p.state == PartitionState::Stopping)
        {
            f(p);
        }
        if slot.record.all_stopped() && slot.record.completed_ms.is_none() {
            slot.record.completed_ms = Some(now_ms());
        }
        let r = self.persist_or_revert(slot, before);
        if let Err(e) = &r {
            for p in slot
                .record
                .partitions
                .iter_mut()
                .filter(|p| p.state == PartitionState::Stopping)
            {
                p.last_error = Some(format!("{e}; the failover is retried"));
            }
            tracing::error!(mirror = name, error = %e, "cannot record the failover step; partitions stay read-only");
        }
        drop(slots);
        self.refresh_lookup();
        r
    }

    fn stopping(&self, name: &str) -> Vec<PartitionRecord> {
        lock(&self.slots)
            .iter()
            .find(|s| s.record.name == name)
            .map(|s| {
                s.record
                    .partitions
                    .iter()
                    .filter(|p| p.state == PartitionState::Stopping)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    fn failover_id(&self, name: &str) -> Option<String> {
        lock(&self.slots)
            .iter()
            .find(|s| s.record.name == name)
            .and_then(|s| s.record.failover_id.clone())
    }

    fn fail_partitions(&self, name: &str, which: &[(String, i32)], error: &str) {
        let now = now_ms();
        let _ = self.update(name, |p| {
            if which
                .iter()
                .any(|(t, i)| *t == p.topic && *i == p.partition)
            {
                let _ = p.fail(error.to_string(), now);
            }
        });
        tracing::warn!(
            mirror = name,
            partitions = which.len(),
            error,
            "failover step failed; partitions are FAILED and will be retried"
        );
    }

    /// One pass over the STOPPING partitions of `name`. Returns true when nothing is left to do.
    async fn run_failover(self: &Arc<Self>, name: &str, resumed: bool) -> bool {
        let Some(fid) = self.failover_id(name) else {
            return true;
        };
        // 0. Stop the built-in agent and wait (bounded) for its appends in flight.
        if let Some(hook) = self.agent_stop.get() {
            hook(name).await;
        }
        let now = now_ms();
        // 1. Fenced: the read-only checks already refuse mirror produce (state STOPPING).
        if self
            .update(name, |p| {
                if p.step.is_none() {
                    let _ = p.advance(FailoverStep::Fenced, now);
                }
            })
            .is_err()
        {
            return false;
        }
        crash_point("fenced");
        if !self.hold_after_fence.is_zero() {
            tokio::time::sleep(self.hold_after_fence).await;
        }
        if let Some(path) = &self.hold_after_fence_until {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
            while !tokio::fs::try_exists(path).await.unwrap_or(false)
                && tokio::time::Instant::now() < deadline
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        // 2. Drained: wait until mirror produce in flight on these partitions is answered.
        let parts: Vec<(String, i32)> = self
            .stopping(name)
            .iter()
            .filter(|p| p.step == Some(FailoverStep::Fenced))
            .map(|p| (p.topic.clone(), p.partition))
            .collect();
        let deadline = tokio::time::Instant::now() + self.drain_timeout;
        loop {
            let busy: Vec<(String, i32)> = parts
                .iter()
                .filter(|(t, p)| self.writes(t, *p).in_flight.load(Ordering::SeqCst) > 0)
                .cloned()
                .collect();
            if busy.is_empty() {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                self.fail_partitions(
                    name,
                    &busy,
                    "mirror produce in flight was not answered within 30 s",
                );
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let now = now_ms();
        if self
            .update(name, |p| {
                if p.step == Some(FailoverStep::Fenced) {
                    let _ = p.advance(FailoverStep::Drained, now);
                }
            })
            .is_err()
        {
            return false;
        }
        // 3. Barrier: write one per partition (after checking the log tail when resuming).
        let need: Vec<PartitionRecord> = self
            .stopping(name)
            .into_iter()
            .filter(|p| p.step == Some(FailoverStep::Drained))
            .collect();
        if !need.is_empty() {
            let mut found: Found = HashMap::new();
            if resumed {
                for p in &need {
                    let pid = p.barrier_producer.map(|b| b.producer_id);
                    if let Some(b) = self.find_barrier(&p.topic, p.partition, &fid, pid).await {
                        found.insert((p.topic.clone(), p.partition), b);
                    }
                }
            }
            let to_write: Vec<&PartitionRecord> = need
                .iter()
                .filter(|p| !found.contains_key(&(p.topic.clone(), p.partition)))
                .collect();
            // The control barrier's producer id is recorded before any marker is written with
            // it: the marker carries no payload, and a resumed failover finds it only by that id.
            let mut to_write = to_write;
            let producer = if to_write.is_empty() || self.barrier_mode == BarrierMode::Data {
                None
            } else {
                match self.barrier_producer(name, &to_write).await {
                    Ok((p, unreachable, why)) => {
                        // Partitions whose leader could not be asked for its producers (e.g.
                        // it is down) fail alone and are retried; the others go on.
                        if !unreachable.is_empty() {
                            self.fail_partitions(name, &unreachable, &why);
                            to_write
                                .retain(|x| !unreachable.contains(&(x.topic.clone(), x.partition)));
                        }
                        Some(p)
                    }
                    Err(e) if e.fallback && self.barrier_mode == BarrierMode::Auto => {
                        tracing::warn!(
                            mirror = name, error = %e.reason,
                            "no producer id for a control-batch barrier: writing the data barrier instead (failover.barrier: auto)"
                        );
                        None
                    }
                    Err(e) => {
                        let keys: Vec<(String, i32)> = to_write
                            .iter()
                            .map(|p| (p.topic.clone(), p.partition))
                            .collect();
                        self.fail_partitions(name, &keys, &e.reason);
                        return false;
                    }
                }
            };
            let to_write: Vec<PartitionRecord> = to_write.into_iter().cloned().collect();
            let to_write: Vec<&PartitionRecord> = to_write.iter().collect();
            // Partitions whose barrier could not be written (e.g. their leader is down) fail and
            // are retried; the others go on, so one dead broker holds up only its partitions.
            let (written, failed, reason) =
                self.write_barriers(name, &fid, producer, &to_write).await;
            found.extend(written);
            if !failed.is_empty() {
                self.fail_partitions(name, &failed, &reason);
            }
            crash_point("barrier_written");
            // Mirror writes whose answer never came may have landed after the barrier.
            let (found, unsettled, why) = self
                .settle_unknown_outcomes(name, &fid, producer, found, resumed)
                .await;
            if !unsettled.is_empty() {
                self.fail_partitions(name, &unsettled, &why);
            }
            // Their producers are read from the PSM: only once it is rebuilt (after a restart, or
            // a rebuild triggered by an unknown outcome of mirror produce).
            let found = self.with_psm_ready(name, found);
            // The screening entries are durable before BARRIER_PERSISTED is: once it is recorded,
            // a restart rebuilds the PSM from the barrier on and could not find them again.
            let keys: Vec<(String, i32)> = found.keys().cloned().collect();
            if !keys.is_empty() {
                let own: Vec<i64> = found.values().filter_map(|b| b.producer_id).collect();
                if let Err(e) = self.screen_producers(&keys, &own) {
                    self.fail_partitions(name, &keys, &e.to_string());
                    return false;
                }
            }
            crash_point("screen_persisted");
            let now = now_ms();
            let mut written = 0u64;
            let last_mirrored: HashMap<(String, i32), i64> = found
                .iter()
                .map(|(k, b)| (k.clone(), self.last_mirrored_offset(&k.0, k.1, b.offset)))
                .collect();
            let r = self.update(name, |p| {
                let key = (p.topic.clone(), p.partition);
                if let Some(b) = found.get(&key) {
                    let _ = p.advance(FailoverStep::BarrierWritten { offset: b.offset }, now);
                    let _ = p.advance(FailoverStep::BarrierPersisted { offset: b.offset }, now);
                    p.barrier_topic_id = self.cluster.topic_id(&p.topic).map(|id| id.to_string());
                    p.barrier_kind = Some(b.kind);
                    if b.kind == BarrierKind::Data {
                        p.barrier_producer = None;
                    }
                    p.last_mirrored_offset = last_mirrored.get(&key).copied();
                    written += 1;
                }
            });
            if r.is_err() {
                return false;
            }
            for ((t, p), b) in &found {
                tracing::info!(
                    mirror = name, failover_id = %fid, topic = %t, partition = *p,
                    barrier_offset = b.offset, kind = b.kind.as_str(),
                    producer_id = ?b.producer_id,
                    last_mirrored_offset = last_mirrored.get(&(t.clone(), *p)).copied().unwrap_or(-1),
                    "barrier recorded"
                );
            }
            self.metrics
                .barriers_written
                .with_label_values(&[name])
                .inc_by(written);
            crash_point("barrier_persisted");
        }
        // 4. Clear the PSM at the barrier (keeping what PID screening needs), then STOPPED.
        let to_clear: Vec<PartitionRecord> = self
            .stopping(name)
            .into_iter()
            .filter(|p| matches!(p.step, Some(FailoverStep::BarrierPersisted { .. })))
            .collect();
        let keys: Vec<(String, i32)> = to_clear
            .iter()
            .map(|p| (p.topic.clone(), p.partition))
            .collect();
        let mut expired: HashMap<(String, i32), u32> = HashMap::new();
        for p in &to_clear {
            let own = p.barrier_producer.map(|b| b.producer_id);
            let n = self.clear_psm(&p.topic, p.partition, p.barrier_offset.unwrap_or(-1), own);
            expired.insert((p.topic.clone(), p.partition), n as u32);
        }
        if !to_clear.is_empty() {
            let screen = lock(&self.screen);
            if let Err(e) = self.persist_screen(&screen) {
                drop(screen);
                self.fail_partitions(name, &keys, &e.to_string());
                return false;
            }
        }
        // The screening set is complete and durable, the partitions still read-only: advance every
        // destination broker's producer-id allocator past the screened ids (review F15), so new
        // producers are not handed them. Bounded; never fails the failover (screening is the
        // fallback); idempotent on resume (the target is the highest screened id).
        if !to_clear.is_empty() {
            let screened: Vec<i64> = lock(&self.screen).keys().copied().collect();
            self.pid_allocator.advance_past(name, screened).await;
        }
        let now = now_ms();
        let r = self.update(name, |p| {
            if let Some(n) = expired.get(&(p.topic.clone(), p.partition)) {
                p.producers_expired = *n;
                let _ = p.advance(FailoverStep::PsmCleared, now);
            }
            if p.step == Some(FailoverStep::PsmCleared) {
                let _ = p.complete(now);
            }
        });
        if r.is_err() {
            return false;
        }
        crash_point("psm_cleared");
        let left = self.stopping(name).len();
        let failed = lock(&self.slots)
            .iter()
            .find(|s| s.record.name == name)
            .map(|s| {
                s.record
                    .partitions
                    .iter()
                    .filter(|p| p.state == PartitionState::Failed)
                    .count()
            })
            .unwrap_or(0);
        if left == 0 && failed == 0 {
            tracing::info!(mirror = name, failover_id = %fid, "failover complete: every partition STOPPED with a durable barrier");
            true
        } else {
            false
        }
    }

    /// Clear the PSM of a partition at its barrier, adding its producers to the screening set.
    /// A control barrier's own producer id (`own`: a PSM rebuilt from the log after the barrier
    /// holds it, as the broker does) is neither screened nor counted: the gateway never writes
    /// data with it and no broker hands it out again.
    fn clear_psm(&self, topic: &str, partition: i32, barrier: i64, own: Option<i64>) -> usize {
        let Some(psm) = &self.psm else { return 0 };
        psm.clear_at_barrier(topic, partition, barrier, own, |cleared| {
            let found = cleared
                .into_iter()
                .map(|c| {
                    let entry = ScreenEntry {
                        max_epoch: c.epoch,
                        last_timestamp: c.last_timestamp,
                        added_ms: 0,
                    };
                    (c.producer_id, entry)
                })
                .collect();
            merge_screen(&mut lock(&self.screen), found);
        })
    }

    /// `parts` grouped by the address of their leader, and those without a known leader.
    #[allow(clippy::type_complexity)]
    fn by_leader<'a>(
        &self,
        parts: &[&'a PartitionRecord],
    ) -> (
        HashMap<String, Vec<&'a PartitionRecord>>,
        Vec<(String, i32)>,
    ) {
        let mut by_leader: HashMap<String, Vec<&'a PartitionRecord>> = HashMap::new();
        let mut leaderless = Vec::new();
        for p in parts {
            match self.leader_addr(&p.topic, p.partition) {
                Some(a) => by_leader.entry(a).or_default().push(*p),
                None => leaderless.push((p.topic.clone(), p.partition)),
            }
        }
        (by_leader, leaderless)
    }

    fn leader_addr(&self, topic: &str, partition: i32) -> Option<String> {
        self.cluster
            .topic(topic)
            .and_then(|t| t.leaders.get(partition as usize).copied())
            .filter(|l| *l >= 0)
            .and_then(|l| self.cluster.broker_addr(l))
    }

    /// Look for this failover's barrier in the log tail of a partition (the last one, when a
    /// late write made the failover write more than one): a data barrier carrying the failover
    /// id, or a control batch (ABORT marker) of `producer_id`, the control barrier's recorded
    /// producer id.
    async fn find_barrier(
        &self,
        topic: &str,
        partition: i32,
        fid: &str,
        producer_id: Option<i64>,
    ) -> Option<FoundBarrier> {
        let addr = self.leader_addr(topic, partition)?;
        let mut c = self.cluster.client(&addr, self.timeout).await.ok()?;
        let end = c
            .list_offset(topic, partition, crate::client::LATEST)
            .await
            .ok()?;
        let start = c
            .list_offset(topic, partition, crate::client::EARLIEST)
            .await
            .ok()?;
        // The barrier follows the last mirrored batch; look at the last few batches.
        let own = OwnBarrier {
            failover_id: fid,
            producer_id,
        };
        let tail = read_batches(&mut c, topic, partition, (end - 64).max(start), &own)
            .await
            .ok()?;
        tail.iter().rev().find_map(|b| {
            b.own_barrier.map(|kind| FoundBarrier {
                offset: b.base_offset,
                kind,
                producer_id: (kind == BarrierKind::Control).then_some(b.producer_id),
            })
        })
    }

    /// Mirror writes of unknown outcome (review F1): for each partition of `found` (its barrier
    /// offset) that had such writes — or every one, when the failover resumed after a restart
    /// (the writes of the process before are unknown) — wait until
    /// `limits.unknown_outcome_settle_ms` has passed since the last of them, re-read the log
    /// after the barrier, and write a new barrier after anything that landed there, screening
    /// its producer ids. Returns the barriers (moved where new ones were written) and the
    /// partitions that could not be checked, with why.
    async fn settle_unknown_outcomes(
        &self,
        name: &str,
        fid: &str,
        producer: Option<BarrierProducer>,
        mut found: Found,
        resumed: bool,
    ) -> (Found, Vec<(String, i32)>, String) {
        let mut check: Vec<((String, i32), i64)> = Vec::new();
        for key in found.keys() {
            let w = self.writes(&key.0, key.1);
            let last = w.last_unknown_ms.load(Ordering::SeqCst);
            let ended = if resumed {
                Some(last.max(self.started_ms))
            } else if w.unknown.load(Ordering::SeqCst) > 0 {
                Some(last)
            } else {
                None
            };
            if let Some(ended) = ended {
                check.push((key.clone(), ended));
            }
        }
        let mut failed = Vec::new();
        let mut reason = String::new();
        if check.is_empty() {
            return (found, failed, reason);
        }
        let settle = self.unknown_outcome_settle.as_millis() as i64;
        let until = check.iter().map(|(_, t)| t + settle).max().unwrap_or(0);
        let wait = until - now_ms();
        if wait > 0 {
            tracing::info!(
                mirror = name,
                partitions = check.len(),
                wait_ms = wait,
                "mirror writes of unknown outcome: waiting before re-reading the log after the barrier"
            );
            tokio::time::sleep(Duration::from_millis(wait as u64)).await;
        }
        let records: HashMap<(String, i32), PartitionRecord> = self
            .stopping(name)
            .into_iter()
            .map(|p| ((p.topic.clone(), p.partition), p))
            .collect();
        'partitions: for (key, _) in check {
            let Some(record) = records.get(&key) else {
                continue;
            };
            for _round in 0..MAX_LATE_BARRIERS {
                let current = found[&key];
                let barrier = current.offset;
                let own = OwnBarrier {
                    failover_id: fid,
                    producer_id: current.producer_id,
                };
                let late = match self.late_batches(&key.0, key.1, barrier + 1, &own).await {
                    Ok(late) => late,
                    Err(e) => {
                        reason = format!("cannot re-read the log after the barrier: {e}");
                        failed.push(key.clone());
                        continue 'partitions;
                    }
                };
                if late.is_empty() {
                    continue 'partitions;
                }
                self.metrics
                    .late_writes
                    .with_label_values(&[name])
                    .inc_by(late.len() as u64);
                tracing::warn!(
                    mirror = name, topic = %key.0, partition = key.1, barrier,
                    batches = late.len(), first = late[0].base_offset,
                    "mirror writes of unknown outcome landed after the barrier: screening their producer ids and writing a new barrier after them"
                );
                merge_screen(
                    &mut lock(&self.screen),
                    late.iter()
                        .filter(|b| b.producer_id >= 0)
                        .map(|b| {
                            (
                                b.producer_id,
                                ScreenEntry {
                                    max_epoch: b.producer_epoch,
                                    last_timestamp: b.max_timestamp,
                                    added_ms: 0,
                                },
                            )
                        })
                        .collect(),
                );
                // The new barrier has the form of the one it follows: a control barrier again
                // with the same producer id, epoch and coordinator epoch (the broker accepts a
                // second such marker), or a data barrier after a fallback.
                let producer = match current.kind {
                    BarrierKind::Control => record.barrier_producer.or(producer),
                    BarrierKind::Data => None,
                };
                let (written, bad, why) = self.write_barriers(name, fid, producer, &[record]).await;
                match written.get(&key) {
                    Some(b) if bad.is_empty() => {
                        found.insert(key.clone(), *b);
                    }
                    _ => {
                        reason = why;
                        failed.push(key.clone());
                        continue 'partitions;
                    }
                }
            }
            reason =
                format!("mirror writes kept landing after {MAX_LATE_BARRIERS} barriers; retrying");
            failed.push(key.clone());
        }
        for k in &failed {
            found.remove(k);
        }
        (found, failed, reason)
    }

    /// The batches of a partition from `from` to its end that are not this failover's barrier.
    async fn late_batches(
        &self,
        topic: &str,
        partition: i32,
        from: i64,
        own: &OwnBarrier<'_>,
    ) -> Result<Vec<TailBatch>, String> {
        let addr = self
            .leader_addr(topic, partition)
            .ok_or_else(|| "no leader known for the partition".to_string())?;
        let mut c = self
            .cluster
            .client(&addr, self.timeout)
            .await
            .map_err(|e| e.to_string())?;
        let all = read_batches(&mut c, topic, partition, from, own).await?;
        Ok(all
            .into_iter()
            .filter(|b| b.own_barrier.is_none())
            .collect())
    }

    /// The producer id and epoch of this failover's control barriers: the one recorded in a
    /// partition of the failover (a retry or a late-write round reuses it: the broker accepts a
    /// second marker with the same producer id, epoch and coordinator epoch), else a new one
    /// from an *idempotent* InitProducerId (never a transactional id's: feasibility notes §A.4).
    /// It is recorded in `parts` (persisted) before any marker is written with it.
    async fn barrier_producer(
        &self,
        name: &str,
        parts: &[&PartitionRecord],
    ) -> Result<(BarrierProducer, Vec<(String, i32)>, String), ProducerIdError> {
        let recorded = lock(&self.slots)
            .iter()
            .find(|s| s.record.name == name)
            .and_then(|s| {
                let fid = s.record.failover_id.as_deref();
                s.record
                    .partitions
                    .iter()
                    .filter(|p| p.failover_id.as_deref() == fid)
                    .find_map(|p| p.barrier_producer)
            });
        let (producer, unreachable, why) = match recorded {
            Some(p) => {
                // Partitions that joined since (or not written yet): the recorded id must be
                // free there too.
                let new: Vec<&PartitionRecord> = parts
                    .iter()
                    .filter(|x| x.barrier_producer != Some(p))
                    .copied()
                    .collect();
                let (unreachable, why) = if new.is_empty() {
                    (Vec::new(), String::new())
                } else {
                    let in_use = self.producer_ids_in_use(&new).await?;
                    if in_use.taken.contains(&p.producer_id) {
                        return Err(ProducerIdError {
                            reason: format!(
                                "the failover's barrier producer id {} is used by a producer of a partition that joined the failover",
                                p.producer_id
                            ),
                            fallback: true,
                        });
                    }
                    (in_use.unreachable, in_use.why)
                };
                (p, unreachable, why)
            }
            None => self.new_barrier_producer(parts).await?,
        };
        let missing = parts.iter().any(|p| {
            p.barrier_producer != Some(producer)
                && !unreachable.contains(&(p.topic.clone(), p.partition))
        });
        if missing {
            let keys: Vec<(String, i32)> = parts
                .iter()
                .map(|p| (p.topic.clone(), p.partition))
                .filter(|k| !unreachable.contains(k))
                .collect();
            self.update(name, |p| {
                if keys.iter().any(|(t, i)| *t == p.topic && *i == p.partition) {
                    p.barrier_producer = Some(producer);
                }
            })
            .map_err(|e| ProducerIdError::retry(e.to_string()))?;
        }
        Ok((producer, unreachable, why))
    }

    /// A producer id and epoch from an idempotent InitProducerId (no transactional id) sent to
    /// the leader of one of `parts`, that no producer in `parts` uses: mirrored traffic may have
    /// used the very ids the brokers hand out next (review F15), and a marker for such an id
    /// would be refused (its epoch is below the mirrored one) or, worse, end a mirrored open
    /// transaction. Ids are asked for until one is free (at most [`BARRIER_PID_ASKS`]).
    async fn new_barrier_producer(
        &self,
        parts: &[&PartitionRecord],
    ) -> Result<(BarrierProducer, Vec<(String, i32)>, String), ProducerIdError> {
        use kafka_protocol::messages::InitProducerIdRequest;
        let in_use = self.producer_ids_in_use(parts).await?;
        let taken = &in_use.taken;
        let addr = parts
            .iter()
            .filter(|p| !in_use.unreachable.contains(&(p.topic.clone(), p.partition)))
            .find_map(|p| self.leader_addr(&p.topic, p.partition))
            .ok_or_else(|| {
                ProducerIdError::retry(format!(
                    "no partition's leader could be asked for its producers ({})",
                    in_use.why
                ))
            })?;
        let mut c = self
            .cluster
            .client(&addr, self.timeout)
            .await
            .map_err(|e| ProducerIdError::retry(format!("InitProducerId to {addr}: {e}")))?;
        let req = InitProducerIdRequest::default()
            .with_transactional_id(None)
            .with_transaction_timeout_ms(60_000)
            .with_producer_id((-1).into())
            .with_producer_epoch(-1);
        let mut asked = 0usize;
        let mut n = 1usize;
        let mut last_error = 0i16;
        // A broker loading its coordinator state answers 14 or 15 for a while: retried.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while asked < BARRIER_PID_ASKS {
            let answers = c
                .send_pipelined(&req, 4, n)
                .await
                .map_err(|e| ProducerIdError::retry(format!("InitProducerId to {addr}: {e}")))?;
            if answers.iter().all(|r| matches!(r.error_code, 14 | 15))
                && tokio::time::Instant::now() < deadline
            {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            asked += n;
            // A broker between two blocks of producer ids answers part of a pipelined round
            // with 14 (it is fetching its next block): asked again shortly, not a failure.
            let mut loading = false;
            for r in answers {
                if matches!(r.error_code, 14 | 15) {
                    loading = true;
                    continue;
                }
                if r.error_code != 0 || r.producer_id.0 < 0 {
                    last_error = r.error_code;
                    continue;
                }
                if !taken.contains(&r.producer_id.0) {
                    return Ok((
                        BarrierProducer {
                            producer_id: r.producer_id.0,
                            producer_epoch: r.producer_epoch,
                        },
                        in_use.unreachable,
                        in_use.why,
                    ));
                }
            }
            if last_error != 0 {
                return Err(ProducerIdError::of_code(
                    format!("InitProducerId to {addr} answered error code {last_error}"),
                    last_error,
                ));
            }
            if loading {
                if tokio::time::Instant::now() >= deadline {
                    return Err(ProducerIdError::retry(format!(
                        "InitProducerId to {addr} still answered COORDINATOR_LOAD_IN_PROGRESS after 30 s"
                    )));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            n = 64;
        }
        Err(ProducerIdError {
            reason: format!(
                "the {asked} producer ids {addr} handed out are all used by producers of the partitions (mirrored traffic)"
            ),
            fallback: true,
        })
    }

    /// The producer ids the barrier's must differ from: those the brokers hold for `parts`
    /// (DescribeProducers to each leader), those the PSM holds for them, and the screened ones.
    async fn producer_ids_in_use(
        &self,
        parts: &[&PartitionRecord],
    ) -> Result<InUse, ProducerIdError> {
        use kafka_protocol::messages::describe_producers_request::TopicRequest;
        use kafka_protocol::messages::DescribeProducersRequest;
        let mut taken: std::collections::HashSet<i64> =
            lock(&self.screen).keys().copied().collect();
        if let Some(psm) = &self.psm {
            for p in parts {
                if let Some(slot) = psm.existing(&p.topic, p.partition) {
                    let s = slot.lock().unwrap_or_else(|e| e.into_inner());
                    taken.extend(s.psm().iter().map(|e| e.producer_id()));
                }
            }
        }
        let (by_leader, mut unreachable) = self.by_leader(parts);
        let mut why = if unreachable.is_empty() {
            String::new()
        } else {
            NO_LEADER.to_string()
        };
        for (addr, ps) in by_leader {
            let mut topics: Vec<TopicRequest> = Vec::new();
            for p in &ps {
                match topics.iter_mut().find(|t| t.name.0.as_str() == p.topic) {
                    Some(t) => t.partition_indexes.push(p.partition),
                    None => topics.push(
                        TopicRequest::default()
                            .with_name(StrBytes::from_string(p.topic.clone()).into())
                            .with_partition_indexes(vec![p.partition]),
                    ),
                }
            }
            let req = DescribeProducersRequest::default().with_topics(topics);
            let resp = match async {
                let mut c = self.cluster.client(&addr, self.timeout).await?;
                c.send(&req, 0).await
            }
            .await
            {
                Ok(r) => r,
                Err(e) => {
                    // That leader's partitions fail alone (retried); the others go on.
                    why = format!("DescribeProducers to {addr}: {e}");
                    unreachable.extend(ps.iter().map(|p| (p.topic.clone(), p.partition)));
                    continue;
                }
            };
            for t in &resp.topics {
                for p in &t.partitions {
                    if p.error_code != 0 {
                        return Err(ProducerIdError::of_code(
                            format!(
                                "DescribeProducers for {}-{} answered error code {}",
                                t.name.0.as_str(),
                                p.partition_index,
                                p.error_code
                            ),
                            p.error_code,
                        ));
                    }
                    taken.extend(p.active_producers.iter().map(|a| a.producer_id.0));
                }
            }
        }
        Ok(InUse {
            taken,
            unreachable,
            why,
        })
    }

    /// The last mirrored offset of a partition whose barrier is at `barrier`: what its PSM has
    /// applied below the barrier (-1: nothing known).
    fn last_mirrored_offset(&self, topic: &str, partition: i32, barrier: i64) -> i64 {
        self.psm
            .as_ref()
            .and_then(|r| r.existing(topic, partition))
            .map(|s| {
                s.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .applied_through()
            })
            .unwrap_or(-1)
            .min(barrier - 1)
    }

    /// Write the barriers of `parts`, grouped per leader: with `producer`, a control batch
    /// (one WriteTxnMarkers request per leader), falling back to a data barrier where
    /// `failover.barrier` is `auto` and the leader refuses WriteTxnMarkers for authorization or
    /// does not support it; without, a data barrier (one Produce request, acks=all, per leader).
    /// Returns the barriers written, and the partitions that failed and why (a partition
    /// without a leader fails alone; the others are still written).
    async fn write_barriers(
        &self,
        name: &str,
        fid: &str,
        producer: Option<BarrierProducer>,
        parts: &[&PartitionRecord],
    ) -> (Found, Vec<(String, i32)>, String) {
        let mut out = HashMap::new();
        let mut failed = Vec::new();
        let mut reason = String::new();
        if self.failing_barrier_writes.fetch_sub(1, Ordering::SeqCst) > 0 {
            let failed = parts
                .iter()
                .map(|p| (p.topic.clone(), p.partition))
                .collect();
            return (
                out,
                failed,
                "barrier write failed (MIRRORGATE_TEST_FAIL_BARRIER_WRITES)".into(),
            );
        }
        let (by_leader, leaderless) = self.by_leader(parts);
        if !leaderless.is_empty() {
            reason = NO_LEADER.into();
            failed.extend(leaderless);
        }
        for (addr, ps) in by_leader {
            let data: Vec<&PartitionRecord> = match producer {
                Some(producer) if self.barrier_mode != BarrierMode::Data => {
                    let refused = self
                        .write_control_barriers(
                            name,
                            &addr,
                            producer,
                            &ps,
                            &mut out,
                            &mut failed,
                            &mut reason,
                        )
                        .await;
                    ps.iter()
                        .filter(|p| refused.contains(&(p.topic.clone(), p.partition)))
                        .copied()
                        .collect()
                }
                _ => ps,
            };
            if !data.is_empty() {
                self.write_data_barriers(
                    name,
                    fid,
                    &addr,
                    &data,
                    &mut out,
                    &mut failed,
                    &mut reason,
                )
                .await;
            }
        }
        (out, failed, reason)
    }

    /// Control barriers of `ps` (all led by `addr`). Returns the partitions to write a data
    /// barrier for instead (`auto`: WriteTxnMarkers refused for authorization or unsupported).
    #[allow(clippy::too_many_arguments)]
    async fn write_control_barriers(
        &self,
        name: &str,
        addr: &str,
        producer: BarrierProducer,
        ps: &[&PartitionRecord],
        out: &mut Found,
        failed: &mut Vec<(String, i32)>,
        reason: &mut String,
    ) -> Vec<(String, i32)> {
        use crate::protocol::txn_marker::{
            barrier_markers_request, marker_outcomes, supports_barrier_markers, MarkerOutcome,
            WRITE_TXN_MARKERS_VERSION,
        };
        use kafka_protocol::messages::ApiVersionsRequest;
        let keys: Vec<(String, i32)> = ps.iter().map(|p| (p.topic.clone(), p.partition)).collect();
        let auto = self.barrier_mode == BarrierMode::Auto;
        let fallback = |why: &str, keys: Vec<(String, i32)>| {
            tracing::warn!(
                mirror = name, broker = addr, partitions = keys.len(), why,
                "the barrier cannot be a control batch here (WriteTxnMarkers needs ALTER or CLUSTER_ACTION on CLUSTER): writing the data barrier instead (failover.barrier: auto)"
            );
            keys
        };
        let mut c = match self.cluster.client(addr, self.timeout).await {
            Ok(c) => c,
            Err(e) => {
                *reason = format!("barrier write to {addr} failed: {e}");
                failed.extend(keys);
                return Vec::new();
            }
        };
        // The log end of each partition before the marker: the broker answers no offset, so
        // the marker is found by reading the log from there.
        let mut before: HashMap<(String, i32), i64> = HashMap::new();
        let outcomes = match self.txn_markers_error {
            Some(code) => keys
                .iter()
                .map(|k| (k.clone(), MarkerOutcome::of(code)))
                .collect::<HashMap<_, _>>(),
            None => {
                let versions = match c.send(&ApiVersionsRequest::default(), 0).await {
                    Ok(av) => av
                        .api_keys
                        .iter()
                        .map(|k| (k.api_key, k.min_version, k.max_version))
                        .collect::<Vec<_>>(),
                    Err(e) => {
                        *reason = format!("ApiVersions to {addr} failed: {e}");
                        failed.extend(keys);
                        return Vec::new();
                    }
                };
                if !supports_barrier_markers(&versions) {
                    let why = "the broker does not list WriteTxnMarkers version 1";
                    if auto {
                        return fallback(why, keys);
                    }
                    *reason =
                        format!("control barrier on {addr}: {why} (failover.barrier: control)");
                    failed.extend(keys);
                    return Vec::new();
                }
                for k in &keys {
                    match c.list_offset(&k.0, k.1, crate::client::LATEST).await {
                        Ok(o) => {
                            before.insert(k.clone(), o);
                        }
                        Err(e) => {
                            *reason = format!("cannot read the log end before the barrier: {e}");
                            failed.push(k.clone());
                        }
                    }
                }
                let asked: Vec<(String, i32)> = keys
                    .iter()
                    .filter(|k| before.contains_key(*k))
                    .cloned()
                    .collect();
                if asked.is_empty() {
                    return Vec::new();
                }
                let req =
                    barrier_markers_request(producer.producer_id, producer.producer_epoch, &asked);
                let sent = c.send(&req, WRITE_TXN_MARKERS_VERSION).await;
                let sent = match sent {
                    Ok(_) if self.lose_marker_answers.fetch_sub(1, Ordering::SeqCst) > 0 => {
                        Err("answer dropped (MIRRORGATE_TEST_LOSE_BARRIER_MARKER_ANSWERS)".into())
                    }
                    Ok(resp) => Ok(resp),
                    Err(e) => Err(e.to_string()),
                };
                match sent {
                    Ok(resp) => marker_outcomes(&resp, producer.producer_id, &asked),
                    Err(e) => {
                        // The markers may have been appended: a retry looks for them first.
                        *reason = format!("barrier markers to {addr} failed: {e}");
                        failed.extend(asked);
                        return Vec::new();
                    }
                }
            }
        };
        let mut refused = Vec::new();
        let mut keys_sorted: Vec<_> = outcomes.into_iter().collect();
        keys_sorted.sort_by(|a, b| a.0.cmp(&b.0));
        for (key, o) in keys_sorted {
            match o {
                MarkerOutcome::Written => {
                    let own = OwnBarrier {
                        failover_id: "",
                        producer_id: Some(producer.producer_id),
                    };
                    let from = before.get(&key).copied().unwrap_or(0);
                    let found = read_batches(&mut c, &key.0, key.1, from, &own)
                        .await
                        .map(|tail| {
                            tail.iter()
                                .rev()
                                .find(|b| b.own_barrier == Some(BarrierKind::Control))
                                .map(|b| b.base_offset)
                        });
                    match found {
                        Ok(Some(offset)) => {
                            self.metrics
                                .barrier_writes
                                .with_label_values(&[name, "control"])
                                .inc();
                            out.insert(
                                key,
                                FoundBarrier {
                                    offset,
                                    kind: BarrierKind::Control,
                                    producer_id: Some(producer.producer_id),
                                },
                            );
                        }
                        Ok(None) => {
                            *reason = format!(
                                "the barrier marker of producer id {} was acknowledged but is not in the log from offset {from}",
                                producer.producer_id
                            );
                            failed.push(key);
                        }
                        Err(e) => {
                            *reason = format!("cannot read the barrier marker back: {e}");
                            failed.push(key);
                        }
                    }
                }
                MarkerOutcome::Refused(code) if auto => refused.push((key, code)),
                MarkerOutcome::Refused(code) | MarkerOutcome::Failed(code) => {
                    *reason = format!("barrier marker refused with error code {code}");
                    failed.push(key);
                }
                MarkerOutcome::Missing => {
                    *reason = "no answer for the partition".into();
                    failed.push(key);
                }
            }
        }
        if refused.is_empty() {
            return Vec::new();
        }
        let mut codes: Vec<i16> = refused.iter().map(|(_, c)| *c).collect();
        codes.sort();
        codes.dedup();
        let why = format!(
            "WriteTxnMarkers refused with error code {codes:?} (29/31: not authorized; 32: the topic's timestamp limits)"
        );
        fallback(&why, refused.into_iter().map(|(k, _)| k).collect())
    }

    /// Data barriers of `ps` (all led by `addr`): one Produce request, acks=all.
    #[allow(clippy::too_many_arguments)]
    async fn write_data_barriers(
        &self,
        name: &str,
        fid: &str,
        addr: &str,
        ps: &[&PartitionRecord],
        out: &mut Found,
        failed: &mut Vec<(String, i32)>,
        reason: &mut String,
    ) {
        let now = barrier_clock_ms();
        let mut topics: Vec<TopicProduceData> = Vec::new();
        for p in ps {
            let (producers, last) = self
                .psm
                .as_ref()
                .and_then(|r| r.existing(&p.topic, p.partition))
                .map(|s| {
                    let s = s.lock().unwrap_or_else(|e| e.into_inner());
                    (s.psm().len() as u32, s.applied_through())
                })
                .unwrap_or((0, -1));
            let value = BarrierValue {
                version: 1,
                mirror: name.to_string(),
                failover_id: fid.to_string(),
                source_cluster_id: None,
                time_ms: now,
                producers_expired: producers,
                last_mirrored_offset: last,
            };
            // No timestamp: no topic's timestamp limits can refuse it (review F13).
            let batch: Bytes = encode_barrier_batch(&value, BARRIER_TIMESTAMP);
            let pd = PartitionProduceData::default()
                .with_index(p.partition)
                .with_records(Some(batch));
            match topics.iter_mut().find(|t| t.name.0.as_str() == p.topic) {
                Some(t) => t.partition_data.push(pd),
                None => topics.push(
                    TopicProduceData::default()
                        .with_name(StrBytes::from_string(p.topic.clone()).into())
                        .with_partition_data(vec![pd]),
                ),
            }
        }
        let req = ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(30_000)
            .with_topic_data(topics);
        let result = async {
            let mut c = self.cluster.client(addr, self.timeout).await?;
            c.send(&req, 9).await
        }
        .await;
        match result {
            Ok(resp) => {
                for t in &resp.responses {
                    for pr in &t.partition_responses {
                        let key = (t.name.0.to_string(), pr.index);
                        if !ps.iter().any(|p| p.topic == key.0 && p.partition == key.1) {
                            continue;
                        }
                        if pr.error_code == 0 {
                            self.metrics
                                .barrier_writes
                                .with_label_values(&[name, "data"])
                                .inc();
                            out.insert(
                                key,
                                FoundBarrier {
                                    offset: pr.base_offset,
                                    kind: BarrierKind::Data,
                                    producer_id: None,
                                },
                            );
                        } else {
                            *reason =
                                format!("barrier write refused with error code {}", pr.error_code);
                            failed.push(key);
                        }
                    }
                }
                for p in ps {
                    let key = (p.topic.clone(), p.partition);
                    if !out.contains_key(&key) && !failed.contains(&key) {
                        *reason = "no answer for the partition".into();
                        failed.push(key);
                    }
                }
            }
            Err(e) => {
                *reason = format!("barrier write to {addr} failed: {e}");
                failed.extend(ps.iter().map(|p| (p.topic.clone(), p.partition)));
            }
        }
    }
}

/// A stopped partition's barrier offset and the destination topic id it was written under.
type Barrier = (i64, Option<uuid::Uuid>);

/// A barrier of the failover being run, written or found in the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FoundBarrier {
    offset: i64,
    kind: BarrierKind,
    /// The producer id of a control barrier.
    producer_id: Option<i64>,
}

/// A STOPPED partition's barrier as its record names it.
#[derive(Debug, Clone)]
pub struct RecordedBarrier {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub failover_id: String,
    /// The control barrier's producer id (`None`: a data barrier).
    pub producer_id: Option<i64>,
}

impl RecordedBarrier {
    /// Whether `batch` (header `h`) is this barrier: the ABORT marker of its producer id, or a
    /// data barrier carrying its failover id.
    pub fn is_own(&self, h: &crate::protocol::batch::BatchHeader, batch: &[u8]) -> bool {
        OwnBarrier {
            failover_id: &self.failover_id,
            producer_id: self.producer_id,
        }
        .kind_of(h, batch)
        .is_some()
    }
}

/// Why a partition without a known leader gets no barrier (yet).
const NO_LEADER: &str = "no leader known for the partition";

/// The producer ids a control barrier's id must differ from, and the partitions whose leader
/// could not be asked (with why).
struct InUse {
    taken: std::collections::HashSet<i64>,
    unreachable: Vec<(String, i32)>,
    why: String,
}

/// The barriers of a failover pass, per partition.
type Found = HashMap<(String, i32), FoundBarrier>;

/// What identifies the failover's own barriers in a log: a data barrier carries the failover
/// id; a control barrier is an ABORT marker of the recorded producer id.
struct OwnBarrier<'a> {
    failover_id: &'a str,
    producer_id: Option<i64>,
}

impl OwnBarrier<'_> {
    fn kind_of(
        &self,
        h: &crate::protocol::batch::BatchHeader,
        batch: &[u8],
    ) -> Option<BarrierKind> {
        if let Some(pid) = self.producer_id {
            if crate::protocol::txn_marker::is_control_barrier(h, batch, pid) {
                return Some(BarrierKind::Control);
            }
        }
        if h.is_control() || self.failover_id.is_empty() {
            return None;
        }
        matches!(parse_barrier(batch), Ok(Some(v)) if v.failover_id == self.failover_id)
            .then_some(BarrierKind::Data)
    }
}

/// Why no producer id for a control barrier could be had.
#[derive(Debug)]
struct ProducerIdError {
    reason: String,
    /// The data barrier is the answer (`auto`): not authorized, or no free producer id; else the
    /// partitions fail and are retried.
    fallback: bool,
}

impl ProducerIdError {
    fn retry(reason: String) -> Self {
        ProducerIdError {
            reason,
            fallback: false,
        }
    }

    /// An error code answered: authorization refusals (29, 31) and UNSUPPORTED_VERSION (35)
    /// fall back.
    fn of_code(reason: String, code: i16) -> Self {
        ProducerIdError {
            reason,
            fallback: matches!(code, 29 | 31 | 35),
        }
    }
}

/// Most idempotent producer ids a failover asks for to find one for its control barriers that
/// no producer of its partitions uses.
const BARRIER_PID_ASKS: usize = 1 + 64 * 16;

/// New barriers a failover writes after mirror writes that landed late, per partition, before
/// it gives up for this attempt (the partition is FAILED and retried).
const MAX_LATE_BARRIERS: usize = 5;

/// One batch of a partition's log tail.
struct TailBatch {
    base_offset: i64,
    producer_id: i64,
    producer_epoch: i16,
    max_timestamp: i64,
    /// A barrier of the failover being run, and its form.
    own_barrier: Option<BarrierKind>,
}

/// The batches of a partition from `from` to its high watermark.
async fn read_batches(
    c: &mut crate::client::KafkaClient,
    topic: &str,
    partition: i32,
    from: i64,
    own: &OwnBarrier<'_>,
) -> Result<Vec<TailBatch>, String> {
    let mut out = Vec::new();
    let mut from = from;
    loop {
        let f = c
            .fetch_partition(topic, partition, from, 1024 * 1024)
            .await
            .map_err(|e| e.to_string())?;
        if from >= f.high_watermark {
            return Ok(out);
        }
        let mut next = from;
        for item in BatchWalker::fetched(&f.records) {
            let Ok((h, batch)) = item else { break };
            out.push(TailBatch {
                base_offset: h.base_offset,
                producer_id: h.producer_id,
                producer_epoch: h.producer_epoch,
                max_timestamp: h.max_timestamp,
                own_barrier: own.kind_of(&h, batch),
            });
            next = h.last_offset() + 1;
        }
        if next == from {
            return Err(format!(
                "no progress reading {topic}-{partition} at offset {from}"
            ));
        }
        from = next;
    }
}

/// Read `screen/pids.json`: the set, or why it cannot be read (a missing file is an empty set).
fn load_screen(store: &StateStore) -> (HashMap<i64, ScreenEntry>, Option<ScreenError>) {
    let path = store.root().join(SCREEN_AREA).join(SCREEN_FILE);
    let unreadable = |reason: String| ScreenError::Unreadable {
        path: path.display().to_string(),
        reason,
    };
    match store.read(SCREEN_AREA, SCREEN_FILE) {
        Ok(None) => (HashMap::new(), None),
        Ok(Some(b)) => match serde_json::from_slice(&b) {
            Ok(s) => (s, None),
            Err(e) => (HashMap::new(), Some(unreadable(format!("corrupt: {e}")))),
        },
        Err(e) => (HashMap::new(), Some(unreadable(e.to_string()))),
    }
}

/// Merge producers into the screening set, keeping the highest epoch and latest timestamp.
fn merge_screen(screen: &mut HashMap<i64, ScreenEntry>, found: Vec<(i64, ScreenEntry)>) {
    let now = now_ms();
    for (pid, e) in found {
        let entry = screen.entry(pid).or_insert(e);
        entry.max_epoch = entry.max_epoch.max(e.max_epoch);
        entry.last_timestamp = entry.last_timestamp.max(e.last_timestamp);
        entry.added_ms = entry.added_ms.max(e.added_ms).max(now);
    }
}

/// Refuse to start when the state directory holds protection the configuration would drop
/// (review F3): a mirror's state file whose mirror is no longer configured (removed or
/// renamed), or partitions of a configured mirror whose topic the configuration now routes
/// elsewhere. Both would silently end the read-only rule, the barrier hiding and the duplicate-ack
/// guard of topics that may still hold mirrored producer ids. The error says how to resolve it.
pub fn check_state_matches_config(config: &Config, store: &StateStore) -> Result<(), String> {
    let router = config.topic_router();
    let mut problems = Vec::new();
    for file in store.list(MIRRORS_AREA).map_err(|e| e.to_string())? {
        let Some(name) = file.strip_suffix(".json") else {
            continue;
        };
        let configured = config.mirrors.iter().position(|m| m.name == name);
        let record = match store.read(MIRRORS_AREA, &file) {
            Ok(Some(bytes)) => MirrorRecord::decode(&bytes).ok(),
            _ => None,
        };
        let Some(idx) = configured else {
            let what = match &record {
                Some(r) if r.failover_id.is_some() => format!(
                    "failed over ({}), {} partitions",
                    r.failover_id.as_deref().unwrap_or_default(),
                    r.partitions.len()
                ),
                Some(r) => format!("{} partitions, not failed over", r.partitions.len()),
                None => "unreadable".to_string(),
            };
            problems.push(format!(
                "the state directory holds mirror {name:?} ({what}; file {MIRRORS_AREA}/{file}) but no mirror of that name is configured"
            ));
            continue;
        };
        let Some(record) = record else { continue };
        let mut moved: Vec<String> = record
            .partitions
            .iter()
            .filter(|p| router.mirror_index(&p.topic) != Some(idx))
            .map(|p| {
                let now = router
                    .mirror_index(&p.topic)
                    .and_then(|i| config.mirrors.get(i))
                    .map(|m| format!("mirror {:?}", m.name))
                    .unwrap_or_else(|| "no mirror".to_string());
                format!("{} (now {now})", p.topic)
            })
            .collect();
        moved.dedup();
        if !moved.is_empty() {
            problems.push(format!(
                "mirror {name:?} holds partitions of topics its configuration no longer matches: {}",
                moved.join(", ")
            ));
        }
    }
    if problems.is_empty() {
        return Ok(());
    }
    Err(format!(
        "{}. Their topics would lose their protection (read-only rule, barrier hiding, duplicate-ack guard) while mirrored producer ids may still be live in the brokers. Restore the mirror configuration; or, to retire a mirror on purpose, wait until the time GET /v1/mirrors/NAME reports as protection_needed_until_ms has passed, then move its file out of {}/{MIRRORS_AREA}/ (see docs/guarantees.md)",
        problems.join("; "),
        store.root().display()
    ))
}

/// The slot of mirror `name`, when it exists and its state is readable.
fn usable_slot<'a>(
    slots: &'a mut [MirrorSlot],
    name: &str,
) -> Result<&'a mut MirrorSlot, FailoverError> {
    let slot = slots
        .iter_mut()
        .find(|s| s.record.name == name)
        .ok_or_else(|| FailoverError::UnknownMirror(name.to_string()))?;
    if let Some(reason) = &slot.unreadable {
        return Err(FailoverError::StateUnreadable {
            name: name.to_string(),
            reason: reason.clone(),
        });
    }
    Ok(slot)
}

/// Scrape-time collector of `mirrorgate_mirror_partitions{mirror,state}`.
pub struct PartitionStateGauge(pub Arc<MirrorController>);

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

#[cfg(test)]
#[path = "controller_tests.rs"]
mod tests;
