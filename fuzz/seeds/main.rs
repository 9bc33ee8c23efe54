//! Writes the seed corpus: a few valid inputs per fuzz target, built with kafka-protocol's
//! encoders and mirrorgate's own encoders, in each target's input layout (selector bytes, then
//! wire bytes). Run from the repo root:
//!
//! ```sh
//! cargo run --manifest-path fuzz/Cargo.toml --example seeds [OUT_DIR]   # default fuzz/corpus
//! ```
//!
//! Files are named `seed-*`; existing files are overwritten, others left alone.

use std::path::{Path, PathBuf};

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::fetch_response::{
    FetchableTopicResponse, NodeEndpoint as FetchNode, PartitionData,
};
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::produce_response::{
    NodeEndpoint as ProduceNode, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsResponse, BrokerId, DescribeClusterResponse, FetchResponse,
    FindCoordinatorResponse, MetadataResponse, ProduceRequest, ProduceResponse, RequestHeader,
    ResponseHeader, TopicName, TransactionalId,
};
use kafka_protocol::protocol::{Encodable, StrBytes};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use mirrorgate::protocol::barrier::{encode_barrier_batch, BarrierValue};
use mirrorgate_fuzz::rewrite_selector;

fn s(x: &str) -> StrBytes {
    StrBytes::from_string(x.to_string())
}

