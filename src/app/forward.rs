//! Starting the forward listeners of the mirrors that have one (`mirrors[].forward`): the
//! source's cluster view and its refresh, the route (with the agent's ledger of the
//! acknowledgements it passes), the task that keeps the route following the mirror's partition
//! states and its ledger pruned (settled to a failover's report with several instances:
//! [`settle`]), and the listener with its two contexts.
//!
//! Owns: that wiring. Must not touch: what a connection does (`crate::proxy`), the switchover's
//! steps (`crate::admin::switchover`), the mirror states (read only).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};
use tracing::Instrument;

use crate::agent::Agent;
use crate::cluster::ClusterView;
use crate::config::Config;
use crate::controller::MirrorController;
use crate::instances::PeerLink;
use crate::metrics::{ListenerKind, Metrics};
use crate::mirror::state::PartitionState;
use crate::proxy::forward::{all_stopped, ForwardRoute, Side};
use crate::proxy::listener::{ForwardTarget, Target};
use crate::proxy::{BoundPorts, ConnContext, ListenerAddressMap};
use crate::state::StateStore;

use super::{RunningListener, StartError};

mod peer_holds;
mod restart_ends;
mod settle;
use peer_holds::follow_peers;
use settle::{Completed, Settle, SettleView, Verdict};

/// How often a route looks at its mirror's partition states.
const FOLLOW_EVERY: Duration = Duration::from_millis(100);
/// How often while it is held: the clients wait from the failover's last STOPPED partition
/// until the route sees it (50 ms on average at [`FOLLOW_EVERY`]).
const FOLLOW_EVERY_HELD: Duration = Duration::from_millis(5);
/// How often (in those rounds) the ledger of acknowledgements drops what the agent mirrored.
const PRUNE_EVERY_ROUNDS: u64 = 5;
/// The ledger's journal is written every this many rounds (about a second) when it changed.
const JOURNAL_EVERY_ROUNDS: u64 = 10;
/// A journal write that took `d` is followed by none for `JOURNAL_PACE × d`.
const JOURNAL_PACE: u32 = 10;

/// A running forward listener.
pub struct RunningForward {
    pub route: Arc<ForwardRoute>,
    /// The mirror's source cluster, as the forward listener sees it.
    pub source: Arc<ClusterView>,
    pub listener: RunningListener,
    /// A switchover's bound on holding the listener (`forward.hold_ms`).
    pub hold: Duration,
}

