//! Observability and deployment (issue 7): the Grafana dashboard, the Grafana provisioning, the
//! Prometheus configuration and alert rules, the Dockerfile and docker-compose.yml, checked
//! without a Docker engine:
//!
//! - the dashboard is valid Grafana JSON bound to the provisioned datasource;
//! - the compose stack agrees with `config/`, the Dockerfile and the provisioning;
//! - the Dockerfile's build-stage `cargo build` line builds here;
//! - `promtool` accepts the Prometheus configurations (laid out as compose mounts them) and rules;
//! - a real Prometheus (Debian package, installed by `integration/install-prometheus`) scrapes a
//!   test gateway that mirrored data (through its mirror listener, and with its built-in agent
//!   from the source cluster), refused a local write, failed over and tripped the duplicate-ack
//!   guard, then evaluates every dashboard query and every alert rule over real series: the lag
//!   and agent-throughput panels and `MirrorgateMirrorLagHigh` too (the agent exports them).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hyper::Method;
use mirrorgate::protocol::barrier::{encode_barrier_batch, BarrierValue, BARRIER_VALUE_VERSION};
use serde_json::Value as Json;
use serde_yaml::Value as Yaml;

use crate::failover::{
    failover, mirror_config, produce_one_expect_error, wait_mirroring, wait_stopped,
};
use crate::gw::{free_port_range, TestGateway};
use crate::harness::{self, repo, run_with_timeout, tail_text};
use crate::psm_differential::{batch, RawConn};

/// Metrics only the built-in mirror agent exports (absent unless a mirror has a `source`): lag
/// and the agent's own throughput. The Prometheus test runs an agent so that they exist.
const AGENT_METRICS: [&str; 4] = [
    "mirrorgate_mirror_lag_records",
    "mirrorgate_mirror_lag_seconds",
    "mirrorgate_agent_batches_total",
    "mirrorgate_agent_bytes_total",
];

/// Grafana variables that are not template variables of the dashboard, with the value the
/// Prometheus test substitutes.
const GRAFANA_BUILTINS: [(&str, &str); 3] = [
    ("$__rate_interval", "1m"),
    ("$__interval", "15s"),
    ("$__range", "5m"),
];

// ------------------------------------------------------------------------------ files

fn read(rel: &str) -> String {
    let path = repo().join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn yaml(rel: &str) -> Yaml {
    let text = read(rel);
    let mut v: Yaml = serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{rel}: {e}"));
    v.apply_merge()
        .unwrap_or_else(|e| panic!("{rel}: merge keys: {e}"));
    v
}

fn dashboard() -> Json {
    serde_json::from_str(&read("dashboards/mirrorgate.json"))
        .unwrap_or_else(|e| panic!("dashboards/mirrorgate.json is not JSON: {e}"))
}

fn ystr<'a>(v: &'a Yaml, what: &str) -> &'a str {
    v.as_str()
        .unwrap_or_else(|| panic!("{what}: not a string: {v:?}"))
}

fn yseq<'a>(v: &'a Yaml, what: &str) -> &'a Vec<Yaml> {
    v.as_sequence()
        .unwrap_or_else(|| panic!("{what}: not a list: {v:?}"))
}

/// A scalar (string or number) as text.
fn yscalar(v: &Yaml, what: &str) -> String {
    match v {
        Yaml::String(s) => s.clone(),
        Yaml::Number(n) => n.to_string(),
        Yaml::Bool(b) => b.to_string(),
        _ => panic!("{what}: not a scalar: {v:?}"),
    }
}

/// Every panel, including panels nested in collapsed rows.
fn all_panels(d: &Json) -> Vec<&Json> {
    let mut out = Vec::new();
    for p in d["panels"].as_array().expect("dashboard panels list") {
        out.push(p);
        if let Some(nested) = p["panels"].as_array() {
            out.extend(nested.iter());
        }
    }
    out
}

/// (panel title, refId, expr) of every query target.
fn dashboard_queries(d: &Json) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for p in all_panels(d) {
        if p["type"] == "row" {
            continue;
        }
        let title = p["title"].as_str().unwrap_or("?").to_string();
        for t in p["targets"].as_array().into_iter().flatten() {
            out.push((
                title.clone(),
                t["refId"].as_str().unwrap_or("?").to_string(),
                t["expr"].as_str().unwrap_or("").to_string(),
            ));
        }
    }
    out
}

