//! The mirror records in memory and in the state store (`mirrors/NAME.json`): loading them at
//! start, the rule that memory never runs ahead of disk (every change is persisted or reverted),
//! and the start-up check that the state directory matches the configuration.
//!
//! Every persisted change refreshes the admission snapshot ([`super::admission`]) afterwards, so
//! the proxy's decisions only ever rest on recorded states.
//!
//! Owns: `mirrors/NAME.json` in the state store, the in-memory records and their `running`
//! flags. Must not touch: brokers, the PSM, the screening set, what a failover step means (the
//! callers apply transitions of `mirror/state.rs`).

use std::sync::{Arc, Mutex, MutexGuard};

use prometheus::IntCounter;

use crate::config::Config;
use crate::state::StateStore;

use super::admission::Admission;
use super::own_barrier::OwnBarrier;
use super::screening::{now_ms, ScreenError};
use super::state::{
    BarrierKind, MirrorRecord, PartitionRecord, PartitionState, StepError, TransitionError,
};

/// State-store area of mirror records.
pub const MIRRORS_AREA: &str = "mirrors";

/// Why a failover could not be started, or a mirror's record not changed.
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

/// A transition or failover step the state machine refused where the caller expected it to be
/// allowed: a bug, never applied (the record is left as it was, logged and counted in
/// `mirrorgate_failover_illegal_transitions_total`).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct IllegalTransition(pub String);

impl From<TransitionError> for IllegalTransition {
    fn from(e: TransitionError) -> Self {
        IllegalTransition(e.to_string())
    }
}

impl From<StepError> for IllegalTransition {
    fn from(e: StepError) -> Self {
        IllegalTransition(e.to_string())
    }
}

