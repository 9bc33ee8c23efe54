//! TLS with rustls (ring provider, installed explicitly; no process-wide default is used).
//!
//! Owns: building rustls client and server configurations from the `tls` sections of the
//! configuration (reading the PEM files), the served certificate of a listener and its reload
//! when the files change, the TLS handshakes (bounded), and the pinned trust of the built-in
//! mirror agent in its own mirror listener.
//! The client side (towards brokers, and the pinned trust) is the child module `client`.
//! Must not touch: metrics (reload outcomes are reported to a callback the caller provides),
//! Kafka framing, gateway state.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use crate::config::ListenerTlsConfig;

use super::{AcceptError, Stream};

mod client;

pub(super) use client::ClientTls;

/// Bound on a client's TLS handshake on a gateway listener.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The crypto provider of every TLS configuration of the gateway: ring.
fn provider() -> Arc<CryptoProvider> {
    static P: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    P.get_or_init(|| Arc::new(rustls::crypto::ring::default_provider()))
        .clone()
}

/// Why a TLS configuration could not be built from its files. Each variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    #[error("cannot read the {what} file {}: {source}", path.display())]
    Read {
        what: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("the {what} file {} holds no PEM certificate (`-----BEGIN CERTIFICATE-----`)", path.display())]
    NoCertificate { what: &'static str, path: PathBuf },
    #[error("the {what} file {} is not valid PEM: {reason}", path.display())]
    BadPem {
        what: &'static str,
        path: PathBuf,
        reason: String,
    },
    #[error("the key file {} holds no private key (PEM `PRIVATE KEY`, `RSA PRIVATE KEY` or `EC PRIVATE KEY`)", path.display())]
    NoKey { path: PathBuf },
    #[error("the key in {} cannot be used: {reason}", path.display())]
    BadKey { path: PathBuf, reason: String },
    #[error("the certificate in {} does not match the private key in {}", cert.display(), key.display())]
    KeyMismatch { cert: PathBuf, key: PathBuf },
    #[error("the first certificate in {} cannot be parsed: {reason}", path.display())]
    BadCertificate { path: PathBuf, reason: String },
    #[error("the CA file {} cannot be used: {reason}", path.display())]
    BadCa { path: PathBuf, reason: String },
    #[error("no CA file is configured and the system trust store has no usable certificate ({reason}); set `ca`")]
    NoSystemRoots { reason: String },
    #[error("TLS settings rejected: {0}")]
    Rustls(#[from] rustls::Error),
}

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsSetupError> {
    std::fs::read(path).map_err(|source| TlsSetupError::Read {
        what,
        path: path.to_path_buf(),
        source,
    })
}

fn parse_certs(
    what: &'static str,
    path: &Path,
    pem: &[u8],
) -> Result<Vec<CertificateDer<'static>>, TlsSetupError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsSetupError::BadPem {
            what,
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsSetupError::NoCertificate {
            what,
            path: path.to_path_buf(),
        });
    }
    Ok(certs)
}

fn parse_key(path: &Path, pem: &[u8]) -> Result<PrivateKeyDer<'static>, TlsSetupError> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| match e {
        rustls_pki_types::pem::Error::NoItemsFound => TlsSetupError::NoKey {
            path: path.to_path_buf(),
        },
        other => TlsSetupError::BadPem {
            what: "key",
            path: path.to_path_buf(),
            reason: other.to_string(),
        },
    })
}

/// A certificate chain with its key, checked to belong together, as read from two files.
struct LoadedKey {
    certified: Arc<CertifiedKey>,
    key_der: PrivateKeyDer<'static>,
    not_after: Option<i64>,
}

fn load_certified(
    cert_path: &Path,
    cert_pem: &[u8],
    key_path: &Path,
    key_pem: &[u8],
) -> Result<LoadedKey, TlsSetupError> {
    let chain = parse_certs("certificate", cert_path, cert_pem)?;
    let key_der = parse_key(key_path, key_pem)?;
    let signing = provider()
        .key_provider
        .load_private_key(key_der.clone_key())
        .map_err(|e| TlsSetupError::BadKey {
            path: key_path.to_path_buf(),
            reason: e.to_string(),
        })?;
    let not_after = x509_parser::parse_x509_certificate(chain[0].as_ref())
        .ok()
        .map(|(_, c)| c.validity().not_after.timestamp());
    let certified = CertifiedKey::new(chain, signing);
    match certified.keys_match() {
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {}
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
            return Err(TlsSetupError::KeyMismatch {
                cert: cert_path.to_path_buf(),
                key: key_path.to_path_buf(),
            })
        }
        Err(e) => {
            return Err(TlsSetupError::BadCertificate {
                path: cert_path.to_path_buf(),
                reason: e.to_string(),
            })
        }
    }
    Ok(LoadedKey {
        certified: Arc::new(certified),
        key_der,
        not_after,
    })
}

