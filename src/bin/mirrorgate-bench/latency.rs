//! Produce latency at a fixed rate, measured to the microsecond: an idempotent producer written
//! for the benchmark that sends one batch per partition every `LINGER` (1 KiB records,
//! acks=all, at most `MAX_IN_FLIGHT` requests in flight per connection, as the Java producer's
//! defaults) and times every request from its write to its response.
//!
//! Why not ProducerPerformance here: it reports whole milliseconds and its percentiles include
//! the client's start (metadata, connections, JIT), which at p99 outweighs what a proxy adds.
//! This driver excludes a warm-up and keeps microseconds. Saturation throughput stays with the
//! Java tools (`proxy.rs`).
//!
//! Owns: the driver's connections and its figures. Must not touch: the modes it is pointed at.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, InitProducerIdRequest, MetadataRequest, ProduceRequest, ProduceResponse, RequestHeader,
    ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
use mirrorgate::client::KafkaClient;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, Semaphore};

/// Time between two batches of one partition (the Java producer's `linger.ms` of 5).
const LINGER: Duration = Duration::from_millis(5);
const MAX_IN_FLIGHT: usize = 5;
const PRODUCE_VERSION: i16 = 9;
const RECORD_SIZE: usize = 1024;

/// Latency figures of one fixed-rate run (requests sent after the warm-up).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Latency {
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub requests: usize,
    pub records: u64,
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// The `p` quantile (0..1) of sorted microseconds, in milliseconds.
fn quantile_ms(sorted_us: &[u32], p: f64) -> f64 {
    if sorted_us.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted_us.len() as f64 * p).ceil() as usize).clamp(1, sorted_us.len()) - 1;
    sorted_us[i] as f64 / 1000.0
}

/// Leader address of each partition of `topic`, as `bootstrap` reports it.
async fn leaders(bootstrap: &str, topic: &str) -> Result<Vec<(i32, String)>, String> {
    let mut c = KafkaClient::connect(bootstrap, Duration::from_secs(10))
        .await
        .map_err(err)?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let req =
            MetadataRequest::default().with_topics(Some(vec![MetadataRequestTopic::default()
                .with_name(Some(TopicName(StrBytes::from_string(topic.to_string()))))]));
        let resp = c.send(&req, 12).await.map_err(err)?;
        let addr = |node: i32| {
            resp.brokers
                .iter()
                .find(|b| b.node_id.0 == node)
                .map(|b| format!("{}:{}", b.host.as_str(), b.port))
        };
        let parts: Option<Vec<(i32, String)>> = resp.topics.first().and_then(|t| {
            (t.error_code == 0 && !t.partitions.is_empty()).then(|| {
                t.partitions
                    .iter()
                    .map(|p| Some((p.partition_index, addr(p.leader_id.0)?)))
                    .collect::<Option<Vec<_>>>()
            })?
        });
        if let Some(p) = parts {
            return Ok(p);
        }
        if Instant::now() > deadline {
            return Err(format!("{topic}: no leaders through {bootstrap}"));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn producer_id(bootstrap: &str) -> Result<(i64, i16), String> {
    let mut c = KafkaClient::connect(bootstrap, Duration::from_secs(10))
        .await
        .map_err(err)?;
    for _ in 0..50 {
        let req = InitProducerIdRequest::default()
            .with_transactional_id(None)
            .with_transaction_timeout_ms(60_000)
            .with_producer_id((-1).into())
            .with_producer_epoch(-1);
        let resp = c.send(&req, 4).await.map_err(err)?;
        match resp.error_code {
            0 => return Ok((resp.producer_id.0, resp.producer_epoch)),
            // COORDINATOR_LOAD_IN_PROGRESS / NOT_AVAILABLE on a fresh cluster: retry.
            14 | 15 => tokio::time::sleep(Duration::from_millis(200)).await,
            e => return Err(format!("InitProducerId: error {e}")),
        }
    }
    Err("InitProducerId: coordinator not available".into())
}

fn produce_frame(topic: &str, partition: i32, correlation: i32, records: Bytes) -> Vec<u8> {
    let header = RequestHeader::default()
        .with_request_api_key(ApiKey::Produce as i16)
        .with_request_api_version(PRODUCE_VERSION)
        .with_correlation_id(correlation)
        .with_client_id(Some(StrBytes::from_static_str("mirrorgate-bench")));
    let req = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(records))])]);
    let mut out = BytesMut::new();
    out.put_i32(0);
    let _ = header.encode(&mut out, ProduceRequest::header_version(PRODUCE_VERSION));
    let _ = req.encode(&mut out, PRODUCE_VERSION);
    let len = (out.len() - 4) as i32;
    out[..4].copy_from_slice(&len.to_be_bytes());
    out.to_vec()
}

