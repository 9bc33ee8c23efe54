//! Tests of [`rewrite_response`]: wire round trips of every message the gateway rewrites, at
//! every version it rewrites; the rewriting itself; and malformed input.

use std::collections::BTreeMap;
use std::fmt::Debug;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::api_versions_response::{
    ApiVersion, FinalizedFeatureKey, SupportedFeatureKey,
};
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, EpochEndOffset, FetchableTopicResponse,
    LeaderIdAndEpoch as FetchLeaderIdAndEpoch, NodeEndpoint as FetchNodeEndpoint, PartitionData,
    SnapshotId,
};
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, LeaderIdAndEpoch as ProduceLeaderIdAndEpoch,
    NodeEndpoint as ProduceNodeEndpoint, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsResponse, BrokerId, DescribeClusterResponse, FetchResponse,
    FindCoordinatorResponse, MetadataResponse, ProduceResponse, ResponseHeader,
    ShareAcknowledgeResponse, ShareFetchResponse, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use proptest::collection::{btree_map, vec};
use proptest::option;
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestRunner};
use uuid::Uuid;

use super::{
    needs_rewrite, rewrite_response, AddressMap, BrokerEndpoint, Rewritten,
    COORDINATOR_NOT_AVAILABLE, UNSUPPORTED_VERSION,
};

// ---------------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------------

/// Node 1 → gw:9092, node 2 → gw:9093, nothing else.
struct TestMap;

impl AddressMap for TestMap {
    fn endpoint(&self, node_id: i32) -> Option<(StrBytes, i32)> {
        match node_id {
            1 => Some((StrBytes::from_static_str("gw"), 9092)),
            2 => Some((StrBytes::from_static_str("gw"), 9093)),
            _ => None,
        }
    }
}

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_owned())
}

/// Every (key, version) that `rewrite_response` decodes.
fn rewritten_versions() -> Vec<(ApiKey, i16)> {
    let mut out = Vec::new();
    for key in [
        ApiKey::ApiVersions,
        ApiKey::Metadata,
        ApiKey::FindCoordinator,
        ApiKey::DescribeCluster,
        ApiKey::Produce,
        ApiKey::Fetch,
        ApiKey::ShareFetch,
        ApiKey::ShareAcknowledge,
    ] {
        let r = key.valid_versions();
        for v in r.min..=r.max {
            if needs_rewrite(key, v) {
                out.push((key, v));
            }
        }
    }
    out
}

fn versions(key: ApiKey) -> std::ops::RangeInclusive<i16> {
    let r = key.valid_versions();
    r.min..=r.max
}

fn header(correlation_id: i32) -> ResponseHeader {
    let mut h = ResponseHeader::default();
    h.correlation_id = correlation_id;
    h
}

/// A whole frame: length prefix, response header at `header_version`, body at `body_version`.
fn frame_at<M: Encodable>(
    header: &ResponseHeader,
    header_version: i16,
    msg: &M,
    body_version: i16,
) -> Bytes {
    let mut out = BytesMut::new();
    out.put_i32(0);
    header
        .encode(&mut out, header_version)
        .expect("encode header");
    msg.encode(&mut out, body_version).expect("encode body");
    let len = (out.len() - 4) as i32;
    out[0..4].copy_from_slice(&len.to_be_bytes());
    out.freeze()
}

/// A frame of `key`/`version` with the header version that API uses.
fn frame_with<M: Encodable>(key: ApiKey, version: i16, header: &ResponseHeader, msg: &M) -> Bytes {
    frame_at(header, key.response_header_version(version), msg, version)
}

fn frame_of<M: Encodable>(key: ApiKey, version: i16, correlation_id: i32, msg: &M) -> Bytes {
    frame_with(key, version, &header(correlation_id), msg)
}

/// Decode a whole frame, asserting that the length prefix is right and every byte is consumed.
fn decode_at<M: Decodable>(
    frame: &Bytes,
    header_version: i16,
    body_version: i16,
) -> (ResponseHeader, M) {
    assert!(frame.len() >= 4, "frame of {} bytes", frame.len());
    let prefix = i32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
    assert_eq!(
        prefix as usize,
        frame.len() - 4,
        "length prefix does not match the frame"
    );
    let mut body = frame.slice(4..);
    let h = ResponseHeader::decode(&mut body, header_version).expect("decode header");
    let m = M::decode(&mut body, body_version).expect("decode body");
    assert!(body.is_empty(), "{} bytes left after the body", body.len());
    (h, m)
}

fn decode_frame<M: Decodable>(key: ApiKey, version: i16, frame: &Bytes) -> (ResponseHeader, M) {
    decode_at(frame, key.response_header_version(version), version)
}

fn rewrite(key: ApiKey, version: i16, frame: &Bytes) -> Rewritten {
    rewrite_response(key, version, frame, &TestMap).unwrap_or_else(|e| {
        panic!("rewrite of {key:?} v{version} failed: {e}");
    })
}

/// Rewrite, insist on a new frame, and decode it.
fn rewrite_and_decode<M: Decodable>(
    key: ApiKey,
    version: i16,
    frame: &Bytes,
) -> (Rewritten, ResponseHeader, M) {
    let out = rewrite(key, version, frame);
    let new = out
        .frame
        .clone()
        .unwrap_or_else(|| panic!("{key:?} v{version}: no new frame"));
    let (h, m) = decode_frame(key, version, &new);
    (out, h, m)
}

/// Where a mapped node must point after rewriting.
fn gateway(node_id: i32) -> Option<(StrBytes, i32)> {
    TestMap.endpoint(node_id)
}

fn metadata_broker(id: i32, host: &str, port: i32, rack: Option<&str>) -> MetadataResponseBroker {
    let mut b = MetadataResponseBroker::default();
    b.node_id = BrokerId(id);
    b.host = s(host);
    b.port = port;
    b.rack = rack.map(s);
    b
}

/// Brokers 1, 2 and 3 with real addresses (racks only where the version has them).
fn three_metadata_brokers(version: i16) -> Vec<MetadataResponseBroker> {
    let rack = |r: &'static str| if version >= 1 { Some(r) } else { None };
    vec![
        metadata_broker(1, "kafka-1.internal", 19092, rack("a")),
        metadata_broker(2, "kafka-2.internal", 19093, rack("b")),
        metadata_broker(3, "kafka-3.internal", 19094, rack("c")),
    ]
}

fn metadata_topic(version: i16, name: &str, id: Uuid, leader: i32) -> MetadataResponseTopic {
    let mut p = MetadataResponsePartition::default();
    p.partition_index = 0;
    p.leader_id = BrokerId(leader);
    p.replica_nodes = vec![BrokerId(1), BrokerId(2), BrokerId(3)];
    p.isr_nodes = vec![BrokerId(leader)];
    let mut t = MetadataResponseTopic::default();
    t.name = Some(TopicName(s(name)));
    t.topic_id = if version >= 10 { id } else { Uuid::nil() };
    t.partitions = vec![p];
    t
}

fn metadata_with_three_brokers(version: i16) -> MetadataResponse {
    let mut m = MetadataResponse::default();
    m.brokers = three_metadata_brokers(version);
    if version >= 1 {
        m.controller_id = BrokerId(3);
    }
    if version >= 2 {
        m.cluster_id = Some(s("cluster-x"));
    }
    m.topics = vec![metadata_topic(version, "orders", Uuid::from_u128(0xabc), 3)];
    m
}

fn produce_node(id: i32, host: &str, port: i32) -> ProduceNodeEndpoint {
    let mut n = ProduceNodeEndpoint::default();
    n.node_id = BrokerId(id);
    n.host = s(host);
    n.port = port;
    n.rack = Some(s("r"));
    n
}

fn fetch_node(id: i32, host: &str, port: i32) -> FetchNodeEndpoint {
    let mut n = FetchNodeEndpoint::default();
    n.node_id = BrokerId(id);
    n.host = s(host);
    n.port = port;
    n.rack = Some(s("r"));
    n
}

fn produce_response(version: i16, nodes: Vec<ProduceNodeEndpoint>) -> ProduceResponse {
    let mut p = PartitionProduceResponse::default();
    p.index = 0;
    p.error_code = 6; // NOT_LEADER_OR_FOLLOWER: the case that carries node endpoints
    if version >= 10 {
        p.current_leader.leader_id = BrokerId(2);
        p.current_leader.leader_epoch = 7;
    }
    let mut t = TopicProduceResponse::default();
    if version >= 13 {
        t.topic_id = Uuid::from_u128(42);
    } else {
        t.name = TopicName(s("orders"));
    }
    t.partition_responses = vec![p];
    let mut r = ProduceResponse::default();
    r.responses = vec![t];
    r.node_endpoints = nodes;
    r
}

/// A record batch-ish payload that must come through untouched, including bytes that look like
/// lengths and varints.
fn records_payload() -> Bytes {
    let mut b = BytesMut::new();
    b.put_i64(1234); // base offset
    b.put_i32(0x7fff_ffff); // "batch length"
    for i in 0..200u32 {
        b.put_u8((i * 37 % 256) as u8);
    }
    b.put_slice(&[0x80, 0xff, 0xff, 0xff, 0x0f, 0x00]);
    b.freeze()
}

fn fetch_response(version: i16, nodes: Vec<FetchNodeEndpoint>) -> FetchResponse {
    let mut p = PartitionData::default();
    p.partition_index = 3;
    p.high_watermark = 1000;
    p.last_stable_offset = 990;
    p.log_start_offset = 5;
    p.current_leader.leader_id = BrokerId(1);
    p.current_leader.leader_epoch = 4;
    p.records = Some(records_payload());
    let mut t = FetchableTopicResponse::default();
    if version >= 13 {
        t.topic_id = Uuid::from_u128(43);
    } else {
        t.topic = TopicName(s("orders"));
    }
    t.partitions = vec![p];
    let mut r = FetchResponse::default();
    r.session_id = 77;
    r.responses = vec![t];
    r.node_endpoints = nodes;
    r
}

fn api_version(key: i16, min: i16, max: i16) -> ApiVersion {
    let mut e = ApiVersion::default();
    e.api_key = key;
    e.min_version = min;
    e.max_version = max;
    e
}

fn api_versions_response(entries: Vec<ApiVersion>) -> ApiVersionsResponse {
    let mut r = ApiVersionsResponse::default();
    r.api_keys = entries;
    r
}

