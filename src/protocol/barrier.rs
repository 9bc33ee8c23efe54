//! The failover barrier (docs/architecture.md#the-barrier): its value format, the record batch
//! that carries it, cheap detection, and hiding barriers from ordinary consumers.
//!
//! Owns: the bytes of a barrier (value and batch), recognising a barrier batch in a records blob,
//! and rewriting a Fetch response's records so that barriers become skip-only control batches.
//! Must not touch: when barriers are written or what they do to the PSM (the mirror controller
//! and the PSM own that), Fetch response framing (callers pass one partition's `records`), I/O.
//!
//! # The barrier batch
//!
//! One uncompressed record batch v2 (as the gateway writes it; see below for recompressed ones)
//! with exactly one record: base offset 0 (the broker assigns
//! the real one), partition leader epoch −1, attributes 0 (not transactional, not control,
//! CreateTime), producer id −1, producer epoch −1, base sequence −1, last offset delta 0. The
//! record has key [`BARRIER_KEY`] (`__mirrorgate_barrier`), the encoded [`BarrierValue`] as its
//! value and no headers. Because it is an ordinary data batch without producer state, a vanilla
//! broker accepts it from a client (a control batch would be rejected, kip1279 H16) and it never
//! touches the broker's producer state.
//!
//! The barrier carries no timestamp: base and max timestamp are [`BARRIER_TIMESTAMP`] (−1,
//! `RecordBatch.NO_TIMESTAMP`) and the record's timestamp delta is 0. A CreateTime topic checks a
//! record's timestamp against `message.timestamp.before.max.ms`/`after.max.ms` only when it is
//! not −1 (Kafka 4.1.1 `LogValidator.validateTimestamp`), and a LogAppendTime topic stamps the
//! batch itself, so the broker never refuses the barrier for its timestamp (INVALID_TIMESTAMP,
//! 32), whatever the topic's limits or the gateway's clock (review F13; real-Kafka test
//! `a_barrier_is_written_whatever_the_topics_timestamp_limits`). The gateway's time of the
//! failover is in the value (`time_ms`).
//!
//! Detection ([`is_barrier_batch`]) needs all of: magic 2, not control, not transactional,
//! producer id −1, record count 1, a well-formed single record filling the batch's (decompressed)
//! records exactly, and the key equal to [`BARRIER_KEY`]. It does not check the CRC
//! ([`parse_barrier`] does). Detection does not depend on the value's version, so a barrier
//! written by a newer gateway upstream (chain or failback topologies) is still recognised and
//! hidden, even where its value cannot be decoded here.
//!
//! **Recompressed barriers (review F7).** The gateway writes the barrier uncompressed, but a
//! topic (or broker default) `compression.type` of gzip, snappy, lz4 or zstd makes the broker
//! re-encode it: same single record, producer id −1, the codec in the attributes. Detection,
//! [`parse_barrier`] (and so the resumed failover's search for its barrier) and
//! [`hide_barriers`] all accept that form too. The cost stays on barrier candidates only: the
//! header checks above come first (fixed header fields, no allocation); an uncompressed
//! candidate's record is read in place without allocating; only a compressed candidate — a
//! single-record batch without producer id, at most [`codec::MAX_DECOMPRESSED`] bytes — is
//! decompressed, first just enough bytes to see its key, then (for a barrier) the rest, never
//! more than [`codec::MAX_DECOMPRESSED`] bytes whatever the stream claims ([`codec`]).
//!
//! # The value format (version 1)
//!
//! ```text
//! magic                 4 bytes  "MGBR"
//! version               u8       1
//! mirror                string
//! failover_id           string
//! source_cluster_id     u8 tag (0 = absent, 1 = present), then string if present
//! time_ms               i64 big-endian
//! producers_expired     u32 big-endian
//! last_mirrored_offset  i64 big-endian
//! ```
//! `string` = unsigned LEB128 length (at most 5 bytes, ≤ u32::MAX) followed by that many UTF-8
//! bytes. Nothing may follow the last field.
//!
//! Extending it: a version 2 keeps the version-1 layout as its prefix and appends its new fields
//! after `last_mirrored_offset` (with tags for optional ones, as for `source_cluster_id`). A v2
//! decoder reads v1 values with the same prefix code and defaults the new fields; a v1 decoder
//! rejects v2 values with [`BarrierError::UnsupportedVersion`] (fail closed — it never guesses
//! what trailing bytes mean). Since detection is key-based, an old gateway still hides and
//! counts newer barriers; only their contents are unavailable to it. Upgrade downstream gateways
//! first in chains.
//!
//! # Hiding barriers from consumers
//!
//! [`hide_barriers`] replaces every barrier batch of a Fetch response partition by a *control*
//! batch covering the same offsets, instead of deleting it. Deleting would be wrong when the
//! barrier is the last batch of the log: a consumer positioned at the barrier would get an empty
//! response forever and never advance. Every client skips control records silently *and* moves
//! its position past them, so the replacement keeps consumers moving without showing them a
//! record.
//!
//! The replacement batch: same base offset, same last offset delta, same partition leader epoch,
//! same base/max timestamps and timestamp-type/delete-horizon bits; attributes = control, NOT
//! transactional, no compression; producer id −1, epoch −1, sequence −1; one record with the same
//! offset delta and timestamp delta as the barrier record, key = control key version 0 and type
//! [`HIDDEN_BARRIER_CONTROL_TYPE`] (exactly 4 bytes), null value, no headers. Batch length and
//! CRC-32C are recomputed; all other batches are copied byte for byte.
//!
//! Evidence (read in the clients' sources; nothing copied):
//! - Apache Kafka, `clients/.../consumer/internals/CompletedFetch.java` (`nextFetchedRecord`):
//!   records of a control batch are never returned; `nextFetchOffset = record.offset() + 1` for
//!   each skipped control record, and after the last batch `nextFetchOffset =
//!   currentBatch.nextOffset()` (last offset + 1), in both isolation levels. The READ_COMMITTED
//!   abort bookkeeping (`containsAbortMarker`, `isBatchAborted`) runs only when
//!   `currentBatch.hasProducerId()`, so a control batch with producer id −1 never has its key
//!   parsed there; `isBatchAborted` additionally requires the transactional bit.
//!   `ShareCompletedFetch.java` (KIP-932 share groups) likewise never returns control records and
//!   treats their offsets as gaps.
//! - `common/record/ControlRecordType.java`: types 0 ABORT, 1 COMMIT, 2–6 KRaft types; any other
//!   type id maps to `UNKNOWN` ("a control type which the client is not aware of and should be
//!   ignored"); `parseTypeId` needs ≥ 4 key bytes and a non-negative key version. KIP-1279's
//!   prototype takes type 7 for its `MIRROR_PID_RESET` marker, so 0–7 are all
//!   avoided.
//! - `common/record/MemoryRecords.java` (`createKraftControlRecordBuilder`): Kafka itself writes
//!   KRaft control batches exactly in this shape — control, not transactional, `NO_PRODUCER_ID`,
//!   `NO_PRODUCER_EPOCH`, `NO_SEQUENCE`, no compression.
//! - librdkafka `src/rdkafka_msgset_reader.c` (as vendored in mongodb/mongo,
//!   `rd_kafka_msgset_reader_msg_v2`): for a control batch the key size must be ≥ 2, a key
//!   version ≠ 0 is skipped, with version 0 the key size must be exactly 4 (otherwise a parse
//!   failure); COMMIT is ignored, ABORT is acted on only in read_committed, any other type is
//!   logged at debug ("Unsupported ctrl message type … ignoring"); a ctrl op is still enqueued so
//!   the offset advances, and `rd_kafka_msgset_reader_v2` sets the next offset to the batch's
//!   `LastOffset + 1` (KAFKA-5443). Aborted-transaction skipping only applies to batches that are
//!   transactional and not control.
//! - franz-go `pkg/kgo/source.go`: control records are dropped unless `KeepControlRecords`, the
//!   cursor moves to `record.Offset + 1` regardless; the aborter applies only to batches with the
//!   transactional bit, and an abort marker is recognised by key type bytes `0x0000`.
//! - kafka-python `consumer/fetcher.py`: a control batch is skipped with `next_fetch_offset =
//!   batch.next_offset` (older versions: offset of its first record + 1, so the batch must hold a
//!   record — ours holds one); abort logic only with `has_producer_id()`.
//!
//! Hence: control bit set, transactional bit clear, producer id −1, a 4-byte version-0 key whose
//! type is outside every known set ([`HIDDEN_BARRIER_CONTROL_TYPE`] = 0x4D47, "MG"), one record.
//! The gateway's own PSM sees it as `ControlType::Other` (see `batch::control_marker`), a no-op.

