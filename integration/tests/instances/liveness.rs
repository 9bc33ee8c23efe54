//! Who counts as alive, and who may hold a lease, on the bad days of the second review: an
//! instance whose wall clock is off (G5), one that can write the state topic but not read it
//! (G10), and two processes started with one instance id (G12).

use super::*;

/// An instance whose wall clock lags the others' by more than ten session timeouts (its
/// heartbeats carry its own time) is still alive to them: liveness is judged by when a
/// heartbeat was read, never by the writer's clock. A failover through another instance waits
/// for its fence, and none of its mirror writes lands after the barrier.
#[test]
fn an_instance_whose_clock_lags_is_waited_for_and_none_of_its_mirror_writes_lands_after_the_barrier(
) {
    let topic = mirror_topic("peers-skew");
    let state_topic = harness::unique_topic("peers-skew-state");
    let cfg = |id: &str| instance_config("skew", &topic, id, &state_topic);
    init_state_topic(&cfg("a"));
    let a = TestGateway::start(cfg("a"));
    let lag = format!("-{}", 10 * SESSION_MS + 5_000);
    let x = ProcessGateway::start(
        cfg("x"),
        &[("MIRRORGATE_TEST_PEER_CLOCK_SKEW_MS", lag.as_str())],
    );
    wait_others_alive(&x.admin(), 1);
    wait_others_alive(&a.admin(), 1);
    let stop = Arc::new(AtomicBool::new(false));
    let pid = 8_100_000 + (std::process::id() as i64 % 1000) * 10;
    let writer = write_mirror_batches(x.mirror_bootstrap(), topic.clone(), pid, stop.clone());
    std::thread::sleep(Duration::from_millis(500));
    failover(&a.admin(), "skew");
    wait_stopped(&[a.admin()], "skew");
    let fenced = wait_fenced_by(&a.admin(), "skew", &["x"]);
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::SeqCst);
    let (acked, _) = writer.join().expect("writer");
    assert!(
        !acked.is_empty(),
        "mirror writes through x before the failover"
    );
    let barrier = reported_barrier(&a.admin(), "skew", &topic);
    let late: Vec<&i64> = acked.iter().filter(|o| **o >= barrier).collect();
    assert!(
        late.is_empty(),
        "mirror writes acknowledged through x after a's barrier at {barrier}: {late:?} ({fenced})"
    );
    assert!(
        data_after(&topic, barrier).is_empty(),
        "data after the barrier at {barrier}"
    );
}

