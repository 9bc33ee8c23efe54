//! A failover across several instances: the instance that runs it hands the partitions it
//! STOPPED to the others ([`Failover::publish`], after each pass), and every other instance
//! *adopts* them ([`Failover::adopt`]): it takes the same failover id, records the barrier the
//! first one wrote, screens the same producer ids (and those its own PSM saw), clears its PSM
//! at that barrier and records STOPPED. Only then does a partition turn writable there; no
//! barrier is written on an adopting instance.
//!
//! ```text
//! adopting instance, per partition named in the handover:
//! MIRRORING/PAUSED/FAILED → STOPPING (failover id of the other instance; `adopted_from` set)
//! → FENCED → DRAINED (its own mirror writes answered) → BARRIER_WRITTEN → BARRIER_PERSISTED
//! (after the screening set is durable) → PSM_CLEARED → STOPPED
//! ```
//!
//! An adopted failover is never resumed as this instance's own after a restart: the state
//! topic hands the partitions over again, and adoption goes on from the recorded step.
//!
//! Owns: the handover's content and its adoption. Must not touch: the state topic (through
//! [`FailoverIo::publish_stopped`]; the peers deliver handovers), brokers.

use std::collections::HashMap;

use super::super::peers::view::{ScreenedProducer, Stopped, StoppedPartition};
use super::super::records::{usable_slot, FailoverError};
use super::super::screening::{now_ms, ScreenEntry};
use super::super::state::{BarrierKind, FailoverStep, PartitionState};
use super::{key, Failover, FailoverIo, PartitionKey, Stall};

