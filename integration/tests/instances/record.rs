//! The state topic is the state of record of several instances: an instance whose state
//! directory is lost or re-initialised learns from the state topic alone what its mirrors are
//! (failed over, at which barrier, with which producer ids screened; paused), and a change of a
//! mirror's state made through one instance is followed by all.

use std::time::{Duration, Instant};

use super::{init_state_topic, instance_config, mirror_topic, signal, wait_others_alive};
use crate::failover::{failover, mirror_json, read_log, reported_barrier, screened_ids};
use crate::gw::{admin_call, ProcessGateway, TestGateway};
use crate::harness;
use crate::psm_differential::{batch, RawConn};

/// Stop `gw` (SIGTERM), replace its state directory by an empty one initialised with
/// `mirrorgate state init` (a lost volume, re-created by an init container), start it again.
fn restart_with_a_new_state_dir(gw: &mut ProcessGateway) {
    signal(gw.pid().expect("runs"), libc::SIGTERM);
    assert!(gw.wait_exit(Duration::from_secs(40)), "did not stop");
    std::fs::remove_dir_all(&gw.config.state_dir).expect("remove the state directory");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mirrorgate"))
        .args(["state", "init", "--config"])
        .arg(&gw.config_path)
        .output()
        .expect("mirrorgate state init");
    assert!(
        out.status.success(),
        "state init: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    gw.restart_unready(&[]);
}

/// The instance that ran a failover loses its state directory and starts with a new, empty
/// one. It must not take its mirror for one still mirroring: it refuses the mirror's writes
/// from the start, and it takes the failover back from the state topic (the barrier it wrote,
/// the producer ids it screened), so that it turns writable at that barrier and nowhere else.
#[test]
fn the_instance_that_failed_over_follows_its_failover_from_the_state_topic_after_losing_its_state_directory(
) {
    let topic = mirror_topic("peers-lost");
    let state_topic = harness::unique_topic("peers-lost-state");
    let cfg = |id: &str| instance_config("lost", &topic, id, &state_topic);
    init_state_topic(&cfg("a"));
    let mut a = ProcessGateway::start(cfg("a"), &[]);
    let b = TestGateway::start(cfg("b"));
    wait_others_alive(&b.admin(), 1);
    let pid = 8_100_000 + (std::process::id() as i64 % 1000) * 10;
    let mut conn = RawConn::connect(&a.mirror_bootstrap());
    for seq in 0..3 {
        let (code, _, msg) = conn.produce_msg(&topic, 0, batch(pid, 0, seq, 1, "mirrored"));
        assert_eq!(code, 0, "a mirror write through a: {msg}");
    }
    drop(conn);
    failover(&a.admin(), "lost");
    crate::failover::wait_stopped(&a.admin(), "lost");
    crate::failover::wait_stopped(&b.admin(), "lost");
    let barrier = reported_barrier(&a.admin(), "lost", &topic);

    restart_with_a_new_state_dir(&mut a);
    // From the first moment it answers, and until it has the failover back: no mirror write,
    // and a local write only once the partition is STOPPED at the barrier.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut conn = RawConn::connect(&a.mirror_bootstrap());
    let mut seq = 3;
    loop {
        let (code, _, msg) = conn.produce_msg(&topic, 0, batch(pid, 0, seq, 1, "late"));
        assert_ne!(
            code, 0,
            "a, with a new state directory, admitted a mirror write after its own failover"
        );
        assert!(msg.contains("is fenced"), "{msg}");
        seq += 1;
        let m = mirror_json(&a.admin(), "lost");
        if m["states"]["STOPPED"] == 1 {
            break;
        }
        let (code, _, msg) =
            RawConn::connect(&a.bootstrap()).produce_msg(&topic, 0, batch(-1, -1, -1, 1, "early"));
        if code == 0 {
            let m = mirror_json(&a.admin(), "lost");
            assert_eq!(
                m["states"]["STOPPED"], 1,
                "a local write before STOPPED: {m}"
            );
            break;
        }
        assert!(msg.contains("read-only"), "{msg}");
        assert!(
            Instant::now() < deadline,
            "a never took its failover back from the state topic: {m}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(reported_barrier(&a.admin(), "lost", &topic), barrier);
    assert!(
        screened_ids(&a.config.state_dir).contains(&pid),
        "the mirrored producer id is screened again"
    );
    let (code, offset, msg) =
        RawConn::connect(&a.bootstrap()).produce_msg(&topic, 0, batch(-1, -1, -1, 1, "local"));
    assert_eq!(code, 0, "a local write through a: {msg}");
    assert!(offset > barrier);
    // Its report of the failover is back too, from the state topic.
    let fid = mirror_json(&b.admin(), "lost")["failover_id"]
        .as_str()
        .expect("a failover id")
        .to_string();
    let r = super::wait_report_complete(&a.admin(), "lost", &fid);
    assert_eq!(r["partitions"][0]["barrier_offset"], barrier, "{r}");
    let log = read_log(&harness::cluster("destination"), &topic, 0);
    assert_eq!(log.barriers.len(), 1, "{:?}", log.barriers);
    assert!(
        log.records
            .iter()
            .filter(|r| r.producer_id == pid)
            .all(|r| r.offset < barrier),
        "a mirrored record after the barrier"
    );
}

/// Wait (20 s at most) until mirror `name` on the instance at `admin` has `n` partitions in
/// `state`.
fn wait_state(admin: &str, name: &str, state: &str, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let m = mirror_json(admin, name);
        if m["states"][state] == n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{admin}: never {n} partitions {state}: {m}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A pause called on one instance pauses the mirror on every instance, an instance started
/// afterwards with an empty state directory included: the mirror's writes are refused through
/// each of them. A resume called on another instance resumes it everywhere.
#[test]
fn a_pause_through_one_instance_pauses_the_mirror_on_every_instance_until_a_resume_through_any() {
    let topic = mirror_topic("peers-pause");
    let state_topic = harness::unique_topic("peers-pause-state");
    let cfg = |id: &str| instance_config("pause", &topic, id, &state_topic);
    init_state_topic(&cfg("a"));
    let a = TestGateway::start(cfg("a"));
    let b = TestGateway::start(cfg("b"));
    wait_others_alive(&a.admin(), 1);
    wait_others_alive(&b.admin(), 1);
    let pid = 8_200_000 + (std::process::id() as i64 % 1000) * 10;
    let (status, body) = admin_call(
        &a.admin(),
        hyper::Method::POST,
        "/v1/mirrors/pause/pause",
        None,
    );
    assert_eq!(status, 200, "{body}");
    wait_state(&b.admin(), "pause", "PAUSED", 1);
    let c = TestGateway::start(cfg("c"));
    wait_state(&c.admin(), "pause", "PAUSED", 1);
    for gw in [&a, &b, &c] {
        let (code, _, msg) = RawConn::connect(&gw.mirror_bootstrap()).produce_msg(
            &topic,
            0,
            batch(pid, 0, 0, 1, "paused"),
        );
        assert_ne!(
            code,
            0,
            "a mirror write through {} while paused",
            gw.admin()
        );
        assert!(msg.contains("PAUSED") || msg.contains("paused"), "{msg}");
    }
    let (status, body) = admin_call(
        &b.admin(),
        hyper::Method::POST,
        "/v1/mirrors/pause/resume",
        None,
    );
    assert_eq!(status, 200, "{body}");
    for gw in [&a, &b, &c] {
        wait_state(&gw.admin(), "pause", "MIRRORING", 1);
    }
    let (code, _, msg) = RawConn::connect(&c.mirror_bootstrap()).produce_msg(
        &topic,
        0,
        batch(pid, 0, 0, 1, "resumed"),
    );
    assert_eq!(code, 0, "a mirror write through c after the resume: {msg}");
    let log = read_log(&harness::cluster("destination"), &topic, 0);
    let mirrored: Vec<i64> = log
        .records
        .iter()
        .filter(|r| r.producer_id == pid)
        .map(|r| r.offset)
        .collect();
    assert_eq!(
        mirrored.len(),
        1,
        "only the write after the resume: {mirrored:?}"
    );
}

/// A gateway that ran alone and failed its mirror over is given `instances`: until `mirrorgate
/// state migrate` has moved its failover into the state topic it is not ready (an instance
/// beside it would take the mirror for one still mirroring). Migrated, a new instance with an
/// empty state directory adopts the failover: it refuses the mirror's writes, turns writable at
/// the barrier the first wrote, screens the mirrored producer id and lists the report. A second
/// migration moves nothing.
#[test]
fn a_gateway_that_failed_over_alone_is_migrated_into_the_state_topic_and_a_new_instance_adopts_it()
{
    let topic = mirror_topic("peers-migrate");
    let state_topic = harness::unique_topic("peers-migrate-state");
    let cfg = |id: &str| instance_config("migrate", &topic, id, &state_topic);
    let mut alone = cfg("a");
    alone.instances = None;
    let mut a = ProcessGateway::start(alone, &[]);
    let pid = 8_300_000 + (std::process::id() as i64 % 1000) * 10;
    let mut conn = RawConn::connect(&a.mirror_bootstrap());
    for seq in 0..3 {
        let (code, _, msg) = conn.produce_msg(&topic, 0, batch(pid, 0, seq, 1, "mirrored"));
        assert_eq!(code, 0, "a mirror write: {msg}");
    }
    drop(conn);
    let fid = failover(&a.admin(), "migrate");
    crate::failover::wait_stopped(&a.admin(), "migrate");
    let barrier = reported_barrier(&a.admin(), "migrate", &topic);
    super::wait_report_complete(&a.admin(), "migrate", &fid);

    // Now one of several instances.
    signal(a.pid().expect("runs"), libc::SIGTERM);
    assert!(a.wait_exit(Duration::from_secs(40)), "did not stop");
    a.config.instances = cfg("a").instances;
    std::fs::write(
        &a.config_path,
        mirrorgate::config::render_effective(&a.config),
    )
    .expect("config");
    init_state_topic(&a.config);
    a.restart_unready(&[]);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = a.call(hyper::Method::GET, "/readyz");
        if status == 503 && body.contains("state migrate") && body.contains(&fid) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a is not reported unready for its unmigrated failover: {status} {body}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let migrate = || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_mirrorgate"))
            .args(["state", "migrate", "--config"])
            .arg(&a.config_path)
            .output()
            .expect("mirrorgate state migrate");
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    };
    let moved = migrate();
    assert!(
        moved.contains(&format!("moved: mirror migrate: failover {fid}")),
        "{moved}"
    );
    a.wait_ready(Duration::from_secs(30));
    assert!(
        migrate().contains("nothing to move"),
        "a second migration moved something"
    );

    let b = TestGateway::start(cfg("b"));
    let (code, _, msg) =
        RawConn::connect(&b.mirror_bootstrap()).produce_msg(&topic, 0, batch(pid, 0, 3, 1, "late"));
    assert_ne!(code, 0, "b admitted a mirror write after a's failover");
    assert!(msg.contains("is fenced"), "{msg}");
    crate::failover::wait_stopped(&b.admin(), "migrate");
    assert_eq!(reported_barrier(&b.admin(), "migrate", &topic), barrier);
    assert!(screened_ids(&b.config.state_dir).contains(&pid));
    super::wait_report_complete(&b.admin(), "migrate", &fid);
    let (code, offset, msg) =
        RawConn::connect(&b.bootstrap()).produce_msg(&topic, 0, batch(-1, -1, -1, 1, "local"));
    assert_eq!(code, 0, "a local write through b: {msg}");
    assert!(offset > barrier);
}

/// A mirror's handover, offset maps and reports are one state-topic record each: with thousands
/// of partitions they outgrow the brokers' default 1 MiB. The state topic `state init` creates
/// takes a 3 MiB record, and the state log reads it back whole.
#[test]
fn the_state_topic_takes_a_record_of_several_mebibytes_and_reads_it_back() {
    use mirrorgate::instances::log::StateLog;
    use mirrorgate::instances::records::PeerRecord;
    let topic = mirror_topic("peers-big");
    let state_topic = harness::unique_topic("peers-big-state");
    let cfg = instance_config("big", &topic, "a", &state_topic);
    init_state_topic(&cfg);
    let maps = serde_json::json!({ "padding": "x".repeat(3 << 20) });
    let rec = PeerRecord::AgentOffsets {
        mirror: "big".into(),
        by: "a".into(),
        epoch: 1,
        offsets: maps,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let read = rt.block_on(async {
        let log = super::state_log(&cfg, &state_topic).await;
        log.append(&rec).await.expect("a 3 MiB record appended");
        log.read(0).await.expect("read")
    });
    assert_eq!(read.records, vec![rec], "read back whole");
}

/// A mirror topic created moments before a failover called on one instance: the instance
/// called includes it (it reads the destination's metadata first); another instance, whose
/// periodic metadata refresh comes later, keeps it read-only until it knows the topic, and then
/// turns it writable at the barrier the driver wrote.
#[test]
fn a_topic_created_just_before_a_failover_turns_writable_on_every_instance() {
    let destination = harness::cluster("destination");
    let known = mirror_topic("peers-fresh-known");
    let created = harness::unique_topic("peers-fresh-new");
    let state_topic = harness::unique_topic("peers-fresh-state");
    let cfg = |id: &str, refresh_ms: u64| {
        let mut c = instance_config("fresh", &known, id, &state_topic);
        c.mirrors[0].topics.push(created.clone());
        c.destination.metadata_refresh_ms = refresh_ms;
        c
    };
    init_state_topic(&cfg("a", 2000));
    let a = TestGateway::start(cfg("a", 600_000));
    let b = TestGateway::start(cfg("b", 8_000));
    for gw in [&a, &b] {
        wait_others_alive(&gw.admin(), 1);
        crate::failover::wait_mirroring(&gw.admin(), "fresh", 1);
    }
    harness::create_topic(&destination, &created, 1, Some(&[1]));
    failover(&a.admin(), "fresh");
    let deadline = Instant::now() + Duration::from_secs(60);
    for gw in [&a, &b] {
        loop {
            let m = mirror_json(&gw.admin(), "fresh");
            if m["partitions"] == 2 && m["states"]["STOPPED"] == 2 {
                break;
            }
            assert!(Instant::now() < deadline, "not both STOPPED: {m}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let barrier = reported_barrier(&a.admin(), "fresh", &created);
    assert_eq!(reported_barrier(&b.admin(), "fresh", &created), barrier);
    for (gw, id) in [(&a, "a"), (&b, "b")] {
        assert_eq!(
            harness::produce_keyed(&gw.bootstrap(), &created, 10, &[]).len(),
            10,
            "the new topic is writable through {id} after the failover"
        );
    }
    let log = read_log(&destination, &created, 0);
    let barriers: Vec<i64> = log.barriers.iter().map(|b| b.0).collect();
    assert_eq!(barriers, vec![barrier], "one barrier, the driver's");
}

/// A handover carries every producer id the failover screened. With more ids than one record
/// of the state topic can hold — 12,000 mirrored producer ids, and a state topic created before
/// with the brokers' 1 MiB `max.message.bytes` — it is still handed over (in parts): the other
/// instance adopts it, screens every id, and turns writable (review G9).
#[test]
fn a_handover_of_twelve_thousand_screened_ids_reaches_the_others_over_a_one_mebibyte_state_topic() {
    let topic = mirror_topic("peers-big");
    let state_topic = harness::unique_topic("peers-big-state");
    let cfg = |id: &str| instance_config("big", &topic, id, &state_topic);
    init_state_topic(&cfg("a"));
    crate::sync::alter_topic_config(
        &harness::cluster("destination"),
        &state_topic,
        "max.message.bytes",
        Some("1048576"),
    );
    let a = TestGateway::start(cfg("a"));
    let b = TestGateway::start(cfg("b"));
    wait_others_alive(&b.admin(), 1);
    let first = 8_300_000_000 + (std::process::id() as i64 % 1000) * 100_000;
    let ids: Vec<i64> = (first..first + 12_000).collect();
    crate::pid_allocator::mirror_pipelined(&a.mirror_bootstrap(), &topic, 0, &ids);
    failover(&a.admin(), "big");
    crate::failover::wait_stopped(&a.admin(), "big");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let m = mirror_json(&b.admin(), "big");
        if m["states"]["STOPPED"] == 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "b never adopted the handover of 12,000 screened ids: {m}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let screened = screened_ids(&b.config.state_dir);
    let missing: Vec<&i64> = ids.iter().filter(|i| !screened.contains(i)).collect();
    assert!(
        missing.is_empty(),
        "{} of the mirrored ids are not screened on b, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
    let barrier = reported_barrier(&a.admin(), "big", &topic);
    let (code, offset, msg) =
        RawConn::connect(&b.bootstrap()).produce_msg(&topic, 0, batch(-1, -1, -1, 1, "local"));
    assert_eq!(code, 0, "a local write through b: {msg}");
    assert!(offset > barrier);
}
