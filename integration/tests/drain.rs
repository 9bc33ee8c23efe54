//! The failover drain knows the outcome of every mirrored write admitted before fencing: each is
//! in the log before the barrier, or is never appended, or — when its answer was lost — the log
//! is re-read after the barrier and a new barrier follows anything that landed late. Against the
//! real destination cluster.
//!
//! How a write can land late: Kafka handles one request of a connection at a time, so a Produce
//! pipelined behind a long-polling Fetch on the same connection is appended only when the Fetch
//! has been answered — even if the connection was closed in the meantime.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{ApiKey, FetchRequest};
use kafka_protocol::protocol::StrBytes;

use crate::failover::{
    failover, mirror_config, mirror_json, read_log, reported_barrier, wait_mirroring, wait_stopped,
};
use crate::gw::TestGateway;
use crate::harness;
use crate::psm_differential::batch;
use crate::wire::{produce_request, request_frame};

fn produce_frame(topic: &str, acks: i16, records: Bytes, correlation_id: i32) -> Bytes {
    let req = produce_request(topic, 0, acks, records);
    request_frame(ApiKey::Produce, 9, correlation_id, &req)
}

/// A Fetch of partition 0 of `idle` at offset 0 that the broker holds for `wait` (it asks for
/// more bytes than the empty topic has).
fn long_poll_frame(idle: &str, wait: Duration, correlation_id: i32) -> Bytes {
    let req = FetchRequest::default()
        .with_replica_id((-1).into())
        .with_max_wait_ms(wait.as_millis() as i32)
        .with_min_bytes(1 << 20)
        .with_max_bytes(1 << 20)
        .with_topics(vec![FetchTopic::default()
            .with_topic(StrBytes::from_string(idle.to_string()).into())
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(0)
                .with_log_start_offset(-1)
                .with_partition_max_bytes(1 << 20)])]);
    request_frame(ApiKey::Fetch, 12, correlation_id, &req)
}

/// Records with a producer id (mirrored or local data, not barriers) at offsets above `barrier`.
fn data_after(topic: &str, barrier: i64) -> Vec<String> {
    read_log(&harness::cluster("destination"), topic, 0)
        .records
        .iter()
        .filter(|r| r.offset > barrier && r.producer_id >= 0)
        .map(|r| {
            format!(
                "{}@{} pid {}",
                r.key.as_deref().unwrap_or("-"),
                r.offset,
                r.producer_id
            )
        })
        .collect()
}

/// A mirror topic and an idle topic, both with partition 0 led by broker 1.
fn topics(prefix: &str) -> (String, String) {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic(prefix);
    let idle = harness::unique_topic(&format!("{prefix}-idle"));
    harness::create_topic(&destination, &topic, 1, Some(&[1]));
    harness::create_topic(&destination, &idle, 1, Some(&[1]));
    (topic, idle)
}

/// acks=0 gives the gateway no answer to wait for, so the drain could not know whether such a
/// write is still queued in the broker: the mirror listener refuses it (the connection is
/// closed, as Kafka itself does for a failed acks=0 request) and nothing is appended.
#[test]
fn an_acks_0_mirror_write_to_a_mirror_partition_is_refused_and_never_appended() {
    let (topic, _) = topics("acks0");
    let gw = TestGateway::start(mirror_config("acks0", &[&topic]));
    wait_mirroring(&gw.admin(), "acks0", 1);
    let mut s = TcpStream::connect(gw.mirror_bootstrap()).expect("connect mirror listener");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    s.write_all(&produce_frame(&topic, 0, batch(4242, 0, 0, 1, "zero"), 7))
        .expect("send");
    let mut buf = [0u8; 64];
    match s.read(&mut buf) {
        Ok(0) => {}
        Ok(n) => panic!("the gateway answered an acks=0 produce with {n} bytes"),
        Err(e) => panic!(
            "the gateway kept the connection of an acks=0 mirror produce open ({e}): it was forwarded"
        ),
    }
    std::thread::sleep(Duration::from_millis(500));
    let appended = data_after(&topic, -1);
    assert!(
        appended.is_empty(),
        "an acks=0 mirror write was appended: {appended:?}"
    );
    assert!(
        gw.metric("mirrorgate_produce_rejected_total{reason=\"mirror_acks_zero\"}") >= 1.0,
        "{}",
        gw.metrics()
    );
}

