//! Partition states of a mirror, failover progress, and their persistence format.
//!
//! Owns: [`PartitionState`] and its transition rules (docs/architecture.md#partition-states),
//! [`FailoverStep`] and its ordering rules (docs/architecture.md#the-barrier), the records the
//! controller persists ([`PartitionRecord`], [`MirrorRecord`]) and their versioned JSON encoding.
//! Pure data and rules: no I/O, no clock (callers pass `now_ms`), no networking.
//!
//! # Partition states
//!
//! | state     | local produce | mirror produce | meaning                                   |
//! |-----------|---------------|----------------|-------------------------------------------|
//! | MIRRORING | rejected      | accepted       | normal mirroring                          |
//! | PAUSED    | rejected      | rejected       | mirroring halted, still read-only         |
//! | STOPPING  | rejected      | rejected       | failover in progress: fence, drain, barrier |
//! | STOPPED   | accepted      | rejected       | barrier durable; a normal topic           |
//! | FAILED    | rejected      | rejected       | a failover step failed; retried           |
//!
//! # Transitions (the only ones; [`TRANSITIONS`] is the same table in code)
//!
//! | from      | to        | how                                                          |
//! |-----------|-----------|--------------------------------------------------------------|
//! | MIRRORING | PAUSED    | [`PartitionRecord::pause`]                                   |
//! | PAUSED    | MIRRORING | [`PartitionRecord::resume`]                                  |
//! | MIRRORING | STOPPING  | [`PartitionRecord::begin_failover`]                          |
//! | PAUSED    | STOPPING  | [`PartitionRecord::begin_failover`] (stop racing pause, H21) |
//! | FAILED    | STOPPING  | [`PartitionRecord::retry`] (resumes from the persisted step) |
//! | STOPPING  | STOPPED   | [`PartitionRecord::complete`] (only with a persisted barrier and a cleared PSM) |
//! | STOPPING  | FAILED    | [`PartitionRecord::fail`]                                    |
//! | STOPPED   | MIRRORING | explicit start only (failback), [`PartitionRecord::start_mirroring`], requires the destination partition to be empty or aligned |
//!
//! Everything else — including staying in the same state — is a [`TransitionError`].
//!
//! # Failover steps (per partition, while STOPPING or FAILED)
//!
//! ```text
//! (none) → FENCED → DRAINED → BARRIER_WRITTEN{offset} → BARRIER_PERSISTED{offset} → PSM_CLEARED → complete() → STOPPED
//! ```
//! - FENCED: mirror produce for the partition is rejected from now on.
//! - DRAINED: every in-flight mirror produce was acknowledged or failed.
//! - BARRIER_WRITTEN{offset}: the barrier was acknowledged (acks=all) at `offset`: a control
//!   batch (ABORT marker, whose offset is read back from the log) or the data barrier.
//! - BARRIER_PERSISTED{offset}: the same offset is now the partition's `barrier_offset`; the
//!   controller records this step only once the record carrying it has been saved durably.
//! - PSM_CLEARED: the partition's producer state was cleared at the barrier.
//!
//! Re-recording the current step is allowed (idempotent retries after a restart). A new
//! BARRIER_WRITTEN may replace an earlier one (on resume the first barrier was not found in the
//! log; a second barrier for the same failover is harmless, docs/architecture.md#the-barrier).
//! Nothing goes backwards, BARRIER_PERSISTED must carry the written offset, and
//! [`PartitionRecord::complete`] refuses unless the step is PSM_CLEARED with a persisted barrier
//! offset (fail closed).
//!
//! # Persistence
//!
//! [`MirrorRecord::encode`] writes JSON `{"version":1,"name":…,"failover_id":…,"started_ms":…,
//! "completed_ms":…,"partitions":[…]}`; every field is always written and required on read
//! (`null` for absent values), unknown fields are rejected. [`MirrorRecord::decode`] rejects
//! corrupt JSON, a missing or unknown version, and impossible combinations (e.g. STOPPED without
//! a barrier offset) — it never guesses and never panics.

use std::collections::HashSet;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};
use thiserror::Error;

/// The persistence format version written by [`MirrorRecord::encode`].
pub const MIRROR_STATE_VERSION: u64 = 1;

/// State of one partition of a mirror (docs/architecture.md#partition-states).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum PartitionState {
    Mirroring,
    Paused,
    Stopping,
    Stopped,
    Failed,
}

/// How an allowed transition is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransitionKind {
    /// Through [`PartitionState::transition`] (and the record methods built on it).
    Ordinary,
    /// Only through an explicit start with its precondition ([`PartitionState::start_mirroring`]).
    ExplicitStart,
}

/// Every allowed transition (the table in the module doc).
pub const TRANSITIONS: [(PartitionState, PartitionState, TransitionKind); 8] = {
    use PartitionState::*;
    use TransitionKind::*;
    [
        (Mirroring, Paused, Ordinary),
        (Paused, Mirroring, Ordinary),
        (Mirroring, Stopping, Ordinary),
        (Paused, Stopping, Ordinary),
        (Failed, Stopping, Ordinary),
        (Stopping, Stopped, Ordinary),
        (Stopping, Failed, Ordinary),
        (Stopped, Mirroring, ExplicitStart),
    ]
};

/// A refused state transition.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("partition cannot go from {from} to {to}: {reason}")]
pub struct TransitionError {
    pub from: PartitionState,
    pub to: PartitionState,
    pub reason: &'static str,
}

impl PartitionState {
    /// All states, in declaration order.
    pub const ALL: [PartitionState; 5] = [
        PartitionState::Mirroring,
        PartitionState::Paused,
        PartitionState::Stopping,
        PartitionState::Stopped,
        PartitionState::Failed,
    ];

