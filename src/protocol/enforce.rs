//! Per-partition enforcement inside Produce requests and responses (docs/architecture.md: the
//! partition states and the layers of protection).
//!
//! [`filter_produce`] lets the caller reject chosen partitions of a Produce request (read-only
//! mirror topics) while the rest of the request is forwarded: a cheap [`ProduceWalker`] pass asks
//! the caller about every partition without allocating; only when something is rejected is the
//! request decoded (zero-copy for `records`), trimmed and re-encoded behind the *original* request
//! header bytes. When every partition is rejected no request goes upstream and the gateway answers
//! itself ([`ProduceDecision::AllRejected`]).
//!
//! [`merge_rejections`] adds the rejected partitions to the broker's response to the trimmed
//! request, so the client gets one answer for every partition it sent.
//! [`rewrite_partition_errors`] turns chosen acknowledgements of a Produce response into errors
//! (duplicate-ack guard, docs/architecture.md#the-layers-of-protection).
//!
//! Rejected / rewritten partitions carry `error_code`, `error_message` (on the wire from v8),
//! `base_offset` −1, `log_append_time_ms` −1 and `log_start_offset` −1, as Kafka's own error
//! responses do. Topics are named by name up to v12 and by topic id from v13.
//!
//! The gateway's Produce exchange (`proxy::exchange::produce`) uses the pieces directly on its
//! one [`super::produce::ProduceView`] and its one decoded response: [`rejected_partition`],
//! [`trim_request`], [`all_rejected_response`], [`check_readback`], [`add_rejections`] and
//! [`mark_partition_errors`]; [`filter_produce`], [`merge_rejections`] and
//! [`rewrite_partition_errors`] are the same steps over whole frames.
//!
//! Owns: the bytes. Must not touch: which partitions are read-only (the caller's `decide`),
//! metrics, connection state. Never panics on input.

use std::collections::BTreeMap;

use bytes::Bytes;
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{ApiKey, ProduceRequest, ProduceResponse, TopicName};
use kafka_protocol::protocol::{Decodable, StrBytes};
use thiserror::Error;

use super::frame::{Decoded, FrameError};
use super::produce::{
    ProduceError, ProducePartition, ProduceWalker, TopicRef, PRODUCE_MAX_VERSION,
    PRODUCE_MIN_VERSION,
};

/// Why a partition is refused: the error code and message the client gets for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub error_code: i16,
    pub message: String,
    /// The `log_start_offset` of the partition's answer: −1 (what Kafka sends with an error)
    /// unless a refusal needs clients to read another value (Produce only).
    pub log_start_offset: i64,
}

impl Rejection {
    /// A refusal with `error_code` and `message`, `log_start_offset` −1.
    pub fn new(error_code: i16, message: impl Into<String>) -> Rejection {
        Rejection {
            error_code,
            message: message.into(),
            log_start_offset: -1,
        }
    }
}

/// One partition the gateway refused. `topic` is the name (empty from Produce v13, which names
/// topics by id); `topic_id` is the id (nil before v13).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejectedPartition {
    pub topic: String,
    pub topic_id: uuid::Uuid,
    pub partition: i32,
    pub error_code: i16,
    pub message: String,
    pub log_start_offset: i64,
}

/// What to do with a Produce request after [`filter_produce`].
#[derive(Debug, Clone, PartialEq)]
pub enum ProduceDecision {
    /// Nothing rejected: forward the original frame as it is.
    Forward,
    /// Some partitions rejected: forward `frame` (the request without them) and merge
    /// `rejected` into the broker's response with [`merge_rejections`].
    Rewritten {
        frame: Bytes,
        rejected: Vec<RejectedPartition>,
    },
    /// Every partition rejected: nothing goes upstream. `response` is the complete response frame
    /// for the client, `None` for acks=0 (the client expects no response).
    AllRejected {
        response: Option<Bytes>,
        rejected: Vec<RejectedPartition>,
    },
}

