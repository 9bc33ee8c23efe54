//! Wires the modules into a running gateway: destination metadata refresh, the Kafka
//! listeners, and the admin HTTP server; reports readiness; shuts down gracefully.
//!
//! Owns: the lifecycle of the gateway's tasks. Must not touch: wire formats (protocol), the
//! forwarding logic (proxy) or HTTP routing (admin) beyond starting them.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

use crate::cluster::ClusterView;
use crate::config::{Config, ListenerConfig};
use crate::controller::{MirrorController, PartitionStateGauge};
use crate::metrics::{ListenerKind, Metrics};
use crate::mirror::permissions::PermissionCheck;
use crate::proxy::{BoundPorts, ConnContext, ListenerAddressMap};
use crate::psm::registry::{ProducerGauge, PsmRegistry};
use crate::state::{StateError, StateStore};

mod admin_backend;
pub mod demo;
pub mod forward;
mod maintain;
pub mod peers;
pub mod signals;

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("admin.bind {addr:?} is not an ip:port address")]
    AdminAddr { addr: String },
    #[error("cannot bind the admin server on {addr}: {source}")]
    AdminBind {
        addr: String,
        source: std::io::Error,
    },
    #[error("state directory: {0}")]
    State(#[from] StateError),
    #[error("admin.token: {0}")]
    Token(#[from] crate::config::SecretError),
    #[error("mirror agent: {0}")]
    Agent(String),
    #[error("state directory does not match the mirrors configured: {0}")]
    StateMismatch(String),
    #[error("destination: {0}")]
    Transport(crate::client::SetupError),
    #[error("metrics: {0}")]
    Metrics(String),
    #[error("listeners.{listener}: {source}")]
    ListenerTransport {
        listener: &'static str,
        source: crate::net::SetupError,
    },
    #[error("limits.connection_threads: {0}")]
    Threads(crate::proxy::threads::ThreadsError),
}

/// One listener of the running gateway.
pub struct RunningListener {
    pub kind: ListenerKind,
    pub config: ListenerConfig,
    pub bound: Arc<BoundPorts>,
}

/// A running gateway.
pub struct Gateway {
    pub config: Config,
    pub metrics: Arc<Metrics>,
    pub cluster: Arc<ClusterView>,
    pub listeners: Vec<RunningListener>,
    /// The mirrors' forward listeners.
    pub forwards: Vec<forward::RunningForward>,
    /// Producer state of the tracked (mirror) partitions; `None` without mirrors.
    pub psm: Option<Arc<PsmRegistry>>,
    /// The mirror controller; `None` without mirrors.
    pub mirrors: Option<Arc<MirrorController>>,
    /// The check of the gateway principal's own permissions; `None` without mirrors.
    pub permissions: Option<Arc<PermissionCheck>>,
    /// The built-in mirror agent; `None` without a mirror with a `source:`.
    pub agent: Option<Arc<crate::agent::Agent>>,
    /// The failover reports; `None` without mirrors.
    reports: Option<crate::mirror::report::ReportStore>,
    /// The recovery of failovers' un-mirrored tails; `None` without mirrors.
    recovery: Option<Arc<crate::recovery::service::Recoverer>>,
    /// The audit trail of state-changing admin calls.
    audit: crate::audit::AuditTrail,
    admin_addr: SocketAddr,
    /// The admin token required by mutating calls (`None`: loopback without a token).
    pub admin_token: Option<String>,
    shutdown: watch::Sender<bool>,
    drained: Mutex<Option<mpsc::Receiver<()>>>,
}

pub use crate::admin::Readiness;

impl Gateway {
    /// Lag of a partition mirrored by the built-in agent (admin API).
    pub fn agent_lag(&self, mirror: &str, topic: &str, partition: i32) -> Option<(i64, f64)> {
        self.agent.as_ref()?.lag(mirror, topic, partition)
    }
}

impl Gateway {
    /// Start every task of the gateway. Returns once the admin server is bound; the Kafka
    /// listeners are bound as soon as destination metadata is known.
    pub async fn start(config: Config) -> Result<Arc<Gateway>, StartError> {
        let metrics = Metrics::new();
        let connector = crate::client::Connector::for_cluster(&config.destination)
            .map_err(StartError::Transport)?;
        let cluster = ClusterView::new(config.destination.clone(), connector, metrics.clone());
        let (shutdown, shutdown_rx) = watch::channel(false);
        let (drain_tx, drain_rx) = mpsc::channel::<()>(1);

        let admin_addr: SocketAddr =
            config
                .admin
                .bind_addr()
                .map_err(|_| StartError::AdminAddr {
                    addr: config.admin.bind.clone(),
                })?;
        let admin_listener =
            TcpListener::bind(admin_addr)
                .await
                .map_err(|source| StartError::AdminBind {
                    addr: config.admin.bind.clone(),
                    source,
                })?;
        let admin_addr = admin_listener.local_addr().unwrap_or(admin_addr);

        let admin_token = config
            .admin
            .token
            .as_ref()
            .map(|t| t.resolve())
            .transpose()?;
        if config
            .state_dir
            .join(crate::controller::MIRRORS_AREA)
            .is_dir()
        {
            let store = StateStore::open(&config.state_dir)?;
            crate::controller::check_state_matches_config(&config, &store)
                .map_err(StartError::StateMismatch)?;
        }
        let (psm, mirrors, permissions) = if config.mirrors.is_empty() {
            (None, None, None)
        } else {
            let store = StateStore::open(&config.state_dir)?;
            if let Some(s) = crate::mirror::fault_hooks::Sabotage::active() {
                tracing::error!(
                    sabotage = s.as_str(),
                    "MIRRORGATE_TEST_SABOTAGE is set: a protection of the mirrors is switched off (chaos-run positive control; never in production)"
                );
            }
            let registry = PsmRegistry::new(&config, Some(store.clone()), &metrics);
            let _ = metrics
                .registry()
                .register(Box::new(ProducerGauge::new(registry.clone())));
            let controller = MirrorController::new(
                &config,
                store,
                &metrics,
                Some(registry.clone()),
                cluster.clone(),
                crate::mirror::fault_hooks::FaultHooks::from_env(),
            );
            let _ = metrics
                .registry()
                .register(Box::new(PartitionStateGauge(controller.clone())));
            // Barriers first, so that no rebuild counts what lies before a partition's barrier.
            for (record, _) in controller.records() {
                for p in &record.partitions {
                    if let Some(o) = p.barrier_offset {
                        registry.set_barrier(&p.topic, p.partition, o);
                    }
                }
            }
            tokio::spawn(crate::psm::rebuild::maintain(
                registry.clone(),
                cluster.clone(),
                config.psm.expiration_ms.is_some(),
                Duration::from_millis(config.psm.snapshot_interval_ms),
                Duration::from_millis(config.destination.connect_timeout_ms),
                shutdown_rx.clone(),
            ));
            let permissions = Arc::new(PermissionCheck::new(
                &metrics,
                config.failover.barrier != crate::config::BarrierMode::Data,
            ));
            tokio::spawn(maintain::maintain_mirrors(
                controller.clone(),
                permissions.clone(),
                metrics.clone(),
                cluster.clone(),
                config
                    .mirrors
                    .iter()
                    .flat_map(|m| m.topics.iter())
                    .filter_map(|t| match crate::config::TopicEntry::parse(t) {
                        crate::config::TopicEntry::Exact(name) => Some(name.to_string()),
                        crate::config::TopicEntry::Regex(_) => None,
                    })
                    .collect(),
                Duration::from_millis(config.destination.connect_timeout_ms),
                shutdown_rx.clone(),
            ));
            peers::start(&config, &controller, &cluster, &metrics, &shutdown_rx);
            (Some(registry), Some(controller), Some(permissions))
        };

        let mut specs = vec![(ListenerKind::Client, config.listeners.client.clone())];
        if let Some(m) = &config.listeners.mirror {
            specs.push((ListenerKind::Mirror, m.clone()));
        }
        let mut acceptors = Vec::new();
        for (kind, lcfg) in &specs {
            let acceptor = crate::net::Acceptor::for_listener(lcfg).map_err(|source| {
                StartError::ListenerTransport {
                    listener: kind.as_str(),
                    source,
                }
            })?;
            if let Some(served) = acceptor.served_certificate() {
                watch_certificate(*kind, served, &metrics, &shutdown_rx);
            }
            acceptors.push(acceptor);
        }
        // The agent appends through the mirror listener (the second spec, when configured).
        let mirror_connector = match acceptors.get(1) {
            Some(a) => crate::client::Connector::to_own_listener(a).map_err(|source| {
                StartError::ListenerTransport {
                    listener: "mirror",
                    source,
                }
            })?,
            None => crate::client::Connector::plain(),
        };
        let agent = crate::agent::start(
            &config,
            mirrors.as_ref(),
            &cluster,
            &metrics,
            &shutdown_rx,
            mirror_connector,
        )
        .map_err(StartError::Agent)?;
        let reports = match &mirrors {
            Some(ctl) => {
                let store =
                    crate::mirror::report::ReportStore::new(StateStore::open(&config.state_dir)?);
                let names: Vec<String> = config.mirrors.iter().map(|m| m.name.clone()).collect();
                crate::agent::report_follow::resume(&store, ctl, agent.as_ref(), &names);
                if config.instances.is_some() {
                    tokio::spawn(crate::agent::report_follow::take_over_open_reports(
                        store.clone(),
                        ctl.clone(),
                        agent.clone(),
                        names,
                        shutdown_rx.clone(),
                    ));
                }
                Some(store)
            }
            None => None,
        };
        let recovery = match &reports {
            Some(store) => Some(
                crate::recovery::service::Recoverer::new(
                    &config.mirrors,
                    (
                        cluster.connector().clone(),
                        config.destination.bootstrap.clone(),
                    ),
                    Duration::from_millis(config.destination.connect_timeout_ms),
                    Some(store.clone()),
                    &metrics,
                )
                .map_err(StartError::Agent)?,
            ),
            None => None,
        };
        let threads = crate::proxy::threads::ConnectionThreads::start(
            config.limits.connection_threads,
            "mirrorgate-conn",
        )
        .map_err(StartError::Threads)?;
        tracing::debug!(threads = threads.len(), "connection threads started");
        let mut listeners = Vec::new();
        let mut client_ctx = None;
        for ((kind, lcfg), acceptor) in specs.into_iter().zip(acceptors) {
            let ctx = Arc::new(ConnContext {
                kind,
                psm: psm.clone(),
                mirrors: mirrors
                    .clone()
                    .map(|m| m as Arc<dyn crate::mirror::policy::MirrorPolicy>),
                verify_crc: match kind {
                    ListenerKind::Mirror => config.psm.verify_crc_mirror,
                    ListenerKind::Client | ListenerKind::Forward => config.psm.verify_crc_client,
                },
                address_map: ListenerAddressMap::new(&lcfg),
                cluster: cluster.clone(),
                metrics: metrics.clone(),
                handles: metrics.api_handles(kind),
                limits: config.limits.clone(),
                connect_timeout: Duration::from_millis(config.destination.connect_timeout_ms),
                acceptor,
                principal_limits: lcfg.allowed_principals.as_ref().map(|allowed| {
                    let own = config
                        .destination
                        .sasl
                        .as_ref()
                        .map(|s| s.username.as_str());
                    Arc::new(crate::proxy::sasl::PrincipalLimits::new(
                        kind.as_str(),
                        allowed,
                        own,
                    ))
                }),
                threads: Some(threads.clone()),
                forward: None,
            });
            if kind == ListenerKind::Client {
                client_ctx = Some(ctx.clone());
            }
            let bound = Arc::new(BoundPorts::default());
            tokio::spawn(crate::proxy::listener::run_listener(
                lcfg.clone(),
                crate::proxy::listener::Target::Fixed(ctx),
                bound.clone(),
                shutdown_rx.clone(),
                drain_tx.clone(),
            ));
            listeners.push(RunningListener {
                kind,
                config: lcfg,
                bound,
            });
        }
        let (owners, signals) = (
            (mirrors.as_ref(), agent.as_ref()),
            (&shutdown_rx, &drain_tx),
        );
        let forwards = forward::start(&config, client_ctx.as_deref(), owners, signals)?;
        drop(drain_tx);
        tokio::spawn(cluster.clone().refresh_loop(shutdown_rx.clone()));
        let audit = start_audit(&config, &metrics, &cluster, &shutdown_rx)?;

        let gw = Arc::new(Gateway {
            config,
            metrics,
            cluster,
            listeners,
            forwards,
            psm,
            mirrors,
            permissions,
            agent,
            reports,
            recovery,
            audit,
            admin_addr,
            admin_token,
            shutdown,
            drained: Mutex::new(Some(drain_rx)),
        });
        tokio::spawn(crate::admin::serve(
            admin_listener,
            gw.clone() as Arc<dyn crate::admin::AdminBackend>,
            shutdown_rx,
        ));
        tokio::spawn(log_startup_summary(gw.clone()));
        Ok(gw)
    }

    /// The bound admin address.
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin_addr
    }

    /// Ready = destination metadata known and a port bound for every known broker on every
    /// listener.
    pub fn readiness(&self) -> Readiness {
        let mut reasons = Vec::new();
        let metadata_known = self.cluster.is_known();
        if !metadata_known {
            reasons.push(match self.cluster.last_refresh_error() {
                Some(e) => format!("destination metadata not yet known (last attempt: {e})"),
                None => "destination metadata not yet known".to_string(),
            });
        }
        let brokers = self.cluster.brokers();
        for l in &self.listeners {
            let bound = l.bound.snapshot();
            for (node, _) in &brokers {
                if !bound.iter().any(|(n, _)| n == node) {
                    reasons.push(format!(
                        "{} listener has no port bound for broker {node}",
                        l.kind.as_str()
                    ));
                }
            }
        }
        if let Some(psm) = &self.psm {
            if !psm.is_initialized() {
                reasons.push("producer state of the mirror topics not discovered yet".to_string());
            }
            let not_ready = psm.not_ready();
            if !not_ready.is_empty() {
                let names: Vec<String> = not_ready
                    .iter()
                    .take(5)
                    .map(|(t, p)| format!("{t}-{p}"))
                    .collect();
                reasons.push(format!(
                    "{} tracked partition(s) not rebuilt yet ({}{})",
                    not_ready.len(),
                    names.join(", "),
                    if not_ready.len() > 5 { ", …" } else { "" }
                ));
            }
        }
        if let Some(m) = &self.mirrors {
            reasons.extend(m.problems());
        }
        let ready = reasons.is_empty();
        self.metrics.ready.set(i64::from(ready));
        Readiness {
            ready,
            metadata_known,
            reasons,
            warnings: self
                .permissions
                .as_ref()
                .map(|p| p.missing())
                .unwrap_or_default(),
        }
    }

    /// Record an audit event (the admin API's state-changing calls).
    pub fn audit(&self, event: crate::audit::AuditEvent) {
        self.audit.record(event);
    }

    /// Stop accepting, let in-flight requests finish (up to `limits.shutdown_grace_ms`), then
    /// hand the forward listeners' ledgers to the next process (none left open: they are whole).
    pub async fn shutdown(&self) {
        let _ = self.shutdown.send(true);
        let rx = match self.drained.lock() {
            Ok(mut d) => d.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        if let Some(mut rx) = rx {
            let grace = Duration::from_millis(self.config.limits.shutdown_grace_ms + 1000);
            match tokio::time::timeout(grace, rx.recv()).await {
                Err(_) => tracing::warn!("connections still open after the shutdown grace period (the forward listeners' ledgers are not handed over)"),
                Ok(_) => forward::hand_over(&self.forwards, &self.config.state_dir),
            }
        }
    }

    /// Wait until readiness or `timeout`.
    pub async fn wait_ready(&self, timeout: Duration) -> Result<(), Readiness> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let r = self.readiness();
            if r.ready {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(r);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Serve the listener's certificate files as they change, and keep its TLS metrics.
fn watch_certificate(
    kind: ListenerKind,
    served: Arc<crate::net::ServedCertificate>,
    metrics: &Arc<Metrics>,
    shutdown: &watch::Receiver<bool>,
) {
    let l = kind.as_str();
    let not_after = metrics.tls_not_after.with_label_values(&[l]);
    if let Some(t) = served.not_after() {
        not_after.set(t);
    }
    let ok = metrics.tls_reloads.with_label_values(&[l, "ok"]);
    let error = metrics.tls_reloads.with_label_values(&[l, "error"]);
    tokio::spawn(
        served.watch_files(shutdown.clone(), move |outcome| match outcome {
            Ok(r) => {
                ok.inc();
                if let Some(t) = r.not_after {
                    not_after.set(t);
                }
            }
            Err(_) => error.inc(),
        }),
    );
}

/// One INFO line once the gateway is ready (or after 60 s, with the reasons it is not):
/// listeners and their ports, upstream brokers, mirrors and their partition states.
async fn log_startup_summary(gw: Arc<Gateway>) {
    let ready = gw.wait_ready(Duration::from_secs(60)).await;
    let listeners: Vec<String> = gw
        .listeners
        .iter()
        .map(|l| {
            let ports: Vec<String> = l
                .bound
                .snapshot()
                .iter()
                .map(|(n, a)| format!("{n}→{a}"))
                .collect();
            format!("{}[{}]", l.kind.as_str(), ports.join(" "))
        })
        .collect();
    let brokers: Vec<String> = gw
        .cluster
        .brokers()
        .iter()
        .map(|(n, a)| format!("{n}={a}"))
        .collect();
    let mirrors: Vec<String> = gw
        .mirrors
        .as_ref()
        .map(|m| {
            let mut per: Vec<String> = Vec::new();
            for (record, unreadable) in m.records() {
                let mut states: Vec<String> = Vec::new();
                for st in crate::mirror::state::PartitionState::ALL {
                    let n = record.partitions.iter().filter(|p| p.state == st).count();
                    if n > 0 {
                        states.push(format!("{}={n}", st.as_str()));
                    }
                }
                if unreadable.is_some() {
                    states.push("STATE_UNREADABLE".into());
                }
                per.push(format!("{}({})", record.name, states.join(",")));
            }
            per
        })
        .unwrap_or_default();
    match ready {
        Ok(()) => tracing::info!(
            admin = %gw.admin_addr(),
            listeners = %listeners.join(" "),
            upstream_brokers = %brokers.join(" "),
            mirrors = %mirrors.join(" "),
            "mirrorgate ready"
        ),
        Err(r) => tracing::warn!(
            admin = %gw.admin_addr(),
            listeners = %listeners.join(" "),
            upstream_brokers = %brokers.join(" "),
            mirrors = %mirrors.join(" "),
            reasons = %r.reasons.join("; "),
            "mirrorgate not ready after 60 s"
        ),
    }
}

/// The audit trail: log only, or also `admin.audit_topic` on the destination (its writer runs
/// until shutdown, then flushes what is queued for a bounded time).
fn start_audit(
    config: &Config,
    metrics: &Arc<Metrics>,
    cluster: &Arc<ClusterView>,
    shutdown: &watch::Receiver<bool>,
) -> Result<crate::audit::AuditTrail, StartError> {
    let am = Arc::new(
        crate::audit::AuditMetrics::new().map_err(|e| StartError::Metrics(e.to_string()))?,
    );
    am.register(metrics.registry());
    let Some(topic) = config.admin.audit_topic.clone() else {
        return Ok(crate::audit::AuditTrail::log_only(am));
    };
    let (trail, rx) = crate::audit::AuditTrail::with_topic(am.clone());
    let sink = crate::audit::topic::TopicSink::new(
        cluster.clone(),
        topic,
        Duration::from_millis(config.destination.connect_timeout_ms.max(10_000)),
    );
    tokio::spawn(crate::audit::topic::run(
        rx,
        sink,
        am,
        shutdown.clone(),
        crate::audit::topic::SHUTDOWN_FLUSH,
    ));
    Ok(trail)
}
