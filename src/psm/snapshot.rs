//! The gateway's own snapshot format for a [`PartitionPsm`] (not the broker's file format).
//!
//! All integers big-endian:
//!
//! ```text
//! magic        4  b"MGPS"
//! version      u16 = 1
//! reserved     u16 = 0
//! crc          u32  CRC-32C of the payload
//! payload_len  u32
//! payload:
//!   last_offset  i64   the offset the snapshot covers up to (exclusive end, like the broker's)
//!   count        u32
//!   count × entry:
//!     producer_id i64, epoch i16, coordinator_epoch i32, last_timestamp i64,
//!     txn_first_offset i64 (−1 = none), batch_count u8 (0..=5),
//!     batch_count × (last_seq i32, offset_delta i32, last_offset i64, timestamp i64), oldest first
//! ```
//!
//! Unlike the broker's snapshot (one batch per producer, X7), all cached batches are kept, so a
//! gateway restart does not narrow its duplicate window.

use thiserror::Error;

use super::entry::{BatchMetadata, ProducerEntry, NUM_BATCHES_TO_RETAIN};
use super::partition::PartitionPsm;

pub const SNAPSHOT_MAGIC: [u8; 4] = *b"MGPS";
pub const SNAPSHOT_VERSION: u16 = 1;
const HEADER_LEN: usize = 16;
const ENTRY_FIXED: usize = 8 + 2 + 4 + 8 + 8 + 1;
const BATCH_LEN: usize = 4 + 4 + 8 + 8;