/// One partition's connection: writes a batch of `per_batch` records every `LINGER` until
/// `end`, reads the responses, returns the latencies (µs) of requests sent after `measure_from`.
#[allow(clippy::too_many_arguments)]
async fn partition_loop(
    addr: String,
    topic: String,
    partition: i32,
    pid: i64,
    epoch: i16,
    per_batch: usize,
    measure_from: Instant,
    end: Instant,
) -> Result<(Vec<u32>, u64), String> {
    let stream = TcpStream::connect(&addr)
        .await
        .map_err(|e| format!("{addr}: {e}"))?;
    stream.set_nodelay(true).map_err(err)?;
    let (mut rd, mut wr) = stream.into_split();
    let permits = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let (tx, mut rx) = mpsc::unbounded_channel::<(i32, Instant)>();
    let (done_tx, mut done) = oneshot::channel::<()>();
    let reader_permits = permits.clone();
    let reader = tokio::spawn(async move {
        let mut lat = Vec::new();
        let mut pending: VecDeque<(i32, Instant)> = VecDeque::new();
        let mut buf = Vec::new();
        loop {
            let mut len = [0u8; 4];
            // `done` fires only once every response has been counted, so no frame is cut.
            tokio::select! {
                biased;
                _ = &mut done => break,
                r = rd.read_exact(&mut len) => match r {
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
                    Err(e) => return Err(e.to_string()),
                },
            }
            let n = i32::from_be_bytes(len).max(0) as usize;
            buf.resize(n, 0);
            rd.read_exact(&mut buf).await.map_err(err)?;
            let now = Instant::now();
            while let Ok(p) = rx.try_recv() {
                pending.push_back(p);
            }
            if pending.is_empty() {
                if let Some(p) = rx.recv().await {
                    pending.push_back(p);
                }
            }
            let (correlation, sent) = pending.pop_front().ok_or("response without request")?;
            let mut b = Bytes::copy_from_slice(&buf);
            let header = ResponseHeader::decode(
                &mut b,
                ApiKey::Produce.response_header_version(PRODUCE_VERSION),
            )
            .map_err(err)?;
            if header.correlation_id != correlation {
                return Err(format!(
                    "correlation id {} where {correlation} was expected",
                    header.correlation_id
                ));
            }
            let resp = ProduceResponse::decode(&mut b, PRODUCE_VERSION).map_err(err)?;
            for t in &resp.responses {
                for p in &t.partition_responses {
                    if p.error_code != 0 {
                        return Err(format!(
                            "produce to partition {}: error {}",
                            p.index, p.error_code
                        ));
                    }
                }
            }
            if sent >= measure_from {
                lat.push(now.duration_since(sent).as_micros().min(u32::MAX as u128) as u32);
            }
            reader_permits.add_permits(1);
        }
        Ok(lat)
    });
    let value = Bytes::from(vec![b'x'; RECORD_SIZE]);
    let mut tick = tokio::time::interval(LINGER);
    let mut sequence = 0i32;
    let mut correlation = 0i32;
    let mut records = 0u64;
    while Instant::now() < end {
        tick.tick().await;
        let permit = permits.clone().acquire_owned().await.map_err(err)?;
        permit.forget(); // returned by the reader when the response arrives
        let frame = produce_frame(
            &topic,
            partition,
            correlation,
            crate::batch::encode(
                per_batch,
                &value,
                |_| None,
                Some(crate::batch::Producer {
                    id: pid,
                    epoch,
                    base_sequence: sequence,
                }),
            ),
        );
        let sent = Instant::now();
        tx.send((correlation, sent)).map_err(err)?;
        wr.write_all(&frame).await.map_err(err)?;
        correlation = correlation.wrapping_add(1);
        sequence = sequence.wrapping_add(per_batch as i32);
        records += per_batch as u64;
    }
    // Wait for the outstanding responses, then close.
    let _ = tokio::time::timeout(
        Duration::from_secs(30),
        permits.acquire_many(MAX_IN_FLIGHT as u32),
    )
    .await;
    drop(tx);
    let _ = done_tx.send(());
    let _ = wr.shutdown().await;
    let lat = tokio::time::timeout(Duration::from_secs(10), reader)
        .await
        .map_err(|_| "responses did not arrive within 30 s".to_string())?
        .map_err(err)??;
    Ok((lat, records))
}

/// Produces `rate` records/s (1 KiB, idempotent, acks=all) to every partition of `topic` through
/// `bootstrap` for `warmup + seconds`, and returns the request latencies of the last `seconds`.
pub async fn fixed_rate(
    bootstrap: &str,
    topic: &str,
    rate: f64,
    warmup: Duration,
    seconds: u64,
) -> Result<Latency, String> {
    let parts = leaders(bootstrap, topic).await?;
    let (pid, epoch) = producer_id(bootstrap).await?;
    // Records per batch so that all partitions together send `rate` records/s at one batch per
    // partition per LINGER.
    let batches_per_s = parts.len() as f64 / LINGER.as_secs_f64();
    let per_batch = ((rate / batches_per_s).round() as usize).max(1);
    let start = Instant::now();
    let measure_from = start + warmup;
    let end = measure_from + Duration::from_secs(seconds);
    let tasks: Vec<_> = parts
        .into_iter()
        .map(|(p, addr)| {
            tokio::spawn(partition_loop(
                addr,
                topic.to_string(),
                p,
                pid,
                epoch,
                per_batch,
                measure_from,
                end,
            ))
        })
        .collect();
    let mut all = Vec::new();
    let mut records = 0;
    for t in tasks {
        let (lat, n) = t.await.map_err(err)??;
        all.extend(lat);
        records += n;
    }
    all.sort_unstable();
    Ok(Latency {
        p50_ms: quantile_ms(&all, 0.50),
        p99_ms: quantile_ms(&all, 0.99),
        p999_ms: quantile_ms(&all, 0.999),
        requests: all.len(),
        records,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_pick_the_nearest_rank() {
        let us: Vec<u32> = (1..=1000).collect();
        assert_eq!(quantile_ms(&us, 0.5), 0.5);
        assert_eq!(quantile_ms(&us, 0.99), 0.99);
        assert_eq!(quantile_ms(&us, 0.999), 0.999);
        assert_eq!(quantile_ms(&[7000], 0.99), 7.0);
        assert!(quantile_ms(&[], 0.5).is_nan());
    }
}
