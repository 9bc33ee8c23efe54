//! The acknowledgements the source gave through a mirror's forward listener, kept until the
//! agent has mirrored past them, so that a failover report names, per forwarded producer, the
//! acknowledged records the destination lacks (exact RPO accounting: the gateway saw every
//! acknowledgement).
//!
//! Per partition, each acknowledged batch is kept as (producer id, epoch, sequences, source
//! offsets): the forward listener notes it when the source's answer passes; the agent's
//! position (the next source offset to mirror) drops the batches below it ([`ForwardedAcks::mirrored_to`]).
//! At a failover's completion, the batches at or above the offset map's next source offset are
//! what the destination lacks ([`ForwardedAcks::missing`]), summed per producer and partition.
//! Batches without a producer id (plain producers) are counted under producer id −1.
//!
//! The ledger is bounded ([`MAX_BATCHES`]): past it the oldest batches of the partition written
//! are dropped and the figures are marked inexact, never silently short.
//!
//! Owns: that ledger and its arithmetic. Must not touch: the bytes (the forward listener reads
//! the batches), the agent's positions (its caller reads them), the report's storage.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use std::sync::Mutex;

use serde::{Deserialize, Serialize};

mod restart;
pub use restart::{NotAskedFor, RestartHorizon};

/// The most batches kept across the partitions of one mirror (about 40 bytes each).
pub const MAX_BATCHES: usize = 500_000;

/// How many of a partition's last batches a repeated acknowledgement is looked for in (the
/// broker keeps the last 5 batches of a producer to find duplicates).
const DUPLICATE_WINDOW: usize = 64;

/// One acknowledged batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AckedBatch {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub first_sequence: i32,
    /// Its first source offset (the answer's base offset) and its record count.
    pub first_offset: i64,
    pub records: i32,
}

impl AckedBatch {
    fn last_offset(&self) -> i64 {
        self.first_offset + i64::from(self.records) - 1
    }
}

#[derive(Default)]
struct Ledger {
    /// Per topic and partition, in the order acknowledged.
    parts: HashMap<String, BTreeMap<i32, VecDeque<AckedBatch>>>,
    batches: usize,
    /// Batches dropped to the bound, and acknowledgements whose topic could not be named.
    dropped: u64,
    unnamed: u64,
    /// Topics written through the listener that the mirror does not cover.
    uncovered: BTreeSet<String>,
    /// Bumped by every change (what the journal's writer compares).
    changes: u64,
    /// When the journal a crashed process left was written, per crash since: what passed after
    /// it is not known.
    crashes: Vec<i64>,
    /// What is known of the acknowledgements a previous process did not hand over.
    restart: RestartHorizon,
}

/// The acknowledgements of one mirror's forward listener (see the module doc).
#[derive(Default)]
pub struct ForwardedAcks {
    ledger: Mutex<Ledger>,
}

/// Per producer, epoch and partition: the acknowledged records the destination lacks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForwardedProducerGap {
    /// −1: batches without a producer id (plain producers).
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub topic: String,
    pub partition: i32,
    pub records: i64,
    /// The source offsets and producer sequences of the first and the last record missing.
    pub first_offset: i64,
    pub last_offset: i64,
    pub first_sequence: i32,
    pub last_sequence: i32,
    /// Several instances: the instance whose forward listener passed the acknowledgements.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
}

/// What a failover report says of a forward listener's acknowledgements.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForwardedLoss {
    /// Records acknowledged through the forward listener that the destination lacks.
    pub records: i64,
    pub producers: Vec<ForwardedProducerGap>,
    /// Partitions whose mirrored position was not known: their figures are absent.
    pub unknown_partitions: Vec<(String, i32)>,
    /// Topics written through the forward listener that the mirror does not cover: never
    /// mirrored, so absent on the destination (counted in none of the figures above).
    #[serde(default)]
    pub uncovered_topics: Vec<String>,
    /// Why the figures may be short (batches dropped to the bound, topics not named), if so.
    pub inexact: Option<String>,
    /// Several instances: the instances whose forward listeners' ledgers the figures count.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instances: Vec<String>,
}

