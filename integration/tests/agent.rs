//! The built-in mirror agent (issue 6) on real clusters: active-passive A→B with a failover while
//! a producer writes to A, the source killed before the failover, a transactional batch, and the
//! configuration it requires.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hyper::Method;
use mirrorgate::config::{ClusterConfig, Config, MirrorConfig};
use rdkafka::config::ClientConfig;
use rdkafka::message::{DeliveryResult, Message};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};
use rdkafka::ClientContext;

use mirrorgate::mirror::agent::offsets::{MirrorOffsets, PartitionMap, Range};

use crate::failover::{data_barrier, failover, wait_stopped};
use crate::gw::{admin_call, test_config, TestGateway};
use crate::harness;
use crate::psm_differential::{broker_producers, gateway_producers, RawConn};

/// (offset, key, value) of the data records of a partition, and the barrier offsets.
struct Log {
    records: Vec<(i64, Option<String>, Option<String>)>,
    barriers: Vec<i64>,
}

fn leader_addr(bootstrap: &str, topic: &str, partition: i32) -> String {
    harness::leader_addr(bootstrap, topic, partition)
}

/// Every data record of a partition of any cluster (barriers left out), read from its leader.
fn read_log(bootstrap: &str, topic: &str, partition: i32) -> Log {
    let log = crate::failover::read_log(bootstrap, topic, partition);
    Log {
        records: log
            .records
            .into_iter()
            .filter(|r| !r.control && r.key.as_deref() != Some("__mirrorgate_barrier"))
            .map(|r| (r.offset, r.key, r.value))
            .collect(),
        barriers: log.barriers.into_iter().map(|(o, _, _)| o).collect(),
    }
}

// ------------------------------------------------------------------ source writer

#[derive(Default)]
struct Delivered {
    acked: AtomicUsize,
    errors: Mutex<Vec<String>>,
}

struct Ctx(Arc<Delivered>);
impl ClientContext for Ctx {}
impl ProducerContext for Ctx {
    type DeliveryOpaque = ();
    fn delivery(&self, r: &DeliveryResult<'_>, _: ()) {
        match r {
            Ok(_) => {
                self.0.acked.fetch_add(1, Ordering::SeqCst);
            }
            Err((e, m)) => self
                .0
                .errors
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(format!("{e} (partition {})", m.partition())),
        }
    }
}

/// A librdkafka producer writing `{prefix}-{i}` records to the source in a thread, about `rate`
/// records per second, until `n` records or `stop()` (also set when dropped, e.g. on a panic).
/// Idempotent (acks=all) unless started with [`SourceWriter::start_without_producer_id`].
struct SourceWriter {
    stop: Arc<AtomicBool>,
    delivered: Arc<Delivered>,
    thread: Option<std::thread::JoinHandle<usize>>,
}

impl SourceWriter {
    fn start(bootstrap: &str, topic: &str, prefix: &str, n: usize, rate: u64) -> SourceWriter {
        Self::start_with(bootstrap, topic, prefix, n, rate, true)
    }

    /// A plain producer (`enable.idempotence=false`, `acks=1`): its batches carry no producer
    /// id (-1), so nothing but the agent's own check can keep a retried append from doubling.
    fn start_without_producer_id(
        bootstrap: &str,
        topic: &str,
        prefix: &str,
        n: usize,
        rate: u64,
    ) -> SourceWriter {
        Self::start_with(bootstrap, topic, prefix, n, rate, false)
    }

    fn start_with(
        bootstrap: &str,
        topic: &str,
        prefix: &str,
        n: usize,
        rate: u64,
        idempotent: bool,
    ) -> SourceWriter {
        let stop = Arc::new(AtomicBool::new(false));
        let delivered = Arc::new(Delivered::default());
        let mut cfg = ClientConfig::new();
        cfg.set("bootstrap.servers", bootstrap)
            .set("linger.ms", "5")
            .set("message.timeout.ms", "60000");
        if idempotent {
            cfg.set("enable.idempotence", "true").set("acks", "all");
        } else {
            cfg.set("enable.idempotence", "false")
                .set("acks", "1")
                .set("max.in.flight.requests.per.connection", "1");
        }
        let producer: BaseProducer<Ctx> = cfg
            .create_with_context(Ctx(delivered.clone()))
            .expect("producer");
        let (t, p, s) = (topic.to_string(), prefix.to_string(), stop.clone());
        let thread = std::thread::spawn(move || {
            let pause = Duration::from_micros(1_000_000 / rate.max(1));
            let mut sent = 0;
            while sent < n && !s.load(Ordering::SeqCst) {
                let key = format!("{p}-{sent}");
                let value = format!("value-{p}-{sent}");
                let rec = BaseRecord::to(&t).key(&key).payload(&value);
                if producer.send(rec).is_ok() {
                    sent += 1;
                }
                producer.poll(Duration::ZERO);
                std::thread::sleep(pause);
            }
            producer
                .flush(Duration::from_secs(60))
                .expect("source producer flush");
            sent
        });
        SourceWriter {
            stop,
            delivered,
            thread: Some(thread),
        }
    }

    /// Records acknowledged so far.
    fn acked(&self) -> usize {
        self.delivered.acked.load(Ordering::SeqCst)
    }

    /// Whether the writer is still sending (neither stopped nor through its `n` records).
    fn is_running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// Stop (or wait for the `n` records) and return how many were acknowledged.
    fn finish(mut self, stop: bool) -> usize {
        if stop {
            self.stop.store(true, Ordering::SeqCst);
        }
        let sent = self.thread.take().expect("thread").join().expect("writer");
        let errors = self.delivered.errors.lock().unwrap().clone();
        assert!(errors.is_empty(), "source producer errors: {errors:?}");
        let acked = self.delivered.acked.load(Ordering::SeqCst);
        assert_eq!(
            acked, sent,
            "every record sent to the source is acknowledged"
        );
        acked
    }
}

