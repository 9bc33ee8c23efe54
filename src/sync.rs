//! Topic config sync and ACL sync for the mirrors with a `source:` (docs/configs-and-acls.md):
//! besides the records, the built-in agent keeps the destination topics' configs equal to the
//! source's ([`configs`]) and, opt-in, creates the source's topic and group ACLs on the
//! destination ([`acls`]). Both stop for good when the mirror's failover starts: the agent's
//! stop hook calls [`Syncs::stop`], which waits for a write in flight; every write checks the
//! stop under the same gate ([`wire`]). After the failover the destination belongs to the
//! applications.
//!
//! The consumer group offset sync of the same mirrors is [`groups`]: committed offsets
//! translated through the agent's offset map, a final round at failover.
//!
//! Several instances: the instance that runs the mirror's built-in agent (its owner on the state
//! topic) alone syncs; the others stand by, and take over with the agent. Sync state (what was in
//! step, what was created, drift) lives in memory on the instance syncing.
//!
//! Owns: the per-mirror config and ACL sync loops, their status (admin API) and metrics
//! (`mirrorgate_config_sync_*`, `mirrorgate_config_drift_*`, `mirrorgate_acl_sync_*`).
//! Must not touch: partition states, the agent's tasks and offset maps, the records.

pub mod acls;
pub mod configs;
pub mod groups;
pub mod wire;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus::{IntCounterVec, IntGaugeVec, Opts};
use serde::Serialize;
use tokio::sync::watch;

use crate::client::Connector;
use crate::cluster::ClusterView;
use crate::config::{AclSelector, AclSyncConfig, Config, ConfigSyncConfig};
use crate::controller::MirrorController;
use crate::metrics::Metrics;

use acls::{AclBinding, AclSync};
use configs::{ConfigSync, Drift};
use wire::SyncIo;

/// How long a failover waits for a sync write in flight.
const STOP_WAIT: Duration = Duration::from_secs(10);
/// How often an instance standing by looks whether it runs the mirror's agent now.
const STANDBY_POLL: Duration = Duration::from_secs(1);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Status of one kind of sync of one mirror (admin API).
#[derive(Debug, Clone, Default, Serialize)]
pub struct RunStatus {
    pub enabled: bool,
    pub sync_interval_ms: u64,
    pub last_run_ms: Option<i64>,
    pub last_success_ms: Option<i64>,
    /// The last round's error (the round did nothing), or `None`.
    pub last_error: Option<String>,
    /// Per-item errors of the last round (topics, bindings).
    pub errors: Vec<String>,
    /// Stopped by the mirror's failover: nothing is written any more.
    pub stopped: bool,
    /// Several instances: why this one does not sync now (another runs the mirror's agent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub standby: Option<String>,
}

/// `GET /v1/mirrors/{name}` → `config_sync`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ConfigStatus {
    #[serde(flatten)]
    pub run: RunStatus,
    /// Topics compared in the last round.
    pub topics: usize,
    /// Synced keys in step after the last round.
    pub keys_in_step: usize,
    pub keys_set_total: u64,
    pub keys_deleted_total: u64,
    /// Synced keys changed on the destination by someone else (reported, not overwritten).
    pub drift: Vec<Drift>,
}

/// `GET /v1/mirrors/{name}` → `acl_sync`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AclStatus {
    #[serde(flatten)]
    pub run: RunStatus,
    /// Source bindings selected in the last round.
    pub selected: usize,
    pub created_total: u64,
    pub deleted_total: u64,
    /// Bindings this gateway created (and did not delete) since it started.
    pub created_now: usize,
    /// Bindings this gateway created that were deleted on the destination: not re-created.
    pub removed_on_destination: Vec<AclBinding>,
}

#[derive(Clone)]
struct SyncMetrics {
    config_runs: IntCounterVec,
    config_changes: IntCounterVec,
    config_keys: IntGaugeVec,
    drift_keys: IntGaugeVec,
    drift_total: IntCounterVec,
    config_last_success: IntGaugeVec,
    acl_runs: IntCounterVec,
    acl_created: IntCounterVec,
    acl_deleted: IntCounterVec,
    acl_selected: IntGaugeVec,
    acl_last_success: IntGaugeVec,
}

