//! TLS on real clusters: the gateway towards the `secure` cluster's SSL listener, Java clients
//! over TLS to the gateway, certificate reload without restart, plaintext and certificate-less
//! clients on TLS listeners, a destination CA that does not match, and the built-in mirror
//! agent on a TLS mirror listener with a TLS source.
//!
//! The tests, by behaviour: `clients.rs`, `listener.rs`, `destination.rs`, `mirroring.rs`. This
//! file holds the secure cluster's details, the test PKI, gateway configs and raw TLS clients.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mirrorgate::config::{
    ClusterConfig, ClusterTlsConfig, Config, ListenerTlsConfig, MirrorConfig,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::gw::{admin_call, test_config, TestGateway};
use crate::harness;

mod clients;
mod destination;
mod forward;
mod listener;
mod mirroring;

const N: usize = 2_000;
/// Bound for a single TLS/Kafka exchange from a test.
const IO_TIMEOUT: Duration = Duration::from_secs(10);

// ------------------------------------------------------------------ the secure cluster

/// `rig secure-info` as a map (`ssl`, `ca`, ...), once the cluster is up.
fn secure_info() -> BTreeMap<String, String> {
    harness::cluster("secure");
    let out = harness::rig(&["secure-info"]);
    harness::expect_success("rig secure-info", &out);
    harness::parse_status(&out.stdout)
}

/// (SSL address, CA file) of the secure cluster.
fn secure_ssl() -> (String, PathBuf) {
    let info = secure_info();
    (
        info.get("ssl").expect("ssl= in secure-info").clone(),
        PathBuf::from(info.get("ca").expect("ca= in secure-info")),
    )
}

// ------------------------------------------------------------------ certificates

/// A test CA and the files of certificates it signs, in a temporary directory.
struct Pki {
    dir: tempfile::TempDir,
    ca_key: rcgen::KeyPair,
    ca: rcgen::Certificate,
}

