//! Records one by one, for the rare path that must change records on their way (the recovery
//! of an un-mirrored tail adds provenance headers to each): every record of a v2 batch read
//! with its key, value and headers exactly as stored — header order and repeated header keys
//! kept, which a map of headers would lose —, and records written into one uncompressed v2
//! batch of an idempotent producer.
//!
//! Owns: the v2 record layout (length, attributes, timestamp and offset deltas, key, value,
//! headers), the bounded decompression of a whole batch for it, and the header and CRC-32C of
//! the batches it writes. Must not touch: what the records mean, I/O. The hot paths (the proxy,
//! the agent) never decode records; they use [`super::batch`].

use bytes::{BufMut, Bytes, BytesMut};
use thiserror::Error;

use super::batch::{BatchHeader, Compression, BATCH_HEADER_SIZE, LOG_OVERHEAD, MAGIC_V2};
use super::codec::Decompressed;
use super::varint::{put_varint, put_varlong, read_varint, read_varlong};

/// Upper bound on a batch's records section once decompressed. A broker's default
/// `max.message.bytes` is 1 MiB compressed; 64 MiB leaves room for any sane ratio and bounds a
/// batch that decompresses without end.
pub const MAX_RECORDS_SECTION: usize = 64 * 1024 * 1024;

/// One record of a batch, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRecord {
    pub offset: i64,
    /// The record's timestamp (the batch's max timestamp when the batch keeps LogAppendTime).
    pub timestamp: i64,
    /// The record's sequence (-1 in a batch without producer id).
    pub sequence: i32,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    /// In stored order; a key may repeat.
    pub headers: Vec<(Bytes, Option<Bytes>)>,
}

/// Why a batch's records could not be read.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum RecordsError {
    #[error("the batch at offset {0} is shorter than its header says")]
    Truncated(i64),
    #[error("the batch at offset {0} is not a v2 batch")]
    NotV2(i64),
    #[error("the batch at offset {offset} has an unknown codec or does not decompress within {limit} bytes")]
    Decompression { offset: i64, limit: usize },
    #[error("the batch at offset {offset}: malformed record ({what})")]
    Malformed { offset: i64, what: &'static str },
}

/// Every record of `batch` (one whole v2 batch, header included). A control batch's marker
/// record comes back as a record too; the caller decides.
pub fn decode(batch: &Bytes) -> Result<Vec<StoredRecord>, RecordsError> {
    let header = BatchHeader::parse(batch).ok_or(RecordsError::Truncated(-1))?;
    let base = header.base_offset;
    if header.magic != MAGIC_V2 {
        return Err(RecordsError::NotV2(base));
    }
    let total = header.total_size();
    if batch.len() < total || total < BATCH_HEADER_SIZE {
        return Err(RecordsError::Truncated(base));
    }
    let section = match header.compression() {
        Compression::None => batch.slice(BATCH_HEADER_SIZE..total),
        codec => {
            let d =
                Decompressed::within(codec, &batch[BATCH_HEADER_SIZE..total], MAX_RECORDS_SECTION)
                    .and_then(Decompressed::finish)
                    .ok_or(RecordsError::Decompression {
                        offset: base,
                        limit: MAX_RECORDS_SECTION,
                    })?;
            Bytes::from(d)
        }
    };
    let malformed = |what| RecordsError::Malformed { offset: base, what };
    let log_append_time = header.attributes & 0x08 != 0;
    let count = header.record_count.max(0) as usize;
    // Never trust the count for an allocation: each record takes at least 7 bytes.
    let mut out = Vec::with_capacity(count.min(section.len() / 7 + 1));
    let mut pos = 0usize;
    for _ in 0..count {
        let len = read_varint(&section, &mut pos).ok_or_else(|| malformed("length"))?;
        let len = usize::try_from(len).map_err(|_| malformed("negative length"))?;
        let end = pos
            .checked_add(len)
            .filter(|e| *e <= section.len())
            .ok_or_else(|| malformed("length past the batch"))?;
        let r = section.slice(pos..end);
        let mut p = 1usize; // attributes
        if r.is_empty() {
            return Err(malformed("empty record"));
        }
        let ts_delta = read_varlong(&r, &mut p).ok_or_else(|| malformed("timestamp delta"))?;
        let off_delta = read_varint(&r, &mut p)
            .filter(|d| (0..=header.last_offset_delta).contains(d))
            .ok_or_else(|| malformed("offset delta"))?;
        let key = nullable(&r, &mut p).ok_or_else(|| malformed("key"))?;
        let value = nullable(&r, &mut p).ok_or_else(|| malformed("value"))?;
        let n = read_varint(&r, &mut p).ok_or_else(|| malformed("header count"))?;
        let n = usize::try_from(n).map_err(|_| malformed("negative header count"))?;
        let mut headers = Vec::with_capacity(n.min(r.len() / 2 + 1));
        for _ in 0..n {
            let k = nullable(&r, &mut p)
                .flatten()
                .ok_or_else(|| malformed("header key"))?;
            let v = nullable(&r, &mut p).ok_or_else(|| malformed("header value"))?;
            headers.push((k, v));
        }
        if p != r.len() {
            return Err(malformed("bytes after the record's headers"));
        }
        let sequence = if header.base_sequence < 0 {
            -1
        } else {
            super::batch::increment_sequence(header.base_sequence, off_delta)
        };
        out.push(StoredRecord {
            offset: base + i64::from(off_delta),
            timestamp: if log_append_time {
                header.max_timestamp
            } else {
                header.base_timestamp.saturating_add(ts_delta)
            },
            sequence,
            key,
            value,
            headers,
        });
        pos = end;
    }
    Ok(out)
}

