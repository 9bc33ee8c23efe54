//! Reading the log tails of a failover's partitions: this failover's barrier in each
//! ([`KafkaFailoverIo::find_barriers_in_logs`], when a failover resumes or is taken over: from
//! where the log ended before its first barrier when several instances recorded that) and the
//! batches that landed after it ([`KafkaFailoverIo::late_batches_in_logs`], the settle of writes
//! of unknown outcome), and reading back the markers just written. Per leader one connection:
//! the partitions' log offsets in one ListOffsets request ([`log_offsets`]) and their batches from
//! given offsets to their high watermark in Fetch requests naming every partition still to read
//! ([`read_tails`]); the leaders are asked concurrently ([`join_all`]). A failover over thousands
//! of partitions so makes a few round trips per leader, where it made a connection and three
//! round trips per partition, one partition after the other.
//!
//! Owns: those requests and the walk of their answers. Must not touch: what the batches mean
//! (the callers decide, through [`OwnBarrier`]), the records.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::FetchRequest;
use kafka_protocol::protocol::StrBytes;

use crate::client::KafkaClient;
use crate::protocol::barrier::parse_barrier;
use crate::protocol::batch::BatchWalker;

use super::{KafkaFailoverIo, NO_LEADER};
use crate::failover::{Found, FoundBarrier, PartitionKey, TailBatch};
use crate::mirror::own_barrier::OwnBarrier;
use crate::mirror::state::BarrierKind;

/// Bytes a Fetch asks for per partition, and in all.
const PARTITION_MAX_BYTES: i32 = 1024 * 1024;
const FETCH_MAX_BYTES: i32 = 32 * 1024 * 1024;

/// Per partition: the value, or why it could not be had.
pub(crate) type PerPartition<T> = HashMap<PartitionKey, Result<T, String>>;

/// `parts` grouped by topic, in first-seen order, for requests that name topics once.
fn by_topic<T: Clone>(parts: &[(PartitionKey, T)]) -> Vec<(String, Vec<(i32, T)>)> {
    let mut order: Vec<(String, Vec<(i32, T)>)> = Vec::new();
    let mut at: HashMap<&str, usize> = HashMap::new();
    for ((t, p), v) in parts {
        let i = *at.entry(t.as_str()).or_insert_with(|| {
            order.push((t.clone(), Vec::new()));
            order.len() - 1
        });
        order[i].1.push((*p, v.clone()));
    }
    order
}

/// The offset for `timestamp` (`client::EARLIEST`, `client::LATEST`) of every partition of
/// `parts` (all led by `c`'s broker), in one ListOffsets request.
pub(crate) async fn log_offsets(
    c: &mut KafkaClient,
    parts: &[PartitionKey],
    timestamp: i64,
) -> PerPartition<i64> {
    let req = crate::client::list_offsets_request(
        parts.iter().map(|(t, p)| (t.as_str(), *p)),
        timestamp,
        0,
    );
    let mut out: PerPartition<i64> = HashMap::new();
    match c.send(&req, 7).await {
        Ok(resp) => {
            for t in resp.topics {
                for p in t.partitions {
                    let k = (t.name.0.to_string(), p.partition_index);
                    let v = match p.error_code {
                        0 => Ok(p.offset),
                        code => Err(format!(
                            "ListOffsets for {}-{} failed with error code {code}",
                            k.0, k.1
                        )),
                    };
                    out.insert(k, v);
                }
            }
        }
        Err(e) => {
            let why = e.to_string();
            out.extend(parts.iter().map(|k| (k.clone(), Err(why.clone()))));
        }
    }
    for k in parts {
        out.entry(k.clone()).or_insert_with(|| {
            Err(format!(
                "ListOffsets response from {} has no entry for {}-{}",
                c.addr(),
                k.0,
                k.1
            ))
        });
    }
    out
}

