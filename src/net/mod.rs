//! Transport: the byte streams under the Kafka protocol.
//!
//! Owns: opening connections to brokers ([`Connector`]: TCP with a connect timeout, then the
//! cluster's transport security, then the gateway's SASL authentication, [`sasl`]) and turning
//! accepted client sockets into streams ([`Acceptor`]), and the [`Stream`] type both produce,
//! split into independently owned halves for the two directions of a proxied connection.
//! Must not touch: Kafka framing or semantics (that is `protocol/` and `proxy/`), metrics, or
//! any gateway state. Configuration comes in already validated.

pub mod sasl;

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

use crate::config::{ClusterConfig, ListenerConfig};

/// Why a connection to a broker could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("cannot connect to {addr}: {source}")]
    Io { addr: String, source: io::Error },
    #[error("connecting to {addr} timed out after {after:?}")]
    Timeout { addr: String, after: Duration },
    #[error(transparent)]
    Sasl(#[from] sasl::SaslError),
}

/// Why the transport for a cluster or listener could not be set up (bad files, bad settings).
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error(transparent)]
    Sasl(#[from] sasl::SaslSetupError),
}

/// Why an accepted client connection could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum AcceptError {}

impl AcceptError {
    /// The `kind` label of `mirrorgate_errors_total` for this failure.
    pub fn kind(&self) -> &'static str {
        match *self {}
    }
}

/// A connected byte stream to a broker or from a client.
pub enum Stream {
    Plain(TcpStream),
}

impl Stream {
    /// Split into a read half and a write half that can be used from different tasks.
    pub fn into_split(self) -> (ReadHalf, WriteHalf) {
        match self {
            Stream::Plain(s) => {
                let (r, w) = s.into_split();
                (ReadHalf::Plain(r), WriteHalf::Plain(w))
            }
        }
    }
}

/// The read half of a [`Stream`].
pub enum ReadHalf {
    Plain(OwnedReadHalf),
}

/// The write half of a [`Stream`].
pub enum WriteHalf {
    Plain(OwnedWriteHalf),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
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
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
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
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            WriteHalf::Plain(s) => Pin::new(s).poll_flush(cx),
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            WriteHalf::Plain(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// Opens connections to the brokers of one cluster. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct Connector {
    /// The gateway's own SASL credentials, when the cluster has `sasl`.
    sasl: Option<Arc<sasl::Credentials>>,
}

impl Connector {
    /// Plain TCP, no transport security (tests, tools, clusters without security settings).
    pub fn plain() -> Self {
        Connector { sasl: None }
    }

    /// The connector for `cluster`'s transport settings.
    pub fn for_cluster(cluster: &ClusterConfig) -> Result<Self, SetupError> {
        Ok(Connector {
            sasl: sasl::Credentials::for_cluster(cluster.sasl.as_ref())?,
        })
    }

    /// This connector, authenticating every connection with `creds` (or not, with `None`).
    pub fn with_sasl(mut self, creds: Option<Arc<sasl::Credentials>>) -> Self {
        self.sasl = creds;
        self
    }

    /// The same transport without the gateway's SASL authentication: for the upstream
    /// connection of a proxied client, which authenticates itself through the gateway.
    pub fn for_passthrough(&self) -> Self {
        self.clone().with_sasl(None)
    }

    /// The SASL credentials this connector authenticates with.
    pub fn sasl(&self) -> Option<&Arc<sasl::Credentials>> {
        self.sasl.as_ref()
    }

    /// Connect to `addr` (`host:port`); `timeout` bounds the whole set-up.
    pub async fn connect(&self, addr: &str, timeout: Duration) -> Result<Stream, ConnectError> {
        let started = Instant::now();
        let tcp = tokio::time::timeout(timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| ConnectError::Timeout {
                addr: addr.to_string(),
                after: timeout,
            })?
            .map_err(|source| ConnectError::Io {
                addr: addr.to_string(),
                source,
            })?;
        let _ = tcp.set_nodelay(true);
        let stream = Stream::Plain(tcp);
        match &self.sasl {
            None => Ok(stream),
            Some(creds) => {
                let left = timeout.saturating_sub(started.elapsed());
                Ok(sasl::authenticate(stream, addr, creds, left).await?)
            }
        }
    }
}

/// Turns accepted client sockets of one listener into streams. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct Acceptor {}

impl Acceptor {
    /// The acceptor for `listener`'s transport settings.
    pub fn for_listener(_listener: &ListenerConfig) -> Result<Self, SetupError> {
        Ok(Acceptor {})
    }

    /// Set up the transport of an accepted socket.
    pub async fn accept(&self, tcp: TcpStream) -> Result<Stream, AcceptError> {
        let _ = tcp.set_nodelay(true);
        Ok(Stream::Plain(tcp))
    }
}
