//! The built-in mirror agent (docs/architecture.md#the-parts): for every mirror with a `source:`,
//! it fetches the mirror's topics from the source cluster (READ_UNCOMMITTED, whole batches, no
//! decompression) and appends each batch as-is through the gateway's own mirror listener, so that
//! the produce tap, the PSM, read-only checks, fencing and in-flight accounting apply unchanged.
//!
//! - Discovery: source metadata every few seconds; destination topics are created with the
//!   source's partition count (and grown), replication factor min(source, destination brokers),
//!   and [`wire::COPIED_CONFIGS`] copied from the source. A topic the offset map has entries
//!   for is never created again.
//! - Identity (review F4, F17): the map records the source cluster id and per topic the source
//!   and destination topic ids; a changed source cluster refuses the mirror, a changed or
//!   vanished topic and extra destination partitions fail those partitions (FAILED, marked here,
//!   no task) — see
//!   docs/agent.md#what-the-agent-checks-the-source-is-the-one-it-mirrored-the-destination-still-holds-it.
//! - One task per MIRRORING partition ([`partition`]): exact offset map ([`offsets`], persisted
//!   in the state store area `agent`), per-partition order, one request in flight, retries that
//!   never duplicate, FAILED with a reason on what it cannot mirror.
//! - Failover: the controller calls the stop hook first; the agent stops its tasks of that
//!   mirror and waits (bounded) for their appends in flight. An unreachable source never blocks.
//! - Lag per partition (records and seconds): `mirrorgate_mirror_lag_records` /
//!   `mirrorgate_mirror_lag_seconds` and the admin API.
//!
//! Owns: the agent's tasks and its offset maps. Must not touch: partition states beyond marking
//! a partition FAILED through the controller, the PSM (the produce tap feeds it).

pub mod offsets;
mod partition;
pub mod wire;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};

use prometheus::{IntCounterVec, Opts};
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

use crate::client::Connector;
use crate::client::KafkaClient;
use crate::cluster::ClusterView;
use crate::config::{ClusterConfig, Config, ListenerConfig, TopicRouter};
use crate::metrics::Metrics;
use crate::mirror::controller::MirrorController;
use crate::mirror::PartitionState;
use crate::state::StateStore;

use offsets::{check_id, IdCheck, MirrorOffsets, AGENT_AREA};
use wire::ClusterMeta;

/// How long a failover waits for the agent's appends in flight.
const STOP_WAIT: Duration = Duration::from_secs(10);
/// How long a FAILED partition waits before the agent tries it again.
const FAILED_RETRY: Duration = Duration::from_secs(30);

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Live figures of one partition task (lag).
#[derive(Debug)]
pub struct PartStats {
    /// Next source offset to mirror (-1: not known yet).
    next_source: AtomicI64,
    /// Source high watermark from the last fetch (-1: not known yet).
    high_watermark: AtomicI64,
    /// Max timestamp of the last mirrored batch (-1: none yet).
    last_ts: AtomicI64,
    /// Max timestamp of the first batch not mirrored yet (used before anything was mirrored).
    pending_ts: AtomicI64,
}

impl Default for PartStats {
    fn default() -> Self {
        PartStats {
            next_source: AtomicI64::new(-1),
            high_watermark: AtomicI64::new(-1),
            last_ts: AtomicI64::new(-1),
            pending_ts: AtomicI64::new(-1),
        }
    }
}

impl PartStats {
    /// (records, seconds) behind the source, when known.
    pub fn lag(&self) -> Option<(i64, f64)> {
        let next = self.next_source.load(Ordering::Relaxed);
        let hw = self.high_watermark.load(Ordering::Relaxed);
        if next < 0 || hw < 0 {
            return None;
        }
        let records = (hw - next).max(0);
        if records == 0 {
            return Some((0, 0.0));
        }
        let ts = match self.last_ts.load(Ordering::Relaxed) {
            t if t >= 0 => t,
            _ => self.pending_ts.load(Ordering::Relaxed),
        };
        let secs = if ts >= 0 {
            (now_ms() - ts).max(0) as f64 / 1000.0
        } else {
            0.0
        };
        Some((records, secs))
    }
}