/// Mirror writes pipelined behind a slow request on a mirror-listener connection whose client
/// has gone: the gateway keeps the broker connection until every admitted write is answered, so
/// the drain waits for them and they all lie before the barrier.
#[test]
fn a_mirrored_write_in_flight_at_failover_never_lands_after_the_barrier() {
    let (topic, idle) = topics("late");
    let mut cfg = mirror_config("late", &[&topic]);
    // The client side of a connection is given up quickly; the mirror writes must not be.
    cfg.limits.shutdown_grace_ms = 100;
    let gw = TestGateway::start(cfg);
    wait_mirroring(&gw.admin(), "late", 1);
    let mut s = TcpStream::connect(gw.mirror_bootstrap()).expect("connect mirror listener");
    let mut out = BytesMut::from(&long_poll_frame(&idle, Duration::from_secs(4), 1)[..]);
    for seq in 0..20 {
        out.extend_from_slice(&produce_frame(
            &topic,
            -1,
            batch(7_000_000 + seq as i64, 0, 0, 1, &format!("late{seq}")),
            2 + seq,
        ));
    }
    s.write_all(&out).expect("send");
    // Let the gateway forward them, then go away without reading any answer.
    std::thread::sleep(Duration::from_millis(300));
    drop(s);
    let started = Instant::now();
    failover(&gw.admin(), "late");
    wait_stopped(&gw.admin(), "late");
    // Give anything still queued in the broker the time to land (the Fetch waits 4 s).
    let settle = Duration::from_secs(6).saturating_sub(started.elapsed());
    std::thread::sleep(settle);
    let barrier = reported_barrier(&gw.admin(), "late", &topic);
    let late = data_after(&topic, barrier);
    assert!(
        late.is_empty(),
        "mirrored records landed after the barrier at {barrier}: {late:?}\nmirror: {}",
        mirror_json(&gw.admin(), "late")
    );
    let log = read_log(&harness::cluster("destination"), &topic, 0);
    assert_eq!(
        log.records.iter().filter(|r| r.producer_id >= 0).count(),
        20,
        "every mirrored write admitted before fencing is in the log"
    );
}

