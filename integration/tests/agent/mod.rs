//! The built-in mirror agent (issue 6) on real clusters: active-passive A→B with a failover while
//! a producer writes to A, the source killed before the failover, transactional sources, and the
//! configuration it requires.
//!
//! The tests, by behaviour: `basics.rs`, `faults.rs` (kills during mirroring and failover),
//! `topologies.rs` (fan-out, chain, fan-in, failback), `divergence.rs` (a source or destination
//! changed behind the agent), `transactions.rs` (transactional sources, open transactions at
//! failover), `owners.rs` (the agent configured on several instances: one runs it, another
//! takes it over). This file holds the shared helpers: reading logs, a source writer,
//! agent configs and the waits and checks the tests share.

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

use mirrorgate::mirror::offset_map::{MirrorOffsets, PartitionMap, Range};

use crate::failover::{data_barrier, failover, wait_stopped};
use crate::gw::{admin_call, test_config, TestGateway};
use crate::harness;
use crate::psm_differential::{broker_producers, gateway_producers, RawConn};

mod basics;
mod compacted;
pub(crate) mod divergence;
mod faults;
pub(crate) mod forward;
mod forward_handover;
mod forward_instances;
mod forward_leaders;
mod forward_switchback;
mod owners;
mod preflight;
mod recovery;
mod topologies;
pub(crate) mod transactions;

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
    /// (partition, key) of every acknowledged record, in acknowledgement order.
    keys: Mutex<Vec<(i32, String)>>,
}

struct Ctx(Arc<Delivered>);
impl ClientContext for Ctx {}
impl ProducerContext for Ctx {
    type DeliveryOpaque = ();
    fn delivery(&self, r: &DeliveryResult<'_>, _: ()) {
        match r {
            Ok(m) => {
                let key = m.key().map(|k| String::from_utf8_lossy(k).into_owned());
                if let Some(k) = key {
                    self.0
                        .keys
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push((m.partition(), k));
                }
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
    /// While set, the writer sends nothing (it still serves its deliveries).
    held: Arc<AtomicBool>,
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
        let held = Arc::new(AtomicBool::new(false));
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
        let h = held.clone();
        let thread = std::thread::spawn(move || {
            let pause = Duration::from_micros(1_000_000 / rate.max(1));
            let mut sent = 0;
            while sent < n && !s.load(Ordering::SeqCst) {
                if h.load(Ordering::SeqCst) {
                    producer.poll(Duration::from_millis(10));
                    continue;
                }
                let key = format!("{p}-{sent}");
                let value = format!("value-{p}-{sent}");
                let rec = BaseRecord::to(&t).key(&key).payload(&value);
                if producer.send(rec).is_ok() {
                    sent += 1;
                }
                producer.poll(Duration::ZERO);
                std::thread::sleep(pause);
            }
            // A producer that failed for good delivers nothing more: nothing to wait for.
            if producer.client().fatal_error().is_none() {
                producer
                    .flush(Duration::from_secs(60))
                    .expect("source producer flush");
            }
            sent
        });
        SourceWriter {
            stop,
            held,
            delivered,
            thread: Some(thread),
        }
    }

    /// Records acknowledged so far.
    fn acked(&self) -> usize {
        self.delivered.acked.load(Ordering::SeqCst)
    }

    /// Hold (`true`) or resume the sends.
    fn hold(&self, held: bool) {
        self.held.store(held, Ordering::SeqCst);
    }

    /// Stop, and return the records acknowledged and the errors delivered, whatever they are
    /// (a producer that failed may not flush).
    fn finish_with_errors(mut self) -> (usize, Vec<String>) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.thread.take().expect("thread").join();
        let errors = self.delivered.errors.lock().unwrap().clone();
        (self.delivered.acked.load(Ordering::SeqCst), errors)
    }

    /// (partition, key) of the records acknowledged so far.
    fn acked_keys(&self) -> Vec<(i32, String)> {
        self.delivered.keys.lock().unwrap().clone()
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

/// The first completed report `admin` lists for `mirror` (waits 30 s for it).
pub fn completed_report(admin: &str, mirror: &str) -> serde_json::Value {
    let mut report = serde_json::Value::Null;
    wait_for(
        "the failover's report listed, completed",
        Duration::from_secs(30),
        || {
            let (_, body) = admin_call(
                admin,
                Method::GET,
                &format!("/v1/mirrors/{mirror}/failovers"),
                None,
            );
            let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            report = v["failovers"]
                .as_array()
                .and_then(|r| r.iter().find(|r| r["status"] == "complete").cloned())
                .unwrap_or_default();
            !report.is_null()
        },
    );
    report
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

fn agent_map_next(gw: &TestGateway, name: &str, topic: &str, p: i32) -> Option<(i64, i64)> {
    gw.gateway
        .agent
        .as_ref()
        .expect("agent")
        .offset_map(name, topic, p)
        .and_then(|m| m.next())
}
