//! The un-mirrored tail of one source partition, read batch by batch: what it holds (records,
//! bytes, producers, time range) and the transactional status of each record — committed,
//! aborted, or open (no marker up to the log end) —, so that only what the source acknowledged
//! for good is ever copied. The tail also reaches back before its first offset for the
//! transactions the failover aborted on the destination: their records were mirrored, their
//! marker was not, and where the source committed them they are owed like the rest.
//!
//! Owns: the classification ([`TailScan`], pure) and the provenance of a copied record: the
//! headers it carries in the quarantine topic, and the checksum both sides are compared by.
//! Must not touch: I/O (the caller feeds the batches), where records go.

use std::collections::{BTreeSet, HashMap, HashSet};

use bytes::Bytes;
use serde::Serialize;

use crate::protocol::batch::{control_marker, BatchHeader, ControlType};
use crate::protocol::records::{self, RecordsError, StoredRecord};

/// The headers a recovered record carries after its own, in this order.
pub const PROVENANCE: [&str; 8] = [
    "mirrorgate.failover.id",
    "mirrorgate.source.topic",
    "mirrorgate.source.partition",
    "mirrorgate.source.offset",
    "mirrorgate.source.timestamp",
    "mirrorgate.source.producer.id",
    "mirrorgate.source.producer.epoch",
    "mirrorgate.source.sequence",
];

/// What the listing says of one partition's tail.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TailSummary {
    pub topic: String,
    pub partition: i32,
    /// The first source offset the failover did not mirror.
    pub from_offset: i64,
    /// The first offset of the records before `from_offset` that belong to the tail: those of
    /// a transaction the failover aborted on the destination (mirrored without its marker),
    /// which the source committed, aborted or left open like any other (`None`: no such
    /// record).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reach_back_offset: Option<i64>,
    /// The source's log start and end (high watermark) when it was read.
    pub log_start_offset: i64,
    pub log_end_offset: i64,
    /// Offsets of the tail below the source's log start: removed (retention, deletion) before
    /// they could be read; what they held is lost.
    pub offsets_removed: i64,
    /// Data records in the tail (control records not counted) and the bytes of their batches.
    pub records: i64,
    pub bytes: i64,
    pub producer_ids: Vec<i64>,
    /// From the batch headers: the first batch's first timestamp and the largest one.
    pub first_timestamp_ms: Option<i64>,
    pub last_timestamp_ms: Option<i64>,
    pub non_transactional: i64,
    pub committed: i64,
    pub aborted: i64,
    /// Transactional records with no marker up to the log end.
    pub open: i64,
    /// Non-transactional and committed records: what a recovery copies.
    pub recoverable_records: i64,
}

/// A classification of the tail in progress: feed it every batch from `from` on, in log order.
#[derive(Debug)]
pub struct TailScan {
    summary: TailSummary,
    /// Transactional batches waiting for their marker, per producer id: (base offset, records).
    pending: HashMap<i64, Vec<(i64, i64)>>,
    /// Base offsets of transactional batches aborted or still open: never copied.
    excluded: HashSet<i64>,
    producers: BTreeSet<i64>,
    /// Producer id → first source offset of its transaction the failover aborted on the
    /// destination.
    reach_back: HashMap<i64, i64>,
    /// Base offsets of the batches before the tail's first offset that belong to it.
    reached: HashSet<i64>,
}

/// What a finished scan gives the copy: the summary, the batches not to copy, and the batches
/// before `from_offset` to copy.
#[derive(Debug, Clone, Default)]
pub struct Tail {
    pub summary: TailSummary,
    pub excluded: HashSet<i64>,
    pub reached: HashSet<i64>,
}

impl Tail {
    /// Where reading the tail starts: its first record that can still be read.
    pub fn start(&self) -> i64 {
        let s = &self.summary;
        s.reach_back_offset
            .map_or(s.from_offset, |r| r.min(s.from_offset))
            .max(s.log_start_offset)
    }

