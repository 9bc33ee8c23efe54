//! The chaos run's failback, when the seed draws one (the agent's profile): once the failover is
//! complete, the old source is read for the checker as the failover left it, then made ready to
//! take the destination's records back (after an unplanned failover: its un-mirrored tail
//! recovered into the destination's quarantine topic, then its topic realigned, each through
//! the admin API of an instance that answers), and the failback gateway, alone in front of it,
//! mirrors the destination back with its built-in agent while the local producers go on writing
//! through the instances, under the phase's faults. Once everything is quiet and the old source
//! holds the destination's log, the failback mirror is failed over (planned, after a dry run):
//! local producers write to the old source through the failback gateway, and a late mirroring
//! tool into its mirror listener. The rules are in `rules.rs`.
//!
//! Owns: the failback's steps. Must not touch: the rules (`rules.rs`, `check.rs`), the
//! schedule's drawing (`plan.rs`), the clients' processes (`clients.rs`).

mod rules;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use hyper::Method;

use super::check::{Entry, Origin, Tool};
use super::clients::{self, Library, Shared};
use super::gateways::{
    self, admin_addr, client_addr, mirror_addr, post_through, Instance, Topology,
};
use super::gateways::{MIRROR, MIRROR_BACK};
use super::logs;
use super::plan::{Failback, Mode, FAILBACK, INSTANCES};
use super::probes;
use super::world::World;
use super::{PARTITIONS, SESSION_MS, TOPIC};
use crate::fleet::admin;
use rules::{back_over_breaches, differences, recovery_breaches};

/// How long one admin call of the failback may take (a recovery copies), and the calls through
/// every instance together.
const CALL: Duration = Duration::from_secs(30);
const LIMIT: Duration = Duration::from_secs(120);
/// How long the local producers write to the old source once it is writable again.
const BACK_OVER_MS: u64 = 10_000;

/// What the failback's start leaves for the checkers.
pub struct Started {
    /// The old source's log as the failover left it (before any realignment or copy back).
    pub source_before: Vec<Vec<Entry>>,
    /// Records of the un-mirrored tail recovered into the quarantine topic (unplanned only).
    recovered: Option<i64>,
}

/// The failback's figures and verdict.
pub struct Outcome {
    pub ok: bool,
    pub violations: Vec<String>,
    pub json: Value,
}

/// Brings the old source back into line and starts the failback gateway; then the phase's
/// faults, until `plan.ms` after the gateway is ready.
pub async fn start(
    world: &World,
    dir: &Path,
    plan: &Failback,
    mode: Mode,
    (source, destination): (&str, &[String]),
    (failover_id, driver): (&str, usize),
) -> Result<Started, String> {
    if mode == Mode::Unplanned {
        world.rig(&["start-node", "source", "1"]).await?;
    }
    // The failover completes (its report names what the source kept) before the old source is
    // read: nothing writes to it any more.
    let mut complete = false;
    for i in (0..INSTANCES).map(|k| (driver + k) % INSTANCES) {
        let limit = Duration::from_secs(if complete { 1 } else { 120 });
        if gateways::wait_state(i, "STOPPED", PARTITIONS as i64, limit)
            .await
            .is_ok()
        {
            complete = true;
            break;
        }
    }
    if !complete {
        return Err("failback: no instance has the mirror STOPPED within 120 s".into());
    }
    let source_before = logs::read_settled(source).await?;
    let mut recovered = None;
    if mode == Mode::Unplanned {
        let path = format!("/v1/mirrors/{MIRROR}/failovers/{failover_id}/unmirrored");
        let r = post_through(driver, &format!("{path}/recover"), CALL, LIMIT).await?;
        if r["verified"] != true {
            return Err(format!("failback: the recovery is not verified: {r}"));
        }
        recovered = r["recovered_records"].as_i64();
        post_through(driver, &format!("{path}/realign?dry_run=true"), CALL, LIMIT).await?;
        post_through(driver, &format!("{path}/realign"), CALL, LIMIT).await?;
        eprintln!(
            "chaos: failback: the old source's tail recovered ({} records) and its topic realigned",
            recovered.unwrap_or(0)
        );
    }
    let topology = Topology {
        source: source.to_string(),
        destination: destination.to_vec(),
        topic: TOPIC.to_string(),
        session_ms: SESSION_MS,
        tool: Tool::Agent,
    };
    let mut back = Instance::configure(
        &world.bin,
        FAILBACK,
        dir,
        &topology,
        world.env.clone(),
        None,
    )?;
    back.start(&world.bin)?;
    world.with(|v| v.push(back));
    gateways::wait_ready(FAILBACK, Duration::from_secs(60)).await?;
    eprintln!(
        "chaos: failback: the gateway in front of the old source mirrors the destination back"
    );
    let t = Instant::now();
    world.faults(t, &plan.faults).await?;
    tokio::time::sleep_until((t + Duration::from_millis(plan.ms)).into()).await;
    Ok(Started {
        source_before,
        recovered,
    })
}

