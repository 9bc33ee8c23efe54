//! The failover executor: advances the STOPPING partitions of a mirror through the failover
//! steps of `mirror/state.rs`, one function per step, each recorded before the next begins:
//!
//! ```text
//! start    MIRRORING/PAUSED → STOPPING, FAILED → STOPPING    (the failover call; crash point fenced_persisted)
//! announce (other instances told, through the state topic; FAILED when they cannot be)
//! fence    (none) → FENCED                                   (crash point fenced; test holds)
//! drain    FENCED → DRAINED       once mirror writes in flight are answered (or FAILED after 30 s)
//! peers    DRAINED, once every other instance alive fenced and drained (or was waited out:
//!          then every barrier is settled as for writes of unknown outcome, review G1)
//! barrier  DRAINED → BARRIER_WRITTEN → BARRIER_PERSISTED     (crash points barrier_written,
//!          one barrier per partition, found again on resume;  screen_persisted, barrier_persisted)
//!          the partitions' producers screened (durable) before
//! clear    BARRIER_PERSISTED → PSM_CLEARED → STOPPED         (crash point psm_cleared)
//! handover (several instances: the STOPPED partitions handed over on the state topic; they
//!          are recorded STOPPED — writable — only once it holds them, the commit point)
//! ```
//!
//! A pass ([`Failover::run_pass`]) runs the steps in order over every STOPPING partition; each
//! step acts on the partitions that finished the step before it, so a pass resumed after a
//! crash, a FAILED partition retried, or a partition that joined late all go on from their
//! recorded step. A step that cannot record its result ends the pass ([`Stall`]): the records are
//! put back as on disk, so nothing runs ahead of what is recorded; [`Failover::spawn`] runs
//! passes with a growing pause until every partition is STOPPED, retrying FAILED partitions from
//! their persisted step. Partitions whose step failed (a leader down, a barrier refused) go
//! FAILED alone; the others go on.
//!
//! Every broker, PSM and agent action goes through [`FailoverIo`] (`failover/barrier_io.rs` is the
//! real one; the unit tests use a fake), the records through [`Records`], the screening set
//! through [`Screening`].
//!
//! Its parts: [`barrier_io`] — the real [`FailoverIo`] (barrier writes, the barrier's producer
//! id, PSM clearing, the tails of the logs); [`pid_allocator`] — the step that advances the
//! destination brokers' producer-id allocators past the screened ids; [`preflight`] — the dry
//! run's go / no-go assessment, a pure function.
//!
//! Owns: the order of the failover steps and what each records; the settle of mirror writes of
//! unknown outcome (review F1); the choice of the barrier's producer id and form. Must not touch:
//! brokers or the PSM directly, the admission snapshot (refreshed by the records), the state
//! machine's rules.

mod adopt;
mod barrier;
pub mod barrier_io;
mod io;
pub mod pid_allocator;
pub mod preflight;
mod step_times;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::config::BarrierMode;

use crate::mirror::fault_hooks::{CrashPoint, FaultHooks};
use crate::mirror::mirror_metrics::MirrorMetrics;
pub use adopt::AdoptError;
pub use io::{
    AbortedTxn, BarrierWrites, FailoverIo, Found, FoundBarrier, InUse, NewProducer, NotDriving,
    OpenTxnAborts, PartitionKey, ProducerIdError, TailBatch, WriteCounts,
};

use crate::mirror::records::{usable_slot, FailoverError, Records, UpdateError};
use crate::mirror::screening::{now_ms, Screening};
use crate::mirror::state::{FailoverStep, PartitionRecord, PartitionState};

/// How the executor waits and which barrier it writes.
#[derive(Debug, Clone)]
pub struct FailoverSettings {
    /// How long the drain waits for mirror writes in flight (30 s).
    pub drain_timeout: Duration,
    /// `limits.unknown_outcome_settle_ms`.
    pub unknown_outcome_settle: Duration,
    /// When this process started (ms): a resumed failover treats the writes of the process
    /// before it as of unknown outcome, ended at this time.
    pub started_ms: i64,
    /// `failover.barrier`.
    pub barrier_mode: BarrierMode,
}

