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
mod tests {
    use super::*;
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::RequestHeader;
    use proptest::prelude::*;
    use proptest::test_runner::Config as ProptestConfig;
    use uuid::Uuid;

    use crate::protocol::frame::parse_request_header;

    const CORR: i32 = 4242;

    fn topic_id(t: usize) -> Uuid {
        Uuid::from_u128(0x1000 + t as u128)
    }

    fn topic_name(t: usize) -> String {
        format!("topic-{t}")
    }

    /// Records bytes distinct per partition (kafka-protocol treats them as opaque bytes).
    fn records(t: usize, p: i32) -> Bytes {
        Bytes::from(
            (0..(61 + t * 7 + p as usize))
                .map(|i| (i * 31 + t * 5 + p as usize) as u8)
                .collect::<Vec<_>>(),
        )
    }

    /// Three topics: topic-0 (partitions 0, 1, 2), topic-1 (0), topic-2 (0, 1 with null records),
    /// plus an empty topic between topic-0 and topic-1.
    fn request(version: i16, acks: i16) -> ProduceRequest {
        let mut topics = Vec::new();
        for (t, parts) in [(0usize, 3i32), (1, 1), (2, 2)] {
            let mut td = TopicProduceData::default();
            if version >= 13 {
                td.topic_id = topic_id(t);
            } else {
                td.name = TopicName(StrBytes::from_string(topic_name(t)));
            }
            for p in 0..parts {
                let mut pd = PartitionProduceData::default();
                pd.index = p;
                pd.records = if t == 2 && p == 1 {
                    None
                } else {
                    Some(records(t, p))
                };
                if version >= 9 && p == 0 {
                    pd.unknown_tagged_fields
                        .insert(7, Bytes::from_static(b"part-tag"));
                }
                td.partition_data.push(pd);
            }
            if version >= 9 && t == 1 {
                td.unknown_tagged_fields
                    .insert(5, Bytes::from_static(b"topic-tag"));
            }
            topics.push(td);
        }
        let mut empty = TopicProduceData::default();
        if version >= 13 {
            empty.topic_id = topic_id(99);
        } else {
            empty.name = TopicName(StrBytes::from_static_str("empty"));
        }
        topics.insert(1, empty);
        let mut req = ProduceRequest::default();
        req.transactional_id = Some(StrBytes::from_static_str("tx-1").into());
        req.acks = acks;
        req.timeout_ms = 30_000;
        req.topic_data = topics;
        if version >= 9 {
            req.unknown_tagged_fields
                .insert(3, Bytes::from_static(b"req-tag"));
        }
        req
    }

    /// Whole request frame and its header length.
    fn request_frame(version: i16, req: &ProduceRequest) -> (Bytes, usize) {
        let mut h = RequestHeader::default();
        h.request_api_key = ApiKey::Produce as i16;
        h.request_api_version = version;
        h.correlation_id = CORR;
        h.client_id = Some(StrBytes::from_static_str("client-ä"));
        let hv = ApiKey::Produce.request_header_version(version);
        if hv >= 2 {
            h.unknown_tagged_fields
                .insert(9, Bytes::from_static(b"hdr"));
        }
        let mut out = BytesMut::new();
        out.put_i32(0);
        h.encode(&mut out, hv).unwrap();
        req.encode(&mut out, version).unwrap();
        let len = (out.len() - 4) as i32;
        out[0..4].copy_from_slice(&len.to_be_bytes());
        let frame = out.freeze();
        let info = parse_request_header(&frame[4..]).unwrap();
        (frame, info.header_len)
    }

    fn decode_request(frame: &Bytes, header_len: usize, version: i16) -> ProduceRequest {
        let prefix = i32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
        assert_eq!(prefix as usize, frame.len() - 4);
        let mut body = frame.slice(4 + header_len..);
        let req = ProduceRequest::decode(&mut body, version).unwrap();
        assert!(body.is_empty());
        req
    }

    fn decode_resp(frame: &Bytes, version: i16) -> (ResponseHeader, ProduceResponse) {
        let prefix = i32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
        assert_eq!(prefix as usize, frame.len() - 4);
        let mut body = frame.slice(4..);
        let hv = ApiKey::Produce.response_header_version(version);
        let h = ResponseHeader::decode(&mut body, hv).unwrap();
        let r = ProduceResponse::decode(&mut body, version).unwrap();
        assert!(body.is_empty(), "v{version}: trailing bytes");
        (h, r)
    }

