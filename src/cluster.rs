//! The gateway's view of the destination cluster: broker node ids and their real addresses,
//! topic ids and names, the epochs of the transaction coordinators, and whether metadata is
//! known. Refreshed periodically with the gateway's own Metadata requests and updated from
//! Metadata responses that pass through.
//!
//! Owns: that view and its refresh. Must not touch: client connections (the proxy feeds it the
//! Metadata answers it sees), mirror state, the PSM. Every layer above reads it.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, MetadataRequest};
use tokio::sync::watch;

use crate::client::Connector;
use crate::client::{ClientError, KafkaClient, RequestError};
use crate::config::ClusterConfig;
use crate::metrics::Metrics;
use crate::protocol::rewrite::BrokerEndpoint;

#[derive(Default)]
struct Inner {
    brokers: HashMap<i32, String>,
    topic_names: HashMap<uuid::Uuid, String>,
    /// Topic name → (topic id, leader node id of each partition, -1 when none).
    topics: HashMap<String, TopicInfo>,
    /// Leader epoch of each `__transaction_state` partition (empty: not known).
    transaction_state_epochs: Vec<i32>,
    cluster_id: Option<String>,
    known: bool,
}

/// Shared, cheap-to-read view of the destination cluster.
pub struct ClusterView {
    inner: RwLock<Inner>,
    config: ClusterConfig,
    connector: Connector,
    metrics: Arc<Metrics>,
    /// Bumped whenever the broker set changes.
    changed: watch::Sender<u64>,
    /// Why the last metadata refresh failed (`None` after a success).
    last_error: std::sync::Mutex<Option<String>>,
}

/// A topic as the destination's metadata describes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopicInfo {
    pub id: uuid::Uuid,
    /// Leader node id per partition index (-1 when the partition has no leader).
    pub leaders: Vec<i32>,
}

/// What one metadata fetch returned.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub brokers: Vec<BrokerEndpoint>,
    pub topics: Vec<(uuid::Uuid, String)>,
    /// Partition layout of every topic (complete fetches only).
    pub partitions: Vec<(String, TopicInfo)>,
    /// Leader epoch of each partition of [`TRANSACTION_STATE_TOPIC`], by partition index
    /// (empty when the topic is not in the answer): the epoch of the transaction coordinator of
    /// the transactional ids that partition holds, which its transaction markers carry.
    pub transaction_state_epochs: Vec<i32>,
    pub cluster_id: Option<String>,
}

/// The topic of the transaction coordinators' state.
pub const TRANSACTION_STATE_TOPIC: &str = "__transaction_state";

/// The [`TRANSACTION_STATE_TOPIC`] partition of `transactional_id` among `partitions`, as
/// Kafka places it: `Utils.abs(transactionalId.hashCode()) % partitions` (Java's
/// `String.hashCode` over UTF-16 code units; `Utils.abs(Integer.MIN_VALUE)` is 0).
pub fn transaction_state_partition(transactional_id: &str, partitions: usize) -> i32 {
    let hash = transactional_id
        .encode_utf16()
        .fold(0i32, |h, u| h.wrapping_mul(31).wrapping_add(i32::from(u)));
    let abs = if hash == i32::MIN { 0 } else { hash.abs() };
    abs % i32::try_from(partitions.max(1)).unwrap_or(i32::MAX)
}

impl ClusterView {
    /// A view with nothing known yet; `connector` opens every gateway connection to the
    /// cluster's brokers.
    pub fn new(config: ClusterConfig, connector: Connector, metrics: Arc<Metrics>) -> Arc<Self> {
        let (changed, _) = watch::channel(0);
        Arc::new(ClusterView {
            inner: RwLock::new(Inner::default()),
            config,
            connector,
            metrics,
            changed,
            last_error: std::sync::Mutex::new(None),
        })
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }
    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    /// How the gateway connects to this cluster's brokers.
    pub fn connector(&self) -> &Connector {
        &self.connector
    }

