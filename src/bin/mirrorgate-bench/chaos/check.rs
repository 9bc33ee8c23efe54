//! The chaos run's checker: decides, from the history of client operations and the logs read
//! straight from both clusters' brokers once everything is quiet, whether the run kept
//! mirrorgate's promise (docs/guarantees.md). Pure: no I/O, so its rules are unit-tested on
//! hand-made histories.
//!
//! The rules, per partition of the mirrored topic, with `B` the barrier the instances report:
//! - **a barrier**: the log holds it where the instances say (the control batch of the reported
//!   producer id, or the data barrier record), and every instance reports the same one;
//! - **mirrored = a prefix of the source**: the source records before `B` are, in order, the
//!   first `L` records of the source's log (nothing lost inside, reordered or doubled); a
//!   planned failover leaves no source record behind (`L` = the source's length), an unplanned
//!   one leaves exactly the report's `rpo_records` when the report could count them (the source
//!   was reachable when the failover completed; with the source dead the report has no figure
//!   and the run prints the logs' count beside the agent's last known lag);
//! - **nothing mirrored after `B`**: no source record, no late mirror write, and no local record
//!   written under a producer id that mirrored traffic used, at an epoch not above the highest
//!   it mirrored (the producer-id collision that screening prevents: a higher epoch fences the
//!   mirrored state, as an epoch bump does), after `B`;
//! - **read-only until `B`**: no local write lands before `B`;
//! - **acknowledged means present once**: every acknowledged local record is in the log exactly
//!   once, at the offset acknowledged, after `B`; every acknowledged source record is in the
//!   source's log at its offset, and on the destination unless it is part of the RPO; a record
//!   whose outcome is unknown or failed is present at most once. Except a client's resend under
//!   a bumped epoch (two copies of one producer id, the second at a higher epoch and the one
//!   acknowledged): the client never learnt of the first, and Kafka cannot tell them apart
//!   across epochs. It is counted apart (`client_resends`), not a breach;
//! - **order**: each producer's records of a partition appear in the order it sent them;
//! - **read_committed**: what a `read_committed` consumer sees of the mirrored part is what it
//!   sees of the source (`committed.rs`);
//! - **groups never skip**: every record of the destination's log was read by the application's
//!   consumer group, on the source before the failover or through the gateways after it. A
//!   record read by neither is *skipped* when the group read past it on the destination (its
//!   offsets were moved beyond it), *unread* when the group never got that far by the end (it
//!   did not catch up). Records read twice are counted (`reread`), not a breach.
//!
//! With MirrorMaker 2 as the mirroring tool ([`Tool::MirrorMaker2`]) three rules change, for
//! what that tool does and mirrorgate does not promise otherwise: it copies at least once, so
//! further copies of a source record before `B` are counted (`tool_copies`), not duplicates,
//! and the prefix rule takes each record's first copy; its offsets are its own, so the report
//! has no RPO figure to compare (a planned failover must still leave no source record behind);
//! and it reads the source `read_uncommitted` and re-produces without transactions, so the
//! `read_committed` rule does not apply.
//!
//! Owns: those rules and the verdict's figures. Must not touch: how the history and the logs are
//! gathered (`clients.rs`, `logs.rs`).

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::plan::Mode;
use crate::group_member::Read;

pub(super) mod committed;
mod groups;

/// What copies the source to the destination through the gateways' mirror listeners.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Tool {
    /// The built-in agent: batches as they are, offsets kept, exactly once.
    Agent,
    /// MirrorMaker 2 (`mirroring: external`): re-produced under its own producer ids, at least
    /// once, offsets of the destination's own, transactions not kept.
    #[serde(rename = "mm2")]
    MirrorMaker2,
}

/// Where a client wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// To the source cluster (mirrored by the agent).
    Source,
    /// To the destination through a gateway's client listener, after the failover call.
    Local,
    /// Through a gateway's mirror listener after the failover call: a mirroring tool that lags.
    Late,
}

/// What a client learnt of one record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    Acked {
        partition: i32,
        offset: i64,
    },
    /// An error answer: written or not (a timeout, a retriable error given up on).
    Failed {
        reason: String,
    },
    /// No answer before the client stopped.
    Unknown,
}

