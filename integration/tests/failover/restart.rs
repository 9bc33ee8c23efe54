//! The gateway killed at each failover step completes it on restart with one barrier; a corrupt
//! mirror state or screening set keeps mirror topics read-only and says why.

use super::*;

/// How long a restarted gateway holds its resumed failover after fencing (test hook), so the
/// window before the barrier is persisted can be probed.
const RESUMED_FAILOVER_HOLD_MS: &str = "8000";

/// Poll `/readyz` of a gateway process until it answers 200 (bounded).
fn wait_process_ready(gw: &ProcessGateway) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, body) = gw.call(Method::GET, "/readyz");
        if status == 200 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "gateway not ready: {body}\n{}",
            gw.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Poll `/readyz` of a gateway process until it answers 503 with a body containing `needle`;
/// returns the body (bounded).
fn wait_unready_saying(gw: &ProcessGateway, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = gw.call(Method::GET, "/readyz");
        if status == 503 && body.contains(needle) {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "/readyz never answered 503 with {needle:?}; last: {status} {body}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A raw connection to `addr`, retried while the listener is not yet bound (bounded).
fn raw_conn_when_listening(addr: &str) -> RawConn {
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "nothing listens on {addr}");
        std::thread::sleep(Duration::from_millis(50));
    }
    RawConn::connect(addr)
}

/// Kill the gateway process at a failover step (the crash hook's own marker in its log proves
/// where it died), restart it with the resumed failover held after fencing: while the mirror is
/// not STOPPED a local produce to each partition is refused (44); then the failover completes,
/// each partition has exactly one barrier, and local writes land after it.
fn crash_at(step: &str) {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic(&format!("crash-{}", step.replace('_', "-")));
    harness::create_topic(&destination, &topic, 2, Some(&[1, 2]));
    let cfg = mirror_config("crash", &[&topic]);
    let mut gw = ProcessGateway::start(cfg, &[("MIRRORGATE_CRASH_AFTER", step)]);
    wait_mirroring(&gw.admin(), "crash", 2);
    harness::produce_keyed(&gw.mirror_bootstrap(), &topic, 50, &[]);
    // The process may die before it answers (a crash right after accepting the failover).
    match crate::gw::try_admin_call(
        &gw.admin(),
        Method::POST,
        "/v1/mirrors/crash/failover",
        None,
    ) {
        Ok((s, b)) => assert_eq!(s, 202, "{b}"),
        Err(e) => assert!(step == "fenced_persisted", "failover call failed: {e}"),
    }
    assert!(
        gw.wait_exit(Duration::from_secs(30)),
        "the crash hook did not fire at {step}:\n{}",
        gw.log()
    );
    let marker = format!("MIRRORGATE_CRASH_AFTER={step}: aborting");
    assert!(
        gw.log().contains(&marker),
        "the process exited, but not at the crash hook of {step} (no {marker:?}):\n{}",
        gw.log()
    );
    gw.restart_unready(&[(
        "MIRRORGATE_TEST_HOLD_AFTER_FENCE_MS",
        RESUMED_FAILOVER_HOLD_MS,
    )]);
    let leaders = harness::partition_leaders(&destination, &topic);
    if step == "psm_cleared" {
        // The crash came after STOPPED was persisted: nothing is left to resume.
        let m = mirror_json(&gw.admin(), "crash");
        assert_eq!(m["states"]["STOPPED"].as_u64(), Some(2), "{m}");
    } else {
        // The resumed failover is held after fencing, before any barrier is persisted.
        let before = mirror_json(&gw.admin(), "crash");
        assert_eq!(
            before["states"]["STOPPING"].as_u64(),
            Some(2),
            "restarted after a crash at {step}: {before}"
        );
        for (p, leader) in &leaders {
            let mut local = raw_conn_when_listening(&format!("127.0.0.1:{}", gw.port_for(*leader)));
            let (code, _, msg) = local.produce_msg(&topic, *p, batch(-1, -1, -1, 1, "early"));
            assert_eq!(
                code, 44,
                "a local produce to partition {p} was not refused during the resumed failover after a crash at {step}: {msg}"
            );
            assert!(msg.contains("STOPPING"), "{msg}");
        }
        let after = mirror_json(&gw.admin(), "crash");
        assert_eq!(
            after["states"]["STOPPING"].as_u64(),
            Some(2),
            "the probe came after the hold ended (raise RESUMED_FAILOVER_HOLD_MS): {after}"
        );
    }
    wait_stopped(&gw.admin(), "crash");
    wait_process_ready(&gw);
    let local = harness::produce_keyed(&gw.bootstrap(), &topic, 20, &[]);
    for p in 0..2 {
        let log = read_log(&destination, &topic, p);
        assert_eq!(
            log.barriers.len(),
            1,
            "partition {p} after a crash at {step}: barriers {:?}",
            log.barriers
        );
        let barrier = log.barriers[0].0;
        for a in local.iter().filter(|a| a.partition == p) {
            assert!(
                a.offset > barrier,
                "local write at {} before the barrier {barrier}",
                a.offset
            );
        }
        assert!(
            log.records
                .iter()
                .all(|r| r.key.as_deref() != Some("early-0")),
            "partition {p}: the probe's early write is in the log"
        );
        // The barrier is the control batch the state records (the default form): a failover
        // resumed after the markers were written found them by their producer id.
        let (_, body) = gw.call(Method::GET, "/v1/mirrors/crash/partitions");
        let v: serde_json::Value = serde_json::from_str(&body).expect("json");
        let rec = v["partitions"]
            .as_array()
            .expect("partitions")
            .iter()
            .find(|x| x["partition"].as_i64() == Some(p as i64))
            .cloned()
            .expect("partition record");
        assert_eq!(rec["barrier_kind"], "control", "{rec}");
        assert_eq!(rec["barrier_offset"].as_i64(), Some(barrier), "{rec}");
        assert_eq!(
            log.control_barriers
                .iter()
                .map(|c| c.producer_id)
                .collect::<Vec<_>>(),
            vec![rec["barrier_producer_id"].as_i64().expect("producer id")],
            "partition {p} after a crash at {step}"
        );
    }
}

