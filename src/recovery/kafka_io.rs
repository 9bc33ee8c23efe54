//! [`RecoveryIo`] on real clusters: the mirror's source (its `source:` connection settings) and
//! the destination (the gateway's own connections, never its listeners).
//!
//! - source: Metadata for leaders, ListOffsets (earliest, latest = high watermark), Fetch
//!   (READ_UNCOMMITTED: the tail's markers are read too);
//! - destination: the same for the quarantine topic, CreateTopics, FindCoordinator and
//!   InitProducerId for the copier's producer, WriteTxnMarkers for the fence, Produce v9 with
//!   acks=all.
//!
//! Connections are kept per broker between requests and dropped on any error; leaders are
//! read again after one.
//!
//! Owns: those requests and their error mapping. Must not touch: the copy's rules (`copy`).

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::{
    DeleteTopicsRequest, DescribeConfigsRequest, FindCoordinatorRequest, InitProducerIdRequest,
};
use kafka_protocol::protocol::StrBytes;
use tokio::sync::Mutex;

use super::{ProduceAnswer, RecoveryError, RecoveryIo, SourceTopicShape};
use crate::client::mirror_ops::{self, metadata_of, write_marker};
use crate::client::retry::is_retriable;
use crate::client::{Connector, KafkaClient, PartitionRequestError, EARLIEST, LATEST};
use crate::protocol::txn_marker::MarkerSpec;

/// Most bytes one fetch asks for.
const FETCH_BYTES: i32 = 4 * 1024 * 1024;
/// How long a fence marker answered with a retriable error is asked again.
const FENCE_RETRIES_FOR: Duration = Duration::from_secs(30);

/// One cluster: how to connect, where to start, the connections kept.
struct Side {
    name: &'static str,
    connector: Connector,
    bootstrap: Vec<String>,
    timeout: Duration,
    clients: Mutex<HashMap<String, KafkaClient>>,
    leaders: Mutex<HashMap<(String, i32), String>>,
}

impl Side {
    fn io(&self, what: String) -> RecoveryError {
        RecoveryError::Io(format!("{} cluster: {what}", self.name))
    }

    async fn leader(&self, topic: &str, partition: i32) -> Result<String, RecoveryError> {
        let key = (topic.to_string(), partition);
        if let Some(a) = self.leaders.lock().await.get(&key) {
            return Ok(a.clone());
        }
        let meta = self.meta(&[topic.to_string()]).await?;
        let addr = meta
            .leader_addr(topic, partition)
            .ok_or_else(|| self.io(format!("{topic}-{partition} has no leader")))?;
        self.leaders.lock().await.insert(key, addr.clone());
        Ok(addr)
    }

    /// Metadata of `topics` (brokers only for none) from the first reachable address.
    async fn meta(&self, topics: &[String]) -> Result<mirror_ops::ClusterMeta, RecoveryError> {
        metadata_of(&self.connector, &self.bootstrap, self.timeout, Some(topics))
            .await
            .map_err(|e| self.io(format!("metadata: {e}")))
    }

    /// Partitions of `topic`; `None` when the cluster says it does not exist.
    async fn partitions(&self, topic: &str) -> Result<Option<i32>, RecoveryError> {
        let meta = self.meta(&[topic.to_string()]).await?;
        if meta.absent.contains(topic) {
            return Ok(None);
        }
        match meta.topics.get(topic) {
            Some(t) if t.leaders.iter().all(|l| *l >= 0) => Ok(Some(t.leaders.len() as i32)),
            _ => Err(self.io(format!("{topic} has partitions without a leader"))),
        }
    }

    async fn client(&self, addr: &str) -> Result<KafkaClient, RecoveryError> {
        if let Some(c) = self.clients.lock().await.remove(addr) {
            return Ok(c);
        }
        KafkaClient::connect_with(&self.connector, addr, self.timeout)
            .await
            .map_err(|e| self.io(format!("connecting to {addr}: {e}")))
    }

    async fn keep(&self, c: KafkaClient) {
        self.clients.lock().await.insert(c.addr().to_string(), c);
    }

    /// Forget the leader of a partition (its broker answered an error or went away).
    async fn forget(&self, topic: &str, partition: i32) {
        self.leaders
            .lock()
            .await
            .remove(&(topic.to_string(), partition));
    }

