//! How often one Produce is walked, decoded and encoded on its way through the gateway
//! (in-memory, no sockets), counted with the test-only counters of
//! [`crate::protocol::frame::counts`].

use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
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

use crate::cluster::{ClusterView, Snapshot, TopicInfo};
use crate::controller::MirrorController;
use crate::metrics::{ListenerKind, Metrics};
use crate::protocol::frame::counts;
use crate::protocol::frame::parse_request_header;
use crate::protocol::rewrite::BrokerEndpoint;
use crate::psm::registry::PsmRegistry;
use crate::state::StateStore;

use crate::proxy::{ConnContext, ListenerAddressMap};

/// The id of topic `orders` (a mirror topic) and `plain` (no mirror).
pub const ORDERS_ID: uuid::Uuid = uuid::Uuid::from_bytes([1; 16]);
pub const PLAIN_ID: uuid::Uuid = uuid::Uuid::from_bytes([2; 16]);

/// Connection contexts of both listeners with mirror `first` (topic `orders`) and the PSM,
/// over a cluster view filled by hand. The directory holds the state.
pub struct Fixture {
    pub mirror: Arc<ConnContext>,
    pub client: Arc<ConnContext>,
    _dir: tempfile::TempDir,
}

pub fn fixture() -> Fixture {
    fixture_with(None)
}

/// As [`fixture`], with `policy` instead of the mirror controller where one is given.
pub fn fixture_with(policy: Option<Arc<dyn crate::mirror::policy::MirrorPolicy>>) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let yaml = format!(
        "destination:\n  bootstrap: [\"127.0.0.1:1\"]\nlisteners:\n  client:\n    port_base: 39092\n  mirror:\n    port_base: 39192\nadmin:\n  bind: 127.0.0.1:9180\nmirrors:\n  - name: first\n    topics: [orders]\nstate_dir: {}\n",
        dir.path().display()
    );
    let cfg = crate::config::load_str(&yaml, "t.yaml").unwrap();
    let store = StateStore::init(dir.path()).unwrap();
    let metrics = Metrics::new();
    let cluster = ClusterView::new(
        cfg.destination.clone(),
        crate::client::Connector::plain(),
        metrics.clone(),
    );
    let partitions = vec![
        (
            "orders".to_string(),
            TopicInfo {
                id: ORDERS_ID,
                leaders: vec![1; 4],
            },
        ),
        (
            "plain".to_string(),
            TopicInfo {
                id: PLAIN_ID,
                leaders: vec![1; 4],
            },
        ),
    ];
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
        crate::mirror::fault_hooks::FaultHooks::default(),
    );
    ctl.sync_partitions();
    let ctx =
        |kind: ListenerKind, listener: &crate::config::ListenerConfig| {
            Arc::new(ConnContext {
                kind,
                psm: Some(psm.clone()),
                verify_crc: kind == ListenerKind::Client,
                mirrors: Some(policy.clone().unwrap_or_else(|| {
                    ctl.clone() as Arc<dyn crate::mirror::policy::MirrorPolicy>
                })),
                address_map: ListenerAddressMap::new(listener),
                cluster: cluster.clone(),
                metrics: metrics.clone(),
                handles: metrics.api_handles(kind),
                limits: cfg.limits.clone(),
                connect_timeout: Duration::from_secs(1),
                acceptor: crate::net::Acceptor::default(),
                principal_limits: None,
                threads: None,
                forward: None,
            })
        };
    let mirror_listener = cfg.listeners.mirror.clone().unwrap();
    Fixture {
        mirror: ctx(ListenerKind::Mirror, &mirror_listener),
        client: ctx(ListenerKind::Client, &cfg.listeners.client),
        _dir: dir,
    }
}

/// One idempotent batch of `records` records (producer id 4242).
pub fn batch(records: i64) -> Bytes {
    batch_of(records, false)
}

/// [`batch`], of a transaction when `transactional`.
pub fn batch_of(records: i64, transactional: bool) -> Bytes {
    let recs: Vec<Record> = (0..records)
        .map(|i| Record {
            transactional,
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
    RecordBatchEncoder::encode(&mut buf, recs.iter(), &opts).unwrap();
    buf.freeze()
}

/// A whole request frame of `req` at `version`.
pub fn request_frame<R: kafka_protocol::protocol::Request + Encodable>(
    req: &R,
    version: i16,
    correlation_id: i32,
) -> Bytes {
    let mut out = BytesMut::new();
    out.put_i32(0);
    RequestHeader::default()
        .with_request_api_key(R::KEY)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str("t")))
        .encode(&mut out, R::header_version(version))
        .unwrap();
    req.encode(&mut out, version).unwrap();
    let len = (out.len() - 4) as i32;
    out[0..4].copy_from_slice(&len.to_be_bytes());
    out.freeze()
}

