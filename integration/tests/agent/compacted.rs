//! Compacted (gapped) and LogAppendTime sources (issue 17): the agent mirrors batches with
//! offset gaps, empty batches and the later batches of the same idempotent producer, keeps an
//! exact offset map across the gaps, reconciles them after a restart, and mirrors a
//! LogAppendTime topic across a restart.

use std::collections::BTreeMap;

use mirrorgate::client::KafkaClient;
use mirrorgate::protocol::batch::{BatchWalker, TimestampType};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;

use super::*;

/// A 1-partition source topic with these configs.
fn create_source_topic(bootstrap: &str, topic: &str, configs: &[(&str, &str)]) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("admin client");
    let mut t = NewTopic::new(topic, 1, TopicReplication::Fixed(1));
    for (k, v) in configs {
        t = t.set(k, v);
    }
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    let r = rt
        .block_on(admin.create_topics([&t], &opts))
        .expect("create");
    assert!(r.iter().all(|r| r.is_ok()), "create {topic}: {r:?}");
    wait_for("the topic has a leader", Duration::from_secs(30), || {
        harness::partition_leaders(bootstrap, topic)
            .values()
            .all(|l| *l >= 0)
    });
}

/// A compacted topic the cleaner works on within seconds: small segments (rolled after 500 ms),
/// every dirty ratio cleanable, tombstones kept 2 s after cleaning.
const COMPACTED: [(&str, &str); 5] = [
    ("cleanup.policy", "compact"),
    ("segment.ms", "500"),
    ("min.cleanable.dirty.ratio", "0.01"),
    ("delete.retention.ms", "2000"),
    ("min.compaction.lag.ms", "0"),
];

/// One idempotent keyed producer (acks=all) kept across rounds, so its later batches continue
/// the same producer id and epoch.
fn keyed_producer(bootstrap: &str) -> BaseProducer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "20")
        .create()
        .expect("producer")
}

/// `n` records over 40 keys (`k0`..`k39`), every 9th a tombstone, in a few pauses so the
/// segments roll; flushed.
fn write_round(p: &BaseProducer, topic: &str, round: &str, n: usize) {
    for i in 0..n {
        let key = format!("k{}", i % 40);
        let value = format!("{round}-{i}");
        let rec = if i % 9 == 8 {
            BaseRecord::<String, String>::to(topic).key(&key)
        } else {
            BaseRecord::to(topic).key(&key).payload(&value)
        };
        let mut rec = rec;
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
        if i % 100 == 99 {
            p.flush(Duration::from_secs(30)).expect("flush");
            std::thread::sleep(Duration::from_millis(600));
        }
    }
    p.flush(Duration::from_secs(30)).expect("flush");
}

/// key → latest value (None: tombstone) of a partition's log.
fn latest(log: &crate::failover::PartitionLog) -> BTreeMap<String, Option<String>> {
    log.records
        .iter()
        .filter(|r| !r.control)
        .map(|r| (r.key.clone().unwrap_or_default(), r.value.clone()))
        .collect()
}

fn has_gaps(log: &crate::failover::PartitionLog) -> bool {
    log.records
        .windows(2)
        .any(|w| w[1].offset != w[0].offset + 1)
        || log.records.first().is_some_and(|r| r.offset != 0)
}

/// The source log, once compaction has made gaps and two readings 20 s apart (more than the
/// cleaner's 15 s backoff) agree.
fn compacted_and_settled(source: &str, topic: &str) -> crate::failover::PartitionLog {
    let deadline = Instant::now() + Duration::from_secs(180);
    let offsets = |l: &crate::failover::PartitionLog| -> Vec<i64> {
        l.records.iter().map(|r| r.offset).collect()
    };
    loop {
        let a = crate::failover::read_log(source, topic, 0);
        if has_gaps(&a) {
            std::thread::sleep(Duration::from_secs(20));
            let b = crate::failover::read_log(source, topic, 0);
            if offsets(&a) == offsets(&b) {
                return b;
            }
        } else {
            std::thread::sleep(Duration::from_secs(1));
        }
        assert!(
            Instant::now() < deadline,
            "the source was not compacted and settled in time"
        );
    }
}