    /// Keep `c` after a success; forget the partition's leader after an error, named `what`.
    async fn settle<T, E: std::fmt::Display>(
        &self,
        c: KafkaClient,
        (topic, partition): (&str, i32),
        what: &str,
        r: Result<T, E>,
    ) -> Result<T, RecoveryError> {
        match r {
            Ok(v) => {
                self.keep(c).await;
                Ok(v)
            }
            Err(e) => {
                self.forget(topic, partition).await;
                Err(self.io(format!("{what} of {topic}-{partition}: {e}")))
            }
        }
    }

    async fn bounds(&self, topic: &str, partition: i32) -> Result<(i64, i64), RecoveryError> {
        let addr = self.leader(topic, partition).await?;
        let mut c = self.client(&addr).await?;
        let r = async {
            let start = c.list_offset(topic, partition, EARLIEST).await?;
            let end = c.list_offset(topic, partition, LATEST).await?;
            Ok::<_, PartitionRequestError>((start, end))
        }
        .await;
        self.settle(c, (topic, partition), "log bounds", r).await
    }

    async fn batches(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> Result<Bytes, RecoveryError> {
        let addr = self.leader(topic, partition).await?;
        let mut c = self.client(&addr).await?;
        let r = c
            .fetch_partition(topic, partition, offset, FETCH_BYTES)
            .await
            .map(|p| p.records);
        self.settle(c, (topic, partition), &format!("fetch at {offset}"), r)
            .await
    }
}

/// The source and destination of one mirror.
pub struct KafkaRecoveryIo {
    source: Side,
    destination: Side,
}

impl KafkaRecoveryIo {
    /// `source`: the mirror's source connection; `destination`: the gateway's connector to the
    /// destination and its broker addresses.
    pub fn new(
        source: (Connector, Vec<String>),
        destination: (Connector, Vec<String>),
        timeout: Duration,
    ) -> Self {
        let side = |name, (connector, bootstrap): (Connector, Vec<String>)| Side {
            name,
            connector,
            bootstrap,
            timeout,
            clients: Mutex::new(HashMap::new()),
            leaders: Mutex::new(HashMap::new()),
        };
        KafkaRecoveryIo {
            source: side("source", source),
            destination: side("destination", destination),
        }
    }
}

impl Side {
    /// The configs set on `topic` itself (DescribeConfigs `config_source` 1).
    async fn topic_overrides(&self, topic: &str) -> Result<Vec<(String, String)>, RecoveryError> {
        let addr = self
            .bootstrap
            .first()
            .cloned()
            .ok_or_else(|| self.io("no broker known".into()))?;
        let mut c = self.client(&addr).await?;
        let req = DescribeConfigsRequest::default().with_resources(vec![
            DescribeConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(StrBytes::from_string(topic.to_string()))
                .with_configuration_keys(None),
        ]);
        let resp = c
            .send(&req, 4)
            .await
            .map_err(|e| self.io(format!("DescribeConfigs of {topic}: {e}")))?;
        self.keep(c).await;
        let mut out = Vec::new();
        for r in &resp.results {
            if r.error_code != 0 {
                return Err(self.io(format!(
                    "DescribeConfigs of {topic}: error code {}",
                    r.error_code
                )));
            }
            for c in r.configs.iter().filter(|c| c.config_source == 1) {
                if c.is_sensitive {
                    return Err(self.io(format!(
                        "{topic} has a sensitive config ({}) that cannot be read back",
                        c.name.as_str()
                    )));
                }
                if let Some(v) = &c.value {
                    out.push((c.name.to_string(), v.to_string()));
                }
            }
        }
        Ok(out)
    }

