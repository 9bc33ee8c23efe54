//! The built-in mirror agent (docs/architecture.md#the-parts): for every mirror with a `source:`,
//! it fetches the mirror's topics from the source cluster (READ_UNCOMMITTED, whole batches, no
//! decompression) and appends each batch as-is through the gateway's own mirror listener, so that
//! the produce tap, the PSM, read-only checks, fencing and in-flight accounting apply unchanged.
//!
//! - Discovery ([`discovery`]): source metadata every few seconds; destination topics are created with the
//!   source's partition count (and grown), replication factor min(source, destination brokers),
//!   and [`crate::client::mirror_ops::COPIED_CONFIGS`] copied from the source. A topic the offset map has entries
//!   for is never created again.
//! - Identity (review F4, F17): the map records the source cluster id and per topic the source
//!   and destination topic ids; a changed source cluster refuses the mirror, a changed or
//!   vanished topic and extra destination partitions fail those partitions (FAILED, marked here,
//!   no task) — see
//!   docs/agent.md#what-the-agent-checks-the-source-is-the-one-it-mirrored-the-destination-still-holds-it.
//! - One task per MIRRORING partition ([`partition`]): exact offset map ([`crate::mirror::offset_map`], persisted
//!   in the state store area `agent`), per-partition order, one request in flight, retries that
//!   never duplicate, FAILED with a reason on what it cannot mirror.
//! - Config and ACL sync ([`crate::sync`]) started with the agent, for the same mirrors.
//! - Failover: the controller calls the stop hook first; it stops config/ACL sync of that
//!   mirror, then the agent stops its tasks of that mirror and waits (bounded) for their
//!   appends in flight, then the mirror's group offset sync ([`crate::sync::groups`], started
//!   here) makes its final round (bounded) and stops writing for good. An unreachable source
//!   never blocks.
//! - Lag per partition (records and seconds, [`lag`]): `mirrorgate_mirror_lag_records` /
//!   `mirrorgate_mirror_lag_seconds` and the admin API.
//!
//! - Reports ([`report_follow`]): a failover's report is completed from the agent's figures
//!   once every partition is STOPPED.
//!
//! Owns: the agent's start, its tasks (started, supervised, stopped, drained) and its offset
//! maps. Must not touch: partition states beyond marking
//! a partition FAILED through the controller, the PSM (the produce tap feeds it).

mod completion;
mod discovery;
mod group_link;
mod lag;
mod metrics;
mod ownership;
mod partition;
pub mod report_follow;
mod stopping;
mod transactions;

pub use lag::PartStats;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};

use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

use crate::client::Connector;
use crate::cluster::ClusterView;
use crate::config::{ClusterConfig, Config, ListenerConfig, TopicRouter};
use crate::controller::MirrorController;
use crate::metrics::Metrics;
use crate::mirror::PartitionState;
use crate::state::StateStore;
use crate::sync::groups::kafka_io::KafkaGroupIo;
use crate::sync::groups::{GroupSync, FINAL_SYNC_BUDGET};

use crate::client::mirror_ops::ClusterMeta;
use crate::mirror::offset_map::{self, MirrorOffsets, AGENT_AREA};
use lag::LagCollector;
use metrics::AgentMetrics;

/// How long a failover waits for the agent's appends in flight.
const STOP_WAIT: Duration = Duration::from_secs(10);
/// How long a FAILED partition waits before the agent tries it again.
const FAILED_RETRY: Duration = Duration::from_secs(30);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

struct TaskSlot {
    stats: Arc<PartStats>,
    stop: watch::Sender<bool>,
    handle: Option<JoinHandle<()>>,
    failed_at: Arc<Mutex<Option<Instant>>>,
}

