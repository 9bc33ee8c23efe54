//! Mirrors, read-only topics, failover with barriers, and no silent loss afterwards (issue 5),
//! against the real destination cluster.
//!
//! The tests, by behaviour: `read_only.rs` (mirror topics refuse writes until failover),
//! `barrier.rs` (where the barrier lands and who sees it), `collisions.rs` (no loss to mirrored
//! producer ids afterwards), `restart.rs` (a gateway killed at each step; corrupt state). This
//! file holds what they and other test files share: reading a partition's log, mirror configs,
//! the failover calls and waits, producer-id helpers.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use hyper::Method;
use kafka_protocol::records::RecordBatchDecoder;
use mirrorgate::client::KafkaClient;
use mirrorgate::config::{Config, MirrorConfig};
use mirrorgate::protocol::barrier::parse_barrier;
use mirrorgate::protocol::batch::{control_marker, BatchWalker, ControlType};

use crate::gw::{admin_call, admin_call_body, test_config, ProcessGateway, TestGateway};
use crate::harness;
use crate::psm_differential::{batch, RawConn};

mod barrier;
mod collisions;
mod read_only;
mod restart;

/// One record as it lies in the destination log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    pub offset: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub key: Option<String>,
    pub value: Option<String>,
    pub control: bool,
}

/// Everything in a partition's log on any cluster, read directly from its leader (verification
/// only, not a client path).
pub struct PartitionLog {
    /// Every record but the marker records of control barriers.
    pub records: Vec<LogRecord>,
    /// (offset, failover id, mirror) of each barrier, in log order. A control-batch barrier
    /// carries neither: both are empty for it (see `control_barriers`).
    pub barriers: Vec<(i64, String, String)>,
    /// The control-batch barriers: ABORT markers of producer ids that wrote no data to the
    /// partition (a transaction's markers follow its producer's data).
    pub control_barriers: Vec<ControlBatch>,
    /// Every control batch of the log.
    pub control_batches: Vec<ControlBatch>,
}

/// A control batch as it lies in the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControlBatch {
    pub offset: i64,
    /// The batch attributes (0x30: transactional | control).
    pub attributes: i16,
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// ABORT (else COMMIT or another control type).
    pub abort: bool,
    pub coordinator_epoch: Option<i32>,
    pub records: i32,
}

pub fn read_log(bootstrap: &str, topic: &str, partition: i32) -> PartitionLog {
    let addr = harness::leader_addr(bootstrap, topic, partition);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    rt.block_on(async {
        let mut c = KafkaClient::connect(&addr, Duration::from_secs(10))
            .await
            .expect("connect leader");
        let mut out = PartitionLog {
            records: Vec::new(),
            barriers: Vec::new(),
            control_barriers: Vec::new(),
            control_batches: Vec::new(),
        };
        let mut data_producers = std::collections::HashSet::new();
        // From the log start (records deleted below it are not read).
        let mut next = c
            .list_offset(topic, partition, mirrorgate::client::EARLIEST)
            .await
            .expect("log start offset");
        loop {
            let f = c
                .fetch_partition(topic, partition, next, 16 << 20)
                .await
                .expect("fetch");
            if next >= f.high_watermark {
                break;
            }
            let start = next;
            for item in BatchWalker::fetched(&f.records) {
                let (h, b) = item.expect("batch");
                if h.is_control() {
                    let m = control_marker(&h, b).ok().flatten();
                    out.control_batches.push(ControlBatch {
                        offset: h.base_offset,
                        attributes: h.attributes,
                        producer_id: h.producer_id,
                        producer_epoch: h.producer_epoch,
                        abort: m.is_some_and(|m| m.control_type == ControlType::Abort),
                        coordinator_epoch: m.and_then(|m| m.coordinator_epoch),
                        records: h.record_count,
                    });
                } else {
                    data_producers.insert(h.producer_id);
                }
                if let Ok(Some(v)) = parse_barrier(b) {
                    out.barriers.push((h.base_offset, v.failover_id, v.mirror));
                }
                next = h.last_offset() + 1;
            }
            let mut bytes = f.records.clone();
            for set in RecordBatchDecoder::decode_all(&mut bytes).expect("decode records") {
                for r in set.records {
                    out.records.push(LogRecord {
                        offset: r.offset,
                        producer_id: r.producer_id,
                        producer_epoch: r.producer_epoch,
                        key: r.key.map(|k| String::from_utf8_lossy(&k).into_owned()),
                        value: r.value.map(|v| String::from_utf8_lossy(&v).into_owned()),
                        control: r.control,
                    });
                }
            }
            assert!(next > start, "no progress reading {topic}-{partition}");
        }
        out.control_barriers = out
            .control_batches
            .iter()
            .filter(|c| c.abort && !data_producers.contains(&c.producer_id))
            .copied()
            .collect();
        out.barriers.extend(
            out.control_barriers
                .iter()
                .map(|c| (c.offset, String::new(), String::new())),
        );
        out.barriers.sort_by_key(|b| b.0);
        // A control barrier's marker record is no record of the partition's data.
        let markers: std::collections::HashSet<i64> =
            out.control_barriers.iter().map(|c| c.offset).collect();
        out.records
            .retain(|r| !(r.control && markers.contains(&r.offset)));
        out
    })
}