fn proptest_config(cases: u32) -> ProptestConfig {
    // No regression files: this suite must not write into the source tree.
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

// ---------------------------------------------------------------------------------------------
// Generators. Each builds a message with only the fields its version carries, and with the
// defaults decoding gives to the others, so that decode(encode(x)) == x exactly.
// ---------------------------------------------------------------------------------------------

fn when<T: Clone + Debug + 'static>(
    cond: bool,
    strategy: impl Strategy<Value = T> + 'static,
    default: T,
) -> BoxedStrategy<T> {
    if cond {
        strategy.boxed()
    } else {
        Just(default).boxed()
    }
}

fn text() -> impl Strategy<Value = StrBytes> {
    "\\PC{0,12}".prop_map(StrBytes::from_string)
}

fn host() -> impl Strategy<Value = StrBytes> {
    "[a-z0-9.-]{0,24}".prop_map(StrBytes::from_string)
}

fn uuid() -> impl Strategy<Value = Uuid> {
    any::<u128>().prop_map(Uuid::from_u128)
}

fn raw_bytes(max: usize) -> impl Strategy<Value = Bytes> {
    vec(any::<u8>(), 0..max).prop_map(Bytes::from)
}

/// Unknown tagged fields, for flexible versions only. Tags start above every known tag.
fn tagged(flexible: bool) -> BoxedStrategy<BTreeMap<i32, Bytes>> {
    when(
        flexible,
        btree_map(10i32..40, raw_bytes(8), 0..3),
        BTreeMap::new(),
    )
}

fn response_header(header_version: i16) -> impl Strategy<Value = ResponseHeader> {
    (any::<i32>(), tagged(header_version >= 1)).prop_map(|(corr, tags)| {
        let mut h = header(corr);
        h.unknown_tagged_fields = tags;
        h
    })
}

/// Node ids for round trips: anything.
fn any_id() -> BoxedStrategy<i32> {
    any::<i32>().boxed()
}

/// Node ids for rewriting: mapped (1, 2), unmapped (0, 3, 4) and "no node" (-1).
fn rewrite_id() -> BoxedStrategy<i32> {
    (-1i32..5).boxed()
}

fn api_versions_strategy(v: i16, error: BoxedStrategy<i16>) -> BoxedStrategy<ApiVersionsResponse> {
    let flexible = v >= 3;
    let entry = (any::<i16>(), any::<i16>(), any::<i16>(), tagged(flexible)).prop_map(
        |(key, min, max, tags)| {
            let mut e = api_version(key, min, max);
            e.unknown_tagged_fields = tags;
            e
        },
    );
    let supported = (text(), any::<i16>(), any::<i16>()).prop_map(|(name, min, max)| {
        let mut f = SupportedFeatureKey::default();
        f.name = name;
        f.min_version = min;
        f.max_version = max;
        f
    });
    let finalized = (text(), any::<i16>(), any::<i16>()).prop_map(|(name, max, min)| {
        let mut f = FinalizedFeatureKey::default();
        f.name = name;
        f.max_version_level = max;
        f.min_version_level = min;
        f
    });
    (
        error,
        vec(entry, 0..8),
        when(v >= 1, any::<i32>(), 0),
        when(flexible, vec(supported, 0..3), Vec::new()),
        when(flexible, any::<i64>(), -1),
        when(flexible, vec(finalized, 0..3), Vec::new()),
        when(flexible, any::<bool>(), false),
        tagged(flexible),
    )
        .prop_map(|(error, keys, throttle, sup, epoch, fin, zk, tags)| {
            let mut r = api_versions_response(keys);
            r.error_code = error;
            r.throttle_time_ms = throttle;
            r.supported_features = sup;
            r.finalized_features_epoch = epoch;
            r.finalized_features = fin;
            r.zk_migration_ready = zk;
            r.unknown_tagged_fields = tags;
            r
        })
        .boxed()
}

fn metadata_strategy(v: i16, ids: BoxedStrategy<i32>) -> BoxedStrategy<MetadataResponse> {
    let flexible = v >= 9;
    let broker = (
        ids.clone(),
        host(),
        any::<i32>(),
        when(v >= 1, option::of(text()), None),
        tagged(flexible),
    )
        .prop_map(|(id, host, port, rack, tags)| {
            let mut b = MetadataResponseBroker::default();
            b.node_id = BrokerId(id);
            b.host = host;
            b.port = port;
            b.rack = rack;
            b.unknown_tagged_fields = tags;
            b
        });
    let node_list = || vec(ids.clone().prop_map(BrokerId), 0..4);
    let partition = (
        any::<i16>(),
        any::<i32>(),
        ids.clone(),
        when(v >= 7, any::<i32>(), -1),
        node_list(),
        node_list(),
        when(v >= 5, node_list(), Vec::new()),
        tagged(flexible),
    )
        .prop_map(
            |(error, index, leader, epoch, replicas, isr, offline, tags)| {
                let mut p = MetadataResponsePartition::default();
                p.error_code = error;
                p.partition_index = index;
                p.leader_id = BrokerId(leader);
                p.leader_epoch = epoch;
                p.replica_nodes = replicas;
                p.isr_nodes = isr;
                p.offline_replicas = offline;
                p.unknown_tagged_fields = tags;
                p
            },
        );
    let name = || text().prop_map(TopicName);
    let topic = (
        any::<i16>(),
        if v >= 12 {
            option::of(name()).boxed()
        } else {
            name().prop_map(Some).boxed() // nullable from v12
        },
        when(v >= 10, uuid(), Uuid::nil()),
        when(v >= 1, any::<bool>(), false),
        vec(partition, 0..3),
        when(v >= 8, any::<i32>(), i32::MIN),
        tagged(flexible),
    )
        .prop_map(|(error, name, id, internal, partitions, ops, tags)| {
            let mut t = MetadataResponseTopic::default();
            t.error_code = error;
            t.name = name;
            t.topic_id = id;
            t.is_internal = internal;
            t.partitions = partitions;
            t.topic_authorized_operations = ops;
            t.unknown_tagged_fields = tags;
            t
        });
    (
        when(v >= 3, any::<i32>(), 0),
        vec(broker, 0..6),
        when(v >= 2, option::of(text()), None),
        when(v >= 1, ids.clone(), -1),
        vec(topic, 0..4),
        when((8..=10).contains(&v), any::<i32>(), i32::MIN),
        when(v >= 13, any::<i16>(), 0),
        tagged(flexible),
    )
        .prop_map(
            |(throttle, brokers, cluster, controller, topics, ops, error, tags)| {
                let mut m = MetadataResponse::default();
                m.throttle_time_ms = throttle;
                m.brokers = brokers;
                m.cluster_id = cluster;
                m.controller_id = BrokerId(controller);
                m.topics = topics;
                m.cluster_authorized_operations = ops;
                m.error_code = error;
                m.unknown_tagged_fields = tags;
                m
            },
        )
        .boxed()
}

fn find_coordinator_strategy(
    v: i16,
    ids: BoxedStrategy<i32>,
) -> BoxedStrategy<FindCoordinatorResponse> {
    let flexible = v >= 3;
    let batched = v >= 4;
    let coordinator = (
        text(),
        ids.clone(),
        host(),
        any::<i32>(),
        any::<i16>(),
        option::of(text()),
        tagged(flexible),
    )
        .prop_map(|(key, id, host, port, error, message, tags)| {
            let mut c = Coordinator::default();
            c.key = key;
            c.node_id = BrokerId(id);
            c.host = host;
            c.port = port;
            c.error_code = error;
            c.error_message = message;
            c.unknown_tagged_fields = tags;
            c
        });
    (
        when(v >= 1, any::<i32>(), 0),
        when(!batched, any::<i16>(), 0),
        when(
            (1..=3).contains(&v),
            option::of(text()),
            Some(StrBytes::default()),
        ),
        when(!batched, ids, 0),
        when(!batched, host(), StrBytes::default()),
        when(!batched, any::<i32>(), 0),
        when(batched, vec(coordinator, 0..4), Vec::new()),
        tagged(flexible),
    )
        .prop_map(
            |(throttle, error, message, id, host, port, coordinators, tags)| {
                let mut r = FindCoordinatorResponse::default();
                r.throttle_time_ms = throttle;
                r.error_code = error;
                r.error_message = message;
                r.node_id = BrokerId(id);
                r.host = host;
                r.port = port;
                r.coordinators = coordinators;
                r.unknown_tagged_fields = tags;
                r
            },
        )
        .boxed()
}

fn describe_cluster_strategy(
    v: i16,
    ids: BoxedStrategy<i32>,
    endpoint_type: BoxedStrategy<i8>,
) -> BoxedStrategy<DescribeClusterResponse> {
    let broker = (
        ids.clone(),
        host(),
        any::<i32>(),
        option::of(text()),
        when(v >= 2, any::<bool>(), false),
        tagged(true),
    )
        .prop_map(|(id, host, port, rack, fenced, tags)| {
            let mut b = DescribeClusterBroker::default();
            b.broker_id = BrokerId(id);
            b.host = host;
            b.port = port;
            b.rack = rack;
            b.is_fenced = fenced;
            b.unknown_tagged_fields = tags;
            b
        });
    (
        any::<i32>(),
        any::<i16>(),
        option::of(text()),
        when(v >= 1, endpoint_type, 1),
        text(),
        ids,
        vec(broker, 0..6),
        any::<i32>(),
        tagged(true),
    )
        .prop_map(
            |(throttle, error, message, etype, cluster, controller, brokers, ops, tags)| {
                let mut r = DescribeClusterResponse::default();
                r.throttle_time_ms = throttle;
                r.error_code = error;
                r.error_message = message;
                r.endpoint_type = etype;
                r.cluster_id = cluster;
                r.controller_id = BrokerId(controller);
                r.brokers = brokers;
                r.cluster_authorized_operations = ops;
                r.unknown_tagged_fields = tags;
                r
            },
        )
        .boxed()
}

