//! One tracked partition: its producer state and where that state stands in its lifecycle —
//! not yet rebuilt, being rebuilt, ready, or ready but wanting a rebuild.
//!
//! Owns: the lifecycle of one partition's producer state (the private `Phase`, table below);
//! applying one broker outcome to it (classify, compare with the broker, follow the broker); the
//! outcomes buffered while the partition is not rebuilt and their installation with a rebuilt
//! state; clearing the state at the partition's barrier; what a snapshot and a reader get to see.
//!
//! Must not touch: locks and the map of tracked partitions (`registry.rs` holds each slot behind
//! a mutex), counters and logs (the registry counts and logs what [`PartitionSlot::apply`]
//! returns), the log, sockets, disk, clocks (callers pass the instant).
//!
//! # Phases
//!
//! | phase      | classifications | outcomes                               | wants a rebuild |
//! |------------|-----------------|----------------------------------------|-----------------|
//! | UNBUILT    | not meaningful  | appends buffered                       | yes, at once    |
//! | REBUILDING | not meaningful  | appends buffered                       | yes             |
//! | READY      | meaningful      | classified, compared, state follows    | no              |
//! | STALE{why} | meaningful      | classified, compared, state follows    | yes             |
//!
//! UNBUILT is a partition no rebuild has begun for since the gateway started. REBUILDING is a
//! partition whose rebuild began and whose rebuilt state is not installed yet: the rebuild is
//! under way, or it failed and is retried. STALE is a rebuilt partition that disagreed with the
//! broker (`why` = Diverged), whose outcome of a batch is unknown (`why` = OutcomeUnknown), or
//! whose log holds batches another instance wrote (`why` = WrittenElsewhere: this instance took
//! the agent over from another, whose mirror writes it never saw); it keeps following the
//! broker until it is rebuilt. A partition is rebuilt again at most once per
//! [`MIN_REBUILD_INTERVAL`] after its last installed rebuild.
//!
//! # Transitions (the only ones)
//!
//! | # | from                     | event                                          | to                | effect, result |
//! |---|--------------------------|------------------------------------------------|-------------------|----------------|
//! | 1 | UNBUILT                  | [`begin_rebuild`](PartitionSlot::begin_rebuild)  | REBUILDING        | buffer dropped (the rebuild reads the log) |
//! | 2 | REBUILDING               | `begin_rebuild` (retry after a failed rebuild) | REBUILDING        | buffer dropped |
//! | 3 | READY                    | `begin_rebuild`                                | REBUILDING        | |
//! | 4 | STALE                    | `begin_rebuild`                                | REBUILDING        | |
//! | 5 | REBUILDING               | [`finish_rebuild`](PartitionSlot::finish_rebuild) | READY (STALE{why} if it missed something, rows 18–19, 26) | rebuilt state installed, then the buffered appends above what the rebuild read, in offset order |
//! | 6 | UNBUILT, READY, STALE    | `finish_rebuild`                               | (unchanged)       | [`SlotError::NotRebuilding`] |
//! | 7 | UNBUILT, REBUILDING      | outcome Appended                               | (same)            | buffered; `Buffered` |
//! | 8 | UNBUILT, REBUILDING      | outcome Appended, buffer full                  | (same)            | buffer dropped; `Buffered` (REBUILDING: row 19) |
//! | 9 | UNBUILT, REBUILDING      | outcome Refused                                | (same)            | nothing; `Buffered` |
//! | 10 | READY                   | outcome the state predicted                    | READY             | state follows; the verdict's result |
//! | 11 | READY, STALE            | outcome Appended at or below what the state reflects | (same)      | nothing applied; `Accepted` |
//! | 12 | READY                   | outcome the state did not predict              | STALE{Diverged}   | state follows the broker; `Diverged` |
//! | 13 | READY                   | outcome Unknown (or REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS_AFTER_APPEND) | STALE{OutcomeUnknown} | `UnknownOutcome` |
//! | 14 | READY                   | [`mark_outcome_unknown`](PartitionSlot::mark_outcome_unknown) (an `acks=0` produce) | STALE{OutcomeUnknown} | |
//! | 15 | STALE                   | any outcome, `mark_outcome_unknown`            | STALE (first `why` kept) | as from READY |
//! | 16 | any                     | [`clear_at_barrier`](PartitionSlot::clear_at_barrier) | (same)     | producers cleared, barrier set, applied through ≥ barrier |
//! | 17 | UNBUILT                 | outcome Unknown, `mark_outcome_unknown`        | UNBUILT           | nothing (the rebuild to come reads the log after it); `Buffered` |
//! | 18 | REBUILDING              | outcome Unknown, `mark_outcome_unknown`        | REBUILDING, missed | `finish_rebuild` installs as STALE{OutcomeUnknown}; `Buffered` |
//! | 19 | REBUILDING              | outcome Appended, buffer full                  | REBUILDING, missed | buffer dropped, as row 18 |
//! | 20 | REBUILDING, missed      | `begin_rebuild` (retry)                        | REBUILDING        | a new read of the log: missed forgotten |
//! | 21 | UNBUILT, REBUILDING     | [`apply_marker`](PartitionSlot::apply_marker) (a marker the agent wrote at a known offset) | (same) | buffered with the appends (buffer full: as row 8); `Buffered` |
//! | 22 | READY, STALE            | `apply_marker` at or below what the state reflects | (same)        | nothing applied; `Accepted` |
//! | 23 | READY                   | `apply_marker` the state accepts               | READY             | transaction closed; `Accepted` |
//! | 24 | READY                   | `apply_marker` the state refuses (the broker appended it) | STALE{Diverged} | state follows the broker; `Diverged` |
//! | 25 | READY                   | [`mark_written_elsewhere`](PartitionSlot::mark_written_elsewhere) (this instance took the agent over) | STALE{WrittenElsewhere} | |
//! | 26 | UNBUILT, REBUILDING, STALE | `mark_written_elsewhere`                    | UNBUILT; REBUILDING, missed; STALE (first `why` kept) | as rows 17, 18, 15: a rebuild under way may have read the log before the other instance's last batch |
//!
//! How a partition becomes ready again after a diverged verdict: row 12 makes it STALE, the
//! registry's maintenance picks it once [`MIN_REBUILD_INTERVAL`] has passed since its last
//! rebuild (row 4), reads the log (`rebuild.rs`), and row 5 installs the result: READY. A failed
//! rebuild leaves it REBUILDING and is retried (row 2). An outcome the partition cannot buffer
//! (unknown, or a full buffer) asks for nothing more before a rebuild begins (row 17: the
//! rebuild reads the log after it), but during a rebuild it may lie past what the rebuild read,
//! so that rebuild is installed as STALE and another one follows (rows 18–19;
//! docs/psm.md#readiness-and-rebuilds).
//!
//! Snapshots, expiry and transaction settling do not change the phase; snapshots and settling
//! are taken from rebuilt (READY, STALE) partitions only.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::protocol::batch::BatchHeader;