impl Pki {
    fn new(name: &str) -> Pki {
        let ca_key = rcgen::KeyPair::generate().expect("key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, format!("{name} test CA"));
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = params.self_signed(&ca_key).expect("CA");
        let pki = Pki {
            dir: tempfile::tempdir().expect("tempdir"),
            ca_key,
            ca,
        };
        std::fs::write(pki.ca_path(), pki.ca.pem()).expect("write CA");
        pki
    }

    fn ca_path(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A leaf for 127.0.0.1/localhost with common name `cn` and `serial`: (cert PEM, key PEM).
    fn leaf(&self, cn: &str, serial: u64, client: bool) -> (String, String) {
        let usage = if client {
            rcgen::ExtendedKeyUsagePurpose::ClientAuth
        } else {
            rcgen::ExtendedKeyUsagePurpose::ServerAuth
        };
        self.leaf_with_usages(cn, serial, vec![usage])
    }

    /// A leaf for 127.0.0.1/localhost with these extended key usages: (cert PEM, key PEM).
    fn leaf_with_usages(
        &self,
        cn: &str,
        serial: u64,
        usages: Vec<rcgen::ExtendedKeyUsagePurpose>,
    ) -> (String, String) {
        let names = vec!["127.0.0.1".to_string(), "localhost".to_string()];
        self.leaf_with(cn, serial, names, usages)
    }

    /// A leaf for `names` (subject alternative names) with these extended key usages.
    fn leaf_with(
        &self,
        cn: &str,
        serial: u64,
        names: Vec<String>,
        usages: Vec<rcgen::ExtendedKeyUsagePurpose>,
    ) -> (String, String) {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params = rcgen::CertificateParams::new(names).expect("params");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        params.serial_number = Some(rcgen::SerialNumber::from(serial));
        params.extended_key_usages = usages;
        let cert = params
            .signed_by(&key, &self.ca, &self.ca_key)
            .expect("sign");
        (cert.pem(), key.serialize_pem())
    }

    /// Write a server leaf as `{name}.pem` / `{name}.key`: (cert path, key path).
    fn server_files(&self, name: &str, cn: &str, serial: u64) -> (PathBuf, PathBuf) {
        let (c, k) = self.leaf(cn, serial, false);
        self.write_pair(name, &c, &k)
    }

    /// Write a client leaf as `{name}.pem` / `{name}.key`: (cert path, key path).
    fn client_files(&self, name: &str, cn: &str, serial: u64) -> (PathBuf, PathBuf) {
        let (c, k) = self.leaf(cn, serial, true);
        self.write_pair(name, &c, &k)
    }

    fn write_pair(&self, name: &str, c: &str, k: &str) -> (PathBuf, PathBuf) {
        let (cp, kp) = (
            self.path(&format!("{name}.pem")),
            self.path(&format!("{name}.key")),
        );
        std::fs::write(&cp, c).expect("write cert");
        std::fs::write(&kp, k).expect("write key");
        (cp, kp)
    }
}

/// Replace a file's content atomically (write a sibling, rename over it).
fn replace_file(path: &Path, content: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, content).expect("write");
    std::fs::rename(&tmp, path).expect("rename");
}

// ------------------------------------------------------------------ gateways

fn listener_tls(cert: PathBuf, key: PathBuf, client_ca: Option<PathBuf>) -> ListenerTlsConfig {
    ListenerTlsConfig {
        cert,
        key,
        client_ca,
        reload_interval_ms: 200,
    }
}

/// A gateway config in front of the secure cluster's SSL listener, trusting `ca`.
fn config_to_ssl_broker(ca: &Path) -> Config {
    let (ssl, _) = secure_ssl();
    let mut cfg = test_config(&ssl);
    cfg.destination.tls = Some(ClusterTlsConfig {
        ca: Some(ca.to_path_buf()),
        ..ClusterTlsConfig::default()
    });
    cfg
}

/// A topic on the secure cluster (created over its PLAINTEXT listener).
fn secure_topic(prefix: &str, partitions: i32) -> String {
    let topic = harness::unique_topic(prefix);
    harness::create_topic(&harness::cluster("secure"), &topic, partitions, None);
    topic
}

// ------------------------------------------------------------------ raw TLS clients

fn tls_client_config(ca: &Path, client: Option<(&Path, &Path)>) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).expect("CA file") {
        roots.add(c.expect("CA cert")).expect("add CA");
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots);
    let config = match client {
        Some((cert, key)) => {
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
                .expect("cert file")
                .map(|c| c.expect("cert"))
                .collect();
            let key = PrivateKeyDer::from_pem_file(key).expect("key");
            builder
                .with_client_auth_cert(chain, key)
                .expect("client cert")
        }
        None => builder.with_no_client_auth(),
    };
    Arc::new(config)
}

type TlsConn = tokio_rustls::client::TlsStream<TcpStream>;

async fn tls_connect(addr: &str, config: Arc<rustls::ClientConfig>) -> std::io::Result<TlsConn> {
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from("127.0.0.1").expect("ip").to_owned();
    tokio::time::timeout(
        IO_TIMEOUT,
        tokio_rustls::TlsConnector::from(config).connect(name, tcp),
    )
    .await
    .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "TLS handshake"))?
}

/// Common name of the certificate the server presented.
fn peer_cn(conn: &TlsConn) -> String {
    let certs = conn
        .get_ref()
        .1
        .peer_certificates()
        .expect("peer certificate");
    let (_, c) = x509_parser::parse_x509_certificate(certs[0].as_ref()).expect("x509");
    let cn = c
        .subject()
        .iter_common_name()
        .next()
        .and_then(|a| a.as_str().ok())
        .expect("CN")
        .to_string();
    cn
}

