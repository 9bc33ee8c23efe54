//! What the failover measurements share (`failover.rs`, `takeover.rs`): fresh topics on the
//! destination, their leaders, mirrored batches written into every partition through the mirror
//! listener, and what one measurement found.
//!
//! Owns: preparing a measurement's partitions. Must not touch: the gateways' configuration
//! (`fleet.rs`), the shape of a run or its figures (`failover.rs`).

use std::time::Duration;

use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{MetadataRequest, ProduceRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use mirrorgate::client::KafkaClient;
use serde_json::Value;

/// What one failover measurement found.
#[derive(Default, Clone)]
pub(crate) struct Measured {
    /// Call → every partition STOPPED on the instance called (the survivors, for a takeover).
    pub seconds: f64,
    /// … on every instance.
    pub everywhere: f64,
    /// The step timeline of the failover report (`Fleet::timeline`).
    pub steps: Value,
    /// The instances' session timeout (takeover).
    pub session_timeout_s: Option<f64>,
}

/// Fresh topics `PREFIX-N` of `sizes` partitions (created), and their names.
pub(crate) async fn fresh_topics(
    destination: &[String],
    kind: &str,
    sizes: &[i32],
) -> Result<(String, Vec<String>), String> {
    static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let prefix = format!("bench-{kind}-{stamp}-{seq}");
    let names: Vec<String> = (0..sizes.len()).map(|i| format!("{prefix}-{i}")).collect();
    let specs: Vec<(String, i32)> = names.iter().cloned().zip(sizes.iter().copied()).collect();
    crate::topics::create(&destination[0], &specs).await?;
    Ok((prefix, names))
}

/// The leader of every partition of `names` (by partition index), from the destination.
pub(crate) async fn leaders(
    destination: &[String],
    names: &[String],
) -> Result<Vec<(String, Vec<i32>)>, String> {
    let mut c = KafkaClient::connect(&destination[0], Duration::from_secs(10))
        .await
        .map_err(|e| e.to_string())?;
    let req = MetadataRequest::default().with_topics(Some(
        names
            .iter()
            .map(|n| {
                MetadataRequestTopic::default()
                    .with_name(Some(TopicName(StrBytes::from_string(n.clone()))))
            })
            .collect(),
    ));
    let meta = c.send(&req, 12).await.map_err(|e| e.to_string())?;
    names
        .iter()
        .map(|n| {
            let t = meta
                .topics
                .iter()
                .find(|t| t.name.as_ref().is_some_and(|m| m.0.as_str() == n))
                .filter(|t| t.error_code == 0)
                .ok_or_else(|| format!("no metadata for {n}"))?;
            let mut l = vec![-1; t.partitions.len()];
            for p in &t.partitions {
                if let Some(slot) = l.get_mut(p.partition_index as usize) {
                    *slot = p.leader_id.0;
                }
            }
            Ok((n.clone(), l))
        })
        .collect()
}

fn batch(pid: i64, seq: i32) -> bytes::Bytes {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    let rec = Record {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: -1,
        producer_id: pid,
        producer_epoch: 0,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence: seq,
        timestamp: now,
        key: Some(bytes::Bytes::from_static(b"k")),
        value: Some(bytes::Bytes::from_static(b"mirrored")),
        headers: Default::default(),
    };
    let mut buf = bytes::BytesMut::new();
    let _ = RecordBatchEncoder::encode(
        &mut buf,
        [&rec],
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    );
    buf.freeze()
}

/// Mirrored batches of 3 producers (2 each) into every partition of `info`, through the mirror
/// listener ports of nodes 1 and 2. Partitions answered with a retriable error (e.g.
/// NOT_ENOUGH_REPLICAS while a fresh partition's follower joins the ISR) are sent again, the
/// same batch (idempotent: the broker appends it once), for up to [`MIRRORED_RETRY_FOR`].
pub(crate) async fn write_mirrored(
    info: &[(String, Vec<i32>)],
    mirror_ports: [u16; 2],
) -> Result<(), String> {
    for (node, port) in [(1, mirror_ports[0]), (2, mirror_ports[1])] {
        let mut c = KafkaClient::connect(&format!("127.0.0.1:{port}"), Duration::from_secs(120))
            .await
            .map_err(|e| e.to_string())?;
        let led: Vec<(String, i32)> = info
            .iter()
            .flat_map(|(t, leaders)| {
                leaders
                    .iter()
                    .enumerate()
                    .filter(|(_, l)| **l == node)
                    .map(|(p, _)| (t.clone(), p as i32))
            })
            .collect();
        for seq in 0..2 {
            for pid in 0..3i64 {
                let deadline = std::time::Instant::now() + MIRRORED_RETRY_FOR;
                let mut todo = led.clone();
                while !todo.is_empty() {
                    let failed = produce_once(&mut c, &todo, batch(5_000_000 + pid, seq)).await?;
                    if let Some((_, code)) = failed.iter().find(|(_, code)| !retriable(*code)) {
                        return Err(format!("mirror produce failed: error {code}"));
                    }
                    if !failed.is_empty() && std::time::Instant::now() >= deadline {
                        return Err(format!(
                            "mirror produce failed: error {} on {} partitions for {MIRRORED_RETRY_FOR:?}",
                            failed[0].1,
                            failed.len()
                        ));
                    }
                    if !failed.is_empty() {
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                    todo = failed.into_iter().map(|(k, _)| k).collect();
                }
            }
        }
    }
    Ok(())
}

/// How long [`write_mirrored`] sends a batch again that was answered with a retriable error.
const MIRRORED_RETRY_FOR: Duration = Duration::from_secs(60);

/// Kafka error codes worth sending the same idempotent batch again for.
fn retriable(code: i16) -> bool {
    // NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS(_AFTER_APPEND).
    matches!(code, 6 | 7 | 19 | 20)
}

/// One Produce request of `records` to each of `parts`; the partitions answered with an error,
/// with its code.
async fn produce_once(
    c: &mut KafkaClient,
    parts: &[(String, i32)],
    records: bytes::Bytes,
) -> Result<Vec<((String, i32), i16)>, String> {
    let mut by_topic: Vec<(String, Vec<PartitionProduceData>)> = Vec::new();
    for (t, p) in parts {
        let data = PartitionProduceData::default()
            .with_index(*p)
            .with_records(Some(records.clone()));
        match by_topic.last_mut() {
            Some((last, v)) if last == t => v.push(data),
            _ => by_topic.push((t.clone(), vec![data])),
        }
    }
    let data: Vec<TopicProduceData> = by_topic
        .into_iter()
        .map(|(t, v)| {
            TopicProduceData::default()
                .with_name(StrBytes::from_string(t).into())
                .with_partition_data(v)
        })
        .collect();
    let r = c
        .send(
            &ProduceRequest::default()
                .with_acks(-1)
                .with_timeout_ms(30_000)
                .with_topic_data(data),
            9,
        )
        .await
        .map_err(|e| e.to_string())?;
    Ok(r.responses
        .iter()
        .flat_map(|t| {
            t.partition_responses
                .iter()
                .filter(|p| p.error_code != 0)
                .map(|p| ((t.name.0.to_string(), p.index), p.error_code))
        })
        .collect())
}
