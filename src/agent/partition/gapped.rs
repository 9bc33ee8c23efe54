//! Source batches that cannot be appended as fetched: compacted (gapped) batches, empty batches,
//! batches of a "tainted" producer, and the comparison of destination batches with what the
//! agent appends (restart reconciliation, an append whose answer was lost), LogAppendTime
//! topics included.
//!
//! Rules:
//! - Gapped batch (fewer records than offsets: compaction removed some). The broker refuses a
//!   produced batch whose record count is not `last_offset_delta + 1` (INVALID_RECORD), so the
//!   batch is rewritten ([`rewrite_gapped`]): record offset deltas renumbered 0..n, header
//!   `last_offset_delta = n − 1`, same codec (decompressed and recompressed with it), timestamps
//!   kept, base timestamp kept unless the delete-horizon bit is set (it is then cleared and the
//!   base becomes the records' smallest timestamp: the destination's cleaner computes its own
//!   horizon, so tombstones stay at least as long as on the source, never shorter), max
//!   timestamp recomputed from the records (what the broker itself would store), producer id,
//!   epoch and sequence −1, transactional bit cleared. Each run of consecutive surviving source
//!   offsets is one range of the offset map; the removed offsets map to the next record.
//! - Why without producer id: the destination checks sequence continuity per (producer id,
//!   epoch) for produced batches, and a rewritten batch cannot keep the source's sequence range
//!   (n records cannot claim the sequences of `last_offset_delta + 1`). Once a batch of
//!   (pid, epoch) is written without it, the destination's state for that producer lags the
//!   source's, so every later batch of the same (pid, epoch) in the partition would be refused
//!   with OUT_OF_ORDER_SEQUENCE: the pair is *tainted* (recorded in the offset map, persisted,
//!   so a restart does the same) and all its later data batches are written without producer
//!   id too ([`strip_producer`]: header only, no decompression). A new epoch starts at sequence
//!   0, which the destination accepts, so it is mirrored as-is again.
//! - A data batch refused with OUT_OF_ORDER_SEQUENCE (whole batches of that producer were
//!   removed by compaction before it: the sequence jumps) was not appended: the pair is tainted
//!   and the batch written without producer id.
//! - Gapped transactional batches are committed data (the cleaner removes aborted batches and
//!   never cleans past the last stable offset): mirrored as plain data (no producer id, not
//!   transactional), visible to every consumer, which is what a read_committed consumer of the
//!   source sees. A transactional batch WITHOUT gaps of a tainted pair (a producer keeping its
//!   epoch across transactions, straddling a cleaned region) FAILS the partition: its
//!   transaction would be split between plain and transactional data.
//! - Empty batch (record count 0, kept by the cleaner for producer state): nothing is appended;
//!   the map continues after its last offset.
//! - No producer id means no broker deduplication: after an unknown outcome the destination log
//!   end is checked before resending (the parent's `appended_already`), as for any batch
//!   without producer id.
//! - LogAppendTime: a batch fetched from such a topic carries the LogAppendTime attribute, which
//!   the destination refuses in a produced batch (INVALID_TIMESTAMP); every appended batch is
//!   sent with it cleared ([`clear_log_append_time`]; rewritten batches likewise).
//! - Comparison ([`same_batch`]): same last offset delta and CRC-32C; on a LogAppendTime
//!   destination the broker restamps the max timestamp (and the CRC) on append, so the expected
//!   batch's CRC is recomputed with the destination's max timestamp and timestamp type. Consumers
//!   of a LogAppendTime destination topic see the destination's append time, not the source's.
//!
//! Batches handled here are the rare path: they are rewritten into new buffers (the as-is path
//! stays allocation-free apart from its one copy).
//!
//! Owns: the rewrites, the taint decisions, the comparison. Must not touch: transactional and
//! control batches (the parent's other arms), the append loop itself.

