//! Hiding barriers from ordinary consumers in Fetch and ShareFetch responses
//! (docs/architecture.md#the-barrier; review F7).
//!
//! [`hide_barriers_in_fetch`] decodes a Fetch response (v4..=18; `records` stay zero-copy slices
//! of the frame), runs [`barrier::hide_barriers`] over the records of every partition of the
//! topics the caller wants filtered, and re-encodes the response only when a barrier was found.
//! [`hide_barriers_in_share_fetch`] does the same for a KIP-932 ShareFetch response (the
//! versions kafka-protocol reads, [`SHARE_FETCH_VERSIONS`]); its `acquired_records` ranges are
//! kept, so the share consumer treats the replacement's offset as a gap it acknowledges.
//! Everything else, `node_endpoints` included, is re-encoded as it was decoded (address
//! rewriting is [`super::rewrite`]'s job and runs separately).
//!
//! [`barrier_filter`] says which topics of an answer are filtered, from the caller's view of
//! topic names and mirrors: mirror topics, and topic ids the gateway cannot name (fail closed).
//!
//! Owns: the Fetch and ShareFetch response bytes. Must not touch: which clients are "ordinary"
//! (the caller decides whether to call this at all), metrics. Never panics on input.

use std::collections::BTreeMap;

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, FetchResponse, ResponseHeader, ShareFetchResponse};
use kafka_protocol::protocol::{Decodable, Encodable, Message};

use super::barrier::hide_barriers_counted;
use super::frame::FrameError;

/// Lowest and highest Fetch version [`hide_barriers_in_fetch`] reads.
pub const FETCH_MIN_VERSION: i16 = 4;
pub const FETCH_MAX_VERSION: i16 = 18;

/// The ShareFetch versions [`hide_barriers_in_share_fetch`] reads: those kafka-protocol decodes
/// (v1 in 0.18; Kafka 4.1 serves v1, v0 was 4.0's early access).
pub const SHARE_FETCH_VERSIONS: (i16, i16) = (
    <ShareFetchResponse as Message>::VERSIONS.min,
    <ShareFetchResponse as Message>::VERSIONS.max,
);

fn bad(e: impl std::fmt::Display) -> FrameError {
    FrameError::BadResponse(format!("fetch response: {e}"))
}

fn negative(fields: &BTreeMap<i32, Bytes>) -> bool {
    // Keys are sorted: the first is the smallest.
    fields.keys().next().is_some_and(|k| *k < 0)
}

/// Whether any struct of the response carries an unknown tagged field kafka-protocol would not
/// write back.
fn has_negative_tag(header: &ResponseHeader, resp: &FetchResponse) -> bool {
    negative(&header.unknown_tagged_fields)
        || negative(&resp.unknown_tagged_fields)
        || resp
            .node_endpoints
            .iter()
            .any(|n| negative(&n.unknown_tagged_fields))
        || resp.responses.iter().any(|t| {
            negative(&t.unknown_tagged_fields)
                || t.partitions.iter().any(|p| {
                    negative(&p.unknown_tagged_fields)
                        || negative(&p.diverging_epoch.unknown_tagged_fields)
                        || negative(&p.current_leader.unknown_tagged_fields)
                        || negative(&p.snapshot_id.unknown_tagged_fields)
                        || p.aborted_transactions
                            .iter()
                            .flatten()
                            .any(|a| negative(&a.unknown_tagged_fields))
                })
        })
}

/// The same for a ShareFetch response.
fn share_has_negative_tag(header: &ResponseHeader, resp: &ShareFetchResponse) -> bool {
    negative(&header.unknown_tagged_fields)
        || negative(&resp.unknown_tagged_fields)
        || resp
            .node_endpoints
            .iter()
            .any(|n| negative(&n.unknown_tagged_fields))
        || resp.responses.iter().any(|t| {
            negative(&t.unknown_tagged_fields)
                || t.partitions.iter().any(|p| {
                    negative(&p.unknown_tagged_fields)
                        || negative(&p.current_leader.unknown_tagged_fields)
                        || p.acquired_records
                            .iter()
                            .any(|a| negative(&a.unknown_tagged_fields))
                })
        })
}

/// The body of a response frame (after its 4-byte length prefix), checked against the prefix.
fn body_of(frame: &Bytes) -> Result<Bytes, FrameError> {
    if frame.len() < 4 {
        return Err(bad(format!("frame of {} bytes", frame.len())));
    }
    let len = i32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
    if len < 0 || len as usize != frame.len() - 4 {
        return Err(bad(format!(
            "length prefix {len} does not match a frame of {} bytes",
            frame.len()
        )));
    }
    Ok(frame.slice(4..))
}

/// Encodes a new frame (length prefix, header, body), refusing what would not read back as it
/// was received: bytes after the message (they would be dropped) and unknown tagged fields
/// kafka-protocol does not write back (tag 2^31 or more: counted but not written).
fn reencode<M: Encodable>(
    rest: &Bytes,
    negative_tag: bool,
    header: &ResponseHeader,
    header_version: i16,
    resp: &M,
    version: i16,
    size_hint: usize,
) -> Result<Bytes, FrameError> {
    if !rest.is_empty() {
        return Err(bad(format!("{} bytes after the message", rest.len())));
    }
    if negative_tag {
        return Err(bad("tagged field number of 2^31 or more"));
    }
    super::frame::encode_response(header, header_version, resp, version, size_hint + 48)
}

/// Replace the barriers in one partition's records; how many there were.
fn hide_in_place(records: &mut Option<Bytes>) -> usize {
    let Some(r) = records else { return 0 };
    match hide_barriers_counted(r) {
        Some((new, n)) => {
            *records = Some(new);
            n
        }
        None => 0,
    }
}

