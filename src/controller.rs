//! The mirror controller: the one mirror type the rest of the gateway holds. It wires and fronts
//! the parts below it — admission ([`crate::mirror::admission`]: the read-only and fencing
//! checks on the produce path, mirror writes in flight), the records
//! ([`crate::mirror::records`], persisted), the PID screening set
//! ([`crate::mirror::screening`]), the other instances ([`crate::instances`], through the
//! fence and adopt hooks it hands them), the failover executor ([`crate::failover`] over the
//! real I/O of [`crate::failover::barrier_io`]) — and adds what spans them: partitions joining
//! as the destination's topics appear, the failover, pause and failback calls of the admin API,
//! the recorded barriers (checked against the logs at start: [`barrier_check`]), and readiness.
//! It implements [`crate::mirror::policy::MirrorPolicy`], the interface a client connection
//! holds (`policy.rs`).
//!
//! Owns: the wiring of those parts and the answers of the admin-facing calls. Must not touch:
//! client sockets (the proxy asks it for decisions), brokers and the PSM (through the failover's
//! I/O only), the state store's files (through records and screening only), the environment
//! (fault hooks come in as [`FaultHooks`]).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::cluster::ClusterView;
use crate::config::{Config, TopicRouter};
use crate::metrics::{ListenerKind, Metrics};
use crate::psm::registry::PsmRegistry;
use crate::state::StateStore;

use crate::failover::barrier_io::KafkaFailoverIo;
use crate::failover::{Failover, FailoverSettings};
use crate::mirror::admission::Admission;
use crate::mirror::fault_hooks::FaultHooks;
use crate::mirror::mirror_metrics::MirrorMetrics;
use crate::mirror::records::Records;
use crate::mirror::screening::{now_ms, Screening};
use crate::mirror::state::{MirrorRecord, PartitionRecord, PartitionState};

pub use crate::failover::barrier_io::AgentStopHook;
pub use crate::failover::FailoverStarted;
pub use crate::mirror::admission::{InFlightGuard, Refusal, REJECT_ERROR_CODE};
pub use crate::mirror::mirror_metrics::PartitionStateGauge;
pub use crate::mirror::records::{
    check_state_matches_config, FailoverError, RecordedBarrier, MIRRORS_AREA,
};
pub use crate::mirror::screening::{Collision, ScreenEntry, ScreenError, SCREEN_AREA};

/// Why a mirror cannot be started (failback).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Failover(FailoverError),
    #[error("mirror {0:?} has no source: without the built-in agent the gateway cannot verify that the destination is aligned; start the external mirroring tool against an empty topic instead")]
    NoAgent(String),
    #[error("mirror {0:?} has a failover in progress; wait until every partition is STOPPED")]
    FailoverInProgress(String),
    #[error("mirror {0:?} has no STOPPED partition to start")]
    NothingStopped(String),
    /// Several instances: an instance alive has not said it has every partition STOPPED for
    /// the failover yet (review G4).
    #[error("mirror {mirror:?}: instances {instances:?} have not adopted failover {failover_id} yet (not every partition STOPPED there); a failback waits until every instance alive has, or is gone")]
    NotAdopted {
        mirror: String,
        failover_id: String,
        instances: Vec<String>,
    },
    /// Several instances: the failback could not be recorded on the state topic (nothing
    /// changed on any instance).
    #[error("{0}")]
    StateTopic(String),
}

/// The controller of every configured mirror.
pub struct MirrorController {
    names: Vec<String>,
    /// Mirrors with a `source` (run by the built-in agent).
    with_source: Vec<String>,
    router: TopicRouter,
    admission: Arc<Admission>,
    records: Arc<Records>,
    screening: Arc<Screening>,
    metrics: Arc<MirrorMetrics>,
    executor: Arc<Failover<KafkaFailoverIo>>,
    cluster: Arc<ClusterView>,
    /// Whether the start-up check of the barriers against the logs has run (until then the
    /// gateway is not ready).
    barriers_checked: AtomicBool,
    /// Topics seen matched by more than one mirror (overlapping regexes): warned about once.
    overlaps_reported: Mutex<std::collections::HashSet<String>>,
    /// `failover.refuse_mirrored_producer_ids` (review F12).
    refuse_mirrored_ids: bool,
    /// The PSM, told of the transaction markers the built-in agent writes.
    psm: Option<Arc<PsmRegistry>>,
    /// The other instances (`instances`; [`peer_fence`]).
    peers: std::sync::OnceLock<Arc<crate::instances::PeerLink>>,
}