/// A Produce request or response the enforcement code cannot handle.
#[derive(Debug, Error)]
pub enum EnforceError {
    /// Produce version outside 3..=13.
    #[error("produce version {0} is not supported (3..=13)")]
    UnsupportedVersion(i16),
    /// The frame is shorter than its length prefix says, or than the request header.
    #[error("malformed frame: {0}")]
    BadFrame(String),
    /// The walker refused the request body.
    #[error("malformed produce request: {0}")]
    Walk(#[from] ProduceError),
    /// kafka-protocol refused to decode the message.
    #[error("cannot decode {what}: {reason}")]
    Decode { what: &'static str, reason: String },
    /// kafka-protocol refused to encode the rewritten message.
    #[error("cannot encode {what}: {reason}")]
    Encode { what: &'static str, reason: String },
    /// The walker and the decoder disagree about the request's partitions.
    #[error("produce request: walker saw {walked} partitions, decoder {decoded}")]
    Inconsistent { walked: usize, decoded: usize },
}

impl From<EnforceError> for FrameError {
    fn from(e: EnforceError) -> Self {
        FrameError::BadResponse(e.to_string())
    }
}

fn decode_err(what: &'static str) -> impl FnOnce(anyhow::Error) -> EnforceError {
    move |e| EnforceError::Decode {
        what,
        reason: e.to_string(),
    }
}

fn check_version(version: i16) -> Result<(), EnforceError> {
    if (PRODUCE_MIN_VERSION..=PRODUCE_MAX_VERSION).contains(&version) {
        Ok(())
    } else {
        Err(EnforceError::UnsupportedVersion(version))
    }
}

/// Checks the length prefix of `frame` against its size.
fn check_frame(frame: &[u8]) -> Result<(), EnforceError> {
    if frame.len() < 4 {
        return Err(EnforceError::BadFrame(format!(
            "frame of {} bytes has no length prefix",
            frame.len()
        )));
    }
    let len = i32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
    if len < 0 || len as usize != frame.len() - 4 {
        return Err(EnforceError::BadFrame(format!(
            "length prefix {len} does not match a frame of {} bytes",
            frame.len()
        )));
    }
    Ok(())
}

fn codec_err(what: &'static str, decode: bool) -> impl FnOnce(FrameError) -> EnforceError {
    move |e| {
        let reason = match e {
            FrameError::BadResponse(r) => r,
            other => other.to_string(),
        };
        if decode {
            EnforceError::Decode { what, reason }
        } else {
            EnforceError::Encode { what, reason }
        }
    }
}

/// Decodes a Produce response frame into its header and body, refusing what would not read
/// back as received ([`check_readback`]).
fn decode_response(frame: &Bytes, version: i16) -> Result<Decoded<ProduceResponse>, EnforceError> {
    check_version(version)?;
    check_frame(frame)?;
    let hv = ApiKey::Produce.response_header_version(version);
    let d = super::frame::decode_response::<ProduceResponse>(frame, hv, version)
        .map_err(codec_err("produce response", true))?;
    check_readback(frame, version, &d)?;
    Ok(d)
}

/// Whether a decoded Produce response may be changed and encoded again: the version is one the
/// gateway reads, the length prefix matches, no bytes followed the message and no unknown
/// tagged field has a tag of 2^31 or more (kafka-protocol would not write those back).
pub fn check_readback(
    frame: &Bytes,
    version: i16,
    d: &Decoded<ProduceResponse>,
) -> Result<(), EnforceError> {
    check_version(version)?;
    check_frame(frame)?;
    if d.trailing > 0 {
        return Err(trailing("produce response", d.trailing));
    }
    if negative(&d.header.unknown_tagged_fields) || response_has_negative_tag(&d.body) {
        return Err(negative_tag("produce response"));
    }
    Ok(())
}

fn encode_decoded(
    d: &Decoded<ProduceResponse>,
    version: i16,
    size_hint: usize,
) -> Result<Bytes, EnforceError> {
    let hv = ApiKey::Produce.response_header_version(version);
    super::frame::encode_response(&d.header, hv, &d.body, version, size_hint)
        .map_err(codec_err("produce response", false))
}

fn trailing(what: &'static str, n: usize) -> EnforceError {
    EnforceError::Decode {
        what,
        reason: format!("{n} bytes after the message"),
    }
}

fn negative_tag(what: &'static str) -> EnforceError {
    EnforceError::Decode {
        what,
        reason: "tagged field number of 2^31 or more".into(),
    }
}

// Re-encoding must give back what was received (minus / plus what the gateway changes).
// kafka-protocol does not write unknown tagged fields whose tag is 2^31 or more (negative as its
// `i32` key) yet counts them, and bytes after the message would be dropped silently: messages
// with either are refused before they are re-encoded.

fn negative(fields: &BTreeMap<i32, Bytes>) -> bool {
    // Keys are sorted: the first is the smallest.
    fields.keys().next().is_some_and(|k| *k < 0)
}

fn response_has_negative_tag(resp: &ProduceResponse) -> bool {
    negative(&resp.unknown_tagged_fields)
        || resp
            .node_endpoints
            .iter()
            .any(|n| negative(&n.unknown_tagged_fields))
        || resp.responses.iter().any(|t| {
            negative(&t.unknown_tagged_fields)
                || t.partition_responses.iter().any(|p| {
                    negative(&p.unknown_tagged_fields)
                        || negative(&p.current_leader.unknown_tagged_fields)
                        || p.record_errors
                            .iter()
                            .any(|e| negative(&e.unknown_tagged_fields))
                })
        })
}

fn request_has_negative_tag(req: &ProduceRequest) -> bool {
    negative(&req.unknown_tagged_fields)
        || req.topic_data.iter().any(|t| {
            negative(&t.unknown_tagged_fields)
                || t.partition_data
                    .iter()
                    .any(|p| negative(&p.unknown_tagged_fields))
        })
}

/// The partition result Kafka sends for a refused partition.
fn error_partition(
    partition: i32,
    error_code: i16,
    message: &str,
    log_start_offset: i64,
) -> PartitionProduceResponse {
    let mut p = PartitionProduceResponse::default();
    p.index = partition;
    p.error_code = error_code;
    p.base_offset = -1;
    p.log_append_time_ms = -1;
    p.log_start_offset = log_start_offset;
    p.error_message = Some(StrBytes::from_string(message.to_owned()));
    p
}

/// Adds `rejected` to `resp`, into the existing entry of each topic when there is one.
pub fn add_rejections(resp: &mut ProduceResponse, version: i16, rejected: &[RejectedPartition]) {
    for r in rejected {
        let by_id = version >= 13;
        let existing = resp.responses.iter_mut().position(|t| {
            if by_id {
                t.topic_id == r.topic_id
            } else {
                t.name.0.as_str() == r.topic
            }
        });
        let idx = match existing {
            Some(i) => i,
            None => {
                let mut t = TopicProduceResponse::default();
                if by_id {
                    t.topic_id = r.topic_id;
                } else {
                    t.name = TopicName(StrBytes::from_string(r.topic.clone()));
                }
                resp.responses.push(t);
                resp.responses.len() - 1
            }
        };
        resp.responses[idx]
            .partition_responses
            .push(error_partition(
                r.partition,
                r.error_code,
                &r.message,
                r.log_start_offset,
            ));
    }
}

/// Checks a whole Produce request frame before enforcement reads it: a version the gateway
/// reads, a length prefix that matches, a header of `header_len` bytes (relative to the frame
/// body) that names Produce at `version`. Returns where the body starts in `frame`.
pub fn check_request(frame: &[u8], header_len: usize, version: i16) -> Result<usize, EnforceError> {
    check_version(version)?;
    check_frame(frame)?;
    let body_start = header_len
        .checked_add(4)
        .filter(|s| *s <= frame.len() && header_len >= 8)
        .ok_or_else(|| {
            EnforceError::BadFrame(format!(
                "request header of {header_len} bytes in a frame of {} bytes",
                frame.len()
            ))
        })?;
    let key = i16::from_be_bytes([frame[4], frame[5]]);
    let frame_version = i16::from_be_bytes([frame[6], frame[7]]);
    if key != ApiKey::Produce as i16 || frame_version != version {
        return Err(EnforceError::BadFrame(format!(
            "request header says api key {key} version {frame_version}, expected Produce v{version}"
        )));
    }
    Ok(body_start)
}

/// Applies `decide` to every partition of a Produce request and removes the rejected ones.
///
/// `frame` is the whole request frame (length prefix included), `header_len` the request header
/// length from [`super::parse_request_header`] (relative to the frame body), `version` and
/// `correlation_id` the header's. `decide` is called once per partition, in request order.
///
/// Nothing rejected → [`ProduceDecision::Forward`] without allocating. Otherwise the request is
/// decoded, the rejected partitions (and topics they leave empty) are removed, and the rest is
/// re-encoded behind the original header bytes → [`ProduceDecision::Rewritten`]. Every partition
/// rejected → [`ProduceDecision::AllRejected`] with a synthesized response (none for acks=0).
pub fn filter_produce(
    frame: &Bytes,
    header_len: usize,
    version: i16,
    correlation_id: i32,
    decide: &mut dyn FnMut(&ProducePartition<'_>) -> Option<Rejection>,
) -> Result<ProduceDecision, EnforceError> {
    let body_start = check_request(frame, header_len, version)?;
    let body = &frame[body_start..];

    // Cheap pass: no allocation unless something is rejected.
    let walker = ProduceWalker::new(version, body)?;
    let acks = walker.acks();
    let mut rejected: Vec<RejectedPartition> = Vec::new();
    let mut rejected_ordinals: Vec<usize> = Vec::new();
    let mut total = 0usize;
    for item in walker {
        let p = item?;
        if let Some(rej) = decide(&p) {
            rejected.push(rejected_partition(p.topic, p.partition, rej));
            rejected_ordinals.push(total);
        }
        total += 1;
    }
    if rejected.is_empty() {
        return Ok(ProduceDecision::Forward);
    }
    if rejected.len() == total {
        let response = if acks == 0 {
            None
        } else {
            Some(all_rejected_response(version, correlation_id, &rejected)?)
        };
        return Ok(ProduceDecision::AllRejected { response, rejected });
    }
    let frame = trim_request(frame, body_start, version, &rejected_ordinals, total)?;
    Ok(ProduceDecision::Rewritten { frame, rejected })
}

/// The partition `partition` of `topic` refused with `rej`.
pub fn rejected_partition(
    topic: TopicRef<'_>,
    partition: i32,
    rej: Rejection,
) -> RejectedPartition {
    let (topic, topic_id) = match topic {
        TopicRef::Name(n) => (n.to_owned(), uuid::Uuid::nil()),
        TopicRef::Id(id) => (String::new(), id),
    };
    RejectedPartition {
        topic,
        topic_id,
        partition,
        error_code: rej.error_code,
        message: rej.message,
        log_start_offset: rej.log_start_offset,
    }
}

/// The gateway's whole answer to a Produce request whose every partition it refused.
pub fn all_rejected_response(
    version: i16,
    correlation_id: i32,
    rejected: &[RejectedPartition],
) -> Result<Bytes, EnforceError> {
    let mut resp = ProduceResponse::default();
    add_rejections(&mut resp, version, rejected);
    super::frame::answer(
        ApiKey::Produce,
        version,
        correlation_id,
        &resp,
        64 + rejected.len() * 64,
    )
    .map_err(codec_err("produce response", false))
}

/// The request `frame` without the partitions at `rejected_ordinals` (positions in request
/// order, ascending; `total` partitions in all) and the topics they leave empty, re-encoded
/// behind the original header bytes (`frame[4..body_start]`). Records stay slices of `frame`
/// until the encode copies them.
pub fn trim_request(
    frame: &Bytes,
    body_start: usize,
    version: i16,
    rejected_ordinals: &[usize],
    total: usize,
) -> Result<Bytes, EnforceError> {
    #[cfg(test)]
    super::frame::counts::bump(super::frame::counts::Event::RequestDecode);
    let mut body_bytes = frame.slice(body_start..);
    let mut req =
        ProduceRequest::decode(&mut body_bytes, version).map_err(decode_err("produce request"))?;
    if !body_bytes.is_empty() {
        return Err(trailing("produce request", body_bytes.len()));
    }
    if request_has_negative_tag(&req) {
        return Err(negative_tag("produce request"));
    }
    let decoded: usize = req.topic_data.iter().map(|t| t.partition_data.len()).sum();
    if decoded != total {
        return Err(EnforceError::Inconsistent {
            walked: total,
            decoded,
        });
    }
    let mut ordinal = 0usize;
    let mut next_rejected = rejected_ordinals.iter().copied().peekable();
    req.topic_data.retain_mut(|topic| {
        if topic.partition_data.is_empty() {
            // Empty in the original request: keep it as the client sent it.
            return true;
        }
        topic.partition_data.retain(|_| {
            let keep = next_rejected.peek() != Some(&ordinal);
            if !keep {
                next_rejected.next();
            }
            ordinal += 1;
            keep
        });
        !topic.partition_data.is_empty()
    });
    super::frame::encode_request_behind(&frame[4..body_start], &req, version, frame.len()).map_err(
        |e| match e {
            FrameError::BadResponse(r) if r.contains("2 GiB") => {
                EnforceError::BadFrame("request larger than 2 GiB".into())
            }
            other => codec_err("produce request", false)(other),
        },
    )
}

/// Adds the `rejected` partitions to the broker's Produce response (`response_frame`, length
/// prefix included), merging into an existing topic entry when the topic is there. The
/// correlation id and everything else in the response are kept.
pub fn merge_rejections(
    response_frame: &Bytes,
    version: i16,
    rejected: &[RejectedPartition],
) -> Result<Bytes, EnforceError> {
    let mut d = decode_response(response_frame, version)?;
    add_rejections(&mut d.body, version, rejected);
    encode_decoded(&d, version, response_frame.len() + rejected.len() * 64)
}

/// The callback of [`rewrite_partition_errors`]: `(topic name or "", topic id or nil, partition,
/// error code, base offset)` → `Some((error_code, message))` to turn that result into an error.
pub type PartitionErrorChange<'a> =
    dyn FnMut(&str, uuid::Uuid, i32, i16, i64) -> Option<(i16, String)> + 'a;

/// Lets `change` turn chosen partition results of a Produce response into errors.
///
/// `change` gets the topic name (empty from v13), the topic id (nil before v13), the partition,
/// its error code and base offset; returning `Some((error_code, message))` makes that partition
/// an error (base offset, log append time and log start offset −1). Returns the re-encoded frame,
/// or `None` when nothing changed.
pub fn rewrite_partition_errors(
    response_frame: &Bytes,
    version: i16,
    change: &mut PartitionErrorChange<'_>,
) -> Result<Option<Bytes>, EnforceError> {
    let mut d = decode_response(response_frame, version)?;
    if !mark_partition_errors(&mut d.body, version, change) {
        return Ok(None);
    }
    encode_decoded(&d, version, response_frame.len() + 64).map(Some)
}

/// The step of [`rewrite_partition_errors`] on a decoded response: whether `change` turned some
/// partition result into an error.
pub fn mark_partition_errors(
    resp: &mut ProduceResponse,
    version: i16,
    change: &mut PartitionErrorChange<'_>,
) -> bool {
    let mut changed = false;
    for t in resp.responses.iter_mut() {
        let name = if version >= 13 { "" } else { t.name.0.as_str() };
        let id = if version >= 13 {
            t.topic_id
        } else {
            uuid::Uuid::nil()
        };
        for p in t.partition_responses.iter_mut() {
            if let Some((code, message)) = change(name, id, p.index, p.error_code, p.base_offset) {
                p.error_code = code;
                p.error_message = Some(StrBytes::from_string(message));
                p.base_offset = -1;
                p.log_append_time_ms = -1;
                p.log_start_offset = -1;
                changed = true;
            }
        }
    }
    changed
}

#[cfg(test)]
#[path = "enforce_tests.rs"]
mod tests;
