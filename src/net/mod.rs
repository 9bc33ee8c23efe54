//! Transport: the byte streams under the Kafka protocol, and nothing of Kafka.
//!
//! Owns: opening byte streams to brokers ([`Transport`]: TCP with a connect timeout, then the
//! cluster's TLS) and turning accepted client sockets into streams ([`Acceptor`]), and the
//! [`Stream`] type both produce, split into independently owned halves for the two directions
//! of a proxied connection.
//! Must not touch: Kafka framing or semantics (`protocol/`), Kafka requests of any kind, SASL
//! included (the gateway's own login is `client/`), metrics, or any gateway state.
//! Configuration comes in already validated.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

use crate::config::{ClusterConfig, ListenerConfig};

pub mod tls;

pub use tls::{Reloaded, ServedCertificate, TlsSetupError};

/// Why a byte stream to a broker could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("cannot connect to {addr}: {source}")]
    Io { addr: String, source: io::Error },
    #[error("connecting to {addr} timed out after {after:?}")]
    Timeout { addr: String, after: Duration },
    #[error("TLS handshake with {addr} (server name {server_name}) failed: {source}")]
    Tls {
        addr: String,
        server_name: String,
        source: io::Error,
    },
    #[error("cannot check the certificate of {addr}: `{host}` is not a DNS name or IP address; set tls.server_name")]
    ServerName { addr: String, host: String },
}

impl ConnectError {
    /// The `kind` label of `mirrorgate_errors_total` for this failure: `upstream_tls` for a
    /// failed TLS handshake (certificate, name or protocol), `upstream_connect` otherwise.
    pub fn kind(&self) -> &'static str {
        match self {
            ConnectError::Io { .. } | ConnectError::Timeout { .. } => "upstream_connect",
            ConnectError::Tls { .. } | ConnectError::ServerName { .. } => "upstream_tls",
        }
    }
}

/// Why the transport for a cluster or listener could not be set up (bad files, bad settings).
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("tls: {0}")]
    Tls(#[from] TlsSetupError),
}

/// Why an accepted client connection could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum AcceptError {
    #[error("TLS handshake failed: {0}")]
    TlsHandshake(io::Error),
    #[error("TLS handshake not completed within {0:?}")]
    TlsHandshakeTimeout(Duration),
}

impl AcceptError {
    /// The `kind` label of `mirrorgate_errors_total` for this failure.
    pub fn kind(&self) -> &'static str {
        match self {
            AcceptError::TlsHandshake(_) => "tls_handshake",
            AcceptError::TlsHandshakeTimeout(_) => "tls_handshake_timeout",
        }
    }
}

/// A connected byte stream to a broker or from a client.
pub enum Stream {
    Plain(TcpStream),
    /// TLS over TCP, client or server side (boxed: the session state is large).
    Tls(Box<tokio_rustls::TlsStream<TcpStream>>),
}

type TlsBox = Box<tokio_rustls::TlsStream<TcpStream>>;

impl Stream {
    /// Split into a read half and a write half that can be used from different tasks.
    pub fn into_split(self) -> (ReadHalf, WriteHalf) {
        match self {
            Stream::Plain(s) => {
                let (r, w) = s.into_split();
                (ReadHalf::Plain(r), WriteHalf::Plain(w))
            }
            Stream::Tls(s) => {
                let (r, w) = tokio::io::split(s);
                (ReadHalf::Tls(r), WriteHalf::Tls(w))
            }
        }
    }
}

/// The read half of a [`Stream`].
pub enum ReadHalf {
    Plain(OwnedReadHalf),
    Tls(tokio::io::ReadHalf<TlsBox>),
}

/// The write half of a [`Stream`].
///
/// Writes to a TLS half may stay buffered until [`AsyncWriteExt::flush`](tokio::io::AsyncWriteExt::flush):
/// flush after each complete message.
pub enum WriteHalf {
    Plain(OwnedWriteHalf),
    Tls(tokio::io::WriteHalf<TlsBox>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s).poll_write(cx, buf),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s).poll_flush(cx),
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

