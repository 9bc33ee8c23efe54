//! Tests of the Kafka test rig itself (`integration/rig`) against real Kafka 4.1.1:
//! Java tools and librdkafka round trips on `source` and `destination`, and the rig's
//! lifecycle on an isolated instance (own run dir, ports shifted by an offset).
//!
//! Run: `cargo test --test integration rig_`

use std::collections::{BTreeMap, BTreeSet};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use crate::harness::{self, *};

const N: usize = 10_000;

// ------------------------------------------------------------------ Java tools

/// (partition, offset, key, value) of a VerifiableProducer ack / VerifiableConsumer record.
type JavaRecord = (i32, i64, Option<String>, String);

fn json_records(out: &Output, event: &str) -> Vec<JavaRecord> {
    let text = String::from_utf8_lossy(&out.stdout);
    let mut v = Vec::new();
    for line in text.lines().filter(|l| l.starts_with('{')) {
        let Ok(j) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if j["name"] == "producer_send_error" {
            panic!("VerifiableProducer reported a send error: {line}");
        }
        if j["name"] != event {
            continue;
        }
        v.push((
            j["partition"].as_i64().expect("partition") as i32,
            j["offset"].as_i64().expect("offset"),
            j["key"].as_str().map(str::to_string),
            j["value"].as_str().expect("value").to_string(),
        ));
    }
    v
}

fn by_partition(records: &[JavaRecord]) -> BTreeMap<i32, Vec<(i64, Option<String>, String)>> {
    let mut m: BTreeMap<i32, Vec<(i64, Option<String>, String)>> = BTreeMap::new();
    for (p, o, k, v) in records {
        m.entry(*p).or_default().push((*o, k.clone(), v.clone()));
    }
    m
}

/// VerifiableProducer (idempotent, acks=all) writes N records, VerifiableConsumer (group) reads
/// them back: same records per partition, in offset order and send order.
fn java_tools_roundtrip(name: &str, bootstrap: &str, partitions: i32, assignment: Option<&[i32]>) {
    let topic = unique_topic(&format!("rig-java-{name}"));
    create_topic(bootstrap, &topic, partitions, assignment);
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("producer.properties");
    std::fs::write(&cfg, "enable.idempotence=true\nacks=all\nretries=2147483647\nmax.in.flight.requests.per.connection=5\nlinger.ms=5\n").expect("write config");
    let cfg = cfg.to_string_lossy().into_owned();
    let n = N.to_string();

    let prod = rig_java(
        "org.apache.kafka.tools.VerifiableProducer",
        &[
            "--bootstrap-server",
            bootstrap,
            "--topic",
            &topic,
            "--max-messages",
            &n,
            "--acks",
            "-1",
            "--repeating-keys",
            "1000",
            "--producer.config",
            &cfg,
        ],
    );
    expect_success("VerifiableProducer", &prod);
    let acked = json_records(&prod, "producer_send_success");
    assert_eq!(
        acked.len(),
        N,
        "VerifiableProducer acks; stderr:\n{}",
        tail_text(&prod.stderr, 20)
    );

    let group = unique_topic("rig-java-group");
    let cons = rig_java(
        "org.apache.kafka.tools.VerifiableConsumer",
        &[
            "--bootstrap-server",
            bootstrap,
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
    expect_success("VerifiableConsumer", &cons);
    let consumed = json_records(&cons, "record_data");
    assert_eq!(
        consumed.len(),
        N,
        "VerifiableConsumer records; stderr:\n{}",
        tail_text(&cons.stderr, 20)
    );

    let mut want = by_partition(&acked);
    for list in want.values_mut() {
        list.sort();
        // VerifiableProducer values are the send index: offset order must be send order.
        let idx: Vec<u64> = list
            .iter()
            .map(|(_, _, v)| v.parse().expect("numeric value"))
            .collect();
        assert!(
            idx.windows(2).all(|w| w[0] < w[1]),
            "acked offsets not in send order"
        );
    }
    let have = by_partition(&consumed);
    assert_eq!(
        want.keys().collect::<Vec<_>>(),
        have.keys().collect::<Vec<_>>(),
        "partitions with records"
    );
    for (p, list) in &want {
        assert!(
            &have[p] == list,
            "partition {p}: consumed records differ from the acked ones"
        );
    }
    assert_eq!(
        want.len(),
        partitions as usize,
        "1000 distinct keys should reach every partition"
    );
}

fn librdkafka_roundtrip(bootstrap: &str, topic: &str) {
    let acks = produce_keyed(bootstrap, topic, N, &[]);
    assert_eq!(acks.len(), N);
    let group = unique_topic("rig-rdkafka-group");
    let got = consume_group(bootstrap, topic, &group, N, Duration::from_secs(120), &[]);
    assert_same_per_partition(&acks, &got);
}

/// Destination topic with partitions led by both brokers (asserted via metadata).
fn destination_topic_on_both_brokers(prefix: &str) -> (String, String) {
    let bootstrap = cluster("destination");
    let ids: Vec<i32> = destination_brokers().iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, vec![1, 2], "destination brokers");
    let topic = unique_topic(prefix);
    create_topic(&bootstrap, &topic, 4, Some(&[1, 2, 1, 2]));
    let leaders: BTreeSet<i32> = partition_leaders(&bootstrap, &topic)
        .values()
        .copied()
        .collect();
    assert_eq!(leaders, BTreeSet::from([1, 2]), "leaders of {topic}");
    (bootstrap, topic)
}

#[test]
fn rig_java_tools_roundtrip_10k_idempotent_on_source() {
    let bootstrap = cluster("source");
    java_tools_roundtrip("source", &bootstrap, 3, None);
}

#[test]
fn rig_java_tools_roundtrip_10k_idempotent_on_destination_both_brokers() {
    let bootstrap = cluster("destination");
    let ids: Vec<i32> = destination_brokers().iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, vec![1, 2], "destination brokers");
    // create_topic inside asserts leaders; check they are on both brokers too.
    let probe = unique_topic("rig-java-dest-probe");
    create_topic(&bootstrap, &probe, 2, Some(&[1, 2]));
    let leaders: BTreeSet<i32> = partition_leaders(&bootstrap, &probe)
        .values()
        .copied()
        .collect();
    assert_eq!(leaders, BTreeSet::from([1, 2]));
    java_tools_roundtrip("destination", &bootstrap, 4, Some(&[1, 2, 1, 2]));
}