    /// Whether the record at `offset` of the batch at `base` belongs to the tail.
    pub fn holds(&self, base: i64, offset: i64) -> bool {
        offset >= self.summary.from_offset || self.reached.contains(&base)
    }
}

impl TailScan {
    pub fn new(topic: &str, partition: i32, from: i64, log_start: i64, log_end: i64) -> Self {
        TailScan {
            summary: TailSummary {
                topic: topic.to_string(),
                partition,
                from_offset: from,
                log_start_offset: log_start,
                log_end_offset: log_end,
                offsets_removed: (log_start.min(log_end) - from).max(0),
                ..TailSummary::default()
            },
            pending: HashMap::new(),
            excluded: HashSet::new(),
            producers: BTreeSet::new(),
            reach_back: HashMap::new(),
            reached: HashSet::new(),
        }
    }

    /// The transactions the failover aborted on the destination, as producer id and first
    /// source offset: their batches from that offset on count from before the tail's first
    /// offset. (The mirrored part of the destination is the source's up to `from`, so no
    /// marker of those transactions lies before `from`.)
    pub fn reaching_back(mut self, aborted: impl IntoIterator<Item = (i64, i64)>) -> Self {
        let from = self.summary.from_offset;
        self.reach_back = aborted.into_iter().filter(|(_, f)| *f < from).collect();
        self
    }

    /// Where reading continues: the first offset of the tail that can still be read.
    pub fn start(&self) -> i64 {
        let first = self.reach_back.values().copied().min();
        let s = &self.summary;
        first
            .map_or(s.from_offset, |r| r.min(s.from_offset))
            .max(s.log_start_offset)
    }

    /// Whether a batch wholly before the tail's first offset belongs to it.
    fn reaches_back(&self, header: &BatchHeader) -> bool {
        header.is_transactional()
            && !header.is_control()
            && self
                .reach_back
                .get(&header.producer_id)
                .is_some_and(|first| header.base_offset >= *first)
    }

    /// One batch of the source (`batch`: its whole bytes). A batch that starts before the
    /// tail (compacted sources) counts only its records from the tail's first offset on.
    pub fn push(&mut self, header: &BatchHeader, batch: &Bytes) -> Result<(), RecordsError> {
        let from = self.summary.from_offset;
        let before = header.last_offset() < from;
        if (before && !self.reaches_back(header))
            || header.base_offset >= self.summary.log_end_offset
        {
            return Ok(());
        }
        if header.is_control() {
            let commit = match control_marker(header, batch) {
                Ok(Some(m)) if m.control_type == ControlType::Commit => true,
                Ok(Some(m)) if m.control_type == ControlType::Abort => false,
                _ => return Ok(()),
            };
            for (base, n) in self.pending.remove(&header.producer_id).unwrap_or_default() {
                if commit {
                    self.summary.committed += n;
                } else {
                    self.summary.aborted += n;
                    self.excluded.insert(base);
                }
            }
            return Ok(());
        }
        let n = if before {
            self.reached.insert(header.base_offset);
            let s = &mut self.summary;
            s.reach_back_offset = Some(
                s.reach_back_offset
                    .map_or(header.base_offset, |r| r.min(header.base_offset)),
            );
            i64::from(header.record_count.max(0))
        } else if header.base_offset < from {
            records::decode(batch)?
                .iter()
                .filter(|r| r.offset >= from)
                .count() as i64
        } else {
            i64::from(header.record_count.max(0))
        };
        let s = &mut self.summary;
        s.records += n;
        s.bytes += header.total_size() as i64;
        if n > 0 {
            s.first_timestamp_ms.get_or_insert(header.base_timestamp);
            s.last_timestamp_ms = Some(
                s.last_timestamp_ms
                    .map_or(header.max_timestamp, |t| t.max(header.max_timestamp)),
            );
        }
        if header.has_producer_id() {
            self.producers.insert(header.producer_id);
        }
        if header.is_transactional() {
            self.pending
                .entry(header.producer_id)
                .or_default()
                .push((header.base_offset, n));
        } else {
            s.non_transactional += n;
        }
        Ok(())
    }

