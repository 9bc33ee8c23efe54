//! Mirrors, read-only topics, failover with barriers, and no silent loss afterwards (issue 5),
//! against the real destination cluster.

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

/// One record as it lies in the destination log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    pub offset: i64,
    pub producer_id: i64,
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
        let mut next = 0;
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
        assert!(Instant::now() < deadline, "mirror {name} not STOPPED: {m}");
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

#[test]
fn hazard_the_broker_acknowledges_a_colliding_producer_and_appends_nothing() {
    // Pins the failure on the pinned Kafka version, directly against the broker (no gateway).
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("hazard");
    harness::create_topic(&destination, &topic, 1, Some(&[1]));
    let broker = harness::destination_brokers()
        .into_iter()
        .find(|(n, _)| *n == 1)
        .expect("broker 1")
        .1;
    let mut conn = RawConn::connect(&broker);
    let x = 8_000_000 + (std::process::id() as i64 % 1000) * 10;
    // Mirrored batches of producer X, epoch 0, stored as-is.
    let mut mirrored = Vec::new();
    for seq in 0..3 {
        let (code, offset) =
            conn.produce(&topic, 0, batch(x, 0, seq, 1, &format!("mirrored{seq}")));
        assert_eq!(code, 0);
        mirrored.push(offset);
    }
    // A local producer handed X, epoch 0, sends its first single-record batch (sequence 0).
    let (code, offset) = conn.produce(&topic, 0, batch(x, 0, 0, 1, "local"));
    assert_eq!(code, 0, "the broker acknowledges the local batch");
    assert_eq!(
        offset, mirrored[0],
        "acknowledged with the mirrored batch's offset"
    );
    let log = read_log(&destination, &topic, 0);
    assert_eq!(
        log.records.len(),
        3,
        "nothing was appended: {:?}",
        log.records
    );
    assert!(
        log.records
            .iter()
            .all(|r| r.key.as_deref() != Some("local-0")),
        "the local record is not in the log"
    );
}