fn load_roots(path: &Path) -> Result<RootCertStore, TlsSetupError> {
    let pem = read("CA", path)?;
    let certs = parse_certs("CA", path, &pem)?;
    let mut roots = RootCertStore::empty();
    for (i, c) in certs.into_iter().enumerate() {
        roots.add(c).map_err(|e| TlsSetupError::BadCa {
            path: path.to_path_buf(),
            reason: format!("certificate #{}: {e}", i + 1),
        })?;
    }
    Ok(roots)
}

fn system_roots() -> Result<RootCertStore, TlsSetupError> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        let reason = if found.errors.is_empty() {
            "none found".to_string()
        } else {
            found
                .errors
                .iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join("; ")
        };
        return Err(TlsSetupError::NoSystemRoots { reason });
    }
    Ok(roots)
}

// ------------------------------------------------------------------ server side

/// What a successful reload put in service.
#[derive(Debug, Clone)]
pub struct Reloaded {
    /// Expiry of the new leaf certificate, unix seconds (when it could be read).
    pub not_after: Option<i64>,
}

struct ServedState {
    current: Arc<CertifiedKey>,
    /// The leaf served before the last reload (pinned connections may still present it).
    previous_leaf: Option<CertificateDer<'static>>,
    not_after: Option<i64>,
    /// File contents last looked at (loaded or rejected), to notice the next change.
    seen: (Vec<u8>, Vec<u8>),
}

/// The certificate a listener serves, swapped in place when its files change; the rustls
/// server configuration resolves every handshake through it.
pub struct ServedCertificate {
    cert_path: PathBuf,
    key_path: PathBuf,
    reload_interval: Duration,
    state: RwLock<ServedState>,
    /// Serialises reloads (the state lock is only held to swap).
    reloading: Mutex<()>,
}

impl fmt::Debug for ServedCertificate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServedCertificate")
            .field("cert", &self.cert_path)
            .field("key", &self.key_path)
            .finish_non_exhaustive()
    }
}

impl ServedCertificate {
    fn load(cfg: &ListenerTlsConfig) -> Result<Self, TlsSetupError> {
        let cert_pem = read("certificate", &cfg.cert)?;
        let key_pem = read("key", &cfg.key)?;
        let loaded = load_certified(&cfg.cert, &cert_pem, &cfg.key, &key_pem)?;
        Ok(ServedCertificate {
            cert_path: cfg.cert.clone(),
            key_path: cfg.key.clone(),
            reload_interval: Duration::from_millis(cfg.reload_interval_ms),
            state: RwLock::new(ServedState {
                current: loaded.certified,
                previous_leaf: None,
                not_after: loaded.not_after,
                seen: (cert_pem, key_pem),
            }),
            reloading: Mutex::new(()),
        })
    }