mod buffered;
mod view;

use buffered::Buffered;
pub use buffered::{apply_buffered, Appended, AppendedMarker};
pub use view::{ClearedProducer, OpenTxn, SlotView};

use super::metrics::BatchResult;
use super::partition::BrokerTxnState;
use super::{PartitionPsm, ProducerEntry, Verdict};

/// Rebuilds of one partition are at least this far apart (review F14): a stream of
/// disagreements (e.g. local producers colliding with mirrored ids after a failover) costs one
/// rebuild per interval, not one per batch. Until then the partition goes on following the
/// broker's answers.
pub const MIN_REBUILD_INTERVAL: Duration = Duration::from_secs(5);

/// Batches applied while a partition is not rebuilt are buffered up to this many; beyond it the
/// buffer is dropped (during a rebuild the rebuilt state is then installed as STALE).
pub(super) const MAX_BUFFERED_WHILE_REBUILDING: usize = 10_000;

/// The broker's error codes that leave the outcome unknown.
pub(super) const REQUEST_TIMED_OUT: i16 = 7;
pub(super) const NOT_ENOUGH_REPLICAS_AFTER_APPEND: i16 = 20;

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

/// Why a rebuilt partition wants a rebuild.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StaleReason {
    /// The PSM's classification disagreed with the broker.
    Diverged,
    /// The broker's outcome of a batch is unknown (a timeout, an unreadable answer, `acks=0`).
    OutcomeUnknown,
    /// Another instance appended to the partition (it ran the agent before this one took it
    /// over): the state lacks what went through there (defect P1).
    WrittenElsewhere,
}

