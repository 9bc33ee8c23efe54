//! Real clients through the gateway only: librdkafka, the Java clients (kafka-tools'
//! VerifiableProducer / VerifiableConsumer) and kafka-python each produce 10,000 records with
//! idempotence to a topic with partitions led by both destination brokers, consume them with a
//! consumer group, and see their committed offsets, all through the gateway's ports.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{DeliveryResult, Message};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::ClientContext;

use crate::gw::TestGateway;
use crate::harness;

const N: usize = 10_000;

/// A topic with 4 partitions led alternately by destination brokers 1 and 2.
fn topic_on_both_brokers(destination: &str, prefix: &str) -> String {
    let topic = harness::unique_topic(prefix);
    harness::create_topic(destination, &topic, 4, Some(&[1, 2, 1, 2]));
    let leaders = harness::partition_leaders(destination, &topic);
    assert!(
        leaders.values().any(|l| *l == 1) && leaders.values().any(|l| *l == 2),
        "leaders: {leaders:?}"
    );
    topic
}

/// Every broker a client learns about through the gateway is a gateway port, and the gateway
/// opened upstream connections to both destination brokers.
fn assert_only_gateway_addresses(gw: &TestGateway, brokers: &[String]) {
    let ports: Vec<String> = [1, 2]
        .iter()
        .map(|n| format!("127.0.0.1:{}", gw.port_for(*n)))
        .collect();
    assert!(!brokers.is_empty());
    for b in brokers {
        assert!(
            ports.contains(b),
            "client learned broker address {b}, not a gateway port ({ports:?})"
        );
    }
    for node in [1, 2] {
        let opened = gw.metric(&format!(
            r#"mirrorgate_upstream_connections_total{{node="{node}"}}"#
        ));
        assert!(
            opened >= 1.0,
            "no client traffic reached broker {node} through the gateway"
        );
    }
}

fn brokers_seen_by_rdkafka(bootstrap: &str) -> Vec<String> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("client");
    let md = c
        .fetch_metadata(None, Duration::from_secs(30))
        .expect("metadata through the gateway");
    md.brokers()
        .iter()
        .map(|b| format!("{}:{}", b.host(), b.port()))
        .collect()
}

/// Committed offsets of `group` for `topic`, read through `bootstrap`.
fn committed(bootstrap: &str, group: &str, topic: &str, partitions: i32) -> BTreeMap<i32, i64> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .create()
        .expect("client");
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition(topic, p);
    }
    let got = c
        .committed_offsets(tpl, Duration::from_secs(30))
        .expect("committed offsets through the gateway");
    got.elements()
        .iter()
        .map(|e| {
            (
                e.partition(),
                if let Offset::Offset(o) = e.offset() {
                    o
                } else {
                    -1
                },
            )
        })
        .collect()
}

fn record_counts(per_partition: &BTreeMap<i32, Vec<i64>>) -> BTreeMap<i32, i64> {
    per_partition
        .iter()
        .map(|(p, v)| (*p, v.len() as i64))
        .collect()
}

#[test]
fn librdkafka_round_trip_through_the_gateway_only() {
    let destination = harness::cluster("destination");
    let gw = TestGateway::in_front_of(&destination);
    let topic = topic_on_both_brokers(&destination, "rdkafka-gw");
    let acks = harness::produce_keyed(&gw.bootstrap(), &topic, N, &[]);
    let group = format!("{topic}-group");
    let consumed = harness::consume_group(
        &gw.bootstrap(),
        &topic,
        &group,
        N,
        Duration::from_secs(120),
        &[],
    );
    harness::assert_same_per_partition(&acks, &consumed);
    // The consumer committed on close; the committed offsets are the partition ends.
    let expected: BTreeMap<i32, i64> = consumed
        .iter()
        .map(|(p, v)| (*p, v.last().map(|r| r.offset + 1).unwrap_or(0)))
        .collect();
    let got = committed(&gw.bootstrap(), &group, &topic, 4);
    for (p, end) in &expected {
        assert_eq!(got.get(p), Some(end), "committed offset of partition {p}");
    }
    assert_only_gateway_addresses(&gw, &brokers_seen_by_rdkafka(&gw.bootstrap()));
}

