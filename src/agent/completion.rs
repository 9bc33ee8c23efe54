//! What a failover report reads from the agent and the source once a failover completed: per
//! partition the offset map's next offsets (an unmatched map matched to the destination's tail
//! first), the source's log end and the timestamp of its first
//! record not mirrored (read from the source leader now, bounded in time), and the agent's last
//! known lag when the source cannot be read.
//!
//! Owns: those reads. Must not touch: the partition tasks (stopped by then), the report's shape.

use std::collections::HashMap;
use std::time::Duration;

use crate::client::{KafkaClient, PartitionRequestError, LATEST};
use crate::mirror::report::SourceAtCompletion;
use crate::protocol::batch::BatchWalker;

use super::{lock, Agent};

impl Agent {
    /// The figures of `parts` of `mirror` a completed failover's report needs (see the module
    /// doc); each source read is bounded by `timeout`.
    pub async fn at_completion(
        &self,
        mirror: &str,
        parts: &[(String, i32)],
        timeout: Duration,
    ) -> HashMap<(String, i32), SourceAtCompletion> {
        let mut out = HashMap::new();
        let Some(m) = self.mirror(mirror) else {
            return out;
        };
        // The maps another instance published may reach further than this one's (it ran the
        // agent, this one drove the failover on): they are taken. Every unmatched map (taken
        // so, or left short by a task stopped while matching its start or with an append's
        // outcome unknown) is matched to the destination's tail up to the barrier, and so is
        // each partition this instance has no mirrored range of (its owner died before it
        // published one). Off the failover's path: the partitions are STOPPED already.
        m.adopt_published_offsets();
        let mut todo: Vec<(String, i32)> = lock(&m.unmatched).iter().cloned().collect();
        {
            let maps = lock(&m.offsets);
            todo.extend(
                parts
                    .iter()
                    .filter(|(t, p)| maps.get(t, *p).and_then(|map| map.next()).is_none())
                    .cloned(),
            );
        }
        todo.sort();
        todo.dedup();
        // Matching reads the source: an instance that never ran the agent learns where its
        // leaders are first.
        m.know_source_leaders(parts, timeout).await;
        m.match_tails(todo).await;
        // One connection per source broker for all the partitions it leads, every broker read
        // at once: a broker that cannot be reached, or stops answering, costs one `timeout`,
        // not one per partition (a source data centre cut off with thousands of partitions
        // would hold the report for hours, and the forward listeners of other instances wait
        // for it).
        let mut by_broker: HashMap<String, Vec<PartitionFrom>> = HashMap::new();
        let mut known = Vec::with_capacity(parts.len());
        for (topic, partition) in parts {
            let next = lock(&m.offsets)
                .get(topic, *partition)
                .and_then(|map| map.next());
            // A task still there (this instance drove no stop), or the lag kept when the
            // failover stopped it.
            let k = (topic.clone(), *partition);
            let last_known = lock(&m.tasks)
                .get(&k)
                .and_then(|slot| slot.stats.last_known())
                .or_else(|| lock(&m.last_known).get(&k).copied());
            let leader = m
                .source_meta
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref()
                .and_then(|meta| meta.leader_addr(topic, *partition));
            if let (Some(addr), Some((next_src, _))) = (leader, next) {
                by_broker
                    .entry(addr)
                    .or_default()
                    .push((k.clone(), next_src));
            }
            known.push((k, next, last_known));
        }
        let mut reads = tokio::task::JoinSet::new();
        for (addr, parts) in by_broker {
            let connector = m.source_connector.clone();
            reads.spawn(read_broker(connector, addr, parts, timeout));
        }
        let mut read: HashMap<(String, i32), (i64, i64)> = HashMap::new();
        while let Some(done) = reads.join_next().await {
            read.extend(done.unwrap_or_default());
        }
        for (k, next, last_known) in known {
            let source = read.get(&k).copied();
            out.insert(
                k,
                SourceAtCompletion {
                    next,
                    source,
                    last_known,
                },
            );
        }
        out
    }
}

impl Agent {
    /// The ledger of what mirror `mirror`'s forward listener passed of the source's
    /// acknowledgements (`None`: the mirror has no forward listener).
    pub fn forwarded_acks(
        &self,
        mirror: &str,
    ) -> Option<std::sync::Arc<crate::mirror::forwarded_acks::ForwardedAcks>> {
        self.mirror(mirror)?.forwarded.clone()
    }

    /// Whether mirror `mirror`'s built-in agent runs on this instance now.
    pub fn runs_here(&self, mirror: &str) -> bool {
        self.mirror(mirror)
            .is_some_and(|m| lock(&m.owner_epoch).is_some())
    }