mod forward_screen;
mod gauges;
mod pause;
mod peer_adopt;
mod peer_fence;
mod policy;
mod summary;

pub use pause::PauseError;
pub use summary::MirrorSummary;

impl MirrorController {
    /// Load (or create) the state of every mirror of `config`; `hooks`: the fault-injection
    /// hooks of the failover (none in production).
    pub fn new(
        config: &Config,
        store: StateStore,
        metrics: &Metrics,
        psm: Option<Arc<PsmRegistry>>,
        cluster: Arc<ClusterView>,
        hooks: FaultHooks,
    ) -> Arc<Self> {
        let mirror_metrics = Arc::new(MirrorMetrics::new(metrics));
        // An unreadable store already makes every mirror unreadable (and read-only).
        let screening = Arc::new(Screening::load(
            store.clone(),
            store.check().is_err(),
            psm.clone(),
            i64::try_from(config.psm.clock_skew_margin_ms).unwrap_or(i64::MAX / 4),
        ));
        let names: Vec<String> = config.mirrors.iter().map(|m| m.name.clone()).collect();
        let admission = Arc::new(Admission::new(
            names.clone(),
            config.topic_router(),
            cluster.clone(),
            screening.unreadable().cloned(),
            mirror_metrics.rejected.clone(),
            mirror_metrics.unknown_writes.clone(),
        ));
        let records = Arc::new(Records::load(
            config,
            store,
            admission.clone(),
            mirror_metrics.illegal_transitions.clone(),
        ));
        let timeout = Duration::from_millis(config.destination.connect_timeout_ms);
        let io = KafkaFailoverIo::new(
            cluster.clone(),
            timeout,
            psm.clone(),
            screening.clone(),
            admission.clone(),
            mirror_metrics.clone(),
            config.failover.barrier,
            &hooks,
            crate::failover::pid_allocator::PidAllocator::new(
                config.failover.pid_allocator.clone(),
                cluster.clone(),
                timeout,
                metrics,
            ),
        );
        let settings = FailoverSettings {
            drain_timeout: Duration::from_secs(30),
            unknown_outcome_settle: Duration::from_millis(config.limits.unknown_outcome_settle_ms),
            started_ms: now_ms(),
            barrier_mode: config.failover.barrier,
        };
        let executor = Arc::new(Failover::new(
            records.clone(),
            screening.clone(),
            mirror_metrics.clone(),
            io,
            settings,
            hooks,
        ));
        Arc::new(MirrorController {
            names,
            with_source: config
                .mirrors
                .iter()
                .filter(|m| m.agent_source().is_some())
                .map(|m| m.name.clone())
                .collect(),
            router: config.topic_router(),
            admission,
            records,
            screening,
            metrics: mirror_metrics,
            executor,
            cluster,
            barriers_checked: AtomicBool::new(false),
            overlaps_reported: Mutex::new(std::collections::HashSet::new()),
            refuse_mirrored_ids: config.failover.refuse_mirrored_producer_ids,
            psm: psm.clone(),
            peers: std::sync::OnceLock::new(),
        })
    }

