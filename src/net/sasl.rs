//! SASL authentication of the gateway's own connections to brokers (metadata refresh, barrier
//! writes, producer-state rebuild, screening, the mirror agent): once the transport is up,
//! SaslHandshake v1 and SaslAuthenticate v2 exchanges with the cluster's `sasl` credentials.
//!
//! Mechanisms: SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802 / RFC 7677; the server's signature is
//! verified) and PLAIN. The exchanges are ordinary Kafka requests sent with the gateway's own
//! minimal client ([`KafkaClient`]), which is the one place this transport module speaks Kafka.
//!
//! Owns: the credentials resolved from configuration and the client side of the exchanges.
//! Must not touch: client connections (their SASL frames pass through the proxy untouched),
//! logging of any token, password or derived key.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use bytes::Bytes;
use hmac::{KeyInit, Mac};
use kafka_protocol::messages::{SaslAuthenticateRequest, SaslHandshakeRequest};
use kafka_protocol::protocol::StrBytes;
use sha2::{Digest, Sha256, Sha512};

use crate::config::{SaslConfig, SaslMechanism, SecretError};
use crate::protocol::client::{ClientError, KafkaClient};

use super::Stream;

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
/// Largest SCRAM iteration count accepted from a server (Kafka allows at most 16384).
const MAX_SCRAM_ITERATIONS: u32 = 100_000;

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
    Exchange {
        addr: String,
        source: Box<ClientError>,
    },
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