#[test]
fn rig_librdkafka_roundtrip_10k_idempotent_group_in_order_on_source() {
    let bootstrap = cluster("source");
    let topic = unique_topic("rig-rdkafka-source");
    create_topic(&bootstrap, &topic, 3, None);
    librdkafka_roundtrip(&bootstrap, &topic);
}

#[test]
fn rig_librdkafka_roundtrip_10k_idempotent_group_in_order_on_destination_both_brokers() {
    let (bootstrap, topic) = destination_topic_on_both_brokers("rig-rdkafka-dest");
    librdkafka_roundtrip(&bootstrap, &topic);
}

// ------------------------------------------------------------------ lifecycle (isolated rig)

/// The pid file of the isolated rig's `third` node.
fn pid_file(rig: &IsolatedRig) -> PathBuf {
    rig.dir().join("third").join("node-1").join("pid")
}

fn process_exists(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(s) => {
            let state = s
                .rsplit_once(')')
                .map(|(_, r)| r.trim_start())
                .unwrap_or("");
            !(state.starts_with('Z') || state.starts_with('X'))
        }
    }
}

fn read_pid(path: &Path) -> u32 {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .trim()
        .parse()
        .expect("pid")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn rig_lifecycle_up_twice_is_noop_status_shows_it_down_leaves_no_process_or_port() {
    let rig = IsolatedRig::new(1000);
    let (port, ctrl) = (23092 + 1000, 23093 + 1000);
    let line = format!("third=127.0.0.1:{port}");
    let me = std::process::id().to_string();

    let up1 = rig.rig(&["up", "third", "--owner-pid", &me]);
    expect_success("rig up third", &up1);
    assert!(stdout(&up1).contains(&line), "up output: {}", stdout(&up1));
    let pid = read_pid(&pid_file(&rig));
    assert!(process_exists(pid));

    let up2 = rig.rig(&["up", "third", "--owner-pid", &me]);
    expect_success("second rig up third", &up2);
    assert!(stdout(&up2).contains(&line));
    assert!(
        String::from_utf8_lossy(&up2.stderr).contains("already running"),
        "second up: {}",
        String::from_utf8_lossy(&up2.stderr)
    );
    assert_eq!(
        read_pid(&pid_file(&rig)),
        pid,
        "second up must keep the same broker"
    );

    let st = rig.rig(&["status"]);
    expect_success("rig status", &st);
    assert_eq!(stdout(&st).trim(), line);
    assert_eq!(
        harness::parse_status(&st.stdout)
            .get("third")
            .map(String::as_str),
        Some(&line["third=".len()..])
    );

    let down = rig.rig(&["down"]);
    expect_success("rig down", &down);
    assert!(
        !process_exists(pid),
        "broker pid {pid} still exists after down"
    );
    assert!(!pid_file(&rig).exists(), "pid file left behind");
    for p in [port, ctrl] {
        assert!(
            TcpStream::connect_timeout(
                &format!("127.0.0.1:{p}").parse().unwrap(),
                Duration::from_secs(1)
            )
            .is_err(),
            "port {p} still accepts connections after down"
        );
        TcpListener::bind(("127.0.0.1", p))
            .unwrap_or_else(|e| panic!("port {p} not bindable after down: {e}"));
    }
    let st = rig.rig(&["status"]);
    expect_success("rig status after down", &st);
    assert_eq!(stdout(&st).trim(), "", "status after down");

    let again = rig.rig(&["down"]);
    expect_success("second rig down", &again);
}

#[test]
fn rig_up_fails_naming_a_port_already_taken_and_starts_nothing() {
    let rig = IsolatedRig::new(1100);
    let port = 23092 + 1100;
    let _taken = TcpListener::bind(("127.0.0.1", port)).expect("bind test port");
    let me = std::process::id().to_string();
    let up = rig.rig(&["up", "third", "--owner-pid", &me]);
    assert!(
        !up.status.success(),
        "rig up must fail while port {port} is taken"
    );
    let err = String::from_utf8_lossy(&up.stderr);
    assert!(
        err.contains(&format!("127.0.0.1:{port}")),
        "error must name the port: {err}"
    );
    assert!(err.contains("third"), "error must name the cluster: {err}");
    assert!(!pid_file(&rig).exists(), "nothing may be started");
    let st = rig.rig(&["status"]);
    assert_eq!(stdout(&st).trim(), "");
}
