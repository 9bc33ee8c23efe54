//! A partition's failover steps ([`FailoverStep`]) and their ordering rules (the module doc of
//! `state.rs` states them).
//!
//! Owns: the step enum, its JSON form and [`FailoverStep::check_after`]. Must not touch: the
//! partition states (`state.rs`).

use std::fmt;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::PartitionState;

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
