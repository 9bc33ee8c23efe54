//! Review F15: after a failover whose mirrored producer ids overlap the ids the destination
//! brokers hand out next, new local producers must get a producer id promptly. Screening alone
//! costs one InitProducerId per overlapping id (8 re-asks, then a retriable error and the
//! client's backoff), which with thousands of mirrored ids is minutes to hours. Run against the
//! rig's destination cluster (two brokers, each with its own block of producer ids).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, ProduceResponse, ResponseHeader};
use kafka_protocol::protocol::Decodable;
use mirrorgate::config::MirrorConfig;
use rdkafka::config::ClientConfig;
use rdkafka::message::{DeliveryResult, Message};
use rdkafka::producer::{BaseProducer, BaseRecord, ProducerContext};
use rdkafka::ClientContext;

use crate::failover::{failover, mirror_config, mirror_json, read_log, wait_mirroring};
use crate::gw::TestGateway;
use crate::harness;
use crate::psm_differential::batch;

/// Mirrored producer ids that overlap what the destination brokers hand out next.
const MIRRORED_IDS: usize = 10_000;
/// Records each local producer sends.
const RECORDS: usize = 50;
/// How long each local producer may try before it gives up (so the test ends on old code).
const CLIENT_TIMEOUT_MS: u64 = 30_000;

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64
}

/// Each destination broker's next producer id (node id → id).
fn positions(destination: &str) -> BTreeMap<i32, i64> {
    harness::brokers(destination)
        .into_iter()
        .map(|(node, addr)| (node, crate::failover::fresh_producer_id(&addr) + 1))
        .collect()
}

/// `n` producer ids that the brokers at `pos` hand out next: the rest of each broker's current
/// block of 1,000, then every id from the end of the highest block on (the blocks the brokers
/// get next, from the controller's shared counter).
fn overlapping_ids(pos: &BTreeMap<i32, i64>, n: usize) -> Vec<i64> {
    let mut ids = BTreeSet::new();
    let mut top = 0;
    for p in pos.values() {
        let end = (p / 1000 + 1) * 1000;
        ids.extend(*p..end);
        top = top.max(end);
    }
    let mut next = top;
    while ids.len() < n {
        ids.insert(next);
        next += 1;
    }
    ids.into_iter().take(n).collect()
}

/// Mirror one single-record batch (epoch 0, sequence 0) of every id in `ids` into `partition`
/// of `topic` through the mirror listener at `addr`: requests are written by one thread while
/// this one reads the answers (the gateway keeps them in order), so nothing waits for a round
/// trip per batch.
pub(crate) fn mirror_pipelined(addr: &str, topic: &str, partition: i32, ids: &[i64]) {
    let mut reader = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    reader
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let mut writer = reader.try_clone().expect("clone");
    let requests: Vec<Bytes> = ids
        .iter()
        .enumerate()
        .map(|(i, pid)| {
            let req = crate::wire::produce_request(
                topic,
                partition,
                -1,
                batch(*pid, 0, 0, 1, &format!("m{pid}")),
            );
            crate::wire::request_frame(ApiKey::Produce, 9, i as i32, &req)
        })
        .collect();
    let w = std::thread::spawn(move || {
        for chunk in requests.chunks(256) {
            let mut buf = BytesMut::new();
            for r in chunk {
                buf.extend_from_slice(r);
            }
            writer.write_all(&buf).expect("write produce requests");
        }
    });
    for (i, pid) in ids.iter().enumerate() {
        let mut len = [0u8; 4];
        reader.read_exact(&mut len).expect("response length");
        let mut resp = vec![0u8; i32::from_be_bytes(len) as usize];
        reader.read_exact(&mut resp).expect("response");
        let mut b = Bytes::from(resp);
        let h = ResponseHeader::decode(&mut b, ApiKey::Produce.response_header_version(9))
            .expect("response header");
        assert_eq!(h.correlation_id, i as i32, "answers in order");
        let r = ProduceResponse::decode(&mut b, 9).expect("produce response");
        let code = r.responses[0].partition_responses[0].error_code;
        assert_eq!(
            code, 0,
            "mirror produce of pid {pid} to {topic}-{partition}"
        );
    }
    w.join().expect("writer");
}

/// Mirror `ids` into every partition of `topic`, each through the mirror-listener port of the
/// partition's leader.
fn mirror_ids(gw: &TestGateway, destination: &str, topic: &str, ids: &[i64]) {
    let leaders = harness::partition_leaders(destination, topic);
    std::thread::scope(|s| {
        for (p, leader) in &leaders {
            let addr = format!("127.0.0.1:{}", gw.mirror_port_for(*leader));
            s.spawn(move || mirror_pipelined(&addr, topic, *p, ids));
        }
    });
}