    /// The name used in JSON, metrics and error messages.
    pub const fn as_str(self) -> &'static str {
        match self {
            PartitionState::Mirroring => "MIRRORING",
            PartitionState::Paused => "PAUSED",
            PartitionState::Stopping => "STOPPING",
            PartitionState::Stopped => "STOPPED",
            PartitionState::Failed => "FAILED",
        }
    }

    /// Whether ordinary clients may produce (only once the barrier is durable: STOPPED).
    pub const fn accepts_local_produce(self) -> bool {
        matches!(self, PartitionState::Stopped)
    }

    /// Whether mirrored produce is accepted (only while MIRRORING).
    pub const fn accepts_mirror_produce(self) -> bool {
        matches!(self, PartitionState::Mirroring)
    }

    /// How `self → to` may be taken, or why it may not.
    pub fn rule(self, to: PartitionState) -> Result<TransitionKind, TransitionError> {
        use PartitionState::*;
        if let Some((_, _, kind)) = TRANSITIONS.iter().find(|(f, t, _)| *f == self && *t == to) {
            return Ok(*kind);
        }
        let reason = match (self, to) {
            (a, b) if a == b => "the partition is already in this state",
            (Stopped, _) => {
                "a STOPPED partition leaves STOPPED only by an explicit start (failback)"
            }
            (_, Stopped) => "a partition becomes STOPPED only by completing a failover (STOPPING)",
            (_, Failed) => "only a partition in failover (STOPPING) can fail",
            (Stopping, _) => "a failover in progress cannot be undone; it completes or fails",
            (Failed, _) => "a FAILED partition is retried (STOPPING) or left for the operator",
            _ => "transition not in the table",
        };
        Err(TransitionError {
            from: self,
            to,
            reason,
        })
    }

    /// Checks an ordinary transition and returns the new state.
    pub fn transition(self, to: PartitionState) -> Result<PartitionState, TransitionError> {
        match self.rule(to)? {
            TransitionKind::Ordinary => Ok(to),
            TransitionKind::ExplicitStart => Err(TransitionError {
                from: self,
                to,
                reason: "only an explicit start (failback) resumes mirroring a STOPPED partition",
            }),
        }
    }

    /// The explicit start (failback): STOPPED → MIRRORING, only when the destination partition is
    /// empty or aligned with the source.
    pub fn start_mirroring(
        self,
        destination_aligned: bool,
    ) -> Result<PartitionState, TransitionError> {
        let to = PartitionState::Mirroring;
        match self.rule(to)? {
            TransitionKind::ExplicitStart if destination_aligned => Ok(to),
            TransitionKind::ExplicitStart => Err(TransitionError {
                from: self,
                to,
                reason: "the destination partition is neither empty nor aligned with the source",
            }),
            TransitionKind::Ordinary => Err(TransitionError {
                from: self,
                to,
                reason: "an explicit start applies only to a STOPPED partition",
            }),
        }
    }
}

impl fmt::Display for PartitionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Failover progress of one partition (module doc). Offsets are the barrier's log offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "SCREAMING_SNAKE_CASE", deny_unknown_fields)]
pub enum FailoverStep {
    Fenced,
    Drained,
    BarrierWritten { offset: i64 },
    BarrierPersisted { offset: i64 },
    PsmCleared,
}

impl FailoverStep {
    /// The name used in JSON and messages.
    pub const fn as_str(self) -> &'static str {
        match self {
            FailoverStep::Fenced => "FENCED",
            FailoverStep::Drained => "DRAINED",
            FailoverStep::BarrierWritten { .. } => "BARRIER_WRITTEN",
            FailoverStep::BarrierPersisted { .. } => "BARRIER_PERSISTED",
            FailoverStep::PsmCleared => "PSM_CLEARED",
        }
    }

    /// The offset the step carries, if any.
    pub const fn offset(self) -> Option<i64> {
        match self {
            FailoverStep::BarrierWritten { offset } | FailoverStep::BarrierPersisted { offset } => {
                Some(offset)
            }
            _ => None,
        }
    }

    /// Whether `self` may be recorded when `prev` is the current step (`None`: the failover has
    /// just begun). `Err` names the rule that forbids it.
    pub fn check_after(self, prev: Option<FailoverStep>) -> Result<(), &'static str> {
        use FailoverStep::*;
        if self.offset().is_some_and(|o| o < 0) {
            return Err("a barrier offset cannot be negative");
        }
        match (prev, self) {
            (Some(p), n) if p == n => Ok(()),
            (None, Fenced) => Ok(()),
            (Some(Fenced), Drained) => Ok(()),
            (Some(Drained), BarrierWritten { .. }) => Ok(()),
            (Some(BarrierWritten { .. }), BarrierWritten { .. }) => Ok(()),
            (Some(BarrierWritten { offset: w }), BarrierPersisted { offset: p }) if w == p => Ok(()),
            (Some(BarrierWritten { .. }), BarrierPersisted { .. }) => {
                Err("the persisted barrier offset must be the written barrier's offset")
            }
            (Some(BarrierPersisted { .. }), PsmCleared) => Ok(()),
            _ => Err("failover steps go FENCED, DRAINED, BARRIER_WRITTEN, BARRIER_PERSISTED, PSM_CLEARED in order"),
        }
    }
}

impl fmt::Display for FailoverStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.offset() {
            Some(o) => write!(f, "{}(offset {o})", self.as_str()),
            None => f.write_str(self.as_str()),
        }
    }
}

/// A refused failover step.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("cannot record failover step {to} after {} in state {state}: {reason}",
    .from.map_or_else(|| "the start of the failover".to_owned(), |s| s.to_string()))]
pub struct StepError {
    pub state: PartitionState,
    pub from: Option<FailoverStep>,
    pub to: FailoverStep,
    pub reason: &'static str,
}

/// Makes an `Option` field required in JSON (present, possibly `null`) instead of defaulting.
fn required<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d)
}