    fn is_topic(t: TopicRef<'_>, n: usize) -> bool {
        match t {
            TopicRef::Name(name) => name == topic_name(n),
            TopicRef::Id(id) => id == topic_id(n),
        }
    }

    fn rejection(p: i32) -> Rejection {
        Rejection::new(
            87,
            format!("mirror m1 is MIRRORING: partition {p} is read-only"),
        )
    }

    fn find(resp: &ProduceResponse, version: i16, t: usize) -> Option<&TopicProduceResponse> {
        resp.responses.iter().find(|r| {
            if version >= 13 {
                r.topic_id == topic_id(t)
            } else {
                r.name.0.as_str() == topic_name(t)
            }
        })
    }

    fn check_error_partition(p: &PartitionProduceResponse, version: i16, code: i16, msg: &str) {
        assert_eq!(p.error_code, code);
        assert_eq!(p.base_offset, -1);
        assert_eq!(p.log_append_time_ms, -1);
        if version >= 5 {
            assert_eq!(p.log_start_offset, -1);
        }
        if version >= 8 {
            assert_eq!(p.error_message.as_ref().map(|m| m.as_str()), Some(msg));
        } else {
            assert_eq!(p.error_message, None);
        }
    }

    #[test]
    fn nothing_rejected_is_forwarded() {
        for version in 3..=13i16 {
            let (frame, hl) = request_frame(version, &request(version, -1));
            let mut calls = 0;
            let d = filter_produce(&frame, hl, version, CORR, &mut |_| {
                calls += 1;
                None
            })
            .unwrap();
            assert_eq!(d, ProduceDecision::Forward, "v{version}");
            assert_eq!(calls, 6, "v{version}: decide called once per partition");
        }
    }

    #[test]
    fn some_rejected_are_removed_and_the_rest_is_identical() {
        for version in 3..=13i16 {
            let original = request(version, -1);
            let (frame, hl) = request_frame(version, &original);
            // Reject topic-0 partition 1 and all of topic-1.
            let d = filter_produce(&frame, hl, version, CORR, &mut |pp| {
                let (t, p) = (pp.topic, pp.partition);
                ((is_topic(t, 0) && p == 1) || is_topic(t, 1)).then(|| rejection(p))
            })
            .unwrap();
            let ProduceDecision::Rewritten {
                frame: new,
                rejected,
            } = d
            else {
                panic!("v{version}: expected Rewritten, got {d:?}");
            };
            assert_eq!(
                &new[4..4 + hl],
                &frame[4..4 + hl],
                "v{version}: header bytes"
            );
            let got = decode_request(&new, hl, version);
            let mut want = original.clone();
            want.topic_data[0].partition_data.remove(1);
            want.topic_data.remove(2); // topic-1 (after the empty topic at index 1)
            assert_eq!(got, want, "v{version}");
            // Records are byte-identical.
            assert_eq!(
                got.topic_data[0].partition_data[1].records,
                Some(records(0, 2))
            );
            assert_eq!(rejected.len(), 2);
            for (r, (t, p)) in rejected.iter().zip([(0usize, 1i32), (1, 0)]) {
                if version >= 13 {
                    assert_eq!(r.topic, "");
                    assert_eq!(r.topic_id, topic_id(t));
                } else {
                    assert_eq!(r.topic, topic_name(t));
                    assert!(r.topic_id.is_nil());
                }
                assert_eq!(r.partition, p);
                assert_eq!(r.error_code, 87);
                assert_eq!(r.message, rejection(p).message);
            }
            // The rewritten frame's header still parses the same way.
            let info = parse_request_header(&new[4..]).unwrap();
            assert_eq!(info.header_len, hl);
            assert_eq!(info.correlation_id, CORR);
        }
    }

    #[test]
    fn all_rejected_gets_a_synthesized_response() {
        for version in 3..=13i16 {
            let (frame, hl) = request_frame(version, &request(version, -1));
            let d = filter_produce(&frame, hl, version, CORR, &mut |pp| {
                Some(rejection(pp.partition))
            })
            .unwrap();
            let ProduceDecision::AllRejected {
                response: Some(resp),
                rejected,
            } = d
            else {
                panic!("v{version}: expected AllRejected with a response, got {d:?}");
            };
            assert_eq!(rejected.len(), 6);
            let (h, r) = decode_resp(&resp, version);
            assert_eq!(h.correlation_id, CORR);
            assert_eq!(r.responses.len(), 3, "v{version}: one entry per topic");
            for (t, parts) in [(0usize, 3i32), (1, 1), (2, 2)] {
                let tr = find(&r, version, t).expect("topic present");
                if version >= 13 {
                    assert!(tr.name.0.is_empty());
                } else {
                    assert!(tr.topic_id.is_nil());
                }
                assert_eq!(tr.partition_responses.len(), parts as usize);
                for (i, p) in tr.partition_responses.iter().enumerate() {
                    assert_eq!(p.index, i as i32);
                    check_error_partition(p, version, 87, &rejection(i as i32).message);
                }
            }
        }
    }