/// One Fetch (READ_UNCOMMITTED, no waiting) of every partition of `from` at its offset.
fn fetch_request(from: &[(PartitionKey, i64)]) -> FetchRequest {
    FetchRequest::default()
        .with_replica_id((-1).into())
        .with_max_wait_ms(0)
        .with_min_bytes(0)
        .with_max_bytes(FETCH_MAX_BYTES)
        .with_isolation_level(0)
        .with_session_id(0)
        .with_session_epoch(-1)
        .with_topics(
            by_topic(from)
                .into_iter()
                .map(|(t, ps)| {
                    FetchTopic::default()
                        .with_topic(StrBytes::from_string(t).into())
                        .with_partitions(
                            ps.into_iter()
                                .map(|(p, offset)| {
                                    FetchPartition::default()
                                        .with_partition(p)
                                        .with_current_leader_epoch(-1)
                                        .with_fetch_offset(offset)
                                        .with_last_fetched_epoch(-1)
                                        .with_log_start_offset(-1)
                                        .with_partition_max_bytes(PARTITION_MAX_BYTES)
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
}

/// The batches of every partition of `from` (all led by `c`'s broker) from its offset to its
/// high watermark, as [`read_batches`] reads one: Fetch requests naming every partition not
/// read to its end yet; a round in which no partition got further (a batch larger than what a
/// Fetch returns for a partition that is not the first) reads those one at a time. `own` says
/// which batches are the failover's own barriers, per partition.
pub(crate) async fn read_tails<'a>(
    c: &mut KafkaClient,
    from: &[(PartitionKey, i64)],
    own: impl Fn(&PartitionKey) -> OwnBarrier<'a>,
) -> PerPartition<Vec<TailBatch>> {
    let mut out: PerPartition<Vec<TailBatch>> = HashMap::new();
    let mut read: HashMap<PartitionKey, Vec<TailBatch>> = HashMap::new();
    let mut pending: Vec<(PartitionKey, i64)> = from.to_vec();
    while !pending.is_empty() {
        let resp = match c.send(&fetch_request(&pending), 12).await {
            Ok(r) => r,
            Err(e) => {
                let why = e.to_string();
                out.extend(pending.drain(..).map(|(k, _)| (k, Err(why.clone()))));
                break;
            }
        };
        let mut answers: HashMap<PartitionKey, _> = HashMap::new();
        for t in resp.responses {
            let topic = t.topic.0.to_string();
            for p in t.partitions {
                answers.insert((topic.clone(), p.partition_index), p);
            }
        }
        let mut progressed = false;
        let mut next_round = Vec::new();
        for (k, at) in pending.drain(..) {
            let Some(p) = answers.remove(&k) else {
                next_round.push((k, at));
                continue;
            };
            if p.error_code != 0 {
                let why = format!(
                    "Fetch for {}-{} failed with error code {}",
                    k.0, k.1, p.error_code
                );
                out.insert(k, Err(why));
                continue;
            }
            let batches = read.entry(k.clone()).or_default();
            if at >= p.high_watermark {
                out.insert(k.clone(), Ok(std::mem::take(batches)));
                continue;
            }
            let records = p.records.unwrap_or_default();
            let next = walk(&records, at, &own(&k), batches);
            if next > at {
                progressed = true;
            }
            if next >= p.high_watermark {
                out.insert(k.clone(), Ok(std::mem::take(batches)));
            } else {
                next_round.push((k, next));
            }
        }
        if !progressed && !next_round.is_empty() {
            for (k, at) in next_round.drain(..) {
                let mut v = read.remove(&k).unwrap_or_default();
                let r = read_batches(c, &k.0, k.1, at, &own(&k)).await.map(|more| {
                    v.extend(more);
                    v
                });
                out.insert(k, r);
            }
        }
        pending = next_round;
    }
    out
}

impl KafkaFailoverIo {
    /// `ask` with a connection to the leader of each group of `keys`, the leaders at once: per
    /// partition its answer, or why there was none (no leader, no connection).
    pub(super) async fn on_each_leader<T, F, Fut>(
        &self,
        keys: &[PartitionKey],
        ask: F,
    ) -> PerPartition<T>
    where
        F: Fn(KafkaClient, Vec<PartitionKey>) -> Fut,
        Fut: Future<Output = PerPartition<T>>,
    {
        let (by_leader, leaderless) = self.by_leader(keys);
        let mut out: PerPartition<T> = leaderless
            .into_iter()
            .map(|k| (k, Err(NO_LEADER.to_string())))
            .collect();
        let ask = &ask;
        let per_leader = join_all(
            by_leader
                .into_iter()
                .map(|(addr, ps)| async move {
                    match self.cluster.client(&addr, self.timeout).await {
                        Ok(c) => ask(c, ps).await,
                        Err(e) => {
                            let why = format!("cannot connect to broker {addr}: {e}");
                            ps.into_iter().map(|k| (k, Err(why.clone()))).collect()
                        }
                    }
                })
                .collect(),
        )
        .await;
        for answers in per_leader {
            out.extend(answers);
        }
        out
    }

    /// This failover's barrier in the log tail of each of `parts` (the last one, when a late
    /// write made the failover write more than one): a data barrier carrying the failover id,
    /// or a control batch (ABORT marker) of the partition's `Option<i64>`, the control barrier's
    /// recorded producer id. Per leader one connection, two ListOffsets and usually one Fetch
    /// for all its partitions, the leaders at once. A partition whose log cannot be read is
    /// left out (not found).
    pub(super) async fn find_barriers_in_logs(
        &self,
        fid: &str,
        parts: &[(PartitionKey, Option<i64>, Option<i64>)],
    ) -> Found {
        let pids: HashMap<PartitionKey, Option<i64>> =
            parts.iter().map(|(k, p, _)| (k.clone(), *p)).collect();
        let lower: HashMap<PartitionKey, i64> = parts
            .iter()
            .filter_map(|(k, _, f)| Some((k.clone(), (*f)?)))
            .collect();
        let lower = &lower;
        let keys: Vec<PartitionKey> = parts.iter().map(|(k, _, _)| k.clone()).collect();
        let (by_leader, _leaderless) = self.by_leader(&keys);
        let own = |k: &PartitionKey| OwnBarrier {
            failover_id: fid,
            producer_id: pids.get(k).copied().flatten(),
        };
        let per_leader = join_all(
            by_leader
                .into_iter()
                .map(|(addr, ps)| async move {
                    let Ok(mut c) = self.cluster.client(&addr, self.timeout).await else {
                        return Found::new();
                    };
                    let ends = log_offsets(&mut c, &ps, crate::client::LATEST).await;
                    let starts = log_offsets(&mut c, &ps, crate::client::EARLIEST).await;
                    // From where the log ended before the failover's first barrier, when that
                    // was recorded (several instances: G3); else the barrier follows the last
                    // mirrored batch: look at the last few batches.
                    let from: Vec<(PartitionKey, i64)> = ps
                        .iter()
                        .filter_map(|k| {
                            let start = *starts.get(k)?.as_ref().ok()?;
                            let at = match lower.get(k) {
                                Some(f) => *f,
                                None => *ends.get(k)?.as_ref().ok()? - 64,
                            };
                            Some((k.clone(), at.max(start)))
                        })
                        .collect();
                    read_tails(&mut c, &from, own)
                        .await
                        .into_iter()
                        .filter_map(|(k, tail)| {
                            let b = tail.ok()?.iter().rev().find_map(|b| {
                                b.own_barrier.map(|kind| FoundBarrier {
                                    offset: b.base_offset,
                                    kind,
                                    producer_id: (kind == BarrierKind::Control)
                                        .then_some(b.producer_id),
                                })
                            })?;
                            Some((k, b))
                        })
                        .collect::<Found>()
                })
                .collect(),
        )
        .await;
        per_leader.into_iter().flatten().collect()
    }

    /// The batches of each of `parts` from its offset to its end that are not this failover's
    /// barrier (a control barrier's producer id per partition), read per leader as
    /// [`Self::find_barriers_in_logs`] reads.
    pub(super) async fn late_batches_in_logs(
        &self,
        fid: &str,
        parts: &[(PartitionKey, i64, Option<i64>)],
    ) -> PerPartition<Vec<TailBatch>> {
        let pids: HashMap<PartitionKey, Option<i64>> =
            parts.iter().map(|(k, _, p)| (k.clone(), *p)).collect();
        let from: HashMap<PartitionKey, i64> =
            parts.iter().map(|(k, f, _)| (k.clone(), *f)).collect();
        let keys: Vec<PartitionKey> = parts.iter().map(|(k, _, _)| k.clone()).collect();
        let own = |k: &PartitionKey| OwnBarrier {
            failover_id: fid,
            producer_id: pids.get(k).copied().flatten(),
        };
        let (from, own) = (&from, &own);
        self.on_each_leader(&keys, |mut c, ps| async move {
            let at: Vec<(PartitionKey, i64)> = ps
                .into_iter()
                .map(|k| {
                    let f = from.get(&k).copied().unwrap_or(0);
                    (k, f)
                })
                .collect();
            read_tails(&mut c, &at, own)
                .await
                .into_iter()
                .map(|(k, r)| {
                    let late = r.map(|all| {
                        all.into_iter()
                            .filter(|b| b.own_barrier.is_none())
                            .collect()
                    });
                    (k, late)
                })
                .collect()
        })
        .await
    }

    /// The last mirrored offset before each partition's barrier (`parts`: partition, the
    /// offset before which to look, the control barrier's producer id): the last offset of the
    /// last data batch before it, whoever mirrored it (review G15); -1 when there is none.
    /// Per leader one connection, one ListOffsets and a Fetch of the last 64 offsets before
    /// every barrier, the leaders at once; a partition whose last data batch lies further back
    /// is read backwards on its own ([`Self::last_data_before`]).
    pub(super) async fn last_data_before_many(
        &self,
        fid: &str,
        parts: &[(PartitionKey, i64, Option<i64>)],
    ) -> PerPartition<i64> {
        const WINDOW: i64 = 64;
        let pids: HashMap<PartitionKey, Option<i64>> =
            parts.iter().map(|(k, _, p)| (k.clone(), *p)).collect();
        let before: HashMap<PartitionKey, i64> =
            parts.iter().map(|(k, b, _)| (k.clone(), *b)).collect();
        let keys: Vec<PartitionKey> = parts.iter().map(|(k, _, _)| k.clone()).collect();
        let own = |k: &PartitionKey| OwnBarrier {
            failover_id: fid,
            producer_id: pids.get(k).copied().flatten(),
        };
        let (before, own_ref) = (&before, &own);
        // Per partition: found (`Some`), or to be read further back (`None`).
        let found = self
            .on_each_leader(&keys, |mut c, ps| async move {
                let starts = log_offsets(&mut c, &ps, crate::client::EARLIEST).await;
                let mut out: PerPartition<Option<i64>> = HashMap::new();
                let mut from = Vec::new();
                for k in ps {
                    let b = before.get(&k).copied().unwrap_or(0);
                    match starts.get(&k).cloned() {
                        Some(Ok(start)) if b <= start => {
                            out.insert(k, Ok(Some(-1)));
                        }
                        Some(Ok(start)) => from.push((k, (b - WINDOW).max(start))),
                        Some(Err(e)) => {
                            out.insert(k, Err(e));
                        }
                        None => {
                            out.insert(k, Err("no log start offset".into()));
                        }
                    }
                }
                let read_from: HashMap<PartitionKey, i64> = from.iter().cloned().collect();
                for (k, tail) in read_tails(&mut c, &from, own_ref).await {
                    let b = before.get(&k).copied().unwrap_or(0);
                    let at_start = matches!(
                        (read_from.get(&k), starts.get(&k)),
                        (Some(read), Some(Ok(start))) if read <= start
                    );
                    let r = tail.map(|batches| {
                        batches
                            .iter()
                            .filter(|t| t.base_offset < b && t.is_data && t.own_barrier.is_none())
                            .map(|t| t.last_offset.min(b - 1))
                            .max()
                            .or(at_start.then_some(-1))
                    });
                    out.insert(k, r);
                }
                out
            })
            .await;
        let mut out = PerPartition::new();
        for (k, r) in found {
            let r = match r {
                Ok(Some(l)) => Ok(l),
                Ok(None) => {
                    let b = before.get(&k).copied().unwrap_or(0);
                    self.last_data_before(&k.0, k.1, b - WINDOW, &own(&k)).await
                }
                Err(e) => Err(e),
            };
            out.insert(k, r);
        }
        out
    }

    /// The last offset of the last data batch before offset `before` (a barrier) in a
    /// partition's log, whoever mirrored it (review G15): control batches (markers, this
    /// failover's control barriers) and data barriers (of any failover) are not mirrored
    /// records. -1 when there is none down to the log start. Read backwards from `before`, a
    /// growing window at a time.
    pub(super) async fn last_data_before(
        &self,
        topic: &str,
        partition: i32,
        before: i64,
        own: &OwnBarrier<'_>,
    ) -> Result<i64, String> {
        let addr = self
            .leader_addr(topic, partition)
            .ok_or_else(|| NO_LEADER.to_string())?;
        let mut c = self
            .cluster
            .client(&addr, self.timeout)
            .await
            .map_err(|e| e.to_string())?;
        let start = c
            .list_offset(topic, partition, crate::client::EARLIEST)
            .await
            .map_err(|e| e.to_string())?;
        let mut until = before;
        let mut window = 64i64;
        while until > start {
            let from = until.saturating_sub(window).max(start);
            let mut last = None;
            let mut next = from;
            while next < until {
                let f = c
                    .fetch_partition(topic, partition, next, 1024 * 1024)
                    .await
                    .map_err(|e| e.to_string())?;
                let at = next;
                for item in BatchWalker::fetched(&f.records) {
                    let Ok((h, batch)) = item else { break };
                    if h.base_offset >= until {
                        next = until;
                        break;
                    }
                    let mirrored = !h.is_control()
                        && own.kind_of(&h, batch).is_none()
                        && !matches!(parse_barrier(batch), Ok(Some(_)));
                    if mirrored {
                        last = Some(h.last_offset().min(until - 1));
                    }
                    next = next.max(h.last_offset() + 1);
                }
                if next == at {
                    if at >= f.high_watermark {
                        break;
                    }
                    return Err(format!(
                        "no progress reading {topic}-{partition} at offset {at}"
                    ));
                }
            }
            if let Some(last) = last {
                return Ok(last);
            }
            until = from;
            window = window.saturating_mul(8);
        }
        Ok(-1)
    }
}

/// The batches of a partition from `from` to its high watermark.
async fn read_batches(
    c: &mut crate::client::KafkaClient,
    topic: &str,
    partition: i32,
    from: i64,
    own: &OwnBarrier<'_>,
) -> Result<Vec<TailBatch>, String> {
    let mut out = Vec::new();
    let mut from = from;
    loop {
        let f = c
            .fetch_partition(topic, partition, from, 1024 * 1024)
            .await
            .map_err(|e| e.to_string())?;
        if from >= f.high_watermark {
            return Ok(out);
        }
        let next = walk(&f.records, from, own, &mut out);
        if next == from {
            return Err(format!(
                "no progress reading {topic}-{partition} at offset {from}"
            ));
        }
        from = next;
    }
}

/// The complete batches of fetched `records` appended to `out` (a partial last batch is left
/// for the next read); returns the offset after the last one (`at` when there is none).
fn walk(records: &[u8], at: i64, own: &OwnBarrier<'_>, out: &mut Vec<TailBatch>) -> i64 {
    let mut next = at;
    for item in BatchWalker::fetched(records) {
        let Ok((h, batch)) = item else { break };
        out.push(TailBatch {
            base_offset: h.base_offset,
            producer_id: h.producer_id,
            producer_epoch: h.producer_epoch,
            max_timestamp: h.max_timestamp,
            own_barrier: own.kind_of(&h, batch),
            last_offset: h.last_offset(),
            is_data: !h.is_control() && !matches!(parse_barrier(batch), Ok(Some(_))),
        });
        next = h.last_offset() + 1;
    }
    next
}

/// Runs `futures` concurrently on the current task; their outputs in order.
pub(crate) async fn join_all<F: Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut futures: Vec<Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(move |cx: &mut Context<'_>| {
        let mut pending = false;
        for (f, o) in futures.iter_mut().zip(outputs.iter_mut()) {
            if o.is_none() {
                match f.as_mut().poll(cx) {
                    Poll::Ready(v) => *o = Some(v),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(outputs.iter_mut().filter_map(Option::take).collect())
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn join_all_runs_the_futures_together_and_keeps_their_order() {
        // The first can only end once the second ran: one at a time would never end.
        let (tx, rx) = tokio::sync::oneshot::channel::<u8>();
        let first: Pin<Box<dyn Future<Output = u8> + Send>> =
            Box::pin(async move { rx.await.unwrap_or(0) + 1 });
        let second: Pin<Box<dyn Future<Output = u8> + Send>> = Box::pin(async move {
            let _ = tx.send(1);
            7
        });
        let both = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            join_all(vec![first, second]),
        )
        .await;
        assert_eq!(both.ok(), Some(vec![2, 7]));
    }

    #[test]
    fn partitions_are_grouped_per_topic_in_first_seen_order() {
        let k = |t: &str, p: i32| ((t.to_string(), p), p as i64);
        let g = by_topic(&[k("b", 1), k("a", 0), k("b", 0)]);
        assert_eq!(
            g,
            vec![
                ("b".to_string(), vec![(1, 1), (0, 0)]),
                ("a".to_string(), vec![(0, 0)])
            ]
        );
    }
}