/// A transition the table in the module doc does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SlotError {
    #[error(
        "no rebuild was begun (the partition is {phase}), so no rebuilt state can be installed"
    )]
    NotRebuilding { phase: &'static str },
}

/// Where the partition's state stands (the table in the module doc).
#[derive(Debug)]
enum Phase {
    Unbuilt {
        buffered: Buffered,
    },
    /// `missed`: something the rebuild may have read past and could not buffer (an unknown
    /// outcome, appends dropped with a full buffer, another instance's writes): installed as
    /// STALE for the first reason.
    Rebuilding {
        buffered: Buffered,
        missed: Option<StaleReason>,
    },
    Ready,
    Stale {
        why: StaleReason,
    },
}

impl Phase {
    fn name(&self) -> &'static str {
        match self {
            Phase::Unbuilt { .. } => "UNBUILT",
            Phase::Rebuilding { .. } => "REBUILDING",
            Phase::Ready => "READY",
            Phase::Stale { .. } => "STALE",
        }
    }
}

/// A state a rebuild read from the snapshot and the log, for [`PartitionSlot::finish_rebuild`].
#[derive(Debug)]
pub struct Rebuilt {
    pub psm: PartitionPsm,
    /// Offset the log was read from.
    pub from_offset: i64,
    /// Last offset of the log the rebuild read (-1: none).
    pub read_through: i64,
    /// Whether a snapshot was the starting point.
    pub from_snapshot: bool,
    /// The barrier the rebuild cleared the state at (what `begin_rebuild` returned).
    pub barrier: Option<i64>,
}

/// One tracked partition.
pub struct PartitionSlot {
    /// The producer state.
    psm: PartitionPsm,
    phase: Phase,
    /// Highest log offset reflected in `psm` (-1: none). Outcomes of different connections
    /// arrive in any order, so batches below it may still be on their way: it is not a mark
    /// below which everything is known (see `log_read_through`).
    applied_through: i64,
    /// Last offset of the log the last rebuild read (-1: none): every batch at or below it is in
    /// `psm` already, so an outcome at or below it (answered after the rebuild read it) is not
    /// applied again.
    log_read_through: i64,
    /// Changed since the last snapshot.
    dirty: bool,
    /// The partition's own barrier: nothing before it counts (a rebuild clears the state there).
    barrier_offset: Option<i64>,
    /// When the last rebuild was installed: the next one waits [`MIN_REBUILD_INTERVAL`].
    last_rebuilt: Option<Instant>,
}

impl PartitionSlot {
    /// A partition no rebuild has begun for (UNBUILT).
    pub(super) fn new() -> Self {
        PartitionSlot {
            psm: PartitionPsm::new(),
            phase: Phase::Unbuilt {
                buffered: Vec::new(),
            },
            applied_through: -1,
            log_read_through: -1,
            dirty: false,
            barrier_offset: None,
            last_rebuilt: None,
        }
    }

    /// The producer state (read only).
    pub fn psm(&self) -> &PartitionPsm {
        &self.psm
    }

    /// Rebuilt (READY or STALE): classifications are meaningful.
    pub fn is_ready(&self) -> bool {
        matches!(self.phase, Phase::Ready | Phase::Stale { .. })
    }

    /// Highest log offset reflected in the state (-1: none).
    pub fn applied_through(&self) -> i64 {
        self.applied_through
    }

    /// What a reader sees of the slot.
    pub fn view(&self) -> SlotView {
        SlotView {
            ready: self.is_ready(),
            wants_rebuild: !matches!(self.phase, Phase::Ready),
            stale: match self.phase {
                Phase::Stale { why } => Some(why),
                _ => None,
            },
            applied_through: self.applied_through,
        }
    }

    /// Whether the partition wants a rebuild at `now`: not READY, and (once rebuilt) at least
    /// [`MIN_REBUILD_INTERVAL`] after the last installed rebuild.
    pub fn wants_rebuild_at(&self, now: Instant) -> bool {
        !matches!(self.phase, Phase::Ready)
            && self
                .last_rebuilt
                .is_none_or(|t| now.saturating_duration_since(t) >= MIN_REBUILD_INTERVAL)
    }

