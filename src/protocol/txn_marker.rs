//! The failover barrier as a genuine control batch: an ABORT transaction marker the gateway
//! appends with WriteTxnMarkers (API key 27, version 1 — the only version Kafka 4.1.1 accepts)
//! for a producer id of its own, from an *idempotent* InitProducerId. Every consumer skips it
//! natively; the broker answers no offset, so the marker is found again in the log by its
//! producer id ([`is_control_barrier`]).
//!
//! Never a transactional id's producer id: a marker with a coordinator epoch or producer epoch
//! above the coordinator's makes the coordinator's own markers for that id fail and wedges it
//! (feasibility notes of 2026-11-30, §A.4). An idempotent producer id has no coordinator, and
//! coordinator epoch 0 is never above a real one.
//!
//! Owns: the request's shape and the reading of its answer. Must not touch: sockets, state.

use std::collections::HashMap;

use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::{ApiKey, WriteTxnMarkersRequest, WriteTxnMarkersResponse};
use kafka_protocol::protocol::StrBytes;

use super::batch::{control_marker, BatchHeader, ControlType};

/// The WriteTxnMarkers version the gateway sends (Kafka 4.1.1 accepts only 1; a broker closes
/// the connection on any other).
pub const WRITE_TXN_MARKERS_VERSION: i16 = 1;
/// The coordinator epoch of a barrier marker: 0 is never above a real coordinator's epoch.
pub const BARRIER_COORDINATOR_EPOCH: i32 = 0;

/// Error codes of a WriteTxnMarkers answer that make the gateway fall back to the data barrier
/// (in `failover.barrier: auto`): the principal may not send it.
pub const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;
pub const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
/// INVALID_TIMESTAMP: the topic's `message.timestamp.before/after.max.ms` refuse the time the
/// broker stamps the marker with (a data barrier carries no timestamp: review F13).
pub const INVALID_TIMESTAMP: i16 = 32;

/// One transaction marker to write: the producer, its result and the coordinator epoch it
/// carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MarkerSpec {
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// COMMIT (`true`) or ABORT (`false`).
    pub commit: bool,
    pub coordinator_epoch: i32,
}

impl MarkerSpec {
    /// The ABORT marker of a failover barrier (module doc).
    pub fn barrier(producer_id: i64, producer_epoch: i16) -> Self {
        MarkerSpec {
            producer_id,
            producer_epoch,
            commit: false,
            coordinator_epoch: BARRIER_COORDINATOR_EPOCH,
        }
    }
}

/// The WriteTxnMarkers request that appends each marker of `markers` to its partitions (all
/// led by the broker it is sent to).
pub fn markers_request(markers: &[(MarkerSpec, Vec<(String, i32)>)]) -> WriteTxnMarkersRequest {
    let markers = markers
        .iter()
        .map(|(spec, partitions)| {
            let mut topics: Vec<WritableTxnMarkerTopic> = Vec::new();
            for (topic, partition) in partitions {
                match topics.iter_mut().find(|t| t.name.0.as_str() == topic) {
                    Some(t) => t.partition_indexes.push(*partition),
                    None => topics.push(
                        WritableTxnMarkerTopic::default()
                            .with_name(StrBytes::from_string(topic.clone()).into())
                            .with_partition_indexes(vec![*partition]),
                    ),
                }
            }
            WritableTxnMarker::default()
                .with_producer_id(spec.producer_id.into())
                .with_producer_epoch(spec.producer_epoch)
                .with_transaction_result(spec.commit)
                .with_topics(topics)
                .with_coordinator_epoch(spec.coordinator_epoch)
        })
        .collect();
    WriteTxnMarkersRequest::default().with_markers(markers)
}

/// The WriteTxnMarkers request that appends one ABORT marker of `producer_id`/`epoch` to each
/// of `partitions` (all led by the broker it is sent to).
pub fn barrier_markers_request(
    producer_id: i64,
    producer_epoch: i16,
    partitions: &[(String, i32)],
) -> WriteTxnMarkersRequest {
    markers_request(&[(
        MarkerSpec::barrier(producer_id, producer_epoch),
        partitions.to_vec(),
    )])
}

/// What the broker answered for one partition of a barrier marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerOutcome {
    /// Appended.
    Written,
    /// Refused for authorization, or for the topic's timestamp limits: `auto` falls back to
    /// the data barrier.
    Refused(i16),
    /// Any other error (not leader, unknown partition, fenced…): the partition fails and is
    /// retried.
    Failed(i16),
    /// The answer has no entry for the partition.
    Missing,
}

impl MarkerOutcome {
    /// The outcome of error code `code` for a partition.
    pub fn of(code: i16) -> Self {
        match code {
            0 => MarkerOutcome::Written,
            CLUSTER_AUTHORIZATION_FAILED | TOPIC_AUTHORIZATION_FAILED | INVALID_TIMESTAMP => {
                MarkerOutcome::Refused(code)
            }
            c => MarkerOutcome::Failed(c),
        }
    }
}

