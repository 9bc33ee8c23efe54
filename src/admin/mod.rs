//! The admin HTTP server (hyper 1.x, HTTP/1.1): `/metrics`, `/healthz`, `/readyz`, and the
//! JSON API under `/v1/` (the group offset sync's endpoints in [`groups`]).
//!
//! Owns: HTTP routing, request parsing and JSON rendering of gateway state, and the
//! [`AdminBackend`] seam through which it reaches the gateway (implemented by `app::Gateway`, so
//! this module does not know the wiring above it).
//! Must not touch: Kafka sockets or gateway state directly; it asks the backend for what it
//! shows.

pub mod cli;
pub mod client;
mod failover_call;
mod groups;
mod mirrors;
mod preflight;
mod recovery;
pub mod render;
mod switchback;
mod switchover;

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde::Serialize;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::cluster::ClusterView;
use crate::controller::MirrorController;
use crate::psm::registry::PsmRegistry;

/// Why the gateway is or is not ready (the `/readyz` body).
#[derive(Debug, Clone, Serialize)]
pub struct Readiness {
    pub ready: bool,
    pub metadata_known: bool,
    pub reasons: Vec<String>,
    /// What an operator must fix although the gateway serves traffic: permissions the
    /// gateway's own principal lacks for its protection work (a failover would fail).
    pub warnings: Vec<String>,
}

/// A mirror's forward listener, as a switchover needs it.
pub struct ForwardHandle {
    pub route: Arc<crate::proxy::forward::ForwardRoute>,
    /// The mirror's source cluster (its log ends are read at the hold).
    pub source: Arc<ClusterView>,
    /// How long the switchover may hold the listener before the failover.
    pub hold: std::time::Duration,
}

/// What the admin API shows and acts on.
pub trait AdminBackend: Send + Sync + 'static {
    /// The address the admin server listens on.
    fn admin_addr(&self) -> std::net::SocketAddr;
    /// Readiness, computed now.
    fn readiness(&self) -> Readiness;
    /// The Prometheus text of every metric.
    fn metrics_text(&self) -> String;
    /// The view of the destination cluster.
    fn cluster(&self) -> &ClusterView;
    /// (listener kind, gateway address) of every listener port bound for broker `node_id`.
    fn gateway_ports(&self, node_id: i32) -> Vec<(&'static str, String)>;
    /// The bearer token state-changing calls need, if one is configured.
    fn admin_token(&self) -> Option<&str>;
    /// The mirror controller; `None` without mirrors.
    fn mirrors(&self) -> Option<&Arc<MirrorController>>;
    /// The producer state of tracked partitions; `None` without mirrors.
    fn psm(&self) -> Option<&Arc<PsmRegistry>>;
    /// (records, seconds) of lag of a partition the built-in agent mirrors.
    fn agent_lag(&self, mirror: &str, topic: &str, partition: i32) -> Option<(i64, f64)>;
    /// Record the audit event of a state-changing call (the log, and the audit topic when
    /// one is configured).
    fn audit(&self, event: crate::audit::AuditEvent) {
        crate::audit::log(&event);
    }
    /// The group offset sync of mirror `mirror`; `None` when it has none.
    fn group_sync(&self, _mirror: &str) -> Option<crate::sync::groups::SyncStatus> {
        None
    }
    /// The built-in agent's offset map of a partition of mirror `mirror`.
    fn offset_map(
        &self,
        _mirror: &str,
        _topic: &str,
        _partition: i32,
    ) -> Option<crate::mirror::offset_map::PartitionMap> {
        None
    }
    /// The estimated bytes of a partition's lag (built-in agent).
    fn agent_lag_bytes(&self, _mirror: &str, _topic: &str, _partition: i32) -> Option<i64> {
        None
    }
    /// Producer ids in the screening set (the failover's producer-id allocator step advances
    /// the brokers past them).
    fn screened_ids(&self) -> usize {
        0
    }
    /// When the source's log end of a partition last moved (built-in agent).
    /// The forward listener of mirror `mirror`, when it has one.
    fn forward(&self, _mirror: &str) -> Option<ForwardHandle> {
        None
    }
    /// The next source offset the built-in agent mirrors of a partition.
    fn agent_next_source(&self, _mirror: &str, _topic: &str, _partition: i32) -> Option<i64> {
        None
    }
    /// Have the built-in agent of a mirror run a discovery round now.
    fn agent_rediscover(&self, _mirror: &str) {}
    fn agent_source_end_moved_ms(&self, mirror: &str, topic: &str, partition: i32) -> Option<i64>;
    /// The built-in agent's view of a mirror's source cluster; `None` without an agent.
    fn agent_source(&self, mirror: &str) -> Option<crate::failover::preflight::SourceFacts>;
    /// Permissions the gateway's own principal lacks for its protection work.
    fn permissions_missing(&self) -> Vec<String>;
    /// A failover was called: store its report and complete it when the failover completes.
    fn failover_called(&self, report: crate::mirror::report::FailoverReport);
    /// The stored failover reports of `mirror`, oldest first.
    fn failover_reports(
        &self,
        mirror: &str,
    ) -> Result<Vec<crate::mirror::report::FailoverReport>, String>;
    /// `{config_sync, acl_sync}` of a mirror the built-in agent runs (docs/configs-and-acls.md).
    fn mirror_sync(&self, _mirror: &str) -> Option<serde_json::Value> {
        None
    }
    /// The recovery of failovers' un-mirrored tails; `None` without mirrors.
    fn recovery(&self) -> Option<&Arc<crate::recovery::service::Recoverer>> {
        None
    }
}