/// Replaces the barrier batches of the wanted topics' partitions in a Fetch response frame
/// (length prefix included) by skip-only control batches ([`super::barrier::hide_barriers`]).
///
/// `wanted(name, topic_id)` picks the topics to filter: the name is empty from v13 (topics by
/// id), the id is nil before v13. Returns `Ok(None)` when no barrier was hidden (the original
/// frame can be forwarded; nothing was re-encoded and no records were copied), else the new frame
/// and the number of barriers hidden. A barrier batch whose CRC does not match is left as it is
/// and not counted.
pub fn hide_barriers_in_fetch(
    frame: &Bytes,
    version: i16,
    wanted: &dyn Fn(&str, uuid::Uuid) -> bool,
) -> Result<Option<(Bytes, usize)>, FrameError> {
    if !(FETCH_MIN_VERSION..=FETCH_MAX_VERSION).contains(&version) {
        return Err(bad(format!("version {version} is not supported")));
    }
    let mut body = body_of(frame)?;
    let hv = ApiKey::Fetch.response_header_version(version);
    let header = ResponseHeader::decode(&mut body, hv).map_err(bad)?;
    let mut resp = FetchResponse::decode(&mut body, version).map_err(bad)?;

    let mut hidden = 0usize;
    for topic in resp.responses.iter_mut() {
        let (name, id) = if version >= 13 {
            ("", topic.topic_id)
        } else {
            (topic.topic.0.as_str(), uuid::Uuid::nil())
        };
        if !wanted(name, id) {
            continue;
        }
        hidden += topic
            .partitions
            .iter_mut()
            .map(|p| hide_in_place(&mut p.records))
            .sum::<usize>();
    }
    if hidden == 0 {
        return Ok(None);
    }
    let negative_tag = has_negative_tag(&header, &resp);
    let out = reencode(
        &body,
        negative_tag,
        &header,
        hv,
        &resp,
        version,
        frame.len(),
    )?;
    Ok(Some((out, hidden)))
}

/// Replaces the barrier batches of the wanted topics' partitions in a ShareFetch response frame
/// (length prefix included) by skip-only control batches, as [`hide_barriers_in_fetch`] does.
/// ShareFetch names topics by id only: `wanted(topic_id)`.
pub fn hide_barriers_in_share_fetch(
    frame: &Bytes,
    version: i16,
    wanted: &dyn Fn(uuid::Uuid) -> bool,
) -> Result<Option<(Bytes, usize)>, FrameError> {
    let (min, max) = SHARE_FETCH_VERSIONS;
    if !(min..=max).contains(&version) {
        return Err(bad(format!(
            "ShareFetch version {version} is not supported"
        )));
    }
    let mut body = body_of(frame)?;
    let hv = ApiKey::ShareFetch.response_header_version(version);
    let header = ResponseHeader::decode(&mut body, hv).map_err(bad)?;
    let mut resp = ShareFetchResponse::decode(&mut body, version).map_err(bad)?;

    let mut hidden = 0usize;
    for topic in resp.responses.iter_mut() {
        if !wanted(topic.topic_id) {
            continue;
        }
        hidden += topic
            .partitions
            .iter_mut()
            .map(|p| hide_in_place(&mut p.records))
            .sum::<usize>();
    }
    if hidden == 0 {
        return Ok(None);
    }
    let negative_tag = share_has_negative_tag(&header, &resp);
    let out = reencode(
        &body,
        negative_tag,
        &header,
        hv,
        &resp,
        version,
        frame.len(),
    )?;
    Ok(Some((out, hidden)))
}

/// Whether a topic of a consumer's Fetch or ShareFetch answer has its barriers hidden.
#[derive(Debug, PartialEq, Eq)]
pub enum BarrierFilter {
    /// A mirror topic (by name, or by an id the gateway knows): hidden.
    MirrorTopic(String),
    /// A topic id the gateway cannot name yet: hidden too (fail closed, review F7 c).
    UnknownTopicId,
    /// A topic known not to belong to a mirror: passed on untouched.
    Other,
}

/// Classifies a topic of a Fetch (by `name` before v13, by `id` from v13) or ShareFetch (by
/// `id`) answer.
///
/// An id missing from the cluster view may be a mirror topic created (or re-created) since the
/// gateway's last metadata refresh, which the client learned about elsewhere. Treating it as
/// "not a mirror topic" would show that topic's barriers (review F7 c). It is treated as a
/// mirror topic instead: no extra round trip and no error for the client, and the only bytes
/// affected are barrier batches — single-record batches without producer id whose key is the
/// reserved `__mirrorgate_barrier` — which become skip-only control batches. Answering the
/// partition with UNKNOWN_TOPIC_ID would also be safe, but it costs every such consumer a
/// metadata round trip and would keep failing for as long as the gateway cannot learn the id.
pub fn barrier_filter(
    name: &str,
    id: uuid::Uuid,
    topic_name: impl Fn(&uuid::Uuid) -> Option<String>,
    is_mirror_topic: impl Fn(&str) -> bool,
) -> BarrierFilter {
    let name = if name.is_empty() {
        match topic_name(&id) {
            Some(n) => n,
            None => return BarrierFilter::UnknownTopicId,
        }
    } else {
        name.to_string()
    };
    if is_mirror_topic(&name) {
        BarrierFilter::MirrorTopic(name)
    } else {
        BarrierFilter::Other
    }
}

#[cfg(test)]
#[path = "fetch_filter_tests.rs"]
mod tests;