/// A mirror write whose answer never came (the broker connection timed out) has an unknown
/// outcome: it may still be appended. The failover re-reads the log after its barrier, finds
/// the late write, writes a new barrier after it, and screens its producer id.
#[test]
fn a_mirrored_write_whose_answer_was_lost_is_followed_by_a_new_barrier() {
    let (topic, idle) = topics("lost");
    let mut cfg = mirror_config("lost", &[&topic]);
    cfg.limits.upstream_timeout_ms = 1000;
    let gw = TestGateway::start(cfg);
    wait_mirroring(&gw.admin(), "lost", 1);
    let mut s = TcpStream::connect(gw.mirror_bootstrap()).expect("connect mirror listener");
    let pid = 7_100_000 + (std::process::id() as i64 % 1000) * 10;
    let mut out = BytesMut::from(&long_poll_frame(&idle, Duration::from_secs(3), 1)[..]);
    for seq in 0..5 {
        out.extend_from_slice(&produce_frame(
            &topic,
            -1,
            batch(pid, 0, seq, 1, &format!("lost{seq}")),
            2 + seq,
        ));
    }
    s.write_all(&out).expect("send");
    let sent = Instant::now();
    // The gateway gives the broker 1 s, then closes both connections: the writes' outcome is
    // unknown to it, and the broker appends them when the Fetch ends.
    let mut buf = [0u8; 64];
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let _ = s.read(&mut buf);
    failover(&gw.admin(), "lost");
    wait_stopped(&gw.admin(), "lost");
    // Give anything still queued in the broker the time to land (the Fetch waits 3 s).
    std::thread::sleep(Duration::from_secs(5).saturating_sub(sent.elapsed()));
    let barrier = reported_barrier(&gw.admin(), "lost", &topic);
    let late = data_after(&topic, barrier);
    assert!(
        late.is_empty(),
        "mirrored records landed after the barrier at {barrier}: {late:?}\nmirror: {}",
        mirror_json(&gw.admin(), "lost")
    );
    // Whether the broker appends writes queued on a connection the gateway closed depends on
    // when it notices the close; those that landed are before the last barrier (checked
    // above) and their producer id is screened.
    let log = read_log(&harness::cluster("destination"), &topic, 0);
    let landed = log.records.iter().filter(|r| r.producer_id == pid).count();
    eprintln!(
        "{landed} of 5 writes of unknown outcome landed; barriers {:?}",
        log.barriers
    );
    if landed > 0 {
        assert!(
            log.barriers.len() >= 2,
            "{landed} late writes landed but no new barrier follows them: {:?}",
            log.barriers
        );
        assert!(
            gw.metric("mirrorgate_protection_late_writes_total{mirror=\"lost\"}") >= 1.0,
            "{}",
            gw.metrics()
        );
        let screen = crate::failover::screened_ids(&gw.config.state_dir);
        assert!(
            screen.contains(&pid),
            "the late writes' producer id {pid} is not screened: {screen:?}"
        );
    }
}

/// What Kubernetes, systemd and a rolling restart send is SIGTERM, not Ctrl-C: the gateway
/// stops as on Ctrl-C — it answers the requests in flight (a Fetch the broker holds for 3 s,
/// sent just before the signal), then exits with status 0.
#[test]
fn a_gateway_stopped_with_sigterm_answers_its_requests_in_flight_then_exits_cleanly() {
    let (topic, idle) = topics("sigterm");
    let mut gw = crate::gw::ProcessGateway::start(mirror_config("sigterm", &[&topic]), &[]);
    let mut conn = TcpStream::connect(format!("127.0.0.1:{}", gw.port_for(1))).expect("connect");
    conn.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    conn.write_all(&long_poll_frame(&idle, Duration::from_secs(3), 7))
        .expect("fetch sent");
    std::thread::sleep(Duration::from_millis(300));
    let sent = Instant::now();
    // SAFETY: kill(2) on the pid of a child this test started.
    assert_eq!(
        unsafe { libc::kill(gw.pid().expect("runs") as libc::pid_t, libc::SIGTERM) },
        0
    );
    let mut len = [0u8; 4];
    let answered = conn.read_exact(&mut len).map(|()| {
        let mut body = vec![0u8; i32::from_be_bytes(len) as usize];
        conn.read_exact(&mut body).map(|()| body)
    });
    let status = gw.wait_exit_status(Duration::from_secs(30));
    let log = std::fs::read_to_string(&gw.log_path).unwrap_or_default();
    let body = match answered {
        Ok(Ok(b)) => b,
        other => panic!(
            "the Fetch in flight was not answered after SIGTERM ({other:?}); exit {status:?}; log:\n{log}"
        ),
    };
    assert_eq!(
        i32::from_be_bytes(body[..4].try_into().expect("correlation id")),
        7
    );
    assert!(
        sent.elapsed() >= Duration::from_secs(2),
        "answered before the broker's wait: not the long poll"
    );
    assert!(
        status.is_some_and(|s| s.success()),
        "exit {status:?}; log:\n{log}"
    );
    assert!(
        log.contains("shutting down: draining in-flight requests"),
        "{log}"
    );
}