/// The persisted state of one partition of a mirror.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartitionRecord {
    pub topic: String,
    pub partition: i32,
    pub state: PartitionState,
    /// The failover this partition is in (STOPPING, FAILED) or completed (STOPPED).
    #[serde(deserialize_with = "required")]
    pub failover_id: Option<String>,
    /// Failover progress (STOPPING, FAILED; PSM_CLEARED once STOPPED).
    #[serde(deserialize_with = "required")]
    pub step: Option<FailoverStep>,
    /// The durable barrier offset, set with BARRIER_PERSISTED.
    #[serde(deserialize_with = "required")]
    pub barrier_offset: Option<i64>,
    /// Producer entries the barrier expires (the controller sets it when writing the barrier; it
    /// goes into the barrier value).
    pub producers_expired: u32,
    /// The last failure, kept for the operator.
    #[serde(deserialize_with = "required")]
    pub last_error: Option<String>,
    pub updated_ms: i64,
    /// The destination topic's id when the barrier was recorded (absent in files of older
    /// versions): a topic deleted and created again under the same name has another id, and
    /// the old barrier offset means nothing in its log (review F6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub barrier_topic_id: Option<String>,
    /// The form of the recorded barrier (absent in files of older versions, whose barriers are
    /// all data batches).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub barrier_kind: Option<BarrierKind>,
    /// The producer id and epoch a control-batch barrier is (or is about to be) written with.
    /// Recorded *before* the marker is written: the marker carries no payload, so a resumed
    /// failover recognises its barrier in the log only by this producer id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub barrier_producer: Option<BarrierProducer>,
    /// The offset the producer state had applied when the barrier was recorded (the last
    /// mirrored offset; -1: none). The data barrier's value carries it too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_mirrored_offset: Option<i64>,
}

/// The form of a partition's failover barrier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BarrierKind {
    /// A genuine control batch: an ABORT transaction marker (WriteTxnMarkers) of
    /// [`PartitionRecord::barrier_producer`]; every consumer skips it natively.
    Control,
    /// A single-record data batch with the reserved key, hidden by the gateway.
    Data,
}

impl BarrierKind {
    /// The name used in JSON, metrics and logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            BarrierKind::Control => "control",
            BarrierKind::Data => "data",
        }
    }
}

/// The producer id and epoch of a control-batch barrier (from an idempotent InitProducerId).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BarrierProducer {
    pub producer_id: i64,
    pub producer_epoch: i16,
}

impl PartitionRecord {
    /// A partition that is being mirrored.
    pub fn new(topic: impl Into<String>, partition: i32, now_ms: i64) -> Self {
        PartitionRecord {
            topic: topic.into(),
            partition,
            state: PartitionState::Mirroring,
            failover_id: None,
            step: None,
            barrier_offset: None,
            producers_expired: 0,
            last_error: None,
            updated_ms: now_ms,
            barrier_topic_id: None,
            barrier_kind: None,
            barrier_producer: None,
            last_mirrored_offset: None,
        }
    }

    /// MIRRORING → PAUSED.
    pub fn pause(&mut self, now_ms: i64) -> Result<(), TransitionError> {
        self.state = self.state.transition(PartitionState::Paused)?;
        self.updated_ms = now_ms;
        Ok(())
    }

    /// PAUSED → MIRRORING.
    pub fn resume(&mut self, now_ms: i64) -> Result<(), TransitionError> {
        if self.state != PartitionState::Paused {
            return Err(self.refuse(PartitionState::Mirroring, "only a PAUSED partition resumes"));
        }
        self.state = self.state.transition(PartitionState::Mirroring)?;
        self.updated_ms = now_ms;
        Ok(())
    }

    /// MIRRORING/PAUSED → STOPPING: starts failover `failover_id` with no step done yet.
    pub fn begin_failover(
        &mut self,
        failover_id: impl Into<String>,
        now_ms: i64,
    ) -> Result<(), TransitionError> {
        if self.state == PartitionState::Failed {
            return Err(self.refuse(
                PartitionState::Stopping,
                "a FAILED partition resumes its failover with retry",
            ));
        }
        let failover_id = failover_id.into();
        if failover_id.is_empty() {
            return Err(self.refuse(PartitionState::Stopping, "the failover id is empty"));
        }
        self.state = self.state.transition(PartitionState::Stopping)?;
        self.failover_id = Some(failover_id);
        self.step = None;
        self.barrier_offset = None;
        self.barrier_topic_id = None;
        self.barrier_kind = None;
        self.barrier_producer = None;
        self.last_mirrored_offset = None;
        self.producers_expired = 0;
        self.last_error = None;
        self.updated_ms = now_ms;
        Ok(())
    }

    /// Records the next failover step (only while STOPPING; ordering rules in the module doc).
    pub fn advance(&mut self, step: FailoverStep, now_ms: i64) -> Result<(), StepError> {
        let refuse = |reason| StepError {
            state: self.state,
            from: self.step,
            to: step,
            reason,
        };
        if self.state != PartitionState::Stopping {
            return Err(refuse("failover steps are recorded only while STOPPING"));
        }
        step.check_after(self.step).map_err(refuse)?;
        self.barrier_offset = match step {
            FailoverStep::BarrierPersisted { offset } => Some(offset),
            FailoverStep::PsmCleared => self.barrier_offset,
            _ => None,
        };
        self.step = Some(step);
        self.updated_ms = now_ms;
        Ok(())
    }

    /// STOPPING → FAILED, keeping the step so a retry resumes from it.
    pub fn fail(&mut self, error: impl Into<String>, now_ms: i64) -> Result<(), TransitionError> {
        self.state = self.state.transition(PartitionState::Failed)?;
        self.last_error = Some(error.into());
        self.updated_ms = now_ms;
        Ok(())
    }

    /// FAILED → STOPPING: the same failover, resumed from the persisted step.
    pub fn retry(&mut self, now_ms: i64) -> Result<(), TransitionError> {
        if self.state != PartitionState::Failed {
            return Err(self.refuse(
                PartitionState::Stopping,
                "only a FAILED partition is retried",
            ));
        }
        self.state = self.state.transition(PartitionState::Stopping)?;
        self.updated_ms = now_ms;
        Ok(())
    }

    /// STOPPING → STOPPED. Fail closed: refused unless the barrier offset is persisted and the
    /// PSM was cleared at it (step PSM_CLEARED).
    pub fn complete(&mut self, now_ms: i64) -> Result<(), TransitionError> {
        self.state.rule(PartitionState::Stopped)?;
        if self.barrier_offset.is_none() {
            return Err(self.refuse(
                PartitionState::Stopped,
                "the barrier offset is not persisted (fail closed)",
            ));
        }
        if self.step != Some(FailoverStep::PsmCleared) {
            return Err(self.refuse(
                PartitionState::Stopped,
                "the producer state was not cleared at the barrier yet",
            ));
        }
        self.state = self.state.transition(PartitionState::Stopped)?;
        self.updated_ms = now_ms;
        Ok(())
    }