impl SyncMetrics {
    fn new(metrics: &Metrics) -> Result<SyncMetrics, prometheus::Error> {
        let counter =
            |name: &str, help: &str, labels: &[&str]| -> Result<IntCounterVec, prometheus::Error> {
                let c = IntCounterVec::new(Opts::new(name, help), labels)?;
                // Fails only for a second gateway in the same process (tests).
                let _ = metrics.registry().register(Box::new(c.clone()));
                Ok(c)
            };
        let gauge = |name: &str, help: &str| -> Result<IntGaugeVec, prometheus::Error> {
            let g = IntGaugeVec::new(Opts::new(name, help), &["mirror"])?;
            let _ = metrics.registry().register(Box::new(g.clone()));
            Ok(g)
        };
        Ok(SyncMetrics {
            config_runs: counter(
                "mirrorgate_config_sync_runs_total",
                "Topic config sync rounds, by result (ok, error).",
                &["mirror", "result"],
            )?,
            config_changes: counter(
                "mirrorgate_config_sync_changes_total",
                "Destination topic config keys written by config sync, by operation (set, delete).",
                &["mirror", "op"],
            )?,
            config_keys: gauge(
                "mirrorgate_config_sync_keys",
                "Synced topic config keys in step after the last round.",
            )?,
            drift_keys: gauge(
                "mirrorgate_config_drift_keys",
                "Synced topic config keys changed on the destination by someone else (not overwritten).",
            )?,
            drift_total: counter(
                "mirrorgate_config_drift_total",
                "Destination-side changes to synced topic config keys detected (each reported once).",
                &["mirror"],
            )?,
            config_last_success: gauge(
                "mirrorgate_config_sync_last_success_timestamp_seconds",
                "Unix time of the last successful topic config sync round.",
            )?,
            acl_runs: counter(
                "mirrorgate_acl_sync_runs_total",
                "ACL sync rounds, by result (ok, error).",
                &["mirror", "result"],
            )?,
            acl_created: counter(
                "mirrorgate_acl_sync_created_total",
                "ACL bindings of the source created on the destination.",
                &["mirror"],
            )?,
            acl_deleted: counter(
                "mirrorgate_acl_sync_deleted_total",
                "ACL bindings this gateway created and deleted again (gone from the source).",
                &["mirror"],
            )?,
            acl_selected: gauge(
                "mirrorgate_acl_sync_selected",
                "Source ACL bindings selected for the destination in the last round.",
            )?,
            acl_last_success: gauge(
                "mirrorgate_acl_sync_last_success_timestamp_seconds",
                "Unix time of the last successful ACL sync round.",
            )?,
        })
    }
}

/// Config and ACL sync of one mirror.
pub struct MirrorSync {
    name: String,
    io: SyncIo,
    configs: ConfigSyncConfig,
    acls: AclSyncConfig,
    config_status: Mutex<ConfigStatus>,
    acl_status: Mutex<AclStatus>,
    metrics: SyncMetrics,
}

/// The sync of every mirror with a source.
#[derive(Default)]
pub struct Syncs {
    mirrors: Vec<Arc<MirrorSync>>,
}

/// Start config sync (and ACL sync where enabled) for every mirror with a `source:`.
pub fn start(
    config: &Config,
    controller: &Arc<MirrorController>,
    cluster: &Arc<ClusterView>,
    metrics: &Metrics,
    shutdown: &watch::Receiver<bool>,
) -> Result<Syncs, String> {
    let metrics = SyncMetrics::new(metrics).map_err(|e| e.to_string())?;
    let router = config.topic_router();
    let mut mirrors = Vec::new();
    for (idx, m) in config.mirrors.iter().enumerate() {
        let Some(source) = m.agent_source() else {
            continue;
        };
        let selector =
            AclSelector::compile(&m.acls).map_err(|e| format!("mirror {:?}: acls: {e}", m.name))?;
        let io = SyncIo {
            name: m.name.clone(),
            idx,
            router: router.clone(),
            source_bootstrap: source.bootstrap.clone(),
            source_connector: Connector::for_cluster(source)
                .map_err(|e| format!("mirror {:?}: source: {e}", m.name))?,
            source_timeout: Duration::from_millis(source.connect_timeout_ms),
            cluster: cluster.clone(),
            dest_timeout: Duration::from_millis(config.destination.connect_timeout_ms),
            controller: controller.clone(),
            gate: Arc::new(tokio::sync::Mutex::new(())),
            stopped: Arc::new(AtomicBool::new(false)),
        };
        let s = Arc::new(MirrorSync {
            name: m.name.clone(),
            io,
            configs: m.configs.clone(),
            acls: m.acls.clone(),
            config_status: Mutex::new(ConfigStatus {
                run: RunStatus {
                    enabled: m.configs.enabled,
                    sync_interval_ms: m.configs.sync_interval_ms,
                    ..RunStatus::default()
                },
                ..ConfigStatus::default()
            }),
            acl_status: Mutex::new(AclStatus {
                run: RunStatus {
                    enabled: m.acls.enabled,
                    sync_interval_ms: m.acls.sync_interval_ms,
                    ..RunStatus::default()
                },
                ..AclStatus::default()
            }),
            metrics: metrics.clone(),
        });
        if m.configs.enabled {
            tokio::spawn(s.clone().run_configs(shutdown.clone()));
        }
        if m.acls.enabled {
            tokio::spawn(s.clone().run_acls(AclSync::new(selector), shutdown.clone()));
        }
        mirrors.push(s);
    }
    Ok(Syncs { mirrors })
}