    /// Mirror names, in config order.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Add the destination partitions of each mirror's topics that the records do not have yet:
    /// MIRRORING, PAUSED while the mirror is paused, or (a mirror failing or failed over) as
    /// read-only members of that failover, which completes them.
    pub fn sync_partitions(self: &Arc<Self>) {
        if !self.cluster.is_known() {
            return;
        }
        let topics = self.cluster.topic_names();
        for t in &topics {
            self.report_overlap(t);
        }
        let mut changed = false;
        let mut resume = Vec::new();
        {
            let mut slots = self.records.lock();
            for (i, slot) in slots.iter_mut().enumerate() {
                if slot.unreadable.is_some() {
                    continue;
                }
                // The partitions the metadata names and the record lacks. Looked up in a set:
                // this runs every half second, and a linear search per partition held the lock
                // for seconds at 10,000 partitions.
                let missing: Vec<(&String, i32)> = {
                    let known: HashSet<(&str, i32)> = slot
                        .record
                        .partitions
                        .iter()
                        .map(|p| (p.topic.as_str(), p.partition))
                        .collect();
                    topics
                        .iter()
                        .filter(|t| self.router.mirror_index(t) == Some(i))
                        .flat_map(|t| {
                            let n = self.cluster.topic(t).map(|i| i.leaders.len()).unwrap_or(0);
                            (0..n as i32).map(move |p| (t, p))
                        })
                        .filter(|(t, p)| !known.contains(&(t.as_str(), *p)))
                        .collect()
                };
                for (t, p) in missing {
                    let mut rec = PartitionRecord::new(t.clone(), p, now_ms());
                    // A new partition joins the failover or the pause. Refused (a bug), it is
                    // not added: read-only (fenced, in a failover), it is tried again.
                    let joined = match slot.record.failover_id.clone() {
                        Some(fid) => rec.begin_failover(fid, now_ms()),
                        None if slot.record.paused => rec.pause(now_ms()),
                        None => Ok(()),
                    };
                    if let Err(e) = joined {
                        self.records
                            .report_illegal(&slot.record.name, &rec, &e.into());
                        continue;
                    }
                    // An adopted failover is followed from the state topic instead.
                    let adopted = slot.record.adopted_from.is_some();
                    if slot.record.failover_id.is_some() && !slot.running && !adopted {
                        resume.push(slot.record.name.clone());
                    }
                    slot.record.partitions.push(rec);
                    changed = true;
                }
                if changed {
                    slot.record
                        .partitions
                        .sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
                    // Memory keeps the new partitions even when they cannot be persisted yet:
                    // they are MIRRORING/PAUSED (read-only on the client listener) or fenced
                    // members of the failover either way, and the next sync or step writes them.
                    if let Err(e) = self.records.persist(slot) {
                        tracing::error!(error = %e, "cannot persist mirror partitions");
                    }
                }
            }
        }
        if changed {
            self.records.refresh();
        }
        for name in resume {
            self.executor.spawn(name, true);
        }
    }

    /// Warn once per topic (and count) when the regexes of two or more mirrors match it: it
    /// belongs to the first of them in config order.
    fn report_overlap(&self, topic: &str) {
        let claimants = self.router.claimants(topic);
        if claimants.len() < 2
            || !self
                .overlaps_reported
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(topic.to_string())
        {
            return;
        }
        let names: Vec<&str> = claimants
            .iter()
            .map(|i| self.admission.mirror_name(*i))
            .collect();
        tracing::warn!(
            topic,
            mirrors = ?names,
            "topic matched by more than one mirror's regex: it belongs to mirror {} (the first in config order); make the patterns disjoint",
            names[0]
        );
        self.metrics.topic_overlaps.inc();
    }

    /// The state of a partition (FAILED when the built-in agent failed a MIRRORING partition).
    pub fn state_of(&self, topic: &str, partition: i32) -> Option<PartitionState> {
        self.admission.state_of(topic, partition)
    }

    /// Mark a partition FAILED by the built-in agent (`Some(reason)`) or clear that (`None`).
    pub fn set_agent_failed(&self, topic: &str, partition: i32, reason: Option<String>) {
        self.admission.set_agent_failed(topic, partition, reason)
    }

    /// Install the hook that stops the built-in agent at the start of a failover.
    pub fn set_agent_stop_hook(&self, hook: AgentStopHook) {
        if self.executor.io().set_agent_stop_hook(hook).is_err() {
            tracing::warn!("a second agent stop hook was ignored (the first one stays)");
        }
    }

    /// The decision for one partition of a produce on `listener`. For the mirror listener an
    /// admitted partition comes with an in-flight guard, held until the broker answered.
    pub fn admit(
        &self,
        listener: ListenerKind,
        topic: &str,
        partition: i32,
    ) -> Result<Option<InFlightGuard>, Refusal> {
        self.admission.admit(listener, topic, partition)
    }

    /// Why admitted mirror writes may no longer be forwarded (see
    /// [`Admission::admitted_mirror_writes_lapsed`]).
    pub fn admitted_mirror_writes_lapsed(&self) -> Option<String> {
        self.admission.admitted_mirror_writes_lapsed()
    }

    /// How long admitted mirror writes may still be sent (see
    /// [`Admission::mirror_send_deadline`]).
    pub fn mirror_send_deadline(&self) -> Option<Duration> {
        self.admission.mirror_send_deadline()
    }

    /// The decision for an admin, transaction or group request `op` (e.g. `DeleteRecords`) on
    /// `listener` naming `topic` (see [`Admission::refuse_admin`]).
    pub fn refuse_admin(
        &self,
        listener: ListenerKind,
        op: &str,
        topic: &str,
        partition: Option<i32>,
    ) -> Option<Refusal> {
        self.admission.refuse_admin(listener, op, topic, partition)
    }