/// A server message the SCRAM client cannot accept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScramError {
    #[error("server-first-message is malformed: {0}")]
    ServerFirst(&'static str),
    #[error("the server's nonce does not extend the client's")]
    Nonce,
    #[error("iteration count {0} is outside 1..={MAX_SCRAM_ITERATIONS}")]
    Iterations(u64),
    #[error("server-final-message is malformed")]
    ServerFinal,
    #[error("the server reported an error: {0}")]
    ServerError(String),
    #[error("the server's signature does not match: it does not know the password")]
    ServerSignature,
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
        .send(
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
fn exchange_error(addr: &str, timeout: Duration, e: ClientError) -> SaslError {
    match e {
        ClientError::Timeout { .. } => SaslError::Timeout {
            addr: addr.to_string(),
            after: timeout,
        },
        e => SaslError::Exchange {
            addr: addr.to_string(),
            source: Box::new(e),
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
        .send(
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

// ------------------------------------------------------------------ SCRAM (RFC 5802)

/// The hash function of a SCRAM mechanism.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScramHash {
    Sha256,
    Sha512,
}

impl ScramHash {
    fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        match self {
            ScramHash::Sha256 => {
                let mut m = hmac::Hmac::<Sha256>::new_from_slice(key)
                    .expect("HMAC accepts keys of any length");
                m.update(data);
                m.finalize().into_bytes().to_vec()
            }
            ScramHash::Sha512 => {
                let mut m = hmac::Hmac::<Sha512>::new_from_slice(key)
                    .expect("HMAC accepts keys of any length");
                m.update(data);
                m.finalize().into_bytes().to_vec()
            }
        }
    }

    fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            ScramHash::Sha256 => Sha256::digest(data).to_vec(),
            ScramHash::Sha512 => Sha512::digest(data).to_vec(),
        }
    }

    /// `Hi(password, salt, i)`: PBKDF2 with HMAC of this hash.
    fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        match self {
            ScramHash::Sha256 => {
                pbkdf2::pbkdf2_hmac_array::<Sha256, 32>(password, salt, iterations).to_vec()
            }
            ScramHash::Sha512 => {
                pbkdf2::pbkdf2_hmac_array::<Sha512, 64>(password, salt, iterations).to_vec()
            }
        }
    }
}

/// The last salted password computed for a credential: PBKDF2 is deliberately slow, and a
/// broker answers every connection with the same salt and iteration count.
#[derive(Default)]
pub struct SaltCache {
    last: Mutex<Option<Salted>>,
}

/// A salted password and what it was computed from.
struct Salted {
    hash: ScramHash,
    salt: Vec<u8>,
    iterations: u32,
    salted: Vec<u8>,
}

impl SaltCache {
    fn get(&self, hash: ScramHash, password: &str, salt: &[u8], iterations: u32) -> Vec<u8> {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = last.as_ref() {
            if s.hash == hash && s.salt == salt && s.iterations == iterations {
                return s.salted.clone();
            }
        }
        let salted = hash.salted_password(password.as_bytes(), salt, iterations);
        *last = Some(Salted {
            hash,
            salt: salt.to_vec(),
            iterations,
            salted: salted.clone(),
        });
        salted
    }
}

/// The client side of one SCRAM exchange, without I/O.
pub struct ScramClient {
    hash: ScramHash,
    password: String,
    client_first_bare: String,
    nonce: String,
    /// Set by [`Self::server_first`]: the signature the server must prove.
    expected_server_signature: Option<Vec<u8>>,
}

/// `saslname` of RFC 5802: `=` and `,` escaped as `=3D` and `=2C`.
fn escape_saslname(name: &str) -> String {
    name.replace('=', "=3D").replace(',', "=2C")
}

impl ScramClient {
    /// A client with a fresh random nonce.
    pub fn new(hash: ScramHash, username: &str, password: &str) -> ScramClient {
        let mut raw = [0u8; 24];
        if getrandom::fill(&mut raw).is_err() {
            // No OS randomness: fall back to a v4 UUID (itself random) rather than a fixed nonce.
            raw[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
        }
        Self::with_nonce(hash, username, password, &B64.encode(raw))
    }

    /// A client with a given nonce (printable, without `,`): for tests against known vectors.
    pub fn with_nonce(hash: ScramHash, username: &str, password: &str, nonce: &str) -> ScramClient {
        ScramClient {
            hash,
            password: password.to_string(),
            client_first_bare: format!("n={},r={nonce}", escape_saslname(username)),
            nonce: nonce.to_string(),
            expected_server_signature: None,
        }
    }

    /// client-first-message: no channel binding, no authorization identity.
    pub fn client_first(&self) -> String {
        format!("n,,{}", self.client_first_bare)
    }

    /// Take the server-first-message and return the client-final-message.
    pub fn server_first(&mut self, msg: &str, salts: &SaltCache) -> Result<String, ScramError> {
        let mut nonce = None;
        let mut salt = None;
        let mut iterations = None;
        for (i, attr) in msg.split(',').enumerate() {
            let Some((k, v)) = attr.split_once('=') else {
                return Err(ScramError::ServerFirst("an attribute is not `k=value`"));
            };
            match k {
                "m" if i == 0 => {
                    return Err(ScramError::ServerFirst("a mandatory extension is required"))
                }
                "r" => nonce = Some(v),
                "s" => {
                    salt = Some(
                        B64.decode(v)
                            .map_err(|_| ScramError::ServerFirst("the salt is not base64"))?,
                    )
                }
                "i" => {
                    let n: u64 = v.parse().map_err(|_| {
                        ScramError::ServerFirst("the iteration count is not a number")
                    })?;
                    iterations = Some(n)
                }
                _ => {}
            }
        }
        let nonce = nonce.ok_or(ScramError::ServerFirst("no nonce"))?;
        let salt = salt.ok_or(ScramError::ServerFirst("no salt"))?;
        let iterations = iterations.ok_or(ScramError::ServerFirst("no iteration count"))?;
        if !nonce.starts_with(&self.nonce) || nonce.len() == self.nonce.len() {
            return Err(ScramError::Nonce);
        }
        let iterations = match u32::try_from(iterations) {
            Ok(n) if (1..=MAX_SCRAM_ITERATIONS).contains(&n) => n,
            _ => return Err(ScramError::Iterations(iterations)),
        };
        let h = self.hash;
        let salted = salts.get(h, &self.password, &salt, iterations);
        let client_key = h.hmac(&salted, b"Client Key");
        let stored_key = h.hash(&client_key);
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{msg},{without_proof}", self.client_first_bare);
        let client_signature = h.hmac(&stored_key, auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&client_signature)
            .map(|(a, b)| a ^ b)
            .collect();
        let server_key = h.hmac(&salted, b"Server Key");
        self.expected_server_signature = Some(h.hmac(&server_key, auth_message.as_bytes()));
        Ok(format!("{without_proof},p={}", B64.encode(proof)))
    }

    /// Check the server-final-message: the server proves it knows the salted password.
    pub fn server_final(&self, msg: &str) -> Result<(), ScramError> {
        if let Some(e) = msg.strip_prefix("e=") {
            return Err(ScramError::ServerError(e.chars().take(200).collect()));
        }
        let v = msg
            .split(',')
            .find_map(|a| a.strip_prefix("v="))
            .ok_or(ScramError::ServerFinal)?;
        let got = B64.decode(v).map_err(|_| ScramError::ServerFinal)?;
        let want = self
            .expected_server_signature
            .as_ref()
            .ok_or(ScramError::ServerFinal)?;
        // Compared without an early exit.
        let diff = got.iter().zip(want).fold(0u8, |acc, (a, b)| acc | (a ^ b));
        if got.len() != want.len() || diff != 0 {
            return Err(ScramError::ServerSignature);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // RFC 7677 section 3.
    const NONCE: &str = "rOprNGfwEbeRWgbNEkqO";
    const SERVER_FIRST: &str =
        "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
    const CLIENT_FINAL: &str = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
    const SERVER_FINAL: &str = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";

    fn rfc_client() -> ScramClient {
        ScramClient::with_nonce(ScramHash::Sha256, "user", "pencil", NONCE)
    }

    #[test]
    fn scram_sha_256_matches_the_rfc_7677_test_vector() {
        let mut c = rfc_client();
        assert_eq!(c.client_first(), "n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let client_final = c.server_first(SERVER_FIRST, &SaltCache::default()).unwrap();
        assert_eq!(client_final, CLIENT_FINAL);
        c.server_final(SERVER_FINAL).unwrap();
    }

    #[test]
    fn scram_rejects_a_wrong_server_signature() {
        let mut c = rfc_client();
        c.server_first(SERVER_FIRST, &SaltCache::default()).unwrap();
        let wrong = "v=7rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";
        assert_eq!(c.server_final(wrong), Err(ScramError::ServerSignature));
        assert_eq!(c.server_final("v=AAAA"), Err(ScramError::ServerSignature));
    }

    #[test]
    fn scram_rejects_a_server_nonce_that_does_not_extend_the_clients() {
        let mut c = rfc_client();
        let other = SERVER_FIRST.replace("rOprNG", "xOprNG");
        assert_eq!(
            c.server_first(&other, &SaltCache::default()),
            Err(ScramError::Nonce)
        );
        let same = format!("r={NONCE},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096");
        assert_eq!(
            c.server_first(&same, &SaltCache::default()),
            Err(ScramError::Nonce)
        );
    }

    #[test]
    fn scram_reports_a_server_error_in_the_final_message() {
        let c = rfc_client();
        assert_eq!(
            c.server_final("e=invalid-proof"),
            Err(ScramError::ServerError("invalid-proof".into()))
        );
    }

    #[test]
    fn scram_refuses_malformed_or_excessive_server_first_messages() {
        let salts = SaltCache::default();
        for bad in [
            "",
            "garbage",
            "r=rOprNGfwEbeRWgbNEkqOx,s=!!!,i=4096",
            "r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==",
            "r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=-1",
            "m=ext,r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
        ] {
            assert!(
                rfc_client().server_first(bad, &salts).is_err(),
                "accepted {bad:?}"
            );
        }
        assert_eq!(
            rfc_client().server_first(
                "r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=99999999999",
                &salts
            ),
            Err(ScramError::Iterations(99_999_999_999))
        );
    }

    #[test]
    fn scram_escapes_comma_and_equals_in_the_username() {
        let c = ScramClient::with_nonce(ScramHash::Sha512, "a,b=c", "p", "n0nce");
        assert_eq!(c.client_first(), "n,,n=a=2Cb=3Dc,r=n0nce");
    }

    #[test]
    fn scram_sha_512_proof_has_the_hash_length() {
        let mut c = ScramClient::with_nonce(ScramHash::Sha512, "user", "pencil", NONCE);
        let out = c.server_first(SERVER_FIRST, &SaltCache::default()).unwrap();
        let proof = out.rsplit_once(",p=").unwrap().1;
        assert_eq!(B64.decode(proof).unwrap().len(), 64);
    }

    #[test]
    fn scram_nonces_are_fresh() {
        let a = ScramClient::new(ScramHash::Sha256, "u", "p").client_first();
        let b = ScramClient::new(ScramHash::Sha256, "u", "p").client_first();
        assert_ne!(a, b);
        assert!(!a[3..].contains(",r=,"));
    }

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