impl Syncs {
    fn mirror(&self, name: &str) -> Option<&Arc<MirrorSync>> {
        self.mirrors.iter().find(|m| m.name == name)
    }

    /// The failover's stop: nothing is written for `mirror` once this returns (a write in
    /// flight is waited for, bounded).
    pub async fn stop(&self, mirror: &str) {
        let Some(m) = self.mirror(mirror) else { return };
        m.io.stopped.store(true, Ordering::SeqCst);
        if tokio::time::timeout(STOP_WAIT, m.io.gate.lock())
            .await
            .is_err()
        {
            tracing::warn!(mirror = %mirror, "a config/ACL sync write still in flight after {STOP_WAIT:?}; the failover goes on");
        }
        lock(&m.config_status).run.stopped = true;
        lock(&m.acl_status).run.stopped = true;
        tracing::info!(mirror = %mirror, "config and ACL sync stopped for the failover");
    }

    /// `config_sync` and `acl_sync` of a mirror (admin API).
    pub fn status(&self, mirror: &str) -> Option<serde_json::Value> {
        let m = self.mirror(mirror)?;
        let c = lock(&m.config_status).clone();
        let a = lock(&m.acl_status).clone();
        Some(serde_json::json!({ "config_sync": c, "acl_sync": a }))
    }
}

