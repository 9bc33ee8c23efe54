//! Topologies: fan-out, a chain A → B → C, fan-in, and failback.

use super::*;

/// Wait until the mirror reports `partitions` MIRRORING partitions and every partition of `topic`
/// on `destination` holds exactly the source's records.
fn wait_equal(
    admin: &str,
    name: &str,
    source: &str,
    destination: &str,
    topic: &str,
    partitions: i32,
) {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let parts = partitions_json(admin, name);
        let ready =
            parts.len() == partitions as usize && parts.iter().all(|p| p["state"] == "MIRRORING");
        if ready
            && (0..partitions)
                .all(|p| kv(&read_log(source, topic, p)) == kv(&read_log(destination, topic, p)))
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "mirror {name} did not catch up: {parts:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn fan_out_a_to_b_and_a_to_c_fail_over_independently() {
    let source = harness::cluster("source");
    let b = harness::cluster("destination");
    let c = harness::cluster("third");
    let topic = harness::unique_topic("fanout");
    harness::create_topic(&source, &topic, 2, None);
    harness::produce_keyed(&source, &topic, 300, &[]);
    let gb = TestGateway::start(agent_config("fanb", &[&topic], &source));
    let mut cfg_c = agent_config("fanc", &[&topic], &source);
    cfg_c.destination.bootstrap = c.split(',').map(|s| s.trim().to_string()).collect();
    let gc = TestGateway::start(cfg_c);
    wait_equal(&gb.admin(), "fanb", &source, &b, &topic, 2);
    wait_equal(&gc.admin(), "fanc", &source, &c, &topic, 2);
    crate::failover::failover(&gb.admin(), "fanb");
    crate::failover::wait_stopped(&gb.admin(), "fanb");
    // The source keeps being written; C keeps mirroring, B does not.
    harness::produce_keyed(&source, &topic, 200, &[]);
    wait_equal(&gc.admin(), "fanc", &source, &c, &topic, 2);
    for p in 0..2 {
        assert!(
            read_log(&c, &topic, p).barriers.is_empty(),
            "C has no barrier: B's failover is B's alone"
        );
        let on_b = read_log(&b, &topic, p);
        assert_eq!(on_b.barriers.len(), 1);
        let barrier = on_b.barriers[0];
        let source_kv = kv(&read_log(&source, &topic, p));
        let before: Vec<_> = on_b
            .records
            .iter()
            .filter(|r| r.0 < barrier)
            .map(|(_, k, v)| (k.clone(), v.clone()))
            .collect();
        assert_eq!(
            before[..],
            source_kv[..before.len()],
            "B holds a prefix of the source before its barrier"
        );
        assert!(
            on_b.records.iter().all(|r| r.0 < barrier),
            "nothing mirrored into B after its barrier"
        );
    }
    let states: Vec<String> = partitions_json(&gc.admin(), "fanc")
        .iter()
        .map(|p| p["state"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(states, vec!["MIRRORING", "MIRRORING"]);
}

#[test]
fn chain_a_to_b_to_c_carries_b_s_barrier_inert_and_c_writes_its_own() {
    let source = harness::cluster("source");
    let b = harness::cluster("destination");
    let c = harness::cluster("third");
    let topic = harness::unique_topic("chain");
    harness::create_topic(&source, &topic, 1, None);
    harness::produce_keyed(&source, &topic, 200, &[]);
    // A → B through B's gateway; B → C through C's gateway, whose agent reads B directly.
    // Data barriers (the fallback form); the control form is in the next test.
    let gb = TestGateway::start(data_barrier(agent_config("chainb", &[&topic], &source)));
    wait_equal(&gb.admin(), "chainb", &source, &b, &topic, 1);
    let mut cfg_c = data_barrier(agent_config("chainc", &[&topic], &b));
    cfg_c.destination.bootstrap = c.split(',').map(|s| s.trim().to_string()).collect();
    let gc = TestGateway::start(cfg_c);
    wait_equal(&gc.admin(), "chainc", &b, &c, &topic, 1);
    // Failover at B: B writes its barrier; C mirrors it as data (inert there).
    crate::failover::failover(&gb.admin(), "chainb");
    crate::failover::wait_stopped(&gb.admin(), "chainb");
    let deadline = Instant::now() + Duration::from_secs(60);
    while crate::failover::read_log(&c, &topic, 0).barriers.is_empty() {
        assert!(Instant::now() < deadline, "B's barrier did not reach C");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        gc.metric(r#"mirrorgate_barriers_seen_total{kind="mirrored",mirror="chainc"}"#),
        1.0,
        "{}",
        gc.metrics()
    );
    let (_, body) = crate::gw::admin_call(&gc.admin(), Method::GET, "/v1/mirrors/chainc", None);
    assert!(
        body.contains("\"MIRRORING\": 1"),
        "C keeps mirroring: {body}"
    );
    // Local writes on B after its failover reach C too (C mirrors B).
    let local_b = harness::produce_keyed(&gb.bootstrap(), &topic, 50, &[]);
    assert_eq!(local_b.len(), 50);
    let local_b_keys: Vec<Option<String>> = local_b.iter().map(|a| Some(a.key.clone())).collect();
    wait_for(
        "B's local records in C's log, in B's order",
        Duration::from_secs(60),
        || {
            let on_c: Vec<Option<String>> = crate::failover::read_log(&c, &topic, 0)
                .records
                .into_iter()
                .map(|r| r.key)
                .filter(|k| k.as_deref().is_some_and(|k| k.starts_with("key-")))
                .collect();
            on_c.len() == 200 + local_b_keys.len() && on_c.ends_with(&local_b_keys)
        },
    );
    // Failover at C: C writes its own barrier after B's; local producers on C are safe.
    crate::failover::failover(&gc.admin(), "chainc");
    crate::failover::wait_stopped(&gc.admin(), "chainc");
    let log_c = crate::failover::read_log(&c, &topic, 0);
    let owners: Vec<&str> = log_c.barriers.iter().map(|(_, _, m)| m.as_str()).collect();
    assert_eq!(
        owners,
        vec!["chainb", "chainc"],
        "B's barrier (inert) then C's own"
    );
    let local_c = harness::produce_keyed(&gc.bootstrap(), &topic, 50, &[]);
    let after = crate::failover::read_log(&c, &topic, 0);
    let own_barrier = after.barriers[1].0;
    for a in &local_c {
        let r = after
            .records
            .iter()
            .find(|r| r.offset == a.offset)
            .expect("acked local record in C's log");
        assert_eq!(r.key.as_deref(), Some(a.key.as_str()));
        assert!(a.offset > own_barrier);
    }
}

#[test]
fn chain_with_control_barriers_carries_b_s_marker_to_c_and_c_fails_over_after_it() {
    let source = harness::cluster("source");
    let b = harness::cluster("destination");
    let c = harness::cluster("third");
    let topic = harness::unique_topic("chainctl");
    harness::create_topic(&source, &topic, 1, None);
    harness::produce_keyed(&source, &topic, 100, &[]);
    // Control barriers (the default): C's agent reproduces B's barrier as an ABORT marker.
    let gb = TestGateway::start(agent_config("ctlb", &[&topic], &source));
    wait_equal(&gb.admin(), "ctlb", &source, &b, &topic, 1);
    let mut cfg_c = agent_config("ctlc", &[&topic], &b);
    cfg_c.destination.bootstrap = c.split(',').map(|s| s.trim().to_string()).collect();
    let gc = TestGateway::start(cfg_c);
    wait_equal(&gc.admin(), "ctlc", &b, &c, &topic, 1);
    crate::failover::failover(&gb.admin(), "ctlb");
    crate::failover::wait_stopped(&gb.admin(), "ctlb");
    let on_b = crate::failover::read_log(&b, &topic, 0).control_batches;
    assert_eq!(on_b.len(), 1, "B's control barrier: {on_b:?}");
    wait_for("B's barrier marker on C", Duration::from_secs(60), || {
        crate::failover::read_log(&c, &topic, 0)
            .control_batches
            .len()
            == 1
    });
    let on_c = crate::failover::read_log(&c, &topic, 0).control_batches;
    assert_eq!(
        (on_c[0].offset, on_c[0].producer_id, on_c[0].abort),
        (on_b[0].offset, on_b[0].producer_id, true),
        "the same ABORT marker at the same offset"
    );
    // B's local writes still reach C after the marker, and C fails over after them.
    let local_b = harness::produce_keyed(&gb.bootstrap(), &topic, 20, &[]);
    assert_eq!(local_b.len(), 20);
    wait_equal(&gc.admin(), "ctlc", &b, &c, &topic, 1);
    crate::failover::failover(&gc.admin(), "ctlc");
    crate::failover::wait_stopped(&gc.admin(), "ctlc");
    let after = crate::failover::read_log(&c, &topic, 0);
    assert_eq!(
        after.control_batches.len(),
        2,
        "B's marker then C's own barrier"
    );
    assert!(after.control_batches[1].offset > on_c[0].offset + 20);
}

#[test]
fn fan_in_a_to_c_and_b_to_c_on_different_topics_are_independent() {
    let a = harness::cluster("source");
    let b = harness::cluster("destination");
    let c = harness::cluster("third");
    let ta = harness::unique_topic("fanin-a");
    let tb = harness::unique_topic("fanin-b");
    harness::create_topic(&a, &ta, 1, None);
    harness::create_topic(&b, &tb, 1, Some(&[1]));
    harness::produce_keyed(&a, &ta, 100, &[]);
    harness::produce_keyed(&b, &tb, 100, &[]);
    // One gateway in front of C with two mirrors, one per source.
    let mut cfg = agent_config("fromA", &[&ta], &a);
    let from_b = agent_config("fromB", &[&tb], &b).mirrors.remove(0);
    cfg.mirrors.push(from_b);
    cfg.destination.bootstrap = c.split(',').map(|s| s.trim().to_string()).collect();
    let gc = TestGateway::start(cfg);
    wait_equal(&gc.admin(), "fromA", &a, &c, &ta, 1);
    wait_equal(&gc.admin(), "fromB", &b, &c, &tb, 1);
    crate::failover::failover(&gc.admin(), "fromA");
    crate::failover::wait_stopped(&gc.admin(), "fromA");
    harness::produce_keyed(&b, &tb, 50, &[]);
    wait_equal(&gc.admin(), "fromB", &b, &c, &tb, 1);
    assert!(
        read_log(&c, &tb, 0).barriers.is_empty(),
        "B's topic on C is untouched by A's failover"
    );
    assert_eq!(read_log(&c, &ta, 0).barriers.len(), 1);
    // A topic fed by two mirrors is refused by the configuration check.
    let mut twice = agent_config("one", &[&ta], &a);
    twice
        .mirrors
        .push(agent_config("two", &[&ta], &b).mirrors.remove(0));
    let yaml = mirrorgate::config::render_effective(&twice);
    let err =
        mirrorgate::config::load_str(&yaml, "fan-in.yaml").expect_err("one topic, two mirrors");
    let err = err.to_string();
    assert!(
        err.contains(&format!("topic `{ta}` is already claimed by mirror `one`")),
        "{err}"
    );
}

#[test]
fn failback_a_mirrors_from_b_after_b_s_failover_and_fails_over_in_turn() {
    let a = harness::cluster("source");
    let b = harness::cluster("destination");
    let topic = harness::unique_topic("failback");
    harness::create_topic(&a, &topic, 1, None);
    harness::produce_keyed(&a, &topic, 100, &[]);
    // A → B, then B fails over and takes local writes.
    // Data barriers (the fallback form); the control form is in the next test.
    let gb = TestGateway::start(data_barrier(agent_config("toB", &[&topic], &a)));
    wait_equal(&gb.admin(), "toB", &a, &b, &topic, 1);
    crate::failover::failover(&gb.admin(), "toB");
    crate::failover::wait_stopped(&gb.admin(), "toB");
    let local_b = harness::produce_keyed(&gb.bootstrap(), &topic, 50, &[]);
    assert_eq!(local_b.len(), 50);
    // A gateway in front of A mirrors from B: A's log is B's prefix (aligned), so the agent
    // continues from there; B's barrier reaches A and is inert there.
    let mut cfg = data_barrier(agent_config("toA", &[&topic], &b));
    cfg.destination.bootstrap = a.split(',').map(|s| s.trim().to_string()).collect();
    let ga = TestGateway::start(cfg);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let on_a = crate::failover::read_log(&a, &topic, 0);
        let on_b = crate::failover::read_log(&b, &topic, 0);
        if on_a.records.len() == on_b.records.len() && on_a.barriers.len() == 1 {
            assert_eq!(
                kv(&read_log(&a, &topic, 0)),
                kv(&read_log(&b, &topic, 0)),
                "A equals B record by record"
            );
            break;
        }
        let parts = partitions_json(&ga.admin(), "toA");
        assert!(
            Instant::now() < deadline,
            "A did not catch up with B: {parts:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        ga.metric(r#"mirrorgate_barriers_seen_total{kind="mirrored",mirror="toA"}"#),
        1.0
    );
    // B's barrier did not clear A's producer state: B's local producer is still tracked.
    let producers = crate::psm_differential::gateway_producers(&ga.admin(), &topic, 0);
    assert!(
        !producers.is_empty(),
        "A's PSM keeps the producers mirrored from B"
    );
    // A fails over in turn: its own barrier follows B's; local producers on A lose nothing.
    crate::failover::failover(&ga.admin(), "toA");
    crate::failover::wait_stopped(&ga.admin(), "toA");
    let log_a = crate::failover::read_log(&a, &topic, 0);
    let owners: Vec<&str> = log_a.barriers.iter().map(|(_, _, m)| m.as_str()).collect();
    assert_eq!(owners, vec!["toB", "toA"]);
    let local_a = harness::produce_keyed(&ga.bootstrap(), &topic, 50, &[]);
    let after = crate::failover::read_log(&a, &topic, 0);
    for r in &local_a {
        let found = after
            .records
            .iter()
            .find(|x| x.offset == r.offset)
            .expect("acked record in A's log");
        assert_eq!(found.key.as_deref(), Some(r.key.as_str()));
        assert!(r.offset > after.barriers[1].0);
    }
    // The full cycle: B starts mirroring from A again (its log is A's prefix: aligned).
    let (status, body) =
        crate::gw::admin_call(&gb.admin(), Method::POST, "/v1/mirrors/toB/start", None);
    assert_eq!(status, 202, "{body}");
    let (status, body) =
        crate::gw::admin_call(&gb.admin(), Method::POST, "/v1/mirrors/toB/start", None);
    assert_eq!(status, 409, "nothing left to start: {body}");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let on_a = crate::failover::read_log(&a, &topic, 0);
        let on_b = crate::failover::read_log(&b, &topic, 0);
        if on_a.records.len() == on_b.records.len() {
            assert_eq!(
                kv(&read_log(&a, &topic, 0)),
                kv(&read_log(&b, &topic, 0)),
                "B equals A again"
            );
            let owners: Vec<&str> = on_b.barriers.iter().map(|(_, _, m)| m.as_str()).collect();
            assert_eq!(
                owners,
                vec!["toB", "toA"],
                "A's barrier reached B, inert there"
            );
            break;
        }
        let parts = partitions_json(&gb.admin(), "toB");
        assert!(
            Instant::now() < deadline,
            "B did not catch up with A after start: {parts:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let states: Vec<String> = partitions_json(&gb.admin(), "toB")
        .iter()
        .map(|p| p["state"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(states, vec!["MIRRORING"]);
}
