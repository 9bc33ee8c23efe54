//! Issue 14 (review F7, "genuine control batch"): the failover barrier is an ABORT transaction
//! marker the gateway appends with WriteTxnMarkers for an idempotent producer id of its own, so
//! every consumer skips it natively — through the gateway or straight at the brokers. The data
//! barrier stays as the fallback. Against the rig's real destination cluster (Kafka 4.1.1).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::failover::{
    data_barrier, failover, mirror_config, mirror_json, read_log, wait_mirroring, wait_stopped,
    PartitionLog,
};
use crate::gw::{ProcessGateway, TestGateway};
use crate::harness;
use crate::psm_differential::{batch, RawConn};

/// The partitions of mirror `name` as the admin API shows them.
fn partitions(admin: &str, name: &str) -> Vec<serde_json::Value> {
    let (status, body) = crate::gw::admin_call(
        admin,
        hyper::Method::GET,
        &format!("/v1/mirrors/{name}/partitions"),
        None,
    );
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("json");
    v["partitions"].as_array().expect("partitions").clone()
}

/// Read `topic` from the beginning with Java's ConsoleConsumer at `isolation`
/// (`read_uncommitted` or `read_committed`), until `n` records or 30 s: the keys, sorted. A
/// barrier the consumer did not skip would take the place of a record.
fn java_keys(bootstrap: &str, topic: &str, isolation: &str, n: usize) -> Vec<String> {
    let n = n.to_string();
    let group = harness::unique_topic("ctl-java");
    let out = harness::rig_java(
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        &[
            "--bootstrap-server",
            bootstrap,
            "--topic",
            topic,
            "--group",
            &group,
            "--from-beginning",
            "--isolation-level",
            isolation,
            "--max-messages",
            &n,
            "--timeout-ms",
            "30000",
            "--property",
            "print.key=true",
            "--property",
            "print.value=false",
        ],
    );
    let mut keys: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    keys.sort();
    keys
}

/// `cfg` without the refusal of local writes that collide with mirrored producer state
/// before they reach the broker: these tests check that the duplicate-ack guard, the layer
/// behind it, measures acknowledgements against the right barrier offset.
fn guard_alone(mut cfg: mirrorgate::config::Config) -> mirrorgate::config::Config {
    cfg.failover.refuse_mirrored_producer_ids = false;
    cfg
}

/// The one control barrier of a partition, checked: a transactional control batch holding one
/// ABORT marker (coordinator epoch 0) of `producer_id`, at `offset`; no data barrier.
fn assert_one_control_barrier(log: &PartitionLog, what: &str, producer_id: i64, offset: i64) {
    assert_eq!(
        log.control_barriers.len(),
        1,
        "{what}: control barriers {:?}",
        log.control_barriers
    );
    assert_eq!(log.barriers.len(), 1, "{what}: barriers {:?}", log.barriers);
    let b = log.control_barriers[0];
    assert_eq!(b.offset, offset, "{what}: {b:?}");
    assert_eq!(
        b.attributes & 0x30,
        0x30,
        "{what}: transactional|control: {b:?}"
    );
    assert!(b.abort, "{what}: an ABORT marker: {b:?}");
    assert_eq!(b.producer_id, producer_id, "{what}: {b:?}");
    assert_eq!(b.coordinator_epoch, Some(0), "{what}: {b:?}");
    assert_eq!(b.records, 1, "{what}: {b:?}");
    assert!(
        log.records
            .iter()
            .all(|r| r.key.as_deref() != Some("__mirrorgate_barrier")),
        "{what}: no data barrier"
    );
}

