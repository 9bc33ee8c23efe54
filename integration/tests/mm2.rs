//! MirrorMaker 2 (connect-mirror from the rig's jars) as an external mirroring tool producing to
//! the gateway's mirror listener: it mirrors, the PSM tracks its producers, local writes stay
//! refused, and it is fenced at failover.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hyper::Method;
use mirrorgate::config::{Config, Mirroring};

use crate::failover::{failover, mirror_config, read_log, wait_stopped, LogRecord};
use crate::gw::{admin_call, TestGateway};
use crate::harness;
use crate::psm_differential::{batch, broker_producers, gateway_producers, RawConn};

/// MirrorMaker 2, stopped when dropped (the end of its log printed when a test failed).
struct Mm2 {
    child: Child,
    log: std::path::PathBuf,
}
impl Drop for Mm2 {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            eprintln!(
                "MirrorMaker 2's log ({}), its last 200 lines:\n{}",
                self.log.display(),
                lines[lines.len().saturating_sub(200)..].join("\n")
            );
        }
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

/// Each partition of `topic` on `destination` holds the source partition's records once each, in
/// order: same keys, same values.
fn assert_copied_in_order(source: &str, destination: &str, topic: &str, partitions: i32) {
    for p in 0..partitions {
        let at_source: Vec<_> = read_log(source, topic, p)
            .records
            .into_iter()
            .map(|r| (r.key, r.value))
            .collect();
        let mirrored: Vec<_> = mirrored_records(destination, topic, p)
            .into_iter()
            .map(|r| (r.key, r.value))
            .collect();
        assert_eq!(
            mirrored, at_source,
            "partition {p}: the destination (left) holds the source's records (right)"
        );
    }
}

fn count_records(bootstrap: &str, topic: &str, partitions: i32) -> usize {
    (0..partitions)
        .map(|p| mirrored_records(bootstrap, topic, p).len())
        .sum()
}

/// Start MirrorMaker 2 copying `topic` from `from` to `to` (identity names, idempotent
/// producer), logging to `dir/mm2.log`.
fn start_mm2(dir: &std::path::Path, from: &str, to: &str, topic: &str) -> Mm2 {
    start_mm2_tuned(dir, from, to, topic, &[])
}

/// [`start_mm2`] with client settings of its own: `consumer.X = V` for its consumer of `from`,
/// `producer.X = V` for its producer to `to` (MM2's `<alias>.consumer.X` and
/// `<alias>.producer.X`).
fn start_mm2_tuned(
    dir: &std::path::Path,
    from: &str,
    to: &str,
    topic: &str,
    tuning: &[&str],
) -> Mm2 {
    // Cluster aliases of this MirrorMaker alone: its Connect group (`<src>-mm2`) and internal
    // topics are named after them, and two MirrorMakers sharing them (tests running side by
    // side against one destination) would join one group and run each other's tasks.
    static STARTED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tag = format!("{}x{n}", std::process::id());
    let (src, dst) = (format!("src{tag}"), format!("dst{tag}"));
    let tuned: String = tuning
        .iter()
        .map(|line| match line.split_once('.') {
            Some(("consumer", _)) => format!("{src}.{line}\n"),
            Some(("producer", _)) => format!("{dst}.{line}\n"),
            _ => panic!("MirrorMaker 2 tuning {line:?}: consumer.X = V or producer.X = V"),
        })
        .collect();
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
             {dst}.producer.enable.idempotence = true\n{tuned}"
        ),
    )
    .expect("write mm2.properties");
    let log_path = dir.join("mm2.log");
    let log = std::fs::File::create(&log_path).expect("log");
    let child = Command::new(harness::repo().join("integration/rig"))
        .args(["java", "org.apache.kafka.connect.mirror.MirrorMaker"])
        .arg(&props)
        .args(["--clusters", dst.as_str()])
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .stdin(Stdio::null())
        .spawn()
        .expect("start MirrorMaker 2");
    Mm2 {
        child,
        log: log_path,
    }
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
    assert_copied_in_order(&source, &destination, &topic, 2);
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