/// Serve the admin API on `listener` until `shutdown` fires.
pub async fn serve(
    listener: TcpListener,
    gw: Arc<dyn AdminBackend>,
    mut shutdown: watch::Receiver<bool>,
) {
    tracing::info!(addr = %gw.admin_addr(), "admin server listening");
    loop {
        tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, peer)) => {
                    let gw = gw.clone();
                    tokio::spawn(async move {
                        let svc = service_fn(move |req| handle(gw.clone(), peer, req));
                        let conn = http1::Builder::new()
                            .timer(TokioTimer::new())
                            .header_read_timeout(std::time::Duration::from_secs(10))
                            .serve_connection(TokioIo::new(stream), svc);
                        if let Err(e) = conn.await {
                            tracing::debug!(error = %e, "admin connection ended with an error");
                        }
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "admin accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            },
            _ = shutdown.changed() => return,
        }
    }
}

fn reply(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    if let Ok(v) = content_type.parse() {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    r
}

fn json_reply<T: Serialize>(status: StatusCode, value: &T) -> Response<Full<Bytes>> {
    let body = serde_json::to_vec_pretty(value)
        .unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}").into_bytes());
    reply(status, "application/json", body)
}

/// A JSON error body `{"error": message}`.
pub fn error_reply(status: StatusCode, message: &str) -> Response<Full<Bytes>> {
    json_reply(status, &json!({ "error": message }))
}

#[derive(Serialize)]
struct Upstream {
    node_id: i32,
    address: String,
    gateway_ports: Vec<GatewayPort>,
}

#[derive(Serialize)]
struct GatewayPort {
    listener: &'static str,
    address: String,
}

fn upstreams(gw: &dyn AdminBackend) -> serde_json::Value {
    let brokers: Vec<Upstream> = gw
        .cluster()
        .brokers()
        .into_iter()
        .map(|(node_id, address)| Upstream {
            node_id,
            address,
            gateway_ports: gw
                .gateway_ports(node_id)
                .into_iter()
                .map(|(listener, address)| GatewayPort { listener, address })
                .collect(),
        })
        .collect();
    json!({ "cluster_id": gw.cluster().cluster_id(), "brokers": brokers })
}

/// Compare two secrets in time independent of where they differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `None` when the call may proceed; else the 401/403 answer.
fn check_token(gw: &dyn AdminBackend, headers: &hyper::HeaderMap) -> Option<Response<Full<Bytes>>> {
    let expected = gw.admin_token()?;
    let Some(given) = headers
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        let mut r = error_reply(
            StatusCode::UNAUTHORIZED,
            "this call needs the admin token: Authorization: Bearer <token>",
        );
        if let Ok(v) = "Bearer".parse() {
            r.headers_mut().insert(hyper::header::WWW_AUTHENTICATE, v);
        }
        return Some(r);
    };
    let token = given.strip_prefix("Bearer ").unwrap_or("");
    if constant_time_eq(token.as_bytes(), expected.as_bytes()) {
        None
    } else {
        Some(error_reply(StatusCode::FORBIDDEN, "wrong admin token"))
    }
}