/// One record a client tried to write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Op {
    pub client: String,
    pub origin: Origin,
    pub key: String,
    /// The record's number in its client's sequence (the `N` of `NAME-N`).
    pub n: u64,
    pub sent_ms: i64,
    pub answered_ms: Option<i64>,
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// One entry of a destination partition's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    Data {
        offset: i64,
        producer_id: i64,
        producer_epoch: i16,
        key: String,
        /// Written in a transaction (read_committed shows it once its COMMIT marker follows).
        transactional: bool,
    },
    /// A control batch's marker: COMMIT (`commit`) or ABORT.
    Control {
        offset: i64,
        producer_id: i64,
        commit: bool,
    },
    /// mirrorgate's data barrier record.
    DataBarrier { offset: i64 },
}

/// A record of a source partition's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceRecord {
    pub offset: i64,
    pub key: String,
}

/// A partition's barrier as the instances report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Barrier {
    pub offset: i64,
    /// The marker's producer id (a control barrier); `None`: the data barrier.
    pub producer_id: Option<i64>,
}

impl Barrier {
    /// Whether `log` holds this barrier: its marker (or the data barrier) at its offset.
    pub fn lies_in(&self, log: &[Entry]) -> bool {
        log.iter().any(|e| match (e, self.producer_id) {
            (
                Entry::Control {
                    offset,
                    producer_id,
                    ..
                },
                Some(pid),
            ) => *offset == self.offset && *producer_id == pid,
            (Entry::DataBarrier { offset }, None) => *offset == self.offset,
            _ => false,
        })
    }
}

/// What the checker reads.
pub struct Inputs<'a> {
    pub mode: Mode,
    pub tool: Tool,
    pub ops: &'a [Op],
    /// Per partition, the source's log (data records).
    pub source: &'a [Vec<SourceRecord>],
    /// Per partition, the source's log with its markers (for the transactions' rule).
    pub source_log: &'a [Vec<Entry>],
    /// Per partition, the destination's log.
    pub destination: &'a [Vec<Entry>],
    /// Per partition, the barrier each instance reports (one entry per instance).
    pub barriers: &'a [Vec<Option<Barrier>>],
    /// Per partition, the failover report's `rpo_records` (`None`: the report has no figure,
    /// as when the source was dead at completion).
    pub rpo: &'a [Option<i64>],
    /// What the application's consumer group read (`None`: no group in the workload).
    pub group: Option<GroupReads<'a>>,
}

/// What the application's consumer group read on each side.
#[derive(Clone, Copy)]
pub struct GroupReads<'a> {
    /// On the source, before the failover (source offsets).
    pub source: &'a [Read],
    /// Through the gateways, after the failover (destination offsets).
    pub destination: &'a [Read],
}

/// The checker's figures; `violations` describes the first few breaches.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct Verdict {
    pub operations: usize,
    pub acked: usize,
    pub lost: usize,
    pub duplicated: usize,
    pub order_violations: usize,
    pub after_barrier: usize,
    pub before_barrier: usize,
    pub barrier_missing: usize,
    pub rpo_mismatch: usize,
    pub mirror_divergence: usize,
    /// Acknowledged source records the failover left behind (part of the reported RPO).
    pub unmirrored_acked: usize,
    /// Records whose outcome was unknown or failed, found in the log (once).
    pub uncertain_present: usize,
    pub rpo_records: i64,
    /// Records of the destination's log the group read on neither side although it read past
    /// them on the destination (`None`: no group in the workload).
    pub skipped: Option<usize>,
    /// Records of the destination's log the group had not reached by the end.
    pub unread: Option<usize>,
    /// Records the group read more than once (both sides, or twice on one).
    pub reread: Option<usize>,
    /// Records whose `read_committed` visibility differs between the source and the mirrored
    /// part of the destination where it may not (`committed.rs`).
    pub committed_mismatch: usize,
    /// Records committed on the source whose commit an unplanned failover could not mirror.
    pub committed_unmirrored: usize,
    /// Further copies of source records the mirroring tool made before the barrier (MirrorMaker
    /// 2 copies at least once; always 0 with the agent, whose copies are duplicates).
    pub tool_copies: usize,
    /// Records a client sent again under a bumped epoch after the first copy's answer never
    /// reached it (see `client_resend`): on the destination twice, counted apart, not a breach.
    pub client_resends: usize,
    pub resends: Vec<String>,
    pub violations: Vec<String>,
}

