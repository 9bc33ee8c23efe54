//! Rebuilding a partition's PSM from its snapshot plus the log tail on the destination (the log
//! is the source of truth), and the background maintenance of the registry: discovering tracked
//! partitions, rebuilding, expiry, snapshots, and the brokers' expiration settings. A failed
//! rebuild is retried; a passing failure (a new partition's leader not taken over yet) is logged
//! at debug until it lasts (`client::retry`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::DescribeConfigsRequest;
use kafka_protocol::protocol::StrBytes;
use tokio::sync::watch;

use crate::client::retry::{Lasting, Level};
use crate::client::{PartitionRequestError, EARLIEST};
use crate::cluster::ClusterView;
use crate::protocol::batch::{control_marker, BatchWalker, ControlType};

use super::registry::PsmRegistry;
use super::slot::{Rebuilt, SlotError};
use super::{Marker, PartitionPsm};

/// Why a rebuild failed (it is retried).
#[derive(Debug, thiserror::Error)]
pub enum RebuildError {
    #[error("{topic}-{partition}: no leader known")]
    NoLeader { topic: String, partition: i32 },
    #[error("{topic}-{partition}: {source}")]
    Request {
        topic: String,
        partition: i32,
        source: PartitionRequestError,
    },
    #[error("{topic}-{partition}: corrupt batch at offset {offset}: {reason}")]
    Corrupt {
        topic: String,
        partition: i32,
        offset: i64,
        reason: String,
    },
    #[error("{topic}-{partition}: {source}")]
    Install {
        topic: String,
        partition: i32,
        source: SlotError,
    },
}

impl RebuildError {
    /// A passing failure (no leader yet, a lost connection, a retriable answer): the next
    /// attempt may succeed.
    pub fn is_retriable(&self) -> bool {
        match self {
            RebuildError::NoLeader { .. } => true,
            RebuildError::Request { source, .. } => match source {
                PartitionRequestError::Partition(p) => {
                    crate::client::retry::is_retriable(p.error_code)
                }
                PartitionRequestError::Client(_) | PartitionRequestError::Missing { .. } => true,
            },
            RebuildError::Corrupt { .. } | RebuildError::Install { .. } => false,
        }
    }
}

/// What a rebuild read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RebuildStats {
    /// Offset the log was read from.
    pub from_offset: i64,
    /// Offset the log was read to (exclusive).
    pub to_offset: i64,
    /// Batches replayed.
    pub batches: usize,
    /// Whether a snapshot was the starting point.
    pub from_snapshot: bool,
}

const FETCH_MAX_BYTES: i32 = 8 * 1024 * 1024;

/// Replay the record batches of `records` (from a Fetch) into `psm`; returns the next offset to
/// read and the number of batches replayed.
/// A batch at `barrier` (the partition's own barrier) clears the state: nothing before it counts.
pub fn replay_records(
    psm: &mut PartitionPsm,
    records: &[u8],
    mut next: i64,
    barrier: Option<i64>,
) -> Result<(i64, usize), (i64, String)> {
    let mut n = 0;
    for item in BatchWalker::fetched(records) {
        let (h, batch) = item.map_err(|e| (next, e.to_string()))?;
        let last = h.last_offset();
        if last < next {
            continue; // before the requested offset (a fetch may start inside a batch)
        }
        if Some(h.base_offset) == barrier {
            psm.clear();
        } else if h.is_control() {
            match control_marker(&h, batch) {
                Ok(Some(m)) => {
                    let marker = match m.control_type {
                        ControlType::Commit => Some(Marker::Commit),
                        ControlType::Abort => Some(Marker::Abort),
                        ControlType::Other(_) => None,
                    };
                    if let Some(marker) = marker {
                        psm.replay_control(
                            h.producer_id,
                            h.producer_epoch,
                            marker,
                            m.coordinator_epoch.unwrap_or(0),
                            h.base_offset,
                            m.timestamp,
                        );
                    }
                }
                Ok(None) => {}
                Err(e) => return Err((h.base_offset, e.to_string())),
            }
        } else {
            let _ = psm.replay(&h, h.base_offset);
        }
        n += 1;
        next = last + 1;
    }
    Ok((next, n))
}

