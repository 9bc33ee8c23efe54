//! Prometheus: `promtool` accepts the configurations and rules as compose mounts them, and a
//! real Prometheus scraping a real gateway evaluates every dashboard query and alert rule.

use super::*;
use crate::gw::admin_call;

fn require(bin: &str) -> PathBuf {
    let p = PathBuf::from(bin);
    assert!(
        p.exists(),
        "{bin} is missing: run integration/install-prometheus (Debian package `prometheus`)"
    );
    p
}

#[test]
fn promtool_accepts_the_prometheus_configs_as_compose_mounts_them() {
    let promtool = require("/usr/bin/promtool");
    let run = |args: &[&str]| {
        let mut c = Command::new(&promtool);
        c.args(args).current_dir(repo());
        let out = run_with_timeout(c, Duration::from_secs(60));
        assert!(
            out.status.success(),
            "promtool {args:?}:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&["check", "rules", "config/alerts.yml"]);
    run(&["check", "config", "config/prometheus.yml"]);
    // The compose layout: every bind mount of the prometheus service at its container path.
    let compose = yaml("docker-compose.yml");
    let root = tempfile::tempdir().expect("tempdir");
    let mut conf = None;
    for (target, src) in bind_mounts(&compose["services"]["prometheus"], "prometheus") {
        let dst = root.path().join(target.trim_start_matches('/'));
        std::fs::create_dir_all(dst.parent().expect("parent")).expect("mkdir");
        std::fs::copy(repo().join(&src), &dst).expect("copy");
        if target.ends_with("prometheus.yml") {
            conf = Some(dst);
        }
    }
    let conf = conf.expect("prometheus.yml mounted");
    run(&["check", "config", conf.to_str().expect("utf-8")]);
    // Every alert has a summary and a severity.
    let rules = yaml("config/alerts.yml");
    for g in yseq(&rules["groups"], "groups") {
        for r in yseq(&g["rules"], "rules") {
            let name = ystr(&r["alert"], "alert");
            assert!(
                r["labels"]["severity"].is_string(),
                "{name}: severity label"
            );
            assert!(r["annotations"]["summary"].is_string(), "{name}: summary");
        }
    }
}

// ------------------------------------------------------------------------------ Prometheus

/// A Prometheus process on a free loopback port; killed when dropped (also on panic).
struct Prometheus {
    child: Option<Child>,
    addr: String,
    dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Percent-encoding for a query-string value.
fn urlencode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn http_get(addr: &str, path: &str) -> Result<(u16, String), String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    rt.block_on(async {
        tokio::time::timeout(
            Duration::from_secs(10),
            mirrorgate::admin::client::call(addr, Method::GET, path, None, None),
        )
        .await
        .map_err(|_| format!("GET {path}: timed out"))?
        .map_err(|e| e.to_string())
    })
}

impl Prometheus {
    /// Start with config/prometheus.yml adapted to scrape `target` every second and evaluate
    /// config/alerts.yml every second.
    fn start(target: &str) -> Prometheus {
        let bin = require("/usr/bin/prometheus");
        let dir = tempfile::tempdir().expect("tempdir");
        let mut cfg = yaml("config/prometheus.yml");
        cfg["global"]["scrape_interval"] = "1s".into();
        cfg["global"]["scrape_timeout"] = "1s".into();
        cfg["global"]["evaluation_interval"] = "1s".into();
        let rules: Vec<Yaml> = yseq(&cfg["rule_files"], "rule_files")
            .iter()
            .map(|r| {
                let p = repo().join("config").join(ystr(r, "rule file"));
                assert!(p.exists(), "{}", p.display());
                Yaml::String(p.to_string_lossy().into_owned())
            })
            .collect();
        cfg["rule_files"] = Yaml::Sequence(rules);
        let jobs = cfg["scrape_configs"]
            .as_sequence_mut()
            .expect("scrape_configs");
        let job = jobs
            .iter_mut()
            .find(|j| j["job_name"] == "mirrorgate")
            .expect("config/prometheus.yml has job mirrorgate");
        let static_cfg: Yaml =
            serde_yaml::from_str(&format!("[{{targets: [\"{target}\"]}}]")).expect("yaml");
        job["static_configs"] = static_cfg;
        let conf = dir.path().join("prometheus.yml");
        std::fs::write(&conf, serde_yaml::to_string(&cfg).expect("yaml")).expect("write config");
        let port = free_port_range(1);
        let addr = format!("127.0.0.1:{port}");
        let log = std::fs::File::create(dir.path().join("prometheus.log")).expect("log");
        let child = Command::new(bin)
            .arg(format!("--config.file={}", conf.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .arg("--log.level=warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start prometheus");
        let mut p = Prometheus {
            child: Some(child),
            addr,
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok((200, _)) = http_get(&p.addr, "/-/ready") {
                break;
            }
            if let Some(Ok(Some(status))) = p.child.as_mut().map(|c| c.try_wait()) {
                panic!("prometheus exited ({status}):\n{}", p.log());
            }
            assert!(
                Instant::now() < deadline,
                "prometheus not ready:\n{}",
                p.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        p
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// GET an API path; returns `data` (panics unless status is success).
    fn api(&self, path: &str) -> Json {
        let (code, body) = http_get(&self.addr, path).unwrap_or_else(|e| panic!("{e}"));
        let v: Json = serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("GET {path}: {code}: not JSON ({e}): {body}"));
        assert!(
            code == 200 && v["status"] == "success",
            "GET {path}: {code}: {body}"
        );
        v["data"].clone()
    }

    /// Instant query: the result vector, or the error text.
    fn query(&self, q: &str) -> Result<Vec<Json>, String> {
        let path = format!("/api/v1/query?query={}", urlencode(q));
        let (code, body) = http_get(&self.addr, &path)?;
        let v: Json = serde_json::from_str(&body).map_err(|e| format!("{code}: {e}: {body}"))?;
        if v["status"] != "success" {
            return Err(format!("{code}: {body}"));
        }
        match &v["data"]["result"] {
            Json::Array(a) => Ok(a.clone()),
            // scalar results: [time, "value"]
            other => Ok(vec![other.clone()]),
        }
    }

    /// The single value of `q` (sum of all series), once it is available.
    fn value(&self, q: &str) -> Option<f64> {
        let r = self.query(q).ok()?;
        if r.is_empty() {
            return None;
        }
        Some(
            r.iter()
                .filter_map(|s| s["value"][1].as_str().and_then(|v| v.parse::<f64>().ok()))
                .sum(),
        )
    }

    /// Wait until `q` satisfies `ok` (bounded).
    fn wait_value(&self, q: &str, ok: impl Fn(f64) -> bool, timeout: Duration) -> f64 {
        let deadline = Instant::now() + timeout;
        loop {
            let v = self.value(q);
            if let Some(v) = v.filter(|v| ok(*v)) {
                return v;
            }
            assert!(Instant::now() < deadline, "{q}: {v:?} after {timeout:?}");
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Alerting rules by name: (state, health, lastError).
    fn rules(&self) -> BTreeMap<String, (String, String, String)> {
        let data = self.api("/api/v1/rules?type=alert");
        let mut out = BTreeMap::new();
        for g in data["groups"].as_array().into_iter().flatten() {
            for r in g["rules"].as_array().into_iter().flatten() {
                out.insert(
                    r["name"].as_str().unwrap_or("?").to_string(),
                    (
                        r["state"].as_str().unwrap_or("?").to_string(),
                        r["health"].as_str().unwrap_or("?").to_string(),
                        r["lastError"].as_str().unwrap_or("").to_string(),
                    ),
                );
            }
        }
        out
    }

    /// Wait until alert `name` is in one of `states` with health ok (bounded).
    fn wait_alert(&self, name: &str, states: &[&str], timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let rules = self.rules();
            if let Some((state, health, _)) = rules.get(name) {
                if health == "ok" && states.contains(&state.as_str()) {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "alert {name} not in {states:?} after {timeout:?}: {:?}",
                rules.get(name)
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

/// Substitute the dashboard's variables: `vars` for template variables, fixed values for the
/// Grafana built-ins.
fn substitute(expr: &str, vars: &[(&str, &str)]) -> String {
    let mut e = expr.to_string();
    for (b, v) in GRAFANA_BUILTINS {
        e = e.replace(b, v);
    }
    for (k, v) in vars {
        e = e
            .replace(&format!("${{{k}}}"), v)
            .replace(&format!("${k}"), v);
    }
    e
}

#[test]
fn a_real_prometheus_evaluates_every_dashboard_query_and_alert_rule() {
    require("/usr/bin/prometheus");
    let destination = harness::cluster("destination");
    let live_topic = harness::unique_topic("obs-live");
    let fo_topic = harness::unique_topic("obs-fo");
    let agent_topic = harness::unique_topic("obs-agent");
    let rec_topic = harness::unique_topic("obs-rec");
    harness::create_topic(&destination, &live_topic, 1, Some(&[1]));
    harness::create_topic(&destination, &fo_topic, 1, Some(&[1]));
    harness::create_topic(&destination, &agent_topic, 1, Some(&[1]));
    let source = harness::cluster("source");
    harness::create_topic(&source, &agent_topic, 1, None);
    harness::create_topic(&source, &rec_topic, 1, None);
    assert_eq!(
        harness::produce_keyed(&source, &agent_topic, 20, &[]).len(),
        20
    );
    // Three mirrors: `obs-live` keeps mirroring, `obs-fo` fails over, and `obs-agent` is
    // mirrored by the built-in agent from the source cluster (the lag and agent series).
    let mut cfg = mirror_config("obs-live", &[&live_topic]);
    let mut second = cfg.mirrors[0].clone();
    second.name = "obs-fo".into();
    second.topics = vec![fo_topic.clone()];
    cfg.mirrors.push(second);
    cfg.mirrors.push(mirrorgate::config::MirrorConfig {
        name: "obs-agent".into(),
        topics: vec![agent_topic.clone()],
        source: Some(mirrorgate::config::ClusterConfig {
            bootstrap: vec![source.clone()],
            connect_timeout_ms: 5000,
            metadata_refresh_ms: 30_000,
            tls: None,
            sasl: None,
        }),
        transactions: Default::default(),
        configs: Default::default(),
        acls: Default::default(),
        groups: Default::default(),
        recovery: Default::default(),
        forward: None,
        mirroring: Default::default(),
    });
    // A fourth, `obs-rec`, mirrored by the agent and failed over, whose un-mirrored tail is
    // listed and recovered (the recovery's series).
    let mut rec = cfg.mirrors[2].clone();
    rec.name = "obs-rec".into();
    rec.topics = vec![rec_topic.clone()];
    cfg.mirrors.push(rec);
    // The guard alone below: without the refusal of colliding local writes before the broker.
    cfg.failover.refuse_mirrored_producer_ids = false;
    // The data barrier (the fallback form), so that consumers' fetches have one to hide.
    cfg.failover.barrier = mirrorgate::config::BarrierMode::Data;
    // One instance of its own state topic: the dashboard's row for several instances has its
    // series (lease, read age, the failover it drives, the agent it runs).
    cfg.instances = Some(mirrorgate::config::InstancesConfig {
        id: "obs".into(),
        state_topic: harness::unique_topic("obs-state"),
        session_timeout_ms: 10_000,
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(mirrorgate::app::peers::init_state_topic(&cfg))
        .expect("state topic created");
    let gw = TestGateway::start(cfg);
    let admin = gw.admin();
    wait_mirroring(&admin, "obs-live", 1);
    wait_mirroring(&admin, "obs-fo", 1);
    wait_mirroring(&admin, "obs-agent", 1);
    wait_mirroring(&admin, "obs-rec", 1);

    // Prometheus scrapes the gateway before anything happens, so counters are seen at 0 first.
    let prom = Prometheus::start(&admin);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let t = prom.api("/api/v1/targets?state=active");
        let up = t["activeTargets"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|t| t["labels"]["job"] == "mirrorgate" && t["health"] == "up");
        if up
            && prom
                .value("count_over_time(mirrorgate_ready[1m])")
                .unwrap_or(0.0)
                >= 3.0
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "target never up: {t}\n{}",
            prom.log()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    // The alert rules loaded and evaluate cleanly before the scenario.
    let file_rules: BTreeSet<String> = yseq(&yaml("config/alerts.yml")["groups"], "groups")
        .iter()
        .flat_map(|g| {
            yseq(&g["rules"], "rules")
                .iter()
                .filter_map(|r| r["alert"].as_str().map(str::to_string))
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(
        prom.rules().keys().cloned().collect::<BTreeSet<_>>(),
        file_rules,
        "Prometheus loaded every rule of config/alerts.yml"
    );

    // ---- the scenario.
    // Mirrored data through the mirror listener: idempotent producers on both mirrors, and the
    // producer the duplicate-ack guard will catch on obs-fo.
    assert_eq!(
        harness::produce_keyed(&gw.mirror_bootstrap(), &live_topic, 20, &[]).len(),
        20
    );
    assert_eq!(
        harness::produce_keyed(&gw.mirror_bootstrap(), &fo_topic, 10, &[]).len(),
        10
    );
    let x = 9_500_000 + (std::process::id() as i64 % 1000) * 10;
    let mut mirror_conn = RawConn::connect(&gw.mirror_bootstrap());
    for seq in 0..3 {
        let (code, _) = mirror_conn.produce(&fo_topic, 0, batch(x, 0, seq, 1, &format!("m{seq}")));
        assert_eq!(code, 0);
    }
    // An upstream cluster's barrier arriving in mirrored produce (inert, counted as mirrored).
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64;
    let upstream = BarrierValue {
        version: BARRIER_VALUE_VERSION,
        mirror: "upstream".into(),
        failover_id: "upstream-failover".into(),
        source_cluster_id: None,
        time_ms: now,
        producers_expired: 0,
        last_mirrored_offset: -1,
    };
    let (code, _) = mirror_conn.produce(&live_topic, 0, encode_barrier_batch(&upstream, now));
    assert_eq!(code, 0, "mirrored barrier accepted");
    // A local write refused before failover (read_only).
    let err = produce_one_expect_error(&gw.bootstrap(), &fo_topic);
    assert!(err.contains("PolicyViolation"), "{err}");
    // A bad frame on the client listener (request_errors_total{kind="frame_too_large"}).
    {
        let mut s = std::net::TcpStream::connect(gw.bootstrap()).expect("connect");
        s.write_all(&0x7fff_ffffu32.to_be_bytes()).expect("write");
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
        let _ = std::io::Read::read(&mut s, &mut [0u8; 16]);
    }
    // Failover, then the duplicate-ack guard (screening bypassed on purpose), then local
    // writes and a consumer that reads past the barrier (hidden).
    failover(&admin, "obs-fo");
    wait_stopped(&admin, "obs-fo");
    // obs-rec: failed over with nothing left behind; its (empty) tail listed and recovered.
    let rec_fid = failover(&admin, "obs-rec");
    wait_stopped(&admin, "obs-rec");
    let unmirrored = format!("/v1/mirrors/obs-rec/failovers/{rec_fid}/unmirrored");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = admin_call(&admin, Method::GET, &unmirrored, None);
        if status == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the tail not listed: {status} {body}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    let (status, body) = admin_call(&admin, Method::POST, &format!("{unmirrored}/recover"), None);
    assert_eq!(status, 200, "{body}");
    let mut local = RawConn::connect(&gw.bootstrap());
    let (code, _) = local.produce(&fo_topic, 0, batch(x, 0, 0, 1, "local"));
    assert_eq!(
        code, 45,
        "duplicate-ack guard turns the false ack into an error"
    );
    assert_eq!(
        harness::produce_keyed(
            &gw.bootstrap(),
            &fo_topic,
            5,
            &[("enable.idempotence", "false")]
        )
        .len(),
        5
    );
    let consumed = harness::consume_group(
        &gw.bootstrap(),
        &fo_topic,
        &format!("{fo_topic}-obs"),
        18,
        Duration::from_secs(30),
        &[],
    );
    assert_eq!(consumed.values().map(Vec::len).sum::<usize>(), 18);

    // ---- what Prometheus recorded matches the scenario.
    let t = Duration::from_secs(30);
    let eq = |want: f64| move |v: f64| (v - want).abs() < 1e-9;
    let ge = |want: f64| move |v: f64| v >= want;
    prom.wait_value("mirrorgate_ready", eq(1.0), t);
    prom.wait_value("mirrorgate_duplicate_ack_guard_total", eq(1.0), t);
    prom.wait_value(
        r#"mirrorgate_produce_rejected_total{reason="read_only"}"#,
        ge(1.0),
        t,
    );
    prom.wait_value(
        r#"mirrorgate_mirror_partitions{mirror="obs-fo",state="STOPPED"}"#,
        eq(1.0),
        t,
    );
    prom.wait_value(
        r#"mirrorgate_mirror_partitions{mirror="obs-live",state="MIRRORING"}"#,
        eq(1.0),
        t,
    );
    prom.wait_value(
        r#"mirrorgate_barriers_written_total{mirror="obs-fo"}"#,
        eq(1.0),
        t,
    );
    prom.wait_value(
        r#"mirrorgate_barriers_seen_total{mirror="obs-live",kind="mirrored"}"#,
        ge(1.0),
        t,
    );
    prom.wait_value(
        r#"sum(mirrorgate_barriers_seen_total{kind="hidden"})"#,
        ge(1.0),
        t,
    );
    // obs-fo's and obs-rec's.
    prom.wait_value("mirrorgate_failover_duration_seconds_count", eq(2.0), t);
    prom.wait_value(
        &format!(r#"mirrorgate_unmirrored_records{{mirror="obs-rec",topic="{rec_topic}"}}"#),
        eq(0.0),
        t,
    );
    prom.wait_value(
        &format!(r#"sum(mirrorgate_psm_producers{{topic="{live_topic}"}})"#),
        ge(1.0),
        t,
    );
    prom.wait_value(
        r#"sum(mirrorgate_request_errors_total{kind="frame_too_large"})"#,
        ge(1.0),
        t,
    );
    // The agent caught up with its source: lag 0, and it appended the 20 records' batches.
    let lag_series = format!(
        r#"mirrorgate_mirror_lag_records{{mirror="obs-agent",topic="{agent_topic}",partition="0"}}"#
    );
    prom.wait_value(&lag_series, eq(0.0), Duration::from_secs(60));
    prom.wait_value(
        r#"mirrorgate_mirror_lag_seconds{mirror="obs-agent"}"#,
        eq(0.0),
        t,
    );
    prom.wait_value(
        r#"mirrorgate_agent_batches_total{mirror="obs-agent"}"#,
        ge(1.0),
        t,
    );
    prom.wait_value(
        r#"mirrorgate_agent_bytes_total{mirror="obs-agent"}"#,
        ge(1.0),
        t,
    );
    // Rates need two samples after the last event.
    std::thread::sleep(Duration::from_secs(3));

    // ---- template variables resolve to the test's mirrors and topics.
    let d = dashboard();
    for (name, sel, label) in template_variables(&d) {
        let values = prom.api(&format!(
            "/api/v1/label/{label}/values?match[]={}",
            urlencode(&sel)
        ));
        let values: BTreeSet<&str> = values
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Json::as_str)
            .collect();
        let want: &[&str] = match name.as_str() {
            "mirror" => &["obs-live", "obs-fo", "obs-agent", "obs-rec"],
            "topic" => &[live_topic.as_str()],
            _ => &[],
        };
        for w in want {
            assert!(values.contains(w), "variable {name}: {w} not in {values:?}");
        }
    }

    // ---- every dashboard query returns data: with "All" selected (Grafana's allValue) and
    // with the test's mirrors and topics selected (Grafana's regex of the selected values).
    let all_value = |n: &str| -> String {
        d["templating"]["list"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|v| v["name"] == n)
            .and_then(|v| v["allValue"].as_str())
            .unwrap_or(".*")
            .to_string()
    };
    let (all_mirror, all_topic) = (all_value("mirror"), all_value("topic"));
    let topics_sel = format!("{live_topic}|{fo_topic}|{agent_topic}");
    let selections: [Vec<(&str, &str)>; 2] = [
        vec![("mirror", &all_mirror), ("topic", &all_topic)],
        vec![
            ("mirror", "obs-live|obs-fo|obs-agent|obs-rec"),
            ("topic", &topics_sel),
        ],
    ];
    let queries = dashboard_queries(&d);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut pending: Vec<(String, String)> = Vec::new();
    for (title, r, expr) in &queries {
        for sel in &selections {
            pending.push((format!("{title} / {r}"), substitute(expr, sel)));
        }
    }
    let mut errors = Vec::new();
    loop {
        let mut still = Vec::new();
        for (what, q) in pending {
            match prom.query(&q) {
                Ok(r) if !r.is_empty() => {}
                Ok(_) => still.push((what, q)),
                Err(e) => errors.push(format!("{what}: {q}: {e}")),
            }
        }
        pending = still;
        if pending.is_empty() || Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(
        errors.is_empty(),
        "dashboard queries that fail:\n{}",
        errors.join("\n")
    );
    assert!(
        pending.is_empty(),
        "dashboard queries without data:\n{}",
        pending
            .iter()
            .map(|(w, q)| format!("{w}: {q}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    for m in AGENT_METRICS {
        assert!(
            prom.value(&format!(r#"count({m}{{mirror="obs-agent"}})"#))
                .is_some(),
            "{m}: no series of the agent's mirror"
        );
    }

    // ---- alert rules: each evaluates cleanly over series that exist, in the expected state.
    let expected: BTreeMap<&str, &[&str]> = [
        ("MirrorgateDuplicateAckGuardFired", &["firing"][..]),
        ("MirrorgateNotReady", &["inactive"][..]),
        ("MirrorgatePartitionStuck", &["inactive"][..]),
        ("MirrorgateMirrorLagHigh", &["inactive"][..]),
        ("MirrorgateMissingPermissions", &["inactive"][..]),
    ]
    .into_iter()
    .collect();
    for name in &file_rules {
        assert!(
            expected.contains_key(name.as_str()),
            "alert {name}: add its expected state to this test"
        );
    }
    let rules = yaml("config/alerts.yml");
    for g in yseq(&rules["groups"], "groups") {
        for r in yseq(&g["rules"], "rules") {
            let name = ystr(&r["alert"], "alert");
            let expr = ystr(&r["expr"], "expr");
            prom.query(expr)
                .unwrap_or_else(|e| panic!("alert {name}: {expr}: {e}"));
            for m in metric_names(expr) {
                assert!(
                    prom.value(&format!(
                        "count({{__name__=~\"{m}(_bucket|_sum|_count)?\"}})"
                    ))
                    .is_some(),
                    "alert {name}: no series of {m}, so the rule could never fire"
                );
            }
        }
    }
    for (name, states) in &expected {
        prom.wait_alert(name, states, Duration::from_secs(30));
    }
    let firing = prom.api("/api/v1/alerts");
    assert!(
        firing["alerts"].as_array().into_iter().flatten().any(|a| {
            a["labels"]["alertname"] == "MirrorgateDuplicateAckGuardFired"
                && a["labels"]["severity"] == "critical"
        }),
        "{firing}"
    );

    // ---- the gateway goes away: MirrorgateNotReady turns pending (then firing after `for`).
    drop(gw);
    prom.wait_alert(
        "MirrorgateNotReady",
        &["pending", "firing"],
        Duration::from_secs(30),
    );
    drop(prom);
}