use std::borrow::Cow;
use std::ops::Range;

use bytes::Bytes;

pub use super::barrier_value::{
    BarrierError, BarrierValue, BARRIER_VALUE_MAGIC, BARRIER_VALUE_VERSION,
};
use super::batch::{
    BatchHeader, BatchWalker, Compression, BATCH_HEADER_SIZE, LOG_OVERHEAD, MAGIC_V2,
    NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE,
};
use super::codec;
use super::varint::{
    put_varint, put_varlong, read_nullable_bytes, read_varint, read_varlong, uvarint_len, zigzag32,
    zigzag64,
};

/// The reserved record key of a barrier.
pub const BARRIER_KEY: &[u8] = b"__mirrorgate_barrier";
/// Control record type of the batch that replaces a barrier in Fetch responses for ordinary
/// consumers: outside ABORT(0), COMMIT(1), the KRaft types 2–6 and KIP-1279's 7.
pub const HIDDEN_BARRIER_CONTROL_TYPE: i16 = 0x4D47;
/// Control record key version (the only one Kafka defines).
pub const CONTROL_KEY_VERSION: i16 = 0;

const ATTR_TIMESTAMP_TYPE: i16 = 0x08;
const ATTR_TRANSACTIONAL: i16 = 0x10;
const ATTR_CONTROL: i16 = 0x20;
const ATTR_DELETE_HORIZON: i16 = 0x40;
const CRC_FROM: usize = 21;
// ---------------------------------------------------------------------------------------------
// The batch.

