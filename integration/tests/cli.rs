//! The `mirrorgate` command line, run as a user would.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness;

fn mirrorgate() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mirrorgate"))
}

#[test]
fn check_config_prints_the_effective_config_of_the_default_file() {
    let out = mirrorgate()
        .arg("check-config")
        .arg(harness::repo().join("config/mirrorgate.yaml"))
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("port_base: 9092") && text.contains("max_frame_bytes"),
        "{text}"
    );
}

#[test]
fn check_config_reports_errors_with_position_and_key_path_and_exits_non_zero() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("bad.yaml");
    std::fs::write(
        &file,
        "destination:\n  bootstrap: [\"127.0.0.1:29092\"]\nlisteners:\n  client: { port_base: 9092 }\n  mirror: { port_base: 9093 }\n",
    )
    .expect("write");
    let out = mirrorgate()
        .arg("check-config")
        .arg(&file)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.yaml:") && err.contains("listeners.mirror"),
        "{err}"
    );
}

#[test]
fn check_config_of_a_missing_file_names_it() {
    let out = mirrorgate()
        .args(["check-config", "/nonexistent/mirrorgate.yaml"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/mirrorgate.yaml"));
}

/// `mirrorgate demo` in its own process group; dropped, it is killed with everything it started
/// (SIGKILL to the group), so a failing test leaves no gateway or demo producer running.
struct Demo {
    child: std::process::Child,
}

impl Demo {
    fn start() -> Demo {
        use std::os::unix::process::CommandExt;
        let child = mirrorgate()
            .arg("demo")
            .env("RUST_LOG", "warn")
            .process_group(0)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start demo");
        Demo { child }
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        let pid = self.child.id() as i32;
        // SAFETY: signals the process group this test created (the demo is its leader).
        unsafe { libc::kill(-pid, libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

#[test]
fn demo_starts_the_gateway_in_front_of_the_rig_and_stops_on_ctrl_c() {
    // The demo reuses clusters that are already running (and leaves them running).
    harness::cluster("source");
    harness::cluster("destination");
    let mut demo = Demo::start();
    let stdout = demo.child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut seen = Vec::new();
    while !seen
        .iter()
        .any(|l: &String| l.contains("mirrorgate is ready"))
    {
        match rx.recv_timeout(Duration::from_secs(1)) {
            Ok(l) => seen.push(l),
            Err(_) => assert!(
                Instant::now() < deadline,
                "demo did not become ready: {seen:?}"
            ),
        }
    }
    // Kafka clients work through the demo's gateway.
    let topic = harness::unique_topic("demo-cli");
    harness::create_topic(&harness::cluster("destination"), &topic, 1, None);
    let acks = harness::produce_keyed("127.0.0.1:9092", &topic, 10, &[]);
    assert_eq!(acks.len(), 10);
    // The demo's agent mirrors its topic: every partition reaches MIRRORING, none FAILED.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, body) = crate::gw::admin_call(
            "127.0.0.1:9180",
            hyper::Method::GET,
            "/v1/mirrors/demo/partitions",
            None,
        );
        assert_eq!(status, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).expect("json");
        let states: Vec<&str> = v["partitions"]
            .as_array()
            .map(|ps| ps.iter().filter_map(|p| p["state"].as_str()).collect())
            .unwrap_or_default();
        assert!(
            !states.contains(&"FAILED"),
            "the demo's agent failed: {body}"
        );
        if !states.is_empty() && states.iter().all(|s| *s == "MIRRORING") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "demo mirror not mirroring: {body}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    demo_shows_mirrored_producers_a_failover_and_its_report();
    let pid = demo.child.id().to_string();
    assert!(Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .expect("kill")
        .success());
    let start = Instant::now();
    loop {
        if let Some(status) = demo.child.try_wait().expect("wait") {
            assert!(status.success(), "demo exited with {status}");
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "demo did not stop after Ctrl-C"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The clusters it did not start are still running.
    let status = harness::rig(&["status"]);
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(
        text.contains("source=") && text.contains("destination="),
        "{text}"
    );
}

/// What the demo is for (its banner's "where to look"): the PSM holds the source's idempotent
/// producers, mirrored; the failover completes with a report; and the local producer's writes
/// through the gateway, refused before, are in the log after it.
fn demo_shows_mirrored_producers_a_failover_and_its_report() {
    let admin = "127.0.0.1:9180";
    let get = |path: &str| {
        let (status, body) = crate::gw::admin_call(admin, hyper::Method::GET, path, None);
        assert_eq!(status, 200, "{path}: {body}");
        serde_json::from_str::<serde_json::Value>(&body).expect("json")
    };
    // The producer ids the PSM holds over the demo topic's 3 partitions (a partition the PSM
    // has no slot for yet, with no mirrored batch through it so far, answers 404: none yet).
    let producers_of = |p: i32| {
        let path = format!("/v1/partitions/demo/{p}/producers");
        let (status, body) = crate::gw::admin_call(admin, hyper::Method::GET, &path, None);
        if status == 404 {
            return serde_json::Value::Null;
        }
        assert_eq!(status, 200, "{path}: {body}");
        serde_json::from_str::<serde_json::Value>(&body).expect("json")
    };
    let psm_ids = || -> std::collections::BTreeSet<i64> {
        (0..3)
            .flat_map(|p| {
                producers_of(p)["producers"]
                    .as_array()
                    .map(|ps| {
                        ps.iter()
                            .filter_map(|e| e["producer_id"].as_i64())
                            .collect()
                    })
                    .unwrap_or_else(Vec::new)
            })
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let producer_ids = loop {
        let ids = psm_ids();
        if ids.len() >= 2 {
            break ids;
        }
        assert!(
            Instant::now() < deadline,
            "the demo's PSM shows fewer than 2 mirrored producer ids: {ids:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    let out = mirrorgate()
        .args(["failover", "demo", "--admin", admin, "--timeout", "60"])
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let reports = get("/v1/mirrors/demo/failovers");
    let report = &reports["failovers"][0];
    assert!(report["rto_seconds"].as_f64().is_some(), "{reports:#}");
    eprintln!("the demo's failover report:\n{report:#}");
    // The barrier expired the mirrored producers.
    let after = psm_ids();
    assert!(
        after.iter().all(|id| !producer_ids.contains(id)),
        "mirrored producers {producer_ids:?} still in the PSM after the barrier: {after:?}"
    );
    // The local producer's records, written through the gateway, are acknowledged now.
    let destination = harness::cluster("destination");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !(0..3).any(|p| {
        crate::failover::read_log(&destination, "demo", p)
            .records
            .iter()
            .any(|r| r.key.as_deref().is_some_and(|k| k.starts_with("local-")))
    }) {
        assert!(
            Instant::now() < deadline,
            "no record of the demo's local producer in the destination after the failover"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn failover_command_waits_until_every_partition_is_stopped() {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("cli-fo");
    harness::create_topic(&destination, &topic, 2, Some(&[1, 2]));
    let gw = crate::gw::TestGateway::start(crate::failover::mirror_config("clifo", &[&topic]));
    crate::failover::wait_mirroring(&gw.admin(), "clifo", 2);
    let out = mirrorgate()
        .args([
            "failover",
            "clifo",
            "--admin",
            &gw.admin(),
            "--timeout",
            "60",
        ])
        .output()
        .expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("all 2 partitions STOPPED"), "{text}");
    let again = mirrorgate()
        .args(["failover", "clifo", "--admin", &gw.admin()])
        .output()
        .expect("run");
    assert_eq!(
        again.status.code(),
        Some(2),
        "a second failover is refused: already stopped"
    );
    assert!(String::from_utf8_lossy(&again.stderr).contains("already stopped"));
    let unknown = mirrorgate()
        .args(["failover", "nope", "--admin", &gw.admin()])
        .output()
        .expect("run");
    assert_eq!(unknown.status.code(), Some(2));
}

#[test]
fn json_logging_writes_one_json_object_per_line_with_a_startup_summary() {
    let destination = harness::cluster("destination");
    let mut cfg = crate::gw::test_config(&destination);
    cfg.logging.format = "json".into();
    let gw = crate::gw::ProcessGateway::start(cfg, &[]);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let log = gw.log();
        let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
        if log.contains("mirrorgate ready") {
            for l in &lines {
                let v: serde_json::Value =
                    serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
                assert!(v.get("level").is_some() && v.get("fields").is_some(), "{l}");
            }
            let summary = lines
                .iter()
                .find(|l| l.contains("mirrorgate ready"))
                .expect("summary");
            assert!(
                summary.contains("upstream_brokers") && summary.contains("listeners"),
                "{summary}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "no startup summary:\n{log}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `state init --wait-seconds N` with `instances`: while the destination cannot be reached it
/// keeps trying for N seconds, says so, then fails naming the reason (the state directory is
/// initialised either way).
#[test]
fn state_init_waits_for_an_unreachable_destination_then_fails_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("gw.yaml");
    let state = dir.path().join("state");
    std::fs::write(
        &file,
        format!(
            "destination:\n  bootstrap: [\"127.0.0.1:1\"]\n  connect_timeout_ms: 200\nlisteners:\n  client: {{ port_base: 9092 }}\n\
             admin:\n  bind: 127.0.0.1:9180\nstate_dir: {}\ninstances:\n  id: gw-a\n",
            state.display()
        ),
    )
    .expect("write");
    let started = Instant::now();
    let out = mirrorgate()
        .args(["state", "init", "--wait-seconds", "2", "--config"])
        .arg(&file)
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(started.elapsed() >= Duration::from_secs(2), "{err}");
    assert!(err.contains("trying again"), "{err}");
    assert!(
        state.join("identity").exists() || state.read_dir().is_ok_and(|mut d| d.next().is_some())
    );
}