fn records(pid: i64, epoch: i16, seq: i32, n: usize, txn: bool, control: bool) -> Vec<u8> {
    let recs: Vec<Record> = (0..n)
        .map(|i| Record {
            transactional: txn,
            control,
            delete_horizon: false,
            partition_leader_epoch: 3,
            producer_id: pid,
            producer_epoch: epoch,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            // The encoder starts a new batch whenever offset - sequence changes.
            sequence: if pid < 0 {
                i as i32 - 1
            } else {
                seq + i as i32
            },
            timestamp: 1_700_000_000_000 + i as i64,
            key: Some(if control {
                // Control record key: version 0, type 1 (COMMIT).
                Bytes::from_static(&[0, 0, 0, 1])
            } else {
                Bytes::from(format!("k{i}"))
            }),
            value: Some(if control {
                // Marker value: version 0, coordinator epoch 5.
                Bytes::from_static(&[0, 0, 0, 0, 0, 5])
            } else {
                Bytes::from(vec![b'v'; 10 + i])
            }),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        recs.iter(),
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .expect("records encode");
    buf.to_vec()
}

fn barrier_value(mirror: &str) -> BarrierValue {
    BarrierValue {
        version: 1,
        mirror: mirror.into(),
        failover_id: "0b9c2f5e-failover".into(),
        source_cluster_id: Some("source-cluster".into()),
        time_ms: 1_700_000_000_123,
        producers_expired: 3,
        last_mirrored_offset: 41,
    }
}

fn encode<M: Encodable>(m: &M, version: i16) -> Vec<u8> {
    let mut b = BytesMut::new();
    m.encode(&mut b, version).expect("encodes");
    b.to_vec()
}

/// Response header + message (a response frame body, without the length prefix).
fn response<M: Encodable>(key: ApiKey, version: i16, m: &M) -> Vec<u8> {
    let mut b = BytesMut::new();
    ResponseHeader::default()
        .with_correlation_id(42)
        .encode(&mut b, key.response_header_version(version))
        .expect("header encodes");
    m.encode(&mut b, version).expect("encodes");
    b.to_vec()
}

fn produce_request(version: i16, acks: i16) -> Vec<u8> {
    let batch = Bytes::from(records(1000, 0, 0, 3, false, false));
    let topic = |name: &str, id: u128, parts: &[i32]| {
        TopicProduceData::default()
            .with_name(TopicName(s(name)))
            .with_topic_id(uuid::Uuid::from_u128(id))
            .with_partition_data(
                parts
                    .iter()
                    .map(|p| {
                        PartitionProduceData::default()
                            .with_index(*p)
                            .with_records(Some(batch.clone()))
                    })
                    .collect(),
            )
    };
    let req = ProduceRequest::default()
        .with_transactional_id(if version >= 9 {
            Some(TransactionalId(s("tx-1")))
        } else {
            None
        })
        .with_acks(acks)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![
            topic("mirror.a", 1, &[0, 1, 2]),
            topic("local", 2, &[0]),
        ]);
    encode(&req, version)
}

fn produce_response(version: i16, with_nodes: bool) -> Vec<u8> {
    let part = |i: i32| {
        PartitionProduceResponse::default()
            .with_index(i)
            .with_base_offset(100 + i as i64)
            .with_log_append_time_ms(-1)
            .with_log_start_offset(0)
    };
    let mut resp = ProduceResponse::default().with_responses(vec![TopicProduceResponse::default()
        .with_name(TopicName(s("local")))
        .with_topic_id(uuid::Uuid::from_u128(2))
        .with_partition_responses(vec![part(0), part(1)])]);
    if with_nodes {
        resp = resp.with_node_endpoints(vec![
            ProduceNode::default()
                .with_node_id(BrokerId(1))
                .with_host(s("10.0.0.1"))
                .with_port(9092),
            ProduceNode::default()
                .with_node_id(BrokerId(7))
                .with_host(s("10.0.0.7"))
                .with_port(9092),
        ]);
    }
    response(ApiKey::Produce, version, &resp)
}

fn fetch_response(version: i16, records: Vec<u8>, with_nodes: bool) -> Vec<u8> {
    let mut resp = FetchResponse::default().with_responses(vec![FetchableTopicResponse::default()
        .with_topic(TopicName(s("mirror.a")))
        .with_topic_id(uuid::Uuid::from_u128(1))
        .with_partitions(vec![PartitionData::default()
            .with_partition_index(0)
            .with_high_watermark(50)
            .with_records(Some(Bytes::from(records)))])]);
    if with_nodes {
        resp = resp.with_node_endpoints(vec![FetchNode::default()
            .with_node_id(BrokerId(2))
            .with_host(s("10.0.0.2"))
            .with_port(9093)]);
    }
    response(ApiKey::Fetch, version, &resp)
}

fn metadata(version: i16) -> Vec<u8> {
    let broker = |id: i32| {
        MetadataResponseBroker::default()
            .with_node_id(BrokerId(id))
            .with_host(s(&format!("kafka-{id}.internal")))
            .with_port(9092)
            .with_rack(Some(s("r1")))
    };
    let resp = MetadataResponse::default()
        .with_brokers(vec![broker(1), broker(2), broker(9)])
        .with_cluster_id(Some(s("cluster")))
        .with_controller_id(BrokerId(1))
        .with_topics(vec![MetadataResponseTopic::default()
            .with_name(Some(TopicName(s("mirror.a"))))
            .with_topic_id(uuid::Uuid::from_u128(1))
            .with_partitions(vec![MetadataResponsePartition::default()
                .with_partition_index(0)
                .with_leader_id(BrokerId(1))
                .with_replica_nodes(vec![BrokerId(1), BrokerId(2)])
                .with_isr_nodes(vec![BrokerId(1)])])]);
    response(ApiKey::Metadata, version, &resp)
}

fn find_coordinator(version: i16) -> Vec<u8> {
    let resp = if version < 4 {
        FindCoordinatorResponse::default()
            .with_node_id(BrokerId(2))
            .with_host(s("kafka-2.internal"))
            .with_port(9092)
    } else {
        FindCoordinatorResponse::default().with_coordinators(vec![
            Coordinator::default()
                .with_key(s("group-a"))
                .with_node_id(BrokerId(2))
                .with_host(s("kafka-2.internal"))
                .with_port(9092),
            Coordinator::default()
                .with_key(s("group-b"))
                .with_node_id(BrokerId(8))
                .with_host(s("kafka-8.internal"))
                .with_port(9092),
        ])
    };
    response(ApiKey::FindCoordinator, version, &resp)
}

fn describe_cluster(version: i16) -> Vec<u8> {
    let resp = DescribeClusterResponse::default()
        .with_cluster_id(s("cluster"))
        .with_endpoint_type(1)
        .with_controller_id(BrokerId(1))
        .with_brokers(vec![
            DescribeClusterBroker::default()
                .with_broker_id(BrokerId(1))
                .with_host(s("kafka-1.internal"))
                .with_port(9092),
            DescribeClusterBroker::default()
                .with_broker_id(BrokerId(6))
                .with_host(s("kafka-6.internal"))
                .with_port(9092),
        ]);
    response(ApiKey::DescribeCluster, version, &resp)
}

fn api_versions(version: i16) -> Vec<u8> {
    let resp = ApiVersionsResponse::default().with_api_keys(vec![
        ApiVersion::default()
            .with_api_key(0)
            .with_min_version(0)
            .with_max_version(13),
        ApiVersion::default()
            .with_api_key(1)
            .with_min_version(0)
            .with_max_version(18),
        ApiVersion::default()
            .with_api_key(17)
            .with_min_version(0)
            .with_max_version(1),
        ApiVersion::default()
            .with_api_key(900)
            .with_min_version(0)
            .with_max_version(1),
    ]);
    response(ApiKey::ApiVersions, version, &resp)
}

fn snapshot(entries: &[(i64, i16, &[(i32, i32, i64, i64)])]) -> Vec<u8> {
    let mut p = BytesMut::new();
    p.put_i64(500); // last offset
    p.put_u32(entries.len() as u32);
    for (pid, epoch, batches) in entries {
        p.put_i64(*pid);
        p.put_i16(*epoch);
        p.put_i32(-1); // coordinator epoch
        p.put_i64(1_700_000_000_000);
        p.put_i64(-1); // no open transaction
        p.put_u8(batches.len() as u8);
        for (last_seq, delta, last_offset, ts) in batches.iter() {
            p.put_i32(*last_seq);
            p.put_i32(*delta);
            p.put_i64(*last_offset);
            p.put_i64(*ts);
        }
    }
    let mut out = Vec::new();
    out.extend_from_slice(b"MGPS");
    out.extend_from_slice(&1u16.to_be_bytes());
    out.extend_from_slice(&0u16.to_be_bytes());
    out.extend_from_slice(&crc32c::crc32c(&p).to_be_bytes());
    out.extend_from_slice(&(p.len() as u32).to_be_bytes());
    out.extend_from_slice(&p);
    out
}

fn request_header(key: ApiKey, version: i16, client_id: Option<&str>) -> Vec<u8> {
    let mut b = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(99)
        .with_client_id(client_id.map(s))
        .encode(&mut b, key.request_header_version(version))
        .expect("header encodes");
    b.to_vec()
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

fn write(dir: &Path, target: &str, name: &str, bytes: &[u8]) {
    let d = dir.join(target);
    std::fs::create_dir_all(&d).expect("corpus dir");
    std::fs::write(d.join(format!("seed-{name}")), bytes).expect("write seed");
}

fn main() {
    let dir = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("corpus"));

    // frame_header: request headers (+ a little body), v1 and flexible v2 headers.
    for (name, key, version, cid) in [
        ("produce-v3", ApiKey::Produce, 3, Some("client-1")),
        ("produce-v9", ApiKey::Produce, 9, Some("producer")),
        ("metadata-v12", ApiKey::Metadata, 12, None),
        ("apiversions-v3", ApiKey::ApiVersions, 3, Some("rdkafka")),
        ("fetch-v16", ApiKey::Fetch, 16, Some("")),
    ] {
        let mut h = request_header(key, version, cid);
        h.extend_from_slice(&[0, 0, 0, 1]);
        write(&dir, "frame_header", name, &h);
    }
    let mut tagged = request_header(ApiKey::Metadata, 12, Some("c"));
    let n = tagged.len();
    tagged[n - 1] = 1; // one tagged field: tag 3, 2 bytes
    tagged.extend_from_slice(&[3, 2, 0xAB, 0xCD]);
    write(&dir, "frame_header", "metadata-v12-tagged", &tagged);

    // produce_walker / enforce (filter): Produce request bodies.
    for v in [3i16, 8, 9, 12, 13] {
        let body = produce_request(v, if v == 8 { 0 } else { -1 });
        write(
            &dir,
            "produce_walker",
            &format!("v{v}"),
            &cat(&[&[v as u8], &body]),
        );
        write(
            &dir,
            "enforce",
            &format!("filter-v{v}"),
            &cat(&[&[0, v as u8, 0], &body]),
        );
        write(
            &dir,
            "enforce",
            &format!("filter-all-v{v}"),
            &cat(&[&[0, v as u8, 2], &body]),
        );
    }
    // enforce: Produce responses (merge, rewrite errors).
    for v in [3i16, 8, 10, 13] {
        let resp = produce_response(v, v >= 10);
        write(
            &dir,
            "enforce",
            &format!("merge-v{v}"),
            &cat(&[&[1, v as u8, 3], &resp]),
        );
        write(
            &dir,
            "enforce",
            &format!("errors-v{v}"),
            &cat(&[&[2, v as u8, 0], &resp]),
        );
    }

    // batch_walker: plain, idempotent, transactional, control marker, two batches.
    let plain = records(-1, -1, -1, 3, false, false);
    let idem = records(77, 2, 10, 5, false, false);
    let txn = records(78, 0, 0, 2, true, false);
    let control = records(78, 0, 0, 1, true, true);
    for (name, b) in [
        ("plain", plain.clone()),
        ("idempotent", idem.clone()),
        ("transactional", txn.clone()),
        ("control", control.clone()),
        ("two", cat(&[&idem, &control])),
        ("partial", cat(&[&plain, &idem[..40]])),
    ] {
        write(&dir, "batch_walker", name, &cat(&[&[0], &b]));
    }

    // barrier: value, batch, records with a barrier, splice mode.
    let value = barrier_value("orders-dr");
    let bb = encode_barrier_batch(&value, 1_700_000_000_500).to_vec();
    write(&dir, "barrier", "value", &cat(&[&[0], &value.encode()]));
    let mut no_cluster = value.clone();
    no_cluster.source_cluster_id = None;
    write(
        &dir,
        "barrier",
        "value-no-cluster",
        &cat(&[&[0], &no_cluster.encode()]),
    );
    write(&dir, "barrier", "batch", &cat(&[&[1], &bb]));
    write(
        &dir,
        "barrier",
        "records",
        &cat(&[&[2], &idem, &bb, &control]),
    );
    write(
        &dir,
        "barrier",
        "splice",
        &cat(&[&[3, 0, 4], b"dr-1", &idem]),
    );

    // rewrite_response: every key at a few versions.
    let rw = |key: ApiKey, v: i16, body: Vec<u8>| {
        let sel = rewrite_selector(key, v);
        write(
            &dir,
            "rewrite_response",
            &format!("{key:?}-v{v}").to_lowercase(),
            &cat(&[&sel, &body]),
        );
    };
    for v in [0i16, 3, 4] {
        rw(ApiKey::ApiVersions, v, api_versions(v));
    }
    // KIP-511: error 35 in a v0 body answers a newer request.
    let unsupported = ApiVersionsResponse::default()
        .with_error_code(35)
        .with_api_keys(vec![ApiVersion::default()
            .with_api_key(18)
            .with_max_version(3)]);
    rw(
        ApiKey::ApiVersions,
        4,
        response(ApiKey::ApiVersions, 0, &unsupported),
    );
    for v in [1i16, 9, 12, 13] {
        rw(ApiKey::Metadata, v, metadata(v));
    }
    for v in [1i16, 3, 4, 6] {
        rw(ApiKey::FindCoordinator, v, find_coordinator(v));
    }
    for v in [0i16, 1] {
        rw(ApiKey::DescribeCluster, v, describe_cluster(v));
    }
    for v in [10i16, 13] {
        rw(ApiKey::Produce, v, produce_response(v, true));
    }
    for v in [16i16, 17] {
        rw(ApiKey::Fetch, v, fetch_response(v, idem.clone(), true));
    }

    // fetch_filter: responses holding a barrier, and records for the built mode.
    for v in [4i16, 11, 12, 13, 16, 18] {
        let resp = fetch_response(v, cat(&[&idem, &bb, &plain]), v >= 16);
        write(
            &dir,
            "fetch_filter",
            &format!("v{v}"),
            &cat(&[&[(v - 4) as u8, 0, 0], &resp]),
        );
    }
    write(
        &dir,
        "fetch_filter",
        "built-v12",
        &cat(&[&[8, 1, 200], &idem]),
    );
    write(
        &dir,
        "fetch_filter",
        "built-v13",
        &cat(&[&[9, 3, 0], &plain]),
    );

    // psm_snapshot: empty, one producer, several with full batch caches.
    let five: Vec<(i32, i32, i64, i64)> = (0..5)
        .map(|i| (i * 2 + 1, 1, i as i64 * 2 + 1, 1_700_000_000_000 + i as i64))
        .collect();
    for (name, bytes) in [
        ("empty", snapshot(&[])),
        (
            "one",
            snapshot(&[(1000, 0, &[(4, 4, 10, 1_700_000_000_000)])]),
        ),
        (
            "many",
            snapshot(&[(1, 0, &five), (2, 3, &five[..2]), (3, 0, &[])]),
        ),
    ] {
        write(&dir, "psm_snapshot", name, &cat(&[&[0], &bytes]));
    }
    eprintln!("seeds written to {}", dir.display());
}
