//! A minimal Kafka client for gateway-originated requests (metadata refresh, later barrier
//! writes and producer-state queries). One connection, one request at a time, correlation ids
//! of its own.

use std::time::Duration;

use bytes::{BufMut, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::frame::{read_frame, FrameError};

/// Why a gateway-originated request failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    #[error("{what} to {addr} timed out after {after:?}")]
    Timeout {
        what: &'static str,
        addr: String,
        after: Duration,
    },
    #[error("connection to {addr} failed: {source}")]
    Frame { addr: String, source: FrameError },
    #[error("connection to {addr} closed by the broker")]
    Closed { addr: String },
    #[error("cannot encode {api:?} v{version}: {reason}")]
    Encode {
        api: ApiKey,
        version: i16,
        reason: String,
    },
    #[error("cannot decode {api:?} v{version} response from {addr}: {reason}")]
    Decode {
        api: ApiKey,
        version: i16,
        addr: String,
        reason: String,
    },
    #[error("response from {addr} has correlation id {got}, expected {want}")]
    Correlation { addr: String, got: i32, want: i32 },
}

/// One connection to one broker.
pub struct KafkaClient {
    stream: TcpStream,
    addr: String,
    buf: BytesMut,
    next_correlation: i32,
    timeout: Duration,
}

impl KafkaClient {
    /// Connect to `addr` (`host:port`) within `timeout`; the same timeout bounds each request.
    pub async fn connect(addr: &str, timeout: Duration) -> Result<Self, ClientError> {
        let stream = tokio::time::timeout(timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| ClientError::Timeout {
                what: "connect",
                addr: addr.to_string(),
                after: timeout,
            })?
            .map_err(|source| ClientError::Connect {
                addr: addr.to_string(),
                source,
            })?;
        let _ = stream.set_nodelay(true);
        Ok(KafkaClient {
            stream,
            addr: addr.to_string(),
            buf: BytesMut::new(),
            next_correlation: 1,
            timeout,
        })
    }

    /// The address this client is connected to.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Send `req` at `version` and wait for its response.
    pub async fn send<R: Request>(
        &mut self,
        req: &R,
        version: i16,
    ) -> Result<R::Response, ClientError> {
        let api = ApiKey::try_from(R::KEY).unwrap_or(ApiKey::ApiVersions);
        let correlation = self.next_correlation;
        self.next_correlation = self.next_correlation.wrapping_add(1);
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(correlation)
            .with_client_id(Some(StrBytes::from_static_str("mirrorgate")));
        let mut out = BytesMut::new();
        out.put_i32(0);
        let enc = |e: anyhow::Error| ClientError::Encode {
            api,
            version,
            reason: e.to_string(),
        };
        header
            .encode(&mut out, R::header_version(version))
            .map_err(enc)?;
        req.encode(&mut out, version).map_err(enc)?;
        let len = (out.len() - 4) as i32;
        out[0..4].copy_from_slice(&len.to_be_bytes());

        let timeout = self.timeout;
        let addr = self.addr.clone();
        let fut = async {
            self.stream
                .write_all(&out)
                .await
                .map_err(|e| ClientError::Frame {
                    addr: addr.clone(),
                    source: e.into(),
                })?;
            read_frame(&mut self.stream, &mut self.buf, 256 * 1024 * 1024)
                .await
                .map_err(|source| ClientError::Frame {
                    addr: addr.clone(),
                    source,
                })?
                .ok_or_else(|| ClientError::Closed { addr: addr.clone() })
        };
        let frame =
            tokio::time::timeout(timeout, fut)
                .await
                .map_err(|_| ClientError::Timeout {
                    what: "request",
                    addr: self.addr.clone(),
                    after: timeout,
                })??;
        let mut body = frame.slice(4..);
        let dec = |e: anyhow::Error| ClientError::Decode {
            api,
            version,
            addr: self.addr.clone(),
            reason: e.to_string(),
        };
        let rh = ResponseHeader::decode(
            &mut body,
            <R::Response as HeaderVersion>::header_version(version),
        )
        .map_err(dec)?;
        if rh.correlation_id != correlation {
            return Err(ClientError::Correlation {
                addr: self.addr.clone(),
                got: rh.correlation_id,
                want: correlation,
            });
        }
        R::Response::decode(&mut body, version).map_err(dec)
    }
}
