//! The in-memory handling of one Produce request and its response, as the connection loop does
//! it between reading a frame and writing one (no sockets): header parse, version gate, the
//! gateway's per-API plan of the request, and the per-API transformation of the broker's answer
//! (tap, guards, address rewrite).
//!
//! Three workloads, each one request + one response per iteration:
//! - `mirror_listener`: Produce v11, acks=-1, 1 mirror topic × 3 partitions, one idempotent
//!   batch of 16 records each (mirrors and the PSM configured);
//! - `client_listener`: the same to a topic of no mirror (mirrors and the PSM configured);
//! - `client_listener_rewrite`: Produce v11 to a topic of no mirror whose response carries
//!   `node_endpoints` (one address rewrite).
//!
//! Counts of walks and decodes per Produce are asserted by the unit tests of `src/proxy`
//! (`exchange_counts`), which can see the test-only counters.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, Criterion};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::produce_response::{
    NodeEndpoint, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{
    ApiKey, BrokerId, ProduceRequest, ProduceResponse, RequestHeader, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Encodable, StrBytes};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use mirrorgate::cluster::{ClusterView, Snapshot, TopicInfo};
use mirrorgate::controller::MirrorController;
use mirrorgate::metrics::{ListenerKind, Metrics};
use mirrorgate::protocol::rewrite::BrokerEndpoint;
use mirrorgate::proxy::{ConnContext, ListenerAddressMap};
use mirrorgate::psm::registry::PsmRegistry;
use mirrorgate::state::StateStore;

const VERSION: i16 = 11;

fn config(dir: &std::path::Path) -> mirrorgate::config::Config {
    let yaml = format!(
        "destination:\n  bootstrap: [\"127.0.0.1:1\"]\nlisteners:\n  client:\n    port_base: 39092\n  mirror:\n    port_base: 39192\nadmin:\n  bind: 127.0.0.1:9180\nmirrors:\n  - name: first\n    topics: [orders]\nstate_dir: {}\n",
        dir.display()
    );
    mirrorgate::config::load_str(&yaml, "bench.yaml").expect("config")
}

/// One connection context per listener, over a cluster view filled by hand.
fn contexts(dir: &std::path::Path) -> (Arc<ConnContext>, Arc<ConnContext>) {
    let cfg = config(dir);
    let store = StateStore::init(dir).expect("state dir");
    let metrics = Metrics::new();
    let cluster = ClusterView::new(
        cfg.destination.clone(),
        mirrorgate::client::Connector::plain(),
        metrics.clone(),
    );
    let topic = |name: &str| {
        (
            name.to_string(),
            TopicInfo {
                id: uuid::Uuid::from_bytes([7; 16]),
                leaders: vec![1; 3],
            },
        )
    };
    let partitions = vec![topic("orders"), topic("plain")];
    cluster.replace(Snapshot {
        brokers: vec![BrokerEndpoint {
            node_id: 1,
            host: "127.0.0.1".into(),
            port: 1,
        }],
        topics: partitions.iter().map(|(n, i)| (i.id, n.clone())).collect(),
        partitions,
        ..Snapshot::default()
    });
    let psm = PsmRegistry::new(&cfg, Some(store.clone()), &metrics);
    let ctl = MirrorController::new(
        &cfg,
        store,
        &metrics,
        Some(psm.clone()),
        cluster.clone(),
        mirrorgate::mirror::fault_hooks::FaultHooks::default(),
    );
    ctl.sync_partitions();
    let ctx = |kind: ListenerKind, listener: &mirrorgate::config::ListenerConfig| {
        Arc::new(ConnContext {
            kind,
            psm: Some(psm.clone()),
            verify_crc: kind == ListenerKind::Client,
            mirrors: Some(ctl.clone() as Arc<dyn mirrorgate::mirror::policy::MirrorPolicy>),
            address_map: ListenerAddressMap::new(listener),
            cluster: cluster.clone(),
            metrics: metrics.clone(),
            handles: metrics.api_handles(kind),
            limits: cfg.limits.clone(),
            connect_timeout: Duration::from_secs(1),
            acceptor: mirrorgate::net::Acceptor::default(),
            principal_limits: None,
            threads: None,
            forward: None,
        })
    };
    let mirror_listener = cfg.listeners.mirror.clone().expect("mirror listener");
    (
        ctx(ListenerKind::Mirror, &mirror_listener),
        ctx(ListenerKind::Client, &cfg.listeners.client),
    )
}