impl ForwardedLoss {
    /// These figures as instance `id`'s (several instances): every entry names it.
    pub fn of_instance(mut self, id: &str) -> ForwardedLoss {
        for g in &mut self.producers {
            g.instance = Some(id.to_string());
        }
        self.instances = vec![id.to_string()];
        self
    }
}

/// The ledger as a gateway that stops cleanly hands it to the next one (the forward
/// listener's handover).
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerSnapshot {
    /// Per topic and partition, the batches in the order acknowledged.
    parts: Vec<(String, i32, Vec<AckedBatch>)>,
    dropped: u64,
    unnamed: u64,
    uncovered: Vec<String>,
    /// See `Ledger::crashes`.
    #[serde(default)]
    crashes: Vec<i64>,
    /// See `Ledger::restart`.
    #[serde(default)]
    restart: RestartHorizon,
}

impl LedgerSnapshot {
    /// The batches it holds.
    pub fn batches(&self) -> usize {
        self.parts.iter().map(|(_, _, q)| q.len()).sum()
    }
}

impl ForwardedAcks {
    /// The whole ledger, to hand to the next process.
    pub fn snapshot(&self) -> LedgerSnapshot {
        let l = self.lock();
        let mut parts: Vec<(String, i32, Vec<AckedBatch>)> = l
            .parts
            .iter()
            .flat_map(|(t, ps)| {
                ps.iter()
                    .map(|(p, q)| (t.clone(), *p, q.iter().copied().collect()))
            })
            .collect();
        parts.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
        LedgerSnapshot {
            parts,
            dropped: l.dropped,
            unnamed: l.unnamed,
            uncovered: l.uncovered.iter().cloned().collect(),
            crashes: l.crashes.clone(),
            restart: l.restart.clone(),
        }
    }

    /// Take over the ledger an earlier process handed over (before this one noted anything:
    /// its batches are the oldest), under the same bound, its drops and unnamed counts kept.
    pub fn restore(&self, s: LedgerSnapshot) {
        for (topic, partition, batches) in s.parts {
            for b in batches {
                self.note(&topic, partition, b);
            }
        }
        let mut l = self.lock();
        l.dropped += s.dropped;
        l.unnamed += s.unnamed;
        l.uncovered.extend(s.uncovered);
        // A snapshot of an earlier version names its crashes without their horizon.
        l.restart = match s.restart {
            RestartHorizon::Clean if !s.crashes.is_empty() => RestartHorizon::Unknown,
            r => r,
        };
        l.crashes.extend(s.crashes);
        l.changes += 1;
    }

    /// Take over the journal a process that crashed left (`s`, written at `written_ms`): as
    /// [`Self::restore`], and the figures say from then on that what passed after `written_ms`
    /// before the crash is not counted. Unlike a lost batch it does not make the ledger inexact
    /// for the producers noted since ([`Self::is_exact`]): their batches all came after it.
    pub fn restore_after_crash(&self, s: LedgerSnapshot, written_ms: i64) {
        self.restore(s);
        let mut l = self.lock();
        l.crashes.push(written_ms);
        l.restart.restarted();
    }

    /// This process started without a handover from one that passed acknowledgements (it
    /// crashed): its producers go on after an unplanned failover only where the agent has
    /// mirrored past the source's log ends read after the restart ([`Self::read_restart_ends`]).
    pub fn restarted_without_handover(&self) {
        let mut l = self.lock();
        l.restart.restarted();
        l.changes += 1;
    }

    /// Whether the source's log ends are to be read for a restart.
    pub fn wants_restart_ends(&self) -> bool {
        self.lock().restart.wants_ends()
    }