/// The timestamp of a barrier batch as the gateway writes it: none (`NO_TIMESTAMP`), so that no
/// topic's timestamp limits can refuse it (module doc).
pub const BARRIER_TIMESTAMP: i64 = -1;

/// Encodes the complete barrier record batch for `value`, with `timestamp_ms` as the record
/// timestamp (base and max timestamp; the gateway passes [`BARRIER_TIMESTAMP`]). See the module
/// doc for the header fields.
pub fn encode_barrier_batch(value: &BarrierValue, timestamp_ms: i64) -> Bytes {
    let encoded = value.encode();
    let mut body = Vec::with_capacity(1 + 1 + 1 + 1 + BARRIER_KEY.len() + 5 + encoded.len() + 1);
    body.push(0); // record attributes
    put_varlong(&mut body, 0); // timestamp delta
    put_varint(&mut body, 0); // offset delta
    put_varint(&mut body, BARRIER_KEY.len() as i32);
    body.extend_from_slice(BARRIER_KEY);
    put_varint(&mut body, i32::try_from(encoded.len()).unwrap_or(i32::MAX));
    body.extend_from_slice(&encoded);
    put_varint(&mut body, 0); // headers

    let header = BatchHeader {
        base_offset: 0,
        batch_length: 0,
        partition_leader_epoch: -1,
        magic: MAGIC_V2,
        crc: 0,
        attributes: 0,
        last_offset_delta: 0,
        base_timestamp: timestamp_ms,
        max_timestamp: timestamp_ms,
        producer_id: NO_PRODUCER_ID,
        producer_epoch: NO_PRODUCER_EPOCH,
        base_sequence: NO_SEQUENCE,
        record_count: 1,
    };
    let mut out = Vec::with_capacity(BATCH_HEADER_SIZE + 5 + body.len());
    let start = push_header(&mut out, &header);
    put_varint(&mut out, i32::try_from(body.len()).unwrap_or(i32::MAX));
    out.extend_from_slice(&body);
    finish_batch(&mut out, start);
    Bytes::from(out)
}

/// Appends a header (batch length and CRC to be fixed by [`finish_batch`]); returns its start.
fn push_header(out: &mut Vec<u8>, header: &BatchHeader) -> usize {
    let start = out.len();
    let mut h = [0u8; BATCH_HEADER_SIZE];
    header.write_to(&mut h);
    out.extend_from_slice(&h);
    start
}

