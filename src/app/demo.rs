//! The workload of `mirrorgate demo`: what a newcomer needs to see the gateway at work.
//!
//! - [`source_producers`]: [`SOURCE_PRODUCERS`] idempotent producers on the source cluster, each
//!   with its own producer id and per-partition sequences (as real applications have), writing
//!   the demo topic; the built-in agent mirrors their batches, so the PSM, the PID metrics, the
//!   screening set and the barrier's expiry have producers to show.
//! - [`local_producer`]: an idempotent producer of the destination's side, writing the same topic
//!   through the gateway's client listener: refused while the topic is mirrored (read-only),
//!   acknowledged once a failover made it writable — the moment it logs.
//!
//! Owns: those producers. Must not touch: the gateway's own parts; the local producer talks to
//! the gateway as any Kafka client does.

use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{CreateTopicsRequest, InitProducerIdRequest, ProduceRequest};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

use crate::client::mirror_ops;
use crate::client::retry::{self, Lasting, Level};
use crate::client::{Connector, KafkaClient};

/// Idempotent producers the demo runs on the source.
pub const SOURCE_PRODUCERS: usize = 4;
/// Partitions of the demo topic.
pub const PARTITIONS: i32 = 3;
const TIMEOUT: Duration = Duration::from_secs(10);
/// Produce error codes after which a producer asks for a new id (OUT_OF_ORDER_SEQUENCE_NUMBER,
/// INVALID_PRODUCER_EPOCH, UNKNOWN_PRODUCER_ID, INVALID_PRODUCER_ID_MAPPING).
const NEW_ID_AFTER: [i16; 4] = [45, 47, 59, 49];
/// DUPLICATE_SEQUENCE_NUMBER: the broker has the batch already.
const DUPLICATE: i16 = 46;

/// Why a producer got no id.
#[derive(Debug, thiserror::Error)]
enum InitError {
    #[error("InitProducerId answered error code {0}")]
    Answered(i16),
    #[error("{0}")]
    Connection(String),
}

impl InitError {
    /// A fresh cluster answers COORDINATOR_LOAD_IN_PROGRESS until it has its first block of
    /// producer ids: retried quietly.
    fn retriable(&self) -> bool {
        match self {
            InitError::Answered(code) => retry::is_retriable(*code),
            InitError::Connection(_) => true,
        }
    }
}

/// Log a failure of the demo's producers: debug while it is passing, a WARN once it lasts.
fn log_failure(lasting: &mut Lasting, retriable: bool, what: &str, error: &dyn std::fmt::Display) {
    match lasting.failed(retriable, std::time::Instant::now()) {
        Level::Warn => tracing::warn!(error = %error, "demo producers: {what}"),
        Level::Quiet => tracing::debug!(error = %error, "demo producers: {what}; retried"),
    }
}

/// One idempotent producer: its id, epoch and next sequence per partition.
struct Idempotent {
    name: String,
    id: i64,
    epoch: i16,
    next: [i32; PARTITIONS as usize],
}

impl Idempotent {
    /// A new producer id from the broker at `addr` (no transactional id: idempotent only).
    async fn init(name: String, addr: &str) -> Result<Self, InitError> {
        let mut c = KafkaClient::connect(addr, TIMEOUT)
            .await
            .map_err(|e| InitError::Connection(e.to_string()))?;
        let req = InitProducerIdRequest::default()
            .with_transactional_id(None)
            .with_transaction_timeout_ms(60_000)
            .with_producer_id((-1).into())
            .with_producer_epoch(-1);
        let resp = c
            .send(&req, 4)
            .await
            .map_err(|e| InitError::Connection(e.to_string()))?;
        if resp.error_code != 0 {
            return Err(InitError::Answered(resp.error_code));
        }
        Ok(Idempotent {
            name,
            id: resp.producer_id.0,
            epoch: resp.producer_epoch,
            next: [0; PARTITIONS as usize],
        })
    }

