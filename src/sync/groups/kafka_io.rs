//! The group offset sync's [`GroupIo`] over the clusters: requests go straight to the brokers
//! (the source through the agent's source connector, the destination through the cluster
//! view's connector), never through the gateway's listeners.
//!
//! - groups: ListGroups (v5) on every broker of the cluster (each answers for the groups it
//!   coordinates); on the source only classic and consumer-protocol groups;
//! - offsets: FindCoordinator (v4) then OffsetFetch (v8) on the group's coordinator;
//! - "active on the destination": a listed group whose state is neither empty nor dead;
//! - commits: OffsetCommit (v8) with generation -1 and no member id, the admin-style commit
//!   Kafka accepts only for a group without members (a member that joined since the listing
//!   makes it refuse: reported as [`CommitOutcome::GroupActive`]);
//! - log start: ListOffsets on the destination partition's leader;
//! - the source side of the consistent cut ([`source`]): the mirror's partitions as the source
//!   has them, log ends, and the unmirrored records' batch headers.
//!
//! Connections are kept between requests and dropped on any error. Errors say whether asking
//! again may succeed ([`IoError::retriable`]): a lost connection, a leader or coordinator not
//! known yet, and the answers Kafka calls retriable (`client::retry`) — a destination that has
//! no `__consumer_offsets` yet answers FindCoordinator COORDINATOR_NOT_AVAILABLE until it has
//! created it.
//!
//! Owns: those requests and their error mapping. Must not touch: the sync's rules (`policy`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestGroup;
use kafka_protocol::messages::{
    FindCoordinatorRequest, ListGroupsRequest, OffsetCommitRequest, OffsetFetchRequest,
};
use kafka_protocol::protocol::StrBytes;

use crate::client::{Connector, KafkaClient, PartitionRequestError, EARLIEST};
use crate::cluster::ClusterView;
use crate::config::{ClusterConfig, TopicRouter};
use crate::controller::MirrorController;
use crate::mirror::offset_map::PartitionMap;
use crate::mirror::PartitionState;

use super::io::{CommitOutcome, GroupIo, IoError, RoundKind, Scan, Tp};

mod source;

/// The agent's offset map of a partition of this mirror.
pub type MapLookup = Arc<dyn Fn(&str, i32) -> Option<PartitionMap> + Send + Sync>;
/// Whether the agent has mirrored transactional batches or markers into a partition.
pub type TxnLookup = Arc<dyn Fn(&str, i32) -> bool + Send + Sync>;

const GROUP_ID_NOT_FOUND: i16 = 69;
/// Error codes of a commit refused because the group has members or a generation.
const ACTIVE_GROUP_ERRORS: [i16; 5] = [
    22,  // ILLEGAL_GENERATION
    25,  // UNKNOWN_MEMBER_ID
    27,  // REBALANCE_IN_PROGRESS
    82,  // FENCED_INSTANCE_ID
    113, // STALE_MEMBER_EPOCH
];

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Side {
    Source,
    Destination,
}

/// The real I/O of one mirror's sync.
pub struct KafkaGroupIo {
    mirror: String,
    source: ClusterConfig,
    source_connector: Connector,
    cluster: Arc<ClusterView>,
    dest_timeout: Duration,
    router: TopicRouter,
    idx: usize,
    controller: Arc<MirrorController>,
    maps: MapLookup,
    txns: Option<TxnLookup>,
    conns: tokio::sync::Mutex<HashMap<(Side, String), KafkaClient>>,
    /// Per partition, a range of source offsets proven free of transactional batches.
    clean: std::sync::Mutex<HashMap<Tp, (i64, i64)>>,
}

