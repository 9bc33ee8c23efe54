//! The PSM against the real broker. Crafted Produce requests (chosen producer id, epoch and
//! sequences) go through the gateway to a tracked partition of the destination; for every batch
//! the PSM's classification must match what the broker answered (the gateway counts a
//! disagreement as `result="diverged"`), and afterwards the gateway's producer list for the
//! partition must equal the broker's own `DescribeProducers` answer.
//!
//! The tests, by behaviour: `crafted.rs`, `pipelining.rs`, `broker_facts.rs`, `rebuild.rs`. This
//! file holds the raw connection, the crafted batches and the producer lists other test files
//! share.

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

mod broker_facts;
mod crafted;
mod pipelining;
mod rebuild;

/// A single v2 record batch of `n` records for producer `pid`/`epoch` starting at `base_seq`,
/// with a correct CRC. (Sequence wrap-around past i32::MAX cannot be reached on a real broker
/// without 2^31 records; the PSM unit and property tests cover it.)
pub fn batch(pid: i64, epoch: i16, base_seq: i32, n: i32, tag: &str) -> Bytes {
    batch_of(pid, epoch, base_seq, n, tag, false)
}

/// [`batch`] with the transactional attribute: the records of a transaction.
pub fn txn_batch(pid: i64, epoch: i16, base_seq: i32, n: i32, tag: &str) -> Bytes {
    batch_of(pid, epoch, base_seq, n, tag, true)
}

fn batch_of(pid: i64, epoch: i16, base_seq: i32, n: i32, tag: &str, transactional: bool) -> Bytes {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64;
    let records: Vec<Record> = (0..n)
        .map(|i| Record {
            transactional,
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
            .map(|b| self.send_produce(topic, partition, b))
            .collect();
        sent.into_iter()
            .map(|corr| self.produce_answer(corr))
            .collect()
    }

    /// Send one Produce request (acks=all) without waiting for its answer; its correlation id.
    pub fn send_produce(&mut self, topic: &str, partition: i32, records: Bytes) -> i32 {
        self.send(
            ApiKey::Produce,
            9,
            &Self::produce_request(topic, partition, records),
        )
    }

    /// Read the answer to Produce request `corr` (the next one on the connection): (error
    /// code, base offset).
    pub fn produce_answer(&mut self, corr: i32) -> (i16, i64) {
        let mut b = self.receive(ApiKey::Produce, 9, corr);
        let resp = ProduceResponse::decode(&mut b, 9).expect("produce response");
        let p = &resp.responses[0].partition_responses[0];
        (p.error_code, p.base_offset)
    }

    /// Produce one batch with acks=all at `version` (10 and later carry KIP-951 leader hints);
    /// the whole answer.
    pub fn produce_at(
        &mut self,
        version: i16,
        topic: &str,
        partition: i32,
        records: Bytes,
    ) -> ProduceResponse {
        let req = Self::produce_request(topic, partition, records);
        let mut b = self.exchange(ApiKey::Produce, version, &req);
        ProduceResponse::decode(&mut b, version).expect("produce response")
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

    /// The API versions the other end offers: (api key, min, max).
    pub fn api_versions(&mut self) -> Vec<(i16, i16, i16)> {
        // v3 names the client; a broker refuses an empty name (INVALID_REQUEST).
        let req = kafka_protocol::messages::ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("mirrorgate-tests"))
            .with_client_software_version(StrBytes::from_static_str("1"));
        let mut b = self.exchange(ApiKey::ApiVersions, 3, &req);
        let resp = kafka_protocol::messages::ApiVersionsResponse::decode(&mut b, 3)
            .expect("api versions response");
        assert_eq!(resp.error_code, 0, "ApiVersions error");
        resp.api_keys
            .iter()
            .map(|e| (e.api_key, e.min_version, e.max_version))
            .collect()
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

/// Producer ids listed by `rows`.
fn pids(rows: &[ProducerRow]) -> std::collections::BTreeSet<i64> {
    rows.iter().map(|r| r.0).collect()
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

/// Address of the destination broker leading partition 0 of `topic`.
fn destination_leader(topic: &str) -> String {
    let destination = harness::cluster("destination");
    harness::leader_addr(&destination, topic, 0)
}
