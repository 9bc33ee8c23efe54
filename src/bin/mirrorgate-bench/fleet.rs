//! The gateways of one failover measurement: `instances` processes of one gateway binary (this
//! build's, or a `--baseline` build of an earlier commit) in front of the rig's destination,
//! sharing a state topic when more than one, each with one mirror `bench` of the topics
//! `PREFIX-N`, fed by an external tool through its mirror listener. Instance `i` listens from
//! port `17192 + 100 i` (client), `+ 10` (mirror) and `+ 20` (admin).
//!
//! Owns: the gateways' configuration, start, readiness and the admin calls the measurements
//! make. Must not touch: the clusters (the rig), the topics (`topics.rs`), what is timed
//! (`failover.rs`, `takeover.rs`).

use std::path::Path;
use std::time::{Duration, Instant};

use crate::process::{gateway_yaml, GatewayProcess, Mirrors, ProcessSpec};

/// The first instance's client listener port.
const BASE: u16 = 17192;

/// An admin API call of the gateway at `addr`: the status and the JSON body (null when not JSON).
pub(crate) async fn admin(
    addr: &str,
    method: hyper::Method,
    path: &str,
) -> Result<(u16, serde_json::Value), String> {
    let (s, b) = mirrorgate::admin::client::call(addr, method, path, None, None)
        .await
        .map_err(|e| e.to_string())?;
    Ok((
        s,
        serde_json::from_str(&b).unwrap_or(serde_json::Value::Null),
    ))
}

/// The client, mirror and admin ports of instance `i`.
pub fn ports(i: usize) -> (u16, u16, u16) {
    let base = BASE + 100 * i as u16;
    (base, base + 10, base + 20)
}

/// The gateway processes of one measurement; killed on drop.
pub struct Fleet {
    pub gateways: Vec<GatewayProcess>,
    /// `127.0.0.1:PORT` of each instance's admin API.
    pub admins: Vec<String>,
    instances: usize,
}

impl Fleet {
    /// Starts `instances` gateways of `bin` for the topics `PREFIX-N` (state topic
    /// `PREFIX-state` when more than one); the first one with the environment `first_env`.
    pub fn start(
        bin: &Path,
        destination: &[String],
        prefix: &str,
        instances: usize,
        first_env: &[(&str, &str)],
    ) -> Result<Fleet, String> {
        let mut fleet = Fleet {
            gateways: Vec::new(),
            admins: Vec::new(),
            instances: instances.max(1),
        };
        for i in 0..fleet.instances {
            let (client, mirror, admin) = ports(i);
            let name = format!("{prefix}-{i}");
            let spec = ProcessSpec {
                name: &name,
                admin,
                init_state: true,
                env: if i == 0 { first_env } else { &[] },
            };
            let mirrors = Mirrors {
                port_base: mirror,
                topics_regex: format!("{prefix}-[0-9]+"),
                instances: (instances > 1)
                    .then(|| (format!("bench-{i}"), format!("{prefix}-state"))),
                forward: None,
            };
            let gw = GatewayProcess::spawn(bin, &spec, |state| {
                gateway_yaml(destination, client, admin, state, Some(&mirrors))
            })?;
            fleet.gateways.push(gw);
            fleet.admins.push(format!("127.0.0.1:{admin}"));
        }
        Ok(fleet)
    }

    /// Waits (at most `limit`) until every gateway of `which` is ready, holds `total`
    /// partitions MIRRORING and, with several instances, sees every other one alive.
    pub async fn wait_ready(
        &mut self,
        which: std::ops::Range<usize>,
        total: i64,
        limit: Duration,
    ) -> Result<(), String> {
        let deadline = Instant::now() + limit;
        for i in which {
            let a = &self.admins[i];
            loop {
                // Refused while the process starts.
                let m = admin(a, hyper::Method::GET, "/v1/mirrors/bench")
                    .await
                    .map(|(_, m)| m)
                    .unwrap_or_default();
                let others = if self.instances > 1 {
                    let peers = admin(a, hyper::Method::GET, "/v1/instances").await;
                    peers.map_or(0, |(_, p)| {
                        p["others_alive"].as_array().map(Vec::len).unwrap_or(0)
                    })
                } else {
                    0
                };
                let ready = matches!(admin(a, hyper::Method::GET, "/readyz").await, Ok((200, _)));
                if ready
                    && m["states"]["MIRRORING"].as_i64() == Some(total)
                    && others + 1 == self.instances
                {
                    break;
                }
                if let Some(status) = self.gateways[i].exited() {
                    self.gateways[i].print_log_tail();
                    return Err(format!("gateway {a} ended before it was ready ({status})"));
                }
                if Instant::now() > deadline {
                    self.gateways[i].print_log_tail();
                    return Err(format!("gateway {a} not ready within {limit:?}: {m}"));
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        Ok(())
    }

    /// Calls the failover of mirror `bench` on instance `i`.
    pub async fn call_failover(&self, i: usize) -> Result<(), String> {
        let (s, body) = admin(
            &self.admins[i],
            hyper::Method::POST,
            "/v1/mirrors/bench/failover",
        )
        .await?;
        if s != 202 {
            return Err(format!("failover call answered {s}: {body}"));
        }
        Ok(())
    }

    /// The step timeline of the last failover report of instance `i` (once complete, at most
    /// 10 s): each step's first and last partition, in seconds after the call; null when the
    /// gateway has no reports (an earlier build).
    pub async fn timeline(&self, i: usize) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let r = admin(
                &self.admins[i],
                hyper::Method::GET,
                "/v1/mirrors/bench/failovers",
            )
            .await;
            let last = match &r {
                Ok((200, v)) => v["failovers"].as_array().and_then(|l| l.last()).cloned(),
                _ => None,
            };
            if let Some(rep) = last.filter(|r| r["status"] == "complete") {
                return steps_after_call(&rep);
            }
            if Instant::now() > deadline || !matches!(r, Ok((200, _))) {
                return serde_json::Value::Null;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// `{STEP: [first, last]}` in seconds after the report's call.
fn steps_after_call(report: &serde_json::Value) -> serde_json::Value {
    let called = report["called_ms"].as_i64().unwrap_or(0);
    let s = |v: &serde_json::Value| (v.as_i64().unwrap_or(called) - called) as f64 / 1000.0;
    let mut out = serde_json::Map::new();
    for step in report["steps"].as_array().into_iter().flatten() {
        if let Some(name) = step["step"].as_str() {
            out.insert(
                name.to_string(),
                serde_json::json!([s(&step["first_ms"]), s(&step["last_ms"])]),
            );
        }
    }
    serde_json::Value::Object(out)
}

/// Wait until mirror `bench` has `total` partitions STOPPED on every gateway of `admins` (300 s
/// after `started` at most).
pub(crate) async fn wait_stopped(
    admins: &[String],
    total: i64,
    started: Instant,
) -> Result<(), String> {
    for a in admins {
        loop {
            let (_, m) = admin(a, hyper::Method::GET, "/v1/mirrors/bench").await?;
            if m["states"]["STOPPED"].as_i64() == Some(total) {
                break;
            }
            if started.elapsed() > Duration::from_secs(300) {
                return Err(format!("failover did not complete on {a}: {m}"));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    Ok(())
}