use std::sync::atomic::Ordering;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::compression::{Compressor, Decompressor, Gzip, Lz4, Snappy, Zstd};
use thiserror::Error;

use crate::protocol::batch::{
    BatchHeader, Compression, TimestampType, ATTRIBUTES_OFFSET, BATCH_HEADER_SIZE,
};

use super::{Halt, SourceBatch, Step, Task};

const ATTR_TIMESTAMP_TYPE: i16 = 0x08;
const ATTR_TRANSACTIONAL: i16 = 0x10;
const ATTR_DELETE_HORIZON: i16 = 0x40;
const CRC_OFFSET: usize = 17;
const MAX_TIMESTAMP_OFFSET: usize = 35;

/// Why a source batch cannot be rewritten.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RewriteError {
    #[error("the batch is shorter than its header or its declared length")]
    Truncated,
    #[error("unknown compression codec {0}")]
    UnknownCodec(u8),
    #[error("cannot decompress the records ({0})")]
    Decompress(String),
    #[error("cannot compress the records ({0})")]
    Compress(String),
    #[error("record {index} is malformed")]
    MalformedRecord { index: usize },
    #[error("the batch holds {found} records, its header says {declared}")]
    CountMismatch { found: usize, declared: i32 },
    #[error("a record's offset delta {delta} is outside the batch (last offset delta {last})")]
    OffsetOutOfBatch { delta: i32, last: i32 },
}

/// A rewritten batch and the source offsets it holds, as runs `(first source offset, count)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewritten {
    pub bytes: Bytes,
    pub header: BatchHeader,
    pub runs: Vec<(i64, i64)>,
}

fn header_of(batch: &[u8]) -> Result<BatchHeader, RewriteError> {
    let h = BatchHeader::parse(batch).ok_or(RewriteError::Truncated)?;
    if batch.len() < h.total_size() || h.total_size() < BATCH_HEADER_SIZE {
        return Err(RewriteError::Truncated);
    }
    Ok(h)
}

/// Base offset 0 (as every produced batch), no producer id/epoch/sequence, not transactional.
fn clear_producer(out: &mut [u8], attributes: i16) {
    out[..8].copy_from_slice(&0i64.to_be_bytes());
    out[ATTRIBUTES_OFFSET..ATTRIBUTES_OFFSET + 2]
        .copy_from_slice(&(attributes & !ATTR_TRANSACTIONAL).to_be_bytes());
    out[43..51].copy_from_slice(&(-1i64).to_be_bytes());
    out[51..53].copy_from_slice(&(-1i16).to_be_bytes());
    out[53..57].copy_from_slice(&(-1i32).to_be_bytes());
}

/// A batch as fetched from a LogAppendTime topic carries the LogAppendTime bit, which the broker
/// refuses in a produced batch (INVALID_TIMESTAMP): it is cleared (the destination broker sets
/// it again and restamps the max timestamp with its own append time). Returns whether the batch
/// changed (then resealed).
pub fn clear_log_append_time(batch: &mut [u8]) -> bool {
    let Some(h) = BatchHeader::parse(batch) else {
        return false;
    };
    if h.timestamp_type() != TimestampType::LogAppendTime || batch.len() < h.total_size() {
        return false;
    }
    batch[ATTRIBUTES_OFFSET..ATTRIBUTES_OFFSET + 2]
        .copy_from_slice(&(h.attributes & !ATTR_TIMESTAMP_TYPE).to_be_bytes());
    seal(&mut batch[..h.total_size()]);
    true
}