/// Rebuild one tracked partition: start from its snapshot (when `use_snapshot`) or the log start,
/// replay the log up to the high watermark, then install the result and the outcomes that
/// arrived meanwhile: the partition is ready (`slot.rs`, rows 1–5).
pub async fn rebuild_partition(
    registry: &PsmRegistry,
    cluster: &ClusterView,
    topic: &str,
    partition: i32,
    use_snapshot: bool,
    timeout: Duration,
) -> Result<RebuildStats, RebuildError> {
    let err = |source| RebuildError::Request {
        topic: topic.to_string(),
        partition,
        source,
    };
    let Some(slot) = registry.slot(topic, partition) else {
        return Ok(RebuildStats::default());
    };
    let barrier = slot
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .begin_rebuild();
    let leader = cluster
        .topic(topic)
        .and_then(|t| t.leaders.get(partition as usize).copied())
        .filter(|l| *l >= 0)
        .and_then(|l| cluster.broker_addr(l))
        .ok_or_else(|| RebuildError::NoLeader {
            topic: topic.to_string(),
            partition,
        })?;
    let mut client = cluster
        .client(&leader, timeout)
        .await
        .map_err(|e| err(e.into()))?;
    let log_start = client
        .list_offset(topic, partition, EARLIEST)
        .await
        .map_err(err)?;
    let (mut psm, mut next, from_snapshot) = match use_snapshot
        .then(|| registry.read_snapshot(topic, partition))
        .flatten()
    {
        Some((psm, last)) => (psm, (last + 1).max(log_start), true),
        // Everything before the partition's barrier is cleared there: start at the barrier
        // (review F14: a rebuild after a failover does not read the mirrored log again).
        None => (
            PartitionPsm::new(),
            log_start.max(barrier.unwrap_or(-1)),
            false,
        ),
    };
    let from_offset = next;
    let mut batches = 0;
    loop {
        let fetched = client
            .fetch_partition(topic, partition, next, FETCH_MAX_BYTES)
            .await
            .map_err(err)?;
        if next >= fetched.high_watermark {
            break;
        }
        let (after, n) = replay_records(&mut psm, &fetched.records, next, barrier).map_err(
            |(offset, reason)| RebuildError::Corrupt {
                topic: topic.to_string(),
                partition,
                offset,
                reason,
            },
        )?;
        batches += n;
        if after == next {
            // Nothing readable below the high watermark (e.g. a batch larger than the fetch size).
            return Err(RebuildError::Corrupt {
                topic: topic.to_string(),
                partition,
                offset: next,
                reason: "no complete batch in the fetched data".into(),
            });
        }
        next = after;
    }
    let rebuilt = Rebuilt {
        psm,
        from_offset,
        read_through: next - 1,
        from_snapshot,
        barrier,
    };
    let installed = slot
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .finish_rebuild(rebuilt, std::time::Instant::now());
    let kept = installed.map_err(|source| RebuildError::Install {
        topic: topic.to_string(),
        partition,
        source,
    })?;
    if kept > 0 {
        // The log before `from_offset` is gone (or cleared at the barrier); producers the
        // previous state knew only from there are still held by the broker (review F11e).
        tracing::info!(
            topic,
            partition,
            kept,
            log_start = from_offset,
            "kept producers whose records left the log (the broker keeps them until they expire)"
        );
    }
    registry.counters.rebuilds.inc();
    registry.counters.rebuild_batches.inc_by(batches as u64);
    Ok(RebuildStats {
        from_offset,
        to_offset: next,
        batches,
        from_snapshot,
    })
}

/// Read `producer.id.expiration.ms` and `producer.id.expiration.check.interval.ms` from a
/// destination broker. Missing values are `None` (the broker's defaults apply).
pub async fn broker_expiration(
    cluster: &ClusterView,
    addr: &str,
    node_id: i32,
    timeout: Duration,
) -> Result<(Option<i64>, Option<i64>), crate::client::ClientError> {
    let mut client = cluster.client(addr, timeout).await?;
    let req =
        DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(4)
            .with_resource_name(StrBytes::from_string(node_id.to_string()))
            .with_configuration_keys(Some(vec![
                StrBytes::from_static_str("producer.id.expiration.ms"),
                StrBytes::from_static_str("producer.id.expiration.check.interval.ms"),
            ]))]);
    let resp = client.send(&req, 4).await?;
    let mut expiration = None;
    let mut interval = None;
    for r in &resp.results {
        for c in &r.configs {
            let v = c
                .value
                .as_ref()
                .and_then(|v| v.as_str().parse::<i64>().ok());
            match c.name.as_str() {
                "producer.id.expiration.ms" => expiration = v,
                "producer.id.expiration.check.interval.ms" => interval = v,
                _ => {}
            }
        }
    }
    Ok((expiration, interval))
}

/// How often the brokers' producer-id expiration settings are read again (they are dynamic
/// broker configs and may differ per broker).
const EXPIRY_SETTINGS_REFRESH: Duration = Duration::from_secs(60);

/// How often transactions the producer state holds open are checked against the brokers.
const OPEN_TRANSACTIONS_CHECK: Duration = Duration::from_secs(5);

