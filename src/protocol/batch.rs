//! Record-batch (magic 2) header walker.
//!
//! Owns: reading the fixed 61-byte v2 batch header (docs/psm.md, rules B1–B11) out of a `records`
//! byte slice, without decompressing or decoding records, and without allocating. Also a small
//! reader for the single end-transaction marker record of an uncompressed control batch (B13),
//! which the producer state needs when it is rebuilt from the log.
//!
//! Must not touch: record contents (beyond the marker record), compression, any gateway state.
//!
//! Two walking modes:
//! - [`BatchWalker::new`]: client produce data. Every byte must belong to a complete batch, and
//!   non-control batches must satisfy the broker's count rule (`LogValidator.validateBatch`:
//!   `record_count >= 1` and `last_offset_delta == record_count - 1`). CRC-32C is verified when
//!   asked for (the broker's `analyzeAndValidateRecords` does it for every client batch).
//! - [`BatchWalker::fetched`]: data read from a log (Fetch responses). The walk stops cleanly at a
//!   partial trailing batch (a broker may cut a response mid-batch), and the count rule is the one
//!   compaction preserves: `0 <= record_count <= last_offset_delta + 1` (compaction removes records
//!   but keeps the batch's last offset, and may leave empty batches behind).

use thiserror::Error;

/// Size of the v2 batch header (`RECORD_BATCH_OVERHEAD`).
pub const BATCH_HEADER_SIZE: usize = 61;
/// Bytes before and including the batch-length field (`LOG_OVERHEAD`).
pub const LOG_OVERHEAD: usize = 12;
/// The only magic Kafka 4 accepts.
pub const MAGIC_V2: i8 = 2;
/// Producer id of a batch without producer state.
pub const NO_PRODUCER_ID: i64 = -1;
/// Producer epoch of a batch without producer state.
pub const NO_PRODUCER_EPOCH: i16 = -1;
/// Sequence of a batch without producer state.
pub const NO_SEQUENCE: i32 = -1;

const CRC_OFFSET: usize = 17;
pub(crate) const ATTRIBUTES_OFFSET: usize = 21;

const ATTR_CODEC_MASK: i16 = 0x07;
const ATTR_TIMESTAMP_TYPE: i16 = 0x08;
const ATTR_TRANSACTIONAL: i16 = 0x10;
const ATTR_CONTROL: i16 = 0x20;
const ATTR_DELETE_HORIZON: i16 = 0x40;

/// Compression codec from attributes bits 0–2 (B10).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
    /// Codec ids 5–7 are not defined; the broker rejects them.
    Unknown(u8),
}

/// Timestamp type from attributes bit 3 (B10).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampType {
    CreateTime,
    LogAppendTime,
}

/// The fixed header of a v2 record batch (B1–B9d). Plain data; reading it allocates nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    pub batch_length: i32,
    pub partition_leader_epoch: i32,
    pub magic: i8,
    pub crc: u32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub record_count: i32,
}

#[inline(always)]
fn be_i16(h: &[u8; BATCH_HEADER_SIZE], at: usize) -> i16 {
    i16::from_be_bytes([h[at], h[at + 1]])
}
#[inline(always)]
fn be_i32(h: &[u8; BATCH_HEADER_SIZE], at: usize) -> i32 {
    i32::from_be_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]])
}
#[inline(always)]
fn be_i64(h: &[u8; BATCH_HEADER_SIZE], at: usize) -> i64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&h[at..at + 8]);
    i64::from_be_bytes(b)
}

/// Sequence arithmetic with the broker's wrap-around past `i32::MAX` back to 0 (B11;
/// `DefaultRecordBatch.incrementSequence`).
#[inline]
pub fn increment_sequence(sequence: i32, increment: i32) -> i32 {
    if sequence > i32::MAX - increment {
        increment - (i32::MAX - sequence) - 1
    } else {
        sequence + increment
    }
}

/// Inverse of [`increment_sequence`] (`DefaultRecordBatch.decrementSequence`).
#[inline]
pub fn decrement_sequence(sequence: i32, decrement: i32) -> i32 {
    if sequence < decrement {
        i32::MAX - (decrement - sequence) + 1
    } else {
        sequence - decrement
    }
}

