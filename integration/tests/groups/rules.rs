//! The sync's rules on real clusters: a group active on the destination is left alone, a source
//! commit past the mirrored end is clamped to it, nothing is written after the failover; the
//! translate API and CLI answer bad input clearly.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::*;
use crate::failover::{failover, wait_stopped};

/// A one-partition topic on the source with `n` records, mirrored by a gateway.
fn mirrored_topic(prefix: &str, name: &str, n: usize) -> (TestGateway, String, String) {
    let source = harness::cluster("source");
    let topic = harness::unique_topic(prefix);
    harness::create_topic(&source, &topic, 1, None);
    produce(&source, &topic, "a", n, 1);
    let gw = TestGateway::start(groups_config(name, &[&topic], &source));
    wait_mirrored(&gw, name, &source, &topic, 1);
    (gw, source, topic)
}

/// A member of `group` on the destination cluster that never commits, until dropped.
struct ActiveMember {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ActiveMember {
    fn join(topic: &str, group: &str) -> ActiveMember {
        let c: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", harness::cluster("destination"))
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .set("session.timeout.ms", "10000")
            .create()
            .expect("consumer");
        c.subscribe(&[topic]).expect("subscribe");
        let deadline = Instant::now() + Duration::from_secs(60);
        while c.assignment().map(|a| a.count()).unwrap_or(0) == 0 {
            assert!(Instant::now() < deadline, "no assignment for {group}");
            let _ = c.poll(Duration::from_millis(100));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                let _ = c.poll(Duration::from_millis(100));
            }
        });
        ActiveMember {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for ActiveMember {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[test]
fn a_group_active_on_the_destination_is_not_overwritten_and_reported_skipped_active() {
    let name = "active";
    let (gw, source, topic) = mirrored_topic("groups-active", name, 100);
    let group = harness::unique_topic("groups-active-g");
    let member = ActiveMember::join(&topic, &group);
    rdkafka_consume(&source, &topic, &group, 40);
    wait_for(
        "the group reported skipped_active",
        Duration::from_secs(60),
        || group_json(&gw.admin(), name, &group).is_some_and(|g| g["state"] == "skipped_active"),
    );
    assert_eq!(destination_committed(&group, &topic, 1), BTreeMap::new());
    assert!(gw.metric("mirrorgate_group_sync_skipped_active_total{mirror=\"active\"}") >= 1.0);
    drop(member);
}

#[test]
fn a_source_commit_past_the_mirrored_end_is_clamped_to_the_mirrored_end() {
    let name = "clamp";
    let (gw, source, topic) = mirrored_topic("groups-clamp", name, 100);
    mirror_op(&gw.admin(), name, "pause");
    produce(&source, &topic, "b", 50, 1);
    let group = harness::unique_topic("groups-clamp-g");
    let read = rdkafka_consume(&source, &topic, &group, 150);
    assert_eq!(positions(&read), BTreeMap::from([(0, 150)]));
    let mirrored_end = gw
        .gateway
        .agent
        .as_ref()
        .expect("agent")
        .offset_map(name, &topic, 0)
        .and_then(|m| m.next())
        .expect("map")
        .1;
    assert!(mirrored_end < 150, "paused before the new records");
    wait_synced(
        &gw.admin(),
        name,
        &group,
        &BTreeMap::from([(0, mirrored_end)]),
    );
    let g = group_json(&gw.admin(), name, &group).expect("group");
    assert_eq!(g["partitions"][0]["clamped"], true, "{g}");
    assert_eq!(
        destination_committed(&group, &topic, 1),
        BTreeMap::from([(0, mirrored_end)])
    );
}

#[test]
fn after_failover_offsets_the_application_commits_on_the_destination_stay_untouched() {
    let name = "after";
    let (gw, source, topic) = mirrored_topic("groups-after", name, 100);
    let group = harness::unique_topic("groups-after-g");
    rdkafka_consume(&source, &topic, &group, 30);
    wait_synced(&gw.admin(), name, &group, &BTreeMap::from([(0, 30)]));
    failover(&gw.admin(), name);
    wait_stopped(&gw.admin(), name);
    assert_eq!(groups_json(&gw.admin(), name)["phase"], "stopped");
    let commits = gw.metric("mirrorgate_group_sync_commits_total{mirror=\"after\"}");

    // The application moves on through the gateway; the source's group moves on too.
    rdkafka_consume(&gw.bootstrap(), &topic, &group, 10);
    rdkafka_consume(&source, &topic, &group, 50);
    // Ten sync intervals: rounds would have run in that time if anything still ran them.
    std::thread::sleep(Duration::from_millis(10 * SYNC_INTERVAL_MS));
    assert_eq!(
        destination_committed(&group, &topic, 1),
        BTreeMap::from([(0, 40)])
    );
    assert_eq!(
        gw.metric("mirrorgate_group_sync_commits_total{mirror=\"after\"}"),
        commits
    );
}

#[test]
fn the_translate_api_maps_offsets_and_answers_bad_input_with_400_and_unknown_names_with_404() {
    let name = "translate";
    let (gw, _source, topic) = mirrored_topic("groups-translate", name, 20);
    let call = |q: &str| {
        admin_call(
            &gw.admin(),
            Method::GET,
            &format!("/v1/mirrors/{name}/offsets/translate?{q}"),
            None,
        )
    };
    let (status, body) = call(&format!("topic={topic}&partition=0&offset=7"));
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(v["destination_offset"], 7, "{v}");
    let (status, body) = call(&format!(
        "topic={topic}&partition=0&offset=7&direction=to_source"
    ));
    assert_eq!(status, 200, "{body}");
    for bad in [
        format!("topic={topic}&partition=x&offset=1"),
        format!("topic={topic}&partition=0"),
        format!("topic={topic}&partition=0&offset=-3"),
        "partition=0&offset=1".to_string(),
    ] {
        let (status, body) = call(&bad);
        assert_eq!(status, 400, "{bad}: {body}");
        assert!(body.contains("error"), "{body}");
    }
    let (status, _) = call(&format!("topic={topic}&partition=9&offset=1"));
    assert_eq!(status, 404);
    let (status, _) = admin_call(
        &gw.admin(),
        Method::GET,
        &format!("/v1/mirrors/nope/offsets/translate?topic={topic}&partition=0&offset=1"),
        None,
    );
    assert_eq!(status, 404);
}

#[test]
fn the_offsets_translate_cli_prints_the_destination_offset_and_refuses_bad_input() {
    let name = "cli";
    let (gw, _source, topic) = mirrored_topic("groups-cli", name, 20);
    let run = |args: &[&str]| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_mirrorgate"));
        cmd.args([
            "offsets",
            "translate",
            "--admin",
            &gw.admin(),
            "--mirror",
            name,
        ]);
        cmd.args(args);
        harness::run_with_timeout(cmd, Duration::from_secs(30))
    };
    let ok = run(&["--topic", &topic, "--partition", "0", "--offset", "5"]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&ok.stdout).expect("json");
    assert_eq!(v["destination_offset"], 5);
    let missing = run(&["--topic", &topic, "--partition", "3", "--offset", "5"]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no offset map"));
    let bad = run(&["--topic", &topic, "--partition", "zero", "--offset", "5"]);
    assert!(!bad.status.success());
    assert!(!String::from_utf8_lossy(&bad.stderr).contains("panicked"));
}
