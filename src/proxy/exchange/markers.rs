//! WriteTxnMarkers on the mirror listener: the built-in mirror agent reproduces the source's
//! transaction markers with it. Every partition a request names is admitted like a mirror
//! Produce write (refused once the partition is fenced, paused or stopped; counted in flight
//! until the broker answers, so a failover's drain waits for it). One refused partition refuses
//! the whole request: the gateway answers it, every partition with the refusal's error code,
//! and nothing is forwarded.
//!
//! Owns: that admission and the local answer. Must not touch: the markers' content (forwarded
//! as sent), the PSM (the agent tells it the marker's offset).

use bytes::Bytes;
use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::{ApiKey, WriteTxnMarkersRequest, WriteTxnMarkersResponse};
use kafka_protocol::protocol::Decodable;

use crate::metrics::ListenerKind;
use crate::mirror::admission::InFlightGuard;
use crate::protocol::frame::{answer, RequestHeaderInfo};

use super::{ConnContext, ExchangeError, Step};

/// The in-flight guards of the request's mirror partitions.
pub struct Pending {
    guards: Vec<InFlightGuard>,
}

impl Pending {
    /// Whether the request holds admitted mirror writes.
    pub fn holds_mirror_writes(&self) -> bool {
        !self.guards.is_empty()
    }

    /// The broker answered, or the request was never sent: the markers' outcomes are known.
    pub fn finish(self) {
        for g in self.guards {
            g.answered();
        }
    }
}

pub fn begin(
    ctx: &ConnContext,
    h: &RequestHeaderInfo,
    frame: Bytes,
) -> Result<(Step, Pending), ExchangeError> {
    let mut pending = Pending { guards: Vec::new() };
    let Some(policy) = &ctx.mirrors else {
        return Ok((Step::Forward(frame), pending));
    };
    let mut body = frame.slice(4 + h.header_len..);
    let req = WriteTxnMarkersRequest::decode(&mut body, h.api_version)
        .map_err(|e| ExchangeError::Markers(format!("version {}: {e}", h.api_version)))?;
    let mut refusal = None;
    'markers: for m in &req.markers {
        for t in &m.topics {
            for p in &t.partition_indexes {
                match policy.admit(ListenerKind::Mirror, t.name.0.as_str(), *p) {
                    Ok(Some(g)) => pending.guards.push(g),
                    Ok(None) => {}
                    Err(r) => {
                        refusal = Some(r);
                        break 'markers;
                    }
                }
            }
        }
    }
    let Some(refusal) = refusal else {
        return Ok((Step::Forward(frame), pending));
    };
    tracing::debug!(message = %refusal.message, "WriteTxnMarkers refused on the mirror listener");
    // Unsent: the admitted partitions' writes are known not to be appended.
    for g in pending.guards.drain(..) {
        g.answered();
    }
    let resp = WriteTxnMarkersResponse::default().with_markers(
        req.markers
            .iter()
            .map(|m| {
                WritableTxnMarkerResult::default()
                    .with_producer_id(m.producer_id)
                    .with_topics(
                        m.topics
                            .iter()
                            .map(|t| {
                                WritableTxnMarkerTopicResult::default()
                                    .with_name(t.name.clone())
                                    .with_partitions(
                                        t.partition_indexes
                                            .iter()
                                            .map(|p| {
                                                WritableTxnMarkerPartitionResult::default()
                                                    .with_partition_index(*p)
                                                    .with_error_code(refusal.error_code)
                                            })
                                            .collect(),
                                    )
                            })
                            .collect(),
                    )
            })
            .collect(),
    );
    let frame = answer(
        ApiKey::WriteTxnMarkers,
        h.api_version,
        h.correlation_id,
        &resp,
        64,
    )?;
    Ok((Step::Answer(frame), pending))
}
