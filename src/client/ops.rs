//! Single requests of the gateway's own client that several parts send the same way: topic
//! creation (an existing topic is fine) and a one-batch produce with `acks=-1`.
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
        ),
        None => (3, -1, Some("no answer for the partition".into())),
    })
}