impl AsyncRead for ReadHalf {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ReadHalf::Plain(s) => Pin::new(s).poll_read(cx, buf),
            ReadHalf::Tls(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for WriteHalf {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            WriteHalf::Plain(s) => Pin::new(s).poll_write(cx, buf),
            WriteHalf::Tls(s) => Pin::new(s).poll_write(cx, buf),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            WriteHalf::Plain(s) => Pin::new(s).poll_flush(cx),
            WriteHalf::Tls(s) => Pin::new(s).poll_flush(cx),
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            WriteHalf::Plain(s) => Pin::new(s).poll_shutdown(cx),
            WriteHalf::Tls(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// Opens byte streams to the brokers of one cluster: TCP, then TLS when the cluster has `tls`.
/// Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct Transport {
    tls: Option<tls::ClientTls>,
}

impl Transport {
    /// Plain TCP, no transport security (tests, tools, clusters without security settings).
    pub fn plain() -> Self {
        Transport::default()
    }

    /// The transport for `cluster`'s `tls` settings.
    pub fn for_cluster(cluster: &ClusterConfig) -> Result<Self, SetupError> {
        let tls = cluster.tls.as_ref().map(tls::ClientTls::new).transpose()?;
        Ok(Transport { tls })
    }

    /// The transport to the gateway's own listener served by `acceptor`: plain when the
    /// listener is plain; with TLS, trusting exactly the certificate the listener serves
    /// (across reloads) and, when the listener requires client certificates, presenting that
    /// same certificate.
    pub fn to_own_listener(acceptor: &Acceptor) -> Result<Self, SetupError> {
        let tls = acceptor
            .tls
            .as_ref()
            .map(|t| t.pinned_client())
            .transpose()?;
        Ok(Transport { tls })
    }

    /// Connect to `addr` (`host:port`); `timeout` bounds TCP and the TLS handshake.
    pub async fn connect(&self, addr: &str, timeout: Duration) -> Result<Stream, ConnectError> {
        let setup = async {
            let tcp = TcpStream::connect(addr)
                .await
                .map_err(|source| ConnectError::Io {
                    addr: addr.to_string(),
                    source,
                })?;
            let _ = tcp.set_nodelay(true);
            match &self.tls {
                None => Ok(Stream::Plain(tcp)),
                Some(t) => t.handshake(addr, tcp).await,
            }
        };
        tokio::time::timeout(timeout, setup)
            .await
            .map_err(|_| ConnectError::Timeout {
                addr: addr.to_string(),
                after: timeout,
            })?
    }
}

/// Turns accepted client sockets of one listener into streams. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct Acceptor {
    tls: Option<tls::ServerTls>,
}

impl Acceptor {
    /// The acceptor for `listener`'s transport settings.
    pub fn for_listener(listener: &ListenerConfig) -> Result<Self, SetupError> {
        let tls = listener.tls.as_ref().map(tls::ServerTls::new).transpose()?;
        Ok(Acceptor { tls })
    }

    /// The certificate this listener serves (TLS listeners), for reload and expiry metrics.
    pub fn served_certificate(&self) -> Option<std::sync::Arc<ServedCertificate>> {
        self.tls.as_ref().map(|t| t.served().clone())
    }

    /// Bound the TLS handshake by `timeout` instead of [`tls::HANDSHAKE_TIMEOUT`].
    pub fn with_handshake_timeout(mut self, timeout: Duration) -> Self {
        if let Some(t) = &mut self.tls {
            t.handshake_timeout = timeout;
        }
        self
    }

    /// Set up the transport of an accepted socket (the TLS handshake, bounded in time).
    pub async fn accept(&self, tcp: TcpStream) -> Result<Stream, AcceptError> {
        let _ = tcp.set_nodelay(true);
        match &self.tls {
            None => Ok(Stream::Plain(tcp)),
            Some(t) => t.accept(tcp).await,
        }
    }
}
