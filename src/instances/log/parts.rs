//! Records too large for one record of the state topic (review G9): a handover with a million
//! screened producer ids, the offset maps of a heavily compacted source, a report of tens of
//! thousands of partitions. Such a record is compressed (zstd) and appended as parts of at most
//! [`PART_BYTES`] each, under keys of their own (`parts/<id>/<index>`), then a *head* under the
//! record's own key naming the parts, their size and checksum. A reader keeps the parts it reads
//! and puts the record back together when it reads the head; the head comes last, so every part
//! of it was read before. Parts fit a state topic created with the brokers' default
//! `max.message.bytes` (1 MiB).
//!
//! Compaction: every part has a key of its own, so none is ever replaced; the head's key is the
//! record's, so the latest head wins as the record itself did. The writer of a new head appends
//! tombstones for the parts of the previous head of that key (known from reading it), which the
//! brokers then remove.
//!
//! Owns: the split, the head's format, the reassembly. Must not touch: the state topic's I/O
//! (`super`), what the records mean.

use std::collections::{BTreeMap, HashMap, VecDeque};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::PeerRecord;

/// Records whose JSON is longer than this are appended in parts, and each part is at most this
/// long (compressed bytes).
pub const PART_BYTES: usize = 512 * 1024;

/// The key prefix of a part.
const PART_KEY: &str = "parts/";

/// A record reassembled from its parts may not decompress to more than this (a corrupt or
/// hostile head cannot make a reader allocate without bound).
const MAX_RECORD_BYTES: usize = 1 << 30;

/// Heads whose parts a reader keeps while waiting for their head (a writer that died mid-way
/// leaves parts that never get one).
const MAX_PENDING: usize = 64;

/// One record as the state topic holds it: key and value (`None`: a tombstone).
pub type Raw = (Bytes, Option<Bytes>);

/// The head of a record appended in parts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename = "parts")]
struct Head {
    /// Names the parts (`parts/<id>/<index>`), new for each record appended in parts.
    id: String,
    parts: u32,
    /// The compressed record's length and CRC-32C.
    bytes: u64,
    crc32c: u32,
}

/// What `r` is appended as, in order: itself, or its parts and then its head.
pub fn split(r: &PeerRecord) -> Result<Vec<Raw>, String> {
    let key = Bytes::from(r.key());
    let json = serde_json::to_vec(r).map_err(|e| e.to_string())?;
    if json.len() <= PART_BYTES {
        return Ok(vec![(key, Some(Bytes::from(json)))]);
    }
    let packed = zstd::bulk::compress(&json, 3)
        .map_err(|e| format!("a state record of {} bytes: compress: {e}", json.len()))?;
    let id = uuid::Uuid::new_v4().simple().to_string();
    let mut out: Vec<Raw> = packed
        .chunks(PART_BYTES)
        .enumerate()
        .map(|(i, c)| {
            (
                Bytes::from(format!("{PART_KEY}{id}/{i}")),
                Some(Bytes::copy_from_slice(c)),
            )
        })
        .collect();
    let head = Head {
        id,
        parts: out.len() as u32,
        bytes: packed.len() as u64,
        crc32c: crc32c::crc32c(&packed),
    };
    let head = serde_json::to_vec(&head).map_err(|e| e.to_string())?;
    out.push((key, Some(Bytes::from(head))));
    Ok(out)
}

/// The tombstones of the parts of a head (`id`, `parts`).
pub fn tombstones(id: &str, parts: u32) -> Vec<Raw> {
    (0..parts)
        .map(|i| (Bytes::from(format!("{PART_KEY}{id}/{i}")), None))
        .collect()
}

/// Puts records appended in parts back together, as a reader reads them in log order.
#[derive(Debug, Default)]
pub struct Assembler {
    /// Parts read whose head was not read yet, per head id.
    pending: HashMap<String, BTreeMap<u32, Bytes>>,
    /// The ids of `pending`, oldest first.
    order: VecDeque<String>,
    /// Record key → the id and part count of the last head read (or written) for it.
    heads: HashMap<String, (String, u32)>,
}