/// Why a handover could not be adopted (yet).
#[derive(Debug, thiserror::Error)]
pub enum AdoptError {
    #[error(transparent)]
    Mirror(#[from] FailoverError),
    #[error("mirror {mirror:?} runs its own failover {own} here; failover {theirs} of instance {by} is not adopted")]
    OwnFailover {
        mirror: String,
        own: String,
        theirs: String,
        by: String,
    },
    #[error("cannot record the adopted failover: {0}")]
    NotRecorded(#[from] super::super::records::UpdateError),
    #[error("cannot make the screening set durable: {0}")]
    Screening(String),
}

impl<Io: FailoverIo> Failover<Io> {
    /// Hand every partition failover `fid` of `name` STOPPED so far to the other instances,
    /// once per new partition count.
    pub(super) async fn publish(&self, name: &str, fid: &str) -> Result<(), Stall> {
        let Some(record) = self.records.record(name) else {
            return Ok(());
        };
        if record.adopted_from.is_some() {
            return Ok(());
        }
        let partitions: Vec<StoppedPartition> = record
            .partitions
            .iter()
            .filter(|p| p.state == PartitionState::Stopped)
            .filter(|p| p.failover_id.as_deref() == Some(fid))
            .filter_map(|p| {
                Some(StoppedPartition {
                    topic: p.topic.clone(),
                    partition: p.partition,
                    barrier_offset: p.barrier_offset?,
                    kind: p.barrier_kind.unwrap_or(BarrierKind::Data),
                    producer: p.barrier_producer,
                    topic_id: p.barrier_topic_id.clone(),
                    last_mirrored_offset: p.last_mirrored_offset,
                })
            })
            .collect();
        if partitions.is_empty() {
            return Ok(());
        }
        let mark = (fid.to_string(), partitions.len());
        if self
            .published
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            == Some(&mark)
        {
            return Ok(());
        }
        let screened = self
            .screening
            .ids()
            .into_iter()
            .filter_map(|id| {
                self.screening.screened(id).map(|entry| ScreenedProducer {
                    producer_id: id,
                    entry,
                })
            })
            .collect();
        let handover = Stopped {
            mirror: name.to_string(),
            failover_id: fid.to_string(),
            by: String::new(),
            at_ms: now_ms(),
            partitions,
            screened,
        };
        self.io
            .publish_stopped(handover)
            .await
            .map_err(Stall::NotPublished)?;
        self.published
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_string(), mark);
        Ok(())
    }

    /// Adopt the partitions another instance's failover STOPPED (module doc). Returns whether
    /// every partition of the mirror is STOPPED here now.
    pub fn adopt(&self, s: &Stopped) -> Result<bool, AdoptError> {
        let name = s.mirror.as_str();
        self.begin_adopted(s)?;
        let theirs: HashMap<PartitionKey, &StoppedPartition> = s
            .partitions
            .iter()
            .map(|p| ((p.topic.clone(), p.partition), p))
            .collect();
        let ours = |p: &super::PartitionRecord| {
            p.failover_id.as_deref() == Some(s.failover_id.as_str()) && theirs.contains_key(&key(p))
        };
        // FENCED, then DRAINED once this instance's mirror writes to it are answered (the
        // peers' fence waited for them before acknowledging; a partition busy now waits).
        let now = now_ms();
        self.records.update_stopping(name, |p| {
            if !ours(p) {
                return Ok(());
            }
            if p.step.is_none() {
                p.advance(FailoverStep::Fenced, now)?;
            }
            if p.step == Some(FailoverStep::Fenced)
                && self.io.writes(&p.topic, p.partition).in_flight == 0
            {
                p.advance(FailoverStep::Drained, now)?;
            }
            Ok(())
        })?;
        // The producers this instance's PSM saw, and those the other instance screened, are
        // durable before any barrier is recorded here.
        let ready: Vec<PartitionKey> = self
            .records
            .stopping(name)
            .iter()
            .filter(|p| ours(p) && p.step == Some(FailoverStep::Drained))
            .map(key)
            .filter(|(t, p)| self.io.psm_ready(t, *p))
            .collect();
        if !ready.is_empty() {
            let own: Vec<i64> = ready
                .iter()
                .filter_map(|k| theirs.get(k).and_then(|p| p.producer))
                .map(|b| b.producer_id)
                .collect();
            let mut producers: Vec<(i64, ScreenEntry)> = self.io.psm_producers(&ready, &own);
            producers.extend(s.screened.iter().map(|p| (p.producer_id, p.entry)));
            self.screening
                .merge_and_persist(producers)
                .map_err(|e| AdoptError::Screening(e.to_string()))?;
        }
        let mut expired: HashMap<PartitionKey, u32> = HashMap::new();
        for k in &ready {
            let Some(b) = theirs.get(k) else { continue };
            let own = b.producer.map(|p| p.producer_id);
            let n = self.io.clear_psm_at(&k.0, k.1, b.barrier_offset, own);
            expired.insert(k.clone(), n as u32);
        }
        let now = now_ms();
        self.records.update_stopping(name, |p| {
            let k = key(p);
            let (Some(n), Some(b)) = (expired.get(&k), theirs.get(&k)) else {
                return Ok(());
            };
            if !ours(p) {
                return Ok(());
            }
            let offset = b.barrier_offset;
            p.advance(FailoverStep::BarrierWritten { offset }, now)?;
            p.advance(FailoverStep::BarrierPersisted { offset }, now)?;
            p.barrier_topic_id = b.topic_id.clone();
            p.barrier_kind = Some(b.kind);
            p.barrier_producer = match b.kind {
                BarrierKind::Control => b.producer,
                BarrierKind::Data => None,
            };
            p.last_mirrored_offset = b.last_mirrored_offset;
            p.producers_expired = *n;
            p.advance(FailoverStep::PsmCleared, now)?;
            p.complete(now)?;
            Ok(())
        })?;
        if !expired.is_empty() {
            tracing::info!(
                mirror = name, failover_id = %s.failover_id, by = %s.by, partitions = expired.len(),
                "partitions of another instance's failover adopted: STOPPED here at its barriers, writable"
            );
        }
        Ok(self
            .records
            .record(name)
            .map(|r| r.all_stopped())
            .unwrap_or(false))
    }

    /// Take the handover's failover id for mirror `s.mirror` (recorded): its MIRRORING, PAUSED
    /// and FAILED partitions go STOPPING. Joined when already taken.
    fn begin_adopted(&self, s: &Stopped) -> Result<(), AdoptError> {
        let mut slots = self.records.lock();
        let slot = usable_slot(&mut slots, &s.mirror)?;
        // A failover of this instance's own still in progress is not overridden; one completed
        // (own or adopted) gives way to the newer failover of the other instance: this
        // instance missed the failback in between (it was down).
        let supersede = match &slot.record.failover_id {
            Some(f) if *f == s.failover_id => return Ok(()),
            Some(own) if slot.running || !slot.record.all_stopped() => {
                return Err(AdoptError::OwnFailover {
                    mirror: s.mirror.clone(),
                    own: own.clone(),
                    theirs: s.failover_id.clone(),
                    by: s.by.clone(),
                })
            }
            Some(_) => true,
            None => false,
        };
        let now = now_ms();
        let before = slot.record.clone();
        slot.record.failover_id = Some(s.failover_id.clone());
        slot.record.started_ms = Some(now);
        slot.record.completed_ms = None;
        slot.record.adopted_from = Some(s.by.clone());
        let fid = s.failover_id.clone();
        let begun = self.records.transition(
            slot,
            |p| match p.state {
                PartitionState::Mirroring | PartitionState::Paused | PartitionState::Failed => true,
                PartitionState::Stopped => supersede,
                PartitionState::Stopping => false,
            },
            |p| match p.state {
                PartitionState::Failed => Ok(p.retry(now)?),
                PartitionState::Stopped => {
                    p.start_mirroring(true, now)?;
                    Ok(p.begin_failover(fid.clone(), now)?)
                }
                _ => Ok(p.begin_failover(fid.clone(), now)?),
            },
        );
        if let Err(e) = begun {
            slot.record = before;
            return Err(e.into());
        }
        self.records.persist_or_revert(slot, before)?;
        drop(slots);
        self.records.refresh();
        tracing::warn!(mirror = %s.mirror, failover_id = %s.failover_id, by = %s.by,
            "another instance failed this mirror over: its partitions follow here, read-only until each is STOPPED at that instance's barrier");
        Ok(())
    }
}