    /// The source's log ends (`ends`, every partition of the mirror), read after a restart
    /// without handover.
    pub fn read_restart_ends(
        &self,
        ends: std::collections::BTreeMap<(String, i32), i64>,
    ) -> Result<(), NotAskedFor> {
        let mut l = self.lock();
        l.restart.read(ends)?;
        if l.restart == RestartHorizon::Covered {
            l.crashes.clear();
        }
        l.changes += 1;
        Ok(())
    }

    /// What is known of a restart without handover, for the route's status: `clean`,
    /// `waiting for the log ends`, `horizon` (with the partitions not mirrored past their end
    /// yet) or `covered`.
    pub fn restart_status(&self) -> serde_json::Value {
        let l = self.lock();
        match &l.restart {
            r @ RestartHorizon::Horizon(_) => serde_json::json!({
                "state": r.name(),
                "partitions_not_covered": r.uncovered().len(),
            }),
            r => serde_json::json!({ "state": r.name() }),
        }
    }

    /// Whether everything acknowledged before a restart without handover in `topic`-`partition`
    /// is on the destination (then the producers from before it go on there).
    pub fn covers_restart(&self, topic: &str, partition: i32) -> bool {
        self.lock().restart.covers(topic, partition)
    }

    /// A count that changes whenever the ledger does.
    pub fn changes(&self) -> u64 {
        self.lock().changes
    }