fn seal(out: &mut [u8]) {
    let crc = crc32c::crc32c(&out[ATTRIBUTES_OFFSET..]);
    out[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
}

/// A batch without gaps written without its producer: header fields only (module doc).
pub fn strip_producer(batch: &[u8]) -> Result<(Bytes, BatchHeader), RewriteError> {
    let h = header_of(batch)?;
    let mut out = BytesMut::from(&batch[..h.total_size()]);
    clear_producer(&mut out, h.attributes & !ATTR_TIMESTAMP_TYPE);
    seal(&mut out);
    let out = out.freeze();
    let nh = BatchHeader::parse(&out).ok_or(RewriteError::Truncated)?;
    Ok((out, nh))
}

// ------------------------------------------------------------------ varints

fn read_varlong(b: &[u8], pos: &mut usize) -> Option<i64> {
    let mut v: u64 = 0;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*pos)?;
        *pos += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(((v >> 1) as i64) ^ -((v & 1) as i64));
        }
    }
    None
}

fn put_varlong(out: &mut BytesMut, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.put_u8((z as u8) | 0x80);
        z >>= 7;
    }
    out.put_u8(z as u8);
}

// ------------------------------------------------------------------ codecs

fn decompress(codec: Compression, data: &[u8]) -> Result<Bytes, RewriteError> {
    let mut src = Bytes::copy_from_slice(data);
    let take = |b: &mut Bytes| Ok(std::mem::take(b));
    let r = match codec {
        Compression::None => return Ok(src),
        Compression::Gzip => Gzip::decompress(&mut src, take),
        Compression::Snappy => Snappy::decompress(&mut src, take),
        Compression::Lz4 => Lz4::decompress(&mut src, take),
        Compression::Zstd => Zstd::decompress(&mut src, take),
        Compression::Unknown(c) => return Err(RewriteError::UnknownCodec(c)),
    };
    r.map_err(|e| RewriteError::Decompress(e.to_string()))
}

fn compress(codec: Compression, plain: &[u8], out: &mut BytesMut) -> Result<(), RewriteError> {
    let fill = |b: &mut BytesMut| {
        b.extend_from_slice(plain);
        Ok(())
    };
    let r = match codec {
        Compression::None => {
            out.extend_from_slice(plain);
            return Ok(());
        }
        Compression::Gzip => Gzip::compress(out, fill),
        Compression::Snappy => Snappy::compress(out, fill),
        Compression::Lz4 => Lz4::compress(out, fill),
        Compression::Zstd => Zstd::compress(out, fill),
        Compression::Unknown(c) => return Err(RewriteError::UnknownCodec(c)),
    };
    r.map_err(|e| RewriteError::Compress(e.to_string()))
}

// ------------------------------------------------------------------ the rewrite

/// One record of a batch: its timestamp delta, offset delta and the bytes after them.
struct RecordView<'a> {
    attributes: u8,
    timestamp_delta: i64,
    offset_delta: i32,
    rest: &'a [u8],
}

fn records(plain: &[u8], declared: i32) -> Result<Vec<RecordView<'_>>, RewriteError> {
    let mut out = Vec::with_capacity(declared.max(0) as usize);
    let mut pos = 0;
    while pos < plain.len() {
        let index = out.len();
        let bad = || RewriteError::MalformedRecord { index };
        let len = read_varlong(plain, &mut pos).ok_or_else(bad)?;
        let len = usize::try_from(len).map_err(|_| bad())?;
        let end = pos
            .checked_add(len)
            .filter(|e| *e <= plain.len())
            .ok_or_else(bad)?;
        let body = &plain[pos..end];
        let mut p = 1;
        let attributes = *body.first().ok_or_else(bad)?;
        let timestamp_delta = read_varlong(body, &mut p).ok_or_else(bad)?;
        let offset_delta = read_varlong(body, &mut p).ok_or_else(bad)?;
        let offset_delta = i32::try_from(offset_delta).map_err(|_| bad())?;
        out.push(RecordView {
            attributes,
            timestamp_delta,
            offset_delta,
            rest: &body[p..],
        });
        pos = end;
    }
    if out.len() != declared.max(0) as usize {
        return Err(RewriteError::CountMismatch {
            found: out.len(),
            declared,
        });
    }
    Ok(out)
}

