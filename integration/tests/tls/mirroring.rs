//! The built-in agent over TLS: from a TLS source, through a TLS mirror listener (with client
//! CA), and its pin following a reload of the listener's certificate.

use super::*;

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
        transactions: Default::default(),
        configs: Default::default(),
        acls: Default::default(),
        groups: Default::default(),
        recovery: Default::default(),
        forward: None,
        mirroring: Default::default(),
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
        transactions: Default::default(),
        configs: Default::default(),
        acls: Default::default(),
        groups: Default::default(),
        recovery: Default::default(),
        forward: None,
        mirroring: Default::default(),
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
    // The gateway counts that refusal when its side of the handshake ends, which may be after
    // the client gave up: the count is taken once it shows, so that it cannot land later and be
    // taken for the agent's.
    let handshake_refusals =
        || gw.metric(r#"mirrorgate_request_errors_total{kind="tls_handshake",listener="mirror"}"#);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while handshake_refusals() < 1.0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the refused client's handshake was not counted within 10 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let refusals_before = handshake_refusals();
    write_source(&harness::cluster("source"), &topic, 0, 20, "mtls");
    wait_mirrored(&gw, &topic, 0, "the agent on a client_ca mirror listener");
    assert_eq!(
        handshake_refusals(),
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