    pub fn new() -> ForwardedAcks {
        ForwardedAcks::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The source acknowledged `batch` in `topic`-`partition` through the forward listener.
    pub fn note(&self, topic: &str, partition: i32, batch: AckedBatch) {
        if batch.records <= 0 || batch.first_offset < 0 {
            return;
        }
        let mut l = self.lock();
        let full = l.batches >= MAX_BATCHES;
        if !l.parts.contains_key(topic) {
            l.parts.insert(topic.to_string(), BTreeMap::new());
        }
        let Some(parts) = l.parts.get_mut(topic) else {
            return;
        };
        let q = parts.entry(partition).or_default();
        // A retried batch the broker found a duplicate of is acknowledged again, at its first
        // offset: noted once.
        if q.iter().rev().take(DUPLICATE_WINDOW).any(|b| *b == batch) {
            return;
        }
        let dropped = full && q.pop_front().is_some();
        q.push_back(batch);
        l.changes += 1;
        if dropped {
            l.dropped += 1;
        } else {
            l.batches += 1;
        }
    }

    /// An acknowledgement whose topic id the listener could not name.
    pub fn note_unnamed(&self) {
        let mut l = self.lock();
        l.unnamed += 1;
        l.changes += 1;
    }

    /// `topic` is not the mirror's: its batches are dropped and its name kept (see
    /// [`ForwardedAcks::uncovered_topics`]).
    pub fn uncovered(&self, topic: &str) {
        let mut l = self.lock();
        if let Some(parts) = l.parts.remove(topic) {
            let gone: usize = parts.values().map(|q| q.len()).sum();
            l.batches -= gone;
            l.changes += 1;
        }
        if !l.uncovered.contains(topic) {
            l.uncovered.insert(topic.to_string());
            l.changes += 1;
        }
    }

    /// Topics written through the listener that the mirror does not cover, by name.
    pub fn uncovered_topics(&self) -> Vec<String> {
        self.lock().uncovered.iter().cloned().collect()
    }

    /// Whether every acknowledgement that passed was noted (none dropped to the bound, every
    /// topic named).
    pub fn is_exact(&self) -> bool {
        let l = self.lock();
        l.dropped == 0 && l.unnamed == 0
    }

    /// Whether a batch of `producer_id` in `topic`-`partition` is kept: acknowledged, and not
    /// known to be mirrored.
    pub fn lacks(&self, producer_id: i64, topic: &str, partition: i32) -> bool {
        let l = self.lock();
        let kept = l.parts.get(topic).and_then(|ps| ps.get(&partition));
        kept.is_some_and(|q| q.iter().any(|b| b.producer_id == producer_id))
    }

    /// The batches kept.
    pub fn len(&self) -> usize {
        self.lock().batches
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The partitions with batches kept, and those whose position a restart waits for
    /// ([`RestartHorizon::uncovered`]): the pruners give the agent's position of each.
    pub fn partitions(&self) -> Vec<(String, i32)> {
        let l = self.lock();
        let each = l
            .parts
            .iter()
            .flat_map(|(t, ps)| ps.keys().map(|p| (t.clone(), *p)));
        let mut v: Vec<(String, i32)> = each.chain(l.restart.uncovered()).collect();
        v.sort();
        v.dedup();
        v
    }

    /// The agent mirrored `topic`-`partition` up to `next` (its next source offset): the
    /// batches wholly below it are on the destination.
    pub fn mirrored_to(&self, topic: &str, partition: i32, next: i64) {
        let mut l = self.lock();
        if l.restart.mirrored(topic, partition, next) {
            // Everything acknowledged before the restart is on the destination: the figures
            // are whole again.
            l.crashes.clear();
            l.changes += 1;
            tracing::info!(
                "the agent has mirrored past the source's log ends read after the restart: the producers from before it go on after an unplanned failover, and the figures count everything"
            );
        }
        let Some(parts) = l.parts.get_mut(topic) else {
            return;
        };
        let Some(q) = parts.get_mut(&partition) else {
            return;
        };
        let before = q.len();
        q.retain(|b| b.last_offset() >= next);
        let gone = before - q.len();
        if q.is_empty() {
            parts.remove(&partition);
            if parts.is_empty() {
                l.parts.remove(topic);
            }
        }
        l.batches -= gone;
        if gone > 0 {
            l.changes += 1;
        }
    }

    /// What the destination lacks, given each partition's next source offset to mirror
    /// (`next`; `None`: not known).
    pub fn missing(&self, next: &dyn Fn(&str, i32) -> Option<i64>) -> ForwardedLoss {
        let l = self.lock();
        let mut out = ForwardedLoss::default();
        let mut gaps: BTreeMap<(i64, i16, String, i32), ForwardedProducerGap> = BTreeMap::new();
        let mut topics: Vec<&String> = l.parts.keys().collect();
        topics.sort();
        let each = topics
            .into_iter()
            .flat_map(|t| l.parts[t].iter().map(move |(p, q)| (t.as_str(), *p, q)));
        for (topic, partition, q) in each {
            let Some(next) = next(topic, partition) else {
                out.unknown_partitions.push((topic.to_string(), partition));
                continue;
            };
            for b in q {
                if b.last_offset() < next {
                    continue;
                }
                // As-is mirroring copies whole batches; a position inside one still counts
                // only the records at or above it.
                let skip = (next - b.first_offset).max(0);
                let first_offset = b.first_offset + skip;
                let first_sequence = if b.producer_id >= 0 {
                    crate::protocol::batch::increment_sequence(b.first_sequence, skip as i32)
                } else {
                    -1
                };
                let last_sequence = if b.producer_id >= 0 {
                    crate::protocol::batch::increment_sequence(b.first_sequence, b.records - 1)
                } else {
                    -1
                };
                let records = b.last_offset() - first_offset + 1;
                out.records += records;
                let k = (
                    b.producer_id,
                    b.producer_epoch,
                    topic.to_string(),
                    partition,
                );
                let g = gaps.entry(k).or_insert_with(|| ForwardedProducerGap {
                    producer_id: b.producer_id,
                    producer_epoch: b.producer_epoch,
                    topic: topic.to_string(),
                    partition,
                    records: 0,
                    first_offset,
                    last_offset: b.last_offset(),
                    first_sequence,
                    last_sequence,
                    instance: None,
                });
                g.records += records;
                if first_offset < g.first_offset {
                    g.first_offset = first_offset;
                    g.first_sequence = first_sequence;
                }
                if b.last_offset() > g.last_offset {
                    g.last_offset = b.last_offset();
                    g.last_sequence = last_sequence;
                }
            }
        }
        out.producers = gaps.into_values().collect();
        out.uncovered_topics = l.uncovered.iter().cloned().collect();
        let mut why = Vec::new();
        if l.dropped > 0 {
            why.push(format!(
                "{} acknowledged batches were dropped past the bound of {MAX_BATCHES}",
                l.dropped
            ));
        }
        if l.unnamed > 0 {
            why.push(format!(
                "{} acknowledged batches named a topic id the listener did not know",
                l.unnamed
            ));
        }
        if let Some(last) = l.crashes.last().filter(|_| !l.restart.covered_at(next)) {
            why.push(format!(
                "the gateway restarted after {} crash(es): the acknowledgements that passed after its last journal write before a crash (the last at {last} ms since the epoch, about a second before it) are not counted",
                l.crashes.len()
            ));
        }
        out.inexact = (!why.is_empty()).then(|| why.join("; "));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(producer_id: i64, first_sequence: i32, first_offset: i64, records: i32) -> AckedBatch {
        AckedBatch {
            producer_id,
            producer_epoch: 0,
            first_sequence,
            first_offset,
            records,
        }
    }

    #[test]
    fn a_journal_left_by_a_crash_gives_its_figures_and_says_what_passed_after_it_is_not_counted() {
        let acks = ForwardedAcks::new();
        acks.note("t", 0, batch(7, 0, 0, 5));
        let next = ForwardedAcks::new();
        next.restore_after_crash(acks.snapshot(), 1_234);
        next.note("t", 0, batch(8, 0, 5, 3));
        let loss = next.missing(&|_, _| Some(0));
        assert_eq!(loss.records, 8, "the journal's batches and the new one");
        let why = loss.inexact.expect("the figures say what they miss");
        assert!(why.contains("1 crash") && why.contains("1234"), "{why}");
        assert!(
            next.is_exact(),
            "producers noted since the restart have all their batches in it"
        );
        // Handed on (a clean stop, or the next journal), the crash is still told.
        let third = ForwardedAcks::new();
        third.restore(next.snapshot());
        assert!(third.missing(&|_, _| Some(0)).inexact.is_some());
    }

    #[test]
    fn once_the_agent_mirrored_past_the_log_ends_read_after_a_crash_the_crash_is_whole_again() {
        let acks = ForwardedAcks::new();
        acks.note("t", 0, batch(7, 0, 0, 5));
        let next = ForwardedAcks::new();
        next.restore_after_crash(acks.snapshot(), 1_234);
        assert!(next.wants_restart_ends() && !next.covers_restart("t", 0));
        let ends = BTreeMap::from([(("t".to_string(), 0), 8), (("t".to_string(), 1), 3)]);
        next.read_restart_ends(ends).unwrap();
        assert!(
            next.partitions().contains(&("t".to_string(), 1)),
            "a partition without batches still wants its position"
        );
        // Final positions past every end: the figures count everything.
        let loss = next.missing(&|_, p| Some(if p == 0 { 8 } else { 3 }));
        assert_eq!((loss.records, loss.inexact), (0, None));
        // Short of one: the crash is still told.
        assert!(next
            .missing(&|_, p| Some(if p == 0 { 7 } else { 3 }))
            .inexact
            .is_some());
        next.mirrored_to("t", 0, 8);
        assert!(next.covers_restart("t", 0) && !next.covers_restart("t", 1));
        next.mirrored_to("t", 1, 3);
        assert!(next.covers_restart("t", 5), "covered");
        assert!(
            next.missing(&|_, _| Some(0)).inexact.is_none(),
            "the mark goes"
        );
        // Handed on, it stays covered; a snapshot of an earlier version with a crash is not.
        let third = ForwardedAcks::new();
        third.restore(next.snapshot());
        assert!(third.covers_restart("t", 0));
        let mut old: serde_json::Value = serde_json::to_value(acks.snapshot()).unwrap();
        old["crashes"] = serde_json::json!([1_234]);
        old.as_object_mut().unwrap().remove("restart");
        let fourth = ForwardedAcks::new();
        fourth.restore(serde_json::from_value(old).unwrap());
        assert!(fourth.wants_restart_ends());
    }

    #[test]
    fn every_change_to_the_ledger_moves_its_change_count_and_a_look_does_not() {
        let acks = ForwardedAcks::new();
        let mut seen = acks.changes();
        let mut changed = |acks: &ForwardedAcks| {
            let now = acks.changes();
            let moved = now != seen;
            seen = now;
            moved
        };
        acks.note("t", 0, batch(7, 0, 0, 5));
        assert!(changed(&acks), "noted");
        acks.missing(&|_, _| Some(0));
        acks.mirrored_to("t", 0, 0);
        assert!(!changed(&acks), "a look, and a position below every batch");
        acks.mirrored_to("t", 0, 5);
        assert!(changed(&acks), "mirrored");
        acks.note_unnamed();
        assert!(changed(&acks), "unnamed");
        acks.uncovered("u");
        assert!(changed(&acks), "uncovered");
    }

    #[test]
    fn a_ledger_handed_to_the_next_process_gives_the_same_figures_there() {
        let acks = ForwardedAcks::new();
        acks.note("t", 0, batch(7, 0, 0, 5));
        acks.note("t", 0, batch(8, 0, 5, 3));
        acks.note("u", 1, batch(7, 0, 0, 2));
        acks.note_unnamed();
        acks.uncovered("other");
        let next = |_: &str, _: i32| Some(1);
        let handed = acks.snapshot();
        assert_eq!(handed.batches(), 3);
        let bytes = serde_json::to_vec(&handed).unwrap();
        let taken = ForwardedAcks::new();
        taken.restore(serde_json::from_slice(&bytes).unwrap());
        assert_eq!(taken.snapshot(), handed);
        assert_eq!(taken.missing(&next), acks.missing(&next));
        assert!(
            !taken.is_exact(),
            "an unnamed acknowledgement stays counted"
        );
        assert!(taken.lacks(8, "t", 0));
    }

    #[test]
    fn batches_the_agent_mirrored_past_are_not_missing() {
        let acks = ForwardedAcks::new();
        acks.note("t", 0, batch(7, 0, 0, 5));
        acks.note("t", 0, batch(7, 5, 5, 5));
        acks.mirrored_to("t", 0, 5);
        assert_eq!(acks.len(), 1, "the first batch is dropped");
        let loss = acks.missing(&|_, _| Some(10));
        assert_eq!(loss.records, 0);
        assert!(loss.producers.is_empty());
    }

    #[test]
    fn the_records_at_or_above_the_next_source_offset_are_missing_per_producer() {
        let acks = ForwardedAcks::new();
        acks.note("t", 0, batch(7, 0, 0, 5));
        acks.note("t", 0, batch(8, 0, 5, 3));
        acks.note("t", 0, batch(7, 5, 8, 4));
        acks.note("t", 1, batch(7, 0, 0, 2));
        let loss = acks.missing(&|_, p| Some(if p == 0 { 5 } else { 2 }));
        assert_eq!(loss.records, 7);
        assert_eq!(
            loss.producers,
            vec![
                ForwardedProducerGap {
                    producer_id: 7,
                    producer_epoch: 0,
                    topic: "t".into(),
                    partition: 0,
                    records: 4,
                    first_offset: 8,
                    last_offset: 11,
                    first_sequence: 5,
                    last_sequence: 8,
                    instance: None,
                },
                ForwardedProducerGap {
                    producer_id: 8,
                    producer_epoch: 0,
                    topic: "t".into(),
                    partition: 0,
                    records: 3,
                    first_offset: 5,
                    last_offset: 7,
                    first_sequence: 0,
                    last_sequence: 2,
                    instance: None,
                },
            ]
        );
        assert_eq!(loss.inexact, None);
    }

    #[test]
    fn a_batch_acknowledged_twice_is_noted_once() {
        let acks = ForwardedAcks::new();
        acks.note("t", 0, batch(7, 0, 0, 5));
        acks.note("t", 0, batch(7, 0, 0, 5));
        assert_eq!(acks.len(), 1);
        assert_eq!(acks.missing(&|_, _| Some(0)).records, 5);
    }

    #[test]
    fn a_position_inside_a_batch_counts_only_its_records_at_or_above() {
        let acks = ForwardedAcks::new();
        acks.note("t", 0, batch(7, 10, 100, 10));
        let loss = acks.missing(&|_, _| Some(104));
        assert_eq!(loss.records, 6);
        let g = &loss.producers[0];
        assert_eq!((g.first_offset, g.last_offset), (104, 109));
        assert_eq!((g.first_sequence, g.last_sequence), (14, 19));
    }

    #[test]
    fn a_partition_without_a_known_position_is_named_not_guessed() {
        let acks = ForwardedAcks::new();
        acks.note("t", 3, batch(7, 0, 0, 5));
        let loss = acks.missing(&|_, _| None);
        assert_eq!(loss.records, 0);
        assert_eq!(loss.unknown_partitions, vec![("t".to_string(), 3)]);
    }

    #[test]
    fn batches_without_a_producer_id_are_counted_under_minus_one() {
        let acks = ForwardedAcks::new();
        acks.note("t", 0, batch(-1, -1, 0, 3));
        let loss = acks.missing(&|_, _| Some(0));
        assert_eq!(loss.producers[0].producer_id, -1);
        assert_eq!(loss.producers[0].first_sequence, -1);
        assert_eq!(loss.records, 3);
    }

    #[test]
    fn past_the_bound_the_oldest_batches_go_and_the_figures_say_inexact() {
        let acks = ForwardedAcks::new();
        for i in 0..(MAX_BATCHES as i64 + 2) {
            acks.note("t", 0, batch(7, i as i32, i, 1));
        }
        assert_eq!(acks.len(), MAX_BATCHES);
        let loss = acks.missing(&|_, _| Some(0));
        assert_eq!(loss.records, MAX_BATCHES as i64);
        assert!(loss
            .inexact
            .expect("inexact")
            .contains("2 acknowledged batches were dropped"));
    }

    #[test]
    fn an_uncovered_topic_is_named_and_its_batches_dropped() {
        let acks = ForwardedAcks::new();
        acks.note("other", 0, batch(7, 0, 0, 5));
        acks.uncovered("other");
        assert!(acks.is_empty());
        let loss = acks.missing(&|_, _| Some(0));
        assert_eq!(loss.uncovered_topics, vec!["other".to_string()]);
        assert_eq!(loss.records, 0);
    }

    #[test]
    fn a_producer_lacks_a_partition_while_a_batch_of_it_there_is_not_mirrored() {
        let acks = ForwardedAcks::new();
        acks.note("t", 0, batch(7, 0, 0, 5));
        acks.note("t", 0, batch(8, 0, 5, 5));
        assert!(acks.lacks(7, "t", 0));
        assert!(!acks.lacks(7, "t", 1));
        acks.mirrored_to("t", 0, 5);
        assert!(!acks.lacks(7, "t", 0));
        assert!(acks.lacks(8, "t", 0));
        assert!(acks.is_exact());
    }

    #[test]
    fn an_unnamed_acknowledgement_makes_the_figures_inexact() {
        let acks = ForwardedAcks::new();
        acks.note_unnamed();
        assert!(acks.missing(&|_, _| Some(0)).inexact.is_some());
        assert!(!acks.is_exact());
    }
}
