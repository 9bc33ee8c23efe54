//! The PSM against the real broker. Crafted Produce requests (chosen producer id, epoch and
//! sequences) go through the gateway to a tracked partition of the destination; for every batch
//! the PSM's classification must match what the broker answered (the gateway counts a
//! disagreement as `result="diverged"`), and afterwards the gateway's producer list for the
//! partition must equal the broker's own `DescribeProducers` answer.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use kafka_protocol::indexmap::IndexMap;
use kafka_protocol::messages::describe_producers_request::TopicRequest;
use kafka_protocol::messages::{
    ApiKey, DescribeProducersRequest, DescribeProducersResponse, ProduceRequest, ProduceResponse,
    ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

use crate::gw::TestGateway;
use crate::harness;

/// A single v2 record batch of `n` records for producer `pid`/`epoch` starting at `base_seq`,
/// with a correct CRC. (Sequence wrap-around past i32::MAX cannot be reached on a real broker
/// without 2^31 records; the PSM unit and property tests cover it.)
pub fn batch(pid: i64, epoch: i16, base_seq: i32, n: i32, tag: &str) -> Bytes {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64;
    let records: Vec<Record> = (0..n)
        .map(|i| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: pid,
            producer_epoch: epoch,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: i,
            timestamp: now,
            key: Some(Bytes::from(format!("{tag}-{i}"))),
            value: Some(Bytes::from(format!("{tag}-value-{i}"))),
            headers: IndexMap::new(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        records.iter(),
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .expect("batch encodes");
    // Set the base sequence (the encoder would split a wrapping run into two batches) and fix
    // the CRC-32C, which covers bytes 21.. of the batch.
    buf[53..57].copy_from_slice(&base_seq.to_be_bytes());
    let crc = crc32c::crc32c(&buf[21..]);
    buf[17..21].copy_from_slice(&crc.to_be_bytes());
    buf.freeze()
}

/// One request/response exchange on a raw connection.
pub struct RawConn {
    s: TcpStream,
    corr: i32,
}

impl RawConn {
    pub fn connect(addr: &str) -> RawConn {
        let s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        s.set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        RawConn { s, corr: 100 }
    }

    fn exchange(&mut self, key: ApiKey, version: i16, body: &impl Encodable) -> Bytes {
        let corr = self.send(key, version, body);
        self.receive(key, version, corr)
    }

    /// Write one request; returns its correlation id.
    fn send(&mut self, key: ApiKey, version: i16, body: &impl Encodable) -> i32 {
        self.corr += 1;
        let out = crate::wire::request_frame(key, version, self.corr, body);
        self.s.write_all(&out).expect("send");
        self.corr
    }

    /// Read the response to request `corr` (the next one on the connection).
    fn receive(&mut self, key: ApiKey, version: i16, corr: i32) -> Bytes {
        let mut len = [0u8; 4];
        self.s.read_exact(&mut len).expect("response length");
        let mut resp = vec![0u8; i32::from_be_bytes(len) as usize];
        self.s.read_exact(&mut resp).expect("response");
        let mut b = Bytes::from(resp);
        let h = ResponseHeader::decode(&mut b, key.response_header_version(version))
            .expect("response header");
        assert_eq!(h.correlation_id, corr);
        b
    }

    fn produce_request(topic: &str, partition: i32, records: Bytes) -> ProduceRequest {
        crate::wire::produce_request(topic, partition, -1, records)
    }

    /// Send one Produce request (acks=all) per batch without waiting, then read the answers in
    /// order: (error code, base offset) per batch.
    pub fn produce_pipelined(
        &mut self,
        topic: &str,
        partition: i32,
        batches: Vec<Bytes>,
    ) -> Vec<(i16, i64)> {
        let sent: Vec<i32> = batches
            .into_iter()
            .map(|b| {
                self.send(
                    ApiKey::Produce,
                    9,
                    &Self::produce_request(topic, partition, b),
                )
            })
            .collect();
        sent.into_iter()
            .map(|corr| {
                let mut b = self.receive(ApiKey::Produce, 9, corr);
                let resp = ProduceResponse::decode(&mut b, 9).expect("produce response");
                let p = &resp.responses[0].partition_responses[0];
                (p.error_code, p.base_offset)
            })
            .collect()
    }

    /// Produce one batch with acks=0: the broker sends no answer.
    pub fn produce_acks_0(&mut self, topic: &str, partition: i32, records: Bytes) {
        self.send(
            ApiKey::Produce,
            9,
            &crate::wire::produce_request(topic, partition, 0, records),
        );
    }

    /// Produce one batch with acks=all; returns (error code, base offset).
    pub fn produce(&mut self, topic: &str, partition: i32, records: Bytes) -> (i16, i64) {
        let (code, offset, _) = self.produce_msg(topic, partition, records);
        (code, offset)
    }

    /// Produce one batch with acks=all; returns (error code, base offset, error message).
    pub fn produce_msg(
        &mut self,
        topic: &str,
        partition: i32,
        records: Bytes,
    ) -> (i16, i64, String) {
        let req = Self::produce_request(topic, partition, records);
        let mut b = self.exchange(ApiKey::Produce, 9, &req);
        let resp = ProduceResponse::decode(&mut b, 9).expect("produce response");
        let p = &resp.responses[0].partition_responses[0];
        (
            p.error_code,
            p.base_offset,
            p.error_message
                .as_ref()
                .map(|m| m.to_string())
                .unwrap_or_default(),
        )
    }

    pub fn describe_producers(&mut self, topic: &str, partition: i32) -> DescribeProducersResponse {
        let req = DescribeProducersRequest::default().with_topics(vec![TopicRequest::default()
            .with_name(StrBytes::from_string(topic.to_string()).into())
            .with_partition_indexes(vec![partition])]);
        let mut b = self.exchange(ApiKey::DescribeProducers, 0, &req);
        DescribeProducersResponse::decode(&mut b, 0).expect("describe producers response")
    }
}

/// (producer id, epoch, last sequence, last timestamp, coordinator epoch, txn start offset).
pub type ProducerRow = (i64, i32, i32, i64, i32, i64);

pub fn broker_producers(conn: &mut RawConn, topic: &str, partition: i32) -> Vec<ProducerRow> {
    let resp = conn.describe_producers(topic, partition);
    let p = &resp.topics[0].partitions[0];
    assert_eq!(p.error_code, 0, "DescribeProducers error");
    let mut v: Vec<ProducerRow> = p
        .active_producers
        .iter()
        .map(|a| {
            (
                a.producer_id.0,
                a.producer_epoch,
                a.last_sequence,
                a.last_timestamp,
                a.coordinator_epoch,
                a.current_txn_start_offset,
            )
        })
        .collect();
    v.sort();
    v
}

pub fn gateway_producers_json(admin: &str, topic: &str, partition: i32) -> serde_json::Value {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    let (status, body) = rt
        .block_on(mirrorgate::admin::client::call(
            admin,
            hyper::Method::GET,
            &format!("/v1/partitions/{topic}/{partition}/producers"),
            None,
            None,
        ))
        .expect("admin call");
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).expect("json")
}

pub fn gateway_producers(admin: &str, topic: &str, partition: i32) -> Vec<ProducerRow> {
    let v = gateway_producers_json(admin, topic, partition);
    let mut rows: Vec<ProducerRow> = v["producers"]
        .as_array()
        .expect("producers")
        .iter()
        .map(|p| {
            (
                p["producer_id"].as_i64().unwrap_or(-1),
                p["epoch"].as_i64().unwrap_or(-1) as i32,
                p["last_sequence"].as_i64().unwrap_or(-1) as i32,
                p["last_timestamp"].as_i64().unwrap_or(-1),
                p["coordinator_epoch"].as_i64().unwrap_or(-1) as i32,
                p["current_txn_start_offset"].as_i64().unwrap_or(-1),
            )
        })
        .collect();
    rows.sort();
    rows
}

/// A gateway whose single mirror tracks `topic`, in front of the rig's destination.
pub fn gateway_tracking(topic: &str) -> TestGateway {
    let gw = TestGateway::start(crate::failover::mirror_config("diff", &[topic]));
    wait_tracked_ready(&gw, topic);
    gw
}

pub fn wait_tracked_ready(gw: &TestGateway, topic: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = gw.gateway.readiness();
        let tracked = gw
            .gateway
            .psm
            .as_ref()
            .is_some_and(|p| p.partitions().iter().any(|(t, _)| t == topic));
        if r.ready && tracked {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "partition of {topic} not tracked and rebuilt: {:?}",
            r.reasons
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn batches_by_result(gw: &TestGateway) -> BTreeMap<String, f64> {
    gw.metrics()
        .lines()
        .filter_map(|l| l.strip_prefix("mirrorgate_psm_batches_total{result=\""))
        .filter_map(|rest| {
            let (label, value) = rest.split_once("\"} ")?;
            Some((label.to_string(), value.trim().parse().ok()?))
        })
        .collect()
}

/// The one result whose counter moved since `before`.
fn moved(before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>) -> Vec<String> {
    after
        .iter()
        .filter(|(k, v)| before.get(*k).copied().unwrap_or(0.0) < **v)
        .map(|(k, _)| k.clone())
        .collect()
}

struct Step {
    what: &'static str,
    pid: i64,
    epoch: i16,
    seq: i32,
    n: i32,
    /// Expected broker error code (documentation of the scenario; the PSM must agree whatever it is).
    broker: i16,
    /// Expected PSM result label.
    result: &'static str,
}

#[test]
fn psm_classification_matches_the_broker_for_every_crafted_batch() {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("psm-diff");
    harness::create_topic(&destination, &topic, 1, Some(&[1]));
    let gw = gateway_tracking(&topic);
    let mut conn = RawConn::connect(&format!("127.0.0.1:{}", gw.mirror_port_for(1)));
    let base = 7_000_000 + (std::process::id() as i64 % 1000) * 100;
    let (a, b, c, d) = (base + 1, base + 2, base + 3, base + 4);
    let steps = [
        Step {
            what: "new producer, first batch",
            pid: a,
            epoch: 0,
            seq: 0,
            n: 1,
            broker: 0,
            result: "accepted",
        },
        Step {
            what: "next batch in sequence",
            pid: a,
            epoch: 0,
            seq: 1,
            n: 3,
            broker: 0,
            result: "accepted",
        },
        Step {
            what: "retry of the first batch",
            pid: a,
            epoch: 0,
            seq: 0,
            n: 1,
            broker: 0,
            result: "duplicate",
        },
        Step {
            what: "gap in sequence",
            pid: a,
            epoch: 0,
            seq: 10,
            n: 1,
            broker: 45,
            result: "out_of_order_sequence",
        },
        Step {
            what: "epoch bump restarts at 0",
            pid: a,
            epoch: 1,
            seq: 0,
            n: 2,
            broker: 0,
            result: "accepted",
        },
        Step {
            what: "old epoch after the bump",
            pid: a,
            epoch: 0,
            seq: 4,
            n: 1,
            broker: 47,
            result: "invalid_producer_epoch",
        },
        Step {
            what: "epoch bump not starting at 0",
            pid: a,
            epoch: 2,
            seq: 5,
            n: 1,
            broker: 45,
            result: "out_of_order_sequence",
        },
        Step {
            what: "second producer",
            pid: b,
            epoch: 0,
            seq: 0,
            n: 1,
            broker: 0,
            result: "accepted",
        },
        Step {
            what: "b: 2",
            pid: b,
            epoch: 0,
            seq: 1,
            n: 1,
            broker: 0,
            result: "accepted",
        },
        Step {
            what: "b: 3",
            pid: b,
            epoch: 0,
            seq: 2,
            n: 1,
            broker: 0,
            result: "accepted",
        },
        Step {
            what: "b: 4",
            pid: b,
            epoch: 0,
            seq: 3,
            n: 1,
            broker: 0,
            result: "accepted",
        },
        Step {
            what: "b: 5",
            pid: b,
            epoch: 0,
            seq: 4,
            n: 1,
            broker: 0,
            result: "accepted",
        },
        Step {
            what: "b: 6 (first batch leaves the cache)",
            pid: b,
            epoch: 0,
            seq: 5,
            n: 1,
            broker: 0,
            result: "accepted",
        },
        Step {
            what: "b: retry of a batch in the middle of the cache",
            pid: b,
            epoch: 0,
            seq: 3,
            n: 1,
            broker: 0,
            result: "duplicate",
        },
        Step {
            what: "b: retry of a batch no longer cached",
            pid: b,
            epoch: 0,
            seq: 0,
            n: 1,
            broker: 45,
            result: "out_of_order_sequence",
        },
        Step {
            what: "b: same start, different length",
            pid: b,
            epoch: 0,
            seq: 5,
            n: 2,
            broker: 45,
            result: "out_of_order_sequence",
        },
        Step {
            what: "unknown producer starting above 0 (accepted by 4.1.1)",
            pid: c,
            epoch: 0,
            seq: 5,
            n: 1,
            broker: 0,
            result: "accepted",
        },
        Step {
            what: "third producer, a large batch",
            pid: d,
            epoch: 0,
            seq: 0,
            n: 50,
            broker: 0,
            result: "accepted",
        },
        Step {
            what: "retry of the large batch",
            pid: d,
            epoch: 0,
            seq: 0,
            n: 50,
            broker: 0,
            result: "duplicate",
        },
    ];
    let mut offsets: BTreeMap<(i64, i16, i32), i64> = BTreeMap::new();
    let mut failures = Vec::new();
    for (i, st) in steps.iter().enumerate() {
        let before = batches_by_result(&gw);
        let (code, offset) = conn.produce(
            &topic,
            0,
            batch(st.pid, st.epoch, st.seq, st.n, &format!("s{i}")),
        );
        // The tap applies the outcome before the response reaches the client, so the counter
        // has moved by now.
        let after = batches_by_result(&gw);
        let m = moved(&before, &after);
        if code == 0 && st.result == "duplicate" {
            let original = offsets.get(&(st.pid, st.epoch, st.seq)).copied();
            if original != Some(offset) {
                failures.push(format!(
                    "step {i} ({}): duplicate acked at {offset}, original at {original:?}",
                    st.what
                ));
            }
        } else if code == 0 {
            offsets.insert((st.pid, st.epoch, st.seq), offset);
        }
        if code != st.broker {
            failures.push(format!(
                "step {i} ({}): broker answered {code}, scenario expects {}",
                st.what, st.broker
            ));
        }
        if m != vec![st.result.to_string()] {
            failures.push(format!(
                "step {i} ({}): PSM result {m:?}, expected [{}] (broker code {code})",
                st.what, st.result
            ));
        }
    }
    assert!(failures.is_empty(), "differences:\n{}", failures.join("\n"));
    assert_eq!(
        gw.metric(r#"mirrorgate_psm_batches_total{result="diverged"}"#),
        0.0
    );

    // The gateway's producer list equals the broker's.
    let broker = broker_producers(
        &mut RawConn::connect(&format!("127.0.0.1:{}", gw.port_for(1))),
        &topic,
        0,
    );
    let gateway = gateway_producers(&gw.admin(), &topic, 0);
    assert_eq!(
        gateway, broker,
        "gateway PSM (left) vs broker DescribeProducers (right)"
    );
    assert!(gateway.len() >= 4, "{gateway:?}");
}

#[test]
fn psm_follows_real_idempotent_producers_and_agrees_with_describe_producers() {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("psm-real");
    harness::create_topic(&destination, &topic, 2, Some(&[1, 2]));
    let gw = gateway_tracking(&topic);
    for _ in 0..3 {
        harness::produce_keyed(&gw.mirror_bootstrap(), &topic, 2_000, &[]);
    }
    assert_eq!(
        gw.metric(r#"mirrorgate_psm_batches_total{result="diverged"}"#),
        0.0
    );
    assert!(gw.metric(r#"mirrorgate_psm_batches_total{result="accepted"}"#) > 0.0);
    for (partition, node) in [(0, 1), (1, 2)] {
        let broker = broker_producers(
            &mut RawConn::connect(&format!("127.0.0.1:{}", gw.port_for(node))),
            &topic,
            partition,
        );
        let gateway = gateway_producers(&gw.admin(), &topic, partition);
        assert_eq!(
            gateway, broker,
            "partition {partition}: gateway (left) vs broker (right)"
        );
        assert_eq!(
            broker.len(),
            3,
            "three producers wrote to partition {partition}"
        );
    }
}

/// The last log offset the PSM snapshot of a partition covers, read from the state directory
/// (`None`: no readable snapshot).
fn snapshot_through(state_dir: &std::path::Path, topic: &str, partition: i32) -> Option<i64> {
    let store = mirrorgate::state::StateStore::open(state_dir).ok()?;
    let bytes = store
        .read(
            mirrorgate::psm::registry::SNAPSHOT_AREA,
            &mirrorgate::psm::registry::snapshot_name(topic, partition),
        )
        .ok()??;
    mirrorgate::psm::PartitionPsm::decode_snapshot(&bytes)
        .ok()
        .map(|(_, through)| through)
}

/// The offset after the last record of a destination partition (read from its leader).
fn destination_log_end(topic: &str, partition: i32) -> i64 {
    let log = crate::failover::read_log(&harness::cluster("destination"), topic, partition);
    log.records.last().map_or(0, |r| r.offset + 1)
}

/// `batches` of every "producer state rebuilt" log line of `topic`-`partition` in `log` with
/// `from_snapshot=true`.
fn snapshot_rebuilds(log: &str, topic: &str, partition: i32) -> Vec<u64> {
    log.lines()
        .filter(|l| {
            l.contains("producer state rebuilt")
                && l.contains(&format!("topic=\"{topic}\""))
                && l.contains(&format!("partition={partition} "))
                && l.contains("from_snapshot=true")
        })
        .filter_map(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix("batches="))
                .and_then(|n| n.parse().ok())
        })
        .collect()
}

/// Runs alone: the gateway process is killed with -9; on restart the PSM is rebuilt from its
/// snapshot plus the log tail written after it, and equals the one before (and the broker's
/// own view).
///
/// Round 1 is snapshotted (the test waits until the snapshot covers it); the gateway is then
/// restarted with snapshots only every hour, so round 2 is in no snapshot when it is killed
/// again: the second rebuild must replay it from the log.
#[test]
fn disruptive_psm_rebuilt_after_kill_9_equals_the_one_before() {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("psm-restart");
    harness::create_topic(&destination, &topic, 2, Some(&[1, 2]));
    let mut cfg = crate::failover::mirror_config("restart", &[&topic]);
    let mut gw = crate::gw::ProcessGateway::start(cfg.clone(), &[]);
    harness::produce_keyed(&gw.mirror_bootstrap(), &topic, 3_000, &[]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !(0..2).all(|p| {
        snapshot_through(&cfg.state_dir, &topic, p) == Some(destination_log_end(&topic, p) - 1)
    }) {
        assert!(
            Instant::now() < deadline,
            "no snapshot covering round 1: {:?}",
            (0..2)
                .map(|p| snapshot_through(&cfg.state_dir, &topic, p))
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    gw.kill9();
    cfg.psm.snapshot_interval_ms = 3_600_000;
    std::fs::write(&gw.config_path, mirrorgate::config::render_effective(&cfg))
        .expect("rewrite the config");
    gw.restart(&[]);
    harness::produce_keyed(&gw.mirror_bootstrap(), &topic, 3_000, &[]);
    let before: Vec<Vec<ProducerRow>> = (0..2)
        .map(|p| gateway_producers(&gw.admin(), &topic, p))
        .collect();
    assert!(before.iter().all(|b| b.len() == 2), "{before:?}");
    for p in 0..2 {
        let through = snapshot_through(&cfg.state_dir, &topic, p).expect("snapshot");
        assert!(
            through < destination_log_end(&topic, p) - 1,
            "partition {p}: the snapshot (through {through}) already covers round 2"
        );
    }
    gw.kill9();
    let log_from = gw.log().len();
    gw.restart(&[]);
    for (p, node) in [(0, 1), (1, 2)] {
        let after = gateway_producers(&gw.admin(), &topic, p);
        assert_eq!(
            after, before[p as usize],
            "partition {p}: rebuilt PSM (left) vs before the kill (right)"
        );
        let broker = broker_producers(
            &mut RawConn::connect(&format!("127.0.0.1:{}", gw.port_for(node))),
            &topic,
            p,
        );
        assert_eq!(
            after, broker,
            "partition {p}: rebuilt PSM (left) vs broker (right)"
        );
        let v = gateway_producers_json(&gw.admin(), &topic, p);
        assert_eq!(v["ready"], true);
    }
    // Each partition was rebuilt from its snapshot plus a non-empty tail (round 2).
    let log = gw.log()[log_from..].to_string();
    let mut tail_batches = 0;
    for p in 0..2 {
        let rebuilds = snapshot_rebuilds(&log, &topic, p);
        assert!(
            rebuilds.len() == 1 && rebuilds[0] > 0,
            "partition {p}: one rebuild from the snapshot replaying round 2, got batches {rebuilds:?}:\n{log}"
        );
        tail_batches += rebuilds[0];
    }
    let (status, metrics) =
        crate::gw::admin_call(&gw.admin(), hyper::Method::GET, "/metrics", None);
    assert_eq!(status, 200);
    let replayed: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("mirrorgate_psm_rebuild_batches_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no mirrorgate_psm_rebuild_batches_total:\n{metrics}"));
    assert_eq!(
        replayed, tail_batches as f64,
        "batches replayed by the rebuilds after the kill"
    );
}

/// Producer ids listed by `rows`.
fn pids(rows: &[ProducerRow]) -> std::collections::BTreeSet<i64> {
    rows.iter().map(|r| r.0).collect()
}

/// `producers` idempotent librdkafka producers started together, each writing `records`
/// single-record batches (`linger.ms=0`, one record per batch, up to 5 requests in flight per
/// connection) to every partition of `topic` through `bootstrap`; waits for every
/// acknowledgement (each producer is bounded by `harness::produce_keyed`).
fn pipelined_idempotent_producers(bootstrap: &str, topic: &str, producers: usize, records: usize) {
    std::thread::scope(|s| {
        for _ in 0..producers {
            s.spawn(|| {
                harness::produce_keyed(
                    bootstrap,
                    topic,
                    records,
                    &[
                        ("linger.ms", "0"),
                        ("batch.num.messages", "1"),
                        ("max.in.flight.requests.per.connection", "5"),
                    ],
                )
            });
        }
    });
}

/// Per partition: the gateway's producer list against the broker's `DescribeProducers`, both
/// limited to the producers `keep` selects; a description of each difference.
fn producer_list_differences(
    gw: &TestGateway,
    topic: &str,
    leaders: &[i32],
    keep: impl Fn(i64) -> bool,
) -> Vec<String> {
    let mut out = Vec::new();
    for (partition, node) in leaders.iter().enumerate() {
        let partition = partition as i32;
        let mut conn = RawConn::connect(&format!("127.0.0.1:{}", gw.port_for(*node)));
        let broker: Vec<ProducerRow> = broker_producers(&mut conn, topic, partition)
            .into_iter()
            .filter(|r| keep(r.0))
            .collect();
        let gateway: Vec<ProducerRow> = gateway_producers(&gw.admin(), topic, partition)
            .into_iter()
            .filter(|r| keep(r.0))
            .collect();
        if gateway != broker {
            let only_gw: Vec<_> = gateway.iter().filter(|r| !broker.contains(r)).collect();
            let only_broker: Vec<_> = broker.iter().filter(|r| !gateway.contains(r)).collect();
            out.push(format!(
                "partition {partition} (leader {node}): {} producers in the gateway, {} in the broker; \
                 only in the gateway {only_gw:?}; only in the broker {only_broker:?}",
                gateway.len(),
                broker.len()
            ));
        }
    }
    out
}

/// Wait (30 s at most) until every partition of `topic` is rebuilt and not waiting for a rebuild.
fn wait_psm_settled(gw: &TestGateway, topic: &str, partitions: i32) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let settled = (0..partitions).all(|p| {
            gw.gateway
                .psm
                .as_ref()
                .and_then(|r| r.view(topic, p))
                .is_some_and(|v| v.ready && !v.wants_rebuild)
        });
        if settled {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the PSM of {topic} is still rebuilding after 30 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// F16: many idempotent producers, each pipelining single-record batches (5 requests in flight),
/// write to partitions led by both destination brokers, first through the mirror listener while
/// the topic is mirrored, then through the client listener after a failover. Their responses
/// reach the gateway on 30 connections at once, in any order across connections: the PSM must
/// classify every batch as the broker did (no `diverged`), and afterwards hold exactly the
/// producers the broker lists.
#[test]
fn the_psm_agrees_with_the_broker_on_pipelined_idempotent_producers_before_and_after_failover() {
    const PRODUCERS: usize = 30;
    const RECORDS: usize = 60;
    let leaders = [1, 2, 1, 2];
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("psm-pipelined");
    harness::create_topic(&destination, &topic, leaders.len() as i32, Some(&leaders));
    let gw = TestGateway::start(crate::failover::mirror_config("pipelined", &[&topic]));
    crate::failover::wait_mirroring(&gw.admin(), "pipelined", leaders.len() as u64);
    let diverged = || gw.metric(r#"mirrorgate_psm_batches_total{result="diverged"}"#);
    let mut failures = Vec::new();

    // Before the failover: mirrored traffic.
    pipelined_idempotent_producers(&gw.mirror_bootstrap(), &topic, PRODUCERS, RECORDS);
    let before = diverged();
    if before != 0.0 {
        failures.push(format!(
            "before the failover: {before} batches diverged (of {} accepted)",
            gw.metric(r#"mirrorgate_psm_batches_total{result="accepted"}"#)
        ));
    }
    wait_psm_settled(&gw, &topic, leaders.len() as i32);
    failures.extend(
        producer_list_differences(&gw, &topic, &leaders, |_| true)
            .into_iter()
            .map(|d| format!("before the failover: {d}")),
    );
    let mirrored: std::collections::BTreeSet<i64> = (0..leaders.len() as i32)
        .flat_map(|p| pids(&gateway_producers(&gw.admin(), &topic, p)))
        .collect();
    assert!(
        mirrored.len() >= PRODUCERS,
        "expected {PRODUCERS} mirrored producers, the gateway lists {}",
        mirrored.len()
    );

    crate::failover::failover(&gw.admin(), "pipelined");
    crate::failover::wait_stopped(&gw.admin(), "pipelined");

    // After the failover: local traffic. The mirrored producers were cleared from the PSM at
    // the barrier (the broker still lists them): compare the others.
    pipelined_idempotent_producers(&gw.bootstrap(), &topic, PRODUCERS, RECORDS);
    let after = diverged() - before;
    if after != 0.0 {
        failures.push(format!(
            "after the failover: {after} batches diverged (of {} accepted in both phases)",
            gw.metric(r#"mirrorgate_psm_batches_total{result="accepted"}"#)
        ));
    }
    wait_psm_settled(&gw, &topic, leaders.len() as i32);
    // The control barrier's producer id: the brokers list it (the marker created its entry),
    // the PSM does not (it is cleared at the barrier, and the gateway never writes data with it).
    let barrier_pids: Vec<i64> = {
        let (_, body) = crate::gw::admin_call(
            &gw.admin(),
            hyper::Method::GET,
            "/v1/mirrors/pipelined/partitions",
            None,
        );
        let v: serde_json::Value = serde_json::from_str(&body).expect("json");
        v["partitions"]
            .as_array()
            .expect("partitions")
            .iter()
            .filter_map(|p| p["barrier_producer_id"].as_i64())
            .collect()
    };
    failures.extend(
        producer_list_differences(&gw, &topic, &leaders, |pid| {
            !mirrored.contains(&pid) && !barrier_pids.contains(&pid)
        })
        .into_iter()
        .map(|d| format!("after the failover: {d}")),
    );
    let local: usize = (0..leaders.len() as i32)
        .map(|p| gateway_producers(&gw.admin(), &topic, p).len())
        .max()
        .unwrap_or(0);
    assert!(
        local >= PRODUCERS,
        "expected {PRODUCERS} local producers per partition, the gateway lists {local}"
    );
    assert!(
        failures.is_empty(),
        "the PSM disagreed with the broker:\n{}",
        failures.join("\n")
    );
}

/// F16, with the pipelining spelled out: 30 connections, each with a producer id of its own,
/// send five single-record Produce requests (sequences 0–4, then 5–9, then 10–14) to each
/// partition before reading the five answers; partitions are led by both destination brokers.
/// No batch diverges and the gateway's producer list equals the broker's.
#[test]
fn the_psm_agrees_with_the_broker_on_connections_pipelining_five_produce_requests() {
    const CONNECTIONS: i64 = 30;
    let leaders = [1, 2, 1, 2];
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("psm-raw-pipelined");
    harness::create_topic(&destination, &topic, leaders.len() as i32, Some(&leaders));
    let gw = gateway_tracking(&topic);
    let base = 8_000_000 + (std::process::id() as i64 % 1000) * 1000;
    std::thread::scope(|s| {
        for c in 0..CONNECTIONS {
            let (gw, topic, leaders) = (&gw, &topic, &leaders);
            s.spawn(move || {
                let pid = base + c;
                let mut conns: Vec<RawConn> = leaders
                    .iter()
                    .map(|n| RawConn::connect(&format!("127.0.0.1:{}", gw.mirror_port_for(*n))))
                    .collect();
                for round in 0..3 {
                    for (partition, conn) in conns.iter_mut().enumerate() {
                        let batches = (0..5)
                            .map(|i| {
                                batch(pid, 0, round * 5 + i, 1, &format!("r{pid}-{round}-{i}"))
                            })
                            .collect();
                        for (i, (code, _)) in conn
                            .produce_pipelined(topic, partition as i32, batches)
                            .into_iter()
                            .enumerate()
                        {
                            assert_eq!(
                                code,
                                0,
                                "pid {pid} partition {partition} seq {}",
                                round * 5 + i as i32
                            );
                        }
                    }
                }
            });
        }
    });
    let diverged = gw.metric(r#"mirrorgate_psm_batches_total{result="diverged"}"#);
    wait_psm_settled(&gw, &topic, leaders.len() as i32);
    let differences = producer_list_differences(&gw, &topic, &leaders, |_| true);
    assert!(
        diverged == 0.0 && differences.is_empty(),
        "the PSM disagreed with the broker: {diverged} batches diverged (of {} accepted)\n{}",
        gw.metric(r#"mirrorgate_psm_batches_total{result="accepted"}"#),
        differences.join("\n")
    );
    for p in 0..leaders.len() as i32 {
        assert_eq!(
            gateway_producers(&gw.admin(), &topic, p).len(),
            CONNECTIONS as usize,
            "partition {p}"
        );
    }
}

/// `batch` with its base and max timestamps set to `ts` (CRC fixed).
fn batch_at(ts: i64, pid: i64, epoch: i16, base_seq: i32, n: i32, tag: &str) -> Bytes {
    let mut b = BytesMut::from(&batch(pid, epoch, base_seq, n, tag)[..]);
    b[27..35].copy_from_slice(&ts.to_be_bytes());
    b[35..43].copy_from_slice(&ts.to_be_bytes());
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b.freeze()
}

/// On a LogAppendTime topic the broker keeps its own append time as a producer's last
/// timestamp, not the one in the request; the gateway takes it from the broker's answer, so
/// its expiry and the screening horizon follow the broker (review F11a).
#[test]
fn on_a_log_append_time_topic_the_psm_keeps_the_brokers_timestamp() {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("appendtime");
    harness::create_topic(&destination, &topic, 1, Some(&[1]));
    crate::failover::set_topic_configs_on_the_destination(
        &destination,
        &topic,
        &[("message.timestamp.type", "LogAppendTime")],
    );
    let gw = gateway_tracking(&topic);
    let mut mirror = RawConn::connect(&gw.mirror_bootstrap());
    let two_days_ago = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64
        - 2 * 86_400_000;
    let pid = 8_600_000 + (std::process::id() as i64 % 1000) * 10;
    for seq in 0..3 {
        let (code, _) = mirror.produce(&topic, 0, batch_at(two_days_ago, pid, 0, seq, 1, "old"));
        assert_eq!(code, 0);
    }
    let mut broker = RawConn::connect(&destination_leader(&topic));
    let on_broker = broker_producers(&mut broker, &topic, 0);
    let in_gateway = gateway_producers(&gw.admin(), &topic, 0);
    assert!(
        on_broker[0].3 > two_days_ago + 86_400_000,
        "the broker kept the request's timestamp: {on_broker:?}"
    );
    assert_eq!(
        in_gateway, on_broker,
        "gateway and broker disagree on the producer (last timestamp is the 4th field)"
    );
}

/// Address of the destination broker leading partition 0 of `topic`.
fn destination_leader(topic: &str) -> String {
    let destination = harness::cluster("destination");
    harness::leader_addr(&destination, topic, 0)
}

/// Review F11f: a transaction's COMMIT/ABORT marker is written by the transaction coordinator
/// straight to the partition leader, so the gateway never sees it pass. A transactional
/// producer writing through the mirror listener (as MirrorMaker 2 does in exactly-once mode)
/// must not leave the gateway's producer state showing its transactions open for ever (such
/// entries never expire): after the commit and the abort, the gateway agrees with
/// DescribeProducers that no transaction is open.
#[test]
fn transactions_ended_by_markers_the_gateway_never_sees_are_closed_in_its_producer_state() {
    use rdkafka::config::ClientConfig;
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("txnmarkers");
    harness::create_topic(&destination, &topic, 1, Some(&[1]));
    let gw = TestGateway::start(crate::failover::mirror_config("txnmarkers", &[&topic]));
    crate::failover::wait_mirroring(&gw.admin(), "txnmarkers", 1);
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", gw.mirror_bootstrap())
        .set("transactional.id", format!("{topic}-tx"))
        .create()
        .expect("transactional producer");
    let t = std::time::Duration::from_secs(30);
    producer.init_transactions(t).expect("init transactions");
    for commit in [true, false] {
        producer.begin_transaction().expect("begin");
        producer
            .send(BaseRecord::to(&topic).key("k").payload("v"))
            .map_err(|(e, _)| e)
            .expect("send");
        producer.flush(t).expect("flush");
        if commit {
            producer.commit_transaction(t).expect("commit");
        } else {
            producer.abort_transaction(t).expect("abort");
        }
    }
    let leader = harness::leader_addr(&destination, &topic, 0);
    let mut direct = RawConn::connect(&leader);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let broker = broker_producers(&mut direct, &topic, 0);
        let gateway = gateway_producers(&gw.admin(), &topic, 0);
        let open = |rows: &[ProducerRow]| rows.iter().filter(|r| r.5 >= 0).count();
        if open(&broker) == 0 && open(&gateway) == 0 {
            assert_eq!(
                gateway, broker,
                "after the markers, the gateway agrees with the broker"
            );
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "30 s after the abort the producer states disagree on open transactions:\nbroker:  {broker:?}\ngateway: {gateway:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

// ------------------------------------------------------------------ the PSM follows the broker
// (README: a divergence, REQUEST_TIMED_OUT or acks=0 triggers a rebuild from the log)

/// Value of one sample line `series value` of the gateway's metrics; panics when the series is
/// missing (a renamed metric must not read as 0).
fn metric_present(gw: &TestGateway, series: &str) -> f64 {
    let text = gw.metrics();
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok()))
        .unwrap_or_else(|| panic!("no series {series} in the metrics:\n{text}"))
}

/// Wait (30 s at most) until the partition was rebuilt again since `rebuilds_before` and is
/// settled; then its producer list must equal the broker's DescribeProducers (both limited to
/// the producers `keep` selects). Returns the gateway's producer ids.
fn wait_rebuilt_and_equal_to_the_broker(
    gw: &TestGateway,
    topic: &str,
    rebuilds_before: f64,
    keep: impl Fn(i64) -> bool,
) -> std::collections::BTreeSet<i64> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while metric_present(gw, "mirrorgate_psm_rebuilds_total") <= rebuilds_before {
        assert!(
            Instant::now() < deadline,
            "no PSM rebuild within 30 s (rebuilds_total still {rebuilds_before})"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    wait_psm_settled(gw, topic, 1);
    let differences = producer_list_differences(gw, topic, &[1], keep);
    assert!(
        differences.is_empty(),
        "after the rebuild the PSM disagrees with the broker:\n{}",
        differences.join("\n")
    );
    pids(&gateway_producers(&gw.admin(), topic, 0))
}

/// Three acknowledged batches of producer `pid` (sequences 0..3) on `conn`; waits until the
/// PSM is settled.
fn known_producer(gw: &TestGateway, conn: &mut RawConn, topic: &str, pid: i64) {
    for seq in 0..3 {
        let (code, _) = conn.produce(topic, 0, batch(pid, 0, seq, 1, &format!("known-{seq}")));
        assert_eq!(code, 0, "seq {seq}");
    }
    wait_psm_settled(gw, topic, 1);
    assert!(
        pids(&gateway_producers(&gw.admin(), topic, 0)).contains(&pid),
        "the PSM follows the acknowledged producer"
    );
}

/// A produce with acks=0 gets no answer, so the gateway cannot learn where (or whether) the
/// batch was appended: the partition is rebuilt from the log, after which the PSM holds the
/// producer it never saw acknowledged, as the broker does. (acks=0 is refused on the mirror
/// listener; it reaches a tracked partition through the client listener after a failover.)
#[test]
fn an_acks_0_produce_to_a_tracked_partition_is_followed_by_a_rebuild_from_the_log() {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("psm-acks0");
    harness::create_topic(&destination, &topic, 1, Some(&[1]));
    let gw = TestGateway::start(crate::failover::mirror_config("acks0", &[&topic]));
    crate::failover::wait_mirroring(&gw.admin(), "acks0", 1);
    crate::failover::failover(&gw.admin(), "acks0");
    crate::failover::wait_stopped(&gw.admin(), "acks0");
    wait_psm_settled(&gw, &topic, 1);
    let mut conn = RawConn::connect(&format!("127.0.0.1:{}", gw.port_for(1)));
    let base = 8_700_000 + (std::process::id() as i64 % 1000) * 10;
    let (known, unanswered) = (base + 1, base + 2);
    known_producer(&gw, &mut conn, &topic, known);
    let rebuilds = metric_present(&gw, "mirrorgate_psm_rebuilds_total");
    conn.produce_acks_0(&topic, 0, batch(unanswered, 0, 0, 2, "acks0"));
    // The broker appended it (it lists the producer) ...
    let mut broker = RawConn::connect(&destination_leader(&topic));
    let deadline = Instant::now() + Duration::from_secs(30);
    while !pids(&broker_producers(&mut broker, &topic, 0)).contains(&unanswered) {
        assert!(
            Instant::now() < deadline,
            "the broker never appended the acks=0 batch"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // ... and the gateway learns it from the log. (The broker also lists the barrier's
    // producer id, which the PSM clears at the barrier.)
    let after = wait_rebuilt_and_equal_to_the_broker(&gw, &topic, rebuilds, |pid| {
        pid == known || pid == unanswered
    });
    assert!(
        after.contains(&unanswered) && after.contains(&known),
        "{after:?}"
    );
}

/// A write that bypasses the gateway (straight to the partition leader) leaves the PSM behind
/// the broker: the next batch of that producer through the gateway is judged out of order
/// while the broker appends it. The gateway counts the divergence, follows the broker and
/// rebuilds the partition from the log, after which it also holds the producer that only ever
/// wrote behind its back.
#[test]
fn a_write_behind_the_gateways_back_diverges_and_is_followed_by_a_rebuild_from_the_log() {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("psm-behind");
    harness::create_topic(&destination, &topic, 1, Some(&[1]));
    let gw = gateway_tracking(&topic);
    let mut conn = RawConn::connect(&format!("127.0.0.1:{}", gw.mirror_port_for(1)));
    let base = 8_800_000 + (std::process::id() as i64 % 1000) * 10;
    let (known, hidden) = (base + 1, base + 2);
    known_producer(&gw, &mut conn, &topic, known);
    let rebuilds = metric_present(&gw, "mirrorgate_psm_rebuilds_total");
    let diverged = || metric_present(&gw, r#"mirrorgate_psm_batches_total{result="diverged"}"#);
    let diverged_before = diverged();
    // Behind the gateway: the known producer's sequence 3, and a producer of its own.
    let mut direct = RawConn::connect(&destination_leader(&topic));
    for b in [
        batch(known, 0, 3, 1, "behind"),
        batch(hidden, 0, 0, 2, "hidden"),
    ] {
        assert_eq!(direct.produce(&topic, 0, b).0, 0);
    }
    // Through the gateway: sequence 4 follows the broker's 3, not the PSM's 2.
    let (code, _) = conn.produce(&topic, 0, batch(known, 0, 4, 1, "after"));
    assert_eq!(code, 0, "the broker appends sequence 4");
    assert_eq!(
        diverged(),
        diverged_before + 1.0,
        "the PSM's verdict (out of order) disagreed with the broker"
    );
    let after = wait_rebuilt_and_equal_to_the_broker(&gw, &topic, rebuilds, |_| true);
    assert!(after.contains(&hidden), "{after:?}");
}