/// Wait until every partition of mirror `name` is STOPPED; returns (started, completed) in
/// unix milliseconds as the gateway recorded them. Panics when a partition is seen FAILED on
/// the way (a failover step failed and was retried).
fn wait_stopped_times(admin: &str, name: &str) -> (i64, i64) {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let m = mirror_json(admin, name);
        assert!(
            m["states"]["FAILED"].as_u64().unwrap_or(0) == 0,
            "a failover step of {name} failed: {m}"
        );
        if m["partitions"].as_u64().is_some_and(|n| n > 0)
            && m["states"]["STOPPED"] == m["partitions"]
        {
            let started = m["failover_started_ms"].as_i64().expect("started");
            let completed = m["failover_completed_ms"].as_i64().expect("completed");
            return (started, completed);
        }
        assert!(Instant::now() < deadline, "mirror {name} not STOPPED: {m}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// What one local producer saw.
#[derive(Debug, Default)]
struct ClientRun {
    /// (key or value, partition, offset, unix ms) of each acknowledged record.
    acks: Vec<(String, i32, i64, i64)>,
    errors: Vec<String>,
    /// When the client process reported it had started (unix ms), when known.
    started_ms: Option<i64>,
}

impl ClientRun {
    fn first_ack_ms(&self) -> Option<i64> {
        self.acks.iter().map(|a| a.3).min()
    }
}

#[derive(Default)]
struct Collected(Mutex<ClientRun>);
struct TimedContext(Arc<Collected>);
impl ClientContext for TimedContext {}
impl ProducerContext for TimedContext {
    type DeliveryOpaque = ();
    fn delivery(&self, r: &DeliveryResult<'_>, _: ()) {
        let mut run = self.0 .0.lock().unwrap_or_else(|p| p.into_inner());
        match r {
            Ok(m) => {
                let key = m
                    .key()
                    .map(|k| String::from_utf8_lossy(k).into_owned())
                    .unwrap_or_default();
                run.acks.push((key, m.partition(), m.offset(), now_ms()));
            }
            Err((e, _)) => run.errors.push(e.to_string()),
        }
    }
}

/// librdkafka idempotent producer: `RECORDS` keyed records `rd-i`.
fn librdkafka_run(bootstrap: &str, topic: &str) -> ClientRun {
    let collected = Arc::new(Collected::default());
    let started = now_ms();
    let producer: BaseProducer<TimedContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "0")
        .set("message.timeout.ms", CLIENT_TIMEOUT_MS.to_string())
        .create_with_context(TimedContext(collected.clone()))
        .expect("librdkafka producer");
    for i in 0..RECORDS {
        let key = format!("rd-{i}");
        let value = format!("rd-value-{i}");
        producer
            .send(BaseRecord::to(topic).key(&key).payload(&value))
            .map_err(|(e, _)| e)
            .expect("send");
    }
    let deadline = Instant::now() + Duration::from_millis(CLIENT_TIMEOUT_MS + 10_000);
    loop {
        producer.poll(Duration::from_millis(5));
        let done = {
            let r = collected.0.lock().unwrap_or_else(|p| p.into_inner());
            r.acks.len() + r.errors.len()
        };
        if done >= RECORDS || Instant::now() >= deadline {
            break;
        }
    }
    let mut run = std::mem::take(&mut *collected.0.lock().unwrap_or_else(|p| p.into_inner()));
    run.started_ms = Some(started);
    if run.acks.len() + run.errors.len() < RECORDS {
        run.errors.push(format!(
            "{} of {RECORDS} deliveries not reported",
            RECORDS - run.acks.len() - run.errors.len()
        ));
    }
    run
}

/// Java VerifiableProducer (idempotent, acks=all): values `0`..`RECORDS-1`, no key.
fn java_run(bootstrap: &str, topic: &str) -> ClientRun {
    let dir = tempfile::tempdir().expect("tempdir");
    let props = dir.path().join("p.properties");
    std::fs::write(
        &props,
        format!(
            "enable.idempotence=true\nacks=all\nretries=2147483647\nlinger.ms=0\nrequest.timeout.ms=10000\n\
             delivery.timeout.ms={CLIENT_TIMEOUT_MS}\nmax.block.ms={CLIENT_TIMEOUT_MS}\n"
        ),
    )
    .expect("props");
    let out = harness::rig_java(
        "org.apache.kafka.tools.VerifiableProducer",
        &[
            "--bootstrap-server",
            bootstrap,
            "--topic",
            topic,
            "--max-messages",
            &RECORDS.to_string(),
            "--acks",
            "-1",
            "--producer.config",
            props.to_str().expect("path"),
        ],
    );
    let mut run = ClientRun::default();
    for e in harness::json_lines(&out.stdout) {
        let ts = e["timestamp"].as_i64().unwrap_or(0);
        match e["name"].as_str() {
            Some("startup_complete") => run.started_ms = Some(ts),
            Some("producer_send_success") => run.acks.push((
                e["value"].as_str().unwrap_or_default().to_string(),
                e["partition"].as_i64().unwrap_or(-1) as i32,
                e["offset"].as_i64().unwrap_or(-1),
                ts,
            )),
            Some("producer_send_error") => run.errors.push(e.to_string()),
            _ => {}
        }
    }
    if !out.status.success() {
        run.errors.push(format!(
            "VerifiableProducer exited with {}: {}",
            out.status,
            harness::tail_text(&out.stderr, 5)
        ));
    }
    run
}

/// kafka-python idempotent producer: `RECORDS` keyed records `py-i`.
fn python_run(bootstrap: &str, topic: &str, python: &str) -> ClientRun {
    let mut cmd = std::process::Command::new(python);
    cmd.arg(harness::repo().join("integration/clients/python_first_ack.py"))
        .args([
            bootstrap.to_string(),
            topic.to_string(),
            RECORDS.to_string(),
            "py".to_string(),
            CLIENT_TIMEOUT_MS.to_string(),
        ]);
    let out = harness::run_with_timeout(cmd, Duration::from_millis(CLIENT_TIMEOUT_MS + 60_000));
    let mut run = ClientRun::default();
    for e in harness::json_lines(&out.stdout) {
        let ts = e["ts_ms"].as_i64().unwrap_or(0);
        match e["event"].as_str() {
            Some("start") => run.started_ms = Some(ts),
            Some("ack") => run.acks.push((
                e["key"].as_str().unwrap_or_default().to_string(),
                e["partition"].as_i64().unwrap_or(-1) as i32,
                e["offset"].as_i64().unwrap_or(-1),
                ts,
            )),
            Some("error") => run.errors.push(e.to_string()),
            _ => {}
        }
    }
    if !out.status.success() {
        run.errors.push(format!(
            "kafka-python exited with {}: {}",
            out.status,
            harness::tail_text(&out.stderr, 5)
        ));
    }
    run
}

pub fn python_interpreter() -> String {
    let setup = harness::run_with_timeout(
        std::process::Command::new(harness::repo().join("integration/clients/setup-python")),
        Duration::from_secs(300),
    );
    harness::expect_success("integration/clients/setup-python", &setup);
    String::from_utf8_lossy(&setup.stdout).trim().to_string()
}

/// `disruptive_`: it moves both destination brokers' producer-id allocators by 10,000 ids, which
/// would take away the collisions the screening tests set up if it ran next to them.
#[test]
fn disruptive_after_a_failover_overlapping_ten_thousand_mirrored_ids_new_producers_get_unscreened_ids_and_lose_nothing(
) {
    let destination = harness::cluster("destination");
    let python = python_interpreter();
    let base_topic = harness::unique_topic("f15-base");
    let topic = harness::unique_topic("f15");
    harness::create_topic(&destination, &base_topic, 2, Some(&[1, 2]));
    harness::create_topic(&destination, &topic, 2, Some(&[1, 2]));
    let mut cfg = mirror_config("f15base", &[&base_topic]);
    cfg.mirrors.push(MirrorConfig {
        name: "f15".into(),
        topics: vec![topic.clone()],
        source: None,
        transactions: Default::default(),
        configs: Default::default(),
        acls: Default::default(),
        groups: Default::default(),
        recovery: Default::default(),
        forward: None,
        mirroring: Default::default(),
    });
    let gw = TestGateway::start(cfg);
    wait_mirroring(&gw.admin(), "f15base", 2);
    wait_mirroring(&gw.admin(), "f15", 2);

    // Without the overlap: a mirror whose producer ids lie below every broker's position.
    let pos = positions(&destination);
    let low = *pos.values().min().expect("brokers");
    let below: Vec<i64> = (low.saturating_sub(20)..low).collect();
    mirror_ids(&gw, &destination, &base_topic, &below);
    failover(&gw.admin(), "f15base");
    let (s, c) = wait_stopped_times(&gw.admin(), "f15base");
    let base_duration = c - s;

    // With the overlap: the next MIRRORED_IDS ids of the brokers, mirrored into both partitions.
    let pos = positions(&destination);
    let ids = overlapping_ids(&pos, MIRRORED_IDS);
    let t = Instant::now();
    mirror_ids(&gw, &destination, &topic, &ids);
    eprintln!(
        "F15: broker positions {pos:?}; mirrored {} producer ids {}..={} into 2 partitions in {:.1} s",
        ids.len(),
        ids[0],
        ids[ids.len() - 1],
        t.elapsed().as_secs_f64()
    );
    failover(&gw.admin(), "f15");
    let (started, stopped) = wait_stopped_times(&gw.admin(), "f15");
    let overlap_duration = stopped - started;
    // The failover moved every broker's producer-id allocator past the mirrored ids.
    let after = positions(&destination);
    let highest = *ids.iter().max().expect("ids");
    assert!(
        after.values().all(|next| *next > highest),
        "every broker hands out ids above the mirrored ones after the failover: {after:?}, highest mirrored {highest}"
    );
    let screened_before = gw.metric("mirrorgate_pid_screened_total");

    // Java, librdkafka and kafka-python producers, started together right after STOPPED.
    let bootstrap = gw.bootstrap();
    let (java, rd, py) = std::thread::scope(|s| {
        let j = s.spawn(|| java_run(&bootstrap, &topic));
        let r = s.spawn(|| librdkafka_run(&bootstrap, &topic));
        let p = s.spawn(|| python_run(&bootstrap, &topic, &python));
        (
            j.join().expect("java"),
            r.join().expect("librdkafka"),
            p.join().expect("python"),
        )
    });

    let runs = [("Java", &java), ("librdkafka", &rd), ("kafka-python", &py)];
    let mut report = format!(
        "F15: failover without overlap {base_duration} ms; with {} overlapping mirrored ids {overlap_duration} ms\n",
        ids.len()
    );
    for (name, run) in &runs {
        report.push_str(&format!(
            "F15: {name}: started {} ms after STOPPED; first ack {}; {} of {RECORDS} acknowledged; {} errors{}\n",
            run.started_ms.map(|t| (t - stopped).to_string()).unwrap_or("?".into()),
            run.first_ack_ms()
                .map(|t| format!("{} ms after STOPPED", t - stopped))
                .unwrap_or_else(|| format!("none within {CLIENT_TIMEOUT_MS} ms")),
            run.acks.len(),
            run.errors.len(),
            run.errors
                .first()
                .map(|e| format!(" (first: {e})"))
                .unwrap_or_default()
        ));
    }
    for series in [
        "mirrorgate_pid_screened_total",
        "mirrorgate_duplicate_ack_guard_total",
        "mirrorgate_pid_allocator_advances_total{outcome=\"advanced\"}",
        "mirrorgate_pid_allocator_ids_skipped_total",
        "mirrorgate_pid_allocator_advance_duration_seconds_sum",
    ] {
        report.push_str(&format!("F15: {series} {}\n", gw.metric(series)));
    }
    for m in ["f15base", "f15"] {
        report.push_str(&format!(
            "F15: {m} pid_allocator {}\n",
            mirror_json(&gw.admin(), m)["pid_allocator"]
        ));
    }
    eprint!("{report}");

    // No new producer needed screening: each got an id no mirrored producer used, on its first
    // InitProducerId (with screening alone, each overlapping id costs a re-ask and the clients
    // back off; the time to the first acknowledgement is reported above as a figure, and
    // `mirrorgate-bench failover` measures it).
    assert_eq!(
        gw.metric("mirrorgate_pid_screened_total") - screened_before,
        0.0,
        "no producer id handed out after the failover was a mirrored one\n{report}"
    );
    for (name, run) in &runs {
        assert!(
            run.errors.is_empty() && run.acks.len() == RECORDS,
            "{name}: {} of {RECORDS} acknowledged, errors {:?}",
            run.acks.len(),
            run.errors
        );
    }
    // Nothing lost: every acknowledged record is in the log, after the barrier, under its key
    // (Java: its value), written by a producer id that was not mirrored.
    let mirrored: BTreeSet<i64> = ids.iter().copied().collect();
    let mut log = BTreeMap::new();
    let mut barrier = BTreeMap::new();
    for p in 0..2 {
        let l = read_log(&destination, &topic, p);
        assert_eq!(l.barriers.len(), 1, "barriers of partition {p}");
        barrier.insert(p, l.barriers[0].0);
        for r in l.records {
            log.insert((p, r.offset), r);
        }
    }
    for (name, run) in &runs {
        for (id, p, o, _) in &run.acks {
            let r = log
                .get(&(*p, *o))
                .unwrap_or_else(|| panic!("{name}: acked {id} at {p}/{o} is not in the log"));
            let held = if *name == "Java" {
                r.value.as_deref()
            } else {
                r.key.as_deref()
            };
            assert_eq!(
                held,
                Some(id.as_str()),
                "{name}: acked {id} at {p}/{o} but the log holds {r:?}"
            );
            assert!(
                *o > barrier[p],
                "{name}: acked {id} at {p}/{o} before the barrier"
            );
            assert!(
                !mirrored.contains(&r.producer_id),
                "{name}: {r:?} written with a mirrored producer id"
            );
        }
    }
    assert_eq!(
        gw.metric("mirrorgate_duplicate_ack_guard_total"),
        0.0,
        "no acknowledgement below the barrier"
    );
}