/// (name, selector, label) of each `label_values(selector, label)` template variable.
fn template_variables(d: &Json) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for v in d["templating"]["list"].as_array().expect("templating.list") {
        let name = v["name"].as_str().expect("variable name").to_string();
        let q = v["query"]["query"]
            .as_str()
            .or_else(|| v["query"].as_str())
            .unwrap_or_else(|| panic!("variable {name}: no query"));
        let inner = q
            .strip_prefix("label_values(")
            .and_then(|r| r.strip_suffix(')'))
            .unwrap_or_else(|| {
                panic!("variable {name}: {q:?} is not label_values(selector, label)")
            });
        let (sel, label) = inner
            .rsplit_once(',')
            .unwrap_or_else(|| panic!("variable {name}: {q:?} has no label"));
        out.push((name, sel.trim().to_string(), label.trim().to_string()));
    }
    out
}

/// Every `mirrorgate_*` metric family defined in `src/` (string literals).
fn defined_metrics() -> BTreeSet<String> {
    let re = regex::Regex::new(r#""(mirrorgate_[a-z0-9_]+)""#).expect("regex");
    let mut out = BTreeSet::new();
    let mut stack = vec![repo().join("src")];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).expect("read src").flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let text = std::fs::read_to_string(&p).unwrap_or_default();
                for c in re.captures_iter(&text) {
                    out.insert(c[1].to_string());
                }
            }
        }
    }
    out
}

/// `mirrorgate_*` names used in a PromQL expression, with histogram suffixes removed.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let re = regex::Regex::new(r"mirrorgate_[a-z0-9_]+").expect("regex");
    re.find_iter(expr)
        .map(|m| {
            let n = m.as_str();
            ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| n.strip_suffix(s))
                .filter(|base| base.ends_with("_seconds"))
                .unwrap_or(n)
                .to_string()
        })
        .collect()
}

/// The provisioned Prometheus datasource: (name, uid, url).
fn provisioned_datasource() -> (String, String, String) {
    let ds = yaml("config/grafana/provisioning/datasources/prometheus.yml");
    let list = yseq(&ds["datasources"], "datasources");
    let proms: Vec<&Yaml> = list.iter().filter(|d| d["type"] == "prometheus").collect();
    assert_eq!(
        proms.len(),
        1,
        "exactly one prometheus datasource: {list:?}"
    );
    let d = proms[0];
    (
        ystr(&d["name"], "datasource name").to_string(),
        ystr(&d["uid"], "datasource uid").to_string(),
        ystr(&d["url"], "datasource url").to_string(),
    )
}

// ------------------------------------------------------------------------------ dashboard

