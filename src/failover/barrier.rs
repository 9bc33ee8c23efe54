//! The barrier step of the failover executor: for the DRAINED partitions, one barrier each
//! (looked for in the log first when resuming, from where the log ended before it when several
//! instances recorded that; its form and producer id chosen and recorded before anything is
//! written), settled against mirror writes of unknown outcome (review F1),
//! the partitions' producers made durable in the screening set, then BARRIER_WRITTEN and
//! BARRIER_PERSISTED recorded.
//!
//! Owns: the barrier step's policy. Must not touch: brokers or the PSM (through [`FailoverIo`]).

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use crate::config::BarrierMode;

use super::step_times::StepTimes;
use super::{key, Failover, FailoverIo, Found, NewProducer, PartitionKey, ProducerIdError, Stall};
use crate::mirror::fault_hooks::CrashPoint;
use crate::mirror::screening::{now_ms, ScreenEntry, NO_COORDINATOR_EPOCH};
use crate::mirror::state::{
    AbortedTransaction, BarrierKind, BarrierProducer, FailoverStep, PartitionRecord,
};

/// New barriers a failover writes after mirror writes that landed late, per partition, before
/// it gives up for this attempt (the partition is FAILED and retried).
const MAX_LATE_BARRIERS: usize = 5;

impl<Io: FailoverIo> Failover<Io> {
    /// BARRIER_WRITTEN and BARRIER_PERSISTED for the DRAINED partitions: one barrier each
    /// (looked for in the log first when resuming), settled against late mirror writes, their
    /// producers screened durably, then recorded.
    pub(super) async fn barrier(
        &self,
        name: &str,
        fid: &str,
        resumed: bool,
        waited_out: Option<i64>,
    ) -> Result<(), Stall> {
        let need: Vec<PartitionRecord> = self
            .records
            .stopping(name)
            .into_iter()
            .filter(|p| p.step == Some(FailoverStep::Drained))
            .collect();
        if need.is_empty() {
            return Ok(());
        }
        // Several instances: nothing is written once another took the failover over, or while
        // this one cannot confirm it still drives it (a process paused past its lease).
        self.io.check_driving(name, fid)?;
        let mut took = StepTimes::start();
        let mut found: Found = HashMap::new();
        if resumed {
            // A partition that joined after a takeover, or a driver whose records were lost,
            // has no producer recorded: the one announced on the state topic finds its marker,
            // from where the log ended before the first barrier (several instances).
            let announced = self.io.announced_barrier_producer(name, fid);
            let from = self.io.announced_barrier_from(name, fid);
            let look: Vec<(PartitionKey, Option<i64>, Option<i64>)> = need
                .iter()
                .map(|p| {
                    (
                        key(p),
                        p.barrier_producer.or(announced).map(|b| b.producer_id),
                        from.get(&key(p)).copied(),
                    )
                })
                .collect();
            found = self.io.find_barriers(fid, &look).await;
        }
        took.lap("find");
        let mut to_write: Vec<PartitionKey> = need
            .iter()
            .map(key)
            .filter(|k| !found.contains_key(k))
            .collect();
        // Several instances: where each log ends now is on the state topic before any barrier
        // is written after it, so that whoever drives the failover later finds the barrier
        // whatever follows it (review G3).
        if self.io.hands_over() && !to_write.is_empty() {
            let (ends, unknown, why) = self.io.log_ends(&to_write).await;
            if !unknown.is_empty() {
                to_write.retain(|k| !unknown.contains(k));
                self.fail_partitions(name, &unknown, &why).ok_if_failed()?;
            }
            if !ends.is_empty() {
                if let Err(e) = self.io.publish_barrier_from(name, fid, &ends).await {
                    return Err(self.fail_partitions(name, &to_write, &e));
                }
            }
        }
        // Transactions the source never finished would hold the destination's last stable
        // offset below the barrier forever (H14): aborted first. Done again when resuming
        // (nothing is open any more where it was).
        if !to_write.is_empty() {
            let aborts = self.io.abort_open_transactions(name, &to_write).await;
            if !aborts.aborted.is_empty() {
                self.records
                    .update_stopping(name, |p| {
                        p.transactions_aborted.extend(
                            aborts
                                .aborted
                                .iter()
                                .filter(|a| {
                                    a.partition.0 == p.topic && a.partition.1 == p.partition
                                })
                                .map(|a| AbortedTransaction {
                                    producer_id: a.producer_id,
                                    producer_epoch: a.epoch,
                                    first_offset: a.first_offset,
                                }),
                        );
                        Ok(())
                    })
                    .map_err(Stall::NotRecorded)?;
            }
            if !aborts.failed.is_empty() {
                to_write.retain(|k| !aborts.failed.contains(k));
                self.fail_partitions(name, &aborts.failed, &aborts.reason)
                    .ok_if_failed()?;
            }
        }
        took.lap("prepare");
        let producer = self.barrier_form(name, &mut to_write).await?;
        // Partitions whose barrier could not be written (e.g. their leader is down) fail and
        // are retried; the others go on, so one dead broker holds up only its partitions.
        let w = self.io.write_barriers(name, fid, producer, &to_write).await;
        found.extend(w.written);
        if !w.failed.is_empty() {
            self.fail_partitions(name, &w.failed, &w.reason)
                .ok_if_failed()?;
        }
        took.lap("write");
        self.hooks.crash_point(CrashPoint::BarrierWritten);
        // Mirror writes whose answer never came may have landed after the barrier.
        let (found, unsettled, why) = self
            .settle_unknown_outcomes(name, fid, producer, found, resumed, waited_out)
            .await;
        if !unsettled.is_empty() {
            self.fail_partitions(name, &unsettled, &why)
                .ok_if_failed()?;
        }
        // Their producers are read from the PSM: only once it is rebuilt (after a restart, or a
        // rebuild triggered by an unknown outcome of mirror produce).
        took.lap("settle");
        let found = self.with_psm_ready(name, found);
        // The screening entries are durable before BARRIER_PERSISTED is: once it is recorded, a
        // restart rebuilds the PSM from the barrier on and could not find them again.
        let keys: Vec<PartitionKey> = found.keys().cloned().collect();
        // Per partition, the producer ids the barrier expires: this instance's PSM and, several
        // instances running, what the brokers hold (review G15: the report counts them all).
        let mut expired: HashMap<PartitionKey, std::collections::HashSet<i64>> = HashMap::new();
        if !keys.is_empty() {
            // The barriers' own producer ids: one per partition but mostly the same id, so
            // deduplicated once here (each partition's lookup below filters by them).
            let own: Vec<i64> = found
                .values()
                .filter_map(|b| b.producer_id)
                .collect::<HashSet<i64>>()
                .into_iter()
                .collect();
            let mut producers = Vec::new();
            for k in &keys {
                let theirs = self.io.psm_producers(std::slice::from_ref(k), &own);
                expired
                    .entry(k.clone())
                    .or_default()
                    .extend(theirs.iter().map(|(id, _)| *id));
                producers.extend(theirs);
            }
            // Several instances: what was mirrored through the others is known to the brokers.
            match self.io.broker_producers(&keys, &own).await {
                Ok(more) => {
                    for (k, id, entry) in more {
                        expired.entry(k).or_default().insert(id);
                        producers.push((id, entry));
                    }
                }
                Err(e) => {
                    let why = format!("the producers the brokers hold for the partitions cannot be read (needed to screen what other instances mirrored): {e}");
                    return Err(self.fail_partitions(name, &keys, &why));
                }
            }
            if let Err(e) = self.screening.merge_and_persist(producers) {
                return Err(self.fail_partitions(name, &keys, &e.to_string()));
            }
        }
        took.lap("screen");
        let expired: HashMap<PartitionKey, u32> = expired
            .into_iter()
            .map(|(k, ids)| (k, ids.len() as u32))
            .collect();
        // The last mirrored offset of each partition, from the log: the last data batch before
        // its (last) barrier, whoever mirrored it (review G15). Unknown when it cannot be read.
        let mut last_mirrored: HashMap<PartitionKey, i64> = HashMap::new();
        for (k, r) in self.io.last_mirrored_offsets(fid, &found).await {
            match r {
                Ok(last) => {
                    last_mirrored.insert(k, last);
                }
                Err(e) => {
                    tracing::warn!(mirror = name, failover_id = %fid, topic = %k.0, partition = k.1, error = %e, "cannot read the log before the barrier: the partition's last mirrored offset is recorded as unknown");
                }
            }
        }
        took.lap("last_mirrored");
        self.hooks.crash_point(CrashPoint::ScreenPersisted);
        self.record_barriers(name, fid, &found, &last_mirrored, &expired)?;
        took.lap("record");
        tracing::info!(mirror = name, failover_id = %fid, partitions = found.len(), resumed,
            ms = %took, "barrier step done (milliseconds per phase)");
        self.hooks.crash_point(CrashPoint::BarrierPersisted);
        Ok(())
    }