#[test]
fn disruptive_gateway_killed_right_after_the_failover_is_accepted_completes_it_on_restart() {
    crash_at("fenced_persisted");
}

#[test]
fn disruptive_gateway_killed_after_fencing_completes_the_failover_on_restart() {
    crash_at("fenced");
}

#[test]
fn disruptive_gateway_killed_after_the_barrier_write_completes_the_failover_on_restart() {
    crash_at("barrier_written");
}

#[test]
fn disruptive_gateway_killed_after_persisting_the_screening_set_completes_the_failover_on_restart()
{
    crash_at("screen_persisted");
}

#[test]
fn disruptive_gateway_killed_after_persisting_the_barrier_completes_the_failover_on_restart() {
    crash_at("barrier_persisted");
}

#[test]
fn disruptive_gateway_killed_after_clearing_the_psm_completes_the_failover_on_restart() {
    crash_at("psm_cleared");
}

/// The state of partition 0 of a mirror, from the admin API.
fn partition_state(admin: &str, name: &str) -> String {
    let (_, body) = admin_call(
        admin,
        Method::GET,
        &format!("/v1/mirrors/{name}/partitions"),
        None,
    );
    let v: serde_json::Value = serde_json::from_str(&body).expect("json");
    v["partitions"][0]["state"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn expect_refused(conn: &mut RawConn, topic: &str, state: &str, tag: &str) {
    let (code, _, msg) = conn.produce_msg(topic, 0, batch(-1, -1, -1, 1, tag));
    assert_eq!(code, 44, "local produce in {state}: {msg}");
    assert!(
        msg.contains(state) && msg.contains("mirror states"),
        "{msg}"
    );
}

/// Runs alone: a gateway process with test hooks that hold the failover after fencing and fail
/// the first barrier writes, so that STOPPING and FAILED can be observed.
#[test]
fn disruptive_local_produce_is_refused_in_every_state_but_stopped() {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("states");
    harness::create_topic(&destination, &topic, 1, Some(&[1]));
    let gw = ProcessGateway::start(
        mirror_config("states", &[&topic]),
        &[
            ("MIRRORGATE_TEST_HOLD_AFTER_FENCE_MS", "2000"),
            ("MIRRORGATE_TEST_FAIL_BARRIER_WRITES", "3"),
        ],
    );
    let admin = gw.admin();
    wait_mirroring(&admin, "states", 1);
    let mut local = RawConn::connect(&gw.bootstrap());
    expect_refused(&mut local, &topic, "MIRRORING", "m");
    let (s, b) = gw.call(Method::POST, "/v1/mirrors/states/pause");
    assert_eq!(s, 200, "{b}");
    assert_eq!(partition_state(&admin, "states"), "PAUSED");
    expect_refused(&mut local, &topic, "PAUSED", "p");
    let mut mirror = RawConn::connect(&gw.mirror_bootstrap());
    let (code, _, msg) = mirror.produce_msg(&topic, 0, batch(-1, -1, -1, 1, "mp"));
    assert_eq!(
        code, 19,
        "mirror produce while PAUSED: held with a retriable error: {msg}"
    );
    assert!(msg.contains("PAUSED until it is resumed"), "{msg}");
    assert_eq!(gw.call(Method::POST, "/v1/mirrors/states/resume").0, 200);
    failover(&admin, "states");
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = std::collections::BTreeSet::new();
    loop {
        let st = partition_state(&admin, "states");
        if (st == "STOPPING" || st == "FAILED") && seen.insert(st.clone()) {
            expect_refused(&mut local, &topic, &st, &st.to_lowercase());
        }
        if st == "STOPPED" {
            break;
        }
        assert!(Instant::now() < deadline, "failover did not complete: {st}");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        seen.contains("STOPPING") && seen.contains("FAILED"),
        "observed states: {seen:?}"
    );
    let (code, _, msg) = local.produce_msg(&topic, 0, batch(-1, -1, -1, 1, "after"));
    assert_eq!(code, 0, "local produce after STOPPED: {msg}");
    let (s, body) = gw.call(Method::GET, "/metrics");
    assert_eq!(s, 200);
    assert!(
        body.contains(r#"mirrorgate_mirror_partitions{mirror="states",state="STOPPED"} 1"#),
        "{body}"
    );
    assert!(
        body.contains(r#"mirrorgate_produce_rejected_total{reason="read_only"}"#),
        "{body}"
    );
}

/// Runs alone: the mirror state file is corrupted while the gateway is down. On start the gateway
/// does not guess: the mirror's topics stay read-only on both listeners, `/readyz` says which
/// file and why, and failover is refused.
#[test]
fn disruptive_a_corrupt_mirror_state_keeps_the_topics_read_only_and_says_why() {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("corrupt");
    harness::create_topic(&destination, &topic, 1, Some(&[1]));
    let mut gw = ProcessGateway::start(mirror_config("corrupt", &[&topic]), &[]);
    wait_mirroring(&gw.admin(), "corrupt", 1);
    failover(&gw.admin(), "corrupt");
    wait_stopped(&gw.admin(), "corrupt");
    gw.kill9();
    let file = gw.config.state_dir.join("mirrors/corrupt.json");
    std::fs::write(
        &file,
        b"{\"version\":1,\"name\":\"corrupt\",\"partitions\":[{\"topic\"",
    )
    .expect("corrupt the file");
    gw.restart_unready(&[]);
    wait_unready_saying(&gw, "mirror corrupt state unreadable");
    let (status, body) = gw.call(Method::POST, "/v1/mirrors/corrupt/failover");
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("cannot be read"), "{body}");
    // Even though the partition was STOPPED before, nothing is writable now.
    let mut local = RawConn::connect(&gw.bootstrap());
    let (code, _, msg) = local.produce_msg(&topic, 0, batch(-1, -1, -1, 1, "local"));
    assert_eq!(code, 44, "{msg}");
    assert!(msg.contains("cannot be read"), "{msg}");
    let mut mirror = RawConn::connect(&gw.mirror_bootstrap());
    let (code, _, _) = mirror.produce_msg(&topic, 0, batch(-1, -1, -1, 1, "mirror"));
    assert_eq!(code, 44);
}

/// Mirror single-record batches (sequences 0–2, epoch 0) of every producer id in `ids` into
/// partition 0 of `topic` through the mirror listener at `mirror`: the collision hazard's shape.
fn mirror_colliding_batches(mirror: &str, topic: &str, ids: &[i64]) {
    let mut conn = RawConn::connect(mirror);
    for pid in ids {
        for seq in 0..3 {
            let (code, _) = conn.produce(topic, 0, batch(*pid, 0, seq, 1, &format!("m{pid}")));
            assert_eq!(code, 0, "mirror produce pid {pid} seq {seq}");
        }
    }
}

/// Review F8: the gateway is killed right after BARRIER_PERSISTED of a failover whose mirrored
/// traffic left producer ids the brokers hand out next. On restart the PSM is rebuilt up to the
/// barrier and cleared there, so the screening entries must already be durable: `pids.json`
/// holds every mirrored id, and new local idempotent producers are screened and lose nothing.
#[test]
fn disruptive_gateway_killed_after_persisting_the_barrier_keeps_the_screening_set() {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("crash-screen");
    harness::create_topic(&destination, &topic, 1, Some(&[1]));
    // The data barrier: a control barrier's producer-id search would take the colliding ids
    // from the leader's allocator, leaving nothing for screening to catch.
    let mut gw = ProcessGateway::start(
        data_barrier(screening_only(mirror_config("crashscreen", &[&topic]))),
        &[("MIRRORGATE_CRASH_AFTER", "barrier_persisted")],
    );
    wait_mirroring(&gw.admin(), "crashscreen", 1);
    let ids = next_producer_ids(|n| gw.port_for(n));
    mirror_colliding_batches(&gw.mirror_bootstrap(), &topic, &ids);
    match crate::gw::try_admin_call(
        &gw.admin(),
        Method::POST,
        "/v1/mirrors/crashscreen/failover",
        None,
    ) {
        Ok((s, b)) => assert_eq!(s, 202, "{b}"),
        Err(e) => panic!("failover call failed: {e}"),
    }
    assert!(
        gw.wait_exit(Duration::from_secs(30)),
        "the crash hook did not fire:\n{}",
        gw.log()
    );
    gw.restart(&[]);
    wait_stopped(&gw.admin(), "crashscreen");
    let screen = screened_ids(&gw.config.state_dir);
    let missing: Vec<&i64> = ids.iter().filter(|i| !screen.contains(i)).collect();
    assert!(
        missing.is_empty(),
        "{} of {} mirrored producer ids lost from the screening set: {missing:?}",
        missing.len(),
        ids.len()
    );
    let mut acks = Vec::new();
    for _ in 0..3 {
        acks.extend(harness::produce_keyed(
            &gw.bootstrap(),
            &topic,
            50,
            &[("linger.ms", "0"), ("batch.num.messages", "1")],
        ));
    }
    assert!(
        process_metric(&gw, "mirrorgate_pid_screened_total") >= 1.0,
        "no producer id was screened"
    );
    assert_acked_after_barrier(&destination, &topic, &acks);
    assert_eq!(
        process_metric(&gw, "mirrorgate_duplicate_ack_guard_total"),
        0.0,
        "screening alone prevented the collisions"
    );
}

/// Review F10. Runs alone: the PID screening set is corrupted while the gateway is down, after a
/// failover. On start the gateway does not start empty: `/readyz` names the file, why, and the
/// recovery; local produce to the mirror's (STOPPED) topics is refused, plain topics are not.
#[test]
fn disruptive_a_corrupt_screening_set_keeps_the_gateway_unready_and_mirror_topics_read_only() {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("screen-corrupt");
    let plain = harness::unique_topic("screen-plain");
    harness::create_topic(&destination, &topic, 1, Some(&[1]));
    harness::create_topic(&destination, &plain, 1, Some(&[1]));
    let mut gw = ProcessGateway::start(mirror_config("screencorrupt", &[&topic]), &[]);
    wait_mirroring(&gw.admin(), "screencorrupt", 1);
    failover(&gw.admin(), "screencorrupt");
    wait_stopped(&gw.admin(), "screencorrupt");
    gw.kill9();
    let file = gw.config.state_dir.join("screen/pids.json");
    std::fs::create_dir_all(file.parent().expect("dir")).expect("screen dir");
    std::fs::write(&file, b"{\"8000\":{\"max_epoch\":0,\"last_tim").expect("corrupt");
    gw.restart_unready(&[]);
    let body = wait_unready_saying(&gw, "screen/pids.json");
    assert!(
        body.contains("docs/failover.md#recovering-the-pid-screening-set"),
        "{body}"
    );
    let mut local = RawConn::connect(&gw.bootstrap());
    let (code, _, msg) = local.produce_msg(&topic, 0, batch(-1, -1, -1, 1, "local"));
    assert_eq!(code, 44, "{msg}");
    assert!(msg.contains("screening"), "{msg}");
    let (code, _, msg) = local.produce_msg(&plain, 0, batch(-1, -1, -1, 1, "plain"));
    assert_eq!(code, 0, "{msg}");
    // The corrupt file is left as it was, for the operator.
    assert_eq!(
        std::fs::read(&file).expect("file"),
        b"{\"8000\":{\"max_epoch\":0,\"last_tim"
    );
}
