//! Refusing chosen entries of the admin, transaction and group requests that can change a
//! topic's data, layout, configuration or the offsets groups hold in it without Produce:
//! DeleteRecords, DeleteTopics, CreatePartitions, AlterConfigs, IncrementalAlterConfigs,
//! AddPartitionsToTxn, ElectLeaders (unclean) and WriteTxnMarkers ([`GUARDED`], used on the
//! client listener to keep mirror topics read-only until failover, review finding F5); the same
//! without WriteTxnMarkers, plus OffsetCommit, TxnOffsetCommit and OffsetDelete
//! ([`GROUP_OFFSETS`]; [`is_guarded_on_mirror`], used on the mirror listener to fence mirroring
//! tools out of failed-over topics, review finding G8).
//!
//! [`plan`] decodes a request once, asks the caller about every entry it names ([`Target`]: a
//! topic, a topic id, a partition, or "every partition"), and returns
//! - [`AdminDecision::Forward`]: nothing refused, forward the original bytes untouched;
//! - [`AdminDecision::Rewritten`]: some entries refused, forward `frame` (the request without
//!   them, re-encoded behind the original header bytes) and later [`merge`] the refused entries
//!   into the broker's response;
//! - [`AdminDecision::AllRefused`]: every entry refused, answer `response` (a complete response
//!   frame with the request's correlation id, version and response header version).
//!
//! Granularity follows what the broker does itself: DeleteRecords, ElectLeaders,
//! WriteTxnMarkers and the three group-offset requests are split per partition; DeleteTopics,
//! CreatePartitions and the two config APIs per topic / resource (only TOPIC resources, type 2,
//! are asked about); AddPartitionsToTxn is atomic in Kafka, so v0–v3 (one transaction) is refused
//! whole when any partition is refused (the others answer OPERATION_NOT_ATTEMPTED, as Kafka
//! does), and v4+ (batched) per transaction. ElectLeaders asks only for unclean elections
//! (election type 1); preferred elections are not asked about.
//!
//! A request is re-encoded only when it is split, and only after checking that the decoded
//! request re-encodes to exactly the bytes received (otherwise re-encoding could change what the
//! broker sees); broker responses are checked the same way before a merge.
//!
//! Owns: the bytes of these APIs: decoding, the re-encode check, framing, local answers and
//! merges; the entry rules of each API are its child module `apis`. Must not touch: which
//! topics are read-only (the caller's `decide`), which listener guards which APIs (the caller
//! picks [`is_guarded`] or [`is_guarded_on_mirror`]), metrics, logging, connection state. Never
//! panics on input: anything it cannot read is an [`AdminRefusalError`].

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, AlterConfigsRequest, ApiKey, CreatePartitionsRequest,
    DeleteRecordsRequest, DeleteTopicsRequest, ElectLeadersRequest, IncrementalAlterConfigsRequest,
    OffsetCommitRequest, OffsetDeleteRequest, ResponseHeader, TxnOffsetCommitRequest,
    WriteTxnMarkersRequest,
};
use kafka_protocol::protocol::{Decodable, Encodable, Message, Request, StrBytes};
use thiserror::Error;

pub use super::enforce::Rejection;

/// Config resource type TOPIC.
pub const RESOURCE_TOPIC: i8 = 2;
/// ElectLeaders election type UNCLEAN.
pub const ELECTION_UNCLEAN: i8 = 1;
/// Error code OPERATION_NOT_ATTEMPTED: the other partitions of a refused AddPartitionsToTxn.
pub const OPERATION_NOT_ATTEMPTED: i16 = 55;

/// What the caller is asked about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target<'a> {
    /// A whole topic by name (DeleteTopics, CreatePartitions, config changes of a topic).
    Topic(&'a str),
    /// A whole topic by id (DeleteTopics v6).
    TopicId(uuid::Uuid),
    /// One partition (DeleteRecords, unclean ElectLeaders, WriteTxnMarkers, the group-offset
    /// requests).
    Partition(&'a str, i32),
    /// One partition a transaction adds (AddPartitionsToTxn), with the transaction's producer.
    TxnPartition(&'a str, i32, TxnProducer<'a>),
    /// Every partition of the cluster (an unclean ElectLeaders with a null partition list).
    AllPartitions,
}

/// The transaction of an AddPartitionsToTxn entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnProducer<'a> {
    pub transactional_id: &'a str,
    pub producer_id: i64,
    pub producer_epoch: i16,
}

