//! The load's Kafka clients: the topics' leaders, the prefill of the slow consumer's topic, the
//! steady connections (alternating Produce and Fetch, with their latencies and errors) and the
//! slow consumer that never reads its answers.
//!
//! Owns: the requests the load sends and what each connection counts.
//! Must not touch: the gateway process, the fd limits and the report (the parent's `run`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, FetchRequest, MetadataRequest, ProduceRequest, RequestHeader, TopicName,
};
use kafka_protocol::protocol::{Encodable, HeaderVersion, StrBytes};
use mirrorgate::client::KafkaClient;
use mirrorgate::protocol::batch::BatchWalker;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::{err, RATE, REQUEST_TIMEOUT, SLOW_FETCHES, SLOW_MAX_BYTES, SLOW_PREFILL_MIB};

fn record_batch(records: usize, value_size: usize, salt: u64) -> Bytes {
    crate::batch::encode(
        records,
        &Bytes::from(vec![b'x'; value_size]),
        |i| Some(Bytes::from(format!("k{salt}-{i}"))),
        None,
    )
}

fn produce_request(topic: &str, partition: i32, batch: Bytes) -> ProduceRequest {
    ProduceRequest::default()
        .with_acks(1)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(batch))])])
}

/// Partition leaders as the gateway reports them: `(topic, partition, gateway address)`.
pub(super) async fn leaders(
    bootstrap: &str,
    topics: &[String],
) -> Result<Vec<(String, i32, String)>, String> {
    let mut c = KafkaClient::connect(bootstrap, REQUEST_TIMEOUT)
        .await
        .map_err(err)?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let req = MetadataRequest::default().with_topics(Some(
            topics
                .iter()
                .map(|t| {
                    MetadataRequestTopic::default()
                        .with_name(Some(TopicName(StrBytes::from_string(t.clone()))))
                })
                .collect(),
        ));
        let resp = c.send(&req, 12).await.map_err(err)?;
        let brokers: std::collections::HashMap<i32, String> = resp
            .brokers
            .iter()
            .map(|b| (b.node_id.0, format!("{}:{}", b.host, b.port)))
            .collect();
        let mut out = Vec::new();
        let mut complete = resp.topics.len() == topics.len();
        for t in &resp.topics {
            let name = t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default();
            complete &= t.error_code == 0 && !t.partitions.is_empty();
            for p in &t.partitions {
                match brokers.get(&p.leader_id.0) {
                    Some(addr) if p.error_code == 0 => {
                        out.push((name.clone(), p.partition_index, addr.clone()))
                    }
                    _ => complete = false,
                }
            }
        }
        if complete {
            out.sort();
            return Ok(out);
        }
        if Instant::now() > deadline {
            return Err(format!("partition leaders not known after 60 s: {resp:?}"));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[derive(Default)]
pub(super) struct ConnStats {
    /// Request latencies in microseconds (produce, fetch).
    pub(super) produce_us: Vec<u32>,
    pub(super) fetch_us: Vec<u32>,
    pub(super) errors: u64,
    pub(super) first_errors: Vec<String>,
    pub(super) records_consumed: u64,
}

impl ConnStats {
    fn error(&mut self, what: String) {
        self.errors += 1;
        if self.first_errors.len() < 3 {
            self.first_errors.push(what);
        }
    }
}

/// One client connection: produce and fetch alternately at `RATE` until `end`.
pub(super) async fn connection(
    id: usize,
    addr: String,
    topic: String,
    partition: i32,
    start: Instant,
    end: Instant,
    connected: Arc<AtomicU64>,
) -> ConnStats {
    let mut st = ConnStats::default();
    // Spread the first requests over one period.
    let period = Duration::from_secs_f64(1.0 / RATE);
    let phase = period.mul_f64((id as f64 * 0.618_034).fract());
    tokio::time::sleep_until((start + phase).into()).await;
    let mut client: Option<KafkaClient> = None;
    let mut offset: i64 = -1;
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut produce_next = true;
    let mut counted = false;
    while Instant::now() < end {
        tick.tick().await;
        if Instant::now() >= end {
            break;
        }
        if client.is_none() {
            match KafkaClient::connect(&addr, REQUEST_TIMEOUT).await {
                Ok(c) => {
                    client = Some(c);
                    if !counted {
                        connected.fetch_add(1, Ordering::Relaxed);
                        counted = true;
                    }
                }
                Err(e) => {
                    st.error(format!("connect: {e}"));
                    continue;
                }
            }
        }
        let c = client.as_mut().expect("connected");
        let t0 = Instant::now();
        let ok = if produce_next || offset < 0 {
            produce_next = false;
            let req = produce_request(&topic, partition, record_batch(5, 100, id as u64));
            match c.send(&req, 9).await {
                Ok(resp) => {
                    st.produce_us.push(t0.elapsed().as_micros() as u32);
                    let p = resp
                        .responses
                        .iter()
                        .flat_map(|t| t.partition_responses.iter())
                        .next();
                    match p {
                        Some(p) if p.error_code == 0 => {
                            if offset < 0 {
                                offset = p.base_offset;
                            }
                            true
                        }
                        Some(p) => {
                            st.error(format!("produce error code {}", p.error_code));
                            true
                        }
                        None => {
                            st.error("produce response without the partition".into());
                            true
                        }
                    }
                }
                Err(e) => {
                    st.error(format!("produce: {e}"));
                    false
                }
            }
        } else {
            produce_next = true;
            match c
                .fetch_partition(&topic, partition, offset, 64 * 1024)
                .await
            {
                Ok(p) => {
                    st.fetch_us.push(t0.elapsed().as_micros() as u32);
                    for (h, _) in BatchWalker::fetched(&p.records).map_while(Result::ok) {
                        if h.last_offset() >= offset {
                            st.records_consumed +=
                                (h.last_offset() + 1 - offset.max(h.base_offset)) as u64;
                            offset = h.last_offset() + 1;
                        }
                    }
                    true
                }
                Err(e) => {
                    st.error(format!("fetch: {e}"));
                    // A partition-level error leaves the connection usable.
                    matches!(e, mirrorgate::client::PartitionRequestError::Partition(_))
                }
            }
        };
        if !ok {
            client = None;
        }
    }
    st
}

/// Writes `SLOW_FETCHES` large Fetch requests for `topic`-0 and never reads a response.
/// Returns the connection (kept open until the end of the run) and the requests written.
pub(super) async fn slow_consumer(addr: &str, topic: &str) -> Result<(TcpStream, usize), String> {
    let mut s = TcpStream::connect(addr).await.map_err(err)?;
    let mut written = 0;
    for i in 0..SLOW_FETCHES {
        let req = FetchRequest::default()
            .with_replica_id((-1).into())
            .with_max_wait_ms(500)
            .with_min_bytes(1)
            .with_max_bytes(SLOW_MAX_BYTES)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(0)
                    .with_current_leader_epoch(-1)
                    .with_fetch_offset(0)
                    .with_last_fetched_epoch(-1)
                    .with_log_start_offset(-1)
                    .with_partition_max_bytes(SLOW_MAX_BYTES)])]);
        let header = RequestHeader::default()
            .with_request_api_key(ApiKey::Fetch as i16)
            .with_request_api_version(12)
            .with_correlation_id(i as i32 + 1)
            .with_client_id(Some(StrBytes::from_static_str("slow-consumer")));
        let mut out = BytesMut::new();
        out.put_i32(0);
        header
            .encode(&mut out, FetchRequest::header_version(12))
            .map_err(err)?;
        req.encode(&mut out, 12).map_err(err)?;
        let len = (out.len() - 4) as i32;
        out[0..4].copy_from_slice(&len.to_be_bytes());
        // A few hundred bytes each: far below what the socket buffers hold, so this does not
        // block even though nothing is read.
        match tokio::time::timeout(Duration::from_secs(2), s.write_all(&out)).await {
            Ok(Ok(())) => written += 1,
            _ => break,
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok((s, written))
}

/// Writes `SLOW_PREFILL_MIB` 1-MiB batches to `slow_topic`-0 through its leader's gateway port.
pub(super) async fn prefill(
    parts: &[(String, i32, String)],
    slow_topic: &str,
) -> Result<(), String> {
    let addr = parts
        .iter()
        .find(|p| p.0 == slow_topic)
        .map(|p| p.2.clone())
        .ok_or("slow topic has no leader")?;
    let mut c = KafkaClient::connect(&addr, Duration::from_secs(60))
        .await
        .map_err(err)?;
    for i in 0..SLOW_PREFILL_MIB {
        let batch = record_batch(15, 64 * 1024, i as u64);
        let resp = c
            .send(&produce_request(slow_topic, 0, batch), 9)
            .await
            .map_err(err)?;
        if let Some(p) = resp
            .responses
            .iter()
            .flat_map(|t| t.partition_responses.iter())
            .find(|p| p.error_code != 0)
        {
            return Err(format!(
                "produce to {slow_topic}-0 answered error {}",
                p.error_code
            ));
        }
    }
    Ok(())
}