#[test]
fn dashboard_is_valid_grafana_json_bound_to_the_provisioned_datasource() {
    let d = dashboard();
    let (ds_name, ds_uid, _) = provisioned_datasource();
    assert!(
        d["schemaVersion"].as_i64().is_some_and(|v| v >= 39),
        "schemaVersion >= 39: {}",
        d["schemaVersion"]
    );
    assert!(d["uid"]
        .as_str()
        .is_some_and(|u| !u.is_empty() && u.len() <= 40));
    assert!(d["title"].as_str().is_some_and(|t| !t.is_empty()));

    let check_ds = |what: &str, ds: &Json| {
        assert_eq!(ds["type"], "prometheus", "{what}: datasource type: {ds}");
        assert_eq!(
            ds["uid"].as_str(),
            Some(ds_uid.as_str()),
            "{what}: datasource uid must be the provisioned {ds_uid:?} ({ds_name}): {ds}"
        );
    };

    let mut ids = BTreeSet::new();
    let mut n_queries = 0;
    for p in all_panels(&d) {
        let id = p["id"]
            .as_i64()
            .unwrap_or_else(|| panic!("panel without id: {p}"));
        let title = p["title"].as_str().unwrap_or("?");
        assert!(ids.insert(id), "panel id {id} ({title}) is not unique");
        let g = &p["gridPos"];
        let (x, w, h) = (g["x"].as_i64(), g["w"].as_i64(), g["h"].as_i64());
        assert!(
            matches!((x, w, h), (Some(x), Some(w), Some(h)) if x >= 0 && w > 0 && h > 0 && x + w <= 24)
                && g["y"].as_i64().is_some(),
            "panel {title}: gridPos {g}"
        );
        if p["type"] == "row" {
            continue;
        }
        assert!(p["type"].as_str().is_some_and(|t| !t.is_empty()));
        check_ds(&format!("panel {title}"), &p["datasource"]);
        let targets = p["targets"]
            .as_array()
            .unwrap_or_else(|| panic!("panel {title}: no targets"));
        assert!(!targets.is_empty(), "panel {title}: no targets");
        let mut refs = BTreeSet::new();
        for t in targets {
            let r = t["refId"].as_str().unwrap_or("");
            assert!(
                !r.is_empty() && refs.insert(r),
                "panel {title}: refId {r:?}"
            );
            if !t["datasource"].is_null() {
                check_ds(&format!("panel {title} target {r}"), &t["datasource"]);
            }
            let expr = t["expr"].as_str().unwrap_or("");
            assert!(!expr.trim().is_empty(), "panel {title} target {r}: no expr");
            n_queries += 1;
        }
    }
    assert!(n_queries >= 20, "only {n_queries} queries");

    // Template variables: mirror and topic, label_values queries on the provisioned datasource.
    let vars = template_variables(&d);
    let names: BTreeSet<&str> = vars.iter().map(|v| v.0.as_str()).collect();
    for want in ["mirror", "topic"] {
        assert!(names.contains(want), "template variable {want} missing");
    }
    for v in d["templating"]["list"].as_array().expect("list") {
        check_ds(&format!("variable {}", v["name"]), &v["datasource"]);
        assert_eq!(v["type"], "query");
    }

    // Every $variable used is a template variable or a Grafana built-in.
    let var_re = regex::Regex::new(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)").expect("regex");
    let builtins: BTreeSet<&str> = GRAFANA_BUILTINS
        .iter()
        .map(|(b, _)| b.trim_start_matches('$'))
        .collect();
    let defined = defined_metrics();
    let mut used = BTreeSet::new();
    for (title, r, expr) in dashboard_queries(&d) {
        for c in var_re.captures_iter(&expr) {
            let v = &c[1];
            assert!(
                names.contains(v) || builtins.contains(v),
                "panel {title} {r}: unknown variable ${v} in {expr}"
            );
        }
        for m in metric_names(&expr) {
            assert!(
                defined.contains(&m),
                "panel {title} {r}: {m} is not a metric defined in src/ ({expr})"
            );
            used.insert(m);
        }
    }
    for (name, sel, _) in &vars {
        for m in metric_names(sel) {
            assert!(defined.contains(&m), "variable {name}: unknown metric {m}");
        }
    }
    // The panels the issue asks for.
    for m in [
        "mirrorgate_mirror_partitions",
        "mirrorgate_psm_producers",
        "mirrorgate_barriers_written_total",
        "mirrorgate_barriers_seen_total",
        "mirrorgate_pid_screened_total",
        "mirrorgate_duplicate_ack_guard_total",
        "mirrorgate_produce_rejected_total",
        "mirrorgate_mirror_lag_records",
        "mirrorgate_mirror_lag_seconds",
        "mirrorgate_requests_total",
        "mirrorgate_request_duration_seconds",
        "mirrorgate_connections",
        "mirrorgate_failover_duration_seconds",
        "mirrorgate_ready",
    ] {
        assert!(used.contains(m), "no panel queries {m}");
    }
    let text = read("dashboards/mirrorgate.json");
    assert!(
        text.contains("histogram_quantile(")
            && text.contains("mirrorgate_request_duration_seconds_bucket"),
        "request latency per API uses histogram_quantile"
    );
}

// ------------------------------------------------------------------------------ compose

/// Parse a compose port entry `IP:HOST[-HOST2]:CONTAINER[-CONTAINER2]` into (ip, host ports,
/// container ports).
fn parse_ports(entry: &str) -> (String, Vec<u16>, Vec<u16>) {
    let entry = entry.split('/').next().unwrap_or(entry);
    let parts: Vec<&str> = entry.split(':').collect();
    assert_eq!(parts.len(), 3, "port {entry:?} should be IP:HOST:CONTAINER");
    let range = |s: &str| -> Vec<u16> {
        match s.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u16, u16) = (a.parse().expect("port"), b.parse().expect("port"));
                assert!(a <= b, "range {s}");
                (a..=b).collect()
            }
            None => vec![s.parse().expect("port")],
        }
    };
    (parts[0].to_string(), range(parts[1]), range(parts[2]))
}

/// Bind mounts (`./src:target[:ro]`) of a service: target → source relative to the repo.
fn bind_mounts(service: &Yaml, name: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for v in service["volumes"].as_sequence().into_iter().flatten() {
        let s = ystr(v, &format!("{name}.volumes"));
        let parts: Vec<&str> = s.split(':').collect();
        assert!(parts.len() >= 2, "{name}: volume {s:?}");
        if let Some(rel) = parts[0].strip_prefix("./") {
            out.insert(parts[1].to_string(), rel.trim_end_matches('/').to_string());
        }
    }
    out
}

/// Named volumes of a service: target → volume name.
fn named_volumes(service: &Yaml, name: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for v in service["volumes"].as_sequence().into_iter().flatten() {
        let s = ystr(v, &format!("{name}.volumes"));
        let parts: Vec<&str> = s.split(':').collect();
        if !parts[0].starts_with('.') && !parts[0].starts_with('/') {
            out.insert(parts[1].to_string(), parts[0].to_string());
        }
    }
    out
}

