//! Consumer group offset sync (issue 16) on real clusters: groups that read part of a mirrored
//! topic on the source resume through the gateway after a failover without skipping a record
//! and re-reading at most what they consumed after the last sync; a group active on the
//! destination is left alone; a commit past the mirrored end is clamped; nothing is written
//! after the failover; a compacted partition translates through the offset map; a Kafka
//! Streams exactly-once application moves with its state. KIP-932 share groups are not synced:
//! `share.rs` shows why (Kafka 4.1.1 applies no AlterShareGroupOffsets) and a share group moved
//! with `share.auto.offset.reset=earliest` on the destination.
//!
//! The tests, by behaviour: `resume.rs` (Java and librdkafka groups across a failover, the
//! source up or killed), `rounds.rs` (what a round does with retriable answers and a lost
//! source: the first round on a fresh destination, the final round's report), `rules.rs` (skipped active, clamp, nothing after failover, the API and
//! CLI on bad input), `compacted.rs`, `cut.rs` (a stopped group's offsets synced while a transaction stays
//! open on the source), `streams.rs` (Kafka Streams with exactly_once_v2 restarted
//! through the gateway, after a planned move and after a failover with its output not mirrored
//! yet). This file holds the shared helpers.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use hyper::Method;
use mirrorgate::client::{KafkaClient, LATEST};
use mirrorgate::config::{ClusterConfig, Config, GroupSyncConfig, MirrorConfig};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

use crate::gw::{admin_call, test_config, TestGateway};
use crate::harness;

mod compacted;
mod cut;
mod resume;
mod rounds;
mod rules;
mod share;
mod streams;

/// Time between two sync rounds in these tests.
const SYNC_INTERVAL_MS: u64 = 300;

/// A gateway config mirroring `topics` from `source` with the group sync every
/// [`SYNC_INTERVAL_MS`].
fn groups_config(name: &str, topics: &[&str], source: &str) -> Config {
    groups_config_to(name, topics, source, &harness::cluster("destination"))
}

/// As [`groups_config`], in front of the cluster `destination`.
fn groups_config_to(name: &str, topics: &[&str], source: &str, destination: &str) -> Config {
    let mut cfg = test_config(destination);
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
        recovery: Default::default(),
        groups: GroupSyncConfig {
            sync_interval_ms: SYNC_INTERVAL_MS,
            ..GroupSyncConfig::default()
        },
        forward: None,
        mirroring: Default::default(),
    }];
    cfg.psm.snapshot_interval_ms = 200;
    cfg
}

fn wait_for(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(Instant::now() < deadline, "not within {timeout:?}: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// An idempotent librdkafka producer (acks=all, linger 5 ms) of `bootstrap`.
fn idempotent_producer(bootstrap: &str) -> BaseProducer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "5")
        .create()
        .expect("producer")
}

/// Records `{prefix}-{i}` (key and value) to `topic`, round-robin over `partitions`; flushed.
fn produce(bootstrap: &str, topic: &str, prefix: &str, n: usize, partitions: i32) {
    let p = idempotent_producer(bootstrap);
    for i in 0..n {
        let k = format!("{prefix}-{i}");
        let part = (i as i32) % partitions.max(1);
        let mut rec = BaseRecord::to(topic).key(&k).payload(&k).partition(part);
        loop {
            match p.send(rec) {
                Ok(()) => break,
                Err((_, r)) => {
                    rec = r;
                    p.poll(Duration::from_millis(10));
                }
            }
        }
        p.poll(Duration::ZERO);
    }
    p.flush(Duration::from_secs(60)).expect("flush");
}

/// The log end offset of a partition of any cluster.
fn end_offset(bootstrap: &str, topic: &str, partition: i32) -> i64 {
    let addr = harness::leader_addr(bootstrap, topic, partition);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    rt.block_on(async {
        let mut c = KafkaClient::connect(&addr, Duration::from_secs(10))
            .await
            .expect("connect leader");
        c.list_offset(topic, partition, LATEST)
            .await
            .expect("list offsets")
    })
}

/// Wait until the agent's offset map of every partition reaches the source's log end.
fn wait_mirrored(gw: &TestGateway, name: &str, source: &str, topic: &str, partitions: i32) {
    wait_for("the mirror caught up", Duration::from_secs(90), || {
        (0..partitions).all(|p| {
            let end = end_offset(source, topic, p);
            gw.gateway
                .agent
                .as_ref()
                .expect("agent")
                .offset_map(name, topic, p)
                .and_then(|m| m.next())
                .is_some_and(|(s, _)| s == end)
        })
    });
}

/// `POST /v1/mirrors/{name}/{op}` (`pause`, `resume`), which must answer 200.
pub(crate) fn mirror_op(admin: &str, name: &str, op: &str) {
    let (status, body) = admin_call(
        admin,
        Method::POST,
        &format!("/v1/mirrors/{name}/{op}"),
        None,
    );
    assert_eq!(status, 200, "{op}: {body}");
}

fn groups_json(admin: &str, name: &str) -> serde_json::Value {
    let (status, body) = admin_call(
        admin,
        Method::GET,
        &format!("/v1/mirrors/{name}/groups"),
        None,
    );
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).expect("json")
}