    /// Record BARRIER_WRITTEN and BARRIER_PERSISTED for the barriers `found`, with each
    /// partition's last mirrored offset and the producers its barrier expires.
    fn record_barriers(
        &self,
        name: &str,
        fid: &str,
        found: &Found,
        last_mirrored: &HashMap<PartitionKey, i64>,
        expired: &HashMap<PartitionKey, u32>,
    ) -> Result<(), Stall> {
        let now = now_ms();
        let mut written = 0u64;
        let announced = self.io.announced_barrier_producer(name, fid);
        self.records.update_stopping(name, |p| {
            let k = key(p);
            let Some(b) = found.get(&k) else {
                return Ok(());
            };
            if p.barrier_producer.is_none() {
                // A marker found with the producer announced on the state topic.
                p.barrier_producer = announced.filter(|a| Some(a.producer_id) == b.producer_id);
            }
            p.advance(FailoverStep::BarrierWritten { offset: b.offset }, now)?;
            p.advance(FailoverStep::BarrierPersisted { offset: b.offset }, now)?;
            p.barrier_topic_id = self.io.topic_id(&p.topic).map(|id| id.to_string());
            p.barrier_kind = Some(b.kind);
            if b.kind == BarrierKind::Data {
                p.barrier_producer = None;
            }
            p.last_mirrored_offset = last_mirrored.get(&k).copied();
            p.producers_expired = expired.get(&k).copied().unwrap_or(0);
            written += 1;
            Ok(())
        })?;
        for ((t, p), b) in found {
            tracing::info!(
                mirror = name, failover_id = %fid, topic = %t, partition = *p,
                barrier_offset = b.offset, kind = b.kind.as_str(),
                producer_id = ?b.producer_id,
                last_mirrored_offset = last_mirrored.get(&(t.clone(), *p)).copied().unwrap_or(-1),
                "barrier recorded"
            );
        }
        self.metrics
            .barriers_written
            .with_label_values(&[name])
            .inc_by(written);
        Ok(())
    }

