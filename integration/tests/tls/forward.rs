//! A forward listener with TLS for its clients: Java clients over TLS to it, on the source
//! before a switchover and on the destination after, and a TLS connection kept across it.

use super::*;
use crate::failover::read_log;

#[test]
fn java_clients_over_tls_on_a_forward_listener_write_the_source_then_the_destination_and_a_tls_connection_stays_across_the_switch(
) {
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("tls-forward");
    harness::create_topic(&source, &topic, 2, None);
    let pki = Pki::new("forward");
    let (cert, key) = pki.server_files("fwd", "gateway", 1);
    let (mut cfg, bootstrap) = crate::agent::forward::forward_config("tlsfwd", &[&topic], &source);
    if let Some(f) = cfg.mirrors[0].forward.as_mut() {
        f.listener.tls = Some(listener_tls(cert, key, None));
    }
    let gw = TestGateway::start(cfg);
    let props = format!(
        "security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location={}\n",
        pki.ca_path().display()
    );

    // Before: the source, through the listener over TLS, exactly.
    let (acked, consumed) = java_round_trip(&bootstrap, &topic, &props);
    assert_exact_round_trip(&acked, &consumed);
    crate::agent::forward::wait_lag_zero(&gw.admin(), "tlsfwd", 2);

    // A TLS connection open before the switch answers after it, on the destination.
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let tls = tls_client_config(&pki.ca_path(), None);
    let mut kept = rt
        .block_on(tls_connect(&bootstrap, tls))
        .expect("TLS to the forward listener");
    rt.block_on(api_versions(&mut kept, 1))
        .expect("ApiVersions before");
    crate::failover::switchover(&gw.admin(), "tlsfwd");
    wait_for_side(&gw, "destination");
    rt.block_on(api_versions(&mut kept, 2))
        .expect("ApiVersions on the same TLS connection after the switch");

    // After: the destination, through the same listener over TLS; every acknowledged record
    // is there at its offset with its value.
    let dir = tempfile::tempdir().expect("tempdir");
    let producer_props = idempotent_producer_props(dir.path(), &props);
    let (after, out) = harness::verifiable_produce(&bootstrap, &topic, N, &producer_props);
    harness::expect_success("VerifiableProducer after the switch", &out);
    assert_eq!(after.len(), N, "acknowledged after the switch");
    for p in 0..2 {
        let log = read_log(&destination, &topic, p);
        let at: BTreeMap<i64, Option<String>> = log
            .records
            .iter()
            .map(|r| (r.offset, r.value.clone()))
            .collect();
        for ((_, offset), value) in after.iter().filter(|((q, _), _)| *q == p) {
            assert_eq!(
                at.get(offset).cloned().flatten().as_deref(),
                Some(value.as_str()),
                "partition {p}: the record acknowledged at offset {offset} after the switch"
            );
        }
    }
    assert_eq!(
        gw.metric(r#"mirrorgate_request_errors_total{kind="tls_handshake",listener="forward"}"#),
        0.0
    );
}

/// Wait until the forward route of mirror `tlsfwd` is on `side`.
fn wait_for_side(gw: &TestGateway, side: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = admin_call(
            &gw.admin(),
            hyper::Method::GET,
            "/v1/mirrors/tlsfwd/forward",
            None,
        );
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        if status == 200 && v["side"] == side {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "forward route not on {side}: {body}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