impl BatchHeader {
    /// Reads the header fields from the first 61 bytes of a batch. No validation.
    #[inline]
    pub fn from_bytes(h: &[u8; BATCH_HEADER_SIZE]) -> BatchHeader {
        BatchHeader {
            base_offset: be_i64(h, 0),
            batch_length: be_i32(h, 8),
            partition_leader_epoch: be_i32(h, 12),
            magic: h[16] as i8,
            crc: be_i32(h, CRC_OFFSET) as u32,
            attributes: be_i16(h, ATTRIBUTES_OFFSET),
            last_offset_delta: be_i32(h, 23),
            base_timestamp: be_i64(h, 27),
            max_timestamp: be_i64(h, 35),
            producer_id: be_i64(h, 43),
            producer_epoch: be_i16(h, 51),
            base_sequence: be_i32(h, 53),
            record_count: be_i32(h, 57),
        }
    }

    /// Reads the header from the start of `bytes`, or `None` if fewer than 61 bytes are given.
    #[inline]
    pub fn parse(bytes: &[u8]) -> Option<BatchHeader> {
        let h: &[u8; BATCH_HEADER_SIZE] = bytes.get(..BATCH_HEADER_SIZE)?.try_into().ok()?;
        Some(Self::from_bytes(h))
    }

    /// Writes the header into the first 61 bytes of `out` (tests and benchmarks build batches
    /// with it). The CRC field is written as stored in `self`.
    pub fn write_to(&self, out: &mut [u8; BATCH_HEADER_SIZE]) {
        out[0..8].copy_from_slice(&self.base_offset.to_be_bytes());
        out[8..12].copy_from_slice(&self.batch_length.to_be_bytes());
        out[12..16].copy_from_slice(&self.partition_leader_epoch.to_be_bytes());
        out[16] = self.magic as u8;
        out[17..21].copy_from_slice(&self.crc.to_be_bytes());
        out[21..23].copy_from_slice(&self.attributes.to_be_bytes());
        out[23..27].copy_from_slice(&self.last_offset_delta.to_be_bytes());
        out[27..35].copy_from_slice(&self.base_timestamp.to_be_bytes());
        out[35..43].copy_from_slice(&self.max_timestamp.to_be_bytes());
        out[43..51].copy_from_slice(&self.producer_id.to_be_bytes());
        out[51..53].copy_from_slice(&self.producer_epoch.to_be_bytes());
        out[53..57].copy_from_slice(&self.base_sequence.to_be_bytes());
        out[57..61].copy_from_slice(&self.record_count.to_be_bytes());
    }

    /// Codec from attributes bits 0–2.
    #[inline]
    pub fn compression(&self) -> Compression {
        match (self.attributes & ATTR_CODEC_MASK) as u8 {
            0 => Compression::None,
            1 => Compression::Gzip,
            2 => Compression::Snappy,
            3 => Compression::Lz4,
            4 => Compression::Zstd,
            other => Compression::Unknown(other),
        }
    }

    #[inline]
    pub fn is_transactional(&self) -> bool {
        self.attributes & ATTR_TRANSACTIONAL != 0
    }

    #[inline]
    pub fn is_control(&self) -> bool {
        self.attributes & ATTR_CONTROL != 0
    }

    /// Bit 6: the log cleaner stored a delete horizon in `base_timestamp`.
    #[inline]
    pub fn has_delete_horizon(&self) -> bool {
        self.attributes & ATTR_DELETE_HORIZON != 0
    }

    #[inline]
    pub fn timestamp_type(&self) -> TimestampType {
        if self.attributes & ATTR_TIMESTAMP_TYPE != 0 {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        }
    }

    /// `producer_id >= 0` (`RecordBatch.hasProducerId`: `NO_PRODUCER_ID < producerId`).
    #[inline]
    pub fn has_producer_id(&self) -> bool {
        self.producer_id > NO_PRODUCER_ID
    }

