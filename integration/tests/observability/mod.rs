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
//!
//! The files: `dashboard.rs` (the dashboard and its provisioning), `packaging.rs` (compose, the
//! Dockerfile), `prometheus.rs` (promtool, and a real Prometheus over a real gateway). This file
//! holds what they share: reading the files, and the metric names in queries.

mod dashboard;
mod packaging;
mod prometheus;

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
use crate::harness::{self, repo, run_with_timeout};
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
