//! Opening the gateway's own connections to brokers: the transport of `net` (TCP, then TLS),
//! then the gateway's SASL login ([`super::sasl`]) when the cluster has `sasl` credentials.
//!
//! Owns: which transport and which credentials a cluster's connections use, and bounding the
//! whole set-up (transport and login) by one timeout.
//! Must not touch: the bytes of TLS (`net`), the SASL exchanges themselves (`sasl`), requests
//! after the login (`kafka`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::ClusterConfig;
use crate::net::{self, Acceptor, Stream, Transport};

use super::sasl::{self, Credentials, SaslError, SaslSetupError};

/// Why a connection to a broker could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// TCP or TLS.
    #[error(transparent)]
    Transport(#[from] net::ConnectError),
    /// The gateway's SASL login, once the transport was up.
    #[error(transparent)]
    Sasl(#[from] SaslError),
}

impl ConnectError {
    /// The `kind` label of `mirrorgate_errors_total` for this failure: `upstream_connect`,
    /// `upstream_tls` (see [`net::ConnectError::kind`]) or `upstream_sasl`.
    pub fn kind(&self) -> &'static str {
        match self {
            ConnectError::Transport(e) => e.kind(),
            ConnectError::Sasl(_) => "upstream_sasl",
        }
    }
}

/// Why the connections of a cluster cannot be set up (bad files, bad settings).
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error(transparent)]
    Transport(#[from] net::SetupError),
    #[error(transparent)]
    Sasl(#[from] SaslSetupError),
}

/// Opens the gateway's connections to the brokers of one cluster. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct Connector {
    transport: Transport,
    /// The gateway's own SASL credentials, when the cluster has `sasl`.
    sasl: Option<Arc<Credentials>>,
}

impl Connector {
    /// Plain TCP, no transport security, no SASL (tests, tools, clusters without security).
    pub fn plain() -> Self {
        Connector::default()
    }

    /// The connector for `cluster`'s transport and SASL settings.
    pub fn for_cluster(cluster: &ClusterConfig) -> Result<Self, SetupError> {
        Ok(Connector {
            transport: Transport::for_cluster(cluster)?,
            sasl: Credentials::for_cluster(cluster.sasl.as_ref())?,
        })
    }

    /// A connector to the gateway's own listener served by `acceptor` (see
    /// [`Transport::to_own_listener`]). No SASL (add it with [`Self::with_sasl`]).
    pub fn to_own_listener(acceptor: &Acceptor) -> Result<Self, net::SetupError> {
        Ok(Connector {
            transport: Transport::to_own_listener(acceptor)?,
            sasl: None,
        })
    }

    /// This connector, authenticating every connection with `creds` (or not, with `None`).
    pub fn with_sasl(mut self, creds: Option<Arc<Credentials>>) -> Self {
        self.sasl = creds;
        self
    }

    /// The same transport without the gateway's SASL login: for the upstream connection of a
    /// proxied client, which authenticates itself through the gateway.
    pub fn for_passthrough(&self) -> Transport {
        self.transport.clone()
    }

    /// The SASL credentials this connector authenticates with.
    pub fn sasl(&self) -> Option<&Arc<Credentials>> {
        self.sasl.as_ref()
    }

    /// Connect to `addr` (`host:port`); `timeout` bounds the whole set-up (TCP, TLS, then the
    /// gateway's SASL authentication when configured).
    pub async fn connect(&self, addr: &str, timeout: Duration) -> Result<Stream, ConnectError> {
        let started = Instant::now();
        let stream = self.transport.connect(addr, timeout).await?;
        match &self.sasl {
            None => Ok(stream),
            Some(creds) => {
                let left = timeout.saturating_sub(started.elapsed());
                Ok(sasl::authenticate(stream, addr, creds, left).await?)
            }
        }
    }
}
