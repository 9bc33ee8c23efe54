//! A tiny HTTP/1.1 client for the CLI's admin commands (`mirrorgate status`, `offsets translate`).

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// Why an admin call failed.
#[derive(Debug, thiserror::Error)]
pub enum AdminClientError {
    #[error("cannot reach the admin API at {addr}: {source}")]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    #[error("admin API at {addr}: {reason}")]
    Http { addr: String, reason: String },
}

/// Send `method path` with an optional bearer token and body; returns status and body.
pub async fn call(
    addr: &str,
    method: Method,
    path: &str,
    token: Option<&str>,
    body: Option<String>,
) -> Result<(u16, String), AdminClientError> {
    let http = |e: &dyn std::fmt::Display| AdminClientError::Http {
        addr: addr.to_string(),
        reason: e.to_string(),
    };
    let stream = TcpStream::connect(addr)
        .await
        .map_err(|source| AdminClientError::Connect {
            addr: addr.to_string(),
            source,
        })?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| http(&e))?;
    tokio::spawn(conn);
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr);
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    if body.is_some() {
        req = req.header("content-type", "application/json");
    }
    let req = req
        .body(Full::new(Bytes::from(body.unwrap_or_default())))
        .map_err(|e| http(&e))?;
    let resp = sender.send_request(req).await.map_err(|e| http(&e))?;
    let status = resp.status().as_u16();
    let bytes = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| http(&e))?
        .to_bytes();
    Ok((status, String::from_utf8_lossy(&bytes).into_owned()))
}

/// `GET /v1/mirrors/{mirror}/offsets/translate?{query}` (the CLI's `offsets translate`): the
/// answer's body, or `Err((exit code, message))` — 2 when the API refused it, 1 when it could
/// not be reached.
pub async fn translate(addr: &str, mirror: &str, query: &str) -> Result<String, (u8, String)> {
    let path = format!("/v1/mirrors/{mirror}/offsets/translate?{query}");
    match call(addr, Method::GET, &path, None, None).await {
        Ok((200, body)) => Ok(body.trim().to_string()),
        Ok((status, body)) => {
            let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            let msg = v["error"].as_str().unwrap_or(body.trim()).to_string();
            Err((2, format!("translation refused ({status}): {msg}")))
        }
        Err(e) => Err((1, e.to_string())),
    }
}
