//! Transactional sources: the agent appends transactional batches as-is and reproduces each
//! source COMMIT/ABORT marker with WriteTxnMarkers, so the destination's logs, offsets, last
//! stable offsets and `read_committed` views equal the source's; a transaction the source left
//! open is aborted by the failover before the barrier.

use super::*;

use crate::failover::{failover, read_log as raw_log, wait_stopped, PartitionLog};

const TXN_PRODUCER: &str = "integration/clients/java/TxnProducer.java";

/// Run TxnProducer.java against `bootstrap` (see its header for the plan syntax).
pub(crate) fn txn_produce(bootstrap: &str, topic: &str, partitions: i32, txid: &str, plan: &str) {
    let source = harness::repo().join(TXN_PRODUCER);
    let out = harness::rig_java(
        source.to_str().expect("utf-8 path"),
        &[bootstrap, topic, &partitions.to_string(), txid, plan],
    );
    harness::expect_success("TxnProducer.java", &out);
}

/// Every record of a partition as (offset, value, control), and its control batches as
/// (offset, producer id, epoch, abort, coordinator epoch).
type Shape = (
    Vec<(i64, Option<String>, bool)>,
    Vec<(i64, i64, i16, bool, Option<i32>)>,
);

fn shape(log: &PartitionLog) -> Shape {
    (
        log.records
            .iter()
            .map(|r| (r.offset, r.value.clone(), r.control))
            .collect(),
        log.control_batches
            .iter()
            .map(|c| {
                (
                    c.offset,
                    c.producer_id,
                    c.producer_epoch,
                    c.abort,
                    c.coordinator_epoch,
                )
            })
            .collect(),
    )
}

/// The destination's log end equals the source's in every partition.
fn wait_same_log_end(source: &str, topic: &str, partitions: i32) {
    let destination = harness::cluster("destination");
    wait_for(
        "the destination log ends to reach the source's",
        Duration::from_secs(90),
        || {
            (0..partitions).all(|p| {
                let end = |b: &str| {
                    let l = raw_log(b, topic, p);
                    let data = l.records.iter().map(|r| r.offset + 1).max().unwrap_or(0);
                    let ctl = l
                        .control_batches
                        .iter()
                        .map(|c| c.offset + 1)
                        .max()
                        .unwrap_or(0);
                    data.max(ctl)
                };
                end(source) == end(&destination)
            })
        },
    );
}

