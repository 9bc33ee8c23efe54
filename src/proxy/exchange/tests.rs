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
use crate::metrics::{ListenerKind, Metrics};
use crate::mirror::controller::MirrorController;
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

/// The same through the handling as it was before the exchanges ([`super::legacy`]).
pub fn legacy_handle(ctx: &ConnContext, request: Bytes, response: Bytes) -> Outcome {
    let h = parse_request_header(&request[4..]).unwrap();
    let acks = acks(&h, &request);
    let mut out = Outcome {
        forwarded: None,
        answered: None,
        response: None,
        error: None,
    };
    let plan = match super::legacy::plan_request(ctx, &h, acks, request) {
        Ok(p) => p,
        Err(e) => {
            out.error = Some(format!("request: {e}"));
            return out;
        }
    };
    out.forwarded = plan.forward;
    if out.forwarded.is_none() {
        out.answered = plan.local_response;
        return out;
    }
    if acks == Some(0) {
        return out;
    }
    let frame = match runtime().block_on(super::legacy::on_response(
        ctx,
        "127.0.0.1:1",
        h.api_key,
        h.api_version,
        h.correlation_id,
        response,
        plan.extras,
    )) {
        Ok(f) => f,
        Err(e) => {
            out.error = Some(format!("response: {e}"));
            return out;
        }
    };
    if crate::protocol::rewrite::needs_rewrite(h.api_key, h.api_version) {
        match crate::protocol::rewrite::rewrite_response(
            h.api_key,
            h.api_version,
            &frame,
            &ctx.address_map,
        ) {
            Ok(r) => out.response = Some(r.frame.unwrap_or(frame)),
            Err(e) => out.error = Some(format!("response: {e}")),
        }
    } else {
        out.response = Some(frame);
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

/// Lower-case hex of `bytes` (the golden files' frames).
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
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
fn counted(
    via: fn(&ConnContext, Bytes, Bytes) -> Outcome,
    ctx: &ConnContext,
    topic: &str,
    endpoints: bool,
) -> [u32; 5] {
    let (request, response) = produce(topic, endpoints);
    counts::take();
    let out = via(ctx, request, response);
    assert_eq!(out.error, None);
    counts::take()
}

// Counts are [body walks, batch walks, request decodes, response decodes, response encodes].

#[test]
fn a_mirror_listener_produce_is_walked_once_and_its_response_decoded_once() {
    let f = fixture();
    assert_eq!(counted(handle, &f.mirror, "orders", false), [1, 3, 0, 1, 0]);
}

#[test]
fn a_client_listener_produce_is_walked_once_and_its_response_decoded_once() {
    let f = fixture();
    assert_eq!(counted(handle, &f.client, "plain", false), [1, 0, 0, 1, 0]);
    assert_eq!(counted(handle, &f.client, "plain", true), [1, 0, 0, 1, 1]);
}

#[test]
fn before_the_exchanges_a_mirror_listener_produce_was_walked_three_times() {
    let f = fixture();
    assert_eq!(
        counted(legacy_handle, &f.mirror, "orders", false),
        [3, 6, 0, 2, 0]
    );
}

#[test]
fn before_the_exchanges_a_client_listener_produce_was_walked_twice() {
    let f = fixture();
    assert_eq!(
        counted(legacy_handle, &f.client, "plain", false),
        [2, 0, 0, 1, 0]
    );
    assert_eq!(
        counted(legacy_handle, &f.client, "plain", true),
        [2, 0, 0, 1, 1]
    );
}

// ---------------------------------------------------------------------------------------------
// Equivalence: the exchanges give the same frames as the handling before them.

mod equivalence {
    use super::*;
    use crate::protocol::barrier::{encode_barrier_batch, BarrierValue, BARRIER_VALUE_VERSION};
    use kafka_protocol::messages::metadata_response::{
        MetadataResponseBroker, MetadataResponseTopic,
    };
    use kafka_protocol::messages::{MetadataRequest, MetadataResponse};
    use kafka_protocol::protocol::Decodable;
    use proptest::prelude::*;
    use proptest::test_runner::Config as ProptestConfig;

    /// What one partition of a generated request carries.
    #[derive(Debug, Clone)]
    enum Records {
        Batch(i64),
        Barrier,
        BatchThenBarrier,
        Null,
        Garbage(Vec<u8>),
    }

    fn records(r: &Records) -> Option<Bytes> {
        let barrier = || {
            encode_barrier_batch(
                &BarrierValue {
                    version: BARRIER_VALUE_VERSION,
                    mirror: "upstream".into(),
                    failover_id: "f-1".into(),
                    source_cluster_id: None,
                    time_ms: 1_700_000_000_000,
                    producers_expired: 1,
                    last_mirrored_offset: 9,
                },
                2_000,
            )
        };
        match r {
            Records::Batch(n) => Some(batch(*n)),
            Records::Barrier => Some(barrier()),
            Records::BatchThenBarrier => {
                let mut b = batch(2).to_vec();
                b.extend_from_slice(&barrier());
                Some(Bytes::from(b))
            }
            Records::Null => None,
            Records::Garbage(g) => Some(Bytes::from(g.clone())),
        }
    }

    fn records_strategy() -> impl Strategy<Value = Records> {
        prop_oneof![
            6 => (1i64..5).prop_map(Records::Batch),
            2 => Just(Records::Barrier),
            1 => Just(Records::BatchThenBarrier),
            1 => Just(Records::Null),
            1 => proptest::collection::vec(any::<u8>(), 0..80).prop_map(Records::Garbage),
        ]
    }

    /// Topic 0 = `orders` (mirror), 1 = `plain`, 2 = an id nobody knows (v13 only).
    fn topic_data(version: i16, topic: u8, parts: &[(i32, Records)]) -> TopicProduceData {
        let t = TopicProduceData::default().with_partition_data(
            parts
                .iter()
                .map(|(p, r)| {
                    PartitionProduceData::default()
                        .with_index(*p)
                        .with_records(records(r))
                })
                .collect(),
        );
        match (version >= 13, topic) {
            (true, 0) => t.with_topic_id(ORDERS_ID),
            (true, 1) => t.with_topic_id(PLAIN_ID),
            (true, _) => t.with_topic_id(uuid::Uuid::from_bytes([9; 16])),
            (false, 0) => t.with_name(TopicName(StrBytes::from_static_str("orders"))),
            (false, _) => t.with_name(TopicName(StrBytes::from_static_str("plain"))),
        }
    }

    type Topics = Vec<(u8, Vec<(i32, Records)>)>;

    fn topics_strategy() -> impl Strategy<Value = Topics> {
        proptest::collection::vec(
            (
                0u8..3,
                proptest::collection::vec((0i32..4, records_strategy()), 1..4),
            ),
            1..4,
        )
    }

    /// The broker's answer to the forwarded request: every partition, error or not.
    fn broker_answer(
        forwarded: &Bytes,
        version: i16,
        errors: &[i16],
        endpoints: bool,
        tag: bool,
    ) -> Bytes {
        let h = parse_request_header(&forwarded[4..]).unwrap();
        let mut body = forwarded.slice(4 + h.header_len..);
        let req = ProduceRequest::decode(&mut body, version).unwrap();
        let mut n = 0usize;
        let responses = req
            .topic_data
            .iter()
            .map(|t| {
                let parts = t
                    .partition_data
                    .iter()
                    .map(|p| {
                        n += 1;
                        let error = errors[n % errors.len()];
                        PartitionProduceResponse::default()
                            .with_index(p.index)
                            .with_error_code(error)
                            .with_base_offset(if error == 0 { 100 + n as i64 } else { -1 })
                            .with_log_append_time_ms(if n % 3 == 0 { 5_000 } else { -1 })
                    })
                    .collect();
                TopicProduceResponse::default()
                    .with_name(t.name.clone())
                    .with_topic_id(t.topic_id)
                    .with_partition_responses(parts)
            })
            .collect();
        let mut resp = ProduceResponse::default().with_responses(responses);
        if endpoints && version >= 10 {
            resp = resp.with_node_endpoints(
                [1, 7]
                    .into_iter()
                    .map(|id| {
                        NodeEndpoint::default()
                            .with_node_id(BrokerId(id))
                            .with_host(StrBytes::from_static_str("10.0.0.1"))
                            .with_port(9092)
                    })
                    .collect(),
            );
        }
        if tag && version >= 9 {
            resp = resp.with_unknown_tagged_field(7, Bytes::from_static(b"x"));
        }
        response_frame(ApiKey::Produce, &resp, version, h.correlation_id)
    }

    /// A Produce request of `topics` and the broker's answer to what the gateway forwards.
    #[allow(clippy::too_many_arguments)]
    fn produce_case(
        mirror_listener: bool,
        version: i16,
        acks: i16,
        topics: &Topics,
        errors: &[i16],
        endpoints: bool,
        tag: bool,
    ) -> (Bytes, Bytes) {
        let req = ProduceRequest::default()
            .with_acks(acks)
            .with_timeout_ms(1_000)
            .with_topic_data(
                topics
                    .iter()
                    .map(|(t, parts)| topic_data(version, *t, parts))
                    .collect(),
            );
        let request = request_frame(&req, version, 77);
        // The broker answers what the new path forwards (the same frame is asserted later), in
        // a context of its own: this probe must leave no trace in the compared ones.
        let probe = fixture();
        let ctx = if mirror_listener {
            probe.mirror.clone()
        } else {
            probe.client.clone()
        };
        let response = match super::super::begin(
            &ctx,
            &parse_request_header(&request[4..]).unwrap(),
            Some(acks),
            request.clone(),
        ) {
            Ok((super::super::Step::Forward(f), p)) => {
                p.release_unsent();
                broker_answer(&f, version, errors, endpoints, tag)
            }
            _ => Bytes::new(),
        };
        (request, response)
    }

    /// A Metadata request and a response of `brokers` and `topics` to it.
    fn metadata_case(version: i16, brokers: &[i32], topics: &[(String, u128)]) -> (Bytes, Bytes) {
        let mut request = BytesMut::new();
        request.put_i32(0);
        RequestHeader::default()
            .with_request_api_key(ApiKey::Metadata as i16)
            .with_request_api_version(version)
            .with_correlation_id(5)
            .encode(
                &mut request,
                ApiKey::Metadata.request_header_version(version),
            )
            .unwrap();
        MetadataRequest::default()
            .encode(&mut request, version)
            .unwrap();
        let len = (request.len() - 4) as i32;
        request[0..4].copy_from_slice(&len.to_be_bytes());
        let resp = MetadataResponse::default()
            .with_brokers(
                brokers
                    .iter()
                    .map(|id| {
                        MetadataResponseBroker::default()
                            .with_node_id(BrokerId(*id))
                            .with_host(StrBytes::from_static_str("10.1.1.1"))
                            .with_port(9092 + id)
                    })
                    .collect(),
            )
            .with_topics(
                topics
                    .iter()
                    .map(|(n, id)| {
                        MetadataResponseTopic::default()
                            .with_name(Some(TopicName(StrBytes::from_string(n.clone()))))
                            .with_topic_id(if version >= 10 {
                                uuid::Uuid::from_u128(*id)
                            } else {
                                uuid::Uuid::nil()
                            })
                    })
                    .collect(),
            );
        (
            request.freeze(),
            response_frame(ApiKey::Metadata, &resp, version, 5),
        )
    }

    fn pick(f: &Fixture, mirror_listener: bool) -> Arc<ConnContext> {
        if mirror_listener {
            f.mirror.clone()
        } else {
            f.client.clone()
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn same_handling(
        mirror_listener: bool,
        version: i16,
        acks: i16,
        topics: &Topics,
        errors: &[i16],
        endpoints: bool,
        tag: bool,
    ) -> Result<(), TestCaseError> {
        let (request, response) = produce_case(
            mirror_listener,
            version,
            acks,
            topics,
            errors,
            endpoints,
            tag,
        );
        let (old, new) = (fixture(), fixture());
        let (old_ctx, new_ctx) = (pick(&old, mirror_listener), pick(&new, mirror_listener));
        let was = legacy_handle(&old_ctx, request.clone(), response.clone());
        let now = handle(&new_ctx, request, response);
        prop_assert_eq!(&now.forwarded, &was.forwarded);
        prop_assert_eq!(&now.answered, &was.answered);
        prop_assert_eq!(&now.response, &was.response);
        prop_assert_eq!(
            now.error.is_some(),
            was.error.is_some(),
            "{:?} vs {:?}",
            now.error,
            was.error
        );
        prop_assert_eq!(counters(&new_ctx), counters(&old_ctx));
        Ok(())
    }

    fn produce_strategy() -> impl Strategy<Value = (bool, i16, i16, Topics, Vec<i16>, bool, bool)> {
        (
            any::<bool>(),
            prop::sample::select(vec![3i16, 5, 8, 9, 10, 11, 12, 13]),
            prop::sample::select(vec![-1i16, 1, 0]),
            topics_strategy(),
            proptest::collection::vec(prop::sample::select(vec![0i16, 0, 0, 6, 47]), 1..4),
            any::<bool>(),
            any::<bool>(),
        )
    }

    fn metadata_strategy() -> impl Strategy<Value = (bool, i16, Vec<i32>, Vec<(String, u128)>)> {
        (
            any::<bool>(),
            1i16..=12,
            proptest::collection::vec(0i32..12, 0..6),
            proptest::collection::vec(("[a-z]{1,8}", any::<u128>()), 0..4),
        )
    }

    /// One golden case: the frames in, what the handling before the exchanges made of them.
    fn golden_line(
        mirror_listener: bool,
        request: &Bytes,
        response: &Bytes,
        was: &Outcome,
        counters: Vec<String>,
    ) -> String {
        serde_json::json!({
            "listener": if mirror_listener { "mirror" } else { "client" },
            "request": hex(request),
            "response": hex(response),
            "forwarded": was.forwarded.as_ref().map(|f| hex(f)),
            "answered": was.answered.as_ref().map(|f| hex(f)),
            "written": was.response.as_ref().map(|f| hex(f)),
            "error": was.error,
            "counters": counters,
        })
        .to_string()
    }

    /// Records `golden/*.jsonl` from the handling before the exchanges (deterministic: a fixed
    /// seed). Run once, before that handling was removed:
    /// `cargo test --lib record_golden_frames -- --ignored`.
    #[test]
    #[ignore]
    fn record_golden_frames() {
        use proptest::strategy::ValueTree;
        use proptest::test_runner::{RngAlgorithm, TestRng, TestRunner};
        let mut runner = TestRunner::new_with_rng(
            ProptestConfig::default(),
            TestRng::from_seed(RngAlgorithm::ChaCha, &[7; 32]),
        );
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/proxy/exchange/golden");
        std::fs::create_dir_all(&dir).unwrap();
        let mut lines = Vec::new();
        for _ in 0..GOLDEN_CASES {
            let (ml, version, acks, topics, errors, endpoints, tag) =
                produce_strategy().new_tree(&mut runner).unwrap().current();
            let (request, response) =
                produce_case(ml, version, acks, &topics, &errors, endpoints, tag);
            let f = fixture();
            let ctx = pick(&f, ml);
            let was = legacy_handle(&ctx, request.clone(), response.clone());
            let now = handle(&pick(&fixture(), ml), request.clone(), response.clone());
            assert_eq!(now.response, was.response);
            lines.push(golden_line(ml, &request, &response, &was, counters(&ctx)));
        }
        std::fs::write(dir.join("produce.jsonl"), lines.join("\n") + "\n").unwrap();
        let mut lines = Vec::new();
        for _ in 0..GOLDEN_CASES {
            let (ml, version, brokers, topics) =
                metadata_strategy().new_tree(&mut runner).unwrap().current();
            let (request, response) = metadata_case(version, &brokers, &topics);
            let f = fixture();
            let ctx = pick(&f, ml);
            let was = legacy_handle(&ctx, request.clone(), response.clone());
            lines.push(golden_line(ml, &request, &response, &was, counters(&ctx)));
        }
        std::fs::write(dir.join("metadata.jsonl"), lines.join("\n") + "\n").unwrap();
    }

    const GOLDEN_CASES: usize = 64;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]

        #[test]
        fn produce_frames_are_the_same_as_before_the_exchanges(
            mirror_listener in any::<bool>(),
            version in prop::sample::select(vec![3i16, 5, 8, 9, 10, 11, 12, 13]),
            acks in prop::sample::select(vec![-1i16, 1, 0]),
            topics in topics_strategy(),
            errors in proptest::collection::vec(prop::sample::select(vec![0i16, 0, 0, 6, 47]), 1..4),
            endpoints in any::<bool>(),
            tag in any::<bool>(),
        ) {
            same_handling(mirror_listener, version, acks, &topics, &errors, endpoints, tag)?;
        }

        #[test]
        fn rewritten_metadata_responses_are_the_same_as_before_the_exchanges(
            mirror_listener in any::<bool>(),
            version in 1i16..=12,
            brokers in proptest::collection::vec(0i32..12, 0..6),
            topics in proptest::collection::vec(("[a-z]{1,8}", any::<u128>()), 0..4),
        ) {
            let f = fixture();
            let ctx = pick(&f, mirror_listener);
            let (request, response) = metadata_case(version, &brokers, &topics);
            let was = legacy_handle(&ctx, request.clone(), response.clone());
            let now = handle(&ctx, request, response);
            prop_assert_eq!(now, was);
        }
    }
}