/// Produce responses, v10 and later (the versions with node endpoints).
fn produce_strategy(
    v: i16,
    ids: BoxedStrategy<i32>,
    nodes: std::ops::Range<usize>,
) -> BoxedStrategy<ProduceResponse> {
    assert!(v >= 10);
    let record_error = (any::<i32>(), option::of(text()), tagged(true)).prop_map(|(i, m, tags)| {
        let mut e = BatchIndexAndErrorMessage::default();
        e.batch_index = i;
        e.batch_index_error_message = m;
        e.unknown_tagged_fields = tags;
        e
    });
    let leader = (ids.clone(), any::<i32>()).prop_map(|(id, epoch)| {
        let mut l = ProduceLeaderIdAndEpoch::default();
        l.leader_id = BrokerId(id);
        l.leader_epoch = epoch;
        l
    });
    let partition = (
        any::<i32>(),
        any::<i16>(),
        any::<i64>(),
        any::<i64>(),
        any::<i64>(),
        vec(record_error, 0..3),
        option::of(text()),
        leader,
        tagged(true),
    )
        .prop_map(
            |(index, error, base, append, start, errors, message, leader, tags)| {
                let mut p = PartitionProduceResponse::default();
                p.index = index;
                p.error_code = error;
                p.base_offset = base;
                p.log_append_time_ms = append;
                p.log_start_offset = start;
                p.record_errors = errors;
                p.error_message = message;
                p.current_leader = leader;
                p.unknown_tagged_fields = tags;
                p
            },
        );
    let topic = (
        when(v <= 12, text().prop_map(TopicName), TopicName::default()),
        when(v >= 13, uuid(), Uuid::nil()),
        vec(partition, 0..3),
        tagged(true),
    )
        .prop_map(|(name, id, partitions, tags)| {
            let mut t = TopicProduceResponse::default();
            t.name = name;
            t.topic_id = id;
            t.partition_responses = partitions;
            t.unknown_tagged_fields = tags;
            t
        });
    let node = (ids, host(), any::<i32>(), option::of(text()), tagged(true)).prop_map(
        |(id, host, port, rack, tags)| {
            let mut n = ProduceNodeEndpoint::default();
            n.node_id = BrokerId(id);
            n.host = host;
            n.port = port;
            n.rack = rack;
            n.unknown_tagged_fields = tags;
            n
        },
    );
    (
        vec(topic, 0..3),
        any::<i32>(),
        vec(node, nodes),
        tagged(true),
    )
        .prop_map(|(responses, throttle, nodes, tags)| {
            let mut r = ProduceResponse::default();
            r.responses = responses;
            r.throttle_time_ms = throttle;
            r.node_endpoints = nodes;
            r.unknown_tagged_fields = tags;
            r
        })
        .boxed()
}

/// Fetch responses, v16 and later (the versions with node endpoints).
fn fetch_strategy(
    v: i16,
    ids: BoxedStrategy<i32>,
    nodes: std::ops::Range<usize>,
) -> BoxedStrategy<FetchResponse> {
    assert!(v >= 16);
    let diverging = (any::<i32>(), any::<i64>()).prop_map(|(epoch, end)| {
        let mut e = EpochEndOffset::default();
        e.epoch = epoch;
        e.end_offset = end;
        e
    });
    let leader = (ids.clone(), any::<i32>()).prop_map(|(id, epoch)| {
        let mut l = FetchLeaderIdAndEpoch::default();
        l.leader_id = BrokerId(id);
        l.leader_epoch = epoch;
        l
    });
    let snapshot = (any::<i64>(), any::<i32>()).prop_map(|(end, epoch)| {
        let mut s = SnapshotId::default();
        s.end_offset = end;
        s.epoch = epoch;
        s
    });
    let aborted = (any::<i64>(), any::<i64>()).prop_map(|(pid, first)| {
        let mut a = AbortedTransaction::default();
        a.producer_id = pid.into();
        a.first_offset = first;
        a
    });
    let partition = (
        (
            any::<i32>(),
            any::<i16>(),
            any::<i64>(),
            any::<i64>(),
            any::<i64>(),
        ),
        (diverging, leader, snapshot),
        option::of(vec(aborted, 0..3)),
        ids.clone(),
        option::of(raw_bytes(300)),
        tagged(true),
    )
        .prop_map(
            |(
                (index, error, hw, lso, start),
                (div, leader, snap),
                aborted,
                preferred,
                records,
                tags,
            )| {
                let mut p = PartitionData::default();
                p.partition_index = index;
                p.error_code = error;
                p.high_watermark = hw;
                p.last_stable_offset = lso;
                p.log_start_offset = start;
                p.diverging_epoch = div;
                p.current_leader = leader;
                p.snapshot_id = snap;
                p.aborted_transactions = aborted;
                p.preferred_read_replica = BrokerId(preferred);
                p.records = records;
                p.unknown_tagged_fields = tags;
                p
            },
        );
    let topic = (uuid(), vec(partition, 0..3), tagged(true)).prop_map(|(id, partitions, tags)| {
        let mut t = FetchableTopicResponse::default();
        t.topic_id = id; // v13+: topic ids replace names
        t.partitions = partitions;
        t.unknown_tagged_fields = tags;
        t
    });
    let node = (ids, host(), any::<i32>(), option::of(text()), tagged(true)).prop_map(
        |(id, host, port, rack, tags)| {
            let mut n = FetchNodeEndpoint::default();
            n.node_id = BrokerId(id);
            n.host = host;
            n.port = port;
            n.rack = rack;
            n.unknown_tagged_fields = tags;
            n
        },
    );
    (
        any::<i32>(),
        any::<i16>(),
        any::<i32>(),
        vec(topic, 0..3),
        vec(node, nodes),
        tagged(true),
    )
        .prop_map(|(throttle, error, session, responses, nodes, tags)| {
            let mut r = FetchResponse::default();
            r.throttle_time_ms = throttle;
            r.error_code = error;
            r.session_id = session;
            r.responses = responses;
            r.node_endpoints = nodes;
            r.unknown_tagged_fields = tags;
            r
        })
        .boxed()
}

/// A version of `key` (within `range`) together with a response header for it.
fn version_and_header(
    key: ApiKey,
    range: std::ops::RangeInclusive<i16>,
) -> impl Strategy<Value = (i16, ResponseHeader)> {
    range.prop_flat_map(move |v| (Just(v), response_header(key.response_header_version(v))))
}

/// Encode x at v, decode it back: the message and header must be identical, every byte must be
/// consumed, and re-encoding must give the same bytes.
fn assert_round_trip<M>(key: ApiKey, v: i16, h: &ResponseHeader, x: &M) -> Result<(), TestCaseError>
where
    M: Encodable + Decodable + PartialEq + Debug,
{
    let frame = frame_with(key, v, h, x);
    let (h2, y): (ResponseHeader, M) = decode_frame(key, v, &frame);
    prop_assert_eq!(&h2, h);
    prop_assert_eq!(&y, x, "{:?} v{}", key, v);
    prop_assert_eq!(frame_with(key, v, &h2, &y), frame);
    Ok(())
}

/// Any frame that `rewrite_response` decodes, of any (key, version), with mixed node ids.
fn any_rewritten_frame() -> BoxedStrategy<(ApiKey, i16, Bytes)> {
    fn framed<M: Encodable + Debug + 'static>(
        key: ApiKey,
        range: std::ops::RangeInclusive<i16>,
        msg: impl Fn(i16) -> BoxedStrategy<M> + 'static,
    ) -> BoxedStrategy<(ApiKey, i16, Bytes)> {
        version_and_header(key, range)
            .prop_flat_map(move |(v, h)| {
                msg(v).prop_map(move |m| (key, v, frame_with(key, v, &h, &m)))
            })
            .boxed()
    }
    // No error 35 in ApiVersions here: that one is decoded as v0 on purpose.
    let api_error = || {
        any::<i16>()
            .prop_filter("not 35", |e| *e != UNSUPPORTED_VERSION)
            .boxed()
    };
    prop_oneof![
        framed(
            ApiKey::ApiVersions,
            versions(ApiKey::ApiVersions),
            move |v| { api_versions_strategy(v, api_error()) }
        ),
        framed(ApiKey::Metadata, versions(ApiKey::Metadata), |v| {
            metadata_strategy(v, rewrite_id())
        }),
        framed(
            ApiKey::FindCoordinator,
            versions(ApiKey::FindCoordinator),
            |v| { find_coordinator_strategy(v, rewrite_id()) }
        ),
        framed(
            ApiKey::DescribeCluster,
            versions(ApiKey::DescribeCluster),
            |v| { describe_cluster_strategy(v, rewrite_id(), any::<i8>().boxed()) }
        ),
        framed(
            ApiKey::Produce,
            10..=ApiKey::Produce.valid_versions().max,
            |v| { produce_strategy(v, rewrite_id(), 0..4) }
        ),
        framed(
            ApiKey::Fetch,
            16..=ApiKey::Fetch.valid_versions().max,
            |v| { fetch_strategy(v, rewrite_id(), 0..4) }
        ),
    ]
    .boxed()
}

// ---------------------------------------------------------------------------------------------
// 1. Round trips at every rewritten version
// ---------------------------------------------------------------------------------------------

#[test]
fn rewritten_versions_cover_the_expected_ranges() {
    let all = rewritten_versions();
    let of = |key: ApiKey| {
        all.iter()
            .filter(|(k, _)| *k == key)
            .map(|(_, v)| *v)
            .collect::<Vec<_>>()
    };
    assert_eq!(of(ApiKey::ApiVersions), (0..=4).collect::<Vec<_>>());
    assert_eq!(of(ApiKey::Metadata), (0..=13).collect::<Vec<_>>());
    assert_eq!(
        of(ApiKey::FindCoordinator),
        versions(ApiKey::FindCoordinator).collect::<Vec<_>>()
    );
    assert_eq!(
        of(ApiKey::DescribeCluster),
        versions(ApiKey::DescribeCluster).collect::<Vec<_>>()
    );
    assert_eq!(
        of(ApiKey::Produce),
        (10..=ApiKey::Produce.valid_versions().max).collect::<Vec<_>>()
    );
    assert_eq!(
        of(ApiKey::Fetch),
        (16..=ApiKey::Fetch.valid_versions().max).collect::<Vec<_>>()
    );
    assert_eq!(
        of(ApiKey::ShareFetch),
        versions(ApiKey::ShareFetch).collect::<Vec<_>>()
    );
    assert_eq!(
        of(ApiKey::ShareAcknowledge),
        versions(ApiKey::ShareAcknowledge).collect::<Vec<_>>()
    );
}