    /// One record as a batch with this producer's id, epoch and the partition's next sequence.
    fn batch(&self, partition: i32, key: String, value: String) -> Result<Bytes, String> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        let rec = Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: self.id,
            producer_epoch: self.epoch,
            timestamp_type: TimestampType::Creation,
            offset: 0,
            sequence: self.next[partition as usize],
            timestamp: now,
            key: Some(Bytes::from(key)),
            value: Some(Bytes::from(value)),
            headers: Default::default(),
        };
        let mut buf = bytes::BytesMut::new();
        RecordBatchEncoder::encode(
            &mut buf,
            [&rec],
            &RecordEncodeOptions {
                version: 2,
                compression: Compression::None,
            },
        )
        .map_err(|e| e.to_string())?;
        Ok(buf.freeze())
    }
}

/// Produce one batch to `topic`/`partition` on `c` (acks=all): (error code, offset).
async fn produce(
    c: &mut KafkaClient,
    topic: &str,
    partition: i32,
    batch: Bytes,
) -> Result<(i16, i64), String> {
    let req = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(StrBytes::from_string(topic.to_string()).into())
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(batch))])]);
    let resp = c.send(&req, 9).await.map_err(|e| e.to_string())?;
    let p = resp
        .responses
        .iter()
        .flat_map(|t| t.partition_responses.iter())
        .find(|p| p.index == partition)
        .ok_or("no answer for the partition")?;
    Ok((p.error_code, p.base_offset))
}

/// Create the demo topic on the source ([`PARTITIONS`] partitions; an existing one is kept).
async fn create_topic(bootstrap: &str, topic: &str) -> Result<(), String> {
    let mut c = KafkaClient::connect(bootstrap, TIMEOUT)
        .await
        .map_err(|e| e.to_string())?;
    let create = CreateTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(StrBytes::from_string(topic.to_string()).into())
            .with_num_partitions(PARTITIONS)
            .with_replication_factor(1)]);
    let resp = c.send(&create, 5).await.map_err(|e| e.to_string())?;
    match resp.topics.first().map(|t| t.error_code) {
        Some(0 | 36) | None => Ok(()),
        Some(code) => Err(format!("CreateTopics answered error code {code}")),
    }
}

/// The leader's address of `topic`/`partition` as `bootstrap` advertises it.
async fn leader(bootstrap: &str, topic: &str, partition: i32) -> Result<String, String> {
    let meta = mirror_ops::metadata_of(
        &Connector::plain(),
        &[bootstrap.to_string()],
        TIMEOUT,
        Some(&[topic.to_string()]),
    )
    .await
    .map_err(|e| e.to_string())?;
    meta.leader_addr(topic, partition)
        .ok_or_else(|| format!("no leader known for {topic}-{partition}"))
}

/// Write the demo topic on the source for ever: a record every 200 ms, round robin over the
/// producers and the partitions. A producer whose id the broker no longer accepts asks for a
/// new one; a lost connection is reopened. A fresh cluster's first answers (no producer id block
/// yet, a leader not elected yet) are retried quietly; only a failure that lasts is a WARN.
pub async fn source_producers(bootstrap: String, topic: String) {
    if let Err(e) = create_topic(&bootstrap, &topic).await {
        tracing::warn!(error = %e, "demo producers: cannot create the topic");
    }
    let mut producers: Vec<Option<Idempotent>> = (0..SOURCE_PRODUCERS).map(|_| None).collect();
    let mut client: Option<KafkaClient> = None;
    let mut i: u64 = 0;
    let mut failing = Lasting::default();
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let slot = (i as usize) % SOURCE_PRODUCERS;
        let partition = ((i / SOURCE_PRODUCERS as u64) % PARTITIONS as u64) as i32;
        i += 1;
        if producers[slot].is_none() {
            match Idempotent::init(format!("app-{slot}"), &bootstrap).await {
                Ok(p) => {
                    tracing::info!(producer = %p.name, producer_id = p.id, epoch = p.epoch,
                        "demo: idempotent source producer started");
                    producers[slot] = Some(p);
                }
                Err(e) => {
                    log_failure(&mut failing, e.retriable(), "cannot get a producer id", &e);
                    continue;
                }
            }
        }
        if client.is_none() {
            match KafkaClient::connect(&bootstrap, TIMEOUT).await {
                Ok(c) => client = Some(c),
                Err(e) => {
                    log_failure(&mut failing, true, "cannot reach the source", &e);
                    continue;
                }
            }
        }
        let (Some(p), Some(c)) = (producers[slot].as_mut(), client.as_mut()) else {
            continue;
        };
        let seq = p.next[partition as usize];
        let batch = match p.batch(
            partition,
            format!("{}-{seq}", p.name),
            format!("record {seq} of {} to partition {partition}", p.name),
        ) {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(error = %e, "demo producers: cannot encode a record");
                continue;
            }
        };
        match produce(c, &topic, partition, batch).await {
            Ok((0 | DUPLICATE, _)) => {
                p.next[partition as usize] = seq.wrapping_add(1);
                failing.succeeded();
            }
            Ok((code, _)) if NEW_ID_AFTER.contains(&code) => {
                tracing::info!(producer = %p.name, code, "demo producers: new producer id");
                producers[slot] = None;
            }
            Ok((code, _)) => log_failure(
                &mut failing,
                retry::is_retriable(code),
                "produce refused",
                &format!("partition {partition}: error code {code}"),
            ),
            Err(e) => {
                log_failure(&mut failing, true, "produce failed; reconnecting", &e);
                client = None;
            }
        }
    }
}

