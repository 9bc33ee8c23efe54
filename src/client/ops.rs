//! Single requests of the gateway's own client that several parts send the same way: topic
//! creation (an existing topic is fine), a one-batch produce with `acks=-1`, the log ends of
//! many partitions of one leader in one ListOffsets, and the batch of keyed records without
//! producer id that the gateway's own topics are written with.
//!
//! Owns: those request shapes and how their answers are read. Must not touch: who sends them
//! and why (the agent, the audit trail), any gateway state.

use bytes::Bytes;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{CreateTopicsRequest, ProduceRequest};
use kafka_protocol::protocol::StrBytes;

use super::{ClientError, KafkaClient};

/// Create a topic; `Ok(())` also when it already exists.
pub async fn create_topic(
    c: &mut KafkaClient,
    topic: &str,
    partitions: i32,
    replication_factor: i16,
    configs: &[(String, String)],
) -> Result<(), String> {
    let req = CreateTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(StrBytes::from_string(topic.to_string()).into())
            .with_num_partitions(partitions)
            .with_replication_factor(replication_factor)
            .with_configs(
                configs
                    .iter()
                    .map(|(k, v)| {
                        CreatableTopicConfig::default()
                            .with_name(StrBytes::from_string(k.clone()))
                            .with_value(Some(StrBytes::from_string(v.clone())))
                    })
                    .collect(),
            )]);
    let resp = c.send(&req, 5).await.map_err(|e| e.to_string())?;
    for t in &resp.topics {
        // 36: TOPIC_ALREADY_EXISTS.
        if t.error_code != 0 && t.error_code != 36 {
            return Err(format!(
                "CreateTopics {topic}: error code {}{}",
                t.error_code,
                t.error_message
                    .as_ref()
                    .map(|m| format!(" ({})", m.as_str()))
                    .unwrap_or_default()
            ));
        }
    }
    Ok(())
}

/// The Produce version of the agent's appends: at most 11, the last version with which a
/// broker whose `transaction.partition.verification.enable` is false appends a transactional
/// batch without asking its own transaction coordinator (from 12 on it always asks, and the
/// coordinator does not know the source's producer ids).
pub const PRODUCE_VERSION: i16 = 9;

/// Produce one batch as-is with acks=all; returns (error code, base offset, error message).
/// `transactional_id`: set for a transactional batch (a broker refuses one without it).
pub async fn produce_one(
    c: &mut KafkaClient,
    topic: &str,
    partition: i32,
    batch: Bytes,
    transactional_id: Option<&str>,
) -> Result<(i16, i64, Option<String>), ClientError> {
    let (code, base, message, _) =
        produce_one_timed(c, topic, partition, batch, transactional_id).await?;
    Ok((code, base, message))
}

/// [`produce_one`], with the broker's append time of the batch as its fourth figure (the
/// broker's clock when the topic keeps `LogAppendTime`, else -1).
pub async fn produce_one_timed(
    c: &mut KafkaClient,
    topic: &str,
    partition: i32,
    batch: Bytes,
    transactional_id: Option<&str>,
) -> Result<(i16, i64, Option<String>, i64), ClientError> {
    let req = ProduceRequest::default()
        .with_transactional_id(
            transactional_id.map(|t| StrBytes::from_string(t.to_string()).into()),
        )
        .with_acks(-1)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(StrBytes::from_string(topic.to_string()).into())
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(batch))])]);
    let resp = c.send(&req, PRODUCE_VERSION).await?;
    let p = resp
        .responses
        .iter()
        .filter(|t| t.name.0.as_str() == topic)
        .flat_map(|t| t.partition_responses.iter())
        .find(|p| p.index == partition);
    Ok(match p {
        Some(p) => (
            p.error_code,
            p.base_offset,
            p.error_message.as_ref().map(|m| m.to_string()),
            p.log_append_time_ms,
        ),
        None => (3, -1, Some("no answer for the partition".into()), -1),
    })
}

/// One batch (v2, uncompressed, no producer id) of `(key, value, timestamp)` records.
pub fn plain_batch(records: impl Iterator<Item = (Bytes, Bytes, i64)>) -> Result<Bytes, String> {
    plain_batch_of(records.map(|(k, v, t)| (k, Some(v), t)))
}

/// [`plain_batch`] whose records may have no value (tombstones of a compacted topic).
pub fn plain_batch_of(
    records: impl Iterator<Item = (Bytes, Option<Bytes>, i64)>,
) -> Result<Bytes, String> {
    use kafka_protocol::records::{
        Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };
    let records: Vec<Record> = records
        .enumerate()
        .map(|(i, (key, value, timestamp))| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            // Offsets within the batch count up from 0. The encoder starts a new batch where
            // offset - sequence changes, and a Produce request carries exactly one batch per
            // partition: so the sequence follows the offset, starting at -1 (the base sequence
            // of a batch without producer id).
            offset: i as i64,
            sequence: i as i32 - 1,
            timestamp,
            key: Some(key),
            value,
            headers: Default::default(),
        })
        .collect();
    let mut buf = bytes::BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        records.iter(),
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .map_err(|e| format!("cannot encode the batch: {e}"))?;
    Ok(buf.freeze())
}

/// The log end offset of a partition on its leader `c` — beyond the high watermark, what the
/// leader has appended and its followers may not have yet: the end offset of the partition's
/// current leader epoch (Metadata for the epoch, then OffsetForLeaderEpoch, as a consumer).
pub async fn log_end_offset(
    c: &mut KafkaClient,
    topic: &str,
    partition: i32,
) -> Result<i64, String> {
    use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
    use kafka_protocol::messages::offset_for_leader_epoch_request::{
        OffsetForLeaderPartition, OffsetForLeaderTopic,
    };
    use kafka_protocol::messages::{MetadataRequest, OffsetForLeaderEpochRequest};
    let name = || StrBytes::from_string(topic.to_string());
    let meta = MetadataRequest::default()
        .with_topics(Some(vec![
            MetadataRequestTopic::default().with_name(Some(name().into()))
        ]))
        .with_allow_auto_topic_creation(false);
    let m = c.send(&meta, 12).await.map_err(|e| e.to_string())?;
    let epoch = m
        .topics
        .iter()
        .filter(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == topic))
        .flat_map(|t| t.partitions.iter())
        .find(|p| p.partition_index == partition)
        .map(|p| (p.error_code, p.leader_epoch))
        .ok_or_else(|| format!("no metadata for {topic}-{partition}"))?;
    if epoch.0 != 0 {
        return Err(format!(
            "Metadata of {topic}-{partition}: error code {}",
            epoch.0
        ));
    }
    let req = OffsetForLeaderEpochRequest::default()
        .with_replica_id((-1).into())
        .with_topics(vec![OffsetForLeaderTopic::default()
            .with_topic(name().into())
            .with_partitions(vec![OffsetForLeaderPartition::default()
                .with_partition(partition)
                .with_current_leader_epoch(epoch.1)
                .with_leader_epoch(epoch.1)])]);
    let r = c.send(&req, 4).await.map_err(|e| e.to_string())?;
    let p = r
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter())
        .find(|p| p.partition == partition)
        .ok_or_else(|| format!("no OffsetForLeaderEpoch answer for {topic}-{partition}"))?;
    if p.error_code != 0 {
        return Err(format!(
            "OffsetForLeaderEpoch of {topic}-{partition}: error code {}",
            p.error_code
        ));
    }
    Ok(p.end_offset)
}