/// Why a change of a mirror's partitions was not recorded (memory was put back as on disk).
#[derive(Debug, thiserror::Error)]
pub enum UpdateError {
    #[error(transparent)]
    Persist(#[from] FailoverError),
    #[error("mirror {mirror:?}, {partition}: illegal transition refused: {error}")]
    Illegal {
        mirror: String,
        partition: String,
        error: IllegalTransition,
    },
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

/// One mirror's record in memory.
pub struct MirrorSlot {
    pub record: MirrorRecord,
    /// Set when the persisted state could not be read: the mirror stays read-only (fail closed).
    pub unreadable: Option<String>,
    /// A failover task runs for this mirror.
    pub running: bool,
}

/// Every configured mirror's record.
pub struct Records {
    store: StateStore,
    slots: Mutex<Vec<MirrorSlot>>,
    admission: Arc<Admission>,
    illegal: IntCounter,
}

impl Records {
    /// Load the record of every mirror of `config` (a new one where the store has none).
    pub fn load(
        config: &Config,
        store: StateStore,
        admission: Arc<Admission>,
        illegal: IntCounter,
    ) -> Records {
        let mut slots = Vec::new();
        // A state directory that is missing or not initialised: every mirror is unreadable.
        let store_problem = store.check().err().map(|e| e.to_string());
        for m in &config.mirrors {
            let fresh = || MirrorRecord::new(m.name.clone(), Vec::new(), now_ms());
            let (record, unreadable) = match store.read(MIRRORS_AREA, &format!("{}.json", m.name)) {
                _ if store_problem.is_some() => (fresh(), store_problem.clone()),
                Ok(Some(bytes)) => match MirrorRecord::decode(&bytes) {
                    Ok(r) => (r, None),
                    Err(e) => (fresh(), Some(e.to_string())),
                },
                Ok(None) => (fresh(), None),
                Err(e) => (fresh(), Some(e.to_string())),
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
        let r = Records {
            store,
            slots: Mutex::new(slots),
            admission,
            illegal,
        };
        r.refresh();
        r
    }

    /// The records, locked.
    pub fn lock(&self) -> MutexGuard<'_, Vec<MirrorSlot>> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Rebuild the admission snapshot from the records.
    pub fn refresh(&self) {
        let slots = self.lock();
        self.admission
            .refresh(slots.iter().map(|s| (&s.record, s.unreadable.as_deref())));
    }

    /// Persist `slot`; when that fails, put back `before` so that memory never runs ahead of
    /// what is recorded (the gateway acts only on recorded states).
    pub fn persist_or_revert(
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

    /// Persist `slot` as it is in memory.
    pub fn persist(&self, slot: &MirrorSlot) -> Result<(), FailoverError> {
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

    /// Log and count a transition the state machine refused where it was expected to pass.
    pub fn report_illegal(&self, mirror: &str, p: &PartitionRecord, e: &IllegalTransition) {
        self.illegal.inc();
        tracing::error!(
            mirror, topic = %p.topic, partition = p.partition, error = %e,
            "illegal partition transition refused (not applied)"
        );
    }

    /// Apply `f` to the partitions of `slot` that `which` selects, in memory; returns how many.
    /// When `f` refuses one (an illegal transition: logged and counted), stops there: the
    /// caller puts the record back and nothing is persisted.
    pub fn transition(
        &self,
        slot: &mut MirrorSlot,
        which: impl Fn(&PartitionRecord) -> bool,
        mut f: impl FnMut(&mut PartitionRecord) -> Result<(), IllegalTransition>,
    ) -> Result<usize, FailoverError> {
        let mut n = 0;
        for p in slot.record.partitions.iter_mut().filter(|p| which(p)) {
            if let Err(e) = f(p) {
                let p = p.clone();
                self.report_illegal(&slot.record.name, &p, &e);
                return Err(FailoverError::Persist {
                    name: slot.record.name.clone(),
                    reason: format!(
                        "illegal transition refused for {}-{} ({e}); nothing was recorded",
                        p.topic, p.partition
                    ),
                });
            }
            n += 1;
        }
        Ok(n)
    }

    /// Apply `f` to the partitions of mirror `name` that `which` selects, then persist. All or
    /// nothing: when `f` refuses a partition (an illegal transition: logged and counted) or the
    /// record cannot be persisted (e.g. a full disk), the record is put back as it was, so the
    /// gateway never acts on a step it has not recorded. After a failed persist the selected
    /// STOPPING partitions carry the error in `last_error` (memory only, for the operator).
    pub fn update(
        &self,
        name: &str,
        which: impl Fn(&PartitionRecord) -> bool,
        mut f: impl FnMut(&mut PartitionRecord) -> Result<(), IllegalTransition>,
    ) -> Result<(), UpdateError> {
        let mut slots = self.lock();
        let slot = slots
            .iter_mut()
            .find(|s| s.record.name == name)
            .ok_or_else(|| FailoverError::UnknownMirror(name.to_string()))?;
        let before = slot.record.clone();
        for p in slot.record.partitions.iter_mut().filter(|p| which(p)) {
            if let Err(error) = f(p) {
                let p = p.clone();
                slot.record = before;
                self.report_illegal(name, &p, &error);
                return Err(UpdateError::Illegal {
                    mirror: name.to_string(),
                    partition: format!("{}-{}", p.topic, p.partition),
                    error,
                });
            }
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
        self.refresh();
        Ok(r?)
    }

    /// [`Self::update`] of the STOPPING partitions.
    pub fn update_stopping(
        &self,
        name: &str,
        f: impl FnMut(&mut PartitionRecord) -> Result<(), IllegalTransition>,
    ) -> Result<(), UpdateError> {
        self.update(name, |p| p.state == PartitionState::Stopping, f)
    }

    /// Copies of the partitions of mirror `name` that `which` selects.
    pub fn partitions(
        &self,
        name: &str,
        which: impl Fn(&PartitionRecord) -> bool,
    ) -> Vec<PartitionRecord> {
        self.lock()
            .iter()
            .find(|s| s.record.name == name)
            .map(|s| {
                s.record
                    .partitions
                    .iter()
                    .filter(|p| which(p))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Copies of the STOPPING partitions of mirror `name`.
    pub fn stopping(&self, name: &str) -> Vec<PartitionRecord> {
        self.partitions(name, |p| p.state == PartitionState::Stopping)
    }

    /// The current failover of mirror `name`.
    pub fn failover_id(&self, name: &str) -> Option<String> {
        self.lock()
            .iter()
            .find(|s| s.record.name == name)
            .and_then(|s| s.record.failover_id.clone())
    }

    /// A copy of mirror `name`'s record.
    pub fn record(&self, name: &str) -> Option<MirrorRecord> {
        self.lock()
            .iter()
            .find(|s| s.record.name == name)
            .map(|s| s.record.clone())
    }

    /// Mark whether a failover task runs for mirror `name`; `false` when it already was `on`.
    pub fn set_running(&self, name: &str, on: bool) -> bool {
        let mut slots = self.lock();
        let Some(slot) = slots.iter_mut().find(|s| s.record.name == name) else {
            return false;
        };
        if on && slot.running {
            return false;
        }
        slot.running = on;
        true
    }
}

impl Records {
    /// The barriers of STOPPED partitions, as recorded, but those recorded under another topic
    /// id than `topic_id` gives now (the topic was created again: they guard nothing).
    pub fn recorded_barriers(
        &self,
        topic_id: impl Fn(&str) -> Option<uuid::Uuid>,
    ) -> Vec<RecordedBarrier> {
        let slots = self.lock();
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
                if matches!((recorded_id, topic_id(&p.topic)), (Some(r), Some(n)) if r != n) {
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
}

/// The slot of mirror `name`, when it exists and its state is readable.
pub fn usable_slot<'a>(
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
