//! Decode-on-demand response rewriting: broker addresses in Metadata, FindCoordinator,
//! DescribeCluster, the KIP-951 `NodeEndpoints` of Produce (v10+) and Fetch (v16+) and the
//! `NodeEndpoints` of the KIP-932 share-group ShareFetch and ShareAcknowledge responses (every
//! version; review F3/F7), and version capping in ApiVersions.
//!
//! A broker's real address never reaches a client: an endpoint whose node id the
//! [`AddressMap`] cannot serve is removed (Metadata, DescribeCluster, NodeEndpoints) or turned
//! into a retriable COORDINATOR_NOT_AVAILABLE (FindCoordinator). Node ids are kept as they are,
//! so leader ids, replica lists and endpoints stay consistent with each other.
//!
//! The gateway's Produce exchange rewrites the Produce response it already decoded with
//! [`map_produce_endpoints`]; [`rewrite_response`] handles whole frames of every API.
//!
//! A forward listener's map presents **one virtual cluster** ([`AddressMap::virtual_cluster`]):
//! its cluster id in Metadata and DescribeCluster, and no leader epochs (Metadata partitions,
//! the `current_leader` hints of Produce and Fetch). Its upstream changes from the source to the
//! destination, whose epochs are unrelated: a client that cached a higher epoch would ignore
//! the destination's leaders, while an absent epoch is always accepted (and skips the
//! consumer's log-truncation check, which has no meaning across two clusters).
//!
//! Owns: the address fields of responses, and the cluster identity of a virtual cluster. Must not touch: which addresses the gateway serves
//! (the caller's [`AddressMap`]), metrics, the cluster view (the caller feeds it what
//! [`Rewritten`] reports).

use bytes::Bytes;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsResponse, DescribeClusterResponse, FetchResponse, FindCoordinatorResponse,
    MetadataResponse, ProduceResponse, ResponseHeader, ShareAcknowledgeResponse,
    ShareFetchResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use super::frame::FrameError;
use super::versions::{cap_api_versions, cap_to_named_topics};

/// Error code UNSUPPORTED_VERSION.
pub const UNSUPPORTED_VERSION: i16 = 35;
/// Error code COORDINATOR_NOT_AVAILABLE.
pub const COORDINATOR_NOT_AVAILABLE: i16 = 15;

/// Maps a broker node id to the address clients must use for it.
pub trait AddressMap {
    /// `(host, port)` for `node_id`, or `None` when the gateway cannot serve that broker.
    fn endpoint(&self, node_id: i32) -> Option<(StrBytes, i32)>;

    /// The cluster id of the one virtual cluster a forward listener presents (`None`: the
    /// upstream's identity and leader epochs pass as they are).
    fn virtual_cluster(&self) -> Option<StrBytes> {
        None
    }

    /// Whether the leader hints of Produce answers keep their leader epochs: always outside a
    /// virtual cluster; inside one, only where the map says so (a forward listener on the
    /// destination, see [`hide_produce_leader_epochs`]).
    fn produce_hint_epochs(&self) -> bool {
        self.virtual_cluster().is_none()
    }
}

/// A broker as the upstream cluster described it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerEndpoint {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
}

/// The outcome of [`rewrite_response`].
#[derive(Debug, Default)]
pub struct Rewritten {
    /// The new frame (length prefix included), or `None` when the original can be forwarded.
    pub frame: Option<Bytes>,
    /// Brokers seen in a Metadata response (real addresses, before rewriting).
    pub brokers: Vec<BrokerEndpoint>,
    /// Topic ids and names seen in a Metadata response.
    pub topics: Vec<(uuid::Uuid, String)>,
    /// Endpoints removed because the gateway cannot serve their node id.
    pub unmapped: usize,
}

/// Whether a response of `key`/`version` must go through [`rewrite_response`].
pub fn needs_rewrite(key: ApiKey, version: i16) -> bool {
    match key {
        ApiKey::ApiVersions
        | ApiKey::Metadata
        | ApiKey::FindCoordinator
        | ApiKey::DescribeCluster => true,
        ApiKey::Produce => version >= 10,
        ApiKey::Fetch => version >= 16,
        ApiKey::ShareFetch | ApiKey::ShareAcknowledge => true,
        _ => false,
    }
}