/// A pause of the mirror holds MirrorMaker 2's writes with a retriable error, and a resume lets
/// it go on from where it stopped (found by the chaos run's MirrorMaker 2 profile, seed 104: a
/// pause answered its writes POLICY_VIOLATION, and MirrorMaker 2's task died for good).
#[test]
fn a_paused_mirror_holds_mirrormaker_2_and_a_resume_lets_it_go_on() {
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("mm2p");
    harness::create_topic(&source, &topic, 2, None);
    harness::create_topic(&destination, &topic, 2, Some(&[1, 2]));
    harness::produce_keyed(&source, &topic, 100, &[]);
    let gw = TestGateway::start(mirror_config("mm2p", &[&topic]));
    crate::failover::wait_mirroring(&gw.admin(), "mm2p", 2);
    let dir = tempfile::tempdir().expect("tempdir");
    let mm2 = start_mm2(dir.path(), &source, &gw.mirror_bootstrap(), &topic);
    let mm2_log = || std::fs::read_to_string(dir.path().join("mm2.log")).unwrap_or_default();
    wait_until(
        "MirrorMaker 2 copying the first 100 records",
        Duration::from_secs(150),
        || count_records(&destination, &topic, 2) >= 100,
    );
    let (status, body) = admin_call(&gw.admin(), Method::POST, "/v1/mirrors/mm2p/pause", None);
    assert_eq!(status, 200, "{body}");
    harness::produce_keyed(&source, &topic, 100, &[]);
    let refused = || {
        gw.metric(r#"mirrorgate_produce_rejected_total{reason="mirror_paused"}"#)
            + gw.metric(r#"mirrorgate_produce_rejected_total{reason="mirror_fenced"}"#)
    };
    wait_until(
        "MirrorMaker 2's writes refused while paused",
        Duration::from_secs(60),
        || refused() >= 1.0,
    );
    assert_eq!(
        count_records(&destination, &topic, 2),
        100,
        "nothing is mirrored while the mirror is paused"
    );
    let (status, body) = admin_call(&gw.admin(), Method::POST, "/v1/mirrors/mm2p/resume", None);
    assert_eq!(status, 200, "{body}");
    let deadline = Instant::now() + Duration::from_secs(90);
    while count_records(&destination, &topic, 2) < 200 {
        assert!(
            Instant::now() < deadline,
            "MirrorMaker 2 did not go on after the resume ({} of 200 records); its log:\n{}",
            count_records(&destination, &topic, 2),
            mm2_log()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_copied_in_order(&source, &destination, &topic, 2);
    assert_eq!(
        gw.metric(r#"mirrorgate_produce_rejected_total{reason="mirror_fenced"}"#),
        0.0,
        "a pause is not a fence"
    );
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

/// Wait until `cond` holds, at most `timeout` (then fail, saying `what`).
fn wait_until(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(Instant::now() < deadline, "not within {timeout:?}: {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A gateway config whose mirror `name` of `topics` is copied by another tool through the
/// mirror listener (`mirroring: external`), with `source` behind a forward listener of its own
/// ports; and that listener's bootstrap.
fn external_forward_config(name: &str, topics: &[&str], source: &str) -> (Config, String) {
    let (mut cfg, bootstrap) = crate::agent::forward::forward_config(name, topics, source);
    cfg.mirrors[0].mirroring = Mirroring::External;
    (cfg, bootstrap)
}

/// Forward mode with MirrorMaker 2 as the mirroring tool (`mirroring: external`): a Java
/// idempotent producer (acks=all) knows only the forward listener; MM2 copies the source into
/// the destination through the mirror listener; a switchover moves the producer to the
/// destination. MM2 rewrote the producer's batches under its own producer ids, so the session
/// cannot go on: the gateway refuses the old (producer id, epoch) with a retriable error, the
/// client bumps its epoch, and the application sees no error and loses nothing. MM2 copies at
/// least once, so records from before the switch may be on the destination twice.
#[test]
fn a_switchover_with_mirrormaker_2_moves_forward_producers_with_an_epoch_bump_and_loses_nothing() {
    use crate::agent::forward::JsonClient;
    use std::collections::{BTreeMap, BTreeSet};
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("mm2switch");
    harness::create_topic(&source, &topic, 2, None);
    harness::create_topic(&destination, &topic, 2, Some(&[1, 2]));
    let name = "mm2sw";
    let (cfg, forward) = external_forward_config(name, &[&topic], &source);
    let gw = TestGateway::start(cfg);
    let admin = gw.admin();
    crate::failover::wait_mirroring(&admin, name, 2);
    let dir = tempfile::tempdir().expect("tempdir");
    // Copy fast: MM2's lag is what the switchover's hold waits for.
    let _mm2 = start_mm2_tuned(
        dir.path(),
        &source,
        &gw.mirror_bootstrap(),
        &topic,
        &["consumer.fetch.max.wait.ms = 100", "producer.linger.ms = 0"],
    );
    // The application knows only the forward listener: 100 records a second, `java-N`.
    let producer = JsonClient::producer("java", "", &forward, &topic);
    wait_until(
        "300 records acknowledged through the forward listener",
        Duration::from_secs(120),
        || producer.count("ack") >= 300,
    );
    wait_until(
        "MirrorMaker 2 copying into the destination through the mirror listener",
        Duration::from_secs(150),
        || count_records(&destination, &topic, 2) >= 300,
    );

    // A topic the mirror does not cover, written through the forward listener: the dry run
    // names it (it would stay behind on the source).
    let other = format!("{topic}-other");
    harness::create_topic(&source, &other, 1, None);
    let (code, _) = crate::psm_differential::RawConn::connect(&forward).produce(
        &other,
        0,
        crate::psm_differential::batch(-1, -1, -1, 1, "other"),
    );
    assert_eq!(
        code, 0,
        "a write to an uncovered topic through the forward listener"
    );

    // The dry run (a JSON body) changes nothing and says the route is on the source.
    let path = format!("/v1/mirrors/{name}/switchover");
    let dry_run = || {
        let (status, body) =
            crate::gw::admin_call_body(&admin, Method::POST, &path, None, r#"{"dry_run": true}"#);
        assert_eq!(status, 200, "switchover dry run: {body}");
        serde_json::from_str::<serde_json::Value>(&body).expect("json")
    };
    wait_until(
        "the dry run naming the uncovered topic",
        Duration::from_secs(10),
        || {
            dry_run()["uncovered_topics"]
                .as_array()
                .is_some_and(|t| t.iter().any(|t| t == other.as_str()))
        },
    );
    let dry = dry_run();
    eprintln!("mm2 switchover: dry run {dry}");
    assert_eq!(dry["side"], "source", "the dry run changed nothing: {dry}");
    assert_eq!(dry["mirroring"], "external", "{dry}");
    assert_eq!(dry["agent_runs_here"], false, "{dry}");

    // The switchover: hold, drain, wait until MM2 copied the source's tails, fail over.
    crate::failover::switchover(&admin, name);
    let route = format!("/v1/mirrors/{name}/forward");
    wait_until(
        "the forward route on the destination",
        Duration::from_secs(30),
        || {
            let (status, body) = admin_call(&admin, Method::GET, &route, None);
            status == 200
                && serde_json::from_str::<serde_json::Value>(&body)
                    .is_ok_and(|v| v["side"] == "destination")
        },
    );
    let at_switch = producer.count("ack");
    wait_until(
        "300 more records acknowledged after the switchover",
        Duration::from_secs(120),
        || producer.count("ack") >= at_switch + 300,
    );
    let events = producer.finish();

    // A record written to the source now is copied by MM2 and fenced: never after a barrier.
    harness::produce_keyed(&source, &topic, 50, &[]);
    wait_until(
        "MirrorMaker's writes after the switchover fenced",
        Duration::from_secs(60),
        || gw.metric(r#"mirrorgate_produce_rejected_total{reason="mirror_fenced"}"#) >= 1.0,
    );

    // No error reached the application.
    let errors: Vec<&serde_json::Value> = events.iter().filter(|e| e["e"] == "err").collect();
    assert!(
        errors.is_empty(),
        "errors reached the application: {errors:?}"
    );
    let acks: Vec<(String, i32, i64)> = events
        .iter()
        .filter(|e| e["e"] == "ack")
        .filter_map(|e| {
            Some((
                e["k"].as_str()?.to_string(),
                e["p"].as_i64()? as i32,
                e["o"].as_i64()?,
            ))
        })
        .collect();
    assert!(acks.len() >= at_switch + 300, "{} acknowledged", acks.len());

    let mut on_destination: BTreeMap<String, usize> = BTreeMap::new();
    let mut to_destination = 0;
    for p in 0..2 {
        let at_source = read_log(&source, &topic, p);
        let at_destination = read_log(&destination, &topic, p);
        assert_eq!(
            at_destination.barriers.len(),
            1,
            "partition {p}: one barrier: {:?}",
            at_destination.barriers
        );
        let barrier = at_destination.barriers[0].0;
        let data: Vec<&LogRecord> = at_destination
            .records
            .iter()
            .filter(|r| !r.control && r.key.as_deref() != Some("__mirrorgate_barrier"))
            .collect();
        for r in &data {
            *on_destination
                .entry(r.key.clone().unwrap_or_default())
                .or_default() += 1;
        }
        // The producer's (id, epoch) on the source, and MM2's on the destination before the
        // barrier (it wrote every record there).
        let app_before: BTreeSet<(i64, i16)> = at_source
            .records
            .iter()
            .filter(|r| !r.control && r.key.as_deref().is_some_and(|k| k.starts_with("java-")))
            .map(|r| (r.producer_id, r.producer_epoch))
            .collect();
        let mm2: BTreeSet<(i64, i16)> = data
            .iter()
            .filter(|r| r.offset < barrier)
            .map(|r| (r.producer_id, r.producer_epoch))
            .collect();
        let after: Vec<&&LogRecord> = data.iter().filter(|r| r.offset > barrier).collect();
        let app_after: BTreeSet<(i64, i16)> = after
            .iter()
            .map(|r| (r.producer_id, r.producer_epoch))
            .collect();
        eprintln!(
            "mm2 switchover: partition {p}: the producer wrote the source as {app_before:?}, \
             MM2 the destination as {mm2:?}, the producer after the barrier (offset {barrier}) \
             as {app_after:?}: {} records before it, {} after",
            data.len() - after.len(),
            after.len()
        );
        assert!(
            !after.is_empty(),
            "partition {p}: the producer wrote the destination after the switch"
        );
        // After the barrier: the producer's own records, once each and in its order, under a
        // session of its own (epoch bumped), nothing of MM2's.
        let numbers: Vec<usize> = after
            .iter()
            .map(|r| {
                let key = r.key.as_deref().unwrap_or_default();
                key.strip_prefix("java-")
                    .and_then(|n| n.parse().ok())
                    .unwrap_or_else(|| {
                        panic!("partition {p}: {key:?} after the barrier is not the producer's")
                    })
            })
            .collect();
        assert!(
            numbers.windows(2).all(|w| w[0] < w[1]),
            "partition {p}: after the barrier, the producer's records once each and in order: \
             {numbers:?}"
        );
        for id in &app_after {
            assert!(
                !app_before.contains(id),
                "partition {p}: after the switch the producer writes under {id:?}, a session it \
                 had on the source ({app_before:?}): no epoch bump"
            );
            assert!(
                !mm2.contains(id),
                "partition {p}: a record of MirrorMaker's {id:?} after the barrier"
            );
        }
        // Each acknowledgement is real: the record is at the acknowledged offset, on the source
        // or (after the barrier) on the destination.
        let key_at = |records: &[LogRecord], o: i64| {
            records
                .iter()
                .find(|r| r.offset == o)
                .and_then(|r| r.key.clone())
        };
        for (k, _, o) in acks.iter().filter(|a| a.1 == p) {
            let on_source = key_at(&at_source.records, *o).as_deref() == Some(k.as_str());
            let on_dest =
                *o > barrier && key_at(&at_destination.records, *o).as_deref() == Some(k.as_str());
            assert!(
                on_source || on_dest,
                "partition {p}: {k} acknowledged at offset {o} is there neither on the source \
                 nor after the barrier (offset {barrier}) on the destination"
            );
            to_destination += usize::from(on_dest && !on_source);
        }
    }
    // Nothing acknowledged is missing on the destination (MM2 may have doubled some).
    let missing: Vec<&str> = acks
        .iter()
        .map(|a| a.0.as_str())
        .filter(|k| !on_destination.contains_key(*k))
        .collect();
    assert!(
        missing.is_empty(),
        "acknowledged records missing on the destination: {missing:?}"
    );
    let doubled = on_destination.values().filter(|c| **c > 1).count();
    eprintln!(
        "mm2 switchover: {} acknowledged ({at_switch} at the switch, {to_destination} by the \
         destination), {doubled} on the destination twice or more",
        acks.len()
    );
    assert!(to_destination > 0, "the destination acknowledged records");
    // The records written to the source after the switchover never reached the destination.
    assert!(
        on_destination.keys().all(|k| !k.starts_with("key-")),
        "a record MirrorMaker 2 copied after the switchover is on the destination"
    );
}

/// With another mirroring tool, a switchover whose tool has not copied the source's last
/// records within the hold (here nothing copies at all) is refused, changing nothing: the
/// forward listener goes back to the source and its clients go on there.
#[test]
fn a_switchover_behind_a_mirroring_tool_that_has_not_copied_the_sources_end_is_refused_and_changes_nothing(
) {
    use crate::psm_differential::{batch, RawConn};
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("mm2behind");
    harness::create_topic(&source, &topic, 1, None);
    harness::create_topic(&destination, &topic, 1, Some(&[1]));
    let name = "mm2behind";
    let (mut cfg, forward) = external_forward_config(name, &[&topic], &source);
    if let Some(f) = cfg.mirrors[0].forward.as_mut() {
        f.hold_ms = 1_000;
    }
    let gw = TestGateway::start(cfg);
    let admin = gw.admin();
    crate::failover::wait_mirroring(&admin, name, 1);
    let mut client = RawConn::connect(&forward);
    let (code, _) = client.produce(&topic, 0, batch(-1, -1, -1, 3, "not-copied"));
    assert_eq!(code, 0, "produce through the forward listener");

    let path = format!("/v1/mirrors/{name}/switchover");
    let (status, body) = admin_call(&admin, Method::POST, &path, None);
    assert_eq!(status, 409, "{body}");
    assert!(
        body.contains(
            "the mirroring tool had not copied the source's last records of 1 partitions"
        ),
        "{body}"
    );
    let (_, body) = admin_call(
        &admin,
        Method::GET,
        &format!("/v1/mirrors/{name}/forward"),
        None,
    );
    let route: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(route["side"], "source", "{body}");
    let (_, body) = admin_call(&admin, Method::GET, &format!("/v1/mirrors/{name}"), None);
    let mirror: serde_json::Value = serde_json::from_str(&body).expect("json");
    let counts = mirror
        .as_object()
        .and_then(|m| m.values().find(|v| v.get("STOPPED").is_some()))
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        (counts["STOPPED"].as_u64(), counts["STOPPING"].as_u64()),
        (Some(0), Some(0)),
        "nothing failed over: {body}"
    );
    let (code, _) = client.produce(&topic, 0, batch(-1, -1, -1, 1, "after"));
    assert_eq!(code, 0, "the client goes on with the source");
}