/// `GET /v1/partitions/{topic}/{partition}/producers`: the PSM entries of a tracked partition.
fn producers(gw: &dyn AdminBackend, topic: &str, partition: &str) -> Response<Full<Bytes>> {
    let Ok(partition) = partition.parse::<i32>() else {
        return error_reply(
            StatusCode::BAD_REQUEST,
            &format!("partition {partition:?} is not a number"),
        );
    };
    let Some(psm) = gw.psm() else {
        return error_reply(
            StatusCode::NOT_FOUND,
            "no mirrors are configured, so no partition is tracked",
        );
    };
    if !psm.tracks(topic) {
        return error_reply(
            StatusCode::NOT_FOUND,
            &format!("topic {topic:?} belongs to no mirror"),
        );
    }
    let Some(view) = psm.producers(topic, partition) else {
        return error_reply(
            StatusCode::NOT_FOUND,
            &format!("partition {topic}-{partition} is not known on the destination"),
        );
    };
    let producers: Vec<serde_json::Value> = view
        .producers
        .iter()
        .map(|e| {
            json!({
                "producer_id": e.producer_id(),
                "epoch": e.epoch(),
                "coordinator_epoch": e.coordinator_epoch(),
                "last_sequence": e.last_seq(),
                "last_timestamp": e.last_timestamp(),
                "current_txn_start_offset": e.current_txn_first_offset().unwrap_or(-1),
                "batches": e.batches().map(|b| json!({
                    "first_sequence": b.first_seq(),
                    "last_sequence": b.last_seq,
                    "first_offset": b.first_offset(),
                    "last_offset": b.last_offset,
                    "timestamp": b.timestamp,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    json_reply(
        StatusCode::OK,
        &json!({
            "topic": topic,
            "partition": partition,
            "ready": view.slot.ready,
            "applied_through": view.slot.applied_through,
            "producers": producers,
        }),
    )
}

async fn handle(
    gw: Arc<dyn AdminBackend>,
    peer: std::net::SocketAddr,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = req.uri().path().trim_end_matches('/').to_string();
    let method = req.method().clone();
    let resp = match (method.clone(), path.as_str()) {
        (Method::GET, "/healthz") => reply(StatusCode::OK, "text/plain", "ok\n"),
        (Method::GET, "/readyz") => {
            let r = gw.readiness();
            let status = if r.ready {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            json_reply(status, &r)
        }
        (Method::GET, "/metrics") => {
            gw.readiness();
            reply(
                StatusCode::OK,
                "text/plain; version=0.0.4",
                gw.metrics_text(),
            )
        }
        (Method::GET, "/v1/upstreams") => json_reply(StatusCode::OK, &upstreams(gw.as_ref())),
        (Method::GET, "/v1/instances") => match gw.mirrors().and_then(|c| c.peers_status()) {
            Some(v) => json_reply(StatusCode::OK, &v),
            None => json_reply(
                StatusCode::OK,
                &serde_json::json!({
                    "instance": null,
                    "note": "no `instances` section is configured: this gateway is the only instance",
                    "others_alive": [],
                    "failovers": [],
                }),
            ),
        },
        (_, "/healthz" | "/readyz" | "/metrics" | "/v1/upstreams" | "/v1/instances") => {
            let mut r = error_reply(
                StatusCode::METHOD_NOT_ALLOWED,
                &format!("{method} is not allowed on {path}"),
            );
            if let Ok(v) = "GET".parse() {
                r.headers_mut().insert(hyper::header::ALLOW, v);
            }
            r
        }
        (m, p) if p == "/v1/mirrors" || p.starts_with("/v1/mirrors/") => {
            let caller = match gw.admin_token() {
                Some(_) => format!("token@{peer}"),
                None => peer.to_string(),
            };
            let mut note = crate::audit::AuditNote::default();
            let resp = mirrors::mirrors(gw.as_ref(), &m, p, req, &caller, &mut note).await;
            if m == Method::POST {
                gw.audit(crate::audit::AuditEvent::new(
                    &gw.admin_addr().to_string(),
                    p,
                    &caller,
                    resp.status().as_u16(),
                    note,
                ));
            }
            resp
        }
        (m, p) if p.starts_with("/v1/partitions/") => {
            let parts: Vec<&str> = p.trim_start_matches("/v1/partitions/").split('/').collect();
            match (m, parts.as_slice()) {
                (Method::GET, [topic, partition, "producers"]) => {
                    producers(gw.as_ref(), topic, partition)
                }
                (_, [_, _, "producers"]) => error_reply(
                    StatusCode::METHOD_NOT_ALLOWED,
                    &format!("{method} is not allowed on {path}"),
                ),
                _ => error_reply(
                    StatusCode::NOT_FOUND,
                    &format!("no such endpoint: {method} {path}"),
                ),
            }
        }
        _ => error_reply(
            StatusCode::NOT_FOUND,
            &format!("no such endpoint: {method} {path}"),
        ),
    };
    Ok(resp)
}
