//! Writing barriers: control batches (WriteTxnMarkers, read back from the log for their
//! offset) and data barriers (one Produce, acks=all), grouped per leader, with the fallback from
//! the one to the other (`failover.barrier: auto`).
//!
//! Owns: the barrier write requests and the reading of their outcomes. Must not touch: the
//! records (the executor records what is returned).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;

use bytes::Bytes;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::ProduceRequest;
use kafka_protocol::protocol::StrBytes;

use crate::config::BarrierMode;
use crate::protocol::barrier::{encode_barrier_batch, BarrierValue, BARRIER_TIMESTAMP};

use super::tails::{join_all, log_offsets, read_tails};
use super::{KafkaFailoverIo, NO_LEADER};
use crate::failover::{BarrierWrites, FailoverIo, Found, FoundBarrier, PartitionKey};
use crate::mirror::own_barrier::OwnBarrier;
use crate::mirror::screening::now_ms;
use crate::mirror::state::{BarrierKind, BarrierProducer};

impl KafkaFailoverIo {
    /// Write the barriers of `parts`, grouped per leader: with `producer`, a control batch
    /// (one WriteTxnMarkers request per leader), falling back to a data barrier where
    /// `failover.barrier` is `auto` and the leader refuses WriteTxnMarkers for authorization or
    /// does not support it; without, a data barrier (one Produce request, acks=all, per leader).
    /// Returns the barriers written, and the partitions that failed and why (a partition
    /// without a leader fails alone; the others are still written).
    pub(super) async fn write_barriers(
        &self,
        name: &str,
        fid: &str,
        producer: Option<BarrierProducer>,
        parts: &[PartitionKey],
    ) -> BarrierWrites {
        let mut out = HashMap::new();
        let mut failed = Vec::new();
        let mut reason = String::new();
        if self.failing_barrier_writes.fetch_sub(1, Ordering::SeqCst) > 0 {
            let failed = parts.to_vec();
            return BarrierWrites {
                written: out,
                failed,
                reason: "barrier write failed (MIRRORGATE_TEST_FAIL_BARRIER_WRITES)".into(),
            };
        }
        if crate::mirror::fault_hooks::Sabotage::Barrier.is_on() {
            return self.pretend_barriers_written(parts).await;
        }
        let (by_leader, leaderless) = self.by_leader(parts);
        if !leaderless.is_empty() {
            reason = NO_LEADER.into();
            failed.extend(leaderless);
        }
        // Every leader at once: each is one connection and a few requests for all its
        // partitions.
        let per_leader = join_all(
            by_leader
                .into_iter()
                .map(|(addr, ps)| self.write_on_leader(name, fid, producer, addr, ps))
                .collect(),
        )
        .await;
        for w in per_leader {
            out.extend(w.written);
            if !w.failed.is_empty() {
                failed.extend(w.failed);
                reason = w.reason;
            }
        }
        BarrierWrites {
            written: out,
            failed,
            reason,
        }
    }

    /// `MIRRORGATE_TEST_SABOTAGE=barrier`: nothing is written; each partition's barrier is
    /// reported at its log end, as if it had been appended there.
    async fn pretend_barriers_written(&self, parts: &[PartitionKey]) -> BarrierWrites {
        tracing::error!(
            partitions = parts.len(),
            "MIRRORGATE_TEST_SABOTAGE=barrier: no barrier written"
        );
        let (ends, failed, reason) = FailoverIo::log_ends(self, parts).await;
        let written = ends
            .into_iter()
            .map(|(k, offset)| {
                let b = FoundBarrier {
                    offset,
                    kind: BarrierKind::Data,
                    producer_id: None,
                };
                (k, b)
            })
            .collect();
        BarrierWrites {
            written,
            failed,
            reason,
        }
    }

