//! Forward mode, the way back (issue 33): after a switchover, a failback gateway in front of
//! the old source copies the destination back; a switch back moves the forward listener's
//! clients to the old source with their producer sessions, and the mirror follows the old
//! source again, so that a later switchover carries them once more.

use super::forward::{
    assert_acknowledged_once_in_order, assert_crossed_without_error, forward_config, forward_side,
    keys, producer_ids, switch_over, three_producers_across, GroupReader,
};
use std::collections::BTreeSet;

use super::*;

/// `POST /v1/mirrors/NAME/switchback` through `failback` (the failback gateway's admin
/// address and mirror); status and body.
fn switch_back(gw: &TestGateway, name: &str, failback: (&str, &str), query: &str) -> (u16, String) {
    let body = serde_json::json!({ "gateway": failback.0, "mirror": failback.1 }).to_string();
    crate::gw::admin_call_body(
        &gw.admin(),
        Method::POST,
        &format!("/v1/mirrors/{name}/switchback{query}"),
        None,
        &body,
    )
}

/// A failback gateway: in front of `old_source`, mirror `name` copying `topic` back from
/// `destination`.
pub(super) fn failback_gateway(
    name: &str,
    topic: &str,
    old_source: &str,
    destination: &str,
) -> TestGateway {
    let mut cfg = agent_config(name, &[topic], destination);
    cfg.destination.bootstrap = old_source
        .split(',')
        .map(|s| s.trim().to_string())
        .collect();
    TestGateway::start(cfg)
}

/// The states of mirror `name`'s partitions at `admin`, in its order.
fn states(admin: &str, name: &str) -> Vec<String> {
    partitions_json(admin, name)
        .iter()
        .map(|p| p["state"].as_str().unwrap_or("").to_string())
        .collect()
}

/// Wait until the failback gateway at `admin` mirrors its `partitions` partitions.
pub(super) fn wait_failback_mirroring(admin: &str, name: &str, partitions: usize) {
    wait_for(
        "the failback gateway mirroring every partition",
        Duration::from_secs(60),
        || {
            let s = states(admin, name);
            s.len() == partitions && s.iter().all(|s| s == "MIRRORING")
        },
    );
}

/// Switch mirror `name` of `gw` over and wait until its forward listener is on the destination.
fn switched_over(gw: &TestGateway, name: &str, topic: &str, partitions: i32) {
    switch_over(gw, name, topic, partitions);
    wait_for(
        "the route on the destination",
        Duration::from_secs(10),
        || forward_side(&gw.admin(), name) == "destination",
    );
}

/// Wait until `writer` acknowledged `more` records past `from`.
fn writes_on(writer: &SourceWriter, from: usize, more: usize, what: &str) {
    wait_for(what, Duration::from_secs(60), || {
        writer.acked() >= from + more
    });
}