/// Why a pass ended before its steps were done; the next pass goes on from the recorded steps.
#[derive(Debug, thiserror::Error)]
pub enum Stall {
    /// A step could not be recorded (memory was put back as on disk).
    #[error(transparent)]
    NotRecorded(#[from] UpdateError),
    /// Partitions went FAILED (retried from their recorded step).
    #[error("{partitions} partitions FAILED: {reason}")]
    PartitionsFailed { partitions: usize, reason: String },
    /// The STOPPED partitions could not be handed to the other instances (they stay
    /// read-only there; retried).
    #[error("{0}")]
    NotPublished(String),
    /// This instance may not write for the failover now (no lease: retried); or another
    /// instance took it over, and this one follows it from now on (the passes end).
    #[error(transparent)]
    NotDriving(#[from] NotDriving),
}

/// What a pass that ran its steps achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PassOutcome {
    /// Every partition is STOPPED.
    Complete,
    /// Partitions are left STOPPING (e.g. waiting for their PSM) or FAILED.
    Unfinished { stopping: usize, failed: usize },
}

/// The answer to a failover call.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FailoverStarted {
    pub mirror: String,
    pub failover_id: String,
    /// True when the call joined a failover already in progress.
    pub already_running: bool,
}

/// The failover executor of every mirror.
pub struct Failover<Io> {
    records: Arc<Records>,
    screening: Arc<Screening>,
    metrics: Arc<MirrorMetrics>,
    io: Io,
    settings: FailoverSettings,
    hooks: FaultHooks,
    /// Mirror → the failover id and partition count last handed to the other instances.
    published: std::sync::Mutex<HashMap<String, (String, usize)>>,
}

fn key(p: &PartitionRecord) -> PartitionKey {
    (p.topic.clone(), p.partition)
}

impl<Io: FailoverIo> Failover<Io> {
    pub fn new(
        records: Arc<Records>,
        screening: Arc<Screening>,
        metrics: Arc<MirrorMetrics>,
        io: Io,
        settings: FailoverSettings,
        hooks: FaultHooks,
    ) -> Self {
        Failover {
            records,
            screening,
            metrics,
            io,
            settings,
            hooks,
            published: std::sync::Mutex::new(HashMap::new()),
        }
    }

    pub fn io(&self) -> &Io {
        &self.io
    }

    /// Start (or join) the failover of mirror `name` ([`Self::begin`]) and run its passes in
    /// the background ([`Self::spawn`]).
    pub fn start(self: &Arc<Self>, name: &str) -> Result<FailoverStarted, FailoverError> {
        let (started, run) = self.begin(name)?;
        if let Some(resumed) = run {
            self.spawn(name.to_string(), resumed);
        }
        Ok(started)
    }

