//! The failover's real I/O ([`KafkaFailoverIo`], the [`FailoverIo`] of the running gateway):
//! stopping the built-in agent, finding and writing barriers in the destination partitions'
//! logs, the barrier's producer id, the PSM reads and the clearing at the barrier, and the
//! producer-id allocator step.
//!
//! The barrier is an ABORT transaction marker (WriteTxnMarkers) of an idempotent producer id no
//! producer of the partitions uses, recorded before it is written; the data barrier is the
//! fallback (`failover.barrier`, docs/failover.md).
//!
//! Owns: the requests a failover sends to the destination brokers ([`write`]: barrier writes,
//! [`producer_id`]: the barrier's producer id, [`tails`]: the reading of partitions' log tails,
//! a few requests per leader for all its partitions), and what a failover reads and clears of
//! the PSM ([`KafkaFailoverIo::clear_psm`]). Must not touch: the
//! mirror records and the order of the steps (`failover.rs`), the PSM's rules.

mod abort;
mod producer_id;
mod tails;
mod write;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicI64;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::cluster::ClusterView;
use crate::config::BarrierMode;
use crate::psm::registry::PsmRegistry;

use super::pid_allocator::PidAllocator;
use crate::failover::{
    BarrierWrites, FailoverIo, Found, FoundBarrier, InUse, NewProducer, OpenTxnAborts,
    PartitionKey, ProducerIdError, TailBatch, WriteCounts,
};
use crate::mirror::admission::Admission;
use crate::mirror::fault_hooks::FaultHooks;
use crate::mirror::mirror_metrics::MirrorMetrics;
use crate::mirror::own_barrier::OwnBarrier;
use crate::mirror::screening::{ScreenEntry, Screening, NO_COORDINATOR_EPOCH};
use crate::mirror::state::BarrierProducer;
use tails::PerPartition;

/// Stops the built-in agent of a mirror; the future ends once its appends in flight are answered.
pub type AgentStopHook = Arc<
    dyn Fn(&str) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> + Send + Sync,
>;

/// Why a partition without a known leader gets no barrier (yet).
const NO_LEADER: &str = "no leader known for the partition";

/// The failover's I/O against the destination cluster, the PSM and the agent.
pub struct KafkaFailoverIo {
    cluster: Arc<ClusterView>,
    timeout: Duration,
    psm: Option<Arc<PsmRegistry>>,
    screening: Arc<Screening>,
    admission: Arc<Admission>,
    metrics: Arc<MirrorMetrics>,
    /// `failover.barrier`: the barrier's form.
    barrier_mode: BarrierMode,
    /// Fault hooks (see [`FaultHooks`]): marker answers replaced by an error code, barrier writes
    /// failing, marker answers lost, the barrier clock shifted.
    txn_markers_error: Option<i16>,
    failing_barrier_writes: AtomicI64,
    lose_marker_answers: AtomicI64,
    barrier_clock_skew_ms: i64,
    agent_stop: OnceLock<AgentStopHook>,
    /// The other instances, when several run (`instances`).
    peers: OnceLock<Arc<crate::instances::PeerLink>>,
    /// How long the drain waits (bounds the wait for the other instances' fences).
    drain_timeout: Duration,
    /// The failover step that advances the brokers' producer-id allocators (review F15).
    pub pid_allocator: PidAllocator,
}

