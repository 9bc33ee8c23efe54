//! The gateway's TLS listener: a replaced certificate is served to new connections, a plaintext
//! client is closed, mutual TLS refuses clients without a certificate or from another CA.

use super::*;

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
