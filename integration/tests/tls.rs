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
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params =
            rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
                .expect("params");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        params.serial_number = Some(rcgen::SerialNumber::from(serial));
        params.extended_key_usages = vec![if client {
            rcgen::ExtendedKeyUsagePurpose::ClientAuth
        } else {
            rcgen::ExtendedKeyUsagePurpose::ServerAuth
        }];
        let cert = params
            .signed_by(&key, &self.ca, &self.ca_key)
            .expect("sign");
        (cert.pem(), key.serialize_pem())
    }

    /// Write a server leaf as `{name}.pem` / `{name}.key`: (cert path, key path).
    fn server_files(&self, name: &str, cn: &str, serial: u64) -> (PathBuf, PathBuf) {
        let (c, k) = self.leaf(cn, serial, false);
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

/// Run VerifiableProducer (n records) and VerifiableConsumer through `bootstrap` with client
/// `props`; returns (acknowledged, consumed) counts per partition.
fn java_round_trip(
    bootstrap: &str,
    topic: &str,
    props: &str,
) -> (BTreeMap<i32, usize>, BTreeMap<i32, usize>) {
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
    let per_partition = |m: &BTreeMap<(i32, i64), String>| {
        let mut out: BTreeMap<i32, usize> = BTreeMap::new();
        for (p, _) in m.keys() {
            *out.entry(*p).or_default() += 1;
        }
        out
    };
    (per_partition(&acked), per_partition(&consumed))
}

// ------------------------------------------------------------------ tests

#[test]
fn java_clients_through_the_gateway_to_an_ssl_broker() {
    let (_, ca) = secure_ssl();
    let gw = TestGateway::start(config_to_ssl_broker(&ca));
    let topic = secure_topic("tls-upstream", 2);
    let (acked, consumed) = java_round_trip(&gw.bootstrap(), &topic, "");
    assert_eq!(acked.values().sum::<usize>(), N, "acknowledged: {acked:?}");
    assert_eq!(consumed, acked, "consumed per partition");
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
    assert_eq!(acked.values().sum::<usize>(), N, "acknowledged: {acked:?}");
    assert_eq!(consumed, acked, "consumed per partition");
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
    let connector = mirrorgate::net::Connector::for_cluster(&ClusterConfig {
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