#[test]
fn java_clients_round_trip_through_the_gateway_only() {
    let destination = harness::cluster("destination");
    let gw = TestGateway::in_front_of(&destination);
    let topic = topic_on_both_brokers(&destination, "java-gw");
    let dir = tempfile::tempdir().expect("tempdir");
    let props = dir.path().join("producer.properties");
    std::fs::write(&props, "enable.idempotence=true\nacks=all\nretries=2147483647\nmax.in.flight.requests.per.connection=5\nlinger.ms=5\n").expect("write props");
    let n = N.to_string();
    let out = harness::rig_java(
        "org.apache.kafka.tools.VerifiableProducer",
        &[
            "--bootstrap-server",
            &gw.bootstrap(),
            "--topic",
            &topic,
            "--max-messages",
            &n,
            "--acks",
            "-1",
            "--producer.config",
            props.to_str().expect("utf-8 path"),
        ],
    );
    harness::expect_success("VerifiableProducer through the gateway", &out);
    let mut produced: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
    let mut values_by_offset: BTreeMap<(i32, i64), String> = BTreeMap::new();
    for e in harness::json_lines(&out.stdout) {
        if e["name"] == "producer_send_success" {
            let (p, o) = (
                e["partition"].as_i64().unwrap_or(-1) as i32,
                e["offset"].as_i64().unwrap_or(-1),
            );
            produced.entry(p).or_default().push(o);
            values_by_offset.insert((p, o), e["value"].as_str().unwrap_or_default().to_string());
        }
        assert_ne!(e["name"], "producer_send_error", "send error: {e}");
    }
    assert_eq!(produced.values().map(Vec::len).sum::<usize>(), N);

    let group = format!("{topic}-group");
    let out = harness::rig_java(
        "org.apache.kafka.tools.VerifiableConsumer",
        &[
            "--bootstrap-server",
            &gw.bootstrap(),
            "--topic",
            &topic,
            "--group-id",
            &group,
            "--max-messages",
            &n,
            "--reset-policy",
            "earliest",
            "--verbose",
        ],
    );
    harness::expect_success("VerifiableConsumer through the gateway", &out);
    let mut consumed: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
    let mut commits_ok = 0;
    for e in harness::json_lines(&out.stdout) {
        if e["name"] == "record_data" {
            let (p, o) = (
                e["partition"].as_i64().unwrap_or(-1) as i32,
                e["offset"].as_i64().unwrap_or(-1),
            );
            assert_eq!(
                values_by_offset.get(&(p, o)).map(String::as_str),
                e["value"].as_str(),
                "record at partition {p} offset {o} differs from what was acknowledged"
            );
            consumed.entry(p).or_default().push(o);
        }
        if e["name"] == "offsets_committed" && e["success"] == true {
            commits_ok += 1;
        }
    }
    assert_eq!(
        record_counts(&consumed),
        record_counts(&produced),
        "records per partition"
    );
    for (p, offsets) in &consumed {
        assert!(
            offsets.windows(2).all(|w| w[0] < w[1]),
            "partition {p} not consumed in order"
        );
    }
    assert!(commits_ok > 0, "the Java consumer committed no offsets");
    let got = committed(&gw.bootstrap(), &group, &topic, 4);
    for (p, offsets) in &produced {
        let end = offsets.iter().max().map(|o| o + 1).unwrap_or(0);
        assert_eq!(got.get(p), Some(&end), "committed offset of partition {p}");
    }
    assert_only_gateway_addresses(&gw, &brokers_seen_by_rdkafka(&gw.bootstrap()));
}