impl Verdict {
    pub fn ok(&self) -> bool {
        self.lost == 0
            && self.duplicated == 0
            && self.order_violations == 0
            && self.after_barrier == 0
            && self.before_barrier == 0
            && self.barrier_missing == 0
            && self.rpo_mismatch == 0
            && self.mirror_divergence == 0
            && self.skipped.unwrap_or(0) == 0
            && self.unread.unwrap_or(0) == 0
            && self.committed_mismatch == 0
    }

    fn breach(&mut self, what: String) {
        if self.violations.len() < 20 {
            self.violations.push(what);
        }
    }
}

/// Where a key sits in the destination's log, and who wrote it there.
#[derive(Debug, Clone, Copy)]
struct Placed {
    partition: usize,
    offset: i64,
    producer: (i64, i16),
}

/// Whether the copies `at` (in log order) of a record whose client learnt `outcome` are its
/// client's resend under a bumped epoch: two copies of one producer id, the second at a higher
/// epoch, and the acknowledgement (if any) the second's. An idempotent client whose request's
/// answer never came (its connection dropped with the broker that had written it) may bump its
/// epoch and send the record again (librdkafka does); the brokers cannot tell the copies apart
/// across epochs, with or without a gateway in front of them. Had the client been told of the
/// first copy, a second one would be a duplicate of the system's making.
fn client_resend(at: &[Placed], outcome: Option<&Outcome>) -> bool {
    let [first, second] = at else {
        return false;
    };
    let acked_second = match outcome {
        Some(Outcome::Acked { partition, offset }) => {
            *partition as usize == second.partition && *offset == second.offset
        }
        _ => true,
    };
    first.producer.0 >= 0
        && first.producer.0 == second.producer.0
        && first.producer.1 < second.producer.1
        && acked_second
}

/// Whether every copy `at` lies before its partition's reported barrier (or no barrier is
/// reported: the barrier's own rule fails the run then). A mirroring tool's at-least-once copies
/// of a source record are such copies; one after the barrier is the barrier rule's business.
fn before_barriers(i: &Inputs, at: &[Placed]) -> bool {
    at.iter().all(|x| {
        let barrier = i
            .barriers
            .get(x.partition)
            .and_then(|b| b.first().copied().flatten());
        barrier.is_none_or(|b| x.offset < b.offset)
    })
}