    #[test]
    fn all_rejected_with_acks_0_gets_no_response() {
        for version in 3..=13i16 {
            let (frame, hl) = request_frame(version, &request(version, 0));
            let d = filter_produce(&frame, hl, version, CORR, &mut |pp| {
                Some(rejection(pp.partition))
            })
            .unwrap();
            assert!(
                matches!(d, ProduceDecision::AllRejected { response: None, ref rejected } if rejected.len() == 6),
                "v{version}: {d:?}"
            );
        }
    }

    /// The broker's answer to the rewritten request of the test above.
    fn broker_response(version: i16) -> ProduceResponse {
        let mut r = ProduceResponse::default();
        r.throttle_time_ms = 12;
        for (t, parts) in [(0usize, vec![0, 2]), (2, vec![0, 1])] {
            let mut tr = TopicProduceResponse::default();
            if version >= 13 {
                tr.topic_id = topic_id(t);
            } else {
                tr.name = TopicName(StrBytes::from_string(topic_name(t)));
            }
            for p in parts {
                let mut pr = PartitionProduceResponse::default();
                pr.index = p;
                pr.base_offset = 100 * (t as i64 + 1) + p as i64;
                pr.log_append_time_ms = -1;
                pr.log_start_offset = if version >= 5 { 7 } else { -1 };
                tr.partition_responses.push(pr);
            }
            r.responses.push(tr);
        }
        r
    }

    fn response_frame(version: i16, resp: &ProduceResponse) -> Bytes {
        let mut h = ResponseHeader::default();
        h.correlation_id = CORR;
        encode_response(
            &h,
            ApiKey::Produce.response_header_version(version),
            resp,
            version,
            0,
        )
        .unwrap()
    }

    #[test]
    fn merge_adds_rejected_partitions_to_the_broker_response() {
        for version in 3..=13i16 {
            let (frame, hl) = request_frame(version, &request(version, -1));
            let d = filter_produce(&frame, hl, version, CORR, &mut |pp| {
                let (t, p) = (pp.topic, pp.partition);
                ((is_topic(t, 0) && p == 1) || is_topic(t, 1)).then(|| rejection(p))
            })
            .unwrap();
            let ProduceDecision::Rewritten { rejected, .. } = d else {
                panic!("v{version}");
            };
            let broker = broker_response(version);
            let merged =
                merge_rejections(&response_frame(version, &broker), version, &rejected).unwrap();
            let (h, r) = decode_resp(&merged, version);
            assert_eq!(h.correlation_id, CORR);
            assert_eq!(r.throttle_time_ms, 12);
            assert_eq!(r.responses.len(), 3, "v{version}");
            // topic-0: the broker's partitions 0 and 2, then the rejected 1, in one entry.
            let t0 = find(&r, version, 0).unwrap();
            assert_eq!(
                t0.partition_responses[..2],
                broker.responses[0].partition_responses[..]
            );
            assert_eq!(t0.partition_responses.len(), 3);
            assert_eq!(t0.partition_responses[2].index, 1);
            check_error_partition(
                &t0.partition_responses[2],
                version,
                87,
                &rejection(1).message,
            );
            // topic-1: new entry.
            let t1 = find(&r, version, 1).unwrap();
            assert_eq!(t1.partition_responses.len(), 1);
            check_error_partition(
                &t1.partition_responses[0],
                version,
                87,
                &rejection(0).message,
            );
            // topic-2: untouched.
            assert_eq!(find(&r, version, 2).unwrap(), &broker.responses[1]);
        }
    }