/// Review F11f: transaction markers are written by the coordinator straight to the leaders, so
/// the gateway never sees a transaction end. For every partition whose state holds a
/// transaction open, ask its leader (DescribeProducers) and take the broker's word on those
/// producers (see [`PartitionPsm::settle_transaction`]). Failures are logged and retried at
/// the next check.
pub async fn settle_open_transactions(
    registry: &PsmRegistry,
    cluster: &ClusterView,
    timeout: Duration,
) {
    use kafka_protocol::messages::describe_producers_request::TopicRequest;
    use kafka_protocol::messages::DescribeProducersRequest;
    for ((topic, partition), seen) in registry.open_transactions() {
        let Some(addr) = cluster
            .topic(&topic)
            .and_then(|t| t.leaders.get(partition as usize).copied())
            .filter(|l| *l >= 0)
            .and_then(|l| cluster.broker_addr(l))
        else {
            continue;
        };
        let req = DescribeProducersRequest::default().with_topics(vec![TopicRequest::default()
            .with_name(StrBytes::from_string(topic.clone()).into())
            .with_partition_indexes(vec![partition])]);
        let answer = async {
            let mut c = cluster
                .client(&addr, timeout)
                .await
                .map_err(|e| e.to_string())?;
            c.send(&req, 0).await.map_err(|e| e.to_string())
        }
        .await;
        let resp = match answer {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(topic, partition, error = %e, "cannot ask the leader which transactions are open");
                continue;
            }
        };
        let Some(p) = resp
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter())
            .find(|p| p.partition_index == partition && p.error_code == 0)
        else {
            continue;
        };
        let broker: std::collections::HashMap<i64, super::partition::BrokerTxnState> = p
            .active_producers
            .iter()
            .map(|a| {
                (
                    a.producer_id.0,
                    super::partition::BrokerTxnState {
                        epoch: a.producer_epoch as i16,
                        coordinator_epoch: a.coordinator_epoch,
                        txn_start_offset: a.current_txn_start_offset,
                        last_timestamp: a.last_timestamp,
                    },
                )
            })
            .collect();
        let n = registry.settle_transactions(&topic, partition, &seen, &broker);
        if n > 0 {
            tracing::debug!(
                topic,
                partition,
                settled = n,
                "transactions ended by markers the gateway did not see"
            );
        }
    }
}