/// Fills in the batch length and CRC-32C of the batch that starts at `start` and ends at the end
/// of `out`.
fn finish_batch(out: &mut [u8], start: usize) {
    let batch = &mut out[start..];
    let batch_length = (batch.len() - LOG_OVERHEAD) as i32;
    batch[8..12].copy_from_slice(&batch_length.to_be_bytes());
    let crc = crc32c::crc32c(&batch[CRC_FROM..]);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
}

/// What detection learned about a barrier batch. Borrowed for an uncompressed barrier; the value
/// of a recompressed one is its own (decompressed) bytes.
struct BarrierView<'a> {
    header: BatchHeader,
    /// The whole batch (exactly `batch_length + 12` bytes).
    batch: &'a [u8],
    timestamp_delta: i64,
    offset_delta: i32,
    value: Result<Cow<'a, [u8]>, BarrierError>,
}

/// The single record of a barrier candidate, read from its records section.
struct BarrierRecord {
    timestamp_delta: i64,
    offset_delta: i32,
    /// Where the value lies in the records section.
    value: Result<Range<usize>, BarrierError>,
}

/// Bytes of a barrier record up to and including its key, at most: length, attributes,
/// timestamp delta, offset delta and key length as varints of their widest sizes, and the key.
const BARRIER_RECORD_PREFIX: usize = 5 + 1 + 10 + 5 + 5 + BARRIER_KEY.len();

/// The header checks every barrier passes (module doc), whatever its compression. All are
/// fields of the fixed header, so a batch that fails them costs nothing more.
fn is_candidate(header: &BatchHeader) -> bool {
    header.magic == MAGIC_V2
        && header.attributes & (ATTR_CONTROL | ATTR_TRANSACTIONAL) == 0
        && header.producer_id == NO_PRODUCER_ID
        && header.record_count == 1
        && header.last_offset_delta >= 0
        && header.batch_length >= (BATCH_HEADER_SIZE - LOG_OVERHEAD) as i32
}

/// The start of a record up to its key, as [`read_key_part`] reads it.
struct KeyPart {
    /// Where the record starts after its length varint, and that length.
    body_start: usize,
    body_len: usize,
    timestamp_delta: i64,
    offset_delta: i32,
}

/// Reads the length, attributes, deltas and key of the record at the start of `records`;
/// `None` unless the key is [`BARRIER_KEY`]. `records` may be a prefix of the section.
fn read_key_part(records: &[u8], pos: &mut usize) -> Option<KeyPart> {
    let len = read_varint(records, pos)?;
    let body_len = usize::try_from(len).ok()?;
    let body_start = *pos;
    *pos += 1; // record attributes
    let timestamp_delta = read_varlong(records, pos)?;
    let offset_delta = read_varint(records, pos)?;
    let key = read_nullable_bytes(records, pos)??;
    (key == BARRIER_KEY).then_some(KeyPart {
        body_start,
        body_len,
        timestamp_delta,
        offset_delta,
    })
}

/// Reads the one record of a barrier candidate's (decompressed) records section, which it must
/// fill exactly; `None` if it is not a barrier record.
fn read_barrier_record(records: &[u8], header: &BatchHeader) -> Option<BarrierRecord> {
    let mut pos = 0usize;
    let KeyPart {
        body_start,
        body_len,
        timestamp_delta,
        offset_delta,
    } = read_key_part(records, &mut pos)?;
    if body_start.checked_add(body_len)? != records.len() {
        return None;
    }
    if offset_delta < 0 || offset_delta > header.last_offset_delta {
        return None;
    }
    let value = match read_nullable_bytes(records, &mut pos) {
        Some(Some(v)) => {
            let end = pos;
            Ok(end - v.len()..end)
        }
        Some(None) => Err(BarrierError::NullValue),
        None => return None,
    };
    // Headers: counted and skipped, the record must end exactly at the section's end.
    let count = read_varint(records, &mut pos)?;
    if count < 0 {
        return None;
    }
    for _ in 0..count {
        read_nullable_bytes(records, &mut pos)??; // header key (never null)
        read_nullable_bytes(records, &mut pos)?; // header value (nullable)
    }
    if pos != records.len() {
        return None;
    }
    Some(BarrierRecord {
        timestamp_delta,
        offset_delta,
        value,
    })
}