    /// Last sequence of the batch: `base_sequence + last_offset_delta`, wrapping past
    /// `i32::MAX` to 0; −1 when the batch has no sequence (B11).
    #[inline]
    pub fn last_sequence(&self) -> i32 {
        if self.base_sequence == NO_SEQUENCE {
            NO_SEQUENCE
        } else {
            increment_sequence(self.base_sequence, self.last_offset_delta)
        }
    }

    /// `base_offset + last_offset_delta`.
    #[inline]
    pub fn last_offset(&self) -> i64 {
        self.base_offset
            .wrapping_add(i64::from(self.last_offset_delta))
    }

    /// Size of the whole batch on the wire: `batch_length + 12`.
    #[inline]
    pub fn total_size(&self) -> usize {
        (self.batch_length.max(0) as usize) + LOG_OVERHEAD
    }
}

/// Why a records slice is not a clean sequence of v2 batches. Every variant carries the batch
/// index (0-based) and the byte position of the batch start within the slice.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BatchError {
    #[error("batch {index} at byte {pos}: truncated header ({available} bytes, need {BATCH_HEADER_SIZE})")]
    TruncatedHeader {
        index: usize,
        pos: usize,
        available: usize,
    },
    #[error(
        "batch {index} at byte {pos}: declared size {declared} but only {available} bytes remain"
    )]
    TruncatedBatch {
        index: usize,
        pos: usize,
        declared: usize,
        available: usize,
    },
    #[error("batch {index} at byte {pos}: batch length {batch_length} is below the header size")]
    LengthBelowHeader {
        index: usize,
        pos: usize,
        batch_length: i32,
    },
    #[error("batch {index} at byte {pos}: unsupported magic {magic} (only 2)")]
    UnsupportedMagic { index: usize, pos: usize, magic: i8 },
    #[error(
        "batch {index} at byte {pos}: record count {record_count} inconsistent with last offset delta {last_offset_delta}"
    )]
    InconsistentCount {
        index: usize,
        pos: usize,
        record_count: i32,
        last_offset_delta: i32,
    },
    #[error("batch {index} at byte {pos}: CRC mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    CrcMismatch {
        index: usize,
        pos: usize,
        stored: u32,
        computed: u32,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Client,
    Fetched,
}

/// Iterator over the batches of a records slice. Yields each header with the bytes of the whole
/// batch. Zero allocation; stops after the first error.
#[derive(Debug, Clone)]
pub struct BatchWalker<'a> {
    bytes: &'a [u8],
    pos: usize,
    index: usize,
    verify_crc: bool,
    mode: Mode,
    done: bool,
}

impl<'a> BatchWalker<'a> {
    /// Strict walk of client produce data (see the module doc).
    pub fn new(bytes: &'a [u8], verify_crc: bool) -> Self {
        #[cfg(test)]
        super::frame::counts::bump(super::frame::counts::Event::BatchWalk);
        BatchWalker {
            bytes,
            pos: 0,
            index: 0,
            verify_crc,
            mode: Mode::Client,
            done: false,
        }
    }

    /// Tolerant walk of fetched data: a partial trailing batch ends the walk without an error.
    /// CRC checking is off; turn it on with [`BatchWalker::with_crc`].
    pub fn fetched(bytes: &'a [u8]) -> Self {
        BatchWalker {
            bytes,
            pos: 0,
            index: 0,
            verify_crc: false,
            mode: Mode::Fetched,
            done: false,
        }
    }

    /// Enables or disables CRC-32C verification.
    pub fn with_crc(mut self, verify_crc: bool) -> Self {
        self.verify_crc = verify_crc;
        self
    }

    /// Byte position of the next batch (after a clean end: the length of the complete prefix).
    pub fn position(&self) -> usize {
        self.pos
    }