fn no_failed(admin: &str, name: &str) {
    for p in partitions_json(admin, name) {
        assert_eq!(p["state"], "MIRRORING", "{p}");
    }
}

/// Wait until the destination's latest value of every key equals the source's and the map
/// reaches the source's log end; then check that the map translates exactly: every source
/// record's destination offset holds the same key and value, and back.
fn wait_mirrored_exactly(gw: &TestGateway, name: &str, source: &str, topic: &str) {
    let destination = harness::cluster("destination");
    let deadline = Instant::now() + Duration::from_secs(120);
    let (s, d) = loop {
        no_failed(&gw.admin(), name);
        let s = crate::failover::read_log(source, topic, 0);
        let d = crate::failover::read_log(&destination, topic, 0);
        let end = s.records.last().map_or(0, |r| r.offset + 1);
        let at_end = agent_map_next(gw, name, topic, 0).is_some_and(|(n, _)| n >= end);
        if at_end && latest(&s) == latest(&d) {
            break (s, d);
        }
        assert!(
            Instant::now() < deadline,
            "not mirrored: map {:?}, source end {end}",
            agent_map_next(gw, name, topic, 0)
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    let map = gw
        .gateway
        .agent
        .as_ref()
        .expect("agent")
        .offset_map(name, topic, 0)
        .expect("map");
    let at: BTreeMap<i64, _> = d
        .records
        .iter()
        .map(|r| (r.offset, (&r.key, &r.value)))
        .collect();
    for r in &s.records {
        let dst = map.to_destination(r.offset).expect("mapped");
        assert_eq!(
            at.get(&dst),
            Some(&(&r.key, &r.value)),
            "source {}",
            r.offset
        );
        assert_eq!(map.to_source(dst), Some(r.offset));
    }
    // A source offset compaction removed maps to the next mirrored record.
    if let Some(w) = s.records.windows(2).find(|w| w[1].offset > w[0].offset + 1) {
        assert_eq!(
            map.to_destination(w[0].offset + 1),
            map.to_destination(w[1].offset)
        );
    }
}

/// The agent forgets a partition's offset map (as after a crash before its first flush): the
/// restart must match the whole destination against the source batch by batch.
fn forget_map(cfg: &Config, name: &str, topic: &str) {
    let file = cfg.state_dir.join("agent").join(format!("{name}.json"));
    let mut o = MirrorOffsets::decode(&std::fs::read(&file).expect("map file")).expect("map");
    o.partitions.remove(topic);
    std::fs::write(&file, o.encode()).expect("write map");
}

#[test]
fn a_compacted_source_is_mirrored_with_every_keys_latest_value_and_exact_offsets() {
    let source = harness::cluster("source");
    let topic = harness::unique_topic("agent-compacted");
    create_source_topic(&source, &topic, &COMPACTED);
    let producer = keyed_producer(&source);
    write_round(&producer, &topic, "a", 1500);
    let before = compacted_and_settled(&source, &topic);
    assert!(has_gaps(&before));

    let cfg = agent_config("cmp", &[&topic], &source);
    let gw = TestGateway::start(cfg.clone());
    wait_mirrored_exactly(&gw, "cmp", &source, &topic);
    let map = gw
        .gateway
        .agent
        .as_ref()
        .unwrap()
        .offset_map("cmp", &topic, 0)
        .unwrap();
    assert!(
        !map.tainted.is_empty(),
        "the producer of the rewritten batches is tainted"
    );
    drop(gw);

    // Restart without the map: every destination batch (rewritten, stripped, as-is) is matched
    // with the source again, and the taint is recovered.
    forget_map(&cfg, "cmp", &topic);
    let gw = TestGateway::start(cfg.clone());
    wait_mirrored_exactly(&gw, "cmp", &source, &topic);
    let again = gw
        .gateway
        .agent
        .as_ref()
        .unwrap()
        .offset_map("cmp", &topic, 0)
        .unwrap();
    assert_eq!(again.ranges, map.ranges, "the same map, rebuilt");
    assert_eq!(again.tainted, map.tainted, "the same taint, rebuilt");

    // The same producer writes on: its batches go on being mirrored (tainted: without
    // producer id), across a restart.
    write_round(&producer, &topic, "b", 400);
    wait_mirrored_exactly(&gw, "cmp", &source, &topic);
    drop(gw);
    write_round(&producer, &topic, "c", 400);
    let gw = TestGateway::start(cfg);
    wait_mirrored_exactly(&gw, "cmp", &source, &topic);
}

#[test]
fn a_source_compacted_while_the_agent_mirrors_it_is_mirrored_exactly() {
    let source = harness::cluster("source");
    let topic = harness::unique_topic("agent-compacting");
    create_source_topic(&source, &topic, &COMPACTED);
    let gw = TestGateway::start(agent_config("cmping", &[&topic], &source));
    let producer = keyed_producer(&source);
    // Rounds of writes while the agent mirrors and the cleaner works, until the source shows
    // gaps (then one more round, mirrored after them).
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut round = 0;
    while !has_gaps(&crate::failover::read_log(&source, &topic, 0)) {
        assert!(Instant::now() < deadline, "the source was never compacted");
        write_round(&producer, &topic, &format!("r{round}"), 300);
        no_failed(&gw.admin(), "cmping");
        round += 1;
    }
    write_round(&producer, &topic, "last", 300);
    wait_mirrored_exactly(&gw, "cmping", &source, &topic);
}

/// (timestamp type, max timestamp) of every batch of a partition.
fn batch_times(bootstrap: &str, topic: &str) -> Vec<(TimestampType, i64)> {
    let addr = leader_addr(bootstrap, topic, 0);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    rt.block_on(async {
        let mut c = KafkaClient::connect(&addr, Duration::from_secs(10))
            .await
            .expect("connect");
        let f = c
            .fetch_partition(topic, 0, 0, 16 << 20)
            .await
            .expect("fetch");
        BatchWalker::fetched(&f.records)
            .map(|b| b.expect("batch").0)
            .map(|h| (h.timestamp_type(), h.max_timestamp))
            .collect()
    })
}

/// Destination consumers of a LogAppendTime topic see the destination broker's append time
/// (when the agent appended the batch), not the source's: the broker restamps every appended
/// batch. The agent matches those restamped batches after a restart.
#[test]
fn a_log_append_time_source_is_mirrored_across_a_restart_with_destination_append_times() {
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("agent-lat");
    create_source_topic(
        &source,
        &topic,
        &[("message.timestamp.type", "LogAppendTime")],
    );
    SourceWriter::start(&source, &topic, "pre", 300, 5000).finish(false);
    std::thread::sleep(Duration::from_millis(50));
    let cfg = agent_config("lat", &[&topic], &source);
    let gw = TestGateway::start(cfg.clone());
    wait_caught_up(&gw.admin(), "lat", &source, &topic, 1);
    let s = batch_times(&source, &topic);
    let d = batch_times(&destination, &topic);
    assert_eq!(s.len(), d.len(), "batch for batch");
    for (s, d) in s.iter().zip(&d) {
        assert_eq!(d.0, TimestampType::LogAppendTime);
        assert!(
            d.1 > s.1,
            "the destination's append time ({}) is later than the source's ({})",
            d.1,
            s.1
        );
    }
    // The gateway's producer state (PSM) equals the destination broker's, whose last
    // timestamps are its append times.
    let mut conn = RawConn::connect(&leader_addr(&destination, &topic, 0));
    assert_eq!(
        gateway_producers(&gw.admin(), &topic, 0),
        broker_producers(&mut conn, &topic, 0),
        "the PSM equals the destination broker's DescribeProducers"
    );
    drop(gw);
    // Without the map the restart matches every restamped destination batch with the source.
    forget_map(&cfg, "lat", &topic);
    let gw = TestGateway::start(cfg);
    SourceWriter::start(&source, &topic, "post", 300, 5000).finish(false);
    wait_caught_up(&gw.admin(), "lat", &source, &topic, 1);
    let next = agent_map_next(&gw, "lat", &topic, 0).expect("map");
    assert_eq!(next, (600, 600), "one range, offsets equal");
}