#[test]
fn a_switch_back_takes_forwarded_producers_to_the_old_source_with_their_sessions_and_a_later_switchover_carries_them_again(
) {
    let a = harness::cluster("source");
    let b = harness::cluster("destination");
    let topic = harness::unique_topic("switchback");
    harness::create_topic(&a, &topic, 2, None);
    let (cfg, forward) = forward_config("back", &[&topic], &a);
    let g1 = TestGateway::start(cfg);
    // The application knows only the forward listener: its producer gets its id from A.
    let app = SourceWriter::start(&forward, &topic, "app", 1_000_000, 300);
    // A consumer group reads through the forward listener all along, committing as it goes.
    let group = format!("switchback-{}", std::process::id());
    let reader = GroupReader::start(&forward, &topic, &group);
    writes_on(&app, 0, 300, "records through the forward listener");
    let on_a: Vec<Vec<(i64, i32)>> = (0..2).map(|p| producer_ids(&a, &topic, p)).collect();
    switched_over(&g1, "back", &topic, 2);
    // A producer that starts after the switchover gets its id from B.
    let late = SourceWriter::start(&forward, &topic, "late", 1_000_000, 200);
    writes_on(
        &late,
        0,
        200,
        "the late producer's records on the destination",
    );

    // Refused while no failback gateway mirrors B onto A, and nothing changes.
    let (status, body) = switch_back(&g1, "back", ("127.0.0.1:1", "nowhere"), "");
    assert_eq!(status, 409, "{body}");
    assert_eq!(forward_side(&g1.admin(), "back"), "destination", "{body}");

    // The failback gateway in front of A mirrors B back: A's log is B's prefix (aligned).
    let g2 = failback_gateway("onto-a", &topic, &a, &b);
    let failback = (g2.admin(), "onto-a".to_string());
    let failback = (failback.0.as_str(), failback.1.as_str());
    wait_failback_mirroring(failback.0, "onto-a", 2);
    let (status, body) = switch_back(&g1, "back", failback, "?dry_run=true");
    assert_eq!(status, 200, "dry run: {body}");
    let dry: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(
        dry["side"], "destination",
        "the dry run changes nothing: {body}"
    );
    assert_eq!(
        dry["partitions"].as_array().map(Vec::len),
        Some(2),
        "{body}"
    );

    let at_back = (app.acked(), late.acked());
    // The command line's switch back (one call; exit 0 once the listener is on the source).
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mirrorgate"))
        .args([
            "switchback",
            "back",
            "--admin",
            &g1.admin(),
            "--via",
            failback.0,
        ])
        .args(["--via-mirror", failback.1])
        .output()
        .expect("mirrorgate switchback");
    let body = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "switch back: {:?} {body} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let answer: serde_json::Value = serde_json::from_str(&body).expect("json");
    eprintln!("switchback: {body}");
    assert_eq!(answer["side"], "source", "{body}");
    assert_eq!(answer["failback_failed_over_by_this_call"], true, "{body}");
    assert_eq!(
        states(&g2.admin(), "onto-a"),
        vec!["STOPPED", "STOPPED"],
        "the failback gateway failed over"
    );
    writes_on(
        &app,
        at_back.0,
        300,
        "the application's records after the switch back",
    );
    writes_on(
        &late,
        at_back.1,
        200,
        "the late producer's records after the switch back",
    );
    let records_on_a_after = |p: i32| keys(&a, &topic, p).len();
    let on_a_at_back: usize = (0..2).map(records_on_a_after).sum();
    assert!(
        on_a_at_back > at_back.0 + at_back.1,
        "records after the switch back go to A ({on_a_at_back} on A, {at_back:?} at the switch back)"
    );
    // The sessions went on on A: the producer A gave its id to is there under that id and
    // epoch (a bump or a new id would show), and so is the one B gave its id to.
    for p in 0..2 {
        let now = producer_ids(&a, &topic, p);
        for id in &on_a[p as usize] {
            assert!(
                now.contains(id),
                "partition {p}: A goes on with {id:?}: {now:?}"
            );
            assert!(
                now.iter().filter(|r| r.0 == id.0).all(|r| r.1 == id.1),
                "partition {p}: the producer kept its epoch: {now:?}"
            );
        }
    }
    // The mirror follows A again: B gets what was written on A.
    let back = partitions_json(&g1.admin(), "back");
    assert!(
        back.iter().all(|p| p["state"] == "MIRRORING"),
        "the mirror started again: {back:?}"
    );

    // A later switchover carries both producers to B again, their sessions kept.
    let at_second = (app.acked(), late.acked());
    let on_b_before: Vec<Vec<(i64, i32)>> = (0..2).map(|p| producer_ids(&b, &topic, p)).collect();
    switch_over(&g1, "back", &topic, 2);
    wait_for(
        "the route on the destination again",
        Duration::from_secs(10),
        || forward_side(&g1.admin(), "back") == "destination",
    );
    writes_on(
        &app,
        at_second.0,
        300,
        "the application's records after the second switchover",
    );
    writes_on(
        &late,
        at_second.1,
        200,
        "the late producer's records after the second switchover",
    );
    let acked = (app.finish(true), late.finish(true));
    // No error reached either producer (finish asserts it); every acknowledged record is on B
    // once, in order, and on A up to the second switchover.
    assert_acknowledged_once_in_order(&b, &topic, "app", acked.0);
    assert_acknowledged_once_in_order(&b, &topic, "late", acked.1);
    assert_acknowledged_once_in_order(&a, &topic, "app", at_second.0);
    assert_acknowledged_once_in_order(&a, &topic, "late", at_second.1);
    // The group read every acknowledged record across the three switches (re-reads allowed).
    let total = acked.0 + acked.1;
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline && reader.read() < total {
        std::thread::sleep(Duration::from_millis(100));
    }
    let (read, errors) = reader.finish();
    let read: BTreeSet<String> = read.into_iter().collect();
    let skipped: Vec<String> = (0..acked.0)
        .map(|n| format!("app-{n}"))
        .chain((0..acked.1).map(|n| format!("late-{n}")))
        .filter(|k| !read.contains(k))
        .collect();
    eprintln!(
        "switchback: the group read {} distinct records of {total}; errors {errors:?}",
        read.len()
    );
    assert!(
        skipped.is_empty(),
        "records the group never read: {skipped:?}"
    );
    for p in 0..2 {
        let now = producer_ids(&b, &topic, p);
        for id in &on_b_before[p as usize] {
            assert!(
                now.iter().filter(|r| r.0 == id.0).all(|r| r.1 == id.1),
                "partition {p}: {id:?} kept its epoch across the second switchover: {now:?}"
            );
        }
    }
}