    #[test]
    fn rewrite_partition_errors_changes_only_the_chosen_partition() {
        for version in 3..=13i16 {
            let broker = broker_response(version);
            let frame = response_frame(version, &broker);
            let mut seen = Vec::new();
            let out = rewrite_partition_errors(&frame, version, &mut |name, id, p, err, base| {
                seen.push((name.to_owned(), id, p, err, base));
                let is_t2 = if version >= 13 {
                    name.is_empty() && id == topic_id(2)
                } else {
                    name == topic_name(2) && id.is_nil()
                };
                (is_t2 && p == 1).then(|| (46, "duplicate ack below the barrier".to_owned()))
            })
            .unwrap()
            .expect("changed");
            assert_eq!(seen.len(), 4);
            assert!(seen.contains(&(
                if version >= 13 {
                    String::new()
                } else {
                    topic_name(2)
                },
                if version >= 13 {
                    topic_id(2)
                } else {
                    Uuid::nil()
                },
                1,
                0,
                301
            )));
            let (h, r) = decode_resp(&out, version);
            assert_eq!(h.correlation_id, CORR);
            let mut want = broker.clone();
            let p = &mut want.responses[1].partition_responses[1];
            p.error_code = 46;
            p.base_offset = -1;
            p.log_append_time_ms = -1;
            p.log_start_offset = -1;
            if version >= 8 {
                p.error_message =
                    Some(StrBytes::from_static_str("duplicate ack below the barrier"));
            }
            assert_eq!(r, want, "v{version}");

            let none =
                rewrite_partition_errors(&frame, version, &mut |_, _, _, _, _| None).unwrap();
            assert_eq!(none, None);
        }
    }

    #[test]
    fn bad_arguments_are_errors() {
        let version = 9;
        let (frame, hl) = request_frame(version, &request(version, -1));
        let mut reject_all = |pp: &ProducePartition<'_>| Some(rejection(pp.partition));
        // Wrong version for this frame.
        assert!(filter_produce(&frame, hl, 8, CORR, &mut reject_all).is_err());
        // Unsupported versions.
        assert!(matches!(
            filter_produce(&frame, hl, 2, CORR, &mut reject_all),
            Err(EnforceError::UnsupportedVersion(2))
        ));
        assert!(merge_rejections(&frame, 14, &[]).is_err());
        // Header length past the end.
        assert!(filter_produce(&frame, frame.len(), version, CORR, &mut reject_all).is_err());
        assert!(filter_produce(&frame, usize::MAX, version, CORR, &mut reject_all).is_err());
        // Wrong length prefix.
        let mut bad = frame.to_vec();
        bad[3] ^= 1;
        assert!(filter_produce(&Bytes::from(bad), hl, version, CORR, &mut reject_all).is_err());
        // Truncated at every cut: never a panic, and an error once the body is cut.
        for cut in 4 + hl..frame.len() - 1 {
            let mut b = frame[..cut].to_vec();
            let len = (cut - 4) as i32;
            b[0..4].copy_from_slice(&len.to_be_bytes());
            let b = Bytes::from(b);
            assert!(
                filter_produce(&b, hl, version, CORR, &mut |pp| is_topic(pp.topic, 0)
                    .then(|| rejection(pp.partition)))
                .is_err(),
                "cut {cut}"
            );
        }
        // Empty and tiny frames.
        for f in [&b""[..], &[0, 0, 0, 0], &[0, 0, 0, 1, 0]] {
            let f = Bytes::copy_from_slice(f);
            assert!(filter_produce(&f, 0, version, CORR, &mut reject_all).is_err());
            assert!(merge_rejections(&f, version, &[]).is_err());
            assert!(rewrite_partition_errors(&f, version, &mut |_, _, _, _, _| None).is_err());
        }
    }

    /// Replaces the one-byte tag number in front of `[size, marker..]` by 2^31 + tag, which
    /// kafka-protocol decodes to a negative key it would not write back.
    fn with_huge_tag(frame: &Bytes, tag: u8, marker: &[u8]) -> Bytes {
        let mut needle = vec![tag, marker.len() as u8];
        needle.extend_from_slice(marker);
        let at = frame
            .windows(needle.len())
            .position(|w| w == needle.as_slice())
            .expect("marker present");
        let mut b = frame[..at].to_vec();
        b.extend_from_slice(&[0x80 | tag, 0x80, 0x80, 0x80, 0x08]);
        b.extend_from_slice(&frame[at + 1..]);
        let len = (b.len() - 4) as i32;
        b[0..4].copy_from_slice(&len.to_be_bytes());
        Bytes::from(b)
    }

