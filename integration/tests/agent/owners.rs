//! The built-in agent configured on several instances: exactly one runs it, chosen and fenced
//! through the state topic; when that instance is killed another one takes the agent over and
//! resumes from the offset maps the first one published.

use super::*;
use crate::gw::ProcessGateway;
use mirrorgate::config::InstancesConfig;

/// The agent's entry of mirror `name` in `GET /v1/instances` of the instance at `admin`.
pub(super) fn agent_status(admin: &str, name: &str) -> serde_json::Value {
    let (status, body) = admin_call(admin, Method::GET, "/v1/instances", None);
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("json");
    v["agents"]
        .as_array()
        .and_then(|a| a.iter().find(|m| m["mirror"] == name).cloned())
        .unwrap_or_default()
}

/// The configuration of instance `id` of mirror `name`, with the agent of `topics` from
/// `source`, on a state topic created here (session timeout 3 s; `tweak` adjusts it).
pub(super) fn instance_configs(
    name: &str,
    topics: &[&str],
    source: &str,
    tweak: impl Fn(&mut mirrorgate::config::Config),
) -> impl Fn(&str) -> mirrorgate::config::Config {
    let state_topic = harness::unique_topic(&format!("{name}-state"));
    let (name, source) = (name.to_string(), source.to_string());
    let topics: Vec<String> = topics.iter().map(|t| t.to_string()).collect();
    let cfg = move |id: &str| {
        let topics: Vec<&str> = topics.iter().map(String::as_str).collect();
        let mut cfg = agent_config(&name, &topics, &source);
        cfg.instances = Some(InstancesConfig {
            id: id.into(),
            state_topic: state_topic.clone(),
            session_timeout_ms: 3000,
        });
        tweak(&mut cfg);
        cfg
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(mirrorgate::app::peers::init_state_topic(&cfg("a")))
        .expect("state topic created");
    cfg
}

/// Instances a (a `mirrorgate run` process, with `env`) and b (in this process) of mirror
/// `name`, each with the agent of `topics` from `source`, sharing a new state topic (session
/// timeout 3 s; `tweak` adjusts both configurations). Returns once b reads that a runs the
/// agent.
fn two_instances_with_the_agent(
    name: &str,
    topics: &[&str],
    source: &str,
    tweak: impl Fn(&mut mirrorgate::config::Config),
    env: &[(&str, &str)],
) -> (ProcessGateway, TestGateway) {
    let cfg = instance_configs(name, topics, source, tweak);
    let a = ProcessGateway::start(cfg("a"), env);
    let b = TestGateway::start(cfg("b"));
    wait_for("a runs the agent", Duration::from_secs(30), || {
        let s = agent_status(&b.admin(), name);
        s["owner"] == "a" && s["runs_here"] == false
    });
    (a, b)
}

/// Two instances with the agent of the same mirror, over an idempotent and a plain (no producer
/// id) source producer. The source's first records are deleted before mirroring starts, so the
/// destination's offsets are not the source's: only the offset maps say where to resume. The
/// first instance runs the agent; it is killed (SIGKILL) while both producers write. The second
/// takes the agent over, and every source record ends up on the destination once, in order.
#[test]
fn the_agents_owner_killed_during_mirroring_is_taken_over_without_duplicating_or_losing_a_batch() {
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let idempotent = harness::unique_topic("owner-idem");
    let plain = harness::unique_topic("owner-plain");
    for t in [&idempotent, &plain] {
        harness::create_topic(&source, t, 1, None);
    }
    SourceWriter::start(&source, &idempotent, "gone", 5, 2000).finish(false);
    SourceWriter::start_without_producer_id(&source, &plain, "gone", 5, 2000).finish(false);
    for t in [&idempotent, &plain] {
        crate::protection::delete_records_on_the_broker(&source, t, 0, 5);
    }
    let (mut a, b) =
        two_instances_with_the_agent("owners", &[&idempotent, &plain], &source, |_| {}, &[]);
    let idem_writer = SourceWriter::start(&source, &idempotent, "idem", 3000, 300);
    let plain_writer = SourceWriter::start_without_producer_id(&source, &plain, "plain", 3000, 300);
    wait_for(
        "records mirrored through a",
        Duration::from_secs(30),
        || log_end(&destination, &idempotent, 0) > 700 && log_end(&destination, &plain, 0) > 700,
    );
    assert_eq!(
        agent_map_next(&b, "owners", &idempotent, 0),
        None,
        "b ran the agent while a did"
    );
    a.kill9();
    let killed_at = log_end(&destination, &idempotent, 0);
    let sent = (idem_writer.finish(false), plain_writer.finish(false));
    wait_for("b runs the agent", Duration::from_secs(30), || {
        let s = agent_status(&b.admin(), "owners");
        s["owner"] == "b" && s["runs_here"] == true && s["epoch"] == 2
    });
    wait_for(
        "the destination holds the source's records once, in order",
        Duration::from_secs(90),
        || {
            partitions_json(&b.admin(), "owners")
                .iter()
                .all(|p| p["state"] == "MIRRORING" && p["lag_records"] == 0)
                && [&idempotent, &plain]
                    .iter()
                    .all(|t| kv(&read_log(&source, t, 0)) == kv(&read_log(&destination, t, 0)))
        },
    );
    // Every record the source holds is on the destination once, in the source's order (the
    // wait compared the logs record by record), and b's map ends at the source's end: the
    // source offset 5 + n is the destination offset n.
    for (t, n) in [(&idempotent, sent.0), (&plain, sent.1)] {
        assert_eq!(read_log(&destination, t, 0).records.len(), n, "{t}");
        assert_eq!(
            agent_map_next(&b, "owners", t, 0),
            Some((5 + n as i64, n as i64)),
            "{t}"
        );
    }
    assert!(
        killed_at < sent.0 as i64,
        "a was killed only after mirroring everything"
    );
    wait_for(
        "b's gauge says the agent runs there",
        Duration::from_secs(10),
        || b.metric("mirrorgate_agent_runs_here{mirror=\"owners\"}") == 1.0,
    );
}

/// Defect P1 (chaos campaign, seed 16): an instance that takes the agent over has only seen
/// the mirror writes that went through itself. Twenty one-shot idempotent producers (one
/// batch each, never again) write to the source after both instances' producer state was
/// built; a mirrors them and is killed; b takes the agent over. b's producer state must then
/// hold every producer the destination's leader holds, as DescribeProducers lists them.
#[test]
fn the_instance_taking_the_agent_over_holds_the_producers_mirrored_through_the_previous_owner() {
    use crate::psm_differential::{batch, broker_producers, gateway_producers, RawConn};
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("owner-psm");
    harness::create_topic(&source, &topic, 1, None);
    let (mut a, b) = two_instances_with_the_agent("ownerpsm", &[&topic], &source, |_| {}, &[]);
    crate::failover::wait_mirroring(&b.admin(), "ownerpsm", 1);
    crate::psm_differential::wait_tracked_ready(&b, &topic);
    let mut src = RawConn::connect(&leader_addr(&source, &topic, 0));
    for pid in 70_001..=70_020 {
        let (code, _) = src.produce(&topic, 0, batch(pid, 0, 0, 2, "one-shot"));
        assert_eq!(code, 0, "producer {pid} on the source");
    }
    wait_for("a mirrored the 40 records", Duration::from_secs(30), || {
        log_end(&destination, &topic, 0) == 40
    });
    a.kill9();
    wait_for("b runs the agent", Duration::from_secs(30), || {
        let s = agent_status(&b.admin(), "ownerpsm");
        s["owner"] == "b" && s["runs_here"] == true
    });
    let mut leader = RawConn::connect(&leader_addr(&destination, &topic, 0));
    let on_leader = broker_producers(&mut leader, &topic, 0);
    assert_eq!(on_leader.len(), 20, "{on_leader:?}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let in_psm = gateway_producers(&b.admin(), &topic, 0);
        if in_psm == on_leader {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "b's producer state, 30 s after it took the agent over:\n{in_psm:?}\nthe leader's:\n{on_leader:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Config sync of a mirror whose agent is configured on two instances runs on the agent's
/// owner alone (the other says why it stands by, and counts no round), and moves with the
/// agent: once the owner is killed, the instance that takes the agent over syncs a later
/// source change.
#[test]
fn config_sync_runs_on_the_agents_owner_alone_and_moves_with_the_agent() {
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("owner-cfg");
    harness::create_topic(&source, &topic, 1, None);
    let (mut a, b) = two_instances_with_the_agent(
        "ownercfg",
        &[&topic],
        &source,
        |c| c.mirrors[0].configs.sync_interval_ms = 1000,
        &[],
    );
    let synced = |value: &str| {
        wait_for(
            &format!("the destination's retention.ms is {value}"),
            Duration::from_secs(30),
            || {
                crate::sync::topic_config(&destination, &topic, "retention.ms").as_deref()
                    == Some(value)
            },
        )
    };
    crate::failover::wait_mirroring(&b.admin(), "ownercfg", 1);
    crate::sync::alter_topic_config(&source, &topic, "retention.ms", Some("7200000"));
    synced("7200000");
    let standby = crate::failover::mirror_json(&b.admin(), "ownercfg")["config_sync"].clone();
    assert!(
        standby["standby"]
            .as_str()
            .is_some_and(|w| w.contains("instance a runs the agent")),
        "b says why it does not sync: {standby}"
    );
    assert_eq!(
        b.metric("mirrorgate_config_sync_runs_total{mirror=\"ownercfg\",result=\"ok\"}"),
        0.0,
        "b ran a config sync round while a owned the agent"
    );
    a.kill9();
    wait_for("b runs the agent", Duration::from_secs(30), || {
        let s = agent_status(&b.admin(), "ownercfg");
        s["owner"] == "b" && s["runs_here"] == true
    });
    crate::sync::alter_topic_config(&source, &topic, "retention.ms", Some("3600000"));
    synced("3600000");
    let now = crate::failover::mirror_json(&b.admin(), "ownercfg")["config_sync"].clone();
    assert!(now["standby"].is_null(), "{now}");
    assert!(b.metric("mirrorgate_config_sync_runs_total{mirror=\"ownercfg\",result=\"ok\"}") > 0.0);
}

/// The instance that runs a mirror's agent, and drives the mirror's failover, ends (as SIGKILL
/// would: the process aborts) right after failover step `point`, while an idempotent and a
/// plain source producer write. The other instance takes the agent and the failover over: per
/// partition one barrier, the records before it the source's first records once each, in
/// order (no batch appended twice by the two agents, none skipped), nothing mirrored after it,
/// and the report completed there.
fn the_owner_killed_during_a_failover_after(point: &str) {
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let tag = point.replace('_', "-");
    let idempotent = harness::unique_topic(&format!("ownfo-idem-{tag}"));
    let plain = harness::unique_topic(&format!("ownfo-plain-{tag}"));
    for t in [&idempotent, &plain] {
        harness::create_topic(&source, t, 1, None);
    }
    let mirror = format!("ownfo{}", point.len());
    let (mut a, b) = two_instances_with_the_agent(
        &mirror,
        &[&idempotent, &plain],
        &source,
        |_| {},
        &[("MIRRORGATE_CRASH_AFTER", point)],
    );
    let idem_writer = SourceWriter::start(&source, &idempotent, "idem", 4000, 300);
    let plain_writer = SourceWriter::start_without_producer_id(&source, &plain, "plain", 4000, 300);
    wait_for(
        "records mirrored through a",
        Duration::from_secs(30),
        || log_end(&destination, &idempotent, 0) > 300 && log_end(&destination, &plain, 0) > 300,
    );
    // The call itself may see the process end (the first crash point is inside it).
    let _ = crate::gw::try_admin_call(
        &a.admin(),
        Method::POST,
        &format!("/v1/mirrors/{mirror}/failover"),
        None,
    );
    assert!(
        a.wait_exit(Duration::from_secs(30)),
        "a did not end after {point}"
    );
    if point == "fenced_persisted" {
        // Never announced: b takes the agent over and mirrors on; the failover is called again
        // on b.
        wait_for("b runs the agent", Duration::from_secs(30), || {
            agent_status(&b.admin(), &mirror)["runs_here"] == true
        });
        crate::failover::wait_mirroring(&b.admin(), &mirror, 2);
        failover(&b.admin(), &mirror);
    }
    wait_stopped(&b.admin(), &mirror);
    idem_writer.finish(true);
    plain_writer.finish(true);
    for t in [&idempotent, &plain] {
        let d = read_log(&destination, t, 0);
        let s = read_log(&source, t, 0);
        assert_eq!(d.barriers.len(), 1, "{t} after {point}: {:?}", d.barriers);
        let barrier = d.barriers[0];
        assert!(
            d.records.iter().all(|r| r.0 < barrier),
            "{t} after {point}: a record mirrored after the barrier"
        );
        assert!(!d.records.is_empty(), "{t}: nothing mirrored");
        assert!(
            d.records.len() <= s.records.len(),
            "{t}: more than the source"
        );
        assert_eq!(
            kv(&d),
            kv(&s)[..d.records.len()].to_vec(),
            "{t} after {point}: the destination is not the source's first records once each"
        );
    }
    let report = completed_report(&b.admin(), &mirror);
    // The report's figures are the destination's: b's offset maps reach the barrier although
    // a appended the last batches.
    for t in [&idempotent, &plain] {
        let d = read_log(&destination, t, 0);
        let p = report["partitions"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["topic"] == t.as_str()))
            .cloned()
            .unwrap_or_default();
        let last = d.records.last().map(|r| r.0);
        assert_eq!(
            p["last_mirrored_destination_offset"].as_i64(),
            last,
            "{t} after {point}: {p}; b's map: {:?}; b's agent: {}",
            agent_map_next(&b, &mirror, t, 0),
            agent_status(&b.admin(), &mirror)
        );
        assert_eq!(
            p["last_mirrored_source_offset"].as_i64(),
            Some(d.records.len() as i64 - 1),
            "{t} after {point}: {p}"
        );
    }
}

#[test]
fn the_agents_owner_dying_before_announcing_its_failover_leaves_the_agent_and_the_failover_to_another(
) {
    the_owner_killed_during_a_failover_after("fenced_persisted");
}

#[test]
fn the_agents_owner_dying_after_fencing_its_failover_is_taken_over_without_a_duplicate_batch() {
    the_owner_killed_during_a_failover_after("fenced");
}

#[test]
fn the_agents_owner_dying_after_writing_its_barriers_is_taken_over_without_a_duplicate_batch() {
    the_owner_killed_during_a_failover_after("barrier_written");
}

#[test]
fn the_agents_owner_dying_after_screening_is_taken_over_without_a_duplicate_batch() {
    the_owner_killed_during_a_failover_after("screen_persisted");
}

#[test]
fn the_agents_owner_dying_after_recording_its_barriers_is_taken_over_without_a_duplicate_batch() {
    the_owner_killed_during_a_failover_after("barrier_persisted");
}

#[test]
fn the_agents_owner_dying_before_handing_its_failover_over_is_taken_over_without_a_duplicate_batch()
{
    the_owner_killed_during_a_failover_after("psm_cleared");
}

/// The state topic deleted and created again (as `mirrorgate state init` does for a lost one)
/// while the agent's owner runs, then the other instance restarted. Every instance forgets what
/// it read of the old topic (its claims, owners and leases) and reads the new one from its
/// start, so the restarted instance's claim of the agent in the new topic is the only one that
/// counts: one agent runs, never two, and a plain source producer's records are on the
/// destination once each.
#[test]
fn a_recreated_state_topic_never_leaves_two_agent_owners() {
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("owner-recreated");
    harness::create_topic(&source, &topic, 1, None);
    let state_topic = harness::unique_topic("owner-recreated-state");
    let cfg = |id: &str| {
        let mut cfg = agent_config("recreated", &[&topic], &source);
        cfg.instances = Some(InstancesConfig {
            id: id.into(),
            state_topic: state_topic.clone(),
            session_timeout_ms: 3000,
        });
        cfg
    };
    let init = || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(mirrorgate::app::peers::init_state_topic(&cfg("a")))
            .expect("state topic created");
    };
    init();
    // b alone claims the agent; a, started next, stands by (the owner keeps it).
    let b = ProcessGateway::start(cfg("b"), &[]);
    wait_for("b runs the agent", Duration::from_secs(30), || {
        agent_status(&b.admin(), "recreated")["runs_here"] == true
    });
    let mut a = ProcessGateway::start(cfg("a"), &[]);
    wait_for("a stands by", Duration::from_secs(30), || {
        let s = agent_status(&a.admin(), "recreated");
        s["owner"] == "b" && s["runs_here"] == false
    });
    let writer = SourceWriter::start_without_producer_id(&source, &topic, "plain", 3000, 300);
    super::divergence::delete_topic_directly(&destination, &state_topic);
    wait_for("the state topic deleted", Duration::from_secs(30), || {
        harness::try_partition_leaders(&destination, &state_topic).is_err()
    });
    init();
    wait_for(
        "the state topic created again",
        Duration::from_secs(30),
        || harness::try_partition_leaders(&destination, &state_topic).is_ok(),
    );
    a.kill9();
    a.restart(&[]);
    // From now on, one agent at most at any time.
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut runs_seen = false;
    while Instant::now() < deadline {
        let runs: Vec<bool> = [a.admin(), b.admin()]
            .iter()
            .map(|admin| agent_status(admin, "recreated")["runs_here"] == true)
            .collect();
        assert!(
            runs != [true, true],
            "both instances run the agent after the state topic was recreated: a {} / b {}",
            agent_status(&a.admin(), "recreated"),
            agent_status(&b.admin(), "recreated")
        );
        runs_seen |= runs.contains(&true);
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        runs_seen,
        "no instance runs the agent on the new state topic"
    );
    let sent = writer.finish(false);
    wait_for(
        "the destination holds the source's records once, in order",
        Duration::from_secs(60),
        || kv(&read_log(&source, &topic, 0)) == kv(&read_log(&destination, &topic, 0)),
    );
    assert_eq!(read_log(&destination, &topic, 0).records.len(), sent);
}

/// Review G2. The agent's owner appends a plain source batch (no producer id: the broker cannot
/// deduplicate it) while a follower of the destination partition is stalled: the leader holds
/// it above the high watermark, invisible to a read, and the owner is killed before it is
/// answered. The instance that takes the agent over must not mirror that batch again: it waits
/// until what the leader holds is readable, matches it to the source and mirrors on. Each
/// source record ends up on the destination once, and the partition keeps MIRRORING.
#[test]
fn disruptive_a_plain_batch_appended_by_a_killed_owner_above_the_high_watermark_is_not_appended_again(
) {
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("owner-hw");
    harness::create_topic(&source, &topic, 1, None);
    // The destination topic with a follower to stall (the agent takes an empty one as is).
    harness::create_topic_with_assignment(&destination, &topic, &[&[1, 2]]);
    let (mut a, b) = two_instances_with_the_agent("ownerhw", &[&topic], &source, |_| {}, &[]);
    let writer = SourceWriter::start_without_producer_id(&source, &topic, "plain", 400, 20);
    wait_for(
        "records mirrored through a",
        Duration::from_secs(30),
        || log_end(&destination, &topic, 0) > 20,
    );
    {
        let _stalled = crate::faults::Paused::pause("destination", "2");
        std::thread::sleep(Duration::from_millis(700));
        a.kill9();
        wait_for("b runs the agent", Duration::from_secs(30), || {
            let s = agent_status(&b.admin(), "ownerhw");
            s["owner"] == "b" && s["runs_here"] == true
        });
        // The stalled follower leaves the in-sync replicas meanwhile (the controller fences it).
        std::thread::sleep(Duration::from_secs(12));
    }
    let sent = writer.finish(false);
    wait_for(
        "the destination holds the source's records once, in order",
        Duration::from_secs(120),
        || {
            partitions_json(&b.admin(), "ownerhw")
                .iter()
                .all(|p| p["state"] == "MIRRORING" && p["lag_records"] == 0)
                && kv(&read_log(&source, &topic, 0)) == kv(&read_log(&destination, &topic, 0))
        },
    );
    assert_eq!(read_log(&destination, &topic, 0).records.len(), sent);
}

/// Review G2, the former owner's path. The agent's owner is paused (SIGSTOP) past its session
/// while its run loop is held in a discovery pass (a slow source metadata answer, made by a
/// test hook) and both source producers write; the other instance takes the agent over and
/// mirrors on. When the paused owner resumes, it gets its lease back within milliseconds (a
/// heartbeat and a read) while its run loop is still held, and its partition tasks go on from
/// their older positions: none of their batches may be appended — ownership is asked before
/// every append, not on the run loop's turn. Each source record ends up on the destination
/// once, in order, and the partitions keep MIRRORING on the new owner.
#[test]
fn the_agents_former_owner_paused_past_its_session_appends_nothing_once_it_resumes() {
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let idempotent = harness::unique_topic("owner-pause-idem");
    let plain = harness::unique_topic("owner-pause-plain");
    for t in [&idempotent, &plain] {
        harness::create_topic(&source, t, 1, None);
    }
    let hold_dir = tempfile::tempdir().expect("temp dir");
    let hold = hold_dir.path().join("hold-discovery");
    let hold_env = hold.to_str().expect("utf-8 path").to_string();
    let (a, b) = two_instances_with_the_agent(
        "ownerpause",
        &[&idempotent, &plain],
        &source,
        |_| {},
        &[("MIRRORGATE_TEST_HOLD_AGENT_DISCOVERY_WHILE", &hold_env)],
    );
    let idem_writer = SourceWriter::start(&source, &idempotent, "idem", 8000, 300);
    let plain_writer = SourceWriter::start_without_producer_id(&source, &plain, "plain", 8000, 300);
    wait_for(
        "records mirrored through a",
        Duration::from_secs(30),
        || log_end(&destination, &idempotent, 0) > 300 && log_end(&destination, &plain, 0) > 300,
    );
    // a's run loop enters its next discovery pass (every 3 s) and stays there.
    std::fs::write(&hold, b"").expect("hold file");
    std::thread::sleep(Duration::from_secs(4));
    let pid = a.pid().expect("a runs") as libc::pid_t;
    // SAFETY: kill(2) on the pid of a child this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0, "SIGSTOP a");
    let taken_over = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_for("b runs the agent", Duration::from_secs(30), || {
            let s = agent_status(&b.admin(), "ownerpause");
            s["owner"] == "b" && s["runs_here"] == true && s["epoch"] == 2
        });
        // b appends well past a's position (more than the broker's five deduplicated batches
        // per producer).
        let at = log_end(&destination, &idempotent, 0);
        wait_for("b mirrors on", Duration::from_secs(30), || {
            log_end(&destination, &idempotent, 0) > at + 300
        });
    }));
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0, "SIGCONT a");
    if let Err(e) = taken_over {
        std::panic::resume_unwind(e);
    }
    // a runs again beside b, its run loop still held, while both producers write.
    std::thread::sleep(Duration::from_secs(3));
    std::fs::remove_file(&hold).expect("hold file removed");
    let sent = (idem_writer.finish(false), plain_writer.finish(false));
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let parts = partitions_json(&b.admin(), "ownerpause");
        let caught_up = parts
            .iter()
            .all(|p| p["state"] == "MIRRORING" && p["lag_records"] == 0);
        let logs: Vec<_> = [&idempotent, &plain]
            .iter()
            .map(|t| {
                (
                    kv(&read_log(&source, t, 0)),
                    kv(&read_log(&destination, t, 0)),
                )
            })
            .collect();
        if caught_up && logs.iter().all(|(s, d)| s == d) {
            break;
        }
        if Instant::now() > deadline {
            let mut why = Vec::new();
            for (t, (s, d)) in [&idempotent, &plain].iter().zip(&logs) {
                let mut seen = std::collections::HashSet::new();
                let twice: Vec<_> = d.iter().filter(|r| !seen.insert(*r)).take(5).collect();
                why.push(format!(
                    "{t}: source {} records, destination {}, appended twice (first 5): {twice:?}",
                    s.len(),
                    d.len()
                ));
            }
            panic!(
                "the destination does not hold the source's records once, in order: {why:?}; b's partitions: {parts:?}"
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    for (t, n) in [(&idempotent, sent.0), (&plain, sent.1)] {
        assert_eq!(read_log(&destination, t, 0).records.len(), n, "{t}");
    }
    let s = agent_status(&a.admin(), "ownerpause");
    assert!(
        s["owner"] == "b" && s["runs_here"] == false,
        "a runs the agent again after it resumed: {s}"
    );
    drop(a);
}

/// Defect S3 (found by the simulation, seed 6425): the agent's owner a is paused past its
/// session; b counts it gone and claims the next epoch, but its claim reaches the state topic
/// late (test hook `MIRRORGATE_TEST_HOLD_AGENT_CLAIM_WHILE`), so a, resumed, has read the
/// topic to its end and has its lease back before b's claim is there. a must not run the agent
/// on the epoch it held before its pause. In the end exactly one instance runs it, and the
/// destination holds the source's records once, in order.
#[test]
fn the_agents_owner_back_from_a_pause_does_not_run_on_its_old_epoch_while_a_new_claim_is_late() {
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("owner-lapse");
    harness::create_topic(&source, &topic, 1, None);
    let hold_dir = tempfile::tempdir().expect("temp dir");
    let hold = hold_dir.path().join("hold-claim");
    let hold_env = hold.to_str().expect("utf-8 path").to_string();
    let cfg = instance_configs("ownerlapse", &[&topic], &source, |_| {});
    let a = ProcessGateway::start(cfg("a"), &[]);
    let b = ProcessGateway::start(
        cfg("b"),
        &[("MIRRORGATE_TEST_HOLD_AGENT_CLAIM_WHILE", &hold_env)],
    );
    wait_for("a runs the agent", Duration::from_secs(30), || {
        let s = agent_status(&b.admin(), "ownerlapse");
        s["owner"] == "a" && s["runs_here"] == false
    });
    let writer = SourceWriter::start(&source, &topic, "lapse", 4000, 200);
    wait_for(
        "records mirrored through a",
        Duration::from_secs(30),
        || log_end(&destination, &topic, 0) > 100,
    );
    std::fs::write(&hold, b"").expect("hold file");
    let pid = a.pid().expect("a runs") as libc::pid_t;
    // SAFETY: kill(2) on the pid of a child this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0, "SIGSTOP a");
    // b counts a gone a session plus the margin (5 s) after its last heartbeat, and claims.
    std::thread::sleep(Duration::from_secs(8));
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0, "SIGCONT a");
    let mut on_old_epoch = Vec::new();
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        let s = agent_status(&a.admin(), "ownerlapse");
        if s["runs_here"] == true && s["epoch"] == 1 {
            on_old_epoch.push(s);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    std::fs::remove_file(&hold).expect("hold file removed");
    assert!(
        on_old_epoch.is_empty(),
        "a ran the agent on the epoch it held before its pause, {} times in 5 s (first: {})",
        on_old_epoch.len(),
        on_old_epoch[0]
    );
    wait_for(
        "exactly one instance runs the agent, at epoch 2 or later",
        Duration::from_secs(30),
        || {
            let (sa, sb) = (
                agent_status(&a.admin(), "ownerlapse"),
                agent_status(&b.admin(), "ownerlapse"),
            );
            sa["owner"] == sb["owner"]
                && sa["epoch"] == sb["epoch"]
                && sa["epoch"].as_u64().is_some_and(|e| e >= 2)
                && (sa["runs_here"] == true) != (sb["runs_here"] == true)
        },
    );
    let sent = writer.finish(false);
    wait_for(
        "the destination holds the source's records once, in order",
        Duration::from_secs(90),
        || kv(&read_log(&source, &topic, 0)) == kv(&read_log(&destination, &topic, 0)),
    );
    assert_eq!(read_log(&destination, &topic, 0).records.len(), sent);
}

/// A failover called through the instance that does not run the agent, the source up and
/// everything mirrored: the report it completes counts what the destination lacks from the
/// source's own log end (0 here), as the agent's owner would. Found by the chaos run (seed 3):
/// `rpo_records` was null on every partition of such a report, the instance never having read
/// the source's metadata.
#[test]
fn a_failover_through_the_instance_without_the_agent_reports_the_rpo_read_from_the_source() {
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("owner-rpo");
    harness::create_topic(&source, &topic, 2, None);
    let (_a, b) = two_instances_with_the_agent("ownerrpo", &[&topic], &source, |_| {}, &[]);
    crate::failover::wait_mirroring(&b.admin(), "ownerrpo", 2);
    let sent = SourceWriter::start(&source, &topic, "rpo", 200, 2000).finish(false);
    assert_eq!(sent, 200);
    wait_for(
        "every source record mirrored",
        Duration::from_secs(60),
        || {
            (0..2).all(|p| {
                kv(&read_log(&source, &topic, p)) == kv(&read_log(&destination, &topic, p))
            })
        },
    );
    crate::failover::failover(&b.admin(), "ownerrpo");
    crate::failover::wait_stopped(&b.admin(), "ownerrpo");
    let report = completed_report(&b.admin(), "ownerrpo");
    let parts = report["partitions"].as_array().cloned().unwrap_or_default();
    assert_eq!(parts.len(), 2, "{report}");
    for p in &parts {
        assert_eq!(
            p["rpo_records"], 0,
            "partition {}: {report}",
            p["partition"]
        );
    }
    assert_eq!(report["totals"]["rpo_records"], 0, "{report}");
}
