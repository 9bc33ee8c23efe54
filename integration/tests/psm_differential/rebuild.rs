//! The PSM rebuilt from snapshot and log after a kill -9 equals the one before, and a partition
//! whose outcomes the PSM cannot know (`acks=0`, a write behind the gateway's back) is rebuilt
//! from the log and agrees with the broker again.

use super::*;

/// The last log offset the PSM snapshot of a partition covers, read from the state directory
/// (`None`: no readable snapshot).
fn snapshot_through(state_dir: &std::path::Path, topic: &str, partition: i32) -> Option<i64> {
    let store = mirrorgate::state::StateStore::open(state_dir).ok()?;
    let bytes = store
        .read(
            mirrorgate::psm::registry::SNAPSHOT_AREA,
            &mirrorgate::psm::registry::snapshot_name(topic, partition),
        )
        .ok()??;
    mirrorgate::psm::PartitionPsm::decode_snapshot(&bytes)
        .ok()
        .map(|(_, through)| through)
}

/// The offset after the last record of a destination partition (read from its leader).
fn destination_log_end(topic: &str, partition: i32) -> i64 {
    let log = crate::failover::read_log(&harness::cluster("destination"), topic, partition);
    log.records.last().map_or(0, |r| r.offset + 1)
}

/// `batches` of every "producer state rebuilt" log line of `topic`-`partition` in `log` with
/// `from_snapshot=true`.
fn snapshot_rebuilds(log: &str, topic: &str, partition: i32) -> Vec<u64> {
    log.lines()
        .filter(|l| {
            l.contains("producer state rebuilt")
                && l.contains(&format!("topic=\"{topic}\""))
                && l.contains(&format!("partition={partition} "))
                && l.contains("from_snapshot=true")
        })
        .filter_map(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix("batches="))
                .and_then(|n| n.parse().ok())
        })
        .collect()
}

/// Runs alone: the gateway process is killed with -9; on restart the PSM is rebuilt from its
/// snapshot plus the log tail written after it, and equals the one before (and the broker's
/// own view).
///
/// Round 1 is snapshotted (the test waits until the snapshot covers it); the gateway is then
/// restarted with snapshots only every hour, so round 2 is in no snapshot when it is killed
/// again: the second rebuild must replay it from the log.
#[test]
fn disruptive_psm_rebuilt_after_kill_9_equals_the_one_before() {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("psm-restart");
    harness::create_topic(&destination, &topic, 2, Some(&[1, 2]));
    let mut cfg = crate::failover::mirror_config("restart", &[&topic]);
    let mut gw = crate::gw::ProcessGateway::start(cfg.clone(), &[]);
    harness::produce_keyed(&gw.mirror_bootstrap(), &topic, 3_000, &[]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !(0..2).all(|p| {
        snapshot_through(&cfg.state_dir, &topic, p) == Some(destination_log_end(&topic, p) - 1)
    }) {
        assert!(
            Instant::now() < deadline,
            "no snapshot covering round 1: {:?}",
            (0..2)
                .map(|p| snapshot_through(&cfg.state_dir, &topic, p))
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    gw.kill9();
    cfg.psm.snapshot_interval_ms = 3_600_000;
    std::fs::write(&gw.config_path, mirrorgate::config::render_effective(&cfg))
        .expect("rewrite the config");
    gw.restart(&[]);
    harness::produce_keyed(&gw.mirror_bootstrap(), &topic, 3_000, &[]);
    let before: Vec<Vec<ProducerRow>> = (0..2)
        .map(|p| gateway_producers(&gw.admin(), &topic, p))
        .collect();
    assert!(before.iter().all(|b| b.len() == 2), "{before:?}");
    for p in 0..2 {
        let through = snapshot_through(&cfg.state_dir, &topic, p).expect("snapshot");
        assert!(
            through < destination_log_end(&topic, p) - 1,
            "partition {p}: the snapshot (through {through}) already covers round 2"
        );
    }
    gw.kill9();
    let log_from = gw.log().len();
    gw.restart(&[]);
    for (p, node) in [(0, 1), (1, 2)] {
        let after = gateway_producers(&gw.admin(), &topic, p);
        assert_eq!(
            after, before[p as usize],
            "partition {p}: rebuilt PSM (left) vs before the kill (right)"
        );
        let broker = broker_producers(
            &mut RawConn::connect(&format!("127.0.0.1:{}", gw.port_for(node))),
            &topic,
            p,
        );
        assert_eq!(
            after, broker,
            "partition {p}: rebuilt PSM (left) vs broker (right)"
        );
        let v = gateway_producers_json(&gw.admin(), &topic, p);
        assert_eq!(v["ready"], true);
    }
    // Each partition was rebuilt from its snapshot plus a non-empty tail (round 2).
    let log = gw.log()[log_from..].to_string();
    let mut tail_batches = 0;
    for p in 0..2 {
        let rebuilds = snapshot_rebuilds(&log, &topic, p);
        assert!(
            rebuilds.len() == 1 && rebuilds[0] > 0,
            "partition {p}: one rebuild from the snapshot replaying round 2, got batches {rebuilds:?}:\n{log}"
        );
        tail_batches += rebuilds[0];
    }
    let (status, metrics) =
        crate::gw::admin_call(&gw.admin(), hyper::Method::GET, "/metrics", None);
    assert_eq!(status, 200);
    let replayed: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("mirrorgate_psm_rebuild_batches_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no mirrorgate_psm_rebuild_batches_total:\n{metrics}"));
    assert_eq!(
        replayed, tail_batches as f64,
        "batches replayed by the rebuilds after the kill"
    );
}

// ------------------------------------------------------------------ the PSM follows the broker
// (README: a divergence, REQUEST_TIMED_OUT or acks=0 triggers a rebuild from the log)

/// Value of one sample line `series value` of the gateway's metrics; panics when the series is
/// missing (a renamed metric must not read as 0).
fn metric_present(gw: &TestGateway, series: &str) -> f64 {
    let text = gw.metrics();
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok()))
        .unwrap_or_else(|| panic!("no series {series} in the metrics:\n{text}"))
}