/// A whole response frame of `resp` at `version` for `api`.
pub fn response_frame<M: Encodable>(api: ApiKey, resp: &M, version: i16, corr: i32) -> Bytes {
    let mut out = BytesMut::new();
    out.put_i32(0);
    ResponseHeader::default()
        .with_correlation_id(corr)
        .encode(&mut out, api.response_header_version(version))
        .unwrap();
    resp.encode(&mut out, version).unwrap();
    let len = (out.len() - 4) as i32;
    out[0..4].copy_from_slice(&len.to_be_bytes());
    out.freeze()
}

/// Produce v11 of one batch to each of 3 partitions of `topic`, and the broker's answer.
fn produce(topic: &str, endpoints: bool) -> (Bytes, Bytes) {
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
    let parts = (0..3)
        .map(|p| {
            PartitionProduceResponse::default()
                .with_index(p)
                .with_base_offset(1000)
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
    (
        request_frame(&req, 11, 7),
        response_frame(ApiKey::Produce, &resp, 11, 7),
    )
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

/// What the connection loop sends for one request and its response: the frame forwarded
/// upstream (if any), the frame answered by the gateway (if any), and the frame written to the
/// client for the broker's `response` (if one was expected).
#[derive(Debug, PartialEq, Eq)]
pub struct Outcome {
    pub forwarded: Option<Bytes>,
    pub answered: Option<Bytes>,
    pub response: Option<Bytes>,
    pub error: Option<String>,
}

/// The request's acks (the connection reads them before anything else).
fn acks(h: &crate::protocol::frame::RequestHeaderInfo, request: &Bytes) -> Option<i16> {
    (h.api_key == ApiKey::Produce).then(|| {
        crate::protocol::produce::peek_acks(h.api_version, &request[4 + h.header_len..]).unwrap()
    })
}

/// The exchanges' in-memory steps (as the connection loop runs them).
pub fn handle(ctx: &ConnContext, request: Bytes, response: Bytes) -> Outcome {
    let h = parse_request_header(&request[4..]).unwrap();
    let acks = acks(&h, &request);
    let mut out = Outcome {
        forwarded: None,
        answered: None,
        response: None,
        error: None,
    };
    let (step, pending) = match super::begin(ctx, &h, acks, request) {
        Ok(r) => r,
        Err(e) => {
            out.error = Some(format!("request: {e}"));
            return out;
        }
    };
    match step {
        super::Step::Forward(f) => out.forwarded = Some(f),
        super::Step::Answer(a) => out.answered = Some(a),
        super::Step::Nothing => {}
    }
    if out.forwarded.is_none() || acks == Some(0) {
        return out;
    }
    match runtime().block_on(pending.finish(ctx, "127.0.0.1:1", response)) {
        Ok(f) => out.response = Some(f),
        Err(e) => out.error = Some(format!("response: {e}")),
    }
    out
}

/// Counters a step may change (rejections, barriers seen, PSM results).
pub fn counters(ctx: &ConnContext) -> Vec<String> {
    ctx.metrics
        .render()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.contains("rejected") || l.contains("barriers_seen") || l.contains("psm_batches")
        })
        .map(str::to_string)
        .collect()
}

/// The bytes of lower-case hex `text`.
pub fn unhex(text: &str) -> Bytes {
    (0..text.len() / 2)
        .map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16).expect("hex"))
        .collect::<Vec<u8>>()
        .into()
}

/// Counts of one Produce and its response: body walks, batch walks, request decodes, response
/// decodes, response encodes.
fn counted(ctx: &ConnContext, topic: &str, endpoints: bool) -> [u32; 5] {
    let (request, response) = produce(topic, endpoints);
    counts::take();
    let out = handle(ctx, request, response);
    assert_eq!(out.error, None);
    counts::take()
}

// Counts are [body walks, batch walks, request decodes, response decodes, response encodes].

#[test]
fn a_mirror_listener_produce_is_walked_once_and_its_response_decoded_once() {
    let f = fixture();
    assert_eq!(counted(&f.mirror, "orders", false), [1, 3, 0, 1, 0]);
}

#[test]
fn a_client_listener_produce_is_walked_once_and_its_response_decoded_once() {
    let f = fixture();
    assert_eq!(counted(&f.client, "plain", false), [1, 0, 0, 1, 0]);
    assert_eq!(counted(&f.client, "plain", true), [1, 0, 0, 1, 1]);
}

/// A forward listener's source side over `f`'s cluster view, its route noting in `route`.
fn forward_source(f: &Fixture, route: Arc<crate::proxy::forward::ForwardRoute>) -> ConnContext {
    let c = &f.client;
    let listener = crate::config::ListenerConfig {
        bind: "127.0.0.1".into(),
        advertised_host: None,
        port_base: 39292,
        node_id_base: 1,
        max_brokers: 4,
        tls: None,
        allowed_principals: None,
    };
    ConnContext {
        kind: ListenerKind::Forward,
        psm: None,
        mirrors: None,
        verify_crc: false,
        address_map: ListenerAddressMap::forward(&listener, route.cluster_id(), false),
        cluster: c.cluster.clone(),
        metrics: c.metrics.clone(),
        handles: c.metrics.api_handles(ListenerKind::Forward),
        limits: c.limits.clone(),
        connect_timeout: c.connect_timeout,
        acceptor: c.acceptor.clone(),
        principal_limits: None,
        threads: None,
        forward: Some(route),
    }
}