    /// The barriers of `ps`, all led by `addr` (see [`Self::write_barriers`]).
    async fn write_on_leader(
        &self,
        name: &str,
        fid: &str,
        producer: Option<BarrierProducer>,
        addr: String,
        ps: Vec<PartitionKey>,
    ) -> BarrierWrites {
        let mut w = BarrierWrites::default();
        let (out, failed, reason) = (&mut w.written, &mut w.failed, &mut w.reason);
        let data: Vec<PartitionKey> = match producer {
            Some(producer) if self.barrier_mode != BarrierMode::Data => {
                let refused = self
                    .write_control_barriers(name, &addr, producer, &ps, out, failed, reason)
                    .await;
                let refused: HashSet<&PartitionKey> = refused.iter().collect();
                ps.iter().filter(|p| refused.contains(p)).cloned().collect()
            }
            _ => ps,
        };
        if !data.is_empty() {
            self.write_data_barriers(name, fid, &addr, &data, out, failed, reason)
                .await;
        }
        w
    }

    /// Control barriers of `ps` (all led by `addr`). Returns the partitions to write a data
    /// barrier for instead (`auto`: WriteTxnMarkers refused for authorization or unsupported).
    #[allow(clippy::too_many_arguments)]
    async fn write_control_barriers(
        &self,
        name: &str,
        addr: &str,
        producer: BarrierProducer,
        ps: &[PartitionKey],
        out: &mut Found,
        failed: &mut Vec<PartitionKey>,
        reason: &mut String,
    ) -> Vec<PartitionKey> {
        use crate::protocol::txn_marker::{
            barrier_markers_request, marker_outcomes, supports_barrier_markers, MarkerOutcome,
            WRITE_TXN_MARKERS_VERSION,
        };
        use kafka_protocol::messages::ApiVersionsRequest;
        let keys: Vec<PartitionKey> = ps.to_vec();
        let auto = self.barrier_mode == BarrierMode::Auto;
        let fallback = |why: &str, keys: Vec<PartitionKey>| {
            tracing::warn!(
                mirror = name, broker = addr, partitions = keys.len(), why,
                "the barrier cannot be a control batch here (WriteTxnMarkers needs ALTER or CLUSTER_ACTION on CLUSTER): writing the data barrier instead (failover.barrier: auto)"
            );
            keys
        };
        let mut c = match self.cluster.client(addr, self.timeout).await {
            Ok(c) => c,
            Err(e) => {
                *reason = format!("barrier write to {addr} failed: {e}");
                failed.extend(keys);
                return Vec::new();
            }
        };
        // The log end of each partition before the marker: the broker answers no offset, so
        // the marker is found by reading the log from there.
        let mut before: HashMap<(String, i32), i64> = HashMap::new();
        let outcomes = match self.txn_markers_error {
            Some(code) => keys
                .iter()
                .map(|k| (k.clone(), MarkerOutcome::of(code)))
                .collect::<HashMap<_, _>>(),
            None => {
                let versions = match c.send(&ApiVersionsRequest::default(), 0).await {
                    Ok(av) => av
                        .api_keys
                        .iter()
                        .map(|k| (k.api_key, k.min_version, k.max_version))
                        .collect::<Vec<_>>(),
                    Err(e) => {
                        *reason = format!("ApiVersions to {addr} failed: {e}");
                        failed.extend(keys);
                        return Vec::new();
                    }
                };
                if !supports_barrier_markers(&versions) {
                    let why = "the broker does not list WriteTxnMarkers version 1";
                    if auto {
                        return fallback(why, keys);
                    }
                    *reason =
                        format!("control barrier on {addr}: {why} (failover.barrier: control)");
                    failed.extend(keys);
                    return Vec::new();
                }
                // One ListOffsets request for every partition of this leader.
                for (k, end) in log_offsets(&mut c, &keys, crate::client::LATEST).await {
                    match end {
                        Ok(o) => {
                            before.insert(k, o);
                        }
                        Err(e) => {
                            *reason = format!("cannot read the log end before the barrier: {e}");
                            failed.push(k);
                        }
                    }
                }
                let asked: Vec<PartitionKey> = keys
                    .iter()
                    .filter(|k| before.contains_key(*k))
                    .cloned()
                    .collect();
                if asked.is_empty() {
                    return Vec::new();
                }
                let req =
                    barrier_markers_request(producer.producer_id, producer.producer_epoch, &asked);
                let sent = c.send(&req, WRITE_TXN_MARKERS_VERSION).await;
                let sent = match sent {
                    Ok(_) if self.lose_marker_answers.fetch_sub(1, Ordering::SeqCst) > 0 => {
                        Err("answer dropped (MIRRORGATE_TEST_LOSE_BARRIER_MARKER_ANSWERS)".into())
                    }
                    Ok(resp) => Ok(resp),
                    Err(e) => Err(e.to_string()),
                };
                match sent {
                    Ok(resp) => marker_outcomes(&resp, producer.producer_id, &asked),
                    Err(e) => {
                        // The markers may have been appended: a retry looks for them first.
                        *reason = format!("barrier markers to {addr} failed: {e}");
                        failed.extend(asked);
                        return Vec::new();
                    }
                }
            }
        };
        let mut refused = Vec::new();
        let mut keys_sorted: Vec<_> = outcomes.into_iter().collect();
        keys_sorted.sort_by(|a, b| a.0.cmp(&b.0));
        // The markers written, read back from the log ends noted before them: one Fetch naming
        // every partition (usually a single round).
        let written: Vec<(PartitionKey, i64)> = keys_sorted
            .iter()
            .filter(|(_, o)| matches!(o, MarkerOutcome::Written))
            .map(|(k, _)| (k.clone(), before.get(k).copied().unwrap_or(0)))
            .collect();
        let mut tails = read_tails(&mut c, &written, |_| OwnBarrier {
            failover_id: "",
            producer_id: Some(producer.producer_id),
        })
        .await;
        for (key, o) in keys_sorted {
            match o {
                MarkerOutcome::Written => {
                    let from = before.get(&key).copied().unwrap_or(0);
                    let found = tails
                        .remove(&key)
                        .unwrap_or_else(|| Err("not read back".into()))
                        .map(|tail| {
                            tail.iter()
                                .rev()
                                .find(|b| b.own_barrier == Some(BarrierKind::Control))
                                .map(|b| b.base_offset)
                        });
                    match found {
                        Ok(Some(offset)) => {
                            self.metrics
                                .barrier_writes
                                .with_label_values(&[name, "control"])
                                .inc();
                            out.insert(
                                key,
                                FoundBarrier {
                                    offset,
                                    kind: BarrierKind::Control,
                                    producer_id: Some(producer.producer_id),
                                },
                            );
                        }
                        Ok(None) => {
                            *reason = format!(
                                "the barrier marker of producer id {} was acknowledged but is not in the log from offset {from}",
                                producer.producer_id
                            );
                            failed.push(key);
                        }
                        Err(e) => {
                            *reason = format!("cannot read the barrier marker back: {e}");
                            failed.push(key);
                        }
                    }
                }
                MarkerOutcome::Refused(code) if auto => refused.push((key, code)),
                MarkerOutcome::Refused(code) | MarkerOutcome::Failed(code) => {
                    *reason = format!("barrier marker refused with error code {code}");
                    failed.push(key);
                }
                MarkerOutcome::Missing => {
                    *reason = "no answer for the partition".into();
                    failed.push(key);
                }
            }
        }
        if refused.is_empty() {
            return Vec::new();
        }
        let mut codes: Vec<i16> = refused.iter().map(|(_, c)| *c).collect();
        codes.sort();
        codes.dedup();
        let why = format!(
            "WriteTxnMarkers refused with error code {codes:?} (29/31: not authorized; 32: the topic's timestamp limits)"
        );
        fallback(&why, refused.into_iter().map(|(k, _)| k).collect())
    }