proptest! {
    #![proptest_config(proptest_config(256))]

    #[test]
    fn api_versions_round_trips_at_every_version(
        (v, h, x) in version_and_header(ApiKey::ApiVersions, versions(ApiKey::ApiVersions))
            .prop_flat_map(|(v, h)| (Just(v), Just(h), api_versions_strategy(v, any::<i16>().boxed())))
    ) {
        assert_round_trip(ApiKey::ApiVersions, v, &h, &x)?;
    }

    #[test]
    fn metadata_round_trips_at_every_version(
        (v, h, x) in version_and_header(ApiKey::Metadata, versions(ApiKey::Metadata))
            .prop_flat_map(|(v, h)| (Just(v), Just(h), metadata_strategy(v, any_id())))
    ) {
        assert_round_trip(ApiKey::Metadata, v, &h, &x)?;
    }

    #[test]
    fn find_coordinator_round_trips_at_every_version(
        (v, h, x) in version_and_header(ApiKey::FindCoordinator, versions(ApiKey::FindCoordinator))
            .prop_flat_map(|(v, h)| (Just(v), Just(h), find_coordinator_strategy(v, any_id())))
    ) {
        assert_round_trip(ApiKey::FindCoordinator, v, &h, &x)?;
    }

    #[test]
    fn describe_cluster_round_trips_at_every_version(
        (v, h, x) in version_and_header(ApiKey::DescribeCluster, versions(ApiKey::DescribeCluster))
            .prop_flat_map(|(v, h)| (Just(v), Just(h), describe_cluster_strategy(v, any_id(), any::<i8>().boxed())))
    ) {
        assert_round_trip(ApiKey::DescribeCluster, v, &h, &x)?;
    }

    #[test]
    fn produce_round_trips_from_v10(
        (v, h, x) in version_and_header(ApiKey::Produce, 10..=ApiKey::Produce.valid_versions().max)
            .prop_flat_map(|(v, h)| (Just(v), Just(h), produce_strategy(v, any_id(), 0..4)))
    ) {
        assert_round_trip(ApiKey::Produce, v, &h, &x)?;
    }

    #[test]
    fn fetch_round_trips_from_v16(
        (v, h, x) in version_and_header(ApiKey::Fetch, 16..=ApiKey::Fetch.valid_versions().max)
            .prop_flat_map(|(v, h)| (Just(v), Just(h), fetch_strategy(v, any_id(), 0..4)))
    ) {
        assert_round_trip(ApiKey::Fetch, v, &h, &x)?;
    }
}

// ---------------------------------------------------------------------------------------------
// 2. Rewriting
// ---------------------------------------------------------------------------------------------

// --- Metadata -------------------------------------------------------------------------------

#[test]
fn metadata_brokers_point_at_gateway_ports() {
    for v in versions(ApiKey::Metadata) {
        let frame = frame_of(ApiKey::Metadata, v, 7, &metadata_with_three_brokers(v));
        let (_, _, m): (_, _, MetadataResponse) = rewrite_and_decode(ApiKey::Metadata, v, &frame);
        let got: Vec<_> = m
            .brokers
            .iter()
            .map(|b| (b.node_id.0, b.host.to_string(), b.port))
            .collect();
        assert_eq!(
            got,
            vec![(1, "gw".to_owned(), 9092), (2, "gw".to_owned(), 9093)],
            "Metadata v{v}"
        );
    }
}

#[test]
fn metadata_broker_racks_survive_rewriting() {
    for v in 1..=ApiKey::Metadata.valid_versions().max {
        let frame = frame_of(ApiKey::Metadata, v, 7, &metadata_with_three_brokers(v));
        let (_, _, m): (_, _, MetadataResponse) = rewrite_and_decode(ApiKey::Metadata, v, &frame);
        let racks: Vec<_> = m
            .brokers
            .iter()
            .map(|b| b.rack.as_ref().map(|r| r.to_string()))
            .collect();
        assert_eq!(
            racks,
            vec![Some("a".to_owned()), Some("b".to_owned())],
            "Metadata v{v}"
        );
    }
}

#[test]
fn metadata_unmapped_broker_is_removed_and_counted() {
    for v in versions(ApiKey::Metadata) {
        let frame = frame_of(ApiKey::Metadata, v, 7, &metadata_with_three_brokers(v));
        let (out, _, m): (_, _, MetadataResponse) = rewrite_and_decode(ApiKey::Metadata, v, &frame);
        assert!(
            m.brokers.iter().all(|b| b.node_id.0 != 3),
            "Metadata v{v}: node 3 kept"
        );
        assert_eq!(out.unmapped, 1, "Metadata v{v}");
    }
}

#[test]
fn metadata_node_ids_in_topics_and_controller_are_unchanged() {
    for v in versions(ApiKey::Metadata) {
        let original = metadata_with_three_brokers(v);
        let frame = frame_of(ApiKey::Metadata, v, 7, &original);
        let (_, _, m): (_, _, MetadataResponse) = rewrite_and_decode(ApiKey::Metadata, v, &frame);
        assert_eq!(m.topics, original.topics, "Metadata v{v}");
        assert_eq!(m.controller_id, original.controller_id, "Metadata v{v}");
    }
}

#[test]
fn metadata_reports_brokers_with_their_real_addresses() {
    for v in versions(ApiKey::Metadata) {
        let frame = frame_of(ApiKey::Metadata, v, 7, &metadata_with_three_brokers(v));
        let out = rewrite(ApiKey::Metadata, v, &frame);
        let real = |node_id, host: &str, port| BrokerEndpoint {
            node_id,
            host: host.to_owned(),
            port,
        };
        assert_eq!(
            out.brokers,
            vec![
                real(1, "kafka-1.internal", 19092),
                real(2, "kafka-2.internal", 19093),
                real(3, "kafka-3.internal", 19094),
            ],
            "Metadata v{v}"
        );
    }
}

#[test]
fn metadata_reports_topics_that_have_ids() {
    for v in versions(ApiKey::Metadata) {
        let mut m = metadata_with_three_brokers(v);
        m.topics.push(metadata_topic(v, "no-id", Uuid::nil(), 1));
        if v >= 12 {
            let mut unnamed = metadata_topic(v, "", Uuid::from_u128(0xdef), 1);
            unnamed.name = None;
            m.topics.push(unnamed);
        }
        let out = rewrite(ApiKey::Metadata, v, &frame_of(ApiKey::Metadata, v, 7, &m));
        let expected = if v >= 10 {
            vec![(Uuid::from_u128(0xabc), "orders".to_owned())]
        } else {
            Vec::new() // topic ids exist from v10
        };
        assert_eq!(out.topics, expected, "Metadata v{v}");
    }
}

#[test]
fn metadata_rewritten_frame_length_prefix_equals_its_length() {
    for v in versions(ApiKey::Metadata) {
        let frame = frame_of(ApiKey::Metadata, v, 7, &metadata_with_three_brokers(v));
        let new = rewrite(ApiKey::Metadata, v, &frame)
            .frame
            .expect("new frame");
        let prefix = i32::from_be_bytes([new[0], new[1], new[2], new[3]]);
        assert_eq!(prefix as usize, new.len() - 4, "Metadata v{v}");
        // And the frame shrank: "gw" is shorter than the real hosts and node 3 is gone.
        assert!(new.len() < frame.len(), "Metadata v{v}");
    }
}

#[test]
fn metadata_rewritten_frame_keeps_the_correlation_id() {
    for v in versions(ApiKey::Metadata) {
        for corr in [0, 1, -1, i32::MAX, i32::MIN, 0x1234_5678] {
            let frame = frame_of(ApiKey::Metadata, v, corr, &metadata_with_three_brokers(v));
            let (_, h, _): (_, _, MetadataResponse) =
                rewrite_and_decode(ApiKey::Metadata, v, &frame);
            assert_eq!(h.correlation_id, corr, "Metadata v{v}");
        }
    }
}

#[test]
fn flexible_response_header_tagged_fields_survive_rewriting() {
    let v = ApiKey::Metadata.valid_versions().max;
    let mut h = header(99);
    h.unknown_tagged_fields
        .insert(17, Bytes::from_static(b"keep"));
    let frame = frame_with(ApiKey::Metadata, v, &h, &metadata_with_three_brokers(v));
    let (_, h2, _): (_, _, MetadataResponse) = rewrite_and_decode(ApiKey::Metadata, v, &frame);
    assert_eq!(h2, h);
}

proptest! {
    #![proptest_config(proptest_config(256))]

    /// Everything but the broker list comes through unchanged; the broker list is the original
    /// one, filtered to mapped nodes and pointed at the gateway.
    #[test]
    fn metadata_rewrite_changes_only_broker_addresses(
        (v, h, x) in version_and_header(ApiKey::Metadata, versions(ApiKey::Metadata))
            .prop_flat_map(|(v, h)| (Just(v), Just(h), metadata_strategy(v, rewrite_id())))
    ) {
        let frame = frame_with(ApiKey::Metadata, v, &h, &x);
        let (out, h2, y): (_, _, MetadataResponse) = rewrite_and_decode(ApiKey::Metadata, v, &frame);
        let mut expected = x.clone();
        expected.brokers.retain(|b| gateway(b.node_id.0).is_some());
        for b in expected.brokers.iter_mut() {
            let (host, port) = gateway(b.node_id.0).unwrap();
            b.host = host;
            b.port = port;
        }
        prop_assert_eq!(h2, h);
        prop_assert_eq!(y, expected.clone());
        prop_assert_eq!(out.unmapped, x.brokers.len() - expected.brokers.len());
        let seen: Vec<_> = x.brokers.iter()
            .map(|b| BrokerEndpoint { node_id: b.node_id.0, host: b.host.to_string(), port: b.port })
            .collect();
        prop_assert_eq!(out.brokers, seen);
        let topics: Vec<_> = x.topics.iter()
            .filter(|t| !t.topic_id.is_nil())
            .filter_map(|t| t.name.as_ref().map(|n| (t.topic_id, n.0.to_string())))
            .collect();
        prop_assert_eq!(out.topics, topics);
    }
}

// --- FindCoordinator ------------------------------------------------------------------------

fn single_coordinator(v: i16, node: i32, error: i16) -> FindCoordinatorResponse {
    let mut r = FindCoordinatorResponse::default();
    r.error_code = error;
    r.node_id = BrokerId(node);
    if node >= 0 {
        r.host = s(&format!("kafka-{node}.internal"));
        r.port = 19090 + node;
    } else {
        r.host = s("");
        r.port = -1;
    }
    if (1..=3).contains(&v) {
        r.error_message = None;
    }
    r
}

fn coordinator(key: &str, node: i32, error: i16) -> Coordinator {
    let mut c = Coordinator::default();
    c.key = s(key);
    c.node_id = BrokerId(node);
    c.error_code = error;
    c.error_message = None;
    if node >= 0 {
        c.host = s(&format!("kafka-{node}.internal"));
        c.port = 19090 + node;
    } else {
        c.host = s("");
        c.port = -1;
    }
    c
}

fn batched_coordinators(coordinators: Vec<Coordinator>) -> FindCoordinatorResponse {
    let mut r = FindCoordinatorResponse::default();
    r.coordinators = coordinators;
    r
}