    /// Drop from mirror `mirror`'s ledger of forwarded acknowledgements what the agent has
    /// mirrored (its offset map's next source offset per partition), and the topics the mirror
    /// does not cover (their names kept). Where the agent runs on another instance, its maps as
    /// that instance last published them on the state topic count too (they lag what it
    /// mirrored: the ledger keeps more, never less).
    pub fn prune_forwarded(&self, mirror: &str) {
        let (Some(m), Some(acks)) = (self.mirror(mirror), self.forwarded_acks(mirror)) else {
            return;
        };
        let published: Option<crate::mirror::offset_map::MirrorOffsets> =
            match lock(&m.owner_epoch).is_some() {
                true => None,
                false => m
                    .controller
                    .published_agent_offsets(mirror)
                    .and_then(|v| serde_json::from_value(v).ok())
                    .filter(|o: &crate::mirror::offset_map::MirrorOffsets| o.mirror == mirror),
            };
        for (topic, partition) in acks.partitions() {
            if !m.owns(&topic) {
                acks.uncovered(&topic);
                continue;
            }
            // The offset map: it stays after a failover stopped the partition's task.
            let own = lock(&m.offsets)
                .get(&topic, partition)
                .and_then(|map| map.next());
            let theirs = published
                .as_ref()
                .and_then(|o| o.get(&topic, partition))
                .and_then(|map| map.next());
            if let Some(next) = own.max(theirs).map(|(next, _)| next) {
                acks.mirrored_to(&topic, partition, next);
            }
        }
    }

    /// What a completed failover's destination lacks of the records the source acknowledged
    /// through mirror `mirror`'s forward listener, from the offset maps' next source offsets
    /// read at completion (`read`).
    pub fn forwarded_loss(
        &self,
        mirror: &str,
        read: &HashMap<(String, i32), SourceAtCompletion>,
    ) -> Option<crate::mirror::forwarded_acks::ForwardedLoss> {
        let acks = self.forwarded_acks(mirror)?;
        let next = |t: &str, p: i32| {
            read.get(&(t.to_string(), p))
                .and_then(|r| r.next)
                .map(|(src, _)| src)
        };
        Some(acks.missing(&next))
    }
}

impl super::MirrorAgent {
    /// Reads the source's metadata when it names no leader for one of `parts`: an instance
    /// that did not run the agent never read it, and it drives a failover's report as well as
    /// the owner (found by the chaos run: its reports had no `rpo_records`).
    async fn know_source_leaders(&self, parts: &[(String, i32)], timeout: Duration) {
        let known = {
            let meta = self.source_meta.read().unwrap_or_else(|e| e.into_inner());
            meta.as_ref()
                .is_some_and(|meta| parts.iter().all(|(t, p)| meta.leader_addr(t, *p).is_some()))
        };
        if known {
            return;
        }
        let addrs = self.source.bootstrap.clone();
        match crate::client::mirror_ops::metadata(&self.source_connector, &addrs, timeout).await {
            Ok(meta) => {
                *self.source_meta.write().unwrap_or_else(|e| e.into_inner()) = Some(meta);
            }
            Err(e) => {
                tracing::warn!(mirror = %self.name, error = %e, "the source cannot be read for the failover report: its RPO figures stay unknown");
            }
        }
    }
}

/// A partition and the next source offset the agent would mirror there.
type PartitionFrom = ((String, i32), i64);

/// What [`read_source`] reads of each of `parts` (with its next source offset), through one
/// connection to their leader `addr`; each step bounded by `timeout`. A connection that fails
/// (or a read that times out) ends the broker's reads: its other partitions stay unread.
async fn read_broker(
    connector: crate::client::Connector,
    addr: String,
    parts: Vec<PartitionFrom>,
    timeout: Duration,
) -> Vec<((String, i32), (i64, i64))> {
    let mut out = Vec::with_capacity(parts.len());
    let connect = KafkaClient::connect_with(&connector, &addr, timeout);
    let Ok(Ok(mut c)) = tokio::time::timeout(timeout, connect).await else {
        return out;
    };
    for ((topic, partition), next) in parts {
        let read = read_source(&mut c, &topic, partition, next);
        match tokio::time::timeout(timeout, read).await {
            Ok(Ok(r)) => out.push(((topic, partition), r)),
            Ok(Err(PartitionRequestError::Client(_))) | Err(_) => break,
            Ok(Err(_)) => {}
        }
    }
    out
}

/// The source's log end of a partition and the timestamp of its first record at or after
/// `next` (-1 when there is none), read through `c`, a connection to its leader.
async fn read_source(
    c: &mut KafkaClient,
    topic: &str,
    partition: i32,
    next: i64,
) -> Result<(i64, i64), PartitionRequestError> {
    let end = c.list_offset(topic, partition, LATEST).await?;
    if end <= next {
        return Ok((end, -1));
    }
    let f = c.fetch_partition(topic, partition, next, 1 << 20).await?;
    let first_ts = BatchWalker::fetched(&f.records)
        .filter_map(Result::ok)
        .find(|(h, _)| h.last_offset() >= next)
        .map_or(-1, |(h, _)| h.base_timestamp);
    Ok((end, first_ts))
}