/// Checks a run (see the module's rules).
pub fn check(i: &Inputs) -> Verdict {
    let mut v = Verdict {
        operations: i.ops.len(),
        ..Verdict::default()
    };
    let ops: HashMap<&str, &Op> = i.ops.iter().map(|o| (o.key.as_str(), o)).collect();
    let origin = |key: &str| ops.get(key).map(|o| o.origin);

    // Every placement of every key on the destination; doubles counted once per extra copy.
    let mut placed: HashMap<&str, Vec<Placed>> = HashMap::new();
    for (p, log) in i.destination.iter().enumerate() {
        for e in log {
            if let Entry::Data {
                offset,
                key,
                producer_id,
                producer_epoch,
                ..
            } = e
            {
                placed.entry(key.as_str()).or_default().push(Placed {
                    partition: p,
                    offset: *offset,
                    producer: (*producer_id, *producer_epoch),
                });
            }
        }
    }
    for (key, at) in &placed {
        if client_resend(at, ops.get(key).map(|o| &o.outcome)) {
            v.client_resends += 1;
            if v.resends.len() < 20 {
                v.resends.push(format!(
                    "{key}: written under producer id {} at epoch {} and again at epoch {}: {at:?}",
                    at[0].producer.0, at[0].producer.1, at[1].producer.1
                ));
            }
        } else if at.len() > 1
            && i.tool == Tool::MirrorMaker2
            && origin(key) == Some(Origin::Source)
            && before_barriers(i, at)
        {
            v.tool_copies += at.len() - 1;
        } else if at.len() > 1 {
            v.duplicated += at.len() - 1;
            v.breach(format!(
                "{key} is on the destination {} times: {at:?}",
                at.len()
            ));
        }
    }

    // The barrier of each partition, and the mirrored part before it.
    let mut barrier_at: Vec<Option<i64>> = Vec::new();
    let mut mirrored_len: Vec<usize> = Vec::new();
    // The highest epoch each mirrored producer id wrote with.
    let mut mirrored_pids: HashMap<i64, i16> = HashMap::new();
    for (p, log) in i.destination.iter().enumerate() {
        let reported = i.barriers.get(p).map(Vec::as_slice).unwrap_or(&[]);
        let b = reported.first().copied().flatten();
        if reported.iter().any(|r| *r != reported[0]) {
            v.barrier_missing += 1;
            v.breach(format!(
                "partition {p}: the instances report different barriers: {reported:?}"
            ));
        }
        let found = b.is_some_and(|b| b.lies_in(log));
        if !found {
            v.barrier_missing += 1;
            v.breach(format!(
                "partition {p}: no barrier in the log where the instances report it ({b:?})"
            ));
        }
        let at = b.filter(|_| found).map(|b| b.offset);
        barrier_at.push(at);
        let before = |o: i64| at.is_none_or(|b| o < b);
        let mut first_copy = std::collections::HashSet::new();
        let mirrored: Vec<&str> = log
            .iter()
            .filter_map(|e| match e {
                Entry::Data {
                    offset,
                    producer_id,
                    producer_epoch,
                    key,
                    ..
                } if before(*offset) && origin(key) == Some(Origin::Source) => {
                    let e = mirrored_pids.entry(*producer_id).or_insert(*producer_epoch);
                    *e = (*e).max(*producer_epoch);
                    // A tool's further copy stands where its first one is.
                    first_copy.insert(key.as_str()).then_some(key.as_str())
                }
                _ => None,
            })
            .collect();
        let source: Vec<&str> = i
            .source
            .get(p)
            .map(|s| s.iter().map(|r| r.key.as_str()).collect())
            .unwrap_or_default();
        let same = mirrored.len() <= source.len() && source[..mirrored.len()] == mirrored[..];
        if !same {
            let first = mirrored
                .iter()
                .zip(source.iter())
                .position(|(a, b)| a != b)
                .unwrap_or(mirrored.len().min(source.len()));
            v.mirror_divergence += 1;
            v.breach(format!(
                "partition {p}: the mirrored records are not the source's first {} (first difference at #{first}: {:?} vs {:?})",
                mirrored.len(),
                mirrored.get(first),
                source.get(first)
            ));
        }
        let left = source.len().saturating_sub(mirrored.len()) as i64;
        v.rpo_records += left;
        // Another tool's offsets are its own: the report has no figure of the records left.
        let reported = match i.tool {
            Tool::Agent => i.rpo.get(p).copied().flatten(),
            Tool::MirrorMaker2 => Some(left),
        };
        match (i.mode, reported) {
            (Mode::Planned, _) if left > 0 => {
                v.rpo_mismatch += 1;
                v.breach(format!(
                    "partition {p}: a planned failover left {left} source records unmirrored"
                ));
            }
            (_, Some(r)) if r != left => {
                v.rpo_mismatch += 1;
                v.breach(format!(
                    "partition {p}: the report says rpo_records {r}, the logs {left}"
                ));
            }
            (Mode::Planned, None) => {
                v.rpo_mismatch += 1;
                v.breach(format!(
                    "partition {p}: the report of a planned failover has no rpo_records"
                ));
            }
            _ => {}
        }
        mirrored_len.push(mirrored.len());
    }

    // Nothing mirrored after the barrier; nothing local before it.
    for (p, log) in i.destination.iter().enumerate() {
        for e in log {
            let Entry::Data {
                offset,
                producer_id,
                producer_epoch,
                key,
                ..
            } = e
            else {
                continue;
            };
            let collides = mirrored_pids
                .get(producer_id)
                .is_some_and(|max| producer_epoch <= max);
            let after = barrier_at[p].is_some_and(|b| *offset > b);
            match origin(key) {
                Some(Origin::Source | Origin::Late) if after => {
                    v.after_barrier += 1;
                    v.breach(format!(
                        "partition {p}: mirror write {key} at {offset}, after the barrier"
                    ));
                }
                Some(Origin::Local) if after && collides => {
                    v.after_barrier += 1;
                    v.breach(format!("partition {p}: {key} at {offset} was written with producer id {producer_id} epoch {producer_epoch}, which mirrored traffic used up to epoch {}", mirrored_pids[producer_id]));
                }
                Some(Origin::Local) if !after => {
                    v.before_barrier += 1;
                    v.breach(format!(
                        "partition {p}: local write {key} at {offset}, before the barrier"
                    ));
                }
                None => {
                    v.mirror_divergence += 1;
                    v.breach(format!(
                        "partition {p}: {key} at {offset} was written by no client of the run"
                    ));
                }
                _ => {}
            }
        }
    }

    // Acknowledged means present once; uncertain means at most once.
    let source_at: HashMap<&str, (usize, usize, i64)> = i
        .source
        .iter()
        .enumerate()
        .flat_map(|(p, s)| {
            s.iter()
                .enumerate()
                .map(move |(ix, r)| (r.key.as_str(), (p, ix, r.offset)))
        })
        .collect();
    for o in i.ops {
        let at = placed.get(o.key.as_str()).map(Vec::as_slice).unwrap_or(&[]);
        match (&o.outcome, o.origin) {
            (Outcome::Acked { partition, offset }, Origin::Source) => {
                v.acked += 1;
                let p = *partition as usize;
                match source_at.get(o.key.as_str()) {
                    Some(&(sp, ix, so)) if sp == p && so == *offset => {
                        if ix >= mirrored_len.get(p).copied().unwrap_or(0) {
                            v.unmirrored_acked += 1;
                        }
                    }
                    _ => {
                        v.lost += 1;
                        v.breach(format!(
                            "{} acknowledged by the source at {partition}/{offset} is not there",
                            o.key
                        ));
                    }
                }
            }
            (Outcome::Acked { partition, offset }, _) => {
                v.acked += 1;
                let here = at
                    .iter()
                    .any(|x| x.partition == *partition as usize && x.offset == *offset);
                if !here {
                    v.lost += 1;
                    v.breach(format!(
                        "{} acknowledged at {partition}/{offset} is not there (found at {at:?})",
                        o.key
                    ));
                }
            }
            (_, _) => {
                if !at.is_empty() {
                    v.uncertain_present += 1;
                }
            }
        }
    }

    // Each producer's records of a partition in the order it sent them.
    type ProducerPartition<'a> = (&'a str, Origin, usize);
    let mut seen: BTreeMap<ProducerPartition, Vec<(u64, i64)>> = BTreeMap::new();
    for o in i.ops {
        if let Some(x) = placed.get(o.key.as_str()).and_then(|a| a.first()) {
            seen.entry((o.client.as_str(), o.origin, x.partition))
                .or_default()
                .push((o.n, x.offset));
        }
    }
    for ((client, _, p), mut recs) in seen {
        recs.sort_unstable();
        for w in recs.windows(2) {
            if w[1].1 < w[0].1 {
                v.order_violations += 1;
                v.breach(format!(
                    "{client} partition {p}: record {} at {} but record {} at {}",
                    w[0].0, w[0].1, w[1].0, w[1].1
                ));
            }
        }
    }
    if let Some(g) = i.group {
        groups::check(&mut v, i.destination, g);
    }
    let from_source: std::collections::HashSet<&str> = i
        .ops
        .iter()
        .filter(|o| o.origin == Origin::Source)
        .map(|o| o.key.as_str())
        .collect();
    for (p, log) in i.destination.iter().enumerate() {
        if i.tool == Tool::MirrorMaker2 {
            break;
        }
        let source = i.source_log.get(p).map(Vec::as_slice).unwrap_or(&[]);
        committed::check_partition(&mut v, i.mode, p, source, log, barrier_at[p], &from_source);
    }
    v
}

#[cfg(test)]
#[path = "check_tests.rs"]
mod tests;