    /// The explicit start (failback): STOPPED → MIRRORING when the destination partition is
    /// empty or aligned with the source. Clears the failover fields.
    pub fn start_mirroring(
        &mut self,
        destination_aligned: bool,
        now_ms: i64,
    ) -> Result<(), TransitionError> {
        self.state = self.state.start_mirroring(destination_aligned)?;
        self.failover_id = None;
        self.step = None;
        self.barrier_offset = None;
        self.barrier_topic_id = None;
        self.barrier_kind = None;
        self.barrier_producer = None;
        self.last_mirrored_offset = None;
        self.producers_expired = 0;
        self.last_error = None;
        self.updated_ms = now_ms;
        Ok(())
    }

    fn refuse(&self, to: PartitionState, reason: &'static str) -> TransitionError {
        TransitionError {
            from: self.state,
            to,
            reason,
        }
    }

    /// Checks the combination of fields; `Err` says what is impossible.
    pub fn validate(&self) -> Result<(), &'static str> {
        use PartitionState::*;
        if self.topic.is_empty() {
            return Err("empty topic name");
        }
        if self.partition < 0 {
            return Err("negative partition");
        }
        if self.barrier_offset.is_some_and(|o| o < 0) {
            return Err("negative barrier offset");
        }
        if self
            .step
            .and_then(FailoverStep::offset)
            .is_some_and(|o| o < 0)
        {
            return Err("negative offset in the failover step");
        }
        match self.state {
            Mirroring | Paused => {
                if self.failover_id.is_some()
                    || self.step.is_some()
                    || self.barrier_offset.is_some()
                {
                    return Err(
                        "a MIRRORING or PAUSED partition has no failover id, step or barrier",
                    );
                }
            }
            Stopping | Failed | Stopped => {
                match &self.failover_id {
                    None => return Err("a partition in or after failover needs a failover id"),
                    Some(id) if id.is_empty() => return Err("empty failover id"),
                    Some(_) => {}
                }
                match (self.step, self.barrier_offset) {
                    (Some(FailoverStep::BarrierPersisted { offset }), Some(b)) if offset == b => {}
                    (Some(FailoverStep::BarrierPersisted { .. }), _) => {
                        return Err("BARRIER_PERSISTED without the same barrier offset")
                    }
                    (Some(FailoverStep::PsmCleared), Some(_)) => {}
                    (Some(FailoverStep::PsmCleared), None) => {
                        return Err("PSM_CLEARED without a barrier offset")
                    }
                    (_, Some(_)) => return Err("a barrier offset before BARRIER_PERSISTED"),
                    (_, None) => {}
                }
                if self.state == Failed && self.last_error.is_none() {
                    return Err("a FAILED partition without an error");
                }
                if self.barrier_kind == Some(BarrierKind::Control)
                    && self.barrier_producer.is_none()
                {
                    return Err("a control-batch barrier without its producer id");
                }
                if self.state == Stopped
                    && (self.barrier_offset.is_none()
                        || self.step != Some(FailoverStep::PsmCleared))
                {
                    return Err("STOPPED without a persisted barrier offset and a cleared PSM");
                }
            }
        }
        Ok(())
    }
}

/// The persisted state of one mirror: its partitions and the current failover, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorRecord {
    pub name: String,
    /// The current (or last completed) failover.
    pub failover_id: Option<String>,
    pub partitions: Vec<PartitionRecord>,
    /// When the failover started.
    pub started_ms: Option<i64>,
    /// When every partition reached STOPPED.
    pub completed_ms: Option<i64>,
}

/// Why persisted mirror state cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum StateDecodeError {
    #[error("mirror state is not valid: {0}")]
    Json(String),
    #[error("mirror state has no \"version\" field")]
    MissingVersion,
    #[error("mirror state version {0} is not a non-negative integer")]
    BadVersion(String),
    #[error("mirror state version {0} is not supported (this build reads version {MIRROR_STATE_VERSION})")]
    UnsupportedVersion(u64),
    #[error("mirror state is inconsistent: {0}")]
    Inconsistent(String),
}

#[derive(Serialize)]
struct WireOut<'a> {
    version: u64,
    name: &'a str,
    failover_id: &'a Option<String>,
    started_ms: &'a Option<i64>,
    completed_ms: &'a Option<i64>,
    partitions: &'a [PartitionRecord],
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WireInV1 {
    #[allow(dead_code)]
    version: u64,
    name: String,
    #[serde(deserialize_with = "required")]
    failover_id: Option<String>,
    #[serde(deserialize_with = "required")]
    started_ms: Option<i64>,
    #[serde(deserialize_with = "required")]
    completed_ms: Option<i64>,
    partitions: Vec<PartitionRecord>,
}

#[derive(Deserialize)]
struct VersionProbe {
    #[serde(default)]
    version: Option<serde_json::Value>,
}

impl MirrorRecord {
    /// A mirror whose partitions are all MIRRORING.
    pub fn new(
        name: impl Into<String>,
        partitions: impl IntoIterator<Item = (String, i32)>,
        now_ms: i64,
    ) -> Self {
        MirrorRecord {
            name: name.into(),
            failover_id: None,
            partitions: partitions
                .into_iter()
                .map(|(t, p)| PartitionRecord::new(t, p, now_ms))
                .collect(),
            started_ms: None,
            completed_ms: None,
        }
    }

    pub fn partition(&self, topic: &str, partition: i32) -> Option<&PartitionRecord> {
        self.partitions
            .iter()
            .find(|p| p.topic == topic && p.partition == partition)
    }

    pub fn partition_mut(&mut self, topic: &str, partition: i32) -> Option<&mut PartitionRecord> {
        self.partitions
            .iter_mut()
            .find(|p| p.topic == topic && p.partition == partition)
    }

    /// Whether every partition is STOPPED.
    pub fn all_stopped(&self) -> bool {
        self.partitions
            .iter()
            .all(|p| p.state == PartitionState::Stopped)
    }

    /// Versioned JSON (module doc).
    pub fn encode(&self) -> Vec<u8> {
        let wire = WireOut {
            version: MIRROR_STATE_VERSION,
            name: &self.name,
            failover_id: &self.failover_id,
            started_ms: &self.started_ms,
            completed_ms: &self.completed_ms,
            partitions: &self.partitions,
        };
        // Serialising plain structs with string keys into a Vec cannot fail.
        serde_json::to_vec(&wire).expect("mirror state serialises to JSON")
    }

