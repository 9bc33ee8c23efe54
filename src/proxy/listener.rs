//! Listener ports: one per destination broker and listener, bound as brokers become known
//! from metadata, each accepting connections for its broker.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

use crate::config::ListenerConfig;

use super::connection::{serve, GaugeGuard};
use super::context::ConnContext;

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

/// Keep one bound port per known broker for `cfg` until `shutdown` fires.
pub async fn run_listener(
    cfg: ListenerConfig,
    ctx: Arc<ConnContext>,
    bound: Arc<BoundPorts>,
    mut shutdown: watch::Receiver<bool>,
    drain: mpsc::Sender<()>,
) {
    let mut changes = ctx.cluster.subscribe();
    let kind = ctx.kind;
    loop {
        for (node, _) in ctx.cluster.brokers() {
            if bound.contains(node) {
                continue;
            }
            let Some(port) = cfg.port_for_node(node) else {
                tracing::error!(
                    listener = kind.as_str(),
                    node,
                    "destination broker {node} has no port in this listener's range; raise max_brokers or node_id_base"
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
                        ctx.clone(),
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
            _ = tokio::time::sleep(Duration::from_secs(5)) => {}
            _ = shutdown.changed() => return,
        }
    }
}

async fn accept_loop(
    listener: TcpListener,
    node: i32,
    ctx: Arc<ConnContext>,
    mut shutdown: watch::Receiver<bool>,
    drain: mpsc::Sender<()>,
) {
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
                        let ctx = ctx.clone();
                        let shutdown = shutdown.clone();
                        let drain = drain.clone();
                        move |stream| async move {
                            let _counted = counted;
                            match ctx.acceptor.accept(stream).await {
                                Ok(stream) => serve(ctx, stream, peer, node, shutdown, drain).await,
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