/// The outcome of each of `partitions` in `resp`, the answer to
/// [`barrier_markers_request`]`(producer_id, ..)`. Entries for another producer id are ignored.
pub fn marker_outcomes(
    resp: &WriteTxnMarkersResponse,
    producer_id: i64,
    partitions: &[(String, i32)],
) -> HashMap<(String, i32), MarkerOutcome> {
    let mut out: HashMap<(String, i32), MarkerOutcome> = partitions
        .iter()
        .map(|k| (k.clone(), MarkerOutcome::Missing))
        .collect();
    for m in resp
        .markers
        .iter()
        .filter(|m| m.producer_id.0 == producer_id)
    {
        for t in &m.topics {
            for p in &t.partitions {
                let key = (t.name.0.to_string(), p.partition_index);
                if let Some(o) = out.get_mut(&key) {
                    *o = MarkerOutcome::of(p.error_code);
                }
            }
        }
    }
    out
}

/// Whether a broker's ApiVersions entries (`(key, min, max)`) accept WriteTxnMarkers at
/// [`WRITE_TXN_MARKERS_VERSION`].
pub fn supports_barrier_markers(versions: &[(i16, i16, i16)]) -> bool {
    versions.iter().any(|(k, min, max)| {
        *k == ApiKey::WriteTxnMarkers as i16 && (*min..=*max).contains(&WRITE_TXN_MARKERS_VERSION)
    })
}

/// Whether the batch `header`/`batch` is a barrier marker of `producer_id`: a control batch of
/// that producer id holding an ABORT marker.
pub fn is_control_barrier(header: &BatchHeader, batch: &[u8], producer_id: i64) -> bool {
    header.is_control()
        && header.is_transactional()
        && header.producer_id == producer_id
        && matches!(
            control_marker(header, batch),
            Ok(Some(m)) if m.control_type == ControlType::Abort
        )
}

