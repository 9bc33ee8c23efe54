//! Review F7: the data barrier (`failover.barrier: data`, the fallback form; a control-batch
//! barrier needs no hiding) stays hidden from consumers on the client listener whatever
//! the topic's `compression.type` (the broker recompresses the barrier batch), for KIP-932 share
//! consumers (ShareFetch), and for Fetch by topic id when the gateway has not learned the id;
//! and a failover resumed after a crash finds a recompressed barrier instead of writing a second
//! one. Against the rig's real destination cluster (Kafka 4.1.1), with librdkafka and the Java
//! clients.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::Method;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{FetchRequest, MetadataRequest};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::RecordBatchDecoder;
use mirrorgate::client::KafkaClient;
use mirrorgate::protocol::barrier::{
    encode_barrier_batch, BarrierValue, BARRIER_KEY, BARRIER_TIMESTAMP, BARRIER_VALUE_VERSION,
};
use mirrorgate::protocol::batch::{BatchWalker, Compression};

use crate::failover::{
    data_barrier, failover, mirror_config, read_log, set_topic_configs_on_the_destination,
    wait_mirroring, wait_stopped,
};
use crate::gw::{ProcessGateway, TestGateway};
use crate::harness;
use crate::psm_differential::{batch, RawConn};

const BARRIER: &str = "__mirrorgate_barrier";

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt")
}

fn leader_addr(bootstrap: &str, topic: &str, partition: i32) -> String {
    harness::leader_addr(bootstrap, topic, partition)
}

/// Every record with the barrier key in a partition's log, read from its leader and decoded by
/// kafka-protocol (not by the gateway's barrier code): (offset, codec of its batch).
fn barrier_records(bootstrap: &str, topic: &str, partition: i32) -> Vec<(i64, Compression)> {
    let addr = leader_addr(bootstrap, topic, partition);
    rt().block_on(async {
        let mut c = KafkaClient::connect(&addr, Duration::from_secs(10))
            .await
            .expect("connect leader");
        let mut out = Vec::new();
        let mut next = 0;
        loop {
            let f = c
                .fetch_partition(topic, partition, next, 16 << 20)
                .await
                .expect("fetch");
            if next >= f.high_watermark {
                break;
            }
            let start = next;
            for item in BatchWalker::fetched(&f.records) {
                let (h, b) = item.expect("batch");
                let mut bytes = Bytes::copy_from_slice(b);
                for set in RecordBatchDecoder::decode_all(&mut bytes).expect("decode batch") {
                    for r in set.records {
                        if r.key.as_deref() == Some(BARRIER_KEY) {
                            out.push((r.offset, h.compression()));
                        }
                    }
                }
                next = h.last_offset() + 1;
            }
            assert!(next > start, "no progress reading {topic}-{partition}");
        }
        out
    })
}

fn codec(name: &str) -> Compression {
    match name {
        "gzip" => Compression::Gzip,
        "snappy" => Compression::Snappy,
        "lz4" => Compression::Lz4,
        "zstd" => Compression::Zstd,
        other => panic!("codec {other}"),
    }
}