#[test]
fn kafka_python_round_trip_through_the_gateway_only() {
    let destination = harness::cluster("destination");
    let gw = TestGateway::in_front_of(&destination);
    let topic = topic_on_both_brokers(&destination, "python-gw");
    let setup = harness::run_with_timeout(
        std::process::Command::new(harness::repo().join("integration/clients/setup-python")),
        Duration::from_secs(300),
    );
    harness::expect_success("integration/clients/setup-python", &setup);
    let python = String::from_utf8_lossy(&setup.stdout).trim().to_string();
    let mut cmd = std::process::Command::new(python);
    cmd.arg(harness::repo().join("integration/clients/python_roundtrip.py"))
        .args([
            gw.bootstrap(),
            topic.clone(),
            N.to_string(),
            format!("{topic}-group"),
        ]);
    let out = harness::run_with_timeout(cmd, Duration::from_secs(240));
    harness::expect_success("kafka-python round trip through the gateway", &out);
    let report: serde_json::Value = harness::json_lines(&out.stdout)
        .pop()
        .expect("a JSON report");
    let acked: i64 = report["acked"]
        .as_object()
        .expect("acked")
        .values()
        .filter_map(|v| v.as_i64())
        .sum();
    assert_eq!(acked, N as i64);
    let mut total = 0;
    for (p, values) in report["consumed"].as_object().expect("consumed") {
        let values: Vec<i64> = values
            .as_array()
            .expect("list")
            .iter()
            .filter_map(|v| v.as_i64())
            .collect();
        assert!(
            values.windows(2).all(|w| w[0] < w[1]),
            "partition {p}: values out of send order"
        );
        assert_eq!(
            report["committed"][p].as_i64(),
            Some(values.len() as i64),
            "committed offset of partition {p}"
        );
        total += values.len();
    }
    assert_eq!(total, N);
    let brokers: Vec<String> = report["brokers"]
        .as_array()
        .expect("brokers")
        .iter()
        .filter_map(|b| b.as_str().map(String::from))
        .collect();
    assert_only_gateway_addresses(&gw, &brokers);
}

/// Phases of the broker-restart test, as seen by the producer's delivery callback.
const BEFORE_STOP: u8 = 0;
const NODE_DOWN: u8 = 1;
const AFTER_RESTART: u8 = 2;

#[derive(Default)]
struct PhasedAcks {
    /// (phase at the ack, ack).
    acks: Mutex<Vec<(u8, harness::Acked)>>,
    errors: Mutex<Vec<String>>,
    phase: AtomicU8,
}

