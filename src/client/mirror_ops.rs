//! The agent's requests to the source and destination clusters: metadata with replication
//! factors, topic configs, topic and partition creation, a long-poll fetch, and a one-batch
//! produce.
//!
//! Used by the agent and by the group sync (cluster metadata).
//!
//! Owns: request shapes and versions. Must not touch: agent state, the controller.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{CreatePartitionsRequest, DescribeConfigsRequest, MetadataRequest};
use kafka_protocol::protocol::StrBytes;

use crate::client::Connector;
use crate::client::{ClientError, FetchedPartition, KafkaClient, RequestError};
use crate::protocol::txn_marker::{markers_request, MarkerSpec, WRITE_TXN_MARKERS_VERSION};

/// Topic configs copied from the source when the agent creates a destination topic.
pub const COPIED_CONFIGS: [&str; 4] = [
    "cleanup.policy",
    "retention.ms",
    "max.message.bytes",
    "message.timestamp.type",
];

/// A topic in a cluster's metadata.
#[derive(Debug, Clone, Default)]
pub struct TopicMeta {
    /// Leader node id per partition (-1: none).
    pub leaders: Vec<i32>,
    /// Replicas of partition 0 (the replication factor).
    pub replication_factor: i16,
    pub internal: bool,
    /// The topic id (Metadata v10+; `None` when the broker sent the nil id).
    pub topic_id: Option<String>,
}

/// Brokers and topics of a cluster.
#[derive(Debug, Clone, Default)]
pub struct ClusterMeta {
    pub brokers: HashMap<i32, String>,
    pub topics: HashMap<String, TopicMeta>,
    /// The cluster id (`None` if the broker sent none).
    pub cluster_id: Option<String>,
    /// Topics asked for by name that the cluster answered UNKNOWN_TOPIC_OR_PARTITION: they do
    /// not exist (other topic errors are transient and leave a topic out of both lists).
    pub absent: HashSet<String>,
}

impl ClusterMeta {
    /// Address of the leader of a partition.
    pub fn leader_addr(&self, topic: &str, partition: i32) -> Option<String> {
        let l = *self.topics.get(topic)?.leaders.get(partition as usize)?;
        self.brokers.get(&l).cloned()
    }
}

/// Metadata of every topic from the first reachable address.
pub async fn metadata(
    connector: &Connector,
    addrs: &[String],
    timeout: Duration,
) -> Result<ClusterMeta, ClientError> {
    metadata_of(connector, addrs, timeout, None).await
}

/// Metadata of `topics` (every topic with `None`) from the first reachable address, with the
/// cluster id and topic ids (Metadata v12).
pub async fn metadata_of(
    connector: &Connector,
    addrs: &[String],
    timeout: Duration,
    topics: Option<&[String]>,
) -> Result<ClusterMeta, ClientError> {
    let mut last = None;
    for addr in addrs {
        let r = async {
            let mut c = KafkaClient::connect_with(connector, addr, timeout).await?;
            let req = MetadataRequest::default()
                .with_topics(topics.map(|ts| {
                    ts.iter()
                        .map(|t| {
                            MetadataRequestTopic::default()
                                .with_name(Some(StrBytes::from_string(t.clone()).into()))
                        })
                        .collect()
                }))
                .with_allow_auto_topic_creation(false);
            c.send(&req, 12).await
        }
        .await;
        match r {
            Ok(resp) => {
                let mut m = ClusterMeta {
                    cluster_id: resp.cluster_id.as_ref().map(|c| c.to_string()),
                    ..ClusterMeta::default()
                };
                for t in resp.topics.iter().filter(|t| t.error_code == 3) {
                    if let Some(name) = t.name.as_ref() {
                        m.absent.insert(name.0.to_string());
                    }
                }
                for b in &resp.brokers {
                    m.brokers
                        .insert(b.node_id.0, format!("{}:{}", b.host.as_str(), b.port));
                }
                for t in resp.topics.iter().filter(|t| t.error_code == 0) {
                    let Some(name) = t.name.as_ref() else {
                        continue;
                    };
                    let n = t
                        .partitions
                        .iter()
                        .map(|p| p.partition_index + 1)
                        .max()
                        .unwrap_or(0);
                    let mut leaders = vec![-1; n.max(0) as usize];
                    let mut rf = 0i16;
                    for p in &t.partitions {
                        if let Some(s) = leaders.get_mut(p.partition_index as usize) {
                            *s = p.leader_id.0;
                        }
                        if p.partition_index == 0 {
                            rf = p.replica_nodes.len() as i16;
                        }
                    }
                    m.topics.insert(
                        name.0.to_string(),
                        TopicMeta {
                            leaders,
                            replication_factor: rf.max(1),
                            internal: t.is_internal,
                            topic_id: (!t.topic_id.is_nil()).then(|| t.topic_id.to_string()),
                        },
                    );
                }
                return Ok(m);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        RequestError::Closed {
            addr: "no bootstrap address".into(),
        }
        .into()
    }))
}