    /// The summary once every batch up to the log end was pushed: what is still pending is
    /// open.
    pub fn finish(mut self) -> Tail {
        for (_, batches) in self.pending.drain() {
            for (base, n) in batches {
                self.summary.open += n;
                self.excluded.insert(base);
            }
        }
        let s = &mut self.summary;
        s.producer_ids = self.producers.into_iter().collect();
        s.recoverable_records = s.non_transactional + s.committed;
        Tail {
            summary: self.summary,
            excluded: self.excluded,
            reached: self.reached,
        }
    }
}

/// Where a copied record came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Origin<'a> {
    pub failover_id: &'a str,
    pub topic: &'a str,
    pub partition: i32,
    pub producer_id: i64,
    pub producer_epoch: i16,
}

/// The record as the quarantine topic holds it: the source's key, value, timestamp and headers,
/// then the [`PROVENANCE`] headers.
pub fn with_provenance(r: &StoredRecord, o: Origin<'_>) -> StoredRecord {
    let mut out = r.clone();
    let values = [
        o.failover_id.to_string(),
        o.topic.to_string(),
        o.partition.to_string(),
        r.offset.to_string(),
        r.timestamp.to_string(),
        o.producer_id.to_string(),
        o.producer_epoch.to_string(),
        r.sequence.to_string(),
    ];
    for (k, v) in PROVENANCE.iter().zip(values) {
        out.headers
            .push((Bytes::from_static(k.as_bytes()), Some(Bytes::from(v))));
    }
    out
}

/// A record read back from the quarantine topic, with its provenance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provenance {
    pub failover_id: String,
    pub topic: String,
    pub partition: i32,
    /// The record's offset in the source.
    pub offset: i64,
    /// The record as the source held it (provenance headers removed, source offset).
    pub original: StoredRecord,
}

/// The provenance of a record of the quarantine topic; `None` for a record without this
/// module's provenance headers.
pub fn provenance_of(r: &StoredRecord) -> Option<Provenance> {
    let n = r.headers.len().checked_sub(PROVENANCE.len())?;
    let tail = &r.headers[n..];
    if tail
        .iter()
        .zip(PROVENANCE)
        .any(|((k, _), want)| k.as_ref() != want.as_bytes())
    {
        return None;
    }
    let text = |i: usize| -> Option<String> {
        let v = tail[i].1.as_ref()?;
        std::str::from_utf8(v).ok().map(str::to_string)
    };
    let offset: i64 = text(3)?.parse().ok()?;
    let mut original = r.clone();
    original.headers.truncate(n);
    original.offset = offset;
    Some(Provenance {
        failover_id: text(0)?,
        topic: text(1)?,
        partition: text(2)?.parse().ok()?,
        offset,
        original,
    })
}

/// Count and checksum of records, in order: the same on the source and on the quarantine side
/// when the same records were copied once each, in order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Digest {
    pub records: i64,
    pub checksum: u32,
}

impl Digest {
    /// Adds one record (its source offset, key, value and own headers).
    pub fn add(&mut self, r: &StoredRecord) {
        let mut c = crc32c::crc32c_append(self.checksum, &r.offset.to_be_bytes());
        let field = |c: u32, b: Option<&[u8]>| -> u32 {
            let len = b.map_or(-1i64, |b| b.len() as i64);
            let c = crc32c::crc32c_append(c, &len.to_be_bytes());
            crc32c::crc32c_append(c, b.unwrap_or_default())
        };
        c = field(c, r.key.as_deref());
        c = field(c, r.value.as_deref());
        for (k, v) in &r.headers {
            c = field(c, Some(k));
            c = field(c, v.as_deref());
        }
        self.checksum = c;
        self.records += 1;
    }
}

#[cfg(test)]
#[path = "tail_tests.rs"]
pub(crate) mod tests;