    /// Outcomes at or below this offset are already reflected in `psm`: the log the last rebuild
    /// read, and everything before the partition's own barrier.
    fn reflected_through(&self) -> i64 {
        self.log_read_through.max(self.barrier_offset.unwrap_or(-1))
    }

    /// Record the partition's own barrier offset (a rebuild clears the state there).
    pub fn set_barrier(&mut self, offset: i64) {
        self.barrier_offset = Some(offset);
    }

    /// Rows 1–4: a rebuild begins; outcomes are buffered from here until it is installed.
    /// Returns the partition's barrier, where the rebuild clears the state.
    pub fn begin_rebuild(&mut self) -> Option<i64> {
        self.phase = match std::mem::replace(&mut self.phase, Phase::Ready) {
            Phase::Unbuilt { mut buffered } | Phase::Rebuilding { mut buffered, .. } => {
                buffered.clear();
                Phase::Rebuilding {
                    buffered,
                    missed: None,
                }
            }
            Phase::Ready | Phase::Stale { .. } => Phase::Rebuilding {
                buffered: Vec::new(),
                missed: None,
            },
        };
        self.barrier_offset
    }

    /// Rows 5–6: install a rebuilt state, then the outcomes buffered since the rebuild began.
    /// The log before `from_offset` is gone (or cleared at the barrier) when the rebuild did not
    /// start from a snapshot: producers the previous state knew only from there are still held
    /// by the broker and are kept (review F11e). Returns how many were kept.
    pub fn finish_rebuild(&mut self, rebuilt: Rebuilt, now: Instant) -> Result<usize, SlotError> {
        let buffered = match std::mem::replace(&mut self.phase, Phase::Ready) {
            Phase::Rebuilding { buffered, missed } => {
                if let Some(why) = missed {
                    self.phase = Phase::Stale { why };
                }
                buffered
            }
            other => {
                let phase = other.name();
                self.phase = other;
                return Err(SlotError::NotRebuilding { phase });
            }
        };
        let Rebuilt {
            mut psm,
            from_offset,
            read_through,
            from_snapshot,
            barrier,
        } = rebuilt;
        let through = apply_buffered(&mut psm, buffered, read_through);
        let kept = if !from_snapshot && from_offset > 0 {
            psm.keep_removed_producers(&self.psm, from_offset, barrier.unwrap_or(-1))
        } else {
            0
        };
        self.psm = psm;
        self.applied_through = through;
        self.log_read_through = read_through;
        self.dirty = true;
        self.last_rebuilt = Some(now);
        Ok(kept)
    }

    /// Rows 14, 15, 17, 18: the outcome of a batch will never be known (an `acks=0` produce).
    pub fn mark_outcome_unknown(&mut self) {
        self.missed_by_rebuild(StaleReason::OutcomeUnknown);
        self.go_stale(StaleReason::OutcomeUnknown);
    }

    /// Rows 25, 26: this instance took the agent over; the log holds batches another instance
    /// appended, which the state never saw.
    pub fn mark_written_elsewhere(&mut self) {
        self.missed_by_rebuild(StaleReason::WrittenElsewhere);
        self.go_stale(StaleReason::WrittenElsewhere);
    }

    /// Rows 18, 19, 26: a rebuild under way may already have read past a batch it cannot
    /// buffer, so its result is installed as STALE (the first reason kept). Before a rebuild
    /// begins (UNBUILT) nothing is needed: the rebuild to come reads the log after it.
    fn missed_by_rebuild(&mut self, why: StaleReason) {
        if let Phase::Rebuilding { missed, .. } = &mut self.phase {
            missed.get_or_insert(why);
        }
    }

    /// READY becomes STALE; every other phase already wants a rebuild and keeps its reason.
    fn go_stale(&mut self, why: StaleReason) {
        if let Phase::Ready = self.phase {
            self.phase = Phase::Stale { why };
        }
    }