/// The agent of one mirror.
pub struct MirrorAgent {
    name: String,
    idx: usize,
    source: ClusterConfig,
    /// Opens connections to the source cluster's brokers.
    source_connector: Connector,
    /// Opens connections to the gateway's own mirror listener.
    mirror_connector: Connector,
    mirror_host: String,
    mirror_listener: ListenerConfig,
    dest_timeout: Duration,
    controller: Arc<MirrorController>,
    cluster: Arc<ClusterView>,
    router: TopicRouter,
    store: StateStore,
    offsets: Mutex<MirrorOffsets>,
    offsets_dirty: AtomicBool,
    /// Set when the persisted offset map cannot be read: every partition fails (fail closed).
    offsets_error: Option<String>,
    source_meta: RwLock<Option<ClusterMeta>>,
    source_ok: AtomicBool,
    /// When `source_ok` last changed (ms since the epoch; 0: never since start).
    source_since_ms: AtomicI64,
    /// A discovery pass has run every identity check (source cluster, topics, destination):
    /// no partition task starts before, so nothing is appended from a source that a check
    /// would refuse.
    checked: AtomicBool,
    refresh: Notify,
    tasks: Mutex<HashMap<(String, i32), TaskSlot>>,
    /// Partitions the agent failed outside a task (identity changed, destination diverged): no
    /// task is started for them; cleared when a failover stops the agent.
    marked: Mutex<HashSet<(String, i32)>>,
    /// Set when the source is not the cluster the offset map was mirrored from: no task runs,
    /// nothing is created (until the configuration is fixed and the gateway restarted).
    refused: Mutex<Option<String>>,
    metrics: AgentMetrics,
    /// The transactional id and the destination's verification setting.
    transactions: transactions::AgentTransactions,
    /// Test hook: answers of appends still to drop (see `MIRRORGATE_TEST_LOSE_AGENT_APPEND_ANSWERS`).
    lose_append_answers: AtomicI64,
    /// The ownership epoch this instance runs the agent at (several instances: claimed on the
    /// state topic; 0: the only instance); `None` while another instance runs it.
    owner_epoch: Mutex<Option<u32>>,
    /// When, and what, this instance last published of its offset maps on the state topic.
    published: Mutex<Option<(Instant, serde_json::Value)>>,
    /// Partitions whose map is not known to reach the destination's tail: taken from the
    /// previous owner's publication (`ownership.rs`), or their task stopped before it matched
    /// its start position or while an append's outcome was unknown (`partition.rs`). Matched
    /// to the destination's tail when a failover stops the agent and at its completion.
    unmatched: Mutex<HashSet<(String, i32)>>,
    /// What a forward listener of the mirror passed of the source's acknowledgements.
    forwarded: Option<Arc<crate::mirror::forwarded_acks::ForwardedAcks>>,
    /// Per partition, the lag its task last knew when a failover stopped it
    /// ([`PartStats::last_known`]), for the report when the source cannot be read.
    last_known: Mutex<HashMap<(String, i32), lag::LastKnownLag>>,
}

/// The group offset sync of one mirror, over the clusters.
pub type MirrorGroupSync = GroupSync<KafkaGroupIo>;

/// Every mirror agent of the gateway.
pub struct Agent {
    mirrors: Vec<Arc<MirrorAgent>>,
    /// Topic config and ACL sync of the same mirrors (stopped by the same hook).
    sync: crate::sync::Syncs,
    /// The group offset sync of each mirror that has it on.
    groups: Vec<Arc<MirrorGroupSync>>,
}