/// Start the forward listener of every mirror that has one. `client` is the client listener's
/// context (none: no forward listener starts): the destination side of a forward listener
/// enforces what it enforces. `owners`: the mirror controller and the agent; `signals`: the
/// shutdown and the drain.
pub(super) fn start(
    config: &Config,
    client: Option<&ConnContext>,
    owners: (Option<&Arc<MirrorController>>, Option<&Arc<Agent>>),
    signals: (&watch::Receiver<bool>, &mpsc::Sender<()>),
) -> Result<Vec<RunningForward>, StartError> {
    let ((controller, agent), (shutdown, drain)) = (owners, signals);
    let Some(client) = client else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    let gauges = RouteGauges::register(&client.metrics)?;
    for (idx, m) in config.mirrors.iter().enumerate() {
        let (Some(f), Some(source_cfg), Some(ctl)) = (&m.forward, &m.source, controller) else {
            continue;
        };
        let transport_error = |source| StartError::ListenerTransport {
            listener: "forward",
            source,
        };
        let acceptor = crate::net::Acceptor::for_listener(&f.listener).map_err(transport_error)?;
        let connector =
            crate::client::Connector::for_cluster(source_cfg).map_err(StartError::Transport)?;
        // Its own registry: the source's metadata refreshes are not the destination's.
        let source = ClusterView::new(source_cfg.clone(), connector, Metrics::new());
        tokio::spawn(source.clone().refresh_loop(shutdown.clone()));
        // The agent keeps the ledger of acknowledgements: it prunes it and its failover
        // reports read it.
        let acks = agent
            .and_then(|a| a.forwarded_acks(&m.name))
            .unwrap_or_default();
        let owns_state = m.mirroring == crate::config::Mirroring::Agent;
        let route = ForwardRoute::new(&m.name, &f.cluster_id_for(&m.name), acks, owns_state);
        if let Some(link) = ctl.peer_link() {
            route.set_peers(link.clone());
        }
        let store = StateStore::open(&config.state_dir)?;
        restore_producers(&route, &store);
        if !take_handover(&route, &store) {
            restore_journal(&route, &store);
            if route.forwarded_producers() > 0 {
                // Their last acknowledgements may be in no journal: see `restart_ends`.
                route.acks().restarted_without_handover();
            }
        }
        if owns_state && route.acks().wants_restart_ends() {
            tokio::spawn(restart_ends::read(
                route.clone(),
                source.clone(),
                config.topic_router(),
                idx,
                shutdown.clone(),
            ));
        }
        let side = |cluster: Arc<ClusterView>, enforced: bool| {
            Arc::new(ConnContext {
                kind: ListenerKind::Forward,
                psm: client.psm.clone().filter(|_| enforced),
                mirrors: client.mirrors.clone().filter(|_| enforced),
                verify_crc: client.verify_crc,
                address_map: ListenerAddressMap::forward(&f.listener, route.cluster_id(), enforced),
                cluster,
                metrics: client.metrics.clone(),
                handles: client.metrics.api_handles(ListenerKind::Forward),
                limits: client.limits.clone(),
                connect_timeout: client.connect_timeout,
                acceptor: acceptor.clone(),
                principal_limits: None,
                threads: client.threads.clone(),
                forward: Some(route.clone()),
            })
        };
        let target = ForwardTarget {
            route: route.clone(),
            source: side(source.clone(), false),
            destination: side(client.cluster.clone(), true),
            hold_wait: Duration::from_millis(config.limits.upstream_timeout_ms),
        };
        let bound = Arc::new(BoundPorts::default());
        tokio::spawn(crate::proxy::listener::run_listener(
            f.listener.clone(),
            Target::Forward(Arc::new(target)),
            bound.clone(),
            shutdown.clone(),
            drain.clone(),
        ));
        // Without the agent (another mirroring tool), the ledger is pruned here: see
        // [`prune_without_agent`].
        let pruner = match owns_state {
            true => Pruner::Agent(agent.cloned()),
            false => Pruner::Topics(config.topic_router(), idx),
        };
        let span = tracing::info_span!("forward", mirror = %m.name);
        tokio::spawn(
            follow(
                route.clone(),
                ctl.clone(),
                pruner,
                store,
                gauges.clone(),
                shutdown.clone(),
            )
            .instrument(span),
        );
        out.push(RunningForward {
            route,
            source,
            listener: RunningListener {
                kind: ListenerKind::Forward,
                config: f.listener.clone(),
                bound,
            },
            hold: Duration::from_millis(f.hold_ms),
        });
    }
    Ok(out)
}

/// The state directory's area of the forwarded producer ids (one file per mirror).
pub const FORWARD_AREA: &str = "forward";

/// The forwarded producer ids a previous process persisted; an unreadable file is logged and
/// left as it is (those producers bump their epoch at a switchover instead: nothing is lost).
fn restore_producers(route: &ForwardRoute, store: &StateStore) {
    let mirror = route.mirror();
    let read = store.read(FORWARD_AREA, mirror).map_err(|e| e.to_string());
    match read.and_then(|b| {
        b.map(|b| route.restore_producers(&b).map_err(|e| e.to_string()))
            .transpose()
    }) {
        Ok(Some(n)) => tracing::info!(mirror, restored = n, "forwarded producer ids restored"),
        Ok(None) => {}
        Err(e) => {
            tracing::warn!(mirror, error = %e, "forwarded producer ids not restored: their producers bump their epoch at a switchover")
        }
    }
}

/// The state directory's area of the forward listeners' handovers (one file per mirror, only
/// between a clean stop and the next start: see `crate::proxy::forward::handover`).
pub const HANDOVER_AREA: &str = "forward-handover";

/// Take over what the previous process handed over when it stopped cleanly; whether it was.
/// Its file is removed first: a process that crashes after this start must not hand the same
/// ledger over again, short of what passed since (one that cannot be removed is not taken over).
fn take_handover(route: &ForwardRoute, store: &StateStore) -> bool {
    let mirror = route.mirror();
    let bytes = match store.read(HANDOVER_AREA, mirror) {
        Ok(Some(b)) => b,
        Ok(None) => return false,
        Err(e) => {
            tracing::warn!(mirror, error = %e, "the forward listener's handover is not readable: taken as none (after an unplanned failover its producers are refused, bumping their epoch)");
            return false;
        }
    };
    if let Err(e) = store.remove(HANDOVER_AREA, mirror) {
        tracing::warn!(mirror, error = %e, "the forward listener's handover cannot be removed: not taken over");
        return false;
    }
    match route.take_handover(&bytes) {
        Ok(t) => {
            tracing::info!(
                mirror,
                producers = t.producers,
                batches = t.batches,
                written_ms = t.written_ms,
                "took over the forward listener's ledger of acknowledgements from the previous process"
            );
            true
        }
        Err(e) => {
            tracing::warn!(mirror, error = %e, "the forward listener's handover not taken over");
            false
        }
    }
}