/// An ApiVersions v0 request frame with `correlation_id`.
fn api_versions_request(correlation_id: i32) -> Vec<u8> {
    let client_id = b"tls-test";
    let mut body = Vec::new();
    body.extend_from_slice(&18i16.to_be_bytes()); // ApiVersions
    body.extend_from_slice(&0i16.to_be_bytes()); // v0
    body.extend_from_slice(&correlation_id.to_be_bytes());
    body.extend_from_slice(&(client_id.len() as i16).to_be_bytes());
    body.extend_from_slice(client_id);
    let mut frame = (body.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    frame
}

/// Send ApiVersions over `s` and check the response: its correlation id and error code 0.
async fn api_versions<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    s: &mut S,
    correlation_id: i32,
) -> std::io::Result<()> {
    let exchange = async {
        s.write_all(&api_versions_request(correlation_id)).await?;
        s.flush().await?;
        let mut len = [0u8; 4];
        s.read_exact(&mut len).await?;
        let mut resp = vec![0u8; i32::from_be_bytes(len).max(0) as usize];
        s.read_exact(&mut resp).await?;
        Ok::<_, std::io::Error>(resp)
    };
    let resp = tokio::time::timeout(IO_TIMEOUT, exchange)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "ApiVersions"))??;
    assert!(resp.len() >= 6, "short ApiVersions response {resp:?}");
    assert_eq!(
        i32::from_be_bytes(resp[0..4].try_into().unwrap()),
        correlation_id
    );
    assert_eq!(
        i16::from_be_bytes(resp[4..6].try_into().unwrap()),
        0,
        "error code"
    );
    Ok(())
}

/// Until `deadline`, read from `s`: `true` when the peer closed (EOF or error), `false` if it
/// is still open at the deadline. Bytes that arrive (e.g. a TLS alert) are discarded.
async fn closed_by_peer<S: tokio::io::AsyncRead + Unpin>(s: &mut S, within: Duration) -> bool {
    let mut buf = [0u8; 1024];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}

// ------------------------------------------------------------------ Java clients

/// (partition, offset) → value.
type Records = BTreeMap<(i32, i64), String>;

/// Run VerifiableProducer (n records) and VerifiableConsumer through `bootstrap` with client
/// `props`; returns what was acknowledged and what was consumed, (partition, offset) → value.
fn java_round_trip(bootstrap: &str, topic: &str, props: &str) -> (Records, Records) {
    let dir = tempfile::tempdir().expect("tempdir");
    let producer_props = idempotent_producer_props(dir.path(), props);
    let consumer_props = dir.path().join("consumer.properties");
    std::fs::write(&consumer_props, props).expect("write props");
    let (acked, out) = harness::verifiable_produce(bootstrap, topic, N, &producer_props);
    harness::expect_success("VerifiableProducer", &out);
    for e in harness::json_lines(&out.stdout) {
        assert_ne!(e["name"], "producer_send_error", "send error: {e}");
    }
    let consumed = harness::verifiable_consume(bootstrap, topic, N, &consumer_props);
    (acked, consumed)
}

/// An idempotent producer's properties (acks=all, retried for ever) with client `props`, in a
/// file of `dir`.
fn idempotent_producer_props(dir: &Path, props: &str) -> PathBuf {
    let path = dir.join("producer.properties");
    std::fs::write(
        &path,
        format!("{props}enable.idempotence=true\nacks=all\nretries=2147483647\nlinger.ms=5\n"),
    )
    .expect("write props");
    path
}

/// The round trip is exact: N distinct values acknowledged, and the consumer read each
/// acknowledged record, at its partition and offset, with its value, and nothing else.
fn assert_exact_round_trip(acked: &Records, consumed: &Records) {
    assert_eq!(acked.len(), N, "acknowledged records");
    let distinct: std::collections::BTreeSet<&String> = acked.values().collect();
    assert_eq!(distinct.len(), N, "acknowledged values are distinct");
    assert!(
        consumed == acked,
        "consumed records differ from the acknowledged ones: {} missing, {} unexpected, {} with \
         another value",
        acked.keys().filter(|k| !consumed.contains_key(k)).count(),
        consumed.keys().filter(|k| !acked.contains_key(k)).count(),
        acked
            .iter()
            .filter(|(k, v)| consumed.get(k).is_some_and(|c| c != *v))
            .count()
    );
}