/// A gapped batch rewritten with contiguous offsets, without producer (module doc).
pub fn rewrite_gapped(batch: &[u8]) -> Result<Rewritten, RewriteError> {
    let h = header_of(batch)?;
    let codec = h.compression();
    let plain = decompress(codec, &batch[BATCH_HEADER_SIZE..h.total_size()])?;
    let recs = records(&plain, h.record_count)?;
    let horizon = h.has_delete_horizon();
    let base_ts = if horizon {
        recs.iter()
            .map(|r| h.base_timestamp.wrapping_add(r.timestamp_delta))
            .min()
            .unwrap_or(h.base_timestamp)
    } else {
        h.base_timestamp
    };
    let mut body = BytesMut::with_capacity(plain.len() + recs.len());
    let mut record = BytesMut::new();
    let mut runs: Vec<(i64, i64)> = Vec::new();
    let mut max_ts = i64::MIN;
    for (i, r) in recs.iter().enumerate() {
        if r.offset_delta < 0 || r.offset_delta > h.last_offset_delta {
            return Err(RewriteError::OffsetOutOfBatch {
                delta: r.offset_delta,
                last: h.last_offset_delta,
            });
        }
        let ts = h.base_timestamp.wrapping_add(r.timestamp_delta);
        max_ts = max_ts.max(ts);
        record.clear();
        record.put_u8(r.attributes);
        put_varlong(&mut record, ts.wrapping_sub(base_ts));
        put_varlong(&mut record, i as i64);
        record.extend_from_slice(r.rest);
        put_varlong(&mut body, record.len() as i64);
        body.extend_from_slice(&record);
        let source = h.base_offset + i64::from(r.offset_delta);
        match runs.last_mut() {
            Some((first, n)) if *first + *n == source => *n += 1,
            _ => runs.push((source, 1)),
        }
    }
    let mut out = BytesMut::with_capacity(BATCH_HEADER_SIZE + body.len());
    out.extend_from_slice(&batch[..BATCH_HEADER_SIZE]);
    compress(codec, &body, &mut out)?;
    let attributes = if horizon {
        h.attributes & !ATTR_DELETE_HORIZON & !ATTR_TIMESTAMP_TYPE
    } else {
        h.attributes & !ATTR_TIMESTAMP_TYPE
    };
    clear_producer(&mut out, attributes);
    let batch_length = i32::try_from(out.len() - 12).map_err(|_| RewriteError::Truncated)?;
    out[8..12].copy_from_slice(&batch_length.to_be_bytes());
    out[23..27].copy_from_slice(&(h.record_count - 1).max(0).to_be_bytes());
    out[27..35].copy_from_slice(&base_ts.to_be_bytes());
    if h.timestamp_type() == TimestampType::CreateTime && !recs.is_empty() {
        out[MAX_TIMESTAMP_OFFSET..MAX_TIMESTAMP_OFFSET + 8].copy_from_slice(&max_ts.to_be_bytes());
    }
    seal(&mut out);
    let bytes = out.freeze();
    let header = BatchHeader::parse(&bytes).ok_or(RewriteError::Truncated)?;
    Ok(Rewritten {
        bytes,
        header,
        runs,
    })
}

