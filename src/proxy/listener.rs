//! Listener ports: one per broker and listener, bound as brokers become known from metadata,
//! each accepting connections for its broker. A forward listener binds the node ids of both
//! of its clusters, serves each connection on the side its route is on, and moves it when the
//! route switches ([`super::forward`]).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

use crate::config::ListenerConfig;

use super::connection::{serve, serve_until_switch, ClientConn, GaugeGuard, Served};
use super::context::ConnContext;
use super::forward::{ForwardRoute, Side, SideConnection};

/// Ports bound so far, per node id.
#[derive(Default)]
pub struct BoundPorts {
    inner: Mutex<HashMap<i32, SocketAddr>>,
}

impl BoundPorts {
    /// Node ids and the addresses bound for them.
    pub fn snapshot(&self) -> Vec<(i32, SocketAddr)> {
        let mut v: Vec<_> = self
            .inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(k, v)| (*k, *v))
            .collect();
        v.sort();
        v
    }
    fn contains(&self, node: i32) -> bool {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(&node)
    }
    fn insert(&self, node: i32, addr: SocketAddr) {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(node, addr);
    }
}

/// What a listener serves its connections with.
pub enum Target {
    /// One context for every connection (the client and mirror listeners).
    Fixed(Arc<ConnContext>),
    /// A forward listener: each connection is served with the context of the side its route is
    /// on, and moved (its requests in flight answered) to the other side's when the route
    /// switches.
    Forward(Arc<ForwardTarget>),
}

/// The two contexts of a forward listener and its route.
pub struct ForwardTarget {
    pub route: Arc<ForwardRoute>,
    /// Upstream: the mirror's source; nothing enforced.
    pub source: Arc<ConnContext>,
    /// Upstream: the destination; local traffic as on the client listener.
    pub destination: Arc<ConnContext>,
    /// How long a connection accepted while the route is held waits for the switch.
    pub hold_wait: Duration,
}

impl Target {
    fn any(&self) -> &Arc<ConnContext> {
        match self {
            Target::Fixed(ctx) => ctx,
            Target::Forward(f) => &f.destination,
        }
    }

    /// Broker node ids to bind a port for: a forward listener serves the node ids of both
    /// clusters (a port reaches node n of whichever is active).
    fn nodes(&self) -> Vec<i32> {
        let mut nodes: Vec<i32> = match self {
            Target::Fixed(ctx) => ctx.cluster.brokers().into_iter().map(|(n, _)| n).collect(),
            Target::Forward(f) => f
                .source
                .cluster
                .brokers()
                .into_iter()
                .chain(f.destination.cluster.brokers())
                .map(|(n, _)| n)
                .collect(),
        };
        nodes.sort_unstable();
        nodes.dedup();
        nodes
    }
}

/// A forward connection's context for the side the route is on, a signal that fires when the
/// route leaves that side, and its count in the route.
type Picked = (
    Arc<ConnContext>,
    watch::Receiver<bool>,
    Option<SideConnection>,
);

