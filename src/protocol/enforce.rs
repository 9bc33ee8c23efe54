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
//! Owns: the bytes. Must not touch: which partitions are read-only (the caller's `decide`),
//! metrics, connection state. Never panics on input.

use std::collections::BTreeMap;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{
    ApiKey, ProduceRequest, ProduceResponse, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use thiserror::Error;

use super::frame::FrameError;
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

fn encode_err(what: &'static str) -> impl FnOnce(anyhow::Error) -> EnforceError {
    move |e| EnforceError::Encode {
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

/// Encodes `header` (at `header_version`) and `msg` (at `version`) into a frame.
fn encode_response<M: Encodable>(
    header: &ResponseHeader,
    header_version: i16,
    msg: &M,
    version: i16,
    size_hint: usize,
) -> Result<Bytes, EnforceError> {
    #[cfg(test)]
    super::frame::counts::bump(super::frame::counts::Event::ResponseEncode);
    let mut out = BytesMut::with_capacity(size_hint + 16);
    out.put_i32(0);
    header
        .encode(&mut out, header_version)
        .map_err(encode_err("produce response header"))?;
    msg.encode(&mut out, version)
        .map_err(encode_err("produce response"))?;
    let len = i32::try_from(out.len() - 4)
        .map_err(|_| EnforceError::BadFrame("response larger than 2 GiB".into()))?;
    out[0..4].copy_from_slice(&len.to_be_bytes());
    Ok(out.freeze())
}

/// Decodes a Produce response frame into its header and body.
fn decode_response(
    frame: &Bytes,
    version: i16,
) -> Result<(ResponseHeader, ProduceResponse), EnforceError> {
    check_version(version)?;
    check_frame(frame)?;
    #[cfg(test)]
    super::frame::counts::bump(super::frame::counts::Event::ResponseDecode);
    let mut body = frame.slice(4..);
    let hv = ApiKey::Produce.response_header_version(version);
    let header = ResponseHeader::decode(&mut body, hv).map_err(decode_err("response header"))?;
    let resp =
        ProduceResponse::decode(&mut body, version).map_err(decode_err("produce response"))?;
    if !body.is_empty() {
        return Err(trailing("produce response", body.len()));
    }
    if negative(&header.unknown_tagged_fields) || response_has_negative_tag(&resp) {
        return Err(negative_tag("produce response"));
    }
    Ok((header, resp))
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
fn add_rejections(resp: &mut ProduceResponse, version: i16, rejected: &[RejectedPartition]) {
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
            let (topic, topic_id) = match p.topic {
                TopicRef::Name(n) => (n.to_owned(), uuid::Uuid::nil()),
                TopicRef::Id(id) => (String::new(), id),
            };
            rejected.push(RejectedPartition {
                topic,
                topic_id,
                partition: p.partition,
                error_code: rej.error_code,
                message: rej.message,
                log_start_offset: rej.log_start_offset,
            });
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
            let mut resp = ProduceResponse::default();
            add_rejections(&mut resp, version, &rejected);
            let mut header = ResponseHeader::default();
            header.correlation_id = correlation_id;
            let hv = ApiKey::Produce.response_header_version(version);
            Some(encode_response(
                &header,
                hv,
                &resp,
                version,
                64 + rejected.len() * 64,
            )?)
        };
        return Ok(ProduceDecision::AllRejected { response, rejected });
    }

    // Decode (records stay slices of `frame`), drop the rejected partitions by position.
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

    let mut out = BytesMut::with_capacity(frame.len());
    out.put_i32(0);
    out.extend_from_slice(&frame[4..body_start]);
    req.encode(&mut out, version)
        .map_err(encode_err("produce request"))?;
    let len = i32::try_from(out.len() - 4)
        .map_err(|_| EnforceError::BadFrame("request larger than 2 GiB".into()))?;
    out[0..4].copy_from_slice(&len.to_be_bytes());
    Ok(ProduceDecision::Rewritten {
        frame: out.freeze(),
        rejected,
    })
}

/// Adds the `rejected` partitions to the broker's Produce response (`response_frame`, length
/// prefix included), merging into an existing topic entry when the topic is there. The
/// correlation id and everything else in the response are kept.
pub fn merge_rejections(
    response_frame: &Bytes,
    version: i16,
    rejected: &[RejectedPartition],
) -> Result<Bytes, EnforceError> {
    let (header, mut resp) = decode_response(response_frame, version)?;
    add_rejections(&mut resp, version, rejected);
    let hv = ApiKey::Produce.response_header_version(version);
    encode_response(
        &header,
        hv,
        &resp,
        version,
        response_frame.len() + rejected.len() * 64,
    )
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
    let (header, mut resp) = decode_response(response_frame, version)?;
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
    if !changed {
        return Ok(None);
    }
    let hv = ApiKey::Produce.response_header_version(version);
    encode_response(&header, hv, &resp, version, response_frame.len() + 64).map(Some)
}

#[cfg(test)]
#[path = "enforce_tests.rs"]
mod tests;