    /// The START step: every MIRRORING or PAUSED partition of mirror `name` goes STOPPING, every
    /// FAILED one is retried; recorded before any pass runs. A failover already begun is joined.
    /// Returns the answer, and whether passes must be started (`Some(resumed)`).
    pub fn begin(&self, name: &str) -> Result<(FailoverStarted, Option<bool>), FailoverError> {
        let mut slots = self.records.lock();
        let slot = usable_slot(&mut slots, name)?;
        if let Some(fid) = slot.record.failover_id.clone() {
            if let Some(by) = &slot.record.adopted_from {
                if !slot.record.all_stopped() {
                    // Another instance runs it: this one follows its handovers.
                    tracing::info!(mirror = name, failover_id = %fid, by = %by, "failover called here joins the one instance {by} runs");
                    let joined = FailoverStarted {
                        mirror: name.to_string(),
                        failover_id: fid,
                        already_running: true,
                    };
                    return Ok((joined, None));
                }
            }
            if slot.record.all_stopped() && !slot.record.partitions.is_empty() {
                return Err(FailoverError::AlreadyStopped {
                    name: name.to_string(),
                    failover_id: fid,
                });
            }
            let run = (!slot.running).then_some(true);
            let joined = FailoverStarted {
                mirror: name.to_string(),
                failover_id: fid,
                already_running: true,
            };
            return Ok((joined, run));
        }
        if slot.record.partitions.is_empty() {
            return Err(FailoverError::NoPartitions {
                name: name.to_string(),
            });
        }
        let fid = format!("{}-{}", name, uuid::Uuid::new_v4().simple());
        let now = now_ms();
        let before = slot.record.clone();
        slot.record.failover_id = Some(fid.clone());
        slot.record.started_ms = Some(now);
        slot.record.completed_ms = None;
        slot.record.paused = false;
        let begun = self.records.transition(
            slot,
            |p| {
                matches!(
                    p.state,
                    PartitionState::Mirroring | PartitionState::Paused | PartitionState::Failed
                )
            },
            |p| match p.state {
                PartitionState::Failed => Ok(p.retry(now)?),
                _ => Ok(p.begin_failover(fid.clone(), now)?),
            },
        );
        if let Err(e) = begun {
            slot.record = before;
            return Err(e);
        }
        self.records.persist_or_revert(slot, before)?;
        drop(slots);
        self.records.refresh();
        self.hooks.crash_point(CrashPoint::FencedPersisted);
        let started = FailoverStarted {
            mirror: name.to_string(),
            failover_id: fid,
            already_running: false,
        };
        Ok((started, Some(false)))
    }

