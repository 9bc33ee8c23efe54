//! Where the barrier goes and who sees it: every mirrored record before it, consumers through
//! the gateway never see it, and it is written whatever the topic's timestamp limits.

use super::*;

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
