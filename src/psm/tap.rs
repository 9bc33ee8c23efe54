//! The produce tap: the one place where produced batches meet the PSM, for both listeners.
//!
//! On the request path it walks the Produce request (no decoding of records, no allocation for
//! untracked topics) and notes the single batch of each tracked partition. On the response path
//! it reads each partition's result and hands (batch, broker outcome) to the
//! [`PsmRegistry`](super::registry::PsmRegistry), in response order: the broker's log order for
//! one connection. Connections are answered independently, so a partition's outcomes from
//! different connections (different producers) reach the registry in any order.

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;
use kafka_protocol::messages::{ProduceResponse, ResponseHeader};
use kafka_protocol::protocol::Decodable;

use crate::cluster::ClusterView;
use crate::protocol::batch::{single_client_batch, BatchHeader};
use crate::protocol::produce::{ProduceWalker, TopicRef};

use super::registry::{BatchResult, BrokerOutcome, PsmRegistry};

/// One tracked batch of an in-flight Produce request.
#[derive(Debug, Clone)]
pub struct PendingBatch {
    pub topic: String,
    pub topic_id: Option<uuid::Uuid>,
    pub partition: i32,
    pub header: BatchHeader,
}

/// The tracked batches of one in-flight Produce request.
#[derive(Debug, Clone, Default)]
pub struct PendingProduce {
    pub batches: Vec<PendingBatch>,
}

fn topic_name(cluster: &ClusterView, t: TopicRef<'_>) -> Option<(String, Option<uuid::Uuid>)> {
    match t {
        TopicRef::Name(n) => Some((n.to_string(), None)),
        TopicRef::Id(id) => cluster.topic_name(&id).map(|n| (n, Some(id))),
    }
}

/// Note the tracked batches of a Produce request body (after the request header).
///
/// `acks=0` requests get no response, so the PSM cannot learn their offsets: their tracked
/// partitions are marked for a rebuild from the log instead.
pub fn on_request(
    registry: &PsmRegistry,
    cluster: &ClusterView,
    version: i16,
    body: &[u8],
    verify_crc: bool,
) -> Option<PendingProduce> {
    let walker = match ProduceWalker::new(version, body) {
        Ok(w) => w,
        Err(e) => {
            tracing::debug!(error = %e, "produce request not readable by the tap; the broker decides");
            return None;
        }
    };
    let acks = walker.acks();
    let mut pending: Option<PendingProduce> = None;
    for part in walker {
        let part = match part {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!(error = %e, "produce request not readable by the tap; the broker decides");
                break;
            }
        };
        let tracked = match part.topic {
            TopicRef::Name(n) => registry.tracks(n),
            TopicRef::Id(id) => cluster.topic_name(&id).is_some_and(|n| registry.tracks(&n)),
        };
        if !tracked {
            continue;
        }
        let Some((topic, topic_id)) = topic_name(cluster, part.topic) else {
            continue;
        };
        if acks == 0 {
            registry.mark_outcome_unknown(&topic, part.partition);
            continue;
        }
        let Some(records) = part.records else {
            continue;
        };
        match single_client_batch(records, verify_crc) {
            Ok((header, _)) => pending
                .get_or_insert_with(PendingProduce::default)
                .batches
                .push(PendingBatch {
                    topic,
                    topic_id,
                    partition: part.partition,
                    header,
                }),
            Err(e) => {
                tracing::debug!(topic, partition = part.partition, error = %e, "unreadable batch; the broker decides");
                registry.counters.batch(BatchResult::Unreadable);
            }
        }
    }
    pending
}

/// Apply the broker's answer (a whole Produce response frame, length prefix included) to the
/// tracked batches of its request.
pub fn on_response(registry: &PsmRegistry, version: i16, frame: &Bytes, pending: PendingProduce) {
    #[cfg(test)]
    crate::protocol::frame::counts::bump(crate::protocol::frame::counts::Event::ResponseDecode);
    let mut body = frame.slice(4..);
    let hv = ApiKey::Produce.response_header_version(version);
    let decoded = ResponseHeader::decode(&mut body, hv)
        .and_then(|_| ProduceResponse::decode(&mut body, version));
    let resp = match decoded {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read a produce response; rebuilding its tracked partitions");
            for b in &pending.batches {
                registry.apply(
                    &b.topic,
                    b.partition,
                    &b.header,
                    BrokerOutcome::Unknown { error_code: -1 },
                );
            }
            return;
        }
    };
    for b in &pending.batches {
        let found = resp.responses.iter().find_map(|t| {
            let same_topic = match b.topic_id {
                Some(id) => t.topic_id == id,
                None => t.name.0.as_str() == b.topic,
            };
            if !same_topic {
                return None;
            }
            t.partition_responses
                .iter()
                .find(|p| p.index == b.partition)
        });
        let outcome = match found {
            Some(p) if p.error_code == 0 => BrokerOutcome::Appended {
                base_offset: p.base_offset,
            },
            Some(p) => BrokerOutcome::Refused {
                error_code: p.error_code,
            },
            None => BrokerOutcome::Unknown { error_code: -1 },
        };
        // A LogAppendTime topic: the broker stamped the batch with its append time, and that is
        // the producer's last timestamp in its state (review F11a).
        let append_time = found.map(|p| p.log_append_time_ms).filter(|t| *t >= 0);
        match append_time {
            Some(t) => {
                let mut header = b.header;
                header.max_timestamp = t;
                registry.apply(&b.topic, b.partition, &header, outcome);
            }
            None => {
                registry.apply(&b.topic, b.partition, &b.header, outcome);
            }
        }
    }
}
