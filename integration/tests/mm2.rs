//! MirrorMaker 2 (connect-mirror from the rig's jars) as an external mirroring tool producing to
//! the gateway's mirror listener: it mirrors, the PSM tracks its producers, local writes stay
//! refused, and it is fenced at failover.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::failover::{failover, mirror_config, read_log, wait_stopped, LogRecord};
use crate::gw::TestGateway;
use crate::harness;
use crate::psm_differential::{batch, broker_producers, gateway_producers, RawConn};

/// MirrorMaker 2, stopped when dropped.
struct Mm2(Child);
impl Drop for Mm2 {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The records of a partition that are neither control records nor barriers.
fn mirrored_records(bootstrap: &str, topic: &str, partition: i32) -> Vec<LogRecord> {
    read_log(bootstrap, topic, partition)
        .records
        .into_iter()
        .filter(|r| !r.control && r.key.as_deref() != Some("__mirrorgate_barrier"))
        .collect()
}

fn count_records(bootstrap: &str, topic: &str, partitions: i32) -> usize {
    (0..partitions)
        .map(|p| mirrored_records(bootstrap, topic, p).len())
        .sum()
}

/// Start MirrorMaker 2 copying `topic` from `from` to `to` (identity names, idempotent
/// producer), logging to `dir/mm2.log`.
fn start_mm2(dir: &std::path::Path, from: &str, to: &str, topic: &str) -> Mm2 {
    // Cluster aliases of this MirrorMaker alone: its Connect group (`<src>-mm2`) and internal
    // topics are named after them, and two MirrorMakers sharing them (tests running side by
    // side against one destination) would join one group and run each other's tasks.
    static STARTED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tag = format!("{}x{n}", std::process::id());
    let (src, dst) = (format!("src{tag}"), format!("dst{tag}"));
    let props = dir.join("mm2.properties");
    std::fs::write(
        &props,
        format!(
            "clusters = {src}, {dst}\n\
             {src}.bootstrap.servers = {from}\n\
             {dst}.bootstrap.servers = {to}\n\
             {src}->{dst}.enabled = true\n\
             {src}->{dst}.topics = {topic}\n\
             {dst}->{src}.enabled = false\n\
             replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy\n\
             replication.factor = 1\n\
             checkpoints.topic.replication.factor = 1\n\
             heartbeats.topic.replication.factor = 1\n\
             offset-syncs.topic.replication.factor = 1\n\
             offset.storage.replication.factor = 1\n\
             status.storage.replication.factor = 1\n\
             config.storage.replication.factor = 1\n\
             sync.topic.acls.enabled = false\n\
             sync.topic.configs.enabled = false\n\
             emit.checkpoints.enabled = false\n\
             sync.group.offsets.enabled = false\n\
             refresh.topics.interval.seconds = 5\n\
             {dst}.producer.enable.idempotence = true\n"
        ),
    )
    .expect("write mm2.properties");
    let log = std::fs::File::create(dir.join("mm2.log")).expect("log");
    Mm2(Command::new(harness::repo().join("integration/rig"))
        .args(["java", "org.apache.kafka.connect.mirror.MirrorMaker"])
        .arg(&props)
        .args(["--clusters", dst.as_str()])
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .stdin(Stdio::null())
        .spawn()
        .expect("start MirrorMaker 2"))
}

#[test]
fn mirrormaker_2_through_the_mirror_listener_is_tracked_read_only_and_fenced() {
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("mm2");
    harness::create_topic(&source, &topic, 2, None);
    harness::create_topic(&destination, &topic, 2, Some(&[1, 2]));
    harness::produce_keyed(&source, &topic, 200, &[]);
    let gw = TestGateway::start(mirror_config("mm2", &[&topic]));
    crate::failover::wait_mirroring(&gw.admin(), "mm2", 2);
    let dir = tempfile::tempdir().expect("tempdir");
    let mm2 = start_mm2(dir.path(), &source, &gw.mirror_bootstrap(), &topic);
    let mm2_log = || std::fs::read_to_string(dir.path().join("mm2.log")).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(150);
    while count_records(&destination, &topic, 2) < 200 {
        assert!(
            Instant::now() < deadline,
            "MirrorMaker 2 did not mirror through the gateway; its log:\n{}",
            mm2_log()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    // Nothing more arrives: a record copied twice would show up as a 201st.
    let settle = Instant::now() + Duration::from_secs(3);
    while Instant::now() < settle {
        let n = count_records(&destination, &topic, 2);
        assert_eq!(
            n, 200,
            "MirrorMaker 2 mirrored {n} records for 200 at the source"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    // Each partition holds the source partition's records, in order: same keys, same values.
    for p in 0..2 {
        let at_source: Vec<_> = read_log(&source, &topic, p)
            .records
            .into_iter()
            .map(|r| (r.key, r.value))
            .collect();
        let mirrored: Vec<_> = mirrored_records(&destination, &topic, p)
            .into_iter()
            .map(|r| (r.key, r.value))
            .collect();
        assert_eq!(
            mirrored, at_source,
            "partition {p}: the destination (left) holds the source's records (right)"
        );
    }
    // The PSM tracks MirrorMaker's idempotent producer, exactly as the broker does.
    for p in 0..2 {
        let writers: std::collections::BTreeSet<i64> = mirrored_records(&destination, &topic, p)
            .iter()
            .map(|r| r.producer_id)
            .collect();
        let leader = harness::leader_addr(&destination, &topic, p);
        let broker = broker_producers(&mut RawConn::connect(&leader), &topic, p);
        let gateway = gateway_producers(&gw.admin(), &topic, p);
        assert_eq!(
            gateway, broker,
            "partition {p}: the PSM (left) vs DescribeProducers (right)"
        );
        let tracked: std::collections::BTreeSet<i64> = gateway.iter().map(|r| r.0).collect();
        assert!(
            !writers.contains(&-1) && tracked == writers,
            "partition {p}: the PSM tracks {tracked:?}, MirrorMaker's producers wrote {writers:?}"
        );
    }
    assert_eq!(
        gw.metric(r#"mirrorgate_psm_batches_total{result="diverged"}"#),
        0.0
    );
    // Local writes stay refused while mirroring.
    let mut local = RawConn::connect(&gw.bootstrap());
    assert_eq!(
        local.produce(&topic, 0, batch(-1, -1, -1, 1, "local")).0,
        44
    );
    // Failover fences MirrorMaker: what the source gets afterwards never lands after the barrier.
    failover(&gw.admin(), "mm2");
    wait_stopped(&gw.admin(), "mm2");
    harness::produce_keyed(&source, &topic, 100, &[]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while gw.metric(r#"mirrorgate_produce_rejected_total{reason="mirror_fenced"}"#) < 1.0 {
        assert!(
            Instant::now() < deadline,
            "MirrorMaker's writes after the failover were not fenced:\n{}",
            gw.metrics()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    for p in 0..2 {
        let l = read_log(&destination, &topic, p);
        assert_eq!(l.barriers.len(), 1);
        let barrier = l.barriers[0].0;
        assert!(
            l.records.iter().all(|r| r.offset <= barrier),
            "partition {p}: a mirrored record after the barrier"
        );
    }
    drop(mm2);
}

/// Review F7 (c): a chain. MirrorMaker 2 mirrors source → destination through the gateway; the
/// mirror fails over; a second MirrorMaker 2 then copies the topic from the destination's
/// brokers (not through the gateway) to the `third` cluster. A tool that re-produces records
/// copies whatever its consumer delivers: the barrier, a control batch, is skipped by that
/// consumer, so `third` gets exactly the mirrored and local records and no barrier.
#[test]
fn a_chained_mirrormaker_2_reading_the_destinations_brokers_never_copies_the_barrier() {
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let third = harness::cluster("third");
    let topic = harness::unique_topic("mm2chain");
    harness::create_topic(&source, &topic, 1, None);
    harness::create_topic(&destination, &topic, 1, Some(&[1]));
    harness::produce_keyed(&source, &topic, 50, &[]);
    let gw = TestGateway::start(mirror_config("mm2chain", &[&topic]));
    crate::failover::wait_mirroring(&gw.admin(), "mm2chain", 1);
    let first_dir = tempfile::tempdir().expect("tempdir");
    let first = start_mm2(first_dir.path(), &source, &gw.mirror_bootstrap(), &topic);
    let deadline = Instant::now() + Duration::from_secs(150);
    while count_records(&destination, &topic, 1) < 50 {
        assert!(
            Instant::now() < deadline,
            "MirrorMaker 2 did not mirror through the gateway; its log:\n{}",
            std::fs::read_to_string(first_dir.path().join("mm2.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    drop(first);
    failover(&gw.admin(), "mm2chain");
    wait_stopped(&gw.admin(), "mm2chain");
    // Local records after the barrier (values unlike the mirrored ones).
    let mut local = RawConn::connect(&gw.bootstrap());
    assert_eq!(
        local.produce(&topic, 0, batch(-1, -1, -1, 10, "local")).0,
        0
    );
    let at_destination = read_log(&destination, &topic, 0);
    assert_eq!(at_destination.barriers.len(), 1, "one barrier");
    let expected: Vec<Option<String>> = at_destination
        .records
        .iter()
        .filter(|r| !r.control && r.key.as_deref() != Some("__mirrorgate_barrier"))
        .map(|r| r.value.clone())
        .collect();
    assert_eq!(expected.len(), 60, "50 mirrored + 10 local records");
    // The topic exists on `third` with its leader known before the copy starts (a topic
    // MirrorMaker 2 creates may not serve fetches for a moment).
    harness::create_topic(&third, &topic, 1, None);
    let second_dir = tempfile::tempdir().expect("tempdir");
    let second = start_mm2(second_dir.path(), &destination, &third, &topic);
    let deadline = Instant::now() + Duration::from_secs(150);
    while count_records(&third, &topic, 1) < 60 {
        assert!(
            Instant::now() < deadline,
            "the chained MirrorMaker 2 did not copy the topic; its log:\n{}",
            std::fs::read_to_string(second_dir.path().join("mm2.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    // Let it run a little longer: anything more it copies is a barrier or a duplicate.
    std::thread::sleep(Duration::from_secs(5));
    drop(second);
    let at_third = read_log(&third, &topic, 0);
    let copied: Vec<Option<String>> = at_third.records.iter().map(|r| r.value.clone()).collect();
    assert!(
        at_third.barriers.is_empty(),
        "a barrier reached the next cluster: {:?}",
        at_third.barriers
    );
    assert!(
        at_third
            .records
            .iter()
            .all(|r| r.key.as_deref() != Some("__mirrorgate_barrier")),
        "a barrier record reached the next cluster"
    );
    // MirrorMaker 2 copies at least once (a task restarted while it starts re-copies from its
    // last committed offset): what matters here is that every record came across, in order,
    // and nothing else.
    let mut seen = std::collections::HashSet::new();
    let distinct: Vec<Option<String>> = copied
        .iter()
        .filter(|v| seen.insert((*v).clone()))
        .cloned()
        .collect();
    if distinct.len() != copied.len() {
        eprintln!(
            "MirrorMaker 2 copied {} record(s) twice",
            copied.len() - distinct.len()
        );
    }
    assert_eq!(
        distinct, expected,
        "the next cluster holds the destination's records, in order, and nothing else"
    );
}