/// Start an agent for every mirror with a `source:`; `mirror_connector` opens its connections to
/// the gateway's own mirror listener. `Ok(None)` when there is none. Fails when
/// a mirror has a source but `listeners.mirror` is not configured, or the state store cannot
/// be opened.
pub fn start(
    config: &Config,
    controller: Option<&Arc<MirrorController>>,
    cluster: &Arc<ClusterView>,
    metrics: &Metrics,
    shutdown: &watch::Receiver<bool>,
    mirror_connector: Connector,
) -> Result<Option<Arc<Agent>>, String> {
    let with_source: Vec<(usize, &crate::config::MirrorConfig)> = config
        .mirrors
        .iter()
        .enumerate()
        .filter(|(_, m)| m.agent_source().is_some())
        .collect();
    if with_source.is_empty() {
        return Ok(None);
    }
    let Some(listener) = config.listeners.mirror.clone() else {
        return Err(format!(
            "mirror {:?} has a source (built-in mirror agent), but listeners.mirror is not configured: \
             the agent appends through the gateway's mirror listener; add a listeners.mirror section",
            with_source[0].1.name
        ));
    };
    let Some(controller) = controller else {
        return Err("mirrors with a source need the mirror controller".into());
    };
    let store = StateStore::open(&config.state_dir).map_err(|e| e.to_string())?;
    let mirror_host = match listener.bind.as_str() {
        "0.0.0.0" | "::" | "[::]" => "127.0.0.1".to_string(),
        h if h.contains(':') => format!("[{h}]"),
        h => h.to_string(),
    };
    let (agent_metrics, verification_disabled) = AgentMetrics::register(metrics)?;
    // Test hook (environment, read once): `MIRRORGATE_TEST_LOSE_AGENT_APPEND_ANSWERS=N` drops
    // the answers of the first N appends each mirror's agent makes after the broker gave them,
    // as a connection lost after the batch was appended.
    let lose_append_answers: i64 = std::env::var("MIRRORGATE_TEST_LOSE_AGENT_APPEND_ANSWERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let router = config.topic_router();
    // The agent is a client of the gateway's own mirror listener; its SASL exchange passes
    // through to the destination, so it authenticates with the destination credentials.
    let mirror_connector = mirror_connector.with_sasl(cluster.connector().sasl().cloned());
    let mut mirrors = Vec::new();
    for (idx, m) in with_source {
        let (offsets, offsets_error) =
            match store.read(AGENT_AREA, &MirrorOffsets::file_name(&m.name)) {
                Ok(None) => (MirrorOffsets::new(&m.name), None),
                Ok(Some(b)) => match MirrorOffsets::decode(&b) {
                    Ok(o) => (o, None),
                    Err(e) => (MirrorOffsets::new(&m.name), Some(e)),
                },
                Err(e) => (MirrorOffsets::new(&m.name), Some(e.to_string())),
            };
        if let Some(e) = &offsets_error {
            tracing::error!(mirror = %m.name, error = %e, "the agent's offset map cannot be read: its partitions stay FAILED until it is repaired or removed (state_dir/agent/{}.json)", m.name);
        }
        let source = m
            .source
            .clone()
            .unwrap_or_else(|| config.destination.clone());
        let source_connector = Connector::for_cluster(&source)
            .map_err(|e| format!("mirror {:?}: source: {e}", m.name))?;
        mirrors.push(Arc::new(MirrorAgent {
            name: m.name.clone(),
            idx,
            source_connector,
            source,
            mirror_connector: mirror_connector.clone(),
            mirror_host: mirror_host.clone(),
            mirror_listener: listener.clone(),
            dest_timeout: Duration::from_millis(config.destination.connect_timeout_ms),
            controller: controller.clone(),
            cluster: cluster.clone(),
            router: router.clone(),
            store: store.clone(),
            offsets: Mutex::new(offsets),
            offsets_dirty: AtomicBool::new(false),
            offsets_error,
            source_meta: RwLock::new(None),
            source_ok: AtomicBool::new(true),
            source_since_ms: AtomicI64::new(0),
            checked: AtomicBool::new(false),
            refresh: Notify::new(),
            tasks: Mutex::new(HashMap::new()),
            marked: Mutex::new(HashSet::new()),
            refused: Mutex::new(None),
            metrics: agent_metrics.clone(),
            transactions: transactions::AgentTransactions::new(
                &m.name,
                m.transactions.verification,
                verification_disabled.clone(),
            ),
            lose_append_answers: AtomicI64::new(lose_append_answers),
            owner_epoch: Mutex::new(None),
            forwarded: m.forward.as_ref().map(|_| Arc::default()),
            last_known: Mutex::new(HashMap::new()),
            published: Mutex::new(None),
            unmatched: Mutex::new(HashSet::new()),
        }));
    }
    let sync = crate::sync::start(config, controller, cluster, metrics, shutdown)?;
    let groups = group_link::start_group_syncs(config, &mirrors, metrics)?;
    let agent = Arc::new(Agent {
        mirrors,
        sync,
        groups,
    });
    let weak: Weak<Agent> = Arc::downgrade(&agent);
    controller.set_agent_stop_hook(Arc::new(move |name: &str| {
        let agent = weak.upgrade();
        let name = name.to_string();
        Box::pin(async move {
            if let Some(a) = agent.as_ref() {
                a.sync.stop(&name).await;
            }
            if let Some(m) = agent.as_ref().and_then(|a| a.mirror(&name)) {
                m.stop_and_drain().await;
                m.match_unmatched_tails().await;
            }
            if let Some(g) = agent.as_ref().and_then(|a| a.group_sync(&name)) {
                g.final_sync(FINAL_SYNC_BUDGET).await;
            }
        })
    }));
    match LagCollector::new(Arc::downgrade(&agent), config.metrics.per_partition) {
        Ok(c) => {
            if let Err(e) = metrics.registry().register(Box::new(c)) {
                tracing::warn!(error = %e, "cannot register the mirror lag metrics");
            }
        }
        Err(e) => tracing::warn!(error = %e, "cannot create the mirror lag metrics"),
    }
    for m in &agent.mirrors {
        tokio::spawn(m.clone().run(shutdown.clone()));
    }
    for g in &agent.groups {
        tokio::spawn(g.clone().run(shutdown.clone()));
    }
    Ok(Some(agent))
}

impl Agent {
    fn mirror(&self, name: &str) -> Option<Arc<MirrorAgent>> {
        self.mirrors.iter().find(|m| m.name == name).cloned()
    }

    /// The group offset sync of mirror `name` (none when it is off).
    pub fn group_sync(&self, name: &str) -> Option<Arc<MirrorGroupSync>> {
        self.groups.iter().find(|g| g.mirror() == name).cloned()
    }

    /// (records, seconds) behind the source of a partition mirrored by the agent.
    pub fn lag(&self, mirror: &str, topic: &str, partition: i32) -> Option<(i64, f64)> {
        let m = self.mirror(mirror)?;
        let tasks = lock(&m.tasks);
        let slot = tasks.get(&(topic.to_string(), partition))?;
        // FAILED partitions included: what they last knew.
        slot.stats.lag()
    }

    /// The next source offset the agent mirrors of a partition (`None`: not known yet).
    pub fn next_source(&self, mirror: &str, topic: &str, partition: i32) -> Option<i64> {
        let m = self.mirror(mirror)?;
        let tasks = lock(&m.tasks);
        let next = tasks
            .get(&(topic.to_string(), partition))?
            .stats
            .next_source
            .load(std::sync::atomic::Ordering::Relaxed);
        (next >= 0).then_some(next)
    }

    /// The bytes of a partition's lag (estimate: see [`lag::PartStats::lag_bytes_estimate`]).
    pub fn lag_bytes(&self, mirror: &str, topic: &str, partition: i32) -> Option<i64> {
        let m = self.mirror(mirror)?;
        let tasks = lock(&m.tasks);
        tasks
            .get(&(topic.to_string(), partition))?
            .stats
            .lag_bytes_estimate()
    }

    /// When the source's log end of a partition last moved, as the agent saw it.
    pub fn source_end_moved_ms(&self, mirror: &str, topic: &str, partition: i32) -> Option<i64> {
        let m = self.mirror(mirror)?;
        let tasks = lock(&m.tasks);
        tasks
            .get(&(topic.to_string(), partition))?
            .stats
            .source_end_moved_ms()
    }

    /// Whether the mirror's source cluster is reachable, and since when.
    pub fn source_facts(&self, mirror: &str) -> Option<crate::failover::preflight::SourceFacts> {
        let m = self.mirror(mirror)?;
        Some(crate::failover::preflight::SourceFacts {
            reachable: m.source_ok.load(Ordering::Relaxed),
            since_ms: m.source_since_ms.load(Ordering::Relaxed),
        })
    }

    /// Config and ACL sync status of a mirror (admin API).
    pub fn sync_status(&self, mirror: &str) -> Option<serde_json::Value> {
        self.sync.status(mirror)
    }

    /// The exact offset map of a partition (source → destination), if the agent mirrored it.
    pub fn offset_map(
        &self,
        mirror: &str,
        topic: &str,
        partition: i32,
    ) -> Option<offset_map::PartitionMap> {
        let m = self.mirror(mirror)?;
        let o = lock(&m.offsets);
        o.get(topic, partition).cloned()
    }
}

impl MirrorAgent {
    /// Discovery, task supervision and offset-map flushing, until shutdown.
    async fn run(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let mut tick = 0u64;
        loop {
            if *shutdown.borrow() {
                break;
            }
            // Discovery creates destination topics: only where the agent runs.
            let runs_here = self.take_turn();
            if runs_here && (tick % 3 == 0 || !self.checked.load(Ordering::SeqCst)) {
                self.discover().await;
            }
            self.supervise(runs_here);
            self.flush();
            self.publish_offsets();
            tick += 1;
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = self.refresh.notified() => { tick = 0; }
                _ = shutdown.changed() => {}
            }
        }
        let handles = self.stop_tasks(|_| true);
        let _ = tokio::time::timeout(STOP_WAIT, stopping::join(handles)).await;
        self.flush();
    }

    fn failover_started(&self) -> bool {
        self.controller
            .records()
            .iter()
            .any(|(r, _)| r.name == self.name && r.failover_id.is_some())
    }

    /// Start tasks for MIRRORING partitions without one; stop tasks of partitions that are not
    /// MIRRORING any more (paused, failing over), and every task while another instance runs
    /// the agent.
    fn supervise(self: &Arc<Self>, runs_here: bool) {
        let meta = self
            .source_meta
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut tasks = lock(&self.tasks);
        if !runs_here {
            for slot in tasks.values() {
                let _ = slot.stop.send(true);
            }
            return;
        }
        for ((t, p), slot) in tasks.iter() {
            let own_failure = lock(&slot.failed_at).is_some();
            match self.controller.state_of(t, *p) {
                Some(PartitionState::Mirroring) => {}
                Some(PartitionState::Failed) if own_failure => {}
                _ => {
                    let _ = slot.stop.send(true);
                }
            }
        }
        let Some(meta) = meta else { return };
        if lock(&self.refused).is_some() || !self.checked.load(Ordering::SeqCst) {
            return;
        }
        let marked = lock(&self.marked).clone();
        for (topic, src) in meta.topics.iter().filter(|(t, _)| self.owns(t)) {
            let Some(dest) = self.cluster.topic(topic) else {
                continue;
            };
            let n = src.leaders.len().min(dest.leaders.len()) as i32;
            for p in 0..n {
                let key = (topic.clone(), p);
                if marked.contains(&key) {
                    continue;
                }
                let state = self.controller.state_of(topic, p);
                if let Some(slot) = tasks.get(&key) {
                    if slot.handle.as_ref().is_some_and(|h| !h.is_finished()) {
                        continue;
                    }
                    let failed_at = *lock(&slot.failed_at);
                    match (state, failed_at) {
                        (Some(PartitionState::Mirroring), None) => {}
                        (Some(PartitionState::Failed), Some(at))
                            if at.elapsed() >= FAILED_RETRY => {}
                        _ => continue,
                    }
                } else if state != Some(PartitionState::Mirroring) {
                    continue;
                }
                let (stop, stop_rx) = watch::channel(false);
                let stats = Arc::new(PartStats::default());
                let failed_at = Arc::new(Mutex::new(None));
                let task =
                    partition::Task::new(self.clone(), topic.clone(), p, stats.clone(), stop_rx);
                let this = self.clone();
                let fa = failed_at.clone();
                let (t2, p2) = (topic.clone(), p);
                let handle = tokio::spawn(async move {
                    match task.run().await {
                        partition::Exit::Stopped => {}
                        partition::Exit::Failed(reason) => {
                            tracing::error!(mirror = %this.name, topic = %t2, partition = p2, %reason, "partition FAILED: the agent stopped mirroring it");
                            *lock(&fa) = Some(Instant::now());
                            if this.controller.state_of(&t2, p2) == Some(PartitionState::Mirroring)
                            {
                                this.controller.set_agent_failed(
                                    &t2,
                                    p2,
                                    Some(format!("mirror agent: {reason}")),
                                );
                            }
                        }
                    }
                    this.flush();
                });
                tasks.insert(
                    key,
                    TaskSlot {
                        stats,
                        stop,
                        handle: Some(handle),
                        failed_at,
                    },
                );
            }
        }
    }

    /// Persist the offset map if it changed.
    fn flush(&self) {
        if !self.offsets_dirty.swap(false, Ordering::SeqCst) {
            return;
        }
        let bytes = lock(&self.offsets).encode();
        if let Err(e) = self
            .store
            .write(AGENT_AREA, &MirrorOffsets::file_name(&self.name), &bytes)
        {
            self.offsets_dirty.store(true, Ordering::SeqCst);
            tracing::error!(mirror = %self.name, error = %e, "cannot persist the agent's offset map");
        }
    }

    /// An append whose outcome was unknown, resolved as `resolution`.
    fn count_unknown_outcome(&self, resolution: &str) {
        self.metrics
            .unknown_outcomes
            .with_label_values(&[&self.name, resolution])
            .inc();
    }

    /// Test hook: whether to drop this append's answer.
    fn lose_append_answer(&self) -> bool {
        self.lose_append_answers
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n > 0).then(|| n - 1)
            })
            .is_ok()
    }

    fn count_marker(&self, commit: bool) {
        self.metrics
            .markers
            .with_label_values(&[self.name.as_str(), if commit { "commit" } else { "abort" }])
            .inc();
    }

    fn count_append(&self, bytes: usize) {
        self.metrics.batches.with_label_values(&[&self.name]).inc();
        self.metrics
            .bytes
            .with_label_values(&[&self.name])
            .inc_by(bytes as u64);
    }
}
