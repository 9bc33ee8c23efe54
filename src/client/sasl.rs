//! SASL authentication of the gateway's own connections to brokers (metadata refresh, barrier
//! writes, producer-state rebuild, screening, the mirror agent): once the transport is up,
//! SaslHandshake v1 and SaslAuthenticate v2 exchanges with the cluster's `sasl` credentials.
//!
//! Mechanisms: SCRAM-SHA-256 and SCRAM-SHA-512 (the messages are [`super::scram`]'s) and
//! PLAIN. The exchanges are ordinary Kafka requests sent with the gateway's own client
//! ([`KafkaClient`]) over the stream the transport opened.
//!
//! Owns: the credentials resolved from configuration and the client side of the exchanges.
//! Must not touch: client connections (their SASL frames pass through the proxy untouched),
//! the SCRAM computations (`scram`), logging of any token, password or derived key.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::{SaslAuthenticateRequest, SaslHandshakeRequest};
use kafka_protocol::protocol::StrBytes;

use crate::config::{SaslConfig, SaslMechanism, SecretError};
use crate::net::Stream;

use super::kafka::{KafkaClient, RequestError};
use super::scram::{SaltCache, ScramClient, ScramError, ScramHash};

/// SaslHandshake version the gateway sends (v1: tokens travel in SaslAuthenticate).
const HANDSHAKE_VERSION: i16 = 1;
/// SaslAuthenticate version the gateway sends.
const AUTHENTICATE_VERSION: i16 = 2;
/// Kafka error code SASL_AUTHENTICATION_FAILED.
pub const SASL_AUTHENTICATION_FAILED: i16 = 58;
/// Kafka error code UNSUPPORTED_SASL_MECHANISM.
const UNSUPPORTED_SASL_MECHANISM: i16 = 33;
/// Kafka error code ILLEGAL_SASL_STATE (also what a listener without SASL answers).
const ILLEGAL_SASL_STATE: i16 = 34;

/// Why the SASL settings of a cluster cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SaslSetupError {
    #[error("sasl.password: {0}")]
    Password(#[from] SecretError),
}

/// Why authenticating a connection failed. Never contains a token or password.
#[derive(Debug, thiserror::Error)]
pub enum SaslError {
    #[error("SASL exchange with {addr} failed: {source}")]
    Exchange { addr: String, source: RequestError },
    #[error("SASL authentication with {addr} did not complete within {after:?}")]
    Timeout { addr: String, after: Duration },
    #[error("broker {addr} does not enable SASL mechanism {mechanism} (it enables: {enabled})")]
    UnsupportedMechanism {
        addr: String,
        mechanism: SaslMechanism,
        enabled: String,
    },
    #[error("broker {addr} refused SaslHandshake for {mechanism} with error code {code}{hint}")]
    Handshake {
        addr: String,
        mechanism: SaslMechanism,
        code: i16,
        hint: &'static str,
    },
    #[error("SASL authentication with {addr} as {username:?} ({mechanism}) failed: SaslAuthenticationFailed: {message}")]
    AuthenticationFailed {
        addr: String,
        username: String,
        mechanism: SaslMechanism,
        message: String,
    },
    #[error("SaslAuthenticate with {addr} failed with error code {code}: {message}")]
    Authenticate {
        addr: String,
        code: i16,
        message: String,
    },
    #[error("SCRAM exchange with {addr} failed: {source}")]
    Scram { addr: String, source: ScramError },
}

/// The gateway's resolved credentials for one cluster. `Debug` never shows the password.
pub struct Credentials {
    mechanism: SaslMechanism,
    username: String,
    password: String,
    salts: SaltCache,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("mechanism", &self.mechanism)
            .field("username", &self.username)
            .field("password", &crate::config::REDACTED)
            .finish()
    }
}

impl Credentials {
    /// Resolve the password of `cfg` (environment variable, file or inline value).
    pub fn resolve(cfg: &SaslConfig) -> Result<Arc<Credentials>, SaslSetupError> {
        Ok(Arc::new(Credentials {
            mechanism: cfg.mechanism,
            username: cfg.username.clone(),
            password: cfg.password.resolve()?,
            salts: SaltCache::default(),
        }))
    }

    /// The `sasl` section of a cluster, resolved; `None` when it has none.
    pub fn for_cluster(
        cfg: Option<&SaslConfig>,
    ) -> Result<Option<Arc<Credentials>>, SaslSetupError> {
        cfg.map(Self::resolve).transpose()
    }
}

/// Authenticate `stream` (connected to `addr`) with `creds`; the whole exchange is bounded by
/// `timeout`. Returns the stream, ready for ordinary requests.
pub async fn authenticate(
    stream: Stream,
    addr: &str,
    creds: &Credentials,
    timeout: Duration,
) -> Result<Stream, SaslError> {
    let timeout = timeout.max(Duration::from_millis(1));
    let mut client = KafkaClient::over(stream, addr, timeout);
    match tokio::time::timeout(timeout, exchange(&mut client, addr, creds, timeout)).await {
        Ok(Ok(())) => {
            tracing::debug!(broker = addr, user = %creds.username, mechanism = %creds.mechanism, "SASL authenticated");
            Ok(client.into_stream())
        }
        Ok(Err(e)) => Err(e),
        Err(_) => Err(SaslError::Timeout {
            addr: addr.to_string(),
            after: timeout,
        }),
    }
}