/// Wait (30 s at most) until the partition was rebuilt again since `rebuilds_before` and is
/// settled; then its producer list must equal the broker's DescribeProducers (both limited to
/// the producers `keep` selects). Returns the gateway's producer ids.
fn wait_rebuilt_and_equal_to_the_broker(
    gw: &TestGateway,
    topic: &str,
    rebuilds_before: f64,
    keep: impl Fn(i64) -> bool,
) -> std::collections::BTreeSet<i64> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while metric_present(gw, "mirrorgate_psm_rebuilds_total") <= rebuilds_before {
        assert!(
            Instant::now() < deadline,
            "no PSM rebuild within 30 s (rebuilds_total still {rebuilds_before})"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    wait_psm_settled(gw, topic, 1);
    let differences = producer_list_differences(gw, topic, &[1], keep);
    assert!(
        differences.is_empty(),
        "after the rebuild the PSM disagrees with the broker:\n{}",
        differences.join("\n")
    );
    pids(&gateway_producers(&gw.admin(), topic, 0))
}

/// Three acknowledged batches of producer `pid` (sequences 0..3) on `conn`; waits until the
/// PSM is settled.
fn known_producer(gw: &TestGateway, conn: &mut RawConn, topic: &str, pid: i64) {
    for seq in 0..3 {
        let (code, _) = conn.produce(topic, 0, batch(pid, 0, seq, 1, &format!("known-{seq}")));
        assert_eq!(code, 0, "seq {seq}");
    }
    wait_psm_settled(gw, topic, 1);
    assert!(
        pids(&gateway_producers(&gw.admin(), topic, 0)).contains(&pid),
        "the PSM follows the acknowledged producer"
    );
}

/// A produce with acks=0 gets no answer, so the gateway cannot learn where (or whether) the
/// batch was appended: the partition is rebuilt from the log, after which the PSM holds the
/// producer it never saw acknowledged, as the broker does. (acks=0 is refused on the mirror
/// listener; it reaches a tracked partition through the client listener after a failover.)
#[test]
fn an_acks_0_produce_to_a_tracked_partition_is_followed_by_a_rebuild_from_the_log() {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("psm-acks0");
    harness::create_topic(&destination, &topic, 1, Some(&[1]));
    let gw = TestGateway::start(crate::failover::mirror_config("acks0", &[&topic]));
    crate::failover::wait_mirroring(&gw.admin(), "acks0", 1);
    crate::failover::failover(&gw.admin(), "acks0");
    crate::failover::wait_stopped(&gw.admin(), "acks0");
    wait_psm_settled(&gw, &topic, 1);
    let mut conn = RawConn::connect(&format!("127.0.0.1:{}", gw.port_for(1)));
    let base = 8_700_000 + (std::process::id() as i64 % 1000) * 10;
    let (known, unanswered) = (base + 1, base + 2);
    known_producer(&gw, &mut conn, &topic, known);
    let rebuilds = metric_present(&gw, "mirrorgate_psm_rebuilds_total");
    conn.produce_acks_0(&topic, 0, batch(unanswered, 0, 0, 2, "acks0"));
    // The broker appended it (it lists the producer) ...
    let mut broker = RawConn::connect(&destination_leader(&topic));
    let deadline = Instant::now() + Duration::from_secs(30);
    while !pids(&broker_producers(&mut broker, &topic, 0)).contains(&unanswered) {
        assert!(
            Instant::now() < deadline,
            "the broker never appended the acks=0 batch"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // ... and the gateway learns it from the log. (The broker also lists the barrier's
    // producer id, which the PSM clears at the barrier.)
    let after = wait_rebuilt_and_equal_to_the_broker(&gw, &topic, rebuilds, |pid| {
        pid == known || pid == unanswered
    });
    assert!(
        after.contains(&unanswered) && after.contains(&known),
        "{after:?}"
    );
}

/// A write that bypasses the gateway (straight to the partition leader) leaves the PSM behind
/// the broker: the next batch of that producer through the gateway is judged out of order
/// while the broker appends it. The gateway counts the divergence, follows the broker and
/// rebuilds the partition from the log, after which it also holds the producer that only ever
/// wrote behind its back.
#[test]
fn a_write_behind_the_gateways_back_diverges_and_is_followed_by_a_rebuild_from_the_log() {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("psm-behind");
    harness::create_topic(&destination, &topic, 1, Some(&[1]));
    let gw = gateway_tracking(&topic);
    let mut conn = RawConn::connect(&format!("127.0.0.1:{}", gw.mirror_port_for(1)));
    let base = 8_800_000 + (std::process::id() as i64 % 1000) * 10;
    let (known, hidden) = (base + 1, base + 2);
    known_producer(&gw, &mut conn, &topic, known);
    let rebuilds = metric_present(&gw, "mirrorgate_psm_rebuilds_total");
    let diverged = || metric_present(&gw, r#"mirrorgate_psm_batches_total{result="diverged"}"#);
    let diverged_before = diverged();
    // Behind the gateway: the known producer's sequence 3, and a producer of its own.
    let mut direct = RawConn::connect(&destination_leader(&topic));
    for b in [
        batch(known, 0, 3, 1, "behind"),
        batch(hidden, 0, 0, 2, "hidden"),
    ] {
        assert_eq!(direct.produce(&topic, 0, b).0, 0);
    }
    // Through the gateway: sequence 4 follows the broker's 3, not the PSM's 2.
    let (code, _) = conn.produce(&topic, 0, batch(known, 0, 4, 1, "after"));
    assert_eq!(code, 0, "the broker appends sequence 4");
    assert_eq!(
        diverged(),
        diverged_before + 1.0,
        "the PSM's verdict (out of order) disagreed with the broker"
    );
    let after = wait_rebuilt_and_equal_to_the_broker(&gw, &topic, rebuilds, |_| true);
    assert!(after.contains(&hidden), "{after:?}");
}