impl Assembler {
    /// One record read: the state record it completes, if any. Parts are kept until their
    /// head; tombstones and values that are not a state record of this version are skipped.
    pub fn push(&mut self, key: &[u8], value: Option<&[u8]>) -> Option<PeerRecord> {
        let value = value?;
        let key = String::from_utf8_lossy(key);
        if let Some(rest) = key.strip_prefix(PART_KEY) {
            let (id, index) = rest.rsplit_once('/')?;
            let index: u32 = index.parse().ok()?;
            if !self.pending.contains_key(id) {
                self.order.push_back(id.to_string());
                if self.order.len() > MAX_PENDING {
                    if let Some(old) = self.order.pop_front() {
                        self.pending.remove(&old);
                    }
                }
            }
            self.pending
                .entry(id.to_string())
                .or_default()
                .insert(index, Bytes::copy_from_slice(value));
            return None;
        }
        let v: serde_json::Value = match serde_json::from_slice(value) {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(target: "mirrorgate::peers", key = %key, error = %e, "state topic record not understood; skipped");
                return None;
            }
        };
        if v.get("kind").and_then(|k| k.as_str()) == Some("parts") {
            let head: Head = serde_json::from_value(v).ok()?;
            return self.assemble(&key, head);
        }
        match serde_json::from_value::<PeerRecord>(v) {
            Ok(r) => Some(r),
            Err(e) => {
                tracing::warn!(target: "mirrorgate::peers", key = %key, error = %e, "state topic record not understood; skipped");
                None
            }
        }
    }

    /// The id and part count of the last head of record key `key` read or written.
    pub fn head_of(&self, key: &str) -> Option<(String, u32)> {
        self.heads.get(key).cloned()
    }

    /// Note that this process appended the head `raw` of record key `key` (its parts are the
    /// ones the next head of the key replaces).
    pub fn wrote(&mut self, key: &str, raw: &Raw) {
        if let Some(head) = raw
            .1
            .as_ref()
            .and_then(|v| serde_json::from_slice::<Head>(v).ok())
        {
            self.heads.insert(key.to_string(), (head.id, head.parts));
        }
    }

    fn assemble(&mut self, key: &str, head: Head) -> Option<PeerRecord> {
        let Some(parts) = self.pending.remove(&head.id) else {
            tracing::warn!(target: "mirrorgate::peers", key, id = %head.id,
                "a state record appended in parts lacks its parts (removed by compaction?); skipped");
            return None;
        };
        self.order.retain(|i| *i != head.id);
        let whole = (0..head.parts).all(|i| parts.contains_key(&i));
        let packed: Vec<u8> = parts.into_values().flat_map(|b| b.to_vec()).collect();
        if !whole || packed.len() as u64 != head.bytes || crc32c::crc32c(&packed) != head.crc32c {
            tracing::warn!(target: "mirrorgate::peers", key, id = %head.id, parts = head.parts,
                "a state record appended in parts does not match its head (parts missing or damaged); skipped");
            return None;
        }
        let json = match zstd::bulk::decompress(&packed, MAX_RECORD_BYTES) {
            Ok(j) => j,
            Err(e) => {
                tracing::warn!(target: "mirrorgate::peers", key, error = %e, "a state record appended in parts cannot be decompressed; skipped");
                return None;
            }
        };
        match serde_json::from_slice::<PeerRecord>(&json) {
            Ok(r) => {
                self.heads.insert(key.to_string(), (head.id, head.parts));
                Some(r)
            }
            Err(e) => {
                tracing::warn!(target: "mirrorgate::peers", key, error = %e, "state topic record not understood; skipped");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::records::{ScreenedProducer, Stopped};
    use super::*;
    use crate::mirror::screening::ScreenEntry;

    fn handover(ids: i64) -> PeerRecord {
        PeerRecord::Stopped(Stopped {
            mirror: "m".into(),
            failover_id: "f1".into(),
            by: "a".into(),
            at_ms: 1,
            partitions: vec![],
            // Scattered ids and times, as real ones are: they compress less than a sequence.
            screened: (0..ids)
                .map(|i| {
                    let x = (i as u64).wrapping_mul(6_364_136_223_846_793_005) >> 20;
                    ScreenedProducer {
                        producer_id: (x % 4_000_000_000) as i64,
                        entry: ScreenEntry {
                            max_epoch: (x % 7) as i16,
                            last_timestamp: 1_796_000_000_000 + (x % 86_400_000) as i64,
                            added_ms: 1_796_000_000_000,
                            coordinator_epoch: crate::mirror::screening::NO_COORDINATOR_EPOCH,
                        },
                    }
                })
                .collect(),
        })
    }

    fn read_all(raws: &[Raw]) -> Vec<PeerRecord> {
        let mut a = Assembler::default();
        raws.iter()
            .filter_map(|(k, v)| a.push(k, v.as_deref()))
            .collect()
    }

    #[test]
    fn a_small_record_is_one_record_under_its_own_key() {
        let r = handover(3);
        let raws = split(&r).unwrap();
        assert_eq!(raws.len(), 1);
        assert_eq!(raws[0].0, Bytes::from(r.key()));
        assert_eq!(read_all(&raws), vec![r]);
    }

    #[test]
    fn a_handover_beyond_sixteen_mebibytes_is_appended_in_parts_that_each_fit_one_mebibyte() {
        // 300,000 screened ids: about 28 MB of JSON (a million are measured by the benchmark).
        let r = handover(300_000);
        let json = serde_json::to_vec(&r).unwrap().len();
        assert!(json > 16 << 20, "{json} bytes of JSON");
        let raws = split(&r).unwrap();
        assert!(raws.len() > 2, "parts and a head: {} records", raws.len());
        for (k, v) in &raws {
            let len = k.len() + v.as_ref().map_or(0, |v| v.len());
            assert!(len < 1 << 20, "a record of {len} bytes");
        }
        assert_eq!(
            raws.last().unwrap().0,
            Bytes::from(r.key()),
            "the head last"
        );
        assert_eq!(read_all(&raws), vec![r]);
    }

    #[test]
    fn a_head_whose_parts_are_missing_or_damaged_yields_nothing() {
        let r = handover(200_000);
        let raws = split(&r).unwrap();
        let mut missing = raws.clone();
        missing.remove(0);
        assert!(read_all(&missing).is_empty());
        let mut damaged = raws.clone();
        let v = damaged[0].1.as_ref().unwrap().to_vec();
        let mut v2 = v.clone();
        v2[10] ^= 0xff;
        damaged[0].1 = Some(Bytes::from(v2));
        assert!(read_all(&damaged).is_empty());
    }

    #[test]
    fn parts_of_two_records_interleaved_with_others_are_put_back_together() {
        let (a, b) = (handover(150_000), handover(160_000));
        let (ra, rb) = (split(&a).unwrap(), split(&b).unwrap());
        let small = split(&handover(1)).unwrap();
        let mut log: Vec<Raw> = Vec::new();
        for (x, y) in ra.iter().zip(rb.iter()) {
            log.push(x.clone());
            log.extend(small.clone());
            log.push(y.clone());
        }
        log.extend(ra[rb.len().min(ra.len())..].iter().cloned());
        log.extend(rb[ra.len().min(rb.len())..].iter().cloned());
        let got = read_all(&log);
        assert!(got.contains(&a) && got.contains(&b), "{}", got.len());
    }

    #[test]
    fn the_tombstones_name_the_parts_of_the_head_read_last_for_the_key() {
        let r = handover(200_000);
        let raws = split(&r).unwrap();
        let mut a = Assembler::default();
        for (k, v) in &raws {
            a.push(k, v.as_deref());
        }
        let (id, n) = a.head_of(&r.key()).expect("head read");
        let t = tombstones(&id, n);
        let parts: Vec<&Bytes> = raws[..raws.len() - 1].iter().map(|(k, _)| k).collect();
        assert_eq!(t.iter().map(|(k, _)| k).collect::<Vec<_>>(), parts);
        assert!(t.iter().all(|(_, v)| v.is_none()));
    }
}