impl KafkaGroupIo {
    /// The I/O of mirror `mirror` (index `idx` in the configuration).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        mirror: &str,
        idx: usize,
        source: ClusterConfig,
        source_connector: Connector,
        cluster: Arc<ClusterView>,
        dest_timeout: Duration,
        router: TopicRouter,
        controller: Arc<MirrorController>,
        maps: MapLookup,
    ) -> Self {
        KafkaGroupIo {
            mirror: mirror.to_string(),
            dest_timeout,
            source,
            source_connector,
            cluster,
            router,
            idx,
            controller,
            maps,
            txns: None,
            conns: tokio::sync::Mutex::new(HashMap::new()),
            clean: std::sync::Mutex::new(HashMap::new()),
        }
    }

    /// Where the sync learns which partitions carry transactions (the agent's tasks).
    pub fn with_transactions(mut self, txns: TxnLookup) -> Self {
        self.txns = Some(txns);
        self
    }

    fn timeout(&self, side: Side) -> Duration {
        match side {
            Side::Source => Duration::from_millis(self.source.connect_timeout_ms),
            Side::Destination => self.dest_timeout,
        }
    }

    /// Send `req` to `addr`, on a kept connection; a failed one is dropped.
    async fn send<R: kafka_protocol::protocol::Request>(
        &self,
        side: Side,
        addr: &str,
        req: &R,
        version: i16,
    ) -> Result<R::Response, IoError> {
        let mut conns = self.conns.lock().await;
        let key = (side, addr.to_string());
        let mut client = match conns.remove(&key) {
            Some(c) => c,
            None => {
                let timeout = self.timeout(side);
                let r = match side {
                    Side::Source => {
                        KafkaClient::connect_with(&self.source_connector, addr, timeout).await
                    }
                    Side::Destination => self.cluster.client(addr, timeout).await,
                };
                r.map_err(|e| IoError::retriable(e.to_string()))?
            }
        };
        let resp = client
            .send(req, version)
            .await
            .map_err(|e| IoError::retriable(e.to_string()))?;
        conns.insert(key, client);
        Ok(resp)
    }

    async fn brokers(&self, side: Side) -> Result<Vec<String>, IoError> {
        match side {
            Side::Destination => Ok(self.cluster.brokers().into_iter().map(|(_, a)| a).collect()),
            Side::Source => {
                let meta = self.source_meta(Some(&[])).await?;
                Ok(meta.brokers.into_values().collect())
            }
        }
    }

    /// (group id, state) of every group on every broker of `side`.
    async fn list_groups(&self, side: Side) -> Result<Vec<(String, String)>, IoError> {
        let brokers = self.brokers(side).await?;
        if brokers.is_empty() {
            return Err(IoError::retriable(format!(
                "no {} broker known",
                side_name(side)
            )));
        }
        let types = match side {
            Side::Source => vec![
                StrBytes::from_static_str("classic"),
                StrBytes::from_static_str("consumer"),
            ],
            Side::Destination => Vec::new(),
        };
        let req = ListGroupsRequest::default().with_types_filter(types);
        let mut out = Vec::new();
        for addr in brokers {
            let resp = self.send(side, &addr, &req, 5).await?;
            if resp.error_code != 0 {
                return Err(IoError::answer(
                    resp.error_code,
                    format!("ListGroups on {addr}: error code {}", resp.error_code),
                ));
            }
            out.extend(
                resp.groups
                    .into_iter()
                    .map(|g| (g.group_id.0.to_string(), g.group_state.to_string())),
            );
        }
        Ok(out)
    }

    async fn coordinator(&self, side: Side, group: &str) -> Result<String, IoError> {
        let brokers = match side {
            Side::Source => self.source.bootstrap.clone(),
            Side::Destination => self.brokers(side).await?,
        };
        let req = FindCoordinatorRequest::default()
            .with_key_type(0)
            .with_coordinator_keys(vec![StrBytes::from_string(group.to_string())]);
        let mut last = IoError::retriable(format!("no {} broker known", side_name(side)));
        for addr in brokers {
            match self.send(side, &addr, &req, 4).await {
                Ok(resp) => {
                    let Some(c) = resp.coordinators.into_iter().next() else {
                        last =
                            IoError::retriable(format!("FindCoordinator on {addr}: empty answer"));
                        continue;
                    };
                    if c.error_code != 0 {
                        return Err(IoError::answer(
                            c.error_code,
                            format!("FindCoordinator for {group:?}: error code {}", c.error_code),
                        ));
                    }
                    return Ok(format!("{}:{}", c.host, c.port));
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    async fn offsets(&self, side: Side, group: &str) -> Result<BTreeMap<Tp, i64>, IoError> {
        let addr = self.coordinator(side, group).await?;
        let req =
            OffsetFetchRequest::default().with_groups(vec![OffsetFetchRequestGroup::default()
                .with_group_id(StrBytes::from_string(group.to_string()).into())
                .with_topics(None)]);
        let resp = self.send(side, &addr, &req, 8).await?;
        let mut out = BTreeMap::new();
        for g in resp.groups {
            if g.error_code == GROUP_ID_NOT_FOUND {
                continue;
            }
            if g.error_code != 0 {
                return Err(IoError::answer(
                    g.error_code,
                    format!(
                        "OffsetFetch for {group:?} on {addr}: error code {}",
                        g.error_code
                    ),
                ));
            }
            for t in g.topics {
                for p in t.partitions {
                    if p.error_code == 0 && p.committed_offset >= 0 {
                        out.insert(
                            (t.name.0.to_string(), p.partition_index),
                            p.committed_offset,
                        );
                    }
                }
            }
        }
        Ok(out)
    }
}

fn side_name(side: Side) -> &'static str {
    match side {
        Side::Source => "source",
        Side::Destination => "destination",
    }
}

impl GroupIo for KafkaGroupIo {
    fn owns(&self, topic: &str) -> bool {
        self.router.mirror_index(topic) == Some(self.idx)
    }

    fn partition_map(&self, topic: &str, partition: i32) -> Option<PartitionMap> {
        (self.maps)(topic, partition)
    }

    fn may_sync(&self, topic: &str, partition: i32, kind: RoundKind) -> bool {
        match kind {
            RoundKind::Periodic => matches!(
                self.controller.state_of(topic, partition),
                Some(PartitionState::Mirroring | PartitionState::Paused)
            ),
            RoundKind::Final => self
                .controller
                .records()
                .into_iter()
                .filter(|(r, _)| r.name == self.mirror)
                .flat_map(|(r, _)| r.partitions)
                .any(|p| {
                    p.topic == topic
                        && p.partition == partition
                        && match p.state {
                            PartitionState::Mirroring | PartitionState::Paused => true,
                            PartitionState::Stopping => p.step.is_none(),
                            _ => false,
                        }
                }),
        }
    }

    async fn mirror_partitions(&self) -> Result<Vec<Tp>, IoError> {
        self.source_partitions().await
    }

    async fn scan_transactions(
        &self,
        ranges: &[(Tp, i64, i64)],
    ) -> Result<BTreeMap<Tp, Scan>, IoError> {
        self.scan(ranges).await
    }

    fn carries_transactions(&self, topic: &str, partition: i32) -> bool {
        self.txns.as_ref().is_some_and(|f| f(topic, partition))
    }

    async fn source_ends(&self, partitions: &[Tp]) -> Result<BTreeMap<Tp, (i64, i64)>, IoError> {
        self.ends(partitions).await
    }

    async fn source_groups(&self) -> Result<Vec<String>, IoError> {
        Ok(self
            .list_groups(Side::Source)
            .await?
            .into_iter()
            .map(|(g, _)| g)
            .collect())
    }

    async fn source_offsets(&self, group: &str) -> Result<BTreeMap<Tp, i64>, IoError> {
        self.offsets(Side::Source, group).await
    }

    async fn destination_active_groups(&self) -> Result<HashSet<String>, IoError> {
        Ok(self
            .list_groups(Side::Destination)
            .await?
            .into_iter()
            .filter(|(_, state)| {
                !state.eq_ignore_ascii_case("empty") && !state.eq_ignore_ascii_case("dead")
            })
            .map(|(g, _)| g)
            .collect())
    }

    async fn destination_offsets(&self, group: &str) -> Result<BTreeMap<Tp, i64>, IoError> {
        self.offsets(Side::Destination, group).await
    }

    async fn destination_log_starts(
        &self,
        partitions: &[Tp],
    ) -> Result<BTreeMap<Tp, i64>, IoError> {
        let mut by_leader: BTreeMap<String, Vec<Tp>> = BTreeMap::new();
        for (topic, partition) in partitions {
            let leader = self
                .cluster
                .topic(topic)
                .and_then(|t| t.leaders.get(*partition as usize).copied())
                .and_then(|l| self.cluster.broker_addr(l))
                .ok_or_else(|| {
                    IoError::retriable(format!("no known leader of {topic}-{partition}"))
                })?;
            by_leader
                .entry(leader)
                .or_default()
                .push((topic.clone(), *partition));
        }
        let mut out = BTreeMap::new();
        for (leader, tps) in by_leader {
            let mut c = self
                .cluster
                .client(&leader, self.dest_timeout)
                .await
                .map_err(|e| IoError::retriable(e.to_string()))?;
            let starts = c.list_offsets(&tps, EARLIEST).await.map_err(|e| match &e {
                PartitionRequestError::Partition(p) => IoError::answer(p.error_code, e.to_string()),
                _ => IoError::retriable(e.to_string()),
            })?;
            out.extend(starts);
        }
        Ok(out)
    }

    async fn commit(&self, group: &str, offsets: &[(Tp, i64)]) -> Result<CommitOutcome, IoError> {
        let addr = self.coordinator(Side::Destination, group).await?;
        let mut topics: BTreeMap<&str, Vec<OffsetCommitRequestPartition>> = BTreeMap::new();
        for ((t, p), o) in offsets {
            topics.entry(t).or_default().push(
                OffsetCommitRequestPartition::default()
                    .with_partition_index(*p)
                    .with_committed_offset(*o)
                    .with_committed_leader_epoch(-1)
                    .with_committed_metadata(Some(StrBytes::from_static_str(""))),
            );
        }
        let req = OffsetCommitRequest::default()
            .with_group_id(StrBytes::from_string(group.to_string()).into())
            .with_generation_id_or_member_epoch(-1)
            .with_member_id(StrBytes::from_static_str(""))
            .with_group_instance_id(None)
            .with_topics(
                topics
                    .into_iter()
                    .map(|(t, ps)| {
                        OffsetCommitRequestTopic::default()
                            .with_name(StrBytes::from_string(t.to_string()).into())
                            .with_partitions(ps)
                    })
                    .collect(),
            );
        let resp = self.send(Side::Destination, &addr, &req, 8).await?;
        let codes: Vec<i16> = resp
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
            .filter(|c| *c != 0)
            .collect();
        match codes.first() {
            None => Ok(CommitOutcome::Committed),
            Some(c) if ACTIVE_GROUP_ERRORS.contains(c) => Ok(CommitOutcome::GroupActive),
            Some(c) => Err(IoError::answer(
                *c,
                format!("OffsetCommit for {group:?} on {addr}: error code {c}"),
            )),
        }
    }
}