/// The refused entries of a split request, to merge into the broker's response.
#[derive(Debug, Clone, PartialEq)]
pub struct Refused {
    api: ApiKey,
    version: i16,
    /// The refused entries as a response body of `api` at `version`.
    body: Bytes,
    /// The refusal messages (for logging).
    pub messages: Vec<String>,
}

/// What to do with a guarded request after [`plan`].
#[derive(Debug, Clone, PartialEq)]
pub enum AdminDecision {
    /// Nothing refused: forward the original frame as it is.
    Forward,
    /// Some entries refused: forward `frame`, then [`merge`] `refused` into the response.
    Rewritten { frame: Bytes, refused: Refused },
    /// Every entry refused: nothing goes upstream; `response` is the complete response frame.
    AllRefused {
        response: Bytes,
        messages: Vec<String>,
    },
}

/// A guarded request or its response that cannot be handled safely.
#[derive(Debug, Error)]
pub enum AdminRefusalError {
    #[error("{0:?} is not an API whose entries the gateway refuses")]
    NotGuarded(ApiKey),
    #[error("{api:?} v{version} cannot be read by the gateway (it reads {min}..={max})")]
    UnsupportedVersion {
        api: ApiKey,
        version: i16,
        min: i16,
        max: i16,
    },
    #[error("malformed frame: {0}")]
    BadFrame(String),
    #[error("cannot decode {api:?} v{version} {what}: {reason}")]
    Decode {
        api: ApiKey,
        version: i16,
        what: &'static str,
        reason: String,
    },
    #[error("cannot encode {api:?} v{version} {what}: {reason}")]
    Encode {
        api: ApiKey,
        version: i16,
        what: &'static str,
        reason: String,
    },
    #[error("{api:?} v{version} {what} has {n} bytes after the message")]
    Trailing {
        api: ApiKey,
        version: i16,
        what: &'static str,
        n: usize,
    },
    #[error("{api:?} v{version} {what} does not re-encode to the bytes received; it cannot be rewritten safely")]
    NotCanonical {
        api: ApiKey,
        version: i16,
        what: &'static str,
    },
}

/// The APIs whose entries are refused on the client listener (mirror topics read-only until
/// failover).
pub const GUARDED: &[ApiKey] = &[
    ApiKey::DeleteRecords,
    ApiKey::DeleteTopics,
    ApiKey::CreatePartitions,
    ApiKey::AlterConfigs,
    ApiKey::IncrementalAlterConfigs,
    ApiKey::AddPartitionsToTxn,
    ApiKey::ElectLeaders,
    ApiKey::WriteTxnMarkers,
];

/// The group-offset APIs, refused on the mirror listener only: on the client listener group
/// offsets are the consumers' own.
pub const GROUP_OFFSETS: &[ApiKey] = &[
    ApiKey::OffsetCommit,
    ApiKey::TxnOffsetCommit,
    ApiKey::OffsetDelete,
];

/// Whether `api` is guarded on the client listener.
pub fn is_guarded(api: ApiKey) -> bool {
    GUARDED.contains(&api)
}

/// Whether `api` is guarded on the mirror listener (failed-over topics closed to mirroring
/// tools): the client listener's APIs but WriteTxnMarkers — on the mirror listener a mirror
/// write, admitted per partition like Produce (`proxy::exchange::markers`) — and the
/// group-offset APIs.
pub fn is_guarded_on_mirror(api: ApiKey) -> bool {
    api != ApiKey::WriteTxnMarkers && is_guarded(api) || GROUP_OFFSETS.contains(&api)
}