    #[test]
    fn what_cannot_be_re_encoded_faithfully_is_refused() {
        let version = 11;
        let reject_t1 =
            &mut |pp: &ProducePartition<'_>| is_topic(pp.topic, 1).then(|| rejection(pp.partition));
        // Trailing bytes after the request.
        let (frame, hl) = request_frame(version, &request(version, -1));
        let mut b = frame.to_vec();
        b.extend_from_slice(b"junk");
        let len = (b.len() - 4) as i32;
        b[0..4].copy_from_slice(&len.to_be_bytes());
        let b = Bytes::from(b);
        let err = filter_produce(&b, hl, version, CORR, reject_t1).unwrap_err();
        assert!(err.to_string().contains("4 bytes after"), "{err}");
        // A partition-level tag number of 2^31 or more (tag 7 carries "part-tag").
        let huge = with_huge_tag(&frame, 7, b"part-tag");
        let err = filter_produce(&huge, hl, version, CORR, reject_t1).unwrap_err();
        assert!(err.to_string().contains("2^31"), "{err}");
        // ... but a request the gateway does not rewrite is forwarded as it is.
        assert_eq!(
            filter_produce(&huge, hl, version, CORR, &mut |_| None).unwrap(),
            ProduceDecision::Forward
        );
        // The same in a response.
        let mut broker = broker_response(version);
        broker.responses[0].partition_responses[0]
            .unknown_tagged_fields
            .insert(6, Bytes::from_static(b"resp-tag"));
        let resp = with_huge_tag(&response_frame(version, &broker), 6, b"resp-tag");
        let err = merge_rejections(&resp, version, &[]).unwrap_err();
        assert!(err.to_string().contains("2^31"), "{err}");
        assert!(
            rewrite_partition_errors(&resp, version, &mut |_, _, _, _, _| Some((1, "x".into())))
                .is_err()
        );
        // Unchanged, the broker's tag is written back.
        let ok = response_frame(version, &broker);
        let merged = merge_rejections(&ok, version, &[]).unwrap();
        assert_eq!(decode_resp(&merged, version).1, broker);
    }

    fn config(cases: u32) -> ProptestConfig {
        ProptestConfig {
            cases,
            failure_persistence: None,
            ..ProptestConfig::default()
        }
    }

    /// A frame: valid Produce request header for `version`, then `body`.
    fn frame_with_body(version: i16, body: &[u8]) -> (Bytes, usize) {
        let (frame, hl) = request_frame(version, &ProduceRequest::default());
        let mut out = frame[..4 + hl].to_vec();
        out.extend_from_slice(body);
        let len = (out.len() - 4) as i32;
        out[0..4].copy_from_slice(&len.to_be_bytes());
        (Bytes::from(out), hl)
    }

    proptest! {
        #![proptest_config(config(512))]

        #[test]
        fn random_request_bodies_never_panic(version in 3i16..=13,
                                             body in proptest::collection::vec(any::<u8>(), 0..400),
                                             mask in any::<u32>()) {
            let (frame, hl) = frame_with_body(version, &body);
            let mut n = 0u32;
            let _ = filter_produce(&frame, hl, version, CORR, &mut |pp| {
                n += 1;
                (mask & (1 << (n % 32)) != 0).then(|| rejection(pp.partition))
            });
        }

        #[test]
        fn mutated_requests_never_panic(version in 3i16..=13,
                                        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
                                        cut in any::<prop::sample::Index>(),
                                        mask in any::<u32>()) {
            let (frame, hl) = request_frame(version, &request(version, -1));
            let mut body = frame[4 + hl..].to_vec();
            for (i, b) in &edits {
                let i = i.index(body.len());
                body[i] = *b;
            }
            body.truncate(cut.index(body.len() + 1).max(body.len() / 2));
            let (frame, hl) = frame_with_body(version, &body);
            let mut n = 0u32;
            let r = filter_produce(&frame, hl, version, CORR, &mut |pp| {
                n += 1;
                (mask & (1 << (n % 32)) != 0).then(|| rejection(pp.partition))
            });
            if let Ok(ProduceDecision::Rewritten { frame: new, .. }) = r {
                // Whatever came out is a request the decoder reads back.
                decode_request(&new, hl, version);
            }
        }

        #[test]
        fn random_responses_never_panic(version in 3i16..=13,
                                        body in proptest::collection::vec(any::<u8>(), 0..300)) {
            let mut f = (body.len() as i32).to_be_bytes().to_vec();
            f.extend_from_slice(&body);
            let f = Bytes::from(f);
            let rej = [RejectedPartition {
                topic: "t".into(),
                topic_id: Uuid::from_u128(1),
                partition: 0,
                error_code: 87,
                message: "read-only".into(),
                log_start_offset: -1,
            }];
            let _ = merge_rejections(&f, version, &rej);
            let _ = rewrite_partition_errors(&f, version, &mut |_, _, _, _, _| Some((1, "x".into())));
        }
    }
}
