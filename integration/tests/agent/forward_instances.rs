//! Forward mode with several instances: a switchover driven through the instance that runs the
//! mirror's agent holds the forward listener of every other instance too, through the state
//! topic, so nothing another instance forwards reaches the source after the log ends it
//! mirrors to; the producers of every instance keep their sessions.

use super::forward::{
    assert_acknowledged_once_in_order, assert_report_names_what_is_lacking,
    assert_whole_producer_went_on, forward_config, keys, producer_ids, wait_lag_zero,
    writes_on_after_the_failover,
};
use super::forward_switchback::{failback_gateway, wait_failback_mirroring};
use super::owners::{agent_status, instance_configs};
use super::*;
use crate::gw::ProcessGateway;

/// The configuration of instance `id`: the agent of `topic` from `source` on a shared state
/// topic (from `configs`), with a forward listener of its own ports; its forward bootstrap.
fn with_forward(
    configs: &impl Fn(&str) -> Config,
    id: &str,
    name: &str,
    topic: &str,
    source: &str,
) -> (Config, String) {
    let mut cfg = configs(id);
    let (with_listener, bootstrap) = forward_config(name, &[topic], source);
    cfg.mirrors[0].forward = with_listener.mirrors[0].forward.clone();
    (cfg, bootstrap)
}

/// Instances a (a process, running the agent of mirror `name`) and b on one state topic, each
/// with a forward listener of `topic` from `source`, and an idempotent writer through each
/// (`via-a`, `via-b`) once both wrote 300 records mirrored to `destination`.
fn writing_through_two_instances(
    name: &str,
    topic: &str,
    source: &str,
    destination: &str,
) -> (ProcessGateway, TestGateway, SourceWriter, SourceWriter) {
    let configs = instance_configs(name, &[topic], source, |_| {});
    let (cfg_a, forward_a) = with_forward(&configs, "a", name, topic, source);
    let (cfg_b, forward_b) = with_forward(&configs, "b", name, topic, source);
    let a = ProcessGateway::start(cfg_a, &[]);
    let b = TestGateway::start(cfg_b);
    wait_for("a runs the agent", Duration::from_secs(30), || {
        let s = agent_status(&b.admin(), name);
        s["owner"] == "a" && s["runs_here"] == false
    });
    let via_a = SourceWriter::start(&forward_a, topic, "via-a", 1_000_000, 300);
    let via_b = SourceWriter::start(&forward_b, topic, "via-b", 1_000_000, 300);
    wait_for(
        "records through both forward listeners, mirrored",
        Duration::from_secs(60),
        || {
            via_a.acked() >= 300
                && via_b.acked() >= 300
                && (0..2).all(|p| log_end(destination, topic, p) > 0)
        },
    );
    (a, b, via_a, via_b)
}

/// Wait until both writers acknowledged `more` records past `at`, stop them (no error reached
/// either: `finish` asserts it) and check every record they had acknowledged is on `cluster`
/// once and in order; how many each had acknowledged.
fn both_go_on_to(
    cluster: &str,
    topic: &str,
    (via_a, via_b): (SourceWriter, SourceWriter),
    at: (usize, usize),
    more: usize,
) -> (usize, usize) {
    wait_for(
        "records through both listeners after the switch",
        Duration::from_secs(60),
        || via_a.acked() >= at.0 + more && via_b.acked() >= at.1 + more,
    );
    let acked = (via_a.finish(true), via_b.finish(true));
    assert_acknowledged_once_in_order(cluster, topic, "via-a", acked.0);
    assert_acknowledged_once_in_order(cluster, topic, "via-b", acked.1);
    acked
}

/// Every producer of `before` (per partition: id, epoch) goes on on `cluster` with its epoch.
fn assert_producers_went_on(before: &[Vec<(i64, i32)>], cluster: &str, topic: &str) {
    for (p, ids) in before.iter().enumerate() {
        let now = producer_ids(cluster, topic, p as i32);
        for (id, epoch) in ids {
            assert!(
                now.iter().any(|r| r == &(*id, *epoch))
                    && now.iter().all(|r| r.0 != *id || r.1 == *epoch),
                "partition {p}: producer {id} goes on with epoch {epoch}: {now:?}"
            );
        }
    }
}