/// The groups API's entry of `group`.
fn group_json(admin: &str, name: &str, group: &str) -> Option<serde_json::Value> {
    groups_json(admin, name)["groups"]
        .as_array()
        .and_then(|gs| gs.iter().find(|g| g["group"] == group).cloned())
}

/// Wait until the sync reports `group` synced with these destination commits per partition.
fn wait_synced(admin: &str, name: &str, group: &str, want: &BTreeMap<i32, i64>) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let g = group_json(admin, name, group);
        let got: BTreeMap<i32, i64> = g
            .as_ref()
            .and_then(|g| g["partitions"].as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter_map(|p| {
                Some((
                    p["partition"].as_i64()? as i32,
                    p["destination_committed"].as_i64()?,
                ))
            })
            .collect();
        if g.as_ref().is_some_and(|g| g["state"] == "synced") && &got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "group {group} not synced to {want:?}: {g:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A record a consumer read: (partition, offset, value).
type Read = (i32, i64, String);

/// Read exactly `n` records of `topic` with librdkafka consumer group `group` (from its
/// committed offsets, else the earliest), then commit what was read and leave the group.
fn rdkafka_consume(bootstrap: &str, topic: &str, group: &str, n: usize) -> Vec<Read> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .set("session.timeout.ms", "10000")
        .create()
        .expect("consumer");
    c.subscribe(&[topic]).expect("subscribe");
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while out.len() < n {
        assert!(
            Instant::now() < deadline,
            "{group}: {} of {n} records read on {bootstrap}",
            out.len()
        );
        if let Some(Ok(m)) = c.poll(Duration::from_millis(100)) {
            let value = String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned();
            out.push((m.partition(), m.offset(), value));
        }
    }
    c.commit_consumer_state(CommitMode::Sync)
        .expect("commit what was read");
    c.unsubscribe();
    out
}

/// Read with the Java consumer (integration/clients/java/Consume.java): at least `n` records,
/// then whatever arrives within a second; commits. Returns the records and the positions.
fn java_consume(
    bootstrap: &str,
    topic: &str,
    group: &str,
    n: usize,
) -> (Vec<Read>, BTreeMap<i32, i64>) {
    let class = harness::repo().join("integration/clients/java/Consume.java");
    let out = harness::rig_java(
        &class.to_string_lossy(),
        &[
            bootstrap,
            topic,
            group,
            &n.to_string(),
            "read_uncommitted",
            "30000",
        ],
    );
    harness::expect_success("Consume.java", &out);
    let mut reads = Vec::new();
    let mut positions = BTreeMap::new();
    for l in harness::json_lines(&out.stdout) {
        if let Some(pos) = l["positions"].as_object() {
            for (p, o) in pos {
                positions.insert(p.parse().expect("partition"), o.as_i64().expect("offset"));
            }
        } else if l.get("done").is_none() {
            reads.push((
                l["partition"].as_i64().expect("partition") as i32,
                l["offset"].as_i64().expect("offset"),
                l["value"].as_str().unwrap_or_default().to_string(),
            ));
        }
    }
    assert!(
        reads.len() >= n,
        "Java consumer read {} of {n}",
        reads.len()
    );
    (reads, positions)
}

/// The position after the last record read per partition.
fn positions(reads: &[Read]) -> BTreeMap<i32, i64> {
    let mut out = BTreeMap::new();
    for (p, o, _) in reads {
        let e = out.entry(*p).or_insert(0);
        *e = (*e).max(o + 1);
    }
    out
}

/// What a group read on the source and then on the destination, against every value of the
/// topic: no record skipped; returns how many were read twice.
fn assert_nothing_skipped(all: &BTreeSet<String>, source: &[Read], destination: &[Read]) -> usize {
    let s: BTreeSet<&String> = source.iter().map(|r| &r.2).collect();
    let d: BTreeSet<&String> = destination.iter().map(|r| &r.2).collect();
    let missing: Vec<&String> = all
        .iter()
        .filter(|k| !s.contains(k) && !d.contains(k))
        .collect();
    assert!(missing.is_empty(), "records skipped: {missing:?}");
    s.intersection(&d).count()
}

/// The committed offsets of `group` on the destination cluster itself.
fn destination_committed(group: &str, topic: &str, partitions: i32) -> BTreeMap<i32, i64> {
    committed_on(&harness::cluster("destination"), group, topic, partitions)
}

/// The committed offsets of `group` on the cluster at `bootstrap`.
fn committed_on(bootstrap: &str, group: &str, topic: &str, partitions: i32) -> BTreeMap<i32, i64> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .create()
        .expect("consumer");
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition(topic, p);
    }
    // A cluster that has just started may still be creating `__consumer_offsets`: asked again.
    let deadline = Instant::now() + Duration::from_secs(60);
    let got = loop {
        match c.committed_offsets(tpl.clone(), Duration::from_secs(10)) {
            Ok(got) => break got,
            Err(e) if Instant::now() < deadline => {
                eprintln!("committed offsets of {group}: {e}; asked again");
                std::thread::sleep(Duration::from_millis(500));
            }
            Err(e) => panic!("committed offsets of {group}: {e}"),
        }
    };
    got.elements()
        .iter()
        .filter_map(|e| match e.offset() {
            rdkafka::Offset::Offset(o) => Some((e.partition(), o)),
            _ => None,
        })
        .collect()
}
