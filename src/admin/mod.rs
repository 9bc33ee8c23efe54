//! The admin HTTP server (hyper 1.x, HTTP/1.1): `/metrics`, `/healthz`, `/readyz`, and the
//! JSON API under `/v1/`.
//!
//! Owns: HTTP routing, request parsing and JSON rendering of gateway state.
//! Must not touch: Kafka sockets or gateway state directly; it asks the [`Gateway`] for
//! what it shows.

pub mod client;

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

use crate::app::Gateway;

/// Serve the admin API on `listener` until `shutdown` fires.
pub async fn serve(listener: TcpListener, gw: Arc<Gateway>, mut shutdown: watch::Receiver<bool>) {
    tracing::info!(addr = %gw.admin_addr(), "admin server listening");
    loop {
        tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, _peer)) => {
                    let gw = gw.clone();
                    tokio::spawn(async move {
                        let svc = service_fn(move |req| handle(gw.clone(), req));
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

fn upstreams(gw: &Gateway) -> serde_json::Value {
    let brokers: Vec<Upstream> = gw
        .cluster
        .brokers()
        .into_iter()
        .map(|(node_id, address)| Upstream {
            node_id,
            address,
            gateway_ports: gw
                .listeners
                .iter()
                .filter_map(|l| {
                    l.bound
                        .snapshot()
                        .into_iter()
                        .find(|(n, _)| *n == node_id)
                        .map(|(_, a)| GatewayPort {
                            listener: l.kind.as_str(),
                            address: a.to_string(),
                        })
                })
                .collect(),
        })
        .collect();
    json!({ "cluster_id": gw.cluster.cluster_id(), "brokers": brokers })
}

/// `GET /v1/partitions/{topic}/{partition}/producers`: the PSM entries of a tracked partition.
fn producers(gw: &Gateway, topic: &str, partition: &str) -> Response<Full<Bytes>> {
    let Ok(partition) = partition.parse::<i32>() else {
        return error_reply(
            StatusCode::BAD_REQUEST,
            &format!("partition {partition:?} is not a number"),
        );
    };
    let Some(psm) = &gw.psm else {
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
    let Some(slot) = psm.existing(topic, partition) else {
        return error_reply(
            StatusCode::NOT_FOUND,
            &format!("partition {topic}-{partition} is not known on the destination"),
        );
    };
    let s = slot.lock().unwrap_or_else(|e| e.into_inner());
    let producers: Vec<serde_json::Value> = s
        .psm
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
            "ready": s.ready,
            "applied_through": s.applied_through,
            "producers": producers,
        }),
    )
}

async fn handle(
    gw: Arc<Gateway>,
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
                gw.metrics.render(),
            )
        }
        (Method::GET, "/v1/upstreams") => json_reply(StatusCode::OK, &upstreams(&gw)),
        (_, "/healthz" | "/readyz" | "/metrics" | "/v1/upstreams") => {
            let mut r = error_reply(
                StatusCode::METHOD_NOT_ALLOWED,
                &format!("{method} is not allowed on {path}"),
            );
            if let Ok(v) = "GET".parse() {
                r.headers_mut().insert(hyper::header::ALLOW, v);
            }
            r
        }
        (m, p) if p.starts_with("/v1/partitions/") => {
            let parts: Vec<&str> = p.trim_start_matches("/v1/partitions/").split('/').collect();
            match (m, parts.as_slice()) {
                (Method::GET, [topic, partition, "producers"]) => producers(&gw, topic, partition),
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
