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

use super::{key, Failover, FailoverIo, PartitionKey, Stall};
use crate::instances::view::{ScreenedProducer, Stopped, StoppedPartition};
use crate::mirror::records::{usable_slot, FailoverError};
use crate::mirror::screening::{now_ms, ScreenEntry};
use crate::mirror::state::{BarrierKind, BarrierProducer, FailoverStep, PartitionState};

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
    NotRecorded(#[from] crate::mirror::records::UpdateError),
    #[error("cannot make the screening set durable: {0}")]
    Screening(String),
}

impl<Io: FailoverIo> Failover<Io> {
    /// Hand every partition failover `fid` of `name` STOPPED so far (or cleared and waiting for
    /// this handover to turn STOPPED) to the other instances, once per new partition count.
    pub(super) async fn publish(&self, name: &str, fid: &str) -> Result<(), Stall> {
        let Some(record) = self.records.record(name) else {
            return Ok(());
        };
        if record.adopted_from.is_some() {
            return Ok(());
        }
        // STOPPED, or at PSM_CLEARED waiting for this handover to be recorded STOPPED.
        let partitions: Vec<StoppedPartition> = record
            .partitions
            .iter()
            .filter(|p| {
                p.state == PartitionState::Stopped || p.step == Some(FailoverStep::PsmCleared)
            })
            .filter(|p| p.failover_id.as_deref() == Some(fid))
            .filter_map(StoppedPartition::of)
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
        let screened = ScreenedProducer::all_of(&self.screening);
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
            .filter(|p| ours(p) && at_their_barrier(p, theirs.get(&key(p)).copied()))
            .map(key)
            .filter(|(t, p)| self.io.psm_ready(t, *p) && !self.hooks.adoption_held())
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
            if matches!(
                p.step,
                Some(FailoverStep::Drained | FailoverStep::BarrierWritten { .. })
            ) {
                p.advance(FailoverStep::BarrierWritten { offset }, now)?;
                p.advance(FailoverStep::BarrierPersisted { offset }, now)?;
                p.barrier_topic_id = b.topic_id.clone();
                p.barrier_kind = Some(b.kind);
                p.barrier_producer = match b.kind {
                    BarrierKind::Control => b.producer,
                    BarrierKind::Data => None,
                };
                p.last_mirrored_offset = b.last_mirrored_offset;
            }
            if p.step != Some(FailoverStep::PsmCleared) {
                // The driver's count (the brokers' producers with its PSM's, review G15), or
                // this instance's own PSM's when that is more.
                p.producers_expired = b.producers_expired.unwrap_or(0).max(*n);
                p.advance(FailoverStep::PsmCleared, now)?;
            }
            p.complete(now)?;
            Ok(())
        })?;
        if !expired.is_empty() {
            tracing::info!(
                mirror = name, failover_id = %s.failover_id, by = %s.by, partitions = expired.len(),
                "partitions of another instance's failover adopted: STOPPED here at its barriers, writable"
            );
        }
        // Done once every partition here is STOPPED and every one handed over is known here
        // (a partition this instance has not seen in the metadata yet joins later).
        Ok(self.records.record(name).is_some_and(|r| {
            let here: std::collections::HashSet<(&str, i32)> = r
                .partitions
                .iter()
                .map(|p| (p.topic.as_str(), p.partition))
                .collect();
            r.all_stopped() && theirs.keys().all(|(t, i)| here.contains(&(t.as_str(), *i)))
        }))
    }

    /// Take the handover's failover id for mirror `s.mirror`, following instance `s.by`.
    fn begin_adopted(&self, s: &Stopped) -> Result<(), AdoptError> {
        self.take_failover(&s.mirror, &s.failover_id, Some(&s.by), None)
    }

    /// This instance won the claim of failover `fid` of `name` (its driver is gone): it drives
    /// it from here, from the steps recorded here, with the control barriers' producer the
    /// driver announced (so that its markers are found, not written again). The caller starts
    /// the passes.
    pub fn take_over(
        &self,
        name: &str,
        fid: &str,
        producer: Option<BarrierProducer>,
    ) -> Result<(), AdoptError> {
        self.take_failover(name, fid, None, producer)?;
        tracing::warn!(mirror = name, failover_id = fid, "the state topic names this instance as this failover's driver (its claim came first, or its own records of the failover were lost): it drives it from the recorded steps and the partitions' logs");
        Ok(())
    }

    /// Another instance took this instance's failover of `name` over: from now on this one
    /// follows its handovers (recorded; a restart does not resume it as its own).
    pub fn follow_driver(&self, name: &str, by: &str) {
        let Some(fid) = self.records.failover_id(name) else {
            return;
        };
        match self.take_failover(name, &fid, Some(by), None) {
            Ok(()) => {
                tracing::warn!(mirror = name, failover_id = %fid, by, "another instance took this failover over: this instance writes nothing more for it and follows that instance")
            }
            Err(e) => {
                tracing::warn!(mirror = name, error = %e, "another instance took this failover over, but that cannot be recorded here; retried on the next failover pass")
            }
        }
    }

    /// Record failover `fid` of `name` here, driven by `adopted_from` (`None`: by this
    /// instance). Its MIRRORING, PAUSED and FAILED partitions go STOPPING; the STOPPING ones
    /// without a barrier producer take `producer`. Joined (and re-owned) when already taken.
    fn take_failover(
        &self,
        name: &str,
        fid: &str,
        adopted_from: Option<&str>,
        producer: Option<BarrierProducer>,
    ) -> Result<(), AdoptError> {
        let mut slots = self.records.lock();
        let slot = usable_slot(&mut slots, name)?;
        let same = slot.record.failover_id.as_deref() == Some(fid);
        if same
            && slot.record.adopted_from.as_deref() == adopted_from
            && producer.is_none()
            && !slot
                .record
                .partitions
                .iter()
                .any(|p| p.state == PartitionState::Failed)
        {
            return Ok(());
        }
        // A failover of this instance's own still in progress is not overridden. One completed
        // (own or adopted), or one adopted from another instance and not completed here, gives
        // way to the newer failover: this instance missed the failback in between (it was down,
        // or still adopting; review G4). Its partitions not STOPPED yet were never writable
        // here: they abandon it and join the new one.
        let adopted = slot.record.adopted_from.is_some();
        let supersede = match &slot.record.failover_id {
            _ if same => false,
            Some(own) if slot.running || (!adopted && !slot.record.all_stopped()) => {
                return Err(AdoptError::OwnFailover {
                    mirror: name.to_string(),
                    own: own.clone(),
                    theirs: fid.to_string(),
                    by: adopted_from.unwrap_or("this instance").to_string(),
                })
            }
            Some(_) => true,
            None => false,
        };
        let now = now_ms();
        let before = slot.record.clone();
        if !same {
            slot.record.failover_id = Some(fid.to_string());
            slot.record.started_ms = Some(now);
            slot.record.completed_ms = None;
        }
        slot.record.adopted_from = adopted_from.map(str::to_string);
        slot.record.paused = false;
        let begun = self.records.transition(
            slot,
            |p| match p.state {
                PartitionState::Mirroring | PartitionState::Paused | PartitionState::Failed => true,
                PartitionState::Stopped => supersede,
                PartitionState::Stopping => {
                    supersede || (producer.is_some() && p.barrier_producer.is_none())
                }
            },
            |p| {
                match p.state {
                    PartitionState::Stopping | PartitionState::Failed if supersede => {
                        p.abandon_adopted(now)?;
                        p.begin_failover(fid.to_string(), now)?;
                    }
                    PartitionState::Failed => p.retry(now)?,
                    PartitionState::Stopped => {
                        p.start_mirroring(true, now)?;
                        p.begin_failover(fid.to_string(), now)?;
                    }
                    PartitionState::Stopping => {}
                    _ => p.begin_failover(fid.to_string(), now)?,
                }
                if p.barrier_producer.is_none() {
                    p.barrier_producer = producer;
                }
                Ok(())
            },
        );
        if let Err(e) = begun {
            slot.record = before;
            return Err(e.into());
        }
        self.records.persist_or_revert(slot, before)?;
        drop(slots);
        self.records.refresh();
        if !same {
            if let Some(by) = adopted_from {
                tracing::warn!(mirror = name, failover_id = fid, by,
                    "another instance failed this mirror over: its partitions follow here, read-only until each is STOPPED at that instance's barrier");
            }
        }
        Ok(())
    }
}

/// Whether partition `p` can take the handover's barrier `b` now: drained here, or — this
/// instance drove the failover before another took it over — at a barrier step whose offset
/// is the handover's. A partition this instance recorded another barrier for stays STOPPING
/// (read-only) and is logged.
fn at_their_barrier(p: &super::PartitionRecord, b: Option<&StoppedPartition>) -> bool {
    let Some(b) = b else { return false };
    let fits = match p.step {
        Some(FailoverStep::Drained | FailoverStep::BarrierWritten { .. }) => true,
        Some(FailoverStep::BarrierPersisted { offset }) => offset == b.barrier_offset,
        Some(FailoverStep::PsmCleared) => p.barrier_offset == Some(b.barrier_offset),
        _ => return false,
    };
    if !fits {
        tracing::warn!(topic = %p.topic, partition = p.partition, recorded = ?p.barrier_offset, handed_over = b.barrier_offset,
            "this instance recorded another barrier for the partition than the instance driving the failover now: it stays read-only here");
    }
    fits
}