fn bad(e: impl std::fmt::Display) -> FrameError {
    FrameError::BadResponse(e.to_string())
}

fn encode_frame<M: Encodable>(
    header: &ResponseHeader,
    header_version: i16,
    msg: &M,
    version: i16,
    size_hint: usize,
) -> Result<Bytes, FrameError> {
    super::frame::encode_response(header, header_version, msg, version, size_hint)
}

/// Rewrite the endpoints of `$list` in place (field `$id` is the node id), dropping the ones the
/// map cannot serve; evaluates to the number dropped.
macro_rules! retain_mapped {
    ($list:expr, $id:ident, $map:expr) => {{
        let before = $list.len();
        $list.retain_mut(|b| match $map.endpoint(b.$id.0) {
            Some((host, port)) => {
                b.host = host;
                b.port = port;
                true
            }
            None => false,
        });
        before - $list.len()
    }};
}

/// Rewrite the KIP-951 `node_endpoints` of a decoded Produce response in place; the number of
/// endpoints removed (no gateway port for their node id).
pub fn map_produce_endpoints(resp: &mut ProduceResponse, map: &dyn AddressMap) -> usize {
    hide_produce_leader_epochs(resp, map);
    retain_mapped!(resp.node_endpoints, node_id, map)
}

/// A virtual cluster's Produce response carries no leader epoch, unless the map keeps them
/// ([`AddressMap::produce_hint_epochs`]); whether one was hidden.
///
/// The Java client (3.7 and later) follows a hint (retries at once at the leader it names, with
/// no backoff) only when it carries an epoch, and only one higher than the epoch it cached. A
/// forward listener shows no epoch in Metadata, so a client caches one only from such hints.
/// On the source side they stay hidden: a source epoch cached there would make the client
/// ignore the destination's lower ones after a switch. On the destination side they pass: the
/// destination's epochs only grow, and the next Metadata answer makes the client forget them.
fn hide_produce_leader_epochs(resp: &mut ProduceResponse, map: &dyn AddressMap) -> bool {
    let mut hidden = false;
    if !map.produce_hint_epochs() {
        let leaders = resp
            .responses
            .iter_mut()
            .flat_map(|t| t.partition_responses.iter_mut());
        for p in leaders.filter(|p| p.current_leader.leader_epoch >= 0) {
            p.current_leader.leader_epoch = -1;
            hidden = true;
        }
    }
    hidden
}