impl KafkaFailoverIo {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        cluster: Arc<ClusterView>,
        timeout: Duration,
        psm: Option<Arc<PsmRegistry>>,
        screening: Arc<Screening>,
        admission: Arc<Admission>,
        metrics: Arc<MirrorMetrics>,
        barrier_mode: BarrierMode,
        hooks: &FaultHooks,
        pid_allocator: PidAllocator,
    ) -> Self {
        KafkaFailoverIo {
            cluster,
            timeout,
            psm,
            screening,
            admission,
            metrics,
            barrier_mode,
            txn_markers_error: hooks.txn_markers_error,
            failing_barrier_writes: AtomicI64::new(hooks.fail_barrier_writes),
            lose_marker_answers: AtomicI64::new(hooks.lose_marker_answers),
            barrier_clock_skew_ms: hooks.barrier_clock_skew_ms,
            agent_stop: OnceLock::new(),
            peers: OnceLock::new(),
            drain_timeout: Duration::from_secs(30),
            pid_allocator,
        }
    }

    /// The other instances a failover announces itself to and waits for (set once, at start).
    pub fn set_peers(&self, peers: Arc<crate::instances::PeerLink>) {
        let _ = self.peers.set(peers);
    }

    /// Install the hook that stops the built-in agent at the start of a failover. Only the
    /// first one counts (the agent installs it once, at start).
    pub fn set_agent_stop_hook(&self, hook: AgentStopHook) -> Result<(), AgentStopHook> {
        self.agent_stop.set(hook)
    }

    /// `parts` grouped by the address of their leader, and those without a known leader.
    fn by_leader(
        &self,
        parts: &[PartitionKey],
    ) -> (HashMap<String, Vec<PartitionKey>>, Vec<PartitionKey>) {
        let mut by_leader: HashMap<String, Vec<PartitionKey>> = HashMap::new();
        let mut leaderless = Vec::new();
        for p in parts {
            match self.leader_addr(&p.0, p.1) {
                Some(a) => by_leader.entry(a).or_default().push(p.clone()),
                None => leaderless.push(p.clone()),
            }
        }
        (by_leader, leaderless)
    }

    fn leader_addr(&self, topic: &str, partition: i32) -> Option<String> {
        self.cluster
            .topic(topic)
            .and_then(|t| t.leaders.get(partition as usize).copied())
            .filter(|l| *l >= 0)
            .and_then(|l| self.cluster.broker_addr(l))
    }

    /// Whether the PSM of a partition is rebuilt: a failover reads a partition's producers for
    /// the screening set only then.
    fn psm_is_ready(&self, topic: &str, partition: i32) -> bool {
        let Some(psm) = &self.psm else { return true };
        if !psm.tracks(topic) {
            return true;
        }
        match psm.existing(topic, partition) {
            Some(s) => s.lock().unwrap_or_else(|e| e.into_inner()).is_ready(),
            None => psm.is_initialized(),
        }
    }

    /// The producers the PSM holds for `parts`, except the control barriers' own ids (never
    /// screened, see [`Self::clear_psm`]).
    fn psm_entries(&self, parts: &[PartitionKey], own: &[i64]) -> Vec<(i64, ScreenEntry)> {
        let mut found: Vec<(i64, ScreenEntry)> = Vec::new();
        let Some(psm) = &self.psm else { return found };
        // One id per partition's barrier, mostly the same: a set, not a scan per producer.
        let own: HashSet<i64> = own.iter().copied().collect();
        for (t, p) in parts {
            if let Some(slot) = psm.existing(t, *p) {
                let s = slot.lock().unwrap_or_else(|e| e.into_inner());
                found.extend(
                    s.psm()
                        .iter()
                        .filter(|e| !own.contains(&e.producer_id()))
                        .map(|e| {
                            (
                                e.producer_id(),
                                screen_entry(e.epoch(), e.last_timestamp(), e.coordinator_epoch()),
                            )
                        }),
                );
            }
        }
        found
    }

    /// The producer ids the PSM holds for `parts`.
    fn psm_ids(&self, parts: &[PartitionKey]) -> Vec<i64> {
        let mut ids = Vec::new();
        if let Some(psm) = &self.psm {
            for (t, p) in parts {
                if let Some(slot) = psm.existing(t, *p) {
                    let s = slot.lock().unwrap_or_else(|e| e.into_inner());
                    ids.extend(s.psm().iter().map(|e| e.producer_id()));
                }
            }
        }
        ids
    }

    /// How many producers the PSM holds for a partition and what it has applied (for the data
    /// barrier's value).
    fn psm_summary(&self, topic: &str, partition: i32) -> (u32, i64) {
        self.psm
            .as_ref()
            .and_then(|r| r.existing(topic, partition))
            .map(|s| {
                let s = s.lock().unwrap_or_else(|e| e.into_inner());
                (s.psm().len() as u32, s.applied_through())
            })
            .unwrap_or((0, -1))
    }

    /// Clear the PSM of a partition at its barrier, adding its producers to the screening set.
    /// A control barrier's own producer id (`own`: a PSM rebuilt from the log after the barrier
    /// holds it, as the broker does) is neither screened nor counted: the gateway never writes
    /// data with it and no broker hands it out again.
    fn clear_psm(&self, topic: &str, partition: i32, barrier: i64, own: Option<i64>) -> usize {
        let Some(psm) = &self.psm else { return 0 };
        psm.clear_at_barrier(topic, partition, barrier, own, |cleared| {
            let found = cleared
                .into_iter()
                .map(|c| {
                    (
                        c.producer_id,
                        screen_entry(c.epoch, c.last_timestamp, c.coordinator_epoch),
                    )
                })
                .collect();
            self.screening.merge(found);
        })
    }
}