    /// What the data barriers of `ps` carry: the producers the barrier expires and the last
    /// mirrored offset. The last mirrored offset is read from the log (the last data batch
    /// before where it ends now: the partitions are fenced, the barrier follows); where several
    /// instances run, the producers are also those the brokers hold (mirrored through the
    /// others, review G15). A read that fails leaves this instance's PSM figures (logged).
    async fn value_figures(
        &self,
        fid: &str,
        ps: &[PartitionKey],
    ) -> HashMap<PartitionKey, (u32, i64)> {
        let mut described: HashMap<PartitionKey, std::collections::HashSet<i64>> = HashMap::new();
        if self.peers.get().is_some() {
            match self.describe_producers(ps).await {
                Ok(d) => {
                    for (k, p) in d.producers {
                        described.entry(k).or_default().insert(p.producer_id.0);
                    }
                }
                Err(e) => {
                    tracing::debug!(fid, error = %e.reason, "the data barrier's value counts this instance's producers only")
                }
            }
        }
        // Where each partition's log ends now, then the last data batch before that end.
        let (ends, _, why) = FailoverIo::log_ends(self, ps).await;
        if ends.len() < ps.len() {
            tracing::debug!(fid, error = %why, "the data barrier's value carries this instance's last applied offset where the log end is unknown");
        }
        let ends: Vec<(PartitionKey, i64, Option<i64>)> =
            ends.into_iter().map(|(k, end)| (k, end, None)).collect();
        let mut lasts = self.last_data_before_many(fid, &ends).await;
        let mut out = HashMap::new();
        for p in ps {
            let (mut producers, mut last) = self.psm_summary(&p.0, p.1);
            if let Some(d) = described.get(p) {
                producers = producers.max(d.len() as u32);
            }
            match lasts.remove(p) {
                Some(Ok(l)) => last = l,
                Some(Err(e)) => {
                    tracing::debug!(fid, topic = %p.0, partition = p.1, error = %e, "the data barrier's value carries this instance's last applied offset")
                }
                None => {}
            }
            out.insert(p.clone(), (producers, last));
        }
        out
    }

