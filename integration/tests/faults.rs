//! Faults on the worst day (issue 8), on real Kafka: the state directory missing or on a full
//! disk, and a stalled (paused) destination broker. Each test is one row of the README's fault
//! table. Broker kills during mirroring and failover are in `agent.rs`; gateway kills in
//! `failover.rs` and `psm_differential.rs`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hyper::Method;

use crate::failover::{
    failover, mirror_config, mirror_json, read_log, wait_mirroring, wait_stopped,
};
use crate::gw::{admin_call, scratch_dir, try_admin_call, ProcessGateway};
use crate::harness;
use crate::psm_differential::{batch, RawConn};

/// `mirrorgate state init --config FILE`: (exit ok, stdout + stderr).
fn state_init(config: &Path) -> (bool, String) {
    let out = harness::run_with_timeout(
        {
            let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_mirrorgate"));
            c.args(["state", "init", "--config"]).arg(config);
            c
        },
        Duration::from_secs(30),
    );
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// Both listeners refuse a produce to `topic` with the gateway's read-only error, whose message
/// contains `why`.
fn assert_read_only_on_both_listeners(gw: &ProcessGateway, topic: &str, why: &str) {
    for (listener, addr) in [
        ("client", gw.bootstrap()),
        ("mirror", gw.mirror_bootstrap()),
    ] {
        // Listener ports are bound once the destination's brokers are known.
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(&addr).is_err() {
            assert!(
                Instant::now() < deadline,
                "{listener} listener {addr} not bound"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let mut conn = RawConn::connect(&addr);
        let (code, _, msg) = conn.produce_msg(topic, 0, batch(-1, -1, -1, 1, listener));
        assert_eq!(code, 44, "{listener} listener: {msg}");
        assert!(msg.contains(why), "{listener} listener: {msg}");
    }
}

/// Wait (30 s at most) until `/readyz` is 503 with a body containing `needle`; returns the body.
fn wait_unready_saying(gw: &ProcessGateway, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = gw.call(Method::GET, "/readyz");
        if status == 503 && body.contains(needle) {
            return body;
        }
        assert!(Instant::now() < deadline, "readyz: {status} {body}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_missing_state_dir_keeps_mirror_topics_read_only_until_state_init() {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("nostate");
    harness::create_topic(&destination, &topic, 1, Some(&[1]));
    let mut cfg = mirror_config("nostate", &[&topic]);
    cfg.state_dir = scratch_dir().join("never-created");
    let mut gw = ProcessGateway::start_unready(cfg, &[]);

    // Not ready, and /readyz says which directory, why, and the command.
    let body = wait_unready_saying(&gw, "does not exist");
    assert!(body.contains("never-created"), "{body}");
    assert!(body.contains("mirrorgate state init"), "{body}");
    assert_read_only_on_both_listeners(&gw, &topic, "does not exist");
    let (status, body) = gw.call(Method::POST, "/v1/mirrors/nostate/failover");
    assert_eq!(status, 409, "{body}");
    assert!(
        !gw.config.state_dir.exists(),
        "the gateway created the directory itself"
    );

    // The documented recovery for a first start.
    let (ok, out) = state_init(&gw.config_path);
    assert!(ok, "{out}");
    assert!(out.contains("is initialised"), "{out}");
    gw.kill9();
    gw.restart(&[]);
    wait_mirroring(&gw.admin(), "nostate", 1);
    let mut mirror = RawConn::connect(&gw.mirror_bootstrap());
    let (code, _, msg) = mirror.produce_msg(&topic, 0, batch(-1, -1, -1, 1, "mirrored"));
    assert_eq!(code, 0, "{msg}");
}

#[test]
fn an_empty_state_dir_is_not_taken_for_a_first_start() {
    // An empty mount point (a volume that did not come back) must not be initialised silently.
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("emptystate");
    harness::create_topic(&destination, &topic, 1, Some(&[1]));
    let mut cfg = mirror_config("emptystate", &[&topic]);
    cfg.state_dir = scratch_dir();
    let gw = ProcessGateway::start_unready(cfg, &[]);
    wait_unready_saying(&gw, "no identity file");
    assert_read_only_on_both_listeners(&gw, &topic, "no identity file");
    let entries: Vec<_> = std::fs::read_dir(&gw.config.state_dir)
        .expect("state dir")
        .collect();
    assert!(entries.is_empty(), "the gateway wrote into it: {entries:?}");
}

/// A small tmpfs mounted for the test (needs root, as the CI machine runs); unmounted on drop.
struct SmallDisk {
    dir: PathBuf,
}

impl SmallDisk {
    fn mount(kib: u32) -> SmallDisk {
        let dir = scratch_dir().join("disk");
        std::fs::create_dir_all(&dir).expect("mount point");
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={kib}k"), "tmpfs"])
            .arg(&dir)
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "this test mounts a small tmpfs to fill it and needs root (CAP_SYS_ADMIN): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        SmallDisk { dir }
    }

    /// Fill the disk: write until the filesystem says it is full.
    fn fill(&self) -> PathBuf {
        let path = self.dir.join("filler");
        let mut f = std::fs::File::create(&path).expect("filler");
        let chunk = vec![0u8; 4096];
        loop {
            match f.write_all(&chunk) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(28) => break,
                Err(e) => panic!("filling the disk: {e}"),
            }
        }
        let _ = f.sync_all();
        path
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.dir)
            .status();
    }
}

#[test]
fn a_full_disk_fails_the_failover_and_keeps_the_topic_read_only_until_space_returns() {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("fulldisk");
    harness::create_topic(&destination, &topic, 1, Some(&[1]));
    let disk = SmallDisk::mount(256);
    let state = disk.dir.join("state");
    mirrorgate::state::StateStore::init(&state).expect("init state");
    let mut cfg = mirror_config("fulldisk", &[&topic]);
    cfg.state_dir = state;
    // The failover is held after fencing until this file exists (outside the small disk).
    let release = scratch_dir().join("release-the-failover");
    let gw = ProcessGateway::start(
        cfg,
        &[(
            "MIRRORGATE_TEST_HOLD_AFTER_FENCE_UNTIL",
            release.to_str().expect("utf-8 path"),
        )],
    );
    wait_mirroring(&gw.admin(), "fulldisk", 1);
    let mut mirror = RawConn::connect(&gw.mirror_bootstrap());
    let (code, _, msg) = mirror.produce_msg(&topic, 0, batch(-1, -1, -1, 3, "before"));
    assert_eq!(code, 0, "{msg}");

    // A full disk before the failover: the call is refused with the reason, nothing changes.
    let filler = disk.fill();
    let (status, body) = gw.call(Method::POST, "/v1/mirrors/fulldisk/failover");
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("No space left on device"), "{body}");
    assert_eq!(
        mirror_json(&gw.admin(), "fulldisk")["states"]["MIRRORING"],
        1
    );
    std::fs::remove_file(&filler).expect("free space");

    // The disk fills while the failover runs (held after fencing): the partition cannot record
    // its next step, stays read-only and says why.
    failover(&gw.admin(), "fulldisk");
    let filler = disk.fill();
    std::fs::write(&release, b"").expect("release the failover");
    let deadline = Instant::now() + Duration::from_secs(30);
    let why = loop {
        let (status, body) = admin_call(
            &gw.admin(),
            Method::GET,
            "/v1/mirrors/fulldisk/partitions",
            None,
        );
        assert_eq!(status, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).expect("json");
        let p = &v["partitions"][0];
        assert_ne!(p["state"], "STOPPED", "opened without a durable state: {p}");
        if let Some(e) = p["last_error"].as_str() {
            break e.to_string();
        }
        assert!(Instant::now() < deadline, "no error reported: {p}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        why.contains("No space left on device"),
        "last_error should name the full disk: {why}"
    );
    let mut local = RawConn::connect(&gw.bootstrap());
    let (code, _, msg) = local.produce_msg(&topic, 0, batch(-1, -1, -1, 1, "early"));
    assert_eq!(code, 44, "writable before the failover is durable: {msg}");

    // Space returns: the failover completes by itself, with exactly one barrier.
    std::fs::remove_file(filler).expect("free space");
    wait_stopped(&gw.admin(), "fulldisk");
    let log = read_log(&destination, &topic, 0);
    assert_eq!(log.barriers.len(), 1, "{:?}", log.barriers);
    let (code, _, msg) = local.produce_msg(&topic, 0, batch(-1, -1, -1, 1, "after"));
    assert_eq!(code, 0, "{msg}");
    assert_eq!(mirror_json(&gw.admin(), "fulldisk")["states"]["STOPPED"], 1);
}

/// Resumes a paused node on drop, so a failing test does not leave a broker frozen.
pub(crate) struct Paused(&'static str, &'static str);

impl Paused {
    pub(crate) fn pause(cluster: &'static str, node: &'static str) -> Paused {
        harness::expect_success(
            "rig pause-node",
            &harness::rig(&["pause-node", cluster, node]),
        );
        Paused(cluster, node)
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        let _ = harness::rig(&["resume-node", self.0, self.1]);
    }
}

/// One Produce v9 request frame (acks=1) carrying `payload` bytes of record value.
fn big_produce_frame(topic: &str, corr: i32, payload: usize) -> Vec<u8> {
    let tag = "x".repeat(payload);
    let req = crate::wire::produce_request(topic, 0, 1, batch(-1, -1, -1, 1, &tag));
    crate::wire::request_frame(kafka_protocol::messages::ApiKey::Produce, 9, corr, &req).to_vec()
}

/// Runs alone: it pauses destination broker 2 (SIGSTOP: its sockets stay open, nothing answers).
#[test]
fn disruptive_a_stalled_broker_times_out_connections_bounds_memory_and_admin_stays_responsive() {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("stall");
    harness::create_topic(&destination, &topic, 1, Some(&[2]));
    let mut cfg = crate::gw::test_config(&destination);
    cfg.limits.upstream_timeout_ms = 3000;
    cfg.limits.max_frame_bytes = 4 << 20;
    cfg.limits.max_in_flight = 8;
    let gw = ProcessGateway::start(cfg, &[]);
    let node2 = format!("127.0.0.1:{}", gw.port_for(2));
    // Warm up: one produce through the gateway while the broker is healthy.
    let (code, _) = RawConn::connect(&node2).produce(&topic, 0, batch(-1, -1, -1, 1, "warm"));
    assert_eq!(code, 0);
    let rss_before = gw.rss_kib().expect("rss");

    let paused = Paused::pause("destination", "2");
    // 8 clients each try to push 64 MiB of produce requests at the stalled broker.
    let frame = big_produce_frame(&topic, 1, 1 << 20);
    let writers: Vec<_> = (0..8)
        .map(|_| {
            let addr = node2.clone();
            let frame = frame.clone();
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(&addr).expect("connect gateway");
                s.set_write_timeout(Some(Duration::from_secs(2))).ok();
                let mut sent = 0usize;
                for _ in 0..64 {
                    if s.write_all(&frame).is_err() {
                        break;
                    }
                    sent += frame.len();
                }
                // The gateway closes the connection once the broker has not answered in time;
                // a read that times out means the connection is still open.
                s.set_read_timeout(Some(Duration::from_secs(1))).ok();
                let started = Instant::now();
                let mut b = [0u8; 1024];
                let closed = loop {
                    // Still open after 25 s: a hang.
                    if started.elapsed() > Duration::from_secs(25) {
                        break None;
                    }
                    match s.read(&mut b) {
                        Ok(0) => break Some(started.elapsed()),
                        Ok(_) => {}
                        Err(e)
                            if matches!(
                                e.kind(),
                                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                            ) => {}
                        Err(_) => break Some(started.elapsed()),
                    }
                };
                (sent, closed)
            })
        })
        .collect();

    // The admin API keeps answering throughout (how fast is the load benchmark's figure,
    // `readyz_max_ms`; here it is only printed).
    let mut slowest = Duration::ZERO;
    for _ in 0..10 {
        let t = Instant::now();
        let r = try_admin_call(&gw.admin(), Method::GET, "/readyz", None);
        assert!(r.is_ok(), "readyz failed during the stall: {r:?}");
        slowest = slowest.max(t.elapsed());
        std::thread::sleep(Duration::from_millis(300));
    }
    let rss_during = gw.rss_kib().expect("rss");
    let results: Vec<(usize, Option<Duration>)> = writers
        .into_iter()
        .map(|w| w.join().expect("writer"))
        .collect();
    let attempted = 8 * 64 * frame.len();
    let accepted: usize = results.iter().map(|r| r.0).sum();
    // Bounded memory: the gateway stops reading a client whose broker does not take requests,
    // so it holds about one frame per connection, not what the clients tried to send. This is
    // a resource bound, not a speed figure: 96 MiB is a fifth of the 512 MiB the clients try to
    // push, so only a gateway that buffers them fails it, however slow the machine.
    let growth_mib = rss_during.saturating_sub(rss_before) / 1024;
    eprintln!(
        "stalled broker: clients tried {} MiB, sockets took {} MiB, gateway RSS {} -> {} MiB, readyz slowest {slowest:?}, closed after {:?}",
        attempted >> 20,
        accepted >> 20,
        rss_before / 1024,
        rss_during / 1024,
        results.iter().filter_map(|r| r.1).max().unwrap_or_default()
    );
    assert!(
        growth_mib < 96,
        "gateway RSS grew by {growth_mib} MiB while clients tried to send {} MiB ({} MiB accepted by sockets)",
        attempted >> 20,
        accepted >> 20
    );
    // Timeouts: every connection was closed instead of hanging (open after 25 s: a hang).
    for (i, (_, closed)) in results.iter().enumerate() {
        assert!(closed.is_some(), "connection {i} still open after 25 s");
    }
    let (_, metrics) = gw.call(Method::GET, "/metrics");
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("mirrorgate_request_errors_total{kind=\"upstream_timeout\"")),
        "no upstream_timeout errors counted"
    );
    assert!(
        gw.log().contains("did not answer"),
        "the log names the stalled broker"
    );

    // The broker comes back: new connections work again.
    drop(paused);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut c = RawConn::connect(&node2);
        let (code, _) = c.produce(&topic, 0, batch(-1, -1, -1, 1, "after"));
        if code == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "produce after resume: {code}");
        std::thread::sleep(Duration::from_millis(500));
    }
}