    /// [`Self::refuse_admin`] for a request on every partition of the cluster.
    pub fn refuse_admin_everywhere(&self, listener: ListenerKind, op: &str) -> Option<Refusal> {
        self.admission.refuse_admin_everywhere(listener, op)
    }

    /// The barrier offset of a stopped partition (duplicate-ack guard; see
    /// [`Admission::barrier_offset`]).
    pub fn barrier_offset(&self, topic: &str, partition: i32) -> Option<i64> {
        self.admission.barrier_offset(topic, partition)
    }

    /// Why a STOPPED partition's recorded barrier no longer guards: the log does not hold it
    /// (see [`crate::controller::barrier_check`]).
    pub fn barrier_missing(&self, topic: &str, partition: i32) -> Option<String> {
        self.admission.barrier_missing(topic, partition)
    }

    /// The start-up check of the barriers against the logs has run.
    pub fn set_barriers_checked(&self) {
        self.barriers_checked.store(true, Ordering::SeqCst);
    }

    /// Record that the log of `topic`-`partition` no longer holds its barrier.
    pub fn set_barrier_missing(&self, topic: &str, partition: i32, reason: String) {
        self.admission.set_barrier_missing(topic, partition, reason)
    }

    /// The barriers of STOPPED partitions, as recorded (those of a topic created again since,
    /// under another id, left out: they already guard nothing).
    pub fn recorded_barriers(&self) -> Vec<RecordedBarrier> {
        self.records
            .recorded_barriers(|topic| self.cluster.topic_id(topic))
    }

    /// Whether any partition has a barrier (fast check before looking at responses).
    pub fn has_barriers(&self) -> bool {
        self.admission.has_barriers()
    }

    /// An acks=0 mirror write to a mirror partition was refused (the connection is closed).
    pub fn count_acks_zero_refused(&self) {
        self.metrics
            .rejected
            .with_label_values(&["mirror_acks_zero"])
            .inc();
    }

    /// Count a local acknowledgement turned into an error.
    pub fn count_duplicate_ack(&self) {
        self.metrics.duplicate_ack_guard.inc();
    }

    /// Count barriers seen of `kind` for the mirror owning `topic`.
    pub fn count_barriers_seen(&self, topic: &str, kind: &str, n: u64) {
        let mirror = self
            .router
            .mirror_index(topic)
            .map(|i| self.admission.mirror_name(i).to_string())
            .unwrap_or_default();
        self.metrics
            .barriers_seen
            .with_label_values(&[&mirror, kind])
            .inc_by(n);
    }

    /// Whether `topic` belongs to a mirror.
    pub fn is_mirror_topic(&self, topic: &str) -> bool {
        self.router.mirror_index(topic).is_some()
    }

    /// The screening entry of a producer id, if mirrored traffic left it in the brokers and it
    /// has not certainly expired there.
    pub fn screened(&self, producer_id: i64) -> Option<ScreenEntry> {
        if crate::mirror::fault_hooks::Sabotage::Screening.is_on() {
            return None;
        }
        self.screening.screened(producer_id)
    }

    /// A local write of `producer_id` (a data batch at `epoch`; `None`: a partition added to a
    /// transaction) of a transaction of `transactional_id`, if any, that collides with the
    /// producer state mirrored traffic left in the brokers ([`Collision::of`]: reviews F12 and
    /// G11; the transactional id's coordinator epoch as the cluster view last read it). Counted
    /// as `rejected{reason="mirrored_producer_id"}`.
    pub fn mirrored_producer_collision(
        &self,
        producer_id: i64,
        epoch: Option<i16>,
        transactional_id: Option<&str>,
    ) -> Option<Collision> {
        if !self.refuse_mirrored_ids {
            return None;
        }
        let e = self.screened(producer_id)?;
        let coordinator = transactional_id.map(|t| self.cluster.transaction_coordinator_epoch(t));
        let collision = Collision::of(e, epoch, coordinator)?;
        self.metrics
            .rejected
            .with_label_values(&["mirrored_producer_id"])
            .inc();
        Some(collision)
    }

    /// Producer ids in the screening set.
    pub fn screened_ids_count(&self) -> usize {
        self.screening.ids().len()
    }

    /// Whether any producer id is screened.
    pub fn screening_active(&self) -> bool {
        self.screening.is_active()
    }

    /// Count a screened InitProducerId answer.
    pub fn count_screened(&self) {
        self.metrics.pid_screened.inc();
    }

