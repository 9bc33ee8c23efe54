//! Several gateway instances in front of one destination cluster, sharing a state topic
//! (`instances`): a failover through one instance fences the mirror writes of every other one
//! before its barrier (review F2), an instance paused past its session timeout resumes fenced,
//! and an instance without its state topic admits no mirror write and is not ready. Against the
//! real destination cluster; gateways in this process and as `mirrorgate run` processes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mirrorgate::config::{Config, InstancesConfig};

use crate::failover::{failover, mirror_config, mirror_json, read_log, reported_barrier};
use crate::gw::{admin_call, try_admin_call, ProcessGateway, TestGateway};
use crate::harness;
use crate::psm_differential::{batch, RawConn};

mod failback;
mod handover;
mod liveness;
mod record;
mod report;

const SESSION_MS: u64 = 3_000;

/// `mirror_config(name, [topic])` as instance `id` of those sharing `state_topic`.
fn instance_config(name: &str, topic: &str, id: &str, state_topic: &str) -> Config {
    let mut cfg = mirror_config(name, &[topic]);
    cfg.instances = Some(InstancesConfig {
        id: id.into(),
        state_topic: state_topic.into(),
        session_timeout_ms: SESSION_MS,
    });
    cfg
}

/// [`instance_config`] of an instance whose built-in agent mirrors the topic from `source`.
fn instance_config_with_agent(
    name: &str,
    topic: &str,
    id: &str,
    state_topic: &str,
    source: &str,
) -> Config {
    let mut cfg = instance_config(name, topic, id, state_topic);
    cfg.mirrors[0].source = Some(mirrorgate::config::ClusterConfig {
        bootstrap: vec![source.to_string()],
        connect_timeout_ms: 3000,
        metadata_refresh_ms: 30_000,
        tls: None,
        sasl: None,
    });
    cfg
}

/// Create the state topic the way `mirrorgate state init` does.
fn init_state_topic(cfg: &Config) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let done = rt
        .block_on(mirrorgate::app::peers::init_state_topic(cfg))
        .expect("state topic created");
    assert!(done.is_some_and(|d| d.contains("compacted")));
}

/// The state topic `state_topic` of `cfg`'s destination, as the gateway reads and appends it
/// (metadata read first): for tests that put records there themselves.
async fn state_log(cfg: &Config, state_topic: &str) -> mirrorgate::instances::log::KafkaStateLog {
    let connector =
        mirrorgate::client::Connector::for_cluster(&cfg.destination).expect("connector");
    let view = mirrorgate::cluster::ClusterView::new(
        cfg.destination.clone(),
        connector,
        mirrorgate::metrics::Metrics::new(),
    );
    view.refresh().await.expect("metadata");
    mirrorgate::instances::log::KafkaStateLog::new(
        view,
        state_topic.to_string(),
        Duration::from_secs(10),
    )
}

/// A mirror topic whose partition 0 is led by broker 1 (the mirror bootstrap port's node).
fn mirror_topic(prefix: &str) -> String {
    let topic = harness::unique_topic(prefix);
    harness::create_topic(&harness::cluster("destination"), &topic, 1, Some(&[1]));
    topic
}

fn instances(admin: &str) -> serde_json::Value {
    let (status, body) = admin_call(admin, hyper::Method::GET, "/v1/instances", None);
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).expect("json")
}