struct PhasedContext(Arc<PhasedAcks>);
impl ClientContext for PhasedContext {}
impl ProducerContext for PhasedContext {
    type DeliveryOpaque = Box<usize>;
    fn delivery(&self, r: &DeliveryResult<'_>, index: Box<usize>) {
        match r {
            Ok(m) => {
                let ack = harness::Acked {
                    index: *index,
                    key: m
                        .key()
                        .map(|k| String::from_utf8_lossy(k).into_owned())
                        .unwrap_or_default(),
                    partition: m.partition(),
                    offset: m.offset(),
                };
                let phase = self.0.phase.load(Ordering::SeqCst);
                lock(&self.0.acks).push((phase, ack));
            }
            Err((e, _)) => lock(&self.0.errors).push(format!("record {}: {e}", *index)),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// An idempotent (acks=all) librdkafka producer sending `key-{i}` records through `bootstrap`
/// in a thread, about 2,000 a second, until `stop` is set; then it waits for every
/// acknowledgement (bounded) and returns how many it sent.
fn produce_until_stopped(
    bootstrap: String,
    topic: String,
    acks: Arc<PhasedAcks>,
    sent: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<usize> {
    std::thread::spawn(move || {
        let producer: BaseProducer<PhasedContext> = ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("linger.ms", "5")
            .set("message.timeout.ms", "120000")
            .set("queue.buffering.max.kbytes", "1024")
            .create_with_context(PhasedContext(acks))
            .expect("producer");
        let mut i = 0;
        while !stop.load(Ordering::SeqCst) {
            let (key, value) = (format!("key-{i}"), format!("value-{i}"));
            let rec = BaseRecord::with_opaque_to(&topic, Box::new(i))
                .key(&key)
                .payload(&value);
            match producer.send(rec) {
                Ok(()) => {
                    i += 1;
                    sent.store(i, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_micros(500));
                }
                // The records of the stopped broker's partitions wait in the queue.
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    producer.poll(Duration::from_millis(20));
                }
                Err((e, _)) => panic!("producing record {i}: {e}"),
            }
            producer.poll(Duration::ZERO);
        }
        producer
            .flush(Duration::from_secs(150))
            .expect("every record acknowledged");
        i
    })
}

/// Poll `cond` every 50 ms until it holds; panic after `timeout`.
fn wait_for(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(Instant::now() < deadline, "not within {timeout:?}: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs alone (`disruptive_` tests are run serially by the test command): it restarts a broker.
/// A producer writes through the gateway to partitions led by both brokers; broker 2 is
/// stopped while the producer runs (after at least 6,000 acks) and started again, and the
/// producer goes on until records to broker 2's partitions are acknowledged after the restart.
/// Every acknowledged record is in the log exactly once, at its acknowledged offset.
#[test]
fn disruptive_broker_restart_during_produce_loses_nothing_acknowledged() {
    const BEFORE: usize = 6_000;
    let destination = harness::cluster("destination");
    let gw = TestGateway::in_front_of(&destination);
    let topic = topic_on_both_brokers(&destination, "restart-gw");
    let on_node_2: Vec<i32> = harness::partition_leaders(&destination, &topic)
        .into_iter()
        .filter(|(_, l)| *l == 2)
        .map(|(p, _)| p)
        .collect();
    let acks = Arc::new(PhasedAcks::default());
    let sent = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let producer = produce_until_stopped(
        gw.bootstrap(),
        topic.clone(),
        acks.clone(),
        sent.clone(),
        stop.clone(),
    );
    let acked = |phase: u8, on: &[i32]| {
        lock(&acks.acks)
            .iter()
            .filter(|(ph, a)| *ph == phase && (on.is_empty() || on.contains(&a.partition)))
            .count()
    };
    wait_for("acks before the stop", Duration::from_secs(120), || {
        acked(BEFORE_STOP, &[]) >= BEFORE && acked(BEFORE_STOP, &on_node_2) > 0
    });
    assert!(
        !producer.is_finished(),
        "the producer runs when the broker is stopped"
    );
    let sent_at_stop = sent.load(Ordering::SeqCst);
    acks.phase.store(NODE_DOWN, Ordering::SeqCst);
    let stopped = harness::StoppedNode::stop("destination", "2");
    drop(stopped);
    let sent_at_restart = sent.load(Ordering::SeqCst);
    acks.phase.store(AFTER_RESTART, Ordering::SeqCst);
    assert!(
        !producer.is_finished() && sent_at_restart > sent_at_stop,
        "the producer kept sending while broker 2 was down ({sent_at_stop} sent at the stop, {sent_at_restart} at the restart)"
    );
    // Keep producing until broker 2's partitions take records again through the gateway.
    wait_for(
        "acks from broker 2's partitions after the restart",
        Duration::from_secs(150),
        || acked(AFTER_RESTART, &on_node_2) >= 500,
    );
    let sent_after = sent.load(Ordering::SeqCst);
    assert!(
        !producer.is_finished() && sent_after > sent_at_restart,
        "the producer still runs after the restart"
    );
    stop.store(true, Ordering::SeqCst);
    let total = producer
        .join()
        .expect("producer thread (every record acknowledged)");
    let errors = lock(&acks.errors).clone();
    assert!(errors.is_empty(), "delivery errors: {errors:?}");
    let mut all: Vec<harness::Acked> = lock(&acks.acks).iter().map(|(_, a)| a.clone()).collect();
    all.sort_by_key(|a| a.index);
    assert_eq!(all.len(), total, "every record sent is acknowledged");
    // The whole log of every partition, read from its leader: each acknowledged record once, at
    // its offset, and nothing else (a duplicate anywhere in the log fails).
    let mut in_log: BTreeMap<i32, Vec<harness::Consumed>> = BTreeMap::new();
    for p in 0..4 {
        let log = crate::failover::read_log(&destination, &topic, p);
        in_log.insert(
            p,
            log.records
                .into_iter()
                .map(|r| harness::Consumed {
                    offset: r.offset,
                    key: r.key,
                    value: r.value,
                })
                .collect(),
        );
    }
    harness::assert_same_per_partition(&all, &in_log);
    // And through the gateway with a consumer group.
    let consumed = harness::consume_group(
        &gw.bootstrap(),
        &topic,
        &format!("{topic}-g"),
        all.len(),
        Duration::from_secs(120),
        &[],
    );
    harness::assert_same_per_partition(&all, &consumed);
}