    /// Drop screening entries the brokers have certainly expired.
    pub fn expire_screen(&self) {
        self.screening.expire()
    }

    /// Until when producers of failed-over topics must stay behind the gateway (ms since the
    /// epoch; see [`Screening::protection_needed_until_ms`]).
    pub fn protection_needed_until_ms(&self) -> Option<i64> {
        self.screening.protection_needed_until_ms()
    }

    /// The outcome of the last producer-id allocator advance of mirror `name` (this process).
    pub fn pid_allocator_outcome(
        &self,
        name: &str,
    ) -> Option<crate::failover::pid_allocator::Outcome> {
        self.executor.io().pid_allocator.last_outcome(name)
    }

    /// Records of every mirror (for the admin API).
    pub fn records(&self) -> Vec<(MirrorRecord, Option<String>)> {
        let mut v: Vec<(MirrorRecord, Option<String>)> = self
            .records
            .lock()
            .iter()
            .map(|s| (s.record.clone(), s.unreadable.clone()))
            .collect();
        for p in v.iter_mut().flat_map(|(r, _)| r.partitions.iter_mut()) {
            if p.state == PartitionState::Mirroring {
                if let Some(e) = self.admission.agent_error(&p.topic, p.partition) {
                    (p.state, p.last_error) = (PartitionState::Failed, Some(e));
                }
            }
        }
        v
    }

    /// Readiness problems: unreadable mirror state, an unreadable PID screening set.
    pub fn problems(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .records
            .lock()
            .iter()
            .filter_map(|s| {
                s.unreadable
                    .as_ref()
                    .map(|r| format!("mirror {} state unreadable: {r}", s.record.name))
            })
            .collect();
        v.extend(self.screening.unreadable().map(|e| e.to_string()));
        v.extend(self.peers.get().and_then(|p| p.problem()));
        v.extend(self.unmigrated());
        v.extend(self.stale_adoptions());
        if !self.barriers_checked.load(Ordering::SeqCst) && !self.recorded_barriers().is_empty() {
            v.push("failover barriers not yet checked against the partitions' logs".to_string());
        }
        v
    }

    /// Start (or join) the failover of mirror `name`.
    pub fn failover(self: &Arc<Self>, name: &str) -> Result<FailoverStarted, FailoverError> {
        if let Some(e) = self.screening.unreadable() {
            return Err(FailoverError::ScreenUnreadable(e.clone()));
        }
        self.sync_partitions();
        self.executor.start(name)
    }

    /// Failback: STOPPED partitions of mirror `name` back to MIRRORING. Only for a mirror with a
    /// `source` (the built-in agent): before appending anything it verifies, batch for batch, that
    /// the destination partition is empty or aligned with the source, and otherwise marks the
    /// partition FAILED with what to do. With several instances the failback is recorded on the
    /// state topic first (every instance follows it; refused, changing nothing, when it cannot
    /// be). Returns how many partitions moved.
    pub async fn start_mirroring(&self, name: &str) -> Result<usize, StartError> {
        if !self.with_source.iter().any(|n| n == name) {
            if !self.names.iter().any(|n| n == name) {
                return Err(StartError::Failover(FailoverError::UnknownMirror(
                    name.to_string(),
                )));
            }
            return Err(StartError::NoAgent(name.to_string()));
        }
        if let Some(p) = self.peers.get() {
            self.startable(name)?;
            self.wait_every_instance_adopted(name).await?;
            p.announce_mirroring(name)
                .await
                .map_err(StartError::StateTopic)?;
        }
        self.stopped_to_mirroring(name, peer_adopt::Failback::Called)
    }

    /// Resume failovers that were in progress when the gateway stopped.
    pub fn resume_all(self: &Arc<Self>) {
        let names: Vec<String> = self
            .records
            .lock()
            .iter()
            .filter(|s| {
                // An adopted failover is followed from the state topic again, never resumed
                // as this instance's own.
                s.unreadable.is_none()
                    && s.record.adopted_from.is_none()
                    && s.record.partitions.iter().any(|p| {
                        matches!(p.state, PartitionState::Stopping | PartitionState::Failed)
                    })
            })
            .map(|s| s.record.name.clone())
            .collect();
        for n in names {
            tracing::info!(mirror = %n, "resuming the failover in progress");
            self.executor.spawn(n, true);
        }
    }
}

pub mod barrier_check;
mod psm_link;

#[cfg(test)]
#[path = "controller/tests.rs"]
mod tests;