    #[inline]
    fn step(&mut self) -> Option<Result<(BatchHeader, &'a [u8]), BatchError>> {
        let rest = &self.bytes[self.pos..];
        if rest.is_empty() {
            return None;
        }
        let (index, pos) = (self.index, self.pos);
        let fetched = self.mode == Mode::Fetched;
        if rest.len() < LOG_OVERHEAD {
            if fetched {
                return None;
            }
            return Some(Err(BatchError::TruncatedHeader {
                index,
                pos,
                available: rest.len(),
            }));
        }
        let batch_length = i32::from_be_bytes([rest[8], rest[9], rest[10], rest[11]]);
        if batch_length < (BATCH_HEADER_SIZE - LOG_OVERHEAD) as i32 {
            return Some(Err(BatchError::LengthBelowHeader {
                index,
                pos,
                batch_length,
            }));
        }
        let declared = batch_length as usize + LOG_OVERHEAD;
        if rest.len() < declared {
            if fetched {
                return None;
            }
            if rest.len() < BATCH_HEADER_SIZE {
                return Some(Err(BatchError::TruncatedHeader {
                    index,
                    pos,
                    available: rest.len(),
                }));
            }
            return Some(Err(BatchError::TruncatedBatch {
                index,
                pos,
                declared,
                available: rest.len(),
            }));
        }
        let batch = &rest[..declared];
        let magic = batch[16] as i8;
        if magic != MAGIC_V2 {
            return Some(Err(BatchError::UnsupportedMagic { index, pos, magic }));
        }
        let Some(header) = BatchHeader::parse(batch) else {
            // Unreachable: declared >= BATCH_HEADER_SIZE was checked above.
            return Some(Err(BatchError::TruncatedHeader {
                index,
                pos,
                available: batch.len(),
            }));
        };
        let (count, delta) = (header.record_count, header.last_offset_delta);
        let consistent = if fetched {
            count >= 0 && delta >= 0 && i64::from(count) <= i64::from(delta) + 1
        } else if header.is_control() {
            count >= 0 && delta >= 0
        } else {
            count >= 1 && delta >= 0 && i64::from(delta) + 1 == i64::from(count)
        };
        if !consistent {
            return Some(Err(BatchError::InconsistentCount {
                index,
                pos,
                record_count: count,
                last_offset_delta: delta,
            }));
        }
        if self.verify_crc {
            let computed = crc32c::crc32c(&batch[ATTRIBUTES_OFFSET..]);
            if computed != header.crc {
                return Some(Err(BatchError::CrcMismatch {
                    index,
                    pos,
                    stored: header.crc,
                    computed,
                }));
            }
        }
        self.pos += declared;
        self.index += 1;
        Some(Ok((header, batch)))
    }
}

impl<'a> Iterator for BatchWalker<'a> {
    type Item = Result<(BatchHeader, &'a [u8]), BatchError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let item = self.step();
        if !matches!(item, Some(Ok(_))) {
            self.done = true;
        }
        item
    }
}

/// What the broker checks about the batches of one partition of a client Produce request before
/// anything else (docs/psm.md: V3, V7, V8; rows 13–18), reported in the broker's order.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ClientBatchError {
    #[error("no record batch")]
    NoBatch,
    #[error("more than one record batch")]
    MoreThanOneBatch,
    #[error(transparent)]
    Batch(#[from] BatchError),
    #[error("base offset {0} is not 0")]
    NonZeroBaseOffset(i64),
}

/// Reads the single batch a Produce v3+ partition must carry (V3: exactly one v2 batch), walking
/// strictly and with the requested CRC check. Checks of the PSM stage are left to the PSM.
pub fn single_client_batch(
    records: &[u8],
    verify_crc: bool,
) -> Result<(BatchHeader, &[u8]), ClientBatchError> {
    let mut walker = BatchWalker::new(records, verify_crc);
    let first = walker.next().ok_or(ClientBatchError::NoBatch)??;
    if walker.pos < records.len() {
        return Err(ClientBatchError::MoreThanOneBatch);
    }
    if first.0.base_offset != 0 {
        return Err(ClientBatchError::NonZeroBaseOffset(first.0.base_offset));
    }
    Ok(first)
}

/// Type of a control record (key `int16 version, int16 type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlType {
    Abort,
    Commit,
    /// Any other type (KRaft-only types 2–6 and unknown values).
    Other(i16),
}