/// The versions of a guarded API that can be read (kafka-protocol's range), `None` for others.
pub fn readable_versions(api: ApiKey) -> Option<(i16, i16)> {
    fn r<M: Message>() -> Option<(i16, i16)> {
        Some((M::VERSIONS.min, M::VERSIONS.max))
    }
    match api {
        ApiKey::DeleteRecords => r::<DeleteRecordsRequest>(),
        ApiKey::DeleteTopics => r::<DeleteTopicsRequest>(),
        ApiKey::CreatePartitions => r::<CreatePartitionsRequest>(),
        ApiKey::AlterConfigs => r::<AlterConfigsRequest>(),
        ApiKey::IncrementalAlterConfigs => r::<IncrementalAlterConfigsRequest>(),
        ApiKey::AddPartitionsToTxn => r::<AddPartitionsToTxnRequest>(),
        ApiKey::ElectLeaders => r::<ElectLeadersRequest>(),
        ApiKey::WriteTxnMarkers => r::<WriteTxnMarkersRequest>(),
        ApiKey::OffsetCommit => r::<OffsetCommitRequest>(),
        ApiKey::TxnOffsetCommit => r::<TxnOffsetCommitRequest>(),
        ApiKey::OffsetDelete => r::<OffsetDeleteRequest>(),
        _ => None,
    }
}

mod apis;

type Decide<'d> = dyn FnMut(Target<'_>) -> Option<Rejection> + 'd;

/// The result of splitting one decoded request.
struct Split<R> {
    /// A response holding only the refused entries (with everything a local answer needs).
    response: R,
    refused: usize,
    /// Entries left to forward.
    kept: usize,
    messages: Vec<String>,
}

impl<R: Default> Split<R> {
    fn new() -> Self {
        Split {
            response: R::default(),
            refused: 0,
            kept: 0,
            messages: Vec::new(),
        }
    }

    fn refuse(&mut self, r: &Rejection) {
        self.refused += 1;
        self.messages.push(r.message.clone());
    }
}

