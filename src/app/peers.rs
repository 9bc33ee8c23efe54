//! Wiring of several instances (`instances` configured): the link to the state topic, its
//! loops, the fence this instance applies for the others' failovers, and its gauges.
//!
//! Owns: that wiring. Must not touch: what the link decides (`mirror/peers.rs`).

use std::sync::Arc;
use std::time::Duration;

use prometheus::IntGauge;
use tokio::sync::watch;

use crate::cluster::ClusterView;
use crate::config::Config;
use crate::metrics::Metrics;
use crate::mirror::controller::MirrorController;
use crate::mirror::peers::log::KafkaStateLog;
use crate::mirror::peers::PeerLink;

/// Start the link when `instances` is configured.
pub(super) fn start(
    config: &Config,
    controller: &Arc<MirrorController>,
    cluster: &Arc<ClusterView>,
    metrics: &Metrics,
    shutdown: &watch::Receiver<bool>,
) {
    let Some(i) = &config.instances else {
        return;
    };
    let timeout = Duration::from_millis(config.destination.connect_timeout_ms);
    let log = Arc::new(KafkaStateLog::new(
        cluster.clone(),
        i.state_topic.clone(),
        timeout,
    ));
    let link = PeerLink::new(
        &i.id,
        &i.state_topic,
        Duration::from_millis(i.session_timeout_ms),
        log,
    );
    link.set_agents(
        config
            .mirrors
            .iter()
            .filter(|m| m.source.is_some())
            .map(|m| m.name.clone())
            .collect(),
    );
    controller.set_peers(link.clone());
    let settle = Duration::from_millis(config.limits.unknown_outcome_settle_ms);
    let fence = controller.peer_fence_hook(settle);
    let follow = controller.peer_follow_hook(settle);
    tokio::spawn(link.clone().run(fence, follow, shutdown.clone()));
    let alive = IntGauge::new(
        "mirrorgate_instances_alive",
        "Other gateway instances whose heartbeat on the state topic is within the session timeout",
    );
    let lease = IntGauge::new(
        "mirrorgate_instance_lease_held",
        "1 while this instance holds its lease on the state topic (it may admit mirror writes)",
    );
    let read_age = prometheus::Gauge::new(
        "mirrorgate_state_topic_read_age_seconds",
        "Seconds since this instance's last read that reached the state topic's end was sent (its lag behind the state topic)",
    );
    let driving = prometheus::IntGaugeVec::new(
        prometheus::Opts::new(
            "mirrorgate_failover_driven_here",
            "1 for each mirror whose announced failover this instance drives, 0 where another instance drives it",
        ),
        &["mirror"],
    );
    let agent_here = prometheus::IntGaugeVec::new(
        prometheus::Opts::new(
            "mirrorgate_agent_runs_here",
            "1 for each mirror whose built-in agent runs on this instance, 0 where it stands by (another instance owns it)",
        ),
        &["mirror"],
    );
    let (Ok(alive), Ok(lease), Ok(read_age), Ok(driving), Ok(agent_here)) =
        (alive, lease, read_age, driving, agent_here)
    else {
        return;
    };
    for g in [
        Box::new(alive.clone()) as Box<dyn prometheus::core::Collector>,
        Box::new(lease.clone()),
        Box::new(read_age.clone()),
        Box::new(driving.clone()),
        Box::new(agent_here.clone()),
    ] {
        let _ = metrics.registry().register(g);
    }
    let mut shutdown = shutdown.clone();
    tokio::spawn(async move {
        loop {
            alive.set(link.others_alive().len() as i64);
            lease.set(i64::from(link.problem().is_none()));
            read_age.set(link.read_age().map_or(f64::INFINITY, |d| d.as_secs_f64()));
            for (mirror, here) in link.drivers() {
                driving.with_label_values(&[&mirror]).set(i64::from(here));
            }
            for (mirror, here) in link.agents_here() {
                agent_here
                    .with_label_values(&[&mirror])
                    .set(i64::from(here));
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = shutdown.changed() => break,
            }
        }
    });
}

/// `mirrorgate state init` with `instances` configured: create the state topic on the
/// destination cluster (an existing one is fine). Returns what was done, readable.
pub async fn init_state_topic(config: &Config) -> Result<Option<String>, String> {
    let Some(i) = &config.instances else {
        return Ok(None);
    };
    let connector =
        crate::client::Connector::for_cluster(&config.destination).map_err(|e| e.to_string())?;
    let view = ClusterView::new(config.destination.clone(), connector, Metrics::new());
    let timeout = Duration::from_millis(config.destination.connect_timeout_ms);
    let rf = crate::mirror::peers::log::create(&view, &i.state_topic, timeout)
        .await
        .map_err(|e| format!("cannot create the state topic {}: {e}", i.state_topic))?;
    Ok(Some(format!(
        "state topic {} is on the destination cluster (compacted, 1 partition, replication factor {rf})",
        i.state_topic
    )))
}
