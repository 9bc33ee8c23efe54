//! MirrorMaker 2 (connect-mirror from the rig's jars) as an external mirroring tool producing to
//! the gateway's mirror listener: it mirrors, the PSM tracks its producers, local writes stay
//! refused, and it is fenced at failover.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::failover::{failover, mirror_config, read_log, wait_stopped};
use crate::gw::TestGateway;
use crate::harness;
use crate::psm_differential::{batch, gateway_producers, RawConn};

/// MirrorMaker 2, stopped when dropped.
struct Mm2(Child);
impl Drop for Mm2 {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn count_records(bootstrap: &str, topic: &str, partitions: i32) -> usize {
    (0..partitions)
        .map(|p| {
            read_log(bootstrap, topic, p)
                .records
                .iter()
                .filter(|r| !r.control && r.key.as_deref() != Some("__mirrorgate_barrier"))
                .count()
        })
        .sum()
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
    let props = dir.path().join("mm2.properties");
    std::fs::write(
        &props,
        format!(
            "clusters = src, dst\n\
             src.bootstrap.servers = {source}\n\
             dst.bootstrap.servers = {}\n\
             src->dst.enabled = true\n\
             src->dst.topics = {topic}\n\
             dst->src.enabled = false\n\
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
             dst.producer.enable.idempotence = true\n",
            gw.mirror_bootstrap()
        ),
    )
    .expect("write mm2.properties");
    let log = std::fs::File::create(dir.path().join("mm2.log")).expect("log");
    let mm2 = Mm2(Command::new(harness::repo().join("integration/rig"))
        .args(["java", "org.apache.kafka.connect.mirror.MirrorMaker"])
        .arg(&props)
        .args(["--clusters", "dst"])
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .stdin(Stdio::null())
        .spawn()
        .expect("start MirrorMaker 2"));
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
    // The PSM tracks MirrorMaker's idempotent producer.
    let tracked: usize = (0..2)
        .map(|p| gateway_producers(&gw.admin(), &topic, p).len())
        .sum();
    assert!(tracked >= 1, "the PSM tracks MirrorMaker's producer");
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