/// Wait until the instance at `admin` sees `others` other instances alive (20 s at most).
fn wait_others_alive(admin: &str, others: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let v = instances(admin);
        if v["others_alive"].as_array().map(Vec::len) == Some(others) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{others} other instances never alive: {v}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Wait until the instance at `admin` lists `mirror`'s failover as fenced by `who`.
fn wait_fenced_by(admin: &str, mirror: &str, who: &[&str]) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let v = instances(admin);
        let fenced: Vec<String> = v["failovers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|f| f["mirror"] == mirror)
            .flat_map(|f| f["fenced"].as_array().cloned().unwrap_or_default())
            .filter_map(|i| i.as_str().map(str::to_string))
            .collect();
        if who.iter().all(|w| fenced.iter().any(|f| f == w)) {
            return v;
        }
        assert!(Instant::now() < deadline, "never fenced by {who:?}: {v}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Wait (90 s at most) until every partition of `mirror` is STOPPED on the instance at
/// `admins[0]`; on timeout, say what each instance knows.
fn wait_stopped(admins: &[String], mirror: &str) {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let m = mirror_json(&admins[0], mirror);
        if m["partitions"].as_u64().is_some_and(|n| n > 0)
            && m["states"]["STOPPED"] == m["partitions"]
        {
            return;
        }
        if Instant::now() >= deadline {
            let (_, parts) = admin_call(
                &admins[0],
                hyper::Method::GET,
                &format!("/v1/mirrors/{mirror}/partitions"),
                None,
            );
            let views: Vec<String> = admins.iter().map(|a| instances(a).to_string()).collect();
            panic!("mirror {mirror} not STOPPED: {m}\npartitions: {parts}\ninstances: {views:#?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Wait (30 s at most) until the instance at `admin` lists the report of failover `fid` of
/// `mirror` as complete (`GET /v1/mirrors/{mirror}/failovers`); the report.
fn wait_report_complete(admin: &str, mirror: &str, fid: &str) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = admin_call(
            admin,
            hyper::Method::GET,
            &format!("/v1/mirrors/{mirror}/failovers"),
            None,
        );
        assert_eq!(status, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).expect("json");
        let found = v["failovers"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|r| r["failover_id"] == fid && r["status"] == "complete")
            .cloned();
        if let Some(r) = found {
            return r;
        }
        assert!(
            Instant::now() < deadline,
            "{admin}: no complete report of failover {fid}: {v}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Records with a producer id (data, not barriers) above `barrier` in the destination's log.
fn data_after(topic: &str, barrier: i64) -> Vec<i64> {
    read_log(&harness::cluster("destination"), topic, 0)
        .records
        .iter()
        .filter(|r| r.offset > barrier && r.producer_id >= 0)
        .map(|r| r.offset)
        .collect()
}

/// Mirror writes through `mirror_addr`, one batch after the other, until `stop`: the offsets
/// acknowledged and the refusals' messages.
fn write_mirror_batches(
    mirror_addr: String,
    topic: String,
    pid: i64,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<(Vec<i64>, Vec<String>)> {
    write_mirror_batches_every(mirror_addr, topic, pid, stop, Duration::ZERO)
}

/// [`write_mirror_batches`] with a pause of `every` after each write (20 ms at least after a
/// refusal).
fn write_mirror_batches_every(
    mirror_addr: String,
    topic: String,
    pid: i64,
    stop: Arc<AtomicBool>,
    every: Duration,
) -> std::thread::JoinHandle<(Vec<i64>, Vec<String>)> {
    std::thread::spawn(move || {
        let (mut acked, mut refused) = (Vec::new(), Vec::new());
        let mut conn = RawConn::connect(&mirror_addr);
        let mut seq = 0;
        while !stop.load(Ordering::SeqCst) {
            let (code, offset, msg) =
                conn.produce_msg(&topic, 0, batch(pid, 0, seq, 1, &format!("m{seq}")));
            if code == 0 {
                acked.push(offset);
                seq += 1;
                std::thread::sleep(every);
            } else {
                refused.push(format!("{code}: {msg}"));
                std::thread::sleep(every.max(Duration::from_millis(20)));
            }
        }
        (acked, refused)
    })
}

/// Three gateways in this process, instances a, b and c of mirror `name` over a new
/// one-partition topic, each seeing the other two alive.
fn three_in_process(name: &str) -> (String, [TestGateway; 3]) {
    let topic = mirror_topic(&format!("peers-{name}"));
    let state_topic = harness::unique_topic(&format!("peers-{name}-state"));
    let cfg = |id: &str| instance_config(name, &topic, id, &state_topic);
    init_state_topic(&cfg("a"));
    let gws = ["a", "b", "c"].map(|id| TestGateway::start(cfg(id)));
    for gw in &gws {
        wait_others_alive(&gw.admin(), 2);
    }
    (topic, gws)
}

/// The review's F2: a failover through instance A while an external mirroring tool writes
/// through instance B. B fences its mirror writes when it reads A's announcement, drains them
/// and acknowledges; A writes its barrier only then: every acknowledged mirror write lies
/// before the barrier, and A screens the producer ids mirrored through B. B keeps the topic
/// read-only for local producers and names A.
#[test]
fn a_failover_through_one_instance_fences_every_others_mirror_writes_before_its_barrier() {
    let (topic, [a, b, c]) = three_in_process("f2");
    let stop = Arc::new(AtomicBool::new(false));
    let pid = 7_300_000 + (std::process::id() as i64 % 1000) * 10;
    let writer = write_mirror_batches(b.mirror_bootstrap(), topic.clone(), pid, stop.clone());
    std::thread::sleep(Duration::from_millis(500));
    failover(&a.admin(), "f2");
    wait_stopped(&[a.admin(), b.admin(), c.admin()], "f2");
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::SeqCst);
    let (acked, refused) = writer.join().expect("writer");
    let barrier = reported_barrier(&a.admin(), "f2", &topic);
    assert!(
        !acked.is_empty(),
        "mirror writes through b before the failover"
    );
    let late: Vec<&i64> = acked.iter().filter(|o| **o >= barrier).collect();
    assert!(
        late.is_empty(),
        "mirror writes acknowledged through b after a's barrier at {barrier}: {late:?}"
    );
    assert!(
        data_after(&topic, barrier).is_empty(),
        "data after the barrier at {barrier}"
    );
    assert!(
        refused
            .iter()
            .any(|r| r.contains("failed over through instance a")),
        "b refused its mirror writes naming a: {refused:?}"
    );
    // What was mirrored through b passed no PSM of a: a screens it from the brokers' state.
    let screened = crate::failover::screened_ids(&a.config.state_dir);
    assert!(
        screened.contains(&pid),
        "the producer id mirrored through b ({pid}) is not in a's screening set: {screened:?}"
    );
    let v = wait_fenced_by(&b.admin(), "f2", &["b", "c"]);
    assert_eq!(v["failovers"][0]["by"], "a", "{v}");
    // a takes local writes after its barrier.
    let local = batch(-1, -1, -1, 1, "local");
    let (code, offset, msg) = RawConn::connect(&a.bootstrap()).produce_msg(&topic, 0, local);
    assert_eq!(code, 0, "a local write through a: {msg}");
    assert!(offset > barrier);
}

/// A failover through A: B and C follow it from the state topic. Each keeps the topic
/// read-only until it has read A's handover, then records A's barrier (writing none), screens
/// the producer ids A screened — C saw no mirrored traffic, yet screens the id mirrored through
/// B — and turns writable. Local records written through all three after the failover are each
/// in the log exactly once, after the one barrier.
#[test]
fn every_instance_turns_writable_only_after_the_barrier_of_a_failover_run_through_another() {
    let (topic, [a, b, c]) = three_in_process("adopt");
    let pid = 7_600_000 + (std::process::id() as i64 % 1000) * 10;
    let mut mirror = RawConn::connect(&b.mirror_bootstrap());
    for seq in 0..3 {
        let (code, _, msg) = mirror.produce_msg(&topic, 0, batch(pid, 0, seq, 1, "mirrored"));
        assert_eq!(code, 0, "a mirror write through b: {msg}");
    }
    let local = |i: usize| batch(-1, -1, -1, 1, &format!("local-{i}"));
    for gw in [&b, &c] {
        let (code, _, msg) = RawConn::connect(&gw.bootstrap()).produce_msg(&topic, 0, local(0));
        assert_ne!(code, 0, "a local write before the failover was accepted");
        assert!(msg.contains("read-only"), "{msg}");
    }
    failover(&a.admin(), "adopt");
    let admins = [a.admin(), b.admin(), c.admin()];
    for admin in &admins {
        crate::failover::wait_stopped(admin, "adopt");
    }
    let barrier = reported_barrier(&a.admin(), "adopt", &topic);
    let fid = mirror_json(&a.admin(), "adopt")["failover_id"].clone();
    let v = instances(&c.admin());
    assert_eq!(v["failovers"][0]["handed_over"], 1, "{v}");
    assert_eq!(v["failovers"][0]["epoch"], 1, "{v}");
    for (gw, here) in [(&a, 1), (&b, 0)] {
        let series = format!("mirrorgate_failover_driven_here{{mirror=\"adopt\"}} {here}");
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let (_, metrics) = admin_call(&gw.admin(), hyper::Method::GET, "/metrics", None);
            if metrics.lines().any(|l| l == series) {
                break;
            }
            assert!(Instant::now() < deadline, "no {series} on {}", gw.admin());
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    // b and c acknowledged a's fence: every instance counts both.
    for gw in [&a, &b, &c] {
        let deadline = Instant::now() + Duration::from_secs(5);
        while gw.metric("mirrorgate_failover_fences_acknowledged{mirror=\"adopt\"}") != 2.0 {
            assert!(
                Instant::now() < deadline,
                "fences acknowledged on {}",
                gw.admin()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    let state_topic = a
        .config
        .instances
        .as_ref()
        .expect("instances")
        .state_topic
        .clone();
    assert_eq!(
        c.metric(&format!(
            "mirrorgate_instance_info{{instance=\"c\",state_topic=\"{state_topic}\"}}"
        )),
        1.0
    );
    for gw in [&b, &c] {
        assert_eq!(
            reported_barrier(&gw.admin(), "adopt", &topic),
            barrier,
            "the barrier a wrote"
        );
        assert_eq!(mirror_json(&gw.admin(), "adopt")["failover_id"], fid);
        let screened = crate::failover::screened_ids(&gw.config.state_dir);
        assert!(
            screened.contains(&pid),
            "{}: the producer id mirrored through b is not screened: {screened:?}",
            gw.admin()
        );
    }
    let mut acked = Vec::new();
    for (i, gw) in [&a, &b, &c].iter().enumerate() {
        let mut conn = RawConn::connect(&gw.bootstrap());
        for n in 0..5 {
            let (code, offset, msg) = conn.produce_msg(&topic, 0, local(i * 10 + n));
            assert_eq!(code, 0, "a local write through {}: {msg}", gw.admin());
            assert!(offset > barrier, "{offset} not after the barrier {barrier}");
            acked.push(offset);
        }
    }
    let log = read_log(&harness::cluster("destination"), &topic, 0);
    let mut after: Vec<i64> = log
        .records
        .iter()
        .filter(|r| r.offset > barrier && !r.control)
        .map(|r| r.offset)
        .collect();
    after.sort();
    acked.sort();
    assert_eq!(
        after, acked,
        "every acknowledged local record once, nothing else after the barrier"
    );
    assert_eq!(
        log.barriers.len(),
        1,
        "one barrier, a's: {:?}",
        log.barriers
    );
}

/// An instance paused (SIGSTOP) past its session timeout while another fails the mirror over:
/// the failover waits it out, and when it resumes it admits no mirror write — its lease has
/// expired, and once it has read the state topic again the failover fences it.
#[test]
fn an_instance_paused_past_its_session_timeout_resumes_fenced_and_admits_no_mirror_write() {
    let topic = mirror_topic("peers-zombie");
    let state_topic = harness::unique_topic("peers-zombie-state");
    let cfg = |id: &str| instance_config("zombie", &topic, id, &state_topic);
    init_state_topic(&cfg("a"));
    let a = TestGateway::start(cfg("a"));
    let b = ProcessGateway::start(cfg("b"), &[]);
    wait_others_alive(&a.admin(), 1);
    let pid = 7_400_000 + (std::process::id() as i64 % 1000) * 10;
    let mut conn = RawConn::connect(&b.mirror_bootstrap());
    let (code, _, msg) = conn.produce_msg(&topic, 0, batch(pid, 0, 0, 1, "before"));
    assert_eq!(code, 0, "a mirror write through b before the pause: {msg}");
    let b_pid = b.pid().expect("b runs");
    signal(b_pid, libc::SIGSTOP);
    let paused = Instant::now();
    failover(&a.admin(), "zombie");
    wait_stopped(&[a.admin()], "zombie");
    assert!(
        paused.elapsed() >= Duration::from_millis(SESSION_MS),
        "the failover did not wait b out: it took {:?}",
        paused.elapsed()
    );
    let barrier = reported_barrier(&a.admin(), "zombie", &topic);
    signal(b_pid, libc::SIGCONT);
    // At once: b's lease has expired, so the write is refused, whatever b has read yet.
    let (code, _, msg) = conn.produce_msg(&topic, 0, batch(pid, 0, 1, 1, "after"));
    assert_ne!(code, 0, "b admitted a mirror write when it resumed");
    assert!(
        msg.contains("no lease") || msg.contains("failed over through instance a"),
        "{msg}"
    );
    let local = batch(-1, -1, -1, 1, "early");
    let (code, _, msg) = RawConn::connect(&b.bootstrap()).produce_msg(&topic, 0, local);
    if code == 0 {
        // Only once b has adopted a's handover: its partition is STOPPED there.
        let m = mirror_json(&b.admin(), "zombie");
        assert_eq!(
            m["states"]["STOPPED"], 1,
            "a local write through b before STOPPED: {m}"
        );
    } else {
        assert!(msg.contains("read-only"), "{msg}");
    }
    wait_fenced_by(&b.admin(), "zombie", &["b"]);
    let (code, _, msg) = conn.produce_msg(&topic, 0, batch(pid, 0, 1, 1, "later"));
    assert_ne!(code, 0, "b admitted a mirror write after it caught up");
    assert!(msg.contains("failed over through instance a"), "{msg}");
    assert!(data_after(&topic, barrier).is_empty());
    // It catches up: STOPPED at a's barrier, then it takes local writes, after the barrier.
    let m = crate::failover::wait_stopped(&b.admin(), "zombie");
    assert_eq!(
        reported_barrier(&b.admin(), "zombie", &topic),
        barrier,
        "{m}"
    );
    let (code, offset, msg) =
        RawConn::connect(&b.bootstrap()).produce_msg(&topic, 0, batch(-1, -1, -1, 1, "local"));
    assert_eq!(code, 0, "a local write through b once STOPPED: {msg}");
    assert!(offset > barrier);
}

/// `run` never creates the state topic: without it an instance is not ready and refuses mirror
/// writes; `mirrorgate state init` creates it, and the instance becomes ready and admits them.
#[test]
fn without_its_state_topic_an_instance_is_not_ready_and_fences_mirror_writes_until_state_init() {
    let topic = mirror_topic("peers-init");
    let state_topic = harness::unique_topic("peers-init-state");
    let gw = ProcessGateway::start_unready(instance_config("init", &topic, "a", &state_topic), &[]);
    std::thread::sleep(Duration::from_secs(2));
    let (status, body) = gw.call(hyper::Method::GET, "/readyz");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains(&state_topic), "{body}");
    let pid = 7_500_000 + (std::process::id() as i64 % 1000) * 10;
    let mut conn = RawConn::connect(&gw.mirror_bootstrap());
    let (code, _, msg) = conn.produce_msg(&topic, 0, batch(pid, 0, 0, 1, "early"));
    assert_ne!(
        code, 0,
        "a mirror write without the state topic was admitted"
    );
    assert!(msg.contains("no lease"), "{msg}");
    assert_eq!(
        code, 19,
        "a refusal that passes is retriable (NOT_ENOUGH_REPLICAS): {msg}"
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mirrorgate"))
        .args(["state", "init", "--config"])
        .arg(&gw.config_path)
        .output()
        .expect("mirrorgate state init");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("state topic {state_topic}")),
        "{stdout}"
    );
    gw.wait_ready(Duration::from_secs(30));
    let (code, _, msg) = conn.produce_msg(&topic, 0, batch(pid, 0, 0, 1, "admitted"));
    assert_eq!(code, 0, "{msg}");
}

/// The instance driving a failover ends (as SIGKILL would: the process aborts, nothing is
/// cleaned up) right after step `point`. The others wait it out, the lowest of them claims the
/// failover on the state topic and drives it on from what the brokers and the state topic
/// hold: one barrier per partition, every instance STOPPED at it, local writes after it
/// through each, and the mirrored data before it.
fn the_driver_killed_after(point: &str) {
    let topic = mirror_topic(&format!("peers-kill-{}", point.replace('_', "-")));
    let state_topic = harness::unique_topic("peers-kill-state");
    let mirror = format!("kill{}", point.len());
    let cfg = |id: &str| instance_config(&mirror, &topic, id, &state_topic);
    init_state_topic(&cfg("a"));
    let mut a = ProcessGateway::start(cfg("a"), &[("MIRRORGATE_CRASH_AFTER", point)]);
    let b = TestGateway::start(cfg("b"));
    let c = TestGateway::start(cfg("c"));
    for admin in [a.admin(), b.admin(), c.admin()] {
        wait_others_alive(&admin, 2);
    }
    let pid = 7_700_000 + (std::process::id() as i64 % 1000) * 10;
    let mut conn = RawConn::connect(&a.mirror_bootstrap());
    for seq in 0..3 {
        let (code, _, msg) = conn.produce_msg(&topic, 0, batch(pid, 0, seq, 1, "mirrored"));
        assert_eq!(code, 0, "a mirror write through a: {msg}");
    }
    let started = Instant::now();
    // The call itself may see the process end (the first crash point is inside it).
    let _ = try_admin_call(
        &a.admin(),
        hyper::Method::POST,
        &format!("/v1/mirrors/{mirror}/failover"),
        None,
    );
    assert!(
        a.wait_exit(Duration::from_secs(30)),
        "a did not crash after {point}"
    );
    if point == "fenced_persisted" {
        // Never announced: the others were not fenced, nothing to take over. The failover is
        // called again on b.
        std::thread::sleep(Duration::from_millis(SESSION_MS + 2_500));
        assert_eq!(mirror_json(&b.admin(), &mirror)["states"]["MIRRORING"], 1);
        failover(&b.admin(), &mirror);
    }
    for admin in [b.admin(), c.admin()] {
        crate::failover::wait_stopped(&admin, &mirror);
    }
    let took = started.elapsed();
    let barrier = reported_barrier(&b.admin(), &mirror, &topic);
    assert_eq!(reported_barrier(&c.admin(), &mirror, &topic), barrier);
    let log = read_log(&harness::cluster("destination"), &topic, 0);
    assert_eq!(log.barriers.len(), 1, "after {point}: {:?}", log.barriers);
    let mirrored: Vec<i64> = log
        .records
        .iter()
        .filter(|r| r.producer_id == pid)
        .map(|r| r.offset)
        .collect();
    assert_eq!(mirrored.len(), 3, "{mirrored:?}");
    assert!(mirrored.iter().all(|o| *o < barrier));
    for gw in [&b, &c] {
        let (code, offset, msg) =
            RawConn::connect(&gw.bootstrap()).produce_msg(&topic, 0, batch(-1, -1, -1, 1, "local"));
        assert_eq!(code, 0, "a local write through {}: {msg}", gw.admin());
        assert!(offset > barrier);
        assert!(crate::failover::screened_ids(&gw.config.state_dir).contains(&pid));
    }
    // The result is visible from every instance: the report the instance driving the
    // failover at its end completed, published on the state topic.
    let fid = mirror_json(&b.admin(), &mirror)["failover_id"]
        .as_str()
        .expect("a failover id")
        .to_string();
    for admin in [b.admin(), c.admin()] {
        let r = wait_report_complete(&admin, &mirror, &fid);
        assert_eq!(r["partitions"].as_array().map(Vec::len), Some(1), "{r}");
    }
    eprintln!(
        "takeover after {point}: failover complete on b and c {:.1} s after the call",
        took.as_secs_f64()
    );
}

#[test]
fn a_failover_whose_driver_dies_before_announcing_it_is_called_again_on_another_instance() {
    the_driver_killed_after("fenced_persisted");
}

#[test]
fn a_failover_whose_driver_dies_after_fencing_is_taken_over_and_completed() {
    the_driver_killed_after("fenced");
}

#[test]
fn a_failover_whose_driver_dies_after_writing_its_barriers_is_taken_over_with_them() {
    the_driver_killed_after("barrier_written");
}

#[test]
fn a_failover_whose_driver_dies_after_screening_is_taken_over_with_its_barriers() {
    the_driver_killed_after("screen_persisted");
}

#[test]
fn a_failover_whose_driver_dies_after_recording_its_barriers_is_taken_over_with_them() {
    the_driver_killed_after("barrier_persisted");
}

#[test]
fn a_failover_whose_driver_dies_before_handing_it_over_is_taken_over_and_handed_over() {
    the_driver_killed_after("psm_cleared");
}

/// A failback on the instance that ran the failover (`POST start`: its built-in agent mirrors
/// again): the other instance follows it from the state topic — its partition goes MIRRORING
/// again, read-only for local writes, and it no longer fences the mirror's writes.
#[test]
fn a_failback_on_the_instance_that_failed_over_makes_the_mirror_read_only_again_on_every_instance()
{
    let source = harness::cluster("source");
    let topic = mirror_topic("peers-back");
    harness::create_topic(&source, &topic, 1, None);
    let state_topic = harness::unique_topic("peers-back-state");
    let with_agent = instance_config_with_agent("back", &topic, "a", &state_topic, &source);
    init_state_topic(&with_agent);
    let a = TestGateway::start(with_agent);
    let b = TestGateway::start(instance_config("back", &topic, "b", &state_topic));
    wait_others_alive(&a.admin(), 1);
    wait_others_alive(&b.admin(), 1);
    failover(&a.admin(), "back");
    crate::failover::wait_stopped(&a.admin(), "back");
    crate::failover::wait_stopped(&b.admin(), "back");
    let (status, body) = admin_call(
        &a.admin(),
        hyper::Method::POST,
        "/v1/mirrors/back/start",
        None,
    );
    assert_eq!(status, 202, "{body}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let m = mirror_json(&b.admin(), "back");
        if m["states"]["MIRRORING"] == 1 {
            assert!(m["failover_id"].is_null(), "{m}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "b did not follow the failback: {m}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let (code, _, msg) =
        RawConn::connect(&b.bootstrap()).produce_msg(&topic, 0, batch(-1, -1, -1, 1, "local"));
    assert_ne!(
        code, 0,
        "a local write through b after the failback was accepted"
    );
    assert!(msg.contains("read-only"), "{msg}");
    let v = instances(&b.admin());
    assert!(
        v["failovers"].as_array().is_some_and(|f| f.is_empty()),
        "b still fences the mirror: {v}"
    );
}

/// The (value, offset) of each acknowledged record, and each delivery error.
type Sends = (Vec<(String, i64)>, Vec<String>);

/// A librdkafka idempotent producer (acks=all) sending `value-N` to partition 0 of `topic`
/// one record after the other until `stop`: the value and offset of every record it was
/// acknowledged, and every delivery error.
fn steady_librdkafka_producer(
    bootstrap: String,
    topic: String,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Sends> {
    use rdkafka::config::ClientConfig;
    use rdkafka::producer::{FutureProducer, FutureRecord};
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("rt");
        rt.block_on(async {
            let p: FutureProducer = ClientConfig::new()
                .set("bootstrap.servers", &bootstrap)
                .set("enable.idempotence", "true")
                .set("acks", "all")
                .set("message.timeout.ms", "90000")
                .set("reconnect.backoff.max.ms", "500")
                .create()
                .expect("producer");
            let (mut acked, mut errors) = (Vec::new(), Vec::new());
            let mut n = 0;
            while !stop.load(Ordering::SeqCst) {
                let value = format!("value-{n}");
                n += 1;
                let r = p
                    .send(
                        FutureRecord::to(&topic)
                            .key("k")
                            .payload(&value)
                            .partition(0),
                        Duration::from_secs(90),
                    )
                    .await;
                match r {
                    Ok(d) => acked.push((value, d.offset)),
                    Err((e, _)) => errors.push(format!("{value}: {e}")),
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            (acked, errors)
        })
    })
}

/// Stop (SIGTERM) and start again each of `gws` in turn, waiting until each is ready again.
fn rolling_restart(gws: &mut [ProcessGateway]) {
    for gw in gws.iter_mut() {
        std::thread::sleep(Duration::from_secs(2));
        signal(gw.pid().expect("runs"), libc::SIGTERM);
        assert!(
            gw.wait_exit(Duration::from_secs(40)),
            "{} did not stop on SIGTERM",
            gw.admin()
        );
        gw.restart(&[]);
    }
    std::thread::sleep(Duration::from_secs(2));
}

/// Records the Java producer sends during a rolling restart, and how many a second: about 24 s
/// of sending, as long as a restart of three instances takes here, so it overlaps each of them
/// (it is started first).
const JAVA_RECORDS: usize = 600;
const JAVA_RATE: u32 = 25;

/// A Java idempotent producer (VerifiableProducer, acks=all, up to 60 s per record) sending
/// [`JAVA_RECORDS`] records `0`, `1`, ... to `topic` at [`JAVA_RATE`] a second through
/// `bootstrap`, in a thread: the tool's output.
fn steady_java_producer(
    bootstrap: String,
    topic: String,
) -> std::thread::JoinHandle<std::process::Output> {
    std::thread::spawn(move || {
        let dir = tempfile::tempdir().expect("tempdir");
        let props = dir.path().join("p.properties");
        std::fs::write(
            &props,
            "enable.idempotence=true\nacks=all\nretries=2147483647\nlinger.ms=0\n\
             delivery.timeout.ms=60000\nrequest.timeout.ms=5000\nreconnect.backoff.max.ms=500\n",
        )
        .expect("props");
        harness::verifiable_producer(&bootstrap, &topic, JAVA_RECORDS, Some(JAVA_RATE), &props)
    })
}

/// A rolling restart of `gws` while a steady librdkafka producer and a Java producer write to
/// `topic` through `bootstrap`: what each was acknowledged, as (value, offset). Neither may have
/// had a failed send, and the Java producer must have been acknowledged every record.
fn restart_all_under_load(
    gws: &mut [ProcessGateway],
    bootstrap: String,
    topic: &str,
) -> Vec<(String, i64)> {
    let stop = Arc::new(AtomicBool::new(false));
    let java = steady_java_producer(bootstrap.clone(), topic.to_string());
    let producer = steady_librdkafka_producer(bootstrap, topic.to_string(), stop.clone());
    rolling_restart(gws);
    stop.store(true, Ordering::SeqCst);
    let (mut acked, errors) = producer.join().expect("producer");
    assert!(errors.is_empty(), "librdkafka sends failed: {errors:?}");
    assert!(acked.len() > 50, "{} records acknowledged", acked.len());
    let out = java.join().expect("java producer");
    harness::expect_success("VerifiableProducer during the rolling restart", &out);
    let failed: Vec<serde_json::Value> = harness::json_lines(&out.stdout)
        .into_iter()
        .filter(|e| e["name"] == "producer_send_error")
        .collect();
    assert!(failed.is_empty(), "Java sends failed: {failed:?}");
    let java_acked = harness::verifiable_acks(&out);
    assert_eq!(
        java_acked.len(),
        JAVA_RECORDS,
        "every Java record acknowledged"
    );
    acked.extend(java_acked.into_iter().map(|((_, offset), v)| (v, offset)));
    acked
}

/// Every record `acked` is in the log of `topic`-0 at its offset, with its value, and no value
/// is there twice.
fn assert_each_acked_record_once(topic: &str, acked: &[(String, i64)]) {
    let log = read_log(&harness::cluster("destination"), topic, 0);
    let mut seen = std::collections::HashMap::new();
    for r in log.records.iter().filter(|r| !r.control) {
        if let Some(v) = &r.value {
            *seen.entry(v.clone()).or_insert(0) += 1;
        }
    }
    for (value, offset) in acked {
        let at = log.records.iter().find(|r| r.offset == *offset);
        assert_eq!(
            at.and_then(|r| r.value.as_deref()),
            Some(value.as_str()),
            "acknowledged {value} at {offset} is not there"
        );
        assert_eq!(
            seen.get(value),
            Some(&1),
            "{value} is in the log {:?} times",
            seen.get(value)
        );
    }
}

/// Three `mirrorgate run` instances of mirror `name` over a new one-partition topic.
fn three_processes(name: &str) -> (String, Vec<ProcessGateway>) {
    let topic = mirror_topic(&format!("peers-{name}"));
    let state_topic = harness::unique_topic(&format!("peers-{name}-state"));
    let cfg = |id: &str| instance_config(name, &topic, id, &state_topic);
    init_state_topic(&cfg("a"));
    let gws: Vec<ProcessGateway> = ["a", "b", "c"]
        .iter()
        .map(|id| ProcessGateway::start(cfg(id), &[]))
        .collect();
    for gw in &gws {
        wait_others_alive(&gw.admin(), 2);
    }
    (topic, gws)
}

/// A rolling restart of all three instances while a librdkafka and a Java producer write
/// mirrored data through their mirror listeners (all three in its bootstrap list): each acknowledged record is
/// in the log once, and no send failed (a restarted instance without its lease yet answers a
/// retriable error).
#[test]
fn a_rolling_restart_of_every_instance_during_mirroring_loses_no_acknowledged_mirror_write() {
    let (topic, mut gws) = three_processes("roll-mirror");
    let bootstrap = gws
        .iter()
        .map(|g| g.mirror_bootstrap())
        .collect::<Vec<_>>()
        .join(",");
    let acked = restart_all_under_load(&mut gws, bootstrap, &topic);
    assert_each_acked_record_once(&topic, &acked);
}

/// After a failover through one of them, a rolling restart of all three instances while a
/// librdkafka and a Java producer write local records through their client listeners: each acknowledged
/// record is in the log once, after the barrier, and no send failed.
#[test]
fn a_rolling_restart_of_every_instance_after_a_failover_loses_no_acknowledged_local_write() {
    let (topic, mut gws) = three_processes("roll-local");
    failover(&gws[0].admin(), "roll-local");
    for gw in &gws {
        crate::failover::wait_stopped(&gw.admin(), "roll-local");
    }
    let barrier = reported_barrier(&gws[0].admin(), "roll-local", &topic);
    let bootstrap = gws
        .iter()
        .map(|g| g.bootstrap())
        .collect::<Vec<_>>()
        .join(",");
    let acked = restart_all_under_load(&mut gws, bootstrap, &topic);
    assert!(acked.iter().all(|(_, o)| *o > barrier));
    assert_each_acked_record_once(&topic, &acked);
}

fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) on the pid of a child this test started.
    let r = unsafe { libc::kill(pid as libc::pid_t, sig) };
    assert_eq!(r, 0, "kill({pid}, {sig})");
}

/// The `authz` cluster's SASL_PLAINTEXT address (its PLAINTEXT port + 3, see `integration/rig`).
fn authz_sasl(authz: &str) -> String {
    let (host, port) = authz.rsplit_once(':').expect("host:port");
    let port: u16 = port.parse().expect("port");
    format!("{host}:{}", port + 3)
}

/// An ACL denying `principal` every operation on topic `topic` of the cluster at `plaintext`
/// (as its super user); the guard removes it when dropped.
struct DeniedTopic(String, String);

/// ACL operation codes (`AclOperation`) and permission types (`AclPermissionType`).
const ACL_ALL: i8 = 2;
const ACL_READ: i8 = 3;
const ACL_WRITE: i8 = 4;
const ACL_DESCRIBE: i8 = 8;
const ACL_DENY: i8 = 2;
const ACL_ALLOW: i8 = 3;

impl DeniedTopic {
    fn create(plaintext: &str, topic: &str, principal: &str) -> DeniedTopic {
        Self::with_acls(plaintext, topic, principal, &[(ACL_ALL, ACL_DENY)])
    }

    /// ACLs on `topic` for `principal`: each (operation, permission type). The cluster allows
    /// everyone what no ACL names, so an ACL on the topic takes every other operation away.
    fn with_acls(plaintext: &str, topic: &str, principal: &str, acls: &[(i8, i8)]) -> DeniedTopic {
        use kafka_protocol::messages::create_acls_request::AclCreation;
        use kafka_protocol::messages::CreateAclsRequest;
        use kafka_protocol::protocol::StrBytes;
        let req = CreateAclsRequest::default().with_creations(
            acls.iter()
                .map(|(operation, permission)| {
                    AclCreation::default()
                        .with_resource_type(2) // TOPIC
                        .with_resource_name(StrBytes::from_string(topic.to_string()))
                        .with_resource_pattern_type(3) // LITERAL
                        .with_principal(StrBytes::from_string(principal.to_string()))
                        .with_host(StrBytes::from_static_str("*"))
                        .with_operation(*operation)
                        .with_permission_type(*permission)
                })
                .collect(),
        );
        let resp = crate::sync::with_client(plaintext, |c| {
            Box::pin(async move { c.send(&req, 3).await.expect("CreateAcls") })
        });
        for r in &resp.results {
            assert_eq!(r.error_code, 0, "CreateAcls: {:?}", r.error_message);
        }
        DeniedTopic(plaintext.to_string(), topic.to_string())
    }
}

impl Drop for DeniedTopic {
    fn drop(&mut self) {
        use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
        use kafka_protocol::messages::DeleteAclsRequest;
        use kafka_protocol::protocol::StrBytes;
        let req = DeleteAclsRequest::default().with_filters(vec![DeleteAclsFilter::default()
            .with_resource_type_filter(2)
            .with_resource_name_filter(Some(StrBytes::from_string(self.1.clone())))
            .with_pattern_type_filter(1) // ANY
            .with_principal_filter(None)
            .with_host_filter(None)
            .with_operation(1) // ANY
            .with_permission_type(1)]); // ANY
        crate::sync::with_client(&self.0, |c| {
            Box::pin(async move {
                let _ = c.send(&req, 3).await;
            })
        });
    }
}

/// Instances a and b (in this process) and c (a `mirrorgate run` process authenticating as
/// `alice`) of mirror `name` in front of the `authz` cluster, sharing a new state topic; every
/// one ready and a and b seeing the other two alive. Returns the authz cluster, the mirror
/// topic, the state topic and the three instances.
fn three_in_front_of_authz(
    name: &str,
) -> (String, String, String, [TestGateway; 2], ProcessGateway) {
    use mirrorgate::config::{SaslConfig, SaslMechanism, SecretSource};
    let authz = harness::cluster("authz");
    let topic = harness::unique_topic(&format!("peers-{name}"));
    harness::create_topic(&authz, &topic, 1, None);
    let state_topic = harness::unique_topic(&format!("peers-{name}-state"));
    let cfg = |id: &str| {
        let mut cfg = instance_config(name, &topic, id, &state_topic);
        cfg.destination.bootstrap = vec![authz.clone()];
        cfg
    };
    init_state_topic(&cfg("a"));
    let a = TestGateway::start(cfg("a"));
    let b = TestGateway::start(cfg("b"));
    let mut c_cfg = cfg("c");
    c_cfg.destination.bootstrap = vec![authz_sasl(&authz)];
    c_cfg.destination.sasl = Some(SaslConfig {
        mechanism: SaslMechanism::ScramSha256,
        username: "alice".into(),
        // The process reads its configuration from a file, where secrets are redacted.
        password: SecretSource {
            value: None,
            env: Some("MIRRORGATE_TEST_ALICE_PASSWORD".into()),
            file: None,
        },
    });
    let c =
        ProcessGateway::start_unready(c_cfg, &[("MIRRORGATE_TEST_ALICE_PASSWORD", "alice-secret")]);
    for admin in [a.admin(), b.admin()] {
        wait_others_alive(&admin, 2);
    }
    c.wait_ready(Duration::from_secs(30));
    (authz, topic, state_topic, [a, b], c)
}

/// Three instances in front of one cluster (`authz`, with an authorizer); the third
/// authenticates as its own principal. Once an ACL denies that principal the state topic, that
/// instance cannot read it: it goes not ready, says why, holds no lease, refuses mirror writes
/// (retriable) and local writes. The other two wait it out, then see only each other, take
/// mirror writes, fail over and turn writable at the barrier.
#[test]
fn an_instance_that_may_not_read_the_state_topic_goes_read_only_and_not_ready_and_the_others_carry_on(
) {
    let (authz, topic, state_topic, [a, b], c) = three_in_front_of_authz("acl");
    let pid = 7_900_000 + (std::process::id() as i64 % 1000) * 10;
    let _denied = DeniedTopic::create(&authz, &state_topic, "User:alice");
    wait_others_alive(&a.admin(), 1);
    wait_others_alive(&b.admin(), 1);
    // c: not ready, naming the state topic; no lease; mirror writes refused, retriable.
    let deadline = Instant::now() + Duration::from_secs(20);
    let body = loop {
        let (status, body) = c.call(hyper::Method::GET, "/readyz");
        // Unready for its state topic alone, once it knows the cluster (through the same
        // principal) and has bound its listeners.
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        let reasons = v["reasons"].as_array().cloned().unwrap_or_default();
        if status == 503
            && v["metadata_known"] == true
            && !reasons.is_empty()
            && reasons
                .iter()
                .all(|r| r.as_str().is_some_and(|r| r.contains(&state_topic)))
        {
            break body;
        }
        assert!(
            Instant::now() < deadline,
            "c is not reported unready for its state topic alone: {status} {body}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        body.contains("TOPIC_AUTHORIZATION_FAILED"),
        "the reason names the denial: {body}"
    );
    assert_eq!(
        crate::failover::process_metric(&c, "mirrorgate_instance_lease_held"),
        0.0
    );
    // (Answered by c itself: a client of c's listeners would have to authenticate as alice
    // for anything c forwards, which this raw connection does not.)
    let (code, _, msg) =
        RawConn::connect(&c.mirror_bootstrap()).produce_msg(&topic, 0, batch(pid, 0, 0, 1, "c"));
    assert_eq!(code, 19, "a mirror write through c: {msg}");
    assert!(msg.contains("no lease"), "{msg}");
    // a and b carry on: c is no longer alive to them; they mirror through a, fail over
    // through b.
    let mut conn = RawConn::connect(&a.mirror_bootstrap());
    for seq in 0..3 {
        let (code, _, msg) = conn.produce_msg(&topic, 0, batch(pid, 0, seq, 1, "mirrored"));
        assert_eq!(code, 0, "a mirror write through a: {msg}");
    }
    failover(&b.admin(), "acl");
    crate::failover::wait_stopped(&b.admin(), "acl");
    crate::failover::wait_stopped(&a.admin(), "acl");
    let barrier = reported_barrier(&b.admin(), "acl", &topic);
    let (code, offset, msg) =
        RawConn::connect(&a.bootstrap()).produce_msg(&topic, 0, batch(-1, -1, -1, 1, "local"));
    assert_eq!(code, 0, "a local write through a after the failover: {msg}");
    assert!(offset > barrier, "{offset} after the barrier {barrier}");
    // c stays read-only for local writes: it cannot read the handover.
    let (code, _, msg) =
        RawConn::connect(&c.bootstrap()).produce_msg(&topic, 0, batch(-1, -1, -1, 1, "c-local"));
    assert_ne!(code, 0, "a local write through c was accepted");
    assert!(msg.contains("read-only"), "{msg}");
    let (status, _) = c.call(hyper::Method::GET, "/readyz");
    assert_eq!(status, 503, "c became ready without its state topic");
}