#[test]
fn a_switchover_through_one_instance_holds_the_forward_listener_of_another_whose_producers_go_on() {
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("forward-instances");
    harness::create_topic(&source, &topic, 2, None);
    // Applications on both instances' forward listeners.
    let (a, b, via_a, via_b) = writing_through_two_instances("fwdi", &topic, &source, &destination);

    // Not where the agent stands by: it could not mirror the source's end.
    let (status, body) = a.call(Method::POST, "/v1/mirrors/fwdi/switchover?dry_run=true");
    assert_eq!(status, 200, "{body}");
    let dry: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(dry["agent_runs_here"], true, "{body}");
    let (status, body) = admin_call(
        &b.admin(),
        Method::POST,
        "/v1/mirrors/fwdi/switchover",
        None,
    );
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("does not run on this instance"), "{body}");

    let (status, body) = a.call(Method::POST, "/v1/mirrors/fwdi/switchover");
    assert_eq!(status, 202, "switchover through a: {body}");
    wait_stopped(&a.admin(), "fwdi");
    let at_switch = (via_a.acked(), via_b.acked());
    wait_for(
        "b's forward listener on the destination, caught up",
        Duration::from_secs(30),
        || {
            let v = super::forward::forward_route(&b.admin(), "fwdi");
            v["side"] == "destination" && v["caught_up"] == true
        },
    );
    let on_source: Vec<Vec<(i64, i32)>> =
        (0..2).map(|p| producer_ids(&source, &topic, p)).collect();
    assert!(
        on_source.iter().all(|ids| ids.len() == 2),
        "two producers wrote each partition of the source: {on_source:?}"
    );
    let acked = both_go_on_to(&destination, &topic, (via_a, via_b), at_switch, 300);
    eprintln!("forward instances: {acked:?} acknowledged, {at_switch:?} at the switchover");
    // Both producers went on under the id and epoch the source gave them.
    assert_producers_went_on(&on_source, &destination, &topic);
    drop(a);
}

/// Correctness F5: an instance paused past its session timeout through another instance's
/// switchover. When it resumed, it sent the source what its client had written during the
/// pause before it read the state topic: the source acknowledged it after the switchover had
/// read the source's log ends, so it was never mirrored. An instance now sends the source
/// nothing while it holds no lease on the state topic, nor once the state topic announces the
/// mirror's failover: the request waits, and goes to the destination after the switch.
#[test]
fn a_request_to_an_instance_paused_through_a_switchover_reaches_the_destination_not_the_source() {
    use crate::psm_differential::{batch, RawConn};
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("forward-paused");
    harness::create_topic(&source, &topic, 1, None);
    // What b forwarded settles for 1 s after its session ends; the hold outlasts both.
    let configs = instance_configs("fwdp", &[&topic], &source, |cfg| {
        cfg.limits.unknown_outcome_settle_ms = 1000;
    });
    let (mut cfg_a, _) = with_forward(&configs, "a", "fwdp", &topic, &source);
    let (cfg_b, forward_b) = with_forward(&configs, "b", "fwdp", &topic, &source);
    if let Some(f) = cfg_a.mirrors[0].forward.as_mut() {
        f.hold_ms = 15_000;
    }
    let a = ProcessGateway::start(cfg_a, &[]);
    wait_for("a runs the agent", Duration::from_secs(30), || {
        agent_status(&a.admin(), "fwdp")["runs_here"] == true
    });
    let b = ProcessGateway::start(cfg_b, &[]);
    wait_for("b sees a run the agent", Duration::from_secs(30), || {
        agent_status(&b.admin(), "fwdp")["owner"] == "a"
    });
    // A client of b's forward listener, on the port of the source's leader of the partition.
    let leader = harness::partition_leaders(&source, &topic)[&0];
    let port: u16 = forward_b
        .rsplit_once(':')
        .expect("host:port")
        .1
        .parse()
        .expect("port");
    let mut client = RawConn::connect(&format!("127.0.0.1:{}", port + leader as u16 - 1));
    let (code, _) = client.produce(&topic, 0, batch(-1, -1, -1, 2, "before"));
    assert_eq!(code, 0, "produce through b's forward listener");
    wait_lag_zero(&a.admin(), "fwdp", 1);

    // b pauses; its client writes (the kernel keeps the request for b); a switches over once
    // b's session has ended and what it forwarded has settled.
    let pid = b.pid().expect("b runs") as libc::pid_t;
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0, "SIGSTOP b");
    let resume = scopeguard(pid);
    wait_for("b stopped", Duration::from_secs(10), || stopped(pid));
    let corr = client.send_produce(&topic, 0, batch(-1, -1, -1, 1, "paused"));
    std::thread::sleep(Duration::from_millis(4500));
    let (status, body) = a.call(Method::POST, "/v1/mirrors/fwdp/switchover");
    assert_eq!(status, 202, "switchover through a with b paused: {body}");
    wait_stopped(&a.admin(), "fwdp");
    drop(resume);

    let (code, _) = client.produce_answer(corr);
    if code == NOT_LEADER_OR_FOLLOWER {
        // The same node id on the destination does not lead the partition: a retriable error,
        // which a client answers by sending again to the leader its metadata names.
        let leader = harness::partition_leaders(&destination, &topic)[&0];
        let mut again = RawConn::connect(&format!("127.0.0.1:{}", port + leader as u16 - 1));
        let (code, _) = again.produce(&topic, 0, batch(-1, -1, -1, 1, "paused"));
        assert_eq!(code, 0, "the request written during b's pause, sent again");
    } else {
        assert_eq!(code, 0, "the request written during b's pause");
    }
    assert_eq!(
        keys(&source, &topic, 0),
        vec!["before-0", "before-1"],
        "the source after the switchover"
    );
    let on_destination = keys(&destination, &topic, 0);
    assert!(
        on_destination.iter().any(|k| k == "paused-0"),
        "the request written during b's pause is on the destination: {on_destination:?}"
    );
}