    fn read_state(&self) -> std::sync::RwLockReadGuard<'_, ServedState> {
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The certificate chain and key in service.
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.read_state().current.clone()
    }

    /// Expiry of the leaf in service, unix seconds (when it could be read).
    pub fn not_after(&self) -> Option<i64> {
        self.read_state().not_after
    }

    /// How often the files are checked.
    pub fn reload_interval(&self) -> Duration {
        self.reload_interval
    }

    fn is_pinned(&self, leaf: &[u8]) -> bool {
        let s = self.read_state();
        s.current.cert.first().is_some_and(|c| c.as_ref() == leaf)
            || s.previous_leaf.as_ref().is_some_and(|c| c.as_ref() == leaf)
    }

    /// Re-read the files: `None` when they are unchanged since the last look, otherwise the
    /// outcome. A pair that fails to load is rejected and the certificate in service stays.
    pub fn check_files(&self) -> Option<Result<Reloaded, TlsSetupError>> {
        let _one = self.reloading.lock().unwrap_or_else(|e| e.into_inner());
        let cert_pem = match read("certificate", &self.cert_path) {
            Ok(b) => b,
            Err(e) => return self.note_failure(e, None),
        };
        let key_pem = match read("key", &self.key_path) {
            Ok(b) => b,
            Err(e) => return self.note_failure(e, None),
        };
        {
            let s = self.read_state();
            if s.seen.0 == cert_pem && s.seen.1 == key_pem {
                return None;
            }
        }
        match load_certified(&self.cert_path, &cert_pem, &self.key_path, &key_pem) {
            Ok(loaded) => {
                let mut s = self.state.write().unwrap_or_else(|e| e.into_inner());
                s.previous_leaf = s.current.cert.first().cloned();
                s.current = loaded.certified;
                s.not_after = loaded.not_after;
                s.seen = (cert_pem, key_pem);
                Some(Ok(Reloaded {
                    not_after: loaded.not_after,
                }))
            }
            Err(e) => self.note_failure(e, Some((cert_pem, key_pem))),
        }
    }

    /// Remember what was rejected so that it is reported once, not on every check. An
    /// unreadable file is reported once until it becomes readable again.
    fn note_failure(
        &self,
        e: TlsSetupError,
        seen: Option<(Vec<u8>, Vec<u8>)>,
    ) -> Option<Result<Reloaded, TlsSetupError>> {
        let mut s = self.state.write().unwrap_or_else(|e| e.into_inner());
        let seen = seen.unwrap_or_default();
        if s.seen == seen {
            return None;
        }
        s.seen = seen;
        Some(Err(e))
    }

    /// Check the files every `reload_interval` until `shutdown`; `report` gets each change.
    pub async fn watch_files<F>(self: Arc<Self>, mut shutdown: watch::Receiver<bool>, mut report: F)
    where
        F: FnMut(&Result<Reloaded, TlsSetupError>) + Send,
    {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(self.reload_interval) => {}
                _ = shutdown.changed() => return,
            }
            let me = self.clone();
            let outcome = match tokio::task::spawn_blocking(move || me.check_files()).await {
                Ok(o) => o,
                Err(e) => {
                    tracing::error!(error = %e, "certificate reload check failed");
                    continue;
                }
            };
            let Some(outcome) = outcome else { continue };
            match &outcome {
                Ok(r) => tracing::info!(
                    cert = %self.cert_path.display(),
                    not_after = ?r.not_after,
                    "TLS certificate reloaded; new connections get the new certificate"
                ),
                Err(e) => tracing::error!(
                    cert = %self.cert_path.display(),
                    error = %e,
                    "TLS certificate files changed but cannot be used; the previous certificate stays in service"
                ),
            }
            report(&outcome);
        }
    }
}

impl ResolvesServerCert for ServedCertificate {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// TLS on one listener.
#[derive(Clone)]
pub(super) struct ServerTls {
    acceptor: TlsAcceptor,
    served: Arc<ServedCertificate>,
    client_auth: bool,
    pub(super) handshake_timeout: Duration,
}

impl fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerTls")
            .field("served", &self.served)
            .field("client_auth", &self.client_auth)
            .finish_non_exhaustive()
    }
}

impl ServerTls {
    pub(super) fn new(cfg: &ListenerTlsConfig) -> Result<Self, TlsSetupError> {
        let served = Arc::new(ServedCertificate::load(cfg)?);
        let builder = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?;
        let builder = match &cfg.client_ca {
            Some(p) => {
                let roots = load_roots(p)?;
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
                        .build()
                        .map_err(|e| TlsSetupError::BadCa {
                            path: p.clone(),
                            reason: e.to_string(),
                        })?;
                builder.with_client_cert_verifier(verifier)
            }
            None => builder.with_no_client_auth(),
        };
        let config = builder.with_cert_resolver(served.clone());
        Ok(ServerTls {
            acceptor: TlsAcceptor::from(Arc::new(config)),
            served,
            client_auth: cfg.client_ca.is_some(),
            handshake_timeout: HANDSHAKE_TIMEOUT,
        })
    }

    pub(super) fn served(&self) -> &Arc<ServedCertificate> {
        &self.served
    }

    /// A client of this listener that trusts exactly the certificate it serves.
    pub(super) fn pinned_client(&self) -> Result<ClientTls, TlsSetupError> {
        ClientTls::pinned(&self.served, self.client_auth)
    }

    /// The server handshake, bounded by `handshake_timeout`.
    pub(super) async fn accept(&self, tcp: TcpStream) -> Result<Stream, AcceptError> {
        match tokio::time::timeout(self.handshake_timeout, self.acceptor.accept(tcp)).await {
            Err(_) => Err(AcceptError::TlsHandshakeTimeout(self.handshake_timeout)),
            Ok(Err(e)) => Err(AcceptError::TlsHandshake(e)),
            Ok(Ok(s)) => Ok(Stream::Tls(Box::new(tokio_rustls::TlsStream::Server(s)))),
        }
    }
}

#[cfg(test)]
#[path = "tls_tests.rs"]
mod tests;
