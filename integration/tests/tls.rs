//! TLS on real clusters: the gateway towards the `secure` cluster's SSL listener, Java clients
//! over TLS to the gateway, certificate reload without restart, plaintext and certificate-less
//! clients on TLS listeners, a destination CA that does not match, and the built-in mirror
//! agent on a TLS mirror listener with a TLS source.

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
    let producer_props = dir.path().join("producer.properties");
    std::fs::write(
        &producer_props,
        format!("{props}enable.idempotence=true\nacks=all\nretries=2147483647\nlinger.ms=5\n"),
    )
    .expect("write props");
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

// ------------------------------------------------------------------ tests

#[test]
fn java_clients_through_the_gateway_to_an_ssl_broker() {
    let (_, ca) = secure_ssl();
    let gw = TestGateway::start(config_to_ssl_broker(&ca));
    let topic = secure_topic("tls-upstream", 2);
    let (acked, consumed) = java_round_trip(&gw.bootstrap(), &topic, "");
    assert_exact_round_trip(&acked, &consumed);
    assert!(gw.metric(r#"mirrorgate_upstream_connections_total{node="1"}"#) >= 1.0);
}

#[test]
fn java_clients_over_tls_to_the_gateway_and_on_to_an_ssl_broker() {
    let (_, broker_ca) = secure_ssl();
    let pki = Pki::new("gateway");
    let (cert, key) = pki.server_files("gw", "gateway", 1);
    let mut cfg = config_to_ssl_broker(&broker_ca);
    cfg.listeners.client.tls = Some(listener_tls(cert, key, None));
    let gw = TestGateway::start(cfg);
    let topic = secure_topic("tls-both", 2);
    let props = format!(
        "security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location={}\n",
        pki.ca_path().display()
    );
    let (acked, consumed) = java_round_trip(&gw.bootstrap(), &topic, &props);
    assert_exact_round_trip(&acked, &consumed);
    assert_eq!(
        gw.metric(r#"mirrorgate_request_errors_total{kind="tls_handshake",listener="client"}"#),
        0.0
    );
}

#[test]
fn a_replaced_certificate_is_served_to_new_connections_while_open_ones_keep_working() {
    let pki = Pki::new("reload");
    let (cert, key) = pki.server_files("gw", "cert-a", 1);
    let mut cfg = test_config(&harness::cluster("destination"));
    cfg.listeners.client.tls = Some(listener_tls(cert.clone(), key.clone(), None));
    let gw = TestGateway::start(cfg);
    let addr = gw.bootstrap();
    let client = tls_client_config(&pki.ca_path(), None);
    let ok = r#"mirrorgate_tls_reloads_total{listener="client",result="ok"}"#;
    let error = r#"mirrorgate_tls_reloads_total{listener="client",result="error"}"#;
    let expiry_a = gw.metric(r#"mirrorgate_tls_certificate_not_after_seconds{listener="client"}"#);
    assert!(expiry_a > 1.0e9, "expiry gauge: {expiry_a}");

    gw.block_on(async {
        let mut old = tls_connect(&addr, client.clone()).await.expect("connect A");
        assert_eq!(peer_cn(&old), "cert-a");
        api_versions(&mut old, 1)
            .await
            .expect("ApiVersions before the swap");

        let (b_cert, b_key) = pki.leaf("cert-b", 2, false);
        replace_file(&key, &b_key);
        replace_file(&cert, &b_cert);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let mut new = tls_connect(&addr, client.clone()).await.expect("connect");
            if peer_cn(&new) == "cert-b" {
                api_versions(&mut new, 2).await.expect("ApiVersions on B");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "certificate B not served after 10 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        api_versions(&mut old, 3)
            .await
            .expect("the connection opened before the swap still works");
    });
    assert!(gw.metric(ok) >= 1.0, "reload counted ok:\n{}", gw.metrics());

    let errors_before = gw.metric(error);
    replace_file(&cert, "this is not a certificate\n");
    let deadline = Instant::now() + Duration::from_secs(10);
    while gw.metric(error) <= errors_before {
        assert!(
            Instant::now() < deadline,
            "garbage certificate not reported as a reload error"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    gw.block_on(async {
        let mut conn = tls_connect(&addr, client.clone())
            .await
            .expect("connect after garbage");
        assert_eq!(
            peer_cn(&conn),
            "cert-b",
            "the previous certificate stays in service"
        );
        api_versions(&mut conn, 4)
            .await
            .expect("ApiVersions after garbage");
    });
}

#[test]
fn a_plaintext_client_on_a_tls_listener_is_closed_and_tls_clients_are_still_served() {
    let pki = Pki::new("plain");
    let (cert, key) = pki.server_files("gw", "gateway", 1);
    let mut cfg = test_config(&harness::cluster("destination"));
    cfg.listeners.client.tls = Some(listener_tls(cert, key, None));
    let gw = TestGateway::start(cfg);
    let addr = gw.bootstrap();
    gw.block_on(async {
        let mut plain = TcpStream::connect(&addr).await.expect("tcp");
        plain
            .write_all(&api_versions_request(1))
            .await
            .expect("write");
        assert!(
            closed_by_peer(&mut plain, IO_TIMEOUT).await,
            "the gateway left a plaintext client open on a TLS listener"
        );
        let mut tls = tls_connect(&addr, tls_client_config(&pki.ca_path(), None))
            .await
            .expect("TLS connect");
        api_versions(&mut tls, 2).await.expect("TLS client served");
    });
    assert!(
        gw.metric(r#"mirrorgate_request_errors_total{kind="tls_handshake",listener="client"}"#)
            >= 1.0,
        "{}",
        gw.metrics()
    );
}

#[test]
fn a_destination_whose_certificate_does_not_chain_to_the_configured_ca_is_refused() {
    let (ssl, _) = secure_ssl();
    let other = Pki::new("unrelated");
    let connector = mirrorgate::net::Transport::for_cluster(&ClusterConfig {
        bootstrap: vec![ssl.clone()],
        connect_timeout_ms: 5000,
        metadata_refresh_ms: 1000,
        tls: Some(ClusterTlsConfig {
            ca: Some(other.ca_path()),
            ..ClusterTlsConfig::default()
        }),
        sasl: None,
    })
    .expect("connector");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    let err = rt
        .block_on(connector.connect(&ssl, Duration::from_secs(5)))
        .err()
        .expect("the handshake must fail");
    assert!(
        matches!(err, mirrorgate::net::ConnectError::Tls { .. }),
        "{err:?}"
    );
    assert_eq!(err.kind(), "upstream_tls");
    let text = err.to_string();
    assert!(
        text.contains("UnknownIssuer") || text.contains("issuer"),
        "{text}"
    );

    // A gateway configured so never learns the destination's metadata and never gets ready.
    let cfg = config_to_ssl_broker(&other.ca_path());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("rt");
    rt.block_on(async {
        let gw = mirrorgate::app::Gateway::start(cfg).await.expect("starts");
        let not_ready = gw
            .wait_ready(Duration::from_secs(4))
            .await
            .expect_err("must not become ready");
        assert!(!not_ready.metadata_known, "{not_ready:?}");
        let text = gw.metrics.render();
        assert!(
            text.lines().any(|l| l
                .starts_with(r#"mirrorgate_metadata_refresh_total{result="error"}"#)
                && !l.ends_with(" 0")),
            "{text}"
        );
        gw.shutdown().await;
    });
}

#[test]
fn mutual_tls_refuses_a_client_without_a_certificate_and_serves_one_with() {
    let pki = Pki::new("mtls");
    let (cert, key) = pki.server_files("gw", "gateway", 1);
    let (ccert, ckey) = pki.leaf("client", 7, true);
    let (client_cert, client_key) = (pki.path("client.pem"), pki.path("client.key"));
    std::fs::write(&client_cert, ccert).expect("write");
    std::fs::write(&client_key, ckey).expect("write");
    let mut cfg = test_config(&harness::cluster("destination"));
    cfg.listeners.client.tls = Some(listener_tls(cert, key, Some(pki.ca_path())));
    let gw = TestGateway::start(cfg);
    let addr = gw.bootstrap();
    gw.block_on(async {
        // TLS 1.3: the client's side of the handshake may complete before the server checks
        // the (missing) certificate; the refusal shows on the first exchange.
        let refused = match tls_connect(&addr, tls_client_config(&pki.ca_path(), None)).await {
            Err(_) => true,
            Ok(mut s) => api_versions(&mut s, 1).await.is_err(),
        };
        assert!(refused, "a client without a certificate was served");
        let mut s = tls_connect(
            &addr,
            tls_client_config(&pki.ca_path(), Some((&client_cert, &client_key))),
        )
        .await
        .expect("client with a certificate connects");
        api_versions(&mut s, 2)
            .await
            .expect("client with a certificate is served");
    });
    assert!(
        gw.metric(r#"mirrorgate_request_errors_total{kind="tls_handshake",listener="client"}"#)
            >= 1.0
    );
}

#[test]
fn the_agent_mirrors_from_a_tls_source_through_a_tls_mirror_listener() {
    let (ssl, broker_ca) = secure_ssl();
    let pki = Pki::new("mirror-listener");
    let (cert, key) = pki.server_files("mirror", "mirror-listener", 1);
    let topic = secure_topic("tls-agent", 2);
    let acks = harness::produce_keyed(&harness::cluster("secure"), &topic, N, &[]);
    assert_eq!(acks.len(), N);

    let mut cfg = test_config(&harness::cluster("destination"));
    if let Some(m) = cfg.listeners.mirror.as_mut() {
        m.tls = Some(listener_tls(cert, key, None));
    }
    cfg.mirrors = vec![MirrorConfig {
        name: "tls".into(),
        topics: vec![topic.clone()],
        source: Some(ClusterConfig {
            bootstrap: vec![ssl],
            connect_timeout_ms: 5000,
            metadata_refresh_ms: 30_000,
            tls: Some(ClusterTlsConfig {
                ca: Some(broker_ca),
                ..ClusterTlsConfig::default()
            }),
            sasl: None,
        }),
    }];
    cfg.psm.snapshot_interval_ms = 200;
    let gw = TestGateway::start(cfg);

    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let (status, body) = admin_call(
            &gw.admin(),
            hyper::Method::GET,
            "/v1/mirrors/tls/partitions",
            None,
        );
        assert_eq!(status, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).expect("json");
        let parts = v["partitions"].as_array().cloned().unwrap_or_default();
        if parts.len() == 2
            && parts
                .iter()
                .all(|p| p["state"] == "MIRRORING" && p["lag_records"] == 0)
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "agent did not catch up: {parts:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let consumed = harness::consume_group(
        &harness::cluster("destination"),
        &topic,
        &format!("{topic}-check"),
        N,
        Duration::from_secs(60),
        &[],
    );
    harness::assert_same_per_partition(&acks, &consumed);
    assert!(
        gw.metric(r#"mirrorgate_agent_batches_total{mirror="tls"}"#) >= 1.0,
        "the agent appended nothing"
    );
    assert_eq!(
        gw.metric(r#"mirrorgate_request_errors_total{kind="tls_handshake",listener="mirror"}"#),
        0.0,
        "the agent's TLS connections to the mirror listener failed"
    );
}

#[test]
fn mutual_tls_refuses_a_client_certificate_issued_by_another_ca() {
    let pki = Pki::new("mtls");
    let foreign = Pki::new("foreign");
    let (cert, key) = pki.server_files("gw", "gateway", 1);
    // Same name, same usage, another issuer: only the chain tells them apart.
    let (foreign_cert, foreign_key) = foreign.client_files("client", "client", 7);
    let (client_cert, client_key) = pki.client_files("client", "client", 7);
    let mut cfg = test_config(&harness::cluster("destination"));
    cfg.listeners.client.tls = Some(listener_tls(cert, key, Some(pki.ca_path())));
    let gw = TestGateway::start(cfg);
    let addr = gw.bootstrap();
    gw.block_on(async {
        // The client trusts the gateway; the gateway must not trust the client's issuer. With
        // TLS 1.3 the refusal may show only on the first exchange.
        let foreign_client = tls_client_config(&pki.ca_path(), Some((&foreign_cert, &foreign_key)));
        let refused = match tls_connect(&addr, foreign_client).await {
            Err(_) => true,
            Ok(mut s) => api_versions(&mut s, 1).await.is_err(),
        };
        assert!(
            refused,
            "a client certificate not issued by client_ca was served"
        );
        let mut s = tls_connect(
            &addr,
            tls_client_config(&pki.ca_path(), Some((&client_cert, &client_key))),
        )
        .await
        .expect("a client certificate from client_ca connects");
        api_versions(&mut s, 2)
            .await
            .expect("a client certificate from client_ca is served");
    });
    assert!(
        gw.metric(r#"mirrorgate_request_errors_total{kind="tls_handshake",listener="client"}"#)
            >= 1.0,
        "{}",
        gw.metrics()
    );
}

// ------------------------------------------------------------------ the agent on a TLS mirror listener

/// Write `n` records without a producer id to `partition` of `topic` at `cluster` (values
/// `{tag}-{i}`).
fn write_source(cluster: &str, topic: &str, partition: i32, n: i32, tag: &str) {
    let leader = harness::leader_addr(cluster, topic, partition);
    let mut conn = crate::psm_differential::RawConn::connect(&leader);
    let (code, _) = conn.produce(
        topic,
        partition,
        crate::psm_differential::batch(-1, -1, -1, n, tag),
    );
    assert_eq!(code, 0, "produce to the source");
}

/// Values of the data records of `partition` of `topic` at the destination.
fn destination_values(topic: &str, partition: i32) -> Vec<Option<String>> {
    crate::failover::read_log(&harness::cluster("destination"), topic, partition)
        .records
        .into_iter()
        .filter(|r| !r.control)
        .map(|r| r.value)
        .collect()
}

/// Wait (bounded) until the destination's `partition` holds exactly the source's records.
fn wait_mirrored(gw: &TestGateway, topic: &str, partition: i32, what: &str) {
    let source = harness::cluster("source");
    let want: Vec<Option<String>> = crate::failover::read_log(&source, topic, partition)
        .records
        .into_iter()
        .map(|r| r.value)
        .collect();
    assert!(!want.is_empty(), "nothing at the source to mirror");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got = destination_values(topic, partition);
        if got == want {
            return;
        }
        assert!(
            got.len() <= want.len() && got[..] == want[..got.len()],
            "partition {partition}: the destination holds {got:?}, the source {want:?}"
        );
        assert!(
            Instant::now() < deadline,
            "{what}: partition {partition} has {} of {} records after 60 s; mirror listener \
             handshake errors: {}",
            got.len(),
            want.len(),
            gw.metric(r#"mirrorgate_request_errors_total{kind="tls_handshake",listener="mirror"}"#)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A gateway whose built-in agent mirrors `topic` (2 partitions, both led by destination
/// broker 1) from the plaintext `source` cluster through a mirror listener with `tls`.
fn agent_gateway(topic: &str, tls: ListenerTlsConfig) -> TestGateway {
    let source = harness::cluster("source");
    harness::create_topic(&source, topic, 2, None);
    harness::create_topic(&harness::cluster("destination"), topic, 2, Some(&[1, 1]));
    let mut cfg = test_config(&harness::cluster("destination"));
    cfg.listeners
        .mirror
        .as_mut()
        .expect("test_config has a mirror listener")
        .tls = Some(tls);
    cfg.mirrors = vec![MirrorConfig {
        name: "tls".into(),
        topics: vec![topic.to_string()],
        source: Some(ClusterConfig {
            bootstrap: vec![source],
            connect_timeout_ms: 5000,
            metadata_refresh_ms: 30_000,
            tls: None,
            sasl: None,
        }),
    }];
    TestGateway::start(cfg)
}

/// README (TLS): "If the mirror listener has `client_ca`, the agent presents the listener's own
/// certificate as its client certificate".
#[test]
fn the_agent_presents_the_listener_certificate_to_a_mirror_listener_with_client_ca() {
    let pki = Pki::new("mirror-mtls");
    let (c, k) = pki.leaf_with_usages(
        "mirror-listener",
        1,
        vec![
            rcgen::ExtendedKeyUsagePurpose::ServerAuth,
            rcgen::ExtendedKeyUsagePurpose::ClientAuth,
        ],
    );
    let (cert, key) = pki.write_pair("mirror", &c, &k);
    let topic = harness::unique_topic("tls-agent-mtls");
    let gw = agent_gateway(&topic, listener_tls(cert, key, Some(pki.ca_path())));
    // The listener really demands a certificate: a client without one is refused.
    gw.block_on(async {
        let refused = match tls_connect(
            &gw.mirror_bootstrap(),
            tls_client_config(&pki.ca_path(), None),
        )
        .await
        {
            Err(_) => true,
            Ok(mut s) => api_versions(&mut s, 1).await.is_err(),
        };
        assert!(
            refused,
            "the mirror listener served a client without a certificate"
        );
    });
    let refusals_before =
        gw.metric(r#"mirrorgate_request_errors_total{kind="tls_handshake",listener="mirror"}"#);
    write_source(&harness::cluster("source"), &topic, 0, 20, "mtls");
    wait_mirrored(&gw, &topic, 0, "the agent on a client_ca mirror listener");
    assert_eq!(
        gw.metric(r#"mirrorgate_request_errors_total{kind="tls_handshake",listener="mirror"}"#),
        refusals_before,
        "the agent's handshakes with the mirror listener failed"
    );
}

/// README (TLS): the agent "trusts exactly the leaf certificate the listener serves (pinned
/// in-process, following reloads ...)". The listener's certificate is replaced before the agent
/// has anything to append, so the agent's first connection to it (a full handshake: nothing to
/// resume) meets the new leaf. (A connection opened after an earlier one resumes that TLS
/// session and checks no certificate, so it would not exercise the pin.)
#[test]
fn the_agents_pin_follows_a_reload_of_the_mirror_listener_certificate() {
    let pki = Pki::new("mirror-reload");
    let (cert, key) = pki.server_files("mirror", "cert-a", 1);
    let topic = harness::unique_topic("tls-agent-reload");
    let gw = agent_gateway(&topic, listener_tls(cert.clone(), key.clone(), None));
    crate::failover::wait_mirroring(&gw.admin(), "tls", 2);

    let (b_cert, b_key) = pki.leaf("cert-b", 2, false);
    replace_file(&key, &b_key);
    replace_file(&cert, &b_cert);
    let client = tls_client_config(&pki.ca_path(), None);
    let deadline = Instant::now() + Duration::from_secs(10);
    gw.block_on(async {
        loop {
            let conn = tls_connect(&gw.mirror_bootstrap(), client.clone())
                .await
                .expect("connect to the mirror listener");
            if peer_cn(&conn) == "cert-b" {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "certificate B not served after 10 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });

    let source = harness::cluster("source");
    write_source(&source, &topic, 0, 10, "after");
    write_source(&source, &topic, 1, 10, "after");
    wait_mirrored(&gw, &topic, 0, "after the reload");
    wait_mirrored(&gw, &topic, 1, "after the reload");
    assert_eq!(
        gw.metric(r#"mirrorgate_request_errors_total{kind="tls_handshake",listener="mirror"}"#),
        0.0,
        "the agent's handshakes with the mirror listener failed"
    );
}

// ------------------------------------------------------------------ broker name checks

/// A TLS terminator on a free loopback port, in its own runtime (stopped when dropped): it
/// serves `cert`/`key` and relays each connection over TLS to `upstream` (trusting
/// `upstream_ca`, name 127.0.0.1).
struct TlsRelay {
    addr: String,
    _rt: tokio::runtime::Runtime,
}

impl TlsRelay {
    fn start(cert: &Path, key: &Path, upstream: &str, upstream_ca: &Path) -> TlsRelay {
        use rustls::pki_types::pem::PemObject;
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
            .expect("cert file")
            .map(|c| c.expect("cert"))
            .collect();
        let key = PrivateKeyDer::from_pem_file(key).expect("key");
        let server = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .expect("server config");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
        let client = tls_client_config(upstream_ca, None);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("rt");
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let upstream = upstream.to_string();
        rt.spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, client, upstream) =
                    (acceptor.clone(), client.clone(), upstream.clone());
                tokio::spawn(async move {
                    let Ok(Ok(mut inbound)) =
                        tokio::time::timeout(IO_TIMEOUT, acceptor.accept(tcp)).await
                    else {
                        return;
                    };
                    let Ok(mut outbound) = tls_connect(&upstream, client).await else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                });
            }
        });
        TlsRelay { addr, _rt: rt }
    }
}

/// README (TLS): "The broker's certificate must chain to `ca` and carry the name:
/// `server_name`, or else the host of the address the gateway dials". The gateway's
/// `server_name` is a name the secure broker's certificate does not carry, and its `ca` holds
/// the broker's CA. Its metadata comes through a relay at the bootstrap address whose
/// certificate does carry that name; the brokers it learns there are the real SSL listener. A
/// client's connection through the gateway needs an upstream connection to that broker: its
/// certificate chains to `ca` but lacks the name, so the connection is refused.
#[test]
fn a_broker_certificate_without_the_name_is_refused_on_a_proxied_client_connection() {
    let (ssl, broker_ca) = secure_ssl();
    let name = "broker.mirrorgate.invalid";
    let pki = Pki::new("relay");
    let (c, k) = pki.leaf_with(
        "relay",
        1,
        vec![name.to_string()],
        vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth],
    );
    let (relay_cert, relay_key) = pki.write_pair("relay", &c, &k);
    let relay = TlsRelay::start(&relay_cert, &relay_key, &ssl, &broker_ca);
    // `ca`: the relay's CA and the broker's, so both chains verify; only the names differ.
    let bundle = pki.path("bundle.pem");
    std::fs::write(
        &bundle,
        format!(
            "{}{}",
            std::fs::read_to_string(pki.ca_path()).expect("read CA"),
            std::fs::read_to_string(&broker_ca).expect("read broker CA")
        ),
    )
    .expect("write bundle");
    let tls = ClusterTlsConfig {
        ca: Some(bundle.clone()),
        server_name: Some(name.to_string()),
        ..ClusterTlsConfig::default()
    };
    let mut cfg = test_config(&relay.addr);
    cfg.destination.tls = Some(tls.clone());
    let gw = TestGateway::start(cfg);

    let upstream_tls = r#"mirrorgate_request_errors_total{kind="upstream_tls",listener="client"}"#;
    let before = gw.metric(upstream_tls);
    let addr = gw.bootstrap();
    gw.block_on(async {
        let mut client = TcpStream::connect(&addr).await.expect("connect");
        let answered = api_versions(&mut client, 1).await.is_ok();
        assert!(
            !answered,
            "a client was served over an upstream connection whose certificate lacks the name"
        );
    });
    assert!(
        gw.metric(upstream_tls) > before,
        "the refusal is not counted as upstream_tls:\n{}",
        gw.metrics()
    );

    // The broker's certificate verifies against `ca`; the name is what fails.
    let connector = mirrorgate::net::Transport::for_cluster(&ClusterConfig {
        bootstrap: vec![ssl.clone()],
        connect_timeout_ms: 5000,
        metadata_refresh_ms: 1000,
        tls: Some(tls),
        sasl: None,
    })
    .expect("connector");
    let err = gw
        .block_on(connector.connect(&ssl, Duration::from_secs(5)))
        .err()
        .expect("a broker certificate without the name was accepted");
    let text = err.to_string();
    assert_eq!(err.kind(), "upstream_tls", "{text}");
    assert!(text.contains("not valid for name"), "{text}");
}