#[test]
fn find_coordinator_single_form_points_at_gateway() {
    for v in 0..=3 {
        for (node, port) in [(1, 9092), (2, 9093)] {
            let frame = frame_of(
                ApiKey::FindCoordinator,
                v,
                5,
                &single_coordinator(v, node, 0),
            );
            let (out, h, r): (_, _, FindCoordinatorResponse) =
                rewrite_and_decode(ApiKey::FindCoordinator, v, &frame);
            assert_eq!(
                (r.node_id.0, r.host.as_str(), r.port, r.error_code),
                (node, "gw", port, 0),
                "v{v}"
            );
            assert_eq!(out.unmapped, 0);
            assert_eq!(h.correlation_id, 5);
        }
    }
}

#[test]
fn find_coordinator_batched_form_points_at_gateway() {
    for v in 4..=ApiKey::FindCoordinator.valid_versions().max {
        let msg = batched_coordinators(vec![coordinator("g1", 1, 0), coordinator("g2", 2, 0)]);
        let frame = frame_of(ApiKey::FindCoordinator, v, 5, &msg);
        let (out, _, r): (_, _, FindCoordinatorResponse) =
            rewrite_and_decode(ApiKey::FindCoordinator, v, &frame);
        let got: Vec<_> = r
            .coordinators
            .iter()
            .map(|c| {
                (
                    c.key.to_string(),
                    c.node_id.0,
                    c.host.to_string(),
                    c.port,
                    c.error_code,
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("g1".to_owned(), 1, "gw".to_owned(), 9092, 0),
                ("g2".to_owned(), 2, "gw".to_owned(), 9093, 0),
            ],
            "v{v}"
        );
        assert_eq!(out.unmapped, 0);
    }
}

#[test]
fn find_coordinator_unmapped_single_coordinator_becomes_not_available() {
    for v in 0..=3 {
        let frame = frame_of(ApiKey::FindCoordinator, v, 5, &single_coordinator(v, 3, 0));
        let (out, _, r): (_, _, FindCoordinatorResponse) =
            rewrite_and_decode(ApiKey::FindCoordinator, v, &frame);
        assert_eq!(r.error_code, COORDINATOR_NOT_AVAILABLE, "v{v}");
        assert_eq!(r.error_code, 15);
        assert_eq!((r.node_id.0, r.host.as_str(), r.port), (-1, "", -1), "v{v}");
        assert_eq!(out.unmapped, 1);
    }
}

#[test]
fn find_coordinator_unmapped_batched_coordinator_becomes_not_available() {
    for v in 4..=ApiKey::FindCoordinator.valid_versions().max {
        let msg = batched_coordinators(vec![coordinator("g1", 1, 0), coordinator("g3", 3, 0)]);
        let frame = frame_of(ApiKey::FindCoordinator, v, 5, &msg);
        let (out, _, r): (_, _, FindCoordinatorResponse) =
            rewrite_and_decode(ApiKey::FindCoordinator, v, &frame);
        let c = &r.coordinators[1];
        assert_eq!(c.key.as_str(), "g3");
        assert_eq!(c.error_code, 15, "v{v}");
        assert_eq!((c.node_id.0, c.host.as_str(), c.port), (-1, "", -1), "v{v}");
        assert_eq!(r.coordinators[0].host.as_str(), "gw");
        assert_eq!(out.unmapped, 1);
    }
}

#[test]
fn find_coordinator_error_without_a_node_is_left_alone() {
    for v in 0..=3 {
        let mut msg = single_coordinator(v, -1, 15);
        if (1..=3).contains(&v) {
            msg.error_message = Some(s("loading"));
        }
        let frame = frame_of(ApiKey::FindCoordinator, v, 5, &msg);
        let (out, _, r): (_, _, FindCoordinatorResponse) =
            rewrite_and_decode(ApiKey::FindCoordinator, v, &frame);
        assert_eq!(r, msg, "v{v}");
        assert_eq!(out.unmapped, 0);
    }
    for v in 4..=ApiKey::FindCoordinator.valid_versions().max {
        let mut failed = coordinator("g", -1, 15);
        failed.error_message = Some(s("loading"));
        let msg = batched_coordinators(vec![failed]);
        let frame = frame_of(ApiKey::FindCoordinator, v, 5, &msg);
        let (out, _, r): (_, _, FindCoordinatorResponse) =
            rewrite_and_decode(ApiKey::FindCoordinator, v, &frame);
        assert_eq!(r, msg, "v{v}");
        assert_eq!(out.unmapped, 0);
    }
}

proptest! {
    #![proptest_config(proptest_config(256))]

    #[test]
    fn find_coordinator_rewrite_changes_only_coordinator_endpoints(
        (v, h, x) in version_and_header(ApiKey::FindCoordinator, versions(ApiKey::FindCoordinator))
            .prop_flat_map(|(v, h)| (Just(v), Just(h), find_coordinator_strategy(v, rewrite_id())))
    ) {
        let frame = frame_with(ApiKey::FindCoordinator, v, &h, &x);
        let (out, h2, y): (_, _, FindCoordinatorResponse) =
            rewrite_and_decode(ApiKey::FindCoordinator, v, &frame);
        let mut expected = x.clone();
        let mut unmapped = 0;
        let fix = |node: &mut BrokerId, host: &mut StrBytes, port: &mut i32, error: &mut i16, unmapped: &mut usize| {
            if node.0 < 0 {
                return;
            }
            match gateway(node.0) {
                Some((h, p)) => {
                    *host = h;
                    *port = p;
                }
                None => {
                    *unmapped += 1;
                    *error = 15;
                    *node = BrokerId(-1);
                    *host = StrBytes::default();
                    *port = -1;
                }
            }
        };
        if v < 4 {
            fix(&mut expected.node_id, &mut expected.host, &mut expected.port, &mut expected.error_code, &mut unmapped);
        } else {
            for c in expected.coordinators.iter_mut() {
                fix(&mut c.node_id, &mut c.host, &mut c.port, &mut c.error_code, &mut unmapped);
            }
        }
        prop_assert_eq!(h2, h);
        prop_assert_eq!(y, expected);
        prop_assert_eq!(out.unmapped, unmapped);
    }
}

// --- DescribeCluster ------------------------------------------------------------------------

fn describe_cluster(endpoint_type: i8) -> DescribeClusterResponse {
    let broker = |id: i32| {
        let mut b = DescribeClusterBroker::default();
        b.broker_id = BrokerId(id);
        b.host = s(&format!("kafka-{id}.internal"));
        b.port = 19090 + id;
        b.rack = Some(s("r"));
        b
    };
    let mut r = DescribeClusterResponse::default();
    r.endpoint_type = endpoint_type;
    r.cluster_id = s("cluster-x");
    r.controller_id = BrokerId(3);
    r.brokers = vec![broker(1), broker(2), broker(3)];
    r
}

#[test]
fn describe_cluster_brokers_point_at_gateway_ports() {
    for v in versions(ApiKey::DescribeCluster) {
        let frame = frame_of(ApiKey::DescribeCluster, v, 9, &describe_cluster(1));
        let (_, h, r): (_, _, DescribeClusterResponse) =
            rewrite_and_decode(ApiKey::DescribeCluster, v, &frame);
        let got: Vec<_> = r
            .brokers
            .iter()
            .map(|b| (b.broker_id.0, b.host.to_string(), b.port))
            .collect();
        assert_eq!(
            got,
            vec![(1, "gw".to_owned(), 9092), (2, "gw".to_owned(), 9093)],
            "v{v}"
        );
        assert_eq!(h.correlation_id, 9);
        assert_eq!(r.controller_id, BrokerId(3));
    }
}

#[test]
fn describe_cluster_unmapped_broker_is_removed_and_counted() {
    for v in versions(ApiKey::DescribeCluster) {
        let frame = frame_of(ApiKey::DescribeCluster, v, 9, &describe_cluster(1));
        let (out, _, r): (_, _, DescribeClusterResponse) =
            rewrite_and_decode(ApiKey::DescribeCluster, v, &frame);
        assert!(r.brokers.iter().all(|b| b.broker_id.0 != 3), "v{v}");
        assert_eq!(out.unmapped, 1, "v{v}");
    }
}

#[test]
fn describe_cluster_controller_endpoints_are_left_unchanged() {
    for v in 1..=ApiKey::DescribeCluster.valid_versions().max {
        let msg = describe_cluster(2);
        let frame = frame_of(ApiKey::DescribeCluster, v, 9, &msg);
        let (out, _, r): (_, _, DescribeClusterResponse) =
            rewrite_and_decode(ApiKey::DescribeCluster, v, &frame);
        assert_eq!(r, msg, "v{v}");
        assert_eq!(out.unmapped, 0);
    }
}

proptest! {
    #![proptest_config(proptest_config(256))]

    #[test]
    fn describe_cluster_rewrite_changes_only_broker_endpoints(
        (v, h, x) in version_and_header(ApiKey::DescribeCluster, versions(ApiKey::DescribeCluster))
            .prop_flat_map(|(v, h)| (Just(v), Just(h), describe_cluster_strategy(v, rewrite_id(), (0i8..4).boxed())))
    ) {
        let frame = frame_with(ApiKey::DescribeCluster, v, &h, &x);
        let (out, h2, y): (_, _, DescribeClusterResponse) =
            rewrite_and_decode(ApiKey::DescribeCluster, v, &frame);
        let mut expected = x.clone();
        if x.endpoint_type == 1 {
            expected.brokers.retain(|b| gateway(b.broker_id.0).is_some());
            for b in expected.brokers.iter_mut() {
                let (host, port) = gateway(b.broker_id.0).unwrap();
                b.host = host;
                b.port = port;
            }
        }
        prop_assert_eq!(h2, h);
        prop_assert_eq!(y, expected.clone());
        prop_assert_eq!(out.unmapped, x.brokers.len() - expected.brokers.len());
    }
}

// --- Produce --------------------------------------------------------------------------------

fn produce_versions_with_endpoints() -> std::ops::RangeInclusive<i16> {
    10..=ApiKey::Produce.valid_versions().max
}

fn fetch_versions_with_endpoints() -> std::ops::RangeInclusive<i16> {
    16..=ApiKey::Fetch.valid_versions().max
}

#[test]
fn produce_node_endpoints_point_at_gateway_ports() {
    for v in produce_versions_with_endpoints() {
        let nodes = vec![
            produce_node(1, "kafka-1", 1),
            produce_node(2, "kafka-2", 2),
            produce_node(3, "kafka-3", 3),
        ];
        let original = produce_response(v, nodes);
        let frame = frame_of(ApiKey::Produce, v, 11, &original);
        let (out, h, r): (_, _, ProduceResponse) = rewrite_and_decode(ApiKey::Produce, v, &frame);
        let got: Vec<_> = r
            .node_endpoints
            .iter()
            .map(|n| (n.node_id.0, n.host.to_string(), n.port))
            .collect();
        assert_eq!(
            got,
            vec![(1, "gw".to_owned(), 9092), (2, "gw".to_owned(), 9093)],
            "v{v}"
        );
        assert_eq!(out.unmapped, 1, "v{v}");
        assert_eq!(h.correlation_id, 11);
        assert_eq!(r.responses, original.responses, "v{v}");
    }
}

#[test]
fn produce_without_node_endpoints_is_forwarded_as_is() {
    for v in produce_versions_with_endpoints() {
        let frame = frame_of(ApiKey::Produce, v, 11, &produce_response(v, Vec::new()));
        let out = rewrite(ApiKey::Produce, v, &frame);
        assert!(out.frame.is_none(), "v{v}");
        assert_eq!(out.unmapped, 0);
    }
}

#[test]
fn produce_before_v10_is_forwarded_without_decoding() {
    for v in ApiKey::Produce.valid_versions().min..10 {
        assert!(!needs_rewrite(ApiKey::Produce, v));
        let frame = frame_of(ApiKey::Produce, v, 11, &produce_response(v, Vec::new()));
        let out = rewrite(ApiKey::Produce, v, &frame);
        assert!(out.frame.is_none(), "v{v}");
        // Not even parsed: garbage is fine too.
        let garbage = Bytes::from_static(&[0, 0, 0, 3, 1, 2, 3]);
        assert!(
            rewrite(ApiKey::Produce, v, &garbage).frame.is_none(),
            "v{v}"
        );
    }
}

// --- Fetch ----------------------------------------------------------------------------------

#[test]
fn fetch_node_endpoints_point_at_gateway_ports() {
    for v in fetch_versions_with_endpoints() {
        let nodes = vec![
            fetch_node(3, "kafka-3", 3),
            fetch_node(1, "kafka-1", 1),
            fetch_node(2, "kafka-2", 2),
        ];
        let frame = frame_of(ApiKey::Fetch, v, 13, &fetch_response(v, nodes));
        let (out, h, r): (_, _, FetchResponse) = rewrite_and_decode(ApiKey::Fetch, v, &frame);
        let got: Vec<_> = r
            .node_endpoints
            .iter()
            .map(|n| (n.node_id.0, n.host.to_string(), n.port))
            .collect();
        assert_eq!(
            got,
            vec![(1, "gw".to_owned(), 9092), (2, "gw".to_owned(), 9093)],
            "v{v}"
        );
        assert_eq!(out.unmapped, 1, "v{v}");
        assert_eq!(h.correlation_id, 13);
    }
}

#[test]
fn fetch_records_bytes_are_preserved_exactly() {
    for v in fetch_versions_with_endpoints() {
        let original = fetch_response(v, vec![fetch_node(1, "kafka-1", 1)]);
        let frame = frame_of(ApiKey::Fetch, v, 13, &original);
        let (_, _, r): (_, _, FetchResponse) = rewrite_and_decode(ApiKey::Fetch, v, &frame);
        assert_eq!(r.responses, original.responses, "v{v}");
        assert_eq!(
            r.responses[0].partitions[0].records.as_deref(),
            Some(&records_payload()[..])
        );
    }
}

#[test]
fn fetch_without_node_endpoints_is_forwarded_as_is() {
    for v in fetch_versions_with_endpoints() {
        let frame = frame_of(ApiKey::Fetch, v, 13, &fetch_response(v, Vec::new()));
        let out = rewrite(ApiKey::Fetch, v, &frame);
        assert!(out.frame.is_none(), "v{v}");
        assert_eq!(out.unmapped, 0);
    }
}

#[test]
fn fetch_before_v16_is_forwarded_without_decoding() {
    for v in ApiKey::Fetch.valid_versions().min..16 {
        assert!(!needs_rewrite(ApiKey::Fetch, v));
        let frame = frame_of(ApiKey::Fetch, v, 13, &FetchResponse::default());
        let out = rewrite(ApiKey::Fetch, v, &frame);
        assert!(out.frame.is_none(), "v{v}");
        let garbage = Bytes::from_static(&[0, 0, 0, 3, 1, 2, 3]);
        assert!(rewrite(ApiKey::Fetch, v, &garbage).frame.is_none(), "v{v}");
    }
}

// --- ShareFetch / ShareAcknowledge (KIP-932; review F7 b, F3) -------------------------------

fn share_fetch_with_nodes(nodes: &[(i32, &str, i32)]) -> ShareFetchResponse {
    let mut p = kafka_protocol::messages::share_fetch_response::PartitionData::default();
    p.partition_index = 0;
    p.records = Some(records_payload());
    p.current_leader.leader_id = 2;
    p.current_leader.leader_epoch = 4;
    let mut t =
        kafka_protocol::messages::share_fetch_response::ShareFetchableTopicResponse::default();
    t.topic_id = Uuid::from_u128(7);
    t.partitions = vec![p];
    let mut r = ShareFetchResponse::default();
    r.acquisition_lock_timeout_ms = 30_000;
    r.responses = vec![t];
    r.node_endpoints = nodes
        .iter()
        .map(|(id, host, port)| {
            let mut n = kafka_protocol::messages::share_fetch_response::NodeEndpoint::default();
            n.node_id = BrokerId(*id);
            n.host = s(host);
            n.port = *port;
            n
        })
        .collect();
    r
}

fn share_acknowledge_with_nodes(nodes: &[(i32, &str, i32)]) -> ShareAcknowledgeResponse {
    let mut p = kafka_protocol::messages::share_acknowledge_response::PartitionData::default();
    p.partition_index = 0;
    p.error_code = 6; // NOT_LEADER_OR_FOLLOWER, with the current leader
    p.current_leader.leader_id = 2;
    p.current_leader.leader_epoch = 4;
    let mut t =
        kafka_protocol::messages::share_acknowledge_response::ShareAcknowledgeTopicResponse::default();
    t.topic_id = Uuid::from_u128(7);
    t.partitions = vec![p];
    let mut r = ShareAcknowledgeResponse::default();
    r.responses = vec![t];
    r.node_endpoints = nodes
        .iter()
        .map(|(id, host, port)| {
            let mut n =
                kafka_protocol::messages::share_acknowledge_response::NodeEndpoint::default();
            n.node_id = BrokerId(*id);
            n.host = s(host);
            n.port = *port;
            n
        })
        .collect();
    r
}

const KAFKA_NODES: [(i32, &str, i32); 3] =
    [(1, "kafka-1", 1), (2, "kafka-2", 2), (3, "kafka-3", 3)];

#[test]
fn share_fetch_node_endpoints_point_at_gateway_ports() {
    for v in versions(ApiKey::ShareFetch) {
        let original = share_fetch_with_nodes(&KAFKA_NODES);
        let frame = frame_of(ApiKey::ShareFetch, v, 21, &original);
        let (out, h, r): (_, _, ShareFetchResponse) =
            rewrite_and_decode(ApiKey::ShareFetch, v, &frame);
        let got: Vec<_> = r
            .node_endpoints
            .iter()
            .map(|n| (n.node_id.0, n.host.to_string(), n.port))
            .collect();
        assert_eq!(
            got,
            vec![(1, "gw".to_owned(), 9092), (2, "gw".to_owned(), 9093)],
            "v{v}: a broker address reached the client"
        );
        assert_eq!(out.unmapped, 1, "v{v}");
        assert_eq!(h.correlation_id, 21);
        // Records and everything else are kept exactly.
        assert_eq!(r.responses, original.responses, "v{v}");
    }
}

#[test]
fn share_acknowledge_node_endpoints_point_at_gateway_ports() {
    for v in versions(ApiKey::ShareAcknowledge) {
        let original = share_acknowledge_with_nodes(&KAFKA_NODES);
        let frame = frame_of(ApiKey::ShareAcknowledge, v, 22, &original);
        let (out, h, r): (_, _, ShareAcknowledgeResponse) =
            rewrite_and_decode(ApiKey::ShareAcknowledge, v, &frame);
        let got: Vec<_> = r
            .node_endpoints
            .iter()
            .map(|n| (n.node_id.0, n.host.to_string(), n.port))
            .collect();
        assert_eq!(
            got,
            vec![(1, "gw".to_owned(), 9092), (2, "gw".to_owned(), 9093)],
            "v{v}: a broker address reached the client"
        );
        assert_eq!(out.unmapped, 1, "v{v}");
        assert_eq!(h.correlation_id, 22);
        assert_eq!(r.responses, original.responses, "v{v}");
    }
}

#[test]
fn share_responses_without_node_endpoints_are_forwarded_as_is() {
    for v in versions(ApiKey::ShareFetch) {
        let frame = frame_of(ApiKey::ShareFetch, v, 21, &share_fetch_with_nodes(&[]));
        assert!(
            rewrite(ApiKey::ShareFetch, v, &frame).frame.is_none(),
            "v{v}"
        );
    }
    for v in versions(ApiKey::ShareAcknowledge) {
        let frame = frame_of(
            ApiKey::ShareAcknowledge,
            v,
            22,
            &share_acknowledge_with_nodes(&[]),
        );
        assert!(
            rewrite(ApiKey::ShareAcknowledge, v, &frame).frame.is_none(),
            "v{v}"
        );
    }
}

proptest! {
    #![proptest_config(proptest_config(128))]

    #[test]
    fn produce_rewrite_changes_only_node_endpoints(
        (v, h, x) in version_and_header(ApiKey::Produce, produce_versions_with_endpoints())
            .prop_flat_map(|(v, h)| (Just(v), Just(h), produce_strategy(v, rewrite_id(), 1..5)))
    ) {
        let frame = frame_with(ApiKey::Produce, v, &h, &x);
        let (out, h2, y): (_, _, ProduceResponse) = rewrite_and_decode(ApiKey::Produce, v, &frame);
        let mut expected = x.clone();
        expected.node_endpoints.retain(|n| gateway(n.node_id.0).is_some());
        for n in expected.node_endpoints.iter_mut() {
            let (host, port) = gateway(n.node_id.0).unwrap();
            n.host = host;
            n.port = port;
        }
        prop_assert_eq!(h2, h);
        prop_assert_eq!(y, expected.clone());
        prop_assert_eq!(out.unmapped, x.node_endpoints.len() - expected.node_endpoints.len());
    }

    #[test]
    fn fetch_rewrite_changes_only_node_endpoints(
        (v, h, x) in version_and_header(ApiKey::Fetch, fetch_versions_with_endpoints())
            .prop_flat_map(|(v, h)| (Just(v), Just(h), fetch_strategy(v, rewrite_id(), 1..5)))
    ) {
        let frame = frame_with(ApiKey::Fetch, v, &h, &x);
        let (out, h2, y): (_, _, FetchResponse) = rewrite_and_decode(ApiKey::Fetch, v, &frame);
        let mut expected = x.clone();
        expected.node_endpoints.retain(|n| gateway(n.node_id.0).is_some());
        for n in expected.node_endpoints.iter_mut() {
            let (host, port) = gateway(n.node_id.0).unwrap();
            n.host = host;
            n.port = port;
        }
        prop_assert_eq!(h2, h);
        prop_assert_eq!(y, expected.clone());
        prop_assert_eq!(out.unmapped, x.node_endpoints.len() - expected.node_endpoints.len());
    }
}

// --- ApiVersions ----------------------------------------------------------------------------

fn rewritten_api_versions(v: i16, entries: Vec<ApiVersion>) -> Vec<ApiVersion> {
    let frame = frame_of(ApiKey::ApiVersions, v, 3, &api_versions_response(entries));
    let (_, _, r): (_, _, ApiVersionsResponse) = rewrite_and_decode(ApiKey::ApiVersions, v, &frame);
    r.api_keys
}

#[test]
fn api_versions_unknown_api_key_is_dropped() {
    for v in versions(ApiKey::ApiVersions) {
        let keys = rewritten_api_versions(
            v,
            vec![
                api_version(3, 0, 12),
                api_version(30000, 0, 1),
                api_version(-1, 0, 0),
            ],
        );
        assert_eq!(
            keys.iter().map(|e| e.api_key).collect::<Vec<_>>(),
            vec![3],
            "v{v}"
        );
    }
}

#[test]
fn api_versions_metadata_max_is_capped_to_crate_max() {
    let max = ApiKey::Metadata.valid_versions().max;
    for v in versions(ApiKey::ApiVersions) {
        let keys =
            rewritten_api_versions(v, vec![api_version(ApiKey::Metadata as i16, 0, max + 7)]);
        assert_eq!((keys[0].min_version, keys[0].max_version), (0, max), "v{v}");
    }
}

#[test]
fn api_versions_sasl_handshake_min_is_raised_to_1() {
    for v in versions(ApiKey::ApiVersions) {
        let keys = rewritten_api_versions(v, vec![api_version(ApiKey::SaslHandshake as i16, 0, 1)]);
        assert_eq!((keys[0].min_version, keys[0].max_version), (1, 1), "v{v}");
    }
}

#[test]
fn api_versions_raw_forwarded_api_is_left_alone() {
    for v in versions(ApiKey::ApiVersions) {
        let keys = rewritten_api_versions(v, vec![api_version(ApiKey::JoinGroup as i16, 0, 42)]);
        assert_eq!((keys[0].min_version, keys[0].max_version), (0, 42), "v{v}");
    }
}

#[test]
fn api_versions_unsupported_version_error_is_decoded_and_reencoded_as_v0() {
    let entries = vec![
        api_version(ApiKey::ApiVersions as i16, 0, 3),
        api_version(ApiKey::Metadata as i16, 0, 99),
        api_version(30000, 0, 1),
    ];
    let mut body = api_versions_response(entries);
    body.error_code = UNSUPPORTED_VERSION;
    for request_version in versions(ApiKey::ApiVersions) {
        // The broker answers with a v0 body under a v0 header, whatever the request version.
        assert_eq!(
            ApiKey::ApiVersions.response_header_version(request_version),
            0
        );
        let frame = frame_at(&header(21), 0, &body, 0);
        let out = rewrite(ApiKey::ApiVersions, request_version, &frame);
        let new = out.frame.expect("new frame");
        let (h, r): (_, ApiVersionsResponse) = decode_at(&new, 0, 0);
        assert_eq!(h.correlation_id, 21);
        assert_eq!(r.error_code, UNSUPPORTED_VERSION);
        let mut expected = api_versions_response(vec![
            api_version(ApiKey::ApiVersions as i16, 0, 3),
            api_version(
                ApiKey::Metadata as i16,
                0,
                ApiKey::Metadata.valid_versions().max,
            ),
        ]);
        expected.error_code = UNSUPPORTED_VERSION;
        assert_eq!(r, expected, "request v{request_version}");
        assert_eq!(
            new,
            frame_at(&header(21), 0, &expected, 0),
            "request v{request_version}"
        );
    }
}

#[test]
fn api_versions_response_header_has_no_tagged_fields_at_any_version() {
    for v in versions(ApiKey::ApiVersions) {
        let frame = frame_of(
            ApiKey::ApiVersions,
            v,
            0x0102_0304,
            &api_versions_response(vec![api_version(3, 0, 12)]),
        );
        let new = rewrite(ApiKey::ApiVersions, v, &frame)
            .frame
            .expect("new frame");
        // correlation id, then directly the error code (no tagged-field byte in between)
        assert_eq!(&new[4..10], &[1, 2, 3, 4, 0, 0], "v{v}");
        assert_eq!(new, frame, "v{v}: nothing to cap, so the same bytes");
    }
}

proptest! {
    #![proptest_config(proptest_config(256))]

    #[test]
    fn api_versions_rewrite_changes_only_version_ranges(
        (v, h, x) in version_and_header(ApiKey::ApiVersions, versions(ApiKey::ApiVersions))
            .prop_flat_map(|(v, h)| {
                let error = any::<i16>().prop_filter("not 35", |e| *e != UNSUPPORTED_VERSION).boxed();
                (Just(v), Just(h), api_versions_strategy(v, error))
            })
    ) {
        let frame = frame_with(ApiKey::ApiVersions, v, &h, &x);
        let (_, h2, y): (_, _, ApiVersionsResponse) = rewrite_and_decode(ApiKey::ApiVersions, v, &frame);
        let mut expected = x.clone();
        crate::protocol::versions::cap_api_versions(&mut expected.api_keys);
        prop_assert_eq!(h2, h);
        prop_assert_eq!(&y, &expected);
        for e in &y.api_keys {
            let key = ApiKey::try_from(e.api_key);
            prop_assert!(key.is_ok(), "unknown key {} kept", e.api_key);
            prop_assert!(e.min_version <= e.max_version);
            if crate::protocol::versions::is_decoded(key.unwrap()) {
                let r = key.unwrap().valid_versions();
                prop_assert!(e.min_version >= r.min && e.max_version <= r.max);
            }
        }
    }
}

// --- Other APIs -----------------------------------------------------------------------------

#[test]
fn other_apis_are_forwarded_without_decoding() {
    let garbage = Bytes::from_static(&[0, 0, 0, 5, 9, 9, 9, 9, 9]);
    for key in [
        ApiKey::JoinGroup,
        ApiKey::ListOffsets,
        ApiKey::SaslHandshake,
        ApiKey::OffsetCommit,
    ] {
        for v in versions(key) {
            assert!(!needs_rewrite(key, v));
            let out = rewrite(key, v, &garbage);
            assert!(
                out.frame.is_none() && out.brokers.is_empty() && out.unmapped == 0,
                "{key:?} v{v}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 3. Malformed input
// ---------------------------------------------------------------------------------------------

#[test]
fn frames_too_short_for_a_header_are_errors() {
    for (key, v) in rewritten_versions() {
        for len in 0..8 {
            let frame = Bytes::from(vec![0u8; len]);
            assert!(
                rewrite_response(key, v, &frame, &TestMap).is_err(),
                "{key:?} v{v}, {len} bytes"
            );
        }
    }
}

#[test]
fn truncated_frames_of_every_rewritten_version_are_errors() {
    for (key, v) in rewritten_versions() {
        let frame = match key {
            ApiKey::ApiVersions => frame_of(
                key,
                v,
                1,
                &api_versions_response(vec![api_version(3, 0, 12)]),
            ),
            ApiKey::Metadata => frame_of(key, v, 1, &metadata_with_three_brokers(v)),
            ApiKey::FindCoordinator if v < 4 => frame_of(key, v, 1, &single_coordinator(v, 1, 0)),
            ApiKey::FindCoordinator => frame_of(
                key,
                v,
                1,
                &batched_coordinators(vec![coordinator("g", 1, 0)]),
            ),
            ApiKey::DescribeCluster => frame_of(key, v, 1, &describe_cluster(1)),
            ApiKey::Produce => frame_of(
                key,
                v,
                1,
                &produce_response(v, vec![produce_node(1, "k", 1)]),
            ),
            ApiKey::Fetch => frame_of(key, v, 1, &fetch_response(v, vec![fetch_node(1, "k", 1)])),
            ApiKey::ShareFetch => frame_of(key, v, 1, &share_fetch_with_nodes(&[(1, "k", 1)])),
            ApiKey::ShareAcknowledge => {
                frame_of(key, v, 1, &share_acknowledge_with_nodes(&[(1, "k", 1)]))
            }
            _ => unreachable!(),
        };
        assert!(
            rewrite_response(key, v, &frame, &TestMap).is_ok(),
            "{key:?} v{v} whole frame"
        );
        for cut in 4..frame.len() {
            let truncated = crate::protocol::frame::frame_from_body(&frame[4..cut]);
            assert!(
                rewrite_response(key, v, &truncated, &TestMap).is_err(),
                "{key:?} v{v}: body cut to {} of {} bytes was accepted",
                cut - 4,
                frame.len() - 4
            );
        }
    }
}

proptest! {
    #![proptest_config(proptest_config(256))]

    #[test]
    fn truncated_generated_frames_are_errors(
        ((key, v, frame), keep) in any_rewritten_frame().prop_flat_map(|f| {
            let body = f.2.len() - 4;
            (Just(f), 0..body)
        })
    ) {
        let truncated = crate::protocol::frame::frame_from_body(&frame[4..4 + keep]);
        prop_assert!(
            rewrite_response(key, v, &truncated, &TestMap).is_err(),
            "{:?} v{}: body cut to {} of {} bytes was accepted", key, v, keep, frame.len() - 4
        );
    }
}

/// Run `body` in a child process (this test binary, this one test) so that an abort there — an
/// allocation failure is not a panic and cannot be caught — fails this test instead of killing
/// the whole test run.
fn in_child_process(test_name: &str, body: impl FnOnce()) {
    const VAR: &str = "MIRRORGATE_REWRITE_TEST_CHILD";
    if std::env::var(VAR).as_deref() == Ok(test_name) {
        body();
        return;
    }
    let full = format!(
        "{}::{}",
        module_path!()
            .split_once("::")
            .map_or(module_path!(), |(_, rest)| rest),
        test_name
    );
    let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args([full.as_str(), "--exact", "--nocapture", "--test-threads=1"])
        .env(VAR, test_name)
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("run child test");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stdout.contains("1 passed") || !out.status.success(),
        "the child process did not run {full}:\n{stdout}"
    );
    // What the child said (e.g. "memory allocation of N bytes failed", or a panic message).
    let said: Vec<&str> = stdout
        .lines()
        .chain(stderr.lines())
        .filter(|l| !l.trim().is_empty() && !l.starts_with("running ") && !l.starts_with("note:"))
        .take(20)
        .collect();
    assert!(
        out.status.success(),
        "{full} died in a child process ({}):\n{}",
        out.status,
        said.join("\n")
    );
}

#[test]
fn random_bytes_after_a_valid_header_never_panic() {
    in_child_process("random_bytes_after_a_valid_header_never_panic", || {
        let pairs = rewritten_versions();
        let strategy = (0..pairs.len(), any::<i32>(), vec(any::<u8>(), 0..96));
        let mut runner = TestRunner::new(proptest_config(4096));
        runner
            .run(&strategy, |(i, corr, tail)| {
                let (key, v) = pairs[i];
                let mut body = BytesMut::new();
                header(corr)
                    .encode(&mut body, key.response_header_version(v))
                    .unwrap();
                body.extend_from_slice(&tail);
                let frame = crate::protocol::frame::frame_from_body(&body);
                let _ = rewrite_response(key, v, &frame, &TestMap);
                Ok(())
            })
            .unwrap();
    });
}

#[test]
fn huge_array_count_is_an_error_not_an_abort() {
    in_child_process("huge_array_count_is_an_error_not_an_abort", || {
        // Metadata v0: correlation id, then a broker array claiming i32::MAX entries, then nothing.
        let frame = crate::protocol::frame::frame_from_body(&[0, 0, 0, 1, 0x7f, 0xff, 0xff, 0xff]);
        assert!(rewrite_response(ApiKey::Metadata, 0, &frame, &TestMap).is_err());
    });
}

// ---------------------------------------------------------------------------------------------
// A forward listener's virtual cluster
// ---------------------------------------------------------------------------------------------

/// [`TestMap`]'s ports, presenting the virtual cluster `fwd-cluster`, on a forward listener's
/// source side or its `destination` side (where Produce leader hints keep their epochs).
struct ForwardMap {
    destination: bool,
}

impl AddressMap for ForwardMap {
    fn endpoint(&self, node_id: i32) -> Option<(StrBytes, i32)> {
        TestMap.endpoint(node_id)
    }
    fn virtual_cluster(&self) -> Option<StrBytes> {
        Some(s("fwd-cluster"))
    }
    fn produce_hint_epochs(&self) -> bool {
        self.destination
    }
}

const FORWARD_DESTINATION: ForwardMap = ForwardMap { destination: true };

fn rewrite_forward<M: Decodable>(key: ApiKey, version: i16, frame: &Bytes) -> M {
    rewrite_with::<M>(&ForwardMap { destination: false }, key, version, frame)
}

fn rewrite_with<M: Decodable>(map: &dyn AddressMap, key: ApiKey, version: i16, frame: &Bytes) -> M {
    let out = rewrite_response(key, version, frame, map)
        .unwrap_or_else(|e| panic!("rewrite of {key:?} v{version} failed: {e}"));
    let new = out
        .frame
        .unwrap_or_else(|| panic!("{key:?} v{version}: no new frame"));
    decode_frame::<M>(key, version, &new).1
}

fn metadata_with_leader_epochs(version: i16) -> MetadataResponse {
    let mut m = metadata_with_three_brokers(version);
    for t in m.topics.iter_mut() {
        for p in t.partitions.iter_mut() {
            if version >= 7 {
                p.leader_epoch = 9;
            }
        }
    }
    m
}

#[test]
fn metadata_of_a_virtual_cluster_carries_its_cluster_id_and_no_leader_epochs() {
    for v in versions(ApiKey::Metadata) {
        let frame = frame_of(ApiKey::Metadata, v, 1, &metadata_with_leader_epochs(v));
        let m: MetadataResponse = rewrite_forward(ApiKey::Metadata, v, &frame);
        if v >= 2 {
            assert_eq!(m.cluster_id, Some(s("fwd-cluster")), "v{v}");
        }
        let epochs: Vec<i32> = m
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| p.leader_epoch))
            .collect();
        assert!(epochs.iter().all(|e| *e == -1), "v{v}: {epochs:?}");
        assert_eq!(
            gateway(1),
            Some((m.brokers[0].host.clone(), m.brokers[0].port))
        );
    }
}

#[test]
fn metadata_through_an_ordinary_listener_keeps_the_cluster_id_and_leader_epochs() {
    for v in versions(ApiKey::Metadata).filter(|v| *v >= 7) {
        let frame = frame_of(ApiKey::Metadata, v, 1, &metadata_with_leader_epochs(v));
        let (_, _, m): (_, _, MetadataResponse) = rewrite_and_decode(ApiKey::Metadata, v, &frame);
        assert_eq!(m.cluster_id, Some(s("cluster-x")), "v{v}");
        assert_eq!(m.topics[0].partitions[0].leader_epoch, 9, "v{v}");
    }
}

#[test]
fn describe_cluster_of_a_virtual_cluster_carries_its_cluster_id() {
    for v in versions(ApiKey::DescribeCluster) {
        let mut d = DescribeClusterResponse::default();
        d.cluster_id = s("cluster-x");
        d.endpoint_type = 1;
        let frame = frame_of(ApiKey::DescribeCluster, v, 1, &d);
        let d: DescribeClusterResponse = rewrite_forward(ApiKey::DescribeCluster, v, &frame);
        assert_eq!(d.cluster_id, s("fwd-cluster"), "v{v}");
    }
}

#[test]
fn produce_and_fetch_leader_hints_of_a_virtual_cluster_carry_no_leader_epoch() {
    for v in versions(ApiKey::Produce).filter(|v| *v >= 10) {
        let frame = frame_of(
            ApiKey::Produce,
            v,
            1,
            &produce_response(v, vec![produce_node(2, "kafka-2.internal", 19093)]),
        );
        let r: ProduceResponse = rewrite_forward(ApiKey::Produce, v, &frame);
        let p = &r.responses[0].partition_responses[0];
        assert_eq!(p.current_leader.leader_epoch, -1, "produce v{v}");
        assert_eq!(
            p.current_leader.leader_id,
            BrokerId(2),
            "produce v{v}: the leader stays"
        );
    }
    for v in versions(ApiKey::Fetch).filter(|v| *v >= 16) {
        let frame = frame_of(
            ApiKey::Fetch,
            v,
            1,
            &fetch_response(v, vec![fetch_node(1, "kafka-1.internal", 19092)]),
        );
        let r: FetchResponse = rewrite_forward(ApiKey::Fetch, v, &frame);
        let p = &r.responses[0].partitions[0];
        assert_eq!(p.current_leader.leader_epoch, -1, "fetch v{v}");
        assert_eq!(
            p.records,
            Some(records_payload()),
            "fetch v{v}: records untouched"
        );
    }
}

/// The Java client follows a Produce hint only when it names an epoch: on the destination side
/// the hint keeps the destination's epoch, at the gateway's address; Metadata and Fetch hints
/// still show none there.
#[test]
fn produce_leader_hints_on_the_destination_side_of_a_virtual_cluster_keep_their_epoch() {
    for v in versions(ApiKey::Produce).filter(|v| *v >= 10) {
        let frame = frame_of(
            ApiKey::Produce,
            v,
            1,
            &produce_response(v, vec![produce_node(2, "kafka-2.internal", 19093)]),
        );
        let r: ProduceResponse = rewrite_with(&FORWARD_DESTINATION, ApiKey::Produce, v, &frame);
        let p = &r.responses[0].partition_responses[0];
        assert_eq!(p.current_leader.leader_epoch, 7, "produce v{v}");
        assert_eq!(p.current_leader.leader_id, BrokerId(2), "produce v{v}");
        assert_eq!(
            gateway(2),
            Some((r.node_endpoints[0].host.clone(), r.node_endpoints[0].port)),
            "produce v{v}: the leader at the gateway's address"
        );
    }
    for v in versions(ApiKey::Metadata) {
        let frame = frame_of(ApiKey::Metadata, v, 1, &metadata_with_leader_epochs(v));
        let m: MetadataResponse = rewrite_with(&FORWARD_DESTINATION, ApiKey::Metadata, v, &frame);
        assert!(
            m.topics
                .iter()
                .flat_map(|t| &t.partitions)
                .all(|p| p.leader_epoch == -1),
            "metadata v{v}"
        );
    }
    for v in versions(ApiKey::Fetch).filter(|v| *v >= 16) {
        let frame = frame_of(
            ApiKey::Fetch,
            v,
            1,
            &fetch_response(v, vec![fetch_node(1, "kafka-1.internal", 19092)]),
        );
        let r: FetchResponse = rewrite_with(&FORWARD_DESTINATION, ApiKey::Fetch, v, &frame);
        assert_eq!(
            r.responses[0].partitions[0].current_leader.leader_epoch, -1,
            "fetch v{v}"
        );
    }
}

#[test]
fn api_versions_of_a_virtual_cluster_offer_produce_and_fetch_only_where_they_name_topics() {
    let entries = || {
        vec![
            api_version(ApiKey::Produce as i16, 3, 13),
            api_version(ApiKey::Fetch as i16, 4, 17),
        ]
    };
    for v in versions(ApiKey::ApiVersions) {
        let frame = frame_of(ApiKey::ApiVersions, v, 1, &api_versions_response(entries()));
        let r: ApiVersionsResponse = rewrite_forward(ApiKey::ApiVersions, v, &frame);
        let ranges: Vec<(i16, i16)> = r
            .api_keys
            .iter()
            .map(|e| (e.min_version, e.max_version))
            .collect();
        assert_eq!(ranges, vec![(3, 12), (4, 12)], "v{v}");
        // An ordinary listener offers what the broker does (within what the gateway reads).
        let keys = rewritten_api_versions(v, entries());
        assert_eq!((keys[0].max_version, keys[1].max_version), (13, 17), "v{v}");
    }
}