/// A gateway config (client + mirror listener) whose mirror `name` covers `topics`.
pub fn mirror_config(name: &str, topics: &[&str]) -> Config {
    let mut cfg = test_config(&harness::cluster("destination"));
    cfg.mirrors = vec![MirrorConfig {
        name: name.into(),
        topics: topics.iter().map(|t| t.to_string()).collect(),
        source: None,
        transactions: Default::default(),
        configs: Default::default(),
        acls: Default::default(),
        groups: Default::default(),
        recovery: Default::default(),
        forward: None,
        mirroring: Default::default(),
    }];
    cfg.psm.snapshot_interval_ms = 200;
    cfg
}

/// `cfg` with the data barrier (`failover.barrier: data`, the fallback form): for the tests of
/// hiding the barrier from consumers and of carrying it on in chains and failback.
pub fn data_barrier(mut cfg: Config) -> Config {
    cfg.failover.barrier = mirrorgate::config::BarrierMode::Data;
    cfg
}

/// `cfg` without the failover step that advances the brokers' producer-id allocators past the
/// mirrored ids (review F15): for the tests of PID screening, its fallback.
pub fn screening_only(mut cfg: Config) -> Config {
    cfg.failover.pid_allocator.enabled = false;
    cfg
}

pub fn mirror_json(admin: &str, name: &str) -> serde_json::Value {
    let (status, body) = admin_call(admin, Method::GET, &format!("/v1/mirrors/{name}"), None);
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).expect("json")
}

