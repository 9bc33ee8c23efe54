//! Admission: the decisions the proxy asks for on every produce and admin request to a mirror
//! topic (on the client listener: read-only until failover; on the mirror listener: closed
//! once failed over), answered from a lookup snapshot of the mirrors' recorded states (refreshed after every
//! persisted change), and the count of mirror writes in flight per partition that a failover's
//! drain waits on.
//!
//! The snapshot only ever shows recorded states: the records are saved first and the snapshot
//! refreshed after, so a decision never rests on a step that is not on disk.
//!
//! The decisions for admin, transaction and group requests are the child module `admin`.
//!
//! Owns: the lookup snapshot (partition states, barriers of STOPPED partitions, unreadable
//! mirrors, started failovers), the barriers found missing from their logs, the in-flight and
//! unknown-outcome counters, the partitions the built-in agent failed. Must not touch: the mirror
//! records and their persistence (`mirror/records.rs`), client sockets.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

use prometheus::{IntCounter, IntCounterVec};

use crate::cluster::ClusterView;
use crate::config::TopicRouter;
use crate::metrics::ListenerKind;

use super::fault_hooks::Sabotage;
use super::peer_gate::{PeerGate, PeerRefusal};
use super::screening::{now_ms, ScreenError};
use super::state::{MirrorRecord, PartitionState};

/// Error code the gateway answers for a produce it refuses (POLICY_VIOLATION: not retriable, and
/// clients surface the message).
pub const REJECT_ERROR_CODE: i16 = 44;

/// Error code for a refusal that passes by itself (NOT_ENOUGH_REPLICAS: retriable; an
/// idempotent producer retries with the same sequence numbers).
pub const RETRY_LATER_ERROR_CODE: i16 = 19;

/// A refused partition of a produce request.
#[derive(Debug, Clone)]
pub struct Refusal {
    pub error_code: i16,
    pub message: String,
    /// `mirrorgate_produce_rejected_total{reason}` (`read_only`, `mirror_fenced`,
    /// `state_unreadable`, `screen_unreadable`, `read_only_admin`, `mirror_fenced_admin`).
    pub reason: &'static str,
}

/// Mirror writes of one partition that the failover drain must know the outcome of.
pub struct PartitionWrites {
    /// `mirrorgate_protection_unknown_outcome_writes_total`.
    unknown_total: IntCounter,
    /// Admitted and not yet answered.
    pub(crate) in_flight: AtomicI64,
    /// Ended without the broker's answer (connection lost or timed out): such a write may
    /// still be appended later, so the failover re-reads the log after its barrier.
    pub(crate) unknown: AtomicU64,
    /// When the last write of unknown outcome ended (ms since the epoch; 0: never).
    pub(crate) last_unknown_ms: AtomicI64,
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

#[cfg(test)]
impl InFlightGuard {
    /// An admitted write of a partition of its own, for tests of the proxy; the partition's
    /// writes show what became of it.
    pub(crate) fn detached() -> (InFlightGuard, Arc<PartitionWrites>) {
        let writes = Arc::new(PartitionWrites {
            unknown_total: IntCounter::new("detached_unknown", "test").expect("counter"),
            in_flight: AtomicI64::new(1),
            unknown: AtomicU64::new(0),
            last_unknown_ms: AtomicI64::new(0),
        });
        let guard = InFlightGuard {
            writes: writes.clone(),
            answered: false,
        };
        (guard, writes)
    }
}

#[cfg(test)]
impl PartitionWrites {
    /// (admitted and not answered, ended without an answer).
    pub(crate) fn counts(&self) -> (i64, u64) {
        (
            self.in_flight.load(Ordering::SeqCst),
            self.unknown.load(Ordering::SeqCst),
        )
    }
}

/// A stopped partition's barrier offset and the destination topic id it was written under.
type Barrier = (i64, Option<uuid::Uuid>);

/// What the decisions read, rebuilt from the records after every persisted change.
#[derive(Default)]
struct Lookup {
    /// Topic → state per partition index (absent: not synced yet).
    states: HashMap<String, Vec<Option<PartitionState>>>,
    /// Barrier offset per partition of stopped partitions (duplicate-ack guard), with the
    /// destination topic id it was written under (absent in older state files).
    barriers: HashMap<String, Vec<Option<Barrier>>>,
    /// Per mirror (config order): why its persisted state cannot be read (fail closed).
    unreadable: Vec<Option<String>>,
    /// Per mirror (config order): a failover has started.
    failover_started: Vec<bool>,
    /// Per mirror (config order): its partitions' recorded states, in record order.
    mirror_states: Vec<Vec<PartitionState>>,
}

/// The admission decisions of every configured mirror.
pub struct Admission {
    names: Vec<String>,
    router: TopicRouter,
    cluster: Arc<ClusterView>,
    /// Set when `screen/pids.json` could not be read at start.
    screen_unreadable: Option<ScreenError>,
    rejected: IntCounterVec,
    unknown_writes: IntCounter,
    lookup: RwLock<Lookup>,
    /// Barriers the partition's log no longer holds (checked at start, review F6): they guard
    /// nothing; the reason is shown in the API.
    barrier_missing: RwLock<HashMap<(String, i32), String>>,
    in_flight: RwLock<HashMap<(String, i32), Arc<PartitionWrites>>>,
    /// Built-in mirror agent: partitions it failed (topic → partition → reason, shown as FAILED
    /// while the record is MIRRORING).
    agent_failed: RwLock<HashMap<String, HashMap<i32, String>>>,
    /// The other instances (`instances` configured): their failovers fence mirror writes here,
    /// and without a lease on the state topic none is admitted.
    peers: OnceLock<Arc<dyn PeerGate>>,
}

impl Admission {
    pub fn new(
        names: Vec<String>,
        router: TopicRouter,
        cluster: Arc<ClusterView>,
        screen_unreadable: Option<ScreenError>,
        rejected: IntCounterVec,
        unknown_writes: IntCounter,
    ) -> Admission {
        Admission {
            names,
            router,
            cluster,
            screen_unreadable,
            rejected,
            unknown_writes,
            lookup: RwLock::new(Lookup::default()),
            barrier_missing: RwLock::new(HashMap::new()),
            in_flight: RwLock::new(HashMap::new()),
            agent_failed: RwLock::new(HashMap::new()),
            peers: OnceLock::new(),
        }
    }