    /// The barrier's form for `to_write`: the control barrier's producer id (recorded before any
    /// marker is written with it: the marker carries no payload, and a resumed failover finds it
    /// only by that id), or `None` for the data barrier. Partitions whose leader could not be
    /// asked for its producers (e.g. it is down) fail alone and leave `to_write`.
    async fn barrier_form(
        &self,
        name: &str,
        to_write: &mut Vec<PartitionKey>,
    ) -> Result<Option<BarrierProducer>, Stall> {
        if to_write.is_empty() || self.settings.barrier_mode == BarrierMode::Data {
            return Ok(None);
        }
        match self.barrier_producer(name, to_write).await {
            Ok(p) => {
                // Several instances: an instance that takes this failover over must find the
                // markers written with it.
                let fid = self.records.failover_id(name).unwrap_or_default();
                if let Err(e) = self
                    .io
                    .publish_barrier_producer(name, &fid, p.producer)
                    .await
                {
                    return Err(self.fail_partitions(name, to_write, &e));
                }
                if !p.unreachable.is_empty() {
                    self.fail_partitions(name, &p.unreachable, &p.why)
                        .ok_if_failed()?;
                    to_write.retain(|k| !p.unreachable.contains(k));
                }
                Ok(Some(p.producer))
            }
            Err(e) if e.fallback && self.settings.barrier_mode == BarrierMode::Auto => {
                tracing::warn!(
                    mirror = name, error = %e.reason,
                    "no producer id for a control-batch barrier: writing the data barrier instead (failover.barrier: auto)"
                );
                Ok(None)
            }
            Err(e) => Err(self.fail_partitions(name, to_write, &e.reason)),
        }
    }