/// Wait until the mirror knows `n` partitions (all MIRRORING) and the gateway is ready.
pub fn wait_mirroring(admin: &str, name: &str, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let m = mirror_json(admin, name);
        if m["states"]["MIRRORING"].as_u64() == Some(n) {
            let (status, _) = admin_call(admin, Method::GET, "/readyz", None);
            if status == 200 {
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "mirror {name} not MIRRORING with {n} partitions: {m}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Call failover; returns the failover id.
pub fn failover(admin: &str, name: &str) -> String {
    let (status, body) = admin_call(
        admin,
        Method::POST,
        &format!("/v1/mirrors/{name}/failover"),
        None,
    );
    assert_eq!(status, 202, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("json");
    v["failover_id"].as_str().expect("failover id").to_string()
}

/// Switch mirror `name` over through the admin API at `admin` (`202` asserted), and wait until
/// every partition is STOPPED.
pub fn switchover(admin: &str, name: &str) {
    let (status, body) = admin_call(
        admin,
        Method::POST,
        &format!("/v1/mirrors/{name}/switchover"),
        None,
    );
    assert_eq!(status, 202, "switchover: {body}");
    wait_stopped(admin, name);
}

/// The barrier offset the mirror at `admin` reports for partition 0 of `topic`.
pub fn reported_barrier(admin: &str, mirror: &str, topic: &str) -> i64 {
    recorded_barrier(admin, mirror, topic)
        .unwrap_or_else(|| panic!("no barrier offset for {topic}-0 on {admin}"))
}

/// The barrier offset partition 0 of `topic` has recorded on the gateway at `admin` so far.
pub fn recorded_barrier(admin: &str, mirror: &str, topic: &str) -> Option<i64> {
    let (status, body) = crate::gw::admin_call(
        admin,
        hyper::Method::GET,
        &format!("/v1/mirrors/{mirror}/partitions"),
        None,
    );
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("json");
    v["partitions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["topic"] == topic && p["partition"] == 0)
        .and_then(|p| p["barrier_offset"].as_i64())
}

/// Wait until every partition of the mirror is STOPPED.
pub fn wait_stopped(admin: &str, name: &str) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let m = mirror_json(admin, name);
        if m["partitions"].as_u64().is_some_and(|n| n > 0)
            && m["states"]["STOPPED"] == m["partitions"]
        {
            return m;
        }
        if Instant::now() >= deadline {
            let (_, parts) = admin_call(
                admin,
                Method::GET,
                &format!("/v1/mirrors/{name}/partitions"),
                None,
            );
            panic!("mirror {name} not STOPPED on {admin}: {m}\npartitions: {parts}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The next 30 producer ids of each destination broker's id block (each broker allocates from a
/// block of its own, and a transaction coordinator uses its broker's block).
fn next_producer_ids(port_for: impl Fn(i32) -> u16) -> Vec<i64> {
    let mut ids = Vec::new();
    for node in [1, 2] {
        let next = next_producer_id(&format!("127.0.0.1:{}", port_for(node)));
        ids.extend(next..next + 30);
    }
    ids.sort();
    ids.dedup();
    ids
}

/// The producer id the destination hands out next (an InitProducerId through the gateway).
fn next_producer_id(addr: &str) -> i64 {
    fresh_producer_id(addr) + 1
}

/// One fresh idempotent producer id from `addr` (retrying the answers a broker gives while it
/// fetches its next block of ids).
pub fn fresh_producer_id(addr: &str) -> i64 {
    use kafka_protocol::messages::InitProducerIdRequest;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    rt.block_on(async {
        let mut c = KafkaClient::connect(addr, Duration::from_secs(10))
            .await
            .expect("connect");
        // A freshly started cluster answers COORDINATOR_LOAD_IN_PROGRESS (14) or
        // COORDINATOR_NOT_AVAILABLE (15) for a while: retriable, so retry for up to 30 s.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let r = c
                .send(
                    &InitProducerIdRequest::default()
                        .with_transactional_id(None)
                        .with_transaction_timeout_ms(60_000)
                        .with_producer_id((-1).into())
                        .with_producer_epoch(-1),
                    4,
                )
                .await
                .expect("init producer id");
            if matches!(r.error_code, 14 | 15) && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            assert_eq!(r.error_code, 0, "InitProducerId from {addr}");
            return r.producer_id.0;
        }
    })
}

/// Produce one record with librdkafka; returns the delivery error text (panics on success).
pub fn produce_one_expect_error(bootstrap: &str, topic: &str) -> String {
    use rdkafka::config::ClientConfig;
    use rdkafka::producer::{FutureProducer, FutureRecord};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    rt.block_on(async {
        let p: FutureProducer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("enable.idempotence", "true")
            .set("message.timeout.ms", "20000")
            .create()
            .expect("producer");
        // A refusal the client retried would end in a timeout error, not the refusal's.
        let r = p
            .send(
                FutureRecord::to(topic).key("k").payload("v").partition(0),
                Duration::from_secs(20),
            )
            .await;
        match r {
            Ok(d) => panic!("produce to {topic} was accepted: {d:?}"),
            Err((e, _)) => e.to_string(),
        }
    })
}

/// One librdkafka producer: a send to a read-only topic fails with the refusal (callers check its
/// kind: a refusal the client retried ends in a timeout error), and a send to another topic right
/// after succeeds. Returns the refusal's error text.
pub fn same_producer_refused_then_other(bootstrap: &str, refused: &str, other: &str) -> String {
    use rdkafka::config::ClientConfig;
    use rdkafka::producer::{FutureProducer, FutureRecord};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    rt.block_on(async {
        let p: FutureProducer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("enable.idempotence", "true")
            .set("message.timeout.ms", "20000")
            .create()
            .expect("producer");
        // A refusal the client retried would end in a timeout error, not the refusal's.
        let err = match p
            .send(
                FutureRecord::to(refused).key("k").payload("v").partition(0),
                Duration::from_secs(20),
            )
            .await
        {
            Ok(d) => panic!("produce to {refused} accepted: {d:?}"),
            Err((e, _)) => e.to_string(),
        };
        for i in 0..5 {
            let key = format!("after-{i}");
            p.send(
                FutureRecord::to(other).key(&key).payload("v"),
                Duration::from_secs(20),
            )
            .await
            .unwrap_or_else(|(e, _)| {
                panic!("the same producer failed on {other} after the refusal: {e}")
            });
        }
        err
    })
}

/// The producer ids in a gateway's PID screening set (`STATE_DIR/screen/pids.json`).
pub fn screened_ids(state_dir: &std::path::Path) -> std::collections::BTreeSet<i64> {
    let file = state_dir.join("screen/pids.json");
    let screen: BTreeMap<String, serde_json::Value> =
        serde_json::from_slice(&std::fs::read(&file).expect("screen/pids.json"))
            .expect("screening set");
    screen
        .keys()
        .map(|k| k.parse().expect("a producer id"))
        .collect()
}

/// A metric of a gateway process (0 when absent).
pub fn process_metric(gw: &ProcessGateway, series: &str) -> f64 {
    let (_, body) = gw.call(Method::GET, "/metrics");
    body.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok()))
        .unwrap_or(0.0)
}

/// Set topic configs directly on the destination (legacy AlterConfigs replaces the topic's
/// dynamic configs) and wait until every broker reports them.
pub fn set_topic_configs_on_the_destination(
    destination: &str,
    topic: &str,
    configs: &[(&str, &str)],
) {
    use kafka_protocol::messages::alter_configs_request::{AlterConfigsResource, AlterableConfig};
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    use kafka_protocol::messages::{AlterConfigsRequest, DescribeConfigsRequest};
    use kafka_protocol::protocol::StrBytes;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    let brokers = harness::brokers(destination);
    rt.block_on(async {
        let mut c = KafkaClient::connect(&brokers[0].1, Duration::from_secs(10))
            .await
            .expect("connect");
        let r = c
            .send(
                &AlterConfigsRequest::default().with_resources(vec![
                    AlterConfigsResource::default()
                        .with_resource_type(2)
                        .with_resource_name(StrBytes::from_string(topic.to_string()))
                        .with_configs(
                            configs
                                .iter()
                                .map(|(k, v)| {
                                    AlterableConfig::default()
                                        .with_name(StrBytes::from_string(k.to_string()))
                                        .with_value(Some(StrBytes::from_string(v.to_string())))
                                })
                                .collect(),
                        ),
                ]),
                2,
            )
            .await
            .expect("alter configs");
        assert_eq!(r.responses[0].error_code, 0, "{:?}", r.responses[0]);
        for (_, addr) in &brokers {
            let mut c = KafkaClient::connect(addr, Duration::from_secs(10))
                .await
                .expect("connect");
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let r = c
                    .send(
                        &DescribeConfigsRequest::default().with_resources(vec![
                            DescribeConfigsResource::default()
                                .with_resource_type(2)
                                .with_resource_name(StrBytes::from_string(topic.to_string()))
                                .with_configuration_keys(None),
                        ]),
                        4,
                    )
                    .await
                    .expect("describe configs");
                let have = |k: &str, v: &str| {
                    r.results[0].configs.iter().any(|c| {
                        c.name.as_str() == k && c.value.as_ref().map(|x| x.as_str()) == Some(v)
                    })
                };
                if configs.iter().all(|(k, v)| have(k, v)) {
                    break;
                }
                assert!(Instant::now() < deadline, "configs not applied on {addr}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    });
}

/// Every acknowledged local record is in partition 0's log under its key, after the barrier.
fn assert_acked_after_barrier(destination: &str, topic: &str, acks: &[harness::Acked]) {
    let log = read_log(destination, topic, 0);
    assert_eq!(log.barriers.len(), 1, "barriers {:?}", log.barriers);
    let barrier = log.barriers[0].0;
    for a in acks {
        let r = log
            .records
            .iter()
            .find(|r| r.offset == a.offset)
            .unwrap_or_else(|| panic!("acked {a:?} not in the log"));
        assert_eq!(
            r.key.as_deref(),
            Some(a.key.as_str()),
            "acked {a:?} but the log holds {r:?}"
        );
        assert!(
            a.offset > barrier,
            "acked {a:?} before the barrier {barrier}"
        );
    }
}