/// Test helper: one uncompressed v2 batch holding one record of producer `pid` at `offset`.
/// With `marker` (0 ABORT, 1 COMMIT) a control batch holding that marker (coordinator epoch 0),
/// transactional as `transactional` (WriteTxnMarkers writes it so); without, a data record
/// `k` → `v` (sequence 0).
#[cfg(test)]
pub(crate) fn one_record_batch_for_tests(
    offset: i64,
    pid: i64,
    marker: Option<i16>,
    transactional: bool,
) -> bytes::Bytes {
    use kafka_protocol::records::{
        Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };
    let (key, value) = match marker {
        Some(kind) => {
            let mut k = bytes::BytesMut::new();
            k.extend_from_slice(&0i16.to_be_bytes());
            k.extend_from_slice(&kind.to_be_bytes());
            let mut v = bytes::BytesMut::new();
            v.extend_from_slice(&0i16.to_be_bytes());
            v.extend_from_slice(&0i32.to_be_bytes());
            (k.freeze(), v.freeze())
        }
        None => (
            bytes::Bytes::from_static(b"k"),
            bytes::Bytes::from_static(b"v"),
        ),
    };
    let r = Record {
        transactional,
        control: marker.is_some(),
        delete_horizon: false,
        partition_leader_epoch: 0,
        producer_id: pid,
        producer_epoch: 0,
        timestamp_type: TimestampType::Creation,
        offset,
        sequence: if marker.is_some() { -1 } else { 0 },
        timestamp: 1_700_000_000_000,
        key: Some(key),
        value: Some(value),
        headers: Default::default(),
    };
    let mut out = bytes::BytesMut::new();
    RecordBatchEncoder::encode(
        &mut out,
        &[r],
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .expect("encodable test batch");
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::batch::BatchWalker;
    use bytes::{Bytes, BytesMut};
    use kafka_protocol::messages::write_txn_markers_response::{
        WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
    };
    use kafka_protocol::protocol::{Decodable, Encodable};

    fn parts() -> Vec<(String, i32)> {
        vec![("a".into(), 0), ("a".into(), 2), ("b".into(), 1)]
    }

    #[test]
    fn the_barrier_request_is_one_abort_marker_with_coordinator_epoch_0_grouping_partitions_by_topic(
    ) {
        let req = barrier_markers_request(1000, 3, &parts());
        let mut buf = BytesMut::new();
        req.encode(&mut buf, WRITE_TXN_MARKERS_VERSION).unwrap();
        let back =
            WriteTxnMarkersRequest::decode(&mut buf.freeze(), WRITE_TXN_MARKERS_VERSION).unwrap();
        assert_eq!(back.markers.len(), 1);
        let m = &back.markers[0];
        assert_eq!((m.producer_id.0, m.producer_epoch), (1000, 3));
        assert!(!m.transaction_result, "ABORT");
        assert_eq!(m.coordinator_epoch, 0);
        let topics: Vec<(String, Vec<i32>)> = m
            .topics
            .iter()
            .map(|t| (t.name.0.to_string(), t.partition_indexes.clone()))
            .collect();
        assert_eq!(
            topics,
            vec![("a".to_string(), vec![0, 2]), ("b".to_string(), vec![1])]
        );
        // Version 2 is not what the gateway sends (Kafka 4.1.1 closes the connection).
        assert_eq!(WRITE_TXN_MARKERS_VERSION, 1);
    }

    fn answer(pid: i64, codes: &[(&str, i32, i16)]) -> WriteTxnMarkersResponse {
        let mut topics: Vec<WritableTxnMarkerTopicResult> = Vec::new();
        for (t, p, c) in codes {
            let pr = WritableTxnMarkerPartitionResult::default()
                .with_partition_index(*p)
                .with_error_code(*c);
            match topics.iter_mut().find(|x| x.name.0.as_str() == *t) {
                Some(x) => x.partitions.push(pr),
                None => topics.push(
                    WritableTxnMarkerTopicResult::default()
                        .with_name(StrBytes::from_string(t.to_string()).into())
                        .with_partitions(vec![pr]),
                ),
            }
        }
        let resp = WriteTxnMarkersResponse::default().with_markers(vec![
            WritableTxnMarkerResult::default()
                .with_producer_id(pid.into())
                .with_topics(topics),
        ]);
        // Through the wire format, as the client reads it.
        let mut buf = BytesMut::new();
        resp.encode(&mut buf, WRITE_TXN_MARKERS_VERSION).unwrap();
        WriteTxnMarkersResponse::decode(&mut buf.freeze(), WRITE_TXN_MARKERS_VERSION).unwrap()
    }

    #[test]
    fn marker_answers_are_read_per_partition_refusals_a_data_barrier_avoids_apart_from_other_errors(
    ) {
        let resp = answer(7, &[("a", 0, 0), ("a", 2, 31), ("b", 1, 6)]);
        let o = marker_outcomes(&resp, 7, &parts());
        assert_eq!(o[&("a".to_string(), 0)], MarkerOutcome::Written);
        assert_eq!(o[&("a".to_string(), 2)], MarkerOutcome::Refused(31));
        assert_eq!(o[&("b".to_string(), 1)], MarkerOutcome::Failed(6));
        let resp = answer(7, &[("a", 0, 29), ("a", 2, 32)]);
        let o = marker_outcomes(&resp, 7, &parts());
        assert_eq!(o[&("a".to_string(), 0)], MarkerOutcome::Refused(29));
        assert_eq!(o[&("a".to_string(), 2)], MarkerOutcome::Refused(32));
        assert_eq!(o[&("b".to_string(), 1)], MarkerOutcome::Missing);
        // An answer for another producer id says nothing about ours.
        let resp = answer(8, &[("a", 0, 0), ("a", 2, 0), ("b", 1, 0)]);
        assert!(marker_outcomes(&resp, 7, &parts())
            .values()
            .all(|o| *o == MarkerOutcome::Missing));
        // Partitions nobody asked about are not reported.
        let resp = answer(7, &[("zz", 9, 0)]);
        assert_eq!(marker_outcomes(&resp, 7, &parts()).len(), 3);
    }

    #[test]
    fn write_txn_markers_is_used_only_when_the_broker_lists_version_1() {
        assert!(supports_barrier_markers(&[(0, 0, 12), (27, 1, 1)]));
        assert!(supports_barrier_markers(&[(27, 0, 1)]));
        assert!(!supports_barrier_markers(&[(0, 0, 12)]));
        assert!(!supports_barrier_markers(&[(27, 2, 2)]));
        assert!(!supports_barrier_markers(&[(27, 0, 0)]));
    }

    fn control_batch(pid: i64, kind: i16, transactional: bool) -> Bytes {
        one_record_batch_for_tests(5, pid, Some(kind), transactional)
    }

    const ABORT: i16 = 0;
    const COMMIT: i16 = 1;

    fn check(b: &Bytes, pid: i64) -> bool {
        let (h, batch) = BatchWalker::fetched(b).next().unwrap().unwrap();
        is_control_barrier(&h, batch, pid)
    }

    #[test]
    fn a_control_barrier_is_an_abort_marker_of_the_recorded_producer_id() {
        assert!(check(&control_batch(1000, ABORT, true), 1000));
        // Another producer's marker, a COMMIT marker, a non-transactional control batch: not it.
        assert!(!check(&control_batch(1001, ABORT, true), 1000));
        assert!(!check(&control_batch(1000, COMMIT, true), 1000));
        assert!(!check(&control_batch(1000, ABORT, false), 1000));
    }
}