    /// Run passes over mirror `name` in the background until every partition is STOPPED
    /// (unless they already run).
    pub fn spawn(self: &Arc<Self>, name: String, resumed: bool) {
        if !self.records.set_running(&name, true) {
            return;
        }
        let this = self.clone();
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            let mut backoff = Duration::from_millis(200);
            let mut attempt = 0u32;
            loop {
                // A retry looks for barriers an earlier attempt wrote before writing new ones.
                let outcome = this.run_pass(&name, resumed || attempt > 0).await;
                attempt += 1;
                match outcome {
                    Ok(PassOutcome::Complete) => break,
                    Ok(PassOutcome::Unfinished { .. }) => {}
                    Err(Stall::NotDriving(NotDriving::TakenOver { by, .. })) => {
                        this.follow_driver(&name, &by);
                        break;
                    }
                    Err(e) => {
                        tracing::debug!(mirror = %name, error = %e, "failover pass ended early; retried")
                    }
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(10));
                // FAILED partitions are retried from their persisted step.
                this.retry_failed(&name);
            }
            this.metrics
                .failover_duration
                .observe(started.elapsed().as_secs_f64());
            this.records.set_running(&name, false);
        });
    }

    /// FAILED → STOPPING for every FAILED partition of `name` (persisted, or nothing changes).
    pub fn retry_failed(&self, name: &str) {
        let now = now_ms();
        let r = self.records.update(
            name,
            |p| p.state == PartitionState::Failed,
            |p| Ok(p.retry(now)?),
        );
        if let Err(e) = r {
            tracing::warn!(mirror = name, error = %e, "cannot resume the FAILED partitions; they stay FAILED and are retried after the next pass");
        }
    }

    /// One pass over the STOPPING partitions of `name`: every step in order.
    pub async fn run_pass(&self, name: &str, resumed: bool) -> Result<PassOutcome, Stall> {
        let Some(fid) = self.records.failover_id(name) else {
            return Ok(PassOutcome::Complete);
        };
        // The other instances fence their mirror writes once they read this (before any
        // barrier is written).
        match self.io.announce_failover(name, &fid).await {
            Ok(()) => {}
            Err(e @ NotDriving::TakenOver { .. }) => return Err(e.into()),
            Err(NotDriving::Unconfirmed(e)) => {
                let all: Vec<PartitionKey> = self.records.stopping(name).iter().map(key).collect();
                return Err(self.fail_partitions(name, &all, &e));
            }
        }
        // Stop the built-in agent and wait (bounded) for its appends in flight.
        self.io.stop_agent(name).await;
        self.fence(name)?;
        self.hooks.crash_point(CrashPoint::Fenced);
        self.hooks.hold_after_fence().await;
        self.drain(name).await?;
        if let Err(e) = self.io.ack_own_drain(name, &fid).await {
            tracing::debug!(mirror = name, error = %e, "the drain of this instance's own mirror writes is not on the state topic: an instance taking the failover over settles for them");
        }
        let waited_out = self.wait_peers(name, &fid).await?;
        self.barrier(name, &fid, resumed, waited_out).await?;
        self.clear_psm(name).await?;
        self.hooks.hold_before_handover().await;
        self.io.check_driving(name, &fid)?;
        self.publish(name, &fid).await?;
        self.commit(name)?;
        Ok(self.outcome(name, &fid))
    }

    /// FENCED: the read-only checks already refuse mirror produce (state STOPPING).
    fn fence(&self, name: &str) -> Result<(), Stall> {
        let now = now_ms();
        self.records.update_stopping(name, |p| {
            if p.step.is_none() {
                p.advance(FailoverStep::Fenced, now)?;
            }
            Ok(())
        })?;
        Ok(())
    }

    /// DRAINED: every mirror write in flight on the FENCED partitions was answered. Partitions
    /// still busy after the drain timeout go FAILED.
    async fn drain(&self, name: &str) -> Result<(), Stall> {
        let parts: Vec<PartitionKey> = self
            .records
            .stopping(name)
            .iter()
            .filter(|p| p.step == Some(FailoverStep::Fenced))
            .map(key)
            .collect();
        let deadline = tokio::time::Instant::now() + self.settings.drain_timeout;
        loop {
            let busy: Vec<PartitionKey> = parts
                .iter()
                .filter(|(t, p)| self.io.writes(t, *p).in_flight > 0)
                .cloned()
                .collect();
            if busy.is_empty() {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(self.fail_partitions(
                    name,
                    &busy,
                    "mirror produce in flight was not answered within 30 s",
                ));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let now = now_ms();
        self.records.update_stopping(name, |p| {
            if p.step == Some(FailoverStep::Fenced) {
                p.advance(FailoverStep::Drained, now)?;
            }
            Ok(())
        })?;
        Ok(())
    }

    /// Before any barrier: every other instance alive fenced and drained its mirror writes (or
    /// was waited out). The DRAINED partitions fail (and are retried) when one did not.
    /// Returns when the leases of the instances waited out ended (ms), if any were.
    async fn wait_peers(&self, name: &str, fid: &str) -> Result<Option<i64>, Stall> {
        let drained: Vec<PartitionKey> = self
            .records
            .stopping(name)
            .iter()
            .filter(|p| p.step == Some(FailoverStep::Drained))
            .map(key)
            .collect();
        if drained.is_empty() {
            return Ok(None);
        }
        match self.io.wait_peers_fenced(name, fid).await {
            Ok(waited_out) => Ok(waited_out),
            Err(e) => Err(self.fail_partitions(name, &drained, &e)),
        }
    }

    /// PSM_CLEARED and STOPPED for the BARRIER_PERSISTED partitions: their PSM cleared at the
    /// barrier (keeping what PID screening needs, made durable), the brokers' producer-id
    /// allocators advanced past the screened ids, then recorded.
    async fn clear_psm(&self, name: &str) -> Result<(), Stall> {
        let to_clear: Vec<PartitionRecord> = self
            .records
            .stopping(name)
            .into_iter()
            .filter(|p| matches!(p.step, Some(FailoverStep::BarrierPersisted { .. })))
            .collect();
        let mut expired: HashMap<PartitionKey, u32> = HashMap::new();
        for p in &to_clear {
            let own = p.barrier_producer.map(|b| b.producer_id);
            let n =
                self.io
                    .clear_psm_at(&p.topic, p.partition, p.barrier_offset.unwrap_or(-1), own);
            expired.insert(key(p), n as u32);
        }
        if !to_clear.is_empty() {
            if let Err(e) = self.screening.persist() {
                let keys: Vec<PartitionKey> = to_clear.iter().map(key).collect();
                return Err(self.fail_partitions(name, &keys, &e.to_string()));
            }
            // The screening set is complete and durable, the partitions still read-only: advance
            // every destination broker's producer-id allocator past the screened ids (review
            // F15), so new producers are not handed them. Bounded; never fails the failover
            // (screening is the fallback); idempotent on resume (the target is the highest
            // screened id).
            self.io
                .advance_pid_allocators(name, self.screening.ids())
                .await;
        }
        let now = now_ms();
        // Several instances: STOPPED (writable) only once handed over ([`Self::commit`]).
        let complete = !self.io.hands_over();
        self.records.update_stopping(name, |p| {
            if let Some(n) = expired.get(&key(p)) {
                // The barrier step counted the PSM's producers and the brokers' (several
                // instances, review G15); the clear counts the PSM's at the barrier.
                p.producers_expired = p.producers_expired.max(*n);
                p.advance(FailoverStep::PsmCleared, now)?;
            }
            if complete && p.step == Some(FailoverStep::PsmCleared) {
                p.complete(now)?;
            }
            Ok(())
        })?;
        self.hooks.crash_point(CrashPoint::PsmCleared);
        Ok(())
    }

    /// STOPPED for the PSM_CLEARED partitions of failover `fid` of `name`, once the state topic
    /// holds their handover: the commit point of a failover across instances (review G3), so
    /// that no instance — this one included — makes a partition writable before every other
    /// one can learn its barrier. (One instance records STOPPED with PSM_CLEARED.)
    fn commit(&self, name: &str) -> Result<(), Stall> {
        let now = now_ms();
        self.records.update_stopping(name, |p| {
            if p.step == Some(FailoverStep::PsmCleared) {
                p.complete(now)?;
            }
            Ok(())
        })?;
        Ok(())
    }

    /// Whether every partition of `name` is STOPPED.
    fn outcome(&self, name: &str, fid: &str) -> PassOutcome {
        let stopping = self.records.stopping(name).len();
        let failed = self
            .records
            .partitions(name, |p| p.state == PartitionState::Failed)
            .len();
        if stopping == 0 && failed == 0 {
            tracing::info!(mirror = name, failover_id = %fid, "failover complete: every partition STOPPED with a durable barrier");
            PassOutcome::Complete
        } else {
            PassOutcome::Unfinished { stopping, failed }
        }
    }

    /// STOPPING → FAILED for `which` (recorded; retried later from their step). Returns the
    /// stall that ends the pass, or why the failure itself could not be recorded.
    fn fail_partitions(&self, name: &str, which: &[PartitionKey], error: &str) -> Stall {
        let now = now_ms();
        let which_set: std::collections::HashSet<&PartitionKey> = which.iter().collect();
        let r = self.records.update_stopping(name, |p| {
            if which_set.contains(&key(p)) {
                p.fail(error.to_string(), now)?;
            }
            Ok(())
        });
        if let Err(e) = r {
            return Stall::NotRecorded(e);
        }
        tracing::warn!(
            mirror = name,
            partitions = which.len(),
            error,
            "failover step failed; partitions are FAILED and will be retried"
        );
        Stall::PartitionsFailed {
            partitions: which.len(),
            reason: error.to_string(),
        }
    }
}

impl Stall {
    /// After partitions went FAILED mid-step the others go on: only a failure that could not be
    /// recorded ends the pass.
    fn ok_if_failed(self) -> Result<(), Stall> {
        match self {
            Stall::PartitionsFailed { .. } => Ok(()),
            e => Err(e),
        }
    }
}

#[cfg(test)]
#[path = "failover/tests.rs"]
mod tests;
