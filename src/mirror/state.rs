//! Partition states of a mirror, failover progress, and their persistence format.
//!
//! Owns: [`PartitionState`] and its transition rules (docs/architecture.md#partition-states),
//! [`FailoverStep`] and its ordering rules (docs/architecture.md#the-barrier), the records the
//! controller persists ([`PartitionRecord`]; [`MirrorRecord`] in `state/mirror_record.rs`) and
//! their versioned JSON encoding.
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
//! | STOPPING  | MIRRORING | abandon only, [`PartitionRecord::abandon_adopted`]: a failover another instance drives, failed back or replaced before it completed here (review G4) |
//! | FAILED    | MIRRORING | abandon only, as above                                       |
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
//! "completed_ms":…,"partitions":[…]}`; these fields are always written and required on read
//! (`null` for absent values); `adopted_from` and `"paused":true` (a pause of the whole mirror,
//! which partitions added later join) are written only when set and default to absent and
//! `false`; unknown fields are rejected. [`MirrorRecord::decode`] rejects
//! corrupt JSON, a missing or unknown version, and impossible combinations (e.g. STOPPED without
//! a barrier offset) — it never guesses and never panics.

mod barrier_record;
mod failover_step;
mod mirror_record;

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};
use thiserror::Error;

pub use barrier_record::{AbortedTransaction, BarrierKind, BarrierProducer};
pub use failover_step::{FailoverStep, StepError};
pub use mirror_record::{MirrorRecord, StateDecodeError};

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
    /// Only through abandoning a failover this instance adopted from the one driving it, once
    /// the state topic shows it failed back or replaced ([`PartitionRecord::abandon_adopted`]);
    /// the caller checks that the failover is adopted, never this instance's own.
    AbandonAdopted,
}

/// Every allowed transition (the table in the module doc).
pub const TRANSITIONS: [(PartitionState, PartitionState, TransitionKind); 10] = {
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
        (Stopping, Mirroring, AbandonAdopted),
        (Failed, Mirroring, AbandonAdopted),
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
            TransitionKind::AbandonAdopted => Err(TransitionError {
                from: self,
                to,
                reason: "a failover in progress cannot be undone; it completes or fails (only one adopted from another instance is abandoned, when that instance failed it back)",
            }),
        }
    }

    /// Abandoning an adopted failover: STOPPING or FAILED → MIRRORING.
    pub fn abandon_adopted(self) -> Result<PartitionState, TransitionError> {
        let to = PartitionState::Mirroring;
        match self.rule(to)? {
            TransitionKind::AbandonAdopted => Ok(to),
            _ => Err(TransitionError {
                from: self,
                to,
                reason: "only a partition in failover (STOPPING or FAILED) abandons it",
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
            TransitionKind::Ordinary | TransitionKind::AbandonAdopted => Err(TransitionError {
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
    /// The mirrored transactions the failover found open in the partition and aborted before
    /// its barrier (absent in files of older versions).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub transactions_aborted: Vec<AbortedTransaction>,
    /// When the current failover reached each of its steps (ms since the epoch), by name:
    /// `STOPPING` (the call), every [`FailoverStep`], `STOPPED` (absent in files of older
    /// versions; cleared when mirroring starts again).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub step_ms: BTreeMap<String, i64>,
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
            transactions_aborted: Vec::new(),
            step_ms: BTreeMap::new(),
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
        self.transactions_aborted.clear();
        self.producers_expired = 0;
        self.last_error = None;
        self.updated_ms = now_ms;
        self.step_ms.clear();
        self.step_ms
            .insert(PartitionState::Stopping.as_str().to_string(), now_ms);
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
        self.step_ms.insert(step.as_str().to_string(), now_ms);
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
        self.step_ms
            .insert(PartitionState::Stopped.as_str().to_string(), now_ms);
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
        self.forget_failover(now_ms);
        Ok(())
    }

    /// Abandon the failover this partition is in (STOPPING or FAILED → MIRRORING): another
    /// instance drives it, and the state topic shows it failed back or replaced before it
    /// completed here (review G4). The partition was never writable here, so nothing written
    /// through this instance lies after the barrier. Clears the failover fields. The caller
    /// checks that the failover is adopted: one this instance drives is never undone.
    pub fn abandon_adopted(&mut self, now_ms: i64) -> Result<(), TransitionError> {
        self.state = self.state.abandon_adopted()?;
        self.forget_failover(now_ms);
        Ok(())
    }

    /// Clear the failover fields (back to MIRRORING).
    fn forget_failover(&mut self, now_ms: i64) {
        self.failover_id = None;
        self.step = None;
        self.step_ms.clear();
        self.barrier_offset = None;
        self.barrier_topic_id = None;
        self.barrier_kind = None;
        self.barrier_producer = None;
        self.last_mirrored_offset = None;
        self.transactions_aborted.clear();
        self.producers_expired = 0;
        self.last_error = None;
        self.updated_ms = now_ms;
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

#[cfg(test)]
#[path = "state_tests.rs"]
mod tests;