/// A screening entry of a producer the PSM held: its coordinator epoch is the one its last
/// mirrored marker carried (the PSM's −1 when none did).
fn screen_entry(max_epoch: i16, last_timestamp: i64, coordinator_epoch: i32) -> ScreenEntry {
    ScreenEntry {
        max_epoch,
        last_timestamp,
        added_ms: 0,
        coordinator_epoch: coordinator_epoch.max(NO_COORDINATOR_EPOCH),
    }
}

impl FailoverIo for KafkaFailoverIo {
    async fn stop_agent(&self, mirror: &str) {
        if let Some(hook) = self.agent_stop.get() {
            hook(mirror).await;
        }
    }

    fn writes(&self, topic: &str, partition: i32) -> WriteCounts {
        use std::sync::atomic::Ordering::SeqCst;
        let w = self.admission.writes(topic, partition);
        WriteCounts {
            in_flight: w.in_flight.load(SeqCst),
            unknown: w.unknown.load(SeqCst),
            last_unknown_ms: w.last_unknown_ms.load(SeqCst),
        }
    }

    async fn find_barrier(
        &self,
        topic: &str,
        partition: i32,
        fid: &str,
        producer_id: Option<i64>,
        from: Option<i64>,
    ) -> Option<FoundBarrier> {
        let k: PartitionKey = (topic.to_string(), partition);
        self.find_barriers_in_logs(fid, &[(k.clone(), producer_id, from)])
            .await
            .remove(&k)
    }

    async fn find_barriers(
        &self,
        fid: &str,
        parts: &[(PartitionKey, Option<i64>, Option<i64>)],
    ) -> Found {
        self.find_barriers_in_logs(fid, parts).await
    }

    fn hands_over(&self) -> bool {
        self.peers.get().is_some()
    }

    async fn log_ends(
        &self,
        parts: &[PartitionKey],
    ) -> (HashMap<PartitionKey, i64>, Vec<PartitionKey>, String) {
        let answers = self
            .on_each_leader(parts, |mut c, ps| async move {
                tails::log_offsets(&mut c, &ps, crate::client::LATEST).await
            })
            .await;
        let (mut ends, mut failed, mut why) = (HashMap::new(), Vec::new(), String::new());
        for (k, r) in answers {
            match r {
                Ok(o) => {
                    ends.insert(k, o);
                }
                Err(e) => {
                    why = e;
                    failed.push(k);
                }
            }
        }
        failed.retain(|k| !ends.contains_key(k));
        (ends, failed, why)
    }

    async fn publish_barrier_from(
        &self,
        mirror: &str,
        fid: &str,
        from: &HashMap<PartitionKey, i64>,
    ) -> Result<(), String> {
        match self.peers.get() {
            Some(p) => p.publish_barrier_from(mirror, fid, from).await,
            None => Ok(()),
        }
    }

    fn announced_barrier_from(&self, mirror: &str, fid: &str) -> HashMap<PartitionKey, i64> {
        self.peers
            .get()
            .map(|p| p.barrier_from(mirror, fid))
            .unwrap_or_default()
    }

    async fn late_batches(
        &self,
        topic: &str,
        partition: i32,
        from: i64,
        fid: &str,
        producer_id: Option<i64>,
    ) -> Result<Vec<TailBatch>, String> {
        let k: PartitionKey = (topic.to_string(), partition);
        self.late_batches_in_logs(fid, &[(k.clone(), from, producer_id)])
            .await
            .remove(&k)
            .unwrap_or_else(|| Err("not read".into()))
    }

    async fn late_batches_of(
        &self,
        fid: &str,
        parts: &[(PartitionKey, i64, Option<i64>)],
    ) -> PerPartition<Vec<TailBatch>> {
        self.late_batches_in_logs(fid, parts).await
    }

    async fn producer_ids_in_use(&self, parts: &[PartitionKey]) -> Result<InUse, ProducerIdError> {
        KafkaFailoverIo::producer_ids_in_use(self, parts).await
    }

    async fn abort_open_transactions(&self, mirror: &str, parts: &[PartitionKey]) -> OpenTxnAborts {
        self.abort_open(mirror, parts).await
    }

    async fn new_barrier_producer(
        &self,
        parts: &[PartitionKey],
    ) -> Result<NewProducer, ProducerIdError> {
        KafkaFailoverIo::new_barrier_producer(self, parts).await
    }

    async fn write_barriers(
        &self,
        mirror: &str,
        fid: &str,
        producer: Option<BarrierProducer>,
        parts: &[PartitionKey],
    ) -> BarrierWrites {
        KafkaFailoverIo::write_barriers(self, mirror, fid, producer, parts).await
    }