impl MirrorSync {
    /// Sleep one interval; `false` on shutdown or once the failover started.
    async fn wait(&self, interval_ms: u64, shutdown: &mut watch::Receiver<bool>) -> bool {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(interval_ms)) => {}
            _ = shutdown.changed() => {}
        }
        !*shutdown.borrow() && !self.io.failover_started()
    }

    /// Several instances: while another instance runs the mirror's agent (and syncs), wait,
    /// looking again every [`STANDBY_POLL`], with the reason in `status`. `false` on shutdown
    /// or once the failover started.
    async fn until_turn(
        &self,
        status: impl Fn(Option<String>),
        shutdown: &mut watch::Receiver<bool>,
    ) -> bool {
        loop {
            let why = self.io.standby();
            let turn = why.is_none();
            status(why);
            if turn {
                return true;
            }
            if !self.wait(STANDBY_POLL.as_millis() as u64, shutdown).await {
                return false;
            }
        }
    }

    async fn run_configs(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let mut sync = ConfigSync::default();
        let labels = [self.name.as_str()];
        loop {
            if *shutdown.borrow() || self.io.failover_started() {
                break;
            }
            let standby = |why| lock(&self.config_status).run.standby = why;
            if !self.until_turn(standby, &mut shutdown).await {
                break;
            }
            let result = sync.round(&self.io, &self.configs).await;
            let drifts = sync.drifts();
            {
                let mut st = lock(&self.config_status);
                st.run.last_run_ms = Some(now_ms());
                match result {
                    Ok(r) => {
                        self.metrics
                            .config_runs
                            .with_label_values(&[&self.name, "ok"])
                            .inc();
                        self.metrics
                            .config_changes
                            .with_label_values(&[&self.name, "set"])
                            .inc_by(r.set as u64);
                        self.metrics
                            .config_changes
                            .with_label_values(&[&self.name, "delete"])
                            .inc_by(r.deleted as u64);
                        self.metrics
                            .config_keys
                            .with_label_values(&labels)
                            .set(r.keys_in_step as i64);
                        self.metrics
                            .drift_total
                            .with_label_values(&labels)
                            .inc_by(r.new_drifts.len() as u64);
                        self.metrics
                            .config_last_success
                            .with_label_values(&labels)
                            .set(now_ms() / 1000);
                        for d in &r.new_drifts {
                            tracing::warn!(
                                mirror = %self.name, topic = %d.topic, key = %d.key,
                                source = ?d.source, destination = ?d.destination,
                                "topic config changed on the destination: the synced key differs from the source's value; \
                                 not overwritten (it is overwritten when the source's value changes); reported as drift"
                            );
                        }
                        if r.set + r.deleted > 0 {
                            tracing::info!(mirror = %self.name, set = r.set, deleted = r.deleted, "destination topic configs synced from the source");
                        }
                        st.run.last_success_ms = st.run.last_run_ms;
                        st.run.last_error = None;
                        st.run.errors = r.errors;
                        st.topics = r.topics;
                        st.keys_in_step = r.keys_in_step;
                        st.keys_set_total += r.set as u64;
                        st.keys_deleted_total += r.deleted as u64;
                    }
                    Err(e) => {
                        self.metrics
                            .config_runs
                            .with_label_values(&[&self.name, "error"])
                            .inc();
                        if st.run.last_error.as_deref() != Some(&e) {
                            tracing::warn!(mirror = %self.name, error = %e, "topic config sync round failed");
                        }
                        st.run.last_error = Some(e);
                    }
                }
                self.metrics
                    .drift_keys
                    .with_label_values(&labels)
                    .set(drifts.len() as i64);
                st.drift = drifts;
            }
            if !self
                .wait(self.configs.sync_interval_ms, &mut shutdown)
                .await
            {
                break;
            }
        }
        lock(&self.config_status).run.stopped = self.io.failover_started();
    }

    async fn run_acls(self: Arc<Self>, mut sync: AclSync, mut shutdown: watch::Receiver<bool>) {
        let labels = [self.name.as_str()];
        loop {
            if *shutdown.borrow() || self.io.failover_started() {
                break;
            }
            let standby = |why| lock(&self.acl_status).run.standby = why;
            if !self.until_turn(standby, &mut shutdown).await {
                break;
            }
            let result = sync.round(&self.io).await;
            {
                let mut st = lock(&self.acl_status);
                st.run.last_run_ms = Some(now_ms());
                match result {
                    Ok(r) => {
                        self.metrics
                            .acl_runs
                            .with_label_values(&[&self.name, "ok"])
                            .inc();
                        self.metrics
                            .acl_created
                            .with_label_values(&labels)
                            .inc_by(r.created as u64);
                        self.metrics
                            .acl_deleted
                            .with_label_values(&labels)
                            .inc_by(r.deleted as u64);
                        self.metrics
                            .acl_selected
                            .with_label_values(&labels)
                            .set(r.selected as i64);
                        self.metrics
                            .acl_last_success
                            .with_label_values(&labels)
                            .set(now_ms() / 1000);
                        if r.created + r.deleted > 0 {
                            tracing::info!(mirror = %self.name, created = r.created, deleted = r.deleted, "destination ACLs synced from the source");
                        }
                        for e in &r.errors {
                            tracing::warn!(mirror = %self.name, error = %e, "ACL sync");
                        }
                        st.run.last_success_ms = st.run.last_run_ms;
                        st.run.last_error = None;
                        st.run.errors = r.errors;
                        st.selected = r.selected;
                        st.created_total += r.created as u64;
                        st.deleted_total += r.deleted as u64;
                        st.removed_on_destination = r.removed_on_destination;
                    }
                    Err(e) => {
                        self.metrics
                            .acl_runs
                            .with_label_values(&[&self.name, "error"])
                            .inc();
                        if st.run.last_error.as_deref() != Some(&e) {
                            tracing::warn!(mirror = %self.name, error = %e, "ACL sync round failed");
                        }
                        st.run.last_error = Some(e);
                    }
                }
                st.created_now = sync.created();
            }
            if !self.wait(self.acls.sync_interval_ms, &mut shutdown).await {
                break;
            }
        }
        lock(&self.acl_status).run.stopped = self.io.failover_started();
    }
}
