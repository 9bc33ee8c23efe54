//! A failback while another instance is still adopting the failover (review G4): the failback
//! waits until every instance alive has adopted it, an instance that missed it goes back to
//! MIRRORING from wherever its adoption stood (never STOPPING for good), and it adopts the next
//! failover. Against the real clusters; the adopting instance is a `mirrorgate run` process
//! whose adoption is held (`MIRRORGATE_TEST_HOLD_ADOPTION_UNTIL`), as while its PSM rebuilds.

use super::*;

/// `POST /v1/mirrors/{mirror}/start` on `admin`: (status, body).
fn failback(admin: &str, mirror: &str) -> (u16, String) {
    admin_call(
        admin,
        hyper::Method::POST,
        &format!("/v1/mirrors/{mirror}/start"),
        None,
    )
}

/// Wait (30 s at most) until `state` counts every partition of `mirror` on the instance at
/// `admin`; on timeout, say what it shows.
fn wait_all_in(admin: &str, mirror: &str, state: &str, why: &str) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let m = mirror_json(admin, mirror);
        if m["partitions"].as_u64().is_some_and(|n| n > 0) && m["states"][state] == m["partitions"]
        {
            return m;
        }
        if Instant::now() >= deadline {
            let ready = try_admin_call(admin, hyper::Method::GET, "/readyz", None);
            panic!("{why}: {m}\nreadyz: {ready:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_failback_during_another_instances_adoption_leaves_no_instance_stopping() {
    let source = harness::cluster("source");
    let topic = mirror_topic("peers-g4");
    harness::create_topic(&source, &topic, 1, None);
    let state_topic = harness::unique_topic("peers-g4-state");
    let with_agent = instance_config_with_agent("g4", &topic, "a", &state_topic, &source);
    init_state_topic(&with_agent);
    let a = TestGateway::start(with_agent);
    let release = crate::gw::scratch_dir().join("release");
    let hold = release.to_string_lossy().to_string();
    let held = [("MIRRORGATE_TEST_HOLD_ADOPTION_UNTIL", hold.as_str())];
    let mut b = ProcessGateway::start(instance_config("g4", &topic, "b", &state_topic), &held);
    wait_others_alive(&a.admin(), 1);
    wait_others_alive(&b.admin(), 1);
    failover(&a.admin(), "g4");
    crate::failover::wait_stopped(&a.admin(), "g4");
    wait_all_in(&b.admin(), "g4", "STOPPING", "b never began adopting");

    // 1. While b is still adopting, the failback waits for it.
    let (status, body) = failback(&a.admin(), "g4");
    assert_eq!(
        status, 409,
        "a failback while instance b still adopts the failover was accepted: {body}"
    );
    let why: serde_json::Value = serde_json::from_str(&body).expect("json");
    let why = why["error"].as_str().unwrap_or_default();
    assert!(why.contains(r#"instances ["b"] have not adopted"#), "{why}");

    // 2. b is gone (killed while adopting): the failback goes on without it. Restarted, still
    //    unable to finish that adoption, b follows the failback: MIRRORING, ready.
    b.kill9();
    wait_others_alive(&a.admin(), 0);
    let (status, body) = failback(&a.admin(), "g4");
    assert_eq!(status, 202, "{body}");
    b.restart_unready(&held);
    let m = wait_all_in(
        &b.admin(),
        "g4",
        "MIRRORING",
        "b, adopting when the failover was failed back, did not go back to MIRRORING",
    );
    assert!(m["failover_id"].is_null(), "{m}");
    b.wait_ready(Duration::from_secs(30));

    // 3. b adopts the next failover.
    std::fs::write(&release, b"").expect("release the hold");
    wait_others_alive(&a.admin(), 1);
    let f2 = failover(&a.admin(), "g4");
    crate::failover::wait_stopped(&a.admin(), "g4");
    let m = crate::failover::wait_stopped(&b.admin(), "g4");
    assert_eq!(m["failover_id"], f2.as_str(), "{m}");
}