/// An instance whose principal may append to the state topic but not read it (an ACL denies
/// READ only) never learns of a failover, so it can never acknowledge one. It must not look
/// alive to the others: it stops heartbeating while it cannot read, and a failover through
/// another instance waits it out within the session timeout and completes.
#[test]
fn an_instance_that_may_write_but_not_read_the_state_topic_does_not_hold_up_a_failover() {
    let (authz, topic, state_topic, [a, b], c) = three_in_front_of_authz("wonly");
    let _denied = DeniedTopic::with_acls(
        &authz,
        &state_topic,
        "User:alice",
        &[
            (ACL_WRITE, ACL_ALLOW),
            (ACL_DESCRIBE, ACL_ALLOW),
            (ACL_READ, ACL_DENY),
        ],
    );
    // Its lease lapses (it cannot read to the end): not ready, naming the state topic.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, body) = c.call(hyper::Method::GET, "/readyz");
        if status == 503 && body.contains(&state_topic) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "c stays ready without reading its state topic: {status} {body}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let called = Instant::now();
    failover(&b.admin(), "wonly");
    let deadline = called + Duration::from_secs(30);
    loop {
        let m = mirror_json(&b.admin(), "wonly");
        if m["partitions"].as_u64().is_some_and(|n| n > 0)
            && m["states"]["STOPPED"] == m["partitions"]
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the failover through b waits for c, which cannot read the state topic: {m}\n{}",
            instances(&b.admin())
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    crate::failover::wait_stopped(&a.admin(), "wonly");
    let barrier = reported_barrier(&b.admin(), "wonly", &topic);
    let (code, offset, msg) =
        RawConn::connect(&a.bootstrap()).produce_msg(&topic, 0, batch(-1, -1, -1, 1, "local"));
    assert_eq!(code, 0, "a local write through a after the failover: {msg}");
    assert!(offset > barrier, "{offset} after the barrier {barrier}");
}

/// A second process started with an instance id that a running instance already has (a
/// copy-pasted configuration, a replaced pod whose container still runs) cannot be told apart
/// by its id. It must take no lease: it is not ready and says why, and refuses mirror writes,
/// while the first keeps its lease and admits them.
#[test]
fn a_second_process_with_a_running_instances_id_takes_no_lease_and_says_so() {
    let topic = mirror_topic("peers-twin");
    let state_topic = harness::unique_topic("peers-twin-state");
    let cfg = |id: &str| instance_config("twin", &topic, id, &state_topic);
    init_state_topic(&cfg("a"));
    let a = TestGateway::start(cfg("a"));
    let b = TestGateway::start(cfg("b"));
    wait_others_alive(&a.admin(), 1);
    let twin = ProcessGateway::start_unready(cfg("a"), &[]);
    // Long enough for the twin to read the state topic, heartbeat and take a lease, and for
    // both to read each other's heartbeats several times.
    std::thread::sleep(Duration::from_millis(3 * SESSION_MS));
    let (status, body) = twin.call(hyper::Method::GET, "/readyz");
    assert_eq!(
        status, 503,
        "a second process with instance id a is ready: {body}"
    );
    assert!(
        body.contains("instance id") && body.contains("another process"),
        "the reason names the duplicate id: {body}"
    );
    let pid = 8_200_000 + (std::process::id() as i64 % 1000) * 10;
    let (code, _, msg) = RawConn::connect(&twin.mirror_bootstrap()).produce_msg(
        &topic,
        0,
        batch(pid, 0, 0, 1, "twin"),
    );
    assert_ne!(code, 0, "a mirror write through the twin was admitted");
    // The first process keeps its lease and admits mirror writes; b sees one instance a.
    assert_eq!(
        instances(&a.admin())["lease"],
        "held",
        "{}",
        instances(&a.admin())
    );
    let (code, _, msg2) =
        RawConn::connect(&a.mirror_bootstrap()).produce_msg(&topic, 0, batch(pid, 0, 0, 1, "a"));
    assert_eq!(
        code, 0,
        "a mirror write through the first a: {msg2} (twin: {msg})"
    );
    wait_others_alive(&b.admin(), 1);
}

/// Found by the chaos run (seed 21, a rolling restart while a destination broker was down): a
/// process started again with its instance id read its previous process's last heartbeat after
/// a read that seemed to have reached the state topic's end, took it for a second process
/// running with its id, and gave way to it (not ready, no lease, for 20 s). A heartbeat that
/// the log holds before this process's own first heartbeat was written before it started: it
/// is never a twin. Here the late heartbeat is appended by the test between the process's
/// first read to the end and its first heartbeat (held by the test hook
/// `MIRRORGATE_TEST_HOLD_HEARTBEATS_WHILE`).
#[test]
fn a_previous_processs_heartbeat_read_late_is_not_taken_for_a_second_process() {
    use mirrorgate::instances::log::StateLog;
    use mirrorgate::instances::view::PeerRecord;
    let topic = mirror_topic("peers-late-hb");
    let state_topic = harness::unique_topic("peers-late-hb-state");
    let cfg = instance_config("latehb", &topic, "a", &state_topic);
    init_state_topic(&cfg);
    let hold_dir = tempfile::tempdir().expect("temp dir");
    let hold = hold_dir.path().join("hold-heartbeats");
    std::fs::write(&hold, b"").expect("hold file");
    let hold_env = hold.to_str().expect("utf-8 path").to_string();
    let a = ProcessGateway::start_unready(
        cfg.clone(),
        &[("MIRRORGATE_TEST_HOLD_HEARTBEATS_WHILE", &hold_env)],
    );
    // a reads the state topic to its end (every 100 ms) and writes no heartbeat yet.
    std::thread::sleep(Duration::from_secs(2));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let log = super::state_log(&cfg, &state_topic).await;
        log.append(&PeerRecord::Heartbeat {
            instance: "a".into(),
            at_ms: 0,
            agents: vec![],
            incarnation: Some("the-previous-process".into()),
            forward: vec![],
        })
        .await
        .expect("the previous process's heartbeat appended");
    });
    std::thread::sleep(Duration::from_secs(1));
    std::fs::remove_file(&hold).expect("hold file removed");
    let deadline = Instant::now() + Duration::from_millis(4 * SESSION_MS);
    loop {
        let (status, body) = a.call(hyper::Method::GET, "/readyz");
        assert!(
            !body.contains("another process"),
            "a took its previous process's heartbeat for a second process: {body}"
        );
        if status == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "a not ready: {body}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A partition (leader broker 1, follower broker 2) of mirror `name`, instance x (a process) and
/// y (in this test) on a state topic on broker 1 alone, and two mirror writes of x pipelined on
/// one connection to the leader while the follower is stalled: the first waits in the leader's
/// purgatory, the second queues unread behind it and is appended once the follower leaves the
/// in-sync replicas — late, whatever has happened to x meanwhile.
struct QueuedAtTheLeader {
    name: &'static str,
    destination: String,
    topic: String,
    x: ProcessGateway,
    y: TestGateway,
    pid: i64,
    stalled: crate::faults::Paused,
    _conn: std::net::TcpStream,
}

impl QueuedAtTheLeader {
    fn start(name: &'static str, pid_base: i64) -> QueuedAtTheLeader {
        use std::io::Write;
        let destination = harness::cluster("destination");
        let topic = harness::unique_topic(&format!("peers-{name}"));
        harness::create_topic_with_assignment(&destination, &topic, &[&[1, 2]]);
        // The state topic on broker 1 alone: stalling broker 2 must not take the leases away.
        let state_topic = harness::unique_topic(&format!("peers-{name}-state"));
        harness::create_topic_with_assignment(&destination, &state_topic, &[&[1]]);
        crate::sync::alter_topic_config(
            &destination,
            &state_topic,
            "cleanup.policy",
            Some("compact"),
        );
        let cfg = |id: &str| instance_config(name, &topic, id, &state_topic);
        let x = ProcessGateway::start(cfg("x"), &[]);
        let y = TestGateway::start(cfg("y"));
        wait_others_alive(&y.admin(), 1);
        let pid = pid_base + (std::process::id() as i64 % 1000) * 10;
        let (code, _, msg) = RawConn::connect(&x.mirror_bootstrap()).produce_msg(
            &topic,
            0,
            batch(pid, 0, 0, 1, "m0"),
        );
        assert_eq!(code, 0, "a mirror write through x: {msg}");
        let stalled = crate::faults::Paused::pause("destination", "2");
        let mut conn = std::net::TcpStream::connect(x.mirror_bootstrap()).expect("connect x");
        let mut frames = Vec::new();
        for (corr, seq) in [(1, 1), (2, 2)] {
            let req = crate::wire::produce_request(
                &topic,
                0,
                -1,
                batch(pid, 0, seq, 1, &format!("queued{seq}")),
            );
            frames.extend_from_slice(&crate::wire::request_frame(
                kafka_protocol::messages::ApiKey::Produce,
                9,
                corr,
                &req,
            ));
        }
        conn.write_all(&frames).expect("pipelined mirror writes");
        std::thread::sleep(Duration::from_millis(500));
        QueuedAtTheLeader {
            name,
            destination,
            topic,
            x,
            y,
            pid,
            stalled,
            _conn: conn,
        }
    }

    /// Fail over through y, let the follower back, and check that none of x's mirror writes
    /// lies after the last barrier (the one y reports); `queued2` landed somewhere.
    fn fail_over_through_y_and_check(mut self) {
        failover(&self.y.admin(), self.name);
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let m = mirror_json(&self.y.admin(), self.name);
            if m["states"]["STOPPED"] == 1 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the failover through y did not complete: {m}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        drop(self.stalled);
        self.x.kill9();
        // Anything of x's that could still land has landed: the follower is back in sync.
        std::thread::sleep(Duration::from_secs(2));
        let log = read_log(&self.destination, &self.topic, 0);
        let last = log.barriers.iter().map(|b| b.0).max().expect("a barrier");
        assert_eq!(
            reported_barrier(&self.y.admin(), self.name, &self.topic),
            last,
            "{:?}",
            log.barriers
        );
        let of_x = |after: i64| -> Vec<String> {
            let mine = log.records.iter().filter(|r| r.producer_id == self.pid);
            mine.filter(|r| r.offset > after)
                .map(|r| format!("{}@{}", r.value.clone().unwrap_or_default(), r.offset))
                .collect()
        };
        assert!(
            of_x(-1).iter().any(|r| r.starts_with("queued2")),
            "the queued write never landed: the scenario did not happen: {:?}",
            of_x(-1)
        );
        let after = of_x(last);
        assert!(
            after.is_empty(),
            "mirror writes of x after the last barrier at {last}: {after:?}"
        );
    }
}

/// Review G1. x, with two mirror writes queued at the leader ([`QueuedAtTheLeader`]), is paused,
/// and a failover through y waits it out (it is not fenced) and writes its barrier; x's second
/// write is appended after it. The failover re-reads every partition after its barrier when it
/// waited an instance out, and writes a new barrier after what landed: nothing mirrored lies
/// after the last one.
#[test]
fn disruptive_a_mirror_write_queued_at_a_waited_out_instance_never_lands_after_the_barrier() {
    let q = QueuedAtTheLeader::start("queued", 8_500_000);
    signal(q.x.pid().expect("x runs"), libc::SIGSTOP);
    q.fail_over_through_y_and_check();
}

/// Found by the simulation (S1, seed 189): x, with two mirror writes queued at the leader, is
/// killed and started again with its id; the new process acknowledges the failover's fence for
/// the id, while the old one's second write is appended after the barrier. The driver settles
/// for the previous process's lease and re-reads the log behind its barrier.
#[test]
fn disruptive_a_mirror_write_queued_by_a_killed_instance_never_lands_after_the_barrier_when_it_restarts(
) {
    let mut q = QueuedAtTheLeader::start("restarted", 8_600_000);
    q.x.kill9();
    q.x.restart_unready(&[]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while instances(&q.x.admin())["lease"] != "held" {
        assert!(Instant::now() < deadline, "the new x holds no lease");
        std::thread::sleep(Duration::from_millis(100));
    }
    q.fail_over_through_y_and_check();
}

/// Found by the simulation (S2, seed 1467): x, with two mirror writes queued at the leader, went
/// silent (paused) shortly before the failover: when its wait begins x is no longer alive, so
/// no barrier waits for it, yet its lease ended less than the settle time before. The driver
/// settles for an instance gone lately that did not acknowledge the failover.
#[test]
fn disruptive_a_mirror_write_queued_by_an_instance_gone_just_before_the_failover_never_lands_after_the_barrier(
) {
    let q = QueuedAtTheLeader::start("gone", 8_700_000);
    signal(q.x.pid().expect("x runs"), libc::SIGSTOP);
    // Gone for y (a session and the margin after its last heartbeat read), within the settle.
    let deadline = Instant::now() + Duration::from_secs(30);
    while instances(&q.y.admin())["others_alive"]
        .as_array()
        .is_some_and(|a| !a.is_empty())
    {
        assert!(Instant::now() < deadline, "x still alive for y after 30 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    q.fail_over_through_y_and_check();
}

/// Found by the simulation with twins (S4, seed 2847): a process started while another with its
/// instance id was paused for less than a session read none of that one's heartbeats after its
/// own, took a lease after the short grace, and the paused one resumed still holding its own:
/// two lease holders with one id, both running what the id owns. A process that has read a
/// heartbeat of its id written by another process takes its first lease only a session plus the
/// margin after its own first heartbeat, when the other's lease has ended; the one that resumes
/// in between keeps its lease and the newcomer yields. Here a runs (session 15 s), is stopped
/// (SIGSTOP) for 9 s, and a second process with id a starts right after the stop.
#[test]
fn a_process_started_while_another_with_its_id_is_paused_takes_no_lease_beside_it() {
    let topic = mirror_topic("peers-twin-pause");
    let state_topic = harness::unique_topic("peers-twin-pause-state");
    let cfg = |id: &str| {
        let mut c = instance_config("twinpause", &topic, id, &state_topic);
        if let Some(i) = c.instances.as_mut() {
            i.session_timeout_ms = 15_000;
        }
        c
    };
    init_state_topic(&cfg("a"));
    let a = ProcessGateway::start(cfg("a"), &[]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while instances(&a.admin())["lease"] != "held" {
        assert!(Instant::now() < deadline, "a holds no lease after 60 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    let pid = a.pid().expect("a runs");
    signal(pid, libc::SIGSTOP);
    let stopped = Instant::now();
    let twin = ProcessGateway::start_unready(cfg("a"), &[]);
    std::thread::sleep(Duration::from_secs(9).saturating_sub(stopped.elapsed()));
    signal(pid, libc::SIGCONT);
    let mut both = Vec::new();
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until {
        let (sa, st) = (instances(&a.admin()), instances(&twin.admin()));
        if sa["lease"] == "held" && st["lease"] == "held" {
            both.push(st);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        both.is_empty(),
        "two processes with instance id a held a lease at once, {} times in 10 s (the second: {})",
        both.len(),
        both[0]
    );
    assert_eq!(instances(&a.admin())["lease"], "held", "a kept its lease");
    let (status, body) = twin.call(hyper::Method::GET, "/readyz");
    assert_eq!(status, 503, "the second process is ready: {body}");
    assert!(body.contains("another process"), "{body}");
}

/// Review G6, found by the simulation (seed 445, S5): the state topic is deleted and created
/// again while instance x is cut off from it, holding a lease read from the old one and
/// admitting mirror writes. The new log does not show x, so a failover through a, once a holds
/// a lease on the new log, would wait for nobody. a's first lease on a replaced state topic
/// waits until every lease read from the old one has ended (a session, the margin and the
/// settle after its first heartbeat): no mirror write of x lands after the barrier.
#[test]
fn a_failover_after_the_state_topic_was_replaced_waits_out_an_instance_cut_off_from_it() {
    let topic = mirror_topic("peers-replaced");
    let state_topic = harness::unique_topic("peers-replaced-state");
    // A session long enough that x's lease outlives a's first lease on the new log under the
    // grace of a fresh start (a quarter session and the margin after a's first heartbeat), as
    // it did before the fix; a short settle keeps the wait after the fix short.
    let cfg = |id: &str| {
        let mut c = instance_config("replaced", &topic, id, &state_topic);
        if let Some(i) = c.instances.as_mut() {
            i.session_timeout_ms = 20_000;
        }
        c.limits.unknown_outcome_settle_ms = 1_000;
        c
    };
    init_state_topic(&cfg("a"));
    let cut = std::env::temp_dir().join(format!(
        "mirrorgate-test-cut-{}-{}",
        std::process::id(),
        harness::unique_topic("x")
    ));
    let cut_env = cut.to_string_lossy().to_string();
    let a = ProcessGateway::start(cfg("a"), &[]);
    let x = ProcessGateway::start(
        cfg("x"),
        &[(
            "MIRRORGATE_TEST_CUT_OFF_STATE_TOPIC_WHILE",
            cut_env.as_str(),
        )],
    );
    wait_others_alive(&a.admin(), 1);
    wait_others_alive(&x.admin(), 1);
    let stop = Arc::new(AtomicBool::new(false));
    let pid = 8_400_000 + (std::process::id() as i64 % 1000) * 10;
    // One mirror write every half second: a write landing after the barrier's own settle
    // re-read is not seen by it (a steady stream would keep landing within it, and the barrier
    // would be written again after it until x's lease had ended).
    let writer = write_mirror_batches_every(
        x.mirror_bootstrap(),
        topic.clone(),
        pid,
        stop.clone(),
        Duration::from_millis(500),
    );
    std::thread::sleep(Duration::from_millis(2_000));
    // x is cut off from the state topic, which is then replaced.
    std::fs::write(&cut, b"").expect("cut file");
    let cut_at = Instant::now();
    let destination = harness::cluster("destination");
    crate::agent::divergence::delete_topic_directly(&destination, &state_topic);
    let deadline = Instant::now() + Duration::from_secs(30);
    while harness::try_partition_leaders(&destination, &state_topic).is_ok() {
        assert!(Instant::now() < deadline, "the state topic never went");
        std::thread::sleep(Duration::from_millis(100));
    }
    init_state_topic(&cfg("a"));
    let replaced = Instant::now();
    // a reads the new log, which does not show x.
    let deadline = Instant::now() + Duration::from_secs(30);
    while instances(&a.admin())["others_alive"]
        .as_array()
        .is_none_or(|o| !o.is_empty())
    {
        assert!(Instant::now() < deadline, "a never forgot x");
        std::thread::sleep(Duration::from_millis(100));
    }
    // The failover through a, once a holds a lease on the new log.
    let deadline = Instant::now() + Duration::from_secs(60);
    while instances(&a.admin())["lease"] != "held" {
        assert!(
            Instant::now() < deadline,
            "a never held a lease on the new log"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let accepted = loop {
        let (status, body) = admin_call(
            &a.admin(),
            hyper::Method::POST,
            "/v1/mirrors/replaced/failover",
            None,
        );
        if status == 202 {
            break replaced.elapsed();
        }
        assert!(
            Instant::now() < deadline,
            "the failover was never taken: {status} {body}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    wait_stopped(&[a.admin()], "replaced");
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::SeqCst);
    let (acked, refused) = writer.join().expect("writer");
    let _ = std::fs::remove_file(&cut);
    let barrier = reported_barrier(&a.admin(), "replaced", &topic);
    println!(
        "state topic created again {:.1} s after x was cut off; failover taken {:.1} s after that; {} mirror writes acknowledged through x, {} refused (first: {:?}); barrier at {barrier}",
        (replaced - cut_at).as_secs_f64(),
        accepted.as_secs_f64(),
        acked.len(),
        refused.len(),
        refused.first()
    );
    assert!(
        !acked.is_empty(),
        "mirror writes through x before the failover"
    );
    let late = data_after(&topic, barrier);
    let acked_after: Vec<&i64> = acked.iter().filter(|o| **o >= barrier).collect();
    assert!(
        late.is_empty() && acked_after.is_empty(),
        "mirror writes of x landed after the barrier at {barrier}: offsets {late:?} (acknowledged to the writer: {acked_after:?})"
    );
}