/// (partition, offset, value) of each record a consumer printed (Consume.java or
/// python_consume.py JSON lines), sorted.
fn consumed(out: &std::process::Output) -> Vec<(i64, i64, String)> {
    let mut v: Vec<(i64, i64, String)> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|j| j.get("offset").is_some())
        .map(|j| {
            (
                j["partition"].as_i64().unwrap_or(-1),
                j["offset"].as_i64().unwrap_or(-1),
                j["value"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    v.sort();
    v
}

pub(crate) fn java_consume(
    bootstrap: &str,
    topic: &str,
    group: &str,
    count: usize,
    isolation: &str,
) -> Vec<(i64, i64, String)> {
    let source = harness::repo().join("integration/clients/java/Consume.java");
    let out = harness::rig_java(
        source.to_str().expect("utf-8 path"),
        &[
            bootstrap,
            topic,
            group,
            &count.to_string(),
            isolation,
            "30000",
        ],
    );
    harness::expect_success("Consume.java", &out);
    consumed(&out)
}

fn python_consume(
    bootstrap: &str,
    topic: &str,
    group: &str,
    count: usize,
    isolation: &str,
) -> Vec<(i64, i64, String)> {
    // kafka-python 3.0.12 can lose the assignment of a rejoin when a short poll expires during it
    // (python_consume.py works around it; seen in CI under load): one more try, new group.
    let mut v = Vec::new();
    for attempt in 0..2 {
        let mut cmd = std::process::Command::new(crate::pid_allocator::python_interpreter());
        cmd.arg(harness::repo().join("integration/clients/python_consume.py"))
            .args([
                bootstrap,
                topic,
                &format!("{group}-{attempt}"),
                &count.to_string(),
                isolation,
                "30000",
            ]);
        let out = harness::run_with_timeout(cmd, Duration::from_secs(90));
        harness::expect_success("python_consume.py", &out);
        v = consumed(&out);
        if v.len() == count {
            break;
        }
        eprintln!(
            "python_consume.py: {} of {count} records; stdout:\n{}\nstderr:\n{}",
            v.len(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    v
}

/// librdkafka (isolation.level read_committed): every record it delivers until `count` arrived
/// or 30 s passed, plus one more second.
pub(super) fn librdkafka_consume(
    bootstrap: &str,
    topic: &str,
    group: &str,
    count: usize,
) -> Vec<(i64, i64, String)> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::Message;
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .create()
        .expect("consumer");
    c.subscribe(&[topic]).expect("subscribe");
    let mut v = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut extra: Option<Instant> = None;
    while Instant::now() < deadline && extra.is_none_or(|t| Instant::now() < t) {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(200)) {
            let value = m
                .payload()
                .map(|p| String::from_utf8_lossy(p).to_string())
                .unwrap_or_default();
            v.push((i64::from(m.partition()), m.offset(), value));
        }
        if v.len() >= count && extra.is_none() {
            extra = Some(Instant::now() + Duration::from_secs(1));
        }
    }
    v.sort();
    v
}

/// A source topic of `partitions` mirrored by mirror `name` through a new gateway, written by
/// TxnProducer.java (transactional id `<topic>-tx`, `plan`) while mirrored, and caught up.
fn mirrored_txn_topic(
    prefix: &str,
    name: &str,
    partitions: i32,
    plan: &str,
) -> (String, TestGateway) {
    let source = harness::cluster("source");
    let topic = harness::unique_topic(prefix);
    harness::create_topic(&source, &topic, partitions, None);
    let gw = TestGateway::start(agent_config(name, &[&topic], &source));
    txn_produce(&source, &topic, partitions, &format!("{topic}-tx"), plan);
    wait_same_log_end(&source, &topic, partitions);
    (topic, gw)
}

#[test]
fn a_transactional_source_is_mirrored_with_its_commits_and_aborts() {
    let (source, destination) = (harness::cluster("source"), harness::cluster("destination"));
    // Mirrored while the producer runs: committed and aborted transactions interleaved.
    let (topic, gw) = mirrored_txn_topic("agent-txn", "txn", 3, "c5,a3,c4,a2,c3");
    for p in 0..3 {
        let (src, dst) = (
            raw_log(&source, &topic, p),
            raw_log(&destination, &topic, p),
        );
        assert_eq!(
            shape(&dst),
            shape(&src),
            "partition {p}: the same records, markers and offsets as the source"
        );
        assert_eq!(src.control_batches.len(), 5, "one marker per transaction");
    }
    // Every isolation level and client reads through the gateway what it reads on the source.
    let committed = 3 * (5 + 4 + 3);
    let all = 3 * (5 + 3 + 4 + 2 + 3);
    let on_source = java_consume(
        &source,
        &topic,
        &format!("{topic}-src"),
        committed,
        "read_committed",
    );
    assert_eq!(on_source.len(), committed);
    assert!(
        on_source.iter().all(|(_, _, v)| v.ends_with("-c")),
        "{on_source:?}"
    );
    let through = java_consume(
        &gw.bootstrap(),
        &topic,
        &format!("{topic}-j"),
        committed,
        "read_committed",
    );
    assert_eq!(through, on_source, "Java, read_committed");
    let through = python_consume(
        &gw.bootstrap(),
        &topic,
        &format!("{topic}-py"),
        committed,
        "read_committed",
    );
    assert_eq!(through, on_source, "kafka-python, read_committed");
    let through = librdkafka_consume(&gw.bootstrap(), &topic, &format!("{topic}-rd"), committed);
    assert_eq!(through, on_source, "librdkafka, read_committed");
    let uncommitted_src = java_consume(
        &source,
        &topic,
        &format!("{topic}-srcu"),
        all,
        "read_uncommitted",
    );
    assert_eq!(uncommitted_src.len(), all);
    let uncommitted = java_consume(
        &gw.bootstrap(),
        &topic,
        &format!("{topic}-ju"),
        all,
        "read_uncommitted",
    );
    assert_eq!(uncommitted, uncommitted_src, "Java, read_uncommitted");
    // The gateway's producer state of each partition equals the source broker's.
    for p in 0..3 {
        let mut conn = RawConn::connect(&leader_addr(&source, &topic, p));
        let broker: Vec<_> = broker_producers(&mut conn, &topic, p)
            .into_iter()
            .map(|(pid, epoch, seq, _ts, coord, txn)| (pid, epoch, seq, coord, txn))
            .collect();
        let gateway: Vec<_> = gateway_producers(&gw.admin(), &topic, p)
            .into_iter()
            .map(|(pid, epoch, seq, _ts, coord, txn)| (pid, epoch, seq, coord, txn))
            .collect();
        assert_eq!(
            gateway, broker,
            "partition {p}: PSM vs the source's DescribeProducers"
        );
    }
    assert_eq!(
        gw.metric("mirrorgate_agent_markers_total{mirror=\"txn\",result=\"commit\"}"),
        9.0
    );
    assert_eq!(
        gw.metric("mirrorgate_agent_markers_total{mirror=\"txn\",result=\"abort\"}"),
        6.0
    );
    assert!(partitions_json(&gw.admin(), "txn")
        .iter()
        .all(|p| p["state"] == "MIRRORING"));
}

#[test]
fn a_transaction_left_open_at_failover_is_aborted_before_the_barrier() {
    let destination = harness::cluster("destination");
    // Two committed records per partition, then a transaction left open (the producer halts).
    let (topic, gw) = mirrored_txn_topic("agent-txn-open", "open", 2, "c2,o3");
    for p in 0..2 {
        let log = raw_log(&destination, &topic, p);
        assert_eq!(
            log.records.iter().filter(|r| !r.control).count(),
            5,
            "2 committed and 3 open records mirrored"
        );
        assert_eq!(log.control_batches.len(), 1, "only the COMMIT marker");
    }
    let open = r#"mirrorgate_mirror_open_transactions{mirror="open"}"#;
    wait_for(
        "the PSM to hold both open transactions",
        Duration::from_secs(30),
        || gw.metric(open) == 2.0,
    );
    failover(&gw.admin(), "open");
    wait_stopped(&gw.admin(), "open");
    assert_eq!(gw.metric(open), 0.0, "the state is cleared at the barrier");
    assert_eq!(
        gw.metric("mirrorgate_failover_transactions_aborted_total{mirror=\"open\"}"),
        2.0,
        "one open transaction per partition"
    );
    for p in 0..2 {
        let log = raw_log(&destination, &topic, p);
        let aborts: Vec<i64> = log
            .control_batches
            .iter()
            .filter(|c| c.abort && c.offset == 6)
            .map(|c| c.producer_id)
            .collect();
        assert_eq!(
            aborts.len(),
            1,
            "partition {p}: the ABORT right after the open records: {:?}",
            log.control_batches
        );
        assert!(
            log.control_batches.iter().any(|c| c.offset > 6) || !log.barriers.is_empty(),
            "partition {p}: the barrier after the abort"
        );
    }
    for p in partitions_json(&gw.admin(), "open") {
        let aborted = p["transactions_aborted"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(
            aborted.len(),
            1,
            "the partition's record lists its aborted transaction: {p}"
        );
        assert_eq!(aborted[0]["first_offset"], 3, "{p}");
    }
    // A record written after the failover is visible to read_committed consumers at once: the
    // open transaction holds nothing up, and its records stay hidden.
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", gw.bootstrap())
        .create()
        .expect("producer");
    producer
        .send(
            BaseRecord::to(&topic)
                .partition(0)
                .key("after")
                .payload("after-failover"),
        )
        .map_err(|(e, _)| e)
        .expect("send");
    assert_eq!(
        producer
            .flush(Duration::from_secs(30))
            .map_err(|e| e.to_string()),
        Ok(())
    );
    let seen = java_consume(
        &gw.bootstrap(),
        &topic,
        &format!("{topic}-after"),
        5,
        "read_committed",
    );
    let values: Vec<&str> = seen.iter().map(|(_, _, v)| v.as_str()).collect();
    assert_eq!(values.len(), 5, "{values:?}");
    assert!(values.contains(&"after-failover"), "{values:?}");
    assert!(
        values.iter().all(|v| !v.ends_with("-o")),
        "no open record: {values:?}"
    );
}

#[test]
fn after_failover_local_transactional_producers_reusing_mirrored_transactional_ids_lose_nothing() {
    let source = harness::cluster("source");
    let topic = harness::unique_topic("agent-txn-local");
    harness::create_topic(&source, &topic, 2, None);
    let gw = TestGateway::start(agent_config("local", &[&topic], &source));
    let (mirrored_id, other_id) = (format!("{topic}-tx"), format!("{topic}-tx2"));
    txn_produce(&source, &topic, 2, &mirrored_id, "c3,a2,c3");
    txn_produce(&source, &topic, 2, &other_id, "c2");
    wait_same_log_end(&source, &topic, 2);
    failover(&gw.admin(), "local");
    wait_stopped(&gw.admin(), "local");
    // Through the gateway: the transactional id the source used (its producer state and epochs
    // are in the destination's partitions), and a new one.
    txn_produce(&gw.bootstrap(), &topic, 2, &mirrored_id, "c4,a2,c1");
    txn_produce(&gw.bootstrap(), &topic, 2, &format!("{topic}-tx3"), "c2,a1");
    let mirrored_committed = 2 * (3 + 3 + 2);
    let local_committed = 2 * (4 + 1 + 2);
    let seen = java_consume(
        &gw.bootstrap(),
        &topic,
        &format!("{topic}-all"),
        mirrored_committed + local_committed,
        "read_committed",
    );
    let mut values: Vec<String> = seen.into_iter().map(|(_, _, v)| v).collect();
    values.sort();
    let mut expected: Vec<String> = [
        (mirrored_id.as_str(), "c3,a2,c3"),
        (other_id.as_str(), "c2"),
        (mirrored_id.as_str(), "c4,a2,c1"),
        (&format!("{topic}-tx3"), "c2,a1"),
    ]
    .iter()
    .flat_map(|(id, plan)| committed_values(id, plan, 2))
    .collect();
    expected.sort();
    assert_eq!(
        values, expected,
        "every committed record, mirrored and local, once"
    );
}

/// The values TxnProducer.java writes and commits for `plan`.
fn committed_values(id: &str, plan: &str, partitions: i32) -> Vec<String> {
    let mut v = Vec::new();
    for (t, txn) in plan.split(',').enumerate() {
        let n: usize = txn[1..].parse().expect("count");
        if txn.starts_with('c') {
            for r in 0..n {
                for p in 0..partitions {
                    v.push(format!("{id}-t{t}-p{p}-r{r}-c"));
                }
            }
        }
    }
    v
}