/// Read topics matching `include` (a regex) through `bootstrap` with Java's ConsoleConsumer,
/// from the beginning, until `n` records or 30 s: the key of every record.
fn java_console_consume(bootstrap: &str, include: &str, n: usize) -> Vec<String> {
    let n = n.to_string();
    let group = harness::unique_topic("bv-java");
    let out = harness::rig_java(
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        &[
            "--bootstrap-server",
            bootstrap,
            "--include",
            include,
            "--group",
            &group,
            "--from-beginning",
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
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// Review F7 (a). Topics with `compression.type` lz4, zstd, gzip and snappy: the broker
/// recompresses the (uncompressed) barrier the gateway writes. Consumers on the client listener,
/// librdkafka and Java, still never see it, and the gateway's barrier parser finds it in the log.
#[test]
fn a_barrier_recompressed_by_the_broker_is_hidden_from_consumers() {
    let destination = harness::cluster("destination");
    let base = harness::unique_topic("bvc");
    let codecs = ["lz4", "zstd", "gzip", "snappy"];
    let topics: Vec<String> = codecs.iter().map(|c| format!("{base}-{c}")).collect();
    for (i, (t, c)) in topics.iter().zip(codecs).enumerate() {
        harness::create_topic(&destination, t, 1, Some(&[1 + (i as i32 % 2)]));
        set_topic_configs_on_the_destination(&destination, t, &[("compression.type", c)]);
    }
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    let gw = TestGateway::start(data_barrier(mirror_config("bvcomp", &names)));
    wait_mirroring(&gw.admin(), "bvcomp", codecs.len() as u64);
    for t in &topics {
        harness::produce_keyed(&gw.mirror_bootstrap(), t, 20, &[]);
    }
    failover(&gw.admin(), "bvcomp");
    wait_stopped(&gw.admin(), "bvcomp");

    for (t, c) in topics.iter().zip(codecs) {
        // Precondition: the broker did recompress the barrier.
        let bars = barrier_records(&destination, t, 0);
        assert_eq!(bars, vec![(20, codec(c))], "{t}: the barrier in the log");
    }
    // Every way the barrier can show is collected, so one run reports all of them.
    let mut problems: Vec<String> = Vec::new();
    // librdkafka through the client listener: the 20 mirrored records, never the barrier. The
    // test build of librdkafka (rdkafka without default features) decodes lz4 and snappy only;
    // the replacement the gateway sends is uncompressed whatever the codec.
    for t in topics
        .iter()
        .filter(|t| t.ends_with("-lz4") || t.ends_with("-snappy"))
    {
        let consumed = harness::consume_group(
            &gw.bootstrap(),
            t,
            &format!("{t}-rd"),
            21,
            Duration::from_secs(15),
            &[],
        );
        let keys: Vec<String> = consumed
            .values()
            .flatten()
            .filter_map(|r| r.key.clone())
            .collect();
        if keys.iter().any(|k| k == BARRIER) {
            problems.push(format!(
                "{t}: librdkafka saw the barrier through the gateway"
            ));
        }
        if keys.iter().filter(|k| *k != BARRIER).count() != 20 {
            problems.push(format!("{t}: librdkafka got {keys:?}"));
        }
    }
    // Java's consumer through the client listener, all four topics at once: each topic holds
    // key-0..key-19.
    let keys = java_console_consume(&gw.bootstrap(), &format!("^{base}-.*"), 4 * 21);
    let barriers = keys.iter().filter(|k| *k == BARRIER).count();
    if barriers > 0 {
        problems.push(format!(
            "the Java consumer saw {barriers} barrier(s) through the gateway"
        ));
    }
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for k in keys.iter().filter(|k| *k != BARRIER) {
        *counts.entry(k.as_str()).or_default() += 1;
    }
    if counts.len() != 20 || counts.values().any(|c| *c != topics.len()) {
        problems.push(format!("the Java consumer got {counts:?}"));
    }
    // The gateway's own parser (used by a resumed failover) finds the recompressed barrier.
    for t in &topics {
        let log = read_log(&destination, t, 0);
        let offsets: Vec<i64> = log.barriers.iter().map(|b| b.0).collect();
        if offsets != [20] {
            problems.push(format!(
                "{t}: the gateway's barrier parser found barriers at {offsets:?}, not [20]"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // Consumers on the mirror listener still see it (chains and failback carry it on).
    let mirrored = harness::consume_group(
        &gw.mirror_bootstrap(),
        &topics[0],
        &format!("{}-m", topics[0]),
        21,
        Duration::from_secs(15),
        &[],
    );
    assert!(
        mirrored
            .values()
            .flatten()
            .any(|r| r.key.as_deref() == Some(BARRIER)),
        "{mirrored:?}"
    );
}

/// Review F7 (a): the gateway is killed right after writing the barriers into lz4 topics (the
/// broker recompressed them) and before recording them. On restart the resumed failover looks
/// for this failover's barrier in the log tail, finds the recompressed one, and writes no
/// second barrier. Kills only the gateway process.
#[test]
fn disruptive_gateway_killed_after_writing_a_recompressed_barrier_resumes_without_a_second_one() {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("bv-crash-lz4");
    harness::create_topic(&destination, &topic, 2, Some(&[1, 2]));
    set_topic_configs_on_the_destination(&destination, &topic, &[("compression.type", "lz4")]);
    let mut gw = ProcessGateway::start(
        data_barrier(mirror_config("bvcrash", &[&topic])),
        &[("MIRRORGATE_CRASH_AFTER", "barrier_written")],
    );
    wait_mirroring(&gw.admin(), "bvcrash", 2);
    harness::produce_keyed(&gw.mirror_bootstrap(), &topic, 40, &[]);
    let (status, body) = crate::gw::admin_call(
        &gw.admin(),
        Method::POST,
        "/v1/mirrors/bvcrash/failover",
        None,
    );
    assert_eq!(status, 202, "{body}");
    assert!(
        gw.wait_exit(Duration::from_secs(30)),
        "the crash hook did not fire:\n{}",
        gw.log()
    );
    gw.restart(&[]);
    wait_stopped(&gw.admin(), "bvcrash");
    for p in 0..2 {
        let bars = barrier_records(&destination, &topic, p);
        assert_eq!(
            bars.len(),
            1,
            "partition {p}: a resumed failover wrote a second barrier: {bars:?}"
        );
        assert_eq!(bars[0].1, Compression::Lz4, "partition {p}");
    }
}

/// Review F7 (b). With share groups enabled on the destination (`share.version=1`, restored
/// afterwards), a KIP-932 share consumer reading through the client listener gets every
/// mirrored record and never the barrier, whether the topic stores it as written or recompressed.
#[test]
fn share_consumers_through_the_gateway_never_see_the_barrier() {
    let destination = harness::cluster("destination");
    let _share = harness::ShareGroupsEnabled::enable(&destination);
    let plain = harness::unique_topic("bv-share");
    let lz4 = harness::unique_topic("bv-share-lz4");
    harness::create_topic(&destination, &plain, 1, Some(&[1]));
    harness::create_topic(&destination, &lz4, 1, Some(&[2]));
    set_topic_configs_on_the_destination(&destination, &lz4, &[("compression.type", "lz4")]);
    let gw = TestGateway::start(data_barrier(mirror_config("bvshare", &[&plain, &lz4])));
    wait_mirroring(&gw.admin(), "bvshare", 2);
    for t in [&plain, &lz4] {
        harness::produce_keyed(&gw.mirror_bootstrap(), t, 20, &[]);
    }
    failover(&gw.admin(), "bvshare");
    wait_stopped(&gw.admin(), "bvshare");
    for t in [&plain, &lz4] {
        assert_eq!(barrier_records(&destination, t, 0).len(), 1, "{t}");
        let group = format!("{t}-share");
        let seen: Vec<(i64, String)> =
            harness::share_consume(&gw.bootstrap(), &destination, t, &group, 21, &[], 25_000)
                .into_iter()
                .map(|d| (d.offset, d.key))
                .collect();
        let barriers: Vec<&(i64, String)> = seen.iter().filter(|(_, k)| k == BARRIER).collect();
        assert!(
            barriers.is_empty(),
            "{t}: the share consumer saw the barrier through the gateway: {barriers:?}"
        );
        let offsets: Vec<i64> = seen.iter().map(|(o, _)| *o).collect();
        assert_eq!(offsets, (0..20).collect::<Vec<_>>(), "{t}: {seen:?}");
    }
}

/// The topic id of `topic`, asked of the brokers directly (not through the gateway, which would
/// learn it from the answer).
fn topic_id(bootstrap: &str, topic: &str) -> uuid::Uuid {
    let addr = harness::brokers(bootstrap)[0].1.clone();
    rt().block_on(async {
        let mut c = KafkaClient::connect(&addr, Duration::from_secs(10))
            .await
            .expect("connect");
        let r = c
            .send(
                &MetadataRequest::default()
                    .with_topics(Some(vec![MetadataRequestTopic::default()
                        .with_name(Some(StrBytes::from_string(topic.to_string()).into()))])),
                12,
            )
            .await
            .expect("metadata");
        let t = &r.topics[0];
        assert_eq!(t.error_code, 0, "{t:?}");
        t.topic_id
    })
}

/// Review F7 (c). A consumer fetches a mirror topic by topic id (Fetch v13+) that the gateway
/// has not learned yet (the topic was created after its last metadata refresh, and the client
/// learned the id elsewhere). The barrier in that topic must not reach the client: the
/// gateway fails closed for ids it cannot name.
#[test]
fn a_fetch_by_a_topic_id_the_gateway_has_not_learned_never_shows_the_barrier() {
    let destination = harness::cluster("destination");
    let prefix = harness::unique_topic("bvid");
    let mut cfg = data_barrier(mirror_config("bvid", &[&format!("regex:{prefix}-.*")]));
    cfg.destination.metadata_refresh_ms = 3_600_000;
    let gw = TestGateway::start(cfg);
    // Created after the gateway's metadata fetch, written directly on the broker: three records
    // and a barrier (as an upstream failover leaves it in mirrored data).
    let topic = format!("{prefix}-t");
    harness::create_topic(&destination, &topic, 1, Some(&[1]));
    let leader = leader_addr(&destination, &topic, 0);
    let mut raw = RawConn::connect(&leader);
    assert_eq!(raw.produce(&topic, 0, batch(-1, -1, -1, 3, "d")).0, 0);
    let value = BarrierValue {
        version: BARRIER_VALUE_VERSION,
        mirror: "upstream".into(),
        failover_id: "f7c".into(),
        source_cluster_id: None,
        time_ms: 1,
        producers_expired: 0,
        last_mirrored_offset: 2,
    };
    let (code, barrier_offset) =
        raw.produce(&topic, 0, encode_barrier_batch(&value, BARRIER_TIMESTAMP));
    assert_eq!((code, barrier_offset), (0, 3));
    let id = topic_id(&destination, &topic);

    let gw_addr = format!("127.0.0.1:{}", gw.port_for(1));
    let deadline = Instant::now() + Duration::from_secs(5);
    let records = rt().block_on(async {
        let mut c = KafkaClient::connect(&gw_addr, Duration::from_secs(10))
            .await
            .expect("connect gateway");
        loop {
            let req = FetchRequest::default()
                .with_replica_id((-1).into())
                .with_max_wait_ms(0)
                .with_min_bytes(0)
                .with_max_bytes(1 << 20)
                .with_session_id(0)
                .with_session_epoch(-1)
                .with_topics(vec![FetchTopic::default()
                    .with_topic_id(id)
                    .with_partitions(vec![FetchPartition::default()
                        .with_partition(0)
                        .with_current_leader_epoch(-1)
                        .with_fetch_offset(0)
                        .with_last_fetched_epoch(-1)
                        .with_log_start_offset(-1)
                        .with_partition_max_bytes(1 << 20)])]);
            let r = c.send(&req, 16).await.expect("fetch by topic id");
            let p = &r.responses[0].partitions[0];
            // A just-created topic may not be known to the broker's fetch path for a moment.
            if p.error_code != 0 && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            assert_eq!(p.error_code, 0, "{p:?}");
            let mut bytes = p.records.clone().unwrap_or_default();
            let mut out = Vec::new();
            for set in RecordBatchDecoder::decode_all(&mut bytes).expect("decode records") {
                for r in set.records {
                    out.push((
                        r.offset,
                        r.control,
                        r.key.map(|k| String::from_utf8_lossy(&k).into_owned()),
                    ));
                }
            }
            return out;
        }
    });
    assert!(
        gw.gateway.cluster.topic_name(&id).is_none(),
        "the test needs an id the gateway has not learned"
    );
    let visible: Vec<_> = records
        .iter()
        .filter(|(_, control, key)| !control && key.as_deref() == Some(BARRIER))
        .collect();
    assert!(
        visible.is_empty(),
        "the barrier reached the client in a Fetch by topic id: {visible:?}"
    );
    let data: Vec<i64> = records
        .iter()
        .filter(|(_, control, _)| !control)
        .map(|(o, _, _)| *o)
        .collect();
    assert_eq!(data, vec![0, 1, 2]);
    // Its offset is still covered (a control record), so consumers move past it.
    assert!(records.iter().any(|(o, c, _)| *o == 3 && *c), "{records:?}");
}