/// A varint-length byte string of a record (-1: null), sliced out of `r`.
fn nullable(r: &Bytes, pos: &mut usize) -> Option<Option<Bytes>> {
    let len = read_varint(r, pos)?;
    if len < 0 {
        return (len == -1).then_some(None);
    }
    let end = pos.checked_add(len as usize).filter(|e| *e <= r.len())?;
    let b = r.slice(*pos..end);
    *pos = end;
    Some(Some(b))
}

/// The producer of a batch written by [`encode_idempotent`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Producer {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
}

/// The bytes a record takes in a batch written by [`encode_idempotent`] (its length prefix
/// included), to cut batches to a size before writing them.
pub fn encoded_len(r: &StoredRecord) -> usize {
    let mut scratch = Vec::new();
    put_record(&mut scratch, r, 0, 0);
    scratch.len()
}

/// One uncompressed v2 batch (CreateTime, not transactional) of `records`, in order, with offset
/// deltas 0.. and the timestamps they carry, written by `producer`. `None` for no records or
/// more than `i32::MAX` of them.
pub fn encode_idempotent(records: &[StoredRecord], producer: Producer) -> Option<Bytes> {
    let first = records.first()?;
    let count = i32::try_from(records.len()).ok()?;
    let base_ts = first.timestamp;
    let max_ts = records.iter().map(|r| r.timestamp).max().unwrap_or(base_ts);
    let mut body = Vec::new();
    for (i, r) in records.iter().enumerate() {
        put_record(&mut body, r, r.timestamp.wrapping_sub(base_ts), i as i32);
    }
    let total = BATCH_HEADER_SIZE + body.len();
    let header = BatchHeader {
        base_offset: 0,
        batch_length: i32::try_from(total - LOG_OVERHEAD).ok()?,
        partition_leader_epoch: -1,
        magic: MAGIC_V2,
        crc: 0,
        attributes: 0,
        last_offset_delta: count - 1,
        base_timestamp: base_ts,
        max_timestamp: max_ts,
        producer_id: producer.producer_id,
        producer_epoch: producer.producer_epoch,
        base_sequence: producer.base_sequence,
        record_count: count,
    };
    let mut h = [0u8; BATCH_HEADER_SIZE];
    header.write_to(&mut h);
    let mut out = BytesMut::with_capacity(total);
    out.put_slice(&h);
    out.put_slice(&body);
    // CRC-32C from the attributes to the end.
    let crc = crc32c::crc32c(&out[21..]);
    out[17..21].copy_from_slice(&crc.to_be_bytes());
    Some(out.freeze())
}

fn put_record(out: &mut Vec<u8>, r: &StoredRecord, ts_delta: i64, offset_delta: i32) {
    let mut b = Vec::with_capacity(32);
    b.push(0u8); // attributes
    put_varlong(&mut b, ts_delta);
    put_varint(&mut b, offset_delta);
    put_nullable(&mut b, r.key.as_deref());
    put_nullable(&mut b, r.value.as_deref());
    put_varint(&mut b, r.headers.len() as i32);
    for (k, v) in &r.headers {
        put_nullable(&mut b, Some(k));
        put_nullable(&mut b, v.as_deref());
    }
    put_varint(out, b.len() as i32);
    out.extend_from_slice(&b);
}

fn put_nullable(out: &mut Vec<u8>, b: Option<&[u8]>) {
    match b {
        None => put_varint(out, -1),
        Some(b) => {
            put_varint(out, b.len() as i32);
            out.extend_from_slice(b);
        }
    }
}

#[cfg(test)]
#[path = "records_tests.rs"]
mod tests;