fn env_of(service: &Yaml, key: &str) -> Option<String> {
    let e = &service["environment"];
    if let Some(list) = e.as_sequence() {
        return list.iter().find_map(|kv| {
            kv.as_str()
                .and_then(|s| s.split_once('='))
                .filter(|(k, _)| *k == key)
                .map(|(_, v)| v.to_string())
        });
    }
    match &e[key] {
        Yaml::Null => None,
        v => Some(yscalar(v, key)),
    }
}

/// Instructions of a Dockerfile stage by stage: (stage name, [(INSTRUCTION, arguments)]), with
/// line continuations joined and comments dropped.
fn dockerfile() -> Vec<(String, Vec<(String, String)>)> {
    let text = read("Dockerfile");
    let mut lines = Vec::new();
    let mut cur = String::new();
    for raw in text.lines() {
        let t = raw.trim();
        if cur.is_empty() && (t.starts_with('#') || t.is_empty()) {
            continue;
        }
        if t.starts_with('#') {
            continue;
        }
        if let Some(body) = t.strip_suffix('\\') {
            cur.push_str(body);
            cur.push(' ');
        } else {
            cur.push_str(t);
            lines.push(std::mem::take(&mut cur));
        }
    }
    let mut stages: Vec<(String, Vec<(String, String)>)> = Vec::new();
    for l in lines {
        let (ins, args) = l.split_once(char::is_whitespace).unwrap_or((&l, ""));
        let ins = ins.to_ascii_uppercase();
        let args = args.trim().to_string();
        if ins == "FROM" {
            let words: Vec<&str> = args.split_whitespace().collect();
            let name = match words.as_slice() {
                [_, a, n] if a.eq_ignore_ascii_case("as") => n.to_string(),
                _ => format!("stage{}", stages.len()),
            };
            stages.push((name, vec![(ins, args)]));
        } else {
            stages
                .last_mut()
                .expect("Dockerfile starts with FROM")
                .1
                .push((ins, args));
        }
    }
    stages
}

/// The `cargo ...` commands of the build stage's RUN instructions, as argument lists.
fn dockerfile_cargo_commands() -> Vec<Vec<String>> {
    let stages = dockerfile();
    assert!(stages.len() >= 2, "multi-stage Dockerfile: {stages:?}");
    let (name, build) = &stages[0];
    let mut out = Vec::new();
    for (ins, args) in build {
        if ins != "RUN" {
            continue;
        }
        for cmd in args.split("&&") {
            let words: Vec<String> = cmd.split_whitespace().map(str::to_string).collect();
            if words.first().map(String::as_str) == Some("cargo") {
                assert!(
                    !cmd.contains(['$', '"', '\'', '`', ';', '|']),
                    "stage {name}: keep the cargo line plain (no shell syntax): {cmd}"
                );
                out.push(words);
            }
        }
    }
    out
}

/// Whether `path` (relative to the repo) is excluded by `.dockerignore`.
fn dockerignored(path: &str) -> bool {
    read(".dockerignore").lines().any(|l| {
        let l = l.trim();
        if l.is_empty() || l.starts_with('#') || l.starts_with('!') {
            return false;
        }
        let pat = l.trim_start_matches('/').trim_end_matches('/');
        if pat.starts_with('*') {
            return path.ends_with(pat.trim_start_matches('*'));
        }
        path == pat || path.starts_with(&format!("{pat}/"))
    })
}

/// The HEALTHCHECK command of the Dockerfile as arguments.
fn dockerfile_healthcheck() -> Vec<String> {
    let stages = dockerfile();
    let last = &stages.last().expect("stages").1;
    let hc = last
        .iter()
        .find(|(i, _)| i == "HEALTHCHECK")
        .map(|(_, a)| a.clone())
        .expect("the runtime stage has a HEALTHCHECK");
    let cmd = hc
        .split_once("CMD")
        .map(|(_, c)| c.trim().to_string())
        .expect("HEALTHCHECK ... CMD");
    serde_json::from_str::<Vec<String>>(&cmd)
        .unwrap_or_else(|_| cmd.split_whitespace().map(str::to_string).collect())
}

fn admin_port(cfg: &mirrorgate::config::Config) -> u16 {
    cfg.admin
        .bind
        .parse::<std::net::SocketAddr>()
        .expect("admin.bind")
        .port()
}