/// Several instances, an unplanned failover: the agent runs on a, the applications write
/// through b's forward listeners. Mirror `ifl` is paused, so what its producer gets acknowledged
/// through b stays unmirrored; mirror `ifk` is caught up and its producer holds its sends.
/// `ifl` fails over through a, `ifk` through b (no switchover: no catch-up; b drives the
/// failover and completes its report without the agent). b's producer of `ifk` goes on with its
/// id and epoch, and the report, read through either instance, names what `ifl`'s producer
/// lacks. Red before b settled its ledger to the report: b never pruned it (the agent does not
/// run there), so `ifk`'s producer was refused, and the report counted a's ledger only.
#[test]
fn after_an_unplanned_failover_the_producers_of_an_instance_without_the_agent_go_on_and_the_report_names_its_losses(
) {
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let lost_topic = harness::unique_topic("fwdi-lost");
    let kept_topic = harness::unique_topic("fwdi-kept");
    harness::create_topic(&source, &lost_topic, 2, None);
    harness::create_topic(&source, &kept_topic, 2, None);
    let kept_mirror = agent_config("ifk", &[&kept_topic], &source).mirrors[0].clone();
    let configs = instance_configs("ifl", &[&lost_topic], &source, |cfg| {
        cfg.mirrors.push(kept_mirror.clone())
    });
    // Forward listeners of both mirrors on each instance; the applications use b's.
    let with_listeners = |id: &str| {
        let mut cfg = configs(id);
        let mut bootstraps = Vec::new();
        for m in &mut cfg.mirrors {
            let (forward, bootstrap) = crate::gw::forward_listener(10_000);
            m.forward = Some(forward);
            bootstraps.push(bootstrap);
        }
        (cfg, bootstraps)
    };
    let (cfg_a, _) = with_listeners("a");
    let (cfg_b, forward_b) = with_listeners("b");
    let a = ProcessGateway::start(cfg_a, &[]);
    let b = TestGateway::start(cfg_b);
    wait_for("a runs both agents", Duration::from_secs(30), || {
        ["ifl", "ifk"].iter().all(|m| {
            let s = agent_status(&b.admin(), m);
            s["owner"] == "a" && s["runs_here"] == false
        })
    });
    let lossy = SourceWriter::start(&forward_b[0], &lost_topic, "lost", 1_000_000, 200);
    let whole = SourceWriter::start(&forward_b[1], &kept_topic, "kept", 1_000_000, 200);
    wait_for(
        "records through b's forward listeners",
        Duration::from_secs(60),
        || lossy.acked() >= 200 && whole.acked() >= 200,
    );
    wait_lag_zero(&a.admin(), "ifl", 2);
    crate::groups::mirror_op(&a.admin(), "ifl", "pause");
    let at_pause = lossy.acked();
    wait_for(
        "records acknowledged by the source after the pause",
        Duration::from_secs(60),
        || lossy.acked() >= at_pause + 300,
    );
    whole.hold(true);
    std::thread::sleep(Duration::from_millis(500));
    super::wait_caught_up(&a.admin(), "ifk", &source, &kept_topic, 2);
    let kept_ids: Vec<(i64, i32)> = (0..2)
        .flat_map(|p| producer_ids(&source, &kept_topic, p))
        .collect();

    // `ifk` through b: the instance that completes the report need not run the agent.
    failover(&a.admin(), "ifl");
    failover(&b.admin(), "ifk");
    for m in ["ifl", "ifk"] {
        wait_stopped(&a.admin(), m);
        wait_for(
            "b's forward listener on the destination",
            Duration::from_secs(30),
            || super::forward::forward_side(&b.admin(), m) == "destination",
        );
    }
    let whole_acked = writes_on_after_the_failover(whole);
    let lossy_keys = lossy.acked_keys();
    let _ = lossy.finish_with_errors();
    assert_whole_producer_went_on(&destination, &kept_topic, "kept", &kept_ids, whole_acked);
    // The report counts b's ledger once b has read it and published what b's listener lacks.
    for admin in [a.admin(), b.admin()] {
        wait_for(
            "the report counts b's forward listener",
            Duration::from_secs(30),
            || {
                let instances = &super::completed_report(&admin, "ifl")["forwarded"]["instances"];
                instances
                    .as_array()
                    .is_some_and(|v| v.iter().any(|i| i == "b"))
            },
        );
        let lacking = assert_report_names_what_is_lacking(
            &admin,
            "ifl",
            &destination,
            (&lost_topic, None),
            &lossy_keys,
        );
        assert!(lacking >= 300, "acknowledged after the pause ({lacking})");
    }
    drop(a);
}