/// Write the demo topic through the gateway's client listener (`gateway`) for ever, once a
/// second: refused while the topic is mirrored, acknowledged after the failover. Logs when the
/// answer changes (the first acknowledgement above all).
pub async fn local_producer(gateway: String, topic: String) {
    let mut producer: Option<Idempotent> = None;
    let mut last: Option<i16> = None;
    let mut sent: u64 = 0;
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if producer.is_none() {
            match Idempotent::init("local".into(), &gateway).await {
                Ok(p) => producer = Some(p),
                Err(e) => {
                    tracing::debug!(error = %e, "demo local producer: no producer id yet");
                    continue;
                }
            }
        }
        let Some(p) = producer.as_mut() else { continue };
        let partition = (sent % PARTITIONS as u64) as i32;
        let outcome = async {
            let addr = leader(&gateway, &topic, partition).await?;
            let mut c = KafkaClient::connect(&addr, TIMEOUT)
                .await
                .map_err(|e| e.to_string())?;
            let seq = p.next[partition as usize];
            let batch = p.batch(
                partition,
                format!("local-{seq}"),
                format!("local record {seq}, written through the gateway"),
            )?;
            produce(&mut c, &topic, partition, batch).await
        }
        .await;
        match outcome {
            Ok((code, offset)) => {
                if code == 0 || code == DUPLICATE {
                    p.next[partition as usize] = p.next[partition as usize].wrapping_add(1);
                    sent += 1;
                }
                if last != Some(code) {
                    if code == 0 {
                        tracing::info!(partition, offset, producer_id = p.id,
                            "demo: the local producer's writes through the gateway are acknowledged now (the failover made the topic writable)");
                    } else {
                        tracing::info!(code, partition,
                            "demo: the local producer's write through the gateway was refused (a mirror topic is read-only until its failover)");
                    }
                    last = Some(code);
                }
                if NEW_ID_AFTER.contains(&code) {
                    producer = None;
                }
            }
            Err(e) => tracing::debug!(error = %e, "demo local producer: write failed"),
        }
    }
}

/// What the demo runs and where to look, in the order a newcomer would.
pub fn guide(admin: &str, source: &str, topic: &str) -> String {
    let n = SOURCE_PRODUCERS;
    format!(
        "  demo producers:      {n} idempotent producers write {topic:?} on the source ({source});
                       the built-in agent mirrors their batches, producer ids and sequences
  local producer:      writes {topic:?} through the gateway: refused while mirrored (read-only),
                       acknowledged after the failover (watch the log)
where to look:
  1. mirror and lag:   mirrorgate status · curl http://{admin}/v1/mirrors/demo/partitions
  2. producer state:   curl http://{admin}/v1/partitions/{topic}/0/producers
  3. PID metrics:      curl -s http://{admin}/metrics | grep -E 'mirrorgate_(psm|pid|produce_rejected)'
  4. rehearse:         mirrorgate failover demo --dry-run   (go / no-go, lag, what would be synced)
  5. fail over:        mirrorgate failover demo             (barrier, producers expired, report)
  6. the report:       curl http://{admin}/v1/mirrors/demo/failovers
                       then 2. and 3. again: the mirrored producers expired by the barrier, the
                       screened ids, and the local producer's records acknowledged
"
    )
}