/// Whether the destination batch `d` is `expected` (the bytes the agent appends): same last
/// offset delta and CRC; on a LogAppendTime destination batch, the CRC `expected` gets once the
/// broker restamps its max timestamp (and timestamp type) with `d`'s; for a marker (a control
/// batch, written by the broker with its own timestamp), the same producer id and epoch.
pub fn same_batch(d: &BatchHeader, expected: &[u8]) -> bool {
    let Ok(e) = header_of(expected) else {
        return false;
    };
    if e.is_control() {
        // A marker: the broker writes it itself, with its own timestamp.
        return d.is_control()
            && d.producer_id == e.producer_id
            && d.producer_epoch == e.producer_epoch
            && d.last_offset_delta == e.last_offset_delta;
    }
    if d.last_offset_delta != e.last_offset_delta || d.record_count != e.record_count {
        return false;
    }
    if d.crc == e.crc {
        return true;
    }
    if d.timestamp_type() != TimestampType::LogAppendTime {
        return false;
    }
    let attributes = e.attributes | ATTR_TIMESTAMP_TYPE;
    let mut crc = crc32c::crc32c(&attributes.to_be_bytes());
    crc = crc32c::crc32c_append(crc, &expected[ATTRIBUTES_OFFSET + 2..MAX_TIMESTAMP_OFFSET]);
    crc = crc32c::crc32c_append(crc, &d.max_timestamp.to_be_bytes());
    crc = crc32c::crc32c_append(crc, &expected[MAX_TIMESTAMP_OFFSET + 8..e.total_size()]);
    crc == d.crc
}

// ------------------------------------------------------------------ the partition task

fn rewrite_failed(h: &BatchHeader, e: RewriteError) -> Halt {
    Halt::Fail(format!(
        "the source batch at offset {} ({} records over {} offsets) cannot be rewritten for the destination: {e}",
        h.base_offset,
        h.record_count,
        i64::from(h.last_offset_delta) + 1
    ))
}