fn batch(records: i64) -> Bytes {
    let recs: Vec<Record> = (0..records)
        .map(|i| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: 4242,
            producer_epoch: 0,
            timestamp_type: TimestampType::Creation,
            offset: i,
            sequence: i as i32,
            timestamp: 1_000 + i,
            key: Some(Bytes::from_static(b"key")),
            value: Some(Bytes::from(vec![b'v'; 48])),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    let opts = RecordEncodeOptions {
        version: 2,
        compression: Compression::None,
    };
    RecordBatchEncoder::encode(&mut buf, recs.iter(), &opts).expect("batch");
    buf.freeze()
}

fn produce_request(topic: &str) -> Bytes {
    let parts = (0..3)
        .map(|p| {
            PartitionProduceData::default()
                .with_index(p)
                .with_records(Some(batch(16)))
        })
        .collect();
    let req = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partition_data(parts)]);
    let mut out = BytesMut::new();
    out.put_i32(0);
    RequestHeader::default()
        .with_request_api_key(ApiKey::Produce as i16)
        .with_request_api_version(VERSION)
        .with_correlation_id(7)
        .with_client_id(Some(StrBytes::from_static_str("bench")))
        .encode(&mut out, ApiKey::Produce.request_header_version(VERSION))
        .expect("header");
    req.encode(&mut out, VERSION).expect("body");
    let len = (out.len() - 4) as i32;
    out[0..4].copy_from_slice(&len.to_be_bytes());
    out.freeze()
}

fn produce_response(topic: &str, endpoints: bool) -> Bytes {
    let parts = (0..3)
        .map(|p| {
            PartitionProduceResponse::default()
                .with_index(p)
                .with_base_offset(1000 + i64::from(p))
                .with_log_append_time_ms(-1)
        })
        .collect();
    let mut resp = ProduceResponse::default().with_responses(vec![TopicProduceResponse::default()
        .with_name(TopicName(StrBytes::from_string(topic.to_string())))
        .with_partition_responses(parts)]);
    if endpoints {
        resp = resp.with_node_endpoints(vec![NodeEndpoint::default()
            .with_node_id(BrokerId(1))
            .with_host(StrBytes::from_static_str("10.0.0.1"))
            .with_port(9092)]);
    }
    let mut out = BytesMut::new();
    out.put_i32(0);
    ResponseHeader::default()
        .with_correlation_id(7)
        .encode(&mut out, ApiKey::Produce.response_header_version(VERSION))
        .expect("header");
    resp.encode(&mut out, VERSION).expect("body");
    let len = (out.len() - 4) as i32;
    out[0..4].copy_from_slice(&len.to_be_bytes());
    out.freeze()
}

mod handling {
    //! The connection loop's in-memory steps, through the gateway's public per-API interface.
    use super::*;
    use mirrorgate::protocol::frame::parse_request_header;
    use mirrorgate::protocol::produce::peek_acks;
    use mirrorgate::protocol::versions;
    use mirrorgate::proxy::exchange::{self, Step};

    /// One request and its response; returns the bytes forwarded and the bytes answered.
    pub fn exchange(
        rt: &tokio::runtime::Runtime,
        ctx: &ConnContext,
        request: Bytes,
        response: Bytes,
    ) -> (Bytes, Bytes) {
        let h = parse_request_header(&request[4..]).expect("header");
        assert!(versions::accepts(h.api_key, h.api_version));
        let acks = peek_acks(h.api_version, &request[4 + h.header_len..]).expect("acks");
        let (step, pending) = exchange::begin(ctx, &h, Some(acks), request).expect("begin");
        let Step::Forward(forwarded) = step else {
            panic!("not forwarded")
        };
        let out = rt
            .block_on(pending.finish(ctx, "127.0.0.1:1", response))
            .expect("response");
        (forwarded, out)
    }
}

fn bench_exchange(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mirror, client) = contexts(dir.path());
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let cases = [
        (
            "mirror_listener",
            &mirror,
            produce_request("orders"),
            produce_response("orders", false),
        ),
        (
            "client_listener",
            &client,
            produce_request("plain"),
            produce_response("plain", false),
        ),
        (
            "client_listener_rewrite",
            &client,
            produce_request("plain"),
            produce_response("plain", true),
        ),
    ];
    let mut g = c.benchmark_group("produce_exchange");
    for (name, ctx, request, response) in cases {
        g.bench_function(name, |b| {
            b.iter(|| {
                black_box(handling::exchange(
                    &rt,
                    ctx,
                    black_box(request.clone()),
                    black_box(response.clone()),
                ))
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench_exchange);
criterion_main!(benches);