    /// Data barriers of `ps` (all led by `addr`): one Produce request, acks=all.
    #[allow(clippy::too_many_arguments)]
    async fn write_data_barriers(
        &self,
        name: &str,
        fid: &str,
        addr: &str,
        ps: &[PartitionKey],
        out: &mut Found,
        failed: &mut Vec<PartitionKey>,
        reason: &mut String,
    ) {
        let figures = self.value_figures(fid, ps).await;
        let now = now_ms().saturating_add(self.barrier_clock_skew_ms);
        let mut topics: Vec<TopicProduceData> = Vec::new();
        for p in ps {
            let (producers, last) = figures.get(p).copied().unwrap_or((0, -1));
            let value = BarrierValue {
                version: 1,
                mirror: name.to_string(),
                failover_id: fid.to_string(),
                source_cluster_id: None,
                time_ms: now,
                producers_expired: producers,
                last_mirrored_offset: last,
            };
            // No timestamp: no topic's timestamp limits can refuse it (review F13).
            let batch: Bytes = encode_barrier_batch(&value, BARRIER_TIMESTAMP);
            let pd = PartitionProduceData::default()
                .with_index(p.1)
                .with_records(Some(batch));
            match topics.iter_mut().find(|t| t.name.0.as_str() == p.0) {
                Some(t) => t.partition_data.push(pd),
                None => topics.push(
                    TopicProduceData::default()
                        .with_name(StrBytes::from_string(p.0.clone()).into())
                        .with_partition_data(vec![pd]),
                ),
            }
        }
        let req = ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(30_000)
            .with_topic_data(topics);
        let result = async {
            let mut c = self.cluster.client(addr, self.timeout).await?;
            c.send(&req, 9).await
        }
        .await;
        match result {
            Ok(resp) => {
                let asked: HashSet<&PartitionKey> = ps.iter().collect();
                for t in &resp.responses {
                    for pr in &t.partition_responses {
                        let key = (t.name.0.to_string(), pr.index);
                        if !asked.contains(&key) {
                            continue;
                        }
                        if pr.error_code == 0 {
                            self.metrics
                                .barrier_writes
                                .with_label_values(&[name, "data"])
                                .inc();
                            out.insert(
                                key,
                                FoundBarrier {
                                    offset: pr.base_offset,
                                    kind: BarrierKind::Data,
                                    producer_id: None,
                                },
                            );
                        } else {
                            *reason =
                                format!("barrier write refused with error code {}", pr.error_code);
                            failed.push(key);
                        }
                    }
                }
                let refused: HashSet<PartitionKey> = failed.iter().cloned().collect();
                for p in ps {
                    if !out.contains_key(p) && !refused.contains(p) {
                        *reason = "no answer for the partition".into();
                        failed.push(p.clone());
                    }
                }
            }
            Err(e) => {
                *reason = format!("barrier write to {addr} failed: {e}");
                failed.extend(ps.iter().cloned());
            }
        }
    }
}