/// The values of [`COPIED_CONFIGS`] of a topic (best effort: empty on any error).
pub async fn topic_configs(c: &mut KafkaClient, topic: &str) -> Vec<(String, String)> {
    let req =
        DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_string(topic.to_string()))
            .with_configuration_keys(Some(
                COPIED_CONFIGS
                    .iter()
                    .map(|k| StrBytes::from_static_str(k))
                    .collect(),
            ))]);
    let Ok(resp) = c.send(&req, 4).await else {
        return Vec::new();
    };
    resp.results
        .iter()
        .filter(|r| r.error_code == 0)
        .flat_map(|r| r.configs.iter())
        .filter(|c| !c.is_sensitive)
        .filter_map(|c| Some((c.name.to_string(), c.value.as_ref()?.to_string())))
        .collect()
}

/// Grow a topic to `count` partitions.
pub async fn create_partitions(c: &mut KafkaClient, topic: &str, count: i32) -> Result<(), String> {
    let req = CreatePartitionsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![CreatePartitionsTopic::default()
            .with_name(StrBytes::from_string(topic.to_string()).into())
            .with_count(count)
            .with_assignments(None)]);
    let resp = c.send(&req, 3).await.map_err(|e| e.to_string())?;
    for r in &resp.results {
        // 37: INVALID_PARTITIONS (already that many).
        if r.error_code != 0 && r.error_code != 37 {
            return Err(format!(
                "CreatePartitions {topic}: error code {}",
                r.error_code
            ));
        }
    }
    Ok(())
}

/// Fetch one partition (READ_UNCOMMITTED) from `offset`, waiting up to `max_wait` for data.
/// Partition-level errors come back in `error_code`.
pub async fn fetch(
    c: &mut KafkaClient,
    topic: &str,
    partition: i32,
    offset: i64,
    max_bytes: i32,
    max_wait: Duration,
) -> Result<FetchedPartition, ClientError> {
    let req = crate::client::single_partition_fetch(topic, partition, offset, max_bytes, 0)
        .with_max_wait_ms(max_wait.as_millis() as i32)
        .with_min_bytes(1);
    let resp = c.send(&req, 12).await?;
    let p = resp
        .responses
        .into_iter()
        .filter(|t| t.topic.0.as_str() == topic)
        .flat_map(|t| t.partitions.into_iter())
        .find(|p| p.partition_index == partition);
    Ok(match p {
        Some(p) => FetchedPartition {
            error_code: p.error_code,
            high_watermark: p.high_watermark,
            log_start_offset: p.log_start_offset,
            records: p.records.unwrap_or_default(),
        },
        // UNKNOWN_TOPIC_OR_PARTITION.
        None => FetchedPartition {
            error_code: 3,
            high_watermark: -1,
            log_start_offset: -1,
            records: Bytes::new(),
        },
    })
}

pub use crate::client::ops::{create_topic, produce_one, PRODUCE_VERSION};

