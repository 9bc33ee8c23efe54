//! The gateway as a TLS client of the brokers: a certificate that does not chain to the
//! configured CA, or does not name the broker, is refused.

use super::*;

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
