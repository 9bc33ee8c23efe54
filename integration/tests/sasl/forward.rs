//! SASL on a forward listener: the source and the destination both require SCRAM (the shared
//! `secure` cluster, and a `secure` cluster of this test's own on an isolated rig). Clients
//! authenticate with the upstream through the listener (passthrough), on the source before a
//! switchover and on the destination after it: the switch closes their authenticated
//! connections once the requests in flight are answered, and they authenticate again.

use std::collections::BTreeMap;

use kafka_protocol::messages::ApiVersionsRequest;

use super::*;
use crate::agent::forward::{forward_config, wait_lag_zero};
use crate::failover::read_log;

/// The ports of this test's own `secure` cluster (26092.. + 1400; unique among the tests).
const OWN_SECURE_PORTS: u16 = 1400;

/// A `secure` cluster of the test's own: its rig (stopped when dropped) and (PLAINTEXT address
/// for set-up and checks, SASL_PLAINTEXT address).
fn own_secure() -> (harness::IsolatedRig, String, String) {
    let rig = harness::IsolatedRig::new(OWN_SECURE_PORTS);
    let pid = std::process::id().to_string();
    let out = rig.rig(&["up", "secure", "--owner-pid", &pid]);
    harness::expect_success("integration/rig up secure (own cluster)", &out);
    let out = rig.rig(&["secure-info"]);
    harness::expect_success("integration/rig secure-info (own cluster)", &out);
    let info = harness::parse_status(&out.stdout);
    let plaintext = info.get("plaintext").cloned().expect("plaintext address");
    let sasl = info
        .get("sasl_plaintext")
        .cloned()
        .expect("sasl_plaintext address");
    (rig, plaintext, sasl)
}

#[test]
fn scram_clients_on_a_forward_listener_write_across_a_switchover_authenticating_again_on_the_destination(
) {
    let (source_plain, source_sasl) = secure();
    let (_own, destination_plain, destination_sasl) = own_secure();
    let topic = harness::unique_topic("sasl-forward");
    harness::create_topic(&source_plain, &topic, 2, None);

    // The gateway authenticates as admin on both sides: its own connections to the destination
    // and the agent's to the source. The clients authenticate as alice, through the listener.
    let (mut cfg, forward) = forward_config("saslfwd", &[&topic], &source_sasl);
    cfg.destination.bootstrap = vec![destination_sasl.clone()];
    cfg.destination.sasl = Some(creds(SaslMechanism::ScramSha256, "admin", "admin-secret"));
    if let Some(source) = cfg.mirrors[0].source.as_mut() {
        source.sasl = Some(creds(SaslMechanism::ScramSha512, "admin", "admin-secret"));
    }
    let gw = TestGateway::start(cfg);
    let dir = tempfile::tempdir().expect("tempdir");
    let props = client_props(&dir, "SCRAM-SHA-256", "alice", "alice-secret");

    // Before: the records land on the source, through the listener.
    let (before, out) = java_produce(&forward, &topic, N, &props);
    harness::expect_success("VerifiableProducer before the switchover", &out);
    assert_eq!(before.len(), N, "acknowledged before the switchover");
    let on_source: usize = (0..2)
        .map(|p| read_log(&source_plain, &topic, p).records.len())
        .sum();
    assert!(
        on_source >= N,
        "the records are on the source ({on_source})"
    );
    wait_lag_zero(&gw.admin(), "saslfwd", 2);

    // Two connections open before the switch: one authenticated as alice with the source through
    // the listener, one that only asked ApiVersions (no SASL).
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let alice = connector(SaslMechanism::ScramSha256, "alice", "alice-secret");
    let (mut authenticated, mut anonymous) = rt.block_on(async {
        let mut a = KafkaClient::connect_with(&alice, &forward, Duration::from_secs(10))
            .await
            .expect("alice authenticates with the source through the forward listener");
        a.send(&MetadataRequest::default().with_topics(None), 12)
            .await
            .expect("Metadata on alice's connection before the switch");
        let mut b = KafkaClient::connect(&forward, Duration::from_secs(10))
            .await
            .expect("a connection without SASL");
        b.send(&ApiVersionsRequest::default(), 3)
            .await
            .expect("ApiVersions before the switch");
        (a, b)
    });

    // Across: a producer writing while the switchover runs goes on without an error.
    let across = {
        let (forward, topic, props) = (forward.clone(), topic.clone(), props.clone());
        std::thread::spawn(move || {
            harness::verifiable_producer(&forward, &topic, 1_200, Some(100), &props)
        })
    };
    std::thread::sleep(Duration::from_secs(4));
    crate::failover::switchover(&gw.admin(), "saslfwd");
    let out = across.join().expect("the producer's thread");
    harness::expect_success("VerifiableProducer across the switchover", &out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !stdout.contains("producer_send_error"),
        "the application saw no error across the switch:\n{}",
        stdout
            .lines()
            .filter(|l| l.contains("producer_send_error"))
            .take(5)
            .collect::<Vec<_>>()
            .join("\n")
    );
    // The source's authentication does not hold on the destination: that connection is closed
    // after the switch; the one that never authenticated is carried over and answers.
    rt.block_on(async {
        // (ApiVersions, which a SASL listener answers before any authentication: only a closed
        // connection fails it.)
        let closed = authenticated.send(&ApiVersionsRequest::default(), 3).await;
        assert!(
            closed.is_err(),
            "alice's connection authenticated with the source is closed after the switch"
        );
        anonymous
            .send(&ApiVersionsRequest::default(), 3)
            .await
            .expect("ApiVersions on the connection without SASL, after the switch");
    });
    let across = harness::verifiable_acks(&out);
    assert_eq!(across.len(), 1_200, "acknowledged across the switchover");

    // After: every acknowledged record is on the destination at its offset, and a consumer
    // group through the listener (now on the destination, authenticated there) reads exactly them.
    let mut acked = before;
    acked.extend(across);
    for p in 0..2 {
        let at: BTreeMap<i64, Option<String>> = read_log(&destination_plain, &topic, p)
            .records
            .into_iter()
            .map(|r| (r.offset, r.value))
            .collect();
        for ((_, offset), value) in acked.iter().filter(|((q, _), _)| *q == p) {
            assert_eq!(
                at.get(offset).cloned().flatten().as_deref(),
                Some(value.as_str()),
                "partition {p}: the record acknowledged at offset {offset}"
            );
        }
    }
    let consumed = java_consume(&forward, &topic, acked.len(), &props);
    assert_eq!(
        consumed, acked,
        "the group read exactly what was acknowledged"
    );
    assert!(
        gw.metrics()
            .contains("mirrorgate_forward_side{mirror=\"saslfwd\",side=\"destination\"} 1"),
        "the route is on the destination"
    );
}
