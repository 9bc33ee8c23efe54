//! The value of a barrier record: what a failover writes into each partition (mirror, failover
//! id, source cluster, time, producers expired, last mirrored offset), its versioned wire
//! layout (described in `barrier.rs`'s module doc) and a decoder that never panics.
//!
//! Owns: the value's bytes. Must not touch: the batch around it, detection and hiding
//! (`barrier.rs`), when barriers are written.

use thiserror::Error;

/// First bytes of an encoded [`BarrierValue`].
pub const BARRIER_VALUE_MAGIC: [u8; 4] = *b"MGBR";
/// The value version this build writes and reads.
pub const BARRIER_VALUE_VERSION: u8 = 1;
/// Largest string length the value format accepts (its length prefix is at most 5 LEB128 bytes).
const MAX_STRING_LEN: u64 = u32::MAX as u64;

/// The value of a barrier record (wire layout: `barrier.rs`'s module doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BarrierValue {
    /// Format version the value was decoded from; [`BarrierValue::encode`] always writes
    /// [`BARRIER_VALUE_VERSION`].
    pub version: u8,
    /// Name of the mirror whose failover wrote the barrier.
    pub mirror: String,
    /// Identifier of that failover (one per failover call; all partitions share it).
    pub failover_id: String,
    /// Cluster id of the mirror's source cluster, when known.
    pub source_cluster_id: Option<String>,
    /// Wall-clock time of the failover step that wrote the barrier (ms since the epoch).
    pub time_ms: i64,
    /// Number of producer entries the barrier expires in the partition's PSM.
    pub producers_expired: u32,
    /// Offset of the last mirrored record before the barrier (−1 if none).
    pub last_mirrored_offset: i64,
}

/// Why a barrier value or batch cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BarrierError {
    #[error("barrier value does not start with the magic bytes \"MGBR\"")]
    BadMagic,
    #[error("barrier value version {0} is not supported (this build reads version {BARRIER_VALUE_VERSION})")]
    UnsupportedVersion(u8),
    #[error("barrier value truncated in {field}")]
    Truncated { field: &'static str },
    #[error("barrier value: length of {field} is not a valid LEB128 number")]
    BadLength { field: &'static str },
    #[error("barrier value: {field} is not valid UTF-8")]
    InvalidUtf8 { field: &'static str },
    #[error("barrier value: invalid presence tag {tag} for {field}")]
    InvalidTag { field: &'static str, tag: u8 },
    #[error("barrier value has {0} trailing bytes")]
    TrailingBytes(usize),
    #[error("barrier record has a null value")]
    NullValue,
    #[error("barrier batch CRC mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    CrcMismatch { stored: u32, computed: u32 },
}

impl BarrierValue {
    /// Encodes the value (always as [`BARRIER_VALUE_VERSION`]).
    pub fn encode(&self) -> Vec<u8> {
        let cluster_len = self.source_cluster_id.as_ref().map_or(0, |s| s.len() + 5);
        let mut out = Vec::with_capacity(
            4 + 1 + 10 + self.mirror.len() + self.failover_id.len() + 1 + cluster_len + 20,
        );
        out.extend_from_slice(&BARRIER_VALUE_MAGIC);
        out.push(BARRIER_VALUE_VERSION);
        put_string(&mut out, &self.mirror);
        put_string(&mut out, &self.failover_id);
        match &self.source_cluster_id {
            None => out.push(0),
            Some(id) => {
                out.push(1);
                put_string(&mut out, id);
            }
        }
        out.extend_from_slice(&self.time_ms.to_be_bytes());
        out.extend_from_slice(&self.producers_expired.to_be_bytes());
        out.extend_from_slice(&self.last_mirrored_offset.to_be_bytes());
        out
    }

    /// Decodes a value. Never panics; rejects a wrong magic, an unknown version, truncation,
    /// invalid UTF-8 and trailing bytes.
    pub fn decode(bytes: &[u8]) -> Result<BarrierValue, BarrierError> {
        let mut r = ValueReader { b: bytes, pos: 0 };
        if r.take(4, "magic")? != BARRIER_VALUE_MAGIC {
            return Err(BarrierError::BadMagic);
        }
        let version = r.take(1, "version")?[0];
        if version != BARRIER_VALUE_VERSION {
            return Err(BarrierError::UnsupportedVersion(version));
        }
        let mirror = r.string("mirror")?;
        let failover_id = r.string("failover_id")?;
        let source_cluster_id = match r.take(1, "source_cluster_id")?[0] {
            0 => None,
            1 => Some(r.string("source_cluster_id")?),
            tag => {
                return Err(BarrierError::InvalidTag {
                    field: "source_cluster_id",
                    tag,
                })
            }
        };
        let time_ms = i64::from_be_bytes(r.array("time_ms")?);
        let producers_expired = u32::from_be_bytes(r.array("producers_expired")?);
        let last_mirrored_offset = i64::from_be_bytes(r.array("last_mirrored_offset")?);
        if r.pos != bytes.len() {
            return Err(BarrierError::TrailingBytes(bytes.len() - r.pos));
        }
        Ok(BarrierValue {
            version,
            mirror,
            failover_id,
            source_cluster_id,
            time_ms,
            producers_expired,
            last_mirrored_offset,
        })
    }
}

fn put_string(out: &mut Vec<u8>, s: &str) {
    let mut n = s.len() as u64;
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            break;
        }
        out.push(byte | 0x80);
    }
    out.extend_from_slice(s.as_bytes());
}

struct ValueReader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> ValueReader<'a> {
    fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], BarrierError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|e| *e <= self.b.len())
            .ok_or(BarrierError::Truncated { field })?;
        let out = &self.b[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], BarrierError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, field)?);
        Ok(a)
    }

    fn string(&mut self, field: &'static str) -> Result<String, BarrierError> {
        let mut len: u64 = 0;
        let mut done = false;
        for shift in (0..35).step_by(7) {
            let byte = self.take(1, field)?[0];
            len |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                done = true;
                break;
            }
        }
        if !done || len > MAX_STRING_LEN {
            return Err(BarrierError::BadLength { field });
        }
        let len = usize::try_from(len).map_err(|_| BarrierError::Truncated { field })?;
        let bytes = self.take(len, field)?;
        std::str::from_utf8(bytes)
            .map(str::to_owned)
            .map_err(|_| BarrierError::InvalidUtf8 { field })
    }
}