#[test]
fn a_switch_back_is_refused_and_changes_nothing_while_the_old_source_holds_records_the_destination_never_had(
) {
    let a = harness::cluster("source");
    let b = harness::cluster("destination");
    let topic = harness::unique_topic("switchback-diverged");
    harness::create_topic(&a, &topic, 1, None);
    let (cfg, forward) = forward_config("diverged", &[&topic], &a);
    let g1 = TestGateway::start(cfg);
    harness::produce_keyed(&forward, &topic, 50, &[]);
    switched_over(&g1, "diverged", &topic, 1);
    harness::produce_keyed(&forward, &topic, 50, &[]);
    let g2 = failback_gateway("onto-a", &topic, &a, &b);
    wait_for("A equal to B", Duration::from_secs(60), || {
        keys(&a, &topic, 0) == keys(&b, &topic, 0)
    });
    // Someone writes to the old source behind the gateways' backs.
    harness::produce_keyed(&a, &topic, 1, &[]);
    let (status, body) = switch_back(&g1, "diverged", (&g2.admin(), "onto-a"), "");
    assert_eq!(status, 409, "{body}");
    assert!(
        body.contains("records the destination never had"),
        "the reason names the divergence: {body}"
    );
    assert_eq!(forward_side(&g1.admin(), "diverged"), "destination");
    assert_eq!(
        states(&g2.admin(), "onto-a"),
        vec!["MIRRORING"],
        "the failback gateway did not fail over"
    );
    // The clients go on writing on the destination.
    let after = harness::produce_keyed(&forward, &topic, 10, &[]);
    assert_eq!(after.len(), 10);
}

#[test]
fn java_librdkafka_and_kafka_python_producers_that_began_on_the_destination_see_no_error_across_a_switch_back(
) {
    let a = harness::cluster("source");
    let b = harness::cluster("destination");
    let topic = harness::unique_topic("switchback-clients");
    harness::create_topic(&a, &topic, 2, None);
    let (cfg, forward) = forward_config("backc", &[&topic], &a);
    let g1 = TestGateway::start(cfg);
    harness::produce_keyed(&forward, &topic, 20, &[]);
    switched_over(&g1, "backc", &topic, 2);
    let g2 = failback_gateway("backc-onto-a", &topic, &a, &b);
    let failback = g2.admin();
    // The clients start on the destination (their producer ids are the destination's), and
    // cross the switch back to A.
    let runs = three_producers_across(&forward, &topic, || {
        wait_failback_mirroring(&failback, "backc-onto-a", 2);
        let (status, body) = switch_back(&g1, "backc", (&failback, "backc-onto-a"), "");
        assert_eq!(status, 200, "switch back: {body}");
    });
    assert_eq!(forward_side(&g1.admin(), "backc"), "source");
    // Every acknowledged record on A once and in order, under the ids and epochs B gave.
    assert_crossed_without_error(&runs, &b, &a, &topic, 2);
}