/// The end-transaction marker held by a control batch (B13).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControlMarker {
    pub control_type: ControlType,
    /// From the record value; `None` for non-marker control types.
    pub coordinator_epoch: Option<i32>,
    /// The record's timestamp (`base_timestamp + timestamp_delta`).
    pub timestamp: i64,
}

/// Why a control batch's marker record cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum MarkerError {
    #[error("not a control batch")]
    NotControl,
    #[error("control batch is compressed")]
    Compressed,
    #[error("malformed control record: {0}")]
    Malformed(&'static str),
}

/// Zig-zag varint (32-bit) at `pos`.
fn read_varint(b: &[u8], pos: &mut usize) -> Result<i32, MarkerError> {
    let v = read_varlong(b, pos)?;
    i32::try_from(v).map_err(|_| MarkerError::Malformed("varint out of range"))
}

/// Zig-zag varlong at `pos`.
fn read_varlong(b: &[u8], pos: &mut usize) -> Result<i64, MarkerError> {
    let mut raw: u64 = 0;
    for shift in (0..70).step_by(7) {
        let byte = *b
            .get(*pos)
            .ok_or(MarkerError::Malformed("varint past the end"))?;
        *pos += 1;
        raw |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64));
        }
    }
    Err(MarkerError::Malformed("varint too long"))
}

fn read_bytes<'b>(b: &'b [u8], pos: &mut usize) -> Result<Option<&'b [u8]>, MarkerError> {
    let len = read_varint(b, pos)?;
    if len < 0 {
        return Ok(None);
    }
    let end = pos
        .checked_add(len as usize)
        .filter(|e| *e <= b.len())
        .ok_or(MarkerError::Malformed("field past the end"))?;
    let out = &b[*pos..end];
    *pos = end;
    Ok(Some(out))
}

/// Reads the marker of a control batch (`batch` = the whole batch as yielded by the walker).
/// `Ok(None)` for an empty control batch (B14: left behind by compaction, a no-op for the PSM).
pub fn control_marker(
    header: &BatchHeader,
    batch: &[u8],
) -> Result<Option<ControlMarker>, MarkerError> {
    if !header.is_control() {
        return Err(MarkerError::NotControl);
    }
    if header.record_count == 0 || batch.len() <= BATCH_HEADER_SIZE {
        return Ok(None);
    }
    if header.compression() != Compression::None {
        return Err(MarkerError::Compressed);
    }
    let b = &batch[BATCH_HEADER_SIZE..];
    let mut pos = 0usize;
    let _len = read_varint(b, &mut pos)?;
    pos += 1; // record attributes
    let ts_delta = read_varlong(b, &mut pos)?;
    let _offset_delta = read_varint(b, &mut pos)?;
    let key = read_bytes(b, &mut pos)?.ok_or(MarkerError::Malformed("null control key"))?;
    if key.len() < 4 {
        return Err(MarkerError::Malformed("control key shorter than 4 bytes"));
    }
    if i16::from_be_bytes([key[0], key[1]]) < 0 {
        return Err(MarkerError::Malformed("negative control key version"));
    }
    let control_type = match i16::from_be_bytes([key[2], key[3]]) {
        0 => ControlType::Abort,
        1 => ControlType::Commit,
        other => ControlType::Other(other),
    };
    let coordinator_epoch = match control_type {
        ControlType::Abort | ControlType::Commit => {
            let value =
                read_bytes(b, &mut pos)?.ok_or(MarkerError::Malformed("null marker value"))?;
            if value.len() < 6 {
                return Err(MarkerError::Malformed("marker value shorter than 6 bytes"));
            }
            if i16::from_be_bytes([value[0], value[1]]) < 0 {
                return Err(MarkerError::Malformed("negative marker value version"));
            }
            Some(i32::from_be_bytes([value[2], value[3], value[4], value[5]]))
        }
        ControlType::Other(_) => None,
    };
    Ok(Some(ControlMarker {
        control_type,
        coordinator_epoch,
        timestamp: header.base_timestamp.wrapping_add(ts_delta),
    }))
}

#[cfg(test)]
#[path = "batch_tests.rs"]
mod tests;
