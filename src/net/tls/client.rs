//! The client side of TLS: towards the brokers of a cluster (its CA or the system roots, an
//! optional client certificate, the server name), and towards the gateway's own listener,
//! trusting exactly the certificate it serves.
//!
//! Owns: the rustls client configurations and the client handshake.
//! Must not touch: the served certificate and its reloads (the parent's server side), metrics.

use std::fmt;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::ResolvesClientCert;
use rustls::crypto::CryptoProvider;
use rustls::sign::CertifiedKey;
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, SignatureScheme};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::config::ClusterTlsConfig;
use crate::net::{ConnectError, Stream};

use super::{
    load_certified, load_roots, provider, read, system_roots, ServedCertificate, TlsSetupError,
};

/// TLS towards the brokers of one cluster (or towards the gateway's own mirror listener).
#[derive(Clone)]
pub(in crate::net) struct ClientTls {
    connector: TlsConnector,
    /// Fixed server name; `None`: the host of each address.
    server_name: Option<ServerName<'static>>,
}

impl fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientTls")
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

impl ClientTls {
    /// From a cluster's `tls` section: CA (or system roots), optional client certificate.
    pub(in crate::net) fn new(cfg: &ClusterTlsConfig) -> Result<Self, TlsSetupError> {
        let roots = match &cfg.ca {
            Some(p) => load_roots(p)?,
            None => system_roots()?,
        };
        let builder = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots);
        let config = match (&cfg.cert, &cfg.key) {
            (Some(c), Some(k)) => {
                let loaded = load_certified(c, &read("certificate", c)?, k, &read("key", k)?)?;
                builder.with_client_auth_cert(loaded.certified.cert.clone(), loaded.key_der)?
            }
            _ => builder.with_no_client_auth(),
        };
        let server_name = match &cfg.server_name {
            Some(n) => Some(ServerName::try_from(n.clone()).map_err(|_| {
                rustls::Error::General(format!("server_name `{n}` is not a DNS name or IP"))
            })?),
            None => None,
        };
        Ok(ClientTls {
            connector: TlsConnector::from(Arc::new(config)),
            server_name,
        })
    }

    /// Trusting exactly the certificate `served` serves now (or served just before the last
    /// reload), whatever the name; presenting it as client certificate when `client_auth`.
    pub(super) fn pinned(
        served: &Arc<ServedCertificate>,
        client_auth: bool,
    ) -> Result<Self, TlsSetupError> {
        let builder = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(PinnedVerifier {
                served: served.clone(),
                provider: provider(),
            }));
        let config = if client_auth {
            builder.with_client_cert_resolver(Arc::new(ServedAsClientCert(served.clone())))
        } else {
            builder.with_no_client_auth()
        };
        Ok(ClientTls {
            connector: TlsConnector::from(Arc::new(config)),
            server_name: None,
        })
    }

    /// The TLS handshake over `tcp` to `addr` (`host:port`).
    pub(in crate::net) async fn handshake(
        &self,
        addr: &str,
        tcp: TcpStream,
    ) -> Result<Stream, ConnectError> {
        let name = match &self.server_name {
            Some(n) => n.clone(),
            None => {
                let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
                let host = host
                    .strip_prefix('[')
                    .and_then(|h| h.strip_suffix(']'))
                    .unwrap_or(host);
                ServerName::try_from(host.to_string()).map_err(|_| ConnectError::ServerName {
                    addr: addr.to_string(),
                    host: host.to_string(),
                })?
            }
        };
        let shown = name.to_str().into_owned();
        let tls = self
            .connector
            .connect(name, tcp)
            .await
            .map_err(|source| ConnectError::Tls {
                addr: addr.to_string(),
                server_name: shown,
                source,
            })?;
        Ok(Stream::Tls(Box::new(tokio_rustls::TlsStream::Client(tls))))
    }
}

/// Accepts the leaf certificate a listener serves now or served before its last reload.
#[derive(Debug)]
struct PinnedVerifier {
    served: Arc<ServedCertificate>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for PinnedVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if self.served.is_pinned(end_entity.as_ref()) {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::ApplicationVerificationFailure,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The agent's client certificate on a mirror listener with `client_ca`: the listener's own.
#[derive(Debug)]
struct ServedAsClientCert(Arc<ServedCertificate>);

impl ResolvesClientCert for ServedAsClientCert {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(self.0.current())
    }
    fn has_certs(&self) -> bool {
        true
    }
}