/// Write one transaction marker to `topic`/`partition` (WriteTxnMarkers v1); returns the
/// partition's error code (the broker answers no offset).
pub async fn write_marker(
    c: &mut KafkaClient,
    topic: &str,
    partition: i32,
    spec: MarkerSpec,
) -> Result<i16, ClientError> {
    let req = markers_request(&[(spec, vec![(topic.to_string(), partition)])]);
    let resp = c.send(&req, WRITE_TXN_MARKERS_VERSION).await?;
    Ok(resp
        .markers
        .iter()
        .filter(|m| m.producer_id.0 == spec.producer_id)
        .flat_map(|m| m.topics.iter())
        .filter(|t| t.name.0.as_str() == topic)
        .flat_map(|t| t.partitions.iter())
        .find(|p| p.partition_index == partition)
        // UNKNOWN_TOPIC_OR_PARTITION: no answer for the partition.
        .map_or(3, |p| p.error_code))
}

/// The destination broker setting that decides whether a transactional batch produced with
/// version ≤ 11 must belong to a transaction its own coordinator knows.
pub const VERIFICATION_CONFIG: &str = "transaction.partition.verification.enable";

/// A broker config's value and where it comes from (DescribeConfigs `config_source`:
/// 1 per-broker dynamic, 2 cluster-wide dynamic default, 4 static, 5 default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerSetting {
    pub value: Option<String>,
    pub source: i8,
}

/// `name` as broker `broker_id` has it.
pub async fn broker_setting(
    c: &mut KafkaClient,
    broker_id: i32,
    name: &str,
) -> Result<BrokerSetting, String> {
    let req =
        DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
            // BROKER.
            .with_resource_type(4)
            .with_resource_name(StrBytes::from_string(broker_id.to_string()))
            .with_configuration_keys(Some(vec![StrBytes::from_string(name.to_string())]))]);
    let resp = c.send(&req, 4).await.map_err(|e| e.to_string())?;
    let r = resp
        .results
        .first()
        .ok_or_else(|| "DescribeConfigs: empty answer".to_string())?;
    if r.error_code != 0 {
        return Err(format!(
            "DescribeConfigs broker {broker_id}: error code {}{}",
            r.error_code,
            r.error_message
                .as_ref()
                .map(|m| format!(" ({})", m.as_str()))
                .unwrap_or_default()
        ));
    }
    let c = r
        .configs
        .iter()
        .find(|c| c.name.as_str() == name)
        .ok_or_else(|| format!("broker {broker_id} does not describe {name}"))?;
    Ok(BrokerSetting {
        value: c.value.as_ref().map(|v| v.to_string()),
        source: c.config_source,
    })
}

/// Set `name` to `value` as the cluster-wide dynamic broker default (IncrementalAlterConfigs
/// on the BROKER resource ""), which every broker applies without a restart.
pub async fn set_cluster_default(
    c: &mut KafkaClient,
    name: &str,
    value: &str,
) -> Result<(), String> {
    use kafka_protocol::messages::incremental_alter_configs_request::{
        AlterConfigsResource, AlterableConfig,
    };
    use kafka_protocol::messages::IncrementalAlterConfigsRequest;
    let req = IncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(4)
            .with_resource_name(StrBytes::from_static_str(""))
            .with_configs(vec![AlterableConfig::default()
                .with_name(StrBytes::from_string(name.to_string()))
                // SET.
                .with_config_operation(0)
                .with_value(Some(StrBytes::from_string(value.to_string())))]),
    ]);
    let resp = c.send(&req, 1).await.map_err(|e| e.to_string())?;
    for r in &resp.responses {
        if r.error_code != 0 {
            return Err(format!(
                "IncrementalAlterConfigs {name}={value}: error code {}{}",
                r.error_code,
                r.error_message
                    .as_ref()
                    .map(|m| format!(" ({})", m.as_str()))
                    .unwrap_or_default()
            ));
        }
    }
    Ok(())
}
