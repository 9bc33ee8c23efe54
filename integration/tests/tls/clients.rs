//! Java clients through the gateway to an SSL broker, and over TLS to the gateway as well.

use super::*;

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