impl ForwardTarget {
    /// The side to serve a forward connection on now: waits while the route is held (at most
    /// `hold_wait`; `None`: close the connection), except that while the transactions open at
    /// a hold finish, a connection that has not `parked` a request is served on the source (its
    /// requests are screened there: [`ForwardRoute::admits_to_source`]).
    async fn pick(&self, shutdown: &watch::Receiver<bool>, parked: bool) -> Option<Picked> {
        let mut sides = self.route.subscribe();
        let mut finishing = self.route.subscribe_finishing();
        let mut stop = shutdown.clone();
        let held = tokio::time::sleep(self.hold_wait);
        tokio::pin!(held);
        let side = loop {
            let side = *sides.borrow_and_update();
            let open = *finishing.borrow_and_update();
            let picked = match side {
                Side::Holding if open && !parked => Some(Side::Source),
                Side::Holding | Side::Returning => None,
                other => Some(other),
            };
            // Several instances: the source waits too while the state topic's view refuses it
            // (no lease, a failover or another instance's hold not followed yet), which no
            // signal announces: looked at again every few milliseconds.
            let refused = picked == Some(Side::Source) && self.route.source_refusal().is_some();
            match picked {
                Some(side) if !refused => break side,
                _ => {}
            }
            let recheck = async {
                match refused {
                    true => tokio::time::sleep(SOURCE_RECHECK).await,
                    false => std::future::pending().await,
                }
            };
            tokio::select! {
                r = sides.changed() => if r.is_err() { return None },
                r = finishing.changed() => if r.is_err() { return None },
                _ = recheck => {}
                _ = &mut held => {
                    tracing::warn!(mirror = self.route.mirror(), "closing: the forward listener stayed held past {:?}", self.hold_wait);
                    return None;
                }
                _ = stop.changed() => return None,
            }
        };
        let ctx = match side {
            Side::Source => self.source.clone(),
            _ => self.destination.clone(),
        };
        let counted = self.route.connection_to(side);
        let (left_tx, left_rx) = watch::channel(false);
        let route = self.route.clone();
        tokio::spawn(async move {
            // Left: the route no longer serves this side (the source: held with no transaction
            // left to finish, or switched).
            let left = async {
                loop {
                    let still = match side {
                        Side::Source => route.serves_source(),
                        _ => route.side() == side,
                    };
                    if !still {
                        return;
                    }
                    tokio::select! {
                        r = sides.changed() => if r.is_err() { return },
                        r = finishing.changed() => if r.is_err() { return },
                    }
                }
            };
            tokio::select! {
                _ = left => {
                    let _ = left_tx.send(true);
                }
                _ = left_tx.closed() => {}
            }
        });
        Some((ctx, left_rx, counted))
    }

    /// Serve a forward connection: on the side the route is on, moved to the other side's
    /// upstream (the client connection kept) whenever the route switches. While the side's
    /// broker cannot be reached (a source that went away before a failover, say) the client
    /// connection is kept too, and the broker tried again until the route switches or
    /// `hold_wait` has passed: the client sees its requests time out, a retriable error,
    /// rather than a loop of refused connections.
    async fn serve(
        &self,
        stream: crate::net::Stream,
        peer: SocketAddr,
        node: i32,
        shutdown: watch::Receiver<bool>,
        drain: mpsc::Sender<()>,
    ) {
        let mut client = ClientConn::new(stream);
        let mut unreachable_since: Option<tokio::time::Instant> = None;
        // The connection left the source while held (a request parked for the switch): it
        // waits for the switch, whatever transactions still finish.
        let mut parked = false;
        loop {
            parked &= self.route.side() == Side::Holding;
            // While the connection waits for a side, a client that gives up on it (its request
            // timed out, say) takes what it had sent with it: none of it goes to a broker later,
            // behind the requests the client sends again on a new connection.
            let picked = tokio::select! {
                p = self.pick(&shutdown, parked) => p,
                _ = client.closed(self.source.limits.max_frame_bytes as usize) => {
                    tracing::info!(mirror = self.route.mirror(), node, %peer, parked, "the client closed its connection while the forward listener held it; what it had sent is dropped unsent");
                    return;
                }
            };
            let Some((ctx, left, _counted)) = picked else {
                return;
            };
            let served = serve_until_switch(
                ctx,
                client,
                peer,
                node,
                shutdown.clone(),
                Some(left),
                drain.clone(),
            )
            .await;
            match served {
                Served::Switched(kept) => {
                    client = kept;
                    unreachable_since = None;
                    parked = self.route.side() == Side::Holding;
                }
                Served::Unreachable(kept) => {
                    let since = *unreachable_since.get_or_insert_with(tokio::time::Instant::now);
                    if since.elapsed() >= self.hold_wait || !self.wait_to_retry(&shutdown).await {
                        tracing::warn!(mirror = self.route.mirror(), node, %peer, "closing: the broker stayed unreachable for {:?}", since.elapsed());
                        return;
                    }
                    client = kept;
                }
                Served::Closed => return,
            }
        }
    }

    /// Wait before trying an unreachable broker again: [`UNREACHABLE_RETRY`], or less when the
    /// route switches sides. `false`: the gateway is shutting down.
    async fn wait_to_retry(&self, shutdown: &watch::Receiver<bool>) -> bool {
        let mut sides = self.route.subscribe();
        let mut stop = shutdown.clone();
        tokio::select! {
            _ = tokio::time::sleep(UNREACHABLE_RETRY) => true,
            r = sides.changed() => r.is_ok(),
            _ = stop.changed() => false,
        }
    }
}

/// How often a forward connection whose source the state topic's view refuses looks again.
const SOURCE_RECHECK: Duration = Duration::from_millis(20);