async fn exchange(
    client: &mut KafkaClient,
    addr: &str,
    creds: &Credentials,
    timeout: Duration,
) -> Result<(), SaslError> {
    let ex = |e| exchange_error(addr, timeout, e);
    let hs = client
        .request(
            &SaslHandshakeRequest::default()
                .with_mechanism(StrBytes::from_static_str(creds.mechanism.as_str())),
            HANDSHAKE_VERSION,
        )
        .await
        .map_err(ex)?;
    match hs.error_code {
        0 => {}
        UNSUPPORTED_SASL_MECHANISM => {
            let enabled: Vec<&str> = hs.mechanisms.iter().map(|m| m.as_str()).collect();
            return Err(SaslError::UnsupportedMechanism {
                addr: addr.to_string(),
                mechanism: creds.mechanism,
                enabled: if enabled.is_empty() {
                    "none".to_string()
                } else {
                    enabled.join(", ")
                },
            });
        }
        code => {
            return Err(SaslError::Handshake {
                addr: addr.to_string(),
                mechanism: creds.mechanism,
                code,
                hint: if code == ILLEGAL_SASL_STATE {
                    " (ILLEGAL_SASL_STATE: is this a SASL listener of the broker?)"
                } else {
                    ""
                },
            })
        }
    }
    let hash = match creds.mechanism {
        SaslMechanism::Plain => {
            let mut token = Vec::with_capacity(creds.username.len() + creds.password.len() + 2);
            token.push(0);
            token.extend_from_slice(creds.username.as_bytes());
            token.push(0);
            token.extend_from_slice(creds.password.as_bytes());
            authenticate_step(client, addr, creds, token, timeout).await?;
            return Ok(());
        }
        SaslMechanism::ScramSha256 => ScramHash::Sha256,
        SaslMechanism::ScramSha512 => ScramHash::Sha512,
    };
    let mut scram = ScramClient::new(hash, &creds.username, &creds.password);
    let server_first = authenticate_step(
        client,
        addr,
        creds,
        scram.client_first().into_bytes(),
        timeout,
    )
    .await?;
    let scram_err = |source| SaslError::Scram {
        addr: addr.to_string(),
        source,
    };
    let client_final = scram
        .server_first(&String::from_utf8_lossy(&server_first), &creds.salts)
        .map_err(scram_err)?;
    let server_final =
        authenticate_step(client, addr, creds, client_final.into_bytes(), timeout).await?;
    scram
        .server_final(&String::from_utf8_lossy(&server_final))
        .map_err(scram_err)
}

/// A failed request of the exchange; a request timeout is the exchange's timeout.
fn exchange_error(addr: &str, timeout: Duration, e: RequestError) -> SaslError {
    match e {
        RequestError::Timeout { .. } => SaslError::Timeout {
            addr: addr.to_string(),
            after: timeout,
        },
        source => SaslError::Exchange {
            addr: addr.to_string(),
            source,
        },
    }
}

/// One SaslAuthenticate round trip; the server's token on success.
async fn authenticate_step(
    client: &mut KafkaClient,
    addr: &str,
    creds: &Credentials,
    token: Vec<u8>,
    timeout: Duration,
) -> Result<Bytes, SaslError> {
    let resp = client
        .request(
            &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token)),
            AUTHENTICATE_VERSION,
        )
        .await
        .map_err(|e| exchange_error(addr, timeout, e))?;
    let message = || {
        resp.error_message
            .as_ref()
            .map(|m| m.to_string())
            .unwrap_or_default()
    };
    match resp.error_code {
        0 => Ok(resp.auth_bytes),
        SASL_AUTHENTICATION_FAILED => Err(SaslError::AuthenticationFailed {
            addr: addr.to_string(),
            username: creds.username.clone(),
            mechanism: creds.mechanism,
            message: message(),
        }),
        code => Err(SaslError::Authenticate {
            addr: addr.to_string(),
            code,
            message: message(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_from_a_missing_environment_variable_is_a_setup_error() {
        let cfg = SaslConfig {
            mechanism: SaslMechanism::ScramSha256,
            username: "admin".into(),
            password: crate::config::SecretSource {
                value: None,
                env: Some("MIRRORGATE_SASL_TEST_UNSET_9C1E".into()),
                file: None,
            },
        };
        let err = Credentials::for_cluster(Some(&cfg)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "sasl.password: environment variable MIRRORGATE_SASL_TEST_UNSET_9C1E is not set"
        );
        assert!(Credentials::for_cluster(None).unwrap().is_none());
    }

    #[tokio::test]
    async fn an_unanswered_exchange_times_out_within_the_connect_timeout() {
        // A listener that accepts and never answers.
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let _hold = tokio::spawn(async move {
            let conn = l.accept().await;
            tokio::time::sleep(Duration::from_secs(30)).await;
            drop(conn);
        });
        let cluster = crate::config::ClusterConfig {
            bootstrap: vec![addr.clone()],
            connect_timeout_ms: 300,
            metadata_refresh_ms: 1000,
            tls: None,
            sasl: Some(SaslConfig {
                mechanism: SaslMechanism::ScramSha512,
                username: "admin".into(),
                password: crate::config::SecretSource {
                    value: Some("pw".into()),
                    env: None,
                    file: None,
                },
            }),
        };
        let c = super::super::Connector::for_cluster(&cluster).unwrap();
        let started = std::time::Instant::now();
        let err = c
            .connect(&addr, Duration::from_millis(300))
            .await
            .err()
            .expect("no broker answered");
        assert!(started.elapsed() < Duration::from_secs(3));
        assert!(
            matches!(
                err,
                super::super::ConnectError::Sasl(SaslError::Timeout { .. })
            ),
            "{err}"
        );
    }

    #[test]
    fn credentials_debug_never_shows_the_password() {
        let c = Credentials {
            mechanism: SaslMechanism::Plain,
            username: "admin".into(),
            password: "hunter2".into(),
            salts: SaltCache::default(),
        };
        assert!(!format!("{c:?}").contains("hunter2"));
    }
}