    /// A gateway client connection to broker `addr`; `timeout` bounds connecting and each request.
    pub async fn client(&self, addr: &str, timeout: Duration) -> Result<KafkaClient, ClientError> {
        KafkaClient::connect_with(&self.connector, addr, timeout).await
    }

    /// `parts` grouped by the address of their leader, from the last metadata fetch.
    pub fn by_leader(
        &self,
        parts: &[(String, i32)],
    ) -> Result<std::collections::BTreeMap<String, Vec<(String, i32)>>, String> {
        let mut by_leader: std::collections::BTreeMap<String, Vec<(String, i32)>> =
            Default::default();
        for (t, p) in parts {
            let leader = self
                .topic(t)
                .and_then(|i| i.leaders.get(*p as usize).copied())
                .filter(|l| *l >= 0)
                .ok_or_else(|| format!("{t}-{p} has no leader"))?;
            let addr = self
                .broker_addr(leader)
                .ok_or_else(|| format!("broker {leader} (leader of {t}-{p}) is not known"))?;
            by_leader.entry(addr).or_default().push((t.clone(), *p));
        }
        Ok(by_leader)
    }

    /// The log end (the next offset a record would get) of each of `parts`, read from their
    /// leaders, one ListOffsets request per leader; `timeout` bounds connecting and each request.
    pub async fn log_ends(
        &self,
        parts: &[(String, i32)],
        timeout: Duration,
    ) -> Result<std::collections::BTreeMap<(String, i32), i64>, String> {
        let mut ends = std::collections::BTreeMap::new();
        for (addr, parts) in self.by_leader(parts)? {
            let mut c = self
                .client(&addr, timeout)
                .await
                .map_err(|e| format!("cannot reach broker {addr}: {e}"))?;
            let read = c
                .list_offsets(&parts, crate::client::LATEST)
                .await
                .map_err(|e| format!("the log ends could not be read on broker {addr}: {e}"))?;
            ends.extend(read);
        }
        Ok(ends)
    }

    /// Real address (`host:port`) of broker `node_id`.
    pub fn broker_addr(&self, node_id: i32) -> Option<String> {
        self.read().brokers.get(&node_id).cloned()
    }

    /// All known brokers, sorted by node id.
    pub fn brokers(&self) -> Vec<(i32, String)> {
        let mut v: Vec<_> = self
            .read()
            .brokers
            .iter()
            .map(|(k, v)| (*k, v.clone()))
            .collect();
        v.sort();
        v
    }

    /// Topic name for a topic id.
    pub fn topic_name(&self, id: &uuid::Uuid) -> Option<String> {
        self.read().topic_names.get(id).cloned()
    }

    /// The id of `topic` from the last full metadata fetch (no copy of its layout).
    pub fn topic_id(&self, topic: &str) -> Option<uuid::Uuid> {
        self.read().topics.get(topic).map(|t| t.id)
    }

    /// The epoch of the transaction coordinator of `transactional_id` (the leader epoch of its
    /// `__transaction_state` partition) as the last full metadata fetch saw it; epochs only grow,
    /// so the coordinator's is at least this. `None`: not known.
    pub fn transaction_coordinator_epoch(&self, transactional_id: &str) -> Option<i32> {
        let inner = self.read();
        let epochs = &inner.transaction_state_epochs;
        if epochs.is_empty() {
            return None;
        }
        let p = transaction_state_partition(transactional_id, epochs.len());
        epochs
            .get(usize::try_from(p).ok()?)
            .copied()
            .filter(|e| *e >= 0)
    }

    /// Partition layout of `topic` from the last full metadata fetch.
    pub fn topic(&self, topic: &str) -> Option<TopicInfo> {
        self.read().topics.get(topic).cloned()
    }