/// How long a forward connection waits before trying an unreachable broker again.
const UNREACHABLE_RETRY: Duration = Duration::from_millis(500);

/// Keep one bound port per known broker for `cfg` until `shutdown` fires.
pub async fn run_listener(
    cfg: ListenerConfig,
    target: Target,
    bound: Arc<BoundPorts>,
    mut shutdown: watch::Receiver<bool>,
    drain: mpsc::Sender<()>,
) {
    let target = Arc::new(target);
    let ctx = target.any().clone();
    let mut changes = ctx.cluster.subscribe();
    let mut source_changes = match target.as_ref() {
        Target::Forward(f) => f.source.cluster.subscribe(),
        Target::Fixed(_) => ctx.cluster.subscribe(),
    };
    let kind = ctx.kind;
    loop {
        for node in target.nodes() {
            if bound.contains(node) {
                continue;
            }
            let Some(port) = cfg.port_for_node(node) else {
                tracing::error!(
                    listener = kind.as_str(),
                    node,
                    "broker {node} has no port in this listener's range; raise max_brokers or node_id_base"
                );
                continue;
            };
            let addr = format!("{}:{}", cfg.bind, port);
            match TcpListener::bind(&addr).await {
                Ok(l) => {
                    let local = l
                        .local_addr()
                        .unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], port)));
                    tracing::info!(listener = kind.as_str(), node, %local, "listening for broker {node}");
                    bound.insert(node, local);
                    tokio::spawn(accept_loop(
                        l,
                        node,
                        target.clone(),
                        shutdown.clone(),
                        drain.clone(),
                    ));
                }
                Err(e) => {
                    tracing::error!(listener = kind.as_str(), node, %addr, error = %e, "cannot bind listener port");
                    ctx.metrics.error(kind, "bind");
                }
            }
        }
        tokio::select! {
            r = changes.changed() => if r.is_err() { return },
            r = source_changes.changed() => if r.is_err() { return },
            _ = tokio::time::sleep(Duration::from_secs(5)) => {}
            _ = shutdown.changed() => return,
        }
    }
}

async fn accept_loop(
    listener: TcpListener,
    node: i32,
    target: Arc<Target>,
    mut shutdown: watch::Receiver<bool>,
    drain: mpsc::Sender<()>,
) {
    let ctx = target.any().clone();
    let kind = ctx.kind;
    loop {
        tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, peer)) => {
                    ctx.metrics.connections_total.with_label_values(&[kind.as_str()]).inc();
                    let gauge = ctx.metrics.connections.with_label_values(&[kind.as_str()]);
                    gauge.inc();
                    // Counted out however the connection ends, also when it is dropped unrun
                    // (a socket that could not be moved to its connection thread).
                    let counted = GaugeGuard(gauge);
                    let conn = {
                        let target = target.clone();
                        let shutdown = shutdown.clone();
                        let drain = drain.clone();
                        move |stream| async move {
                            let _counted = counted;
                            let ctx = target.any().clone();
                            match ctx.acceptor.accept(stream).await {
                                Ok(stream) => match target.as_ref() {
                                    Target::Fixed(_) => {
                                        serve(ctx, stream, peer, node, shutdown, drain).await
                                    }
                                    Target::Forward(f) => {
                                        f.serve(stream, peer, node, shutdown, drain).await
                                    }
                                },
                                Err(e) => {
                                    tracing::warn!(listener = kind.as_str(), %peer, error = %e, "closing: client connection set-up failed");
                                    ctx.metrics.error(kind, e.kind());
                                }
                            }
                        }
                    };
                    match &ctx.threads {
                        // One connection, one thread: see `threads.rs`.
                        Some(threads) => {
                            if let Err(e) = threads.hand_off(stream, conn) {
                                tracing::warn!(listener = kind.as_str(), %peer, error = %e, "closing: cannot hand the connection to a connection thread");
                                ctx.metrics.error(kind, "accept");
                            }
                        }
                        None => {
                            tokio::spawn(conn(stream));
                        }
                    }
                }
                Err(e) => {
                    // Out of file descriptors and similar: back off instead of spinning.
                    tracing::warn!(listener = kind.as_str(), error = %e, "accept failed");
                    ctx.metrics.error(kind, "accept");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            _ = shutdown.changed() => return,
        }
    }
}
