//! The produce tap: the one place where produced batches meet the PSM, for both listeners.
//!
//! On the request path it walks the Produce request (no decoding of records, no allocation for
//! untracked topics) and notes the single batch of each tracked partition. On the response path
//! it reads each partition's result and hands (batch, broker outcome) to the
//! [`PsmRegistry`](super::registry::PsmRegistry), in response order: the broker's log order for
//! one connection. Connections are answered independently, so a partition's outcomes from
//! different connections (different producers) reach the registry in any order.
//!
//! It reads the request's one [`ProduceView`] (built by `proxy::exchange::produce`, whose topics
//! the view already marked as tracked, and whose tracked partitions' single batch it already
//! checked) and the response's one decoded value: it walks and decodes nothing itself.
//!
//! Owns: pairing tracked batches with the broker's outcomes. Must not touch: the bytes (it
//! reads views), what is tracked (the registry's router, asked once per topic by the view's
//! builder), enforcement.

use kafka_protocol::messages::ProduceResponse;

use std::borrow::Cow;

use crate::cluster::ClusterView;
use crate::protocol::batch::BatchHeader;
use crate::protocol::produce::{BatchQuestions, ProduceView, TopicRef};

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

/// Note the tracked batches of a Produce request from its view: the partitions of topics the
/// view marks `mirror` (tracked) for which `forwarded(index)` holds (those sent to the broker).
///
/// `acks=0` requests get no response, so the PSM cannot learn their offsets: their tracked
/// partitions are marked for a rebuild from the log instead.
pub fn on_view(
    registry: &PsmRegistry,
    view: &ProduceView<'_>,
    forwarded: &dyn Fn(usize) -> bool,
) -> Option<PendingProduce> {
    if let Some(e) = &view.error {
        tracing::debug!(error = %e, "produce request not readable by the tap; the broker decides");
    }
    let mut pending: Option<PendingProduce> = None;
    for (i, part) in view.partitions.iter().enumerate() {
        let t = view.topic_of(part);
        if !t.mirror || !forwarded(i) {
            continue;
        }
        let Some(name) = &t.name else {
            continue;
        };
        let topic = name.to_string();
        let topic_id = match t.topic {
            TopicRef::Name(_) => None,
            TopicRef::Id(id) => Some(id),
        };
        if view.acks == 0 {
            registry.mark_outcome_unknown(&topic, part.partition);
            continue;
        }
        let Some(single) = &part.batches.single else {
            continue;
        };
        match single {
            Ok(header) => pending
                .get_or_insert_with(PendingProduce::default)
                .batches
                .push(PendingBatch {
                    topic,
                    topic_id,
                    partition: part.partition,
                    header: *header,
                }),
            Err(e) => {
                tracing::debug!(topic, partition = part.partition, error = %e, "unreadable batch; the broker decides");
                registry.counters.batch(BatchResult::Unreadable);
            }
        }
    }
    pending
}

/// [`on_view`] for a caller that holds only the Produce request body (after the request header):
/// builds the view (topic ids resolved through `cluster`) and notes every tracked partition.
pub fn on_request(
    registry: &PsmRegistry,
    cluster: &ClusterView,
    version: i16,
    body: &[u8],
    verify_crc: bool,
) -> Option<PendingProduce> {
    let view = match ProduceView::build(
        version,
        body,
        &mut |t| resolve(registry, cluster, t),
        &|t| BatchQuestions {
            single: t.mirror,
            verify_crc,
            barriers: false,
        },
    ) {
        Ok(v) => v,
        Err(e) => {
            tracing::debug!(error = %e, "produce request not readable by the tap; the broker decides");
            return None;
        }
    };
    on_view(registry, &view, &|_| true)
}

/// A topic's name (a topic id resolved through `cluster`) and whether `registry` tracks it.
pub fn resolve<'a>(
    registry: &PsmRegistry,
    cluster: &ClusterView,
    t: TopicRef<'a>,
) -> (Option<Cow<'a, str>>, bool) {
    let name = match t {
        TopicRef::Name(n) => Some(Cow::Borrowed(n)),
        TopicRef::Id(id) => cluster.topic_name(&id).map(Cow::Owned),
    };
    let tracked = name.as_deref().is_some_and(|n| registry.tracks(n));
    (name, tracked)
}

/// Apply the broker's answer (the response decoded once by the exchange; an error when it could
/// not be decoded) to the tracked batches of its request.
pub fn on_response(
    registry: &PsmRegistry,
    response: Result<&ProduceResponse, String>,
    pending: PendingProduce,
) {
    let resp = match response {
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