    /// The producer id and epoch of this failover's control barriers: the one recorded in a
    /// partition of the failover (a retry or a late-write round reuses it: the broker accepts a
    /// second marker with the same producer id, epoch and coordinator epoch), or announced for
    /// it on the state topic, else a new one from an *idempotent* InitProducerId. It is
    /// recorded in `parts` (persisted) before any marker is written with it.
    async fn barrier_producer(
        &self,
        name: &str,
        parts: &[PartitionKey],
    ) -> Result<NewProducer, ProducerIdError> {
        let record = self.records.record(name);
        let recorded = record.as_ref().and_then(|r| {
            r.partitions
                .iter()
                .filter(|p| p.failover_id == r.failover_id)
                .find_map(|p| p.barrier_producer)
                .or_else(|| {
                    let fid = r.failover_id.as_deref()?;
                    self.io.announced_barrier_producer(name, fid)
                })
        });
        let recorded_producers: HashMap<PartitionKey, BarrierProducer> = record
            .iter()
            .flat_map(|r| r.partitions.iter())
            .filter_map(|p| p.barrier_producer.map(|b| (key(p), b)))
            .collect();
        let producer_of = |k: &PartitionKey| recorded_producers.get(k).copied();
        let chosen = match recorded {
            Some(p) => {
                // Partitions that joined since (or not written yet): the recorded id must be
                // free there too.
                let new: Vec<PartitionKey> = parts
                    .iter()
                    .filter(|k| producer_of(k) != Some(p))
                    .cloned()
                    .collect();
                let (unreachable, why) = if new.is_empty() {
                    (Vec::new(), String::new())
                } else {
                    let in_use = self.io.producer_ids_in_use(&new).await?;
                    if in_use.taken.contains(&p.producer_id) {
                        return Err(ProducerIdError {
                            reason: format!(
                                "the failover's barrier producer id {} is used by a producer of a partition that joined the failover",
                                p.producer_id
                            ),
                            fallback: true,
                        });
                    }
                    (in_use.unreachable, in_use.why)
                };
                NewProducer {
                    producer: p,
                    unreachable,
                    why,
                }
            }
            None => self.io.new_barrier_producer(parts).await?,
        };
        let unreachable: HashSet<&PartitionKey> = chosen.unreachable.iter().collect();
        let keys: HashSet<&PartitionKey> =
            parts.iter().filter(|k| !unreachable.contains(k)).collect();
        if keys.iter().any(|k| producer_of(k) != Some(chosen.producer)) {
            let producer = chosen.producer;
            self.records
                .update_stopping(name, |p| {
                    if keys.contains(&key(p)) {
                        p.barrier_producer = Some(producer);
                    }
                    Ok(())
                })
                .map_err(|e| ProducerIdError::retry(e.to_string()))?;
        }
        Ok(chosen)
    }

    /// Keep the barriers of the partitions whose PSM is rebuilt; the others wait at DRAINED (the
    /// next pass finds their barrier in the log).
    fn with_psm_ready(&self, name: &str, found: Found) -> Found {
        let (ready, waiting): (Found, Found) = found
            .into_iter()
            .partition(|((t, p), _)| self.io.psm_ready(t, *p));
        if !waiting.is_empty() {
            tracing::info!(
                mirror = name,
                partitions = waiting.len(),
                "waiting for the producer state of partitions to be rebuilt before recording their barrier; they stay read-only"
            );
        }
        ready
    }