/// Why snapshot bytes cannot be loaded.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SnapshotError {
    #[error("snapshot shorter than its {HEADER_LEN}-byte header ({0} bytes)")]
    TooShort(usize),
    #[error("not a mirrorgate PSM snapshot (bad magic)")]
    BadMagic,
    #[error("unsupported snapshot version {0}")]
    UnsupportedVersion(u16),
    #[error("snapshot payload length {declared} does not match the {actual} bytes present")]
    LengthMismatch { declared: usize, actual: usize },
    #[error("snapshot CRC mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    CrcMismatch { stored: u32, computed: u32 },
    #[error("snapshot payload ends inside {0}")]
    Truncated(&'static str),
    #[error("snapshot entry {index}: {reason}")]
    BadEntry { index: usize, reason: &'static str },
    #[error("snapshot lists producer {0} twice")]
    DuplicateProducer(i64),
    #[error("{0} unexpected bytes after the last snapshot entry")]
    TrailingBytes(usize),
}

impl PartitionPsm {
    /// Serializes every entry. `last_offset` is stored as given and returned by decode.
    pub fn encode_snapshot(&self, last_offset: i64) -> Vec<u8> {
        let payload_len: usize = 12
            + self
                .iter()
                .map(|e| ENTRY_FIXED + e.batch_count() * BATCH_LEN)
                .sum::<usize>();
        let mut out = Vec::with_capacity(HEADER_LEN + payload_len);
        out.extend_from_slice(&SNAPSHOT_MAGIC);
        out.extend_from_slice(&SNAPSHOT_VERSION.to_be_bytes());
        out.extend_from_slice(&0u16.to_be_bytes());
        out.extend_from_slice(&0u32.to_be_bytes()); // CRC, filled below
        out.extend_from_slice(&(payload_len as u32).to_be_bytes());
        out.extend_from_slice(&last_offset.to_be_bytes());
        out.extend_from_slice(&(self.len() as u32).to_be_bytes());
        for e in self.iter() {
            out.extend_from_slice(&e.producer_id.to_be_bytes());
            out.extend_from_slice(&e.epoch.to_be_bytes());
            out.extend_from_slice(&e.coordinator_epoch.to_be_bytes());
            out.extend_from_slice(&e.last_timestamp.to_be_bytes());
            out.extend_from_slice(&e.txn_first_offset.to_be_bytes());
            out.push(e.batch_count() as u8);
            for b in e.batches() {
                out.extend_from_slice(&b.last_seq.to_be_bytes());
                out.extend_from_slice(&b.offset_delta.to_be_bytes());
                out.extend_from_slice(&b.last_offset.to_be_bytes());
                out.extend_from_slice(&b.timestamp.to_be_bytes());
            }
        }
        let crc = crc32c::crc32c(&out[HEADER_LEN..]);
        out[8..12].copy_from_slice(&crc.to_be_bytes());
        out
    }

    /// Loads a snapshot written by [`encode_snapshot`](Self::encode_snapshot). Never panics;
    /// every corruption is a typed error.
    pub fn decode_snapshot(bytes: &[u8]) -> Result<(PartitionPsm, i64), SnapshotError> {
        if bytes.len() < HEADER_LEN {
            return Err(SnapshotError::TooShort(bytes.len()));
        }
        if bytes[0..4] != SNAPSHOT_MAGIC {
            return Err(SnapshotError::BadMagic);
        }
        let version = u16::from_be_bytes([bytes[4], bytes[5]]);
        if version != SNAPSHOT_VERSION {
            return Err(SnapshotError::UnsupportedVersion(version));
        }
        let stored = u32::from_be_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
        let declared = u32::from_be_bytes([bytes[12], bytes[13], bytes[14], bytes[15]]) as usize;
        let payload = &bytes[HEADER_LEN..];
        if declared != payload.len() {
            return Err(SnapshotError::LengthMismatch {
                declared,
                actual: payload.len(),
            });
        }
        let computed = crc32c::crc32c(payload);
        if computed != stored {
            return Err(SnapshotError::CrcMismatch { stored, computed });
        }
        let mut r = Reader { b: payload, pos: 0 };
        let last_offset = r.i64("last offset")?;
        let count = r.u32("entry count")? as usize;
        if count > r.remaining() / ENTRY_FIXED {
            return Err(SnapshotError::Truncated("the entry list"));
        }
        let mut psm = PartitionPsm::with_capacity(count);
        for index in 0..count {
            let mut e = ProducerEntry::empty(r.i64("producer id")?);
            if e.producer_id < 0 {
                return Err(SnapshotError::BadEntry {
                    index,
                    reason: "negative producer id",
                });
            }
            e.epoch = r.i16("epoch")?;
            e.coordinator_epoch = r.i32("coordinator epoch")?;
            e.last_timestamp = r.i64("last timestamp")?;
            e.txn_first_offset = r.i64("transaction first offset")?;
            if e.txn_first_offset < -1 {
                return Err(SnapshotError::BadEntry {
                    index,
                    reason: "negative transaction offset",
                });
            }
            let n = r.u8("batch count")? as usize;
            if n > NUM_BATCHES_TO_RETAIN {
                return Err(SnapshotError::BadEntry {
                    index,
                    reason: "more than five batches",
                });
            }
            for _ in 0..n {
                let b = BatchMetadata {
                    last_seq: r.i32("batch")?,
                    offset_delta: r.i32("batch")?,
                    last_offset: r.i64("batch")?,
                    timestamp: r.i64("batch")?,
                };
                if b.offset_delta < 0 {
                    return Err(SnapshotError::BadEntry {
                        index,
                        reason: "negative offset delta",
                    });
                }
                e.push_batch(b);
            }
            let pid = e.producer_id;
            if !psm.insert_entry(e) {
                return Err(SnapshotError::DuplicateProducer(pid));
            }
        }
        if r.remaining() != 0 {
            return Err(SnapshotError::TrailingBytes(r.remaining()));
        }
        Ok((psm, last_offset))
    }
}

struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn remaining(&self) -> usize {
        self.b.len() - self.pos
    }

    fn take<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], SnapshotError> {
        let end = self.pos + N;
        let s = self
            .b
            .get(self.pos..end)
            .ok_or(SnapshotError::Truncated(what))?;
        let mut out = [0u8; N];
        out.copy_from_slice(s);
        self.pos = end;
        Ok(out)
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, SnapshotError> {
        Ok(self.take::<1>(what)?[0])
    }
    fn i16(&mut self, what: &'static str) -> Result<i16, SnapshotError> {
        Ok(i16::from_be_bytes(self.take(what)?))
    }
    fn i32(&mut self, what: &'static str) -> Result<i32, SnapshotError> {
        Ok(i32::from_be_bytes(self.take(what)?))
    }
    fn u32(&mut self, what: &'static str) -> Result<u32, SnapshotError> {
        Ok(u32::from_be_bytes(self.take(what)?))
    }
    fn i64(&mut self, what: &'static str) -> Result<i64, SnapshotError> {
        Ok(i64::from_be_bytes(self.take(what)?))
    }
}