    /// Rows 7–15: classify `header` against the state, compare with the broker's `outcome`,
    /// follow the broker. One producer's outcomes must be applied in the order the broker
    /// appended them; outcomes of different connections may come in any order.
    pub fn apply(&mut self, header: &BatchHeader, outcome: BrokerOutcome) -> BatchResult {
        let outcome = match outcome {
            BrokerOutcome::Refused { error_code }
                if error_code == REQUEST_TIMED_OUT
                    || error_code == NOT_ENOUGH_REPLICAS_AFTER_APPEND =>
            {
                BrokerOutcome::Unknown { error_code }
            }
            o => o,
        };
        if let Phase::Unbuilt { buffered } | Phase::Rebuilding { buffered, .. } = &mut self.phase {
            let lost = match outcome {
                BrokerOutcome::Appended { base_offset } => {
                    if buffered.len() >= MAX_BUFFERED_WHILE_REBUILDING {
                        buffered.clear();
                        true
                    } else {
                        buffered.push((base_offset, Appended::Batch(*header)));
                        false
                    }
                }
                BrokerOutcome::Unknown { .. } => true,
                BrokerOutcome::Refused { .. } => false,
            };
            if lost {
                self.missed_by_rebuild(StaleReason::OutcomeUnknown);
            }
            return BatchResult::Buffered;
        }
        if let BrokerOutcome::Unknown { .. } = outcome {
            self.go_stale(StaleReason::OutcomeUnknown);
            return BatchResult::UnknownOutcome;
        }
        if let BrokerOutcome::Appended { base_offset } = outcome {
            if base_offset <= self.reflected_through() {
                // Already in the state: the rebuild read it from the log (or it lies before the
                // partition's barrier, where nothing counts). Judging it against a state that
                // already holds it (and maybe later batches of its producer) would be wrong.
                return BatchResult::Accepted;
            }
        }
        let verdict = self.psm.classify(header);
        match (verdict, outcome) {
            (Verdict::Duplicate { first_offset, .. }, BrokerOutcome::Appended { base_offset }) => {
                if first_offset == base_offset {
                    BatchResult::Duplicate
                } else {
                    // The broker appended it, or acknowledged another cached copy.
                    self.go_stale(StaleReason::Diverged);
                    BatchResult::Diverged
                }
            }
            (v, BrokerOutcome::Appended { base_offset }) if v.appends() => {
                // Outcomes of other connections may already have moved `applied_through` past
                // this batch: the broker appended them later, but their answers were read first.
                match self.psm.append(header, base_offset) {
                    Ok(_) => {
                        self.applied_through = self
                            .applied_through
                            .max(header.last_offset_delta as i64 + base_offset);
                        self.dirty = true;
                        BatchResult::of(&v)
                    }
                    Err(_) => {
                        let _ = self.psm.replay(header, base_offset);
                        self.go_stale(StaleReason::Diverged);
                        BatchResult::Diverged
                    }
                }
            }
            (_, BrokerOutcome::Appended { base_offset }) => {
                // The PSM predicted a refusal; the broker appended. Follow the broker.
                let _ = self.psm.replay(header, base_offset);
                self.applied_through = self
                    .applied_through
                    .max(header.last_offset_delta as i64 + base_offset);
                self.dirty = true;
                self.go_stale(StaleReason::Diverged);
                BatchResult::Diverged
            }
            (v, BrokerOutcome::Refused { error_code }) => {
                if v.error_code() == error_code {
                    BatchResult::of(&v)
                } else if v.error_code() == 0 {
                    // Refused for a reason outside producer state (not leader, topic
                    // authorization, record too large, …): nothing appended, nothing to learn.
                    if matches!(error_code, 45 | 46 | 47 | 48 | 87 | 90) {
                        self.go_stale(StaleReason::Diverged);
                        BatchResult::Diverged
                    } else {
                        BatchResult::OtherError
                    }
                } else {
                    self.go_stale(StaleReason::Diverged);
                    BatchResult::Diverged
                }
            }
            (_, BrokerOutcome::Unknown { .. }) => BatchResult::UnknownOutcome,
        }
    }