    /// Whether the mirror writes of mirror `name` are over: none in flight, and none of unknown
    /// outcome (it may still be appended) in the last `settle_ms`. `Err`: why not yet.
    pub fn mirror_writes_quiet(&self, name: &str, settle_ms: i64) -> Result<(), String> {
        let now = now_ms();
        let m = self.in_flight.read().unwrap_or_else(|e| e.into_inner());
        for ((topic, partition), w) in m.iter() {
            let Some(idx) = self.router.mirror_index(topic) else {
                continue;
            };
            if self.mirror_name(idx) != name {
                continue;
            }
            if w.in_flight.load(Ordering::SeqCst) > 0 {
                return Err(format!(
                    "mirror writes to {topic}-{partition} are in flight"
                ));
            }
            let last = w.last_unknown_ms.load(Ordering::SeqCst);
            if last > 0 && now - last < settle_ms {
                return Err(format!(
                    "a mirror write to {topic}-{partition} of unknown outcome ended {} ms ago (settle {settle_ms} ms)",
                    now - last
                ));
            }
        }
        Ok(())
    }

    /// Why mirror writes admitted earlier may no longer be forwarded: this instance lost its
    /// lease on the state topic since (a pause, the state topic out of reach), so the other
    /// instances may have waited it out and written their barriers. `None`: they may.
    pub fn admitted_mirror_writes_lapsed(&self) -> Option<String> {
        self.peers.get().and_then(|p| p.lease_problem())
    }

    /// How long admitted mirror writes may still be sent (several instances: the lease's
    /// remaining time; `None`: no bound, one instance).
    pub fn mirror_send_deadline(&self) -> Option<std::time::Duration> {
        let p = self.peers.get()?;
        Some(p.lease_remaining().unwrap_or_default())
    }

    /// Ask `peers` before admitting a mirror write (set once, at start).
    pub fn set_peers(&self, peers: Arc<dyn PeerGate>) {
        let _ = self.peers.set(peers);
    }

