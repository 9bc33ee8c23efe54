//! Broker addresses in responses: Metadata, FindCoordinator, DescribeCluster, ApiVersions
//! (version capping), and the `NodeEndpoints` of Fetch and the share-group APIs are rewritten to
//! the gateway's ports ([`crate::protocol::rewrite`]); the cluster view learns the brokers and
//! topic ids a Metadata response names. Produce responses are rewritten by
//! [`super::produce`] on the response it already decoded ([`endpoints_unmapped`] reports them).
//!
//! Owns: feeding the cluster view and the unmapped-endpoint metric. Must not touch: the bytes
//! (`crate::protocol::rewrite`).

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;

use crate::protocol::frame::FrameError;
use crate::protocol::rewrite::{needs_rewrite, rewrite_response};

use super::ConnContext;

/// The response `frame` of `api`/`version` with broker addresses rewritten (the same frame when
/// nothing needed rewriting).
pub fn rewrite(
    ctx: &ConnContext,
    api: ApiKey,
    version: i16,
    frame: Bytes,
) -> Result<Bytes, FrameError> {
    if !needs_rewrite(api, version) {
        return Ok(frame);
    }
    let r = rewrite_response(api, version, &frame, &ctx.address_map)?;
    if !r.brokers.is_empty() || !r.topics.is_empty() {
        ctx.cluster.observe(&r.brokers, &r.topics);
    }
    endpoints_unmapped(ctx, r.unmapped);
    Ok(r.frame.unwrap_or(frame))
}

/// Count and log `unmapped` endpoints removed from a response.
pub fn endpoints_unmapped(ctx: &ConnContext, unmapped: usize) {
    if unmapped > 0 {
        ctx.metrics.unmapped_endpoints.inc_by(unmapped as u64);
        tracing::warn!(
            unmapped,
            "removed broker endpoints without a gateway port (raise max_brokers?)"
        );
    }
}