    /// Rows 21–24: a transaction marker appended at `offset` (known to the mirror agent).
    pub fn apply_marker(&mut self, offset: i64, m: AppendedMarker) -> BatchResult {
        if let Phase::Unbuilt { buffered } | Phase::Rebuilding { buffered, .. } = &mut self.phase {
            if buffered.len() >= MAX_BUFFERED_WHILE_REBUILDING {
                buffered.clear();
                self.missed_by_rebuild(StaleReason::OutcomeUnknown);
            } else {
                buffered.push((offset, Appended::Marker(m)));
            }
            return BatchResult::Buffered;
        }
        if offset <= self.reflected_through() {
            return BatchResult::Accepted;
        }
        let applied = self.psm.apply_control(
            m.producer_id,
            m.epoch,
            m.marker,
            m.coordinator_epoch,
            offset,
            m.timestamp,
        );
        self.applied_through = self.applied_through.max(offset);
        self.dirty = true;
        match applied {
            Ok(_) => BatchResult::Accepted,
            Err(_) => {
                self.psm.replay_control(
                    m.producer_id,
                    m.epoch,
                    m.marker,
                    m.coordinator_epoch,
                    offset,
                    m.timestamp,
                );
                self.go_stale(StaleReason::Diverged);
                BatchResult::Diverged
            }
        }
    }

    /// Row 16: forget every producer at the partition's barrier; returns the producers cleared,
    /// without the control barrier's own producer id `own` (the gateway never writes data with
    /// it and no broker hands it out again).
    pub fn clear_at_barrier(&mut self, barrier: i64, own: Option<i64>) -> Vec<ClearedProducer> {
        let cleared: Vec<ClearedProducer> = self
            .psm
            .iter()
            .filter(|e| Some(e.producer_id()) != own)
            .map(|e| ClearedProducer {
                producer_id: e.producer_id(),
                epoch: e.epoch(),
                last_timestamp: e.last_timestamp(),
                coordinator_epoch: e.coordinator_epoch(),
            })
            .collect();
        self.psm.clear();
        self.barrier_offset = Some(barrier);
        self.applied_through = self.applied_through.max(barrier);
        self.dirty = true;
        cleared
    }

    /// The snapshot bytes of a rebuilt partition changed since its last snapshot (and the
    /// change is taken: see [`Self::snapshot_not_written`]); `None` otherwise.
    pub fn take_snapshot(&mut self) -> Option<Vec<u8>> {
        if !self.is_ready() || !self.dirty {
            return None;
        }
        self.dirty = false;
        Some(self.psm.encode_snapshot(self.applied_through))
    }

    /// The snapshot [`Self::take_snapshot`] gave could not be written: it is taken again next
    /// time.
    pub fn snapshot_not_written(&mut self) {
        self.dirty = true;
    }

    /// Remove producers whose last timestamp is older than `now_ms - horizon_ms`; returns how
    /// many.
    pub fn expire(&mut self, now_ms: i64, horizon_ms: i64) -> usize {
        let n = self.psm.expire(now_ms, horizon_ms);
        if n > 0 {
            self.dirty = true;
        }
        n
    }

    /// Producers with a transaction open in a rebuilt partition's state (none when not rebuilt).
    pub fn open_transactions(&self) -> Vec<OpenTxn> {
        if !self.is_ready() {
            return Vec::new();
        }
        self.psm
            .iter()
            .filter_map(|e| {
                Some((
                    e.producer_id(),
                    e.current_txn_first_offset()?,
                    e.last_data_offset(),
                ))
            })
            .collect()
    }

    /// Apply the broker's description of the producers in `seen` to a rebuilt partition's state
    /// (see [`PartitionPsm::settle_transaction`]); returns how many entries changed.
    pub fn settle_transactions(
        &mut self,
        seen: &[OpenTxn],
        broker: &HashMap<i64, BrokerTxnState>,
    ) -> usize {
        if !self.is_ready() {
            return 0;
        }
        let mut n = 0;
        for (pid, first, last) in seen {
            if let Some(b) = broker.get(pid) {
                if self.psm.settle_transaction(*pid, *first, *last, *b) {
                    n += 1;
                }
            }
        }
        if n > 0 {
            self.dirty = true;
        }
        n
    }

    /// A copy of every producer entry, for a reader.
    pub fn producers(&self) -> Vec<ProducerEntry> {
        self.psm.iter().cloned().collect()
    }
}

#[cfg(test)]
#[path = "slot_tests.rs"]
pub(super) mod tests;