struct TaskSlot {
    stats: Arc<PartStats>,
    stop: watch::Sender<bool>,
    handle: Option<JoinHandle<()>>,
    failed_at: Arc<Mutex<Option<Instant>>>,
}

struct AgentMetrics {
    batches: IntCounterVec,
    bytes: IntCounterVec,
    /// Appends whose outcome was unknown (answer lost, connection closed, timed out), by how
    /// they were resolved: `already_appended` (found in the destination log, not resent) or
    /// `resent`.
    unknown_outcomes: IntCounterVec,
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
    /// Test hook: answers of appends still to drop (see `MIRRORGATE_TEST_LOSE_AGENT_APPEND_ANSWERS`).
    lose_append_answers: AtomicI64,
}

/// Every mirror agent of the gateway.
pub struct Agent {
    mirrors: Vec<Arc<MirrorAgent>>,
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
        .filter(|(_, m)| m.source.is_some())
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
    let batches = IntCounterVec::new(
        Opts::new(
            "mirrorgate_agent_batches_total",
            "Batches the built-in mirror agent appended.",
        ),
        &["mirror"],
    )
    .map_err(|e| e.to_string())?;
    let bytes = IntCounterVec::new(
        Opts::new(
            "mirrorgate_agent_bytes_total",
            "Batch bytes the built-in mirror agent appended.",
        ),
        &["mirror"],
    )
    .map_err(|e| e.to_string())?;
    let unknown_outcomes = IntCounterVec::new(
        Opts::new(
            "mirrorgate_agent_unknown_outcomes_total",
            "Appends of the built-in mirror agent whose outcome was unknown (answer lost), by \
             resolution: already_appended (found in the destination log) or resent.",
        ),
        &["mirror", "resolution"],
    )
    .map_err(|e| e.to_string())?;
    let _ = metrics.registry().register(Box::new(batches.clone()));
    let _ = metrics.registry().register(Box::new(bytes.clone()));
    let _ = metrics
        .registry()
        .register(Box::new(unknown_outcomes.clone()));
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
            checked: AtomicBool::new(false),
            refresh: Notify::new(),
            tasks: Mutex::new(HashMap::new()),
            marked: Mutex::new(HashSet::new()),
            refused: Mutex::new(None),
            metrics: AgentMetrics {
                batches: batches.clone(),
                bytes: bytes.clone(),
                unknown_outcomes: unknown_outcomes.clone(),
            },
            lose_append_answers: AtomicI64::new(lose_append_answers),
        }));
    }
    let agent = Arc::new(Agent { mirrors });
    let weak: Weak<Agent> = Arc::downgrade(&agent);
    controller.set_agent_stop_hook(Arc::new(move |name: &str| {
        let agent = weak.upgrade();
        let name = name.to_string();
        Box::pin(async move {
            if let Some(m) = agent.as_ref().and_then(|a| a.mirror(&name)) {
                m.stop_and_drain().await;
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
    Ok(Some(agent))
}

impl Agent {
    fn mirror(&self, name: &str) -> Option<Arc<MirrorAgent>> {
        self.mirrors.iter().find(|m| m.name == name).cloned()
    }

    /// (records, seconds) behind the source of a partition mirrored by the agent.
    pub fn lag(&self, mirror: &str, topic: &str, partition: i32) -> Option<(i64, f64)> {
        let m = self.mirror(mirror)?;
        let tasks = lock(&m.tasks);
        let slot = tasks.get(&(topic.to_string(), partition))?;
        if slot.handle.as_ref().is_none_or(|h| h.is_finished()) {
            return None;
        }
        slot.stats.lag()
    }

    /// The exact offset map of a partition (source → destination), if the agent mirrored it.
    pub fn offset_map(
        &self,
        mirror: &str,
        topic: &str,
        partition: i32,
    ) -> Option<offsets::PartitionMap> {
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
            if tick % 3 == 0 {
                self.discover().await;
            }
            self.supervise();
            self.flush();
            tick += 1;
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = self.refresh.notified() => { tick = 0; }
                _ = shutdown.changed() => {}
            }
        }
        let handles = self.stop_tasks(|_| true);
        let _ = tokio::time::timeout(STOP_WAIT, futures_join(handles)).await;
        self.flush();
    }

    fn failover_started(&self) -> bool {
        self.controller
            .records()
            .iter()
            .any(|(r, _)| r.name == self.name && r.failover_id.is_some())
    }

    /// Source metadata; create or grow destination topics.
    async fn discover(&self) {
        let timeout = Duration::from_millis(self.source.connect_timeout_ms);
        let mut addrs: Vec<String> = self
            .source_meta
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|m| m.brokers.values().cloned().collect())
            .unwrap_or_default();
        addrs.extend(self.source.bootstrap.iter().cloned());
        let meta = match wire::metadata(&self.source_connector, &addrs, timeout).await {
            Ok(m) => m,
            Err(e) => {
                if self.source_ok.swap(false, Ordering::Relaxed) {
                    tracing::warn!(mirror = %self.name, error = %e, "source cluster unreachable; mirroring waits (failover does not)");
                }
                return;
            }
        };
        if !self.source_ok.swap(true, Ordering::Relaxed) {
            tracing::info!(mirror = %self.name, "source cluster reachable again");
        }
        let topics: Vec<(String, wire::TopicMeta)> = meta
            .topics
            .iter()
            .filter(|(t, m)| !m.internal && !t.starts_with("__") && self.owns(t))
            .map(|(t, m)| (t.clone(), m.clone()))
            .collect();
        *self.source_meta.write().unwrap_or_else(|e| e.into_inner()) = Some(meta.clone());
        if !self.cluster.is_known() || self.failover_started() {
            return;
        }
        if !self.check_source_cluster(&meta) {
            return;
        }
        // The destination's own answer (not the gateway's cached view): which topics exist,
        // their partition counts and topic ids.
        let names: Vec<String> = topics.iter().map(|(t, _)| t.clone()).collect();
        let dest_addrs: Vec<String> = self.cluster.brokers().into_iter().map(|(_, a)| a).collect();
        let dest = match wire::metadata_of(
            self.cluster.connector(),
            &dest_addrs,
            self.dest_timeout,
            Some(&names),
        )
        .await
        {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(mirror = %self.name, error = %e, "cannot read the destination metadata; discovery waits");
                return;
            }
        };
        let mut changed = false;
        for (topic, src) in topics {
            let n = src.leaders.len() as i32;
            if !self.check_topic(&topic, &src, &dest) {
                continue;
            }
            if dest.absent.contains(&topic) {
                if let Err(e) = self.create_topic(&meta, &topic, &src).await {
                    tracing::warn!(mirror = %self.name, %topic, error = %e, "cannot create the destination topic");
                }
                changed = true;
                continue;
            }
            if let Some(d) = dest.topics.get(&topic) {
                let dn = d.leaders.len() as i32;
                if dn > n && n > 0 {
                    let extra: Vec<(String, i32)> = (n..dn).map(|p| (topic.clone(), p)).collect();
                    self.fail_partitions(
                        extra,
                        &format!(
                            "the destination topic {topic} has {dn} partitions but its source has {n}: partitions {n}..{} have no \
                             source partition behind them (added on the destination directly); they stay FAILED (read-only) \
                             until a failover. Kafka cannot remove partitions: to mirror this topic exactly, delete and recreate \
                             the destination topic (and its entries in state_dir/agent/{}.json) with the gateway stopped",
                            dn - 1,
                            self.name
                        ),
                    );
                }
            }
            match dest.topics.get(&topic) {
                None => {}
                Some(d) if (d.leaders.len() as i32) < n => {
                    let r = async {
                        let mut c = self.dest_admin().await?;
                        wire::create_partitions(&mut c, &topic, n).await
                    }
                    .await;
                    match r {
                        Ok(()) => {
                            tracing::info!(mirror = %self.name, %topic, partitions = n, "destination topic grown to the source's partition count")
                        }
                        Err(e) => {
                            tracing::warn!(mirror = %self.name, %topic, error = %e, "cannot add partitions to the destination topic")
                        }
                    }
                    changed = true;
                }
                Some(_) => {}
            }
        }
        self.checked.store(true, Ordering::SeqCst);
        if changed {
            let _ = self.cluster.refresh().await;
            self.controller.sync_partitions();
        }
    }

    /// Whether the source is the cluster the offset map was mirrored from (its cluster id). A map
    /// without a recorded id (older file) adopts the current one. On a change the mirror is
    /// refused: every partition FAILED, no task runs, nothing is created.
    fn check_source_cluster(&self, meta: &ClusterMeta) -> bool {
        if let Some(reason) = lock(&self.refused).clone() {
            self.fail_partitions(self.mirror_partitions(), &reason);
            return false;
        }
        let reason = {
            let mut o = lock(&self.offsets);
            match check_id(o.source_cluster_id.as_deref(), meta.cluster_id.as_deref()) {
                IdCheck::Same => return true,
                IdCheck::Changed(_, new) if o.partitions.is_empty() => {
                    o.source_cluster_id = Some(new);
                    self.offsets_dirty.store(true, Ordering::SeqCst);
                    return true;
                }
                IdCheck::Adopt(id) => {
                    if !o.partitions.is_empty() {
                        tracing::info!(mirror = %self.name, cluster_id = %id, "the offset map has no source cluster id (written by an older version): adopting the current source's");
                    }
                    o.source_cluster_id = Some(id);
                    self.offsets_dirty.store(true, Ordering::SeqCst);
                    return true;
                }
                IdCheck::Changed(old, new) => format!(
                    "the source cluster id changed from {old} to {new}: the mirror's source ({}) is not the cluster its \
                     offset map was mirrored from, and the agent refuses to mirror from it (its records would be mapped \
                     onto the old cluster's). Point source.bootstrap back at cluster {old}, or mirror the new source into \
                     fresh destination topics (delete them and state_dir/agent/{}.json with the gateway stopped)",
                    self.source.bootstrap.join(","),
                    self.name
                ),
            }
        };
        tracing::error!(mirror = %self.name, %reason, "mirror refused");
        *lock(&self.refused) = Some(reason.clone());
        self.fail_partitions(self.mirror_partitions(), &reason);
        false
    }

    /// Identity checks of a topic the agent has mirrored (offset map entries): the source topic
    /// id, the destination topic still existing with the same id. `false`: its partitions are
    /// FAILED and the topic is left alone (never re-created).
    fn check_topic(&self, topic: &str, src: &wire::TopicMeta, dest: &ClusterMeta) -> bool {
        let parts: Vec<(String, i32)> = {
            let o = lock(&self.offsets);
            match o.partitions.get(topic) {
                Some(m) if !m.is_empty() => m.keys().map(|p| (topic.to_string(), *p)).collect(),
                _ => return true,
            }
        };
        if dest.absent.contains(topic) {
            self.fail_partitions(
                parts,
                &format!(
                    "destination topic {topic} disappeared after mirroring; not re-creating it (it was deleted on the \
                     destination behind the gateway). To mirror it again from the source log start, remove the topic from \
                     state_dir/agent/{}.json with the gateway stopped",
                    self.name
                ),
            );
            return false;
        }
        let dest_id = dest.topics.get(topic).and_then(|d| d.topic_id.clone());
        let mut failure = None;
        {
            let mut o = lock(&self.offsets);
            let ident = o.topics.entry(topic.to_string()).or_default();
            match check_id(ident.source_topic_id.as_deref(), src.topic_id.as_deref()) {
                IdCheck::Same => {}
                IdCheck::Adopt(id) => {
                    tracing::info!(mirror = %self.name, %topic, topic_id = %id, "the offset map has no source topic id for this topic (new entry, or written by an older version): adopting the current one");
                    ident.source_topic_id = Some(id);
                    self.offsets_dirty.store(true, Ordering::SeqCst);
                }
                IdCheck::Changed(old, new) => {
                    failure = Some(format!(
                        "the source topic {topic} changed identity: its topic id was {old} and is now {new} (deleted and \
                         re-created, or the source was repointed to another cluster); the destination holds the old topic's \
                         records, so the agent refuses to append the new one's. Delete and recreate the destination topic and \
                         remove the topic from state_dir/agent/{}.json with the gateway stopped",
                        self.name
                    ))
                }
            }
            if failure.is_none() {
                match check_id(ident.destination_topic_id.as_deref(), dest_id.as_deref()) {
                    IdCheck::Same => {}
                    IdCheck::Adopt(id) => {
                        tracing::info!(mirror = %self.name, %topic, topic_id = %id, "the offset map has no destination topic id for this topic (new entry, or written by an older version): adopting the current one");
                        ident.destination_topic_id = Some(id);
                        self.offsets_dirty.store(true, Ordering::SeqCst);
                    }
                    IdCheck::Changed(old, new) => {
                        failure = Some(format!(
                            "the destination topic {topic} was re-created after mirroring (topic id {old}, now {new}): it no \
                             longer holds what the agent mirrored; not mirroring into it. Remove the topic from \
                             state_dir/agent/{}.json with the gateway stopped to mirror it again from the source log start",
                            self.name
                        ))
                    }
                }
            }
        }
        match failure {
            Some(reason) => {
                self.fail_partitions(parts, &reason);
                false
            }
            None => true,
        }
    }

    /// Every partition of this mirror: in the controller's records and in the offset map.
    fn mirror_partitions(&self) -> Vec<(String, i32)> {
        let mut keys: HashSet<(String, i32)> = self
            .controller
            .records()
            .into_iter()
            .filter(|(r, _)| r.name == self.name)
            .flat_map(|(r, _)| r.partitions.into_iter().map(|p| (p.topic, p.partition)))
            .collect();
        let o = lock(&self.offsets);
        for (t, m) in &o.partitions {
            for p in m.keys() {
                keys.insert((t.clone(), *p));
            }
        }
        keys.into_iter().collect()
    }

    /// Fail partitions outside their tasks: stop the tasks, mark them FAILED with `reason`, and
    /// start no task for them until a failover clears the marks (or the gateway restarts, when
    /// the checks run again).
    fn fail_partitions(&self, keys: Vec<(String, i32)>, reason: &str) {
        let set: HashSet<(String, i32)> = keys.into_iter().collect();
        drop(self.stop_tasks(|k| set.contains(k)));
        let mut marked = lock(&self.marked);
        for (t, p) in set {
            if marked.insert((t.clone(), p)) {
                tracing::error!(mirror = %self.name, topic = %t, partition = p, %reason, "partition FAILED: the agent stopped mirroring it");
            }
            self.controller
                .set_agent_failed(&t, p, Some(format!("mirror agent: {reason}")));
        }
    }

    fn owns(&self, topic: &str) -> bool {
        self.router.mirror_index(topic) == Some(self.idx)
    }

    async fn dest_admin(&self) -> Result<KafkaClient, String> {
        let mut last = "no destination broker known".to_string();
        for (_, addr) in self.cluster.brokers() {
            match self.cluster.client(&addr, self.dest_timeout).await {
                Ok(c) => return Ok(c),
                Err(e) => last = e.to_string(),
            }
        }
        Err(last)
    }

    async fn create_topic(
        &self,
        meta: &ClusterMeta,
        topic: &str,
        src: &wire::TopicMeta,
    ) -> Result<(), String> {
        let timeout = Duration::from_millis(self.source.connect_timeout_ms);
        let mut configs = Vec::new();
        for addr in meta.brokers.values() {
            if let Ok(mut c) =
                KafkaClient::connect_with(&self.source_connector, addr, timeout).await
            {
                configs = wire::topic_configs(&mut c, topic).await;
                break;
            }
        }
        let brokers = self.cluster.brokers().len().max(1) as i16;
        let rf = src.replication_factor.min(brokers).max(1);
        let n = src.leaders.len() as i32;
        let mut c = self.dest_admin().await?;
        wire::create_topic(&mut c, topic, n, rf, &configs).await?;
        tracing::info!(
            mirror = %self.name, %topic, partitions = n, replication_factor = rf,
            configs = ?configs, "created the destination topic (configs copied from the source)"
        );
        Ok(())
    }

    /// Start tasks for MIRRORING partitions without one; stop tasks of partitions that are not
    /// MIRRORING any more (paused, failing over).
    fn supervise(self: &Arc<Self>) {
        let meta = self
            .source_meta
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut tasks = lock(&self.tasks);
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

    /// Signal the tasks matching `which` to stop; returns their handles.
    fn stop_tasks(&self, which: impl Fn(&(String, i32)) -> bool) -> Vec<JoinHandle<()>> {
        let mut tasks = lock(&self.tasks);
        let mut handles = Vec::new();
        for (k, slot) in tasks.iter_mut() {
            if which(k) {
                let _ = slot.stop.send(true);
                if let Some(h) = slot.handle.take() {
                    handles.push(h);
                }
            }
        }
        handles
    }

    /// The failover hook: stop every task of this mirror, clear the FAILED marks the agent set,
    /// wait (bounded) until the tasks finished their appends in flight, persist the offset map.
    async fn stop_and_drain(&self) {
        let handles = self.stop_tasks(|_| true);
        {
            let mut tasks = lock(&self.tasks);
            for ((t, p), _) in tasks.drain() {
                self.controller.set_agent_failed(&t, p, None);
            }
        }
        for (t, p) in lock(&self.marked).drain() {
            self.controller.set_agent_failed(&t, p, None);
        }
        let n = handles.len();
        if tokio::time::timeout(STOP_WAIT, futures_join(handles))
            .await
            .is_err()
        {
            tracing::warn!(mirror = %self.name, "agent tasks still busy after {STOP_WAIT:?}; the failover goes on (fencing refuses their appends)");
        }
        self.flush();
        tracing::info!(mirror = %self.name, tasks = n, "mirror agent stopped for the failover");
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

    fn count_append(&self, bytes: usize) {
        self.metrics.batches.with_label_values(&[&self.name]).inc();
        self.metrics
            .bytes
            .with_label_values(&[&self.name])
            .inc_by(bytes as u64);
    }
}

async fn futures_join(handles: Vec<JoinHandle<()>>) {
    for h in handles {
        let _ = h.await;
    }
}

/// Scrape-time collector of `mirrorgate_mirror_lag_records` and `mirrorgate_mirror_lag_seconds`:
/// per partition, or (with `metrics.per_partition: false`) the largest lag of each topic. Built
/// from the running partition tasks at each scrape, so series of stopped or deleted partitions
/// disappear.
struct LagCollector {
    agent: Weak<Agent>,
    per_partition: bool,
    records: prometheus::IntGaugeVec,
    seconds: prometheus::GaugeVec,
}

impl LagCollector {
    fn new(agent: Weak<Agent>, per_partition: bool) -> Result<Self, prometheus::Error> {
        let labels: &[&str] = if per_partition {
            &["mirror", "topic", "partition"]
        } else {
            &["mirror", "topic"]
        };
        Ok(LagCollector {
            agent,
            per_partition,
            records: prometheus::IntGaugeVec::new(
                Opts::new(
                    "mirrorgate_mirror_lag_records",
                    "Records the built-in agent is behind the source (high watermark - next offset).",
                ),
                labels,
            )?,
            seconds: prometheus::GaugeVec::new(
                Opts::new(
                    "mirrorgate_mirror_lag_seconds",
                    "Seconds the built-in agent is behind the source (0 when caught up).",
                ),
                labels,
            )?,
        })
    }
}

impl prometheus::core::Collector for LagCollector {
    fn desc(&self) -> Vec<&prometheus::core::Desc> {
        let mut d = self.records.desc();
        d.extend(self.seconds.desc());
        d
    }
    fn collect(&self) -> Vec<prometheus::proto::MetricFamily> {
        self.records.reset();
        self.seconds.reset();
        if let Some(agent) = self.agent.upgrade() {
            for m in &agent.mirrors {
                let tasks = lock(&m.tasks);
                for ((t, p), slot) in tasks.iter() {
                    if slot.handle.as_ref().is_none_or(|h| h.is_finished()) {
                        continue;
                    }
                    if let Some((r, s)) = slot.stats.lag() {
                        if self.per_partition {
                            let ps = p.to_string();
                            self.records.with_label_values(&[&m.name, t, &ps]).set(r);
                            self.seconds.with_label_values(&[&m.name, t, &ps]).set(s);
                        } else {
                            let rg = self.records.with_label_values(&[&m.name, t]);
                            rg.set(rg.get().max(r));
                            let sg = self.seconds.with_label_values(&[&m.name, t]);
                            sg.set(sg.get().max(s));
                        }
                    }
                }
            }
        }
        let mut out = prometheus::core::Collector::collect(&self.records);
        out.extend(prometheus::core::Collector::collect(&self.seconds));
        out
    }
}