/// Kafka's error code for a broker that does not lead the partition (retriable).
const NOT_LEADER_OR_FOLLOWER: i16 = 6;

/// Whether process `pid` is stopped (its state in `/proc/PID/stat` is `T`): every thread of it
/// has taken the SIGSTOP.
fn stopped(pid: libc::pid_t) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('T'))
        })
        .unwrap_or(false)
}

/// Sends SIGCONT to `pid` when dropped (the test's end, or its failure).
fn scopeguard(pid: libc::pid_t) -> impl Drop {
    struct Cont(libc::pid_t);
    impl Drop for Cont {
        fn drop(&mut self) {
            unsafe { libc::kill(self.0, libc::SIGCONT) };
        }
    }
    Cont(pid)
}

#[test]
fn a_switch_back_through_one_instance_takes_the_producers_of_every_instance_to_the_old_source_with_their_sessions(
) {
    let a_cluster = harness::cluster("source");
    let b_cluster = harness::cluster("destination");
    let topic = harness::unique_topic("switchback-instances");
    harness::create_topic(&a_cluster, &topic, 2, None);
    // Applications on both instances' forward listeners.
    let (a, b, via_a, via_b) =
        writing_through_two_instances("fwdsb", &topic, &a_cluster, &b_cluster);
    let on_a: Vec<Vec<(i64, i32)>> = (0..2)
        .map(|p| producer_ids(&a_cluster, &topic, p))
        .collect();
    let (status, body) = a.call(Method::POST, "/v1/mirrors/fwdsb/switchover");
    assert_eq!(status, 202, "switchover through a: {body}");
    wait_stopped(&a.admin(), "fwdsb");
    for admin in [a.admin(), b.admin()] {
        wait_for(
            "both listeners on the destination",
            Duration::from_secs(30),
            || super::forward::forward_route(&admin, "fwdsb")["side"] == "destination",
        );
    }
    let at_switch = (via_a.acked(), via_b.acked());
    wait_for(
        "records after the switchover",
        Duration::from_secs(60),
        || via_a.acked() >= at_switch.0 + 200 && via_b.acked() >= at_switch.1 + 200,
    );

    // The failback gateway in front of A mirrors B back; the switch back goes through b,
    // where the agent does not run.
    let g2 = failback_gateway("fwdsb-onto-a", &topic, &a_cluster, &b_cluster);
    wait_failback_mirroring(&g2.admin(), "fwdsb-onto-a", 2);
    let at_back = (via_a.acked(), via_b.acked());
    let body = serde_json::json!({ "gateway": g2.admin(), "mirror": "fwdsb-onto-a" }).to_string();
    let (status, answer) = crate::gw::admin_call_body(
        &b.admin(),
        Method::POST,
        "/v1/mirrors/fwdsb/switchback",
        None,
        &body,
    );
    assert_eq!(status, 200, "switch back through b: {answer}");
    eprintln!("switchback instances: {answer}");
    for admin in [a.admin(), b.admin()] {
        wait_for(
            "both listeners on the source",
            Duration::from_secs(30),
            || super::forward::forward_route(&admin, "fwdsb")["side"] == "source",
        );
    }
    let acked = both_go_on_to(&a_cluster, &topic, (via_a, via_b), at_back, 200);
    eprintln!("switchback instances: {acked:?} acknowledged, {at_back:?} at the switch back");
    // The producers went on under the ids and epochs A first gave them.
    assert_producers_went_on(&on_a, &a_cluster, &topic);
    // The mirror follows A again on both instances.
    for admin in [a.admin(), b.admin()] {
        wait_for(
            "the mirror mirroring again",
            Duration::from_secs(30),
            || {
                partitions_json(&admin, "fwdsb")
                    .iter()
                    .all(|p| p["state"] == "MIRRORING")
            },
        );
    }
    drop(a);
}