#[test]
fn a_forwarded_produce_notes_each_acknowledged_batch_walking_and_decoding_once() {
    let f = fixture();
    let route = crate::proxy::forward::ForwardRoute::new("first", "c", Arc::default(), true);
    let ctx = forward_source(&f, route.clone());
    assert_eq!(counted(&ctx, "plain", false), [1, 0, 0, 1, 0]);
    let loss = route.acks().missing(&|_, _| Some(0));
    assert_eq!(loss.records, 3 * 16, "{loss:?}");
    let g = &loss.producers[0];
    assert_eq!(
        (g.producer_id, g.first_offset, g.last_offset),
        (4242, 1000, 1015)
    );
    assert_eq!((g.first_sequence, g.last_sequence), (0, 15));
}

#[test]
fn a_partition_the_source_refused_is_not_noted_as_acknowledged() {
    let f = fixture();
    let route = crate::proxy::forward::ForwardRoute::new("first", "c", Arc::default(), true);
    let ctx = forward_source(&f, route.clone());
    let (request, _) = produce("plain", false);
    let parts = (0..3)
        .map(|p| {
            PartitionProduceResponse::default()
                .with_index(p)
                .with_error_code(if p == 1 { 6 } else { 0 })
                .with_base_offset(if p == 1 { -1 } else { 50 })
        })
        .collect();
    let resp = ProduceResponse::default().with_responses(vec![TopicProduceResponse::default()
        .with_name(TopicName(StrBytes::from_static_str("plain")))
        .with_partition_responses(parts)]);
    let out = handle(&ctx, request, response_frame(ApiKey::Produce, &resp, 11, 7));
    assert_eq!(out.error, None);
    let loss = route.acks().missing(&|_, _| Some(0));
    let noted: Vec<i32> = loss.producers.iter().map(|g| g.partition).collect();
    assert_eq!(noted, vec![0, 2]);
}

#[test]
fn a_forwarded_produce_answered_in_another_order_notes_every_partition() {
    let f = fixture();
    let route = crate::proxy::forward::ForwardRoute::new("first", "c", Arc::default(), true);
    let ctx = forward_source(&f, route.clone());
    let (request, _) = produce("plain", false);
    let parts = (0..3)
        .rev()
        .map(|p| {
            PartitionProduceResponse::default()
                .with_index(p)
                .with_base_offset(100 * i64::from(p))
        })
        .collect();
    let resp = ProduceResponse::default().with_responses(vec![TopicProduceResponse::default()
        .with_name(TopicName(StrBytes::from_static_str("plain")))
        .with_partition_responses(parts)]);
    let out = handle(&ctx, request, response_frame(ApiKey::Produce, &resp, 11, 7));
    assert_eq!(out.error, None);
    let loss = route.acks().missing(&|_, _| Some(0));
    let noted: Vec<(i32, i64)> = loss
        .producers
        .iter()
        .map(|g| (g.partition, g.first_offset))
        .collect();
    assert_eq!(noted, vec![(0, 0), (1, 100), (2, 200)]);
}

#[test]
fn a_transaction_through_the_forward_listener_is_open_from_its_first_request_until_its_end_txn_answer(
) {
    use kafka_protocol::messages::{
        AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, EndTxnRequest, EndTxnResponse, ProducerId,
    };
    let f = fixture();
    let route = crate::proxy::forward::ForwardRoute::new("first", "c", Arc::default(), true);
    let ctx = forward_source(&f, route.clone());
    let add = AddOffsetsToTxnRequest::default().with_producer_id(ProducerId(77));
    let out = handle(
        &ctx,
        request_frame(&add, 3, 1),
        response_frame(
            ApiKey::AddOffsetsToTxn,
            &AddOffsetsToTxnResponse::default(),
            3,
            1,
        ),
    );
    assert_eq!(out.error, None);
    assert_eq!(route.open_transactions(), vec![77]);
    let end = EndTxnRequest::default()
        .with_producer_id(ProducerId(77))
        .with_committed(true);
    let busy = EndTxnResponse::default().with_error_code(51);
    handle(
        &ctx,
        request_frame(&end, 3, 2),
        response_frame(ApiKey::EndTxn, &busy, 3, 2),
    );
    assert_eq!(
        route.open_transactions(),
        vec![77],
        "CONCURRENT_TRANSACTIONS: the client sends it again"
    );
    handle(
        &ctx,
        request_frame(&end, 3, 3),
        response_frame(ApiKey::EndTxn, &EndTxnResponse::default(), 3, 3),
    );
    assert!(route.open_transactions().is_empty());
}