/// The state directory's area of the forward listeners' journals (one file per mirror: the
/// ledger about once a second, for the next process after a crash; see
/// `crate::proxy::forward::handover`).
pub const JOURNAL_AREA: &str = "forward-journal";

/// After a start with no handover (the previous process crashed, or this is the first): restore
/// the ledger from the journal the previous process left, for the report.
fn restore_journal(route: &ForwardRoute, store: &StateStore) {
    let mirror = route.mirror();
    let restored = match store.read(JOURNAL_AREA, mirror) {
        Ok(Some(b)) => route.restore_journal(&b).map_err(|e| e.to_string()),
        Ok(None) => return,
        Err(e) => Err(e.to_string()),
    };
    match restored {
        Ok(t) => tracing::warn!(
            mirror,
            batches = t.batches,
            written_ms = t.written_ms,
            "the previous process stopped without handing its forward listener over: the ledger of acknowledgements is restored from its journal, without what passed after the journal's last write (a failover report says so); its producers are refused after an unplanned failover until the agent has mirrored past the source's log ends read after this start"
        ),
        Err(e) => {
            tracing::warn!(mirror, error = %e, "the forward listener's journal is not readable: the ledger starts empty")
        }
    }
}

/// When the journal was last written, at which change count of the ledger, and when it may
/// be written next.
#[derive(Default)]
struct Journaled {
    changes: Option<u64>,
    next: Option<Instant>,
}

/// Write the route's ledger to its journal when it changed since the last write, off the
/// runtime's threads; a failed write is tried again at the next call. A large ledger (a mirror
/// paused while its producers write on) takes long to encode: the next write waits at least
/// [`JOURNAL_PACE`] times as long as this one took, so the journal never takes more than about a
/// tenth of a processor.
async fn journal_acks(route: &Arc<ForwardRoute>, store: &StateStore, j: &mut Journaled) {
    let changes = route.acks().changes();
    if j.changes == Some(changes) || j.next.is_some_and(|t| Instant::now() < t) {
        return;
    }
    let started = Instant::now();
    let (r, s) = (route.clone(), store.clone());
    let written =
        tokio::task::spawn_blocking(move || s.write(JOURNAL_AREA, r.mirror(), &r.handover())).await;
    j.next = Some(Instant::now() + started.elapsed() * JOURNAL_PACE);
    match written {
        Ok(Ok(())) => j.changes = Some(changes),
        Ok(Err(e)) => {
            tracing::warn!(mirror = route.mirror(), error = %e, "the forward listener's journal is not written: tried again in a moment")
        }
        Err(e) => {
            tracing::warn!(mirror = route.mirror(), error = %e, "the forward listener's journal write did not finish: tried again in a moment")
        }
    }
}

/// At a clean stop, once every connection has ended: hand each forward listener's ledger and
/// producer ids to the next process (see `crate::proxy::forward::handover`).
pub(super) fn hand_over(forwards: &[RunningForward], state_dir: &std::path::Path) {
    if forwards.is_empty() {
        return;
    }
    let store = match StateStore::open(state_dir) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "the forward listeners' ledgers are not handed over");
            return;
        }
    };
    for f in forwards {
        let mirror = f.route.mirror();
        match store.write(HANDOVER_AREA, mirror, &f.route.handover()) {
            Ok(()) => tracing::info!(
                mirror,
                batches = f.route.acks().len(),
                "forward listener's ledger of acknowledgements handed over to the next process"
            ),
            Err(e) => {
                tracing::warn!(mirror, error = %e, "the forward listener's ledger is not handed over: after an unplanned failover, producers from before the restart are refused")
            }
        }
    }
}

/// Persist the route's forwarded producer ids when they changed (a failed write is tried again
/// at the next call).
fn persist_producers(route: &ForwardRoute, store: &StateStore) {
    if let Err(e) = route.persist_producers(|b| store.write(FORWARD_AREA, route.mirror(), b)) {
        tracing::warn!(mirror = route.mirror(), error = %e, "forwarded producer ids not persisted: tried again in a moment");
    }
}

/// `mirrorgate_forward_side{mirror,side}` (1 for the side the route is on, 0 for the others)
/// and `mirrorgate_forward_last_pause_seconds{mirror}` (how long the last switch held the clients).
#[derive(Clone)]
struct RouteGauges {
    side: prometheus::IntGaugeVec,
    pause: prometheus::GaugeVec,
}