#[test]
fn a_failover_writes_a_control_batch_barrier_every_consumer_skips_natively() {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("ctl");
    // One partition per broker: one WriteTxnMarkers request per leader.
    harness::create_topic(&destination, &topic, 2, Some(&[1, 2]));
    let gw = TestGateway::start(guard_alone(mirror_config("ctl", &[&topic])));
    wait_mirroring(&gw.admin(), "ctl", 2);
    let mirrored = harness::produce_keyed(&gw.mirror_bootstrap(), &topic, 40, &[]);
    assert_eq!(mirrored.len(), 40);
    // A producer whose acknowledgement the duplicate-ack guard must catch after the failover.
    let x = 9_600_000 + (std::process::id() as i64 % 1000) * 10;
    let mut mirror_conn = RawConn::connect(&gw.mirror_bootstrap());
    for seq in 0..3 {
        let (code, _) = mirror_conn.produce(&topic, 0, batch(x, 0, seq, 1, &format!("m{seq}")));
        assert_eq!(code, 0);
    }
    failover(&gw.admin(), "ctl");
    wait_stopped(&gw.admin(), "ctl");

    // The state records the barrier's identity; the log holds exactly that marker.
    let parts = partitions(&gw.admin(), "ctl");
    let pid = parts[0]["barrier_producer_id"]
        .as_i64()
        .expect("barrier producer id");
    assert!(pid >= 0);
    for p in &parts {
        assert_eq!(p["barrier_kind"], "control", "{p}");
        assert_eq!(
            p["barrier_producer_id"].as_i64(),
            Some(pid),
            "one producer id: {p}"
        );
        assert_eq!(p["barrier_producer_epoch"].as_i64(), Some(0), "{p}");
        let partition = p["partition"].as_i64().expect("partition") as i32;
        let offset = p["barrier_offset"].as_i64().expect("barrier offset");
        let log = read_log(&destination, &topic, partition);
        assert_one_control_barrier(&log, &format!("partition {partition}"), pid, offset);
        // Nothing mirrored after the barrier; last_mirrored_offset is the record before it.
        assert!(log.records.iter().all(|r| r.offset < offset), "{p}");
        assert_eq!(p["last_mirrored_offset"].as_i64(), Some(offset - 1), "{p}");
    }
    assert_eq!(
        gw.metric(r#"mirrorgate_barrier_writes_total{kind="control",mirror="ctl"}"#),
        2.0,
        "{}",
        gw.metrics()
    );
    assert_eq!(
        gw.metric(r#"mirrorgate_barrier_writes_total{kind="data",mirror="ctl"}"#),
        0.0
    );
    // The barrier's producer id is not screened (no producer ever uses it).
    assert!(!crate::failover::screened_ids(&gw.config.state_dir).contains(&pid));

    // The duplicate-ack guard: acknowledged below the barrier, turned into an error.
    let mut local = RawConn::connect(&gw.bootstrap());
    let (code, _) = local.produce(&topic, 0, batch(x, 0, 0, 1, "local"));
    assert_eq!(
        code, 45,
        "the false acknowledgement is turned into an error"
    );
    assert_eq!(gw.metric("mirrorgate_duplicate_ack_guard_total"), 1.0);
    let local = harness::produce_keyed(&gw.bootstrap(), &topic, 10, &[]);
    assert_eq!(local.len(), 10);

    // Every consumer sees exactly the records: 40 + 3 mirrored, 10 local, no barrier.
    let mut want: Vec<String> = mirrored
        .iter()
        .chain(local.iter())
        .map(|a| a.key.clone())
        .chain((0..3).map(|s| format!("m{s}-0")))
        .collect();
    want.sort();
    let n = want.len();
    let mut problems = Vec::new();
    for (via, bootstrap) in [("gateway", gw.bootstrap()), ("broker", destination.clone())] {
        for isolation in ["read_uncommitted", "read_committed"] {
            let got = java_keys(&bootstrap, &topic, isolation, n);
            if got != want {
                problems.push(format!(
                    "Java {isolation} via the {via}: {} keys, want {n}: {got:?}",
                    got.len()
                ));
            }
        }
        // librdkafka, read_committed, straight at the brokers and through the gateway.
        let consumed = harness::consume_group(
            &bootstrap,
            &topic,
            &format!("{topic}-rd-{via}"),
            n,
            Duration::from_secs(15),
            &[("isolation.level", "read_committed")],
        );
        let mut got: Vec<String> = consumed
            .values()
            .flatten()
            .filter_map(|r| r.key.clone())
            .collect();
        got.sort();
        if got != want {
            problems.push(format!("librdkafka via the {via}: {got:?}"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The answers to the barrier markers are lost (test hook): the broker appended them, the
/// gateway does not know. The retry of the failover looks for its barriers in the log by the
/// recorded producer id, finds the control batches and writes no second one.
#[test]
fn a_failover_that_lost_its_barrier_answers_finds_the_control_barriers_and_writes_no_second() {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("ctl-lost");
    harness::create_topic(&destination, &topic, 2, Some(&[1, 2]));
    let gw = ProcessGateway::start(
        mirror_config("ctllost", &[&topic]),
        &[("MIRRORGATE_TEST_LOSE_BARRIER_MARKER_ANSWERS", "2")],
    );
    wait_mirroring(&gw.admin(), "ctllost", 2);
    assert_eq!(
        harness::produce_keyed(&gw.mirror_bootstrap(), &topic, 30, &[]).len(),
        30
    );
    failover(&gw.admin(), "ctllost");
    wait_stopped(&gw.admin(), "ctllost");
    let parts = partitions(&gw.admin(), "ctllost");
    let pid = parts[0]["barrier_producer_id"].as_i64().expect("pid");
    for p in &parts {
        assert_eq!(p["barrier_kind"], "control", "{p}");
        let partition = p["partition"].as_i64().expect("partition") as i32;
        let offset = p["barrier_offset"].as_i64().expect("offset");
        let log = read_log(&destination, &topic, partition);
        assert_one_control_barrier(&log, &format!("partition {partition}"), pid, offset);
    }
    let log = gw.log();
    assert!(
        log.contains("MIRRORGATE_TEST_LOSE_BARRIER_MARKER_ANSWERS"),
        "the hook fired:\n{log}"
    );
    let (_, metrics) = gw.call(hyper::Method::GET, "/metrics");
    let written = metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix(r#"mirrorgate_barrier_writes_total{kind="control",mirror="ctllost"}"#)
                .and_then(|v| v.trim().parse::<f64>().ok())
        })
        .unwrap_or(0.0);
    assert_eq!(
        written, 0.0,
        "no marker counted as written: answers were lost"
    );
}

/// `failover.barrier: auto` and the brokers refuse WriteTxnMarkers for authorization (test hook:
/// every marker answered CLUSTER_AUTHORIZATION_FAILED): the failover writes the data barrier,
/// says so, counts it, and the duplicate-ack guard still works.
#[test]
fn when_the_brokers_refuse_write_txn_markers_the_failover_falls_back_to_the_data_barrier() {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("ctl-fallback");
    harness::create_topic(&destination, &topic, 1, Some(&[1]));
    let gw = ProcessGateway::start(
        guard_alone(mirror_config("ctlfb", &[&topic])),
        &[("MIRRORGATE_TEST_TXN_MARKERS_ERROR", "31")],
    );
    wait_mirroring(&gw.admin(), "ctlfb", 1);
    assert_eq!(
        harness::produce_keyed(&gw.mirror_bootstrap(), &topic, 20, &[]).len(),
        20
    );
    let x = 9_700_000 + (std::process::id() as i64 % 1000) * 10;
    let mut mirror_conn = RawConn::connect(&gw.mirror_bootstrap());
    for seq in 0..3 {
        let (code, _) = mirror_conn.produce(&topic, 0, batch(x, 0, seq, 1, &format!("m{seq}")));
        assert_eq!(code, 0);
    }
    let fid = failover(&gw.admin(), "ctlfb");
    wait_stopped(&gw.admin(), "ctlfb");
    let parts = partitions(&gw.admin(), "ctlfb");
    assert_eq!(parts[0]["barrier_kind"], "data", "{:?}", parts[0]);
    assert!(parts[0]["barrier_producer_id"].is_null(), "{:?}", parts[0]);
    let log = read_log(&destination, &topic, 0);
    assert!(
        log.control_barriers.is_empty(),
        "{:?}",
        log.control_barriers
    );
    assert_eq!(
        log.barriers,
        vec![(23, fid.clone(), "ctlfb".to_string())],
        "one data barrier after the 23 mirrored records"
    );
    assert_eq!(parts[0]["barrier_offset"].as_i64(), Some(23));
    let text = gw.log();
    assert!(
        text.contains("writing the data barrier instead") && text.contains("WARN"),
        "{text}"
    );
    let (_, metrics) = gw.call(hyper::Method::GET, "/metrics");
    let metric = |series: &str| {
        metrics
            .lines()
            .find_map(|l| {
                l.strip_prefix(series)
                    .and_then(|v| v.trim().parse::<f64>().ok())
            })
            .unwrap_or(0.0)
    };
    assert_eq!(
        metric(r#"mirrorgate_barrier_writes_total{kind="data",mirror="ctlfb"}"#),
        1.0,
        "{metrics}"
    );
    assert_eq!(
        metric(r#"mirrorgate_barrier_writes_total{kind="control",mirror="ctlfb"}"#),
        0.0
    );
    // The guard: the local batch of X is acknowledged below the barrier, turned into an error.
    let mut local = RawConn::connect(&gw.bootstrap());
    let (code, _) = local.produce(&topic, 0, batch(x, 0, 0, 1, "local"));
    assert_eq!(code, 45);
    // Consumers through the gateway do not see the data barrier.
    let consumed = harness::consume_group(
        &gw.bootstrap(),
        &topic,
        &format!("{topic}-c"),
        24,
        Duration::from_secs(15),
        &[],
    );
    let keys: BTreeMap<i64, Option<String>> = consumed
        .values()
        .flatten()
        .map(|r| (r.offset, r.key.clone()))
        .collect();
    assert_eq!(keys.len(), 23, "{keys:?}");
    assert!(!keys.contains_key(&23), "{keys:?}");
}

/// `failover.barrier: data`: the data barrier, no WriteTxnMarkers at all.
#[test]
fn with_failover_barrier_data_the_failover_writes_the_data_barrier() {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("ctl-data");
    harness::create_topic(&destination, &topic, 1, Some(&[1]));
    let gw = TestGateway::start(data_barrier(mirror_config("ctldata", &[&topic])));
    wait_mirroring(&gw.admin(), "ctldata", 1);
    harness::produce_keyed(&gw.mirror_bootstrap(), &topic, 10, &[]);
    let fid = failover(&gw.admin(), "ctldata");
    wait_stopped(&gw.admin(), "ctldata");
    let log = read_log(&destination, &topic, 0);
    assert!(log.control_batches.is_empty(), "{:?}", log.control_batches);
    assert_eq!(log.barriers, vec![(10, fid, "ctldata".to_string())]);
    let m = mirror_json(&gw.admin(), "ctldata");
    assert_eq!(
        gw.metric(r#"mirrorgate_barrier_writes_total{kind="data",mirror="ctldata"}"#),
        1.0,
        "{m}"
    );
    let parts = partitions(&gw.admin(), "ctldata");
    assert_eq!(parts[0]["barrier_kind"], "data");
    assert_eq!(parts[0]["last_mirrored_offset"].as_i64(), Some(9));
}

/// `failover.barrier: control` never falls back: a refused marker (test hook, 31) leaves the
/// partition FAILED and read-only, retried, with no barrier of either form in the log.
#[test]
fn with_failover_barrier_control_a_refused_marker_fails_the_partition_instead_of_falling_back() {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("ctl-only");
    harness::create_topic(&destination, &topic, 1, Some(&[1]));
    let mut cfg = mirror_config("ctlonly", &[&topic]);
    cfg.failover.barrier = mirrorgate::config::BarrierMode::Control;
    let gw = ProcessGateway::start(cfg, &[("MIRRORGATE_TEST_TXN_MARKERS_ERROR", "31")]);
    wait_mirroring(&gw.admin(), "ctlonly", 1);
    harness::produce_keyed(&gw.mirror_bootstrap(), &topic, 5, &[]);
    failover(&gw.admin(), "ctlonly");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let p = loop {
        let parts = partitions(&gw.admin(), "ctlonly");
        if parts[0]["state"] == "FAILED" {
            break parts[0].clone();
        }
        assert_ne!(parts[0]["state"], "STOPPED", "{:?}", parts[0]);
        assert!(std::time::Instant::now() < deadline, "{:?}", parts[0]);
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        p["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("error code 31")),
        "{p}"
    );
    let log = read_log(&destination, &topic, 0);
    assert!(log.barriers.is_empty(), "{:?}", log.barriers);
    assert!(
        !gw.log().contains("writing the data barrier instead"),
        "{}",
        gw.log()
    );
    // Still read-only on the client listener.
    let err = crate::failover::produce_one_expect_error(&gw.bootstrap(), &topic);
    assert!(err.contains("PolicyViolation"), "{err}");
}