/// One guarded request type: how to split it and how to merge its refused entries.
trait Guarded: Request + Decodable + Encodable + Clone {
    type Resp: Decodable + Encodable + Default;
    /// Remove the refused entries from `self`.
    fn split(&mut self, version: i16, decide: &mut Decide<'_>) -> Split<Self::Resp>;
    /// Add the refused entries `part` to the broker's response `resp`.
    fn merge(resp: &mut Self::Resp, part: Self::Resp);
}

fn msg(s: &str) -> Option<StrBytes> {
    Some(StrBytes::from_string(s.to_owned()))
}

// ------------------------------------------------------------------ generic machinery

fn api_of<R: Request>() -> ApiKey {
    ApiKey::try_from(R::KEY).unwrap_or(ApiKey::ApiVersions)
}

fn encode_body<M: Encodable>(
    api: ApiKey,
    version: i16,
    what: &'static str,
    m: &M,
    out: &mut BytesMut,
) -> Result<(), AdminRefusalError> {
    m.encode(out, version)
        .map_err(|e| AdminRefusalError::Encode {
            api,
            version,
            what,
            reason: e.to_string(),
        })
}

fn decode_exact<M: Decodable + Encodable>(
    api: ApiKey,
    version: i16,
    what: &'static str,
    bytes: &Bytes,
) -> Result<M, AdminRefusalError> {
    let mut b = bytes.clone();
    let m = M::decode(&mut b, version).map_err(|e| AdminRefusalError::Decode {
        api,
        version,
        what,
        reason: e.to_string(),
    })?;
    if !b.is_empty() {
        return Err(AdminRefusalError::Trailing {
            api,
            version,
            what,
            n: b.len(),
        });
    }
    Ok(m)
}

/// Whether `m` re-encodes to exactly `bytes`.
fn check_canonical<M: Encodable>(
    api: ApiKey,
    version: i16,
    what: &'static str,
    m: &M,
    bytes: &[u8],
) -> Result<(), AdminRefusalError> {
    let mut out = BytesMut::with_capacity(bytes.len());
    encode_body(api, version, what, m, &mut out)?;
    if out[..] != *bytes {
        return Err(AdminRefusalError::NotCanonical { api, version, what });
    }
    Ok(())
}

fn frame_with_length(mut out: BytesMut) -> Result<Bytes, AdminRefusalError> {
    let len = i32::try_from(out.len() - 4)
        .map_err(|_| AdminRefusalError::BadFrame("message larger than 2 GiB".into()))?;
    out[0..4].copy_from_slice(&len.to_be_bytes());
    Ok(out.freeze())
}

/// Checks the length prefix and the header of a request frame; returns the body offset.
fn body_start(
    frame: &Bytes,
    api: ApiKey,
    header_len: usize,
    version: i16,
) -> Result<usize, AdminRefusalError> {
    if frame.len() < 8 {
        return Err(AdminRefusalError::BadFrame(format!(
            "frame of {} bytes",
            frame.len()
        )));
    }
    let len = i32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
    if len < 0 || len as usize != frame.len() - 4 {
        return Err(AdminRefusalError::BadFrame(format!(
            "length prefix {len} does not match a frame of {} bytes",
            frame.len()
        )));
    }
    let key = i16::from_be_bytes([frame[4], frame[5]]);
    let frame_version = i16::from_be_bytes([frame[6], frame[7]]);
    if key != api as i16 || frame_version != version {
        return Err(AdminRefusalError::BadFrame(format!(
            "request header says api key {key} version {frame_version}, expected {api:?} v{version}"
        )));
    }
    header_len
        .checked_add(4)
        .filter(|s| *s <= frame.len() && header_len >= 8)
        .ok_or_else(|| {
            AdminRefusalError::BadFrame(format!(
                "request header of {header_len} bytes in a frame of {} bytes",
                frame.len()
            ))
        })
}

fn plan_as<R: Guarded>(
    frame: &Bytes,
    header_len: usize,
    version: i16,
    correlation_id: i32,
    decide: &mut Decide<'_>,
) -> Result<AdminDecision, AdminRefusalError> {
    let api = api_of::<R>();
    let (min, max) = (R::VERSIONS.min, R::VERSIONS.max);
    if version < min || version > max {
        return Err(AdminRefusalError::UnsupportedVersion {
            api,
            version,
            min,
            max,
        });
    }
    let start = body_start(frame, api, header_len, version)?;
    let body = frame.slice(start..);
    let mut req: R = decode_exact(api, version, "request", &body)?;
    let pristine = req.clone();
    let split = req.split(version, decide);
    if split.refused == 0 {
        return Ok(AdminDecision::Forward);
    }
    if split.kept == 0 {
        let header = ResponseHeader::default().with_correlation_id(correlation_id);
        let mut out = BytesMut::with_capacity(128);
        out.put_i32(0);
        header
            .encode(&mut out, api.response_header_version(version))
            .map_err(|e| AdminRefusalError::Encode {
                api,
                version,
                what: "response header",
                reason: e.to_string(),
            })?;
        encode_body(api, version, "response", &split.response, &mut out)?;
        return Ok(AdminDecision::AllRefused {
            response: frame_with_length(out)?,
            messages: split.messages,
        });
    }
    check_canonical(api, version, "request", &pristine, &body)?;
    let mut out = BytesMut::with_capacity(frame.len());
    out.extend_from_slice(&frame[..start]);
    encode_body(api, version, "request", &req, &mut out)?;
    let mut refused_body = BytesMut::new();
    encode_body(
        api,
        version,
        "refused entries",
        &split.response,
        &mut refused_body,
    )?;
    Ok(AdminDecision::Rewritten {
        frame: frame_with_length(out)?,
        refused: Refused {
            api,
            version,
            body: refused_body.freeze(),
            messages: split.messages,
        },
    })
}

/// Asks `decide` about every entry of a guarded request and splits it (see the module doc).
///
/// `frame` is the whole request frame (length prefix included), `header_len` the request header
/// length from [`super::parse_request_header`], `version` and `correlation_id` the header's.
pub fn plan(
    frame: &Bytes,
    api: ApiKey,
    header_len: usize,
    version: i16,
    correlation_id: i32,
    decide: &mut dyn FnMut(Target<'_>) -> Option<Rejection>,
) -> Result<AdminDecision, AdminRefusalError> {
    let (f, h, v, c) = (frame, header_len, version, correlation_id);
    match api {
        ApiKey::DeleteRecords => plan_as::<DeleteRecordsRequest>(f, h, v, c, decide),
        ApiKey::DeleteTopics => plan_as::<DeleteTopicsRequest>(f, h, v, c, decide),
        ApiKey::CreatePartitions => plan_as::<CreatePartitionsRequest>(f, h, v, c, decide),
        ApiKey::AlterConfigs => plan_as::<AlterConfigsRequest>(f, h, v, c, decide),
        ApiKey::IncrementalAlterConfigs => {
            plan_as::<IncrementalAlterConfigsRequest>(f, h, v, c, decide)
        }
        ApiKey::AddPartitionsToTxn => plan_as::<AddPartitionsToTxnRequest>(f, h, v, c, decide),
        ApiKey::ElectLeaders => plan_as::<ElectLeadersRequest>(f, h, v, c, decide),
        ApiKey::WriteTxnMarkers => plan_as::<WriteTxnMarkersRequest>(f, h, v, c, decide),
        ApiKey::OffsetCommit => plan_as::<OffsetCommitRequest>(f, h, v, c, decide),
        ApiKey::TxnOffsetCommit => plan_as::<TxnOffsetCommitRequest>(f, h, v, c, decide),
        ApiKey::OffsetDelete => plan_as::<OffsetDeleteRequest>(f, h, v, c, decide),
        other => Err(AdminRefusalError::NotGuarded(other)),
    }
}

fn merge_as<R: Guarded>(frame: &Bytes, refused: &Refused) -> Result<Bytes, AdminRefusalError> {
    let (api, version) = (refused.api, refused.version);
    if frame.len() < 4 {
        return Err(AdminRefusalError::BadFrame(format!(
            "response frame of {} bytes",
            frame.len()
        )));
    }
    let body = frame.slice(4..);
    let mut b = body.clone();
    let hv = api.response_header_version(version);
    ResponseHeader::decode(&mut b, hv).map_err(|e| AdminRefusalError::Decode {
        api,
        version,
        what: "response header",
        reason: e.to_string(),
    })?;
    let header_len = body.len() - b.len();
    let msg_bytes = body.slice(header_len..);
    let mut resp: R::Resp = decode_exact(api, version, "response", &msg_bytes)?;
    check_canonical(api, version, "response", &resp, &msg_bytes)?;
    let part: R::Resp = decode_exact(api, version, "refused entries", &refused.body)?;
    R::merge(&mut resp, part);
    let mut out = BytesMut::with_capacity(frame.len() + refused.body.len());
    out.put_i32(0);
    out.extend_from_slice(&body[..header_len]);
    encode_body(api, version, "response", &resp, &mut out)?;
    frame_with_length(out)
}

/// Adds the refused entries of a split request to the broker's response frame (length prefix
/// included) to the forwarded part.
pub fn merge(frame: &Bytes, refused: &Refused) -> Result<Bytes, AdminRefusalError> {
    match refused.api {
        ApiKey::DeleteRecords => merge_as::<DeleteRecordsRequest>(frame, refused),
        ApiKey::DeleteTopics => merge_as::<DeleteTopicsRequest>(frame, refused),
        ApiKey::CreatePartitions => merge_as::<CreatePartitionsRequest>(frame, refused),
        ApiKey::AlterConfigs => merge_as::<AlterConfigsRequest>(frame, refused),
        ApiKey::IncrementalAlterConfigs => {
            merge_as::<IncrementalAlterConfigsRequest>(frame, refused)
        }
        ApiKey::AddPartitionsToTxn => merge_as::<AddPartitionsToTxnRequest>(frame, refused),
        ApiKey::ElectLeaders => merge_as::<ElectLeadersRequest>(frame, refused),
        ApiKey::WriteTxnMarkers => merge_as::<WriteTxnMarkersRequest>(frame, refused),
        ApiKey::OffsetCommit => merge_as::<OffsetCommitRequest>(frame, refused),
        ApiKey::TxnOffsetCommit => merge_as::<TxnOffsetCommitRequest>(frame, refused),
        ApiKey::OffsetDelete => merge_as::<OffsetDeleteRequest>(frame, refused),
        other => Err(AdminRefusalError::NotGuarded(other)),
    }
}

#[cfg(test)]
#[path = "admin_refusal_tests.rs"]
mod tests;