impl RouteGauges {
    fn register(metrics: &Metrics) -> Result<RouteGauges, StartError> {
        let bad = |e: prometheus::Error| StartError::Metrics(e.to_string());
        let side = prometheus::IntGaugeVec::new(
            prometheus::Opts::new(
                "mirrorgate_forward_side",
                "Where a mirror's forward listener sends its clients: 1 for the current side (source, holding, destination, returning)",
            ),
            &["mirror", "side"],
        )
        .map_err(bad)?;
        let pause = prometheus::GaugeVec::new(
            prometheus::Opts::new(
                "mirrorgate_forward_last_pause_seconds",
                "How long the last switch of a forward listener held its clients, from the hold to the destination",
            ),
            &["mirror"],
        )
        .map_err(bad)?;
        // A second start in one process (tests) finds them registered: the first ones stay.
        let _ = metrics.registry().register(Box::new(side.clone()));
        let _ = metrics.registry().register(Box::new(pause.clone()));
        Ok(RouteGauges { side, pause })
    }

    fn show(&self, route: &ForwardRoute) {
        let now = route.side();
        for side in [
            Side::Source,
            Side::Holding,
            Side::Destination,
            Side::Returning,
        ] {
            self.side
                .with_label_values(&[route.mirror(), side.as_str()])
                .set(i64::from(side == now));
        }
        if let Some(ms) = route.last_pause_ms() {
            self.pause
                .with_label_values(&[route.mirror()])
                .set(ms as f64 / 1000.0);
        }
    }
}

/// Keep `route` following its mirror's partition states, and its ledger of acknowledgements
/// pruned to what the agent mirrored, until `shutdown` fires.
async fn follow(
    route: Arc<ForwardRoute>,
    controller: Arc<MirrorController>,
    pruner: Pruner,
    store: StateStore,
    gauges: RouteGauges,
    mut shutdown: watch::Receiver<bool>,
) {
    // The last hold of another instance this one acknowledged.
    let mut acknowledged: Option<String> = None;
    let mut journaled = Journaled::default();
    let mut settle = (Settle::default(), Verdict::Follow);
    for round in 0u64.. {
        // Pruned before every look while held where the agent runs: the switch to the
        // destination finds the ledger at the agent's final position (what forwarded producers
        // lack decides their refusal). Elsewhere the published maps are read less often.
        let held = matches!(route.side(), Side::Holding | Side::Returning);
        let agent = match &pruner {
            Pruner::Agent(a) => a.as_deref(),
            Pruner::Topics(..) => None,
        };
        let current = agent.is_none_or(|a| a.runs_here(route.mirror()));
        if held && current || round % PRUNE_EVERY_ROUNDS == 0 {
            match &pruner {
                Pruner::Agent(Some(a)) => a.prune_forwarded(route.mirror()),
                Pruner::Agent(None) => {}
                Pruner::Topics(router, idx) => prune_without_agent(&route, router, *idx),
            }
        }
        let mut states = controller.recorded_states(route.mirror());
        if let Some(link) = controller.peer_link() {
            follow_peers(&route, link, &states, &mut acknowledged).await;
        }
        if let Some(link) = controller.peer_link() {
            // At every round from the partitions' STOPPED to the switch, or the route would
            // switch before the settling says whether it may.
            let deciding = all_stopped(&states) && !route.left_the_source();
            let waiting = settle.1 == Verdict::Hold;
            if route.owns_state() && (deciding || waiting || round % PRUNE_EVERY_ROUNDS == 0) {
                settle.1 =
                    settle_round(&mut settle.0, &route, &controller, agent, link, &states).await;
            }
            if settle.1 == Verdict::Hold {
                // As while the failover runs: held, until the report settles the ledger.
                states = vec![PartitionState::Stopping; states.len()];
            }
        }
        if !route.owns_state() && !route.left_the_source() && all_stopped(&states) {
            // Another tool mirrors: the forwarded ids are screened before any of their batches
            // can reach the destination.
            controller.screen_forwarded(route.mirror(), &route.screen_entries());
        }
        route.follow(&states);
        gauges.show(&route);
        if round % PRUNE_EVERY_ROUNDS == 0 {
            persist_producers(&route, &store);
        }
        if round % JOURNAL_EVERY_ROUNDS == 0 {
            journal_acks(&route, &store, &mut journaled).await;
        }
        tokio::select! {
            _ = tokio::time::sleep(if held { FOLLOW_EVERY_HELD } else { FOLLOW_EVERY }) => {}
            _ = shutdown.changed() => return,
        }
    }
}