/// Rewrite one response frame (length prefix included) of `key`/`version`.
pub fn rewrite_response(
    key: ApiKey,
    version: i16,
    frame: &Bytes,
    map: &dyn AddressMap,
) -> Result<Rewritten, FrameError> {
    let mut out = Rewritten::default();
    if !needs_rewrite(key, version) {
        return Ok(out);
    }
    if frame.len() < 8 {
        return Err(bad(format!("response of {} bytes", frame.len())));
    }
    let size = frame.len();
    #[cfg(test)]
    super::frame::counts::bump(super::frame::counts::Event::ResponseDecode);
    let mut body = frame.slice(4..);
    let hv = key.response_header_version(version);
    let header = ResponseHeader::decode(&mut body, hv).map_err(bad)?;
    match key {
        ApiKey::ApiVersions => {
            // An ApiVersions request newer than the broker gets a v0 body with error 35 (KIP-511).
            let error = if body.len() >= 2 {
                i16::from_be_bytes([body[0], body[1]])
            } else {
                0
            };
            let v = if error == UNSUPPORTED_VERSION {
                0
            } else {
                version
            };
            let mut resp = ApiVersionsResponse::decode(&mut body, v).map_err(bad)?;
            cap_api_versions(&mut resp.api_keys);
            if map.virtual_cluster().is_some() {
                cap_to_named_topics(&mut resp.api_keys);
            }
            out.frame = Some(encode_frame(&header, hv, &resp, v, size)?);
        }
        ApiKey::Metadata => {
            let mut resp = MetadataResponse::decode(&mut body, version).map_err(bad)?;
            for b in &resp.brokers {
                out.brokers.push(BrokerEndpoint {
                    node_id: b.node_id.0,
                    host: b.host.to_string(),
                    port: b.port,
                });
            }
            for t in &resp.topics {
                if let Some(name) = &t.name {
                    if !t.topic_id.is_nil() {
                        out.topics.push((t.topic_id, name.0.to_string()));
                    }
                }
            }
            out.unmapped = retain_mapped!(resp.brokers, node_id, map);
            if let Some(id) = map.virtual_cluster() {
                if version >= 2 {
                    resp.cluster_id = Some(id);
                }
                for t in resp.topics.iter_mut() {
                    for p in t.partitions.iter_mut() {
                        p.leader_epoch = -1;
                    }
                }
            }
            out.frame = Some(encode_frame(&header, hv, &resp, version, size)?);
        }
        ApiKey::FindCoordinator => {
            let mut resp = FindCoordinatorResponse::decode(&mut body, version).map_err(bad)?;
            if version < 4 {
                if resp.node_id.0 >= 0 {
                    match map.endpoint(resp.node_id.0) {
                        Some((host, port)) => {
                            resp.host = host;
                            resp.port = port;
                        }
                        None => {
                            out.unmapped += 1;
                            resp.error_code = COORDINATOR_NOT_AVAILABLE;
                            resp.node_id = (-1).into();
                            resp.host = StrBytes::from_static_str("");
                            resp.port = -1;
                        }
                    }
                }
            } else {
                for c in resp.coordinators.iter_mut() {
                    if c.node_id.0 < 0 {
                        continue;
                    }
                    match map.endpoint(c.node_id.0) {
                        Some((host, port)) => {
                            c.host = host;
                            c.port = port;
                        }
                        None => {
                            out.unmapped += 1;
                            c.error_code = COORDINATOR_NOT_AVAILABLE;
                            c.node_id = (-1).into();
                            c.host = StrBytes::from_static_str("");
                            c.port = -1;
                        }
                    }
                }
            }
            out.frame = Some(encode_frame(&header, hv, &resp, version, size)?);
        }
        ApiKey::DescribeCluster => {
            let mut resp = DescribeClusterResponse::decode(&mut body, version).map_err(bad)?;
            // endpoint_type 1 = brokers; 2 = controllers, which the gateway does not front.
            if version == 0 || resp.endpoint_type == 1 {
                out.unmapped = retain_mapped!(resp.brokers, broker_id, map);
            }
            if let Some(id) = map.virtual_cluster() {
                resp.cluster_id = id;
            }
            out.frame = Some(encode_frame(&header, hv, &resp, version, size)?);
        }
        ApiKey::Produce => {
            let mut resp = ProduceResponse::decode(&mut body, version).map_err(bad)?;
            // Encoded again only when a hint changed: most answers carry none.
            let hidden = hide_produce_leader_epochs(&mut resp, map);
            if hidden || !resp.node_endpoints.is_empty() {
                out.unmapped = retain_mapped!(resp.node_endpoints, node_id, map);
                out.frame = Some(encode_frame(&header, hv, &resp, version, size)?);
            }
        }
        ApiKey::Fetch => {
            let mut resp = FetchResponse::decode(&mut body, version).map_err(bad)?;
            if !resp.node_endpoints.is_empty() {
                if map.virtual_cluster().is_some() {
                    for t in resp.responses.iter_mut() {
                        for p in t.partitions.iter_mut() {
                            p.current_leader.leader_epoch = -1;
                        }
                    }
                }
                out.unmapped = retain_mapped!(resp.node_endpoints, node_id, map);
                out.frame = Some(encode_frame(&header, hv, &resp, version, size)?);
            }
        }
        ApiKey::ShareFetch => {
            let mut resp = ShareFetchResponse::decode(&mut body, version).map_err(bad)?;
            if !resp.node_endpoints.is_empty() {
                out.unmapped = retain_mapped!(resp.node_endpoints, node_id, map);
                out.frame = Some(encode_frame(&header, hv, &resp, version, size)?);
            }
        }
        ApiKey::ShareAcknowledge => {
            let mut resp = ShareAcknowledgeResponse::decode(&mut body, version).map_err(bad)?;
            if !resp.node_endpoints.is_empty() {
                out.unmapped = retain_mapped!(resp.node_endpoints, node_id, map);
                out.frame = Some(encode_frame(&header, hv, &resp, version, size)?);
            }
        }
        _ => {}
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