/// Recognises a barrier batch at the start of `bytes` (see the module doc). `None` if it is not
/// one (including anything malformed or incomplete).
///
/// An uncompressed batch is read in place. A compressed one (a barrier the broker recompressed
/// for the topic's `compression.type`) is looked into only when the header checks pass and its
/// records section is at most [`codec::MAX_DECOMPRESSED`] bytes; then the first
/// [`BARRIER_RECORD_PREFIX`] bytes are decompressed and must hold the barrier key before the
/// rest is (never more than [`codec::MAX_DECOMPRESSED`] bytes).
fn barrier_view(bytes: &[u8]) -> Option<BarrierView<'_>> {
    let header = BatchHeader::parse(bytes)?;
    if !is_candidate(&header) {
        return None;
    }
    let compression = header.compression();
    if let Compression::Unknown(_) = compression {
        return None;
    }
    let batch = bytes.get(..header.total_size())?;
    let section = &batch[BATCH_HEADER_SIZE..];
    if compression == Compression::None {
        let r = read_barrier_record(section, &header)?;
        return Some(BarrierView {
            header,
            batch,
            timestamp_delta: r.timestamp_delta,
            offset_delta: r.offset_delta,
            value: r.value.map(|v| Cow::Borrowed(&section[v])),
        });
    }
    if section.len() > codec::MAX_DECOMPRESSED {
        return None;
    }
    let mut d = codec::Decompressed::new(compression, section)?;
    read_key_part(d.prefix(BARRIER_RECORD_PREFIX)?, &mut 0)?;
    let mut records = d.finish()?;
    let r = read_barrier_record(&records, &header)?;
    Some(BarrierView {
        header,
        batch,
        timestamp_delta: r.timestamp_delta,
        offset_delta: r.offset_delta,
        value: r.value.map(|v| {
            records.truncate(v.end);
            records.drain(..v.start);
            Cow::Owned(records)
        }),
    })
}

/// Whether the batch at the start of `batch` is a barrier batch, compressed or not. Cheap for
/// everything but a barrier candidate: header fields first (producer id −1, one record, not
/// control or transactional); an uncompressed candidate's record is read in place without
/// allocating; a compressed candidate of at most [`codec::MAX_DECOMPRESSED`] bytes is
/// decompressed (bounded), its key first. No CRC check. Only the first batch of the slice is
/// looked at; an incomplete batch is not a barrier.
pub fn is_barrier_batch(batch: &[u8]) -> bool {
    barrier_view(batch).is_some()
}

/// Reads the barrier at the start of `batch`: `Ok(None)` if it is not a barrier batch,
/// `Ok(Some(value))` for a barrier (also one the broker recompressed), an error if it is a
/// barrier batch whose CRC or value is bad.
pub fn parse_barrier(batch: &[u8]) -> Result<Option<BarrierValue>, BarrierError> {
    let Some(view) = barrier_view(batch) else {
        return Ok(None);
    };
    let computed = crc32c::crc32c(&view.batch[CRC_FROM..]);
    if computed != view.header.crc {
        return Err(BarrierError::CrcMismatch {
            stored: view.header.crc,
            computed,
        });
    }
    BarrierValue::decode(&view.value?).map(Some)
}

fn crc_ok(view: &BarrierView<'_>) -> bool {
    crc32c::crc32c(&view.batch[CRC_FROM..]) == view.header.crc
}

/// Size of the control batch that replaces a barrier.
fn replacement_size(view: &BarrierView<'_>) -> usize {
    let body = replacement_body_len(view);
    BATCH_HEADER_SIZE + uvarint_len(u64::from(zigzag32(body as i32))) + body
}

fn replacement_body_len(view: &BarrierView<'_>) -> usize {
    1 + uvarint_len(zigzag64(view.timestamp_delta))
        + uvarint_len(u64::from(zigzag32(view.offset_delta)))
        + 1 // key length 4
        + 4 // key
        + 1 // null value
        + 1 // no headers
}