    /// Reads [`MirrorRecord::encode`]'s output; rejects anything corrupt, unknown or impossible.
    pub fn decode(bytes: &[u8]) -> Result<MirrorRecord, StateDecodeError> {
        let probe: VersionProbe =
            serde_json::from_slice(bytes).map_err(|e| StateDecodeError::Json(e.to_string()))?;
        let version = match probe.version {
            None | Some(serde_json::Value::Null) => return Err(StateDecodeError::MissingVersion),
            Some(v) => v
                .as_u64()
                .ok_or_else(|| StateDecodeError::BadVersion(v.to_string()))?,
        };
        if version != MIRROR_STATE_VERSION {
            return Err(StateDecodeError::UnsupportedVersion(version));
        }
        let wire: WireInV1 =
            serde_json::from_slice(bytes).map_err(|e| StateDecodeError::Json(e.to_string()))?;
        let record = MirrorRecord {
            name: wire.name,
            failover_id: wire.failover_id,
            partitions: wire.partitions,
            started_ms: wire.started_ms,
            completed_ms: wire.completed_ms,
        };
        record.validate().map_err(StateDecodeError::Inconsistent)?;
        Ok(record)
    }

    /// Checks the combination of fields of the mirror and of every partition.
    pub fn validate(&self) -> Result<(), String> {
        if self.name.is_empty() {
            return Err("empty mirror name".into());
        }
        if self.failover_id.as_deref() == Some("") {
            return Err("empty failover id".into());
        }
        if self.failover_id.is_some() != self.started_ms.is_some() {
            return Err("a failover id and its start time go together".into());
        }
        if self.completed_ms.is_some() && (self.failover_id.is_none() || !self.all_stopped()) {
            return Err(
                "a completed failover needs a failover id and every partition STOPPED".into(),
            );
        }
        let mut seen = HashSet::with_capacity(self.partitions.len());
        for p in &self.partitions {
            let at = |what: &str| format!("{}-{}: {what}", p.topic, p.partition);
            p.validate().map_err(at)?;
            if !seen.insert((p.topic.as_str(), p.partition)) {
                return Err(at("listed twice"));
            }
            if p.failover_id.is_some() && p.failover_id != self.failover_id {
                return Err(at("failover id differs from the mirror's"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use PartitionState::*;

    /// The expected rule for every pair, written out independently of [`TRANSITIONS`]:
    /// 'o' ordinary, 's' explicit start only, '-' refused. Rows: from, columns: to, both in
    /// [`PartitionState::ALL`] order (MIRRORING, PAUSED, STOPPING, STOPPED, FAILED).
    const MATRIX: [&str; 5] = [
        "-oo--", // MIRRORING
        "o-o--", // PAUSED
        "---oo", // STOPPING
        "s----", // STOPPED
        "--o--", // FAILED
    ];

    #[test]
    fn all_25_pairs_follow_the_table() {
        for (i, from) in PartitionState::ALL.into_iter().enumerate() {
            for (j, to) in PartitionState::ALL.into_iter().enumerate() {
                let want = MATRIX[i].as_bytes()[j];
                let ordinary = from.transition(to);
                let start = from.start_mirroring(true);
                match want {
                    b'o' => {
                        assert_eq!(ordinary, Ok(to), "{from}->{to}");
                        assert_eq!(from.rule(to), Ok(TransitionKind::Ordinary));
                    }
                    b's' => {
                        let err = ordinary.unwrap_err();
                        assert_eq!((err.from, err.to), (from, to));
                        assert_eq!(start, Ok(Mirroring), "{from}->{to}");
                        let refused = from.start_mirroring(false).unwrap_err();
                        assert!(refused.reason.contains("aligned"));
                    }
                    _ => {
                        let err = ordinary.unwrap_err();
                        assert_eq!((err.from, err.to), (from, to), "{from}->{to}");
                        assert!(!err.reason.is_empty());
                        assert!(from.rule(to).is_err(), "{from}->{to}");
                        assert!(err.to_string().contains(from.as_str()));
                    }
                }
                if to == Mirroring && want != b's' {
                    assert!(start.is_err(), "start from {from}");
                }
            }
        }
        assert_eq!(
            TRANSITIONS.len(),
            MATRIX
                .iter()
                .map(|r| r.bytes().filter(|b| *b != b'-').count())
                .sum::<usize>()
        );
    }

    #[test]
    fn produce_acceptance_per_state() {
        let local: Vec<_> = PartitionState::ALL
            .iter()
            .map(|s| s.accepts_local_produce())
            .collect();
        let mirror: Vec<_> = PartitionState::ALL
            .iter()
            .map(|s| s.accepts_mirror_produce())
            .collect();
        assert_eq!(local, [false, false, false, true, false]);
        assert_eq!(mirror, [true, false, false, false, false]);
    }

    #[test]
    fn state_names_match_serde() {
        for s in PartitionState::ALL {
            let json = serde_json::to_string(&s).unwrap();
            assert_eq!(json, format!("\"{}\"", s.as_str()));
            assert_eq!(serde_json::from_str::<PartitionState>(&json).unwrap(), s);
        }
        assert!(serde_json::from_str::<PartitionState>("\"Mirroring\"").is_err());
    }

    fn stopped_record() -> PartitionRecord {
        let mut p = PartitionRecord::new("orders", 3, 1);
        p.begin_failover("f1", 2).unwrap();
        p.advance(FailoverStep::Fenced, 3).unwrap();
        p.advance(FailoverStep::Drained, 4).unwrap();
        p.advance(FailoverStep::BarrierWritten { offset: 500 }, 5)
            .unwrap();
        p.advance(FailoverStep::BarrierPersisted { offset: 500 }, 6)
            .unwrap();
        p.advance(FailoverStep::PsmCleared, 7).unwrap();
        p.complete(8).unwrap();
        p
    }

    #[test]
    fn every_allowed_transition_through_the_record_api() {
        let mut p = PartitionRecord::new("t", 0, 0);
        p.pause(1).unwrap();
        assert_eq!(p.state, Paused);
        p.resume(2).unwrap();
        assert_eq!(p.state, Mirroring);
        p.begin_failover("f1", 3).unwrap(); // MIRRORING → STOPPING
        assert_eq!(p.state, Stopping);
        p.advance(FailoverStep::Fenced, 4).unwrap();
        p.fail("fence timed out", 5).unwrap(); // STOPPING → FAILED
        assert_eq!((p.state, p.step), (Failed, Some(FailoverStep::Fenced)));
        p.retry(6).unwrap(); // FAILED → STOPPING, step kept
        assert_eq!((p.state, p.step), (Stopping, Some(FailoverStep::Fenced)));
        assert_eq!(p.updated_ms, 6);

        let mut q = PartitionRecord::new("t", 1, 0);
        q.pause(1).unwrap();
        q.begin_failover("f1", 2).unwrap(); // PAUSED → STOPPING
        assert_eq!(q.state, Stopping);

        let mut s = stopped_record(); // STOPPING → STOPPED
        assert_eq!((s.state, s.barrier_offset), (Stopped, Some(500)));
        assert!(s.validate().is_ok());
        assert!(s.start_mirroring(false, 9).is_err());
        assert_eq!(s.state, Stopped);
        s.start_mirroring(true, 9).unwrap(); // STOPPED → MIRRORING
        assert_eq!(s, PartitionRecord::new("orders", 3, 9));
    }

    #[test]
    fn record_api_refuses_what_the_table_refuses() {
        let mut p = PartitionRecord::new("t", 0, 0);
        assert!(p.resume(1).is_err());
        assert!(p.retry(1).is_err());
        assert!(p.fail("x", 1).is_err());
        assert!(p.complete(1).is_err());
        assert!(p.start_mirroring(true, 1).is_err());
        assert!(p.advance(FailoverStep::Fenced, 1).is_err());
        assert!(p.begin_failover("", 1).is_err());
        assert_eq!(
            p,
            PartitionRecord::new("t", 0, 0),
            "refusals change nothing"
        );

        p.begin_failover("f", 1).unwrap();
        assert!(p.pause(2).is_err());
        assert!(p.begin_failover("g", 2).is_err());
        p.fail("boom", 3).unwrap();
        let err = p.begin_failover("f", 4).unwrap_err();
        assert!(err.reason.contains("retry"));
        assert!(
            p.advance(FailoverStep::Fenced, 4).is_err(),
            "no steps while FAILED"
        );

        let mut s = stopped_record();
        assert!(s.pause(1).is_err());
        assert!(s.begin_failover("f2", 1).is_err());
        assert!(s.fail("x", 1).is_err());
    }

    #[test]
    fn steps_follow_their_order() {
        use FailoverStep::*;
        let w = |o| BarrierWritten { offset: o };
        let pst = |o| BarrierPersisted { offset: o };
        let ok: &[(Option<FailoverStep>, FailoverStep)] = &[
            (None, Fenced),
            (Some(Fenced), Fenced),
            (Some(Fenced), Drained),
            (Some(Drained), Drained),
            (Some(Drained), w(10)),
            (Some(w(10)), w(10)),
            (Some(w(10)), w(12)),
            (Some(w(10)), w(3)),
            (Some(w(10)), pst(10)),
            (Some(pst(10)), pst(10)),
            (Some(pst(10)), PsmCleared),
            (Some(PsmCleared), PsmCleared),
        ];
        for (prev, next) in ok {
            assert_eq!(next.check_after(*prev), Ok(()), "{prev:?} -> {next:?}");
        }
        let refused: &[(Option<FailoverStep>, FailoverStep)] = &[
            (None, Drained),
            (None, w(1)),
            (None, pst(1)),
            (None, PsmCleared),
            (Some(Fenced), w(1)),
            (Some(Fenced), PsmCleared),
            (Some(Drained), Fenced),
            (Some(Drained), pst(1)),
            (Some(w(10)), pst(11)),
            (Some(w(10)), Drained),
            (Some(w(10)), PsmCleared),
            (Some(pst(10)), w(11)),
            (Some(pst(10)), pst(11)),
            (Some(PsmCleared), Fenced),
            (Some(PsmCleared), w(1)),
            (Some(Drained), w(-1)),
        ];
        for (prev, next) in refused {
            assert!(next.check_after(*prev).is_err(), "{prev:?} -> {next:?}");
        }
    }

    #[test]
    fn advance_tracks_the_barrier_offset() {
        let mut p = PartitionRecord::new("t", 0, 0);
        p.begin_failover("f", 1).unwrap();
        p.advance(FailoverStep::Fenced, 2).unwrap();
        p.advance(FailoverStep::Drained, 3).unwrap();
        p.advance(FailoverStep::BarrierWritten { offset: 7 }, 4)
            .unwrap();
        assert_eq!(p.barrier_offset, None);
        let err = p
            .advance(FailoverStep::BarrierPersisted { offset: 8 }, 5)
            .unwrap_err();
        assert_eq!(err.state, Stopping);
        assert!(err.to_string().contains("BARRIER_PERSISTED(offset 8)"));
        p.advance(FailoverStep::BarrierPersisted { offset: 7 }, 5)
            .unwrap();
        assert_eq!(p.barrier_offset, Some(7));
        p.advance(FailoverStep::PsmCleared, 6).unwrap();
        assert_eq!(p.barrier_offset, Some(7));
        assert!(p.validate().is_ok());
    }

    #[test]
    fn complete_is_refused_without_a_persisted_barrier() {
        use FailoverStep::*;
        let steps = [
            Fenced,
            Drained,
            BarrierWritten { offset: 9 },
            BarrierPersisted { offset: 9 },
        ];
        let mut p = PartitionRecord::new("t", 0, 0);
        p.begin_failover("f", 1).unwrap();
        let err = p.complete(2).unwrap_err();
        assert!(err.reason.contains("not persisted"), "{err}");
        for step in steps {
            p.advance(step, 2).unwrap();
            let err = p.complete(3).unwrap_err();
            assert_eq!((err.from, err.to), (Stopping, Stopped));
            assert_eq!(p.state, Stopping);
        }
        // Hand-built: PSM_CLEARED but no offset — still refused.
        let mut forged = p.clone();
        forged.step = Some(PsmCleared);
        forged.barrier_offset = None;
        assert!(forged
            .complete(4)
            .unwrap_err()
            .reason
            .contains("not persisted"));
        p.advance(PsmCleared, 4).unwrap();
        p.complete(5).unwrap();
        assert_eq!(p.state, Stopped);
        // From FAILED it must be retried first.
        let mut f = PartitionRecord::new("t", 1, 0);
        f.begin_failover("f", 1).unwrap();
        f.fail("x", 2).unwrap();
        assert!(f.complete(3).is_err());
    }

    fn mirror() -> MirrorRecord {
        let mut m = MirrorRecord::new(
            "dr",
            [
                ("orders".to_owned(), 0),
                ("orders".to_owned(), 1),
                ("pay".to_owned(), 0),
            ],
            10,
        );
        m.failover_id = Some("f1".into());
        m.started_ms = Some(11);
        let p0 = m.partition_mut("orders", 0).unwrap();
        p0.begin_failover("f1", 12).unwrap();
        p0.advance(FailoverStep::Fenced, 13).unwrap();
        p0.producers_expired = 4;
        let p1 = m.partition_mut("orders", 1).unwrap();
        p1.begin_failover("f1", 12).unwrap();
        p1.fail("not leader", 13).unwrap();
        m.partitions[2] = {
            let mut s = stopped_record();
            s.topic = "pay".into();
            s.partition = 0;
            s.failover_id = Some("f1".into());
            s
        };
        m
    }

    #[test]
    fn encode_decode_round_trip_and_format() {
        let m = mirror();
        assert_eq!(m.validate(), Ok(()));
        let bytes = m.encode();
        let text = std::str::from_utf8(&bytes).unwrap();
        assert!(text.starts_with("{\"version\":1,\"name\":\"dr\""), "{text}");
        assert!(text.contains("\"state\":\"STOPPED\""));
        assert!(text.contains("\"step\":{\"step\":\"PSM_CLEARED\"}"));
        assert_eq!(MirrorRecord::decode(&bytes).unwrap(), m);
        let fresh = MirrorRecord::new("m", [("t".to_owned(), 0)], 1);
        assert_eq!(MirrorRecord::decode(&fresh.encode()).unwrap(), fresh);
    }

    #[test]
    fn a_control_barrier_s_identity_round_trips_and_older_files_without_it_still_load() {
        let mut m = mirror();
        let p = m.partition_mut("pay", 0).unwrap();
        p.barrier_kind = Some(BarrierKind::Control);
        p.barrier_producer = Some(BarrierProducer {
            producer_id: 1000,
            producer_epoch: 0,
        });
        p.last_mirrored_offset = Some(41);
        let bytes = m.encode();
        let text = std::str::from_utf8(&bytes).unwrap();
        assert!(text.contains("\"barrier_kind\":\"control\""), "{text}");
        assert!(
            text.contains("\"barrier_producer\":{\"producer_id\":1000,\"producer_epoch\":0}"),
            "{text}"
        );
        assert!(text.contains("\"last_mirrored_offset\":41"), "{text}");
        assert_eq!(MirrorRecord::decode(&bytes).unwrap(), m);
        // A file written before the barrier's identity was recorded (no such fields) loads,
        // with none set: its barriers are data batches.
        let old = mirror().encode();
        assert!(!std::str::from_utf8(&old).unwrap().contains("barrier_kind"));
        let loaded = MirrorRecord::decode(&old).unwrap();
        let p = loaded.partition("pay", 0).unwrap();
        assert_eq!(
            (p.barrier_kind, p.barrier_producer, p.last_mirrored_offset),
            (None, None, None)
        );
        // A control barrier without its producer id is impossible.
        let mut bad = mirror();
        bad.partition_mut("pay", 0).unwrap().barrier_kind = Some(BarrierKind::Control);
        assert!(MirrorRecord::decode(&bad.encode()).is_err());
        // A new failover and a failback forget the previous barrier's identity.
        let mut p = m.partition("pay", 0).unwrap().clone();
        p.start_mirroring(true, 20).unwrap();
        assert_eq!(
            (p.barrier_kind, p.barrier_producer, p.last_mirrored_offset),
            (None, None, None)
        );
    }

    fn edit(f: impl FnOnce(&mut serde_json::Value)) -> Vec<u8> {
        let mut v: serde_json::Value = serde_json::from_slice(&mirror().encode()).unwrap();
        f(&mut v);
        serde_json::to_vec(&v).unwrap()
    }

    #[test]
    fn decode_rejects_corrupt_and_unknown_input() {
        let good = mirror().encode();
        for cut in [0, 1, good.len() / 2, good.len() - 1] {
            assert!(
                matches!(
                    MirrorRecord::decode(&good[..cut]),
                    Err(StateDecodeError::Json(_))
                ),
                "cut {cut}"
            );
        }
        assert!(matches!(
            MirrorRecord::decode(b"[1,2]"),
            Err(StateDecodeError::Json(_))
        ));
        assert!(matches!(
            MirrorRecord::decode(b"\xff\xfe"),
            Err(StateDecodeError::Json(_))
        ));
        let no_version = edit(|v| {
            v.as_object_mut().unwrap().remove("version");
        });
        assert_eq!(
            MirrorRecord::decode(&no_version),
            Err(StateDecodeError::MissingVersion)
        );
        let v2 = edit(|v| v["version"] = 2.into());
        assert_eq!(
            MirrorRecord::decode(&v2),
            Err(StateDecodeError::UnsupportedVersion(2))
        );
        let v_str = edit(|v| v["version"] = "1".into());
        assert!(matches!(
            MirrorRecord::decode(&v_str),
            Err(StateDecodeError::BadVersion(_))
        ));
        let unknown_field = edit(|v| v["extra"] = true.into());
        assert!(matches!(
            MirrorRecord::decode(&unknown_field),
            Err(StateDecodeError::Json(_))
        ));
        let missing_null_field = edit(|v| {
            v["partitions"][0]
                .as_object_mut()
                .unwrap()
                .remove("last_error");
        });
        assert!(matches!(
            MirrorRecord::decode(&missing_null_field),
            Err(StateDecodeError::Json(_))
        ));
        let bad_state = edit(|v| v["partitions"][0]["state"] = "RUNNING".into());
        assert!(matches!(
            MirrorRecord::decode(&bad_state),
            Err(StateDecodeError::Json(_))
        ));
        let bad_step = edit(|v| v["partitions"][0]["step"] = serde_json::json!({"step": "JUMPED"}));
        assert!(matches!(
            MirrorRecord::decode(&bad_step),
            Err(StateDecodeError::Json(_))
        ));
    }

    #[test]
    fn decode_rejects_impossible_combinations() {
        let cases: Vec<(&str, Vec<u8>)> = vec![
            (
                "STOPPED without barrier",
                edit(|v| v["partitions"][2]["barrier_offset"] = serde_json::Value::Null),
            ),
            (
                "STOPPED before PSM cleared",
                edit(|v| {
                    v["partitions"][2]["step"] =
                        serde_json::json!({"step": "BARRIER_WRITTEN", "offset": 500});
                    v["partitions"][2]["barrier_offset"] = serde_json::Value::Null;
                }),
            ),
            (
                "MIRRORING with a step",
                edit(|v| {
                    v["partitions"][0]["state"] = "MIRRORING".into();
                }),
            ),
            (
                "STOPPING without failover id",
                edit(|v| v["partitions"][0]["failover_id"] = serde_json::Value::Null),
            ),
            (
                "FAILED without error",
                edit(|v| v["partitions"][1]["last_error"] = serde_json::Value::Null),
            ),
            (
                "barrier offset before persisted",
                edit(|v| v["partitions"][0]["barrier_offset"] = 3.into()),
            ),
            (
                "persisted offset mismatch",
                edit(|v| {
                    v["partitions"][2]["step"] =
                        serde_json::json!({"step": "BARRIER_PERSISTED", "offset": 501})
                }),
            ),
            (
                "duplicate partition",
                edit(|v| {
                    let p = v["partitions"][0].clone();
                    v["partitions"].as_array_mut().unwrap().push(p);
                }),
            ),
            (
                "foreign failover id",
                edit(|v| v["partitions"][0]["failover_id"] = "f2".into()),
            ),
            (
                "completed with partitions not stopped",
                edit(|v| v["completed_ms"] = 99.into()),
            ),
            (
                "failover without start time",
                edit(|v| v["started_ms"] = serde_json::Value::Null),
            ),
            (
                "negative partition",
                edit(|v| v["partitions"][0]["partition"] = (-1).into()),
            ),
            ("empty name", edit(|v| v["name"] = "".into())),
        ];
        for (name, bytes) in cases {
            assert!(
                matches!(
                    MirrorRecord::decode(&bytes),
                    Err(StateDecodeError::Inconsistent(_))
                ),
                "{name}: {:?}",
                MirrorRecord::decode(&bytes)
            );
        }
    }

    fn arb_partition(failover: Option<String>) -> impl Strategy<Value = PartitionRecord> {
        (
            "[a-z._-]{1,12}",
            0i32..1000,
            0usize..12,
            0i64..1_000_000,
            any::<u32>(),
            proptest::option::of(".{0,20}"),
            any::<i64>(),
        )
            .prop_map(move |(topic, partition, path, offset, expired, err, now)| {
                let mut p = PartitionRecord::new(topic, partition, now);
                let id = failover.clone();
                // Walk a prefix of a legal history; `path` picks how far.
                let script: [&dyn Fn(&mut PartitionRecord) -> bool; 11] = [
                    &|p| p.pause(now).is_ok(),
                    &|p| p.resume(now).is_ok(),
                    &|p| {
                        id.as_ref()
                            .is_some_and(|id| p.begin_failover(id.as_str(), now).is_ok())
                    },
                    &|p| p.advance(FailoverStep::Fenced, now).is_ok(),
                    &|p| p.advance(FailoverStep::Drained, now).is_ok(),
                    &|p| {
                        p.advance(FailoverStep::BarrierWritten { offset }, now)
                            .is_ok()
                    },
                    &|p| {
                        p.fail(err.clone().unwrap_or_default(), now)
                            .and_then(|_| p.retry(now))
                            .is_ok()
                    },
                    &|p| {
                        p.advance(FailoverStep::BarrierPersisted { offset }, now)
                            .is_ok()
                    },
                    &|p| p.advance(FailoverStep::PsmCleared, now).is_ok(),
                    &|p| p.complete(now).is_ok(),
                    &|p| p.fail(err.clone().unwrap_or_default(), now).is_ok(),
                ];
                for step in script.iter().take(path) {
                    if !step(&mut p) {
                        break;
                    }
                }
                p.producers_expired = expired;
                p
            })
    }

    fn arb_mirror() -> impl Strategy<Value = MirrorRecord> {
        (
            "[a-zA-Z0-9 ._-]{1,16}",
            proptest::option::of("[a-f0-9-]{1,36}"),
            any::<i64>(),
        )
            .prop_flat_map(|(name, failover, started)| {
                proptest::collection::vec(arb_partition(failover.clone()), 0..6).prop_map(
                    move |mut parts| {
                        let mut seen = HashSet::new();
                        parts.retain(|p| seen.insert((p.topic.clone(), p.partition)));
                        MirrorRecord {
                            name: name.clone(),
                            started_ms: failover.as_ref().map(|_| started),
                            failover_id: failover.clone(),
                            completed_ms: None,
                            partitions: parts,
                        }
                    },
                )
            })
    }

    proptest! {
        #[test]
        fn round_trip_prop(m in arb_mirror()) {
            prop_assert_eq!(m.validate(), Ok(()));
            let mut m = m;
            if m.failover_id.is_some() && !m.partitions.is_empty() && m.all_stopped() {
                m.completed_ms = Some(1);
            }
            prop_assert_eq!(MirrorRecord::decode(&m.encode()).unwrap(), m);
        }

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = MirrorRecord::decode(&bytes);
        }

        #[test]
        fn decode_of_mutated_json_never_panics(at in 0usize..2000, byte in any::<u8>()) {
            let mut b = mirror().encode();
            let at = at % b.len();
            b[at] = byte;
            if let Ok(m) = MirrorRecord::decode(&b) {
                prop_assert_eq!(m.validate(), Ok(()));
            }
        }
    }
}
