//! Wiring of several instances (`instances` configured): the link to the state topic, its
//! loops, the fence this instance applies for the others' failovers, and its gauges.
//!
//! Owns: that wiring. Must not touch: what the link decides (`instances.rs`).

use std::sync::Arc;
use std::time::Duration;

use prometheus::IntGauge;
use tokio::sync::watch;

use crate::cluster::ClusterView;
use crate::config::Config;
use crate::controller::MirrorController;
use crate::instances::log::KafkaStateLog;
use crate::instances::PeerLink;
use crate::metrics::Metrics;

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
    link.set_clock_skew_ms(crate::mirror::fault_hooks::FaultHooks::from_env().peer_clock_skew_ms);
    link.set_agents(
        config
            .mirrors
            .iter()
            .filter(|m| m.agent_source().is_some())
            .map(|m| m.name.clone())
            .collect(),
    );
    link.set_forward(
        config
            .mirrors
            .iter()
            .filter(|m| m.source.is_some() && m.forward.is_some())
            .map(|m| m.name.clone())
            .collect(),
    );
    controller.set_peers(link.clone());
    let settle = Duration::from_millis(config.limits.unknown_outcome_settle_ms);
    link.set_unknown_outcome_settle(settle);
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
    let info = prometheus::IntGaugeVec::new(
        prometheus::Opts::new(
            "mirrorgate_instance_info",
            "1, labelled with this instance's id and its state topic (with `instances`)",
        ),
        &["instance", "state_topic"],
    );
    let fences = prometheus::IntGaugeVec::new(
        prometheus::Opts::new(
            "mirrorgate_failover_fences_acknowledged",
            "For each mirror with a failover announced: how many instances other than its driver acknowledged that they fenced and drained their mirror writes for it",
        ),
        &["mirror"],
    );
    let (Ok(alive), Ok(lease), Ok(read_age), Ok(driving), Ok(agent_here), Ok(info), Ok(fences)) =
        (alive, lease, read_age, driving, agent_here, info, fences)
    else {
        return;
    };
    for g in [
        Box::new(alive.clone()) as Box<dyn prometheus::core::Collector>,
        Box::new(lease.clone()),
        Box::new(read_age.clone()),
        Box::new(driving.clone()),
        Box::new(agent_here.clone()),
        Box::new(info.clone()),
        Box::new(fences.clone()),
    ] {
        let _ = metrics.registry().register(g);
    }
    info.with_label_values(&[&i.id, &i.state_topic]).set(1);
    let mut shutdown = shutdown.clone();
    tokio::spawn(async move {
        loop {
            alive.set(link.others_alive().len() as i64);
            lease.set(i64::from(link.problem().is_none()));
            read_age.set(link.read_age().map_or(f64::INFINITY, |d| d.as_secs_f64()));
            for (mirror, here) in link.drivers() {
                driving.with_label_values(&[&mirror]).set(i64::from(here));
            }
            for (mirror, n) in link.fences_acknowledged() {
                fences.with_label_values(&[&mirror]).set(n as i64);
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
    let rf = crate::instances::log::create(&view, &i.state_topic, timeout)
        .await
        .map_err(|e| format!("cannot create the state topic {}: {e}", i.state_topic))?;
    Ok(Some(format!(
        "state topic {} is on the destination cluster (compacted, 1 partition, replication factor {rf})",
        i.state_topic
    )))
}

/// `mirrorgate state migrate`: move what the state directory holds and the state topic lacks
/// into the state topic (`instances/migrate.rs` decides what). Returns what was moved (or
/// would be, `dry_run`), and whether everything could be.
pub async fn migrate_state(config: &Config, dry_run: bool) -> Result<(String, bool), String> {
    use crate::instances::log::StateLog;
    use crate::instances::migrate::{plan, Local};
    use crate::instances::records::ScreenedProducer;
    use crate::instances::view::PeerView;
    let Some(i) = &config.instances else {
        return Err(
            "state migrate moves a state directory into the state topic of several instances: configure `instances` first"
                .into(),
        );
    };
    let store = crate::state::StateStore::open(&config.state_dir).map_err(|e| e.to_string())?;
    store.check().map_err(|e| e.to_string())?;
    let mut local = Local::default();
    for m in &config.mirrors {
        let file = format!("{}.json", m.name);
        if let Some(b) = store
            .read(crate::mirror::records::MIRRORS_AREA, &file)
            .map_err(|e| e.to_string())?
        {
            local.records.push(
                crate::mirror::state::MirrorRecord::decode(&b)
                    .map_err(|e| format!("mirror {}: its state file: {e}", m.name))?,
            );
        }
        let offsets = crate::mirror::offset_map::MirrorOffsets::file_name(&m.name);
        if let Some(b) = store
            .read(crate::mirror::offset_map::AGENT_AREA, &offsets)
            .map_err(|e| e.to_string())?
        {
            let maps = serde_json::from_slice(&b)
                .map_err(|e| format!("mirror {}: the agent's offset maps: {e}", m.name))?;
            local.agent_offsets.push((m.name.clone(), maps));
        }
        local
            .reports
            .extend(crate::mirror::report::ReportStore::new(store.clone()).list(&m.name)?);
    }
    let screening = crate::mirror::screening::Screening::load(store.clone(), false, None, 0);
    if let Some(e) = screening.unreadable() {
        return Err(e.to_string());
    }
    local.screened = ScreenedProducer::all_of(&screening);

    let connector =
        crate::client::Connector::for_cluster(&config.destination).map_err(|e| e.to_string())?;
    let cluster = ClusterView::new(config.destination.clone(), connector, Metrics::new());
    cluster.refresh().await.map_err(|e| e.to_string())?;
    let timeout = Duration::from_millis(config.destination.connect_timeout_ms);
    let log = KafkaStateLog::new(cluster, i.state_topic.clone(), timeout);
    let mut view = PeerView::new(&i.id, Duration::from_millis(i.session_timeout_ms));
    let (mut next, mut reads) = (0i64, 0u32);
    loop {
        let r = log.read(next).await?;
        if r.reset.is_some() {
            view = PeerView::new(&i.id, Duration::from_millis(i.session_timeout_ms));
            next = r.next;
            continue;
        }
        let (now, ms) = (
            std::time::Instant::now(),
            crate::mirror::screening::now_ms(),
        );
        for rec in r.records {
            view.apply(rec, now, ms);
        }
        let progressed = r.next > next;
        next = r.next;
        if next >= r.high_watermark {
            break;
        }
        reads += 1;
        if !progressed && reads > 100 {
            return Err(format!(
                "the state topic {} cannot be read to its end (stuck at offset {next})",
                i.state_topic
            ));
        }
    }
    let p = plan(&i.id, &view, &local, crate::mirror::screening::now_ms());
    if !dry_run {
        for rec in &p.records {
            log.append(rec).await.map_err(|e| {
                format!(
                    "cannot append to the state topic {} ({e}); nothing after this was moved: run it again",
                    i.state_topic
                )
            })?;
        }
    }
    let verb = if dry_run { "would move" } else { "moved" };
    let mut out = Vec::new();
    if p.records.is_empty() {
        out.push(format!(
            "state topic {}: nothing to move from {}",
            i.state_topic,
            config.state_dir.display()
        ));
    }
    out.extend(p.notes.iter().map(|n| format!("{verb}: {n}")));
    out.extend(p.problems.iter().map(|n| format!("not moved: {n}")));
    Ok((out.join("\n"), p.problems.is_empty()))
}