/// Waits (two minutes at most) until the old source's log is the destination's, then reads the
/// failback mirror's states.
pub async fn check(
    started: &Started,
    dir: &Path,
    source: &str,
    (destination_addr, destination): (&str, &[Vec<Entry>]),
) -> Outcome {
    let begun = Instant::now();
    let mut diff = vec!["failback: the old source could not be read".to_string()];
    while begun.elapsed() < Duration::from_secs(120) {
        if let Ok(now) = logs::read_topic(source, TOPIC, PARTITIONS).await {
            diff = differences(&now, destination);
            if diff.is_empty() {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let equal_s = diff.is_empty().then(|| begun.elapsed().as_secs_f64());
    let states = gateways::states(FAILBACK).await.unwrap_or(Value::Null);
    let mirroring = states["MIRRORING"].as_i64() == Some(PARTITIONS as i64);
    let mut violations = diff.clone();
    // After an unplanned failover: what the recovery put into the quarantine topic.
    let mut quarantined = None;
    if started.recovered.is_some() {
        let topic = format!("{TOPIC}.unmirrored");
        match logs::read_topic(destination_addr, &topic, PARTITIONS).await {
            Ok(q) => {
                quarantined = Some(logs::data_counts(&q).iter().sum::<usize>());
                violations.extend(recovery_breaches(&started.source_before, destination, &q));
            }
            Err(e) => violations.push(format!("recovery: {topic} could not be read: {e}")),
        }
    }
    if !mirroring {
        violations.push(format!(
            "failback: the mirror back is not MIRRORING on every partition: {states}"
        ));
    }
    let entries: usize = destination.iter().map(Vec::len).sum();
    eprintln!(
        "chaos: failback: {entries} entries of the destination; the old source equal to it: {}; the failback mirror's states {states}",
        match equal_s {
            Some(t) => format!("yes, after the check waited {t:.1} s"),
            None => "no".into(),
        }
    );
    // The failover back onto the old source, once it holds everything.
    let back = if diff.is_empty() && mirroring {
        match back_over(dir, source, destination).await {
            Ok((breaches, v)) => {
                violations.extend(breaches);
                v
            }
            Err(e) => {
                violations.push(format!("back over: could not be carried out: {e}"));
                Value::Null
            }
        }
    } else {
        Value::Null
    };
    for w in &violations {
        eprintln!("chaos:   {w}");
    }
    Outcome {
        ok: violations.is_empty(),
        json: json!({
            "back_over": back,
            "recovered_records": started.recovered,
            "quarantined": quarantined,
            "entries": entries,
            "equal_after_s": equal_s.map(|t| (t * 10.0).round() / 10.0),
            "divergent_partitions": diff.len(),
            "states": states,
        }),
        violations,
    }
}

/// Fails the failback mirror over (a dry run first), with local producers writing to the old
/// source through the failback gateway from the call on and a late mirroring tool writing into
/// its mirror listener; `BACK_OVER_MS` after every partition is STOPPED they stop, and the old
/// source's log is read: the rule's breaches and the figures.
async fn back_over(
    dir: &Path,
    source: &str,
    destination: &[Vec<Entry>],
) -> Result<(Vec<String>, Value), String> {
    let base = format!("/v1/mirrors/{MIRROR_BACK}/failover");
    let addr = admin_addr(FAILBACK);
    match admin(&addr, Method::POST, &format!("{base}?dry_run=true")).await? {
        (200, _) => {}
        (status, v) => return Err(format!("dry run: {status} {v}")),
    }
    let history: Shared = Arc::default();
    let specs = [
        (
            Library::Java,
            "bj",
            Origin::Local,
            client_addr(FAILBACK),
            20,
        ),
        (
            Library::Librdkafka,
            "br",
            Origin::Local,
            client_addr(FAILBACK),
            20,
        ),
    ];
    let producers = clients::start_producers(&specs, &history, dir)?;
    let stop = Arc::new(AtomicBool::new(false));
    let late = tokio::spawn(probes::late_mirror_writer(
        vec![mirror_addr(FAILBACK)],
        TOPIC.to_string(),
        PARTITIONS,
        stop.clone(),
        Duration::from_millis(300),
        history.clone(),
    ));
    let called = Instant::now();
    let answer = admin(&addr, Method::POST, &base).await;
    let id = match &answer {
        Ok((202, v)) => v["failover_id"].as_str().unwrap_or_default().to_string(),
        other => {
            stop.store(true, Ordering::Relaxed);
            clients::stop_producers(producers).await;
            let _ = late.await;
            return Err(format!("failover: {other:?}"));
        }
    };
    let stopped = gateways::wait_state(
        FAILBACK,
        "STOPPED",
        PARTITIONS as i64,
        Duration::from_secs(60),
    )
    .await;
    let stopped_s = called.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_millis(BACK_OVER_MS)).await;
    clients::stop_producers(producers).await;
    stop.store(true, Ordering::Relaxed);
    let _ = late.await;
    stopped?;
    let barriers: Vec<Option<_>> = gateways::barriers(FAILBACK, PARTITIONS).await?;
    let report = gateways::report(FAILBACK, &id, PARTITIONS).await?;
    let log = logs::read_settled(source).await?;
    let ops = clients::with(&history, |h| h.ops().to_vec());
    let mut breaches = back_over_breaches(destination, &log, &barriers, &ops);
    if report.rpo.iter().any(|r| *r != Some(0)) {
        breaches.push(format!(
            "back over: the planned failover reports an RPO of {:?} records (0 due)",
            report.rpo
        ));
    }
    let acked = ops
        .iter()
        .filter(|o| o.origin == Origin::Local)
        .filter(|o| matches!(o.outcome, super::check::Outcome::Acked { .. }))
        .count();
    eprintln!(
        "chaos: failback: failed over onto the old source ({id}), every partition STOPPED {stopped_s:.1} s after the call; {acked} local records acknowledged there, {} breaches",
        breaches.len()
    );
    Ok((
        breaches,
        json!({
            "failover_id": id,
            "stopped_s": (stopped_s * 10.0).round() / 10.0,
            "rto_seconds": report.rto_seconds,
            "operations": ops.len(),
            "acked": acked,
        }),
    ))
}
