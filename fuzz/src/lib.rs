//! Helpers shared by the fuzz targets and the seed generator.
//!
//! Fuzz inputs are raw bytes; most targets read one or two leading "selector" bytes (API key,
//! version, mode) and treat the rest as the wire bytes under test. CRC-32C checks would stop
//! the fuzzer at the first checksum, so some targets can repair checksums first
//! ([`fix_batch_crcs`], [`fix_snapshot_header`]) to reach the code behind them.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::StrBytes;
use mirrorgate::protocol::rewrite::{needs_rewrite, AddressMap};

/// Node ids 0..=3 are served at `gw.example:19092+id`; every other id is unmapped.
pub struct FixedMap;

impl AddressMap for FixedMap {
    fn endpoint(&self, node_id: i32) -> Option<(StrBytes, i32)> {
        (0..=3)
            .contains(&node_id)
            .then(|| (StrBytes::from_static_str("gw.example"), 19092 + node_id))
    }
}

/// The APIs `rewrite_response` decodes.
pub const REWRITTEN_KEYS: [ApiKey; 6] = [
    ApiKey::ApiVersions,
    ApiKey::Metadata,
    ApiKey::FindCoordinator,
    ApiKey::DescribeCluster,
    ApiKey::Produce,
    ApiKey::Fetch,
];

/// Every version of `key` that `rewrite_response` decodes.
pub fn rewritten_versions(key: ApiKey) -> Vec<i16> {
    let r = key.valid_versions();
    (r.min..=r.max).filter(|v| needs_rewrite(key, *v)).collect()
}

/// `(key, version)` chosen by two selector bytes, always one that `rewrite_response` decodes.
pub fn choose_rewrite(k: u8, v: u8) -> (ApiKey, i16) {
    let key = REWRITTEN_KEYS[k as usize % REWRITTEN_KEYS.len()];
    let versions = rewritten_versions(key);
    (key, versions[v as usize % versions.len()])
}

/// Selector bytes that [`choose_rewrite`] maps to `(key, version)` (for the seed generator).
pub fn rewrite_selector(key: ApiKey, version: i16) -> [u8; 2] {
    let k = REWRITTEN_KEYS
        .iter()
        .position(|x| *x == key)
        .expect("rewritten key") as u8;
    let v = rewritten_versions(key)
        .iter()
        .position(|x| *x == version)
        .expect("rewritten version") as u8;
    [k, v]
}

/// Prefix `body` with its length.
pub fn framed(body: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(body.len() + 4);
    out.extend_from_slice(&(body.len() as i32).to_be_bytes());
    out.extend_from_slice(body);
    out.freeze()
}

/// Recompute the CRC-32C of every v2 record batch in `buf` that its length field says is
/// complete (walking by `batch_length`, stopping at the first that is not).
pub fn fix_batch_crcs(buf: &mut [u8]) {
    let mut pos = 0usize;
    while buf.len() - pos >= 61 {
        let len = i32::from_be_bytes([buf[pos + 8], buf[pos + 9], buf[pos + 10], buf[pos + 11]]);
        if len < 49 {
            return;
        }
        let end = match pos.checked_add(12 + len as usize) {
            Some(e) if e <= buf.len() => e,
            _ => return,
        };
        let crc = crc32c::crc32c(&buf[pos + 21..end]);
        buf[pos + 17..pos + 21].copy_from_slice(&crc.to_be_bytes());
        pos = end;
    }
}

/// Make a PSM snapshot's header consistent with its payload: magic, version, payload length
/// and CRC (the fuzzer then explores the payload decoder).
pub fn fix_snapshot_header(buf: &mut [u8]) {
    if buf.len() < 16 {
        return;
    }
    buf[0..4].copy_from_slice(b"MGPS");
    buf[4..6].copy_from_slice(&1u16.to_be_bytes());
    let payload_len = (buf.len() - 16) as u32;
    buf[12..16].copy_from_slice(&payload_len.to_be_bytes());
    let crc = crc32c::crc32c(&buf[16..]);
    buf[8..12].copy_from_slice(&crc.to_be_bytes());
}

/// A small deterministic byte reader for structured choices in fuzz targets.
pub struct Choices<'a> {
    data: &'a [u8],
}

impl<'a> Choices<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Choices { data }
    }

    pub fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((b, rest)) => {
                self.data = rest;
                *b
            }
            None => 0,
        }
    }

    pub fn rest(self) -> &'a [u8] {
        self.data
    }
}