    fn psm_ready(&self, topic: &str, partition: i32) -> bool {
        self.psm_is_ready(topic, partition)
    }

    fn psm_producers(&self, parts: &[PartitionKey], own: &[i64]) -> Vec<(i64, ScreenEntry)> {
        self.psm_entries(parts, own)
    }

    async fn last_mirrored_offset(
        &self,
        topic: &str,
        partition: i32,
        fid: &str,
        barrier: FoundBarrier,
    ) -> Result<i64, String> {
        let own = OwnBarrier {
            failover_id: fid,
            producer_id: barrier.producer_id,
        };
        self.last_data_before(topic, partition, barrier.offset, &own)
            .await
    }

    async fn last_mirrored_offsets(
        &self,
        fid: &str,
        found: &Found,
    ) -> HashMap<PartitionKey, Result<i64, String>> {
        let parts: Vec<(PartitionKey, i64, Option<i64>)> = found
            .iter()
            .map(|(k, b)| (k.clone(), b.offset, b.producer_id))
            .collect();
        self.last_data_before_many(fid, &parts).await
    }

    fn topic_id(&self, topic: &str) -> Option<uuid::Uuid> {
        self.cluster.topic_id(topic)
    }

    fn clear_psm_at(&self, topic: &str, partition: i32, barrier: i64, own: Option<i64>) -> usize {
        self.clear_psm(topic, partition, barrier, own)
    }

    async fn advance_pid_allocators(&self, mirror: &str, screened: Vec<i64>) {
        self.pid_allocator.advance_past(mirror, screened).await;
    }

    async fn broker_producers(
        &self,
        parts: &[PartitionKey],
        own: &[i64],
    ) -> Result<Vec<(PartitionKey, i64, ScreenEntry)>, String> {
        if self.peers.get().is_none() {
            return Ok(Vec::new());
        }
        let d = self.describe_producers(parts).await.map_err(|e| e.reason)?;
        if !d.unreachable.is_empty() {
            return Err(d.why);
        }
        let now = crate::mirror::screening::now_ms();
        let own: HashSet<i64> = own.iter().copied().collect();
        Ok(d.producers
            .into_iter()
            .filter(|(_, p)| !own.contains(&p.producer_id.0))
            .map(|(k, p)| {
                let entry = ScreenEntry {
                    max_epoch: i16::try_from(p.producer_epoch).unwrap_or(i16::MAX),
                    last_timestamp: p.last_timestamp,
                    added_ms: now,
                    coordinator_epoch: p.coordinator_epoch.max(NO_COORDINATOR_EPOCH),
                };
                (k, p.producer_id.0, entry)
            })
            .collect())
    }

    async fn announce_failover(
        &self,
        mirror: &str,
        fid: &str,
    ) -> Result<(), crate::failover::NotDriving> {
        match self.peers.get() {
            Some(p) => p.announce(mirror, fid).await,
            None => Ok(()),
        }
    }

    fn check_driving(&self, mirror: &str, fid: &str) -> Result<(), crate::failover::NotDriving> {
        match self.peers.get() {
            Some(p) => p.check_driving(mirror, fid),
            None => Ok(()),
        }
    }

    async fn publish_barrier_producer(
        &self,
        mirror: &str,
        fid: &str,
        producer: BarrierProducer,
    ) -> Result<(), String> {
        match self.peers.get() {
            Some(p) => p.publish_barrier_producer(mirror, fid, producer).await,
            None => Ok(()),
        }
    }

    fn announced_barrier_producer(&self, mirror: &str, fid: &str) -> Option<BarrierProducer> {
        self.peers.get()?.barrier_producer(mirror, fid)
    }

    async fn publish_stopped(
        &self,
        stopped: crate::instances::view::Stopped,
    ) -> Result<(), String> {
        match self.peers.get() {
            Some(p) => p.publish_stopped(stopped).await,
            None => Ok(()),
        }
    }

    async fn wait_peers_fenced(&self, mirror: &str, fid: &str) -> Result<Option<i64>, String> {
        match self.peers.get() {
            Some(p) => {
                p.wait_fenced(mirror, fid, p.wait_limit(self.drain_timeout))
                    .await
            }
            None => Ok(None),
        }
    }

    async fn ack_own_drain(&self, mirror: &str, fid: &str) -> Result<(), String> {
        match self.peers.get() {
            Some(p) => p.ack_own_drain(mirror, fid).await,
            None => Ok(()),
        }
    }
}