    /// Mirror writes of unknown outcome (review F1): for each partition of `found` (its barrier
    /// offset) that had such writes — or every one, when the failover resumed after a restart
    /// (the writes of the process before are unknown) — wait until
    /// `limits.unknown_outcome_settle_ms` has passed since the last of them, re-read the log
    /// after the barrier, and write a new barrier after anything that landed there, screening
    /// its producer ids. Returns the barriers (moved where new ones were written) and the
    /// partitions that could not be checked, with why.
    #[allow(clippy::too_many_arguments)]
    async fn settle_unknown_outcomes(
        &self,
        name: &str,
        fid: &str,
        producer: Option<BarrierProducer>,
        mut found: Found,
        resumed: bool,
        waited_out: Option<i64>,
    ) -> (Found, Vec<PartitionKey>, String) {
        // Instances waited out (not fenced) may have sent mirror writes the brokers append
        // later, queued behind requests still pending there: every partition is re-read the
        // settle time after its barrier, and after their leases ended (review G1).
        let waited = waited_out.map(|lease_end| lease_end.max(now_ms()));
        let mut check: Vec<(PartitionKey, i64)> = Vec::new();
        for key in found.keys() {
            let w = self.io.writes(&key.0, key.1);
            let own = if resumed {
                Some(w.last_unknown_ms.max(self.settings.started_ms))
            } else if w.unknown > 0 {
                Some(w.last_unknown_ms)
            } else {
                None
            };
            let ended = match (own, waited) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            };
            if let Some(ended) = ended {
                check.push((key.clone(), ended));
            }
        }
        let mut failed = Vec::new();
        let mut reason = String::new();
        if check.is_empty() {
            return (found, failed, reason);
        }
        let settle = self.settings.unknown_outcome_settle.as_millis() as i64;
        let until = check.iter().map(|(_, t)| t + settle).max().unwrap_or(0);
        let wait = until - now_ms();
        if wait > 0 {
            tracing::info!(
                mirror = name,
                partitions = check.len(),
                wait_ms = wait,
                "mirror writes of unknown outcome: waiting before re-reading the log after the barrier"
            );
            tokio::time::sleep(Duration::from_millis(wait as u64)).await;
        }
        let records: HashMap<PartitionKey, PartitionRecord> = self
            .records
            .stopping(name)
            .into_iter()
            .map(|p| (key(&p), p))
            .collect();
        // The first look after each barrier, for every partition at once.
        let first: Vec<(PartitionKey, i64, Option<i64>)> = check
            .iter()
            .filter_map(|(k, _)| {
                found
                    .get(k)
                    .map(|b| (k.clone(), b.offset + 1, b.producer_id))
            })
            .collect();
        let mut first_look = self.io.late_batches_of(fid, &first).await;
        'partitions: for (key, _) in check {
            let Some(record) = records.get(&key) else {
                continue;
            };
            for _round in 0..MAX_LATE_BARRIERS {
                let Some(current) = found.get(&key).copied() else {
                    continue 'partitions;
                };
                let barrier = current.offset;
                let late = match first_look.remove(&key) {
                    Some(late) => late,
                    None => {
                        self.io
                            .late_batches(&key.0, key.1, barrier + 1, fid, current.producer_id)
                            .await
                    }
                };
                let late = match late {
                    Ok(late) => late,
                    Err(e) => {
                        reason = format!("cannot re-read the log after the barrier: {e}");
                        failed.push(key.clone());
                        continue 'partitions;
                    }
                };
                let Some(first) = late.first() else {
                    continue 'partitions;
                };
                self.metrics
                    .late_writes
                    .with_label_values(&[name])
                    .inc_by(late.len() as u64);
                tracing::warn!(
                    mirror = name, topic = %key.0, partition = key.1, barrier,
                    batches = late.len(), first = first.base_offset,
                    "mirror writes of unknown outcome landed after the barrier: screening their producer ids and writing a new barrier after them"
                );
                self.screening.merge(
                    late.iter()
                        .filter(|b| b.producer_id >= 0)
                        .map(|b| {
                            (
                                b.producer_id,
                                ScreenEntry {
                                    max_epoch: b.producer_epoch,
                                    last_timestamp: b.max_timestamp,
                                    added_ms: 0,
                                    // Read from batch headers, which carry none.
                                    coordinator_epoch: NO_COORDINATOR_EPOCH,
                                },
                            )
                        })
                        .collect(),
                );
                // A late mirrored transaction the source never ends would hold the partition's
                // last stable offset below the new barrier forever: aborted first (as H14).
                let aborts = self
                    .io
                    .abort_open_transactions(name, std::slice::from_ref(&key))
                    .await;
                if !aborts.failed.is_empty() {
                    reason = aborts.reason;
                    failed.push(key.clone());
                    continue 'partitions;
                }
                // The new barrier has the form of the one it follows: a control barrier again
                // with the same producer id, epoch and coordinator epoch (the broker accepts a
                // second such marker), or a data barrier after a fallback.
                let producer = match current.kind {
                    BarrierKind::Control => record.barrier_producer.or(producer),
                    BarrierKind::Data => None,
                };
                let w = self
                    .io
                    .write_barriers(name, fid, producer, std::slice::from_ref(&key))
                    .await;
                match w.written.get(&key) {
                    Some(b) if w.failed.is_empty() => {
                        found.insert(key.clone(), *b);
                    }
                    _ => {
                        reason = w.reason;
                        failed.push(key.clone());
                        continue 'partitions;
                    }
                }
            }
            reason =
                format!("mirror writes kept landing after {MAX_LATE_BARRIERS} barriers; retrying");
            failed.push(key.clone());
        }
        for k in &failed {
            found.remove(k);
        }
        (found, failed, reason)
    }
}
