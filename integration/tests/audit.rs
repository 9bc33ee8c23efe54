//! The audit trail in a Kafka topic (`admin.audit_topic`): every state-changing admin call is
//! one JSON record on the destination cluster, with its caller and outcome, in call order.

use std::time::{Duration, Instant};

use hyper::Method;

use crate::failover::{failover, mirror_config, read_log, wait_mirroring, wait_stopped};
use crate::gw::{admin_call, admin_call_body, TestGateway};
use crate::harness;

/// The audit events in the topic (partition 0), once there are at least `n`.
fn audit_events(destination: &str, topic: &str, n: usize) -> Vec<serde_json::Value> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let known = harness::try_partition_leaders(destination, topic).is_ok_and(|l| !l.is_empty());
        let events: Vec<serde_json::Value> = if known {
            read_log(destination, topic, 0)
                .records
                .iter()
                .filter_map(|r| serde_json::from_str(r.value.as_deref()?).ok())
                .collect()
        } else {
            Vec::new()
        };
        if events.len() >= n {
            return events;
        }
        assert!(
            Instant::now() < deadline,
            "{n} audit events expected in {topic}, found {}: {events:?}",
            events.len()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn every_state_changing_admin_call_is_a_record_of_the_audit_topic_with_its_caller_and_outcome() {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("audited");
    let audit_topic = harness::unique_topic("audit");
    harness::create_topic(&destination, &topic, 1, None);
    let mut cfg = mirror_config("audited", &[&topic]);
    cfg.admin.audit_topic = Some(audit_topic.clone());
    let gw = TestGateway::start(cfg);
    let admin = gw.admin();
    wait_mirroring(&admin, "audited", 1);

    let call = |path: &str| admin_call(&admin, Method::POST, path, None).0;
    assert_eq!(call("/v1/mirrors/audited/pause"), 200);
    assert_eq!(call("/v1/mirrors/audited/resume"), 200);
    assert_eq!(call("/v1/mirrors/audited/failover?dry_run=true"), 200);
    assert_eq!(call("/v1/mirrors/nosuch/pause"), 404);
    let (status, _) = admin_call_body(
        &admin,
        Method::POST,
        "/v1/mirrors/audited/failover",
        None,
        r#"{"max_lag_records": "lots"}"#,
    );
    assert_eq!(status, 400);
    let failover_id = failover(&admin, "audited");
    wait_stopped(&admin, "audited");
    assert_eq!(call("/v1/mirrors/audited/failover"), 409);

    let events = audit_events(&destination, &audit_topic, 7);
    let seen: Vec<(String, String, String)> = events
        .iter()
        .map(|e| {
            (
                e["mirror"].as_str().unwrap_or_default().to_string(),
                e["action"].as_str().unwrap_or_default().to_string(),
                e["outcome"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    let want = [
        ("audited", "pause", "accepted"),
        ("audited", "resume", "accepted"),
        ("audited", "failover", "dry_run"),
        ("nosuch", "pause", "refused"),
        ("audited", "failover", "refused"),
        ("audited", "failover", "accepted"),
        ("audited", "failover", "refused"),
    ]
    .map(|(m, a, o)| (m.to_string(), a.to_string(), o.to_string()));
    assert_eq!(seen, want, "{events:#?}");
    // The accepted failover names its id; the refusals say why.
    assert_eq!(
        events[5]["failover_id"].as_str(),
        Some(failover_id.as_str())
    );
    assert_eq!(events[5]["status"], 202);
    for i in [3, 4, 6] {
        assert!(
            events[i]["reason"].as_str().is_some_and(|r| !r.is_empty()),
            "a refusal without its reason: {}",
            events[i]
        );
    }
    // Each names the caller (the test's own address) and the instance, and has its own id.
    for e in &events {
        assert!(
            e["caller"]
                .as_str()
                .is_some_and(|c| c.starts_with("127.0.0.1:")),
            "{e}"
        );
        assert_eq!(e["instance"].as_str(), Some(admin.as_str()), "{e}");
    }
    let ids: std::collections::BTreeSet<&str> =
        events.iter().filter_map(|e| e["id"].as_str()).collect();
    assert_eq!(ids.len(), events.len(), "event ids repeat");
    // Reads are not state changes: none of them is in the trail.
    admin_call(&admin, Method::GET, "/v1/mirrors/audited", None);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(audit_events(&destination, &audit_topic, 7).len(), 7);
}