    /// Rebuild the snapshot from the mirrors' records (config order), each with why it cannot
    /// be read, if it cannot.
    pub fn refresh<'a>(&self, mirrors: impl Iterator<Item = (&'a MirrorRecord, Option<&'a str>)>) {
        let mut l = Lookup::default();
        for (record, unreadable) in mirrors {
            l.unreadable.push(unreadable.map(str::to_string));
            l.failover_started.push(record.failover_id.is_some());
            l.mirror_states
                .push(record.partitions.iter().map(|p| p.state).collect());
            for p in &record.partitions {
                let i = p.partition.max(0) as usize;
                let v = l.states.entry(p.topic.clone()).or_default();
                if v.len() <= i {
                    v.resize(i + 1, None);
                }
                v[i] = Some(p.state);
                let b = l.barriers.entry(p.topic.clone()).or_default();
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
        *self.lookup.write().unwrap_or_else(|e| e.into_inner()) = l;
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Lookup> {
        self.lookup.read().unwrap_or_else(|e| e.into_inner())
    }

    pub fn mirror_name(&self, idx: usize) -> &str {
        self.names.get(idx).map(String::as_str).unwrap_or("?")
    }

    fn unreadable(&self, idx: usize) -> Option<String> {
        self.read().unreadable.get(idx).cloned().flatten()
    }

    /// " (failed over through instance I, failover F)" when another instance failed `mirror`
    /// over, else nothing.
    fn failed_over_through(&self, mirror: &str) -> String {
        self.peers
            .get()
            .and_then(|p| p.failed_over_by(mirror))
            .map(|(by, fid)| format!(" (failed over through instance {by}, failover {fid})"))
            .unwrap_or_default()
    }

    /// The refusal of whatever `subject` says (e.g. "orders-3 belongs to") when mirror `idx`'s
    /// state cannot be read: it stays read-only (counted as `state_unreadable`).
    fn refuse_unreadable(&self, idx: usize, subject: &str) -> Option<Refusal> {
        let reason = self.unreadable(idx)?;
        self.rejected.with_label_values(&["state_unreadable"]).inc();
        Some(Refusal {
            error_code: REJECT_ERROR_CODE,
            message: format!(
                "mirrorgate: {subject} mirror {}, whose state cannot be read ({reason}); it stays read-only",
                self.mirror_name(idx)
            ),
            reason: "state_unreadable",
        })
    }

    fn failover_started(&self, idx: usize) -> bool {
        self.read()
            .failover_started
            .get(idx)
            .copied()
            .unwrap_or(false)
    }

    /// The recorded state of each partition of mirror `name` as the decisions above take it
    /// (without the agent's own errors): what follows them, as a forward listener's route does,
    /// never sees a state before the decisions do (a change persisted but not yet refreshed).
    pub fn recorded_states(&self, name: &str) -> Vec<PartitionState> {
        let Some(idx) = self.names.iter().position(|n| n == name) else {
            return Vec::new();
        };
        self.read()
            .mirror_states
            .get(idx)
            .cloned()
            .unwrap_or_default()
    }

    /// The state of a partition (FAILED when the built-in agent failed a MIRRORING partition).
    pub fn state_of(&self, topic: &str, partition: i32) -> Option<PartitionState> {
        let s = self.recorded_state(topic, partition);
        if s == Some(PartitionState::Mirroring) && self.agent_error(topic, partition).is_some() {
            return Some(PartitionState::Failed);
        }
        s
    }

    /// The state the records give a partition (the built-in agent's failures aside).
    fn recorded_state(&self, topic: &str, partition: i32) -> Option<PartitionState> {
        self.read()
            .states
            .get(topic)
            .and_then(|v| v.get(partition.max(0) as usize).copied().flatten())
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

    /// Why the built-in agent failed a partition, if it did.
    pub fn agent_error(&self, topic: &str, partition: i32) -> Option<String> {
        let m = self.agent_failed.read().unwrap_or_else(|e| e.into_inner());
        m.get(topic).and_then(|t| t.get(&partition)).cloned()
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
        if let Some(r) = self.refuse_unreadable(idx, &format!("{topic}-{partition} belongs to")) {
            return Err(r);
        }
        if let (ListenerKind::Client | ListenerKind::Forward, Some(e)) =
            (listener, &self.screen_unreadable)
        {
            // Without the screening set a local producer could be handed a producer id that
            // mirrored traffic left in the brokers, and be falsely acknowledged.
            self.rejected
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
            ListenerKind::Client | ListenerKind::Forward => match self.state_of(topic, partition) {
                Some(PartitionState::Stopped) => Ok(None),
                state => {
                    let state = state.unwrap_or(PartitionState::Mirroring);
                    self.rejected.with_label_values(&["read_only"]).inc();
                    let elsewhere = self
                        .peers
                        .get()
                        .and_then(|p| p.failed_over_by(mirror))
                        .map(|(by, fid)| format!(" here; it was failed over through instance {by} (failover {fid}), which takes its writes"))
                        .unwrap_or_default();
                    Err(Refusal {
                        error_code: REJECT_ERROR_CODE,
                        message: format!(
                            "mirrorgate: {topic}-{partition} is read-only: it belongs to mirror {mirror}, which is {}{elsewhere}",
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
                let peer_refusal = (state == PartitionState::Mirroring)
                    .then(|| {
                        self.peers
                            .get()
                            .and_then(|p| p.mirror_write_refusal(mirror))
                    })
                    .flatten();
                if state == PartitionState::Mirroring && peer_refusal.is_none()
                    || Sabotage::Fence.is_on()
                {
                    return Ok(Some(guard));
                }
                // Refused: never forwarded, so its outcome is known (not a write a failover
                // must settle).
                guard.answered();
                if let Some(why) = peer_refusal {
                    self.rejected.with_label_values(&["peer_fenced"]).inc();
                    // Without a lease the refusal passes (a restart, a pause): answered with a
                    // retriable error, so producers (MirrorMaker 2 among them) retry instead of
                    // failing; a failover elsewhere is lasting.
                    let error_code = match why {
                        PeerRefusal::NoLease(_) => RETRY_LATER_ERROR_CODE,
                        PeerRefusal::FailedOver(_) => REJECT_ERROR_CODE,
                    };
                    Err(Refusal {
                        error_code,
                        message: format!(
                            "mirrorgate: mirror produce to {topic}-{partition} is fenced: {}",
                            why.message()
                        ),
                        reason: "peer_fenced",
                    })
                } else if state == PartitionState::Paused {
                    // A pause holds the mirroring tool until the resume: a retriable error, so
                    // that it retries instead of failing (MirrorMaker 2's task would die on a
                    // non-retriable one and not copy again after the resume).
                    self.rejected.with_label_values(&["mirror_paused"]).inc();
                    Err(Refusal {
                        error_code: RETRY_LATER_ERROR_CODE,
                        message: format!(
                            "mirrorgate: mirror produce to {topic}-{partition} waits: mirror {mirror} is PAUSED until it is resumed"
                        ),
                        reason: "mirror_paused",
                    })
                } else {
                    self.rejected.with_label_values(&["mirror_fenced"]).inc();
                    let by = self.failed_over_through(mirror);
                    Err(Refusal {
                        error_code: REJECT_ERROR_CODE,
                        message: format!(
                            "mirrorgate: mirror produce to {topic}-{partition} is fenced: mirror {mirror} is {}{by}",
                            state.as_str()
                        ),
                        reason: "mirror_fenced",
                    })
                }
            }
        }
    }

    /// The mirror writes of a partition (created on first use).
    pub fn writes(&self, topic: &str, partition: i32) -> Arc<PartitionWrites> {
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
                    unknown_total: self.unknown_writes.clone(),
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
            .read()
            .barriers
            .get(topic)
            .and_then(|v| v.get(partition.max(0) as usize).copied().flatten())?;
        match (id, self.cluster.topic_id(topic)) {
            (Some(recorded), Some(now)) if now != recorded => None,
            _ if self.barrier_missing(topic, partition).is_some() => None,
            _ => Some(offset),
        }
    }

    /// Why a STOPPED partition's recorded barrier no longer guards: the log does not hold it
    /// (the controller's start-up barrier check).
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

    /// Record that the log of `topic`-`partition` no longer holds its barrier.
    pub fn set_barrier_missing(&self, topic: &str, partition: i32, reason: String) {
        self.barrier_missing
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert((topic.to_string(), partition), reason);
    }

    /// Whether any partition has a barrier (fast check before looking at responses).
    pub fn has_barriers(&self) -> bool {
        self.read()
            .barriers
            .values()
            .any(|v| v.iter().any(Option::is_some))
    }
}

mod admin;

#[cfg(test)]
#[path = "admission_tests.rs"]
mod tests;