    /// Poll the topic's metadata every 200 ms for up to 60 s until `done` holds.
    async fn wait_topic(
        &self,
        topic: &str,
        what: &str,
        done: impl Fn(Option<&mirror_ops::TopicMeta>, bool) -> bool,
    ) -> Result<(), RecoveryError> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(m) = self.meta(&[topic.to_string()]).await {
                if done(m.topics.get(topic), m.absent.contains(topic)) {
                    return Ok(());
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(self.io(format!("{topic}: not {what} within 60 s")));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl RecoveryIo for KafkaRecoveryIo {
    async fn source_bounds(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<(i64, i64), RecoveryError> {
        self.source.bounds(topic, partition).await
    }

    async fn source_batches(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> Result<Bytes, RecoveryError> {
        self.source.batches(topic, partition, offset).await
    }

    async fn destination_batches(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> Result<Bytes, RecoveryError> {
        self.destination.batches(topic, partition, offset).await
    }

    async fn quarantine_bounds(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<Option<(i64, i64)>, RecoveryError> {
        match self.destination.partitions(topic).await? {
            None => Ok(None),
            Some(n) if partition >= n => Ok(None),
            Some(_) => self.destination.bounds(topic, partition).await.map(Some),
        }
    }

    async fn quarantine_batches(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> Result<Bytes, RecoveryError> {
        // Quarantine topics are on the destination too.
        self.destination_batches(topic, partition, offset).await
    }

    async fn ensure_quarantine(&self, topic: &str, partitions: i32) -> Result<(), RecoveryError> {
        let d = &self.destination;
        if let Some(has) = d.partitions(topic).await.ok().flatten() {
            return if has < partitions {
                Err(RecoveryError::QuarantineTooSmall {
                    topic: topic.to_string(),
                    has,
                    need: partitions,
                })
            } else {
                Ok(())
            };
        }
        // Replication factor min(3, destination brokers).
        let meta = d.meta(&[]).await?;
        let replication = meta.brokers.len().clamp(1, 3) as i16;
        let addr = d
            .bootstrap
            .first()
            .cloned()
            .ok_or_else(|| d.io("no broker known".into()))?;
        let mut c = d.client(&addr).await?;
        mirror_ops::create_topic(&mut c, topic, partitions, replication, &[])
            .await
            .map_err(|e| d.io(e))?;
        d.keep(c).await;
        // Leaders are elected a moment after creation.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            match d.partitions(topic).await {
                Ok(Some(n)) if n >= partitions => return Ok(()),
                r if tokio::time::Instant::now() >= deadline => {
                    return Err(d.io(format!(
                        "{topic} created, its partitions have no leader yet ({r:?})"
                    )))
                }
                _ => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }

    async fn copier_producer(&self, transactional_id: &str) -> Result<(i64, i16), RecoveryError> {
        let d = &self.destination;
        let id = || StrBytes::from_string(transactional_id.to_string());
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        let mut last = String::new();
        while tokio::time::Instant::now() < deadline {
            let r = async {
                let addr = d
                    .bootstrap
                    .first()
                    .cloned()
                    .ok_or_else(|| "no broker known".to_string())?;
                let mut c = d.client(&addr).await.map_err(|e| e.to_string())?;
                let find = FindCoordinatorRequest::default()
                    .with_key_type(1)
                    .with_coordinator_keys(vec![id()]);
                let resp = c.send(&find, 4).await.map_err(|e| e.to_string())?;
                d.keep(c).await;
                let co = resp
                    .coordinators
                    .into_iter()
                    .next()
                    .ok_or("FindCoordinator: empty answer")?;
                if co.error_code != 0 {
                    return Err(format!("FindCoordinator: error code {}", co.error_code));
                }
                let addr = format!("{}:{}", co.host, co.port);
                let mut c = d.client(&addr).await.map_err(|e| e.to_string())?;
                let init = InitProducerIdRequest::default()
                    .with_transactional_id(Some(id().into()))
                    .with_transaction_timeout_ms(60_000)
                    .with_producer_id((-1).into())
                    .with_producer_epoch(-1);
                let resp = c.send(&init, 4).await.map_err(|e| e.to_string())?;
                d.keep(c).await;
                if resp.error_code != 0 {
                    return Err(format!("InitProducerId: error code {}", resp.error_code));
                }
                Ok((resp.producer_id.0, resp.producer_epoch))
            }
            .await;
            match r {
                Ok(p) => return Ok(p),
                Err(e) => {
                    last = e;
                    // Coordinator loading, not the coordinator, concurrent transactions: asked
                    // again.
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
            }
        }
        Err(d.io(format!(
            "no producer id for {transactional_id:?} within 60 s ({last})"
        )))
    }

    /// Retriable answers (the quarantine topic created a moment ago and its leader not knowing
    /// it yet: UNKNOWN_TOPIC_OR_PARTITION; a leader moving) and lost connections are asked
    /// again, the leader looked up anew, for [`FENCE_RETRIES_FOR`] at most.
    async fn fence(
        &self,
        topic: &str,
        partition: i32,
        producer: (i64, i16),
    ) -> Result<(), RecoveryError> {
        let d = &self.destination;
        let spec = MarkerSpec::barrier(producer.0, producer.1);
        let deadline = tokio::time::Instant::now() + FENCE_RETRIES_FOR;
        loop {
            let addr = d.leader(topic, partition).await?;
            let mut c = d.client(&addr).await?;
            let failure = match write_marker(&mut c, topic, partition, spec).await {
                Ok(0) => {
                    d.keep(c).await;
                    return Ok(());
                }
                // INVALID_PRODUCER_EPOCH, PRODUCER_FENCED: a later copier fenced this one first.
                Ok(47 | 90) => {
                    return Err(RecoveryError::Fenced {
                        topic: topic.to_string(),
                        partition,
                    })
                }
                Ok(code) if is_retriable(code) => format!("error code {code}"),
                Ok(code) => {
                    d.forget(topic, partition).await;
                    return Err(d.io(format!(
                        "the fence marker in {topic}-{partition}: error code {code}"
                    )));
                }
                Err(e) => e.to_string(),
            };
            d.forget(topic, partition).await;
            if tokio::time::Instant::now() >= deadline {
                return Err(d.io(format!(
                    "the fence marker in {topic}-{partition}: {failure} (asked again for {FENCE_RETRIES_FOR:?})"
                )));
            }
            tracing::debug!(%topic, partition, %failure, "recovery: the fence marker asked again");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn source_topic(&self, topic: &str) -> Result<Option<SourceTopicShape>, RecoveryError> {
        let s = &self.source;
        let meta = s.meta(&[topic.to_string()]).await?;
        if meta.absent.contains(topic) {
            return Ok(None);
        }
        let t = meta
            .topics
            .get(topic)
            .ok_or_else(|| s.io(format!("{topic}: no metadata")))?;
        Ok(Some(SourceTopicShape {
            topic: topic.to_string(),
            partitions: t.leaders.len() as i32,
            replication_factor: t.replication_factor,
            configs: s.topic_overrides(topic).await?,
            topic_id: t.topic_id.clone(),
        }))
    }

    async fn source_recreate(
        &self,
        topic: &str,
        shape: &SourceTopicShape,
    ) -> Result<(), RecoveryError> {
        let s = &self.source;
        let addr = s
            .bootstrap
            .first()
            .cloned()
            .ok_or_else(|| s.io("no broker known".into()))?;
        let mut c = s.client(&addr).await?;
        let req = DeleteTopicsRequest::default()
            .with_topic_names(vec![StrBytes::from_string(topic.to_string()).into()])
            .with_timeout_ms(30_000);
        let resp = c
            .send(&req, 4)
            .await
            .map_err(|e| s.io(format!("DeleteTopics {topic}: {e}")))?;
        s.keep(c).await;
        // 3 UNKNOWN_TOPIC_OR_PARTITION: deleted already (a call cut short).
        if let Some(r) = resp
            .responses
            .iter()
            .find(|r| r.error_code != 0 && r.error_code != 3)
        {
            return Err(s.io(format!("DeleteTopics {topic}: error code {}", r.error_code)));
        }
        s.wait_topic(topic, "deleted", |_, absent| absent).await?;
        s.leaders.lock().await.retain(|(t, _), _| t != topic);
        let mut c = s.client(&addr).await?;
        mirror_ops::create_topic(
            &mut c,
            topic,
            shape.partitions,
            shape.replication_factor,
            &shape.configs,
        )
        .await
        .map_err(|e| s.io(e))?;
        s.keep(c).await;
        let old = shape.topic_id.clone();
        let n = shape.partitions as usize;
        s.wait_topic(topic, "created again with leaders", |t, _| {
            t.is_some_and(|t| {
                t.leaders.len() == n && t.leaders.iter().all(|l| *l >= 0) && t.topic_id != old
            })
        })
        .await
    }

    async fn produce(
        &self,
        topic: &str,
        partition: i32,
        batch: Bytes,
    ) -> Result<ProduceAnswer, RecoveryError> {
        let d = &self.destination;
        let addr = d.leader(topic, partition).await?;
        let mut c = d.client(&addr).await?;
        match mirror_ops::produce_one(&mut c, topic, partition, batch, None).await {
            Ok((code, _, _)) => {
                if code == 0 {
                    d.keep(c).await;
                } else {
                    d.forget(topic, partition).await;
                }
                Ok(ProduceAnswer::Code(code))
            }
            Err(e) => {
                d.forget(topic, partition).await;
                Err(d.io(format!("produce to {topic}-{partition}: {e}")))
            }
        }
    }
}