#[test]
fn compose_stack_agrees_with_config_dockerfile_and_provisioning() {
    let compose = yaml("docker-compose.yml");
    let services = &compose["services"];
    for s in [
        "source-1",
        "destination-1",
        "destination-2",
        "mirrorgate",
        "prometheus",
        "grafana",
    ] {
        assert!(services[s].is_mapping(), "service {s} missing");
    }
    let declared_volumes: BTreeSet<String> = compose["volumes"]
        .as_mapping()
        .map(|m| m.keys().map(|k| ystr(k, "volume").to_string()).collect())
        .unwrap_or_default();
    for (name, svc) in services.as_mapping().expect("services") {
        let name = ystr(name, "service name");
        for (target, src) in bind_mounts(svc, name) {
            assert!(
                repo().join(&src).exists(),
                "{name}: mounts ./{src} at {target}, which is not in the repository"
            );
        }
        for (target, vol) in named_volumes(svc, name) {
            assert!(
                declared_volumes.contains(&vol),
                "{name}: volume {vol} at {target} is not declared"
            );
        }
        // depends_on: a list of names, or a map of name → condition.
        let deps: Vec<&Yaml> = match &svc["depends_on"] {
            Yaml::Mapping(m) => m.keys().collect(),
            other => other.as_sequence().into_iter().flatten().collect(),
        };
        for dep in deps {
            let dep = ystr(dep, "depends_on");
            assert!(
                services[dep].is_mapping(),
                "{name} depends on unknown {dep}"
            );
        }
    }

    // ---- mirrorgate: built from the Dockerfile, configured by a mounted config.
    let mg = &services["mirrorgate"];
    let build = match &mg["build"] {
        Yaml::String(s) => s.clone(),
        b => ystr(&b["context"], "mirrorgate.build.context").to_string(),
    };
    assert_eq!(build, ".", "mirrorgate is built from the repository root");
    assert!(repo().join("Dockerfile").exists());
    let command: Vec<String> = yseq(&mg["command"], "mirrorgate.command")
        .iter()
        .map(|v| ystr(v, "command").to_string())
        .collect();
    assert_eq!(
        command.first().map(String::as_str),
        Some("run"),
        "{command:?}"
    );
    let cfg_target = command
        .iter()
        .position(|a| a == "--config" || a == "-c")
        .and_then(|i| command.get(i + 1))
        .expect("mirrorgate command has --config FILE")
        .clone();
    let mounts = bind_mounts(mg, "mirrorgate");
    let cfg_src = mounts
        .get(&cfg_target)
        .unwrap_or_else(|| panic!("{cfg_target} is not mounted from the repository: {mounts:?}"));
    let ccfg = mirrorgate::config::load_file(&repo().join(cfg_src))
        .unwrap_or_else(|e| panic!("{cfg_src}: {e}"));
    let local = mirrorgate::config::load_file(&repo().join("config/mirrorgate.yaml"))
        .expect("config/mirrorgate.yaml");

    // Same ports as the local default.
    let cl = &ccfg.listeners.client;
    let ll = &local.listeners.client;
    assert_eq!(
        (cl.port_base, cl.node_id_base),
        (ll.port_base, ll.node_id_base)
    );
    let cm = ccfg
        .listeners
        .mirror
        .as_ref()
        .expect("compose config: mirror listener");
    let lm = local
        .listeners
        .mirror
        .as_ref()
        .expect("local config: mirror listener");
    assert_eq!(
        (cm.port_base, cm.node_id_base),
        (lm.port_base, lm.node_id_base)
    );
    assert_eq!(admin_port(&ccfg), admin_port(&local), "admin port");
    let names = |c: &mirrorgate::config::Config| -> Vec<(String, Vec<String>)> {
        c.mirrors
            .iter()
            .map(|m| (m.name.clone(), m.topics.clone()))
            .collect()
    };
    assert_eq!(
        names(&ccfg),
        names(&local),
        "same mirrors as config/mirrorgate.yaml"
    );

    // Published ports: exactly the listener ranges and the admin port, on loopback, host ==
    // container; at least one port per destination broker of the compose file.
    let mut published = BTreeSet::new();
    for p in yseq(&mg["ports"], "mirrorgate.ports") {
        let (ip, host, cont) = parse_ports(ystr(p, "port"));
        assert_eq!(ip, "127.0.0.1", "publish on loopback only");
        assert_eq!(host, cont, "host and container ports match");
        published.extend(host);
    }
    let range = |l: &mirrorgate::config::ListenerConfig| -> Vec<u16> {
        (0..l.max_brokers).map(|i| l.port_base + i).collect()
    };
    let mut expected: BTreeSet<u16> = range(cl).into_iter().chain(range(cm)).collect();
    expected.insert(admin_port(&ccfg));
    assert_eq!(
        published, expected,
        "mirrorgate published ports vs {cfg_src}"
    );
    let dest_services: Vec<&str> = ["destination-1", "destination-2"].to_vec();
    assert!(usize::from(cl.max_brokers) >= dest_services.len());
    for l in [cl, cm] {
        assert_eq!(
            l.advertised(),
            "127.0.0.1",
            "clients on the host reach the published ports at 127.0.0.1"
        );
    }

    // The gateway reaches the brokers on their INTERNAL listeners by service name.
    let internal = |svc: &str| -> String {
        let adv = env_of(&services[svc], "KAFKA_ADVERTISED_LISTENERS").expect("advertised");
        adv.split(',')
            .find_map(|l| l.strip_prefix("INTERNAL://"))
            .unwrap_or_else(|| panic!("{svc}: no INTERNAL listener in {adv}"))
            .to_string()
    };
    let dest_internal: BTreeSet<String> = dest_services.iter().map(|s| internal(s)).collect();
    assert!(!ccfg.destination.bootstrap.is_empty());
    for a in &ccfg.destination.bootstrap {
        assert!(
            dest_internal.contains(a),
            "{cfg_src}: destination.bootstrap {a} is not a destination INTERNAL listener {dest_internal:?}"
        );
    }
    let src_internal = internal("source-1");
    for m in &ccfg.mirrors {
        if let Some(s) = &m.source {
            assert_eq!(
                s.bootstrap,
                vec![src_internal.clone()],
                "mirror {} source",
                m.name
            );
        }
    }
    // A non-loopback admin needs a token; compose provides it.
    if let Some(t) = &ccfg.admin.token {
        if let Some(var) = &t.env {
            assert!(
                env_of(mg, var).is_some(),
                "compose sets {var} for mirrorgate"
            );
        }
    }
    // State survives restarts.
    let state = ccfg.state_dir.to_string_lossy().to_string();
    assert!(
        named_volumes(mg, "mirrorgate").contains_key(&state),
        "state_dir {state} is a named volume"
    );

    // Health check: the Dockerfile's and compose's are the same `mirrorgate status` on the
    // admin port (it asks /readyz and exits 0 only when ready).
    let hc = dockerfile_healthcheck();
    let hc_ok = (hc.first().map(String::as_str) == Some("mirrorgate")
        && hc.get(1).map(String::as_str) == Some("status"))
        || hc.iter().any(|a| a.contains("/readyz"));
    assert!(
        hc_ok,
        "HEALTHCHECK runs `mirrorgate status` or hits /readyz: {hc:?}"
    );
    let admin_arg = hc
        .iter()
        .position(|a| a == "--admin")
        .and_then(|i| hc.get(i + 1))
        .cloned()
        .unwrap_or_else(|| "127.0.0.1:9180".into());
    assert_eq!(
        admin_arg,
        format!("127.0.0.1:{}", admin_port(&ccfg)),
        "health check asks the configured admin port"
    );
    let compose_hc: Vec<String> = yseq(&mg["healthcheck"]["test"], "healthcheck.test")
        .iter()
        .map(|v| ystr(v, "test").to_string())
        .collect();
    assert_eq!(compose_hc.first().map(String::as_str), Some("CMD"));
    assert_eq!(
        &compose_hc[1..],
        &hc[..],
        "compose and Dockerfile health checks agree"
    );

    // Dockerfile: multi-stage, builder new enough, non-root runtime, COPY sources present and
    // not excluded by .dockerignore, the built binary copied from where cargo puts it.
    let stages = dockerfile();
    assert!(stages.len() >= 2);
    let from = |s: &(String, Vec<(String, String)>)| -> String {
        s.1[0].1.split_whitespace().next().unwrap_or("").to_string()
    };
    let builder = from(&stages[0]);
    let rust_version = builder
        .strip_prefix("rust:")
        .and_then(|v| v.split('-').next())
        .unwrap_or_else(|| panic!("builder image {builder} is not rust:X.Y"));
    let cargo_toml = read("Cargo.toml");
    let msrv = cargo_toml
        .lines()
        .find_map(|l| l.trim().strip_prefix("rust-version"))
        .and_then(|r| r.split('"').nth(1))
        .expect("rust-version in Cargo.toml");
    let ver = |s: &str| -> Vec<u32> { s.split('.').map(|p| p.parse().unwrap_or(0)).collect() };
    assert!(
        ver(rust_version) >= ver(msrv),
        "builder {builder} older than rust-version {msrv}"
    );
    let runtime = stages.last().expect("runtime");
    let user = runtime
        .1
        .iter()
        .rev()
        .find(|(i, _)| i == "USER")
        .map(|(_, a)| a.clone())
        .expect("runtime stage sets USER");
    let uname = user.split(':').next().unwrap_or("");
    assert!(
        uname != "root" && uname != "0",
        "runtime runs as non-root, not {user}"
    );
    let build_workdir = stages[0]
        .1
        .iter()
        .rev()
        .find(|(i, _)| i == "WORKDIR")
        .map(|(_, a)| a.clone())
        .expect("build stage WORKDIR");
    for (stage, ins) in &stages {
        for (i, args) in ins {
            if i != "COPY" {
                continue;
            }
            let words: Vec<&str> = args.split_whitespace().collect();
            if let Some(from_stage) = words.iter().find_map(|w| w.strip_prefix("--from=")) {
                assert_eq!(from_stage, stages[0].0, "COPY --from the build stage");
                let src = words[words.len() - 2];
                assert_eq!(
                    src,
                    format!("{build_workdir}/target/release/mirrorgate"),
                    "the runtime copies the binary cargo built"
                );
                continue;
            }
            let srcs = &words[..words.len() - 1];
            for s in srcs.iter().filter(|s| !s.starts_with("--")) {
                let s = s.trim_start_matches("./").trim_end_matches('/');
                assert!(
                    repo().join(s).exists(),
                    "stage {stage}: COPY {s}: not in the repository"
                );
                assert!(
                    !dockerignored(s),
                    "stage {stage}: COPY {s} is excluded by .dockerignore"
                );
            }
        }
    }
    for big in ["target", ".git"] {
        assert!(dockerignored(big), ".dockerignore excludes {big}");
    }
    let expose: BTreeSet<u16> = runtime
        .1
        .iter()
        .filter(|(i, _)| i == "EXPOSE")
        .flat_map(|(_, a)| {
            a.split_whitespace()
                .flat_map(|p| {
                    let p = p.split('/').next().unwrap_or(p);
                    match p.split_once('-') {
                        Some((a, b)) => (a.parse::<u16>().expect("port")
                            ..=b.parse::<u16>().expect("port"))
                            .collect::<Vec<_>>(),
                        None => vec![p.parse().expect("port")],
                    }
                })
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(expose, expected, "EXPOSE matches the published ports");
    let cmds = dockerfile_cargo_commands();
    assert!(
        cmds.iter().any(|c| c.contains(&"build".to_string())
            && c.contains(&"--release".to_string())
            && c.contains(&"--locked".to_string())
            && c.windows(2)
                .any(|w| w[0] == "--bin" && w[1] == "mirrorgate")),
        "build stage runs cargo build --release --locked --bin mirrorgate: {cmds:?}"
    );

    // ---- prometheus: the compose config is config/prometheus.yml with the mirrorgate service
    // as target; rule files mounted next to it.
    let prom = &services["prometheus"];
    let pmounts = bind_mounts(prom, "prometheus");
    let pcmd: Vec<String> = yseq(&prom["command"], "prometheus.command")
        .iter()
        .map(|v| ystr(v, "command").to_string())
        .collect();
    let conf_target = pcmd
        .iter()
        .find_map(|a| a.strip_prefix("--config.file="))
        .expect("prometheus --config.file=")
        .to_string();
    let conf_src = pmounts
        .get(&conf_target)
        .unwrap_or_else(|| panic!("{conf_target} not mounted: {pmounts:?}"));
    let pc = yaml(conf_src);
    let conf_dir = Path::new(&conf_target).parent().expect("dir");
    for r in yseq(&pc["rule_files"], "rule_files") {
        let r = ystr(r, "rule file");
        let target = conf_dir.join(r).to_string_lossy().to_string();
        let src = pmounts
            .get(&target)
            .unwrap_or_else(|| panic!("rule file {target} not mounted: {pmounts:?}"));
        assert_eq!(src, "config/alerts.yml");
    }
    let job = yseq(&pc["scrape_configs"], "scrape_configs")
        .iter()
        .find(|j| j["job_name"] == "mirrorgate")
        .expect("job mirrorgate")
        .clone();
    let targets = yseq(&job["static_configs"][0]["targets"], "targets");
    assert_eq!(
        targets
            .iter()
            .map(|t| ystr(t, "target"))
            .collect::<Vec<_>>(),
        vec![format!("mirrorgate:{}", admin_port(&ccfg))],
        "compose Prometheus scrapes the mirrorgate service's admin port"
    );
    // Identical to config/prometheus.yml apart from the targets, which there are the local
    // default's admin address.
    let mut local_pc = yaml("config/prometheus.yml");
    let local_targets = local_pc["scrape_configs"][0]["static_configs"][0]["targets"].clone();
    assert_eq!(
        yseq(&local_targets, "targets")
            .iter()
            .map(|t| ystr(t, "target"))
            .collect::<Vec<_>>(),
        vec![local.admin.bind.clone()],
        "config/prometheus.yml scrapes config/mirrorgate.yaml's admin address"
    );
    local_pc["scrape_configs"][0]["static_configs"][0]["targets"] =
        pc["scrape_configs"][0]["static_configs"][0]["targets"].clone();
    assert_eq!(
        local_pc, pc,
        "{conf_src} differs from config/prometheus.yml beyond the targets"
    );
    assert!(
        yseq(&prom["ports"], "prometheus.ports")
            .iter()
            .any(|p| ystr(p, "port").ends_with(":9090:9090")),
        "prometheus on 9090"
    );

    // ---- grafana: provisioning and dashboards mounted; the datasource points at the
    // prometheus service; the dashboard provider reads the mounted dashboards directory.
    let graf = &services["grafana"];
    let gmounts = bind_mounts(graf, "grafana");
    assert_eq!(
        gmounts.get("/etc/grafana/provisioning").map(String::as_str),
        Some("config/grafana/provisioning"),
        "{gmounts:?}"
    );
    let prov = yaml("config/grafana/provisioning/dashboards/mirrorgate.yml");
    let providers = yseq(&prov["providers"], "providers");
    assert_eq!(providers.len(), 1);
    let dash_path = ystr(&providers[0]["options"]["path"], "provider path");
    assert_eq!(
        gmounts.get(dash_path).map(String::as_str),
        Some("dashboards"),
        "the provider path {dash_path} is the mounted dashboards/ directory"
    );
    assert!(repo().join("dashboards/mirrorgate.json").exists());
    if let Some(home) = env_of(graf, "GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH") {
        let rel = home
            .strip_prefix(&format!("{dash_path}/"))
            .unwrap_or_else(|| panic!("home dashboard {home} outside {dash_path}"));
        assert!(repo().join("dashboards").join(rel).exists(), "{home}");
    }
    assert_eq!(
        env_of(graf, "GF_AUTH_ANONYMOUS_ENABLED").as_deref(),
        Some("true")
    );
    assert_eq!(
        env_of(graf, "GF_AUTH_ANONYMOUS_ORG_ROLE").as_deref(),
        Some("Viewer")
    );
    assert!(
        yseq(&graf["ports"], "grafana.ports")
            .iter()
            .any(|p| ystr(p, "port").ends_with(":3000:3000")),
        "grafana on 3000"
    );
    let (_, uid, url) = provisioned_datasource();
    assert_eq!(
        url, "http://prometheus:9090",
        "datasource url is the compose service"
    );
    assert!(!uid.is_empty());
}

// ------------------------------------------------------------------------------ build

#[test]
fn dockerfile_build_stage_cargo_command_builds_outside_docker() {
    let cmds = dockerfile_cargo_commands();
    assert!(!cmds.is_empty(), "the build stage runs cargo");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    for words in &cmds {
        assert!(
            words.contains(&"--locked".to_string()),
            "{words:?} uses --locked"
        );
        let mut cmd = Command::new(&cargo);
        cmd.args(&words[1..]).current_dir(repo());
        let started = Instant::now();
        let out = run_with_timeout(cmd, Duration::from_secs(1200));
        assert!(
            out.status.success(),
            "`{}` failed ({:?}):\n{}",
            words.join(" "),
            out.status,
            tail_text(&out.stderr, 40)
        );
        eprintln!("`{}` took {:?}", words.join(" "), started.elapsed());
    }
    // The image's binary is that build's output; it accepts the image's default config.
    let target_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|p| if p.is_relative() { repo().join(p) } else { p })
        .unwrap_or_else(|| repo().join("target"));
    let bin = target_dir.join("release").join("mirrorgate");
    assert!(bin.exists(), "{} was not built", bin.display());
    let mut check = Command::new(&bin);
    check
        .args(["check-config", "config/mirrorgate.compose.yaml"])
        .current_dir(repo())
        .env("MIRRORGATE_ADMIN_TOKEN", "test-token");
    let out = run_with_timeout(check, Duration::from_secs(30));
    assert!(
        out.status.success(),
        "the release binary rejects the image's config: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

// ------------------------------------------------------------------------------ promtool

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
    harness::create_topic(&destination, &live_topic, 1, Some(&[1]));
    harness::create_topic(&destination, &fo_topic, 1, Some(&[1]));
    harness::create_topic(&destination, &agent_topic, 1, Some(&[1]));
    let source = harness::cluster("source");
    harness::create_topic(&source, &agent_topic, 1, None);
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
    });
    // The guard alone below: without the refusal of colliding local writes before the broker.
    cfg.failover.refuse_mirrored_producer_ids = false;
    // The data barrier (the fallback form), so that consumers' fetches have one to hide.
    cfg.failover.barrier = mirrorgate::config::BarrierMode::Data;
    let gw = TestGateway::start(cfg);
    let admin = gw.admin();
    wait_mirroring(&admin, "obs-live", 1);
    wait_mirroring(&admin, "obs-fo", 1);
    wait_mirroring(&admin, "obs-agent", 1);

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
    prom.wait_value("mirrorgate_failover_duration_seconds_count", eq(1.0), t);
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
            "mirror" => &["obs-live", "obs-fo", "obs-agent"],
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
            ("mirror", "obs-live|obs-fo|obs-agent"),
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