impl Task {
    /// Whether this batch's producer is tainted in this partition (module doc).
    pub(super) fn tainted(&self, h: &BatchHeader) -> bool {
        h.has_producer_id()
            && self
                .m
                .offsets
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&self.topic, self.partition)
                .is_some_and(|m| m.is_tainted(h.producer_id, h.producer_epoch))
    }

    fn taint(&self, h: &BatchHeader, why: &str) {
        if !h.has_producer_id() || self.tainted(h) {
            return;
        }
        self.m
            .offsets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(&self.topic, self.partition)
            .taint(h.producer_id, h.producer_epoch);
        self.m.offsets_dirty.store(true, Ordering::SeqCst);
        tracing::info!(
            mirror = %self.m.name, topic = %self.topic, partition = self.partition,
            producer_id = h.producer_id, producer_epoch = h.producer_epoch, source_offset = h.base_offset,
            "{why}: this producer's batches are mirrored without producer id from here on (same epoch)"
        );
    }

    /// The source offsets before `next_source` hold no more records: continue there.
    fn skip(&mut self, next_source: i64) {
        self.m
            .offsets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(&self.topic, self.partition)
            .skip_to(next_source);
        self.m.offsets_dirty.store(true, Ordering::SeqCst);
        self.next_src = self.next_src.max(next_source);
        self.stats
            .next_source
            .store(self.next_src, Ordering::Relaxed);
    }

    /// Record the runs of a rewritten batch appended at destination `base`, then continue after
    /// the source batch's last offset.
    fn record_runs(&mut self, h: &BatchHeader, base: i64, runs: &[(i64, i64)]) {
        let mut d = base;
        for (s, n) in runs {
            self.record(*s, d, *n);
            d += n;
        }
        self.skip(h.last_offset() + 1);
    }

    /// An empty source batch: nothing to append.
    pub(super) fn mirror_empty(&mut self, h: &BatchHeader) -> Step<()> {
        self.skip(h.last_offset() + 1);
        Ok(())
    }

    /// A batch with offset gaps: rewritten, written without producer id, its producer tainted.
    pub(super) async fn mirror_gapped(&mut self, h: &BatchHeader, b: &[u8]) -> Step<()> {
        let r = rewrite_gapped(b).map_err(|e| rewrite_failed(h, e))?;
        self.taint(h, "a compacted batch of this producer was rewritten");
        self.append_rewritten(h, r).await
    }

    /// A batch without gaps written without producer id: its producer is tainted, or the
    /// destination refused it as out of sequence (`refused`).
    pub(super) async fn mirror_stripped(
        &mut self,
        h: &BatchHeader,
        b: &[u8],
        refused: bool,
    ) -> Step<()> {
        if h.is_transactional() {
            return Err(Halt::Fail(format!(
                "the transactional source batch at offset {} (producer id {}, epoch {}) belongs to a producer whose \
                 earlier batches were compacted and mirrored as plain data without producer id: its transaction cannot \
                 be mirrored half plain, half transactional (a limit of mirroring compacted transactional topics)",
                h.base_offset, h.producer_id, h.producer_epoch
            )));
        }
        let (bytes, header) = strip_producer(b).map_err(|e| rewrite_failed(h, e))?;
        self.taint(
            h,
            if refused {
                "the destination refused a batch as out of sequence (batches of this producer were compacted away)"
            } else {
                "tainted producer"
            },
        );
        let runs = [(h.base_offset, i64::from(h.last_offset_delta) + 1)];
        self.append_rewritten(
            h,
            Rewritten {
                bytes,
                header,
                runs: runs.to_vec(),
            },
        )
        .await
    }

    async fn append_rewritten(&mut self, h: &BatchHeader, r: Rewritten) -> Step<()> {
        if self.stats.last_ts.load(Ordering::Relaxed) < 0 {
            self.stats
                .pending_ts
                .store(h.max_timestamp, Ordering::Relaxed);
        }
        // The header as appended, with the source base offset for messages.
        let header = BatchHeader {
            base_offset: h.base_offset,
            ..r.header
        };
        let len = r.bytes.len();
        let base = self.append(&header, r.bytes).await?;
        self.record_runs(h, base, &r.runs);
        self.stats.last_ts.store(h.max_timestamp, Ordering::Relaxed);
        self.stats
            .note_append(len, i64::from(h.last_offset_delta) + 1);
        self.m.count_append(len);
        Ok(())
    }

    /// Restart reconciliation of the source batch `s` (bytes `b`, at or after `next_src`) with
    /// the destination batch `d` at `next_dst`: records it when `d` is what the agent appends
    /// for `s` (as-is, rewritten or without producer id); an empty `s` is skipped. `false`:
    /// `d` is not the agent's.
    pub(super) fn reconcile_with(
        &mut self,
        s: &BatchHeader,
        b: &[u8],
        d: &BatchHeader,
    ) -> Step<bool> {
        let plain_data = s.has_producer_id() && !s.is_control() && !s.is_transactional();
        match SourceBatch::of(s) {
            SourceBatch::Empty => {
                self.skip(s.last_offset() + 1);
                return Ok(true);
            }
            SourceBatch::Gapped => {
                let r = rewrite_gapped(b).map_err(|e| rewrite_failed(s, e))?;
                if !same_batch(d, &r.bytes) {
                    return Ok(false);
                }
                self.taint(s, "a compacted batch of this producer was rewritten");
                self.record_runs(s, d.base_offset, &r.runs);
            }
            _ if (s.is_control() || !self.tainted(s)) && same_batch(d, b) => {
                self.record(
                    s.base_offset,
                    d.base_offset,
                    i64::from(s.last_offset_delta) + 1,
                );
            }
            _ if plain_data => {
                let (bytes, _) = strip_producer(b).map_err(|e| rewrite_failed(s, e))?;
                if !same_batch(d, &bytes) {
                    return Ok(false);
                }
                self.taint(
                    s,
                    "a batch of this producer was mirrored without producer id",
                );
                self.record(
                    s.base_offset,
                    d.base_offset,
                    i64::from(s.last_offset_delta) + 1,
                );
            }
            _ => return Ok(false),
        }
        tracing::debug!(
            topic = %self.topic, partition = self.partition, source = s.base_offset,
            destination = d.base_offset, "recovered a mirrored batch missing from the offset map"
        );
        Ok(true)
    }
}

#[cfg(test)]
#[path = "gapped_tests.rs"]
mod tests;