#[test]
fn local_produce_is_rejected_while_mirroring_and_accepted_after_failover() {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("ro");
    let other = harness::unique_topic("rw");
    harness::create_topic(&destination, &topic, 2, Some(&[1, 2]));
    harness::create_topic(&destination, &other, 1, None);
    let gw = TestGateway::start(mirror_config("ro", &[&topic]));
    wait_mirroring(&gw.admin(), "ro", 2);
    // librdkafka: rejected with a non-retriable error (it does not surface the message).
    let err = produce_one_expect_error(&gw.bootstrap(), &topic);
    assert!(err.contains("PolicyViolation"), "{err}");
    // Java: rejected fast, with the message naming the mirror and the state.
    let out = harness::rig_java(
        "org.apache.kafka.tools.VerifiableProducer",
        &[
            "--bootstrap-server",
            &gw.bootstrap(),
            "--topic",
            &topic,
            "--max-messages",
            "3",
            "--acks",
            "-1",
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let errors: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("producer_send_error"))
        .collect();
    assert_eq!(errors.len(), 3, "{text}");
    assert!(
        errors
            .iter()
            .all(|e| e.contains("mirror ro") && e.contains("MIRRORING")),
        "{errors:?}"
    );
    assert!(!text.contains("producer_send_success"), "{text}");
    // The same kind of producer keeps working for other topics.
    assert_eq!(
        harness::produce_keyed(&gw.bootstrap(), &other, 10, &[]).len(),
        10
    );
    // Mirror produce is accepted while MIRRORING.
    assert_eq!(
        harness::produce_keyed(&gw.mirror_bootstrap(), &topic, 10, &[]).len(),
        10
    );
    failover(&gw.admin(), "ro");
    wait_stopped(&gw.admin(), "ro");
    assert_eq!(
        harness::produce_keyed(&gw.bootstrap(), &topic, 10, &[]).len(),
        10,
        "writable after failover"
    );
    let err = produce_one_expect_error(&gw.mirror_bootstrap(), &topic);
    assert!(
        err.contains("PolicyViolation"),
        "mirror produce after failover: {err}"
    );
    let out = harness::rig_java(
        "org.apache.kafka.tools.VerifiableProducer",
        &[
            "--bootstrap-server",
            &gw.mirror_bootstrap(),
            "--topic",
            &topic,
            "--max-messages",
            "1",
            "--acks",
            "-1",
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("fenced") && text.contains("STOPPED"),
        "{text}"
    );
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

#[test]
fn consumers_through_the_gateway_never_see_the_barrier_but_mirror_listener_consumers_do() {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("hide");
    harness::create_topic(&destination, &topic, 1, Some(&[1]));
    // The data barrier (the fallback form); a control barrier every consumer skips natively
    // (`a_failover_writes_a_control_batch_barrier_every_consumer_skips_natively`).
    let gw = TestGateway::start(data_barrier(mirror_config("hide", &[&topic])));
    wait_mirroring(&gw.admin(), "hide", 1);
    harness::produce_keyed(&gw.mirror_bootstrap(), &topic, 20, &[]);
    failover(&gw.admin(), "hide");
    wait_stopped(&gw.admin(), "hide");
    harness::produce_keyed(
        &gw.bootstrap(),
        &topic,
        5,
        &[("enable.idempotence", "false")],
    );
    let log = read_log(&destination, &topic, 0);
    assert_eq!(log.barriers.len(), 1, "one barrier in the log");
    // An ordinary consumer reads 25 records and no barrier, and its position moves past it.
    let consumed = harness::consume_group(
        &gw.bootstrap(),
        &topic,
        &format!("{topic}-c"),
        26,
        Duration::from_secs(15),
        &[],
    );
    let records: Vec<&harness::Consumed> = consumed.values().flatten().collect();
    assert_eq!(records.len(), 25, "{records:?}");
    assert!(records
        .iter()
        .all(|r| r.key.as_deref() != Some("__mirrorgate_barrier")));
    // A consumer on the mirror listener sees the barrier record.
    let mirrored = harness::consume_group(
        &gw.mirror_bootstrap(),
        &topic,
        &format!("{topic}-m"),
        26,
        Duration::from_secs(15),
        &[],
    );
    let keys: Vec<Option<String>> = mirrored.values().flatten().map(|r| r.key.clone()).collect();
    assert!(
        keys.contains(&Some("__mirrorgate_barrier".to_string())),
        "{keys:?}"
    );
}

/// A topic behind a gateway whose data barrier is hidden from client-listener consumers: 20
/// mirrored records, the barrier, 5 local ones.
struct HiddenBarrier {
    gw: TestGateway,
    topic: String,
    /// (offset, value) of every record but the barrier, in log order.
    expected: Vec<(i64, Option<String>)>,
    /// The log end offset (past the barrier and every record).
    end: i64,
}

fn hidden_barrier(prefix: &str) -> HiddenBarrier {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic(prefix);
    harness::create_topic(&destination, &topic, 1, Some(&[1]));
    let mirror = prefix.replace('-', "");
    let gw = TestGateway::start(data_barrier(mirror_config(&mirror, &[&topic])));
    wait_mirroring(&gw.admin(), &mirror, 1);
    harness::produce_keyed(&gw.mirror_bootstrap(), &topic, 20, &[]);
    failover(&gw.admin(), &mirror);
    wait_stopped(&gw.admin(), &mirror);
    harness::produce_keyed(
        &gw.bootstrap(),
        &topic,
        5,
        &[("enable.idempotence", "false")],
    );
    let log = read_log(&destination, &topic, 0);
    assert_eq!(log.barriers.len(), 1, "one data barrier in the log");
    let barrier = log.barriers[0].0;
    let expected: Vec<(i64, Option<String>)> = log
        .records
        .iter()
        .filter(|r| r.offset != barrier)
        .map(|r| (r.offset, r.value.clone()))
        .collect();
    assert_eq!(expected.len(), 25, "20 mirrored + 5 local records");
    let end = log.records.iter().map(|r| r.offset).max().expect("records") + 1;
    assert!(
        barrier < end - 1,
        "the barrier is inside the log, not at its end"
    );
    HiddenBarrier {
        gw,
        topic,
        expected,
        end,
    }
}

impl HiddenBarrier {
    /// Check a consumer's JSON lines (python_consume.py / Consume.java): every record but the
    /// barrier, in order, never the barrier, and the position past the log end. A failure shows
    /// the client's own log (stderr).
    fn check_consumer(&self, who: &str, out: &std::process::Output) {
        let lines = harness::json_lines(&out.stdout);
        let who = format!("{who} (its log: {})", String::from_utf8_lossy(&out.stderr));
        let got: Vec<(i64, Option<String>)> = lines
            .iter()
            .filter_map(|l| {
                Some((
                    l.get("offset")?.as_i64()?,
                    l["value"].as_str().map(str::to_string),
                ))
            })
            .collect();
        assert!(
            lines
                .iter()
                .all(|l| l["key"].as_str() != Some("__mirrorgate_barrier")),
            "{who} saw the barrier: {got:?}"
        );
        assert_eq!(got, self.expected, "{who}: the records read");
        let done = lines.last().expect("done line");
        assert_eq!(
            done["positions"]["0"].as_i64(),
            Some(self.end),
            "{who}: the consumer's position is past the log end: {done}"
        );
    }
}

/// kafka-python consumers through the client listener, at both isolation levels, read every
/// record across a hidden data barrier, never the barrier, and end positioned past the log end
/// (the barrier's offset is skipped, not waited on).
#[test]
fn kafka_python_consumers_through_the_gateway_read_across_the_hidden_barrier() {
    let python = crate::pid_allocator::python_interpreter();
    let h = hidden_barrier("pyhide");
    for isolation in ["read_uncommitted", "read_committed"] {
        let mut cmd = std::process::Command::new(&python);
        cmd.arg(harness::repo().join("integration/clients/python_consume.py"))
            .args([
                h.gw.bootstrap(),
                h.topic.clone(),
                format!("{}-{isolation}", h.topic),
                "25".to_string(),
                isolation.to_string(),
                "30000".to_string(),
            ]);
        let out = harness::run_with_timeout(cmd, Duration::from_secs(90));
        harness::expect_success("python_consume.py", &out);
        h.check_consumer(&format!("kafka-python at {isolation}"), &out);
    }
}

/// The Kafka Java consumer through the client listener, at both isolation levels, reads every
/// record across a hidden data barrier, never the barrier, and ends positioned past the log end.
#[test]
fn java_consumers_through_the_gateway_read_across_the_hidden_barrier() {
    let h = hidden_barrier("javahide");
    let source = harness::repo().join("integration/clients/java/Consume.java");
    for isolation in ["read_uncommitted", "read_committed"] {
        let group = format!("{}-{isolation}", h.topic);
        let out = harness::rig_java(
            source.to_str().expect("utf-8 path"),
            &[
                &h.gw.bootstrap(),
                &h.topic,
                &group,
                "25",
                isolation,
                "30000",
            ],
        );
        harness::expect_success("Consume.java", &out);
        h.check_consumer(&format!("the Java consumer at {isolation}"), &out);
    }
}

/// Ids the collision tests mirror per broker, from its next id on. Tests running alongside take
/// ids from the same brokers between the look-up and the local producers' InitProducerId
/// (review 3.1), so the range reaches well past the next few.
const COLLIDING_IDS_PER_BROKER: i64 = 300;
/// The first ids of that range are mirrored every one (a local producer handed one of them
/// surely collides); past them, every ninth is left free, so an idempotent producer screened
/// there finds a free id within the 8 fresh ids screening asks for.
const DENSE_COLLIDING_IDS: i64 = 30;

/// The producer ids each destination broker hands out next (see `COLLIDING_IDS_PER_BROKER`):
/// every one of them when `dense`, else the first `DENSE_COLLIDING_IDS` and then runs of 8.
fn colliding_ids(port_for: impl Fn(i32) -> u16, dense: bool) -> Vec<i64> {
    let mut ids = Vec::new();
    for node in [1, 2] {
        let next = next_producer_id(&format!("127.0.0.1:{}", port_for(node)));
        ids.extend(
            (0..COLLIDING_IDS_PER_BROKER)
                .filter(|i| dense || *i < DENSE_COLLIDING_IDS || (i - DENSE_COLLIDING_IDS) % 9 != 8)
                .map(|i| next + i),
        );
    }
    ids.sort();
    ids.dedup();
    ids
}

/// Mirror one single-record batch per (producer id, epoch, sequence) of `batches`, in order,
/// into `partition` of `topic` through the mirror listener at `addr` (pipelined in chunks).
fn mirror_batches(addr: &str, topic: &str, partition: i32, batches: &[(i64, i16, i32)]) {
    let mut conn = RawConn::connect(addr);
    for chunk in batches.chunks(200) {
        let answers = conn.produce_pipelined(
            topic,
            partition,
            chunk
                .iter()
                .map(|(pid, epoch, seq)| batch(*pid, *epoch, *seq, 1, &format!("m{pid}")))
                .collect(),
        );
        for ((pid, _, seq), (code, _)) in chunk.iter().zip(answers) {
            assert_eq!(
                code, 0,
                "mirror produce pid {pid} seq {seq} to {topic}-{partition}"
            );
        }
    }
}

#[test]
fn after_failover_new_idempotent_producers_lose_nothing_to_colliding_producer_ids() {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("collide");
    harness::create_topic(&destination, &topic, 2, Some(&[1, 2]));
    // PID screening alone, and the data barrier: a control barrier's producer id is asked for
    // until one no mirrored producer uses, which takes the colliding ids from the broker's
    // allocator as the allocator advance would.
    let gw = TestGateway::start(data_barrier(screening_only(mirror_config(
        "collide",
        &[&topic],
    ))));
    wait_mirroring(&gw.admin(), "collide", 2);
    // Mirror the producer ids the destination will hand out next, as a mirrored cluster would
    // (single-record batches, sequences 0..3, epoch 0): exactly the hazard's shape.
    let ids = colliding_ids(|n| gw.port_for(n), false);
    let batches: Vec<(i64, i16, i32)> = ids
        .iter()
        .flat_map(|pid| (0..3).map(move |seq| (*pid, 0, seq)))
        .collect();
    let leaders = harness::partition_leaders(&destination, &topic);
    std::thread::scope(|s| {
        for (p, leader) in &leaders {
            let addr = format!("127.0.0.1:{}", gw.mirror_port_for(*leader));
            let (topic, batches) = (&topic, &batches);
            s.spawn(move || mirror_batches(&addr, topic, *p, batches));
        }
    });
    failover(&gw.admin(), "collide");
    wait_stopped(&gw.admin(), "collide");
    // librdkafka and Java producers started right after the failover.
    let acks = harness::produce_keyed(
        &gw.bootstrap(),
        &topic,
        200,
        &[("linger.ms", "0"), ("batch.num.messages", "1")],
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let props = dir.path().join("p.properties");
    std::fs::write(
        &props,
        "enable.idempotence=true\nacks=all\nretries=2147483647\nlinger.ms=0\nbatch.size=1\n",
    )
    .expect("props");
    let out = harness::rig_java(
        "org.apache.kafka.tools.VerifiableProducer",
        &[
            "--bootstrap-server",
            &gw.bootstrap(),
            "--topic",
            &topic,
            "--max-messages",
            "200",
            "--acks",
            "-1",
            "--producer.config",
            props.to_str().expect("path"),
        ],
    );
    harness::expect_success("VerifiableProducer after failover", &out);
    // (partition, offset, value) of each Java acknowledgement.
    let java_acked: Vec<(i32, i64, String)> = harness::json_lines(&out.stdout)
        .into_iter()
        .filter(|e| e["name"] == "producer_send_success")
        .map(|e| {
            (
                e["partition"].as_i64().unwrap_or(-1) as i32,
                e["offset"].as_i64().unwrap_or(-1),
                e["value"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert_eq!(java_acked.len(), 200, "every Java record acknowledged");
    assert!(
        gw.metric("mirrorgate_pid_screened_total") >= 1.0,
        "no producer id was screened (did tests alongside take all {} mirrored ids?):\n{}",
        ids.len(),
        gw.metrics()
    );
    // Every acknowledged local record is in the log at its offset, after the barrier.
    let mut by_offset: BTreeMap<(i32, i64), LogRecord> = BTreeMap::new();
    let mut local: Vec<LogRecord> = Vec::new();
    for p in 0..2 {
        let log = read_log(&destination, &topic, p);
        assert_eq!(log.barriers.len(), 1, "partition {p}: {:?}", log.barriers);
        let barrier = log.barriers[0].0;
        for r in log.records {
            if r.offset > barrier {
                local.push(r.clone());
            }
            by_offset.insert((p, r.offset), r);
        }
    }
    for a in &acks {
        let r = by_offset
            .get(&(a.partition, a.offset))
            .unwrap_or_else(|| panic!("acked {a:?} not in the log"));
        assert_eq!(
            r.key.as_deref(),
            Some(a.key.as_str()),
            "acked {a:?} but the log holds {r:?}"
        );
    }
    for (p, o, value) in &java_acked {
        let r = by_offset
            .get(&(*p, *o))
            .unwrap_or_else(|| panic!("Java acked {value:?} at {p}/{o}: not in the log"));
        assert_eq!(
            (r.key.as_deref(), r.value.as_deref()),
            (None, Some(value.as_str())),
            "Java acked {value:?} at {p}/{o} but the log holds {r:?}"
        );
    }
    // After the barriers the logs hold exactly the 400 local records, each once.
    let mut seen: BTreeMap<(Option<String>, Option<String>), usize> = BTreeMap::new();
    for r in &local {
        *seen.entry((r.key.clone(), r.value.clone())).or_default() += 1;
    }
    let mut expected: BTreeMap<(Option<String>, Option<String>), usize> = (0..200)
        .map(|i| ((Some(format!("key-{i}")), Some(format!("value-{i}"))), 1))
        .collect();
    expected.extend((0..200).map(|i| ((None, Some(i.to_string())), 1)));
    assert_eq!(seen, expected, "the local records after the barriers");
    // Each local record came from a producer id no mirrored producer used.
    let mirrored: std::collections::BTreeSet<i64> = ids.iter().copied().collect();
    let colliding: Vec<&LogRecord> = local
        .iter()
        .filter(|r| mirrored.contains(&r.producer_id))
        .collect();
    assert!(
        colliding.is_empty(),
        "local records written with mirrored producer ids: {colliding:?}"
    );
    assert_eq!(
        gw.metric("mirrorgate_duplicate_ack_guard_total"),
        0.0,
        "screening alone prevented the collisions"
    );
}

/// The last layer: a producer id the gateway does not know as mirrored (here removed from the
/// screening set while the gateway was down, as a state directory restored from an older copy
/// would) reaches the broker, which acknowledges the local batch as a duplicate of a mirrored
/// one with an offset before the barrier. The gateway turns that acknowledgement into an error.
#[test]
fn the_duplicate_ack_guard_alone_prevents_a_false_acknowledgement() {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("guard");
    harness::create_topic(&destination, &topic, 1, Some(&[1]));
    let mut gw = ProcessGateway::start(mirror_config("guard", &[&topic]), &[]);
    wait_mirroring(&gw.admin(), "guard", 1);
    let x = 9_000_000 + (std::process::id() as i64 % 1000) * 10;
    let mut mirror = RawConn::connect(&gw.mirror_bootstrap());
    for seq in 0..3 {
        assert_eq!(
            mirror
                .produce(&topic, 0, batch(x, 0, seq, 1, &format!("m{seq}")))
                .0,
            0
        );
    }
    drop(mirror);
    failover(&gw.admin(), "guard");
    wait_stopped(&gw.admin(), "guard");
    gw.kill9();
    let file = gw.config.state_dir.join("screen/pids.json");
    let mut screen: BTreeMap<String, serde_json::Value> =
        serde_json::from_slice(&std::fs::read(&file).expect("screen/pids.json")).expect("json");
    assert!(screen.remove(&x.to_string()).is_some(), "{x} was screened");
    std::fs::write(&file, serde_json::to_vec(&screen).expect("json")).expect("write");
    gw.restart(&[]);
    assert!(
        !screened_ids(&gw.config.state_dir).contains(&x),
        "the restarted gateway screens {x} again: the guard would not be alone"
    );
    // Screening bypassed on purpose: a produce with the mirrored id and no InitProducerId.
    let mut local = RawConn::connect(&gw.bootstrap());
    let (code, _) = local.produce(&topic, 0, batch(x, 0, 0, 1, "local"));
    assert_eq!(
        code, 45,
        "the false acknowledgement is turned into OUT_OF_ORDER_SEQUENCE_NUMBER"
    );
    assert_eq!(
        process_metric(&gw, "mirrorgate_duplicate_ack_guard_total"),
        1.0
    );
    let log = read_log(&destination, &topic, 0);
    assert!(log
        .records
        .iter()
        .all(|r| r.key.as_deref() != Some("local-0")));
}

/// What one mirror writer of the load test saw: (offset, key) of each acknowledged record, and
/// how many of its writes were refused.
struct LoadWriter {
    acked: Vec<(i64, String)>,
    refused: usize,
}

#[test]
fn failover_under_load_puts_every_mirrored_record_before_the_barrier() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("load");
    harness::create_topic(&destination, &topic, 2, Some(&[1, 2]));
    let gw = TestGateway::start(mirror_config("load", &[&topic]));
    wait_mirroring(&gw.admin(), "load", 2);
    // A mirror tool writes continuously through the mirror listener: one writer per partition,
    // each on the mirror port of the partition's leader.
    let leaders = harness::partition_leaders(&destination, &topic);
    assert_eq!(leaders.len(), 2, "{leaders:?}");
    let stop = Arc::new(AtomicBool::new(false));
    let progress: Arc<[AtomicUsize; 2]> = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
    let writers: Vec<_> = leaders
        .iter()
        .map(|(p, leader)| {
            let (p, addr, t) = (
                *p,
                format!("127.0.0.1:{}", gw.mirror_port_for(*leader)),
                topic.clone(),
            );
            let (stop, progress) = (stop.clone(), progress.clone());
            std::thread::spawn(move || {
                let mut w = LoadWriter {
                    acked: Vec::new(),
                    refused: 0,
                };
                let mut conn = RawConn::connect(&addr);
                let pid = 7_700_001 + i64::from(p) + (std::process::id() as i64 % 1000) * 10;
                let mut seq = 0;
                let mut i = 0;
                while !stop.load(Ordering::SeqCst) && w.refused < 20 {
                    let tag = format!("load{p}-{i}");
                    let (code, offset) = conn.produce(&t, p, batch(pid, 0, seq, 1, &tag));
                    if code == 0 {
                        w.acked.push((offset, format!("{tag}-0")));
                        seq += 1;
                        progress[p as usize].fetch_add(1, Ordering::SeqCst);
                    } else {
                        w.refused += 1;
                    }
                    i += 1;
                }
                (p, w)
            })
        })
        .collect();
    // The failover starts once both writers are under way.
    let deadline = Instant::now() + Duration::from_secs(30);
    while progress.iter().any(|n| n.load(Ordering::SeqCst) < 20) {
        assert!(
            Instant::now() < deadline,
            "the mirror writers made no progress: {progress:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    failover(&gw.admin(), "load");
    wait_stopped(&gw.admin(), "load");
    stop.store(true, Ordering::SeqCst);
    let written: BTreeMap<i32, LoadWriter> = writers
        .into_iter()
        .map(|w| w.join().expect("writer"))
        .collect();
    let local = harness::produce_keyed(&gw.bootstrap(), &topic, 100, &[]);
    for p in 0..2 {
        let w = &written[&p];
        let log = read_log(&destination, &topic, p);
        assert_eq!(log.barriers.len(), 1, "partition {p}: {:?}", log.barriers);
        let barrier = log.barriers[0].0;
        let seen: BTreeMap<i64, &LogRecord> = log.records.iter().map(|r| (r.offset, r)).collect();
        for (offset, key) in &w.acked {
            assert!(
                *offset < barrier,
                "partition {p}: acknowledged mirrored record at {offset} after the barrier at {barrier}"
            );
            assert_eq!(
                seen.get(offset).and_then(|r| r.key.as_deref()),
                Some(key.as_str()),
                "partition {p}, offset {offset}"
            );
        }
        let mirrored: Vec<&LogRecord> = log
            .records
            .iter()
            .filter(|r| r.key.as_deref().is_some_and(|k| k.starts_with("load")))
            .collect();
        assert!(
            mirrored.iter().all(|r| r.offset < barrier),
            "partition {p}: a mirrored record after the barrier at {barrier}"
        );
        assert_eq!(
            mirrored.len(),
            w.acked.len(),
            "partition {p}: each acknowledged mirrored record once, nothing else mirrored"
        );
        assert!(
            w.refused > 0,
            "partition {p}: the mirror writer was not writing when the failover fenced it"
        );
        let local_p: Vec<&harness::Acked> = local.iter().filter(|a| a.partition == p).collect();
        assert!(!local_p.is_empty(), "no local record went to partition {p}");
        for a in local_p {
            assert!(
                a.offset > barrier,
                "partition {p}: local {a:?} before the barrier"
            );
            assert_eq!(
                seen.get(&a.offset).and_then(|r| r.key.as_deref()),
                Some(a.key.as_str()),
                "partition {p}: local record present exactly once"
            );
        }
    }
}

#[test]
fn admin_api_refuses_bad_failover_calls_with_clear_4xx() {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("adm");
    harness::create_topic(&destination, &topic, 1, None);
    let mut cfg = mirror_config("adm", &[&topic]);
    cfg.admin.token = Some(mirrorgate::config::SecretSource {
        value: Some("s3cret".into()),
        env: None,
        file: None,
    });
    let gw = TestGateway::start(cfg);
    let admin = gw.admin();
    wait_mirroring(&admin, "adm", 1);
    let call =
        |method: Method, path: &str, token: Option<&str>| admin_call(&admin, method, path, token);
    let (s, b) = call(Method::POST, "/v1/mirrors/adm/failover", None);
    assert_eq!(s, 401, "{b}");
    let (s, b) = call(Method::POST, "/v1/mirrors/adm/failover", Some("wrong"));
    assert_eq!(s, 403, "{b}");
    let (s, b) = call(Method::POST, "/v1/mirrors/nope/failover", Some("s3cret"));
    assert_eq!(s, 404, "{b}");
    assert!(b.contains("nope"));
    let (s, b) = admin_call_body(
        &admin,
        Method::POST,
        "/v1/mirrors/adm/failover",
        Some("s3cret"),
        "{not json",
    );
    assert_eq!(s, 400, "{b}");
    assert!(b.contains("malformed JSON"), "{b}");
    let (s, b) = call(Method::GET, "/v1/mirrors/adm/failover", Some("s3cret"));
    assert_eq!(s, 405, "{b}");
    let (s, b) = call(Method::POST, "/v1/mirrors/adm/failover", Some("s3cret"));
    assert_eq!(s, 202, "{b}");
    let v: serde_json::Value = serde_json::from_str(&b).expect("json");
    let fid = v["failover_id"].as_str().expect("failover id").to_string();
    // Repeating is harmless: it joins the same failover (202) or reports it completed (409).
    let (s2, b2) = call(Method::POST, "/v1/mirrors/adm/failover", Some("s3cret"));
    match s2 {
        202 => {
            let v: serde_json::Value = serde_json::from_str(&b2).expect("json");
            assert_eq!(v["failover_id"], fid.as_str(), "the repeat joins: {b2}");
            assert_eq!(v["already_running"], true, "{b2}");
        }
        409 => assert!(
            b2.contains("already stopped") && b2.contains(&fid),
            "the repeat names the completed failover {fid}: {b2}"
        ),
        _ => panic!("repeating the failover call: {s2} {b2}"),
    }
    wait_stopped(&admin, "adm");
    let (s, b) = call(Method::POST, "/v1/mirrors/adm/failover", Some("s3cret"));
    assert_eq!(s, 409, "{b}");
    assert!(b.contains("already stopped"), "{b}");
    assert!(b.contains(&fid), "the completed failover is {fid}: {b}");
    assert_eq!(
        mirror_json(&admin, "adm")["failover_id"],
        fid.as_str(),
        "the mirror records the first call's failover"
    );
    let log = read_log(&destination, &topic, 0);
    assert_eq!(
        log.barriers.len(),
        1,
        "one barrier despite the repeated calls"
    );
}

/// How long a restarted gateway holds its resumed failover after fencing (test hook), so the
/// window before the barrier is persisted can be probed.
const RESUMED_FAILOVER_HOLD_MS: &str = "8000";

/// Poll `/readyz` of a gateway process until it answers 200 (bounded).
fn wait_process_ready(gw: &ProcessGateway) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, body) = gw.call(Method::GET, "/readyz");
        if status == 200 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "gateway not ready: {body}\n{}",
            gw.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Poll `/readyz` of a gateway process until it answers 503 with a body containing `needle`;
/// returns the body (bounded).
fn wait_unready_saying(gw: &ProcessGateway, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = gw.call(Method::GET, "/readyz");
        if status == 503 && body.contains(needle) {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "/readyz never answered 503 with {needle:?}; last: {status} {body}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A raw connection to `addr`, retried while the listener is not yet bound (bounded).
fn raw_conn_when_listening(addr: &str) -> RawConn {
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "nothing listens on {addr}");
        std::thread::sleep(Duration::from_millis(50));
    }
    RawConn::connect(addr)
}

/// Kill the gateway process at a failover step (the crash hook's own marker in its log proves
/// where it died), restart it with the resumed failover held after fencing: while the mirror is
/// not STOPPED a local produce to each partition is refused (44); then the failover completes,
/// each partition has exactly one barrier, and local writes land after it.
fn crash_at(step: &str) {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic(&format!("crash-{}", step.replace('_', "-")));
    harness::create_topic(&destination, &topic, 2, Some(&[1, 2]));
    let cfg = mirror_config("crash", &[&topic]);
    let mut gw = ProcessGateway::start(cfg, &[("MIRRORGATE_CRASH_AFTER", step)]);
    wait_mirroring(&gw.admin(), "crash", 2);
    harness::produce_keyed(&gw.mirror_bootstrap(), &topic, 50, &[]);
    // The process may die before it answers (a crash right after accepting the failover).
    match crate::gw::try_admin_call(
        &gw.admin(),
        Method::POST,
        "/v1/mirrors/crash/failover",
        None,
    ) {
        Ok((s, b)) => assert_eq!(s, 202, "{b}"),
        Err(e) => assert!(step == "fenced_persisted", "failover call failed: {e}"),
    }
    assert!(
        gw.wait_exit(Duration::from_secs(30)),
        "the crash hook did not fire at {step}:\n{}",
        gw.log()
    );
    let marker = format!("MIRRORGATE_CRASH_AFTER={step}: aborting");
    assert!(
        gw.log().contains(&marker),
        "the process exited, but not at the crash hook of {step} (no {marker:?}):\n{}",
        gw.log()
    );
    gw.restart_unready(&[(
        "MIRRORGATE_TEST_HOLD_AFTER_FENCE_MS",
        RESUMED_FAILOVER_HOLD_MS,
    )]);
    let leaders = harness::partition_leaders(&destination, &topic);
    if step == "psm_cleared" {
        // The crash came after STOPPED was persisted: nothing is left to resume.
        let m = mirror_json(&gw.admin(), "crash");
        assert_eq!(m["states"]["STOPPED"].as_u64(), Some(2), "{m}");
    } else {
        // The resumed failover is held after fencing, before any barrier is persisted.
        let before = mirror_json(&gw.admin(), "crash");
        assert_eq!(
            before["states"]["STOPPING"].as_u64(),
            Some(2),
            "restarted after a crash at {step}: {before}"
        );
        for (p, leader) in &leaders {
            let mut local = raw_conn_when_listening(&format!("127.0.0.1:{}", gw.port_for(*leader)));
            let (code, _, msg) = local.produce_msg(&topic, *p, batch(-1, -1, -1, 1, "early"));
            assert_eq!(
                code, 44,
                "a local produce to partition {p} was not refused during the resumed failover after a crash at {step}: {msg}"
            );
            assert!(msg.contains("STOPPING"), "{msg}");
        }
        let after = mirror_json(&gw.admin(), "crash");
        assert_eq!(
            after["states"]["STOPPING"].as_u64(),
            Some(2),
            "the probe came after the hold ended (raise RESUMED_FAILOVER_HOLD_MS): {after}"
        );
    }
    wait_stopped(&gw.admin(), "crash");
    wait_process_ready(&gw);
    let local = harness::produce_keyed(&gw.bootstrap(), &topic, 20, &[]);
    for p in 0..2 {
        let log = read_log(&destination, &topic, p);
        assert_eq!(
            log.barriers.len(),
            1,
            "partition {p} after a crash at {step}: barriers {:?}",
            log.barriers
        );
        let barrier = log.barriers[0].0;
        for a in local.iter().filter(|a| a.partition == p) {
            assert!(
                a.offset > barrier,
                "local write at {} before the barrier {barrier}",
                a.offset
            );
        }
        assert!(
            log.records
                .iter()
                .all(|r| r.key.as_deref() != Some("early-0")),
            "partition {p}: the probe's early write is in the log"
        );
        // The barrier is the control batch the state records (the default form): a failover
        // resumed after the markers were written found them by their producer id.
        let (_, body) = gw.call(Method::GET, "/v1/mirrors/crash/partitions");
        let v: serde_json::Value = serde_json::from_str(&body).expect("json");
        let rec = v["partitions"]
            .as_array()
            .expect("partitions")
            .iter()
            .find(|x| x["partition"].as_i64() == Some(p as i64))
            .cloned()
            .expect("partition record");
        assert_eq!(rec["barrier_kind"], "control", "{rec}");
        assert_eq!(rec["barrier_offset"].as_i64(), Some(barrier), "{rec}");
        assert_eq!(
            log.control_barriers
                .iter()
                .map(|c| c.producer_id)
                .collect::<Vec<_>>(),
            vec![rec["barrier_producer_id"].as_i64().expect("producer id")],
            "partition {p} after a crash at {step}"
        );
    }
}

#[test]
fn disruptive_gateway_killed_right_after_the_failover_is_accepted_completes_it_on_restart() {
    crash_at("fenced_persisted");
}

#[test]
fn disruptive_gateway_killed_after_fencing_completes_the_failover_on_restart() {
    crash_at("fenced");
}

#[test]
fn disruptive_gateway_killed_after_the_barrier_write_completes_the_failover_on_restart() {
    crash_at("barrier_written");
}

#[test]
fn disruptive_gateway_killed_after_persisting_the_screening_set_completes_the_failover_on_restart()
{
    crash_at("screen_persisted");
}

#[test]
fn disruptive_gateway_killed_after_persisting_the_barrier_completes_the_failover_on_restart() {
    crash_at("barrier_persisted");
}

#[test]
fn disruptive_gateway_killed_after_clearing_the_psm_completes_the_failover_on_restart() {
    crash_at("psm_cleared");
}

/// The state of partition 0 of a mirror, from the admin API.
fn partition_state(admin: &str, name: &str) -> String {
    let (_, body) = admin_call(
        admin,
        Method::GET,
        &format!("/v1/mirrors/{name}/partitions"),
        None,
    );
    let v: serde_json::Value = serde_json::from_str(&body).expect("json");
    v["partitions"][0]["state"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn expect_refused(conn: &mut RawConn, topic: &str, state: &str, tag: &str) {
    let (code, _, msg) = conn.produce_msg(topic, 0, batch(-1, -1, -1, 1, tag));
    assert_eq!(code, 44, "local produce in {state}: {msg}");
    assert!(
        msg.contains(state) && msg.contains("mirror states"),
        "{msg}"
    );
}

/// Runs alone: a gateway process with test hooks that hold the failover after fencing and fail
/// the first barrier writes, so that STOPPING and FAILED can be observed.
#[test]
fn disruptive_local_produce_is_refused_in_every_state_but_stopped() {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("states");
    harness::create_topic(&destination, &topic, 1, Some(&[1]));
    let gw = ProcessGateway::start(
        mirror_config("states", &[&topic]),
        &[
            ("MIRRORGATE_TEST_HOLD_AFTER_FENCE_MS", "2000"),
            ("MIRRORGATE_TEST_FAIL_BARRIER_WRITES", "3"),
        ],
    );
    let admin = gw.admin();
    wait_mirroring(&admin, "states", 1);
    let mut local = RawConn::connect(&gw.bootstrap());
    expect_refused(&mut local, &topic, "MIRRORING", "m");
    let (s, b) = gw.call(Method::POST, "/v1/mirrors/states/pause");
    assert_eq!(s, 200, "{b}");
    assert_eq!(partition_state(&admin, "states"), "PAUSED");
    expect_refused(&mut local, &topic, "PAUSED", "p");
    let mut mirror = RawConn::connect(&gw.mirror_bootstrap());
    let (code, _, msg) = mirror.produce_msg(&topic, 0, batch(-1, -1, -1, 1, "mp"));
    assert_eq!(code, 44, "mirror produce while PAUSED: {msg}");
    assert_eq!(gw.call(Method::POST, "/v1/mirrors/states/resume").0, 200);
    failover(&admin, "states");
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = std::collections::BTreeSet::new();
    loop {
        let st = partition_state(&admin, "states");
        if (st == "STOPPING" || st == "FAILED") && seen.insert(st.clone()) {
            expect_refused(&mut local, &topic, &st, &st.to_lowercase());
        }
        if st == "STOPPED" {
            break;
        }
        assert!(Instant::now() < deadline, "failover did not complete: {st}");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        seen.contains("STOPPING") && seen.contains("FAILED"),
        "observed states: {seen:?}"
    );
    let (code, _, msg) = local.produce_msg(&topic, 0, batch(-1, -1, -1, 1, "after"));
    assert_eq!(code, 0, "local produce after STOPPED: {msg}");
    let (s, body) = gw.call(Method::GET, "/metrics");
    assert_eq!(s, 200);
    assert!(
        body.contains(r#"mirrorgate_mirror_partitions{mirror="states",state="STOPPED"} 1"#),
        "{body}"
    );
    assert!(
        body.contains(r#"mirrorgate_produce_rejected_total{reason="read_only"}"#),
        "{body}"
    );
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

#[test]
fn a_refused_send_leaves_the_same_producer_working_for_other_topics() {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("ro-same");
    let other = harness::unique_topic("rw-same");
    harness::create_topic(&destination, &topic, 1, Some(&[1]));
    harness::create_topic(&destination, &other, 1, Some(&[1]));
    let gw = TestGateway::start(mirror_config("same", &[&topic]));
    wait_mirroring(&gw.admin(), "same", 1);
    let err = same_producer_refused_then_other(&gw.bootstrap(), &topic, &other);
    assert!(err.contains("PolicyViolation"), "{err}");
}

/// The same for the Kafka Java producer: one idempotent producer's send to a mirror topic fails
/// with the gateway's POLICY_VIOLATION message, then its 20 sends to another topic are
/// acknowledged, each in that topic's log at its offset with its value; nothing reached the
/// mirror topic.
#[test]
fn a_refused_send_leaves_the_same_java_producer_working_for_other_topics() {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("ro-java");
    let other = harness::unique_topic("rw-java");
    harness::create_topic(&destination, &topic, 1, Some(&[1]));
    harness::create_topic(&destination, &other, 1, Some(&[1]));
    let gw = TestGateway::start(mirror_config("samejava", &[&topic]));
    wait_mirroring(&gw.admin(), "samejava", 1);
    let source = harness::repo().join("integration/clients/java/RefusedThenOther.java");
    let out = harness::rig_java(
        source.to_str().expect("utf-8 path"),
        &[&gw.bootstrap(), &topic, &other, "20"],
    );
    harness::expect_success("RefusedThenOther.java", &out);
    let lines = harness::json_lines(&out.stdout);
    let refused = &lines[0];
    assert_eq!(refused["refused"], true, "{refused}");
    assert_eq!(refused["error"], "PolicyViolationException", "{refused}");
    let message = refused["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("is read-only") && message.contains("samejava"),
        "the gateway's message names the mirror: {refused}"
    );
    assert_eq!(lines.last().expect("done")["done"], 20, "{lines:?}");
    let log = read_log(&destination, &other, 0);
    let acked: Vec<(i64, Option<String>)> = lines
        .iter()
        .filter(|l| l.get("offset").is_some())
        .map(|l| {
            (
                l["offset"].as_i64().expect("offset"),
                l["value"].as_str().map(str::to_string),
            )
        })
        .collect();
    let logged: Vec<(i64, Option<String>)> = log
        .records
        .iter()
        .map(|r| (r.offset, r.value.clone()))
        .collect();
    assert_eq!(
        acked, logged,
        "the acknowledged records (left) are the other topic's log"
    );
    assert!(
        read_log(&destination, &topic, 0).records.is_empty(),
        "nothing reached the mirror topic"
    );
}

#[test]
fn after_failover_a_transactional_producer_is_bumped_above_the_mirrored_epoch() {
    use rdkafka::config::ClientConfig;
    use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("txn");
    harness::create_topic(&destination, &topic, 1, Some(&[1]));
    // PID screening alone, and the data barrier: a control barrier's producer id is asked for
    // until one no mirrored producer uses, which takes the colliding ids from the broker's
    // allocator as the allocator advance would.
    let gw = TestGateway::start(data_barrier(screening_only(mirror_config(
        "txn",
        &[&topic],
    ))));
    wait_mirroring(&gw.admin(), "txn", 1);
    // Mirrored batches of the next producer ids of both brokers' id blocks, at epoch 3.
    let ids = colliding_ids(|n| gw.port_for(n), true);
    let batches: Vec<(i64, i16, i32)> = ids.iter().map(|pid| (*pid, 3, 0)).collect();
    mirror_batches(&gw.mirror_bootstrap(), &topic, 0, &batches);
    failover(&gw.admin(), "txn");
    wait_stopped(&gw.admin(), "txn");
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", gw.bootstrap())
        .set("transactional.id", format!("{topic}-tx"))
        .set("message.timeout.ms", "30000")
        .create()
        .expect("transactional producer");
    producer
        .init_transactions(Duration::from_secs(30))
        .expect("init transactions");
    producer.begin_transaction().expect("begin");
    for i in 0..20 {
        let key = format!("tx-{i}");
        producer
            .send(BaseRecord::to(&topic).key(&key).payload("v"))
            .map_err(|(e, _)| e)
            .expect("send");
    }
    producer
        .commit_transaction(Duration::from_secs(30))
        .expect("commit");
    drop(producer);
    assert!(
        gw.metric("mirrorgate_pid_screened_total") >= 1.0,
        "the transactional producer id was not screened"
    );
    // The transaction is in the log once, after the barrier, under one producer id that was
    // mirrored (the coordinator handed out a colliding id) ...
    let log = read_log(&destination, &topic, 0);
    assert_eq!(log.barriers.len(), 1, "{:?}", log.barriers);
    let barrier = log.barriers[0].0;
    let tx: Vec<&LogRecord> = log
        .records
        .iter()
        .filter(|r| r.key.as_deref().is_some_and(|k| k.starts_with("tx-")))
        .collect();
    let mut keys: Vec<&str> = tx.iter().filter_map(|r| r.key.as_deref()).collect();
    keys.sort();
    let mut expected: Vec<String> = (0..20).map(|i| format!("tx-{i}")).collect();
    expected.sort();
    assert_eq!(keys, expected, "each transactional record exactly once");
    assert!(tx.iter().all(|r| r.offset > barrier), "{tx:?}");
    let pid = tx[0].producer_id;
    assert!(tx.iter().all(|r| r.producer_id == pid), "{tx:?}");
    assert!(
        ids.contains(&pid),
        "the transactional producer got {pid}, no mirrored id: nothing to bump (did tests \
         alongside take all {} mirrored ids?)",
        ids.len()
    );
    // ... at an epoch above the mirrored 3: in its commit marker and in the broker's state.
    let commits: Vec<&ControlBatch> = log
        .control_batches
        .iter()
        .filter(|c| c.producer_id == pid && !c.abort)
        .collect();
    assert_eq!(commits.len(), 1, "{:?}", log.control_batches);
    assert!(
        commits[0].producer_epoch > 3,
        "committed at epoch {}, not above the mirrored 3",
        commits[0].producer_epoch
    );
    let mut leader = RawConn::connect(&harness::leader_addr(&destination, &topic, 0));
    let state = crate::psm_differential::broker_producers(&mut leader, &topic, 0);
    let row = state
        .iter()
        .find(|r| r.0 == pid)
        .unwrap_or_else(|| panic!("producer {pid} not in the broker's state: {state:?}"));
    assert!(
        row.1 > 3,
        "the broker holds producer {pid} at epoch {}, not above the mirrored 3",
        row.1
    );
}

/// Runs alone: the mirror state file is corrupted while the gateway is down. On start the gateway
/// does not guess: the mirror's topics stay read-only on both listeners, `/readyz` says which
/// file and why, and failover is refused.
#[test]
fn disruptive_a_corrupt_mirror_state_keeps_the_topics_read_only_and_says_why() {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("corrupt");
    harness::create_topic(&destination, &topic, 1, Some(&[1]));
    let mut gw = ProcessGateway::start(mirror_config("corrupt", &[&topic]), &[]);
    wait_mirroring(&gw.admin(), "corrupt", 1);
    failover(&gw.admin(), "corrupt");
    wait_stopped(&gw.admin(), "corrupt");
    gw.kill9();
    let file = gw.config.state_dir.join("mirrors/corrupt.json");
    std::fs::write(
        &file,
        b"{\"version\":1,\"name\":\"corrupt\",\"partitions\":[{\"topic\"",
    )
    .expect("corrupt the file");
    gw.restart_unready(&[]);
    wait_unready_saying(&gw, "mirror corrupt state unreadable");
    let (status, body) = gw.call(Method::POST, "/v1/mirrors/corrupt/failover");
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("cannot be read"), "{body}");
    // Even though the partition was STOPPED before, nothing is writable now.
    let mut local = RawConn::connect(&gw.bootstrap());
    let (code, _, msg) = local.produce_msg(&topic, 0, batch(-1, -1, -1, 1, "local"));
    assert_eq!(code, 44, "{msg}");
    assert!(msg.contains("cannot be read"), "{msg}");
    let mut mirror = RawConn::connect(&gw.mirror_bootstrap());
    let (code, _, _) = mirror.produce_msg(&topic, 0, batch(-1, -1, -1, 1, "mirror"));
    assert_eq!(code, 44);
}

/// Mirror single-record batches (sequences 0–2, epoch 0) of every producer id in `ids` into
/// partition 0 of `topic` through the mirror listener at `mirror`: the collision hazard's shape.
fn mirror_colliding_batches(mirror: &str, topic: &str, ids: &[i64]) {
    let mut conn = RawConn::connect(mirror);
    for pid in ids {
        for seq in 0..3 {
            let (code, _) = conn.produce(topic, 0, batch(*pid, 0, seq, 1, &format!("m{pid}")));
            assert_eq!(code, 0, "mirror produce pid {pid} seq {seq}");
        }
    }
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

/// Review F8: the gateway is killed right after BARRIER_PERSISTED of a failover whose mirrored
/// traffic left producer ids the brokers hand out next. On restart the PSM is rebuilt up to the
/// barrier and cleared there, so the screening entries must already be durable: `pids.json`
/// holds every mirrored id, and new local idempotent producers are screened and lose nothing.
#[test]
fn disruptive_gateway_killed_after_persisting_the_barrier_keeps_the_screening_set() {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("crash-screen");
    harness::create_topic(&destination, &topic, 1, Some(&[1]));
    // The data barrier: a control barrier's producer-id search would take the colliding ids
    // from the leader's allocator, leaving nothing for screening to catch.
    let mut gw = ProcessGateway::start(
        data_barrier(screening_only(mirror_config("crashscreen", &[&topic]))),
        &[("MIRRORGATE_CRASH_AFTER", "barrier_persisted")],
    );
    wait_mirroring(&gw.admin(), "crashscreen", 1);
    let ids = next_producer_ids(|n| gw.port_for(n));
    mirror_colliding_batches(&gw.mirror_bootstrap(), &topic, &ids);
    match crate::gw::try_admin_call(
        &gw.admin(),
        Method::POST,
        "/v1/mirrors/crashscreen/failover",
        None,
    ) {
        Ok((s, b)) => assert_eq!(s, 202, "{b}"),
        Err(e) => panic!("failover call failed: {e}"),
    }
    assert!(
        gw.wait_exit(Duration::from_secs(30)),
        "the crash hook did not fire:\n{}",
        gw.log()
    );
    gw.restart(&[]);
    wait_stopped(&gw.admin(), "crashscreen");
    let screen = screened_ids(&gw.config.state_dir);
    let missing: Vec<&i64> = ids.iter().filter(|i| !screen.contains(i)).collect();
    assert!(
        missing.is_empty(),
        "{} of {} mirrored producer ids lost from the screening set: {missing:?}",
        missing.len(),
        ids.len()
    );
    let mut acks = Vec::new();
    for _ in 0..3 {
        acks.extend(harness::produce_keyed(
            &gw.bootstrap(),
            &topic,
            50,
            &[("linger.ms", "0"), ("batch.num.messages", "1")],
        ));
    }
    assert!(
        process_metric(&gw, "mirrorgate_pid_screened_total") >= 1.0,
        "no producer id was screened"
    );
    assert_acked_after_barrier(&destination, &topic, &acks);
    assert_eq!(
        process_metric(&gw, "mirrorgate_duplicate_ack_guard_total"),
        0.0,
        "screening alone prevented the collisions"
    );
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

/// Review F13: the barrier is written whatever the topic's timestamp limits and the gateway's
/// clock. The gateway's barrier clock runs 2 h ahead of the brokers' (test hook), one topic
/// keeps the defaults (`message.timestamp.after.max.ms` = 1 h), the other gets
/// `message.timestamp.before.max.ms=0` and `after.max.ms=0` on the broker after the data was
/// mirrored: both barriers are written on the first try and the failover completes.
#[test]
fn a_barrier_is_written_whatever_the_topics_timestamp_limits() {
    let destination = harness::cluster("destination");
    let plain = harness::unique_topic("barrier-ts");
    let strict = harness::unique_topic("barrier-ts-strict");
    harness::create_topic(&destination, &plain, 1, Some(&[1]));
    harness::create_topic(&destination, &strict, 1, Some(&[2]));
    let gw = ProcessGateway::start(
        mirror_config("barrierts", &[&plain, &strict]),
        &[("MIRRORGATE_TEST_BARRIER_CLOCK_SKEW_MS", "7200000")],
    );
    wait_mirroring(&gw.admin(), "barrierts", 2);
    for t in [&plain, &strict] {
        harness::produce_keyed(&gw.mirror_bootstrap(), t, 20, &[]);
    }
    set_topic_configs_on_the_destination(
        &destination,
        &strict,
        &[
            ("message.timestamp.before.max.ms", "0"),
            ("message.timestamp.after.max.ms", "0"),
        ],
    );
    // The limits bite: a batch stamped 50 ms ago is refused with INVALID_TIMESTAMP (32).
    let leader = harness::destination_brokers()
        .into_iter()
        .find(|(n, _)| *n == 2)
        .expect("broker 2")
        .1;
    let stale = batch(-1, -1, -1, 1, "stale");
    std::thread::sleep(Duration::from_millis(50));
    let (code, _, msg) = RawConn::connect(&leader).produce_msg(&strict, 0, stale);
    assert_eq!(code, 32, "a stale timestamp was accepted: {msg}");
    failover(&gw.admin(), "barrierts");
    // The first barrier writes succeed: no partition is FAILED on the way.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, body) = admin_call(
            &gw.admin(),
            Method::GET,
            "/v1/mirrors/barrierts/partitions",
            None,
        );
        assert_eq!(status, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).expect("json");
        let parts = v["partitions"].as_array().expect("partitions").clone();
        for p in &parts {
            assert_ne!(p["state"], "FAILED", "the barrier write failed: {p}");
        }
        if parts.iter().all(|p| p["state"] == "STOPPED") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the failover did not complete: {parts:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    for t in [&plain, &strict] {
        let log = read_log(&destination, t, 0);
        assert_eq!(log.barriers.len(), 1, "{t}: {:?}", log.barriers);
        assert_eq!(
            log.barriers[0].0, 20,
            "{t}: the barrier follows the mirrored records"
        );
        // Consumers through the gateway see the mirrored records and never the barrier.
        let consumed = harness::consume_group(
            &gw.bootstrap(),
            t,
            &harness::unique_topic("barrier-ts-group"),
            20,
            Duration::from_secs(30),
            &[],
        );
        let n: usize = consumed.values().map(Vec::len).sum();
        assert_eq!(n, 20, "{t}: {consumed:?}");
    }
    // Local writes after the failover go through, after the barrier.
    let acks = harness::produce_keyed(&gw.bootstrap(), &plain, 10, &[]);
    assert_acked_after_barrier(&destination, &plain, &acks);
}

/// Review F10. Runs alone: the PID screening set is corrupted while the gateway is down, after a
/// failover. On start the gateway does not start empty: `/readyz` names the file, why, and the
/// recovery; local produce to the mirror's (STOPPED) topics is refused, plain topics are not.
#[test]
fn disruptive_a_corrupt_screening_set_keeps_the_gateway_unready_and_mirror_topics_read_only() {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("screen-corrupt");
    let plain = harness::unique_topic("screen-plain");
    harness::create_topic(&destination, &topic, 1, Some(&[1]));
    harness::create_topic(&destination, &plain, 1, Some(&[1]));
    let mut gw = ProcessGateway::start(mirror_config("screencorrupt", &[&topic]), &[]);
    wait_mirroring(&gw.admin(), "screencorrupt", 1);
    failover(&gw.admin(), "screencorrupt");
    wait_stopped(&gw.admin(), "screencorrupt");
    gw.kill9();
    let file = gw.config.state_dir.join("screen/pids.json");
    std::fs::create_dir_all(file.parent().expect("dir")).expect("screen dir");
    std::fs::write(&file, b"{\"8000\":{\"max_epoch\":0,\"last_tim").expect("corrupt");
    gw.restart_unready(&[]);
    let body = wait_unready_saying(&gw, "screen/pids.json");
    assert!(
        body.contains("docs/failover.md#recovering-the-pid-screening-set"),
        "{body}"
    );
    let mut local = RawConn::connect(&gw.bootstrap());
    let (code, _, msg) = local.produce_msg(&topic, 0, batch(-1, -1, -1, 1, "local"));
    assert_eq!(code, 44, "{msg}");
    assert!(msg.contains("screening"), "{msg}");
    let (code, _, msg) = local.produce_msg(&plain, 0, batch(-1, -1, -1, 1, "plain"));
    assert_eq!(code, 0, "{msg}");
    // The corrupt file is left as it was, for the operator.
    assert_eq!(
        std::fs::read(&file).expect("file"),
        b"{\"8000\":{\"max_epoch\":0,\"last_tim"
    );
}