/// One round of [`Settle`] for `route` (several instances): the loss it gives is published
/// on the state topic as this instance's.
async fn settle_round(
    settle: &mut Settle,
    route: &ForwardRoute,
    controller: &MirrorController,
    agent: Option<&Agent>,
    link: &PeerLink,
    states: &[PartitionState],
) -> Verdict {
    let mirror = route.mirror();
    let view = SettleFrom {
        controller,
        agent,
        mirror,
        me: link.me(),
    };
    let caught_up = route.caught_up() || link.forward_hold(mirror).is_some_and(|o| o.caught_up);
    let flags = (
        all_stopped(states),
        route.side() == Side::Destination,
        caught_up,
    );
    let (verdict, loss) = settle.round(&view, route.acks(), Instant::now(), flags);
    if let Some((fid, loss)) = loss {
        let records = loss.records;
        match link
            .publish_forwarded_loss(mirror, &fid, loss.of_instance(&view.me))
            .await
        {
            Ok(()) => {
                tracing::info!(mirror, failover_id = %fid, records, "the forward listener's ledger settled to the failover's report; what it lacks is published for the report");
                settle.published(fid);
            }
            Err(e) => {
                tracing::warn!(mirror, failover_id = %fid, error = %e, "the forward listener's loss is not published (tried again)")
            }
        }
    }
    verdict
}

/// What [`Settle`] reads: the mirror's record and the reports on the state topic.
struct SettleFrom<'a> {
    controller: &'a MirrorController,
    agent: Option<&'a Agent>,
    mirror: &'a str,
    me: String,
}

impl SettleView for SettleFrom<'_> {
    fn failover_id(&self) -> Option<String> {
        let records = self.controller.records();
        let (record, _) = records.into_iter().find(|(r, _)| r.name == self.mirror)?;
        record.failover_id
    }

    fn completed(&self, fid: &str) -> Option<Completed> {
        let report = self
            .controller
            .published_reports(self.mirror)
            .into_iter()
            .find(|r| r.failover_id == fid && r.is_complete())?;
        let next = report
            .partitions
            .iter()
            .filter_map(|p| Some(((p.topic.clone(), p.partition), p.next_source_offset?)));
        Some(Completed {
            next: next.collect(),
            counts_here: report
                .forwarded
                .is_some_and(|f| f.instances.contains(&self.me)),
        })
    }

    fn runs_agent_here(&self) -> bool {
        self.agent.is_some_and(|a| a.runs_here(self.mirror))
    }
}

/// Who prunes a route's ledger of acknowledgements.
enum Pruner {
    /// The built-in agent, to its offset maps' positions (none on this instance: not pruned).
    Agent(Option<Arc<Agent>>),
    /// Another mirroring tool mirrors the mirror at index `.1` of the config: see
    /// [`prune_without_agent`].
    Topics(crate::config::TopicRouter, usize),
}

/// With another mirroring tool no position says what is mirrored: the ledger keeps only the
/// names of the topics written through the listener that the mirror does not cover (the
/// switchover's dry run lists them), and drops every batch.
fn prune_without_agent(route: &ForwardRoute, router: &crate::config::TopicRouter, idx: usize) {
    let acks = route.acks();
    for (topic, partition) in acks.partitions() {
        if router.mirror_index(&topic) == Some(idx) {
            acks.mirrored_to(&topic, partition, i64::MAX);
        } else {
            acks.uncovered(&topic);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mirror::forwarded_acks::AckedBatch;

    #[test]
    fn without_the_agent_the_ledger_keeps_only_the_names_of_topics_the_mirror_does_not_cover() {
        let cfg = crate::config::load_str(
            "destination: {bootstrap: [\"127.0.0.1:29092\"]}\nlisteners:\n  client: {port_base: 9092}\n  mirror: {port_base: 9192}\nmirrors:\n  - name: dr\n    topics: [orders]\n",
            "t.yaml",
        )
        .expect("config");
        let route = ForwardRoute::new("dr", "c", Arc::default(), false);
        let batch = AckedBatch {
            producer_id: 7,
            producer_epoch: 0,
            first_sequence: 0,
            first_offset: 0,
            records: 1,
        };
        route.acks().note("orders", 0, batch);
        route.acks().note("other", 0, batch);
        prune_without_agent(&route, &cfg.topic_router(), 0);
        assert!(route.acks().is_empty(), "no batch kept without a position");
        assert_eq!(route.acks().uncovered_topics(), vec!["other".to_string()]);
    }
}