/// Appends the control batch that stands in for the barrier `view` (module doc).
fn push_replacement(out: &mut Vec<u8>, view: &BarrierView<'_>) {
    let h = &view.header;
    let header = BatchHeader {
        base_offset: h.base_offset,
        batch_length: 0,
        partition_leader_epoch: h.partition_leader_epoch,
        magic: MAGIC_V2,
        crc: 0,
        attributes: (h.attributes & (ATTR_TIMESTAMP_TYPE | ATTR_DELETE_HORIZON)) | ATTR_CONTROL,
        last_offset_delta: h.last_offset_delta,
        base_timestamp: h.base_timestamp,
        max_timestamp: h.max_timestamp,
        producer_id: NO_PRODUCER_ID,
        producer_epoch: NO_PRODUCER_EPOCH,
        base_sequence: NO_SEQUENCE,
        record_count: 1,
    };
    let start = push_header(out, &header);
    put_varint(out, replacement_body_len(view) as i32);
    out.push(0); // record attributes
    put_varlong(out, view.timestamp_delta);
    put_varint(out, view.offset_delta);
    put_varint(out, 4);
    out.extend_from_slice(&CONTROL_KEY_VERSION.to_be_bytes());
    out.extend_from_slice(&HIDDEN_BARRIER_CONTROL_TYPE.to_be_bytes());
    put_varint(out, -1); // null value
    put_varint(out, 0); // no headers
    finish_batch(out, start);
}

/// Hides barriers from an ordinary consumer: given the `records` of one partition of a Fetch
/// response, returns `None` if it holds no barrier batch (one header walk; no allocation unless
/// a batch is a compressed barrier candidate, see the module doc), else new records in which
/// every barrier batch, compressed or not, is replaced by an uncompressed control batch with the
/// same base offset and offset span (module doc). All other bytes, including a partial trailing
/// batch and anything after a batch the walk cannot read, are kept exactly.
pub fn hide_barriers(records: &Bytes) -> Option<Bytes> {
    hide_barriers_counted(records).map(|(b, _)| b)
}

/// [`hide_barriers`], also returning how many barriers were replaced.
pub fn hide_barriers_counted(records: &Bytes) -> Option<(Bytes, usize)> {
    let bytes: &[u8] = records;
    let mut hidden = 0usize;
    let mut out: Option<Vec<u8>> = None;
    let mut copied = 0usize;
    let mut pos = 0usize;
    for item in BatchWalker::fetched(bytes) {
        let Ok((_, batch)) = item else { break };
        let start = pos;
        pos += batch.len();
        // A barrier whose CRC does not match is passed on untouched: the consumer then reports
        // the corruption exactly as it would without the gateway.
        if let Some(view) = barrier_view(batch).filter(crc_ok) {
            let buf = out.get_or_insert_with(|| Vec::with_capacity(bytes.len()));
            buf.extend_from_slice(&bytes[copied..start]);
            buf.reserve(replacement_size(&view));
            push_replacement(buf, &view);
            copied = pos;
            hidden += 1;
        }
    }
    let mut buf = out?;
    buf.extend_from_slice(&bytes[copied..]);
    Some((Bytes::from(buf), hidden))
}

/// Test support: the barrier carrying `value` at `base_offset` (leader epoch 5) as a broker
/// stores it after recompressing it with `codec` for a topic's `compression.type`: one record,
/// same key and value, no producer state, encoded by kafka-protocol (not by the gateway).
#[cfg(test)]
pub(crate) fn recompressed_barrier_for_tests(
    value: &BarrierValue,
    codec: kafka_protocol::records::Compression,
    base_offset: i64,
) -> Vec<u8> {
    use kafka_protocol::records::{Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};
    let r = Record {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: 5,
        producer_id: -1,
        producer_epoch: -1,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence: -1,
        timestamp: BARRIER_TIMESTAMP,
        key: Some(Bytes::from_static(BARRIER_KEY)),
        value: Some(Bytes::from(value.encode())),
        headers: Default::default(),
    };
    let mut buf = bytes::BytesMut::new();
    let opts = RecordEncodeOptions {
        version: 2,
        compression: codec,
    };
    RecordBatchEncoder::encode(&mut buf, [&r], &opts).expect("a barrier record encodes");
    let mut b = buf.to_vec();
    b[0..8].copy_from_slice(&base_offset.to_be_bytes());
    b[12..16].copy_from_slice(&5i32.to_be_bytes());
    b
}

#[cfg(test)]
#[path = "barrier_tests.rs"]
mod tests;