    /// Names of every topic known from the last full metadata fetch, sorted.
    pub fn topic_names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.read().topics.keys().cloned().collect();
        v.sort();
        v
    }

    /// Why the last metadata refresh failed, `None` when it succeeded (or none ran yet).
    pub fn last_refresh_error(&self) -> Option<String> {
        self.last_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Whether metadata has been fetched at least once.
    pub fn is_known(&self) -> bool {
        self.read().known
    }

    /// The destination cluster id.
    pub fn cluster_id(&self) -> Option<String> {
        self.read().cluster_id.clone()
    }

    /// Subscribe to broker-set changes.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Merge brokers and topics seen in a Metadata response passing through.
    pub fn observe(&self, brokers: &[BrokerEndpoint], topics: &[(uuid::Uuid, String)]) {
        let mut changed = false;
        {
            let mut inner = self.write();
            for b in brokers {
                let addr = format!("{}:{}", b.host, b.port);
                if inner.brokers.get(&b.node_id) != Some(&addr) {
                    inner.brokers.insert(b.node_id, addr);
                    changed = true;
                }
            }
            for (id, name) in topics {
                inner.topic_names.insert(*id, name.clone());
            }
            self.metrics
                .upstream_brokers
                .set(inner.brokers.len() as i64);
        }
        if changed {
            self.changed.send_modify(|v| *v += 1);
        }
    }

    /// Replace the view with a full snapshot.
    pub fn replace(&self, snap: Snapshot) {
        let changed;
        {
            let mut inner = self.write();
            let brokers: HashMap<i32, String> = snap
                .brokers
                .iter()
                .map(|b| (b.node_id, format!("{}:{}", b.host, b.port)))
                .collect();
            changed = brokers != inner.brokers || !inner.known;
            inner.brokers = brokers;
            inner.topic_names = snap.topics.into_iter().collect();
            inner.topics = snap.partitions.into_iter().collect();
            inner.transaction_state_epochs = snap.transaction_state_epochs;
            inner.cluster_id = snap.cluster_id;
            inner.known = true;
            self.metrics
                .upstream_brokers
                .set(inner.brokers.len() as i64);
        }
        if changed {
            self.changed.send_modify(|v| *v += 1);
        }
    }

    /// Fetch metadata once from any reachable broker (known brokers first, then bootstrap).
    pub async fn fetch(&self) -> Result<Snapshot, ClientError> {
        let timeout = Duration::from_millis(self.config.connect_timeout_ms);
        let mut candidates: Vec<String> = self.brokers().into_iter().map(|(_, a)| a).collect();
        candidates.extend(self.config.bootstrap.iter().cloned());
        let mut last = None;
        for addr in candidates {
            match fetch_from(&self.connector, &addr, timeout).await {
                Ok(s) => return Ok(s),
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

    /// Refresh now; updates the view and the metrics.
    pub async fn refresh(&self) -> Result<(), ClientError> {
        match self.fetch().await {
            Ok(s) => {
                self.replace(s);
                *self.last_error.lock().unwrap_or_else(|e| e.into_inner()) = None;
                self.metrics
                    .metadata_refresh
                    .with_label_values(&["ok"])
                    .inc();
                Ok(())
            }
            Err(e) => {
                self.metrics
                    .metadata_refresh
                    .with_label_values(&["error"])
                    .inc();
                *self.last_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(e.to_string());
                Err(e)
            }
        }
    }

    /// Refresh every `metadata_refresh_ms` until `shutdown` fires. Retries faster while no
    /// metadata is known.
    pub async fn refresh_loop(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        loop {
            let wait = match self.refresh().await {
                Ok(()) => Duration::from_millis(self.config.metadata_refresh_ms),
                Err(e) => {
                    tracing::warn!(error = %e, "destination metadata refresh failed");
                    Duration::from_millis(if self.is_known() { 2000 } else { 500 })
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = shutdown.changed() => return,
            }
        }
    }
}

/// The highest version of `key` both the broker (per its ApiVersions answer) and the crate know.
fn negotiate(versions: &[(i16, i16, i16)], key: ApiKey) -> Option<i16> {
    let (_, min, max) = versions.iter().find(|(k, _, _)| *k == key as i16)?;
    let ours = key.valid_versions();
    let v = (*max).min(ours.max);
    (v >= (*min).max(ours.min)).then_some(v)
}

async fn fetch_from(
    connector: &Connector,
    addr: &str,
    timeout: Duration,
) -> Result<Snapshot, ClientError> {
    let mut client = KafkaClient::connect_with(connector, addr, timeout).await?;
    let av = client.send(&ApiVersionsRequest::default(), 0).await?;
    let versions: Vec<(i16, i16, i16)> = av
        .api_keys
        .iter()
        .map(|k| (k.api_key, k.min_version, k.max_version))
        .collect();
    let version = negotiate(&versions, ApiKey::Metadata).unwrap_or(9);
    let req = MetadataRequest::default()
        .with_topics(None)
        .with_allow_auto_topic_creation(false);
    let resp = client.send(&req, version).await?;
    Ok(Snapshot {
        brokers: resp
            .brokers
            .iter()
            .map(|b| BrokerEndpoint {
                node_id: b.node_id.0,
                host: b.host.to_string(),
                port: b.port,
            })
            .collect(),
        topics: resp
            .topics
            .iter()
            .filter_map(|t| t.name.as_ref().map(|n| (t.topic_id, n.0.to_string())))
            .collect(),
        partitions: resp
            .topics
            .iter()
            .filter(|t| t.error_code == 0)
            .filter_map(|t| {
                let name = t.name.as_ref()?.0.to_string();
                let n = t
                    .partitions
                    .iter()
                    .map(|p| p.partition_index)
                    .max()
                    .map(|m| m + 1)
                    .unwrap_or(0);
                let mut leaders = vec![-1; n.max(0) as usize];
                for p in &t.partitions {
                    if let Some(slot) = leaders.get_mut(p.partition_index as usize) {
                        *slot = p.leader_id.0;
                    }
                }
                Some((
                    name,
                    TopicInfo {
                        id: t.topic_id,
                        leaders,
                    },
                ))
            })
            .collect(),
        transaction_state_epochs: resp
            .topics
            .iter()
            .find(|t| {
                t.error_code == 0
                    && t.name
                        .as_ref()
                        .is_some_and(|n| n.0.as_str() == TRANSACTION_STATE_TOPIC)
            })
            .map(|t| {
                let n = t.partitions.iter().map(|p| p.partition_index + 1).max();
                let mut epochs = vec![-1; n.unwrap_or(0).max(0) as usize];
                for p in &t.partitions {
                    if let Some(slot) = epochs.get_mut(p.partition_index as usize) {
                        *slot = p.leader_epoch;
                    }
                }
                epochs
            })
            .unwrap_or_default(),
        cluster_id: resp.cluster_id.as_ref().map(|c| c.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transactional_id_s_coordinator_partition_is_placed_as_kafka_places_it() {
        // Java: "hello".hashCode() == 99162322; "polygenelubricants".hashCode() ==
        // Integer.MIN_VALUE, which Utils.abs makes 0; a character outside the BMP counts as
        // its two UTF-16 code units (0xD83D * 31 + 0xDE00).
        assert_eq!(transaction_state_partition("hello", 50), 99162322 % 50);
        assert_eq!(transaction_state_partition("polygenelubricants", 50), 0);
        assert_eq!(
            transaction_state_partition("\u{1F600}", 1000),
            1772899 % 1000
        );
        assert_eq!(transaction_state_partition("", 50), 0);
    }

    #[test]
    fn a_transactional_id_s_coordinator_epoch_is_its_transaction_state_partition_s_leader_epoch() {
        let cfg = crate::config::load_str(
            "destination:\n  bootstrap: [\"127.0.0.1:1\"]\nlisteners:\n  client:\n    port_base: 9092\nadmin:\n  bind: 127.0.0.1:9180\n",
            "t.yaml",
        )
        .unwrap();
        let view = ClusterView::new(cfg.destination, Connector::plain(), Metrics::new());
        assert_eq!(view.transaction_coordinator_epoch("hello"), None);
        view.replace(Snapshot {
            transaction_state_epochs: (0..50).map(|p| p * 10).collect(),
            ..Snapshot::default()
        });
        assert_eq!(
            view.transaction_coordinator_epoch("hello"),
            Some((99162322 % 50) * 10)
        );
    }
}