impl Drop for SourceWriter {
    /// A test that panics with a writer running does not leave it producing until the test
    /// binary exits (review 3.4).
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

// ------------------------------------------------------------------ helpers

fn agent_config(name: &str, topics: &[&str], source: &str) -> Config {
    let mut cfg = test_config(&harness::cluster("destination"));
    cfg.mirrors = vec![MirrorConfig {
        name: name.into(),
        topics: topics.iter().map(|t| t.to_string()).collect(),
        source: Some(ClusterConfig {
            bootstrap: source.split(',').map(|s| s.trim().to_string()).collect(),
            connect_timeout_ms: 3000,
            metadata_refresh_ms: 30_000,
            tls: None,
            sasl: None,
        }),
    }];
    cfg.psm.snapshot_interval_ms = 200;
    cfg
}

fn partitions_json(admin: &str, name: &str) -> Vec<serde_json::Value> {
    let (status, body) = admin_call(
        admin,
        Method::GET,
        &format!("/v1/mirrors/{name}/partitions"),
        None,
    );
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("json");
    v["partitions"].as_array().cloned().unwrap_or_default()
}

fn kv(log: &Log) -> Vec<(Option<String>, Option<String>)> {
    log.records
        .iter()
        .map(|(_, k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Poll `cond` every 100 ms until it holds; panic after `timeout`.
fn wait_for(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(Instant::now() < deadline, "not within {timeout:?}: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The offset after the last data record of a partition (0 when it has none).
fn log_end(bootstrap: &str, topic: &str, partition: i32) -> i64 {
    read_log(bootstrap, topic, partition)
        .records
        .last()
        .map_or(0, |r| r.0 + 1)
}

/// Wait until every partition of the destination holds exactly the source's records (same
/// keys and values in the same order) and the admin API reports lag 0.
fn wait_caught_up(admin: &str, name: &str, source: &str, topic: &str, partitions: i32) {
    let destination = harness::cluster("destination");
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let parts = partitions_json(admin, name);
        let lag_zero = parts.len() == partitions as usize
            && parts.iter().all(|p| {
                p["state"] == "MIRRORING" && p["lag_records"] == 0 && p["lag_seconds"] == 0.0
            });
        let equal = lag_zero
            && (0..partitions)
                .all(|p| kv(&read_log(source, topic, p)) == kv(&read_log(&destination, topic, p)));
        if equal {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "mirror {name} did not catch up with the source: {parts:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// After a failover: per partition, exactly one barrier, the records before it equal the
/// source's first records one by one, and the agent's offset map ends at the barrier.
fn assert_mirrored_up_to_the_barrier(
    gw: &TestGateway,
    name: &str,
    source: &str,
    topic: &str,
    partitions: i32,
) -> BTreeMap<i32, i64> {
    let destination = harness::cluster("destination");
    let mut barriers = BTreeMap::new();
    for p in 0..partitions {
        let d = read_log(&destination, topic, p);
        let s = read_log(source, topic, p);
        assert_eq!(d.barriers.len(), 1, "partition {p}: one barrier");
        let barrier = d.barriers[0];
        let before: Vec<_> = d.records.iter().filter(|r| r.0 < barrier).collect();
        assert!(
            before.len() <= s.records.len(),
            "partition {p}: more records mirrored than the source has"
        );
        for (i, (d, s)) in before.iter().zip(s.records.iter()).enumerate() {
            assert_eq!(
                (&d.1, &d.2),
                (&s.1, &s.2),
                "partition {p}: record {i} differs from the source"
            );
        }
        let map = gw
            .gateway
            .agent
            .as_ref()
            .expect("agent")
            .offset_map(name, topic, p)
            .expect("offset map");
        let (next_src, next_dst) = map.next().expect("map entry");
        assert_eq!(
            next_dst, barrier,
            "partition {p}: the offset map ends at the barrier"
        );
        if let Some(last) = before.last() {
            let src_last = s.records[before.len() - 1].0;
            assert_eq!(map.to_source(last.0), Some(src_last));
            assert_eq!(next_src, src_last + 1);
        }
        barriers.insert(p, barrier);
    }
    barriers
}

/// Local producers through the gateway after the failover: every acknowledged record is
/// consumed exactly once, after the barrier.
fn assert_local_producers_lose_nothing(
    gw: &TestGateway,
    topic: &str,
    barriers: &BTreeMap<i32, i64>,
) {
    let acks = harness::produce_keyed(&gw.bootstrap(), topic, 500, &[]);
    for a in &acks {
        assert!(
            a.offset > barriers[&a.partition],
            "local record after the barrier"
        );
    }
    let destination = harness::cluster("destination");
    let mut consumed: BTreeMap<i32, Vec<harness::Consumed>> = BTreeMap::new();
    for (p, b) in barriers {
        let log = read_log(&destination, topic, *p);
        let after: Vec<harness::Consumed> = log
            .records
            .iter()
            .filter(|r| r.0 > *b)
            .map(|r| harness::Consumed {
                offset: r.0,
                key: r.1.clone(),
                value: r.2.clone(),
            })
            .collect();
        if !after.is_empty() {
            consumed.insert(*p, after);
        }
    }
    harness::assert_same_per_partition(&acks, &consumed);
    // And through the gateway with a consumer group: the local records exactly once.
    let group = harness::unique_topic("agent-group");
    let total: usize = (0..barriers.len() as i32)
        .map(|p| read_log(&destination, topic, p).records.len())
        .sum();
    let all = harness::consume_group(
        &gw.bootstrap(),
        topic,
        &group,
        total,
        Duration::from_secs(60),
        &[],
    );
    let mut local: BTreeMap<i32, Vec<harness::Consumed>> = BTreeMap::new();
    for (p, list) in all {
        let after: Vec<_> = list
            .into_iter()
            .filter(|c| c.offset > barriers[&p])
            .collect();
        if !after.is_empty() {
            local.insert(p, after);
        }
    }
    harness::assert_same_per_partition(&acks, &local);
}

// ------------------------------------------------------------------ tests

#[test]
fn active_passive_mirrors_as_is_and_fails_over_while_the_source_is_written() {
    let source = harness::cluster("source");
    let topic = harness::unique_topic("agent-ap");
    harness::create_topic(&source, &topic, 2, None);
    // Records from before the agent starts, then the agent creates the destination topic.
    SourceWriter::start(&source, &topic, "pre", 400, 5000).finish(false);
    let gw = TestGateway::start(agent_config("ap", &[&topic], &source));
    wait_caught_up(&gw.admin(), "ap", &source, &topic, 2);
    // The gateway's producer state of each mirrored partition equals the source broker's.
    for p in 0..2 {
        let mut conn = RawConn::connect(&leader_addr(&source, &topic, p));
        let broker = broker_producers(&mut conn, &topic, p);
        assert!(!broker.is_empty(), "the source has producer state");
        assert_eq!(
            gateway_producers(&gw.admin(), &topic, p),
            broker,
            "partition {p}: the PSM equals the source broker's DescribeProducers"
        );
    }
    assert!(
        gw.metrics().contains(&format!(
            "mirrorgate_mirror_lag_records{{mirror=\"ap\",partition=\"0\",topic=\"{topic}\"}} 0"
        )),
        "lag metric: {}",
        gw.metrics()
            .lines()
            .filter(|l| l.contains("lag"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // Local writes are refused while mirroring.
    let refused = crate::failover::produce_one_expect_error(&gw.bootstrap(), &topic);
    assert!(
        refused.to_lowercase().contains("policy") || refused.contains("read-only"),
        "{refused}"
    );

    // A producer writes to the source; fail over in the middle of it.
    let destination = harness::cluster("destination");
    let writer = SourceWriter::start(&source, &topic, "live", 1_000_000, 400);
    let mirrored_live = || {
        (0..2)
            .flat_map(|p| read_log(&destination, &topic, p).records)
            .filter(|r| r.1.as_deref().is_some_and(|k| k.starts_with("live-")))
            .count()
    };
    wait_for("live records mirrored", Duration::from_secs(60), || {
        mirrored_live() > 0 && writer.acked() > 100
    });
    assert!(
        writer.is_running(),
        "the failover starts while the source is written"
    );
    failover(&gw.admin(), "ap");
    wait_stopped(&gw.admin(), "ap");
    // The source goes on being written: wait until every partition holds records past what the
    // agent mirrored, so that "nothing after the barrier" has something to leave out.
    let mirrored_to: Vec<i64> = (0..2)
        .map(|p| agent_map_next(&gw, "ap", &topic, p).expect("offset map").0)
        .collect();
    wait_for(
        "the source written past the mirrored records",
        Duration::from_secs(60),
        || (0..2).all(|p| log_end(&source, &topic, p) >= mirrored_to[p as usize] + 50),
    );
    let live = writer.finish(true);
    assert!(live > 100, "the source producer made progress ({live})");
    let barriers = assert_mirrored_up_to_the_barrier(&gw, "ap", &source, &topic, 2);
    // The agent is stopped: nothing is appended after the barrier.
    for (p, b) in &barriers {
        let log = read_log(&destination, &topic, *p);
        assert!(
            log.records.iter().all(|r| r.0 < *b),
            "partition {p}: nothing after the barrier"
        );
    }
    // Some live records were mirrored before the barrier.
    assert!(
        mirrored_live() > 0,
        "live records were mirrored before the failover"
    );
    assert_local_producers_lose_nothing(&gw, &topic, &barriers);
}

#[test]
fn disruptive_the_source_killed_before_the_failover_does_not_block_it() {
    let third = harness::cluster("third");
    let topic = harness::unique_topic("agent-kill");
    harness::create_topic(&third, &topic, 2, None);
    SourceWriter::start(&third, &topic, "pre", 300, 5000).finish(false);
    let gw = TestGateway::start(agent_config("killed", &[&topic], &third));
    wait_caught_up(&gw.admin(), "killed", &third, &topic, 2);
    let expected: Vec<Log> = (0..2).map(|p| read_log(&third, &topic, p)).collect();
    let _restart = harness::StoppedNode::kill("third", "1");
    std::thread::sleep(Duration::from_secs(2));
    // An unreachable source does not block the failover (wait_stopped bounds it).
    failover(&gw.admin(), "killed");
    wait_stopped(&gw.admin(), "killed");
    let destination = harness::cluster("destination");
    let mut barriers = BTreeMap::new();
    for p in 0..2 {
        let d = read_log(&destination, &topic, p);
        assert_eq!(d.barriers.len(), 1);
        let before: Vec<_> = d
            .records
            .iter()
            .filter(|r| r.0 < d.barriers[0])
            .cloned()
            .collect();
        assert_eq!(
            before
                .iter()
                .map(|r| (r.1.clone(), r.2.clone()))
                .collect::<Vec<_>>(),
            kv(&expected[p as usize]),
            "partition {p}: the destination holds the source's records up to the barrier"
        );
        barriers.insert(p, d.barriers[0]);
    }
    assert_local_producers_lose_nothing(&gw, &topic, &barriers);
}

/// Runs alone: destination broker 2 (leader of partition 1, replication factor 1) is killed while
/// the agent mirrors a steady stream, then restarted. The agent waits and resumes; the
/// destination ends up with exactly the source's records: nothing lost, nothing doubled.
#[test]
fn disruptive_destination_broker_killed_during_mirroring_resumes_without_loss_or_duplicates() {
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("agent-dkill");
    harness::create_topic(&source, &topic, 2, None);
    harness::create_topic(&destination, &topic, 2, Some(&[1, 2]));
    let gw = TestGateway::start(agent_config("dkill", &[&topic], &source));
    let writer = SourceWriter::start(&source, &topic, "live", 3000, 300);
    kill_destination_broker_2_while_mirroring(&gw, "dkill", &topic, &writer);
    writer.finish(false);
    wait_caught_up(&gw.admin(), "dkill", &source, &topic, 2);
}

/// Kill destination broker 2 (leader of partition 1) once the agent has mirrored records into
/// partition 1 while `writer` still writes the source; keep it down until the source has
/// taken 300 more records (a backlog for partition 1), then restart it.
fn kill_destination_broker_2_while_mirroring(
    gw: &TestGateway,
    name: &str,
    topic: &str,
    writer: &SourceWriter,
) {
    wait_for(
        "records mirrored into partition 1",
        Duration::from_secs(60),
        || agent_map_next(gw, name, topic, 1).is_some_and(|(_, d)| d > 0),
    );
    assert!(
        writer.is_running(),
        "the source is still written at the kill"
    );
    let restart = harness::StoppedNode::kill("destination", "2");
    let at_kill = writer.acked();
    wait_for(
        "the source written while destination broker 2 is down",
        Duration::from_secs(60),
        || writer.acked() >= at_kill + 300,
    );
    assert!(
        writer.is_running(),
        "the source is still written when the broker comes back"
    );
    drop(restart);
}

/// Runs alone. README "retries never duplicate", for batches without a producer id: the source
/// is written by a plain producer (`enable.idempotence=false`, `acks=1`), so the destination
/// broker cannot deduplicate a resent batch and only the agent's own check (the destination log
/// end against the offset map) can. Destination broker 2 (leader of partition 1) is killed
/// while the agent mirrors and restarted: the destination ends up with exactly the source's
/// log, the same records at the same offsets, and the offset map is one range per partition.
#[test]
fn disruptive_batches_without_a_producer_id_are_mirrored_exactly_once_across_a_destination_broker_kill(
) {
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("agent-nopid");
    harness::create_topic(&source, &topic, 2, None);
    harness::create_topic(&destination, &topic, 2, Some(&[1, 2]));
    let gw = TestGateway::start(agent_config("nopid", &[&topic], &source));
    let writer = SourceWriter::start_without_producer_id(&source, &topic, "plain", 3000, 300);
    kill_destination_broker_2_while_mirroring(&gw, "nopid", &topic, &writer);
    writer.finish(false);
    wait_caught_up(&gw.admin(), "nopid", &source, &topic, 2);
    for p in 0..2 {
        let s = crate::failover::read_log(&source, &topic, p);
        assert!(
            !s.records.is_empty() && s.records.iter().all(|r| r.producer_id == -1),
            "partition {p}: the source batches carry no producer id"
        );
        let d = crate::failover::read_log(&destination, &topic, p);
        assert_eq!(
            offsets_keys_values(&d),
            offsets_keys_values(&s),
            "partition {p}: the destination log (left) equals the source log (right), offsets included"
        );
        assert_eq!(
            agent_map(&gw, "nopid", &topic, p).ranges,
            vec![Range {
                source: 0,
                destination: 0,
                count: s.records.len() as i64
            }],
            "partition {p}: every source offset maps to the same destination offset"
        );
    }
}

/// README "retries never duplicate", for batches without a producer id, with the lost answers
/// made certain: the gateway process drops the answers of the agent's first 3 appends after the
/// broker appended them (test hook `MIRRORGATE_TEST_LOSE_AGENT_APPEND_ANSWERS`). The source is
/// written by a plain producer, so the broker cannot deduplicate a resend; the agent finds each
/// of the 3 batches in the destination log and does not resend it. The destination log equals
/// the source log, offsets included.
#[test]
fn an_append_without_a_producer_id_whose_answer_was_lost_is_found_in_the_log_and_not_resent() {
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("agent-lost");
    harness::create_topic(&source, &topic, 1, None);
    harness::create_topic(&destination, &topic, 1, Some(&[1]));
    let written =
        SourceWriter::start_without_producer_id(&source, &topic, "plain", 200, 2000).finish(false);
    assert_eq!(written, 200, "the source holds 200 records");
    let gw = crate::gw::ProcessGateway::start(
        agent_config("lost", &[&topic], &source),
        &[("MIRRORGATE_TEST_LOSE_AGENT_APPEND_ANSWERS", "3")],
    );
    wait_caught_up(&gw.admin(), "lost", &source, &topic, 1);
    let s = crate::failover::read_log(&source, &topic, 0);
    assert!(
        s.records.iter().all(|r| r.producer_id == -1),
        "the source batches carry no producer id"
    );
    let d = crate::failover::read_log(&destination, &topic, 0);
    assert_eq!(
        offsets_keys_values(&d),
        offsets_keys_values(&s),
        "the destination log (left) equals the source log (right), offsets included"
    );
    let series = |resolution: &str| {
        crate::failover::process_metric(
            &gw,
            &format!(
                "mirrorgate_agent_unknown_outcomes_total{{mirror=\"lost\",resolution=\"{resolution}\"}}"
            ),
        )
    };
    assert_eq!(
        (series("already_appended"), series("resent")),
        (3.0, 0.0),
        "each of the 3 lost answers was resolved by finding the batch in the log"
    );
}

/// (offset, key, value) of every record of a partition log, barriers and control records
/// included.
fn offsets_keys_values(
    log: &crate::failover::PartitionLog,
) -> Vec<(i64, Option<String>, Option<String>)> {
    log.records
        .iter()
        .map(|r| (r.offset, r.key.clone(), r.value.clone()))
        .collect()
}

fn agent_map(gw: &TestGateway, name: &str, topic: &str, p: i32) -> PartitionMap {
    gw.gateway
        .agent
        .as_ref()
        .expect("agent")
        .offset_map(name, topic, p)
        .unwrap_or_else(|| panic!("no offset map for {topic}-{p}"))
}

/// The offset map a (possibly dead) gateway process persisted for mirror `name`.
fn persisted_map(cfg: &Config, name: &str) -> Option<MirrorOffsets> {
    let file = cfg.state_dir.join("agent").join(format!("{name}.json"));
    MirrorOffsets::decode(&std::fs::read(file).ok()?).ok()
}

/// The log ends of the destination partitions, once two readings 300 ms apart agree (appends
/// a killed gateway had in flight have landed).
fn settled_log_ends(destination: &str, topic: &str, partitions: i32) -> Vec<i64> {
    let read = || {
        (0..partitions)
            .map(|p| log_end(destination, topic, p))
            .collect::<Vec<_>>()
    };
    let mut last = read();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        std::thread::sleep(Duration::from_millis(300));
        let now = read();
        if now == last {
            return now;
        }
        assert!(Instant::now() < deadline, "destination log still moving");
        last = now;
    }
}

/// Log line of the agent matching a destination batch it finds beyond its offset map.
const RECOVERED: &str = "recovered a mirrored batch missing from the offset map";
/// Log line of the agent starting without an offset map on an aligned destination.
const ALIGNED: &str = "the destination is aligned with the source; mirroring continues from there";

/// The gateway process is killed (kill -9) while its agent mirrors a steady stream, and
/// restarted: the agent resumes from its offset map and matches the destination tail that map
/// did not record yet (appends acknowledged after its last flush) batch by batch, and the
/// destination ends up with exactly the source's records (nothing appended twice).
///
/// The kill comes once records are mirrored and the writer still runs, and it must leave such
/// an unknown tail (the map is persisted every second, so almost every kill does); a kill that
/// happens to land right after a flush is followed by another one.
#[test]
fn disruptive_gateway_killed_during_mirroring_resumes_without_loss_or_duplicates() {
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("agent-gkill");
    harness::create_topic(&source, &topic, 2, None);
    let cfg = agent_config("gkill", &[&topic], &source);
    let mut gw = crate::gw::ProcessGateway::start(cfg.clone(), &[]);
    let writer = SourceWriter::start(&source, &topic, "live", 1_000_000, 500);
    let mut attempts = 0;
    let (at_kill, tail_partitions, log_from) = loop {
        attempts += 1;
        let before: Vec<i64> = (0..2).map(|p| log_end(&destination, &topic, p)).collect();
        // Both partitions have an offset map on disk (so the restart resumes from it, not
        // from an alignment check) and more mirrored records than before.
        wait_for(
            "more records mirrored on both partitions, with a persisted offset map",
            Duration::from_secs(60),
            || {
                let m = persisted_map(&cfg, "gkill");
                (0..2).all(|p| {
                    m.as_ref().is_some_and(|m| m.get(&topic, p).is_some())
                        && log_end(&destination, &topic, p) > before[p as usize]
                })
            },
        );
        assert!(
            writer.is_running(),
            "the source is still written at the kill"
        );
        gw.kill9();
        let at_kill = settled_log_ends(&destination, &topic, 2);
        let persisted = persisted_map(&cfg, "gkill");
        let persisted_next = |p: i32| {
            persisted
                .as_ref()
                .and_then(|m| m.get(&topic, p))
                .and_then(|m| m.next())
                .map_or(0, |(_, d)| d)
        };
        let tail: Vec<i32> = (0..2)
            .filter(|p| persisted_next(*p) < at_kill[*p as usize])
            .collect();
        let log_from = gw.log().len();
        gw.restart(&[]);
        if !tail.is_empty() {
            break (at_kill, tail, log_from);
        }
        assert!(
            attempts < 5,
            "5 kills, each right after the offset map was persisted (no unknown tail)"
        );
    };
    assert!(
        at_kill.iter().all(|n| *n > 0),
        "records mirrored before the kill: {at_kill:?}"
    );
    assert!(
        writer.is_running(),
        "the source is still written after the restart"
    );
    let acked = writer.acked();
    wait_for(
        "the source written after the restart",
        Duration::from_secs(60),
        || writer.acked() >= acked + 200,
    );
    writer.finish(true);
    wait_caught_up(&gw.admin(), "gkill", &source, &topic, 2);
    // The restarted agent resumed from its map (no alignment from scratch) and matched the
    // tail the map did not know.
    let log = gw.log()[log_from..].to_string();
    assert!(
        !log.contains(ALIGNED),
        "the agent started without its offset map:\n{log}"
    );
    for p in &tail_partitions {
        assert!(
            log.lines()
                .any(|l| l.contains(RECOVERED) && l.contains(&format!("partition={p}"))),
            "partition {p}: the unknown tail (destination log end {} at the kill) was not matched \
             batch by batch:\n{log}",
            at_kill[*p as usize]
        );
    }
    // The persisted map covers every record mirrored before the kill, mapping each to the same
    // source offset (one range from 0: nothing skipped, nothing doubled).
    wait_for(
        "the offset map persisted up to the destination log end",
        Duration::from_secs(10),
        || {
            let m = persisted_map(&cfg, "gkill");
            (0..2).all(|p| {
                m.as_ref()
                    .and_then(|m| m.get(&topic, p))
                    .and_then(|m| m.next())
                    == Some((
                        log_end(&source, &topic, p),
                        log_end(&destination, &topic, p),
                    ))
            })
        },
    );
    let map = persisted_map(&cfg, "gkill").expect("offset map");
    for p in 0..2 {
        let ranges = &map.get(&topic, p).expect("partition map").ranges;
        assert_eq!(ranges.len(), 1, "partition {p}: {ranges:?}");
        assert_eq!((ranges[0].source, ranges[0].destination), (0, 0));
        assert!(
            ranges[0].count >= at_kill[p as usize],
            "partition {p}: the map ({ranges:?}) covers the {} records mirrored before the kill",
            at_kill[p as usize]
        );
    }
}

/// Runs alone: destination broker 2 is down when the failover starts. Its partition cannot get
/// a barrier: it stays read-only (FAILED, with the reason) while partition 0 completes; when the
/// broker is back the failover completes by itself with exactly one barrier per partition and
/// every mirrored record before it.
#[test]
fn disruptive_destination_broker_killed_during_failover_completes_with_one_barrier_per_partition() {
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("agent-fkill");
    harness::create_topic(&source, &topic, 2, None);
    harness::create_topic(&destination, &topic, 2, Some(&[1, 2]));
    SourceWriter::start(&source, &topic, "pre", 600, 5000).finish(false);
    let gw = TestGateway::start(agent_config("fkill", &[&topic], &source));
    wait_caught_up(&gw.admin(), "fkill", &source, &topic, 2);
    let restart = harness::StoppedNode::kill("destination", "2");
    failover(&gw.admin(), "fkill");
    let deadline = Instant::now() + Duration::from_secs(60);
    let p1 = loop {
        let parts = partitions_json(&gw.admin(), "fkill");
        let p1 = parts
            .iter()
            .find(|p| p["partition"] == 1)
            .cloned()
            .expect("partition 1");
        assert_ne!(p1["state"], "STOPPED", "opened without its barrier: {p1}");
        if p1["state"] == "FAILED"
            && parts
                .iter()
                .any(|p| p["partition"] == 0 && p["state"] == "STOPPED")
        {
            break p1;
        }
        assert!(
            Instant::now() < deadline,
            "partition 1 not FAILED: {parts:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        p1["last_error"].as_str().is_some_and(|e| !e.is_empty()),
        "FAILED without a reason: {p1}"
    );
    let mut local = RawConn::connect(&gw.bootstrap());
    let (code, _, msg) = local.produce_msg(
        &topic,
        1,
        crate::psm_differential::batch(-1, -1, -1, 1, "early"),
    );
    assert_eq!(code, 44, "partition 1 writable before its barrier: {msg}");
    drop(restart);
    wait_stopped(&gw.admin(), "fkill");
    let barriers = assert_mirrored_up_to_the_barrier(&gw, "fkill", &source, &topic, 2);
    assert_local_producers_lose_nothing(&gw, &topic, &barriers);
}

#[test]
fn a_transactional_batch_fails_the_partition_with_a_clear_reason() {
    let source = harness::cluster("source");
    let topic = harness::unique_topic("agent-txn");
    harness::create_topic(&source, &topic, 1, None);
    SourceWriter::start(&source, &topic, "plain", 10, 5000).finish(false);
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &source)
        .set(
            "transactional.id",
            format!("agent-txn-{}", std::process::id()),
        )
        .create()
        .expect("transactional producer");
    producer
        .init_transactions(Duration::from_secs(30))
        .expect("init transactions");
    producer.begin_transaction().expect("begin");
    producer
        .send(BaseRecord::to(&topic).key("txn").payload("txn"))
        .map_err(|(e, _)| e)
        .expect("send");
    producer
        .commit_transaction(Duration::from_secs(30))
        .expect("commit");
    let gw = TestGateway::start(agent_config("txn", &[&topic], &source));
    let deadline = Instant::now() + Duration::from_secs(60);
    let part = loop {
        let parts = partitions_json(&gw.admin(), "txn");
        if let Some(p) = parts.iter().find(|p| p["state"] == "FAILED") {
            break p.clone();
        }
        assert!(Instant::now() < deadline, "partition not FAILED: {parts:?}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let reason = part["last_error"].as_str().unwrap_or_default();
    assert!(
        reason.contains("transactional/control batches are not mirrored in this version"),
        "{reason}"
    );
    // The plain records before the transaction were mirrored; nothing of the transaction.
    let d = read_log(&harness::cluster("destination"), &topic, 0);
    assert_eq!(d.records.len(), 10, "only the plain records");
    // A failover still completes.
    failover(&gw.admin(), "txn");
    wait_stopped(&gw.admin(), "txn");
}

#[test]
fn a_mirror_with_a_source_requires_the_mirror_listener() {
    let mut cfg = agent_config("nolistener", &["agent-nolistener"], "127.0.0.1:1");
    cfg.listeners.mirror = None;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    let err = rt
        .block_on(mirrorgate::app::Gateway::start(cfg))
        .err()
        .expect("refused");
    let msg = err.to_string();
    assert!(
        msg.contains("listeners.mirror") && msg.contains("nolistener"),
        "{msg}"
    );
}

#[test]
fn a_restarted_gateway_resumes_from_the_offset_map_without_duplicates() {
    let source = harness::cluster("source");
    let topic = harness::unique_topic("agent-restart");
    harness::create_topic(&source, &topic, 1, None);
    SourceWriter::start(&source, &topic, "one", 200, 2000).finish(false);
    let cfg = agent_config("restart", &[&topic], &source);
    let gw = TestGateway::start(cfg.clone());
    wait_caught_up(&gw.admin(), "restart", &source, &topic, 1);
    drop(gw);
    SourceWriter::start(&source, &topic, "two", 200, 2000).finish(false);
    let gw = TestGateway::start(cfg);
    wait_caught_up(&gw.admin(), "restart", &source, &topic, 1);
    let map = gw
        .gateway
        .agent
        .as_ref()
        .expect("agent")
        .offset_map("restart", &topic, 0)
        .expect("map");
    assert_eq!(map.next(), Some((400, 400)));
}

#[test]
fn a_non_empty_destination_partition_that_does_not_match_the_source_is_failed_not_overwritten() {
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("agent-nonempty");
    harness::create_topic(&source, &topic, 1, None);
    harness::create_topic(&destination, &topic, 1, None);
    SourceWriter::start(&source, &topic, "src", 10, 2000).finish(false);
    SourceWriter::start(&destination, &topic, "local", 3, 2000).finish(false);
    let gw = TestGateway::start(agent_config("nonempty", &[&topic], &source));
    let deadline = Instant::now() + Duration::from_secs(60);
    let reason = loop {
        let parts = partitions_json(&gw.admin(), "nonempty");
        if let Some(p) = parts.iter().find(|p| p["state"] == "FAILED") {
            break p["last_error"].as_str().unwrap_or_default().to_string();
        }
        assert!(Instant::now() < deadline, "partition not FAILED: {parts:?}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(reason.contains("do not match the source"), "{reason}");
    assert_eq!(read_log(&destination, &topic, 0).records.len(), 3);
}

/// Wait until the mirror reports `partitions` MIRRORING partitions and every partition of `topic`
/// on `destination` holds exactly the source's records.
fn wait_equal(
    admin: &str,
    name: &str,
    source: &str,
    destination: &str,
    topic: &str,
    partitions: i32,
) {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let parts = partitions_json(admin, name);
        let ready =
            parts.len() == partitions as usize && parts.iter().all(|p| p["state"] == "MIRRORING");
        if ready
            && (0..partitions)
                .all(|p| kv(&read_log(source, topic, p)) == kv(&read_log(destination, topic, p)))
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "mirror {name} did not catch up: {parts:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn fan_out_a_to_b_and_a_to_c_fail_over_independently() {
    let source = harness::cluster("source");
    let b = harness::cluster("destination");
    let c = harness::cluster("third");
    let topic = harness::unique_topic("fanout");
    harness::create_topic(&source, &topic, 2, None);
    harness::produce_keyed(&source, &topic, 300, &[]);
    let gb = TestGateway::start(agent_config("fanb", &[&topic], &source));
    let mut cfg_c = agent_config("fanc", &[&topic], &source);
    cfg_c.destination.bootstrap = c.split(',').map(|s| s.trim().to_string()).collect();
    let gc = TestGateway::start(cfg_c);
    wait_equal(&gb.admin(), "fanb", &source, &b, &topic, 2);
    wait_equal(&gc.admin(), "fanc", &source, &c, &topic, 2);
    crate::failover::failover(&gb.admin(), "fanb");
    crate::failover::wait_stopped(&gb.admin(), "fanb");
    // The source keeps being written; C keeps mirroring, B does not.
    harness::produce_keyed(&source, &topic, 200, &[]);
    wait_equal(&gc.admin(), "fanc", &source, &c, &topic, 2);
    for p in 0..2 {
        assert!(
            read_log(&c, &topic, p).barriers.is_empty(),
            "C has no barrier: B's failover is B's alone"
        );
        let on_b = read_log(&b, &topic, p);
        assert_eq!(on_b.barriers.len(), 1);
        let barrier = on_b.barriers[0];
        let source_kv = kv(&read_log(&source, &topic, p));
        let before: Vec<_> = on_b
            .records
            .iter()
            .filter(|r| r.0 < barrier)
            .map(|(_, k, v)| (k.clone(), v.clone()))
            .collect();
        assert_eq!(
            before[..],
            source_kv[..before.len()],
            "B holds a prefix of the source before its barrier"
        );
        assert!(
            on_b.records.iter().all(|r| r.0 < barrier),
            "nothing mirrored into B after its barrier"
        );
    }
    let states: Vec<String> = partitions_json(&gc.admin(), "fanc")
        .iter()
        .map(|p| p["state"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(states, vec!["MIRRORING", "MIRRORING"]);
}

#[test]
fn chain_a_to_b_to_c_carries_b_s_barrier_inert_and_c_writes_its_own() {
    let source = harness::cluster("source");
    let b = harness::cluster("destination");
    let c = harness::cluster("third");
    let topic = harness::unique_topic("chain");
    harness::create_topic(&source, &topic, 1, None);
    harness::produce_keyed(&source, &topic, 200, &[]);
    // A → B through B's gateway; B → C through C's gateway, whose agent reads B directly.
    // Data barriers (the fallback form): the built-in agent copies data batches as-is, but a
    // control batch cannot be produced, so it fails a partition at one (docs/guarantees.md).
    let gb = TestGateway::start(data_barrier(agent_config("chainb", &[&topic], &source)));
    wait_equal(&gb.admin(), "chainb", &source, &b, &topic, 1);
    let mut cfg_c = data_barrier(agent_config("chainc", &[&topic], &b));
    cfg_c.destination.bootstrap = c.split(',').map(|s| s.trim().to_string()).collect();
    let gc = TestGateway::start(cfg_c);
    wait_equal(&gc.admin(), "chainc", &b, &c, &topic, 1);
    // Failover at B: B writes its barrier; C mirrors it as data (inert there).
    crate::failover::failover(&gb.admin(), "chainb");
    crate::failover::wait_stopped(&gb.admin(), "chainb");
    let deadline = Instant::now() + Duration::from_secs(60);
    while crate::failover::read_log(&c, &topic, 0).barriers.is_empty() {
        assert!(Instant::now() < deadline, "B's barrier did not reach C");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        gc.metric(r#"mirrorgate_barriers_seen_total{kind="mirrored",mirror="chainc"}"#),
        1.0,
        "{}",
        gc.metrics()
    );
    let (_, body) = crate::gw::admin_call(&gc.admin(), Method::GET, "/v1/mirrors/chainc", None);
    assert!(
        body.contains("\"MIRRORING\": 1"),
        "C keeps mirroring: {body}"
    );
    // Local writes on B after its failover reach C too (C mirrors B).
    let local_b = harness::produce_keyed(&gb.bootstrap(), &topic, 50, &[]);
    assert_eq!(local_b.len(), 50);
    let local_b_keys: Vec<Option<String>> = local_b.iter().map(|a| Some(a.key.clone())).collect();
    wait_for(
        "B's local records in C's log, in B's order",
        Duration::from_secs(60),
        || {
            let on_c: Vec<Option<String>> = crate::failover::read_log(&c, &topic, 0)
                .records
                .into_iter()
                .map(|r| r.key)
                .filter(|k| k.as_deref().is_some_and(|k| k.starts_with("key-")))
                .collect();
            on_c.len() == 200 + local_b_keys.len() && on_c.ends_with(&local_b_keys)
        },
    );
    // Failover at C: C writes its own barrier after B's; local producers on C are safe.
    crate::failover::failover(&gc.admin(), "chainc");
    crate::failover::wait_stopped(&gc.admin(), "chainc");
    let log_c = crate::failover::read_log(&c, &topic, 0);
    let owners: Vec<&str> = log_c.barriers.iter().map(|(_, _, m)| m.as_str()).collect();
    assert_eq!(
        owners,
        vec!["chainb", "chainc"],
        "B's barrier (inert) then C's own"
    );
    let local_c = harness::produce_keyed(&gc.bootstrap(), &topic, 50, &[]);
    let after = crate::failover::read_log(&c, &topic, 0);
    let own_barrier = after.barriers[1].0;
    for a in &local_c {
        let r = after
            .records
            .iter()
            .find(|r| r.offset == a.offset)
            .expect("acked local record in C's log");
        assert_eq!(r.key.as_deref(), Some(a.key.as_str()));
        assert!(a.offset > own_barrier);
    }
}

#[test]
fn fan_in_a_to_c_and_b_to_c_on_different_topics_are_independent() {
    let a = harness::cluster("source");
    let b = harness::cluster("destination");
    let c = harness::cluster("third");
    let ta = harness::unique_topic("fanin-a");
    let tb = harness::unique_topic("fanin-b");
    harness::create_topic(&a, &ta, 1, None);
    harness::create_topic(&b, &tb, 1, Some(&[1]));
    harness::produce_keyed(&a, &ta, 100, &[]);
    harness::produce_keyed(&b, &tb, 100, &[]);
    // One gateway in front of C with two mirrors, one per source.
    let mut cfg = agent_config("fromA", &[&ta], &a);
    let from_b = agent_config("fromB", &[&tb], &b).mirrors.remove(0);
    cfg.mirrors.push(from_b);
    cfg.destination.bootstrap = c.split(',').map(|s| s.trim().to_string()).collect();
    let gc = TestGateway::start(cfg);
    wait_equal(&gc.admin(), "fromA", &a, &c, &ta, 1);
    wait_equal(&gc.admin(), "fromB", &b, &c, &tb, 1);
    crate::failover::failover(&gc.admin(), "fromA");
    crate::failover::wait_stopped(&gc.admin(), "fromA");
    harness::produce_keyed(&b, &tb, 50, &[]);
    wait_equal(&gc.admin(), "fromB", &b, &c, &tb, 1);
    assert!(
        read_log(&c, &tb, 0).barriers.is_empty(),
        "B's topic on C is untouched by A's failover"
    );
    assert_eq!(read_log(&c, &ta, 0).barriers.len(), 1);
    // A topic fed by two mirrors is refused by the configuration check.
    let mut twice = agent_config("one", &[&ta], &a);
    twice
        .mirrors
        .push(agent_config("two", &[&ta], &b).mirrors.remove(0));
    let yaml = mirrorgate::config::render_effective(&twice);
    let err =
        mirrorgate::config::load_str(&yaml, "fan-in.yaml").expect_err("one topic, two mirrors");
    let err = err.to_string();
    assert!(
        err.contains(&format!("topic `{ta}` is already claimed by mirror `one`")),
        "{err}"
    );
}

#[test]
fn failback_a_mirrors_from_b_after_b_s_failover_and_fails_over_in_turn() {
    let a = harness::cluster("source");
    let b = harness::cluster("destination");
    let topic = harness::unique_topic("failback");
    harness::create_topic(&a, &topic, 1, None);
    harness::produce_keyed(&a, &topic, 100, &[]);
    // A → B, then B fails over and takes local writes.
    // Data barriers (the fallback form): the built-in agent copies data batches as-is, but a
    // control batch cannot be produced, so it fails a partition at one (docs/guarantees.md).
    let gb = TestGateway::start(data_barrier(agent_config("toB", &[&topic], &a)));
    wait_equal(&gb.admin(), "toB", &a, &b, &topic, 1);
    crate::failover::failover(&gb.admin(), "toB");
    crate::failover::wait_stopped(&gb.admin(), "toB");
    let local_b = harness::produce_keyed(&gb.bootstrap(), &topic, 50, &[]);
    assert_eq!(local_b.len(), 50);
    // A gateway in front of A mirrors from B: A's log is B's prefix (aligned), so the agent
    // continues from there; B's barrier reaches A and is inert there.
    let mut cfg = data_barrier(agent_config("toA", &[&topic], &b));
    cfg.destination.bootstrap = a.split(',').map(|s| s.trim().to_string()).collect();
    let ga = TestGateway::start(cfg);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let on_a = crate::failover::read_log(&a, &topic, 0);
        let on_b = crate::failover::read_log(&b, &topic, 0);
        if on_a.records.len() == on_b.records.len() && on_a.barriers.len() == 1 {
            assert_eq!(
                kv(&read_log(&a, &topic, 0)),
                kv(&read_log(&b, &topic, 0)),
                "A equals B record by record"
            );
            break;
        }
        let parts = partitions_json(&ga.admin(), "toA");
        assert!(
            Instant::now() < deadline,
            "A did not catch up with B: {parts:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        ga.metric(r#"mirrorgate_barriers_seen_total{kind="mirrored",mirror="toA"}"#),
        1.0
    );
    // B's barrier did not clear A's producer state: B's local producer is still tracked.
    let producers = crate::psm_differential::gateway_producers(&ga.admin(), &topic, 0);
    assert!(
        !producers.is_empty(),
        "A's PSM keeps the producers mirrored from B"
    );
    // A fails over in turn: its own barrier follows B's; local producers on A lose nothing.
    crate::failover::failover(&ga.admin(), "toA");
    crate::failover::wait_stopped(&ga.admin(), "toA");
    let log_a = crate::failover::read_log(&a, &topic, 0);
    let owners: Vec<&str> = log_a.barriers.iter().map(|(_, _, m)| m.as_str()).collect();
    assert_eq!(owners, vec!["toB", "toA"]);
    let local_a = harness::produce_keyed(&ga.bootstrap(), &topic, 50, &[]);
    let after = crate::failover::read_log(&a, &topic, 0);
    for r in &local_a {
        let found = after
            .records
            .iter()
            .find(|x| x.offset == r.offset)
            .expect("acked record in A's log");
        assert_eq!(found.key.as_deref(), Some(r.key.as_str()));
        assert!(r.offset > after.barriers[1].0);
    }
    // The full cycle: B starts mirroring from A again (its log is A's prefix: aligned).
    let (status, body) =
        crate::gw::admin_call(&gb.admin(), Method::POST, "/v1/mirrors/toB/start", None);
    assert_eq!(status, 202, "{body}");
    let (status, body) =
        crate::gw::admin_call(&gb.admin(), Method::POST, "/v1/mirrors/toB/start", None);
    assert_eq!(status, 409, "nothing left to start: {body}");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let on_a = crate::failover::read_log(&a, &topic, 0);
        let on_b = crate::failover::read_log(&b, &topic, 0);
        if on_a.records.len() == on_b.records.len() {
            assert_eq!(
                kv(&read_log(&a, &topic, 0)),
                kv(&read_log(&b, &topic, 0)),
                "B equals A again"
            );
            let owners: Vec<&str> = on_b.barriers.iter().map(|(_, _, m)| m.as_str()).collect();
            assert_eq!(
                owners,
                vec!["toB", "toA"],
                "A's barrier reached B, inert there"
            );
            break;
        }
        let parts = partitions_json(&gb.admin(), "toB");
        assert!(
            Instant::now() < deadline,
            "B did not catch up with A after start: {parts:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let states: Vec<String> = partitions_json(&gb.admin(), "toB")
        .iter()
        .map(|p| p["state"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(states, vec!["MIRRORING"]);
}

#[test]
fn start_refuses_a_mirror_without_the_agent_and_a_mirror_that_is_not_stopped() {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("start-refused");
    harness::create_topic(&destination, &topic, 1, None);
    let gw = TestGateway::start(crate::failover::mirror_config("external", &[&topic]));
    crate::failover::wait_mirroring(&gw.admin(), "external", 1);
    let (status, body) = crate::gw::admin_call(
        &gw.admin(),
        Method::POST,
        "/v1/mirrors/external/start",
        None,
    );
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("cannot verify"), "{body}");
    let (status, _) =
        crate::gw::admin_call(&gw.admin(), Method::POST, "/v1/mirrors/nope/start", None);
    assert_eq!(status, 404);
}

// ------------------------------------------------------------------ identity and divergence
// (review F4 and F17)

fn on_runtime<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(f)
}

fn direct_admin(
    bootstrap: &str,
) -> rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext> {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("socket.timeout.ms", "10000")
        .create()
        .expect("admin client")
}

fn admin_opts() -> rdkafka::admin::AdminOptions {
    rdkafka::admin::AdminOptions::new()
        .request_timeout(Some(Duration::from_secs(30)))
        .operation_timeout(Some(Duration::from_secs(30)))
}

/// DeleteTopics sent to the destination brokers directly (not through the gateway).
fn delete_topic_directly(bootstrap: &str, topic: &str) {
    let r = on_runtime(direct_admin(bootstrap).delete_topics(&[topic], &admin_opts()))
        .expect("DeleteTopics");
    for x in r {
        x.unwrap_or_else(|(t, e)| panic!("delete {t}: {e:?}"));
    }
}

/// CreatePartitions sent to the destination brokers directly (not through the gateway).
fn add_partitions_directly(bootstrap: &str, topic: &str, total: usize) {
    let np = rdkafka::admin::NewPartitions::new(topic, total);
    let r = on_runtime(direct_admin(bootstrap).create_partitions([&np], &admin_opts()))
        .expect("CreatePartitions");
    for x in r {
        x.unwrap_or_else(|(t, e)| panic!("add partitions to {t}: {e:?}"));
    }
}

/// Whether `topic` exists on the cluster (`None`: the metadata could not be read).
fn topic_exists(bootstrap: &str, topic: &str) -> Option<bool> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("allow.auto.create.topics", "false")
        .create()
        .ok()?;
    let md = c
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .ok()?;
    let Some(t) = md.topics().iter().find(|t| t.name() == topic) else {
        return Some(false);
    };
    match t.error() {
        None => Some(!t.partitions().is_empty()),
        Some(e)
            if format!("{e:?}")
                .to_lowercase()
                .replace('_', "")
                .contains("unknowntopic") =>
        {
            Some(false)
        }
        Some(_) => None,
    }
}

/// Single-record batches written straight to the leader of partition 0, as idempotent
/// producers with the given producer ids send them (epoch 0, sequences 0..n per producer; one
/// producer after the other). Returns the number of records written.
fn write_single_record_batches(
    bootstrap: &str,
    topic: &str,
    tag: &str,
    pids: &[i64],
    n: i32,
) -> i64 {
    let mut conn = RawConn::connect(&leader_addr(bootstrap, topic, 0));
    for pid in pids {
        for seq in 0..n {
            let batch =
                crate::psm_differential::batch(*pid, 0, seq, 1, &format!("{tag}-p{pid}-s{seq}"));
            let (code, _) = conn.produce(topic, 0, batch);
            assert_eq!(code, 0, "produce pid {pid} seq {seq} to {bootstrap}");
        }
    }
    pids.len() as i64 * i64::from(n)
}

fn agent_map_next(gw: &TestGateway, name: &str, topic: &str, p: i32) -> Option<(i64, i64)> {
    gw.gateway
        .agent
        .as_ref()
        .expect("agent")
        .offset_map(name, topic, p)
        .and_then(|m| m.next())
}

type KeyValues = Vec<(Option<String>, Option<String>)>;

/// Mirror `source`/T written by idempotent producers with ids 0 and 1 (single-record batches,
/// so the destination caches those ids and sequences), stop the gateway, and write T on
/// `third` with fresh producers reusing ids 0 and 1 from sequence 0, more records than the
/// map's next offset. Returns (config repointed at `third`, topic, records mirrored, their
/// key/values on the destination).
fn mirror_then_prepare_a_repointed_source(name: &str) -> (Config, String, i64, KeyValues) {
    let source = harness::cluster("source");
    let third = harness::cluster("third");
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic(&format!("agent-{name}"));
    harness::create_topic(&source, &topic, 1, None);
    let written = write_single_record_batches(&source, &topic, "src", &[0, 1], 5);
    let cfg = agent_config(name, &[&topic], &source);
    let gw = TestGateway::start(cfg.clone());
    wait_caught_up(&gw.admin(), name, &source, &topic, 1);
    assert_eq!(
        agent_map_next(&gw, name, &topic, 0),
        Some((written, written))
    );
    let mirrored = kv(&read_log(&destination, &topic, 0));
    // The map is persisted at most 1 s behind (a shutdown may not get to its last flush): wait
    // until the file holds the mirrored range before stopping the gateway.
    let file = cfg.state_dir.join("agent").join(format!("{name}.json"));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let next = std::fs::read(&file)
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|v| {
                let r = v["partitions"][&topic]["0"]["ranges"]
                    .as_array()?
                    .last()?
                    .clone();
                Some(r["source"].as_i64()? + r["count"].as_i64()?)
            });
        if next == Some(written) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "offset map not persisted: {next:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(gw);
    harness::create_topic(&third, &topic, 1, None);
    write_single_record_batches(&third, &topic, "third", &[0, 1], 8);
    let mut repointed = cfg;
    repointed.mirrors[0]
        .source
        .as_mut()
        .expect("source")
        .bootstrap = third.split(',').map(|s| s.trim().to_string()).collect();
    (repointed, topic, written, mirrored)
}

/// Wait (40 s at most) for the partition to be FAILED; its reason.
fn wait_repointed_failed(gw: &TestGateway, name: &str, topic: &str, written: i64) -> String {
    let destination = harness::cluster("destination");
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let parts = partitions_json(&gw.admin(), name);
        if let Some(p) = parts.iter().find(|p| p["state"] == "FAILED") {
            return p["last_error"].as_str().unwrap_or_default().to_string();
        }
        assert!(
            Instant::now() < deadline,
            "the partition is not FAILED after the source was repointed to another cluster: {parts:?}; \
             destination log end {}, offset map next {:?} (before: ({written}, {written}))",
            read_log(&destination, topic, 0).records.len(),
            agent_map_next(gw, name, topic, 0)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// After the failure: the destination and the offset map are as they were before the repoint.
fn assert_nothing_recorded(
    gw: &TestGateway,
    name: &str,
    topic: &str,
    written: i64,
    mirrored: &[(Option<String>, Option<String>)],
) {
    std::thread::sleep(Duration::from_secs(4));
    let destination = harness::cluster("destination");
    assert_eq!(
        kv(&read_log(&destination, topic, 0)),
        mirrored,
        "the destination did not change"
    );
    assert_eq!(
        agent_map_next(gw, name, topic, 0),
        Some((written, written)),
        "nothing was recorded"
    );
}

/// Review F4. The source is repointed to another cluster (`third`) whose same-named topic was
/// written by idempotent producers with the same producer ids and sequences (every cluster
/// allocates producer ids from 0). Appending its batches would be answered as duplicates of
/// older, different batches at older offsets; the agent must not record those acks as the
/// copy. It refuses the source (cluster id changed): FAILED with the reason, nothing appended.
#[test]
fn the_agent_refuses_a_source_whose_identity_changed_instead_of_recording_duplicate_acks() {
    let (cfg, topic, written, mirrored) = mirror_then_prepare_a_repointed_source("repoint");
    let gw = TestGateway::start(cfg);
    let reason = wait_repointed_failed(&gw, "repoint", &topic, written);
    assert!(
        reason.contains("source cluster id changed from") && reason.contains("refuses"),
        "{reason}"
    );
    assert_nothing_recorded(&gw, "repoint", &topic, written, &mirrored);
}

/// Review F4, the ack check itself: the same repoint, with an offset map written before the
/// identity was recorded (no cluster or topic ids: the agent adopts the current ones), so the
/// agent appends. The first append is acknowledged as a duplicate at an older offset: the
/// partition is FAILED and the ack is not recorded.
#[test]
fn an_append_acknowledged_at_an_older_offset_fails_the_partition_instead_of_being_recorded() {
    let (cfg, topic, written, mirrored) = mirror_then_prepare_a_repointed_source("oldmap");
    let file = cfg.state_dir.join("agent").join("oldmap.json");
    let mut map: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&file).expect("offset map file")).expect("json");
    let obj = map.as_object_mut().expect("object");
    obj.remove("source_cluster_id");
    obj.remove("topics");
    std::fs::write(&file, serde_json::to_vec_pretty(&map).expect("json")).expect("write");
    let gw = TestGateway::start(cfg);
    let reason = wait_repointed_failed(&gw, "oldmap", &topic, written);
    assert!(
        reason.contains(&format!(
            "acknowledged the append at offset 7, not at the next offset {written}"
        )) && reason.contains("duplicate"),
        "{reason}"
    );
    assert_nothing_recorded(&gw, "oldmap", &topic, written, &mirrored);
}

/// Review F17. The destination topic is deleted directly on the brokers (not through the
/// gateway, which refuses it) while the agent mirrors it: the agent must not re-create it and
/// mirror new records at offsets 0.. as if nothing happened; its partitions are FAILED.
#[test]
fn a_mirror_topic_deleted_on_the_destination_behind_the_gateway_is_failed_and_not_re_created() {
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("agent-deleted");
    harness::create_topic(&source, &topic, 2, None);
    harness::produce_keyed(&source, &topic, 60, &[]);
    let gw = TestGateway::start(agent_config("deleted", &[&topic], &source));
    wait_caught_up(&gw.admin(), "deleted", &source, &topic, 2);
    delete_topic_directly(&destination, &topic);
    harness::produce_keyed(&source, &topic, 20, &[]);
    let deadline = Instant::now() + Duration::from_secs(45);
    let mut gone = false;
    let parts = loop {
        let parts = partitions_json(&gw.admin(), "deleted");
        match topic_exists(&destination, &topic) {
            Some(false) => gone = true,
            Some(true) if gone => panic!(
                "the agent re-created the deleted destination topic {topic}: partitions {parts:?}"
            ),
            _ => {}
        }
        if gone && parts.len() == 2 && parts.iter().all(|p| p["state"] == "FAILED") {
            break parts;
        }
        assert!(
            Instant::now() < deadline,
            "partitions not FAILED after the destination topic was deleted (gone: {gone}): {parts:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    for p in &parts {
        let reason = p["last_error"].as_str().unwrap_or_default();
        assert!(
            reason.contains(&format!(
                "destination topic {topic} disappeared after mirroring; not re-creating it"
            )),
            "{p}"
        );
    }
    // Several discovery rounds later it is still not there.
    std::thread::sleep(Duration::from_secs(8));
    assert_eq!(
        topic_exists(&destination, &topic),
        Some(false),
        "re-created"
    );
}

/// Review F17. Partitions added to a mirror topic directly on the destination brokers have no
/// source partition behind them: they are FAILED with a clear reason (read-only until a
/// failover), while the mirrored partition goes on.
#[test]
fn partitions_added_on_the_destination_behind_the_gateway_are_failed_with_a_clear_reason() {
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("agent-extra");
    harness::create_topic(&source, &topic, 1, None);
    harness::produce_keyed(&source, &topic, 30, &[]);
    let gw = TestGateway::start(agent_config("extra", &[&topic], &source));
    wait_caught_up(&gw.admin(), "extra", &source, &topic, 1);
    add_partitions_directly(&destination, &topic, 3);
    let deadline = Instant::now() + Duration::from_secs(45);
    let parts = loop {
        let parts = partitions_json(&gw.admin(), "extra");
        let extra_failed = parts.len() == 3
            && parts
                .iter()
                .filter(|p| p["partition"] != 0)
                .all(|p| p["state"] == "FAILED");
        if extra_failed {
            break parts;
        }
        assert!(
            Instant::now() < deadline,
            "partitions added on the destination are not FAILED: {parts:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    for p in parts.iter().filter(|p| p["partition"] != 0) {
        let reason = p["last_error"].as_str().unwrap_or_default();
        assert!(
            reason.contains("has 3 partitions but its source has 1")
                && reason.contains("no source partition"),
            "{p}"
        );
    }
    // Partition 0 keeps mirroring.
    harness::produce_keyed(&source, &topic, 20, &[]);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let parts = partitions_json(&gw.admin(), "extra");
        let p0 = parts.iter().find(|p| p["partition"] == 0).cloned();
        if p0.as_ref().is_some_and(|p| p["state"] == "MIRRORING")
            && kv(&read_log(&source, &topic, 0)) == kv(&read_log(&destination, &topic, 0))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "partition 0 stopped mirroring: {parts:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