/// Read `producer.id.expiration.ms` and its check interval from every destination broker and
/// keep the largest of each (review F11c): a producer id lives in the brokers as long as the
/// longest-keeping broker keeps it, and screening must not end before. A broker that does not
/// answer leaves the settings as they are unless another answers with a larger value.
pub async fn read_expiry_settings(
    registry: &PsmRegistry,
    cluster: &ClusterView,
    timeout: Duration,
) {
    let mut answers: Vec<(i32, i64, i64)> = Vec::new();
    let mut failed = 0usize;
    for (node, addr) in cluster.brokers() {
        match broker_expiration(cluster, &addr, node, timeout).await {
            Ok((e, i)) => answers.push((
                node,
                e.unwrap_or(super::registry::DEFAULT_EXPIRATION_MS),
                i.unwrap_or(super::registry::DEFAULT_CHECK_INTERVAL_MS),
            )),
            Err(e) => {
                failed += 1;
                tracing::warn!(node, error = %e, "cannot read producer-id expiration from a destination broker");
            }
        }
    }
    let Some(expiration) = answers.iter().map(|a| a.1).max() else {
        return;
    };
    let interval = answers.iter().map(|a| a.2).max().unwrap_or(0);
    let (expiration, interval) = if failed > 0 {
        (
            expiration.max(registry.expiration_ms()),
            interval.max(registry.check_interval_ms()),
        )
    } else {
        (expiration, interval)
    };
    if (expiration, interval) == (registry.expiration_ms(), registry.check_interval_ms()) {
        return;
    }
    if answers
        .iter()
        .any(|a| (a.1, a.2) != (answers[0].1, answers[0].2))
    {
        tracing::warn!(
            ?answers,
            "destination brokers differ in producer-id expiration (node, expiration ms, check interval ms); the largest are used"
        );
    }
    registry.set_expiration(expiration, interval);
    tracing::info!(
        expiration_ms = expiration,
        check_interval_ms = interval,
        brokers = answers.len(),
        "producer-id expiration read from the destination brokers"
    );
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Keep the registry in step with the destination until `shutdown`: track the partitions of
/// mirror topics, rebuild those that need it, expire producers, write snapshots.
pub async fn maintain(
    registry: Arc<PsmRegistry>,
    cluster: Arc<ClusterView>,
    expiration_overridden: bool,
    snapshot_interval: Duration,
    timeout: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut last_settings_read: Option<tokio::time::Instant> = None;
    let mut last_expiry = tokio::time::Instant::now();
    let mut last_snapshot = tokio::time::Instant::now();
    let mut first_rebuild_done = false;
    let mut last_txn_check = tokio::time::Instant::now();
    // Per partition, its failed rebuilds since its last one (a fresh topic's leader answers
    // NOT_LEADER_OR_FOLLOWER for its first moments: quiet until it lasts).
    let mut failing: HashMap<(String, i32), Lasting> = HashMap::new();
    // Test hook: hold the first rebuilds for this long after start (a slow rebuild of a large
    // partition), so a failover called meanwhile can be shown to wait for them.
    let hold_until = tokio::time::Instant::now()
        + Duration::from_millis(
            std::env::var("MIRRORGATE_TEST_HOLD_PSM_REBUILD_MS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
        );
    loop {
        if cluster.is_known() && tokio::time::Instant::now() >= hold_until {
            // Track every partition of every mirror topic the destination has.
            let topics = cluster.topic_names();
            for t in topics.iter().filter(|t| registry.tracks(t)) {
                if let Some(info) = cluster.topic(t) {
                    for p in 0..info.leaders.len() as i32 {
                        registry.slot(t, p);
                    }
                }
            }
            registry.retain(|t, p| {
                cluster
                    .topic(t)
                    .is_some_and(|i| (p as usize) < i.leaders.len())
            });
            if !expiration_overridden
                && last_settings_read
                    .is_none_or(|t: tokio::time::Instant| t.elapsed() >= EXPIRY_SETTINGS_REFRESH)
            {
                read_expiry_settings(&registry, &cluster, timeout).await;
                last_settings_read = Some(tokio::time::Instant::now());
            }
            if last_txn_check.elapsed() >= OPEN_TRANSACTIONS_CHECK {
                settle_open_transactions(&registry, &cluster, timeout).await;
                last_txn_check = tokio::time::Instant::now();
            }
            for (topic, partition) in registry.wanting_rebuild() {
                // After start, snapshots are a starting point; after a divergence, the log is.
                let use_snapshot = !first_rebuild_done;
                match rebuild_partition(
                    &registry,
                    &cluster,
                    &topic,
                    partition,
                    use_snapshot,
                    timeout,
                )
                .await
                {
                    Ok(stats) => {
                        failing.remove(&(topic.clone(), partition));
                        tracing::info!(
                            topic,
                            partition,
                            from = stats.from_offset,
                            to = stats.to_offset,
                            batches = stats.batches,
                            from_snapshot = stats.from_snapshot,
                            "producer state rebuilt"
                        )
                    }
                    Err(e) => {
                        let level = failing
                            .entry((topic.clone(), partition))
                            .or_default()
                            .failed(e.is_retriable(), std::time::Instant::now());
                        match level {
                            Level::Warn => {
                                tracing::warn!(error = %e, "producer state rebuild failed; retrying")
                            }
                            Level::Quiet => {
                                tracing::debug!(error = %e, "producer state rebuild: a passing answer; retried")
                            }
                        }
                    }
                }
                if *shutdown.borrow() {
                    return;
                }
            }
            if registry.not_ready().is_empty() {
                first_rebuild_done = true;
                registry.set_initialized();
            }
            let interval = Duration::from_millis(registry.check_interval_ms().max(1000) as u64);
            if last_expiry.elapsed() >= interval {
                let n = registry.expire(now_ms());
                if n > 0 {
                    tracing::info!(expired = n, "expired producers the brokers no longer hold");
                }
                last_expiry = tokio::time::Instant::now();
            }
            if last_snapshot.elapsed() >= snapshot_interval {
                registry.write_snapshots();
                last_snapshot = tokio::time::Instant::now();
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            _ = shutdown.changed() => {
                registry.write_snapshots();
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::PartitionError;
    use kafka_protocol::messages::ApiKey;

    fn answered(code: i16) -> RebuildError {
        RebuildError::Request {
            topic: "t".into(),
            partition: 0,
            source: PartitionRequestError::Partition(PartitionError {
                api: ApiKey::ListOffsets,
                topic: "t".into(),
                partition: 0,
                error_code: code,
            }),
        }
    }

    #[test]
    fn a_new_partitions_leader_not_taken_over_yet_is_a_passing_rebuild_failure() {
        // NOT_LEADER_OR_FOLLOWER, the answer of a just-created partition's leader.
        assert!(answered(6).is_retriable());
        assert!(RebuildError::NoLeader {
            topic: "t".into(),
            partition: 0
        }
        .is_retriable());
        // TOPIC_AUTHORIZATION_FAILED lasts.
        assert!(!answered(29).is_retriable());
    }
}
